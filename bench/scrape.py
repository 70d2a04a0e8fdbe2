"""Bytes and time of moonpin's range reads vs downloading the same artifacts whole.

Runs against the live index (it is a benchmark, not a test), side by side in one
process, on a sample of real releases:

    python bench/scrape.py                 # the sample below
    python bench/scrape.py --noop KB       # also time a no-op refresh of KB (a copy is used)
    python bench/scrape.py --incremental KB   # only: the newest SGLang release taken out of a
                                              # copy of KB, refreshed without and with the
                                              # per-file facts kept by earlier scrapes
    python bench/scrape.py --native KB     # only: the native-extension projects on a copy of
                                           # KB: cold, no-op, and the newest release of each
                                           # recipe's first two distributions taken out

For each artifact: bytes moonpin fetched, the lower bound (central directory plus the
compressed bytes the extractors consumed), the whole artifact size, requests and wall
time; then the same artifacts downloaded whole (streamed and discarded, as pip would
download them before it could look inside).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from moonpin.kb import store
from moonpin.scrapers import mooncake as mc
from moonpin.scrapers import sglang as sg
from moonpin.scrapers import torch_index as ti
from moonpin.scrapers.fetch import Fetcher
from moonpin.scrapers.pypi import IndexFile, fetch_project, index_url_from_env
from moonpin.scrapers.refresh import scrape

SGLANG = ("0.5.16", "0.5.17", "0.5.18")  # consecutive: shows what the shared analyses save
MOONCAKE = (("mooncake-transfer-engine-cuda13", "0.3.13.post1", 2),
            ("mooncake-transfer-engine-cuda13", "0.3.14", 1),
            ("mooncake-transfer-engine", "0.3.7", 1))
TORCH = (("2.13.0", "x86_64"),)


def mb(n: float) -> str:
    return f"{n / 1e6:8.1f} MB"


def whole_download(client: httpx.Client, url: str) -> tuple[int, float]:
    t = time.monotonic()
    n = 0
    with client.stream("GET", url) as r:
        r.raise_for_status()
        for chunk in r.iter_raw(1 << 20):
            n += len(chunk)
    return n, time.monotonic() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index-url")
    ap.add_argument("--noop", metavar="KB", help="time a no-op refresh of this KB file")
    ap.add_argument("--skip-whole", action="store_true", help="do not download whole artifacts")
    ap.add_argument("--incremental", metavar="KB", help="only measure a new SGLang release: "
                    "KB's newest taken out of a copy and refreshed")
    ap.add_argument("--native", metavar="KB", help="only measure the native-extension kind on "
                    "a copy of KB: cold, no-op and new-release refreshes")
    args = ap.parse_args()
    index = index_url_from_env(args.index_url)
    if args.native:
        return native(Path(args.native), index)
    if args.incremental:
        return incremental(Path(args.incremental), index)
    f = Fetcher()
    rows: list[tuple[str, int, int, int, int, float, IndexFile]] = []

    cache = sg.AnalysisCache()
    proj = fetch_project(f, index, "sglang")
    for v in SGLANG:
        w = sg.choose_wheel(proj.releases[v])
        assert w is not None
        r0, t0 = f.stats.requests, time.monotonic()
        _, n, need = sg.scrape_wheel(f, w, v, cache)
        rows.append((f"sglang {v}", n, need, w.size, f.stats.requests - r0,
                     time.monotonic() - t0, w))
    for dist, v, count in MOONCAKE:
        proj = fetch_project(f, index, dist)
        wheels = sorted((x for x in proj.releases[v] if x.is_wheel),
                        key=lambda x: (0 if "-cp312-" in x.filename else 1,
                                       0 if x.filename.endswith("x86_64.whl") else 1,
                                       x.filename))
        shared = mc.SharedReads()
        for w in wheels[:count]:
            r0, t0 = f.stats.requests, time.monotonic()
            _, n, need = mc.scrape_wheel(f, dist, v, w, mc.BASE_NAMES, shared)
            rows.append((f"{dist.removeprefix('mooncake-transfer-engine') or 'mte'} {v} "
                         f"{w.filename.split('-')[2]}", n, need, w.size,
                         f.stats.requests - r0, time.monotonic() - t0, w))
    proj = fetch_project(f, index, "torch")
    for v, arch in TORCH:
        tw = ti.choose_wheel(proj.releases[v], arch)
        assert tw is not None
        r0, t0 = f.stats.requests, time.monotonic()
        _, n, need = ti.scrape_variant(f, tw, arch)
        rows.append((f"torch {v} {arch}", n, need, tw.size, f.stats.requests - r0,
                     time.monotonic() - t0, tw))

    print(f"{'artifact':38} {'fetched':>11} {'lower bnd':>11} {'whole':>11} {'ratio':>7} "
          f"{'req':>5} {'time':>7} {'whole dl':>9}")
    client = httpx.Client(follow_redirects=True, timeout=120)
    tot = [0, 0, 0, 0.0, 0.0]
    for label, n, need, size, req, secs, w in rows:
        dl = "-"
        if not args.skip_whole:
            got, dsecs = whole_download(client, w.url)
            assert got == size, (w.filename, got, size)
            tot[4] += dsecs
            dl = f"{dsecs:7.1f}s"
        tot[0] += n
        tot[1] += need
        tot[2] += size
        tot[3] += secs
        print(f"{label:38} {mb(n)} {mb(need)} {mb(size)} {100 * n / size:6.2f}% {req:5} "
              f"{secs:6.1f}s {dl:>9}")
    print(f"{'total':38} {mb(tot[0])} {mb(tot[1])} {mb(tot[2])} "
          f"{100 * tot[0] / tot[2]:6.2f}% {'':5} {tot[3]:6.1f}s "
          f"{(f'{tot[4]:7.1f}s' if not args.skip_whole else '-'):>9}")
    print(f"shared analyses reused: {cache.hits} source members not fetched again")

    if args.noop:
        with tempfile.TemporaryDirectory() as d:
            copy = Path(d) / "kb.json"
            shutil.copy(args.noop, copy)
            old = store.load(copy)
            f2 = Fetcher()
            t = time.monotonic()
            _, summary = scrape(old, f2, index)
            secs = time.monotonic() - t
            print(f"no-op refresh of {args.noop}: {secs:.2f}s, {mb(f2.stats.bytes)} fetched "
                  f"(index JSON only), {f2.stats.requests} requests, releases read "
                  f"{summary.read}")
    return 0


def new_content(f: Fetcher, prev: IndexFile, new: IndexFile
                ) -> tuple[int, int, int, int, set[tuple[int, int]]]:
    """(central directory bytes, compressed bytes of the .py members whose CRC-32 and size
    the previous release does not have, their count, all .py members, their keys) of
    ``new``."""
    from moonpin.scrapers.remote_zip import HttpSource, RemoteZip

    old = RemoteZip(HttpSource(f, prev.url, prev.size, label=prev.filename))
    z = RemoteZip(HttpSource(f, new.url, new.size, label=new.filename))
    had = {(e.crc, e.file_size) for e in old.entries if e.name.endswith(".py")}
    py = [e for e in z.entries if e.name.endswith(".py")]
    fresh = [e for e in py if (e.crc, e.file_size) not in had]
    # a member's bytes: local header (30 + name) + its compressed data
    return (z.cd_bytes, sum(30 + len(e.name.encode()) + e.compressed_size for e in fresh),
            len(fresh), len(py), {(e.crc, e.file_size) for e in fresh})


def facts_without(src: str, dst: str, fresh: set[tuple[int, int]]) -> None:
    """Copy the kept facts, less every file the new release has and its predecessor lacks:
    what an earlier scrape that never saw the new release would have kept (or a little
    less, when an older release had some of those files)."""
    from moonpin.kb import cache

    doc = cache.load(src)
    assert isinstance(doc, dict), f"unreadable facts file {src}"
    doc = dict(doc, clean={k: v for k, v in doc["clean"].items() if k not in fresh},
               analysed={k: v for k, v in doc["analysed"].items() if k[1:] not in fresh},
               backend={k: v for k, v in doc.get("backend", {}).items() if k not in fresh},
               guarded={k: v for k, v in doc.get("guarded", {}).items() if k not in fresh})
    assert cache.store(dst, doc) is None


def incremental(kb_path: Path, index: str) -> int:
    """A new SGLang release: bytes fetched against its new .py content + central directory
    (goal <= 1.2x), without and with the per-file facts a scrape keeps (the facts file of
    the current extractor code must exist: any earlier scrape of sglang writes it)."""
    from packaging.version import Version

    from moonpin.scrapers.refresh import _files_cache, extractor_fingerprints

    kb = store.load(kb_path)
    rels = sorted((r for r in kb.sglang if r.source == "index"), key=lambda r: Version(r.version))
    newest, prev = rels[-1], rels[-2]
    old = kb.model_copy(update={"sglang": tuple(r for r in kb.sglang if r is not newest)})
    f0 = Fetcher()
    proj = fetch_project(f0, index, "sglang")
    wn, wp = sg.choose_wheel(proj.releases[newest.version]), \
        sg.choose_wheel(proj.releases[prev.version])
    assert wn is not None and wp is not None
    cd, fresh, n_fresh, n_py, fresh_keys = new_content(f0, wp, wn)
    ref = cd + fresh
    print(f"sglang {newest.version} ({mb(wn.size).strip()} wheel): {n_fresh} of {n_py} .py "
          f"members have content {prev.version} lacks, {mb(fresh).strip()} compressed; "
          f"central directory {mb(cd).strip()}; reference {mb(ref).strip()}")
    files = _files_cache(extractor_fingerprints()["sglang"])
    have = bool(files) and Path(files).exists()
    for label, cache in (("without kept facts", ""), ("with kept facts", None)):
        if cache is None and not have:
            print(f"{label}: no facts file at {files or '(no cache folder)'}; run "
                  "`moonpin scrape --only sglang` first")
            continue
        with tempfile.TemporaryDirectory() as d:
            keep = str(Path(d) / "facts.marshal")
            if cache is None:  # a copy: the bench leaves the real one as it was
                facts_without(files, keep, fresh_keys)
            f = Fetcher()
            t = time.monotonic()
            got, summary = scrape(old, f, index, only=("sglang",),
                                  files_cache=keep if cache is None else "")
            secs = time.monotonic() - t
        same = [r for r in got.sglang if r.version == newest.version] == [newest]
        print(f"{label:20}: fetched {mb(summary.bytes_fetched).strip()} in {f.stats.requests} "
              f"requests, {secs:.1f}s; {summary.bytes_fetched / ref:.2f}x the reference; "
              f"{summary.cache_hits} members not fetched; facts "
              f"{'identical to' if same else 'DIFFERENT from'} the KB's")
    return 0


def native(kb_path: Path, index: str) -> int:
    """Cold, no-op and new-release refreshes of the ``native`` kind, each on a copy of KB."""
    from packaging.version import Version

    from moonpin.kb.models import KnowledgeBase
    from moonpin.scrapers.projects import recipes

    base = store.load(kb_path)

    def one(label: str, old: KnowledgeBase, full: bool = False) -> KnowledgeBase:
        f = Fetcher()
        t = time.monotonic()
        try:
            kb, summary = scrape(old, f, index, only=("native",), full=full)
        finally:
            f.close()
        print(f"{label}: read {summary.read['native']} releases, kept "
              f"{summary.kept['native']}; {mb(summary.bytes_fetched)} fetched of "
              f"{mb(summary.artifact_bytes)} whole, {f.stats.requests} requests, "
              f"{time.monotonic() - t:.1f} s")
        return kb

    cold = one("cold", base, full=True)
    one("no-op", cold)
    newest = set()
    for r in recipes():
        for d in r.dists[:2]:
            have = [x for x in cold.native if x.dist == d and x.wheels]
            if have:
                newest.add((d, max(have, key=lambda x: Version(x.version)).version))
    print("new releases:", ", ".join(f"{d}=={v}" for d, v in sorted(newest)))
    one("new releases", cold.model_copy(update={"native": tuple(
        x for x in cold.native if (x.dist, x.version) not in newest)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
