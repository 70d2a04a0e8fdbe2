"""Against the live package index: excluded by default, run with `pytest -m live`.

These pin facts read by hand out of the real artifacts (readelf/strings on the member,
the wheel's file list), so a scraper change that misreads reality fails here.
"""

from __future__ import annotations

import pytest

from moonpin.scrapers import mooncake as mc
from moonpin.scrapers import sglang as sg
from moonpin.scrapers.fetch import Fetcher
from moonpin.scrapers.pypi import fetch_project, index_url_from_env

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def fetcher() -> Fetcher:
    return Fetcher()


def test_sglang_0_5_18_needs_mooncake_pg(fetcher: Fetcher) -> None:
    proj = fetch_project(fetcher, index_url_from_env(), "sglang")
    wheel = sg.choose_wheel(proj.releases["0.5.18"])
    assert wheel is not None
    rel, fetched, _ = sg.scrape_wheel(fetcher, wheel, "0.5.18", sg.AnalysisCache())
    assert rel.pg.module == "mooncake.pg"
    assert {"MooncakeBackendOptions", "set_transfer_engine", "join_group"} <= set(rel.pg.names)
    assert rel.pg.backends == ("mooncake", "mooncake-cpu")
    assert rel.torch_requirements == ("torch==2.13.0",)
    assert fetched < wheel.size / 2


def test_cuda13_0_3_13_post1_pg_build(fetcher: Fetcher) -> None:
    dist = "mooncake-transfer-engine-cuda13"
    proj = fetch_project(fetcher, index_url_from_env(), dist)
    (wheel,) = [f for f in proj.releases["0.3.13.post1"]
                if "-cp312-" in f.filename and f.filename.endswith("x86_64.whl")]
    mw, fetched, _ = mc.scrape_wheel(fetcher, dist, "0.3.13.post1", wheel, mc.BASE_NAMES,
                                     mc.SharedReads())
    builds = {b.member.rsplit("/", 1)[-1].split(".")[0]: b for b in mw.builds}
    assert {"_ep", "pg_2_11_0", "pg_2_12_0", "pg_2_12_1", "pg_2_13_0"} <= set(builds)
    pg = builds["pg_2_13_0"]
    assert pg.torch == "2.13.0"
    assert pg.cuda_major == 13  # readelf -d: NEEDED libcudart.so.13
    assert {"set_transfer_engine", "join_group", "MooncakeBackendOptions"} <= set(pg.names)
    assert pg.backends == ("mooncake", "mooncake-cpu")
    assert fetched < wheel.size / 20
