"""A scrape reads the launch members of either layout, and caches on all of them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from moonpin.scrapers.fetch import Fetcher
from moonpin.scrapers.pypi import IndexFile
from moonpin.scrapers.sglang import AnalysisCache, scrape_wheel
from tests.lib.server import FakeIndex
from tests.lib.wheels import build_wheel
from tests.readers.launch.test_server_args import AG, AG_MEMBERS

CUDA_GRAPH = "class Backend:\n    FULL = 'full'\n    DISABLED = 'disabled'\n"


@pytest.fixture
def index() -> Iterator[FakeIndex]:
    with FakeIndex() as idx:
        yield idx


def _scrape(index: FakeIndex, cache: AnalysisCache, version: str,
            files: dict[str, str]) -> Any:
    name, data = build_wheel("sglang", version, {
        "sglang/__init__.py": "", "sglang/srt/model_executor/cuda_graph_config.py": CUDA_GRAPH,
        **files})
    served = index.add_project("sglang", {version: {name: data}}).files[name]
    wheel = IndexFile(filename=name, url=served.url, size=served.size, sha256=served.sha256,
                      yanked=False, requires_python=None, has_metadata=False)
    release, _, _ = scrape_wheel(Fetcher(retries=0), wheel, version, cache, workers=1)
    return release.launch


def test_arg_groups_wheel_records_rules_from_its_hooks(index: FakeIndex) -> None:
    launch = _scrape(index, AnalysisCache(), "0.5.23", AG_MEMBERS)
    assert launch is not None
    assert launch.member == AG + "parallel_hook.py"
    paths = {r.path for r in launch.rules}
    assert paths == {AG + "parallel_hook.py", "sglang/srt/server_args.py"}
    flags = {f.name: f.path for f in launch.flags}
    assert flags["--node-rank"] == AG + "fields/parallel.py"
    assert flags["--elastic-ep-join-mode"] == AG + "fields/exec_.py"


def test_launch_cache_keys_on_every_launch_member(index: FakeIndex) -> None:
    cache = AnalysisCache()
    first = _scrape(index, cache, "0.5.22", AG_MEMBERS)
    # same launch members under another release: the cached record
    assert _scrape(index, cache, "0.5.23", AG_MEMBERS) is first
    # only a field declaration changed (server_args.py and the hooks did not): read again
    changed = dict(AG_MEMBERS)
    changed[AG + "fields/parallel.py"] = changed[AG + "fields/parallel.py"].replace(
        "node_rank: A[int, \"The node rank.\"] = 0", "node_rank: A[int, \"The node rank.\"] = 1")
    again = _scrape(index, cache, "0.5.24", changed)
    assert again is not first
    nr = {f.name: f for f in again.flags}["--node-rank"]
    assert nr.default == "1"
