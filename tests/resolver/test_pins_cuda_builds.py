"""Issue 38's leftover (b): a torch build of the wrong CUDA major is as wrong as a CPU one.
``torch==2.14.1`` admits every local build of 2.14.1 and pip and uv take the highest, so a
``2.14.1+cu126`` that the project's own find-links folder (or PyTorch's ``…/whl/cu126``
index) offers is installed where the stack was judged with the index's CUDA 13 build.
``pins`` flags it where the file's index options can supply it and writes the exclusion;
proven with the real pip here (and uv, marker ``uv``) on tiny fake torch wheels."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from moonpin.resolver.pins.reading.base import Pin
from moonpin.resolver.pins.reading.sources import Source, build_findings, cpu_build
from tests.lib.shipped import run_moonpin
from tests.lib.wheels import build_wheel

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "kb.json"
#: pip and uv without this machine's configuration (it names a find-links folder of its own)
CLEAN_ENV = {**{k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))},
             "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1",
             "PIP_DISABLE_PIP_VERSION_CHECK": "1", "UV_NO_CONFIG": "1"}
STACK = "sglang==0.5.23\ntorch==2.14.1\nmooncake-transfer-engine-cuda13==0.3.14\n"


def _links(root: Path, *versions: str) -> Path:
    folder = root / "wheels"
    folder.mkdir(exist_ok=True)
    for version in versions:
        name, data = build_wheel("torch", version, {"torch/__init__.py": f"v = {version!r}\n"})
        (folder / name).write_bytes(data)
    return folder


def _pip_picks(cwd: Path, links: Path, requirement: str) -> str:
    """The torch the real pip installs for ``requirement`` (``--dry-run --report``)."""
    report = cwd / "report.json"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index",
                        "--quiet", "--find-links", str(links), "--report", str(report),
                        requirement], capture_output=True, text=True, timeout=300, cwd=cwd,
                       env=CLEAN_ENV)
    assert r.returncode == 0, r.stdout + r.stderr
    (torch,) = [i["metadata"]["version"] for i in json.loads(report.read_text())["install"]
                if i["metadata"]["name"] == "torch"]
    return str(torch)


def _torch_line(req: Path) -> str:
    return next(x for x in req.read_text().splitlines() if x.startswith("torch"))


def test_a_cuda_12_build_in_the_files_find_links_is_flagged_and_kept_out(
        tmp_path: Path) -> None:
    links = _links(tmp_path, "2.14.1", "2.14.1+cu126")  # the index's build, and a CUDA 12 one
    assert _pip_picks(tmp_path, links, "torch==2.14.1") == "2.14.1+cu126"  # the premise
    req = tmp_path / "requirements.txt"
    req.write_text("--find-links wheels\n" + STACK)
    r = run_moonpin("pins", "requirements.txt", "--python", "3.12", cwd=tmp_path)
    assert r.returncode == 1, r.stdout
    assert "admits 2.14.1+cu126, a CUDA 12 build (the index's torch 2.14.1, judged here, is " \
           "CUDA 13)" in r.stdout, r.stdout
    w = run_moonpin("pins", "requirements.txt", "--python", "3.12", "--write", cwd=tmp_path)
    assert w.returncode == 0, w.stdout + w.stderr
    line = _torch_line(req)
    assert line == "torch==2.14.1,!=2.14.1+cpu,!=2.14.1+cu126", line
    assert _pip_picks(tmp_path, links, line) == "2.14.1"  # the advice, carried out in pip


def test_a_build_of_the_stacks_own_cuda_is_no_finding(tmp_path: Path) -> None:
    _links(tmp_path, "2.14.1", "2.14.1+cu130")
    (tmp_path / "requirements.txt").write_text("--find-links wheels\n" + STACK)
    r = run_moonpin("pins", "requirements.txt", "--python", "3.12", cwd=tmp_path)
    assert r.returncode == 0 and "verdict: compatible" in r.stdout, r.stdout


@pytest.mark.parametrize(("url", "flagged"), [
    ("https://download.example/whl/cu126", "2.14.1+cu126"),
    ("https://download.example/whl/cu126/", "2.14.1+cu126"),
    ("https://download.example/whl/cu130", None),
    ("https://download.example/simple", None),
])
def test_an_index_named_for_a_label_supplies_that_label(url: str, flagged: str | None) -> None:
    """An index is not fetched: any may hold a CPU build (that finding is the CPU one), and
    one whose last path segment is a local label, as PyTorch names its indexes, that
    label's builds."""
    pin = Pin("torch", "==2.14.1", "2.14.1", "r.txt", 2, 7, "torch==2.14.1", "requirements")
    src = Source("r.txt", 1, "--extra-index-url", url)
    assert src.supplies("2.14.1")[0] == "2.14.1+cpu"

    def wrong(public: str, build: str) -> str | None:
        return cpu_build(public, build) or ("a CUDA 12 build" if "cu12" in build else None)

    (found,) = build_findings([pin], [], [src], wrong)
    assert ("!=2.14.1+cu126" in found.exclude) is (flagged is not None), found
    assert "!=2.14.1+cpu" in found.exclude


def test_a_pin_already_excluding_the_build_is_left(tmp_path: Path) -> None:
    _links(tmp_path, "2.14.1", "2.14.1+cu126")
    (tmp_path / "requirements.txt").write_text(
        "--find-links wheels\n" + STACK.replace("torch==2.14.1",
                                                "torch==2.14.1,!=2.14.1+cpu,!=2.14.1+cu126"))
    r = run_moonpin("pins", "requirements.txt", "--python", "3.12", cwd=tmp_path)
    assert r.returncode == 0, r.stdout


@pytest.mark.uv
def test_uv_takes_what_pins_writes(tmp_path: Path) -> None:
    uv = os.environ.get("MOONPIN_UV") or shutil.which("uv")
    if not uv:
        pytest.skip("uv not found: set MOONPIN_UV or put uv on PATH (pip install uv)")
    links = _links(tmp_path, "2.14.1", "2.14.1+cu126")

    def compile_(line: str) -> str:
        (tmp_path / "in.txt").write_text(line + "\n")
        r = subprocess.run([uv, "pip", "compile", "-q", "--no-header", "--no-annotate",
                            "--no-index", "--find-links", str(links), "in.txt"],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path,
                           env=CLEAN_ENV)
        assert r.returncode == 0, r.stderr
        return next(x for x in r.stdout.splitlines() if x.startswith("torch=="))

    assert compile_("torch==2.14.1") == "torch==2.14.1+cu126"  # the premise
    req = tmp_path / "requirements.txt"
    req.write_text("--find-links wheels\n" + STACK)
    w = run_moonpin("pins", "requirements.txt", "--python", "3.12", "--write", cwd=tmp_path)
    assert w.returncode == 0, w.stdout + w.stderr
    assert compile_(_torch_line(req)) == "torch==2.14.1"


# Issue 38's leftover (c): the index options of a Dockerfile's `RUN pip install` line (and
# `uv pip install`) are read like a requirements file's own.

def _run_words(dockerfile: Path) -> list[str]:
    """The words of the Dockerfile's `pip install` line, continuations joined (as sh reads
    them: it is what `docker build` runs)."""
    import shlex

    text = dockerfile.read_text().replace("\\\n", " ")
    line = next(x for x in text.splitlines() if "pip install" in x)
    return shlex.split(line.partition("RUN")[2])


@pytest.mark.parametrize(("install", "option"), [
    ("pip install -f /opt/wheels", "--find-links /opt/wheels"),
    ("pip install --find-links=/opt/wheels", "--find-links /opt/wheels"),
    ("python -m pip install --no-cache-dir -f/opt/wheels", "--find-links /opt/wheels"),
    ("uv pip install --system --find-links /opt/wheels", "--find-links /opt/wheels"),
])
def test_a_dockerfiles_find_links_is_read(tmp_path: Path, install: str, option: str) -> None:
    links = _links(tmp_path, "2.14.1", "2.14.1+cpu")
    docker = tmp_path / "Dockerfile"
    docker.write_text(f"FROM python:3.12\nCOPY wheels /opt/wheels\nRUN {install} \\\n"
                      "    sglang==0.5.23 torch==2.14.1 mooncake-transfer-engine-cuda13==0.3.14\n")
    r = run_moonpin("pins", "Dockerfile", "--python", "3.12", cwd=tmp_path)
    assert r.returncode == 1 and f"which {option} (Dockerfile:3) can supply" in r.stdout, \
        r.stdout
    # the folder the image copies is the build context's wheels/: it was listed
    assert "admits 2.14.1+cpu, a CPU build," in r.stdout
    w = run_moonpin("pins", "Dockerfile", "--python", "3.12", "--write", cwd=tmp_path)
    assert w.returncode == 0, w.stdout + w.stderr
    torch = next(x for x in _run_words(docker) if x.startswith("torch"))
    assert torch == "torch==2.14.1,!=2.14.1+cpu", docker.read_text()
    assert _pip_picks(tmp_path, links, "torch==2.14.1") == "2.14.1+cpu"  # the premise
    assert _pip_picks(tmp_path, links, torch) == "2.14.1"  # the written line, in pip


def test_a_dockerfiles_extra_index_and_the_files_it_installs_are_read(tmp_path: Path) -> None:
    """An index the line names (PyTorch's layout: a CUDA 12 one), and the find-links of a
    requirements file the line installs with -r (found through COPY)."""
    docker = tmp_path / "Dockerfile"
    docker.write_text("FROM python:3.12\nRUN pip install --extra-index-url "
                      "https://download.example/whl/cu126 \\\n    sglang==0.5.23 "
                      "torch==2.14.1 mooncake-transfer-engine-cuda13==0.3.14\n")
    r = run_moonpin("pins", "Dockerfile", "--python", "3.12", cwd=tmp_path)
    assert r.returncode == 1 and "2.14.1+cu126, a CUDA 12 build" in r.stdout, r.stdout
    _links(tmp_path, "2.14.1+cpu")
    (tmp_path / "req").mkdir()
    (tmp_path / "req" / "gpu.txt").write_text("--find-links ../wheels\n")
    docker.write_text("FROM python:3.12\nCOPY req /app/req\nCOPY wheels /app/wheels\n"
                      "WORKDIR /app\nRUN pip install -r req/gpu.txt sglang==0.5.23 "
                      "torch==2.14.1 mooncake-transfer-engine-cuda13==0.3.14\n")
    r = run_moonpin("pins", "Dockerfile", "--python", "3.12", cwd=tmp_path)
    assert r.returncode == 1 and "--find-links ../wheels (req/gpu.txt:1)" in r.stdout, r.stdout


def test_an_option_value_is_no_requirement(tmp_path: Path) -> None:
    """`-f torch` (a folder named like a package) is the option's value, not a pin."""
    docker = tmp_path / "Dockerfile"
    docker.write_text("FROM python:3.12\nRUN pip install -f torch --index-url "
                      "https://x.example/simple sglang==0.5.23\n")
    r = run_moonpin("pins", "Dockerfile", "--json", cwd=tmp_path)
    assert [p["name"] for p in json.loads(r.stdout)["pins"]] == ["sglang"], r.stdout


# A Dockerfile's environment can name the index options too: pip reads `PIP_FIND_LINKS`,
# `PIP_EXTRA_INDEX_URL`, … (a list's values split at white space) and uv its `UV_*`, for
# every install after them.

@pytest.mark.parametrize(("setting", "option"), [
    ("ENV PIP_FIND_LINKS=/opt/wheels", "--find-links /opt/wheels"),
    ('ENV PIP_FIND_LINKS="/opt/none /opt/wheels" PIP_NO_CACHE_DIR=1', "--find-links /opt/wheels"),
    ("ENV PIP_FIND_LINKS /opt/wheels", "--find-links /opt/wheels"),
    ("ARG PIP_FIND_LINKS=/opt/wheels", "--find-links /opt/wheels"),
    ("ENV UV_FIND_LINKS=/opt/none,/opt/wheels", "--find-links /opt/wheels"),
])
def test_a_dockerfiles_environment_names_index_options(tmp_path: Path, setting: str,
                                                        option: str) -> None:
    links = _links(tmp_path, "2.14.1", "2.14.1+cpu")
    docker = tmp_path / "Dockerfile"
    docker.write_text(f"FROM python:3.12\nCOPY wheels /opt/wheels\n{setting}\nRUN pip install "
                      "sglang==0.5.23 torch==2.14.1 mooncake-transfer-engine-cuda13==0.3.14\n")
    r = run_moonpin("pins", "Dockerfile", "--python", "3.12", cwd=tmp_path)
    assert r.returncode == 1 and f"{option} (Dockerfile:3)" in r.stdout, r.stdout
    assert "can supply" in r.stdout
    assert "admits 2.14.1+cpu, a CPU build," in r.stdout
    w = run_moonpin("pins", "Dockerfile", "--python", "3.12", "--write", cwd=tmp_path)
    assert w.returncode == 0, w.stdout + w.stderr
    torch = next(x for x in _run_words(docker) if x.startswith("torch"))
    assert torch == "torch==2.14.1,!=2.14.1+cpu", docker.read_text()
    assert run_moonpin("pins", "Dockerfile", "--python", "3.12", cwd=tmp_path).returncode == 0
    # the premise and the written line, in the real pip reading the variable itself
    assert _pip_env_picks(tmp_path, links, "torch==2.14.1") == "2.14.1+cpu"
    assert _pip_env_picks(tmp_path, links, torch) == "2.14.1"


def test_an_environment_setting_of_something_else_is_no_option(tmp_path: Path) -> None:
    """Controls: another variable, a value from another variable, a word that only ends
    in the name: no index option, nothing to say."""
    _links(tmp_path, "2.14.1", "2.14.1+cpu")
    docker = tmp_path / "Dockerfile"
    for setting in ("ENV PIP_NO_CACHE_DIR=/opt/wheels", "ENV PIP_FIND_LINKS=$WHEELS",
                    "ENV MY_PIP_FIND_LINKS=/opt/wheels", "RUN echo PIP_FIND_LINKS"):
        docker.write_text(f"FROM python:3.12\nCOPY wheels /opt/wheels\n{setting}\nRUN pip "
                          "install sglang==0.5.23 torch==2.14.1 "
                          "mooncake-transfer-engine-cuda13==0.3.14\n")
        r = run_moonpin("pins", "Dockerfile", "--python", "3.12", cwd=tmp_path)
        assert "can supply" not in r.stdout, (setting, r.stdout)


def _pip_env_picks(cwd: Path, links: Path, requirement: str) -> str:
    """The torch the real pip installs for ``requirement`` with ``PIP_FIND_LINKS`` set."""
    report = cwd / "report.json"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index",
                        "--quiet", "--report", str(report), requirement],
                       capture_output=True, text=True, timeout=300, cwd=cwd,
                       env={**CLEAN_ENV, "PIP_FIND_LINKS": f"/nonexistent {links}"})
    assert r.returncode == 0, r.stdout + r.stderr
    (torch,) = [i["metadata"]["version"] for i in json.loads(report.read_text())["install"]
                if i["metadata"]["name"] == "torch"]
    return str(torch)


@pytest.mark.uv
def test_uv_reads_its_find_links_variable_as_pins_does(tmp_path: Path) -> None:
    """``UV_FIND_LINKS`` is a comma-separated list in uv: the folder ``pins`` reads from it
    is the one uv takes the CPU build from, and the line ``pins`` writes keeps it out."""
    uv = os.environ.get("MOONPIN_UV") or shutil.which("uv")
    if not uv:
        pytest.skip("uv not found: set MOONPIN_UV or put uv on PATH (pip install uv)")
    links = _links(tmp_path, "2.14.1", "2.14.1+cpu")
    (tmp_path / "none").mkdir()  # uv refuses a find-links folder that is not there
    docker = tmp_path / "Dockerfile"
    docker.write_text("FROM python:3.12\nCOPY wheels /opt/wheels\nENV UV_FIND_LINKS="
                      "/opt/none,/opt/wheels\nRUN uv pip install --system sglang==0.5.23 "
                      "torch==2.14.1 mooncake-transfer-engine-cuda13==0.3.14\n")

    def compile_(line: str) -> str:
        (tmp_path / "in.txt").write_text(line + "\n")
        r = subprocess.run([uv, "pip", "compile", "-q", "--no-header", "--no-annotate",
                            "--no-index", "in.txt"], capture_output=True, text=True,
                           timeout=300, cwd=tmp_path,
                           env={**CLEAN_ENV, "UV_FIND_LINKS": f"{tmp_path}/none,{links}"})
        assert r.returncode == 0, r.stderr
        return next(x for x in r.stdout.splitlines() if x.startswith("torch=="))

    assert compile_("torch==2.14.1") == "torch==2.14.1+cpu"  # the premise
    w = run_moonpin("pins", "Dockerfile", "--python", "3.12", "--write", cwd=tmp_path)
    assert w.returncode == 0, w.stdout + w.stderr
    torch = next(x for x in _run_words(docker) if x.startswith("torch"))
    assert compile_(torch) == "torch==2.14.1"
