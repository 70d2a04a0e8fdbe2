"""Where ``import NAME`` finds a package in a target environment, and which source files
``import NAME.<x>`` loads, modelled on the importer without running any of the
environment's code (:mod:`moonpin.preflight.pyimport.metapath`; the site files it reads:
:mod:`moonpin.preflight.pyimport.sitefiles`).

A top-level package is what ``sys.meta_path`` returns for its name (:class:`Found`): a
regular package, a module file, or a PEP 420 namespace package with its portions (the first
is its ``folder``). Its *sources* (:func:`package_sources`) are the ``.py`` files the
importer loads for the module names its own tree defines: for a regular package its
``__path__``; for a namespace package the folders an editable finder maps it to (setuptools'
``MAPPING``/``NAMESPACES``, scikit-build-core's directories, hatch's target), else its
portions. So an SGLang checkout's root found as a namespace portion from the working folder
(``WORKDIR /sgl-workspace``, ``pip install -e python``) contributes no file of its tests or
docs, while ``sglang.srt...`` resolves, as in the worker, through the editable finder's
child rule into ``python/sglang``.

Only ``os`` at import (the worker-start path).
"""

from __future__ import annotations

import os

from moonpin.preflight.access.confined import NOWHERE, Confined
from moonpin.preflight.pyimport.metapath import Importer, Spec
from moonpin.preflight.pyimport.sitefiles import pth, pth_files, pth_paths, site_dirs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

__all__ = ["Found", "Importer", "Sources", "find", "folder_sources", "found_in",
           "package_sources", "pth", "pth_files", "pth_paths", "site_dirs"]


class Found:
    """A top-level package: its folder (the first portion of a namespace package; the file
    of a module), every portion, its ``__path__`` once its ``__init__`` ran (``search``:
    ``pkgutil.extend_path`` adds to it), and how the importer reaches it (``"sys.path"``,
    ``"namespace"``, ``"editable <tool> finder FILE"``)."""

    __slots__ = ("folder", "how", "module", "portions", "search")

    def __init__(self, folder: str, how: str, portions: Sequence[str] = (),
                 search: Sequence[str] | None = None, module: bool = False) -> None:
        self.folder = folder
        self.how = how
        self.portions = tuple(portions) or (folder,)
        self.search = tuple(search) if search is not None else self.portions
        self.module = module  # a module file (NAME.py, NAME.<ext>): not a package

    @property
    def editable(self) -> bool:
        return self.how.startswith("editable")

    def __repr__(self) -> str:
        return f"Found({self.folder!r}, {self.how!r}, {self.portions!r}, {self.search!r})"


def found_in(imp: Importer, name: str) -> Found | None:
    """``name`` as ``imp`` finds it (None: not found, or a namespace package with no
    folder at all)."""
    spec = imp.find(name)
    if spec is None:
        return None
    if spec.search is None:
        return Found(spec.origin or "", spec.how, module=True)
    portions = [p for p in spec.search if p not in imp.hooks]
    search = [p for p in imp.package_path(name) or () if p not in imp.hooks]
    if spec.origin is not None:
        folder = portions[0] if portions else os.path.dirname(spec.origin)
        return Found(folder, spec.how, (folder,), search or (folder,))
    if not portions:
        return None
    how = spec.how if spec.how.startswith("editable") else "namespace"
    return Found(portions[0], how, portions, search)


def find(paths: Sequence[str], name: str, sites: Sequence[str] | None = None,
         root: str | None = None, ext: Sequence[str] | None = None) -> Found | None:
    """Where ``import name`` finds the top-level package ``name`` (None: nowhere).

    ``paths`` is ``sys.path`` as the target's interpreter has it (``.pth`` path lines
    already in); ``sites`` the folders whose ``.pth`` files install editable finders
    (default: the site-packages and dist-packages folders of ``paths``); ``root`` the
    image's root folder, under which the paths finders name are resolved; ``ext`` the
    target's extension-module suffixes."""
    return found_in(Importer(paths, sites, root, ext), name)


class Sources:
    """The source files ``import <name>.<x>`` loads: ``files`` maps each module's path
    (``sglang/srt/server_args.py``, ``sglang/srt/__init__.py``) to the file; ``roots`` the
    folders whose trees named them; ``via`` how many of them each finder supplied (``how``
    of :class:`~moonpin.preflight.pyimport.metapath.Spec`); ``key`` tells one set's cache from
    another's; ``stamps``: the stamps file that vouches for this set and keeps what was
    derived from its files (:class:`moonpin.preflight.installed.stamps.Stamps`; None: none)."""

    __slots__ = ("_count", "_files", "_make", "broken", "found", "key", "roots", "stamps",
                 "via", "within")

    def __init__(self, found: Found, files: dict[str, str] | tuple[Callable[[], dict[str, str]],
                                                                   int],
                 roots: Sequence[str], via: dict[str, int], broken: Sequence[str] = (),
                 key: str | None = None, within: Confined = NOWHERE) -> None:
        """``files``: the mapping, or (what makes it, how many it holds): a warm start that
        trusts the stamps file needs the count, not the ~4,000 entries; ``within``: the
        image root reading them is confined to (the importer's that found them)."""
        self.found = found
        self._files: dict[str, str] | None
        self._make: Callable[[], dict[str, str]] | None
        if isinstance(files, tuple):
            self._files, (self._make, self._count) = None, files
        else:
            self._files, self._make, self._count = files, None, len(files)
        self.roots = tuple(roots)
        self.via = via
        #: sources that cannot be read: a ``.py`` entry that is no file, an unlistable folder
        self.broken = tuple(broken)
        self.key = key if key is not None else "\0".join(
            os.path.realpath(r) for r in (found.folder, *self.roots))
        self.stamps: Any = None
        self.within = within


    @property
    def files(self) -> dict[str, str]:
        if self._files is None:
            assert self._make is not None
            self._files, self._make = self._make(), None
        return self._files

    def count(self) -> int:
        """How many sources (without making :attr:`files`)."""
        return self._count if self._files is None else len(self._files)


def _rel(name: str, origin: str) -> str:
    base = name.replace(".", "/")
    return base + ("/__init__.py" if origin.endswith("/__init__.py") else ".py")


def package_sources(imp: Importer, name: str) -> Sources | None:
    """The ``.py`` files ``import name.<x>`` loads for every module name the package's
    own tree defines, each resolved as the importer resolves it (None: ``name`` is not a
    package here)."""
    found = found_in(imp, name)
    top = imp.find(name)
    if found is None or found.module or top is None:
        return None
    files: dict[str, str] = {}
    via: dict[str, int] = {}
    chain: dict[str, str] = {}

    def take(mod: str, spec: Spec | None) -> None:
        if spec is None:
            return
        # a module found by PathFinder in a folder an editable finder supplied (the
        # parent's __path__) comes through that finder too
        how = spec.how
        parent = mod.rpartition(".")[0]
        if not how.startswith("editable") and chain.get(parent, "").startswith("editable"):
            how = chain[parent]
        chain[mod] = how
        if spec.origin is not None and spec.origin.endswith(".py"):
            files[_rel(mod, spec.origin)] = spec.origin
            via[how] = via.get(how, 0) + 1

    import gc  # builtin; a worker start allocates nothing cyclic meanwhile

    collecting = gc.isenabled()
    gc.disable()  # thousands of specs: the collector would walk them again and again
    try:
        take(name, top)
        broken: list[str] = []
        for mod in sorted(imp.module_names(name, top, broken), key=lambda m: m.count(".")):
            take(mod, imp.find(mod))
    finally:
        if collecting:
            gc.enable()
    return Sources(found, files, _outermost(imp.roots(name, top)), via, broken,
                   within=imp.within)


def _outermost(roots: Sequence[tuple[str, str]]) -> list[str]:
    """The root folders, less each one inside another that names its modules alike
    (setuptools' ``NAMESPACES`` lists every namespace subpackage of the mapped tree)."""
    out: list[tuple[str, str]] = []
    for name, folder in roots:
        inside = False
        for top, base in out:
            rel = os.path.relpath(folder, base)
            if not rel.startswith("..") and rel != "." and \
                    name == ".".join([top, *rel.split(os.sep)]):
                inside = True
                break
        if not inside:
            out.append((name, folder))
    return [f for _, f in out]


def folder_sources(folder: str, ext: Sequence[str] | None = None,
                   imp: Importer | None = None) -> Sources:
    """The sources of the package in ``folder`` taken alone (no ``sys.path``, no finder):
    its modules as ``FileFinder`` resolves them there (``imp``: the model to use, one
    with nothing on its path; default: a new one)."""
    folder = os.fspath(folder)
    top = os.path.basename(os.path.normpath(folder)).replace(".", "_") or "package"
    imp = imp if imp is not None else Importer([], [], None, ext)
    init = next((os.path.join(folder, "__init__" + s) for s in imp.suffixes
                 if imp.listing(folder).get("__init__" + s, 0) & 1), None)
    spec = Spec(top, init, (folder,), "sys.path")
    imp.seed(spec)
    found = Found(folder, "sys.path", (folder,))
    files: dict[str, str] = {}
    via: dict[str, int] = {}
    broken: list[str] = []
    for mod in [top, *imp.module_names(top, spec, broken)]:
        got = imp.find(mod)
        if got is not None and got.origin is not None and got.origin.endswith(".py"):
            files[_rel(mod, got.origin)] = got.origin
    if folder in imp.unlistable:
        raise imp.unlistable[folder]
    return Sources(found, files, (folder,), via, broken, within=imp.within)
