"""``moonpin constraints`` on the shipped KB (issue 13): torch held, the fitting mooncake
range, the other distributions excluded; the uv form; opt-in: uv resolves to a set moonpin
judges compatible (marker ``uv``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from moonpin.resolver.graph import CompatGraph
from moonpin.resolver.pins.writing.constraints import constraint_lines
from moonpin.resolver.pins.writing.renovate import plan_stack
from tests.lib.shipped import explain_json, run_moonpin, shipped_graph

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "kb.json"


@pytest.fixture(scope="module")
def g() -> CompatGraph:
    return shipped_graph()


@pytest.mark.parametrize("sglang", ["0.5.4", "0.5.16", "0.5.18", "0.5.22"])
def test_every_version_the_constraints_admit_is_compatible(g: CompatGraph, sglang: str) -> None:
    reqs = [Requirement(x) for x in constraint_lines(g, plan_stack(g, sglang))]
    by = {r.name: r.specifier for r in reqs}
    assert by["sglang"].contains(sglang)
    torches = [str(v) for v in g.torch_versions if by["torch"].contains(v)]
    assert torches
    admitted = [(d, str(v)) for d, v in g.mooncake
                if by[d].contains(v, prereleases=True)]
    assert admitted
    for d, v in admitted:
        for t in torches:
            assert explain_json(g, sglang, f"{d}=={v}", torch=t)["verdict"] == "compatible", (
                d, v, t)
    # every other distribution is excluded outright
    assert {d for d, _ in admitted} != set(g.dists())
    for d in set(g.dists()) - {d for d, _ in admitted}:
        assert str(by[d]) == "<0"


def test_constraints_cli_txt_and_uv_forms() -> None:
    txt = run_moonpin("constraints", "--sglang", "0.5.18")
    assert txt.returncode == 0, txt.stderr
    lines = [x for x in txt.stdout.splitlines() if x and not x.startswith("#")]
    assert "torch==2.13.0,!=2.13.0+cpu" in lines and "sglang==0.5.18" in lines
    assert "mooncake-transfer-engine-cuda13>=0.3.12.post1,<=0.3.13.post1" in lines  # no JIT 0.3.14
    assert "mooncake-transfer-engine<0" in lines
    uv = run_moonpin("constraints", "--sglang", "0.5.18", "--format", "uv")
    assert uv.returncode == 0, uv.stderr
    tomllib = pytest.importorskip("tomllib")
    doc = tomllib.loads(uv.stdout)
    assert doc["tool"]["uv"]["constraint-dependencies"] == lines
    jit = run_moonpin("constraints", "--sglang", "0.5.18", "--allow-jit")
    assert "<=0.3.14" in jit.stdout and "note: mooncake-transfer-engine-cuda13==0.3.14 compiles" \
        in jit.stdout


def test_constraints_bad_input_is_exit_2_with_a_tip() -> None:
    r = run_moonpin("constraints", "--sglang", "9" * 5000)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "tip:" in r.stderr and len(r.stderr) < 2000
    r = run_moonpin("constraints", "--sglang", "0.0.1")
    assert r.returncode == 2 and "not in the knowledge base" in r.stderr


def _uv() -> str:
    found = os.environ.get("MOONPIN_UV") or shutil.which("uv")
    if not found:
        pytest.skip("uv not found: set MOONPIN_UV or put uv on PATH (pip install uv)")
    return found


@pytest.mark.uv
@pytest.mark.parametrize(("sglang", "dist"), [
    ("0.5.18", "mooncake-transfer-engine-cuda13"),
    ("0.5.16", "mooncake-transfer-engine-cuda13"),
    ("0.5.4", "mooncake-transfer-engine"),
])
def test_uv_resolves_the_constraints_to_a_compatible_set(g: CompatGraph, tmp_path: Path,
                                                         sglang: str, dist: str) -> None:
    """torch + mooncake resolved by uv under the constraints (the whole of SGLang 0.5.18 needs
    ``cuda-tile==1.6.0rc5``, an sdist only), then judged by ``moonpin pins``."""
    uv = _uv()
    cons = run_moonpin("constraints", "--sglang", sglang, "--python", "3.12", "--arch", "x86_64")
    assert cons.returncode == 0, cons.stderr
    (tmp_path / "c.txt").write_text(cons.stdout, encoding="utf-8")
    (tmp_path / "req.in").write_text(f"torch\n{dist}\n", encoding="utf-8")
    common = ["--python-version", "3.12", "--python-platform", "x86_64-manylinux_2_28",
              "--no-header", "--no-annotate"]
    r = subprocess.run([uv, "pip", "compile", "req.in", "-c", "c.txt", *common],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    pinned = [x for x in r.stdout.splitlines() if x.startswith(("torch==", "mooncake"))]
    (tmp_path / "requirements.txt").write_text(f"sglang=={sglang}\n" + "\n".join(pinned) + "\n",
                                                encoding="utf-8")
    verdict = run_moonpin("pins", str(tmp_path / "requirements.txt"), "--python", "3.12",
                          "--arch", "x86_64")
    assert verdict.returncode == 0, verdict.stdout + verdict.stderr
    # the other distribution is excluded: asking for it cannot resolve
    other = "mooncake-transfer-engine" if dist.endswith("cuda13") else \
        "mooncake-transfer-engine-cuda13"
    (tmp_path / "bad.in").write_text(f"torch\n{other}\n", encoding="utf-8")
    bad = subprocess.run([uv, "pip", "compile", "bad.in", "-c", "c.txt", *common],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert bad.returncode != 0 and f"{other}<0" in bad.stderr
    # the [tool.uv] form is applied too: a dependency outside it does not resolve
    uvform = run_moonpin("constraints", "--sglang", sglang, "--format", "uv")
    body = "\n".join(x for x in uvform.stdout.splitlines() if not x.startswith("#"))
    newest = plan_stack(g, sglang).mooncake[dist][0]
    (tmp_path / "pyproject.toml").write_text(
        f'[project]\nname = "x"\nversion = "0"\nrequires-python = ">=3.10"\n'
        f'dependencies = ["torch", "{dist}>{newest}"]\n{body}\n', encoding="utf-8")
    over = subprocess.run([uv, "pip", "compile", "pyproject.toml", *common],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert over.returncode != 0, over.stdout


@pytest.mark.parametrize("sglang", ["0.5.23"])
def test_every_extension_release_the_constraints_admit_is_one_pins_calls_compatible(
        g: CompatGraph, tmp_path: Path, sglang: str) -> None:
    """A constraint admitting a release ``moonpin pins`` calls unknown is advice the tool
    itself does not vouch for: ``nixl`` 1.3.0 (its ``nixl-cu13`` build names no torch) was
    admitted by ``nixl>=1.3.0,…`` beside sglang 0.5.23 while ``pins`` of a set holding it
    said unknown. Each admitted release of each extension held, pinned beside the plan's
    SGLang, torch and mooncake (and the allowed release requiring it exactly, if any), is
    judged compatible; the ones left out are said."""
    from moonpin import api
    from moonpin.resolver.pins.writing.renovate import kb_releases

    plan = plan_stack(g, sglang, natives=None)
    by = {r.name: r.specifier for r in (Requirement(x) for x in constraint_lines(g, plan))}
    moon = next(f"{d}=={vs[0]}" for d, vs in plan.mooncake.items())
    releases = kb_releases(g, "native")
    admitted = [(d, v) for d, v in releases if d in plan.natives
                and by[d].contains(v, prereleases=True)]
    assert {d for d, _ in admitted} == set(plan.natives) and len(admitted) > len(plan.natives)
    from moonpin.resolver.pins.judging.requires import exact_pins_of

    for d, v in admitted:
        # a release held because an allowed release requires it exactly (the meta nixl's
        # nixl-cuNN) is installed with that release: pinned beside it
        with_ = next((f"{o}=={ov}\n" for o, ov in admitted
                      if exact_pins_of(g, o, ov, True).get(d) == v), "")
        req = tmp_path / f"{d}-{v}.txt"
        req.write_text(f"sglang=={sglang}\ntorch=={plan.torches[0]}\n{moon}\n{with_}{d}=={v}\n",
                       encoding="utf-8")
        verdict = api.judge_pins([req], kb=SHIPPED).verdict
        assert verdict == "compatible", (d, v, verdict)
    assert any(r.startswith("nixl 1.3.0 is not allowed: the knowledge base cannot say")
               for r in plan.reasons), plan.reasons
