"""Random import layouts, and what CPython's importer and moonpin's model of it
(:mod:`moonpin.preflight.pyimport.metapath`) make of them.

A layout is a set of folders the harness writes itself (every file: stub ``__init__``
files that do nothing but, for mooncake, ``__path__ = extend_path(__path__, __name__)``;
``.pyc`` files compiled from such stubs; extension files that are not ELF, so their import
fails harmlessly): several ``sys.path`` folders (a working folder first, ``PYTHONPATH``-like
folders, site folders with ``.pth`` files whose path lines are relative, absolute or
missing and whose ``import`` lines are harmless), regular packages, namespace portions,
module files with each suffix kind, folders an uninstall left behind, ``NAME.pkg`` files,
and the editable finders setuptools, hatchling (``editables``) and scikit-build-core write
(:mod:`tests.lib.editable_templates`).

:func:`truth` builds ``sys.path`` in a child interpreter as ``site`` does (``-S``, then
``site.addsitedir`` per site folder) and asks ``importlib.util.find_spec`` for each name,
importing each parent first; :func:`model` asks moonpin's model the same with the
``sys.path`` the child reports (its folders, as ``check --python`` reads them).
"""

from __future__ import annotations

import json
import os
import py_compile
import random
import subprocess
import sys
import sysconfig
from importlib import machinery
from pathlib import Path
from typing import Any

from tests.lib.editable_templates import EDITABLES_REDIRECTOR, SETUPTOOLS_FINDER, SKBC_REDIRECT

__all__ = ["NAMES", "Layout", "compare", "generate", "model", "truth"]

#: The module names asked of every layout.
NAMES = ("sglang", "sglang.srt", "sglang.srt.x", "sglang.srt.x.y", "sglang.launch_server",
         "mooncake", "mooncake.pg", "mooncake.pg_2_13_0", "torch", "torch.version")
EXT = machinery.EXTENSION_SUFFIXES
EXTEND = "from pkgutil import extend_path\n__path__ = extend_path(__path__, __name__)\n"
_STDLIB = [p for p in dict.fromkeys([sysconfig.get_path("stdlib"),
                                     sysconfig.get_path("platstdlib")]) if p]
_DYNLOAD = os.path.join(sysconfig.get_path("stdlib"), "lib-dynload")


class Layout:
    """The folders of one layout: ``front`` (``sys.path`` ahead of the standard library:
    the working folder first when there is one), ``sites`` (processed by ``site`` in
    order), and a description of what was written (for a failure's message)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.cwd: Path | None = None
        self.front: list[Path] = []
        self.sites: list[Path] = []
        self.notes: list[str] = []

    def describe(self) -> str:
        lines = [f"cwd={self.cwd}", f"front={[str(p) for p in self.front]}",
                 f"sites={[str(p) for p in self.sites]}", *self.notes]
        for root, dirs, files in sorted(os.walk(self.base)):
            dirs[:] = [d for d in sorted(dirs) if d != "__pycache__"]
            for f in sorted(files):
                p = Path(root, f)
                rel = p.relative_to(self.base)
                if p.suffix in (".py", ".pth", ".pkg") and p.stat().st_size < 300:
                    lines.append(f"  {rel}: {p.read_text()!r}")
                else:
                    lines.append(f"  {rel}")
        return "\n".join(lines)


def _write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


def _module(path: Path, kind: str, source: str = "") -> None:
    """A module file ``path`` (without suffix) of ``kind``: ``py``, ``pyc`` (compiled from
    ``source``) or ``ext`` (not ELF: its import fails)."""
    if kind == "py":
        _write(path.with_name(path.name + ".py"), source)
    elif kind == "pyc":
        src = path.with_name(path.name + "._src.py")
        _write(src, source)
        py_compile.compile(str(src), cfile=str(path.with_name(path.name + ".pyc")),
                           doraise=True)
        src.unlink()
    else:
        _write(path.with_name(path.name + random.choice(EXT)), b"not an ELF object\n")


def _package(rng: random.Random, folder: Path, name: str, init: str | None) -> None:
    """Package ``name`` in ``folder``: ``init`` is the kind of its ``__init__`` (None: a
    namespace portion), with contents typical of the name."""
    pkg = folder / name
    pkg.mkdir(parents=True, exist_ok=True)
    if init is not None:
        text = EXTEND if name == "mooncake" and init == "py" and rng.random() < 0.6 else ""
        _module(pkg / "__init__", init, text)
    kinds = ["py", "py", "py", "pyc", "ext"]
    if name == "sglang":
        if rng.random() < 0.8:
            srt = pkg / "srt"
            srt.mkdir(exist_ok=True)
            if rng.random() < 0.6:
                _module(srt / "__init__", rng.choice(["py", "py", "pyc"]))
            if rng.random() < 0.8:
                x = srt / "x"
                x.mkdir(exist_ok=True)
                if rng.random() < 0.6:
                    _module(x / "__init__", "py")
                if rng.random() < 0.8:
                    _module(x / "y", rng.choice(kinds))
                if rng.random() < 0.2:
                    (x / "y").mkdir(exist_ok=True)  # shadows or is shadowed by y.<suffix>
        if rng.random() < 0.5:
            _module(pkg / "launch_server", rng.choice(kinds))
    elif name == "mooncake":
        for mod in ("pg", "pg_2_13_0"):
            r = rng.random()
            if r < 0.45:
                _module(pkg / mod, rng.choice(kinds))
            elif r < 0.55:
                (pkg / mod).mkdir(exist_ok=True)
                _module(pkg / mod / "__init__", "py")
            elif r < 0.6:
                (pkg / mod).mkdir(exist_ok=True)  # a namespace folder
            if r < 0.15:
                _module(pkg / mod, rng.choice(kinds))  # a second kind beside the first
    elif name == "torch" and rng.random() < 0.8:
        _module(pkg / "version", rng.choice(["py", "py", "pyc"]), "__version__ = '2.13.0'\n")


_KINDS = ["regular-py", "regular-py", "regular-py", "regular-pyc", "regular-ext",
          "namespace", "namespace", "module-py", "module-pyc", "module-ext", "stray"]


def _place(rng: random.Random, lay: Layout, folder: Path, name: str) -> None:
    kind = rng.choice(_KINDS)
    lay.notes.append(f"{name} {kind} in {folder}")
    if kind.startswith("regular"):
        _package(rng, folder, name, kind.split("-")[1])
    elif kind == "namespace":
        _package(rng, folder, name, None)
    elif kind.startswith("module"):
        _module(folder / name, kind.split("-")[1])
    else:  # what an uninstall leaves: bytecode and a data file, no __init__
        _write(folder / name / "__pycache__" / "__init__.cpython-311.pyc", b"")
        _write(folder / name / "libleft.so.1", b"")


def _setuptools(rng: random.Random, lay: Layout, site: Path, name: str, co: Path) -> None:
    """``pip install -e`` of a setuptools project with package ``name`` under ``co``:
    ``MAPPING`` to its folder, ``NAMESPACES`` for its subpackages without ``__init__``."""
    pkg_dir = co / "python" / name
    _package(rng, co / "python", name, rng.choice(["py", "py", "py", None]))
    namespaces: dict[str, list[str]] = {}
    for root, dirs, files in os.walk(pkg_dir):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = Path(root).relative_to(co / "python")
        if Path(root) != pkg_dir and not any(f.startswith("__init__.") for f in files):
            namespaces[".".join(rel.parts)] = [root]
    if rng.random() < 0.2:
        namespaces[name] = []  # a top-level namespace project
    dist = f"{name}-0.0.{rng.randint(0, 9)}"
    mod = f"__editable___{dist.replace('-', '_').replace('.', '_')}_finder"
    text = SETUPTOOLS_FINDER.format(mapping={name: str(pkg_dir)}, namespaces=namespaces,
                                    name=f"__editable__.{dist}.finder")
    _write(site / f"{mod}.py", text)
    install = rng.random() < 0.9
    _write(site / f"__editable__.{dist}.pth",
           f"import {mod}; {mod}.install()" if install else f"import {mod}")
    lay.notes.append(f"setuptools editable {name} -> {pkg_dir} ns={sorted(namespaces)}")


def _hatch(rng: random.Random, lay: Layout, site: Path, name: str, co: Path) -> None:
    """hatchling ``dev-mode-exact``: ``editables``' bootstrap (``editables`` itself in the
    site folder most of the time)."""
    _package(rng, co / "src", name, "py")
    target = co / "src" / name / "__init__.py"
    if rng.random() < 0.15:
        target = co / "src" / name / "gone.py"  # mapped, then deleted
    boot = f"_editable_impl_{name}"
    _write(site / f"{boot}.py", "from editables.redirector import RedirectingFinder as F\n"
           f"F.install()\nF.map_module({name!r}, {str(target)!r})")
    _write(site / f"{boot}.pth", f"import {boot}")
    if rng.random() < 0.85:
        _write(site / "editables" / "__init__.py", "")
        _write(site / "editables" / "redirector.py", EDITABLES_REDIRECTOR)
    lay.notes.append(f"hatch editable {name} -> {target}")


def _skbc(rng: random.Random, lay: Layout, site: Path, name: str, co: Path) -> None:
    """scikit-build-core ``editable.mode = "redirect"``: source files and directories
    under ``co``, a module installed into the site folder (a known wheel file)."""
    init = rng.choice(["py", "py", None])
    _package(rng, co / "src", name, init)
    pkg_dir = co / "src" / name
    files: dict[str, str] = {}
    dirs: dict[str, list[str]] = {}
    packages: list[str] = []
    for root, sub, names in os.walk(pkg_dir):
        sub[:] = [d for d in sub if d != "__pycache__"]
        mod = ".".join(Path(root).relative_to(co / "src").parts)
        dirs[mod] = [root]
        for f in names:
            if f == "__init__.py":
                files[mod] = os.path.join(root, f)
                packages.append(mod)
            elif f.endswith(".py"):
                files[f"{mod}.{f[:-3]}"] = os.path.join(root, f)
    wheel: dict[str, str] = {}
    if rng.random() < 0.4:
        _write(site / name / f"_core{EXT[0]}", b"not an ELF object\n")
        wheel[f"{name}._core"] = f"{name}/_core{EXT[0]}"
        dirs.setdefault(name, []).append(name)
    mod = f"_editable_skbc_{name}"
    args = (files, wheel, dirs, packages, None, False, False, [], [], "")
    _write(site / f"{mod}.py", SKBC_REDIRECT + "\n\ninstall("
           + ", ".join(repr(a) for a in args) + ")\n")
    _write(site / f"{mod}.pth", f"import {mod}\n")
    lay.notes.append(f"skbc editable {name} -> {pkg_dir}")


def generate(seed: int, base: Path) -> Layout:
    """Layout number ``seed`` under ``base``."""
    rng = random.Random(seed)
    random.seed(seed)  # _module's choice of extension suffix
    lay = Layout(base)
    if rng.random() < 0.5:
        lay.cwd = base / "work"
        lay.cwd.mkdir(parents=True)
        lay.front.append(lay.cwd)
    for i in range(rng.randint(0, 2)):
        pp = base / f"pp{i}"
        pp.mkdir(parents=True)
        lay.front.append(pp)
    for i in range(rng.randint(1, 2)):
        kind = rng.choice(["site-packages", "site-packages", "dist-packages"])
        site = base / f"lib{i}" / "python3" / kind
        site.mkdir(parents=True)
        lay.sites.append(site)
    extras = [base / f"extra{i}" for i in range(rng.randint(0, 2))]
    for e in extras:
        e.mkdir(parents=True)
    folders = [*lay.front, *lay.sites, *extras]
    for name in ("sglang", "mooncake", "torch"):
        for folder in rng.sample(folders, k=min(len(folders), rng.randint(0, 3))):
            _place(rng, lay, folder, name)
    for n, site in enumerate(lay.sites):
        for k in range(rng.randint(0, 2)):
            lines = []
            for _ in range(rng.randint(1, 4)):
                r = rng.random()
                if r < 0.3 and extras:
                    lines.append(os.path.relpath(rng.choice(extras), site))
                elif r < 0.55 and extras:
                    lines.append(str(rng.choice(extras)))
                elif r < 0.7:
                    lines.append("missing-folder")
                elif r < 0.8:
                    lines.append("import os; os.environ.get('X')")
                elif r < 0.9:
                    lines.append("# a comment")
                else:
                    lines.append("")
            _write(site / f"{chr(97 + k)}{n}.pth", "\n".join(lines) + "\n")
    editables = rng.sample(["sglang", "mooncake"], k=rng.randint(0, 2))
    if lay.cwd is not None and rng.random() < 0.3:  # SGLang's Docker image: WORKDIR holds
        checkout = lay.cwd / "sglang"  # the checkout, installed with `pip install -e python`
        for junk in ("test/srt/test_x.py", "benchmark/bench.py", "docs/conf.py"):
            _write(checkout / junk, "")
        _setuptools(rng, lay, rng.choice(lay.sites), "sglang", checkout)
        editables = [e for e in editables if e != "sglang"]
    for i, name in enumerate(editables):
        tool = rng.choice(["setuptools", "setuptools", "hatch", "skbc"])
        site = rng.choice(lay.sites)
        co = base / f"co{i}"
        {"setuptools": _setuptools, "hatch": _hatch, "skbc": _skbc}[tool](rng, lay, site,
                                                                          name, co)
    if rng.random() < 0.15 and extras:
        where = rng.choice([*lay.front, *lay.sites])
        _write(where / "mooncake.pkg", f"# more mooncake\n{rng.choice(extras) / 'mooncake'}\n")
        lay.notes.append(f"mooncake.pkg in {where}")
    return lay


_CHILD = r"""
import importlib, importlib.util, json, os, site, sys
cfg = json.loads(sys.argv[1])
if cfg["cwd"]:
    os.chdir(cfg["cwd"])
sys.path[:] = cfg["front"] + cfg["stdlib"]
for s in cfg["sites"]:
    site.addsitedir(s)
def one(spec):
    locs = spec.submodule_search_locations
    return [spec.origin if spec.has_location else None,
            None if locs is None else [str(p) for p in locs]]
out = {"path": list(sys.path), "names": {}}
for name in cfg["names"]:
    steps = []
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        mod = ".".join(parts[:i])
        try:
            spec = importlib.util.find_spec(mod)
        except Exception as e:
            steps.append(None)
            break
        if spec is None:
            steps.append(None)
            break
        steps.append(one(spec))
        try:
            importlib.import_module(mod)
        except Exception as e:
            steps.append("import fails")
            break
    out["names"][name] = steps
print(json.dumps(out))
"""


def truth(lay: Layout, names: tuple[str, ...] | list[str] = NAMES) -> dict[str, Any]:
    """What the real importer says: ``{"path": sys.path, "names": {name: steps}}``, each
    step ``[origin, search]`` for one prefix of the name, then ``None`` (not found) or
    ``"import fails"`` where the walk stopped."""
    cfg = {"cwd": str(lay.cwd) if lay.cwd else None, "front": [str(p) for p in lay.front],
           "stdlib": [*_STDLIB, _DYNLOAD], "sites": [str(s) for s in lay.sites],
           "names": list(names)}
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "SKBUILD"))}
    proc = subprocess.run([sys.executable, "-S", "-B", "-c", _CHILD, json.dumps(cfg)],
                          capture_output=True, text=True, timeout=60, env=env,
                          cwd=str(lay.cwd or lay.base))
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return doc


def _imports(origin: str | None) -> bool:
    """Whether the harness's stub at ``origin`` imports (its extension files do not)."""
    return origin is None or (os.path.isfile(origin) and not origin.endswith(tuple(EXT)))


def model(paths: list[str], sites: list[str], names: tuple[str, ...] | list[str] = NAMES
          ) -> dict[str, Any]:
    """The same walk through moonpin's model, on ``paths`` (the target's ``sys.path``
    folders) and ``sites``."""
    from moonpin.preflight.pyimport.metapath import Importer

    imp = Importer(paths, sites)
    out: dict[str, Any] = {}
    for name in names:
        steps: list[Any] = []
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            spec = imp.find(".".join(parts[:i]))
            if spec is None:
                steps.append(None)
                break
            steps.append([spec.origin, None if spec.search is None else list(spec.search)])
            if not _imports(spec.origin):
                steps.append("import fails")
                break
        out[name] = steps
    return out


def _norm(steps: list[Any]) -> list[Any]:
    def path(p: Any) -> Any:
        return os.path.normpath(p) if isinstance(p, str) and p.startswith("/") else p

    return [[path(s[0]), None if s[1] is None else [path(p) for p in s[1]]]
            if isinstance(s, list) else s for s in steps]


def compare(lay: Layout) -> list[str]:
    """Every name on which the model and the importer disagree, said with both answers
    (and the ``sys.path`` ``check --site-packages`` would compute, when the layout has no
    folder ahead of the standard library)."""
    real = truth(lay)
    paths = [p for p in real["path"] if p and os.path.isdir(p)]
    sites = [str(s) for s in lay.sites]
    mine = model(paths, sites)
    bad = [f"{n}: importer {_norm(real['names'][n])} / model {_norm(mine[n])}"
           for n in NAMES if _norm(real["names"][n]) != _norm(mine[n])]
    if not lay.front:
        from moonpin.preflight.env.target import from_site_packages

        ours = from_site_packages(sites).paths
        theirs = [p for p in paths if p not in (*_STDLIB, _DYNLOAD)]
        if ours != theirs:
            bad.append(f"sys.path: site {theirs} / --site-packages {ours}")
    if not bad:
        bad += _sources(lay, paths, sites)
    return bad


def _sources(lay: Layout, paths: list[str], sites: list[str]) -> list[str]:
    """Every SGLang source the model says ``import sglang.<x>`` loads is the file the
    importer loads for that name."""
    from moonpin.preflight.pyimport.importer import package_sources
    from moonpin.preflight.pyimport.metapath import Importer

    src = package_sources(Importer(paths, sites), "sglang")
    if src is None:
        return []
    names = {}
    for rel, path in src.files.items():
        parts = rel[:-3].split("/")
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    real = truth(lay, sorted(names))["names"]
    bad = []
    for name, path in sorted(names.items()):
        if "import fails" in real[name]:
            continue  # a parent is one of the harness's extension stubs
        steps = [s for s in real[name] if isinstance(s, list)]
        got = steps[-1][0] if len(steps) == name.count(".") + 1 else None
        if got is None or os.path.normpath(got) != os.path.normpath(path):
            bad.append(f"source {name}: importer {got} / model {path}")
    return bad
