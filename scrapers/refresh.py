"""A whole scrape: list releases, read what is new, assemble the next KB.

Incremental by default: a release whose artifact sha256 is unchanged (and, for
mooncake, whose builds were already checked for every name now wanted) is kept
as it is, costing only the index JSON. A release that cannot be read is left
out and listed in ``unread``; it never becomes a verdict.
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
from typing import TypeVar

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from kb.distributions import DISTRIBUTIONS
from kb.errors import MoonpinError
from kb.models import (
    KnowledgeBase,
    MooncakeRelease,
    ScrapeInfo,
    SglangRelease,
    TorchRelease,
    TorchVariant,
    Unread,
)
from scrapers import mooncake as mc
from scrapers import sglang as sg
from scrapers import torch_index as ti
from scrapers.fetch import Fetcher
from scrapers.pypi import IndexFile, ProjectReleases, fetch_project, public_url
from scrapers.report import Reporter

__all__ = ["EXTRACTORS", "SGLANG_MIN", "Summary", "extractor_fingerprints", "scrape"]

SGLANG_MIN = Version("0.4.0")
KINDS = ("sglang", "mooncake", "torch")
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
    """Index entries that could not be used (a non-PEP 440 version, a malformed file entry)."""
    return [Unread(kind=kind, name=name or kind, version=what, reason=why)  # type: ignore[arg-type]
            for what, why in project.skipped]


def _versions(project: ProjectReleases, minimum: Version | None = None) -> list[str]:
    out = [v for v in project.versions() if minimum is None or Version(v) >= minimum]
    return out


#: The modules whose code decides the facts recorded for each kind of release.
#: Paths are relative to the folder that holds the ``kb``, ``readers`` and ``scrapers``
#: packages (the repository, or site-packages once installed).
EXTRACTORS: dict[str, tuple[str, ...]] = {
    "sglang": ("readers/pyast.py", "readers/server_args.py", "kb/launch.py",
               "scrapers/sglang.py"),
    "mooncake": ("scrapers/mooncake.py", "kb/distributions.py", "readers/elf.py",
                 "readers/loader.py", "readers/cuda.py"),
    "torch": ("scrapers/torch_index.py", "readers/cuda.py"),
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
    summary = Summary()
    start_bytes = fetcher.stats.bytes
    start_requests = fetcher.stats.requests
    unread: list[Unread] = []
    lower = [0]  # the lower bound of bytes, summed by the workers under lower_lock
    lower_lock = threading.Lock()

    current = extractor_fingerprints()
    stale = {k for k in only if old is not None and not full
             and old.scrape.extractors.get(k) != current[k]}
    for k in sorted(stale):
        reporter.warn(f"{k}: the knowledge base was read by other extractor code; "
                      f"re-reading every {k} release")

    def keep(kind: str) -> KnowledgeBase | None:
        """The old KB to start ``kind`` from: all of it unless rebuilding that kind
        (``--full``, or the KB's facts for it came from other extractor code)."""
        rebuild = kind in only and (full or kind in stale)
        return old if old is not None and not rebuild else None

    # -------------------------------------------------------------- sglang
    base = keep("sglang")
    sglang: dict[str, SglangRelease] = (
        {r.version: r for r in base.sglang if r.source == "index"} if base else {})
    # Releases recorded from a source tree or archive are the user's; a scrape keeps them.
    local = tuple(r for r in old.sglang if r.source != "index") if old is not None else ()
    if "sglang" in only:
        proj = fetch_project(fetcher, index_url, "sglang")
        unread += _skipped("sglang", proj)
        files_at = files_cache if files_cache is not None else _files_cache(current["sglang"])
        cache = sg.AnalysisCache.load(files_at) if files_at else sg.AnalysisCache()
        todo = []
        for v in _versions(proj, SGLANG_MIN):
            wheel = sg.choose_wheel(proj.releases[v])
            if wheel is None:
                unread.append(Unread(kind="sglang", name="sglang", version=v,
                                     reason="no wheel on the index"))
                continue
            have = sglang.get(v)
            if have is not None and have.artifact.sha256 == wheel.sha256:
                summary.kept["sglang"] += 1
                continue
            todo.append((v, wheel))
        reporter.start("sglang", len(todo))

        def one_sglang(item: tuple[str, IndexFile]) -> tuple[str, object, int, int]:
            v, wheel = item
            try:
                rel, n, need = sg.scrape_wheel(fetcher, wheel, v, cache, workers=workers,
                                         executor=procs)
            except MoonpinError as e:
                reporter.warn(f"sglang {v}: {e}")
                reporter.advance(f"sglang {v} (failed)")
                return v, Unread(kind="sglang", name="sglang", version=v,
                                 artifact=wheel.filename, reason=_reason(e, wheel)), 0, 0
            reporter.advance(f"sglang {v}", nbytes=n)
            with lower_lock:
                lower[0] += need
            return v, rel, n, wheel.size

        # Releases go one after another, oldest first, so each finds the members its
        # predecessors already analysed; the ranges inside one release go in parallel,
        # and parsing goes to a process pool (one worker per core) when there is work.
        procs = _process_pool() if len(todo) > 1 else None
        try:
            done = list(map(one_sglang, todo))
        finally:
            if procs is not None:
                procs.shutdown(cancel_futures=True)
        for v, got, _n, size in done:
            if isinstance(got, Unread):
                unread.append(got)
                sglang.pop(v, None)
            elif isinstance(got, SglangRelease):
                sglang[v] = got
                summary.read["sglang"] += 1
                summary.read_versions["sglang"].append(v)
                summary.artifact_bytes += size
        summary.cache_hits += cache.hits
        if files_at and any(isinstance(got, SglangRelease) for _, got, _, _ in done):
            why = cache.save(files_at)
            if why:
                reporter.warn(f"sglang: per-file facts not kept for the next refresh ({why})")
            elif files_cache is None:
                _drop_other_fingerprints(files_at)
        reporter.finish()

    # -------------------------------------------------------------- mooncake
    wanted = frozenset(mc.BASE_NAMES | {n for r in sglang.values()
                                        for n in (*r.pg.names, *r.pg.optional_names)})
    mbase = keep("mooncake")
    moon: dict[tuple[str, str], MooncakeRelease] = (
        {(r.dist, r.version): r for r in mbase.mooncake} if mbase else {})
    if "mooncake" in only:
        jobs = []
        for dist in DISTRIBUTIONS:
            proj = fetch_project(fetcher, index_url, dist)
            unread += _skipped("mooncake", proj, dist)
            for v in _versions(proj):
                wheels = [f for f in proj.releases[v] if f.is_wheel]
                if not wheels:
                    continue
                mhave = moon.get((dist, v))
                if mhave is not None and {w.artifact.sha256 for w in mhave.wheels} == \
                        {w.sha256 for w in wheels} and all(
                        wanted <= set(b.names_checked) for w in mhave.wheels for b in w.builds
                        if b.read_error is None):
                    summary.kept["mooncake"] += 1
                    continue
                jobs.append((dist, v, wheels))
        reporter.start("mooncake", len(jobs))
        shared = mc.SharedReads()

        def one_mooncake(job: tuple[str, str, list[IndexFile]]) -> tuple[
                tuple[str, str], MooncakeRelease | Unread, int, int]:
            dist, v, wheels = job
            got = []
            total = 0
            size = 0
            # Own-ABI cp312 wheels first, so the other wheels reuse their reads.
            for w in sorted(wheels, key=lambda f: (0 if "-cp312-" in f.filename else 1,
                                                   f.filename)):
                try:
                    mw, n, need = mc.scrape_wheel(fetcher, dist, v, w, wanted, shared)
                    with lower_lock:
                        lower[0] += need
                except MoonpinError as e:
                    reporter.warn(f"{dist} {v}: {e}")
                    reporter.advance(f"{dist} {v} (failed)", nbytes=total)
                    return (dist, v), Unread(kind="mooncake", name=dist, version=v,
                                             artifact=w.filename, reason=_reason(e, w)), \
                        total, size
                got.append(mw)
                total += n
                size += w.size
            got.sort(key=lambda m: m.artifact.filename)
            reporter.advance(f"{dist} {v}", nbytes=total)
            return (dist, v), MooncakeRelease(dist=dist, version=v, wheels=tuple(got)), total, \
                size

        for key, rel, _n, size in _pool(one_mooncake, jobs, max(1, workers // 2)):
            if isinstance(rel, Unread):
                unread.append(rel)
                moon.pop(key, None)
            else:
                moon[key] = rel
                summary.read["mooncake"] += 1
                summary.read_versions["mooncake"].append(f"{key[0]}=={key[1]}")
                summary.artifact_bytes += size
        reporter.finish()

    # -------------------------------------------------------------- torch
    tbase = keep("torch")
    torch: dict[str, TorchRelease] = {r.version: r for r in tbase.torch} if tbase else {}
    torch_versions: tuple[str, ...] = old.torch_versions if old is not None else ()
    if "torch" in only:
        proj = fetch_project(fetcher, index_url, "torch")
        torch_versions = tuple(proj.versions())
        needed = _torch_needed(torch_versions, sglang.values(), moon.values())
        jobs2 = []
        for v in sorted(needed, key=Version):
            files = proj.releases.get(v, ())
            thave = torch.get(v)
            for arch in ti.ARCHES:
                w = ti.choose_wheel(files, arch)
                if w is None:
                    continue
                if thave is not None and any(x.arch == arch and x.artifact.sha256 == w.sha256
                                             for x in thave.variants):
                    summary.kept["torch"] += 1  # (torch counts variants: one per arch)
                    continue
                jobs2.append((v, arch, w))
        reporter.start("torch", len(jobs2))

        def one_torch(job: tuple[str, str, IndexFile]) -> tuple[str, TorchVariant | Unread, int]:
            v, arch, w = job
            try:
                var, n, need = ti.scrape_variant(fetcher, w, arch)
                with lower_lock:
                    lower[0] += need
            except MoonpinError as e:
                reporter.warn(f"torch {v} {arch}: {e}")
                reporter.advance(f"torch {v} (failed)")
                return v, Unread(kind="torch", name="torch", version=v, artifact=w.filename,
                                 reason=_reason(e, w)), w.size
            reporter.advance(f"torch {v} {arch}", nbytes=n)
            return v, var, w.size

        for v, var, size in _pool(one_torch, jobs2, workers):
            if isinstance(var, Unread):
                unread.append(var)
                continue
            cur = torch.get(v, TorchRelease(version=v))
            variants = tuple(sorted([*(x for x in cur.variants if x.arch != var.arch), var],
                                    key=lambda x: x.arch))
            torch[v] = TorchRelease(version=v, variants=variants)
            summary.read["torch"] += 1
            summary.read_versions["torch"].append(f"{v} {var.arch}")
            summary.artifact_bytes += size
        reporter.finish()

    summary.bytes_fetched = fetcher.stats.bytes - start_bytes
    summary.lower_bound = lower[0]
    summary.unread = unread
    summary.seconds = time.monotonic() - t0
    from scrapers import __version__

    now = datetime.now(timezone.utc).replace(microsecond=0)
    before = dict(old.scrape.kinds_scraped_at) if old is not None else {}
    if old is not None:  # a KB that did not record it: all its kinds date from its scrape
        for k in old.scrape.refreshed or (KINDS if not before else ()):
            before.setdefault(k, old.scrape.scraped_at)
    kb = KnowledgeBase(
        scrape=ScrapeInfo(
            scraped_at=now,
            kinds_scraped_at={k: now if k in only else before[k] for k in KINDS
                              if k in only or k in before},
            index_url=public_url(index_url) if index_named else None,
            moonpin_version=__version__,
            bytes_fetched=summary.bytes_fetched,
            artifact_bytes=summary.artifact_bytes,
            requests=fetcher.stats.requests - start_requests,
            seconds=round(summary.seconds, 1),
            refreshed=tuple(k for k in KINDS if k in only),
            read={k: tuple(vs) for k, vs in summary.read_versions.items() if k in only},
            kept={k: n for k, n in summary.kept.items() if k in only},
            # a kind not scraped this time keeps the fingerprint its facts came from
            extractors={k: current[k] if k in only else
                        (old.scrape.extractors.get(k, "") if old is not None else "")
                        for k in EXTRACTORS},
        ),
        sglang=tuple(sorted((*sglang.values(), *local),
                            key=lambda r: (Version(r.version), r.source))),
        mooncake=tuple(sorted(moon.values(), key=lambda r: (r.dist, Version(r.version)))),
        torch=tuple(sorted(torch.values(), key=lambda r: Version(r.version))),
        torch_versions=torch_versions,
        unread=tuple(unread),
    )
    return kb, summary


def _files_cache(fingerprint: str) -> str:
    """The default file of SGLang per-file facts ("" when there is no cache folder)."""
    from kb import cache

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
