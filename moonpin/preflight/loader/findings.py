"""What loading found, one shape for a ``dlopen`` (:class:`moonpin.preflight.loader.ldproc.
Outcome`) and a whole import chain (:class:`moonpin.preflight.loader.loadchain.Report`). Nothing
imported: a warm start that reads a remembered load loads this, not the loader's model."""

from __future__ import annotations

__all__ = ["Findings"]


class Findings:
    """What loading found, kept for the report: ``missing`` (name -> the object needing it),
    ``bad`` (path -> why it cannot be mapped), ``unbound`` ((object, symbol, version or "",
    the objects searched) for each reference nothing binds), ``versions`` ((object, version,
    library path, the newest version of that kind it defines) for each missing version),
    ``host`` (symbols left to the driver), ``host_missing`` (driver libraries not found
    here) and counts: ``count`` (library needs resolved), ``objects`` (objects walked),
    ``refs`` (undefined symbols) and ``bound`` (of them, bound). One ``dlopen``'s
    (:class:`Outcome`) and a whole import chain's
    (:class:`moonpin.preflight.loader.loadchain.Report`) have this shape."""

    __slots__ = ("bad", "bound", "count", "host", "host_missing", "missing", "objects",
                 "refs", "unbound", "versions")

    def __init__(self) -> None:
        self.missing: dict[str, str] = {}
        self.bad: dict[str, str] = {}
        self.versions: list[tuple[str, str, str, str]] = []
        self.unbound: list[tuple[str, str, str, tuple[str, ...]]] = []
        self.host: list[str] = []
        self.host_missing: dict[str, str] = {}
        self.count = 0
        self.objects = 0
        self.refs = 0
        self.bound = 0
