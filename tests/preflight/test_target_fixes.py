"""``moonpin check`` reads the image the worker runs, and its fix lines work when pasted
into that image's shell (issue: read the image the worker really runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import machinery
from pathlib import Path

import pytest

from moonpin.preflight.env.target import from_site_packages
from moonpin.preflight.judge.fixes import pip_line
from tests.lib.checkrun import ROOT, assert_healthy, fake_python, run, run_check, small_kb
from tests.lib.elfbuild import build_so
from tests.lib.images import (
    PG_NAMES,
    add_mooncake,
    add_sglang,
    add_torch,
    healthy_image,
    jit_site,
)

MC = "mooncake-transfer-engine"
C13 = "mooncake-transfer-engine-cuda13"

# ----------------------------------------------------------------- fix lines


@pytest.mark.parametrize(("specs", "torch", "mooncakes", "line"), [
    # the installed release, reinstalled: pip would say "already satisfied"
    ([f"{C13}==0.3.13.post1"], "2.13.0", [(C13, "0.3.13.post1")],
     f"pip install --force-reinstall --no-deps '{C13}==0.3.13.post1'"),
    # another release of the same distribution: pip replaces it
    ([f"{C13}==0.3.13.post1"], "2.13.0", [(C13, "0.3.12")],
     f"pip install '{C13}==0.3.13.post1'"),
    # another distribution: the installed one goes first (they share mooncake/)
    ([f"{C13}==0.3.13.post1"], "2.13.0", [(MC, "0.3.13.post1")],
     f"pip uninstall -y {MC} && pip install '{C13}==0.3.13.post1'"),
    # two installed over one folder: both go, then the one that fits
    ([f"{C13}==0.3.13.post1"], "2.13.0", [(MC, "0.3.13.post1"), (C13, "0.3.13.post1")],
     f"pip uninstall -y {MC} {C13} && pip install '{C13}==0.3.13.post1'"),
    # ==2.13.0 is met by 2.13.0+cpu: torch goes first
    (["torch==2.13.0"], "2.13.0+cpu", [(C13, "0.3.13.post1")],
     "pip uninstall -y torch && pip install 'torch==2.13.0,!=2.13.0+cpu'"),
    # a torch of another release is simply replaced
    (["torch==2.11.0", f"{C13}==0.3.13.post1"], "2.13.0", [(C13, "0.3.13.post1")],
     f"pip install 'torch==2.11.0,!=2.11.0+cpu' '{C13}==0.3.13.post1'"),
])
def test_pip_lines_do_what_they_say(specs: list[str], torch: str,
                                    mooncakes: list[tuple[str, str]], line: str) -> None:
    assert pip_line(specs, torch=torch, owned=mooncakes, prefix="mooncake-transfer-engine") \
        == line


# ----------------------------------------------------------------- the target environment


def _other_minor() -> int:
    return sys.version_info.minor + 1


def _image_of(site: Path, suffix: str) -> None:
    add_torch(site)
    add_sglang(site)
    add_mooncake(site)
    for p in [*(site / "mooncake").glob("*.so"), *(site / "torch").glob("_C.*.so")]:
        stem = p.name.split(".", 1)[0]
        p.rename(p.with_name(stem + suffix))


def test_an_image_of_another_python_is_read_with_its_suffixes(tmp_path: Path) -> None:
    minor = _other_minor()
    ours = machinery.EXTENSION_SUFFIXES[0]
    theirs = ours.replace(f"-{sys.version_info.major}{sys.version_info.minor}-",
                          f"-{sys.version_info.major}{minor}-")
    site = tmp_path / "venv" / "lib" / f"python3.{minor}" / "site-packages"
    _image_of(site, theirs)
    t = from_site_packages([str(site)])
    assert t.version == (3, minor) and t.ext_suffixes[0] == theirs
    r = run(site, kb=small_kb(tmp_path))
    assert_healthy(r)
    assert f"python 3.{minor}" in r.line("target")
    # control: the same builds in a folder that names no version are read as ours
    plain = tmp_path / "plain"
    _image_of(plain, theirs)
    r = run(plain, kb=small_kb(tmp_path))
    assert r.rc == 1 and "no such build" in r.line("build"), r.out
    assert "Python version is not in its path" in r.line("target")


def test_python_option_reads_that_interpreters_environment(tmp_path: Path) -> None:
    minor = _other_minor()
    site = tmp_path / "img"
    python = fake_python(tmp_path / "venv" / "bin" / "python", site, minor)
    suffix = json.loads(python.read_text().split("'")[1])["ext"][0]
    _image_of(site, suffix)
    kb = small_kb(tmp_path)
    env = {"MOONPIN_CHECK_SYSTEM_LIBS": str(tmp_path / "none")}
    r = run_check("--python", str(python), "--kb", str(kb), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"python 3.{minor} {python}" in r.stdout and "(--python)" in r.stdout
    # an active virtualenv other than moonpin's own is the default target
    r = run_check("--kb", str(kb), env={**env, "VIRTUAL_ENV": str(python.parent.parent)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "$VIRTUAL_ENV" in r.stdout
    # without it, this interpreter's own environment: no mooncake there
    r = run_check("--kb", str(kb), env=env)
    assert r.returncode == 1 and "$VIRTUAL_ENV" not in r.stdout


def test_python_option_that_is_no_python_is_could_not_check(tmp_path: Path) -> None:
    bad = tmp_path / "bin" / "python"
    bad.parent.mkdir()
    bad.write_text("#!/bin/sh\necho hello\n")
    bad.chmod(0o755)
    r = run_check("--python", str(bad))
    assert r.returncode == 2 and "not a Python that answers" in r.stderr, r.stderr
    r = run_check("--python", str(tmp_path / "missing"))
    assert r.returncode == 2 and "cannot run --python" in r.stderr, r.stderr


# ----------------------------------------------------------------- loaders that compile

def _adapter(cache: Path, runpath: str) -> None:
    key = cache / "79d8800e818b37ff7753"
    key.mkdir(parents=True, exist_ok=True)
    (key / "_mooncake_pg_jit_cuda.so").write_bytes(build_so(
        needed=["libmooncake_pg.so", "libc10_cuda.so", "libcudart.so.13"], runpath=runpath,
        strings=[*PG_NAMES, "mooncake", "mooncake-cpu"]))


def test_an_adapter_compiled_for_this_image_is_a_pass(tmp_path: Path) -> None:
    site = jit_site(tmp_path)
    cache = tmp_path / "pg_jit"
    bare = tmp_path / "bin"
    bare.mkdir()
    env = {"PATH": str(bare), "MOONPIN_CHECK_CUDA_FALLBACK": str(tmp_path / "nocuda"),
           "CUDA_HOME": "", "MOONCAKE_PG_JIT_DIR": str(cache), "TORCH_CUDA_ARCH_LIST": "9.0"}
    kb = small_kb(tmp_path)
    r = run(site, kb=kb, env=env)
    assert r.rc == 1 and r.status("toolchain") == "fail", r.out
    toolchain = r.line("toolchain")
    assert "ninja" in toolchain and "nvcc" in toolchain
    assert "mcc" not in toolchain and "torchada" not in toolchain  # MUSA only for MUSA torch
    # an adapter compiled for another image (its RUNPATH names another mooncake folder)
    _adapter(cache, f"{tmp_path / 'elsewhere' / 'mooncake'}:{site / 'torch' / 'lib'}")
    assert run(site, kb=kb, env=env).status("toolchain") == "fail"
    # one compiled for this image: the loader reuses it, no toolchain needed
    _adapter(cache, f"{site / 'mooncake'}:{site / 'torch' / 'lib'}")
    r = run(site, kb=kb, env=env)
    assert r.rc == 0, r.out
    assert r.status("adapter") == "pass" and str(cache) in r.line("adapter")
    assert r.status("libraries") == "pass"


# ----------------------------------------------------------------- the deep probe


def _probe_site(tmp_path: Path, build_text: str) -> Path:
    site = tmp_path / "site"
    add_torch(site)
    add_sglang(site)
    add_mooncake(site, kind="py")
    for p in (site / "mooncake").glob("pg_2_13_0.py"):
        p.write_text(build_text)
    return site


def _sleepers(marker: str) -> list[str]:
    out = []
    for pid in os.listdir("/proc"):
        try:
            cmd = (Path("/proc") / pid / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmd and b"sleep" in cmd:
            out.append(pid)
    return out


def test_a_timed_out_probe_leaves_nothing_running(tmp_path: Path) -> None:
    marker = "31337.5"
    site = _probe_site(tmp_path, "import subprocess, time\n"
                       f"subprocess.Popen(['sleep', '{marker}'])\ntime.sleep(60)\n")
    r = run(site, "--deep-timeout", "3", deep=True)
    assert r.rc == 1 and "hung" in r.line("deep probe"), r.out
    assert "sleep" in r.line("deep probe")  # what was running is named
    assert _sleepers(marker) == []


def test_children_the_import_leaves_behind_are_ended(tmp_path: Path) -> None:
    marker = "31338.5"
    site = _probe_site(tmp_path, "import subprocess\n"
                       f"subprocess.Popen(['sleep', '{marker}'])\n"
                       + "\n".join(f"def {n}(*a): pass" for n in PG_NAMES) + "\n"
                       "import torch.distributed as d\n"
                       "d.Backend.register_backend('mooncake', None, devices=['cuda'])\n"
                       "d.Backend.register_backend('mooncake-cpu', None, devices=['cpu'])\n")
    r = run(site, deep=True)
    assert r.status("deep import") == "pass", r.out
    assert _sleepers(marker) == []


@pytest.mark.parametrize(("text", "words"), [
    ("import os\nos.kill(os.getpid(), 37)\n", "signal 37"),
    ("import sys, os\nsys.stdout.write('\\nMOONPIN-PROBE {not json\\n'); sys.stdout.flush()\n"
     "os._exit(0)\n", "without a readable answer"),
    ("import sys, os\nsys.stdout.write('\\nMOONPIN-PROBE [1, 2]\\n'); sys.stdout.flush()\n"
     "os._exit(0)\n", "without a readable answer"),
    ("import sys, os\nsys.stdout.buffer.write(b'\\xff\\xfe\\nMOONPIN-PROBE \\xff\\n')\n"
     "sys.stdout.flush()\nos._exit(0)\n", "without a readable answer"),
])
def test_odd_probe_endings_are_failures_not_tracebacks(tmp_path: Path, text: str,
                                                       words: str) -> None:
    r = run(_probe_site(tmp_path, text), deep=True)
    assert r.rc == 1 and words in r.line("deep probe"), r.out + r.err


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1", "1e999", "x"])
def test_deep_timeout_must_be_a_positive_number(tmp_path: Path, value: str) -> None:
    r = run_check("--deep-timeout", value)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--deep-timeout" in r.stderr and "Traceback" not in r.stderr


def test_quiet_prints_one_line_or_the_failures(tmp_path: Path) -> None:
    site = _probe_site(tmp_path, "x = 1\n")
    kb = small_kb(tmp_path)
    r = run(site, "-q", kb=kb)
    assert r.rc == 1 and r.lines and all(
        line.startswith(("fail", "  fix:")) for line in r.lines), r.out
    healthy = tmp_path / "h"
    add_torch(healthy)
    add_sglang(healthy)
    add_mooncake(healthy)
    r = run(healthy, "-q", kb=kb)
    assert r.rc == 0 and r.lines == ["moonpin check: usable"], r.out


# ----------------------------------------------------------------- fix lines from the shipped KB

SHIPPED = ROOT / "data" / "kb.json"


def test_a_release_that_compiles_carries_its_note_and_the_prebuild_step() -> None:
    from moonpin.preflight.extensions.seam import own_rule
    from moonpin.preflight.judge.fixes import Fixer, Project

    own = own_rule()  # mooncake's: its name, distributions and prebuild note
    fixer = Fixer(None, str(SHIPPED), Project(own.IMPORT, own.DISTRIBUTIONS[0], own.PREBUILD))
    fixer.sglang, fixer.torch, fixer.python, fixer.arch = "0.5.23", "2.14.1", "cp312", "x86_64"
    fixer.owned = [(C13, "0.3.13.post1")]
    PREBUILD = own.PREBUILD
    line = fixer.line()
    assert line.startswith(f"pip install '{C13}==0.3.14'"), line
    assert "compiles" in line and "ninja" in line and PREBUILD in line


def test_a_deleted_build_is_put_back_by_reinstalling_the_installed_release(
        tmp_path: Path) -> None:
    site = tmp_path / "site"
    add_torch(site)
    add_sglang(site, version="0.5.21")
    add_mooncake(site)
    for p in (site / "mooncake").glob("pg_2_13_0*"):
        p.unlink()
    r = run(site, kb=SHIPPED)
    assert r.rc == 1 and r.status("build") == "fail", r.out
    assert r.fixes()[0] == f"fix: pip install --force-reinstall --no-deps '{C13}==0.3.13.post1'"
    # the CUDA 12 distribution instead: the line uninstalls it first
    other = tmp_path / "other"
    add_torch(other)
    add_sglang(other, version="0.5.21")
    add_mooncake(other, dist=MC, cuda=12)
    r = run(other, kb=SHIPPED)
    assert r.rc == 1 and r.status("cuda") == "fail", r.out
    assert r.fixes()[0].startswith(f"fix: pip uninstall -y {MC} && pip install '{C13}==")


@pytest.mark.parametrize(("system_site", "env", "found"), [
    (True, {}, True),
    (True, {"PYTHONNOUSERSITE": "1"}, False),  # the worker's site leaves it out too
    (False, {}, False),  # a virtualenv of its own: no user site
])
def test_python_option_sees_the_user_site(tmp_path: Path, system_site: bool,
                                          env: dict[str, str], found: bool) -> None:
    """``--python`` asks its interpreter with ``-I``, which drops the user's site folder
    (``~/.local/lib/pythonX.Y/site-packages``); a worker started without it has it, where
    the image installed mooncake, torch and SGLang with ``pip install --user``."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv),
                    *(["--system-site-packages"] if system_site else [])], check=True)
    home = tmp_path / "home"
    user = home / ".local" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / \
        "site-packages"
    healthy_image(user)
    kb = small_kb(tmp_path)
    full = {"HOME": str(home), "MOONPIN_CHECK_SYSTEM_LIBS": str(tmp_path / "none"), **env}
    r = run_check("--python", str(venv / "bin" / "python"), "--kb", str(kb), env=full)
    assert (r.returncode == 0) is found, r.stdout + r.stderr
    assert (f"from {user}" in r.stdout or str(user) in r.stdout) is found, r.stdout


@pytest.mark.parametrize(("file", "env", "first"), [
    ("usercustomize.py", {}, True),
    ("zz.pth", {}, True),  # a .pth import line of the user's site folder
    ("usercustomize.py", {"PYTHONNOUSERSITE": "1"}, False),
])
def test_python_option_runs_the_users_site_code(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch, file: str,
                                                env: dict[str, str], first: bool) -> None:
    """The user's site folder's ``usercustomize`` and ``.pth`` lines run at a worker's
    start (not under ``-I``, which the ask used: the folder was added back, but not its
    code): one that puts the folder first makes a stale copy there the one imported (hunt
    I: ``sgl_kernel`` 0.4.8's in a copy of the real stack image with
    ``include-system-site-packages = true``, judged usable while the import failed)."""
    from moonpin.preflight.env.target import from_python

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages",
                    str(venv)], check=True)
    home = tmp_path / "home"
    user = home / ".local" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / \
        "site-packages"
    user.mkdir(parents=True)
    (user / file).write_text(f"import sys; sys.path.insert(0, {str(user)!r})\n")
    monkeypatch.setenv("HOME", str(home))
    for k in ("PYTHONUSERBASE", "PYTHONNOUSERSITE", "PYTHONSAFEPATH", "PYTHONPATH"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(tmp_path)
    t = from_python(str(venv / "bin" / "python"))
    assert (t.paths[1] == str(user)) is first, t.paths
    assert (str(user) in t.paths) is first, t.paths


@pytest.mark.parametrize("file", ["zz.pth", "sitecustomize.py"])
def test_python_option_puts_pythonpath_after_what_site_inserts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file: str) -> None:
    """A ``.pth`` ``import`` line or ``sitecustomize`` that inserts a folder at
    ``sys.path[0]`` runs after the interpreter put ``PYTHONPATH`` there: the folder comes
    before ``PYTHONPATH``'s (only ``python -m``'s working folder is put before it, later).
    The ``-I`` ask has no ``PYTHONPATH``; it was put in front of the inserted folder, and a
    stale ``sgl_kernel`` there was judged as the ``PYTHONPATH`` copy (hunt I, a copy of the
    real stack image)."""
    from moonpin.preflight.env.target import from_python

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / \
        "site-packages"
    front, given, work = tmp_path / "front", tmp_path / "given", tmp_path / "work"
    for d in (front, given, work):
        d.mkdir()
    (site / file).write_text(f"import sys; sys.path.insert(0, {str(front)!r})\n")
    monkeypatch.setenv("PYTHONPATH", str(given))
    monkeypatch.delenv("PYTHONSAFEPATH", raising=False)
    monkeypatch.chdir(work)
    t = from_python(str(venv / "bin" / "python"))
    assert t.paths[:3] == [str(work), str(front), str(given)], t.paths
    assert str(site) in t.paths


@pytest.mark.parametrize(("value", "want"), [
    (":/opt/x", ["{cwd}", "/opt/x"]),  # an empty entry: the working folder
    ("rel:/opt/x", ["{cwd}/rel", "/opt/x"]),
    ("", []),
])
def test_pythonpath_entries_as_the_interpreter_puts_them(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        value: str, want: list[str]) -> None:
    from moonpin.preflight.env import target

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", value)
    assert target._pythonpath() == [w.format(cwd=tmp_path) for w in want]


def test_python_mode_fix_lines_paste_into_a_shell_and_use_that_pip(tmp_path: Path) -> None:
    """`check --python PY`: a fix line ran a bare `pip` (another environment's, where moonpin
    runs elsewhere) and ended with `(note)`, a shell syntax error when pasted (issue 40)."""
    import shlex

    site = tmp_path / "img"
    add_torch(site, version="2.13.0+cpu", cuda=None)
    add_sglang(site, version="0.5.21")
    add_mooncake(site)
    python = fake_python(tmp_path / "venv dir" / "bin" / "python", site,
                          sys.version_info.minor)
    r = run_check("--python", str(python), "--kb", str(SHIPPED),
               env={"MOONPIN_CHECK_SYSTEM_LIBS": str(tmp_path / "none")})
    assert r.returncode == 1, r.stdout + r.stderr
    fixes = [ln[len("  fix: "):] for ln in r.stdout.splitlines() if ln.startswith("  fix: ")]
    pip = f"{shlex.quote(str(python))} -m pip"
    assert fixes and all(f.startswith(f"{pip} ") for f in fixes), fixes
    for f in fixes:
        assert " pip install" not in f.replace(f"{pip} install", "")  # no bare pip left
        words = shlex.split(f, comments=True)  # parses as a shell line, the note a comment
        assert words[:3] == [str(python), "-m", "pip"], words
        assert words[3] in ("install", "uninstall"), words
        assert not f.rstrip().endswith(")") or "  # " in f
    assert any("  # " in f for f in fixes), fixes  # the notes are comments
