"""``which`` of a native extension from the tables ``kb resolve`` writes
(:mod:`moonpin.resolver.tables.native`): the same answer as the full resolver, without
pydantic or networkx, and the full resolver when a table does not hold the question."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from moonpin.resolver import native
from moonpin.resolver.graph import CompatGraph
from moonpin.resolver.tables import native as rn
from tests.lib.resolvedkb import resolved_kb
from tests.resolver.test_which_native import _flashinfer, _kb, _kernel, _with_sglang_edges

ROOT = Path(__file__).resolve().parents[2]

QUESTIONS = [
    (what, torch, sglang, python, arch)
    for what in ("nixl", "nixl-cu13", "nixl_ep", "sgl_kernel", "sglang-kernel", "flashinfer")
    for torch, sglang in (("2.14.1", None), ("2.15.0", None), ("2.12.0", None),
                          (None, "0.5.23"), ("2.14.1", "0.5.23"))
    for python, arch in ((None, None), ("3.12", "x86_64"), ("cp314", "aarch64"))
]


@pytest.fixture(scope="module")
def kb_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    kb = _with_sglang_edges(_kb())
    kb = kb.model_copy(update={"native": (
        *kb.native, _kernel("0.4.9", "==2.14.1", 13),
        _flashinfer("flashinfer-python", "0.7.2", True),
        _flashinfer("flashinfer-cubin", "0.6.13", False))})
    return resolved_kb(tmp_path_factory.mktemp("native"), kb)


@pytest.mark.parametrize("as_imported", [False, True], ids=["loads", "imported"])
@pytest.mark.parametrize(("what", "torch", "sglang", "python", "arch"), QUESTIONS)
def test_the_tables_answer_as_the_full_resolver(kb_path: Path, what: str, torch: str | None,
                                                sglang: str | None, python: str | None,
                                                arch: str | None, as_imported: bool) -> None:
    fast = rn.which_fast(kb_path, what, torch=torch, sglang=sglang, python=python, arch=arch,
                         dist=None, as_imported=as_imported)
    full = native.which_native(CompatGraph.from_path(kb_path), what, torch=torch,
                               sglang=sglang, python=python, arch=arch,
                               as_imported=as_imported)
    assert fast is not None
    assert fast.to_json() == full.to_json()


def test_what_the_tables_do_not_hold_goes_to_the_full_resolver(kb_path: Path) -> None:
    def ask(**kw: object) -> object:
        args = {"torch": "2.14.1", "sglang": None, "python": None, "arch": None,
                "dist": None, **kw}
        return rn.which_fast(kb_path, str(args.pop("what", "nixl")), **args)  # type: ignore[arg-type]

    assert ask() is not None
    assert ask(torch="2.14.1+cu130") is None  # a local label: the full resolver's spelling
    assert ask(torch="2.99.0") is None
    assert ask(torch=None, sglang="0.5.99") is None
    assert ask(python="3.9") is None
    assert ask(what="nixx") is None  # the full resolver says what is wrong
    assert ask(dist="nixl_cu13") is None


def test_a_stale_or_damaged_table_is_not_read(kb_path: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "kb.json"
    shutil.copy(kb_path, copy)
    shutil.copytree(kb_path.parent / "resolved", tmp_path / "resolved")
    assert rn.which_fast(copy, "nixl", torch="2.14.1", sglang=None, python=None, arch=None,
                         dist=None) is not None
    table = tmp_path / "resolved" / rn.entry_name("nixl", "2.14.1")
    doc = json.loads(table.read_text())
    doc["evals"] = "damaged"
    table.write_text(json.dumps(doc))
    assert rn.which_fast(copy, "nixl", torch="2.14.1", sglang=None, python=None, arch=None,
                         dist=None) is None
    copy.write_text(copy.read_text() + " ")  # another KB: every table is stale
    assert rn.which_fast(copy, "sgl_kernel", torch="2.14.1", sglang=None, python=None,
                         arch=None, dist=None) is None


def test_the_project_is_what_it_is_imported_as_a_distribution_what_it_installs(
        kb_path: Path, tmp_path: Path) -> None:
    """``which nixl``: the meta (``import nixl_ep``), not the backend alone, whose
    ``nixl_ep_cu13`` the meta loads; ``which nixl-cu13``: the backend. A table from before
    ``imported`` still answers, with every package as then."""
    import shutil

    def best(path: Path, what: str) -> str | None:
        got = rn.which_fast(path, what, torch="2.14.1", sglang=None, python="3.12",
                            arch="x86_64", dist=None, as_imported=True)
        assert got is not None
        return (got.recommended() or {}).get("requirement")

    assert best(kb_path, "nixl") == "nixl==1.5.1"
    assert best(kb_path, "nixl-cu13") == "nixl-cu13==1.5.1"
    copy = tmp_path / "kb.json"
    shutil.copy(kb_path, copy)
    shutil.copytree(kb_path.parent / "resolved", tmp_path / "resolved")
    table = tmp_path / "resolved" / rn.entry_name("nixl", "2.14.1")
    doc = json.loads(table.read_text())
    assert doc.pop("imported") == ["nixl_ep"]
    table.write_text(json.dumps(doc))
    assert best(copy, "nixl") is not None


def test_the_command_loads_no_pydantic_nor_networkx(kb_path: Path) -> None:
    code = ("import sys, runpy\n"
            "sys.argv = ['moonpin', '--kb', sys.argv[1], 'which', 'nixl', '--torch', '2.14.1',"
            " '--sglang', '0.5.23', '--json']\n"
            "try:\n    runpy.run_module('moonpin', run_name='__main__')\n"
            "except SystemExit as e:\n    code = e.code\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pydantic', 'networkx', 'httpx'))\n"
            "print(repr(bad), file=sys.stderr)\n")
    got = subprocess.run([sys.executable, "-c", code, str(kb_path)], capture_output=True,
                         text=True, check=False)
    assert got.stderr.strip().splitlines()[-1] == "[]", got.stderr
    doc = json.loads(got.stdout)
    assert doc["recommended"]["requirement"] == "nixl==1.5.1", doc


def test_fitting_answers_for_an_installed_torch_label(kb_path: Path) -> None:
    """The check's question (:func:`rn.fitting`): a torch as installed, its CUDA major from
    its label. A label the tables cannot answer for (``+cpu``; a CUDA other than the
    index's build they resolved) is no answer, never the index build's."""
    def ask(torch: str, sglang: str | None = "0.5.23") -> rn.Fitting | None:
        return rn.fitting(kb_path, "nixl", sglang=sglang, torch=torch, python="cp312",
                          arch="x86_64")

    got = ask("2.14.1+cu130")
    assert got is not None and [c.requirement for c in got.fits][:1] == ["nixl==1.5.1"]
    assert (got.torch, got.cuda, got.elsewhere) == ("2.14.1", 13, ())
    for unanswered in ("2.14.1+cpu", "2.14.1+cu126", "2.14.1+rocm6.4", "2.99.0", "x"):
        assert ask(unanswered) is None, unanswered
    assert ask("2.14.1", sglang="0.5.99") is None  # a KB older than the SGLang installed
    moved = ask("2.15.0+cu130")
    assert moved is not None and not moved.fits
    assert [(t, c.requirement) for t, c in moved.elsewhere] == [("2.14.1", "nixl==1.5.1")]
    assert rn.release_pins(kb_path, "nixl", "1.5.1") == {"nixl-cu12": "1.5.1",
                                                         "nixl-cu13": "1.5.1"}


def test_an_answer_decides_sglangs_pins_of_a_release_once(kb_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """A release is judged at every python, platform and torch, and SGLang's pins of it are
    the same at each: ``rule.pinned_by`` runs once a release and pins (it was most of the
    time of ``constraints``, which asks ``which`` of every extension)."""
    calls: list[tuple[str, str]] = []
    real = rn.rule.pinned_by

    def counted(release: str, dist: str, version: str, lines: object) -> object:
        calls.append((dist, version))
        return real(release, dist, version, lines)  # type: ignore[arg-type]

    monkeypatch.setattr(rn.rule, "pinned_by", counted)
    got = rn.which_fast(kb_path, "sglang-kernel", torch=None, sglang="0.5.23", python=None,
                        arch=None, dist=None)
    assert got is not None and calls
    assert len(calls) == len(set(calls)), sorted(calls)
    monkeypatch.setattr(rn.rule, "pinned_by", real)
    assert got.to_json() == rn.which_fast(kb_path, "sglang-kernel", torch=None, sglang="0.5.23",
                                          python=None, arch=None, dist=None).to_json()  # type: ignore[union-attr]


def test_the_held_tables_say_what_which_says(tmp_path: Path) -> None:
    """``constraints`` and ``renovate`` ask ``which`` of every extension distribution beside
    every SGLang release and torch they allow: the SGLang release's held table
    (:func:`rn.held_releases`) gives the same compatible and unknown releases, and the
    same first excluded one with its reason, as :func:`rn.which_fast` for every such
    question of the shipped KB, and a damaged one, or one of another KB, gives none
    (``which_fast`` answers then)."""
    import shutil

    from moonpin.kb.paths import shipped_kb_file

    kb_path = Path(shipped_kb_file())
    index = json.loads((kb_path.parent / "resolved" / rn.INDEX).read_text())
    dists = sorted({d for _, ds in index["names"].values() for d in ds})
    asked = reasons = 0
    for sglang, edges in index["sglang"].items():
        if not (kb_path.parent / "resolved" / rn.held_name(sglang)).exists():
            continue
        for torch in edges["torch"]:
            for dist in dists:
                for python, arch in ((None, None), ("3.12", "x86_64"), ("cp314", None),
                                     (None, "aarch64")):
                    fast = rn.which_fast(kb_path, dist, torch=torch, sglang=sglang,
                                         python=python, arch=arch, dist=dist)
                    held = rn.held_releases(kb_path, dist, torch=torch, sglang=sglang,
                                            python=python, arch=arch)
                    first = (f"{fast.excluded[0].requirement}: {fast.excluded[0].reason}"
                             if fast is not None and fast.excluded else None)
                    assert fast is not None and held == (
                        [c.version for c in fast.compatible],
                        [c.version for c in fast.unknown], first, True), (
                        sglang, torch, dist, python, arch)
                    asked += bool(fast.compatible) + bool(fast.unknown)
                    reasons += first is not None
    assert asked > 100 and reasons > 100  # many questions have an answer to agree on
    # what the held table does not hold: which_fast answers
    assert rn.held_releases(kb_path, "nixl", torch="2.14.1", sglang="0.5.99", python=None,
                            arch=None) is None
    assert rn.held_releases(kb_path, "nixl", torch="2.14.1", sglang="0.5.23", python="3.8",
                            arch=None) is None
    assert rn.held_releases(kb_path, "nixl", torch="2.99.0", sglang="0.5.23", python=None,
                            arch=None) is None
    copy = tmp_path / "kb.json"
    shutil.copy(kb_path, copy)
    (tmp_path / "resolved").mkdir()
    table = tmp_path / "resolved" / rn.held_name("0.5.23")
    shutil.copy(kb_path.parent / "resolved" / rn.held_name("0.5.23"), table)
    assert rn.held_releases(copy, "nixl", torch="2.14.1", sglang="0.5.23", python=None,
                            arch=None) is not None
    doc = json.loads(table.read_text())
    first = next(x for by in doc["torch"].values() for x in by.values() if x["verdicts"])
    first["verdicts"][0] += "0"  # one combination too many
    table.write_text(json.dumps(doc))
    assert rn.held_releases(copy, "nixl", torch="2.14.1", sglang="0.5.23", python=None,
                            arch=None) is None
    doc = json.loads((kb_path.parent / "resolved" / rn.held_name("0.5.23")).read_text())
    first = next(x for by in doc["torch"].values() for x in by.values() if x["reasons"])
    first["excluded"][0] = len(first["reasons"])  # a reason it does not have
    table.write_text(json.dumps(doc))
    assert rn.held_releases(copy, "nixl", torch="2.14.1", sglang="0.5.23", python=None,
                            arch=None) is None
    shutil.copy(kb_path.parent / "resolved" / rn.held_name("0.5.23"), table)
    copy.write_text(copy.read_text() + " ")  # another KB: the table is stale
    assert rn.held_releases(copy, "nixl", torch="2.14.1", sglang="0.5.23", python=None,
                            arch=None) is None


def test_the_requires_table_says_what_the_explain_tables_say(tmp_path: Path) -> None:
    """``_requires.json`` holds every tabled extension release's exact pins and version
    locks as its explain table says them (the plan reads one small table instead of an
    explain table per allowed release); damaged, the explain tables answer."""
    import shutil

    from moonpin.kb.paths import shipped_kb_file

    kb_path = Path(shipped_kb_file())
    folder = kb_path.parent / "resolved"
    doc = json.loads((folder / rn.REQUIRES).read_text())
    tabled = [json.loads(f.read_text()) for f in folder.glob("_ext-*.json")]
    assert len(tabled) == sum(len(by) for by in doc["releases"].values()) > 200
    pinned = locked = 0
    for ext in tabled:
        said = doc["releases"][ext["dist"]][ext["version"]]
        assert said == [ext["pins"], [list(x) for x in rn.locks_of(ext["wheels"])]]
        assert rn.release_pins(kb_path, ext["dist"], ext["version"]) == dict(ext["pins"])
        pinned, locked = pinned + bool(said[0]), locked + bool(said[1])
    assert pinned > 10 and locked > 10
    copy = tmp_path / "kb.json"
    shutil.copy(kb_path, copy)
    shutil.copytree(folder, tmp_path / "resolved")
    doc["releases"]["nixl"]["1.5.1"][0] = "nixl-cu13==1.5.1"  # not a list of pairs
    (tmp_path / "resolved" / rn.REQUIRES).write_text(json.dumps(doc))
    assert rn.release_pins(copy, "nixl", "1.5.1") == rn.release_pins(kb_path, "nixl", "1.5.1")
    assert rn.release_pins(copy, "nixl", "1.5.1")


#: What ``pip install nixl`` (and ``uv pip compile``) of SGLang 0.5.23's stack pins: the meta
#: nixl requires both backends exactly (tests/realimg/README.md, image stack-nixlboth)
LOCK = [("nixl", "1.5.1"), ("nixl-cu12", "1.5.1"), ("nixl-cu13", "1.5.1"),
        ("sglang-kernel", "0.4.10"), ("sgl-deep-ep", "0.1.2.post1"),
        ("flashinfer-python", "0.7.2")]


@pytest.mark.parametrize("tables", [True, False], ids=["tables", "facts"])
def test_a_backend_the_meta_requires_but_does_not_load_is_said_not_failed(
        tables: bool) -> None:
    """The shipped KB: with CUDA 13 torch 2.14.1 the meta nixl loads nixl-cu13's build, so
    nixl-cu12 1.5.1 (no build for 2.14) is installed and never imported, as in the real
    image stack-nixlboth where ``import nixl_ep`` works; before, the set was incompatible
    (nixl-cu12's missing build). Its install checks still count: on cp39, where nixl has no
    wheel, the set stays incompatible. The tables and the facts say the same."""
    shipped = ROOT / "data" / "kb.json"
    if tables:
        got = rn.explain_fast(shipped, "0.5.23", LOCK, torch=None, python=None, arch=None)
        assert got is not None  # the tables hold it
    else:
        got = native.explain_stack(CompatGraph.from_path(shipped), "0.5.23", LOCK)
    by = {c.name: c for c in got["checks"]}
    assert all(c.ok for c in got["checks"]), [c for c in got["checks"] if not c.ok]
    assert by["nixl-cu12==1.5.1"].detail == "installed, not loaded (see the note)"
    assert "build for torch" not in by["nixl-cu12==1.5.1"].detail
    said = [n for n in got["notes"] if n.startswith("nixl-cu12==1.5.1 is installed")]
    assert said == got["unloaded"] and len(said) == 1, got["notes"]
    assert "nixl==1.5.1's loader loads nixl-cu13==1.5.1 with torch 2.14.1" in said[0]
    assert not any("nixl_ep_cu12" in n for n in got["notes"])  # its notes are not said
    verdicts = {(c["python"], c["arch"]): c["verdict"] for c in got["combinations"]}
    assert verdicts[("cp312", "x86_64")] == "compatible"
    assert verdicts[("cp39", "x86_64")] == "incompatible"


def test_under_a_cuda_12_torch_the_roles_swap() -> None:
    """torch 2.10.0 on x86_64 is a CUDA 12 build (the shipped KB): the meta loads
    nixl-cu12's build, so nixl-cu13 is the one installed and not loaded, and nixl-cu12 is
    judged (it has no build for torch 2.10: the set is incompatible on its account)."""
    shipped = ROOT / "data" / "kb.json"
    stack = LOCK[:3]
    for got in (rn.explain_fast(shipped, None, stack, torch="2.10.0", python="cp312",
                                arch="x86_64"),
                native.explain_stack(CompatGraph.from_path(shipped), None, stack,
                                     torch="2.10.0", python="cp312", arch="x86_64")):
        assert got is not None
        by = {c.name: c for c in got["checks"]}
        assert by["nixl-cu13==1.5.1"].ok is True, by
        assert by["nixl-cu12==1.5.1"].ok is False and "torch 2.10.0" in by[
            "nixl-cu12==1.5.1"].detail
        assert [n.split(" is installed")[0] for n in got["unloaded"]] == ["nixl-cu13==1.5.1"]


def test_which_of_a_backend_alone_says_why_on_a_python_it_has_a_wheel_for() -> None:
    """``which nixl-cu13 --sglang 0.5.23 --torch 2.14.1`` over every python: each release is
    excluded as much on cp39 (no wheel) as on cp312 (installs no nixl_ep, which SGLang
    imports); the reason shown is the one of a combination with a wheel (before: "no
    nixl-cu13 wheel for this python and platform", true of cp39 only)."""
    import moonpin

    shipped = ROOT / "data" / "kb.json"
    for dist in ("nixl-cu12", "nixl-cu13"):
        got = moonpin.which(dist, sglang="0.5.23", torch="2.14.1", kb=shipped)
        assert not got.compatible
        newest = next(c for c in got.excluded if c.version == "1.5.1")
        assert newest.reason.startswith("sglang's import: sglang 0.5.23 imports nixl_ep"), \
            newest.reason


def test_with_a_torch_without_cuda_no_backend_is_left_unloaded() -> None:
    """torch 2.10.0 on aarch64 is a CPU build (the shipped KB): the meta's dispatch has no
    CUDA major to pick by, and its loader then tries each backend in turn, so neither is
    said to be unloaded: both are judged by their builds."""
    shipped = ROOT / "data" / "kb.json"
    for got in (rn.explain_fast(shipped, None, LOCK[:3], torch="2.10.0", python="cp312",
                                arch="aarch64"),
                native.explain_stack(CompatGraph.from_path(shipped), None, LOCK[:3],
                                     torch="2.10.0", python="cp312", arch="aarch64")):
        assert got is not None and got["unloaded"] == []
        assert not any(c.detail.startswith("installed, not loaded") for c in got["checks"])
