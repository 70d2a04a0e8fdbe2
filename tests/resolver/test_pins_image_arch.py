"""An image tag that names an architecture (``FROM lmsysorg/sglang:v0.5.18-cu130-arm64``,
``-amd64``, ``-aarch64``, ``-x86_64``) is the platform of its stage, as ``FROM --platform=``
is; a ``--platform`` that names another is said (issue 27). Written from the user's
commands: ``moonpin pins Dockerfile``, ``moonpin renovate Dockerfile``, ``moonpin args
--file``. cuda13 0.3.12.post1 has the torch 2.13.0 build for x86_64 only, so the verdict
tells which architecture was judged."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from moonpin.cli.main import main
from moonpin.resolver.pins.reading.platforms import tag_platform

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = str(ROOT / "data" / "kb.json")
X86_ONLY = "RUN pip install mooncake-transfer-engine-cuda13==0.3.12.post1\n"


def run(capsys: pytest.CaptureFixture[str], folder: Path, *argv: str) -> tuple[int, str, str]:
    here = os.getcwd()
    os.chdir(folder)
    try:
        code = main(["--kb", SHIPPED, *argv])
    except SystemExit as e:
        code = int(e.code or 0)
    finally:
        os.chdir(here)
    got = capsys.readouterr()
    return code, got.out, got.err


def pins(capsys: pytest.CaptureFixture[str], folder: Path, *files: str
         ) -> tuple[int, dict[str, Any]]:
    code, out, _ = run(capsys, folder, "pins", *files, "--json")
    return code, json.loads(out)


ARM_TAGS = ["v0.5.18-cu130-arm64", "v0.5.18-cu130-aarch64", "v0.5.18-cu130_arm64v8"]
AMD_TAGS = ["v0.5.18-cu130-amd64", "v0.5.18-cu130-x86_64", "v0.5.18-amd64-cu130"]


@pytest.mark.parametrize("tag", ARM_TAGS)
def test_an_arm_tag_is_judged_and_updated_on_aarch64(tag: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "Dockerfile").write_text(f"FROM lmsysorg/sglang:{tag}\n{X86_ONLY}")
    code, doc = pins(capsys, tmp_path, "Dockerfile")
    assert (code, doc["verdict"]) == (1, "incompatible"), doc
    platform = str(doc["platform"])
    assert "aarch64" in platform and "x86_64" not in platform and tag in platform, platform
    assert [u["newVersion"] for u in doc["updates"]] == ["0.3.13.post1"]


@pytest.mark.parametrize("tag", AMD_TAGS)
def test_an_amd_tag_is_judged_on_x86_64_only(tag: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "Dockerfile").write_text(f"FROM lmsysorg/sglang:{tag}\n{X86_ONLY}")
    code, doc = pins(capsys, tmp_path, "Dockerfile")
    assert (code, doc["verdict"], doc["updates"]) == (0, "compatible", []), doc
    platform = str(doc["platform"])
    assert "x86_64" in platform and "aarch64" not in platform and tag in platform, platform


def test_a_requirements_file_an_arm_tagged_stage_installs_is_judged_there(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "Dockerfile").write_text(
        "FROM lmsysorg/sglang:v0.5.18-cu130-arm64\n"
        "COPY requirements.txt /app/\nRUN pip install -r /app/requirements.txt\n")
    (tmp_path / "requirements.txt").write_text("mooncake-transfer-engine-cuda13==0.3.12.post1\n")
    for order in (["Dockerfile"], ["requirements.txt", "Dockerfile"]):
        code, doc = pins(capsys, tmp_path, *order)
        assert code == 1 and "aarch64" in str(doc["platform"]), doc
        assert [u["newVersion"] for u in doc["updates"]] == ["0.3.13.post1"]


def test_a_platform_that_disagrees_with_the_tag_is_said(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "Dockerfile").write_text(
        f"FROM --platform=linux/amd64 lmsysorg/sglang:v0.5.18-cu130-arm64\n{X86_ONLY}")
    code, doc = pins(capsys, tmp_path, "Dockerfile")
    said = [n for n in doc["notes"] if "--platform=linux/amd64" in n]
    assert len(said) == 1 and "aarch64" in said[0] and "x86_64" in said[0], doc["notes"]
    assert "Dockerfile:1" in said[0]
    # the image runs the tag's architecture: its pins are judged there
    assert (code, doc["verdict"]) == (1, "incompatible"), doc
    code, text, _ = run(capsys, tmp_path, "pins", "Dockerfile")
    assert "--platform=linux/amd64" in text and "note:" in text


@pytest.mark.parametrize("flag", ["--platform=linux/arm64", "--platform=linux/arm64/v8",
                                  "--platform=$TARGETPLATFORM", "--platform=linux"])
def test_a_platform_that_agrees_or_is_the_builds_says_nothing(
        flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "Dockerfile").write_text(
        f"FROM {flag} lmsysorg/sglang:v0.5.18-cu130-arm64\n{X86_ONLY}")
    code, doc = pins(capsys, tmp_path, "Dockerfile")
    assert (code, doc["verdict"]) == (1, "incompatible"), doc
    platform = str(doc["platform"])
    assert "aarch64" in platform and "x86_64" not in platform, platform
    assert not any("disagree" in n or "tagged for" in n for n in doc["notes"]), doc["notes"]


def test_a_stage_from_an_arch_tagged_stage_keeps_its_platform(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "Dockerfile").write_text(
        "FROM lmsysorg/sglang:v0.5.18-cu130-arm64 AS base\nFROM base\n" + X86_ONLY)
    code, doc = pins(capsys, tmp_path, "Dockerfile")
    assert code == 1 and "aarch64" in str(doc["platform"]), doc


def _rules(out: str) -> dict[str, dict[str, Any]]:
    return {",".join(r["matchPackageNames"]): r for r in json.loads(out)["packageRules"]}


def test_renovate_reads_the_tag_arch(tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    docker = tmp_path / "Dockerfile"
    docker.write_text(f"FROM lmsysorg/sglang:v0.5.18-cu130-arm64\n{X86_ONLY}")
    code, out, err = run(capsys, tmp_path, "renovate", "Dockerfile")
    held = _rules(out)["mooncake-transfer-engine-cuda13"]["allowedVersions"]
    assert code == 0 and "0\\.3\\.13\\.post1" in held and "0\\.3\\.12" not in held, held
    assert "note" not in err
    docker.write_text(f"FROM lmsysorg/sglang:v0.5.18-cu130-x86_64\n{X86_ONLY}")
    code, out, _ = run(capsys, tmp_path, "renovate", "Dockerfile")
    held = _rules(out)["mooncake-transfer-engine-cuda13"]["allowedVersions"]
    assert code == 0 and "0\\.3\\.12\\.post1" in held, held
    docker.write_text("FROM --platform=linux/amd64 lmsysorg/sglang:v0.5.18-cu130-arm64\n"
                      + X86_ONLY)
    code, out, err = run(capsys, tmp_path, "renovate", "Dockerfile")
    held = _rules(out)["mooncake-transfer-engine-cuda13"]["allowedVersions"]
    assert "0\\.3\\.12" not in held, held
    assert "--platform=linux/amd64" in err and "aarch64" in err, err


@pytest.mark.parametrize("tag", [*ARM_TAGS, *AMD_TAGS])
def test_args_file_reads_the_release_of_an_arch_tag(tag: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pod.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: s\n"
        f"    image: lmsysorg/sglang:{tag}\n"
        '    args: ["--model-path", "m", "--elastic-ep-backend", "mooncake"]\n')
    code, out, err = run(capsys, tmp_path, "args", "--file", "pod.yaml", "--json")
    assert code == 0 and json.loads(out)["sglang"] == "0.5.18", (out, err)


@pytest.mark.parametrize(("image", "want"), [
    ("lmsysorg/sglang:v0.5.18-cu130-arm64", "linux/arm64"),
    ("lmsysorg/sglang:v0.5.18-cu130-AARCH64", "linux/arm64"),
    ("lmsysorg/sglang:v0.5.18-cu130-x86_64", "linux/amd64"),
    ("lmsysorg/sglang:v0.5.18-x86-64", "linux/amd64"),
    ("registry.local:5000/lmsysorg/sglang:v0.5.18-cu130-amd64", "linux/amd64"),
    ("lmsysorg/sglang:v0.5.18-cu130-arm64@sha256:" + "0" * 64, "linux/arm64"),
    ("lmsysorg/sglang:v0.5.18-ppc64le", "linux/ppc64le"),
    ("lmsysorg/sglang:v0.5.18-cu130", None),
    ("lmsysorg/sglang:v0.5.18-amd64-arm64", None),  # two: not one platform
    ("registry.local:5000/lmsysorg/sglang", None),
    ("arm64v8/python:3.12", None),  # a repository, not the tag
    ("lmsysorg/sglang:v0.5.18-farm64", None),
    ("lmsysorg/sglang:${TAG}-arm64", None),
])
def test_the_platform_a_tag_names(image: str, want: str | None) -> None:
    assert tag_platform(image) == want
