"""Random small object sets, built with gcc and GNU ld, loaded for real and judged by moonpin.

Each scenario (one seed) is a Python package ``fzpkg`` in a ``site`` folder:

* shared libraries ``libfz<seed>_<i>.so`` in ``fzpkg/``, ``fzpkg/sub/``, ``libs/`` or
  ``ldp/`` (on ``LD_LIBRARY_PATH`` or not), each defining a few functions, referencing
  others (some weak), needing later ones (``DT_NEEDED``), with ``DT_RUNPATH``, ``DT_RPATH``
  or no path (``$ORIGIN``-relative), some with version scripts: default ``sym@@V`` and
  hidden ``sym@V`` versions, symbols of the base version;
* an earlier import: ``fzpkg/__init__.py`` loading some of them with ``ctypes.CDLL``
  (``RTLD_GLOBAL`` or local) and importing an extension module ``fzpkg.pre``, guarded by
  ``try``/``except`` or not;
* the root: the extension module ``fzpkg.mod`` (``PyInit_mod``), imported for real by
  ``python -c "import fzpkg.mod"``.

The objects each consumer links against are the libraries as first built; some are then
changed before the run (a symbol dropped, the versions removed or renamed, a symbol
left only as a hidden version, the file deleted or moved), as an image's library
replaced by another release's. :func:`real` says what the loader does,
:func:`judged` what moonpin says (``moonpin.preflight.loader.loadchain``, the check's own
path), and :func:`disagreement` compares them.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from importlib import machinery
from pathlib import Path
from typing import Any

__all__ = ["Scenario", "build", "can_build", "disagreement", "generate", "judged", "real",
           "reasons"]

FOLDERS = ("fzpkg", "fzpkg/sub", "libs", "ldp")
_EXT = machinery.EXTENSION_SUFFIXES[0]
_INCLUDE = sysconfig.get_paths()["include"]


def can_build() -> str | None:
    """Why scenarios cannot be built here (None: they can)."""
    if shutil.which("gcc") is None:
        return "needs gcc"
    if not (Path(_INCLUDE) / "Python.h").exists():
        return f"needs Python's headers ({_INCLUDE}/Python.h)"
    return None


@dataclass
class Obj:
    """A shared object of a scenario (a library, or an extension module: ``module``)."""

    name: str
    folder: str
    defines: list[str] = field(default_factory=list)
    refs: list[tuple[str, bool]] = field(default_factory=list)  # (symbol, weak)
    needs: list[int] = field(default_factory=list)  # library indexes
    tag: str | None = None  # "runpath", "rpath" or None
    search: list[str] = field(default_factory=list)  # folders of FOLDERS, or "nowhere"
    #: symbol -> its default version node; None: no version script
    versions: dict[str, str] | None = None
    hidden: dict[str, str] = field(default_factory=dict)  # symbol -> an older hidden node
    change: str = "same"  # what happens to it after the consumers are linked
    module: str | None = None


@dataclass
class Scenario:
    seed: int
    libs: list[Obj]
    root: Obj
    pre: list[tuple[str, object, int, bool]]  # ("ctypes", lib index, mode, guarded) or
    #                                          ("ext", Obj, 0, guarded)
    ld_path: bool

    def describe(self) -> str:
        out = [f"seed {self.seed}; LD_LIBRARY_PATH={'ldp' if self.ld_path else '-'}"]
        for o in [*self.libs, self.root, *(p[1] for p in self.pre if p[0] == "ext")]:
            assert isinstance(o, Obj)
            out.append(f"  {o.folder}/{o.name}: defines {o.defines} refs {o.refs} needs "
                       f"{[self.libs[i].name for i in o.needs]} {o.tag or 'no path'} "
                       f"{o.search} versions {o.versions} hidden {o.hidden} -> {o.change}")
        for p in self.pre:
            if p[0] == "ctypes":
                assert isinstance(p[1], int)
                out.append(f"  pre: ctypes.CDLL({self.libs[p[1]].name}, mode {p[2]:#x})"
                           f"{' guarded' if p[3] else ''}")
            else:
                out.append(f"  pre: import fzpkg.pre{' guarded' if p[3] else ''}")
        return "\n".join(out)


def _paths(rnd: random.Random, o: Obj, libs: list[Obj] | None = None) -> None:
    """``o``'s search path: mostly one that names the folders of what it needs (so that
    binding and versions decide most scenarios), sometimes any."""
    o.tag = rnd.choice(["runpath"] * 4 + ["rpath"] * 4 + [None])
    if o.tag is None:
        return
    o.search = rnd.sample([*FOLDERS, "nowhere"], rnd.randint(1, 3))
    if libs is not None and rnd.random() < 0.85:
        ldp = rnd.random() < 0.5  # else LD_LIBRARY_PATH is what finds them, when set
        wanted = [libs[i].folder for i in o.needs if ldp or libs[i].folder != "ldp"]
        o.search = list(dict.fromkeys([*wanted, *o.search[:1]]))


def _refs(rnd: random.Random, o: Obj, libs: list[Obj], pool: list[str],
          most: int) -> list[tuple[str, bool]]:
    """Symbols ``o`` references: mostly ones what it needs defines, some weak."""
    near: list[str] = []
    todo = list(o.needs)
    while todo:
        i = todo.pop()
        near += libs[i].defines
        todo += libs[i].needs
    out = []
    for _ in range(rnd.randint(0, most)):
        s = rnd.choice(near) if near and rnd.random() < 0.8 else rnd.choice(pool)
        if s not in (r for r, _ in out):
            out.append((s, rnd.random() < 0.15))
    return out


def generate(seed: int) -> Scenario:
    rnd = random.Random(seed)
    pool = [f"fz{seed}_s{k}" for k in range(rnd.randint(3, 8))]
    n = rnd.randint(2, 5)
    libs = []
    for i in range(n):
        lib = Obj(f"libfz{seed}_{i}.so", rnd.choice(FOLDERS))
        lib.defines = rnd.sample(pool, rnd.randint(1, min(4, len(pool))))
        lib.needs = sorted(rnd.sample(range(i + 1, n), rnd.randint(0, min(2, n - i - 1))))
        if rnd.random() < 0.5:
            nodes = [f"FZ{seed}_{i}_1", f"FZ{seed}_{i}_2"]
            # a symbol in no node is of the base version (index 1)
            lib.versions = {s: rnd.choice([*nodes, nodes[1], ""]) for s in lib.defines}
            for s, node in lib.versions.items():
                if node == nodes[1] and rnd.random() < 0.4:
                    lib.hidden[s] = nodes[0]  # s@V1 (hidden) beside s@@V2
        lib.change = rnd.choice(["same"] * 8 + ["drop", "drop", "delete", "move"]
                                + ["unversion", "rename", "rename", "hide", "hide"]
                                * (3 if lib.versions is not None else 0))
        libs.append(lib)
    for lib in libs:
        _paths(rnd, lib, libs)
    for lib in libs:
        lib.refs = [(s, w) for s, w in _refs(rnd, lib, libs, pool, 2) if s not in lib.defines]
    root = Obj("mod" + _EXT, "fzpkg", module="mod")
    root.needs = sorted(rnd.sample(range(n), rnd.randint(1, min(3, n))))
    root.refs = _refs(rnd, root, libs, pool, 3) or [(rnd.choice(pool), False)]
    _paths(rnd, root, libs)
    pre: list[tuple[str, object, int, bool]] = []
    if rnd.random() < 0.6:
        for _ in range(rnd.randint(1, 2)):
            guarded = rnd.random() < 0.5
            if rnd.random() < 0.6:
                mode = rnd.choice([0, 0x100])  # RTLD_LOCAL (ctypes' default), RTLD_GLOBAL
                pre.append(("ctypes", rnd.randrange(n), mode, guarded))
            elif not any(p[0] == "ext" for p in pre):
                ext = Obj("pre" + _EXT, "fzpkg", module="pre")
                ext.needs = sorted(rnd.sample(range(n), rnd.randint(1, min(2, n))))
                ext.refs = _refs(rnd, ext, libs, pool, 2)
                _paths(rnd, ext, libs)
                pre.append(("ext", ext, 0, guarded))
    return Scenario(seed, libs, root, pre, rnd.random() < 0.7)


# ------------------------------------------------------------------ building


def _source(o: Obj, defines: list[str], hidden_only: dict[str, str],
            hidden: dict[str, str]) -> str:
    out = []
    for s in defines:
        if s in hidden_only:
            out.append(f"int {s}_h(void) {{ return 1; }}\n"
                       f'__asm__(".symver {s}_h,{s}@{hidden_only[s]}");')
            continue
        if s in hidden:
            out.append(f"int {s}_h(void) {{ return 1; }}\n"
                       f'__asm__(".symver {s}_h,{s}@{hidden[s]}");')
        out.append(f"int {s}(void) {{ return 2; }}")
    calls = []
    for s, weak in o.refs:
        out.append(f"extern int {s}(void)" + (" __attribute__((weak));" if weak else ";"))
        calls.append(f"({s} ? {s}() : 0)" if weak else f"{s}()")
    out.append(f"int use_{o.name.split('.')[0]}(void) {{ return 0"
               + "".join(f" + {c}" for c in calls) + "; }")
    if o.module is not None:
        out.insert(0, "#include <Python.h>")
        out.append(f'static struct PyModuleDef def_ = {{PyModuleDef_HEAD_INIT, "{o.module}", '
                   "NULL, -1, NULL};")
        out.append(f"PyMODINIT_FUNC PyInit_{o.module}(void) {{ return PyModule_Create(&def_); }}")
    return "\n".join(out) + "\n"


def _script(versions: dict[str, str], hidden: dict[str, str], rename: bool) -> str:
    nodes: dict[str, list[str]] = {}
    for s, node in versions.items():
        if node:
            nodes.setdefault(node, []).append(s)
    for node in hidden.values():
        nodes.setdefault(node, [])
    names = sorted({*nodes, *(n for n in versions.values() if n)})
    if not names:
        names = ["FZ_BASE_ONLY"]
    impl = [f"{s}_h" for s in hidden]
    out, parent = [], None
    for i, node in enumerate(names):
        shown = node + ("_R" if rename and i == len(names) - 1 else "")
        syms = nodes.get(node, [])
        body = (" global: " + " ".join(f"{s};" for s in syms)) if syms else ""
        if i == 0 and impl:
            body += " local: " + " ".join(f"{x};" for x in impl)
        out.append(f"{shown} {{{body} }}" + (f" {parent};" if parent else ";"))
        parent = shown
    return "\n".join(out) + "\n"


def _folder(site: Path, folder: str) -> Path:
    return site / folder


def _search(o: Obj, site: Path) -> list[str]:
    here = _folder(site, o.folder)
    out = []
    for f in o.search:
        target = site / "nowhere" if f == "nowhere" else _folder(site, f)
        rel = os.path.relpath(target, here)
        out.append("$ORIGIN" if rel == "." else f"$ORIGIN/{rel}")
    return out


def _gcc(o: Obj, sc: Scenario, site: Path, work: Path, *, defines: list[str],
         versions: dict[str, str] | None, hidden: dict[str, str],
         hidden_only: dict[str, str], rename: bool = False,
         link: Path | None = None) -> subprocess.Popen[bytes]:
    """gcc building ``o`` into ``site``, linking what it needs from ``link`` (the
    libraries as first built; default: ``site``)."""
    out = _folder(site, o.folder) / o.name
    out.parent.mkdir(parents=True, exist_ok=True)
    stem = f"{o.name.split('.')[0]}_{abs(hash((tuple(defines), rename, tuple(hidden_only))))}"
    src = work / f"{stem}.c"
    src.write_text(_source(o, defines, hidden_only, hidden))
    cmd = ["gcc", "-shared", "-fPIC", "-nostdlib", "-o", str(out), str(src),
           "-Wl,--no-as-needed", "-Wl,--allow-shlib-undefined"]
    if o.module is None:
        cmd.append(f"-Wl,-soname,{o.name}")
    else:
        cmd.append(f"-I{_INCLUDE}")
    if versions is not None:
        vs = work / f"{stem}.map"
        vs.write_text(_script(versions, {**hidden, **hidden_only}, rename))
        cmd.append(f"-Wl,--version-script={vs}")
    if o.tag is not None:
        cmd += [f"-Wl,-rpath,{':'.join(_search(o, site))}",
                "-Wl,--enable-new-dtags" if o.tag == "runpath" else "-Wl,--disable-new-dtags"]
    for i in o.needs:
        dep = sc.libs[i]
        cmd += [f"-L{_folder(link or site, dep.folder)}", f"-l:{dep.name}"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        _, err = p.communicate(timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"gcc failed: {err.decode(errors='replace')[-2000:]}")


def build(sc: Scenario, site: Path, work: Path) -> None:
    """The scenario's files under ``site`` (compiled in ``work``)."""
    work.mkdir(parents=True, exist_ok=True)
    for i in reversed(range(len(sc.libs))):  # a library links what it needs: built first
        lib = sc.libs[i]
        _wait([_gcc(lib, sc, site, work, defines=lib.defines, versions=lib.versions,
                    hidden=lib.hidden, hidden_only={})])
    link = work / "link"  # what everything is linked against: the first builds
    shutil.copytree(site, link)
    consumers = [sc.root, *(p[1] for p in sc.pre if p[0] == "ext")]
    _wait([_gcc(o, sc, site, work, defines=[], versions=None, hidden={}, hidden_only={},
                link=link) for o in consumers if isinstance(o, Obj)])
    # the run's libraries: some changed after everything was linked against them
    procs = []
    for lib in sc.libs:
        if lib.change == "drop" and len(lib.defines) > 0:
            gone = lib.defines[0]
            procs.append(_gcc(lib, sc, site, work, defines=lib.defines[1:],
                              versions=_without(lib.versions, gone),
                              hidden=_without(lib.hidden, gone) or {}, hidden_only={},
                              link=link))
        elif lib.change == "unversion":
            procs.append(_gcc(lib, sc, site, work, defines=lib.defines, versions=None,
                              hidden={}, hidden_only={}, link=link))
        elif lib.change == "rename" and lib.versions is not None:
            procs.append(_gcc(lib, sc, site, work, defines=lib.defines,
                              versions=lib.versions, hidden=lib.hidden, hidden_only={},
                              rename=True, link=link))
        elif lib.change == "hide" and lib.versions is not None:
            s = lib.defines[0]
            node = lib.versions.get(s) or next(iter(v for v in lib.versions.values() if v),
                                               f"FZ{sc.seed}_hide")
            procs.append(_gcc(lib, sc, site, work, defines=lib.defines,
                              versions={**(_without(lib.versions, s) or {}), "": ""},
                              hidden=_without(lib.hidden, s) or {}, hidden_only={s: node},
                              link=link))
    _wait(procs)
    for lib in sc.libs:
        path = _folder(site, lib.folder) / lib.name
        if lib.change == "delete":
            path.unlink()
        elif lib.change == "move":
            dest = next(f for f in (*FOLDERS, "nowhere") if f != lib.folder)
            target = _folder(site, dest) / lib.name
            target.parent.mkdir(parents=True, exist_ok=True)
            path.rename(target)
    (site / "ldp").mkdir(parents=True, exist_ok=True)
    (site / "fzpkg" / "__init__.py").write_text(_init(sc))


def _without(d: dict[str, str] | None, key: str) -> dict[str, str] | None:
    return None if d is None else {k: v for k, v in d.items() if k != key}


def _init(sc: Scenario) -> str:
    lines = ["import ctypes", "import os", "", "_here = os.path.dirname(__file__)"]
    for kind, what, mode, guarded in sc.pre:
        if kind == "ctypes":
            assert isinstance(what, int)
            lib = sc.libs[what]
            rel = os.path.relpath(lib.folder, "fzpkg").split(os.sep)
            call = (f"ctypes.CDLL(os.path.join(_here, {', '.join(map(repr, rel))}, "
                    f"{lib.name!r}), mode={mode})")
            error = "OSError"
        else:
            call, error = "from fzpkg import pre", "ImportError"
        if guarded:
            lines += ["try:", f"    {call}", f"except {error}:", "    pass"]
        else:
            lines.append(call)
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ running, judging


def _env(sc: Scenario, site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_LIBRARY_PATH", "PYTHONPATH", "LD_PRELOAD", "LD_BIND_NOW")}
    env["PYTHONPATH"] = str(site)
    if sc.ld_path:
        env["LD_LIBRARY_PATH"] = str(site / "ldp")
    return env


def real(sc: Scenario, site: Path) -> tuple[bool, str]:
    """What ``python -c "import fzpkg.mod"`` does: (it worked, the error's last line)."""
    proc = subprocess.run([sys.executable, "-c", "import fzpkg.mod"], capture_output=True,
                          text=True, timeout=60, env=_env(sc, site), cwd=site.parent)
    lines = proc.stderr.strip().splitlines()
    return proc.returncode == 0, lines[-1] if lines else f"exit {proc.returncode}"


def judged(sc: Scenario, site: Path) -> tuple[bool, str, object]:
    """What moonpin says of the same import: (it works, why not, the report)."""
    from moonpin.preflight.loader.loadchain import native_load

    rep = native_load([str(site / "fzpkg" / sc.root.name)], [str(site)], "fzpkg.mod",
                      python=sys.executable, suffixes=machinery.EXTENSION_SUFFIXES,
                      ld_path=[str(site / "ldp")] if sc.ld_path else [],
                      version=sys.version_info[:2])
    why = reasons(rep)
    return not why, why, rep


def reasons(rep: Any) -> str:
    """Why a :func:`~moonpin.preflight.loader.loadchain.native_load` report fails ("": it
    does not), in one line."""
    why = []
    if rep.chain_error is not None:
        why.append(f"chain: {rep.chain_error[1]}: {rep.chain_error[2]}")
    why += [f"missing {n}" for n in rep.missing]
    why += [f"bad {p}: {w}" for p, w in rep.bad.items()]
    why += [f"version {v} of {p}" for _, v, p, _ in rep.versions]
    why += [f"undefined {s}" + (f"@{v}" if v else "") for _, s, v, _ in rep.unbound]
    return "; ".join(why)


def disagreement(sc: Scenario, site: Path,
                 truth: tuple[bool, str] | None = None) -> str | None:
    """None when moonpin and the loader agree (on the verdict, and on what the loader
    names first being among what moonpin names); else both, and the scenario.
    ``truth``: :func:`real`'s answer, when already known."""
    ok, err = truth if truth is not None else real(sc, site)
    says_ok, why, _ = judged(sc, site)
    if ok == says_ok:
        if ok:
            return None
        token = _token(err)
        if token is None or token in why:
            return None
    return (f"the loader: {'ok' if ok else err}\nmoonpin: {'ok' if says_ok else why}\n"
            + sc.describe())


def _token(err: str) -> str | None:
    """What the loader's message is about: a symbol, a version or a library name."""
    for head in ("undefined symbol: ", "version `"):
        if head in err:
            tail = err.rpartition(head)[2]
            return tail.split("'")[0].split(",")[0].strip()
    if ": cannot open shared object file" in err:
        return os.path.basename(err.partition(": cannot open shared object file")[0].split(
            ": ")[-1])
    return None
