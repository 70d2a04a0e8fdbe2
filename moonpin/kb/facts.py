"""The facts queries ask of a KB, as plain frozen values (standard library only).

``moonpin.kb.models`` validates ``data/kb.json`` at its boundary with pydantic; that costs ~0.2 s
to import and ~0.3 s per load, more than a whole answer may take. A query needs a small
part of it (no source-level imports, calls or launch rules), so the KB's writer also writes
that part as ``resolved/_facts.json`` (see :mod:`kb.index`), and queries read these
classes from it. Each class holds the fields of its ``moonpin.kb.models`` namesake that a query
reads, under the same names.

:func:`from_model` takes them from a validated :class:`moonpin.kb.models.KnowledgeBase`;
:func:`from_json` from the derived file, checking every value's type as it goes (a derived
file is untrusted input: a damaged one raises :class:`FactsError` and the caller falls back
to the KB itself); :func:`to_json` writes what :func:`from_json` reads.

No ``from __future__ import annotations`` here: the named tuples' field types are objects,
not strings that ``typing`` would compile one by one at import (a third of it).
"""

from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any, NamedTuple, get_type_hints

__all__ = [
    "Artifact",
    "BackendImport",
    "Build",
    "ChoiceImport",
    "ExtensionPin",
    "Facts",
    "FactsError",
    "LaunchBackend",
    "Loader",
    "LoaderImport",
    "Mooncake",
    "MooncakeHead",
    "NativeBuild",
    "NativeHead",
    "NativeRelease",
    "NativeRule",
    "NativeStep",
    "NativeUnmet",
    "NativeWheel",
    "Pg",
    "Scrape",
    "Sglang",
    "SglangHead",
    "Summary",
    "Torch",
    "TorchVariant",
    "Unread",
    "Wheel",
    "from_json",
    "from_model",
    "summary_from_json",
    "summary_of",
    "to_json",
]


class FactsError(ValueError):
    """A derived facts file whose content is not what :func:`to_json` writes."""


class Artifact(NamedTuple):
    filename: str
    sha256: str


class Pg(NamedTuple):
    module: str | None
    alternatives: tuple[str, ...]
    names: tuple[str, ...]
    optional_names: tuple[str, ...]
    backends: tuple[str, ...]
    optional: bool
    evidence: tuple[str, ...]


class ExtensionPin(NamedTuple):
    """``moonpin.kb.models.DistPin``: an SGLang release's Requires-Dist line naming a
    native extension."""

    dist: str
    requirement: str
    member: str
    line: int


class BackendImport(NamedTuple):
    module: str
    names: tuple[str, ...]
    line: int


class ChoiceImport(NamedTuple):
    """``moonpin.kb.models.ChoiceImport``: an import under a test the choice passes."""

    member: str
    module: str
    names: tuple[str, ...]
    line: int


class LaunchBackend(NamedTuple):
    """``moonpin.kb.models.LaunchBackend``: what one choice of a backend option imports."""

    flag: str
    choice: str
    member: str | None
    imports: tuple[BackendImport, ...]
    error: str | None
    #: the imports under a test on the option's value this choice passes (KB schema 6)
    guarded: tuple[ChoiceImport, ...]


class Sglang(NamedTuple):
    version: str
    source: str
    artifact: Artifact
    torch_requirements: tuple[str, ...]
    #: the version specifier of each line of ``torch_requirements`` (None: the line does
    #: not parse), so a query needs no PEP 508 parser
    torch_specifiers: tuple[str | None, ...]
    pg: Pg
    files_analyzed: int
    #: how many launch rules the KB records for the release (``kb info``; the rules
    #: themselves are in ``resolved/_launch-<version>.json``)
    launch_rules: int
    #: the release's ``Requires-Python`` as its METADATA says it (None: none declared)
    requires_python: str | None
    #: the CPython interpreters its wheels install on (None: any, or not known)
    wheel_pythons: tuple[str, ...] | None
    #: what each choice of a backend option imports, from its sources (KB schema 5)
    launch_backends: tuple[LaunchBackend, ...]
    #: its Requires-Dist lines naming a native extension (KB schema 5)
    extension_pins: tuple[ExtensionPin, ...]


class LoaderImport(NamedTuple):
    template: str
    line: int
    on_missing: str | None


class Loader(NamedTuple):
    module: str
    member: str
    kind: str
    imports: tuple[LoaderImport, ...]
    version_regex: str | None
    separator: str | None
    toolchain: tuple[str, ...]
    sources: tuple[str, ...]
    source_names: tuple[str, ...]
    source_backends: tuple[str, ...]
    note: str | None
    #: what a compiling loader checks before it compiles (``JIT_REQUIRES`` codes)
    requires: tuple[str, ...]


class Build(NamedTuple):
    member: str
    torch: str | None
    torch_from: str | None
    abi: str | None
    names: tuple[str, ...]
    names_checked: tuple[str, ...]
    backends: tuple[str, ...]
    needed: tuple[str, ...]
    needed_method: str
    cuda_major: int | None
    complete: bool
    strings_complete: bool
    read_error: str | None
    bytes_from: str | None


class Wheel(NamedTuple):
    artifact: Artifact
    python_tags: tuple[str, ...]
    platform_tags: tuple[str, ...]
    loaders: tuple[Loader, ...]
    builds: tuple[Build, ...]


class Mooncake(NamedTuple):
    dist: str
    version: str
    wheels: tuple[Wheel, ...]


class TorchVariant(NamedTuple):
    arch: str
    cuda_major: int | None
    evidence: str
    artifact: Artifact


class Torch(NamedTuple):
    version: str
    variants: tuple[TorchVariant, ...]


class Unread(NamedTuple):
    kind: str
    name: str
    version: str
    reason: str


class Scrape(NamedTuple):
    scraped_at: datetime
    index_url: str | None
    moonpin_version: str
    bytes_fetched: int
    artifact_bytes: int
    requests: int
    seconds: float
    refreshed: tuple[str, ...]
    read: dict[str, tuple[str, ...]]
    kept: dict[str, int]
    kinds_scraped_at: dict[str, datetime]
    extractors: dict[str, str]


class NativeStep(NamedTuple):
    """``moonpin.kb.models.RuleStep``: one step of a native extension's loader rule."""

    kind: str
    target: str
    key: str | None
    condition: str | None
    effect: str | None
    member: str
    line: int


class NativeRule(NamedTuple):
    """``moonpin.kb.models.LoaderRule``."""

    package: str
    steps: tuple[NativeStep, ...]


class NativeBuild(NamedTuple):
    member: str
    module: str
    abi: str | None
    torch: str | None
    torch_from: str | None
    needed_method: str
    cuda_major: int | None


class NativeWheel(NamedTuple):
    artifact: Artifact
    python_tags: tuple[str, ...]
    abi_tags: tuple[str, ...]
    platform_tags: tuple[str, ...]
    requires_python: str | None
    requires_dist: tuple[str, ...]
    torch_requirements: tuple[str, ...]
    rules: tuple[NativeRule, ...]
    builds: tuple[NativeBuild, ...]
    packages: tuple[str, ...]


class NativeUnmet(NamedTuple):
    """``moonpin.kb.models.UnmetRequirement``."""

    requirement: str
    reason: str


class NativeRelease(NamedTuple):
    project: str
    dist: str
    version: str
    wheels: tuple[NativeWheel, ...]
    sdist_only: bool
    uninstallable: tuple[NativeUnmet, ...]


class Facts(NamedTuple):
    """The whole: what :func:`from_json` returns."""

    schema_version: int
    scrape: Scrape
    sglang: tuple[Sglang, ...]
    mooncake: tuple[Mooncake, ...]
    torch: tuple[Torch, ...]
    torch_versions: tuple[str, ...]
    unread: tuple[Unread, ...]
    native: tuple[NativeRelease, ...]


class SglangHead(NamedTuple):
    version: str
    source: str
    module: str | None
    launch_rules: int


class MooncakeHead(NamedTuple):
    dist: str
    version: str
    wheels: int
    builds: int


class NativeHead(NamedTuple):
    """One release of a native extension's distribution (nixl, sglang-kernel, ...),
    counted: what ``kb info`` and ``show`` need to know it is there."""

    project: str
    dist: str
    version: str
    wheels: int
    builds: int
    uninstallable: bool


class Summary(NamedTuple):
    """What a KB holds, counted and named (``kb info``, ``--version``, reading users'
    input): a few kilobytes, read where the whole facts are not needed."""

    schema_version: int
    scrape: Scrape
    sglang: tuple[SglangHead, ...]
    mooncake: tuple[MooncakeHead, ...]
    torch_listed: int
    torch_with_facts: int
    unread: tuple[Unread, ...]
    native: tuple[NativeHead, ...]


def summary_of(facts: Facts) -> Summary:
    return Summary(facts.schema_version, facts.scrape,
                   tuple(SglangHead(s.version, s.source, s.pg.module, s.launch_rules)
                         for s in facts.sglang),
                   tuple(MooncakeHead(m.dist, m.version, len(m.wheels),
                                      sum(len(w.builds) for w in m.wheels))
                         for m in facts.mooncake),
                   len(facts.torch_versions), len(facts.torch), facts.unread,
                   tuple(NativeHead(n.project, n.dist, n.version, len(n.wheels),
                                    sum(len(w.builds) for w in n.wheels),
                                    bool(n.uninstallable))
                         for n in facts.native))


# ----------------------------------------------------------------------- conversion

#: Fields whose value is not read under the field's own name from a ``moonpin.kb.models`` object.
def _specifiers(lines: tuple[str, ...]) -> tuple[str | None, ...]:
    from packaging.requirements import InvalidRequirement, Requirement

    out: list[str | None] = []
    for line in lines:
        try:
            out.append(str(Requirement(line).specifier))
        except InvalidRequirement:
            out.append(None)
    return tuple(out)


_FROM_MODEL: dict[tuple[type, str], Callable[[Any], Any]] = {
    (Sglang, "launch_rules"): lambda m: len(m.launch.rules) if m.launch is not None else 0,
    (Sglang, "torch_specifiers"): lambda m: _specifiers(m.torch_requirements),
}

_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    h = _HINTS.get(cls)
    if h is None:
        h = _HINTS[cls] = get_type_hints(cls, globals())
    return h


def _convert(tp: Any, value: Any, where: str) -> Any:
    """``value``, a ``moonpin.kb.models`` attribute, as type ``tp``; FactsError when it is not."""
    origin = getattr(tp, "__origin__", None)
    args: tuple[Any, ...] = getattr(tp, "__args__", ())
    if origin is None and isinstance(tp, type) and tp in _HINTS_OK:
        return _record(tp, value, where)
    if tp is datetime:
        if isinstance(value, datetime):
            return value
        raise FactsError(f"{where}: not a timestamp")
    if tp in (str, int, float, bool):
        if tp is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if type(value) is not tp:
            raise FactsError(f"{where}: not {tp.__name__}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise FactsError(f"{where}: not a list")
        return tuple(_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise FactsError(f"{where}: not an object")
        return {_convert(args[0], k, where): _convert(args[1], v, f"{where}.{k}")
                for k, v in value.items()}
    if args and type(None) in args:  # X | None
        if value is None:
            return None
        return _convert(next(a for a in args if a is not type(None)), value, where)
    raise FactsError(f"{where}: unsupported type {tp!r}")  # pragma: no cover - a coding error


def _record(cls: type, src: Any, where: str) -> Any:
    values = {}
    for name in cls._fields:  # type: ignore[attr-defined]
        get = _FROM_MODEL.get((cls, name))
        raw = get(src) if get is not None else getattr(src, name)
        values[name] = _convert(_hints(cls)[name], raw, f"{where}.{name}")
    return cls(**values)


_HINTS_OK = frozenset({Artifact, Pg, Sglang, ExtensionPin, BackendImport, ChoiceImport,
                       LaunchBackend,
                       LoaderImport, Loader, Build, Wheel, Mooncake,
                       TorchVariant, Torch, Unread, Scrape, Facts, SglangHead, MooncakeHead,
                       NativeHead,
                       Summary, NativeStep, NativeRule, NativeBuild, NativeWheel, NativeUnmet,
                       NativeRelease})


def from_model(kb: Any) -> Facts:
    """The facts of a validated ``moonpin.kb.models.KnowledgeBase``."""
    out: Facts = _record(Facts, kb, "kb")
    return out


#: What :func:`to_json` writes: ``{"format": FORMAT, "pool": [...], "root": ...}``. A
#: record is a list of its fields' values in field order, a tuple a list; a record or tuple
#: that occurs more than once (the loaders every wheel of a release shares, a build's lists
#: of names) is written once, in ``pool``, and elsewhere as its index there. The shipped
#: facts shrink ~5x, and a query reads each shared value once, as one object.
FORMAT = "pooled-6"  # 2: Sglang.requires_python; 3: Loader.requires; 4: wheel_pythons;
#: 5: Sglang.launch_backends, extension_pins; 6: LaunchBackend.guarded


def from_json(data: Any) -> Facts:
    """The facts :func:`to_json` wrote; :class:`FactsError` naming the first bad value
    (a release version that is not PEP 440 too, as ``moonpin.kb.store`` refuses in a KB)."""
    out: Facts = _from_json(Facts, data)
    _pep440("sglang", (r.version for r in out.sglang))
    _pep440("mooncake", (r.version for r in out.mooncake))
    _pep440("torch", (r.version for r in out.torch))
    _pep440("torch_versions", out.torch_versions)
    return out


def summary_from_json(data: Any) -> Summary:
    """The :class:`Summary` :func:`to_json` wrote; :class:`FactsError` as for the facts."""
    out: Summary = _from_json(Summary, data)
    _pep440("sglang", (r.version for r in out.sglang))
    _pep440("mooncake", (r.version for r in out.mooncake))
    _pep440("native", (r.version for r in out.native))
    return out


#: Versions of the common shapes, which are PEP 440 (and short enough for int()); any other
#: is asked of packaging (imported only then).
_PLAIN_VERSION = None


def _pep440(where: str, versions: Iterable[str]) -> None:
    global _PLAIN_VERSION
    if _PLAIN_VERSION is None:
        import re

        _PLAIN_VERSION = re.compile(r"\d{1,30}(?:\.\d{1,30}){0,10}(?:(?:a|b|rc)\d{1,30})?"
                                    r"(?:\.post\d{1,30})?(?:\.dev\d{1,30})?")
    plain = _PLAIN_VERSION.fullmatch
    for v in versions:
        if plain(v) is None:
            from packaging.version import InvalidVersion, Version

            try:
                Version(v)
            except (InvalidVersion, ValueError):  # ValueError: past int()'s 4,300 digits
                shown = v if len(v) <= 80 else f"{v[:80]}... ({len(v)} characters)"
                raise FactsError(f"facts: {where}: {shown!r} is not a PEP 440 version") from None


def _from_json(tp: type, data: Any) -> Any:
    if (type(data) is not dict or data.keys() != {"format", "pool", "root"}
            or data["format"] != FORMAT or type(data["pool"]) is not list):
        raise FactsError(f"facts: not {FORMAT} facts")
    _POOL.append(_Pool(data["pool"]))
    try:
        return _reader(tp)(data["root"])
    except _Bad as e:
        raise FactsError(f"facts{''.join(reversed(e.path))}: {e.what}") from None
    finally:
        _POOL.pop()


class _Bad(Exception):
    """A value of the wrong type; ``path`` is filled in (innermost first) as it unwinds."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.path: list[str] = []


class _Pool:
    """The shared values of one :func:`from_json` call, each read once, as one type."""

    __slots__ = ("below", "done", "raw")

    def __init__(self, raw: list[Any]) -> None:
        self.raw = raw
        self.done: dict[int, tuple[Any, Any]] = {}
        #: an entry refers only to entries before it: no cycle, each read at most once
        self.below = len(raw)

    def get(self, i: int, tp: Any, read: Callable[[Any], Any]) -> Any:
        hit = self.done.get(i)
        if hit is not None:
            if hit[0] is not tp:
                raise _Bad(f"shared value {i} read as two types")
            return hit[1]
        if not 0 <= i < self.below:
            raise _Bad(f"no shared value {i} here")
        raw = self.raw[i]
        if type(raw) is int:
            raise _Bad(f"shared value {i} is a reference")
        saved, self.below = self.below, i
        try:
            value = read(raw)
        except _Bad as e:
            e.path.append(f"<shared {i}>")
            raise
        finally:
            self.below = saved
        self.done[i] = (tp, value)
        return value


#: The pool of the :func:`from_json` call in progress (a stack: a reader never nests one,
#: but a failed call must not leave its pool for the next).
_POOL: list[_Pool] = []

_READERS: dict[Any, Callable[[Any], Any]] = {}
_STR = {str}


def _reader(tp: Any) -> Callable[[Any], Any]:
    """A function reading JSON as type ``tp``, made once per type (the per-value work is
    the type checks alone: reading the shipped facts takes a few milliseconds)."""
    fn = _READERS.get(tp)
    if fn is None:
        fn = _READERS[tp] = _make_reader(tp)
    return fn


def _scalar(tp: type) -> Callable[[Any], Any]:
    def read(v: Any) -> Any:
        if type(v) is tp:
            return v
        if tp is float and type(v) is int:
            return float(v)
        raise _Bad(f"not {tp.__name__}")
    return read


def _read_datetime(v: Any) -> datetime:
    if isinstance(v, str):
        try:
            t = datetime.fromisoformat(v)
        except ValueError:
            pass
        else:  # without a zone, UTC (as moonpin.kb.models reads the KB)
            return t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)
    raise _Bad("not a timestamp")


def _shared(tp: Any, read: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``read``, taking also an index into the pool where a list is expected."""
    def read_or_shared(v: Any) -> Any:
        if type(v) is int:
            return _POOL[-1].get(v, tp, read)
        return read(v)
    return read_or_shared


def _make_reader(tp: Any) -> Callable[[Any], Any]:
    origin = getattr(tp, "__origin__", None)
    args: tuple[Any, ...] = getattr(tp, "__args__", ())
    if tp in _HINTS_OK:
        return _shared(tp, _record_reader(tp))
    if tp is datetime:
        return _read_datetime
    if tp in (str, int, float, bool):
        return _scalar(tp)
    if origin is tuple and args[0] is str:
        def read_strs(v: Any) -> tuple[str, ...]:
            if type(v) is list and (not v or set(map(type, v)) == _STR):
                return tuple(v)
            raise _Bad("not a list of strings")
        return _shared(tp, read_strs)
    if origin is tuple:
        item = _reader(args[0])

        def read_tuple(v: Any) -> tuple[Any, ...]:
            if type(v) is not list:
                raise _Bad("not a list")
            out = []
            for i, x in enumerate(v):
                try:
                    out.append(item(x))
                except _Bad as e:
                    e.path.append(f"[{i}]")
                    raise
            return tuple(out)
        return _shared(tp, read_tuple)
    if origin is dict:
        key, val = _reader(args[0]), _reader(args[1])

        def read_dict(v: Any) -> dict[Any, Any]:
            if type(v) is not dict:
                raise _Bad("not an object")
            out = {}
            for k, x in v.items():
                try:
                    out[key(k)] = val(x)
                except _Bad as e:
                    e.path.append(f".{k}")
                    raise
            return out
        return read_dict
    if args and type(None) in args:  # X | None
        inner = _reader(next(a for a in args if a is not type(None)))

        def read_optional(v: Any) -> Any:
            return None if v is None else inner(v)
        return read_optional
    raise TypeError(f"no reader for {tp!r}")  # a coding error, never input


def _scalar_types(tp: Any) -> frozenset[type] | None:
    """The exact types a scalar field (``str``, ``int | None``, ...) may hold; None for
    another kind of field (read by its reader)."""
    args = getattr(tp, "__args__", None)
    kinds = set(args) if args is not None and getattr(tp, "__origin__", None) is None else {tp}
    if kinds <= {str, int, bool, type(None)}:
        return frozenset(kinds)
    return None


def _record_reader(cls: type) -> Callable[[Any], Any]:
    names: tuple[str, ...] = cls._fields  # type: ignore[attr-defined]
    size = len(names)
    hints = _hints(cls)
    # scalar fields are checked here, in line (a call per value is most of the time)
    plan = tuple((n, _scalar_types(hints[n]), _reader(hints[n])) for n in names)

    def read(v: Any) -> Any:
        if type(v) is not list or len(v) != size:
            raise _Bad(f"not a list of {size} fields ({', '.join(names)})")
        out = []
        for (n, kinds, r), x in zip(plan, v, strict=True):
            if kinds is None:
                try:
                    x = r(x)
                except _Bad as e:
                    e.path.append(f".{n}")
                    raise
            elif type(x) not in kinds:
                bad = _Bad(f"not {' or '.join(sorted(k.__name__ for k in kinds))}")
                bad.path.append(f".{n}")
                raise bad
            out.append(x)
        return cls(*out)
    return read


def to_json(facts: Facts | Summary) -> dict[str, Any]:
    """``facts`` (or a summary) as JSON values (what :func:`from_json` and
    :func:`summary_from_json` read back)."""
    seen: dict[tuple[type, str], int] = {}
    _count(facts, seen)
    pool: list[Any] = []
    where: dict[tuple[type, str], int] = {}
    root = _encode(facts, seen, pool, where)
    return {"format": FORMAT, "pool": pool, "root": root}


def _key(value: Any) -> tuple[type, str]:
    # repr tells True from 1 and a record from a tuple of the same values
    return (type(value), repr(value))


def _count(value: Any, seen: dict[tuple[type, str], int]) -> None:
    if isinstance(value, tuple):  # a record is a named tuple
        if value:
            k = _key(value)
            seen[k] = seen.get(k, 0) + 1
            if seen[k] > 1:
                return  # its parts were counted the first time
        for v in value:
            _count(v, seen)
    elif isinstance(value, dict):
        for v in value.values():
            _count(v, seen)


def _encode(value: Any, seen: dict[tuple[type, str], int], pool: list[Any],
            where: dict[tuple[type, str], int]) -> Any:
    if isinstance(value, tuple):
        k = _key(value) if value else None
        if k is not None and k in where:
            return where[k]
        out = [_encode(v, seen, pool, where) for v in value]
        if k is not None and seen[k] > 1:
            where[k] = len(pool)
            pool.append(out)
            return where[k]
        return out
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _encode(v, seen, pool, where) for k, v in value.items()}
    return value
