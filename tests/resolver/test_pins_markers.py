"""Issue 38 (5): a requirement's environment marker is read as pip reads it
(``Marker.evaluate`` per judged architecture and Python): false there means the requirement
is absent there, not unpinned, and a platform where the stack is absent is no failure. And
after ``pins --write`` a plain run exits 0 whenever the write could make it so: held for
every fixture below (the issue's, the golden project, a CPU find-links folder, includes,
a pyproject and a Dockerfile)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from moonpin.resolver.pins.reading.base import Pin
from moonpin.resolver.pins.reading.platforms import marker_applies
from tests.lib.shipped import run_moonpin

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "kb.json"


@pytest.mark.parametrize(("marker", "arch", "python", "holds"), [
    ('platform_machine == "x86_64"', "aarch64", None, False),
    ('platform_machine == "x86_64"', "x86_64", None, True),
    ('python_version >= "3.11"', "x86_64", "3.10", False),
    ('python_version >= "3.11"', "x86_64", "cp310", False),
    ('python_version >= "3.11"', "x86_64", "3.11", True),
    ('python_version >= "3.11"', "x86_64", "cp313t", True),
    ('python_full_version < "3.12"', "aarch64", "3.12", False),
    ('sys_platform == "win32"', "x86_64", "3.12", False),
])
def test_a_marker_is_evaluated_for_the_judged_platform(marker: str, arch: str,
                                                       python: str | None, holds: bool) -> None:
    pin = Pin("sglang", "==0.5.18", "0.5.18", "r.txt", 1, 8, "sglang==0.5.18", "requirements",
              marker=marker)
    assert marker_applies(pin, arch, python) is holds


ISSUE = ('sglang[srt]==0.5.18 ; platform_machine == "x86_64"\ntorch==2.9.1\n'
         "mooncake-transfer-engine==0.3.10\n")


def test_an_arch_the_marker_leaves_out_is_no_failure(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text(ISSUE)
    r = run_moonpin("pins", "requirements.txt", cwd=tmp_path)
    assert "not pinned to a version moonpin can judge" not in r.stdout, r.stdout
    assert "on aarch64 no sglang requirement applies" in r.stdout
    w = run_moonpin("pins", "requirements.txt", "--write", cwd=tmp_path)
    assert w.returncode == 0 and "after writing: verdict compatible" in w.stderr, w.stderr
    again = run_moonpin("pins", "requirements.txt", cwd=tmp_path)
    assert again.returncode == 0, again.stdout


def test_a_python_the_marker_leaves_out_is_no_failure(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text(
        'sglang==0.5.23 ; python_version >= "3.11"\ntorch==2.14.1\n'
        "mooncake-transfer-engine-cuda13==0.3.14\n")
    for python in ("3.10", "3.12"):
        r = run_moonpin("pins", "requirements.txt", "--python", python, cwd=tmp_path)
        assert r.returncode == 0, (python, r.stdout)


def _links(root: Path) -> str:
    sys.path.insert(0, str(ROOT))
    from tests.lib.wheels import build_wheel

    folder = root / "wheels"
    folder.mkdir(exist_ok=True)
    name, data = build_wheel("torch", "2.13.0+cpu", {"torch/__init__.py": ""})
    (folder / name).write_bytes(data)
    return "--find-links wheels\n"


#: (id, files: name -> text; a callable text gets the project folder)
FIXTURES = [
    ("golden", {"requirements.txt": (ROOT / "tests/golden/requirements.txt").read_text()}),
    ("issue-marker", {"requirements.txt": ISSUE}),
    ("aarch64-marker", {"requirements.txt": ISSUE.replace('"x86_64"', '"aarch64"')}),
    ("mooncake-marker", {"requirements.txt": "sglang==0.5.18\ntorch==2.9.1\n"
                         'mooncake-transfer-engine==0.3.10 ; platform_machine == "x86_64"\n'}),
    ("cpu-find-links", {"requirements.txt": lambda root: _links(root) + "sglang==0.5.18\n"
                        "torch==2.13.0\nmooncake-transfer-engine-cuda13==0.3.13.post1\n"}),
    ("cpu-and-move", {"requirements.txt": lambda root: _links(root) + ISSUE}),
    ("include", {"requirements.txt": "sglang==0.5.18\n-r gpu.txt\n",
                 "gpu.txt": "torch==2.11.0,!=2.11.0+cpu\nmooncake-transfer-engine==0.3.10\n"}),
    ("pyproject", {"pyproject.toml": '[project]\nname = "x"\nversion = "0"\n'
                   'requires-python = ">=3.11"\ndependencies = ["sglang==0.5.18", '
                   '"torch==2.9.1", "mooncake-transfer-engine-cuda13==0.3.12"]\n'
                   '[[tool.uv.index]]\nname = "cpu"\nurl = "https://x.example/cpu"\n'}),
    # two requirements of one name on one line, each with its marker: both are moved (one
    # place each); before, the second's update took the first's place and one was left
    ("one-line-two-markers", {"pyproject.toml": '[project]\nname = "x"\nversion = "0"\n'
                              'dependencies = ["sglang==0.5.18", "torch==2.12.0; '
                              'platform_machine == \'x86_64\'", "torch==2.12.0; '
                              'platform_machine == \'aarch64\'", '
                              '"mooncake-transfer-engine-cuda13==0.3.13.post1"]\n'}),
    ("one-shell-line-two-markers", {"install.sh": "pip install sglang==0.5.18 "
                                    "'torch==2.12.0; platform_machine == \"x86_64\"' "
                                    "'torch==2.11.0; platform_machine == \"aarch64\"' "
                                    "mooncake-transfer-engine-cuda13==0.3.13.post1\n"}),
    ("dockerfile", {"Dockerfile": "FROM python:3.12\nARG SGLANG_VERSION=0.5.18\n"
                    "RUN pip install sglang==${SGLANG_VERSION} torch==2.9.1 "
                    "mooncake-transfer-engine==0.3.10\n"}),
]


@pytest.mark.parametrize(("case", "files"), FIXTURES, ids=[c for c, _ in FIXTURES])
def test_after_write_a_plain_run_exits_0(tmp_path: Path, case: str, files: dict) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text(tmp_path) if callable(text) else text)
    names = list(files)
    before = run_moonpin("pins", *names, cwd=tmp_path)
    assert before.returncode == 1, (case, before.stdout)  # each fixture has something to fix
    w = run_moonpin("pins", *names, "--write", "--json", cwd=tmp_path)
    doc = json.loads(w.stdout)
    assert doc["written"] and not doc["not_written"], (case, doc)
    after = run_moonpin("pins", *names, cwd=tmp_path)
    assert after.returncode == 0, (case, after.stdout, w.stderr)
    assert doc["after"]["verdict"] == "compatible" and w.returncode == 0


#: Issue 38's leftover (a): two mooncake pins told apart by the Python. On 3.12 and later
#: 0.3.13 has no build for torch 2.14.1; before, a run without --python read the markers
#: with the interpreter running moonpin, so the verdict was that interpreter's (3.11 here:
#: compatible). Both orders: whichever the interpreter, one of them was judged wrongly.
PY_SPLIT = ("sglang==0.5.23\ntorch==2.14.1\n"
            'mooncake-transfer-engine-cuda13==0.3.14 ; python_version {a} "3.12"\n'
            'mooncake-transfer-engine-cuda13==0.3.13 ; python_version {b} "3.12"\n')


@pytest.mark.parametrize(("a", "b", "bad_line"), [("<", ">=", 4), (">=", "<", 4)])
def test_markers_on_python_are_judged_per_python(tmp_path: Path, a: str, b: str,
                                                 bad_line: int) -> None:
    import moonpin

    req = tmp_path / "requirements.txt"
    req.write_text(PY_SPLIT.format(a=a, b=b))
    got = moonpin.judge_pins([req], kb=SHIPPED)
    assert got.verdict == "incompatible", got
    # the Pythons sglang 0.5.23 installs on, each judged as pip installs the set there
    assert "python 3.11, 3.12, 3.13 apart (the marker at" in got.platform, got.platform
    on = "3.11" if b == "<" else "3.12"
    assert any(r.startswith(f"on python {on}") and "0.3.13" in r for r in got.reasons), got
    assert [(u["line"], u["newVersion"]) for u in got.updates] == [(bad_line, "0.3.14")]
    w = run_moonpin("pins", "requirements.txt", "--write", cwd=tmp_path)
    assert w.returncode == 0 and "after writing: verdict compatible" in w.stderr, w.stderr
    assert run_moonpin("pins", "requirements.txt", cwd=tmp_path).returncode == 0


def test_the_pythons_judged_apart_are_those_requires_python_admits(tmp_path: Path) -> None:
    import moonpin

    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\nversion = "0"\nrequires-python = ">=3.12"\ndependencies = [\n'
        '  "sglang==0.5.23", "torch==2.14.1",\n'
        "  'mooncake-transfer-engine-cuda13==0.3.14 ; python_version < \"3.13\"',\n"
        "  'mooncake-transfer-engine-cuda13==0.3.13 ; python_version >= \"3.13\"',\n]\n")
    got = moonpin.judge_pins([tmp_path / "pyproject.toml"], kb=SHIPPED)
    assert "python 3.12, 3.13 apart" in got.platform and "requires-python" in got.platform
    assert got.verdict == "incompatible"
    assert all(r.startswith("on python 3.13") for r in got.reasons), got.reasons
    # --python is one Python: the markers are read there, nothing is judged apart
    one = moonpin.judge_pins([tmp_path / "pyproject.toml"], python="3.12", kb=SHIPPED)
    assert one.verdict == "compatible" and "apart" not in one.platform, one


def test_markers_alike_on_every_python_are_not_judged_apart(tmp_path: Path) -> None:
    """A python marker that holds on every Python judged changes nothing: one judgement,
    said as before (the goldens hold this for files without such markers)."""
    import moonpin

    req = tmp_path / "requirements.txt"
    req.write_text('sglang==0.5.23\ntorch==2.14.1 ; python_version >= "3.9"\n'
                   "mooncake-transfer-engine-cuda13==0.3.14\n")
    got = moonpin.judge_pins([req], kb=SHIPPED)
    assert got.verdict == "compatible" and "apart" not in got.platform, got


def test_pins_disagree_where_their_markers_meet_on_some_python() -> None:
    """``< "3.12"`` and ``< "3.13"`` meet on 3.11 and below, whatever Python runs moonpin."""
    from moonpin.resolver.pins.read import pinned_set

    def pin(version: str, marker: str) -> Pin:
        return Pin("torch", f"=={version}", version, "r.txt", 1, 7, "torch", "requirements",
                   marker=marker)

    meet = pinned_set([pin("2.13.0", 'python_version < "3.12"'),
                       pin("2.14.1", 'python_version < "3.13"')])
    apart = pinned_set([pin("2.13.0", 'python_version < "3.12"'),
                        pin("2.14.1", 'python_version >= "3.12"')])
    assert meet.conflicts and not apart.conflicts


@pytest.mark.parametrize(("marker", "python", "holds"), [
    ('implementation_version < "3.11"', "3.10", True),
    ('implementation_version < "3.11"', "cp312", False),
    ('python_full_version < "3.11"', "cp310", True),
])
def test_every_marker_key_is_the_judged_pythons(marker: str, python: str, holds: bool) -> None:
    """A 3.10 target judged from another interpreter (this 3.11): ``implementation_version``
    was this process's, so the pin was absent on 3.10 (was: False for 3.10)."""
    pin = Pin("sglang", "==0.5.18", "0.5.18", "r.txt", 1, 8, "sglang==0.5.18", "requirements",
              marker=marker)
    assert marker_applies(pin, "aarch64", python) is holds


def test_sglangs_pin_of_an_extension_is_read_for_the_judged_python() -> None:
    """The resolver's reading of SGLang's Requires-Dist lines per python and platform
    (:func:`moonpin.resolver.native.applicable`, what the resolved tables hold): a marker on
    ``python_full_version`` took this process's (3.11 here), so cp310 on aarch64 got the
    3.11 line (was: torch==2.10.0 only)."""
    from moonpin.resolver.native import applicable

    lines = ('torch==2.9.1; python_full_version < "3.11"',
             'torch==2.10.0; python_full_version >= "3.11" and platform_machine == "aarch64"',
             'torch==2.10.1; implementation_name == "cpython" and os_name == "posix"')
    assert [line for line, _ in applicable(lines, "cp310", "aarch64")] == [lines[0], lines[2]]
    assert [spec for _, spec in applicable(lines, "cp312", "aarch64")] == ["==2.10.0",
                                                                          "==2.10.1"]
    assert [spec for _, spec in applicable(lines, "cp313t", "x86_64")] == ["==2.10.1"]
