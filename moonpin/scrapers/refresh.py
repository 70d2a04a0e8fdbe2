"""A whole scrape: list releases, read what is new, assemble the next KB.

Incremental by default: a release whose artifact sha256 is unchanged (and, for
mooncake, whose builds were already checked for every name now wanted) is kept
as it is, costing only the index JSON. A release that cannot be read (any of its
artifacts: a 503, a damaged zip) keeps the facts the KB had for it, on every refresh,
``--full`` included, and the report says so; one the KB never had is left out and listed
in ``unread``; it never becomes a verdict.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TypeVar

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from moonpin.kb.distributions import DISTRIBUTIONS
from moonpin.kb.errors import MoonpinError
from moonpin.kb.models import (
    KnowledgeBase,
    MooncakeRelease,
    NativeRelease,
    ScrapeInfo,
    SglangRelease,
    TorchRelease,
    TorchVariant,
    Unread,
)
from moonpin.scrapers import mooncake as mc
from moonpin.scrapers import native as nt
from moonpin.scrapers import sglang as sg
from moonpin.scrapers import torch_index as ti
from moonpin.scrapers.fetch import Fetcher
from moonpin.scrapers.projects import MODULES as PROJECT_MODULES
from moonpin.scrapers.projects import Recipe, recipes
from moonpin.scrapers.pypi import (
    IndexFile,
    ProjectReleases,
    fetch_project,
    public_url,
    wheel_pythons,
)
from moonpin.scrapers.report import Reporter

__all__ = ["EXTRACTORS", "SGLANG_MIN", "Summary", "changes",
           "extractor_fingerprints", "scrape"]

SGLANG_MIN = Version("0.4.0")
KINDS = ("sglang", "mooncake", "torch", "native")
T = TypeVar("T")
R = TypeVar("R")


@dataclass
class Summary:
    read: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    kept: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    unread: list[Unread] = field(default_factory=list)
    bytes_fetched: int = 0
    artifact_bytes: int = 0  # whole size of the artifacts actually read
    lower_bound: int = 0
    seconds: float = 0.0
    cache_hits: int = 0
    #: kind -> the versions read from their artifacts (mooncake: ``dist==version``)
    read_versions: dict[str, list[str]] = field(
        default_factory=lambda: {k: [] for k in KINDS})


def _pool(fn: Callable[[T], R], items: Iterable[T], workers: int) -> list[R]:
    with ThreadPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(fn, items))


def _process_pool() -> ProcessPoolExecutor | None:
    """A pool for parsing; None where processes cannot be started (then parse inline)."""
    try:
        ctx = multiprocessing.get_context("forkserver")  # no fork of a threaded process
        return ProcessPoolExecutor(max_workers=max(1, os.cpu_count() or 1), mp_context=ctx)
    except (OSError, NotImplementedError, ImportError):
        return None


def _skipped(kind: str, project: ProjectReleases, name: str | None = None) -> list[Unread]:
    """Index entries that could not be used (a non-PEP 440 version, a release whose
    listing is not what the JSON API describes)."""
    return [Unread(kind=kind, name=name or kind, version=what, reason=why)  # type: ignore[arg-type]
            for what, why in project.skipped]


def _versions(project: ProjectReleases, minimum: Version | None = None) -> list[str]:
    out = [v for v in project.versions() if minimum is None or Version(v) >= minimum]
    return out


#: The modules whose code decides the facts recorded for each kind of release.
#: Paths are relative to the folder that holds the ``kb``, ``readers`` and ``scrapers``
#: packages (the repository, or site-packages once installed).
EXTRACTORS: dict[str, tuple[str, ...]] = {
    "sglang": ("readers/pyast/usage.py", "readers/pyast/facts.py", "readers/pyast/walk.py",
               "readers/launch/server_args.py", "readers/launch/flags.py",
               "readers/launch/rules.py", "readers/launch/values.py", "kb/launch.py",
               "readers/launch/guarded.py", "readers/launch/backends.py",
               "readers/pyast/imports.py", "readers/pyast/astname.py", "scrapers/sglang.py",
               "scrapers/projects/__init__.py",
               *(f"scrapers/projects/{m}.py" for m in PROJECT_MODULES)),
    "mooncake": ("scrapers/mooncake.py", "kb/distributions.py", "readers/elf/analysis.py",
                 "readers/elf/layout.py", "readers/elf/dynamic.py", "readers/elf/symbols.py",
                 "readers/pyast/loader.py", "readers/cuda.py"),
    "torch": ("scrapers/torch_index.py", "readers/cuda.py"),
    "native": ("scrapers/native.py", "scrapers/projects/__init__.py",
               *(f"scrapers/projects/{m}.py" for m in PROJECT_MODULES),
               "readers/native/rules.py", "readers/native/builds.py",
               "readers/native/keyeval.py", "readers/elf/analysis.py", "readers/elf/layout.py",
               "readers/elf/dynamic.py", "readers/elf/symbols.py"),
}


def extractor_fingerprints() -> dict[str, str]:
    """kind -> sha256 (16 hex) of its extractor modules' source: a KB written by other
    extractor code holds facts this code would record differently."""
    import hashlib

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = {}
    for kind, files in EXTRACTORS.items():
        h = hashlib.sha256()
        for f in files:
            with open(os.path.join(root, *f.split("/")), "rb") as fh:
                h.update(f.encode() + b"\0" + fh.read())
        out[kind] = h.hexdigest()[:16]
    return out


@dataclass
class _Facts:
    """What the next KB holds so far; each source reads the facts the ones before it
    left (mooncake names what SGLang imports, torch what both need)."""

    sglang: dict[str, SglangRelease] = field(default_factory=dict)
    #: Releases recorded from a source tree or archive are the user's; a scrape keeps them.
    local: tuple[SglangRelease, ...] = ()
    moon: dict[tuple[str, str], MooncakeRelease] = field(default_factory=dict)
    torch: dict[str, TorchRelease] = field(default_factory=dict)
    torch_versions: tuple[str, ...] = ()
    native: dict[tuple[str, str], NativeRelease] = field(default_factory=dict)


class _Run:
    """What one scrape's sources share: where and how to read, and what it cost."""

    def __init__(self, fetcher: Fetcher, index_url: str, reporter: Reporter, workers: int,
                 summary: Summary) -> None:
        self.fetcher = fetcher
        self.index_url = index_url
        self.reporter = reporter
        self.workers = workers
        self.summary = summary
        self.unread: list[Unread] = []
        #: what could not be read where the KB keeps the facts it had (the report names
        #: them; the KB does not call them unknown)
        self.stale: list[Unread] = []
        self.lower = 0  # the lower bound of bytes, summed by the workers under _lock
        self._lock = threading.Lock()

    def not_read(self, unread: Unread, had: bool) -> None:
        """Record ``unread``; ``had``: the KB holds facts for that release, which stay (a
        refresh replaces a release's facts only with facts read from its artifacts)."""
        if had:
            self.stale.append(unread.model_copy(update={
                "reason": f"{unread.reason}; the knowledge base keeps the facts read before"}))
        else:
            self.unread.append(unread)

    def consumed(self, need: int) -> None:
        with self._lock:
            self.lower += need

    def counted(self, kind: str, version: str, size: int) -> None:
        """One release (torch: one variant) read from its artifact of ``size`` bytes."""
        self.summary.read[kind] += 1
        self.summary.read_versions[kind].append(version)
        self.summary.artifact_bytes += size


class _Source:
    """One kind of release on the index. :func:`scrape` runs every source the same way:
    ``load`` the facts kept from the old KB, then, when the kind is refreshed, ``plan``
    which releases to read (counting the ones kept), ``read`` them and ``merge`` them."""

    kind: str

    def load(self, facts: _Facts, base: KnowledgeBase | None) -> None:
        raise NotImplementedError

    def plan(self, run: _Run, facts: _Facts) -> list[Any]:
        raise NotImplementedError

    def read(self, run: _Run, facts: _Facts, jobs: list[Any]) -> list[Any]:
        raise NotImplementedError

    def merge(self, run: _Run, facts: _Facts, results: list[Any]) -> None:
        raise NotImplementedError

    def releases(self, facts: _Facts) -> dict[Any, Any]:
        """This kind's releases in ``facts``, by :meth:`key`."""
        raise NotImplementedError

    def key(self, unread: Unread) -> Any:
        """How this kind keys the release ``unread`` names (by distribution and version,
        unless a kind says otherwise)."""
        return (unread.name, unread.version)

    def restore(self, facts: _Facts, previous: _Facts, unread: Unread) -> bool:
        """Put back into ``facts`` what ``previous`` (the old KB's) holds of the release
        ``unread`` names and this read could not; False when it held none."""
        key = self.key(unread)
        had = self.releases(previous).get(key)
        now = self.releases(facts)
        if had is None or key in now:
            return False
        now[key] = had
        return True


class _SglangSource(_Source):
    """SGLang releases from 0.4.0, one wheel each; the per-file facts of earlier reads are
    kept in ``files_at`` so a new release reads only the sources no release had."""

    kind = "sglang"

    def __init__(self, files_cache: str | None, fingerprint: str) -> None:
        self.files_cache = files_cache
        self.files_at = files_cache if files_cache is not None else _files_cache(fingerprint)
        self.cache = sg.AnalysisCache()
        self.procs: ProcessPoolExecutor | None = None
        #: version -> the interpreters its files install on (:func:`wheel_pythons`)
        self.pythons: dict[str, tuple[str, ...] | None] = {}

    def load(self, facts: _Facts, base: KnowledgeBase | None) -> None:
        facts.sglang = {r.version: r for r in base.sglang if r.source == "index"} if base else {}

    def plan(self, run: _Run, facts: _Facts) -> list[tuple[str, IndexFile]]:
        proj = fetch_project(run.fetcher, run.index_url, "sglang")
        for u in _skipped("sglang", proj):
            run.not_read(u, u.version in facts.sglang)
        if self.files_at:
            self.cache = sg.AnalysisCache.load(self.files_at)
        todo = []
        self.pythons = {}
        for v in _versions(proj, SGLANG_MIN):
            # what the release's files install on is a fact of the listing: every refresh
            self.pythons[v] = wheel_pythons(proj.releases[v])
            wheel = sg.choose_wheel(proj.releases[v])
            if wheel is None:
                run.not_read(Unread(kind="sglang", name="sglang", version=v,
                                    reason="no wheel on the index"), v in facts.sglang)
                continue
            have = facts.sglang.get(v)
            if have is not None and have.artifact.sha256 == wheel.sha256:
                run.summary.kept["sglang"] += 1
                facts.sglang[v] = have.model_copy(update={"wheel_pythons": self.pythons[v]})
                continue
            todo.append((v, wheel))
        return todo

    def read(self, run: _Run, facts: _Facts, jobs: list[tuple[str, IndexFile]],
             ) -> list[tuple[str, SglangRelease | Unread, int]]:
        # Releases go one after another, oldest first, so each finds the members its
        # predecessors already analysed; the ranges inside one release go in parallel,
        # and parsing goes to a process pool (one worker per core) when there is work.
        self.procs = _process_pool() if len(jobs) > 1 else None
        try:
            return [self._one(run, v, wheel) for v, wheel in jobs]
        finally:
            if self.procs is not None:
                self.procs.shutdown(cancel_futures=True)

    def _one(self, run: _Run, v: str, wheel: IndexFile) -> tuple[str, SglangRelease | Unread, int]:
        try:
            rel, n, need = sg.scrape_wheel(run.fetcher, wheel, v, self.cache,
                                           workers=run.workers, executor=self.procs)
        except MoonpinError as e:
            run.reporter.warn(f"sglang {v}: {e}")
            run.reporter.advance(f"sglang {v} (failed)")
            return v, Unread(kind="sglang", name="sglang", version=v,
                             artifact=wheel.filename, reason=_reason(e, wheel)), 0
        except (RecursionError, MemoryError) as e:  # what a source nested too deep raises
            why = _too_deep(e, wheel)
            run.reporter.warn(f"sglang {v}: {why}")
            run.reporter.advance(f"sglang {v} (failed)")
            return v, Unread(kind="sglang", name="sglang", version=v,
                             artifact=wheel.filename, reason=why), 0
        run.reporter.advance(f"sglang {v}", nbytes=n)
        run.consumed(need)
        return v, rel, wheel.size

    def releases(self, facts: _Facts) -> dict[str, SglangRelease]:
        return facts.sglang

    def key(self, unread: Unread) -> str:
        return unread.version

    def merge(self, run: _Run, facts: _Facts,
              results: list[tuple[str, SglangRelease | Unread, int]]) -> None:
        for v, got, size in results:
            if isinstance(got, Unread):
                run.not_read(got, v in facts.sglang)
            else:
                facts.sglang[v] = got.model_copy(update={"wheel_pythons":
                                                         self.pythons.get(v)})
                run.counted("sglang", v, size)
        run.summary.cache_hits += self.cache.hits
        if self.files_at and any(isinstance(got, SglangRelease) for _, got, _ in results):
            why = self.cache.save(self.files_at)
            if why:
                run.reporter.warn(f"sglang: per-file facts not kept for the next refresh ({why})")
            elif self.files_cache is None:
                _drop_other_fingerprints(self.files_at)


_MooncakeJob = tuple[str, str, list[IndexFile]]


class _MooncakeSource(_Source):
    """Every wheel of every release of the mooncake family (:data:`moonpin.kb.distributions.
    DISTRIBUTIONS`); a release is kept when its wheels are unchanged and its builds were
    already checked for every name SGLang now imports."""

    kind = "mooncake"

    def __init__(self) -> None:
        self.wanted: frozenset[str] = frozenset()
        self.shared = mc.SharedReads()

    def load(self, facts: _Facts, base: KnowledgeBase | None) -> None:
        facts.moon = {(r.dist, r.version): r for r in base.mooncake} if base else {}

    def plan(self, run: _Run, facts: _Facts) -> list[_MooncakeJob]:
        self.wanted = frozenset(mc.BASE_NAMES | {n for r in facts.sglang.values()
                                                 for n in (*r.pg.names, *r.pg.optional_names)})
        jobs = []
        for dist in DISTRIBUTIONS:
            proj = fetch_project(run.fetcher, run.index_url, dist)
            for u in _skipped("mooncake", proj, dist):
                run.not_read(u, (dist, u.version) in facts.moon)
            for v in _versions(proj):
                wheels = [f for f in proj.releases[v] if f.is_wheel]
                if not wheels:
                    continue
                have = facts.moon.get((dist, v))
                if have is not None and {w.artifact.sha256 for w in have.wheels} == \
                        {w.sha256 for w in wheels} and all(
                        self.wanted <= set(b.names_checked) for w in have.wheels
                        for b in w.builds if b.read_error is None):
                    run.summary.kept["mooncake"] += 1
                    continue
                jobs.append((dist, v, wheels))
        return jobs

    def read(self, run: _Run, facts: _Facts, jobs: list[_MooncakeJob],
             ) -> list[tuple[tuple[str, str], MooncakeRelease | Unread, int]]:
        return _pool(lambda job: self._one(run, job), jobs, max(1, run.workers // 2))

    def _one(self, run: _Run, job: _MooncakeJob,
             ) -> tuple[tuple[str, str], MooncakeRelease | Unread, int]:
        dist, v, wheels = job
        got = []
        total = 0
        size = 0
        # cp312 wheels first: the other wheels of the release reuse their builds' reads
        for w in sorted(wheels, key=lambda f: mc.read_order(f.filename)):
            try:
                mw, n, need = mc.scrape_wheel(run.fetcher, dist, v, w, self.wanted, self.shared)
                run.consumed(need)
            except (MoonpinError, RecursionError, MemoryError) as e:  # the last two: what a
                why = (_reason(e, w) if isinstance(e, MoonpinError)  # loader nested too deep
                       else _too_deep(e, w))                           # raises
                run.reporter.warn(f"{dist} {v}: {why}")
                run.reporter.advance(f"{dist} {v} (failed)", nbytes=total)
                return (dist, v), Unread(kind="mooncake", name=dist, version=v,
                                         artifact=w.filename, reason=why), size
            got.append(mw)
            total += n
            size += w.size
        got.sort(key=lambda m: m.artifact.filename)
        run.reporter.advance(f"{dist} {v}", nbytes=total)
        return (dist, v), MooncakeRelease(dist=dist, version=v, wheels=tuple(got)), size

    def releases(self, facts: _Facts) -> dict[tuple[str, str], MooncakeRelease]:
        return facts.moon

    def merge(self, run: _Run, facts: _Facts,
              results: list[tuple[tuple[str, str], MooncakeRelease | Unread, int]]) -> None:
        for key, rel, size in results:
            if isinstance(rel, Unread):
                run.not_read(rel, key in facts.moon)
            else:
                facts.moon[key] = rel
                run.counted("mooncake", f"{key[0]}=={key[1]}", size)


_TorchJob = tuple[str, str, IndexFile]


class _TorchSource(_Source):
    """The torch release list, and the CUDA major of the Linux wheel per architecture for
    the releases SGLang pins or mooncake builds target (:func:`_torch_needed`)."""

    kind = "torch"

    def load(self, facts: _Facts, base: KnowledgeBase | None) -> None:
        facts.torch = {r.version: r for r in base.torch} if base else {}

    def plan(self, run: _Run, facts: _Facts) -> list[_TorchJob]:
        proj = fetch_project(run.fetcher, run.index_url, "torch")
        for u in _skipped("torch", proj):
            run.not_read(u, u.version in facts.torch)
        # a release whose listing is unreadable this time is still on the index
        facts.torch_versions = tuple(proj.listed())
        needed = _torch_needed(facts.torch_versions, facts.sglang.values(), facts.moon.values())
        jobs = []
        for v in sorted(needed, key=Version):
            files = proj.releases.get(v, ())
            have = facts.torch.get(v)
            for arch in ti.ARCHES:
                w = ti.choose_wheel(files, arch)
                if w is None:
                    continue
                if have is not None and any(x.arch == arch and x.artifact.sha256 == w.sha256
                                            for x in have.variants):
                    run.summary.kept["torch"] += 1  # (torch counts variants: one per arch)
                    continue
                jobs.append((v, arch, w))
        return jobs

    def read(self, run: _Run, facts: _Facts, jobs: list[_TorchJob],
             ) -> list[tuple[str, TorchVariant | Unread, int]]:
        return _pool(lambda job: self._one(run, job), jobs, run.workers)

    def _one(self, run: _Run, job: _TorchJob) -> tuple[str, TorchVariant | Unread, int]:
        v, arch, w = job
        try:
            var, n, need = ti.scrape_variant(run.fetcher, w, arch)
            run.consumed(need)
        except MoonpinError as e:
            run.reporter.warn(f"torch {v} {arch}: {e}")
            run.reporter.advance(f"torch {v} (failed)")
            return v, Unread(kind="torch", name="torch", version=v, artifact=w.filename,
                             reason=_reason(e, w)), w.size
        run.reporter.advance(f"torch {v} {arch}", nbytes=n)
        return v, var, w.size

    def releases(self, facts: _Facts) -> dict[str, TorchRelease]:
        return facts.torch

    def key(self, unread: Unread) -> str:
        return unread.version

    def restore(self, facts: _Facts, previous: _Facts, unread: Unread) -> bool:
        """A torch release is read per platform: the variants this read lacks come back."""
        had = previous.torch.get(unread.version)
        if had is None:
            return False
        cur = facts.torch.get(unread.version, TorchRelease(version=unread.version))
        arches = {x.arch for x in cur.variants}
        back = [x for x in had.variants if x.arch not in arches]  # the arch(es) not read
        if not back:
            return False
        facts.torch[unread.version] = TorchRelease(version=unread.version, variants=tuple(
            sorted([*cur.variants, *back], key=lambda x: x.arch)))
        return True

    def merge(self, run: _Run, facts: _Facts,
              results: list[tuple[str, TorchVariant | Unread, int]]) -> None:
        for v, var, size in results:
            if isinstance(var, Unread):
                run.not_read(var, v in facts.torch)
                continue
            cur = facts.torch.get(v, TorchRelease(version=v))
            variants = tuple(sorted([*(x for x in cur.variants if x.arch != var.arch), var],
                                    key=lambda x: x.arch))
            facts.torch[v] = TorchRelease(version=v, variants=variants)
            run.counted("torch", f"{v} {var.arch}", size)


_NativeJob = tuple[Recipe, str, str, list[IndexFile]]


class _NativeSource(_Source):
    """Every release of every distribution of the native-extension recipes
    (:mod:`moonpin.scrapers.projects`); a release is kept when its wheels are unchanged.
    Whether a release's requirements can be met is asked again every time (the index may
    have gained the release it lacked)."""

    kind = "native"

    def __init__(self) -> None:
        self.shared = nt.SharedBuilds()
        self.listed: dict[str, list[str]] = {}

    def load(self, facts: _Facts, base: KnowledgeBase | None) -> None:
        facts.native = {(r.dist, r.version): r for r in base.native} if base else {}

    def releases(self, facts: _Facts) -> dict[tuple[str, str], NativeRelease]:
        return facts.native

    def plan(self, run: _Run, facts: _Facts) -> list[_NativeJob]:
        jobs = []
        seen = set()
        for recipe in recipes():
            for dist in recipe.dists:
                try:
                    proj = fetch_project(run.fetcher, run.index_url, dist)
                except MoonpinError as e:
                    self.listed[dist] = []
                    if "HTTP 404" in str(e):  # a project the index does not have
                        run.reporter.warn(f"{dist}: not on the index")
                        continue
                    run.not_read(Unread(kind="native", name=dist, version="*",
                                        reason=_reason_text(e)), False)
                    continue
                self.listed[dist] = proj.listed()
                for u in _skipped("native", proj, dist):
                    run.not_read(u, (dist, u.version) in facts.native)
                for v in _versions(proj):
                    seen.add((dist, v))
                    wheels = [f for f in proj.releases[v] if f.is_wheel]
                    have = facts.native.get((dist, v))
                    if not wheels:
                        facts.native[(dist, v)] = NativeRelease(
                            project=recipe.project, dist=dist, version=v,
                            sdist_only=bool(proj.releases[v]))
                        continue
                    if have is not None and {w.artifact.sha256 for w in have.wheels} == \
                            {w.sha256 for w in wheels}:
                        run.summary.kept["native"] += 1
                        continue
                    jobs.append((recipe, dist, v, wheels))
        self.listed["torch"] = list(facts.torch_versions)
        return jobs

    def read(self, run: _Run, facts: _Facts, jobs: list[_NativeJob],
             ) -> list[tuple[tuple[str, str], NativeRelease | Unread, int]]:
        self.torch_versions = facts.torch_versions
        return _pool(lambda job: self._one(run, job), jobs, max(1, run.workers // 2))

    def _one(self, run: _Run, job: _NativeJob,
             ) -> tuple[tuple[str, str], NativeRelease | Unread, int]:
        recipe, dist, v, wheels = job
        got = []
        total = size = 0
        # cp312 x86_64 first: the other wheels of the release reuse its builds' reads
        for w in sorted(wheels, key=lambda f: nt.read_order(f.filename)):
            try:
                nw, n, need = nt.scrape_wheel(run.fetcher, recipe, dist, v, w,
                                              self.torch_versions, self.shared)
                run.consumed(need)
            except MoonpinError as e:
                why = _reason(e, w)
                run.reporter.warn(f"{dist} {v}: {why}")
                run.reporter.advance(f"{dist} {v} (failed)", nbytes=total)
                return (dist, v), Unread(kind="native", name=dist, version=v,
                                         artifact=w.filename, reason=why), size
            got.append(nw)
            total += n
            size += w.size
        got.sort(key=lambda m: m.artifact.filename)
        run.reporter.advance(f"{dist} {v}", nbytes=total)
        return (dist, v), NativeRelease(project=recipe.project, dist=dist, version=v,
                                        wheels=tuple(got)), size

    def merge(self, run: _Run, facts: _Facts,
              results: list[tuple[tuple[str, str], NativeRelease | Unread, int]]) -> None:
        for key, rel, size in results:
            if isinstance(rel, Unread):
                run.not_read(rel, key in facts.native)
            else:
                facts.native[key] = rel
                run.counted("native", f"{key[0]}=={key[1]}", size)
        for key, rel in list(facts.native.items()):
            lines = rel.wheels[0].requires_dist if rel.wheels else ()
            facts.native[key] = rel.model_copy(update={
                "uninstallable": nt.unmet(lines, self.listed)})


def _reason_text(e: MoonpinError) -> str:
    """Why a project's listing could not be read, without the URL (the index's host)."""
    from moonpin.kb.errors import FetchError

    text = str(e)
    if isinstance(e, FetchError) and text.startswith(e.url):
        text = "the index's project listing: " + text[len(e.url):].lstrip(": ")
    return text.splitlines()[0] if text else type(e).__name__


def scrape(
    old: KnowledgeBase | None,
    fetcher: Fetcher,
    index_url: str,
    *,
    only: Iterable[str] = KINDS,
    full: bool = False,
    reporter: Reporter | None = None,
    workers: int = 8,
    index_named: bool = True,
    files_cache: str | None = None,
) -> tuple[KnowledgeBase, Summary]:
    """Scrape the index into a new KB (``old`` supplies what is unchanged).

    ``index_named``: the user named ``index_url`` (a mirror), so the KB records it; False
    for the default index (pip's), which the KB calls "the package index" and never names.
    ``files_cache``: where the SGLang per-file facts are kept between refreshes ("" for
    nowhere); by default moonpin's cache folder, one file per extractor fingerprint.
    """
    reporter = reporter or Reporter()
    only = set(only)
    t0 = time.monotonic()
    run = _Run(fetcher, index_url, reporter, workers, Summary())
    start_bytes = fetcher.stats.bytes
    start_requests = fetcher.stats.requests

    current = extractor_fingerprints()
    stale = {k for k in only if old is not None and not full
             and old.scrape.extractors.get(k) != current[k]}
    for k in sorted(stale):
        reporter.warn(f"{k}: the knowledge base was read by other extractor code; "
                      f"re-reading every {k} release")
    facts = _Facts(local=tuple(r for r in old.sglang if r.source != "index") if old else (),
                   torch_versions=old.torch_versions if old is not None else ())
    sources: tuple[_Source, ...] = (_SglangSource(files_cache, current["sglang"]),
                                    _MooncakeSource(), _TorchSource(), _NativeSource())
    for source in sources:
        # the old KB's facts for this kind, unless rebuilding it (--full, or they came
        # from other extractor code)
        rebuild = source.kind in only and (full or source.kind in stale)
        source.load(facts, old if old is not None and not rebuild else None)
        if source.kind not in only:
            continue
        failed = len(run.unread)
        jobs = source.plan(run, facts)
        reporter.start(source.kind, len(jobs))
        source.merge(run, facts, source.read(run, facts, jobs))
        reporter.finish()
        if rebuild and old is not None:
            # a rebuild reads every release again; one that cannot be read this time keeps
            # the facts the KB had, as an incremental refresh does (and says so)
            previous = _Facts()
            source.load(previous, old)
            for u in run.unread[failed:]:
                if source.restore(facts, previous, u):
                    run.unread.remove(u)
                    run.not_read(u, True)

    summary = run.summary
    summary.bytes_fetched = fetcher.stats.bytes - start_bytes
    summary.lower_bound = run.lower
    summary.unread = [*run.unread, *run.stale]
    summary.seconds = time.monotonic() - t0
    info = _scrape_info(old, summary, only, current, fetcher.stats.requests - start_requests,
                        public_url(index_url) if index_named else None)
    kb = KnowledgeBase(
        scrape=info,
        sglang=tuple(sorted((*facts.sglang.values(), *facts.local),
                            key=lambda r: (Version(r.version), r.source))),
        mooncake=tuple(sorted(facts.moon.values(), key=lambda r: (r.dist, Version(r.version)))),
        torch=tuple(sorted(facts.torch.values(), key=lambda r: Version(r.version))),
        torch_versions=facts.torch_versions,
        unread=tuple(run.unread),
        native=tuple(sorted(facts.native.values(),
                            key=lambda r: (r.project, r.dist, Version(r.version)))),
    )
    return kb, summary


def _scrape_info(old: KnowledgeBase | None, summary: Summary, only: set[str],
                 current: dict[str, str], requests: int, index_url: str | None) -> ScrapeInfo:
    """What the next KB says of the scrape that made it (a kind not scraped this time keeps
    the date and the extractor fingerprint its facts came from)."""
    from moonpin.scrapers import __version__

    now = datetime.now(timezone.utc).replace(microsecond=0)
    before = dict(old.scrape.kinds_scraped_at) if old is not None else {}
    if old is not None:  # a KB that did not record it: all its kinds date from its scrape
        for k in old.scrape.refreshed or (KINDS if not before else ()):
            before.setdefault(k, old.scrape.scraped_at)
    return ScrapeInfo(
        scraped_at=now,
        kinds_scraped_at={k: now if k in only else before[k] for k in KINDS
                          if k in only or k in before},
        index_url=index_url,
        moonpin_version=__version__,
        bytes_fetched=summary.bytes_fetched,
        artifact_bytes=summary.artifact_bytes,
        requests=requests,
        seconds=round(summary.seconds, 1),
        refreshed=tuple(k for k in KINDS if k in only),
        read={k: tuple(vs) for k, vs in summary.read_versions.items() if k in only},
        kept={k: n for k, n in summary.kept.items() if k in only},
        extractors={k: current[k] if k in only else
                    (old.scrape.extractors.get(k, "") if old is not None else "")
                    for k in EXTRACTORS},
    )


def _files_cache(fingerprint: str) -> str:
    """The default file of SGLang per-file facts ("" when there is no cache folder)."""
    from moonpin.kb import cache

    folder = cache.cache_folder()
    return os.path.join(folder, f"sglang-files-{fingerprint}.marshal") if folder else ""


def _drop_other_fingerprints(kept: str) -> None:
    """Facts files of other extractor code are never read again: remove them."""
    import contextlib
    import glob

    for other in glob.glob(os.path.join(os.path.dirname(kept), "sglang-files-*.marshal")):
        if other != kept:
            with contextlib.suppress(OSError):
                os.unlink(other)


def _reason(e: MoonpinError, f: IndexFile) -> str:
    """An error's text for the KB: the file is named by its path on the index's files,
    never by a URL naming the index's host."""
    text = str(e)
    return text.replace(f.url, f.path or f.filename) if f.url else text


def _too_deep(e: BaseException, f: IndexFile) -> str:
    """Why a wheel whose Python sources Python's parser (``MemoryError``: too complex) or a
    reader walking their syntax trees (``RecursionError``) cannot hold is not read."""
    return (f"{f.filename}: a Python source in it is nested too deeply to read "
            f"({type(e).__name__})")


def _torch_needed(all_versions: tuple[str, ...], sglang: Iterable[SglangRelease],
                  moon: Iterable[MooncakeRelease]) -> set[str]:
    """torch releases worth a CUDA lookup: every build target, and for each SGLang
    release the newest torch its requirement admits (all of them when pinned ==)."""
    known = set(all_versions)
    out = {b.torch for r in moon for w in r.wheels for b in w.builds
           if b.torch and b.torch in known}
    versions = sorted(Version(v) for v in all_versions if not Version(v).is_prerelease)
    for r in sglang:
        for line in r.torch_requirements:
            spec_text = line.split(";")[0].strip()[len("torch"):].strip()
            try:
                spec = SpecifierSet(spec_text.strip("()"))
            except InvalidSpecifier:
                continue
            ok = [v for v in versions if v in spec]
            if ok:
                out.add(str(ok[-1]))
    return out


def changes(old: KnowledgeBase | None, new: KnowledgeBase) -> dict[str, dict[str, list[str]]]:
    """kind -> ``new`` (releases the old KB did not hold), ``changed`` (held, with other
    facts now), ``unchanged`` and ``gone``: what a scrape changed, release by release
    (mooncake as ``dist==version``)."""
    def keyed(kb: KnowledgeBase | None) -> dict[str, dict[str, object]]:
        if kb is None:
            return {k: {} for k in KINDS}
        return {"sglang": {r.version + ("" if r.source == "index" else f" ({r.source})"): r
                           for r in kb.sglang},
                "mooncake": {f"{r.dist}=={r.version}": r for r in kb.mooncake},
                "torch": {r.version: r for r in kb.torch},
                "native": {f"{r.dist}=={r.version}": r for r in kb.native}}

    before, after = keyed(old), keyed(new)
    out: dict[str, dict[str, list[str]]] = {}
    for k in KINDS:
        b, a = before[k], after[k]
        out[k] = {"new": [v for v in a if v not in b],
                  "changed": [v for v in a if v in b and a[v] != b[v]],
                  "unchanged": [v for v in a if v in b and a[v] == b[v]],
                  "gone": [v for v in b if v not in a]}
    return out

