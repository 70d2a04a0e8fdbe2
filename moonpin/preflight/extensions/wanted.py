"""Which extensions this worker imports: from its launch line, read in the installed
SGLang's own sources (``--moe-a2a-backend nixl`` -> ``srt/layers/moe/token_dispatcher/
nixl.py``, which imports ``nixl_ep``), and the ones a CUDA worker imports at start
(sgl_kernel, flashinfer: :data:`~moonpin.preflight.extensions.seam` rules marked
``IMPLICIT``). Only ``os`` at import."""

from __future__ import annotations

import os

from moonpin.kb.cache import facts_memo
from moonpin.preflight.extensions import seam

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from moonpin.preflight.access.confined import Confined
    from moonpin.preflight.extensions.seam import Facts

__all__ = ["Wanted", "extensions"]

#: :data:`moonpin.readers.launch.server_args.DISPATCHERS` inside the ``sglang`` package, as path
#: parts (that module is imported only on a memo miss)
_DISPATCHERS = ("srt", "layers", "moe", "token_dispatcher")
#: launch features whose backend names a package the worker imports
_FEATURES = ("elastic-ep", "moe-a2a")
#: "no backend"; a backend an ``OWN_LINES`` rule claims (mooncake's) is judged in its own lines
_NONE = ("none", "")


class Wanted:
    """An extension to judge: its import name, why (said on its line), whether the
    worker certainly imports it (a requested backend, or the installed SGLang requires its
    distribution): absent, it is a failure; else absent is not said at all; and whether a
    loader rule here reads it (else only whether it is installed is judged), with the flag
    that chose it."""

    __slots__ = ("flag", "name", "required", "ruled", "why")

    def __init__(self, name: str, why: str, required: bool, ruled: bool = True,
                 flag: str = "") -> None:
        self.name = name
        self.why = why
        self.required = required
        self.ruled = ruled
        self.flag = flag


def _norm(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


def _own_package(top: str, backend: str) -> bool:
    """Whether ``top`` is the package a backend is named after: SGLang names its backends
    after the package they drive (``deepep`` -> ``deep_ep``, ``nixl`` -> ``nixl_ep``,
    ``mori`` -> ``mori``), while the other packages a dispatcher may import are helpers on
    some code paths only (``aiter`` beside ``mori``)."""
    t, b = _norm(top), _norm(backend)
    return bool(t and b) and (t.startswith(b) or b.startswith(t))


def _imports(path: str, within: Confined) -> list[tuple[str, int]]:
    """Every import the dispatcher module may run, as the scrape reads it for the KB
    (:func:`moonpin.readers.launch.server_args.
    backend_imports`), kept in the file-facts memo."""
    def read() -> list[list[object]]:
        from moonpin.preflight.installed.image_facts import read_bytes
        from moonpin.readers.launch.server_args import backend_imports

        return [[m, n] for m, _, n in backend_imports(
            read_bytes(path, 16 << 20, "SGLang source", within), path)]

    try:
        got = facts_memo().get("ext-dispatcher-v2", path, read,
                               lambda v: isinstance(v, list), within=within.root)
    except OSError:
        return []
    return [(str(m), int(n)) for m, n in got]  # type: ignore[call-overload]


def _dispatcher(sglang: str, backend: str, within: Confined) -> str | None:
    """The module of ``backend`` in the SGLang package at ``sglang``, chosen as the scrape
    chooses it for the KB (:func:`moonpin.readers.launch.server_args.backend_member`:
    ``<backend>.py``, else the first whose name starts with it: ``mori`` -> ``moriep.py``);
    kept in the file-facts memo under the folder's stamp."""
    folder = os.path.join(sglang, *_DISPATCHERS)

    def find() -> str:
        from moonpin.readers.launch import server_args as sa

        got = sa.backend_member([sa.DISPATCHERS + n for n in os.listdir(folder)], backend)
        return "" if got is None else got[len(sa.DISPATCHERS):]

    try:
        name = facts_memo().get(f"ext-backend-v1\0{backend}", folder, find,
                                lambda v: isinstance(v, str) and "/" not in v,
                                within=within.root)
    except OSError:
        return None
    return os.path.join(folder, name) if name else None


def extensions(features: Mapping[str, str], sglang: str | None, facts: Facts,
               flags: Mapping[str, str]) -> tuple[list[Wanted], list[str]]:
    """The extensions to judge (in order, each once) and the requested backends with no
    loader rule here (said, not judged). ``features``: feature -> backend
    (:func:`moonpin.preflight.run.requested_features`); ``sglang``: the installed SGLang's
    package folder (None: not found: the rules' own ``CHOICES`` stand in); ``flags``:
    feature -> its command-line flag."""
    out: dict[str, Wanted] = {}
    unjudged: list[str] = []
    flag_of = {f: k for k, f in flags.items()}
    for feature in _FEATURES:
        backend = features.get(feature, "")
        if backend in _NONE or any(backend in seam.rule_for(name).CHOICES.get(feature, ())
                                   for name in seam.OWN_LINES):
            continue
        said = f"{flag_of.get(feature, feature)} {backend}"
        module = _dispatcher(sglang, backend, facts.within) if sglang is not None else None
        names: list[tuple[str, str]] = []
        unruled: list[tuple[str, str]] = []
        if module is not None:
            rel = os.path.relpath(module, os.path.dirname(sglang or module))
            for m, line in _imports(module, facts.within):
                top = m.split(".")[0]
                if (top in seam.RULES and top not in seam.OWN_LINES
                        and top not in [n for n, _ in names]):
                    names.append((top, f"{said}: {rel}:{line} imports {m}"))
                elif (top not in seam.RULES and _own_package(top, backend)
                      and top not in [n for n, _ in unruled]):
                    unruled.append((top, f"{said}: {rel}:{line} imports {m}"))
        else:
            for name in seam.RULES:
                if name in seam.OWN_LINES:
                    continue
                rule = seam.rule_for(name)
                if backend in rule.CHOICES.get(feature, ()):
                    names.append((name, f"{said} (this check's reading: no SGLang sources)"))
        if not names and not unruled:
            unjudged.append(said)
        for name, why in names:
            out.setdefault(name, Wanted(name, why, True))
        if not names:  # no rule reads this backend's package: whether it is there, at least
            for name, why in unruled:
                out.setdefault(name, Wanted(name, why, True, ruled=False,
                                            flag=flag_of.get(feature, feature)))
    if facts.cuda is not None:  # what a CUDA worker imports at start
        for name in seam.RULES:
            if name in seam.OWN_LINES:
                continue
            rule = seam.rule_for(name)
            if not rule.IMPLICIT or name in out:
                continue
            pinned = next((d for d in rule.DISTRIBUTIONS if facts.pin("sglang", d)), None)
            out[name] = Wanted(name, f"SGLang requires {pinned} on CUDA" if pinned else
                               "a CUDA worker imports it at start", pinned is not None)
    return list(out.values()), unjudged
