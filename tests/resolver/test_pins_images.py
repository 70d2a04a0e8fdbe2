"""A Dockerfile's base image as the facts it states (issue 27): the platform a stage is
built for (``FROM --platform=…``) is the architecture its pins are judged and updated for,
and the CUDA its SGLang tag names (``-cu130``) is the torch the image runs, judged against
the torch and mooncake the project pins. Written from the user's command."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from moonpin.cli.main import main
from moonpin.resolver.args.manifests import cuda_of_image

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = str(ROOT / "data" / "kb.json")
IMAGE = "lmsysorg/sglang:v0.5.18-cu130"


def pins(capsys: pytest.CaptureFixture[str], folder: Path, *argv: str
         ) -> tuple[int, dict[str, object]]:
    """``moonpin pins ARGV --json`` run in ``folder``: the exit code and the document."""
    here = os.getcwd()
    os.chdir(folder)
    try:
        code = main(["--kb", SHIPPED, "pins", *argv, "--json"])
    except SystemExit as e:
        code = int(e.code or 0)
    finally:
        os.chdir(here)
    out = capsys.readouterr().out
    return code, json.loads(out)


def write(folder: Path, **files: str) -> Path:
    for name, text in files.items():
        (folder / name.replace("_", ".")).write_text(text)
    return folder


# --------------------------------------------------------------------------- platform


@pytest.mark.parametrize(("flag", "arch", "lead"), [
    ("--platform=linux/arm64", "aarch64", ""),
    ("--platform=linux/arm64/v8", "aarch64", ""),
    ("--PLATFORM=LINUX/ARM64", "aarch64", ""),
    ("--platform=linux/amd64", "x86_64", ""),
    ("--platform=$PLAT", "aarch64", "ARG PLAT=linux/arm64\n"),
    ("--platform=${PLAT}", "x86_64", "ARG PLAT=linux/amd64\n"),
    ("--platform=${PLAT:-linux/arm64}", "aarch64", "ARG PLAT\n"),
])
def test_the_stage_platform_is_the_arch_judged(flag: str, arch: str, lead: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, Dockerfile=f"{lead}FROM {flag} {IMAGE}\n"
          "RUN pip install mooncake-transfer-engine-cuda13==0.3.13.post1\n",
          requirements_txt="torch==2.13.0\n")
    for order in (["Dockerfile", "requirements.txt"], ["requirements.txt", "Dockerfile"]):
        code, doc = pins(capsys, tmp_path, *order)
        assert code == 0 and doc["verdict"] == "compatible", doc
        other = "x86_64" if arch == "aarch64" else "aarch64"
        platform = str(doc["platform"])
        assert arch in platform and other not in platform, platform
        assert "from --platform=linux/" in platform.lower() and "Dockerfile:" in platform


@pytest.mark.parametrize("var", ["$BUILDPLATFORM", "${TARGETPLATFORM}", "$UNSET"])
def test_a_platform_the_build_sets_is_every_arch_and_said(
        var: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, Dockerfile=f"ARG UNSET\nFROM --platform={var} {IMAGE}\n"
          "RUN pip install mooncake-transfer-engine-cuda13==0.3.13.post1\n")
    code, doc = pins(capsys, tmp_path, "Dockerfile")
    assert code == 0, doc
    platform = str(doc["platform"])
    assert "x86_64 and aarch64" in platform and "set when the image is built" in platform
    assert var in platform


def test_an_amd64_stage_is_not_judged_on_aarch64(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # cuda13 0.3.12.post1 has the torch 2.13.0 build for x86_64 only
    write(tmp_path, Dockerfile=f"FROM --platform=linux/amd64 {IMAGE}\n"
          "RUN pip install mooncake-transfer-engine-cuda13==0.3.12.post1\n")
    code, doc = pins(capsys, tmp_path, "Dockerfile")
    assert (code, doc["verdict"], doc["updates"]) == (0, "compatible", []), doc


def test_an_arm64_stage_is_updated_for_aarch64(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, Dockerfile=f"FROM --platform=linux/arm64 {IMAGE}\n"
          "RUN pip install mooncake-transfer-engine-cuda13==0.3.12.post1\n")
    code, doc = pins(capsys, tmp_path, "Dockerfile")
    assert code == 1 and doc["verdict"] == "incompatible"
    assert any("aarch64" in r for r in doc["reasons"]), doc["reasons"]  # type: ignore[attr-defined]
    (update,) = doc["updates"]  # type: ignore[misc]
    assert (update["newName"], update["newVersion"]) == ("mooncake-transfer-engine-cuda13",
                                                         "0.3.13.post1")


def test_stages_of_two_platforms_are_judged_each_for_its_own(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, Dockerfile=(
        f"FROM --platform=linux/arm64 {IMAGE} AS arm\n"
        "RUN pip install mooncake-transfer-engine-cuda13==0.3.13\n"
        f"FROM --platform=linux/amd64 {IMAGE} AS amd\n"
        "RUN pip install mooncake-transfer-engine-cuda13==0.3.12.post1\n"
        "FROM arm AS final\n"
        "RUN pip install mooncake-transfer-engine-cuda13==0.3.13\n"))
    code, doc = pins(capsys, tmp_path, "Dockerfile")
    assert doc["conflicts"] == [], doc  # two images, one mooncake each
    assert (code, doc["verdict"], doc["updates"]) == (0, "compatible", []), doc
    assert "apart" in str(doc["platform"])


def test_a_requirements_file_an_arm64_stage_installs_is_judged_there(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, Dockerfile=f"FROM --platform=linux/arm64 {IMAGE}\n"
          "COPY requirements.txt /app/\nRUN pip install -r /app/requirements.txt\n",
          requirements_txt="mooncake-transfer-engine-cuda13==0.3.12.post1\n")
    for order in (["Dockerfile"], ["requirements.txt", "Dockerfile"]):
        code, doc = pins(capsys, tmp_path, *order)
        assert code == 1 and "aarch64" in str(doc["platform"]), doc
        assert [u["newVersion"] for u in doc["updates"]] == ["0.3.13.post1"]  # type: ignore[attr-defined]


def test_another_arch_is_said_not_judged(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, Dockerfile=f"FROM --platform=linux/ppc64le {IMAGE}\n"
          "RUN pip install mooncake-transfer-engine-cuda13==0.3.13.post1\n")
    code, doc = pins(capsys, tmp_path, "Dockerfile")
    assert code == 1 and doc["verdict"] == "unknown"
    assert "ppc64le" in doc["reasons"][0]  # type: ignore[index]
    code, doc = pins(capsys, tmp_path, "Dockerfile", "--arch", "x86_64")
    assert any("another architecture" in n for n in doc["notes"])  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- CUDA of the tag


@pytest.mark.parametrize(("image", "want"), [
    ("lmsysorg/sglang:v0.5.18-cu130", ("cu130", 13)),
    ("lmsysorg/sglang:v0.5.18-cu126", ("cu126", 12)),
    ("docker.io/lmsysorg/sglang:v0.5.18.post1-cu129-amd64", ("cu129", 12)),
    ("lmsysorg/sglang:v0.5.18_cu13", ("cu130", 13)),
    ("lmsysorg/sglang:v0.5.18", None),
    ("lmsysorg/sglang:v0.5.18-rocm630", None),
    ("lmsysorg/sglang:v0.5.18-cu1300", None),
    ("nvidia/cuda:12.6.0-cu126", None),
])
def test_the_cuda_of_an_sglang_tag(image: str, want: tuple[str, int] | None) -> None:
    assert cuda_of_image(image) == want


def test_a_cuda12_image_with_a_cuda13_torch_pinned(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, Dockerfile="FROM lmsysorg/sglang:v0.5.18-cu126\n",
          requirements_txt="torch==2.13.0\nmooncake-transfer-engine-cuda13==0.3.13.post1\n")
    code, doc = pins(capsys, tmp_path, "Dockerfile", "requirements.txt")
    assert code == 1 and doc["verdict"] == "incompatible"
    first = doc["reasons"][0]  # type: ignore[index]
    assert "CUDA 12 image" in first and "torch==2.13.0 installs a CUDA 13 torch" in first
    assert doc["updates"] == []  # no build the knowledge base does not list is proposed


def test_a_cuda12_mooncake_on_a_cu130_image(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, Dockerfile=f"FROM {IMAGE}\n"
          "RUN pip install mooncake-transfer-engine==0.3.13.post1\n")
    code, doc = pins(capsys, tmp_path, "Dockerfile")
    assert code == 1 and doc["verdict"] == "incompatible"
    assert any("CUDA major" in r for r in doc["reasons"])  # type: ignore[attr-defined]
    (update,) = doc["updates"]  # type: ignore[misc]
    assert update["newName"] == "mooncake-transfer-engine-cuda13"


def test_a_cuda12_mooncake_on_a_cu126_image_fits_its_torch(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, Dockerfile="FROM lmsysorg/sglang:v0.5.18-cu126\n"
          "RUN pip install mooncake-transfer-engine==0.3.13.post1\n")
    code, doc = pins(capsys, tmp_path, "Dockerfile")
    assert (code, doc["verdict"], doc["updates"]) == (0, "compatible", []), doc
    assert any("2.13.0+cu126" in n for n in doc["notes"])  # type: ignore[attr-defined]
    write(tmp_path, requirements_txt="torch==2.13.0+cu126\n")  # the same build, pinned
    code, doc = pins(capsys, tmp_path, "Dockerfile", "requirements.txt")
    assert (code, doc["verdict"]) == (0, "compatible"), doc


def test_a_cu126_torch_label_on_a_cu130_image(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, Dockerfile=f"FROM {IMAGE}\n",
          requirements_txt="torch==2.13.0+cu126\nmooncake-transfer-engine==0.3.13.post1\n")
    code, doc = pins(capsys, tmp_path, "Dockerfile", "requirements.txt")
    assert code == 1 and "CUDA 13 image" in doc["reasons"][0]  # type: ignore[index]


def _renovate(capsys: pytest.CaptureFixture[str], folder: Path) -> dict[str, dict[str, Any]]:
    try:
        main(["--kb", SHIPPED, "renovate", str(folder / "Dockerfile")])
    except SystemExit as e:
        assert not e.code
    doc = json.loads(capsys.readouterr().out)
    return {",".join(r["matchPackageNames"]): r for r in doc["packageRules"]}


def test_renovate_reads_the_stage_platform_and_the_image_cuda(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, Dockerfile="FROM lmsysorg/sglang:v0.5.18-cu126\n"
          "RUN pip install mooncake-transfer-engine==0.3.13.post1\n")
    rules = _renovate(capsys, tmp_path)  # the CUDA 12 mooncake fits the image's torch
    assert not any("replacementName" in r for r in rules.values()), rules
    assert "0\\.3\\.13\\.post1" in rules["mooncake-transfer-engine"]["allowedVersions"]
    write(tmp_path, Dockerfile=f"FROM --platform=linux/arm64 {IMAGE}\n"
          "RUN pip install mooncake-transfer-engine-cuda13==0.3.13.post1\n")
    rules = _renovate(capsys, tmp_path)  # 0.3.12.post1 has no aarch64 build for 2.13.0
    held = rules["mooncake-transfer-engine-cuda13"]["allowedVersions"]
    assert "0\\.3\\.13\\.post1" in held and "0\\.3\\.12" not in held, held
