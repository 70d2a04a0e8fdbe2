"""The public Python face (issue 37): ``import moonpin`` costs nothing and never prints or
exits, its ``__all__`` is what docs/reference/python-api.md lists, the preflight snippet of
docs/guides/preflight.md runs as written, and each function answers as the command does."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import moonpin
from tests.lib.images import ext_suffix, healthy_image

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "guides" / "preflight.md"
REFERENCE = ROOT / "docs" / "reference" / "python-api.md"


def _blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_importing_moonpin_loads_nothing_else() -> None:
    code = ("import sys; before = set(sys.modules); import moonpin; "
            "print(sorted(set(sys.modules) - before))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, check=True)
    assert json.loads(proc.stdout.replace("'", '"')) == ["moonpin"]
    assert proc.stderr == ""


def test_importing_the_api_is_cheap() -> None:
    """``import moonpin.api`` (every query's first step) loads no ``dataclasses`` (with
    ``inspect``: ~5-8 ms of every query) and nothing of moonpin but itself."""
    code = ("import sys; before = set(sys.modules); import moonpin.api; "
            "print(sorted(set(sys.modules) - before))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, check=True)
    loaded = json.loads(proc.stdout.replace("'", '"'))
    assert not {"dataclasses", "inspect"} & set(loaded), loaded
    assert [m for m in loaded if m.startswith("moonpin")] == ["moonpin", "moonpin.api"]


def test_a_target_is_a_frozen_value() -> None:
    """What the frozen dataclass gave: fields, equality, hash, repr, pattern matching,
    no assignment, and a copy or pickle equal to it."""
    import copy
    import pickle

    t = moonpin.Target.image("w.tar", platform="linux/arm64")
    assert (t.kind, t.paths, t.platform) == ("image", ("w.tar",), "linux/arm64")
    assert t == moonpin.Target("image", ("w.tar",), "linux/arm64") != moonpin.Target.image("w.tar")
    assert t != ("image", ("w.tar",), "linux/arm64")
    assert len({t, moonpin.Target.image("w.tar", platform="linux/arm64")}) == 1
    assert repr(moonpin.Target.current()) == "Target(kind='current', paths=(), platform=None)"
    with pytest.raises(AttributeError):
        t.kind = "rootfs"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del t.paths
    with pytest.raises(AttributeError):
        t.other = 1  # type: ignore[attr-defined]
    assert pickle.loads(pickle.dumps(t)) == t == copy.deepcopy(t)
    match moonpin.Target.python("/usr/bin/python3"):
        case moonpin.Target("python", (path,)):
            assert path == "/usr/bin/python3"
        case _:
            pytest.fail("no match")


def test_importing_moonpin_never_exits_beside_a_shadowing_file(tmp_path: Path) -> None:
    """The stdlib guard is the entry points' (the command exits 2 there), not the package's:
    a library import beside a ``json.py`` raises nothing and prints nothing."""
    (tmp_path / "json.py").write_text("x = 1\n")
    proc = subprocess.run([sys.executable, "-c", "import moonpin; print('ok')"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60,
                          env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"})
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "ok\n", "")


def test_all_is_what_the_docs_list() -> None:
    table = REFERENCE.read_text()
    listed = set(re.findall(r"^\| `moonpin\.(\w+)", table, re.M))
    listed |= set(re.findall(r"`moonpin\.(\w+)`", table))
    assert listed == set(moonpin.__all__)
    for name in moonpin.__all__:
        assert getattr(moonpin, name) is not None
    with pytest.raises(AttributeError):
        moonpin.nothing_of_that_name  # noqa: B018


def _venv(tmp_path: Path) -> tuple[Path, Path]:
    """A real virtualenv (no pip) whose site-packages holds a healthy fake worker image."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    healthy_image(site)
    return venv, site


def _preflight(tmp_path: Path, venv: Path, site: Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "preflight.py"
    script.write_text(_blocks(DOC.read_text())[0])
    env = {k: v for k, v in os.environ.items() if k not in ("MOONPIN_KB", "PYTHONPATH")}
    env.update(VIRTUAL_ENV=str(venv), MOONPIN_CHECK_SYSTEM_LIBS=str(site / "_no_system_libs"))
    return subprocess.run([sys.executable, str(script), "--elastic-ep-backend", "mooncake",
                           "--tp", "8"], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120)


def test_the_preflight_snippet_runs_as_written(tmp_path: Path) -> None:
    venv, site = _venv(tmp_path)
    ok = _preflight(tmp_path, venv, site)
    assert (ok.returncode, ok.stderr) == (0, ""), ok.stderr
    for build in (site / "mooncake").glob(f"pg_2_13_0*{ext_suffix()}"):
        build.unlink()
    broken = _preflight(tmp_path, venv, site)
    assert broken.returncode == 1, broken.stderr
    assert broken.stderr.startswith("preflight: ") and "\n  fix: " in broken.stderr


def test_check_of_a_target_is_the_commands_verdict(tmp_path: Path) -> None:
    site = healthy_image(tmp_path / "site")
    (site / "sglang" / "srt").mkdir(parents=True, exist_ok=True)
    os.environ["MOONPIN_CHECK_SYSTEM_LIBS"] = str(site / "_no_system_libs")
    try:
        report = moonpin.check(moonpin.Target.site_packages(site),
                               ["--elastic-ep-backend", "mooncake"], deep=False)
        for build in (site / "mooncake").glob(f"pg_2_13_0*{ext_suffix()}"):
            build.unlink()
        broken = moonpin.check(moonpin.Target.site_packages(site),
                               elastic_ep_backend="mooncake", deep=False, kb=None)
    finally:
        del os.environ["MOONPIN_CHECK_SYSTEM_LIBS"]
    assert isinstance(report, moonpin.Report)
    assert (report.usable, report.exit_code) == (True, 0), report.lines()
    assert (broken.usable, broken.exit_code) == (False, 1)
    assert any(isinstance(c, moonpin.CheckResult) and c.status == "fail" and c.fix
               for c in broken.checks)
    cli = subprocess.run([sys.executable, "-m", "moonpin.preflight", "--site-packages", str(site),
                          "--elastic-ep-backend", "mooncake", "--no-deep", "--no-cache"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ,
                              "MOONPIN_CHECK_SYSTEM_LIBS": str(site / "_no_system_libs")})
    assert cli.returncode == broken.exit_code
    assert cli.stdout.splitlines() == broken.lines()


def test_an_image_target_that_is_no_image_could_not_be_checked(tmp_path: Path) -> None:
    bad = tmp_path / "not-an-image.tar"
    bad.write_bytes(b"\0" * 1024)
    report = moonpin.check(moonpin.Target.image(bad), ["--elastic-ep-backend", "mooncake"])
    assert report.exit_code == 2
    assert report.checks[0].name == "image" and report.checks[0].fix


def test_site_packages_needs_a_folder() -> None:
    with pytest.raises(moonpin.MoonpinError) as e:
        moonpin.Target.site_packages()
    assert e.value.hint


@pytest.mark.parametrize(("argv", "call"), [
    (["which", "mooncake", "--sglang", "0.5.18", "--json"],
     lambda: moonpin.which("mooncake", sglang="0.5.18")),
    (["which", "mooncake", "--sglang", "0.5.18", "--torch", "2.13.0", "--python", "3.12",
      "--json"], lambda: moonpin.which("mooncake", sglang="0.5.18", torch="2.13.0",
                                       python="3.12")),
    (["which", "sglang", "--mooncake", "mooncake-transfer-engine-cuda13==0.3.13.post1",
      "--json"], lambda: moonpin.which(
          "sglang", mooncake="mooncake-transfer-engine-cuda13==0.3.13.post1")),
    (["explain", "sglang==0.5.18", "mooncake-transfer-engine-cuda13==0.3.13.post1", "--json"],
     lambda: moonpin.explain("sglang==0.5.18", "mooncake-transfer-engine-cuda13==0.3.13.post1")),
])
def test_queries_answer_as_the_command_does(argv: list[str], call: object) -> None:
    proc = subprocess.run([sys.executable, "-m", "moonpin", *argv], capture_output=True,
                          text=True, cwd=ROOT, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "MOONPIN_KB"})
    doc = json.loads(proc.stdout)
    got = call()  # type: ignore[operator]
    mine = json.loads(json.dumps(got.to_json(), default=str))
    if "recommended" in doc and doc["recommended"] is None:
        doc.pop("reason")
    assert mine == doc


def test_query_errors_are_moonpin_errors_with_a_hint() -> None:
    with pytest.raises(moonpin.MoonpinError) as e:
        moonpin.which("torch", sglang="0.5.18")
    assert "needs --sglang VERSION and --mooncake" in str(e.value) and e.value.hint
    with pytest.raises(moonpin.MoonpinError):
        moonpin.explain("sglang==0.5.18")


@pytest.mark.parametrize("options", [
    {"python": "3.12", "arch": "x86_64"},
    {"strategy": "latest"},
    {"keep": "mooncake"},
    {"keep": "torch", "arch": "aarch64"},
])
def test_the_pins_command_prints_judge_pins(tmp_path: Path, options: dict[str, str]) -> None:
    """``moonpin pins`` is a client of :func:`moonpin.judge_pins` (one path): what this can
    still get wrong is an option not handed on, or the ``--json`` document not being the
    judgement (its ``to_json()`` after the pins read). Each option set changes the answer,
    so one dropped on the way fails here; a regex manager (``--match``/``--dep``) and the
    ``--kb`` file are handed on too."""
    req = tmp_path / "requirements.txt"
    req.write_text("sglang==0.5.18\ntorch==2.13.0\nmooncake-transfer-engine==0.3.8.post1\n")
    ci = tmp_path / "ci.yml"
    ci.write_text("torch_ref: 2.13.0\n")
    kb = tmp_path / "kb.json"
    kb.write_bytes((ROOT / "data" / "kb.json").read_bytes())  # no resolved/: read the KB
    match = ("torch_ref: (?<currentValue>\\S+)", "torch")
    got = moonpin.judge_pins([req, ci], patterns=[match], kb=kb, **options)
    flags = [f"--{k}={v}" for k, v in options.items()]
    proc = subprocess.run([sys.executable, "-m", "moonpin", "--kb", str(kb), "pins", str(req),
                           str(ci), "--match", match[0], "--dep", match[1], *flags, "--json"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "MOONPIN_KB"})
    doc = json.loads(proc.stdout)
    mine = json.loads(json.dumps(got.to_json(), default=str))
    assert {k: doc[k] for k in mine} == mine, (options, proc.stderr)
    assert [(p["file"], p["line"], p["name"]) for p in doc["pins"]] == [
        (p.path, p.line, p.name) for p in got.pins]
    assert any(p.path == str(ci) for p in got.pins)
    assert got.pinned is not None and proc.returncode == (0 if got.verdict == "compatible"
                                                          and not got.updates else 1)
    alone = moonpin.judge_pins([req], kb=kb)  # the options do change the answer
    assert (alone.platform, alone.updates) != (got.platform, got.updates)


def test_judge_pins_judges_what_the_files_own_indexes_can_install(tmp_path: Path) -> None:
    """The judgement the API gives is the command's, index options of the files included:
    a find-links folder holding ``torch 2.13.0+cpu`` lets a CPU torch in for
    ``torch==2.13.0`` (before, only the command read the files' indexes)."""
    from tests.lib.wheels import build_wheel

    (tmp_path / "wheels").mkdir()
    name, data = build_wheel("torch", "2.13.0+cpu", {"torch/__init__.py": ""})
    (tmp_path / "wheels" / name).write_bytes(data)
    req = tmp_path / "requirements.txt"
    req.write_text("--find-links wheels\nsglang==0.5.18\ntorch==2.13.0\n"
                   "mooncake-transfer-engine-cuda13==0.3.13.post1\n")
    got = moonpin.judge_pins([req], python="3.12")
    assert got.verdict == "incompatible", got
    assert any("+cpu" in r for r in got.reasons), got.reasons
    assert any(u.get("exclude") == ["!=2.13.0+cpu"] for u in got.updates), got.updates


def test_judge_pins_says_what_it_could_not_judge(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(moonpin.MoonpinError):
        moonpin.judge_pins([empty])
