"""Issue 39: ``pins``, ``renovate`` and ``constraints`` cover the worker's other native
extensions (nixl, sglang-kernel, DeepEP, FlashInfer). A pinned set is judged with the one
rule's native checks (``explain_stack``), with the torch it ends with; pin updates move them
with torch; Renovate gets one group; constraints hold them. The expected releases are asked of
the resolver's own ``which`` (facts of the shipped KB), never written here."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import moonpin
from moonpin.resolver.graph import CompatGraph
from moonpin.resolver.pins.reading.base import NATIVE, TRACKED
from tests.lib.resolvedkb import facts_reads, same_as_full
from tests.lib.shipped import run_moonpin

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "kb.json"


def _newest(dist: str, torch: str) -> str:
    return moonpin.which(dist, torch=torch, dist=dist, kb=SHIPPED).compatible[0].version


def test_the_tracked_native_distributions_are_the_recipes() -> None:
    from moonpin.scrapers.projects import recipes

    assert {r.project: r.dists for r in recipes()} == NATIVE
    assert all(d in TRACKED for ds in NATIVE.values() for d in ds)


STACK = ("sglang==0.5.23\ntorch==2.14.1\nmooncake-transfer-engine-cuda13==0.3.14\n"
         "nixl-cu13==1.4.0\nsglang-kernel==0.4.8\nflashinfer-python==0.7.2\n")
#: the same stack as Renovate sees it: the meta nixl, one build short of torch 2.14.1's
RENOVATED = STACK.replace("nixl-cu13==1.4.0", "nixl==1.4.0")


def test_a_pinned_set_is_judged_with_the_native_checks(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text(STACK)
    got = moonpin.judge_pins([req], python="3.12", kb=SHIPPED)
    assert got.verdict == "incompatible", got
    # the first check each fails, as the rule orders them (no build for torch 2.14.1; not
    # the sglang-kernel SGLang 0.5.23 requires, nor the torch it requires)
    assert any(r.startswith("nixl-cu13==1.4.0: ") for r in got.reasons), got.reasons
    assert any(r.startswith("sglang-kernel==0.4.8: ") for r in got.reasons), got.reasons
    moved = {u["depName"]: (u["newName"], u["newVersion"]) for u in got.updates}
    assert moved["sglang-kernel"] == ("sglang-kernel", _newest("sglang-kernel", "2.14.1"))
    # nixl-cu13 alone installs no nixl_ep, which SGLang imports: the meta nixl does, and
    # loads its build from the nixl-cu13 it pins
    assert moved["nixl-cu13"] == ("nixl", _newest("nixl", "2.14.1")), got.updates
    assert set(moved) == {"nixl-cu13", "sglang-kernel"}
    w = run_moonpin("pins", "requirements.txt", "--python", "3.12", "--write", cwd=tmp_path)
    assert w.returncode == 0 and "after writing: verdict compatible" in w.stderr, w.stderr
    assert run_moonpin("pins", "requirements.txt", "--python", "3.12", cwd=tmp_path
                       ).returncode == 0


def test_a_pin_file_holding_both_distributions_of_sgl_kernel_is_told(tmp_path: Path) -> None:
    """sglang-kernel and sgl-kernel both install ``sgl_kernel/`` (their wheels' files): a
    set pinning both is incompatible, and says so (pip installs the second over the first
    without a word); one of them alone is the control."""
    from moonpin.resolver import native

    g = CompatGraph.from_path(SHIPPED)
    old = max((r for r in g.kb.native if r.dist == "sgl-kernel"), key=native.newest).version
    req = tmp_path / "requirements.txt"
    both = "sglang==0.5.23\ntorch==2.14.1\nsglang-kernel==0.4.10\n"
    req.write_text(both + f"sgl-kernel=={old}\n")
    got = moonpin.judge_pins([req], python="3.12", arch="x86_64", kb=SHIPPED)
    said = [r for r in got.reasons if r.startswith("one package, two distributions: ")]
    assert got.verdict == "incompatible" and said, got.reasons
    assert f"sglang-kernel==0.4.10 and sgl-kernel=={old} both install sgl_kernel/" in said[0]
    assert not any(u["depName"] == "sgl-kernel" for u in got.updates)  # said, not moved
    req.write_text(both)
    assert not any("two distributions" in r for r in moonpin.judge_pins(
        [req], python="3.12", arch="x86_64", kb=SHIPPED).reasons)


def test_the_extensions_move_with_torch(tmp_path: Path) -> None:
    """torch moves (SGLang 0.5.23 requires 2.14.1), and nixl-cu13 1.4.0 (builds up to torch
    2.13) with it; flashinfer-python to the release SGLang's own pin admits, and
    flashinfer-cubin with it where that release's lock refuses it."""
    req = tmp_path / "requirements.txt"
    req.write_text("sglang==0.5.23\ntorch==2.13.0\nmooncake-transfer-engine-cuda13==0.3.14\n"
                   "nixl-cu13==1.4.0\nflashinfer-python==0.6.13\nflashinfer-cubin==0.6.12\n")
    got = moonpin.judge_pins([req], python="3.12", kb=SHIPPED)
    moved = {u["depName"]: (u["newName"], u["newVersion"]) for u in got.updates}
    assert moved["torch"] == ("torch", "2.14.1")
    assert moved["nixl-cu13"] == ("nixl", _newest("nixl", "2.14.1"))
    python = moved["flashinfer-python"][1]
    assert moonpin.explain("sglang==0.5.23", f"flashinfer-python=={python}", python="3.12",
                           kb=SHIPPED).verdict == "compatible"
    lock = moonpin.explain("sglang==0.5.23", f"flashinfer-python=={python}",
                           "flashinfer-cubin==0.6.12", python="3.12", kb=SHIPPED)
    assert moved.get("flashinfer-cubin", ("", "0.6.12"))[1] == (
        "0.6.12" if lock.verdict == "compatible" else python)
    assert all(u["groupName"] == "sglang stack" for u in got.updates)
    w = run_moonpin("pins", "requirements.txt", "--python", "3.12", "--write", cwd=tmp_path)
    assert w.returncode == 0, w.stdout + w.stderr


def test_an_extension_the_kb_does_not_hold_is_said_not_judged(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("sglang==0.5.23\ntorch==2.14.1\nmooncake-transfer-engine-cuda13==0.3.14\n"
                   "nixl-cu13==9.9.9\n")
    got = moonpin.judge_pins([req], python="3.12", kb=SHIPPED)
    assert any("nixl-cu13==9.9.9" in n and "not judged" in n for n in got.notes), got
    assert not [u for u in got.updates if u["depName"] == "nixl-cu13"]


def test_an_extension_the_rule_cannot_answer_leaves_the_set_unknown(tmp_path: Path) -> None:
    """A pinned extension release whose check the KB cannot answer (nothing says which torch
    its build targets) leaves the whole set unknown, as ``explain`` says of the same set: the
    pins were once 'compatible' with the unanswered check as a note."""
    unknown = moonpin.which("nixl", torch="2.14.1", sglang="0.5.23", kb=SHIPPED).unknown
    if not unknown:
        pytest.skip("the shipped KB answers every nixl release for torch 2.14.1")
    c = unknown[0]
    req = tmp_path / "requirements.txt"
    req.write_text(f"sglang==0.5.23\ntorch==2.14.1\nmooncake-transfer-engine-cuda13=="
                   f"{moonpin.which('mooncake', sglang='0.5.23', kb=SHIPPED).compatible[0].version}"
                   f"\n{c.requirement}\n")
    got = moonpin.judge_pins([req], python="3.12", arch="x86_64", kb=SHIPPED)
    said = moonpin.explain("sglang==0.5.23", c.requirement, "torch==2.14.1",
                           python="3.12", arch="x86_64", kb=SHIPPED)
    assert said.verdict == "unknown", said
    assert got.verdict == "unknown", got
    assert any(c.requirement in n for n in got.notes), got.notes
    assert run_moonpin("pins", "requirements.txt", "--python", "3.12", "--arch", "x86_64",
                       cwd=tmp_path).returncode == 1


def test_renovate_moves_them_in_the_one_group(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text(RENOVATED)
    r = run_moonpin("renovate", "requirements.txt", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rules = json.loads(r.stdout)["packageRules"]
    grouped = [x for x in rules if x.get("groupName") == "sglang stack"]
    assert len(grouped) == 1
    assert {"sglang", "torch", "nixl", "sglang-kernel", "flashinfer-python"} <= set(
        grouped[0]["matchPackageNames"])
    held = {x["matchPackageNames"][0]: x["allowedVersions"] for x in rules
            if len(x["matchPackageNames"]) == 1 and "allowedVersions" in x}
    assert _newest("nixl", "2.14.1").replace(".", "\\.") in held["nixl"]
    assert "1\\.4\\.0" not in held["nixl"]  # no build for torch 2.14.1


def test_constraints_hold_them(tmp_path: Path) -> None:
    r = run_moonpin("constraints", "--sglang", "0.5.23", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = {x.split("<")[0].split(">")[0].split("=")[0].split("!")[0]: x
             for x in r.stdout.splitlines() if x and not x.startswith("#")}
    g = CompatGraph.from_path(SHIPPED)
    from packaging.specifiers import SpecifierSet

    spec = SpecifierSet(lines["nixl"].removeprefix("nixl"))
    assert _newest("nixl", "2.14.1") in spec and "1.4.0" not in spec
    assert "sglang-kernel" in lines and "sgl-deep-ep" in lines
    # the backends the meta nixl requires exactly are held as the meta is: pip installs
    # both with it (it loads nixl-cu13's build with CUDA 13 torch 2.14.1, never nixl-cu12's)
    for backend in ("nixl-cu12", "nixl-cu13"):
        assert SpecifierSet(lines[backend].removeprefix(backend)) == spec, lines
    # flashinfer-python 0.7.2 wants the cubin at its own version, which the index lacks; it
    # ignores another with a warning (import works in the real image stack-cubin): left free
    assert "flashinfer-cubin" not in lines and "flashinfer-python" in lines
    assert ("flashinfer-cubin is not held: flashinfer-python 0.7.2 wants it at its own "
            "version, and the knowledge base holds no such release of it; it ignores another "
            "with a warning") in r.stdout
    # no note says a release "loads" where the rule did not judge it so
    assert "no release of nixl-cu1" not in r.stdout
    assert "no release of sgl-kernel in the knowledge base loads" not in r.stdout
    assert g.kb.native  # the facts the answers rest on


@pytest.mark.uv
def test_uv_resolves_sglang_and_the_extensions_under_the_constraints(tmp_path: Path) -> None:
    """The real uv, against the package index: SGLang 0.5.23 with nixl and mooncake resolves
    under ``moonpin constraints`` (SGLang's own exact pins included), to the nixl the
    resolver says loads with its torch."""
    import shutil

    uv = os.environ.get("MOONPIN_UV") or shutil.which("uv")
    if not uv:
        pytest.skip("uv not found: set MOONPIN_UV or put uv on PATH (pip install uv)")
    for sglang, torch in (("0.5.23", "2.14.1"), ("0.5.18", "2.13.0")):
        c = run_moonpin("constraints", "--sglang", sglang, cwd=tmp_path)
        (tmp_path / "c.txt").write_text(c.stdout)
        (tmp_path / "in.txt").write_text(f"sglang=={sglang}\nnixl\n"
                                         "mooncake-transfer-engine-cuda13\n")
        r = subprocess.run([uv, "pip", "compile", "-q", "--no-header", "--no-annotate",
                            "--python-version", "3.12", "--python-platform",
                            "x86_64-manylinux_2_34", "in.txt", "-c", "c.txt"],
                           capture_output=True, text=True, timeout=900, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        got = dict(x.split("==", 1) for x in r.stdout.splitlines() if "==" in x)
        assert got["torch"] == torch and got["nixl"] == _newest("nixl", torch), got



@pytest.mark.parametrize(("text", "facts"), [
    ("sglang==0.5.23\nnixl==1.5.1\nsglang-kernel==0.4.10\n", False),
    ("sglang==0.5.23\ntorch==2.14.1\nnixl-cu13==1.4.0\nsglang-kernel==0.4.8\n", True),
    ("sglang==0.5.23\nsgl-deep-ep==0.1.2.post1\nflashinfer-python==0.7.2\n"
     "flashinfer-cubin==0.6.13\n", False)], ids=["loads", "moved", "deepep-flashinfer"])
def test_pins_of_extensions_are_judged_from_the_tables(
        text: str, facts: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The extensions a set pins are judged from the resolved tables, the moves too: the
    full resolver's native side is not asked (before, it judged them all), and a set
    whose other pins need no facts reads none (``facts``: its torch pin is judged
    from them), with the full resolver's answer."""

    from moonpin.resolver import native
    from moonpin.resolver.tables import native as rn

    req = tmp_path / "requirements.txt"
    req.write_text(text)

    asked = [(native, n) for n in ("explain_stack", "which_native", "known_version")]
    got = same_as_full(monkeypatch, lambda: moonpin.judge_pins([req], python="3.12",
                                                               kb=SHIPPED).to_json(),
                       refused=[*asked, *(() if facts else facts_reads())],
                       full=[(rn, "explain_fast"), (rn, "which_fast")],
                       what="the full resolver was asked")
    native_said = [r for r in got["reasons"] if r.startswith(("nixl", "sglang-kernel=="))]
    assert bool(native_said) == ("0.4.8" in text), got
    assert any(u["depName"] == "sglang-kernel" for u in got["updates"]) == ("0.4.8" in text)


def test_constraints_hold_the_extensions_from_the_tables(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """``constraints``/``renovate``'s hold of the extensions (``plan_natives``) asks
    ``which`` of the resolved tables (before: the full resolver, once per distribution,
    torch and SGLang), with the full resolver's answer."""
    from typing import Any

    from moonpin.resolver import native
    from moonpin.resolver.pins.writing import renovate
    from moonpin.resolver.tables import native as rn

    def refuse(*_a: object, **_k: object) -> Any:
        raise AssertionError("the full resolver was asked")

    dists = ["nixl", "nixl-cu13", "sglang-kernel", "sgl-deep-ep", "flashinfer-python"]
    with monkeypatch.context() as m:
        m.setattr(native, "which_native", refuse)
        got = renovate.plan_stack(CompatGraph.from_path(SHIPPED), "0.5.23", natives=dists,
                                  python="3.12")
    monkeypatch.setattr(rn, "which_fast", lambda *a, **k: None)
    full = renovate.plan_stack(CompatGraph.from_path(SHIPPED), "0.5.23", natives=dists,
                               python="3.12")
    assert got.natives and (got.natives, got.reasons) == (full.natives, full.reasons)


#: the plans the constraints of the docs and of bench/commands.py make: (sglang, python, arch)
PLANS = [("0.5.18", "3.12", "x86_64"), ("0.5.23", None, None), ("0.5.18", None, "aarch64")]


def _plan(kb: Path, sglang: str, python: str | None, arch: str | None) -> tuple[object, ...]:
    from moonpin.resolver.pins.writing import constraints, renovate

    g = CompatGraph.from_path(kb)
    plan = renovate.plan_stack(g, sglang, python=python, arch=arch, natives=None)
    return plan.natives, plan.reasons, constraints.constraint_lines(g, plan)


@pytest.mark.parametrize(("sglang", "python", "arch"), PLANS)
def test_constraints_say_why_from_the_held_tables_alone(
        monkeypatch: pytest.MonkeyPatch, sglang: str, python: str | None,
        arch: str | None) -> None:
    """A plan's reasons ("alone none fits (nixl-cu12==1.5.1: …)") come from the SGLang
    releases' held tables, what each allowed release requires of another from
    ``_requires.json`` and the releases the KB read from ``_names.json``: no ``which`` of an
    extension is judged again, no explain table, summary or facts read (before: ten
    ``which_fast`` calls, an explain table per allowed release and the typed summary for
    ``constraints --sglang 0.5.18``, a third of its time); the same plan as the full
    resolver's."""
    from typing import Any

    from moonpin.resolver import native
    from moonpin.resolver.tables import documents
    from moonpin.resolver.tables import native as rn

    def refuse(*_a: object, **_k: object) -> Any:
        raise AssertionError("asked again")

    with monkeypatch.context() as m:
        for name in ("which_fast", "_read_release"):
            m.setattr(rn, name, refuse)
        for name in ("load_summary", "_load_facts"):
            m.setattr(documents, name, refuse)
        m.setattr(native, "which_native", refuse)
        m.setattr(CompatGraph, "_read", staticmethod(refuse))
        got = _plan(SHIPPED, sglang, python, arch)
    monkeypatch.setattr(rn, "held_releases", lambda *a, **k: None)
    monkeypatch.setattr(rn, "which_fast", lambda *a, **k: None)
    monkeypatch.setattr(rn, "_requires", lambda *a, **k: None)
    assert got[1] and got == _plan(SHIPPED, sglang, python, arch)


def test_constraints_from_tables_written_before_the_reasons(tmp_path: Path) -> None:
    """Tables written before the held tables' reasons, ``_requires.json`` and
    ``_names.json``'s ``mooncake_read``: the held table says it does not say why
    (``says_excluded``) and the plan asks ``which`` as before, with the same answer."""
    import shutil

    from moonpin.resolver.tables import documents, reading
    from moonpin.resolver.tables import native as rn

    kb = tmp_path / "kb.json"
    shutil.copy(SHIPPED, kb)
    shutil.copytree(SHIPPED.parent / "resolved", tmp_path / "resolved")
    for held in (tmp_path / "resolved").glob("_held-*.json"):
        doc = json.loads(held.read_text())
        for by_dist in doc["torch"].values():
            for x in by_dist.values():
                del x["reasons"], x["excluded"]
        held.write_text(json.dumps(doc))
    (tmp_path / "resolved" / rn.REQUIRES).unlink()
    names = tmp_path / "resolved" / documents.NAMES_NAME
    body = json.loads(names.read_bytes().partition(b"\n")[2])
    del body["mooncake_read"]
    names.write_bytes(reading.stamped(body, reading.file_sha256(kb)))
    old = rn.held_releases(kb, "nixl-cu12", torch="2.13.0", sglang="0.5.18", python=None,
                           arch=None)
    assert old is not None and not old.says_excluded and old.excluded is None
    for sglang, python, arch in PLANS:
        assert _plan(kb, sglang, python, arch) == _plan(SHIPPED, sglang, python, arch)


def test_a_set_without_mooncake_is_judged_on_what_it_pins(tmp_path: Path) -> None:
    """A worker that runs no mooncake backend needs no mooncake: a file pinning SGLang,
    torch and extensions but no mooncake distribution was called unknown, with "add
    mooncake-…: it is the mooncake that fits"; it is judged on SGLang's torch requirement
    and the extensions, and a note says how to pick a mooncake when one is wanted."""
    req = tmp_path / "requirements.txt"
    req.write_text("sglang==0.5.23\ntorch==2.14.1\nnixl==1.5.1\nsglang-kernel==0.4.10\n")
    got = moonpin.judge_pins([req], kb=SHIPPED)
    assert got.verdict == "compatible", got
    assert not got.updates and not any("mooncake" in r for r in got.reasons), got.reasons
    assert any(n.startswith("no mooncake distribution is pinned: judged on what the files "
                            "pin") for n in got.notes), got.notes
    # the extensions still decide: one without a build for the torch fails the set
    req.write_text("sglang==0.5.23\ntorch==2.14.1\nnixl==1.4.0\n")
    got = moonpin.judge_pins([req], kb=SHIPPED)
    assert got.verdict == "incompatible" and any(r.startswith("nixl==1.4.0: ")
                                                 for r in got.reasons), got.reasons
    # and so does SGLang's torch requirement: torch moves to what it requires, no mooncake
    req.write_text("sglang==0.5.23\ntorch==2.13.0\n")
    got = moonpin.judge_pins([req], kb=SHIPPED)
    assert got.verdict == "incompatible", got
    assert [(u["depName"], u["newVersion"]) for u in got.updates] == [("torch", "2.14.1")]
    w = run_moonpin("pins", "requirements.txt", "--write", cwd=tmp_path)
    assert w.returncode == 0 and "after writing: verdict compatible" in w.stderr, w.stderr
    # a pinned mooncake keeps its verdict (the CUDA 12 build beside a CUDA 13 torch)
    req.write_text("sglang==0.5.23\ntorch==2.14.1\nmooncake-transfer-engine==0.3.13.post1\n")
    got = moonpin.judge_pins([req], kb=SHIPPED)
    assert got.verdict == "incompatible", got


#: what `uv pip compile` / `pip install nixl` of SGLang 0.5.23's stack pins: the meta nixl and
#: both backends it requires exactly (tests/realimg/README.md, image stack-nixlboth)
LOCK = ("sglang==0.5.23\ntorch==2.14.1\nnixl==1.5.1\nnixl-cu12==1.5.1\nnixl-cu13==1.5.1\n"
        "sglang-kernel==0.4.10\nsgl-deep-ep==0.1.2.post1\nflashinfer-python==0.7.2\n"
        "mooncake-transfer-engine-cuda13==0.3.14\n")


def test_a_resolved_lock_with_both_nixl_backends_is_compatible(tmp_path: Path) -> None:
    """The meta nixl loads nixl-cu13's build with CUDA 13 torch 2.14.1; nixl-cu12, which it
    requires too, is installed and never imported (the real import in stack-nixlboth works).
    Before, the lock was incompatible and ``nixl-cu12==1.5.1 -> nixl==1.5.1`` was offered
    beside the file's own ``nixl==1.5.1``."""
    req = tmp_path / "requirements.txt"
    req.write_text(LOCK)
    got = moonpin.judge_pins([req], kb=SHIPPED)
    assert got.verdict == "compatible", got.reasons
    assert not got.updates and not got.reasons
    assert any(n.startswith("nixl-cu12==1.5.1 is installed (nixl==1.5.1 requires it) but not "
                            "loaded") for n in got.notes), got.notes
    assert run_moonpin("pins", "requirements.txt", cwd=tmp_path).returncode == 0


def test_pins_never_propose_a_second_line_of_a_distribution_the_file_pins(
        tmp_path: Path) -> None:
    """nixl-cu12 1.4.0 beside nixl 1.5.1 (which requires nixl-cu12==1.5.1): the newest
    release of the project that loads is nixl 1.5.1, which the file pins already; the pin
    goes to what that release requires of it (before: ``nixl-cu12==1.4.0 -> nixl==1.5.1``,
    a second nixl line), and the written file is compatible."""
    req = tmp_path / "requirements.txt"
    req.write_text("sglang==0.5.23\ntorch==2.14.1\nnixl==1.5.1\nnixl-cu12==1.4.0\n")
    got = moonpin.judge_pins([req], python="3.12", kb=SHIPPED)
    assert got.verdict == "incompatible"
    moved = [(u["depName"], u["newName"], u["newVersion"]) for u in got.updates]
    assert moved == [("nixl-cu12", "nixl-cu12", "1.5.1")], got.updates
    w = run_moonpin("pins", "requirements.txt", "--python", "3.12", "--write", cwd=tmp_path)
    assert "after writing: verdict compatible" in w.stderr, w.stdout + w.stderr
    lines = req.read_text().splitlines()
    assert sum(1 for x in lines if x.startswith("nixl==")) == 1, lines


def test_constraints_exclude_a_companion_every_release_of_which_fails_the_import(
        tmp_path: Path) -> None:
    """SGLang 0.5.21 pins flashinfer-python 0.6.18, whose import refuses a flashinfer-cubin
    at another version (its lock, raise; the real image hunt-fi-0612cubin fails so with
    0.6.12 beside cubin 0.6.13), and the index has no cubin 0.6.18: any cubin installed
    beside it fails the worker, so the constraints exclude it (before: left free, with a
    note that no release 'loads'). With 0.5.23's flashinfer-python 0.7.2 the lock only
    ignores another (the real image stack-cubin imports): left free, said."""
    r = run_moonpin("constraints", "--sglang", "0.5.21", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "flashinfer-cubin<0" in r.stdout.splitlines(), r.stdout
    assert ("flashinfer-cubin is excluded (<0): the knowledge base holds no release of it at "
            "flashinfer-python 0.6.18's version") in r.stdout
    r = run_moonpin("constraints", "--sglang", "0.5.23", cwd=tmp_path)
    assert not any(x.startswith("flashinfer-cubin") for x in r.stdout.splitlines())


@pytest.mark.uv
def test_uv_compiles_the_whole_stack_to_a_lock_pins_calls_compatible(tmp_path: Path) -> None:
    """The real uv, against the package index (pip's own configuration): SGLang 0.5.23's
    worker stack compiled under ``moonpin constraints`` pins the meta nixl and both its
    backends; ``moonpin pins`` of that lock says compatible (before: incompatible, on the
    nixl-cu12 no import loads), saying nixl-cu12 is installed but not loaded."""
    import shutil

    uv = os.environ.get("MOONPIN_UV") or shutil.which("uv")
    if not uv:
        pytest.skip("uv not found: set MOONPIN_UV or put uv on PATH (pip install uv)")
    c = run_moonpin("constraints", "--sglang", "0.5.23", cwd=tmp_path)
    (tmp_path / "c.txt").write_text(c.stdout)
    (tmp_path / "in.txt").write_text(
        "sglang==0.5.23\ntorch==2.14.1\nnixl\nsglang-kernel\nsgl-deep-ep\nflashinfer-python\n"
        "mooncake-transfer-engine-cuda13\n")
    r = subprocess.run([uv, "pip", "compile", "-q", "--no-header", "--no-annotate",
                        "--python-version", "3.12", "--python-platform",
                        "x86_64-manylinux_2_34", "in.txt", "-c", "c.txt", "-o", "lock.txt"],
                       capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    got = dict(x.split("==", 1) for x in (tmp_path / "lock.txt").read_text().splitlines()
               if "==" in x and not x.startswith("#"))
    assert {d: got.get(d) for d in ("nixl", "nixl-cu12", "nixl-cu13")} == dict.fromkeys(
        ("nixl", "nixl-cu12", "nixl-cu13"), _newest("nixl", "2.14.1"))
    p = run_moonpin("pins", "lock.txt", cwd=tmp_path)
    assert p.returncode == 0 and "verdict: compatible" in p.stdout, p.stdout
    assert "nixl-cu12==" in p.stdout and "but not loaded" in p.stdout


def test_pins_of_a_dockerfile_stage_read_torch_from_its_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Dockerfile's arm64 stage makes pins ask the CUDA major of the index's torch wheel
    for that platform: ``_torch.json`` answers it, the scraped facts are not read (before:
    they were, a fifth of ``pins Dockerfile requirements.txt --diff``); the same answer as
    from the facts."""

    from moonpin.resolver.tables import documents

    req = tmp_path / "requirements.txt"
    req.write_text("sglang==0.5.18\ntorch==2.13.0\n"
                   "mooncake-transfer-engine-cuda13==0.3.13.post1\n")
    docker = tmp_path / "Dockerfile"
    docker.write_text("FROM --platform=linux/arm64 lmsysorg/sglang:v0.5.18-cu130\n"
                      "RUN pip install mooncake-transfer-engine==0.3.13.post1\n")

    got = same_as_full(monkeypatch, lambda: moonpin.judge_pins([docker, req],
                                                               kb=SHIPPED).to_json(),
                       refused=facts_reads(), full=[(documents, "load_torch")])
    assert got["updates"] or got["reasons"], got
