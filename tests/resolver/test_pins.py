"""moonpin.resolver.pins.read on messy real-world files: every pin with its file, line and column.

Every exact pin found in every test is checked against the file text, so later rewriting
can rely on ``col``: ``text.splitlines()[version_line - 1][col:col + len(version)]``.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from moonpin.resolver.pins.read import HASH_NOTE, Pin, PinError, read_pins
from moonpin.resolver.pins.reading.pyproject import toml_arrays, toml_arrays_linewise


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def read(
    paths: list[Path], patterns: list[tuple[str, str]] | None = None
) -> tuple[list[Pin], list[PinError]]:
    pins, errors = read_pins(paths, patterns=patterns or [])
    for p in pins:
        if p.version is not None and p.col >= 0:
            lines = Path(p.path).read_text(encoding="utf-8").splitlines()
            got = lines[p.version_line - 1][p.col : p.col + len(p.version)]
            assert got == p.version, (p, got)
        else:
            assert p.col == -1, p
        assert p.line >= 1 and p.version_line >= p.line, p
    return pins, errors


def key(p: Pin) -> tuple[str, str | None, int, int]:
    return (p.name, p.version, p.line, p.col)


# --------------------------------------------------------------------------- requirements

REQS = r"""
# serving stack, pinned by hand
--index-url http://127.0.0.1:3141/simple
--extra-index-url https://download.pytorch.org/whl/cu128

sglang[all]==0.5.18   # keep in step with mooncake
torch==2.9.1 ; sys_platform == "linux"
Mooncake_Transfer.Engine == 0.3.7 \
    --hash=sha256:aaaa \
    --hash=sha256:bbbb
requests>=2 # not ours
torch>=2.9,<2.10
mooncake-transfer-engine-cuda13
sglang\
==0.5.17
-e git+https://github.com/sgl-project/sglang.git@v0.5.18#egg=sglang&subdirectory=python
-e ./vendor/sglang
./wheels/mooncake_transfer_engine-0.3.8-cp312-cp312-manylinux_2_28_x86_64.whl
torch @ https://download.pytorch.org/whl/cu128/torch-2.9.1%2Bcu128-cp312-cp312-linux_x86_64.whl
sglang===0.5.18.post1
torch==2.9.*
"""


def test_requirements_messy(tmp_path: Path) -> None:
    req = write(tmp_path / "requirements.txt", REQS)
    pins, errors = read([req])
    assert errors == []
    assert [key(p) for p in pins] == [
        ("sglang", "0.5.18", 5, 13),
        ("torch", "2.9.1", 6, 7),
        ("mooncake-transfer-engine", "0.3.7", 7, 28),
        ("torch", None, 11, -1),
        ("mooncake-transfer-engine-cuda13", None, 12, -1),
        ("sglang", "0.5.17", 13, 2),
        ("sglang", None, 15, -1),
        ("sglang", None, 16, -1),
        ("mooncake-transfer-engine", "0.3.8", 17, 34),
        ("torch", None, 18, -1),  # a percent-encoded wheel name: no version
        ("sglang", "0.5.18.post1", 19, 9),
        ("torch", None, 20, -1),
    ]
    by_line = {p.line: p for p in pins}
    s = by_line[5]
    assert (s.spec, s.extras, s.raw, s.kind, s.note) == (
        "==0.5.18", ("all",), "sglang[all]==0.5.18", "requirements", None)
    assert by_line[6].marker == 'sys_platform == "linux"'
    assert by_line[7].note == HASH_NOTE
    assert by_line[7].raw == "Mooncake_Transfer.Engine == 0.3.7"
    assert (by_line[11].spec, by_line[11].note) == (">=2.9,<2.10", "range")
    assert (by_line[12].spec, by_line[12].note) == ("", "unpinned")
    # continuation: the pin's line is the first physical line, the version is on the next
    assert (by_line[13].line, by_line[13].version_line, by_line[13].spec) == (13, 14, "==0.5.17")
    assert by_line[15].note == "editable install"
    assert by_line[16].note == "editable install"
    assert by_line[17].note == "direct reference"
    assert by_line[18].note == "direct reference" and by_line[18].spec == ""
    assert by_line[19].spec == "===0.5.18.post1"
    assert (by_line[20].spec, by_line[20].note) == ("==2.9.*", "range")


def test_duplicates_conflicts_and_includes(tmp_path: Path) -> None:
    write(tmp_path / "base.txt", "sglang==0.5.18\nsglang==0.5.18\n")
    write(tmp_path / "constraints" / "gpu.txt", "torch==2.9.1\nmooncake-transfer-engine==0.3.7\n")
    main = write(tmp_path / "requirements-dev.txt", """
        -r base.txt
        --constraint=constraints/gpu.txt
        pytest
        torch==2.8.0  # conflicts with the constraint
        """)
    other = write(tmp_path / "other" / "requirements.txt", "sglang == 0.5.17\n")
    pins, errors = read([main, other, tmp_path / "base.txt"])  # base.txt given again: read once
    assert errors == []
    assert [(Path(p.path).name, p.kind, *key(p)) for p in pins] == [
        ("base.txt", "requirements", "sglang", "0.5.18", 1, 8),
        ("base.txt", "requirements", "sglang", "0.5.18", 2, 8),
        ("gpu.txt", "constraints", "torch", "2.9.1", 1, 7),
        ("gpu.txt", "constraints", "mooncake-transfer-engine", "0.3.7", 2, 26),
        ("requirements-dev.txt", "requirements", "torch", "2.8.0", 4, 7),
        ("requirements.txt", "requirements", "sglang", "0.5.17", 1, 10),
    ]
    assert pins[2].path == str(tmp_path / "constraints/gpu.txt")


def test_include_cycle_and_missing_include(tmp_path: Path) -> None:
    a = write(tmp_path / "a.txt", "-r b.txt\nsglang==0.5.18\n")
    write(tmp_path / "b.txt", "torch==2.9.1\n\n-r a.txt\n-c nowhere/constraints.txt\n")
    pins, errors = read([a])
    assert [key(p) for p in pins] == [("torch", "2.9.1", 1, 7), ("sglang", "0.5.18", 2, 8)]
    assert [(Path(e.path).name, e.line) for e in errors] == [("b.txt", 3), ("b.txt", 4)]
    assert "cycle" in errors[0].message and "a.txt -> b.txt -> a.txt" in errors[0].message
    assert "nowhere/constraints.txt" in errors[1].message


def test_invalid_line_and_missing_file(tmp_path: Path) -> None:
    req = write(tmp_path / "requirements.txt", """
        sglang==0.5.18
        # fine
        torch=2.9.1
        mooncake-transfer-engine==0.3.7
        numpy>=>1
        """)
    pins, errors = read([req, tmp_path / "absent.txt"])
    assert [key(p) for p in pins] == [
        ("sglang", "0.5.18", 1, 8), ("mooncake-transfer-engine", "0.3.7", 4, 26)]
    assert [(e.line, e.path) for e in errors] == [
        (3, str(req)), (5, str(req)), (0, str(tmp_path / "absent.txt"))]
    assert "torch=2.9.1" in errors[0].message


def test_non_utf8_is_an_error_and_not_read(tmp_path: Path) -> None:
    bad = tmp_path / "requirements.txt"
    bad.write_bytes(b"sglang==0.5.18\n# caf\xe9\ntorch==2.9.1\n")
    pins, errors = read([bad])
    assert pins == []
    assert [(e.path, e.line) for e in errors] == [(str(bad), 2)]
    assert "UTF-8" in errors[0].message


def test_bom_and_crlf(tmp_path: Path) -> None:
    f = tmp_path / "requirements.txt"
    f.write_bytes("\ufeffsglang==0.5.18\r\ntorch==2.9.1\r\n".encode())
    pins, errors = read([f])
    assert errors == []
    assert [key(p) for p in pins] == [("sglang", "0.5.18", 1, 9), ("torch", "2.9.1", 2, 7)]


# --------------------------------------------------------------------------- pyproject.toml

PYPROJECT = """
[project]
name = "svc"
dependencies = [
    "fastapi",
    "sglang[all]==0.5.18",   # the server
    'torch>=2.9,<2.10; platform_system == "Linux"',
]

[project.optional-dependencies]
gpu = ["mooncake-transfer-engine==0.3.7", "torch==2.9.1"]
rocm = [
  # AMD
  "mooncake-transfer-engine-rocm",
]

[tool.uv]
constraint-dependencies = ["torch==2.9.1"]
override-dependencies = [
    "sglang==0.5.18",
    "mooncake_transfer_engine_cuda13 == 0.3.7 ; python_version >= \\"3.10\\"",
]
"""


def test_pyproject_all_four_places(tmp_path: Path) -> None:
    py = write(tmp_path / "pyproject.toml", PYPROJECT)
    pins, errors = read([py])
    assert errors == []
    assert [(p.kind, *key(p)) for p in pins] == [
        ("pyproject", "sglang", "0.5.18", 5, 18),
        ("pyproject", "torch", None, 6, -1),
        ("pyproject", "mooncake-transfer-engine", "0.3.7", 10, 34),
        ("pyproject", "torch", "2.9.1", 10, 50),  # same line as the first: col tells them apart
        ("pyproject", "mooncake-transfer-engine-rocm", None, 13, -1),
        ("uv-constraint", "torch", "2.9.1", 17, 35),
        ("uv-override", "sglang", "0.5.18", 19, 13),
        ("uv-override", "mooncake-transfer-engine-cuda13", "0.3.7", 20, 40),
    ]
    assert pins[1].marker == 'platform_system == "Linux"' and pins[1].note == "range"
    assert pins[2].note == "optional-dependencies group 'gpu'"
    assert pins[4].note == "unpinned; optional-dependencies group 'rocm'"
    assert pins[7].marker == 'python_version >= "3.10"'


def test_pyproject_linewise_fallback_agrees_with_tomllib(tmp_path: Path) -> None:
    text = textwrap.dedent(PYPROJECT).lstrip("\n")
    entries, err = toml_arrays(text)
    assert err is None
    assert toml_arrays_linewise(text) == entries
    assert len(entries) == 9


def test_pyproject_duplicates_and_bad_toml(tmp_path: Path) -> None:
    py = write(tmp_path / "pyproject.toml", """
        [project]
        dependencies = ["torch==2.9.1", "torch==2.9.1", "sglang=0.5"]
        """)
    pins, errors = read([py])
    assert [key(p) for p in pins] == [("torch", "2.9.1", 2, 24), ("torch", "2.9.1", 2, 40)]
    assert [e.line for e in errors] == [2]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="the 3.10 line reader checks no syntax")
def test_pyproject_bad_toml_names_its_line(tmp_path: Path) -> None:
    bad = write(tmp_path / "x" / "pyproject.toml", "[project]\ndependencies = [\n'a',,\n]\n")
    pins, errors = read([bad])
    assert pins == [] and [e.line for e in errors] == [3]


# --------------------------------------------------------------------------- docker / shell

DOCKERFILE = r"""
FROM nvidia/cuda:12.8.1-devel-ubuntu24.04
ARG SGLANG_VERSION=0.5.18
ARG TORCH_VERSION="2.9.1"
ENV MOONCAKE_VERSION=0.3.7 PYTHONUNBUFFERED=1
ARG CUDA_VERSION=12.8
RUN pip install --no-cache-dir \
        --extra-index-url https://download.pytorch.org/whl/cu128 \
    # the stack
        "sglang[all]==${SGLANG_VERSION}" \
        torch==2.9.1 'mooncake-transfer-engine==0.3.7' \
    && uv pip install --system -r /tmp/req.txt mooncake-transfer-engine-cuda13==0.3.8 \
    && python3 -m pip install -U numpy "torch>=2.9" ; echo done
RUN uv pip install --python /opt/py -e /src/sglang/python
"""


def test_dockerfile(tmp_path: Path) -> None:
    df = write(tmp_path / "docker" / "Dockerfile.cu128", DOCKERFILE)
    pins, errors = read([df])
    assert errors == []
    assert [(p.kind, *key(p)) for p in pins] == [
        ("dockerfile-arg", "sglang", "0.5.18", 2, 19),
        ("dockerfile-arg", "torch", "2.9.1", 3, 19),
        ("dockerfile-arg", "mooncake-transfer-engine", "0.3.7", 4, 21),
        ("pip-install", "sglang", None, 9, -1),
        ("pip-install", "torch", "2.9.1", 10, 15),
        ("pip-install", "mooncake-transfer-engine", "0.3.7", 10, 48),
        ("pip-install", "mooncake-transfer-engine-cuda13", "0.3.8", 11, 80),
        ("pip-install", "torch", None, 12, -1),
        ("pip-install", "sglang", None, 13, -1),
    ]
    assert pins[0].spec == "==0.5.18" and pins[0].raw == "SGLANG_VERSION=0.5.18"
    assert pins[1].raw == 'TORCH_VERSION="2.9.1"'
    assert pins[3].note == "version from a shell variable" and pins[3].extras == ("all",)
    assert pins[3].spec == "==${SGLANG_VERSION}"
    assert pins[7].note == "range" and pins[7].spec == ">=2.9"
    assert pins[8].note == "editable install"


def test_shell_script(tmp_path: Path) -> None:
    sh = write(tmp_path / "scripts" / "install.sh", r"""
        #!/usr/bin/env bash
        set -euo pipefail
        export SGLANG_VERSION="${SGLANG_VERSION:-0.5.18}"
        TORCH_VERSION=2.9.1
        MOONCAKE_VERSION=main  # a branch, not a version
        pip3 install "sglang==${SGLANG_VERSION}" "torch==${TORCH_VERSION}"
        python -m pip install \
          mooncake-transfer-engine==0.3.7  # comment
        docker build --build-arg SGLANG_VERSION=0.5.17 .
        echo pip install sglang==9.9 is not an install  # 'install' follows echo, not pip
        """)
    pins, errors = read([sh])
    assert errors == []
    assert [(p.kind, *key(p)) for p in pins] == [
        ("dockerfile-arg", "sglang", "0.5.18", 3, 41),
        ("dockerfile-arg", "torch", "2.9.1", 4, 14),
        ("dockerfile-arg", "mooncake-transfer-engine", None, 5, -1),
        ("pip-install", "sglang", None, 6, -1),
        ("pip-install", "torch", None, 6, -1),
        ("pip-install", "mooncake-transfer-engine", "0.3.7", 8, 28),  # its own line
        ("dockerfile-arg", "sglang", "0.5.17", 9, 40),
    ]
    assert pins[2].note == "not a PEP 440 version: 'main'" and pins[2].spec == "main"
    assert pins[0].raw == 'SGLANG_VERSION="${SGLANG_VERSION:-0.5.18}"'
    assert pins[5].raw == "mooncake-transfer-engine==0.3.7"


# --------------------------------------------------------------------------- regex managers


def test_regex_manager_on_any_file(tmp_path: Path) -> None:
    ci = write(tmp_path / ".github" / "build.yaml", """
        env:
          sglang_ref: v0.5.18
        matrix:
          - sglang_ref: v0.5.17
          - sglang_ref: main
        """)
    req = write(tmp_path / "requirements.txt", "sglang==0.5.18  # sglang_ref: v0.5.18\n")
    patterns = [(r"sglang_ref: v(?P<currentValue>\S+)", "sglang"),
                (r"^\s*-?\s*(?P<depName>sglang)_ref: (?P<currentValue>[a-z]\w*)$", "")]
    pins, errors = read([ci, req], patterns)
    assert errors == []
    assert [(Path(p.path).name, p.kind, *key(p)) for p in pins] == [
        ("build.yaml", "regex", "sglang", "0.5.18", 2, 15),
        ("build.yaml", "regex", "sglang", "0.5.17", 4, 17),
        ("build.yaml", "regex", "sglang", None, 5, -1),
        ("requirements.txt", "requirements", "sglang", "0.5.18", 1, 8),
        ("requirements.txt", "regex", "sglang", "0.5.18", 1, 31),
    ]
    assert pins[0].spec == "==0.5.18" and pins[0].raw == "sglang_ref: v0.5.18"


def test_bad_patterns_and_unknown_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="currentValue"):
        read_pins([], patterns=[(r"sglang: (\S+)", "sglang")])
    with pytest.raises(ValueError):
        read_pins([], patterns=[(r"(?P<currentValue>", "sglang")])
    odd = write(tmp_path / "notes.md", "sglang==0.5.18\n")
    pins, errors = read_pins([odd])
    assert pins == [] and [(e.path, e.line) for e in errors] == [(str(odd), 0)]


def test_pip_command_shapes(tmp_path: Path) -> None:
    df = write(tmp_path / "Containerfile", r"""
        RUN --mount=type=cache,target=/root/.cache pip install sglang==0.5.18
        RUN /opt/venv/bin/pip install -r requirements.txt -c c.txt torch==2.9.1
        RUN sudo -H python3.12 -m pip install --index-url=https://x/simple \
            --no-deps mooncake-transfer-engine-efa==0.3.7; pip list
        RUN echo "pip install sglang==1.0" && uv add sglang==1.0
        RUN pip download sglang==1.0 && pip install .[dev] sglang
        ARG TORCH_VERSION
        ENV MOONCAKE_VERSION 0.3.7
        """)
    pins, errors = read([df])
    assert errors == []
    assert [(p.kind, *key(p)) for p in pins] == [
        ("pip-install", "sglang", "0.5.18", 1, 63),
        ("pip-install", "torch", "2.9.1", 2, 66),
        ("pip-install", "mooncake-transfer-engine-efa", "0.3.7", 4, 44),
        ("pip-install", "sglang", None, 6, -1),
        ("dockerfile-arg", "torch", None, 7, -1),
        ("dockerfile-arg", "mooncake-transfer-engine", "0.3.7", 8, 21),
    ]
    assert pins[3].note == "unpinned"
    assert pins[4].note == "unpinned; build arg without default"


#: Pieces of requirement lines: plain ones (the light reading takes them) and others
#: (markers, URLs, odd spacing, bad clauses) that it must leave to packaging's parser.
_PIECES = ["sglang", "torch", "Mooncake_Transfer.Engine", "a", "x1", " ", "\t", "  ",
           "[", "]", "[srt]", "[a, b]", "[]", "[ , ]", ",", "==", "===", ">=", "<", "~=",
           "!=", "0.5.18", "2.13.0+cu130", "1!2.0", "0.3.*", "1.0.post1", "rc1", "==0.5.18",
           ">=2.9,<2.14", "; python_version >= '3.10'", " @ https://x.invalid/a.whl", "(",
           ")", "-", ".", "*", "+", "!", "#", "é", "1" * 30]


def test_plain_requirements_read_as_packaging_reads_them() -> None:
    """Whatever the light reading of a requirement accepts, packaging's parser accepts
    too, with the same name, extras and specifier, and no marker or URL; 20,000 seeded
    lines, a quarter of them plain."""
    import random

    from packaging.requirements import InvalidRequirement, Requirement

    from moonpin.resolver.pins.reading.base import _plain_requirement

    rng = random.Random(4242)
    taken = 0
    for _ in range(20000):
        raw = "".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 6))).strip()
        if rng.random() < 0.3:  # a plain line of the common shape
            raw = (rng.choice(_PIECES[:5]) + rng.choice(["", "[srt]", " [a,b]"])
                   + rng.choice(["", "==0.5.18", ">=2.9, <2.14", " ~= 1.0", "===x"]))
        light = _plain_requirement(raw)
        if light is None:
            continue
        taken += 1
        try:
            full = Requirement(raw)
        except InvalidRequirement:
            pytest.fail(f"{raw!r}: read as plain, refused by packaging")
        assert (light.name, set(light.extras), str(light.specifier)) == (
            full.name, full.extras, str(full.specifier)), raw
        assert full.marker is None and full.url is None, raw
    assert taken > 5000


def test_dependency_groups_read_alike_by_tomllib_and_the_linewise_reader() -> None:
    """PEP 735 groups: strings are requirements, an {include-group} table is not (the
    Python 3.10 reader took its "dev" for a requirement string)."""
    text = ('[project]\nname = "d"\ndependencies = ["sglang==0.5.18"]\n\n[dependency-groups]\n'
            'dev = ["pytest>=8", "torch==2.13.0"]\nserve = [{include-group = "dev"}, '
            '"mooncake-transfer-engine-cuda13==0.3.13.post1"]\n')
    entries, err = toml_arrays(text)
    assert err is None
    assert [(e[1], e[2]) for e in entries] == [
        (None, "sglang==0.5.18"), ("dependency group 'dev'", "pytest>=8"),
        ("dependency group 'dev'", "torch==2.13.0"),
        ("dependency group 'serve'", "mooncake-transfer-engine-cuda13==0.3.13.post1")]
    assert toml_arrays_linewise(text) == entries
