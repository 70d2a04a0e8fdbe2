"""Where ``import NAME`` finds a top-level package in a target environment, modelled on the
importer without running any of the environment's code.

What it follows, in the importer's order:

* ``sys.path`` folders in order (``PathFinder``): the first folder holding ``NAME/__init__.py``
  (or a module file ``NAME.py``) wins; folders holding only ``NAME/`` are portions of a PEP 420
  namespace package, used when no regular package is found.
* ``.pth`` files of the site folders (``site.addsitedir``: sorted by name, a path line is
  relative to the site folder and kept only when it is a folder; ``import`` lines are never
  run, only recognised for the editable styles below). :func:`pth_paths` gives the path lines
  for targets whose ``sys.path`` was not computed by an interpreter (``--site-packages``).
* setuptools' PEP 660 editable finders (``__editable___<dist>_finder.py``, imported by
  ``__editable__.<dist>.pth``): ``MAPPING`` and ``NAMESPACES`` read with ``ast``. The
  generated ``install()`` (setuptools/command/editable_wheel.py, ``_finder_template``)
  *appends* the finder to ``sys.meta_path``, after ``PathFinder``: a package found on
  ``sys.path`` (a regular one or a namespace portion) wins over the mapping.
* hatchling's editables (``_editable_impl_<name>.pth``: a path line by default, the
  project's source folder; with ``dev-mode-exact`` an ``import _editable_impl_<name>`` whose
  ``F.map_module(name, path)`` calls are read with ``ast``). Its ``RedirectingFinder`` comes
  from the ``editables`` package (``--no-deps`` leaves it out, and the import then fails) and
  is appended to ``sys.meta_path`` as setuptools' is.
* scikit-build-core's redirect (``_editable_skbc_<name>.pth`` importing
  ``_editable_skbc_<name>``, which calls ``install(known_source_files, known_wheel_files,
  known_directories, ...)``; read with ``ast``). Its ``install`` *inserts* the finder at
  ``sys.meta_path[0]`` (scikit-build-core 1.1, ``resources/_editable_redirect.py``): it wins
  over ``sys.path``, and of several the last installed is asked first.

With ``root`` (an image's root filesystem, :mod:`moonpin.resolver.check.chroot`), every path a
``.pth``
line or a finder's mapping names is the image's, resolved under the root (``..`` and
symbolic links never leave it), and so is each package folder found.

Only ``os`` at import; ``ast`` only when a finder file has to be read (once per version of
the file: the file-facts memo, :func:`moonpin.kb.cache.facts_memo`).
"""

from __future__ import annotations

import os

from moonpin.kb.cache import facts_memo
from moonpin.kb.files import read_regular

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

__all__ = ["Found", "find", "in_root", "pth", "pth_files", "pth_paths", "site_dirs"]

_CAP_PTH = 1 << 20
_CAP_FINDER = 16 << 20


class Found:
    """A top-level package: its folder (the first portion of a namespace package), every
    portion, and how the importer reaches it (``"sys.path"``, ``"namespace"``,
    ``"editable finder FILE"``, ``"editable redirect FILE"``)."""

    __slots__ = ("folder", "how", "portions")

    def __init__(self, folder: str, how: str, portions: Sequence[str] = ()) -> None:
        self.folder = folder
        self.how = how
        self.portions = tuple(portions) or (folder,)

    @property
    def editable(self) -> bool:
        return self.how.startswith("editable")


def site_dirs(paths: Sequence[str]) -> list[str]:
    """The folders of ``paths`` whose ``.pth`` files ``site`` processes (site-packages and
    Debian's dist-packages)."""
    return [p for p in paths
            if os.path.basename(os.path.normpath(p)) in ("site-packages", "dist-packages")]


def pth_files(site: str) -> list[str]:
    try:
        names = sorted(e.name for e in os.scandir(site)
                       if e.name.endswith(".pth") and not e.name.startswith("."))
    except OSError:
        return []
    return [os.path.join(site, n) for n in names]


def _read_pth(path: str) -> tuple[list[str], list[str]]:
    """A ``.pth`` file's path lines (as written) and the modules its ``import`` lines
    import (``site.addpackage``: ``#`` comments and blank lines skipped)."""
    text = read_regular(path, cap=_CAP_PTH, what=".pth file").decode("utf-8", "replace")
    lines: list[str] = []
    imports: list[str] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith(("import ", "import\t")):
            for stmt in line.split(";"):
                stmt = stmt.strip()
                if stmt.startswith("import "):
                    imports.extend(m.strip() for m in stmt[7:].split(",") if m.strip())
            continue
        lines.append(line.rstrip())
    return lines, imports


def pth(path: str) -> tuple[list[str], list[str]]:
    def ok(v: Any) -> bool:
        return (isinstance(v, tuple) and len(v) == 2
                and all(isinstance(x, list) and all(isinstance(s, str) for s in x) for x in v))

    try:
        return facts_memo().get("pth", path, lambda: _read_pth(path), ok)
    except OSError:
        return [], []


def _in_root(root: str | None, path: str, base: str | None = None) -> str | None:
    """``path`` (relative to the host folder ``base``) as the host path it names: under
    ``root`` for an image (None when it cannot be resolved there), else as written."""
    if root is None:
        return os.path.normpath(os.path.join(base, path) if base is not None else path)
    from moonpin.resolver.check import chroot as rootfs

    if base is not None:
        path = os.path.join(rootfs.image_path(root, base), path)
    elif not path.startswith("/"):
        return None  # relative to a working folder the image does not say
    try:
        return rootfs.resolve(root, path)
    except OSError:
        return None


def in_root(root: str | None, path: str, base: str | None = None) -> str | None:
    """``path`` (relative to the host folder ``base``) as the host path it names: under
    ``root`` for an image (None when it cannot be resolved there), else as written."""
    return _in_root(root, path, base)


def pth_paths(site: str, root: str | None = None) -> list[str]:
    """The folders the ``.pth`` path lines of ``site`` add to ``sys.path``, in order
    (``root``: the lines are the image's paths, resolved under it)."""
    out: list[str] = []
    for f in pth_files(site):
        for line in pth(f)[0]:
            d = _in_root(root, line, site)
            if d is not None and os.path.isdir(d) and d not in out:
                out.append(d)
    return out


def _str_dict(node: Any, ast: Any) -> dict[str, Any] | None:
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return None
    return value if isinstance(value, dict) else None


def _read_finder(path: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    """setuptools' finder ``MAPPING`` and ``NAMESPACES``, or hatch ``editables``'
    ``map_module(name, path)`` calls as a mapping of name to folder; never executed."""
    import ast

    mapping: dict[str, str] = {}
    namespaces: dict[str, list[str]] = {}
    try:
        tree = ast.parse(read_regular(path, cap=_CAP_FINDER, what="editable finder"))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return mapping, namespaces
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if not isinstance(target, ast.Name) or node.value is None:
                continue
            got = _str_dict(node.value, ast)
            if got is None:
                continue
            if target.id == "MAPPING":
                mapping.update({k: v for k, v in got.items()
                                if isinstance(k, str) and isinstance(v, str)})
            elif target.id == "NAMESPACES":
                namespaces.update({k: [s for s in v if isinstance(s, str)]
                                   for k, v in got.items()
                                   if isinstance(k, str) and isinstance(v, list)})
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "install" and node.args):  # scikit-build-core
            files = _str_dict(node.args[0], ast) or {}
            dirs = (_str_dict(node.args[2], ast) if len(node.args) > 2 else None) or {}
            for k, v in files.items():
                if isinstance(k, str) and isinstance(v, str) and "." not in k \
                        and v.endswith("__init__.py"):
                    mapping[k] = os.path.dirname(v)
            namespaces.update({k: [d for d in v if isinstance(d, str)]
                               for k, v in dirs.items() if isinstance(k, str)
                               and "." not in k and isinstance(v, list) and k not in mapping})
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "map_module" and len(node.args) == 2
              and all(isinstance(a, ast.Constant) and isinstance(a.value, str)
                      for a in node.args)):
            name, target_path = node.args[0].value, node.args[1].value  # type: ignore[attr-defined]
            if target_path.endswith("__init__.py"):
                target_path = os.path.dirname(target_path)
            mapping[name] = target_path
    return mapping, namespaces


def _finder(path: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    def ok(v: Any) -> bool:
        return (isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], dict)
                and isinstance(v[1], dict)
                and all(isinstance(k, str) and isinstance(s, str) for k, s in v[0].items())
                and all(isinstance(k, str) and isinstance(s, list) for k, s in v[1].items()))

    try:
        return facts_memo().get("editable-finder", path, lambda: _read_finder(path), ok)
    except OSError:
        return {}, {}


def _kind(module: str) -> str | None:
    if module.startswith("__editable___") and module.endswith("_finder"):
        return "setuptools"
    if module.startswith("_editable_impl_"):
        return "hatch"
    if module.startswith("_editable_skbc_"):
        return "scikit-build-core"
    return None


def _editable_finders(sites: Sequence[str]) -> list[tuple[str, str]]:
    """The finder modules the ``.pth`` files of ``sites`` import, in the order ``site``
    runs them, as (file, kind) (found in the site folder, where the editable wheel puts
    them)."""
    out: list[tuple[str, str]] = []
    for site in sites:
        for f in pth_files(site):
            for mod in pth(f)[1]:
                kind = _kind(mod)
                cand = os.path.join(site, mod + ".py")
                if kind is not None and os.path.isfile(cand) and (cand, kind) not in out:
                    out.append((cand, kind))
    return out


def _from_finder(paths: Sequence[str], name: str, f: str, kind: str,
                 root: str | None = None) -> Found | None:
    if kind == "hatch" and not any(
            os.path.isfile(os.path.join(p, "editables", "__init__.py")) for p in paths):
        return None  # its `from editables.redirector import ...` fails: site skips the line
    mapping, namespaces = _finder(f)
    how = f"editable {kind} finder {f}"
    folder = _in_root(root, mapping[name]) if name in mapping else None
    if folder is not None and os.path.isdir(folder):
        return Found(folder, how)
    ns = [d for d in (_in_root(root, p) for p in namespaces.get(name, ()))
          if d is not None and os.path.isdir(d)]
    return Found(ns[0], how, ns) if ns else None


def find(paths: Sequence[str], name: str, sites: Sequence[str] | None = None,
         root: str | None = None) -> Found | None:
    """Where ``import name`` finds the top-level package ``name`` (None: nowhere).

    ``paths`` is ``sys.path`` as the target's interpreter has it (``.pth`` path lines
    already in); ``sites`` the folders whose ``.pth`` files install editable finders
    (default: the site-packages and dist-packages folders of ``paths``); ``root`` the
    image's root folder, under which the paths finders name are resolved."""
    finders = _editable_finders(site_dirs(paths) if sites is None else sites)
    for f, kind in reversed(finders):  # inserted at sys.meta_path[0], ahead of PathFinder
        if kind == "scikit-build-core":
            got = _from_finder(paths, name, f, kind, root)
            if got is not None:
                return got
    portions: list[str] = []
    for p in paths:
        cand = os.path.join(p, name) if root is None else _in_root(root, name, p)
        if cand is None:
            continue
        if os.path.isfile(os.path.join(cand, "__init__.py")):
            return Found(cand, "sys.path")
        if os.path.isdir(cand):
            portions.append(cand)
    if portions:  # PathFinder returns the namespace spec: later finders are not asked
        return Found(portions[0], "namespace" if len(portions) > 1 else "sys.path", portions)
    for f, kind in finders:  # appended to sys.meta_path, after PathFinder
        if kind != "scikit-build-core":
            got = _from_finder(paths, name, f, kind, root)
            if got is not None:
                return got
    return None
