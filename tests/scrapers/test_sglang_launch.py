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


DISPATCH = "sglang/srt/layers/moe/token_dispatcher/"
NIXL_PY = """import os
from typing import Any

from sglang.srt.layers.moe.token_dispatcher.base import BaseDispatcher


class NixlDispatcher(BaseDispatcher):
    def buffer(self) -> Any:
        from nixl_ep import Buffer

        return Buffer(os.environ)
"""
MOONCAKE_PY = "def f():\n    from mooncake.mooncake_ep_buffer import Buffer\n    return Buffer\n"
MORIEP_PY = "import torch\ntry:\n    import mori\nexcept ImportError:\n    mori = None\n"
REQUIRES = ("torch==2.14.1", "sglang-kernel==0.4.7", "flashinfer_python[cu13]==0.7.2",
            "nixl; extra == 'nixl'", "requests>=2", "sgl-deep-ep==0.1.2; platform_machine == "
            "'x86_64'")


def _release(index: FakeIndex, cache: AnalysisCache, version: str,
             files: dict[str, str]) -> Any:
    name, data = build_wheel("sglang", version, {
        "sglang/__init__.py": "", "sglang/srt/model_executor/cuda_graph_config.py": CUDA_GRAPH,
        **files}, requires_dist=REQUIRES)
    served = index.add_project("sglang", {version: {name: data}}).files[name]
    wheel = IndexFile(filename=name, url=served.url, size=served.size, sha256=served.sha256,
                      yanked=False, requires_python=None, has_metadata=False)
    return scrape_wheel(Fetcher(retries=0), wheel, version, cache, workers=1)[0]


def _with_choices(choices: list[str]) -> dict[str, str]:
    files = dict(AG_MEMBERS)
    files[AG + "fields/exec_.py"] = files[AG + "fields/exec_.py"].replace(
        'choices=["none", "mooncake", "nixl"]', f"choices={choices!r}")
    return files


TE_PY = """from sglang.srt.utils import get_exec


def init(gpu_id):
    use_te = get_exec().disagg or get_exec().moe.elastic_ep_backend == "mooncake"
    if use_te:
        if get_exec().moe.elastic_ep_backend == "mooncake":
            try:
                from mooncake.pg import set_transfer_engine
            except ImportError:
                raise
            set_transfer_engine(gpu_id)
"""


def test_each_backend_choice_records_the_module_and_what_it_imports(index: FakeIndex) -> None:
    """Issue 39: from the release's own sources, what each choice of the backend options
    imports, with the names and lines; SGLang's own and the standard library's imports are
    left out. ``--elastic-ep-backend`` keeps no module per choice: what a choice imports is
    what the sources import under a test on its value (not the same-named token
    dispatcher's imports: ``nixl`` imports nothing here)."""
    files = {**_with_choices(["none", "mooncake", "nixl", "mori"]),
             DISPATCH + "nixl.py": NIXL_PY, DISPATCH + "mooncake.py": MOONCAKE_PY,
             DISPATCH + "moriep.py": MORIEP_PY,
             "sglang/srt/distributed/te.py": TE_PY}
    rel = _release(index, AnalysisCache(), "0.5.23", files)
    got = {(b.flag, b.choice): (b.member, b.imports,
                                [(i.member, i.module, i.names, i.line, i.test)
                                 for i in b.guarded], b.unread)
           for b in rel.launch_backends}
    assert got == {
        ("--elastic-ep-backend", "mooncake"): (None, (), [
            ("sglang/srt/distributed/te.py", "mooncake.pg", ("set_transfer_engine",), 9, 7)],
            ()),
        ("--elastic-ep-backend", "nixl"): (None, (), [], ()),
        ("--elastic-ep-backend", "mori"): (None, (), [], ()),
    }


def test_a_backend_option_with_a_module_per_choice_records_that_module() -> None:
    """``--moe-a2a-backend``'s choices each name a token dispatcher: its module and imports
    (a sub-folder's module is not one)."""
    from moonpin.kb.models import BackendImport, LaunchFlag, LaunchRules
    from moonpin.scrapers.sglang import launch_backends

    launch = LaunchRules(member="m", flags=(LaunchFlag(
        name="--moe-a2a-backend", dest="moe_a2a_backend", default='"none"',
        choices=("none", "mooncake", "nixl", "mori", "pplx")),))
    names = [DISPATCH + n for n in ("nixl.py", "mooncake.py", "moriep.py", "sub/pplx.py")]
    imports = {DISPATCH + "nixl.py": (BackendImport(module="nixl_ep", names=("Buffer",),
                                                    line=9),),
               DISPATCH + "mooncake.py": (), DISPATCH + "moriep.py": None}
    got = {b.choice: (b.member, [i.module for i in b.imports], b.guarded)
           for b in launch_backends(launch, names, imports, {})}
    assert got == {"mooncake": (DISPATCH + "mooncake.py", [], ()),
                   "nixl": (DISPATCH + "nixl.py", ["nixl_ep"], ()),
                   "mori": (DISPATCH + "moriep.py", [], ()),
                   "pplx": (None, [], ())}


def test_a_source_naming_the_option_that_does_not_parse_is_said_for_every_choice(
        index: FakeIndex) -> None:
    files = {**_with_choices(["none", "mooncake", "nixl"]),
             "sglang/srt/broken.py": "if cfg.elastic_ep_backend == 'nixl':\n    import x(\n"}
    rel = _release(index, AnalysisCache(), "0.5.23", files)
    for b in rel.launch_backends:
        assert b.guarded == ()
        assert len(b.unread) == 1 and b.unread[0].startswith("sglang/srt/broken.py: Syntax")


def test_a_test_of_an_unread_shape_is_said_not_guessed(index: FakeIndex) -> None:
    files = {**_with_choices(["none", "mooncake", "nixl"]),
             "sglang/srt/odd.py": ("def f(cfg):\n"
                                   "    if cfg.elastic_ep_backend.startswith('ni'):\n"
                                   "        import nixl_ep\n")}
    rel = _release(index, AnalysisCache(), "0.5.23", files)
    nixl = next(b for b in rel.launch_backends if b.choice == "nixl")
    assert nixl.guarded == ()
    assert nixl.unread == ("sglang/srt/odd.py:2: cfg.elastic_ep_backend.startswith('ni')",)


def test_the_guarded_reading_is_kept_by_content_between_scrapes(
        index: FakeIndex, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """A source read once (by CRC-32 and size) is not read again, in this scrape or the
    next one (the saved per-file facts), and moving it keeps its facts under the new path."""
    from moonpin.readers.launch import guarded

    cache = AnalysisCache()
    files = {**_with_choices(["none", "mooncake"]), "sglang/srt/distributed/te.py": TE_PY}
    first = _release(index, cache, "0.5.22", files)
    assert cache.save(str(tmp_path / "files.marshal")) is None
    loaded = AnalysisCache.load(str(tmp_path / "files.marshal"))

    def no(*a: object) -> None:
        raise AssertionError("read again")

    monkeypatch.setattr(guarded, "read_file", no)
    moved = {**_with_choices(["none", "mooncake"]), "sglang/srt/other/te.py": TE_PY}
    second = _release(index, loaded, "0.5.23", moved)
    a = next(b for b in first.launch_backends if b.choice == "mooncake")
    b = next(b for b in second.launch_backends if b.choice == "mooncake")
    assert [i.member for i in a.guarded] == ["sglang/srt/distributed/te.py"]
    assert [i.member for i in b.guarded] == ["sglang/srt/other/te.py"]
    assert a.guarded[0].line == b.guarded[0].line == 9


def test_sglang_s_pins_of_the_extensions_are_kept_verbatim_with_their_line(
        index: FakeIndex) -> None:
    rel = _release(index, AnalysisCache(), "0.5.21", dict(AG_MEMBERS))
    pins = {p.dist: p.requirement for p in rel.extension_pins}
    assert pins == {"sglang-kernel": "sglang-kernel==0.4.7",
                    "flashinfer-python": "flashinfer_python[cu13]==0.7.2",
                    "nixl": "nixl; extra == 'nixl'",
                    "sgl-deep-ep": "sgl-deep-ep==0.1.2; platform_machine == 'x86_64'"}
    for p in rel.extension_pins:
        assert p.member == "sglang-0.5.21.dist-info/METADATA" and p.line > 0


def test_the_check_reads_an_installed_sglang_as_the_scrape_reads_its_wheel(
        index: FakeIndex, tmp_path: Any) -> None:
    """One reading: what the check finds a choice imports under tests on its value
    (preflight.extensions.wanted) is what the KB records for the same sources."""
    from moonpin.preflight.access.confined import NOWHERE
    from moonpin.preflight.extensions import wanted

    files = {**_with_choices(["none", "mooncake", "nixl", "mori"]),
             DISPATCH + "nixl.py": NIXL_PY, DISPATCH + "mooncake.py": MOONCAKE_PY,
             DISPATCH + "moriep.py": MORIEP_PY, "sglang/srt/distributed/te.py": TE_PY}
    rel = _release(index, AnalysisCache(), "0.5.23", files)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    sglang = str(tmp_path / "sglang")
    assert rel.launch_backends
    for b in rel.launch_backends:
        got, unread = wanted._under_tests(sglang, b.flag, b.choice, NOWHERE)
        assert got == [(i.module, i.line, i.member) for i in b.guarded]
        assert tuple(unread) == b.unread
    path = wanted._dispatcher(sglang, "mori", "srt/layers/moe/token_dispatcher/", NOWHERE)
    assert path == str(tmp_path / DISPATCH / "moriep.py")
    assert wanted._imports(path, NOWHERE) == [("torch", 1), ("mori", 3)]
