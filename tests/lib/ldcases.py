"""Small hand-made object sets for one loader class each, built with gcc and GNU ld, imported
for real (``python -c "import lcpkg.mod"``) and judged by moonpin (the check's own path,
:func:`moonpin.preflight.loader.loadchain.native_load`), in the same working folder.

A case is a ``site`` folder holding the package ``lcpkg``: libraries built by :func:`lib`
(any folder under ``site``, any C source, any linker flags) and the extension module
``lcpkg.mod`` built by :func:`module`, which references the symbols it is given."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from importlib import machinery
from pathlib import Path

from tests.lib.ldfuzz import can_build, reasons

__all__ = ["can_build", "judged", "lib", "module", "real"]

EXT = machinery.EXTENSION_SUFFIXES[0]
_INCLUDE = sysconfig.get_paths()["include"]




def _gcc(out: Path, src: str, args: list[str]) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    c = out.with_name(out.name + ".c")
    c.write_text(src)
    cmd = ["gcc", "-shared", "-fPIC", "-o", str(out), str(c), "-Wl,--no-as-needed",
           "-Wl,--allow-shlib-undefined", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    c.unlink()
    if proc.returncode != 0:
        raise RuntimeError(f"gcc failed: {proc.stderr[-2000:]}")
    return out


def _path_flags(rpath: str | None, runpath: str | None) -> list[str]:
    out = []
    if rpath is not None:
        out += [f"-Wl,-rpath,{rpath}", "-Wl,--disable-new-dtags"]
    if runpath is not None:
        out += [f"-Wl,-rpath,{runpath}", "-Wl,--enable-new-dtags"]
    return out


def lib(site: Path, rel: str, src: str = "", *, needs: tuple[str, ...] = (),
        rpath: str | None = None, runpath: str | None = None, soname: str | None = None,
        args: tuple[str, ...] = ()) -> Path:
    """The library ``site/rel`` from C source ``src``; ``needs``: paths (under ``site``)
    of the libraries it links (``DT_NEEDED`` their file names)."""
    out = site / rel
    flags = [f"-Wl,-soname,{soname or out.name}", *_path_flags(rpath, runpath), *args]
    for n in needs:
        flags += [f"-L{(site / n).parent}", f"-l:{Path(n).name}"]
    return _gcc(out, src or f"int {out.name.split('.')[0]}_here(void) {{ return 1; }}\n",
                flags)


def module(site: Path, refs: tuple[str, ...] = (), *, needs: tuple[str, ...] = (),
           rpath: str | None = None, runpath: str | None = None, weak: tuple[str, ...] = (),
           args: tuple[str, ...] = (), extra: str = "") -> Path:
    """The extension module ``lcpkg.mod``, calling ``refs`` (and ``weak``, weakly)."""
    src = ["#include <Python.h>", extra]
    src += [f"extern int {s}(void);" for s in refs]
    src += [f"extern int {s}(void) __attribute__((weak));" for s in weak]
    body = " + ".join([*(f"{s}()" for s in refs), *(f"({s} ? {s}() : 0)" for s in weak)])
    src.append(f"int lc_use(void) {{ return 0{' + ' + body if body else ''}; }}")
    src.append('static struct PyModuleDef def_ = {PyModuleDef_HEAD_INIT, "mod", NULL, -1, '
               "NULL};")
    src.append("PyMODINIT_FUNC PyInit_mod(void) { return PyModule_Create(&def_); }")
    flags = [f"-I{_INCLUDE}", *_path_flags(rpath, runpath), *args]
    for n in needs:
        flags += [f"-L{(site / n).parent}", f"-l:{Path(n).name}"]
    pkg = site / "lcpkg"
    pkg.mkdir(parents=True, exist_ok=True)
    if not (pkg / "__init__.py").exists():
        (pkg / "__init__.py").write_text("")
    return _gcc(pkg / ("mod" + EXT), "\n".join(src) + "\n", flags)


def _env(site: Path, ld_path: str | None, preload: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_LIBRARY_PATH", "PYTHONPATH", "LD_PRELOAD", "LD_BIND_NOW")}
    env["PYTHONPATH"] = str(site)
    if ld_path is not None:
        env["LD_LIBRARY_PATH"] = ld_path
    if preload is not None:
        env["LD_PRELOAD"] = preload
    return env


def real(site: Path, cwd: Path, ld_path: str | None = None,
         preload: str | None = None) -> tuple[bool, str]:
    """What ``python -c "import lcpkg.mod"`` does run in ``cwd``: (it worked, the last line
    of its error)."""
    proc = subprocess.run([sys.executable, "-c", "import lcpkg.mod"], capture_output=True,
                          text=True, timeout=60, env=_env(site, ld_path, preload), cwd=cwd)
    lines = proc.stderr.strip().splitlines()
    return proc.returncode == 0, lines[-1] if lines else f"exit {proc.returncode}"


def judged(site: Path, cwd: Path, ld_path: str | None = None,
           preload: str | None = None) -> tuple[bool, str]:
    """What moonpin says of the same import from the same working folder: (it works, why
    not). ``preload``: ``LD_PRELOAD``, set in this process while it judges."""
    from moonpin.preflight.loader import ldso
    from moonpin.preflight.loader.loadchain import native_load

    here = os.getcwd()
    before = os.environ.pop("LD_PRELOAD", None)
    if preload is not None:
        os.environ["LD_PRELOAD"] = preload
    os.chdir(cwd)
    try:
        ld = ldso.ld_path_folders(ld_path, os.path.realpath(sys.executable)) if ld_path else []
        rep = native_load([str(site / "lcpkg" / ("mod" + EXT))], [str(site)], "lcpkg.mod",
                          python=sys.executable, suffixes=machinery.EXTENSION_SUFFIXES,
                          ld_path=ld, version=sys.version_info[:2])
    finally:
        os.chdir(here)
        os.environ.pop("LD_PRELOAD", None)
        if before is not None:
            os.environ["LD_PRELOAD"] = before
    why = reasons(rep)
    return not why, why
