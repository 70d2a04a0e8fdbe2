"""The editable finders as the installers write them, for tests that run them in a child
interpreter next to moonpin's model of them (:mod:`moonpin.preflight.pyimport.metapath`).

* ``SETUPTOOLS_FINDER``: setuptools 84.2's ``_FINDER_TEMPLATE``
  (setuptools/command/editable_wheel.py), verbatim; ``str.format`` it with ``mapping``,
  ``namespaces`` and ``name`` as ``_finder_template`` does.
* ``EDITABLES_REDIRECTOR``: ``editables`` 0.6's ``editables/redirector.py``, verbatim (the
  ``RedirectingFinder`` hatchling's ``dev-mode-exact`` bootstrap imports).
* ``SKBC_REDIRECT``: scikit-build-core 1.1.2's ``resources/_editable_redirect.py``,
  trimmed to what decides a spec (``ScikitBuildRedirectingFinder.__init__``'s ranked
  locations, ``find_spec``, ``_make_spec`` without the loader wrappers, and ``install``);
  the wheel appends ``install(<its arguments>)``.
"""

from __future__ import annotations

__all__ = ["EDITABLES_REDIRECTOR", "SETUPTOOLS_FINDER", "SKBC_REDIRECT"]

SETUPTOOLS_FINDER = '''from __future__ import annotations
import sys
from importlib.machinery import ModuleSpec, PathFinder
from importlib.machinery import all_suffixes as module_suffixes
from importlib.util import spec_from_file_location
from itertools import chain
from pathlib import Path

MAPPING: dict[str, str] = {mapping!r}
NAMESPACES: dict[str, list[str]] = {namespaces!r}
PATH_PLACEHOLDER = {name!r} + ".__path_hook__"


class _EditableFinder:  # MetaPathFinder
    @classmethod
    def find_spec(cls, fullname: str, path=None, target=None) -> ModuleSpec | None:  # type: ignore
        # Top-level packages and modules (we know these exist in the FS)
        if fullname in MAPPING:
            pkg_path = MAPPING[fullname]
            return cls._find_spec(fullname, Path(pkg_path))

        # Handle immediate children modules (required for namespaces to work)
        # To avoid problems with case sensitivity in the file system we delegate
        # to the importlib.machinery implementation.
        parent, _, child = fullname.rpartition(".")
        if parent and parent in MAPPING:
            return PathFinder.find_spec(fullname, path=[MAPPING[parent]])

        # Other levels of nesting should be handled automatically by importlib
        # using the parent path.
        return None

    @classmethod
    def _find_spec(cls, fullname: str, candidate_path: Path) -> ModuleSpec | None:
        init = candidate_path / "__init__.py"
        candidates = (candidate_path.with_suffix(x) for x in module_suffixes())
        for candidate in chain([init], candidates):
            if candidate.exists():
                return spec_from_file_location(fullname, candidate)
        return None


class _EditableNamespaceFinder:  # PathEntryFinder
    @classmethod
    def _path_hook(cls, path) -> type[_EditableNamespaceFinder]:
        if path == PATH_PLACEHOLDER:
            return cls
        raise ImportError

    @classmethod
    def _paths(cls, fullname: str) -> list[str]:
        paths = NAMESPACES[fullname]
        if not paths and fullname in MAPPING:
            paths = [MAPPING[fullname]]
        # Always add placeholder, for 2 reasons:
        # 1. __path__ cannot be empty for the spec to be considered namespace.
        # 2. In the case of nested namespaces, we need to force
        #    import machinery to query _EditableNamespaceFinder again.
        return [*paths, PATH_PLACEHOLDER]

    @classmethod
    def find_spec(cls, fullname: str, target=None) -> ModuleSpec | None:  # type: ignore
        if fullname in NAMESPACES:
            spec = ModuleSpec(fullname, None, is_package=True)
            spec.submodule_search_locations = cls._paths(fullname)
            return spec
        return None

    @classmethod
    def find_module(cls, _fullname) -> None:
        return None


def install():
    if not any(finder == _EditableFinder for finder in sys.meta_path):
        sys.meta_path.append(_EditableFinder)

    if not NAMESPACES:
        return

    if not any(hook == _EditableNamespaceFinder._path_hook for hook in sys.path_hooks):
        # PathEntryFinder is needed to create NamespaceSpec without private APIS
        sys.path_hooks.append(_EditableNamespaceFinder._path_hook)
    if PATH_PLACEHOLDER not in sys.path:
        sys.path.append(PATH_PLACEHOLDER)  # Used just to trigger the path hook
'''

EDITABLES_REDIRECTOR = '''import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Dict, Optional, Sequence, Union

ModulePath = Optional[Sequence[Union[bytes, str]]]


class RedirectingFinder(importlib.abc.MetaPathFinder):
    _redirections: Dict[str, str] = {}

    @classmethod
    def map_module(cls, name: str, path: str) -> None:
        cls._redirections[name] = path

    @classmethod
    def find_spec(
        cls, fullname: str, path: ModulePath = None, target: Optional[ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if "." in fullname:
            return None
        if path is not None:
            return None
        try:
            redir = cls._redirections[fullname]
        except KeyError:
            return None
        spec = importlib.util.spec_from_file_location(fullname, redir)
        return spec

    @classmethod
    def install(cls) -> None:
        if cls not in sys.meta_path:
            sys.meta_path.append(cls)

    @classmethod
    def invalidate_caches(cls) -> None:
        # importlib.invalidate_caches calls finders' invalidate_caches methods,
        # and since we install this meta path finder as a class rather than an instance,
        # we have to override the inherited invalidate_caches method (using self)
        # as a classmethod instead
        pass
'''

SKBC_REDIRECT = '''from __future__ import annotations

import os
import sys

DIR = os.path.abspath(os.path.dirname(__file__))
MARKER = "SKBUILD_EDITABLE_SKIP"


class ScikitBuildRedirectingFinder:
    def __init__(self, known_source_files, known_wheel_files, known_directories,
                 known_packages, path, rebuild, verbose, build_options, install_options,
                 dir, install_dir):
        self.known_source_files = known_source_files
        self.known_wheel_files = known_wheel_files
        self.path = path
        self.dir = dir
        ranked_locations = {}
        for parent, parent_paths in known_directories.items():
            locations = ranked_locations.setdefault(parent, {})
            for parent_path in parent_paths:
                if os.path.isabs(parent_path):
                    locations.setdefault(parent_path, 1)
                else:
                    locations.setdefault(os.path.join(self.dir, parent_path), 0)
        pkgs = list(known_packages)
        for pkg in sorted(pkgs, key=lambda p: p.count(".")):
            parent = ".".join(pkg.split(".")[:-1])
            last = pkg.split(".")[-1]
            if not parent or parent not in ranked_locations:
                continue
            for parent_path, rank in ranked_locations[parent].items():
                sub_path = os.path.join(parent_path, last)
                if os.path.isdir(sub_path):
                    ranked_locations.setdefault(pkg, {}).setdefault(sub_path, rank)
        self.submodule_search_locations = {
            pkg: [p for _, p in sorted((rank, p) for p, rank in locations.items())]
            for pkg, locations in ranked_locations.items()
        }
        self.pkgs = frozenset(pkgs)

    def find_spec(self, fullname, path=None, target=None):
        if self.path and self.path in os.environ.get(MARKER, "").split(os.pathsep):
            return None
        if fullname in self.submodule_search_locations:
            submodule_search_locations = list(self.submodule_search_locations[fullname])
        else:
            submodule_search_locations = None
        if fullname in self.known_wheel_files:
            origin = os.path.join(self.dir, self.known_wheel_files[fullname])
            return self._make_spec(fullname, origin, submodule_search_locations)
        if fullname in self.known_source_files:
            origin = self.known_source_files[fullname]
            return self._make_spec(fullname, origin, submodule_search_locations)
        if submodule_search_locations is not None:
            import importlib.machinery
            import importlib.util

            native = importlib.machinery.PathFinder.find_spec(fullname, path)
            if native is not None and native.loader is None:
                for location in native.submodule_search_locations or []:
                    if location not in submodule_search_locations:
                        submodule_search_locations.append(location)
            loader = _NamespaceLoader()
            spec = importlib.util.spec_from_loader(fullname, loader, is_package=True)
            if spec is not None:
                spec.submodule_search_locations = submodule_search_locations
            return spec
        return None

    def _make_spec(self, fullname, origin, submodule_search_locations):
        import importlib.machinery
        import importlib.util

        is_pkg = origin.endswith(("__init__.py", "__init__.pyc"))
        search = os.path.dirname(origin)
        if is_pkg:
            search = os.path.dirname(search)
        spec = importlib.machinery.PathFinder.find_spec(fullname, [search])
        if (spec is not None and spec.loader is not None and spec.origin is not None
                and os.path.normcase(spec.origin) == os.path.normcase(origin)):
            spec.submodule_search_locations = submodule_search_locations if is_pkg else None
        else:
            spec = importlib.util.spec_from_file_location(
                fullname, origin,
                submodule_search_locations=submodule_search_locations if is_pkg else None)
        return spec


class _NamespaceLoader:
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        return None


def install(known_source_files, known_wheel_files, known_directories=None,
            known_packages=None, path=None, rebuild=False, verbose=False,
            build_options=None, install_options=None, install_dir=""):
    known_directories = known_directories or {}
    known_packages = known_packages or []
    for finder in sys.meta_path:
        if (isinstance(finder, ScikitBuildRedirectingFinder)
                and finder.known_source_files == known_source_files
                and finder.known_wheel_files == known_wheel_files):
            return
    sys.meta_path.insert(0, ScikitBuildRedirectingFinder(
        known_source_files, known_wheel_files, known_directories, known_packages, path,
        rebuild, verbose, build_options or [], install_options or [], DIR, install_dir))
'''
