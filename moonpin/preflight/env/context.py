"""What one check knows about the environment it reads, as one value handed down to every
part that needs it (mypy's ``FindModuleCache(search_paths, fscache, options)`` shape): the
:class:`Context`, built once from the :class:`~moonpin.preflight.env.target.Target`, and the
:class:`Run`, what the check under way does beside reading (the children computing ahead,
their answers).

No module keeps these in globals: two checks in one process (a test, a caller of the API)
never see each other's environment.

Nothing imported at import time: this runs at worker start.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from moonpin.preflight.access.confined import Confined
    from moonpin.preflight.access.identity import Identity
    from moonpin.preflight.env.target import Target
    from moonpin.preflight.prefetch import Pending
    from moonpin.preflight.pyimport.atimport import Bounds
    from moonpin.preflight.pyimport.metapath import Importer

__all__ = ["Context", "Run"]


class Run:
    """The per-check mutable state: children computing loads ahead of the check
    (:mod:`moonpin.preflight.prefetch`, taken by :mod:`moonpin.preflight.loader.loadchain`), the
    answers they gave that no load took yet, and, in such a child, where each load it
    computes is recorded (None: not a child), and the loader's processes an import built,
    which the loads after the same import are copies of (``import torch`` modelled once per
    check; :mod:`moonpin.preflight.loader.loadchain`)."""

    __slots__ = ("pending", "processes", "ready", "record")

    def __init__(self) -> None:
        self.pending: list[Pending] = []
        self.ready: dict[str, object] = {}
        self.record: dict[str, object] | None = None
        self.processes: dict[str, Any] = {}

    def cancel(self) -> None:
        """Kill and reap every child not taken (its load is no longer wanted)."""
        for p in self.pending:
            p.cancel()

    def close(self) -> None:
        """The check is over: no child is left, nothing computed ahead is kept, every
        process kept is closed (its symbol tables unmapped)."""
        self.cancel()
        self.pending.clear()
        self.ready.clear()
        for p in self.processes.values():
            p.close()
        self.processes.clear()


class Context:
    """The environment a check reads, frozen: its ``sys.path`` (``paths``), the folders whose
    ``.pth`` files ``site`` processed (``sites``; None: the site-packages folders of the
    paths), an image's root folder (``root``; None: this machine's file system), the
    interpreter's extension suffixes and version (whose bytecode caches it trusts), whether
    ``paths`` are its whole ``sys.path`` (``complete``: ``--site-packages`` folders are not,
    a module found in none of them may be elsewhere), its machine and ``LD_LIBRARY_PATH``
    (None: this process's), its ``LD_PRELOAD`` entries (``preload``: an image's, names or
    host paths under its root; None: this process's), its interpreter (whose global scope
    builds bind in; None: none known), the one model of its importer every look at it
    shares (folder listings, specs:
    :class:`~moonpin.preflight.pyimport.metapath.Importer`), the :class:`Run`, the
    variables its processes start with (``env``: an image's configured ``Env``; this
    process's environment for a check of this machine), who its worker runs as (``user``,
    an :class:`Identity`: an image's ``User``; this process's for this machine), and the
    image root every read of the target's files is confined to (``confined``:
    :class:`~moonpin.preflight.access.confined.Confined`, made once from ``root``), and an
    image's worker's working folder (``working_dir``, a path of the image; None: this
    process's), and how far the code an import runs is followed (``bounds``:
    :class:`~moonpin.preflight.pyimport.atimport.Bounds`; None: that walk's defaults), and
    the modules ``site`` imports by name at its start (``customize``: ``sitecustomize``, and
    ``usercustomize`` when its user site folder is enabled)."""

    __slots__ = ("bounds", "complete", "confined", "customize", "env", "ext_suffixes", "importer",
                 "ld_path",
                 "machine", "markers", "paths", "preload", "python", "root", "run", "sites", "user",
                 "version", "working_dir")

    paths: Sequence[str]
    sites: tuple[str, ...] | None
    root: str | None
    ext_suffixes: tuple[str, ...]
    version: tuple[int, int]
    complete: bool
    machine: str | None
    ld_path: tuple[str, ...] | None
    preload: tuple[str, ...] | None
    python: str | None
    importer: Importer
    run: Run
    env: Mapping[str, str]
    user: Identity
    confined: Confined
    working_dir: str | None
    bounds: Bounds | None
    markers: Mapping[str, str]
    customize: tuple[str, ...]

    def __init__(self, paths: Sequence[str], *, sites: Sequence[str] | None = None,
                 root: str | None = None, ext_suffixes: Sequence[str] | None = None,
                 version: tuple[int, int] | None = None, complete: bool = True,
                 machine: str | None = None, ld_path: Sequence[str] | None = None,
                 python: str | None = None, run: Run | None = None,
                 env: Mapping[str, str] | None = None, user: Identity | None = None,
                 preload: Sequence[str] | None = None,
                 working_dir: str | None = None, bounds: Bounds | None = None,
                 customize: Sequence[str] = ("sitecustomize",)) -> None:
        from moonpin.preflight.access.confined import Confined
        from moonpin.preflight.pyimport.metapath import Importer
        from moonpin.readers.markers import environment, implementation_of

        if ext_suffixes is None:
            from importlib import machinery

            ext_suffixes = machinery.EXTENSION_SUFFIXES
        put = object.__setattr__
        put(self, "paths", paths)
        put(self, "sites", None if sites is None else tuple(sites))
        put(self, "root", root)
        put(self, "ext_suffixes", tuple(ext_suffixes))
        put(self, "version", version or (sys.version_info[0], sys.version_info[1]))
        put(self, "complete", complete)
        put(self, "machine", machine)
        put(self, "ld_path", None if ld_path is None else tuple(ld_path))
        put(self, "preload", None if preload is None else tuple(preload))
        put(self, "working_dir", working_dir)
        put(self, "bounds", bounds)
        put(self, "customize", tuple(customize))
        put(self, "python", python)
        put(self, "run", run if run is not None else Run())
        put(self, "env", os.environ if env is None else env)
        if user is None:
            from moonpin.preflight.access.identity import Identity as _Identity

            user = _Identity.current()
        put(self, "user", user)
        # the image root every read of the check is confined to (a value, never a module's)
        put(self, "confined", Confined(root))
        # the marker environment (PEP 508) of the judged interpreter, for its distributions'
        # Requires-Dist: its version, its implementation (named by its extension suffixes),
        # Linux on its machine (an image's; this one's for a check of this machine), no
        # extra (readers.markers.environment): never this process's Python, which judges it.
        # A value, so the rooms that judge requirements read it without calling back here
        put(self, "markers", environment(self.version, machine or os.uname().machine,
                                         implementation_of(self.ext_suffixes)))
        # made now: what it records is stamped from when the check began to look
        # (:mod:`moonpin.preflight.installed.stamps`); not under an image's root, whose paths
        # resolve through the image's own links
        put(self, "importer", Importer(paths, self.sites, root, self.ext_suffixes,
                                       record=root is None, within=self.confined))

    @classmethod
    def of(cls, target: Target, *, complete: bool = True, run: Run | None = None,
           env: Mapping[str, str] | None = None, bounds: Bounds | None = None) -> Context:
        """The context of ``target``; ``complete``: its paths are its whole ``sys.path``;
        ``env``: the variables it runs with (None: this process's); ``bounds``: how far the
        code an import runs is followed (None: the walk's defaults)."""
        return cls(target.paths, sites=target.sites, root=target.root,
                   ext_suffixes=target.ext_suffixes, version=target.version,
                   complete=complete, machine=target.machine, ld_path=target.ld_path,
                   python=target.python, run=run, env=env,
                   user=target.user, preload=target.preload,
                   working_dir=target.working_dir, bounds=bounds,
                   customize=target.customize)

    def interpreter_stop(self) -> tuple[str, str] | None:
        """Whether the target's interpreter stops as it starts, before any import of the
        worker's (a site file that raises: :func:`moonpin.preflight.pyimport.sitefiles.
        interpreter_stops`), as (what, fix); None when it starts."""
        from moonpin.preflight.pyimport.sitefiles import interpreter_stops

        return interpreter_stops(self.sites or (), self.confined)

    def unread_site(self) -> list[str]:
        """The site files whose reading this check cannot finish, a line each
        (:func:`moonpin.preflight.pyimport.sitefiles.unread_pth`)."""
        from moonpin.preflight.pyimport.sitefiles import unread_pth

        return unread_pth(self.sites or (), self.confined)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a Context is frozen: make a new one instead of setting {name}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a Context is frozen: {name} stays")
