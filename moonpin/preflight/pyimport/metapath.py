"""Which file ``import a.b.c`` loads in a target environment, modelled on CPython's importer
(``Lib/importlib/_bootstrap.py`` and ``_bootstrap_external.py``) without running any of the
target's code.

What it follows, in the importer's order:

* ``sys.meta_path``: scikit-build-core's redirect finders (each *inserted* at position 0, so
  the last installed is asked first), then ``PathFinder``, then the finders *appended* by
  setuptools' PEP 660 ``install()`` and hatchling's ``editables`` ``RedirectingFinder`` (one
  class shared by every hatch editable, appended once), in the order ``site`` ran their
  ``.pth`` lines. The first finder that returns a spec decides; ``PathFinder`` returns a
  namespace spec when it found only portions, so a finder after it is never asked then.
* ``PathFinder`` over ``sys.path`` (a top-level name) or the parent's ``__path__``: per
  folder, ``FileFinder``'s order: ``NAME/__init__`` with the extension suffixes, ``.py``,
  ``.pyc``; then ``NAME`` + those suffixes; then ``NAME/`` as a namespace portion. The
  first regular package or module wins; portions accumulate. setuptools' placeholder entry
  (``PATH_PLACEHOLDER``, appended to ``sys.path`` when its ``NAMESPACES`` is not empty)
  answers the names of ``NAMESPACES`` as portions.
* setuptools' ``_EditableFinder``: a ``MAPPING`` name is ``__init__.py`` under its folder,
  else the folder's path with each suffix of ``all_suffixes()`` (``.py``, ``.pyc``,
  extensions) replacing its own, whichever *exists*; none: None (the next finder is asked).
  A name whose parent is in ``MAPPING`` is ``PathFinder.find_spec(name, [MAPPING[parent]])``.
* hatch's ``RedirectingFinder``: a top-level mapped name is the mapped file, whether or not
  it still exists (``spec_from_file_location`` does not look).
* meson-python's ``MesonpyMetaFinder`` (inserted at position 0 too): its top-level names
  looked up in the tree its build folder's install plan installs (:class:`_Mesonpy`).
* scikit-build-core 1.x ``ScikitBuildRedirectingFinder``: ``known_wheel_files`` (under the
  finder's own folder), then ``known_source_files``, then a tracked directory as a package
  whose ``__path__`` is its ranked locations plus the native namespace portions; and
  ``ScikitBuildInplaceFinder``: ``PathFinder`` over its search paths for its packages.
* A package whose ``__init__.py`` runs ``__path__ = extend_path(__path__, __name__)``
  (``pkgutil``; mooncake's does): its ``__path__`` gains every ``NAME`` portion of the
  parent's search path (``sys.path`` for a top-level package) and the lines of
  ``NAME.pkg`` files there.

* A zip archive on ``sys.path`` (or a folder in one): ``zipimport``'s packages, modules
  and namespace portions in it, no extension module
  (:mod:`moonpin.preflight.access.zipfs`).

A parent's ``__init__`` is otherwise assumed to leave ``__path__`` alone. PEP 829 ``.start``
files are not modelled.

With ``root`` (an image's root filesystem), every folder is the host path under the root
and every path a file of the image names is resolved under it
(:mod:`moonpin.preflight.access.chroot`). Only ``os`` at import.
"""

from __future__ import annotations

import os
import stat  # loaded by os
from importlib import machinery

from moonpin.preflight.access.chroot import host_path
from moonpin.preflight.access.confined import NOWHERE, Confined
from moonpin.preflight.pyimport.sitefiles import (
    extends_path,
    finder_facts,
    finder_kind,
    line_fails,
    pth_files,
    pth_lines,
    site_dirs,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

__all__ = ["Importer", "Spec", "kind_of", "pkg_lines"]

_FILE, _DIR, _LINK = 1, 2, 4
#: Package levels below the top the source walk descends at most (SGLang's deepest is ~12).
_MAX_DEPTH = 48
#: The largest meson install plan read: SGLang's is a few hundred bytes (one
#: ``install_subdir``); each source listed costs ~200 bytes, and ``json`` makes ~20x its
#: input of objects out of a hostile one (``[{},{},…]``).
_CAP_PLAN = 4 << 20


class Spec:
    """What a finder returned for ``name``: the file it loads (``origin``; None for a
    namespace package), the folders its submodules are searched in (``search``; None for a
    module, not a package), and which finder (``how``: ``"sys.path"``, ``"namespace"``,
    ``"editable <tool> finder FILE"``)."""

    __slots__ = ("how", "name", "origin", "search")

    def __init__(self, name: str, origin: str | None, search: Sequence[str] | None,
                 how: str) -> None:
        self.name = name
        self.origin = origin
        self.search = None if search is None else tuple(search)
        self.how = how

    def __repr__(self) -> str:
        return f"Spec({self.name!r}, {self.origin!r}, {self.search!r}, {self.how!r})"


def _with_suffix(path: str, suffix: str) -> str | None:
    """``pathlib.PurePath(path).with_suffix(suffix)`` (None for an empty name)."""
    head, name = os.path.split(path.rstrip("/") or path)
    if not name or name in (".", ".."):
        return None
    i = name.rfind(".")
    if 0 < i < len(name) - 1:
        name = name[:i]
    return os.path.join(head, name + suffix)


class _Setuptools:
    """setuptools' ``_EditableFinder`` and its ``_EditableNamespaceFinder`` path hook."""

    def __init__(self, imp: Importer, file: str, facts: dict[str, Any]) -> None:
        self.file = file
        self.how = f"editable setuptools finder {file}"
        root = imp.root
        self.mapping = {k: p for k, p in ((k, host_path(root, v))
                                          for k, v in facts["mapping"].items()) if p}
        self.namespaces = {k: [p for p in (host_path(root, v) for v in vs) if p]
                           for k, vs in facts["namespaces"].items()}
        self.placeholder = facts.get("placeholder") or f"{file}.__path_hook__"

    def find_spec(self, imp: Importer, fullname: str, path: Sequence[str] | None
                  ) -> Spec | None:
        if fullname in self.mapping:
            base = self.mapping[fullname]
            for cand in (os.path.join(base, "__init__.py"),
                         *(_with_suffix(base, s) for s in imp.all_suffixes)):
                if cand is not None and imp.kind(cand):
                    return imp.spec_from_file(fullname, cand, self.how)
            return None
        parent = fullname.rpartition(".")[0]
        if parent and parent in self.mapping:
            got = imp.path_find(fullname, [self.mapping[parent]])
            return None if got is None else Spec(fullname, got.origin, got.search, self.how)
        return None

    def portions(self, fullname: str) -> list[str] | None:
        """What the namespace path hook answers for ``fullname`` (None: no spec)."""
        if fullname not in self.namespaces:
            return None
        paths = self.namespaces[fullname]
        if not paths and fullname in self.mapping:
            paths = [self.mapping[fullname]]
        return [*paths, self.placeholder]


class _Hatch:
    """``editables.redirector.RedirectingFinder``: top-level names only."""

    def __init__(self) -> None:
        self.redirects: dict[str, tuple[str, str]] = {}

    def find_spec(self, imp: Importer, fullname: str, path: Sequence[str] | None
                  ) -> Spec | None:
        if "." in fullname or path is not None or fullname not in self.redirects:
            return None
        target, file = self.redirects[fullname]
        return imp.spec_from_file(fullname, target, f"editable hatch finder {file}")


class _Skbc:
    """scikit-build-core's redirect (or in-place) finder, as ``install()`` builds it."""

    def __init__(self, imp: Importer, file: str, facts: dict[str, Any]) -> None:
        self.file = file
        self.how = f"editable scikit-build-core finder {file}"
        root = imp.root
        here = os.path.dirname(file)
        self.inplace = facts.get("mode") == "inplace"
        self.packages = [p for p in facts.get("packages") or () if isinstance(p, str)]
        self.search_paths = [p for p in (host_path(root, s) for s in
                                         facts.get("search_paths") or ()) if p]
        self.wheel = {k: os.path.join(here, v) for k, v in facts.get("wheel_files", {}).items()}
        self.source = {k: p for k, p in ((k, host_path(root, v)) for k, v in
                                         facts.get("source_files", {}).items()) if p}
        ranked: dict[str, dict[str, int]] = {}
        for parent, paths in facts.get("directories", {}).items():
            locations = ranked.setdefault(parent, {})
            for p in paths:
                if p.startswith("/"):
                    host = host_path(root, p)
                    if host:
                        locations.setdefault(host, 1)
                else:
                    locations.setdefault(os.path.join(here, p), 0)
        for pkg in sorted(self.packages, key=lambda p: p.count(".")):
            parent, _, last = pkg.rpartition(".")
            if not parent or parent not in ranked:
                continue
            for parent_path, rank in list(ranked[parent].items()):
                sub = os.path.join(parent_path, last)
                if imp.isdir(sub):
                    ranked.setdefault(pkg, {}).setdefault(sub, rank)
        self.locations = {pkg: [p for _, p in sorted((r, p) for p, r in locs.items())]
                          for pkg, locs in ranked.items()}

    def find_spec(self, imp: Importer, fullname: str, path: Sequence[str] | None
                  ) -> Spec | None:
        if self.inplace:
            if fullname.partition(".")[0] not in self.packages:
                return None
            got = imp.path_find(fullname, self.search_paths if path is None else path)
            if got is None or got.origin is None:
                return None  # a namespace is left to native resolution
            return Spec(fullname, got.origin, got.search, self.how)
        locs = self.locations.get(fullname)
        origin = self.wheel.get(fullname) or self.source.get(fullname)
        if origin is not None:
            is_pkg = origin.endswith(("__init__.py", "__init__.pyc"))
            got = imp.spec_from_file(fullname, origin, self.how)
            if got is None:
                return None
            return Spec(fullname, origin, locs if is_pkg else None, self.how)
        if locs is None:
            return None
        search = list(locs)
        native = imp.path_find(fullname, imp.path if path is None else path)
        if native is not None and native.origin is None and native.search:
            search += [p for p in native.search if p not in search]
        return Spec(fullname, None, search, self.how)

    def search_paths_for(self, top: str) -> list[tuple[str, str]]:
        """An in-place finder's folders holding package ``top``."""
        if not self.inplace or top not in self.packages:
            return []
        return [(top, os.path.join(p, top)) for p in self.search_paths]


_NODE = "\0node"  # a folder of meson-python's install tree (a str value is a file)


class _Mesonpy:
    """meson-python's ``MesonpyMetaFinder`` (its ``_<name>_editable_loader.py``): for its
    top-level names, the tree its build folder's ``intro-install_plan.json`` installs
    (``install_subdirs`` walked, their ``exclude_*`` left out; single files by their
    destination), the later entry winning; looked up as its ``find_spec`` does. Its
    rebuild (``ninja`` at import) is not run: the plan as the last build left it."""

    def __init__(self, imp: Importer, file: str, facts: dict[str, Any]) -> None:
        self.file = file
        self.how = f"editable meson-python finder {file}"
        self.names = {n for n in facts.get("names") or () if isinstance(n, str)}
        #: (destination parts, source, a walked folder?, excluded files, excluded folders)
        self.entries: list[tuple[tuple[str, ...], str, bool, set[str], set[str]]] = []
        where = facts.get("build")
        build = host_path(imp.root, where) if isinstance(where, str) and where else None
        plan = os.path.join(build, "meson-info", "intro-install_plan.json") if build else ""
        if not plan:
            return
        imp.read(plan)
        try:
            import json

            doc = json.loads(imp.within.read(plan, cap=_CAP_PLAN, what="meson install plan"))
        except (OSError, ValueError, RecursionError):
            return  # the finder's rebuild raises: nothing found through it
        for key, data in (doc.items() if isinstance(doc, dict) else ()):
            for src, target in (data.items() if isinstance(data, dict) else ()):
                dest = target.get("destination") if isinstance(target, dict) else None
                parts = tuple(p for p in str(dest).split("/") if p)
                if not parts or parts[0] not in ("{py_platlib}", "{py_purelib}"):
                    continue
                host = host_path(imp.root, os.path.normpath(src))
                if host is None:
                    continue
                walk = key == "install_subdirs" or (key == "targets" and imp.isdir(host))
                self.entries.append((parts[1:], host, walk,
                                     {os.path.normpath(x) for x in target.get(
                                         "exclude_files", ()) if isinstance(x, str)},
                                     {os.path.normpath(x) for x in target.get(
                                         "exclude_dirs", ()) if isinstance(x, str)}))

    def get(self, imp: Importer, parts: tuple[str, ...]) -> str | None:
        """The tree's value at ``parts``: a file, :data:`_NODE`, or None."""
        got: str | None = None
        for dest, src, walk, xfiles, xdirs in self.entries:
            n = len(dest)
            if parts[:n] != dest:
                if dest[:len(parts)] == parts:
                    got = _NODE  # something is installed below
                continue
            rel = parts[n:]
            if not walk:
                got = src if not rel else got
                continue
            if any("/".join(rel[:i]) in xdirs for i in range(1, len(rel) + 1)):
                continue
            kind = imp.kind(os.path.join(src, *rel))
            if kind == _DIR:
                got = _NODE
            elif kind == _FILE and "/".join(rel) not in xfiles:
                got = os.path.join(src, *rel)
        return got

    def find_spec(self, imp: Importer, fullname: str, path: Sequence[str] | None
                  ) -> Spec | None:
        parts = tuple(fullname.split("."))
        if parts[0] not in self.names:
            return None
        if self.get(imp, parts) == _NODE:
            for s in imp.suffixes:
                init = self.get(imp, (*parts, "__init__" + s))
                if init not in (None, _NODE):
                    return Spec(fullname, init, (os.path.dirname(str(init)),), self.how)
        for s in imp.suffixes:
            mod = self.get(imp, (*parts[:-1], parts[-1] + s))
            if mod not in (None, _NODE):
                return Spec(fullname, mod, None, self.how)
        if self.get(imp, parts) == _NODE:
            return Spec(fullname, None, [os.path.join(src, *parts[len(d):]) for d, src, w, _,
                                         _ in self.entries if w and parts[:len(d)] == d],
                        self.how)
        return None

    def roots(self, top: str) -> list[tuple[str, str]]:
        """The walked folders installed at or below package ``top``."""
        if top not in self.names:
            return []
        return [(".".join(d), src) for d, src, walk, _, _ in self.entries
                if walk and d and d[0] == top]


class Importer:
    """A target's importer: ``paths`` is its ``sys.path`` (the folders, as the target's
    interpreter has them: ``.pth`` path lines in), ``sites`` the folders whose ``.pth``
    files ``site`` processed (default: the site-packages and dist-packages folders of
    ``paths``), ``ext`` its extension-module suffixes, ``root`` an image's root folder.

    Folder listings, specs and package paths are remembered for the life of the object:
    make one per look at the environment.

    ``record``: keep the stamp of everything the model reads, so that what it found can be
    trusted later while they are unchanged (:mod:`moonpin.preflight.installed.stamps`):
    :attr:`stamps` (each folder listed: its mtime, taken before the listing), the kinds it
    asked of paths (:meth:`kind`: whether each exists, as a file or a folder, links
    followed; a symbolic link met in a listing too), and :attr:`reads` (each file whose
    content decided: ``.pth`` files, editable finders, ``__init__.py`` files read for
    ``extend_path``, ``.pkg`` files: size and mtime, taken before the read)."""

    def __init__(self, paths: Sequence[str], sites: Sequence[str] | None = None,
                 root: str | None = None, ext: Sequence[str] | None = None,
                 record: bool = False, within: Confined = NOWHERE) -> None:
        self.root = root
        #: the image root its reads are confined to (:class:`Confined`; the Context's)
        self.within = within
        self.ext = tuple(machinery.EXTENSION_SUFFIXES if ext is None else ext)
        #: FileFinder's loaders' order: extensions, source, bytecode
        self.suffixes = (*self.ext, ".py", ".pyc")
        #: importlib.machinery.all_suffixes(): source, bytecode, extensions
        self.all_suffixes = (".py", ".pyc", *self.ext)
        self.front: list[_Skbc | _Mesonpy] = []  # inserted at sys.meta_path[0]
        self.back: list[_Setuptools | _Hatch] = []  # appended after PathFinder
        self.hooks: dict[str, _Setuptools] = {}  # placeholder entry -> its path hook
        self._lists: dict[str, dict[str, int]] = {}
        self._kinds: dict[str, int] = {}
        #: when this model began to look (ns; set when recording), the stamps of the
        #: folders it listed and of the files it read (:attr:`record`)
        self.t0 = 0
        self.stamps: dict[str, int] | None = None
        self.reads: dict[str, list[int] | None] | None = None
        if record:
            import time  # builtin

            self.t0 = time.time_ns()
            self.stamps, self.reads = {}, {}
        self._specs: dict[str, Spec | None] = {}
        self._paths: dict[str, tuple[str, ...] | None] = {}
        #: folders that could not be listed (the importer finds nothing in them), and why
        self.unlistable: dict[str, OSError] = {}
        self.path = self._install(list(paths), site_dirs(paths) if sites is None else sites)

    # ---------------------------------------------------------------- site's .pth lines

    def _install(self, paths: list[str], sites: Sequence[str]) -> list[str]:
        """The finders the ``.pth`` ``import`` lines of ``sites`` install, in the order
        ``site`` runs them, and ``sys.path`` with setuptools' placeholders where
        ``install()`` appended them."""
        order = sorted(dict.fromkeys(sites),
                       key=lambda s: paths.index(s) if s in paths else len(paths))
        inserts: list[tuple[int, str]] = []
        imported: set[str] = set()
        hatch: _Hatch | None = None
        for site in order:
            cur = paths.index(site) + 1 if site in paths else len(paths)
            if self.stamps is not None:
                self.listing(site)  # stamped and kept before its .pth files are listed
            for f in pth_files(site, self.within):
                self.read(f)
                for entry in pth_lines(f, self.within):
                    if entry[0] == "path":
                        d = host_path(self.root, entry[1], site)
                        if d is not None and d in paths:
                            cur = max(cur, paths.index(d) + 1)
                        continue
                    if self.root is None and line_fails(entry, site, paths):
                        break  # the line raises: site ignores the rest of the file
                    failed = False
                    for mod in entry[1]:
                        kind = finder_kind(mod)
                        if kind is None or mod in imported:
                            continue
                        file = os.path.join(site, mod + ".py")
                        facts = None
                        if self.kind(file) == _FILE:
                            self.read(file)
                            facts = finder_facts(file, self.within)
                        if facts is None or facts.get("broken") or (
                                kind == "hatch" and not self._has_editables(paths[:cur])):
                            failed = True  # the import raises: site ignores the rest
                            break
                        imported.add(mod)
                        if kind == "setuptools":
                            if mod not in entry[2]:
                                continue  # imported, never installed
                            finder = _Setuptools(self, file, facts)
                            self.back.append(finder)
                            if finder.namespaces and finder.placeholder not in self.hooks:
                                self.hooks[finder.placeholder] = finder
                                inserts.append((cur, finder.placeholder))
                        elif kind == "hatch":
                            if hatch is None:
                                hatch = _Hatch()
                                self.back.append(hatch)
                            for name, target in facts["redirects"]:
                                got = host_path(self.root, target)
                                if got:
                                    hatch.redirects[name] = (got, file)
                        elif kind == "meson-python":
                            if facts.get("mesonpy"):
                                self.front.insert(0, _Mesonpy(self, file, facts["mesonpy"]))
                        elif facts.get("skbc"):
                            self.front.insert(0, _Skbc(self, file, facts["skbc"]))
                    if failed:
                        break
        out: list[str] = []
        for i, p in enumerate(paths):
            out.extend(tok for at, tok in inserts if at == i)
            out.append(p)
        out.extend(tok for at, tok in inserts if at >= len(paths))
        return out

    def _has_editables(self, paths: Sequence[str]) -> bool:
        """Whether ``from editables.redirector import RedirectingFinder`` finds a module
        on ``paths`` (the ``sys.path`` of the moment the hatch ``.pth`` line runs)."""
        pkg = self.path_find("editables", [p for p in paths if p not in self.hooks])
        if pkg is None or pkg.search is None:
            return False
        return self.path_find("editables.redirector", pkg.search) is not None

    # ---------------------------------------------------------------- FileFinder

    def join(self, folder: str, name: str) -> str:
        if self.root is None:  # os.path.join, for a plain name (the hot path)
            return folder + name if folder.endswith("/") else folder + "/" + name
        return host_path(self.root, name, folder) or os.path.join(folder, name)

    def listing(self, folder: str) -> dict[str, int]:
        """``folder``'s entries -> 1 (a file) or 2 (a folder) or 0 (neither), symbolic
        links followed (under the root for an image; 4 added for a link); {} when it
        cannot be listed (FileFinder then finds nothing in it)."""
        got = self._lists.get(folder)
        if got is not None:
            return got
        got = {}
        if self.stamps is not None:
            self._stamp(folder)
        try:
            with os.scandir(folder) as it:
                for e in it:
                    try:
                        link = _LINK if e.is_symlink() else 0
                        if link and self.stamps is not None:  # where it leads may change
                            self.kind(self.join(folder, e.name))
                        if self.root is not None and link:
                            host = self.join(folder, e.name)
                            got[e.name] = link | (_FILE if os.path.isfile(host) else
                                                  _DIR if os.path.isdir(host) else 0)
                        else:
                            got[e.name] = link | (_FILE if e.is_file() else
                                                  _DIR if e.is_dir() else 0)
                    except OSError:
                        got[e.name] = 0
        except OSError as e:
            self.unlistable.setdefault(folder, e)
        self._lists[folder] = got
        return got

    def isdir(self, folder: str) -> bool:
        return self.kind(folder) == _DIR

    def kind(self, path: str) -> int:
        """What ``path`` is, links followed: 0 nothing (or it cannot be stat-ed), 1 a
        regular file, 2 a folder, 3 something else (``os.path.isfile``/``isdir``/``exists``
        of it)."""
        got = self._kinds.get(path)
        if got is None:
            got = self._kinds[path] = kind_of(path)
        return got

    def kinds(self) -> dict[str, int]:
        """Every path whose kind was asked (:meth:`kind`), with the answer."""
        return self._kinds

    def _stamp(self, folder: str) -> None:
        """Keep ``folder``'s mtime before it is listed (a change while it is listed then
        gives it a newer one); a folder that cannot be stat-ed is kept as nothing there."""
        if self.stamps is None or folder in self.stamps:
            return
        try:
            self.stamps[folder] = os.stat(folder).st_mtime_ns
        except (OSError, ValueError):
            self._kinds.setdefault(folder, 0)

    def read(self, path: str) -> None:
        """Keep the stamp of a file whose content the model is about to read (recording)."""
        if self.reads is None or path in self.reads:
            return
        try:
            st = os.stat(path)
            self.reads[path] = [st.st_size, st.st_mtime_ns]
        except (OSError, ValueError):
            self.reads[path] = None

    def file_find(self, folder: str, fullname: str) -> Spec | None:
        """``FileFinder(folder).find_spec(fullname)``."""
        tail = fullname.rpartition(".")[2]
        entries = self.listing(folder)
        kind = entries.get(tail, 0)
        base = ""
        if kind & _DIR:
            base = self.join(folder, tail)
            inner = self.listing(base)
            for s in self.suffixes:
                if inner.get("__init__" + s, 0) & _FILE:
                    return Spec(fullname, self.join(base, "__init__" + s), (base,), "sys.path")
        for s in self.suffixes:
            if entries.get(tail + s, 0) & _FILE:
                return Spec(fullname, self.join(folder, tail + s), None, "sys.path")
        if kind & _DIR:
            return Spec(fullname, None, (base,), "namespace")
        return None

    def path_find(self, fullname: str, path: Sequence[str]) -> Spec | None:
        """``PathFinder.find_spec(fullname, path)``."""
        portions: list[str] = []
        for entry in path:
            hook = self.hooks.get(entry)
            if hook is not None:
                portions.extend(hook.portions(fullname) or ())
                continue
            if not self.isdir(entry):
                spec = self._zip_find(entry, fullname)  # zipimporter, or no finder at all
            else:
                spec = self.file_find(entry, fullname)
            if spec is None:
                continue
            if spec.origin is not None:
                return spec
            portions.extend(spec.search or ())
        return Spec(fullname, None, portions, "namespace") if portions else None

    def _zip_find(self, entry: str, fullname: str) -> Spec | None:
        """``zipimporter(entry).find_spec(fullname)`` for an entry that is a zip archive
        or a folder in one (:mod:`moonpin.preflight.access.zipfs`); None for anything else
        (and for an image's root, where archives are not read)."""
        if self.root is not None or self.kind(entry) not in (_FILE, 0):
            return None
        from moonpin.preflight.access import zipfs

        got = zipfs.find(entry, fullname)
        if got is None:
            return None
        archive = zipfs.archive_of(entry)
        if archive is not None:
            self.read(archive[0])  # what the answer depends on
        kind, origin, search = got
        return Spec(fullname, origin, search, "namespace" if kind == "ns" else "sys.path")

    def spec_from_file(self, fullname: str, location: str, how: str) -> Spec | None:
        """``importlib.util.spec_from_file_location(fullname, location)``: its loader from
        the suffix (None when no loader takes it); a package when the loader says so."""
        name = os.path.basename(location)
        if location.endswith(self.ext):
            pkg = any(name == "__init__" + s for s in self.ext)
        elif location.endswith((".py", ".pyc")):
            pkg = name.rsplit(".", 1)[0] == "__init__" and fullname.rpartition(".")[2] != \
                "__init__"
        else:
            return None
        return Spec(fullname, location, (os.path.dirname(location),) if pkg else None, how)

    # ---------------------------------------------------------------- sys.meta_path

    def find_spec(self, fullname: str, path: Sequence[str] | None) -> Spec | None:
        """The first spec of ``sys.meta_path`` (``path``: the parent's ``__path__``)."""
        for finder in self.front:
            got = finder.find_spec(self, fullname, path)
            if got is not None:
                return got
            if path is not None and isinstance(finder, _Mesonpy) and \
                    getattr(self._specs.get(fullname.rpartition(".")[0]), "how", "") == finder.how:
                return None  # the parent's __path__ is the finder's own: no folder holds it
        got = self.path_find(fullname, self.path if path is None else path)
        if got is not None:
            return got
        for later in self.back:
            got = later.find_spec(self, fullname, path)
            if got is not None:
                return got
        return None

    def find(self, fullname: str) -> Spec | None:
        """The spec ``import fullname`` uses, its parents imported first (None: not
        found, or a parent is not a package)."""
        if fullname in self._specs:
            return self._specs[fullname]
        parent = fullname.rpartition(".")[0]
        path: tuple[str, ...] | None = None
        spec: Spec | None = None
        if parent:
            path = self.package_path(parent)
            if path is not None:
                spec = self.find_spec(fullname, path)
        else:
            spec = self.find_spec(fullname, None)
        self._specs[fullname] = spec
        return spec

    def _direct(self, folder: str, fullname: str) -> None:
        """Remember ``PathFinder``'s answer for ``fullname`` over ``[folder]`` when it has
        one (a spec it returns ends the search: no later finder is asked)."""
        got = self.file_find(folder, fullname)
        if got is not None:
            self._specs[fullname] = got

    def seed(self, spec: Spec) -> None:
        """Take ``spec`` as what ``import spec.name`` found (a package given by its folder)."""
        self._specs[spec.name] = spec
        self._paths[spec.name] = spec.search

    def package_path(self, name: str) -> tuple[str, ...] | None:
        """The ``__path__`` of package ``name`` once its ``__init__`` ran (None: not a
        package): its spec's search locations, extended when the ``__init__.py`` calls
        ``pkgutil.extend_path``."""
        if name in self._paths:
            return self._paths[name]
        self._paths[name] = None  # a loop through a .pkg line stops here
        spec = self.find(name)
        out = None if spec is None else spec.search
        if out is not None and spec is not None and spec.origin is not None:
            self.read(spec.origin)
            if extends_path(spec.origin, self.within):
                out = self._extend_path(out, name)
        self._paths[name] = out
        return out

    def _extend_path(self, path: Sequence[str], name: str) -> tuple[str, ...]:
        """``pkgutil.extend_path(path, name)``."""
        out = list(path)
        parent, _, final = name.rpartition(".")
        search: Sequence[str] | None = self.path
        if parent:
            search = self.package_path(parent)
            if search is None:
                return tuple(out)
        for entry in search or ():
            portions: Sequence[str] = ()
            hook = self.hooks.get(entry)
            if hook is not None:
                portions = hook.portions(final) or ()
            else:
                spec = (self.file_find(entry, final) if self.isdir(entry)
                        else self._zip_find(entry, final))
                portions = spec.search or () if spec is not None else ()
            out.extend(p for p in portions if p not in out)
            pkgfile = self.join(entry, name + ".pkg")
            if hook is None and self.listing(entry).get(name + ".pkg", 0) & _FILE:
                self.read(pkgfile)
                out.extend(pkg_lines(pkgfile, self.within))
        return tuple(out)

    # ---------------------------------------------------------------- a package's sources

    def roots(self, top: str, spec: Spec) -> list[tuple[str, str]]:
        """The folders whose trees name the modules of package ``top`` (as (package name,
        folder)): a regular package's ``__path__``; for a namespace package the folders
        an editable finder maps its name and subpackages to, else its portions."""
        if spec.origin is not None:
            return [(top, d) for d in self.package_path(top) or () if d not in self.hooks]
        out: list[tuple[str, str]] = []
        below = top + "."
        for finder in (*self.front, *self.back):
            if isinstance(finder, _Setuptools):
                if top in finder.mapping:
                    out.append((top, finder.mapping[top]))
                out += [(k, d) for k, ds in finder.namespaces.items()
                        if k == top or k.startswith(below) for d in ds]
            elif isinstance(finder, _Skbc):
                out += [(k, d) for k, ds in finder.locations.items()
                        if k == top or k.startswith(below) for d in ds]
                out += [(k, d) for k, d in finder.search_paths_for(top)]
            elif isinstance(finder, _Mesonpy):
                out += finder.roots(top)
            elif isinstance(finder, _Hatch) and top in finder.redirects:
                target = finder.redirects[top][0]
                if os.path.basename(target).startswith("__init__."):
                    out.append((top, os.path.dirname(target)))
        out = [(k, d) for k, d in dict.fromkeys(out) if self.isdir(d)]
        return out or [(top, d) for d in spec.search or () if d not in self.hooks]

    def module_names(self, top: str, spec: Spec, broken: list[str] | None = None
                     ) -> list[str]:
        """Every module name below ``top`` that a folder of :meth:`roots` names (a
        folder, or a ``.py`` file), and the modules an editable finder maps there.
        ``broken`` receives each ``.py`` entry that is neither a file nor a folder (a
        dangling symbolic link) and each folder that cannot be listed."""
        names: dict[str, None] = {}
        seen: set[tuple[int, int]] = set()  # the folders a symbolic link led to
        stack = [(name, d, 0) for name, d in reversed(self.roots(top, spec))]
        while stack:
            name, folder, depth = stack.pop()
            if depth > _MAX_DEPTH:
                continue
            sub = []
            entries = self.listing(folder)
            # PathFinder over this one folder decides the children when no finder is asked
            # before it and the package's __path__ is just this folder: resolved here, once
            direct = not self.front and self.package_path(name) == (folder,)
            if folder in self.unlistable and broken is not None:
                broken.append(folder)
            for entry, kind in sorted(entries.items()):
                if kind & _DIR:
                    if entry == "__pycache__" or "." in entry:
                        continue
                    path = self.join(folder, entry)
                    if kind & _LINK:  # a loop through links is walked once at most
                        try:
                            st = os.stat(path)
                        except OSError:
                            continue
                        if (st.st_dev, st.st_ino) in seen:
                            continue
                        seen.add((st.st_dev, st.st_ino))
                    child = f"{name}.{entry}"
                    names[child] = None
                    sub.append((child, path, depth + 1))
                    if direct and child not in self._specs:
                        self._direct(folder, child)
                elif kind & _FILE and entry.endswith(".py") and entry != "__init__.py":
                    stem = entry[:-3]
                    if stem and "." not in stem:
                        child = f"{name}.{stem}"
                        names[child] = None
                        if direct and child not in self._specs:
                            self._direct(folder, child)
                elif not kind & (_FILE | _DIR) and entry.endswith(".py") and \
                        broken is not None:
                    broken.append(self.join(folder, entry))
            stack.extend(reversed(sub))
        below = top + "."
        for finder in self.front:
            if isinstance(finder, _Skbc):
                for k in (*finder.source, *finder.wheel):
                    if k.startswith(below):
                        names[k] = None
        return list(names)


def kind_of(path: str) -> int:
    """:meth:`Importer.kind` of ``path``, asked afresh."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return 0
    return _DIR if stat.S_ISDIR(mode) else _FILE if stat.S_ISREG(mode) else 3


def pkg_lines(path: str, within: Confined = NOWHERE) -> list[str]:
    """A ``NAME.pkg`` file's lines as ``extend_path`` appends them (comments and blank
    lines skipped; no check that they exist)."""
    try:
        text = within.read(path, cap=1 << 20, what=".pkg file").decode("utf-8", "replace")
    except OSError:
        return []
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln for ln in lines if ln and not ln.startswith("#")]
