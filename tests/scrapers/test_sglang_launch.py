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


def test_each_backend_choice_records_the_module_and_what_it_imports(index: FakeIndex) -> None:
    """Issue 39: from the release's own sources, which module each choice of the backend
    options imports, with the names and lines; SGLang's own and the standard library's
    imports are left out."""
    files = {**_with_choices(["none", "mooncake", "nixl", "mori", "pplx"]),
             DISPATCH + "nixl.py": NIXL_PY, DISPATCH + "mooncake.py": MOONCAKE_PY,
             DISPATCH + "moriep.py": MORIEP_PY, DISPATCH + "sub/pplx.py": "import pplx\n"}
    rel = _release(index, AnalysisCache(), "0.5.23", files)
    got = {(b.flag, b.choice): (b.member, [(i.module, i.names, i.line) for i in b.imports])
           for b in rel.launch_backends}
    assert got == {
        ("--elastic-ep-backend", "mooncake"): (
            DISPATCH + "mooncake.py", [("mooncake.mooncake_ep_buffer", ("Buffer",), 2)]),
        ("--elastic-ep-backend", "nixl"): (DISPATCH + "nixl.py", [("nixl_ep", ("Buffer",), 9)]),
        ("--elastic-ep-backend", "mori"): (DISPATCH + "moriep.py",
                                           [("torch", (), 1), ("mori", (), 3)]),
        ("--elastic-ep-backend", "pplx"): (None, []),  # a sub-folder's module is not one
    }


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


def test_a_backend_module_read_once_is_not_read_again(
        index: FakeIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    import zlib

    from moonpin.readers.launch import server_args as sa

    cache = AnalysisCache()
    files = {**AG_MEMBERS, DISPATCH + "nixl.py": NIXL_PY}
    first = _release(index, cache, "0.5.22", files)
    data = NIXL_PY.encode()
    assert cache.backend_get(zlib.crc32(data), len(data)) is not None

    def no(*a: object) -> None:
        raise AssertionError("read again")

    monkeypatch.setattr(sa, "backend_imports", no)
    second = _release(index, cache, "0.5.23", files)
    assert second.launch_backends == first.launch_backends


def test_a_backend_module_that_does_not_parse_is_said(index: FakeIndex) -> None:
    rel = _release(index, AnalysisCache(), "0.5.23",
                   {**AG_MEMBERS, DISPATCH + "nixl.py": "def broken(:\n"})
    nixl = next(b for b in rel.launch_backends if b.choice == "nixl")
    assert nixl.member == DISPATCH + "nixl.py" and nixl.imports == ()
    assert nixl.error is not None and "SyntaxError" in nixl.error


def test_the_check_reads_an_installed_sglang_as_the_scrape_reads_its_wheel(
        index: FakeIndex, tmp_path: Any) -> None:
    """One reading: the check's choice of module and its imports (preflight.extensions.
    wanted) are the ones the KB records for the same sources."""
    from moonpin.preflight.access.confined import NOWHERE
    from moonpin.preflight.extensions import wanted

    files = {**_with_choices(["none", "mooncake", "nixl", "mori"]),
             DISPATCH + "nixl.py": NIXL_PY, DISPATCH + "mooncake.py": MOONCAKE_PY,
             DISPATCH + "moriep.py": MORIEP_PY}
    rel = _release(index, AnalysisCache(), "0.5.23", files)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    sglang = str(tmp_path / "sglang")
    for b in rel.launch_backends:
        path = wanted._dispatcher(sglang, b.choice, NOWHERE)
        assert path == (None if b.member is None else str(tmp_path / b.member))
        if path is not None:
            assert wanted._imports(path, NOWHERE) == [(i.module, i.line) for i in b.imports]
