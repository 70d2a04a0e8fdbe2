"""SGLang releases: which mooncake module, names and backends each one needs.

Reads every ``.py`` member of one wheel per release with ``ast`` (never
imports it). A member already analysed in another release (same path, same
CRC-32 and size in the zip central directory) is not fetched again: that is
what keeps a cold scrape of ~100 releases to a fraction of their bytes. Those
per-file facts are kept between scrapes (:meth:`AnalysisCache.save`), so a new
release costs its central directory and the members no earlier release had.
"""

from __future__ import annotations

import ast
import threading
import warnings
from collections.abc import Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from pydantic import ValidationError

from moonpin.kb.errors import ArchiveError
from moonpin.kb.models import (
    Artifact,
    BackendImport,
    BackendUse,
    CallArity,
    ChoiceImport,
    DistPin,
    LaunchBackend,
    LaunchRules,
    MooncakeImport,
    MooncakePin,
    ParseFailure,
    PGRequirement,
    SglangRelease,
)
from moonpin.readers.pyast import usage as pyast
from moonpin.scrapers.fetch import Fetcher
from moonpin.scrapers.pypi import IndexFile, Metadata, metadata_member, parse_metadata
from moonpin.scrapers.remote_zip import HttpSource, RemoteZip

__all__ = [
    "PG_MODULES",
    "AnalysisCache",
    "ReleaseFacts",
    "analyze_member",
    "choose_wheel",
    "derive_pg",
    "extension_pins",
    "extension_pins_of",
    "facts_from_files",
    "failed",
    "guarded_readings",
    "launch_backends",
    "scrape_wheel",
    "torch_requirements",
]

PG_MODULES = pyast.PG_MODULES


@dataclass
class AnalysisCache:
    """Source members already analysed, keyed by content (CRC-32 and size from the zip
    central directory), thread-safe; in memory, and saved/loaded between scrapes.

    A member that never mentions mooncake analyses the same wherever it sits, so its
    result is shared across paths (files move between releases). A member that does
    mention it keeps its bytes, since the feature classification depends on the path:
    it is re-analysed, without a fetch, when it appears under another path.
    """

    _clean: dict[tuple[int, int], pyast.FileAnalysis] = field(default_factory=dict)
    _mentions: dict[tuple[int, int], bytes] = field(default_factory=dict)
    _analysed: dict[tuple[str, int, int], pyast.FileAnalysis] = field(default_factory=dict)
    _launch: dict[tuple[object, ...], tuple[object]] = field(default_factory=dict)
    #: (crc, size) of a backend's module -> its imports (readers.launch.server_args.backend_imports)
    _backend: dict[tuple[int, int], tuple[BackendImport, ...]] = field(default_factory=dict)
    #: (crc, size) of any source -> its readings (readers.launch.guarded.read_file) for each
    #: backend option's attribute it names, path-free
    _guarded: dict[tuple[int, int], tuple[tuple[str, Any], ...]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    hits: int = 0

    def get(self, path: str, crc: int, size: int) -> pyast.FileAnalysis | None:
        with self._lock:
            got = self._analysed.get((path, crc, size)) or self._clean.get((crc, size))
            data = self._mentions.get((crc, size)) if got is None else None
        if got is None and data is not None:
            got = analyze_member(path, data)
            self.put(path, crc, size, data, got)
        if got is not None:
            with self._lock:
                self.hits += 1
        return got

    def launch_get(self, key: tuple[object, ...]) -> tuple[object] | None:
        """The launch-rules record (wrapped, since None is a valid record) for these
        launch members (``(name, crc, size)`` of each member
        :func:`moonpin.readers.launch.server_args.launch_members` names), if already extracted."""
        with self._lock:
            return self._launch.get(key)

    def launch_put(self, key: tuple[object, ...], value: tuple[object]) -> None:
        with self._lock:
            self._launch[key] = value

    def backend_get(self, crc: int, size: int) -> tuple[BackendImport, ...] | None:
        """The imports of a backend's module with this content, if already read."""
        with self._lock:
            return self._backend.get((crc, size))

    def backend_put(self, crc: int, size: int, value: tuple[BackendImport, ...]) -> None:
        with self._lock:
            self._backend[(crc, size)] = value

    def guarded_get(self, crc: int, size: int) -> tuple[tuple[str, Any], ...] | None:
        """The guarded-import readings of a source with this content, if already read."""
        with self._lock:
            return self._guarded.get((crc, size))

    def guarded_put(self, crc: int, size: int, value: tuple[tuple[str, Any], ...]) -> None:
        with self._lock:
            self._guarded[(crc, size)] = value

    def put(self, path: str, crc: int, size: int, data: bytes, value: pyast.FileAnalysis) -> None:
        with self._lock:
            self._analysed[(path, crc, size)] = value
            if pyast.mentions_mooncake(data):
                self._mentions[(crc, size)] = data
            else:
                self._clean[(crc, size)] = value

    # -- kept between scrapes: a new release then costs only its new content ----------

    def save(self, path: str) -> str | None:
        """Write the per-file facts to ``path`` (a :mod:`moonpin.kb.cache` file); why not, or None.

        Kept: the analysis of every file that never mentions mooncake (by CRC-32 and size),
        and of those that do by path, CRC-32 and size, and the imports of the backends'
        modules (:data:`moonpin.readers.launch.server_args.DISPATCHERS`). Their bytes are not
        kept (62 MB over 101 releases, mostly server_args.py): one that moves is fetched again. The
        launch records are not kept either: their members change every release."""
        from moonpin.kb import cache

        with self._lock:
            doc = {
                "format": _FILES_FORMAT,
                "clean": {k: _fa_out(v) for k, v in self._clean.items()},
                "analysed": {k: _fa_out(v) for k, v in self._analysed.items()
                             if k[1:] not in self._clean},
                "backend": {k: tuple((i.module, i.names, i.line) for i in v)
                            for k, v in self._backend.items()},
                "guarded": {k: tuple((d, _plain(r)) for d, r in v)
                            for k, v in self._guarded.items()},
            }
        return cache.store(path, doc)

    @classmethod
    def load(cls, path: str) -> AnalysisCache:
        """The facts :meth:`save` wrote at ``path``; empty when missing or unusable."""
        from moonpin.kb import cache

        out = cls()
        doc = cache.load(path)
        if not isinstance(doc, dict) or doc.get("format") != _FILES_FORMAT:
            return out
        try:
            clean = {(int(c), int(n)): _fa_in(v) for (c, n), v in doc["clean"].items()}
            analysed = {(str(p), int(c), int(n)): _fa_in(v)
                        for (p, c, n), v in doc["analysed"].items()}
            backend = {(int(c), int(n)): tuple(
                BackendImport(module=str(m), names=tuple(str(x) for x in names), line=int(li))
                for m, names, li in v) for (c, n), v in doc["backend"].items()}
            guarded = {(int(c), int(n)): tuple((str(d), _reading_in(r)) for d, r in v)
                       for (c, n), v in doc["guarded"].items()}
        except (KeyError, TypeError, ValueError, AttributeError):
            return out  # written by other code, or damaged: start empty, never wrong
        except ValidationError:
            return out
        out._clean, out._analysed, out._backend = clean, analysed, backend
        out._guarded = guarded
        return out


#: Bumped when the saved shape changes (the file name also carries the extractor
#: fingerprint, so facts read by other extractor code are never reused).
_FILES_FORMAT = 4


def _plain(value: Any) -> Any:
    """A reading as plain tuples (marshal writes no named tuples)."""
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value


def _reading_in(t: Any) -> Any:
    """A :class:`moonpin.readers.launch.guarded.Reading` back from :func:`_plain`'s shape."""
    from moonpin.readers.launch import guarded as gd

    imports, unread, defaults, error = t
    return gd.Reading(
        tuple(gd.GuardedImport(str(m), str(mod), tuple(str(x) for x in names), int(li),
                               int(test), tuple((str(k), int(v)) for k, v in truth))
              for m, mod, names, li, test, truth in imports),
        tuple(gd.Unread(str(m), int(li), str(text), str(mod)) for m, li, text, mod in unread),
        tuple(None if d is None else str(d) for d in defaults),
        None if error is None else str(error))


def _read_guarded(data: bytes) -> tuple[tuple[str, Any], ...]:
    """The readings of one source for each backend option's attribute it names (path-free:
    the member is filled in when a release's readings are put together)."""
    from moonpin.readers.launch import guarded as gd
    from moonpin.readers.launch import server_args as sa

    out = []
    for flag in sa.BACKEND_FLAGS:
        dest = sa.backend_dest(flag)
        if gd.mentions(data, dest):
            out.append((dest, gd.read_file(data, "", dest)))
    return tuple(out)


def _placed(reading: Any, member: str) -> Any:
    """A path-free reading as read in ``member``."""
    return reading._replace(
        imports=tuple(i._replace(member=member) for i in reading.imports),
        unread=tuple(u._replace(member=member) for u in reading.unread),
        error=None if reading.error is None else f"{member}{reading.error}")


def guarded_readings(members: Iterable[tuple[str, bytes | None]]) -> dict[str, list[Any]]:
    """attribute -> the readings (:func:`moonpin.readers.launch.guarded.read_file`) of the
    SGLang sources ``members`` (path, bytes; None: unreadable) that name it, by path."""
    return _release_readings({name: None if data is None else _read_guarded(data)
                              for name, data in members})


def _flags() -> list[str]:
    from moonpin.readers.launch import server_args as sa

    return [sa.backend_dest(f) for f in sa.BACKEND_FLAGS]


def _fa_out(fa: pyast.FileAnalysis) -> tuple[object, ...]:
    from dataclasses import astuple

    return (fa.path, tuple(astuple(i) for i in fa.imports),
            tuple(astuple(c) for c in fa.calls), tuple(astuple(b) for b in fa.backends),
            fa.error)


def _fa_in(t: Any) -> pyast.FileAnalysis:
    path, imports, calls, backends, error = t
    return pyast.FileAnalysis(
        path=str(path),
        imports=tuple(pyast.ImportFact(*i) for i in imports),
        calls=tuple(pyast.CallFact(*c) for c in calls),
        backends=tuple(pyast.BackendLiteral(*b) for b in backends),
        error=None if error is None else str(error))


@dataclass(frozen=True)
class ReleaseFacts:
    files_analyzed: int
    imports: tuple[MooncakeImport, ...]
    calls: tuple[CallArity, ...]
    backends: tuple[BackendUse, ...]
    parse_failures: tuple[ParseFailure, ...]
    pg: PGRequirement

    def release(self, version: str, source: str, artifact: Artifact, *,
                requires_python: str | None, torch_requirements: tuple[str, ...],
                mooncake_pins: tuple[MooncakePin, ...] = ()) -> SglangRelease:
        """The KB record of a release with these facts."""
        return SglangRelease(
            version=version, source=source, artifact=artifact,  # type: ignore[arg-type]
            requires_python=requires_python, torch_requirements=torch_requirements,
            files_analyzed=self.files_analyzed, imports=self.imports, calls=self.calls,
            backends=self.backends, parse_failures=self.parse_failures, pg=self.pg,
            mooncake_pins=mooncake_pins)


def choose_wheel(files: Iterable[IndexFile]) -> IndexFile | None:
    """One wheel per release is enough: the .py sources are the same in each.

    Prefer a pure wheel, then CPython 3.12 on x86_64, then the smallest.
    """
    wheels = [f for f in files if f.is_wheel]
    if not wheels:
        return None

    def rank(f: IndexFile) -> tuple[int, int, int, int]:
        n = f.filename
        return (
            0 if n.endswith("-none-any.whl") else 1,
            0 if "-cp312-" in n else 1,
            0 if n.endswith("x86_64.whl") else 1,
            f.size,
        )

    return min(wheels, key=rank)


def torch_requirements(meta: Metadata) -> tuple[str, ...]:
    """The Requires-Dist lines that name torch, exactly as declared."""
    out = []
    for line in meta.requires_dist:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            if line.strip().lower().startswith("torch"):
                out.append(line)
            continue
        if canonicalize_name(req.name) == "torch":
            out.append(line)
    return tuple(out)


def _to_models(fa: pyast.FileAnalysis, member: str) -> tuple[
        list[MooncakeImport], list[CallArity], list[BackendUse], list[ParseFailure]]:
    imports = [
        MooncakeImport(
            module=i.module, names=tuple(i.names), alias=i.alias, member=member, line=i.line,
            function=i.function, optional=i.optional, alternatives=tuple(i.alternatives),
            feature=i.feature, dynamic=i.dynamic,  # type: ignore[arg-type]
        )
        for i in fa.imports
    ]
    calls = [
        CallArity(module=c.module, name=c.name, member=member, line=c.line, function=c.function,
                  positional=c.positional, keywords=tuple(c.keywords), starred=c.starred)
        for c in fa.calls
    ]
    backends = [
        BackendUse(value=b.value, member=member, line=b.line, function=b.function,
                   context=b.context)
        for b in fa.backends
    ]
    failures = [ParseFailure(member=member, error=fa.error)] if fa.error else []
    return imports, calls, backends, failures


def derive_pg(imports: Iterable[MooncakeImport], backends: Iterable[BackendUse],
              calls: Iterable[CallArity] = ()) -> PGRequirement:
    """The process-group requirement of a release (:func:`moonpin.readers.pyast.usage.pg_needs`)."""
    n = pyast.pg_needs(imports, calls, backends)
    return PGRequirement(module=n.module, alternatives=n.alternatives, names=n.names,
                         optional_names=n.optional_names, backends=n.backends,
                         optional=n.optional, evidence=n.evidence)


def facts_from_files(files: Iterable[tuple[str, pyast.FileAnalysis]]) -> ReleaseFacts:
    """Aggregate per-file analyses (from a wheel, a source tree or an archive)."""
    imports: list[MooncakeImport] = []
    calls: list[CallArity] = []
    backends: list[BackendUse] = []
    failures: list[ParseFailure] = []
    n = 0
    for member, fa in sorted(files, key=lambda t: t[0]):
        n += 1
        i, c, b, f = _to_models(fa, member)
        imports += i
        calls += c
        backends += b
        failures += f
    return ReleaseFacts(n, tuple(imports), tuple(calls), tuple(backends), tuple(failures),
                        derive_pg(imports, backends, calls))


_CLEAN = pyast.FileAnalysis(path="", imports=(), calls=(), backends=(), error=None)


def analyze_member(path: str, data: bytes) -> pyast.FileAnalysis:
    """Analyse one source member. One that never mentions mooncake is only parsed
    (a file that does not parse is recorded, never skipped), not walked."""
    # Scraped sources are full of invalid escape sequences and the like: their
    # SyntaxWarnings are the upstream's business, not lines on our stderr.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _analyze_member(path, data)


def _analyze_member(path: str, data: bytes) -> pyast.FileAnalysis:
    if pyast.mentions_mooncake(data):
        return pyast.analyze_source(data, path)
    try:
        ast.parse(data, filename=path)
    except SyntaxError as e:
        return failed(path, f"SyntaxError: {e.msg} (line {e.lineno})")
    except (ValueError, UnicodeDecodeError, RecursionError, MemoryError) as e:
        # null bytes, an undecodable encoding, nesting too deep: all "does not parse"
        return failed(path, f"{type(e).__name__}: {e}")
    return _CLEAN


def _launch_record_wrapped(members: dict[str, bytes]) -> tuple[object]:
    from moonpin.readers.launch import server_args as sa

    return (sa.launch_record_from(members),)


def _analyze_pair(item: tuple[str, bytes]) -> pyast.FileAnalysis:
    return analyze_member(*item)


def failed(path: str, error: str) -> pyast.FileAnalysis:
    return pyast.FileAnalysis(path=path, imports=(), calls=(), backends=(), error=error)


def scrape_wheel(
    fetcher: Fetcher,
    wheel: IndexFile,
    version: str,
    cache: AnalysisCache,
    *,
    workers: int = 8,
    max_gap: int = 4096,
    executor: Executor | None = None,
) -> tuple[SglangRelease, int, int]:
    """Read one SGLang wheel; returns the release, the bytes fetched for it, and the
    lower bound a perfect reader would have needed (directory + members consumed)."""
    src = HttpSource(fetcher, wheel.url, wheel.size, label=wheel.filename)
    z = RemoteZip(src)
    meta_names = [metadata_member(z.names(), wheel.filename)]
    todo = []
    analyses: list[tuple[str, pyast.FileAnalysis]] = []
    for e in z.entries:
        if not e.name.endswith(".py"):
            continue
        hit = cache.get(e.name, e.crc, e.file_size)
        if hit is not None:
            analyses.append((e.name, hit))
        else:
            todo.append(e)
    # The launch rules come from a few members (server_args.py and cuda_graph_config.py; from
    # 0.5.19 also the arg_groups hooks and field declarations), read with the sources when
    # not known already.
    from moonpin.readers.launch import server_args as sa

    arg_members = [z.by_name[n] for n in sa.launch_members(z.names())]
    launch_key = tuple((e.name, e.crc, e.file_size) for e in arg_members)
    launch_known = cache.launch_get(launch_key)
    extra = [] if launch_known is not None else [e.name for e in arg_members]
    # the backends' modules (what each choice of a backend option imports), by content
    backend_known = {n: cache.backend_get(z.by_name[n].crc, z.by_name[n].file_size)
                     for n in sa.backend_modules(z.names())}
    extra += [n for n, got in backend_known.items() if got is None and n not in extra]
    # every source's reading of the tests on the backend options' values, by content
    guarded_known = {e.name: cache.guarded_get(e.crc, e.file_size)
                     for e in z.entries if e.name.endswith(".py")}
    queued = set(extra) | {e.name for e in todo}
    extra += [n for n, got in guarded_known.items() if got is None and n not in queued]
    z.prefetch([meta_names[0], *(e.name for e in todo), *extra], workers=workers,
               max_gap=max_gap)
    meta_text = z.read(meta_names[0]).decode("utf-8", "replace")
    meta = parse_metadata(meta_text)
    datas: list[tuple[str, bytes]] = []
    for e in todo:
        try:
            datas.append((e.name, z.read(e.name, cap=16 * 1024 * 1024)))
        except ArchiveError as ex:
            analyses.append((e.name, failed(e.name, f"unreadable member: {ex}")))
    backend_errors: dict[str, str] = {}
    read_now = dict(datas)
    for n, got in backend_known.items():
        if got is not None:
            continue
        try:
            data = read_now[n] if n in read_now else z.read(n, cap=16 * 1024 * 1024)
        except ArchiveError as ex:
            backend_errors[n] = f"unreadable member: {ex}"
            continue
        read = tuple(BackendImport(module=m, names=names, line=line)
                     for m, names, line in sa.backend_imports(data, n))
        backend_known[n] = read
        cache.backend_put(z.by_name[n].crc, z.by_name[n].file_size, read)
    for n in [n for n, known in guarded_known.items() if known is None]:
        try:
            data = read_now[n] if n in read_now else z.read(n, cap=16 * 1024 * 1024)
        except ArchiveError:
            continue  # stays None: unreadable
        reading = _read_guarded(data)
        guarded_known[n] = reading
        cache.guarded_put(z.by_name[n].crc, z.by_name[n].file_size, reading)
    readings = _release_readings(guarded_known)
    # The launch rules (a 9,000-line file up to 0.5.18) are read in the pool while the
    # sources parse.
    launch_pending = None
    if launch_known is None:
        texts: dict[str, bytes] = {}
        try:
            for e in arg_members:
                texts[e.name] = z.read(e.name, cap=16 * 1024 * 1024)
        except ArchiveError as ex:
            launch_known = (LaunchRules(member=e.name, error=f"unreadable: {ex}"),)
        else:
            if executor is not None:
                launch_pending = executor.submit(_launch_record_wrapped, texts)
            else:
                launch_known = _launch_record_wrapped(texts)
    # Parsing is the CPU cost of a scrape; a process pool spreads it over the cores.
    results = (executor.map(_analyze_pair, datas, chunksize=32) if executor is not None
               else map(_analyze_pair, datas))
    for (name, data), fa in zip(datas, results, strict=True):
        e = z.by_name[name]
        cache.put(name, e.crc, e.file_size, data, fa)
        analyses.append((name, fa))
    launch_known = launch_pending.result() if launch_pending is not None else launch_known
    if launch_known is None:
        launch_known = (None,)
    cache.launch_put(launch_key, launch_known)
    release = facts_from_files(analyses).release(
        version, "index",
        wheel.artifact(),
        requires_python=meta.requires_python or wheel.requires_python,
        torch_requirements=torch_requirements(meta))
    for name, fa in analyses:
        if name in backend_known and fa.error:
            backend_errors.setdefault(name, fa.error)
    update: dict[str, Any] = {
        "launch_backends": launch_backends(
            launch_known[0] if isinstance(launch_known[0], LaunchRules) else None,
            z.names(), backend_known, backend_errors, readings),
        "extension_pins": extension_pins(meta, meta_text, meta_names[0])}
    if launch_known[0] is not None:
        update["launch"] = launch_known[0]
    return release.model_copy(update=update), src.fetched, z.needed_bytes


def _release_readings(known: dict[str, tuple[tuple[str, Any], ...] | None]
                      ) -> dict[str, list[Any]]:
    """attribute -> the readings of one release's sources, by path (``known``: each
    source's path-free readings; None: it could not be read, which every attribute hears)."""
    from moonpin.readers.launch import guarded as gd

    out: dict[str, list[Any]] = {}
    for name in sorted(known):
        got = known[name]
        if got is None:
            for dest in _flags():
                out.setdefault(dest, []).append(gd.Reading(error=f"{name}: unreadable"))
            continue
        for dest, r in got:
            out.setdefault(dest, []).append(_placed(r, name))
    return out


def launch_backends(launch: LaunchRules | None, names: Iterable[str],
                    imports: dict[str, tuple[BackendImport, ...] | None],
                    errors: dict[str, str],
                    readings: dict[str, list[Any]] | None = None) -> tuple[LaunchBackend, ...]:
    """What each choice of the backend options (:data:`moonpin.readers.launch.server_args.
    BACKEND_FLAGS`, their choices as the release's launch record declares them) imports:
    where the option keeps a module per choice, the module
    :func:`moonpin.readers.launch.server_args.backend_member` names in ``names``, with
    ``imports`` of each such module (None: not read; ``errors``: why); and for every option
    the imports under a test on its value the choice passes, from ``readings`` (attribute
    -> :func:`guarded_readings`; the option's default is the one the sources declare)."""
    from moonpin.readers.launch import guarded as gd
    from moonpin.readers.launch import server_args as sa

    listing = list(names)
    out = []
    for flag in launch.flags if launch is not None else ():
        if flag.name not in sa.BACKEND_FLAGS:
            continue
        folder = sa.BACKEND_FLAGS[flag.name]
        rs = (readings or {}).get(flag.dest, [])
        default = gd.default_of(rs)
        broken = tuple(r.error for r in rs if r.error is not None)
        for choice in flag.choices or ():
            if choice in sa.NO_BACKEND:
                continue
            member = sa.backend_member(listing, choice, folder) if folder else None
            got = imports.get(member) if member is not None else ()
            error = errors.get(member) if member is not None else None
            under, unread = gd.for_choice(rs, choice, default)
            out.append(LaunchBackend(
                flag=flag.name, choice=choice, member=member, imports=got or (), error=error,
                guarded=tuple(ChoiceImport(member=i.member, module=i.module, names=i.names,
                                           line=i.line, test=i.test) for i in under),
                unread=(*broken, *(f"{u.member}:{u.line}: {u.text}" for u in unread))))
    return tuple(out)


def extension_pins(meta: Metadata, text: str, member: str) -> tuple[DistPin, ...]:
    """The Requires-Dist lines of ``meta`` naming a distribution of a native-extension recipe
    (:func:`moonpin.scrapers.projects.recipes`), verbatim, with their line in ``text`` (the
    METADATA ``member``)."""
    return extension_pins_of(meta.requires_dist, text, member)


def extension_pins_of(requirements: Iterable[str], text: str, member: str,
                      ) -> tuple[DistPin, ...]:
    """:func:`extension_pins` of requirement strings read from ``member`` (a METADATA, or a
    source tree's ``pyproject.toml``), each with the first line of ``text`` holding it."""
    from moonpin.scrapers.projects import recipes

    dists = {str(canonicalize_name(d)) for r in recipes() for d in r.dists}
    lines = text.splitlines()
    out = []
    for value in requirements:
        try:
            name = str(canonicalize_name(Requirement(value).name))
        except InvalidRequirement:
            continue
        if name not in dists:
            continue
        line = next((i for i, t in enumerate(lines, 1) if value.strip() in t), 0)
        out.append(DistPin(dist=name, requirement=value, member=member, line=line))
    return tuple(out)
