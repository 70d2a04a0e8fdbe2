"""Bytes and time of moonpin's range reads vs downloading the same artifacts whole.

Runs against the live index (it is a benchmark, not a test), side by side in one
process, on a sample of real releases:

    python bench/scrape.py                 # the sample below
    python bench/scrape.py --noop KB       # also time a no-op refresh of KB (a copy is used)

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

from kb import store
from scrapers import mooncake as mc
from scrapers import sglang as sg
from scrapers import torch_index as ti
from scrapers.fetch import Fetcher
from scrapers.pypi import IndexFile, fetch_project, index_url_from_env
from scrapers.refresh import scrape

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
    args = ap.parse_args()
    index = index_url_from_env(args.index_url)
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


if __name__ == "__main__":
    raise SystemExit(main())
