"""Issue 38 (1): every torch requirement moonpin writes keeps a CPU build out, and ``pins``
judges what the project's own index options can install. PEP 440's ``==2.13.0`` admits
``2.13.0+cpu`` and pip and uv take the highest local build: proven here with the real pip
(and uv, marker ``uv``) resolving against a find-links folder holding tiny fake torch wheels
``torch-2.13.0+cpu`` and ``torch-2.13.0`` (no index: ``--no-index``, pip's configuration
ignored)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from moonpin.kb.distributions import torch_cpu_exclusions, torch_requirement
from moonpin.preflight.judge.fixes import pip_line, torch_req
from tests.lib.shipped import run_moonpin
from tests.lib.wheels import build_wheel

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "kb.json"
#: pip without its configuration (this machine's names a find-links folder of its own)
PIP_ENV = {**{k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))},
           "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


@pytest.fixture
def cpu_links(tmp_path: Path) -> Path:
    """A find-links folder with a CPU and an index-style build of torch 2.13.0."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    for version in ("2.13.0+cpu", "2.13.0"):
        name, data = build_wheel("torch", version, {"torch/__init__.py": f"v = {version!r}\n"})
        (folder / name).write_bytes(data)
    return folder


def _pip_picks(cwd: Path, *args: str) -> str:
    """The torch the real pip would install (``pip install --dry-run --report``)."""
    report = cwd / "report.json"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index",
                        "--quiet", "--report", str(report), *args],
                       capture_output=True, text=True, timeout=300, cwd=cwd, env=PIP_ENV)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(report.read_text())
    (torch,) = [i["metadata"]["version"] for i in doc["install"]
                if i["metadata"]["name"] == "torch"]
    return str(torch)


def test_pip_takes_the_cpu_build_for_a_bare_pin(tmp_path: Path, cpu_links: Path) -> None:
    """The premise, in the real pip: ``torch==2.13.0`` installs ``2.13.0+cpu``, the written
    requirement the index's build."""
    assert _pip_picks(tmp_path, "--find-links", str(cpu_links), "torch==2.13.0") == \
        "2.13.0+cpu"
    assert _pip_picks(tmp_path, "--find-links", str(cpu_links),
                      torch_requirement("2.13.0")) == "2.13.0"


def test_the_one_spelling() -> None:
    assert torch_requirement("2.13.0") == "torch==2.13.0,!=2.13.0+cpu"
    assert torch_requirement("2.13.0+cu130") == "torch==2.13.0+cu130"  # one build already
    assert torch_cpu_exclusions(["2.8.0", "2.9.0"]) == ["!=2.8.0+cpu", "!=2.9.0+cpu"]
    assert torch_req("2.13.0") == torch_requirement("2.13.0")
    assert "'torch==2.13.0,!=2.13.0+cpu'" in pip_line(["torch==2.13.0"], torch="2.13.0+cpu",
                                                      owned=[], prefix="mooncake-transfer-engine")


@pytest.mark.parametrize("sglang", ["0.5.18", "0.5.4"])
def test_constraints_exclude_the_cpu_build(tmp_path: Path, cpu_links: Path,
                                           sglang: str) -> None:
    r = run_moonpin("constraints", "--sglang", sglang)
    assert r.returncode == 0, r.stderr
    (line,) = [x for x in r.stdout.splitlines() if x.startswith("torch")]
    spec = Requirement(line).specifier
    torches = [v for v in ("2.8.0", "2.9.0", "2.13.0") if spec.contains(v)]
    assert torches
    assert not any(spec.contains(f"{v}+cpu") for v in torches), line
    uv = run_moonpin("constraints", "--sglang", sglang, "--format", "uv")
    assert json.dumps(line) in uv.stdout
    if sglang == "0.5.18":
        (tmp_path / "c.txt").write_text(r.stdout)
        assert _pip_picks(tmp_path, "--find-links", str(cpu_links), "-c", "c.txt",
                          "torch") == "2.13.0"


def test_renovate_holds_torch_off_the_cpu_build() -> None:
    r = run_moonpin("renovate", "--sglang", "0.5.18")
    assert r.returncode == 0, r.stderr
    (rule,) = [x for x in json.loads(r.stdout)["packageRules"]
               if x["matchPackageNames"] == ["torch"]]
    value = rule["allowedVersions"]
    # a PEP 440 range (Renovate's pep440 versioning parses it: @renovatebot/pep440's
    # validRange is true for it, and its satisfies() agrees with packaging's here)
    assert not value.startswith("/"), value
    spec = SpecifierSet(value)
    assert spec.contains("2.13.0") and not spec.contains("2.13.0+cpu")
    two = json.loads(run_moonpin("renovate", "--sglang", "0.5.4").stdout)["packageRules"]
    (rx,) = [x["allowedVersions"] for x in two if x["matchPackageNames"] == ["torch"]]
    import re

    assert rx.startswith("/") and not re.match(rx[1:-1], "2.9.0+cpu")


def _files(root: Path, head: str, torch: str = "torch==2.13.0") -> Path:
    req = root / "requirements.txt"
    req.write_text(f"{head}sglang==0.5.18\n{torch}\n"
                   "mooncake-transfer-engine-cuda13==0.3.13.post1\n")
    return req


def _torch_only(req: Path) -> Path:
    """The file's options and torch line (the fake folder holds no sglang or mooncake)."""
    out = req.with_name("torch-only.txt")
    out.write_text("".join(x for x in req.read_text().splitlines(keepends=True)
                           if not x.startswith(("sglang", "mooncake"))))
    return out


@pytest.mark.parametrize("option", ["--find-links {links}\n", "-f {links}\n",
                                    "--find-links={links}\n", "--find-links file://{links}\n"])
def test_pins_finds_a_find_links_folder_with_a_cpu_build(tmp_path: Path, cpu_links: Path,
                                                         option: str) -> None:
    req = _files(tmp_path, option.format(links=cpu_links))
    assert _pip_picks(tmp_path, "-r", str(_torch_only(req))) == "2.13.0+cpu"
    before = run_moonpin("pins", "requirements.txt", cwd=tmp_path)
    assert before.returncode == 1, before.stdout + before.stderr
    assert "verdict: incompatible" in before.stdout
    assert "admits 2.13.0+cpu" in before.stdout and "requirements.txt:1" in before.stdout
    w = run_moonpin("pins", "requirements.txt", "--write", cwd=tmp_path)
    assert w.returncode == 0, w.stdout + w.stderr
    assert "torch==2.13.0,!=2.13.0+cpu\n" in req.read_text()
    assert run_moonpin("pins", "requirements.txt", cwd=tmp_path).returncode == 0
    # the advice, carried out by the real pip: the index's build
    assert _pip_picks(tmp_path, "-r", str(_torch_only(req))) == "2.13.0"


def test_pins_relative_find_links_is_the_files_folder(tmp_path: Path, cpu_links: Path) -> None:
    sub = tmp_path / "proj"
    sub.mkdir()
    _files(sub, "--find-links ../wheels\n")
    r = run_moonpin("pins", "proj/requirements.txt", cwd=tmp_path)
    assert r.returncode == 1 and "admits 2.13.0+cpu" in r.stdout, r.stdout


def test_pins_an_extra_index_can_supply_one(tmp_path: Path) -> None:
    _files(tmp_path, "--extra-index-url https://download.example/whl/cpu\n")
    r = run_moonpin("pins", "requirements.txt", "--json", cwd=tmp_path)
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    (u,) = doc["updates"]
    assert u["newValue"] == "==2.13.0,!=2.13.0+cpu" and u["exclude"] == ["!=2.13.0+cpu"]
    assert any("--extra-index-url" in x for x in doc["reasons"])


def test_pins_leaves_what_cannot_let_a_cpu_build_in(tmp_path: Path) -> None:
    """No option, a folder without a CPU torch, an exclusion already written, a labelled
    build: nothing to say."""
    empty = tmp_path / "empty"
    empty.mkdir()
    for head, torch in [("", "torch==2.13.0"), (f"--find-links {empty}\n", "torch==2.13.0"),
                        ("--extra-index-url https://x.example/cpu\n",
                         "torch==2.13.0,!=2.13.0+cpu")]:
        _files(tmp_path, head, torch)
        r = run_moonpin("pins", "requirements.txt", cwd=tmp_path)
        assert r.returncode == 0, (head, torch, r.stdout + r.stderr)


def test_pins_an_included_file_and_a_constraints_file_count(tmp_path: Path,
                                                            cpu_links: Path) -> None:
    (tmp_path / "common.txt").write_text(f"--find-links {cpu_links}\n")
    _files(tmp_path, "-c common.txt\n")
    r = run_moonpin("pins", "requirements.txt", cwd=tmp_path)
    assert r.returncode == 1 and "common.txt:1" in r.stdout, r.stdout


def _pyproject(root: Path, tail: str, torch: str = "torch==2.13.0") -> None:
    (root / "pyproject.toml").write_text(
        '[project]\nname = "x"\nversion = "0"\nrequires-python = ">=3.11"\n'
        f'dependencies = ["sglang==0.5.18", "{torch}", '
        '"mooncake-transfer-engine-cuda13==0.3.13.post1"]\n' + tail)


def test_pins_reads_uv_indexes(tmp_path: Path, cpu_links: Path) -> None:
    index = f'\n[[tool.uv.index]]\nname = "cpu"\nurl = "{cpu_links}"\nformat = "flat"\n'
    _pyproject(tmp_path, index)
    r = run_moonpin("pins", "pyproject.toml", cwd=tmp_path)
    assert r.returncode == 1 and "[[tool.uv.index]]" in r.stdout, r.stdout
    w = run_moonpin("pins", "pyproject.toml", "--write", cwd=tmp_path)
    assert w.returncode == 0, w.stdout + w.stderr
    assert '"torch==2.13.0,!=2.13.0+cpu"' in (tmp_path / "pyproject.toml").read_text()
    # explicit: only what [tool.uv.sources] sends there comes from it
    _pyproject(tmp_path, index + "explicit = true\n")
    assert run_moonpin("pins", "pyproject.toml", cwd=tmp_path).returncode == 0
    _pyproject(tmp_path, index + 'explicit = true\n[tool.uv.sources]\ntorch = '
               '{ index = "cpu" }\n')
    assert run_moonpin("pins", "pyproject.toml", cwd=tmp_path).returncode == 1
    _pyproject(tmp_path, '\n[tool.uv]\nextra-index-url = ["https://x.example/cpu"]\n')
    assert run_moonpin("pins", "pyproject.toml", cwd=tmp_path).returncode == 1


def test_a_torch_update_writes_the_exclusion(tmp_path: Path) -> None:
    """A move of torch writes ``!=V+cpu`` with the new version and drops the old one's."""
    req = tmp_path / "requirements.txt"
    for torch in ("torch==2.11.0", "torch==2.11.0,!=2.11.0+cpu", "torch==2.11.0, != 2.11.0+cpu"):
        req.write_text(f"sglang==0.5.18\n{torch}  # gpu\n"
                       "mooncake-transfer-engine-cuda13==0.3.13.post1\n")
        w = run_moonpin("pins", "requirements.txt", "--write", cwd=tmp_path)
        assert w.returncode == 0, (torch, w.stdout + w.stderr)
        assert "torch==2.13.0,!=2.13.0+cpu  # gpu\n" in req.read_text(), req.read_text()


def _uv() -> str:
    found = os.environ.get("MOONPIN_UV") or shutil.which("uv")
    if not found:
        pytest.skip("uv not found: set MOONPIN_UV or put uv on PATH (pip install uv)")
    return found


@pytest.mark.uv
def test_uv_takes_what_moonpin_writes(tmp_path: Path, cpu_links: Path) -> None:
    uv = _uv()

    def compile_(*args: str) -> str:
        r = subprocess.run([uv, "pip", "compile", "-q", "--no-header", "--no-annotate",
                            "--no-index", "--find-links", str(cpu_links), *args],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path,
                           env=PIP_ENV)
        assert r.returncode == 0, r.stderr
        return next(x for x in r.stdout.splitlines() if x.startswith("torch=="))

    (tmp_path / "bare.in").write_text("torch==2.13.0\n")
    assert compile_("bare.in") == "torch==2.13.0+cpu"  # the premise
    cons = run_moonpin("constraints", "--sglang", "0.5.18")
    (tmp_path / "c.txt").write_text("\n".join(x for x in cons.stdout.splitlines()
                                              if x.startswith("torch")) + "\n")
    (tmp_path / "req.in").write_text("torch\n")
    assert compile_("req.in", "-c", "c.txt") == "torch==2.13.0"
    uvform = run_moonpin("constraints", "--sglang", "0.5.18", "--format", "uv").stdout
    body = "\n".join(x for x in uvform.splitlines()
                     if not x.startswith("#") and "sglang" not in x and "mooncake" not in x)
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\nversion = "0"\nrequires-python = ">=3.10"\n'
        f'dependencies = ["torch"]\n{body}\n')
    assert compile_("pyproject.toml") == "torch==2.13.0"


# A range admits the local builds of every release inside it, and pip takes the highest
# version it admits: `torch>=2.13,<2.14` over a folder holding 2.13.0+cpu installs the CPU
# build as `==2.13.0` does. The exclusions are written after the range, which stays.

@pytest.mark.parametrize("spec", [">=2.13,<2.14", "~=2.13.0", "<2.14"])
def test_pins_finds_a_range_that_admits_a_cpu_build(tmp_path: Path, cpu_links: Path,
                                                    spec: str) -> None:
    req = _files(tmp_path, f"--find-links {cpu_links}\n", f"torch{spec}")
    assert _pip_picks(tmp_path, "-r", str(_torch_only(req))) == "2.13.0+cpu"  # the premise
    before = run_moonpin("pins", "requirements.txt", cwd=tmp_path)
    assert before.returncode == 1, before.stdout + before.stderr
    assert f"torch{spec} at requirements.txt:" in before.stdout
    assert "admits 2.13.0+cpu, a CPU build" in before.stdout, before.stdout
    w = run_moonpin("pins", "requirements.txt", "--write", cwd=tmp_path)
    assert w.returncode == 0, w.stdout + w.stderr
    assert f"torch{spec},!=2.13.0+cpu\n" in req.read_text()  # the range kept
    assert run_moonpin("pins", "requirements.txt", cwd=tmp_path).returncode == 0
    assert _pip_picks(tmp_path, "-r", str(_torch_only(req))) == "2.13.0"


def test_a_range_is_told_its_later_releases_are_not_excluded(tmp_path: Path,
                                                            cpu_links: Path) -> None:
    """The exclusions name the KB's releases; a later one the range admits comes in as its
    CPU build once the folder holds it. The reason says so and names the exact pin, which
    the real pip then holds to the index's build even with that later CPU build there."""
    req = _files(tmp_path, f"--find-links {cpu_links}\n", "torch>=2.13,<2.14")
    r = run_moonpin("pins", "requirements.txt", cwd=tmp_path)
    assert "a later release the range admits is not excluded" in r.stdout, r.stdout
    assert "pin torch==2.13.0 to keep it out for good" in r.stdout, r.stdout
    assert run_moonpin("pins", "requirements.txt", "--write", cwd=tmp_path).returncode == 0
    name, data = build_wheel("torch", "2.13.1+cpu", {"torch/__init__.py": ""})
    (cpu_links / name).write_bytes(data)  # a later release, published after the KB's
    assert _pip_picks(tmp_path, "-r", str(_torch_only(req))) == "2.13.1+cpu"  # the risk
    req.write_text(req.read_text().replace("torch>=2.13,<2.14,", "torch==2.13.0,"))
    assert _pip_picks(tmp_path, "-r", str(_torch_only(req))) == "2.13.0"  # the advice


def test_pins_leaves_a_range_the_cpu_build_is_outside(tmp_path: Path, cpu_links: Path) -> None:
    """Controls: a range below the folder's CPU build, and one whose exclusion is written."""
    for torch in ("torch>=2.12,<2.13", "torch>=2.13,<2.14,!=2.13.0+cpu"):
        _files(tmp_path, f"--find-links {cpu_links}\n", torch)
        r = run_moonpin("pins", "requirements.txt", cwd=tmp_path)
        assert "a CPU build" not in r.stdout, (torch, r.stdout)


# No torch pin at all, or an unpinned `torch`: pip meets the pinned SGLang's own
# `Requires-Dist: torch==V`, which admits V+cpu as a pin does. A fake SGLang wheel of the
# same requirement stands in for the index's (the shipped KB says what the real one requires).

def _sglang_links(tmp_path: Path, cpu_links: Path) -> str:
    """The shipped KB's torch requirement of SGLang 0.5.18, and a fake 0.5.18 wheel with
    it in the folder."""
    from packaging.version import Version

    from moonpin.resolver.graph import CompatGraph, torch_lines

    g = CompatGraph(None, kb_path=str(SHIPPED))
    (spec,) = {str(s) for _, s in torch_lines(g.sglang[Version("0.5.18")])}
    name, data = build_wheel("sglang", "0.5.18", {"sglang/__init__.py": ""},
                             requires_dist=[f"torch{spec}"])
    (cpu_links / name).write_bytes(data)
    return str(spec)


def _pip_picks_all(cwd: Path, req: Path) -> str:
    lines = [x for x in req.read_text().splitlines() if not x.startswith("mooncake")]
    only = req.with_name("no-mooncake.txt")
    only.write_text("\n".join(lines) + "\n")
    return _pip_picks(cwd, "-r", str(only))


def test_pins_an_unpinned_torch_takes_sglangs_requirement(tmp_path: Path,
                                                         cpu_links: Path) -> None:
    spec = _sglang_links(tmp_path, cpu_links)
    assert spec == "==2.13.0", spec  # the premise the folder was built for
    req = _files(tmp_path, f"--find-links {cpu_links}\n", "torch")
    assert _pip_picks_all(tmp_path, req) == "2.13.0+cpu"
    r = run_moonpin("pins", "requirements.txt", cwd=tmp_path)
    assert r.returncode == 1 and "which sglang==0.5.18 requires as torch==2.13.0" in r.stdout, \
        r.stdout
    w = run_moonpin("pins", "requirements.txt", "--write", cwd=tmp_path)
    assert w.returncode == 0, w.stdout + w.stderr
    assert "\ntorch==2.13.0,!=2.13.0+cpu\n" in req.read_text()
    assert _pip_picks_all(tmp_path, req) == "2.13.0"


def test_pins_no_torch_pin_is_said_with_the_line_to_add(tmp_path: Path,
                                                        cpu_links: Path) -> None:
    _sglang_links(tmp_path, cpu_links)
    req = tmp_path / "requirements.txt"
    req.write_text(f"--find-links {cpu_links}\nsglang==0.5.18\n"
                   "mooncake-transfer-engine-cuda13==0.3.13.post1\n")
    assert _pip_picks_all(tmp_path, req) == "2.13.0+cpu"
    r = run_moonpin("pins", "requirements.txt", cwd=tmp_path)
    assert r.returncode == 1, r.stdout
    assert ("sglang==0.5.18 at requirements.txt:2 requires torch==2.13.0, which admits "
            "2.13.0+cpu") in r.stdout and "pin torch beside it: torch==2.13.0,!=2.13.0+cpu" \
        in r.stdout, r.stdout
    before = req.read_text()
    assert run_moonpin("pins", "requirements.txt", "--write", cwd=tmp_path).returncode == 1
    assert req.read_text() == before  # no line to write: said, not written
    # the advice carried out: the line added, pins and pip agree
    req.write_text(before + "torch==2.13.0,!=2.13.0+cpu\n")
    assert run_moonpin("pins", "requirements.txt", cwd=tmp_path).returncode == 0
    assert _pip_picks_all(tmp_path, req) == "2.13.0"
    # control: a base image's SGLang brings its torch (pip installs none)
    docker = tmp_path / "Dockerfile"
    docker.write_text(f"FROM lmsysorg/sglang:v0.5.18-cu130\nRUN pip install -f {cpu_links} "
                      "mooncake-transfer-engine-cuda13==0.3.13.post1\n")
    r = run_moonpin("pins", "Dockerfile", cwd=tmp_path)
    assert "a CPU build" not in r.stdout, r.stdout
