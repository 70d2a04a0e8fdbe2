"""``LD_PRELOAD`` as ld.so takes it at the interpreter's start: each object mapped after the
interpreter and before what it needs, in the global scope (a symbol a build's libraries
lost is found there; a preloaded library answers a ``DT_NEEDED`` of its soname), one that
cannot be loaded ignored; checked against the real loader."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from moonpin.preflight.loader import ldproc

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def _so(out: Path, code: str, *libs: str, soname: str | None = None) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.with_suffix(".c")
    src.write_text(code)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src),
                    f"-Wl,-soname,{soname or out.name}", f"-L{out.parent}", "-Wl,-rpath,$ORIGIN",
                    "-Wl,--no-as-needed", *(f"-l:{lib}" for lib in libs)],
                   check=True, capture_output=True)
    return out


def _real(build: Path, preload: str) -> str:
    code = ("import ctypes, os, sys\ntry:\n    ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW)\n"
            "    print('ok')\nexcept OSError as e:\n    print(e)\n")
    env = {**os.environ, "LD_PRELOAD": preload}
    return subprocess.run([sys.executable, "-c", code, str(build)], capture_output=True,
                          text=True, env=env, timeout=30).stdout.strip()


def _model(build: Path, preload: list[str]) -> ldproc.Outcome:
    top = str(build.parent.parent)
    proc = ldproc.Process(machine=os.uname().machine, owned=lambda p: p.startswith(top))
    proc.start(os.path.realpath(sys.executable), preload)
    return proc.dlopen(str(build), ldproc.RTLD_NOW)


@pytest.fixture(autouse=True)
def _hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONPIN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)


def test_a_preloaded_library_provides_a_lost_symbol(tmp_path: Path) -> None:
    lib = tmp_path / "site" / "mooncake"
    _so(lib / "libdef.so", "int mp_foo(void) { return 1; }\n")
    build = _so(lib / "build.so", "extern int mp_foo(void);\nint f(void) { return mp_foo(); }\n",
                "libdef.so")
    _so(lib / "libdef.so", "int mp_bar(void) { return 1; }\n")  # mp_foo lost
    full = _so(tmp_path / "pre" / "libfull.so", "int mp_foo(void) { return 2; }\n")
    assert "undefined symbol: mp_foo" in _real(build, "")
    assert _real(build, str(full)) == "ok"
    assert [s for _, s, _, _ in _model(build, []).unbound] == ["mp_foo"]
    assert _model(build, [str(full)]).error is None
    # one that cannot be loaded is ignored: the symbol is still missing
    assert "undefined symbol: mp_foo" in _real(build, str(tmp_path / "none.so"))
    assert _model(build, [str(tmp_path / "none.so")]).error is not None


def test_a_preloaded_library_answers_a_needed_name(tmp_path: Path) -> None:
    lib = tmp_path / "site" / "mooncake"
    _so(lib / "libdep.so", "int mp_foo(void) { return 1; }\n")
    build = _so(lib / "build.so", "extern int mp_foo(void);\nint f(void) { return mp_foo(); }\n",
                "libdep.so")
    empty = _so(tmp_path / "pre" / "libdep.so", "int other(void) { return 1; }\n")
    assert _real(build, "") == "ok" and "undefined symbol: mp_foo" in _real(build, str(empty))
    assert _model(build, []).error is None
    got = _model(build, [str(empty)])
    assert got.error is not None and "mp_foo" in got.error
