"""A whole scrape against a loopback index serving wheels built here."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from moonpin.kb.distributions import DISTRIBUTIONS
from moonpin.kb.models import KnowledgeBase
from moonpin.scrapers.fetch import Fetcher
from moonpin.scrapers.refresh import scrape
from moonpin.scrapers.report import Reporter
from tests.lib.elfbuild import build_so
from tests.lib.server import FakeIndex
from tests.lib.wheels import build_wheel

LOADER_PG = '''import importlib
import re

import torch

torch_version = re.match(r"\\d+(?:\\.\\d+)*", torch.__version__).group()
version_suffix = "_" + torch_version.replace(".", "_")

try:
    backend_module = importlib.import_module("mooncake.pg" + version_suffix)
except ModuleNotFoundError:
    raise ImportError(f"Mooncake PG was not built against torch=={torch_version}.")
globals().update(backend_module.__dict__)
'''

SGL_NEW = '''
from mooncake.pg import MooncakeBackendOptions, join_group

def make(ranks):
    import torch.distributed as dist
    return dist.new_group(ranks, backend="mooncake", pg_options=MooncakeBackendOptions(ranks, 2))
'''
SERVER_ARGS = '''import dataclasses


@dataclasses.dataclass
class ServerArgs:
    elastic_ep_backend: str = None
    node_rank: int = 0
    pp_size: int = 1

    def __post_init__(self):
        self._handle_elastic_ep()

    def _handle_elastic_ep(self):
        if self.elastic_ep_backend is not None:
            assert self.pp_size == 1, f"elastic EP needs --pp-size 1 (got {self.pp_size})"

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--elastic-ep-backend", type=str,
                            default=ServerArgs.elastic_ep_backend, choices=["none", "mooncake"])
        parser.add_argument("--pp-size", type=int, default=ServerArgs.pp_size)
        parser.add_argument("--node-rank", type=int, default=ServerArgs.node_rank)
'''
SGL_OLD = '''
def init_distributed_environment():
    from mooncake import ep as mooncake_ep
    mooncake_ep.set_host_ip("1")
'''


def sglang_wheel(version: str, files: dict[str, str]) -> tuple[str, bytes]:
    return build_wheel("sglang", version, {"sglang/__init__.py": "", **files},
                       requires_dist=["torch==2.13.0", "numpy"])


def mooncake_wheel(version: str, torch: str, cuda: int, names: list[str]) -> tuple[str, bytes]:
    so = build_so(needed=[f"libcudart.so.{cuda}", "libtorch.so"],
                  strings=["mooncake", "mooncake-cpu", "register_backend", *names])
    suffix = torch.replace(".", "_")
    return build_wheel(
        "mooncake-transfer-engine", version,
        {"mooncake/__init__.py": "", "mooncake/pg.py": LOADER_PG,
         f"mooncake/pg_{suffix}.cpython-312-x86_64-linux-gnu.so": so},
        tag="cp312-cp312-manylinux_2_28_x86_64")


def torch_wheel(version: str, reqs: list[str]) -> tuple[str, bytes]:
    return build_wheel("torch", version, {"torch/__init__.py": "__version__ = 'x'"},
                       tag="cp312-cp312-manylinux_2_28_x86_64", requires_dist=reqs)


def add_mooncake_and_torch(idx: FakeIndex) -> None:
    """mooncake-transfer-engine 0.3.12 (pg for torch 2.12.0, CUDA 12) and 0.3.13 (2.13.0,
    CUDA 13), and those two torch releases."""
    idx.add_project("mooncake-transfer-engine", {
        "0.3.12": dict([mooncake_wheel("0.3.12", "2.12.0", 12, ["MooncakeBackendOptions"])]),
        "0.3.13": dict([mooncake_wheel("0.3.13", "2.13.0", 13,
                                       ["MooncakeBackendOptions", "join_group"])]),
    })
    idx.add_project("torch", {
        "2.12.0": dict([torch_wheel("2.12.0", ['nvidia-cuda-runtime-cu12==12.8.90; '
                                               'platform_system == "Linux"'])]),
        "2.13.0": dict([torch_wheel("2.13.0", ['cuda-toolkit[cudart,nvrtc]==13.0.3; '
                                               'platform_system == "Linux"'])]),
    })


@pytest.fixture
def index() -> Iterator[FakeIndex]:
    with FakeIndex() as idx:
        idx.add_project("sglang", {
            "0.3.0": dict([sglang_wheel("0.3.0", {"sglang/a.py": SGL_OLD})]),  # below 0.4.0
            "0.5.4": dict([sglang_wheel("0.5.4", {"sglang/srt/distributed/parallel_state.py":
                                                  SGL_OLD, "sglang/broken.py": "def (:"})]),
            "0.5.17": dict([sglang_wheel("0.5.17", {
                "sglang/srt/distributed/parallel_state.py": SGL_NEW,
                "sglang/srt/server_args.py": SERVER_ARGS,
                "sglang/broken.py": "def (:"})]),
        })
        add_mooncake_and_torch(idx)
        # The other distributions of the family are absent on this index: 404.
        yield idx


def run(index: FakeIndex, old: KnowledgeBase | None = None, **kw: object) -> tuple[
        KnowledgeBase, object, Fetcher]:
    f = Fetcher(retries=1, backoff=0.01, sleep=lambda s: None)
    only = kw.pop("only", ("sglang", "mooncake", "torch"))
    kb, summary = scrape(old, f, index.url + "/", only=only, workers=2, **kw)  # type: ignore[arg-type]
    return kb, summary, f


def scraped_kb(index: FakeIndex, path: Path) -> Path:
    """Scrape the fake index into a KB file at ``path`` (and its resolved tables)."""
    from moonpin.kb import store
    from moonpin.resolver.tables import writer

    only_present(index)
    kb, _ = scrape(None, Fetcher(retries=0), index.url + "/", workers=2)
    store.save(kb, path)
    writer.write(path)
    return path


def only_present(index: FakeIndex) -> None:
    for d in DISTRIBUTIONS[1:]:
        index.add_json(f"/pypi/{d}/json", {"info": {"name": d}, "releases": {}})


def test_full_scrape_records_facts_with_evidence(index: FakeIndex) -> None:
    only_present(index)
    kb, summary, _ = run(index)
    versions = [r.version for r in kb.sglang]
    assert versions == ["0.5.4", "0.5.17"]  # 0.3.0 is below the 0.4.0 floor
    old, new = kb.sglang
    assert old.pg.module == "mooncake.ep"
    assert new.pg.module == "mooncake.pg"
    assert new.pg.names == ("MooncakeBackendOptions", "join_group")
    assert new.pg.backends == ("mooncake",)
    assert new.torch_requirements == ("torch==2.13.0",)
    assert new.artifact.sha256 and new.artifact.filename.startswith("sglang-0.5.17")
    assert [f.member for f in new.parse_failures] == ["sglang/broken.py"]
    assert "SyntaxError" in new.parse_failures[0].error
    call = next(c for c in new.calls if c.name == "MooncakeBackendOptions")
    assert (call.positional, call.member) == (2, "sglang/srt/distributed/parallel_state.py")

    mc13 = next(r for r in kb.mooncake if r.version == "0.3.13")
    (wheel,) = mc13.wheels
    (build,) = wheel.builds
    assert (build.family, build.torch, build.torch_from) == ("pg", "2.13.0", "filename")
    assert build.cuda_major == 13
    assert set(build.backends) == {"mooncake", "mooncake-cpu"}
    assert "join_group" in build.names
    assert "join_group" in build.names_checked
    assert build.needed_method == "dt_needed"
    (loader,) = wheel.loaders
    assert loader.kind == "prebuilt"
    assert loader.imports[0].template == "mooncake.pg_{torch}"
    mc12 = next(r for r in kb.mooncake if r.version == "0.3.12")
    assert "join_group" not in mc12.wheels[0].builds[0].names
    assert "join_group" in mc12.wheels[0].builds[0].names_checked

    cuda = {r.version: r.variants[0].cuda_major for r in kb.torch}
    assert cuda == {"2.12.0": 12, "2.13.0": 13}
    assert not kb.unread
    assert summary.bytes_fetched > 0  # type: ignore[attr-defined]


def test_noop_refresh_fetches_no_artifact_bytes(index: FakeIndex) -> None:
    only_present(index)
    kb, _, _ = run(index)
    index.clear_requests()
    kb2, summary, _ = run(index, kb)
    artifact_requests = [r for r in index.requests if r.path.startswith("/packages/")]
    assert artifact_requests == []
    assert summary.read == {"sglang": 0, "mooncake": 0, "torch": 0,  # type: ignore[attr-defined]
                            "native": 0}
    assert kb2.sglang == kb.sglang and kb2.mooncake == kb.mooncake


def test_a_kb_read_by_other_extractor_code_is_read_again(index: FakeIndex) -> None:
    """An upgraded moonpin records facts differently: a refresh re-reads that kind, and
    only that kind."""
    from moonpin.scrapers.refresh import extractor_fingerprints

    only_present(index)
    kb, _, _ = run(index)
    scraped = ("sglang", "mooncake", "torch")
    assert {k: kb.scrape.extractors[k] for k in scraped} == {
        k: extractor_fingerprints()[k] for k in scraped}
    stale = kb.model_copy(update={"scrape": kb.scrape.model_copy(update={
        "extractors": {**kb.scrape.extractors, "sglang": "older-code"}})})
    warnings: list[str] = []

    class Listen(Reporter):
        def warn(self, message: str) -> None:
            warnings.append(message)

    kb2, summary, _ = run(index, stale, reporter=Listen())
    assert summary.read == {"sglang": 2, "mooncake": 0, "torch": 0,  # type: ignore[attr-defined]
                            "native": 0}
    assert any("sglang: the knowledge base was read by other extractor code" in w
               for w in warnings)
    assert {k: kb2.scrape.extractors[k] for k in scraped} == {
        k: extractor_fingerprints()[k] for k in scraped}
    _, again, _ = run(index, kb2)  # control: now current, nothing is re-read
    assert again.read == {"sglang": 0, "mooncake": 0, "torch": 0,  # type: ignore[attr-defined]
                          "native": 0}


def test_unreadable_release_is_unread_not_half_recorded(index: FakeIndex) -> None:
    only_present(index)
    doc = index.requests  # noqa: F841 - keep the index warm
    served = next(iter(index.add_project("sglang", {
        "0.5.18": dict([sglang_wheel("0.5.18", {"sglang/x.py": SGL_NEW})])}).files.values()))
    index.fault(served.path, "status", code=503)
    kb, _summary, _ = run(index, only=("sglang",))
    assert [r.version for r in kb.sglang] == []
    assert [(u.kind, u.version) for u in kb.unread] == [("sglang", "0.5.18")]
    assert served.url in kb.unread[0].reason or "503" in kb.unread[0].reason


def test_server_ignoring_range_on_big_file_is_reported(index: FakeIndex) -> None:
    only_present(index)
    f = Fetcher(retries=0, whole_body_cap=100, sleep=lambda s: None)
    index.fault("*", "ignore_range")
    kb, _summary = scrape(None, f, index.url + "/", only=("sglang",), workers=1)
    assert {u.version for u in kb.unread} == {"0.5.4", "0.5.17"}
    assert all("ignored Range" in u.reason for u in kb.unread)


def test_launch_rules_are_recorded_per_release(index: FakeIndex) -> None:
    only_present(index)
    kb, _, _ = run(index, only=("sglang",))
    old, new = kb.sglang
    assert old.launch is None  # 0.5.4's wheel has no server_args.py
    assert new.launch is not None and new.launch.member == "sglang/srt/server_args.py"
    (rule,) = new.launch.rules
    assert (rule.condition, rule.line) == ("self.pp_size != 1", 15)
    assert {f.name for f in new.launch.flags} == {"--elastic-ep-backend", "--pp-size"}


def test_a_build_another_release_holds_is_read_in_its_own_release(index: FakeIndex) -> None:
    """A .post release re-shipping its predecessor's build unchanged (same CRC-32 and
    sizes): the same facts, read in its own release, so which build names the reading does
    not depend on which release a thread read first (as native's, scrapers/native.py)."""
    only_present(index)
    index.add_project("mooncake-transfer-engine", {
        "0.3.13": dict([mooncake_wheel("0.3.13", "2.13.0", 13,
                                       ["MooncakeBackendOptions", "join_group"])]),
        "0.3.13.post1": dict([mooncake_wheel("0.3.13.post1", "2.13.0", 13,
                                             ["MooncakeBackendOptions", "join_group"])]),
        "0.3.14": dict([mooncake_wheel("0.3.14", "2.13.0", 13,  # control: new bytes
                                       ["MooncakeBackendOptions", "join_group", "recover_ranks"])]),
    })
    kb, _ = scrape(None, Fetcher(retries=0), index.url + "/", only=("mooncake",), workers=1)
    builds = {r.version: r.wheels[0].builds[0] for r in kb.mooncake}
    base, post, new = builds["0.3.13"], builds["0.3.13.post1"], builds["0.3.14"]
    assert base.bytes_from is None and post.bytes_from is None
    assert (post.names, post.backends, post.needed, post.cuda_major) == (
        base.names, base.backends, base.needed, base.cuda_major)
    assert post.torch == "2.13.0" and post.read_error is None
    assert new.bytes_from is None and "recover_ranks" in new.names


def _stored_wheel(version: str, tag: str, pys: tuple[str, ...], stamp: str,
                  ) -> tuple[str, bytes]:
    """A wheel whose builds are stored (compressed size = size), their bytes differing
    from another ``stamp``'s only in a string that is no name of interest."""
    so = {py: build_so(needed=["libcudart.so.13", "libtorch.so"],
                       strings=["mooncake", "register_backend", "MooncakeBackendOptions",
                                f"build-{stamp}-{py}"]) for py in pys}
    return build_wheel("mooncake-transfer-engine", version, {
        "mooncake/__init__.py": "", "mooncake/pg.py": LOADER_PG,
        "mooncake/libmooncake_pg.so": build_so(needed=[], strings=[f"lib-{stamp}"]),
        **{f"mooncake/pg_2_13_0.cpython-{py}-x86_64-linux-gnu.so": so[py] for py in pys}},
        tag=tag, compress=zipfile.ZIP_STORED)


def test_builds_of_the_same_sizes_but_other_bytes_are_not_one_reading(
        index: FakeIndex) -> None:
    """Two releases whose builds have the same sizes (stored, so the compressed sizes
    agree too) and the same facts, but other bytes (other CRC-32s): neither is named as
    read from the other, and neither are libraries, which are never read. Before, the KB
    was regrouped by sizes and facts (canonical_provenance): on the real index that
    claimed 0.3.13.post1's builds were 0.3.13's, whose central directories give other
    CRC-32s."""
    only_present(index)
    index.add_project("mooncake-transfer-engine", {
        "0.3.13": dict([_stored_wheel("0.3.13", "cp312-cp312-manylinux_2_28_x86_64",
                                      ("312",), "a")]),
        "0.3.13.post1": dict([_stored_wheel("0.3.13.post1",
                                            "cp312-cp312-manylinux_2_28_x86_64",
                                            ("312",), "b")]),
    })
    kb, _ = scrape(None, Fetcher(retries=0), index.url + "/", only=("mooncake",), workers=1)
    (a,), (b,) = (r.wheels[0].builds for r in kb.mooncake)
    assert (a.size, a.compressed_size) == (b.size, b.compressed_size)
    assert (a.names, a.needed) == (b.names, b.needed) and a.names
    assert a.bytes_from is None and b.bytes_from is None
    (la,), (lb,) = (r.wheels[0].libraries for r in kb.mooncake)
    assert la.size == lb.size and la.bytes_from is None and lb.bytes_from is None


def test_cuda_runtime_of_a_build_whose_dynamic_section_lies_beyond_the_budget(
        index: FakeIndex) -> None:
    """mooncake 0.3.7's ep builds: patchelf moved .dynamic/.dynstr 25 MB in; the CUDA
    runtime is read from .gnu.version_r at the start, with where it was read."""
    from moonpin.scrapers import mooncake as mc
    from tests.lib.elfbuild import build_so_versioned

    only_present(index)
    so, at = build_so_versioned(padding_before_dynamic=mc.PREFIX_CAP + (1 << 20),
                                strings=["mooncake", "mooncake-cpu", "register_backend",
                                         "MooncakeBackendOptions"])
    name, data = build_wheel(
        "mooncake-transfer-engine", "0.3.7",
        {"mooncake/__init__.py": "", "mooncake/pg.py": LOADER_PG,
         "mooncake/pg_2_12_0.cpython-312-x86_64-linux-gnu.so": so},
        tag="cp312-cp312-manylinux_2_28_x86_64")
    index.add_project("mooncake-transfer-engine", {"0.3.7": {name: data}})
    kb, _, _ = run(index, only=("mooncake",))
    (b,) = kb.mooncake[0].wheels[0].builds
    assert b.cuda_major == 12 and b.needed_method == "verneed-hash"
    assert b.needed == ("libcudart.so.12",) and not b.complete
    assert b.needed_evidence is not None and f"offset {at + 16:#x}" in b.needed_evidence
    # read: the budgeted prefix, not the 4 MB to .dynamic
    assert f"the {mc.PREFIX_CAP}-byte prefix read" in b.needed_evidence and b.size > mc.PREFIX_CAP


def test_kb_records_and_kb_info_reports_what_each_refresh_read(
        index: FakeIndex, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from datetime import timedelta

    from moonpin.cli.main import main
    from moonpin.kb import store

    only_present(index)
    kb, _, _ = run(index)
    assert kb.scrape.refreshed == ("sglang", "mooncake", "torch")
    assert kb.scrape.read["sglang"] == ("0.5.4", "0.5.17")
    assert set(kb.scrape.kinds_scraped_at) == {"sglang", "mooncake", "torch"}
    assert kb.scrape.index_url == index.url + "/"  # named by the caller: a mirror
    # a day later, only torch is asked again; sglang's facts keep their older date
    day = timedelta(days=1)
    old = kb.model_copy(update={"scrape": kb.scrape.model_copy(update={
        "scraped_at": kb.scrape.scraped_at - day,
        "kinds_scraped_at": {k: t - day for k, t in kb.scrape.kinds_scraped_at.items()}})})
    kb2, _, _ = run(index, old=old, only=("torch",), index_named=False)
    assert kb2.scrape.refreshed == ("torch",) and kb2.scrape.read == {"torch": ()}
    assert kb2.scrape.kept == {"torch": len([v for r in kb.torch for v in r.variants])} == \
        {"torch": 2}
    assert kb2.scrape.index_url is None
    assert kb2.scrape.kinds_scraped_at["sglang"] == kb.scrape.kinds_scraped_at["sglang"] - day
    assert kb2.scrape.kinds_scraped_at["torch"] == kb2.scrape.scraped_at
    path = tmp_path / "kb.json"
    store.save(kb2, path)
    assert main(["--kb", str(path), "kb", "info"]) == 0
    out = capsys.readouterr().out
    assert "from the package index" in out and "last refresh: torch" in out
    assert "sglang" in out and "(1 day old)" in out  # sglang's facts date from the day before
    assert main(["--kb", str(path), "kb", "info", "--json"]) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    assert doc["last_refresh"]["kinds"] == ["torch"] and doc["age_seconds"] < 600
    assert doc["kinds_age_seconds"]["sglang"] >= 86400


def test_a_new_release_costs_only_its_new_content(index: FakeIndex, tmp_path: Path) -> None:
    """The per-file facts outlive the scrape: a refresh finding a new release fetches its
    central directory and new members, not the members earlier releases already had."""
    import os

    from moonpin.kb import cache as kbcache

    only_present(index)
    import random

    rnd = random.Random(7)  # incompressible members, larger than a range read's gap
    shared = {f"sglang/srt/m{i}.py": "# " + "".join(rnd.choices("abcdefgh", k=8000))
              + f"\nVALUE_{i} = {i}\n" for i in range(40)}
    index.add_project("sglang", {
        "0.5.16": dict([sglang_wheel("0.5.16", {**shared, "sglang/srt/distributed/"
                                                "parallel_state.py": SGL_NEW})]),
        "0.5.17": dict([sglang_wheel("0.5.17", {**shared, "sglang/srt/new.py": "N = 1\n",
                                                "sglang/srt/distributed/"
                                                "parallel_state.py": SGL_NEW + "\n"})]),
    })
    kb, _, _ = run(index, only=("sglang",))
    files = [n for n in os.listdir(kbcache.cache_folder() or "") if n.startswith("sglang-files-")]
    assert len(files) == 1
    old = kb.model_copy(update={"sglang": tuple(r for r in kb.sglang if r.version != "0.5.17")})
    again, s_cached, _ = run(index, old=old, only=("sglang",))
    cold, s_cold, _ = run(index, old=old, only=("sglang",), files_cache="")
    assert again.sglang == cold.sglang == kb.sglang  # the same facts either way
    assert s_cached.read["sglang"] == s_cold.read["sglang"] == 1  # type: ignore[attr-defined]
    cached_b, cold_b = s_cached.bytes_fetched, s_cold.bytes_fetched  # type: ignore[attr-defined]
    assert cached_b < cold_b / 3  # the 40 shared members (~120 kB) were not fetched again
    # a damaged cache file is no cache: same facts, full cost
    path = os.path.join(kbcache.cache_folder() or "", files[0])
    with open(path, "r+b") as fh:
        fh.seek(20)
        fh.write(b"\xff\xff\xff\xff")
    damaged, s_damaged, _ = run(index, old=old, only=("sglang",))
    assert damaged.sglang == kb.sglang
    assert s_damaged.bytes_fetched == cold_b  # type: ignore[attr-defined]


def test_a_damaged_answer_keeps_the_facts_the_kb_had(index: FakeIndex, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str],
                                                      ) -> None:
    """Issue 29: `moonpin scrape` against an index whose project JSON lists a damaged size
    for a release (NaN), or a changed artifact it cannot read, exits 1 naming the release
    and keeps the facts the KB had (on 31caf67 the release was called unknown, or its facts
    dropped)."""
    import json

    from moonpin.cli.main import main
    from moonpin.kb import store

    kb_path = scraped_kb(index, tmp_path / "kb.json")
    before = store.load(kb_path)
    doc = json.loads(json.dumps(index.add_project("sglang", {
        "0.5.4": dict([sglang_wheel("0.5.4", {"sglang/srt/distributed/parallel_state.py":
                                              SGL_OLD, "sglang/broken.py": "def (:"})]),
        "0.5.17": dict([sglang_wheel("0.5.17", {
            "sglang/srt/distributed/parallel_state.py": SGL_NEW,
            "sglang/srt/server_args.py": SERVER_ARGS,
            "sglang/broken.py": "def (:"})]),
    }).document))
    text = json.dumps(doc).replace(f'"size": {doc["releases"]["0.5.4"][0]["size"]}',
                                   '"size": NaN')
    index.add("/pypi/sglang/json", text.encode(), content_type="application/json")
    # a new wheel for mooncake 0.3.13 (another sha256) that cannot be read
    moon = json.loads(json.dumps(index.add_project("mooncake-transfer-engine", {
        "0.3.12": dict([mooncake_wheel("0.3.12", "2.12.0", 12, ["MooncakeBackendOptions"])]),
        "0.3.13": dict([mooncake_wheel("0.3.13", "2.13.0", 13,
                                       ["MooncakeBackendOptions", "join_group"])]),
    }).document))
    moon["releases"]["0.3.13"][0]["digests"]["sha256"] = "e" * 64
    moon["releases"]["0.3.13"][0]["url"] = "../../packages/gone.whl"
    moon["urls"] = moon["releases"]["0.3.13"]
    index.add_json("/pypi/mooncake-transfer-engine/json", moon)
    capsys.readouterr()
    rc = main(["--kb", str(kb_path), "scrape", "--index-url", index.url + "/", "--jobs", "2"])
    out = capsys.readouterr().out
    assert rc == 1
    after = store.load(kb_path)
    assert after.sglang == before.sglang and after.mooncake == before.mooncake
    assert after.unread == ()  # nothing the KB holds is called unknown
    assert "unread: sglang sglang 0.5.4: the index's listing is not readable" in out
    assert "'size' is float nan" in out
    assert "unread: mooncake mooncake-transfer-engine 0.3.13" in out
    assert out.count("the knowledge base keeps the facts read before") == 2, out


@pytest.mark.parametrize("body", [
    b'{"info": {}, "releases": {"1.0": [{"size": ' + b"9" * 5000 + b"}]}}",
    b'{"info": {}, "releases": {"1.0": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
], ids=["5000 digits", "nested 100000 deep"])
def test_a_project_json_past_the_parser_limits_is_refused(
        index: FakeIndex, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        body: bytes) -> None:
    """Issue 29 (found by its fuzz): `moonpin scrape` on a project document holding a
    5,000-digit number (ValueError) or nested 100,000 deep (RecursionError) was a
    traceback; now exit 2 naming the URL, with a tip, and the KB untouched."""
    from moonpin.cli.main import main

    kb_path = scraped_kb(index, tmp_path / "kb.json")
    before = kb_path.read_bytes()
    index.add("/pypi/torch/json", body, content_type="application/json")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["--kb", str(kb_path), "scrape", "--index-url", index.url + "/"])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert "/pypi/torch/json: not a package index JSON document" in err and "tip:" in err
    assert kb_path.read_bytes() == before


@pytest.mark.parametrize("full", [True, False], ids=["--full", "refresh"])
def test_an_artifact_that_cannot_be_read_keeps_the_facts_the_kb_had(
        index: FakeIndex, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, full: bool) -> None:
    """Issue 38 (7): a 503 on one artifact of each kind during a refresh, ``--full``
    included, keeps each release's previous facts whole and says so (on ee40e57 ``--full``
    dropped them). Every retry is still made; only the waits between them are not (35 s
    of real backoff, which this test is not about)."""
    from moonpin.cli.main import main
    from moonpin.kb import store
    from moonpin.scrapers.fetch import Fetcher

    monkeypatch.setattr(Fetcher, "_backoff", lambda self, attempt: 0.0)

    kb_path = scraped_kb(index, tmp_path / "kb.json")
    before = store.load(kb_path)
    sgl = next(r for r in before.sglang if r.version == "0.5.17")
    moon = next(r for r in before.mooncake if r.version == "0.3.13")
    torch = next(r for r in before.torch if r.variants)
    for art in (sgl.artifact, moon.wheels[0].artifact, torch.variants[0].artifact):
        index.fault("/packages/" + art.path, "status", code=503)
    capsys.readouterr()
    rc = main(["--kb", str(kb_path), "scrape", "--index-url", index.url + "/", "--jobs", "2",
               *(["--full"] if full else ["--only", "sglang"])])
    out = capsys.readouterr().out
    after = store.load(kb_path)
    assert rc == (1 if full else 0), out
    assert after.sglang == before.sglang and after.mooncake == before.mooncake
    assert after.torch == before.torch and after.unread == ()
    if full:
        assert out.count("the knowledge base keeps the facts read before") == 3, out
        assert "503" in out


def test_a_release_records_the_interpreters_its_files_install_on(index: FakeIndex) -> None:
    """Issue 38 (2): what the index lists for each SGLang release (version-specific
    wheels only, or a pure wheel) is recorded at every scrape, kept releases included."""
    only_present(index)
    files = {"sglang/srt/distributed/parallel_state.py": SGL_NEW}
    index.add_project("sglang", {
        "0.5.4": dict([sglang_wheel("0.5.4", files)]),
        "0.5.17": dict(build_wheel("sglang", "0.5.17", files, tag=f"{t}-{t}-manylinux_2_34_"
                                   "x86_64") for t in ("cp311", "cp312")),
    })
    kb, _, _ = run(index, only=("sglang",))
    got = {r.version: r.wheel_pythons for r in kb.sglang}
    assert got == {"0.5.4": None, "0.5.17": ("cp311", "cp312")}
    again, _, _ = run(index, old=kb, only=("sglang",))  # kept, still recorded
    assert {r.version: r.wheel_pythons for r in again.sglang} == got
