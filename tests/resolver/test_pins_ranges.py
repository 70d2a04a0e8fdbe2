"""Issue 27: ranges and base images get an answer. ``sglang>=0.5.18`` with
``mooncake-transfer-engine>=0.3.10`` was "sglang is not pinned to one version"; ``FROM
lmsysorg/sglang:v0.5.18-cu130`` was not read as a pin at all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from moonpin.resolver.graph import CompatGraph
from moonpin.resolver.pins.read import apply_updates, judge, pinned_set, read_pins
from tests.lib.shipped import shipped_graph

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "kb.json"


@pytest.fixture(scope="module")
def g() -> CompatGraph:
    return shipped_graph()


def _pins_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "moonpin", "--kb", str(SHIPPED), "pins",
                           *args], capture_output=True, text=True, cwd=cwd, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_ranges_that_admit_no_working_set_are_incompatible_and_a_pin_is_proposed(
        tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("sglang>=0.5.18\nmooncake-transfer-engine>=0.3.10\n")
    r = _pins_cli(str(req), "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "incompatible"
    said = " ".join(doc["reasons"])
    assert "sglang>=0.5.18 is a range" in said and "0.5.18 .. 0.5.23" in said
    # the CUDA-12 builds against the CUDA-13 torch those releases pin, counted
    assert "no mooncake-transfer-engine>=0.3.10 release fits" in said
    assert "CUDA major" in said and "build links CUDA 12, torch 2.13.0 is CUDA 13" in said
    ups = [(u["line"], u["depName"], u["newName"], u["updateType"]) for u in doc["updates"]]
    assert ups == [(1, "sglang", "sglang", "pin"),
                   (2, "mooncake-transfer-engine", "mooncake-transfer-engine-cuda13",
                    "replacement")]
    # carried out, the project is one compatible set
    w = _pins_cli(str(req), "--write")
    assert "wrote" in w.stderr, w.stdout + w.stderr
    text = req.read_text()
    assert ">=" not in text and "mooncake-transfer-engine-cuda13==" in text
    again = json.loads(_pins_cli(str(req), "--json").stdout)
    assert (again["verdict"], again["updates"]) == ("compatible", [])


def test_ranges_that_admit_a_working_set_propose_it_inside_the_ranges(
        g: CompatGraph, tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("sglang>=0.5.18,<0.5.22\nmooncake-transfer-engine-cuda13>=0.3.12\n")
    pins, _ = read_pins([req])
    out = judge(g, pinned_set(pins))
    assert out.verdict == "unknown"  # pip picks the releases, not moonpin
    new = {u["depName"]: u["newVersion"] for u in out.updates}
    assert set(new) == {"sglang", "mooncake-transfer-engine-cuda13"}
    assert "0.5.18" <= new["sglang"] < "0.5.22"
    written, problems = apply_updates(pins, out.updates, {str(req): req.read_text()})
    assert problems == []
    req.write_text(written[str(req)])
    pins, _ = read_pins([req])
    assert judge(g, pinned_set(pins)).verdict == "compatible"


def test_a_pinned_sglang_with_a_mooncake_range_that_cannot_fit_says_why(
        g: CompatGraph, tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("sglang==0.5.18\nmooncake-transfer-engine>=0.3.10\n")
    pins, _ = read_pins([req])
    out = judge(g, pinned_set(pins))
    assert out.verdict == "incompatible"
    assert any("no mooncake-transfer-engine>=0.3.10 release fits sglang 0.5.18" in r
               and "CUDA major" in r for r in out.reasons), out.reasons
    (u,) = out.updates
    assert u["newName"] == "mooncake-transfer-engine-cuda13"


def test_a_range_with_no_release_in_the_kb_is_unknown(g: CompatGraph, tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("sglang>=9\nmooncake-transfer-engine-cuda13==0.3.13.post1\n")
    pins, _ = read_pins([req])
    out = judge(g, pinned_set(pins))
    assert out.verdict == "unknown" and out.updates == ()
    assert "no sglang release in the knowledge base is in sglang>=9" in out.reasons[0]


@pytest.mark.parametrize("line", ["FROM lmsysorg/sglang:v0.5.18-cu130",
                                  "FROM --platform=linux/amd64 lmsysorg/sglang:v0.5.18-cu130 AS b",
                                  "from docker.io/lmsysorg/sglang:0.5.18"])
def test_an_sglang_base_image_is_the_pin_its_tag_stands_for(tmp_path: Path, line: str) -> None:
    dock = tmp_path / "Dockerfile"
    dock.write_text(f"{line}\nRUN pip install mooncake-transfer-engine-cuda13==0.3.13.post1\n")
    r = _pins_cli(str(dock), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    (sg,) = [p for p in doc["pins"] if p["name"] == "sglang"]
    assert (sg["version"], sg["kind"], sg["line"]) == ("0.5.18", "docker-image", 1)
    assert doc["verdict"] == "compatible"
    # a move of the stack rewrites the tag, and only its version
    w = _pins_cli(str(dock), "--strategy", "latest", "--write")
    assert "wrote" in w.stderr, w.stdout + w.stderr
    first = dock.read_text().splitlines()[0]
    assert first == line.replace("0.5.18", "0.5.21"), first


def test_a_base_image_that_is_not_sglang_or_has_no_version_is_no_pin(tmp_path: Path) -> None:
    dock = tmp_path / "Dockerfile"
    dock.write_text("FROM python:3.12\nFROM lmsysorg/sglang:latest\nFROM ${BASE}\n"
                    "FROM lmsysorg/sglang:${TAG}\nRUN pip install sglang==0.5.18\n")
    pins, errors = read_pins([dock])
    assert errors == []
    assert [(p.name, p.kind) for p in pins] == [("sglang", "pip-install")]


@pytest.mark.parametrize(("arg", "use"), [
    ("ARG MOONCAKE_VERSION=0.3.12", "${MOONCAKE_VERSION}"),
    ("ARG MC=0.3.12", "$MC"),
    ("ENV MOONCAKE_VERSION=0.3.12", "${MOONCAKE_VERSION:-0.3.11}"),
])
def test_a_dockerfile_arg_belongs_to_the_distribution_installed_with_it(
        tmp_path: Path, arg: str, use: str) -> None:
    """Issue 27: ``ARG MOONCAKE_VERSION`` used by ``pip install
    mooncake-transfer-engine-cuda13==${MOONCAKE_VERSION}`` was read as a pin of
    ``mooncake-transfer-engine``: a false conflict with the project's -cuda13 pin, and a
    write refused ("carries a version only")."""
    dock = tmp_path / "Dockerfile"
    dock.write_text(f"FROM python:3.12\n{arg}\n"
                    f"RUN pip install sglang==0.5.18 mooncake-transfer-engine-cuda13=={use}\n")
    req = tmp_path / "requirements.txt"
    req.write_text("sglang==0.5.18\nmooncake-transfer-engine-cuda13==0.3.12\n")
    r = _pins_cli(str(req), str(dock), "--json")
    doc = json.loads(r.stdout)
    (a,) = [p for p in doc["pins"] if p["kind"] == "dockerfile-arg"]
    assert (a["name"], a["version"], a["line"]) == ("mooncake-transfer-engine-cuda13",
                                                     "0.3.12", 2)
    assert doc["conflicts"] == []
    # the default of ${VAR:-0.3.11} is not what is installed (the file sets VAR): it is no
    # disagreement, and it moves with the variable
    assert sorted((u["packageFile"], u["line"]) for u in doc["updates"]) == [
        (str(dock), 2), *([(str(dock), 3)] if ":-" in use else []), (str(req), 2)]
    w = _pins_cli(str(req), str(dock), "--write")
    assert "not written" not in w.stderr, w.stderr
    assert dock.read_text().splitlines()[1] == arg.replace("0.3.12", "0.3.13.post1")
    assert dock.read_text().splitlines()[2].endswith(
        use.replace("0.3.11", "0.3.13.post1")), dock.read_text()
    again = json.loads(_pins_cli(str(req), str(dock), "--json").stdout)
    assert (again["verdict"], again["updates"], again["conflicts"]) == ("compatible", [], [])


def test_a_replacement_through_a_dockerfile_arg_renames_where_it_is_installed(
        tmp_path: Path) -> None:
    """The multi-file project of issue 27 (requirements + pyproject + Dockerfile): a switch
    of distribution through ``ARG MOONCAKE_VERSION`` was 'not written' (the ARG carries a
    version only) and the install line was flagged as a second distribution."""
    dock = tmp_path / "Dockerfile"
    dock.write_text("FROM lmsysorg/sglang:v0.5.18-cu130\nARG MOONCAKE_VERSION=0.3.10\n"
                    "RUN pip install mooncake-transfer-engine==${MOONCAKE_VERSION}\n")
    doc = json.loads(_pins_cli(str(dock), "--json").stdout)
    assert not any("two mooncake distributions" in r for r in doc["reasons"]), doc["reasons"]
    w = _pins_cli(str(dock), "--write")
    assert w.returncode == 0 and "not written" not in w.stderr, w.stdout + w.stderr
    assert dock.read_text().splitlines()[1:] == [
        "ARG MOONCAKE_VERSION=0.3.13.post1",
        "RUN pip install mooncake-transfer-engine-cuda13==${MOONCAKE_VERSION}"]
