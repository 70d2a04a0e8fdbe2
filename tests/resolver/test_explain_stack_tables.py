"""``explain`` of a stack naming native extensions answers from the tables written at
``kb resolve`` (each release's ``_ext-`` table and the index) exactly as the full resolver,
reads no facts doing it, and ignores a table that is damaged, stale or another release's."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from moonpin.kb import store
from moonpin.resolver import native
from moonpin.resolver.graph import CompatGraph
from moonpin.resolver.tables import native as rn
from moonpin.resolver.tables import reading
from tests.lib.resolvedkb import facts_reads, resolved_kb, same_as_full
from tests.resolver.test_which_native import _flashinfer, _kb, _kernel, _with_sglang_edges

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "kb.json"


def _stack_kb() -> Any:
    """The nixl / sglang-kernel KB of ``test_which_native`` with SGLang's own edges,
    flashinfer's lock (ignored by 0.7.2, raised by 0.6.0) and a second distribution
    installing ``sgl_kernel`` (``sgl-kernel``)."""
    kb = _with_sglang_edges(_kb())
    other = _kernel("0.3.4", None, 12).model_copy(update={"dist": "sgl-kernel"})
    return kb.model_copy(update={"native": (
        *kb.native, _kernel("0.4.9", "==2.14.1", 13), other,
        _flashinfer("flashinfer-python", "0.7.2", True),
        _flashinfer("flashinfer-python", "0.6.0", True, "raise"),
        _flashinfer("flashinfer-cubin", "0.6.13", False))})


@pytest.fixture(scope="module")
def kb_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return resolved_kb(tmp_path_factory.mktemp("ext"), _stack_kb())


def _said(got: dict[str, Any]) -> dict[str, Any]:
    return {**got, "checks": [c.as_dict() for c in got["checks"]]}


def test_every_stack_of_the_fixture_as_the_full_resolver(kb_path: Path) -> None:
    """Every stack of one or two releases, with and without SGLang, torch, python and
    platform: the tables answer each exactly as the facts do."""
    g = CompatGraph(store.load(kb_path))  # no KB path: the full resolver
    releases = sorted({(r.dist, r.version) for r in g.kb.native})
    stacks = [[r] for r in releases] + [list(p) for p in itertools.combinations(releases, 2)]
    asked = [("0.5.23", None), ("0.5.23", "2.14.1"), ("0.5.23", "2.15.0"), (None, "2.13.0")]
    answered = 0
    for stack in stacks:
        for (sglang, torch), python, arch in itertools.product(asked, (None, "3.12"),
                                                               (None, "aarch64")):
            fast = rn.explain_fast(kb_path, sglang, stack, torch=torch, python=python,
                                   arch=arch)
            assert fast is not None, (stack, sglang, torch, python, arch)
            answered += 1
            full = native.explain_stack(g, sglang, stack, torch=torch, python=python,
                                        arch=arch)
            assert _said(fast) == _said(full), (stack, sglang, torch, python, arch)
    assert answered == len(stacks) * 16
    # the checks a stack adds are among those compared: each kind is there
    names = {c.name for stack in stacks for c in native.explain_stack(
        g, "0.5.23", stack, torch="2.14.1", python="3.12", arch="x86_64")["checks"]}
    assert {"flashinfer-python lock", native.COLLISION, "nixl==1.5.2 pin"} <= names, names


@pytest.mark.parametrize("question", [
    ("0.5.23", "2.9.9", None),  # a torch the KB holds no facts of
    ("0.5.23", None, "3.99"),  # a python no wheel names: refused as the resolver refuses
    ("0.5.99", None, None),  # an SGLang release the KB does not hold
])
def test_what_the_tables_do_not_hold_goes_to_the_resolver(
        kb_path: Path, question: tuple[str, str | None, str | None]) -> None:
    sglang, torch, python = question
    try:
        got = rn.explain_fast(kb_path, sglang, [("nixl", "1.5.1")], torch=torch,
                              python=python, arch=None)
    except Exception as e:  # only the resolver's own refusal is fine
        from moonpin.kb.errors import UsageError

        assert isinstance(e, UsageError) and python == "3.99"
        return
    assert got is None


def test_a_release_spelt_otherwise_goes_to_the_resolver(kb_path: Path) -> None:
    assert rn.explain_fast(kb_path, "0.5.23", [("nixl", "1.5.1.0")], torch=None, python=None,
                           arch=None) is None


def _edit(path: Path, change: Callable[[dict[str, Any]], object]) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("change", [
    lambda d: d["checks"][0].__setitem__(0, 10**6),  # a string index out of range
    lambda d: d["checks"][0].__setitem__(1, 1),  # ok must be true, false or null
    lambda d: d.update(torch={"2.14.1": [["cp312", "x86_64", None, [10**6], []]]}),
    lambda d: d.update(packages="nixl_ep"),
    lambda d: d.update(pins=[["nixl-cu13"]]),
    lambda d: d.update(wheels={"w.whl": [["p"], [["t", None, None, None, "m", "1"]]]}),
    lambda d: d.update(version="1.5.2"),  # another release's table under this name
])
def test_a_damaged_release_table_is_ignored(kb_path: Path, tmp_path: Path,
                                            change: Callable[[dict[str, Any]], object]) -> None:
    import shutil

    copy = tmp_path / "kb.json"
    shutil.copy(kb_path, copy)
    shutil.copytree(reading.resolved_path(kb_path), reading.resolved_path(copy))
    ask = {"torch": "2.14.1", "python": "3.12", "arch": "x86_64"}
    assert rn.explain_fast(copy, "0.5.23", [("nixl", "1.5.1")], **ask) is not None
    _edit(reading.resolved_path(copy) / rn.release_name("nixl", "1.5.1"), change)
    assert rn.explain_fast(copy, "0.5.23", [("nixl", "1.5.1")], **ask) is None


def test_a_stale_release_table_is_ignored(kb_path: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "kb.json"
    shutil.copy(kb_path, copy)
    shutil.copytree(reading.resolved_path(kb_path), reading.resolved_path(copy))
    assert rn.explain_fast(copy, None, [("nixl", "1.5.1")], torch="2.14.1", python=None,
                           arch=None) is not None
    copy.write_bytes(copy.read_bytes() + b" ")
    assert rn.explain_fast(copy, None, [("nixl", "1.5.1")], torch="2.14.1", python=None,
                           arch=None) is None


_EVERYDAY = [
    ("sglang==0.5.23", "nixl==1.5.1", "sglang-kernel==0.4.10"),
    ("sglang==0.5.23", "sgl-deep-ep==0.1.2.post1", "flashinfer-python==0.6.12",
     "flashinfer-cubin==0.6.12", "sglang-kernel==0.4.10"),
    ("sglang==0.5.23", "mooncake-transfer-engine-cuda13==0.3.13.post1", "nixl-cu13==1.5.1",
     "flashinfer-python==0.6.13", "flashinfer-cubin==0.6.12"),
    ("sglang==0.5.18", "torch==2.9.1", "sgl-kernel==0.3.20", "sglang-kernel==0.4.10"),
]


@pytest.mark.parametrize("releases", _EVERYDAY)
@pytest.mark.parametrize("kw", [{}, {"python": "3.11", "arch": "aarch64"}])
def test_explain_of_a_shipped_stack_reads_no_facts(
        releases: tuple[str, ...], kw: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Everyday stacks of the shipped KB are answered from the tables, reading no facts,
    exactly as the full resolver answers them."""
    from moonpin.api import explain

    same_as_full(monkeypatch, lambda: explain(*releases, kb=SHIPPED, **kw).to_json(),
                 refused=facts_reads(), full=[(rn, "explain_fast")])
