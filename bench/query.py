"""Query speed: graph build, in-process latency, and the cold CLI against `pip --version`.

    python bench/query.py [--kb PATH] [--runs N] [--resolve N] [--against CHECKOUT]
                          [--only SUBSTRING]

Prints the time to load the KB and build the graph, the stack graph's size and build time
(every project's releases, ``moonpin.resolver.stacks``), with ``--resolve N`` the median
wall time of N ``kb resolve`` runs on a copy of the KB and the bytes it writes, p50/p99 of
in-process `which
mooncake` and `explain` over a spread of real questions, and the wall time of cold
`moonpin which mooncake --sglang …`, `which nixl --torch … [--sglang …]`, `which
sglang-kernel --sglang …` and `explain` of a mooncake stack and of extension stacks (nixl
with the kernel; the newest SGLang release's own pins of DeepEP, FlashInfer and the kernel,
with flashinfer-cubin) processes, `pins` of files pinning extensions beside that SGLang
and its `constraints`, next to `pip --version`, run alternately in this one script so all
see the same machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from packaging.version import Version  # noqa: E402

from moonpin.kb import store  # noqa: E402
from moonpin.resolver import query  # noqa: E402
from moonpin.resolver.graph import CompatGraph  # noqa: E402
from moonpin.resolver.stacks import Stacks  # noqa: E402
from moonpin.resolver.tables import per_release  # noqa: E402

#: Children may write .pyc files, as an installed package has them (this machine sets
#: PYTHONDONTWRITEBYTECODE, which would time compiling moonpin's sources on every run).
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def _resolve(kb_path: Path, runs: int) -> None:
    """The median wall time of ``kb resolve`` on a copy of the KB, and what it writes."""
    import shutil
    import tempfile

    times = []
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "kb.json"
        shutil.copy(kb_path, copy)
        for _ in range(runs):
            a = time.perf_counter()
            subprocess.run([sys.executable, "-m", "moonpin", "--kb", str(copy), "kb",
                            "resolve"], cwd=ROOT, stdout=subprocess.DEVNULL, check=True,
                           env=CHILD_ENV)
            times.append(time.perf_counter() - a)
        folder = Path(tmp) / "resolved"
        sizes = {f.name: f.stat().st_size for f in folder.iterdir()}
    native = sum(v for k, v in sizes.items() if k.startswith("_native"))
    print(f"kb resolve median {statistics.median(times):.2f} s ({runs} runs); writes "
          f"{sum(sizes.values()):,} bytes in {len(sizes)} files (native tables {native:,}, "
          f"_stacks.json {sizes.get('_stacks.json', 0):,})")


def _own_stack(kb: object, sglang: str) -> list[str]:
    """The extensions the SGLang release pins exactly (its Requires-Dist: DeepEP,
    FlashInfer, the kernel), and the newest flashinfer-cubin the KB holds beside its
    flashinfer-python (flashinfer's version lock is judged), as ``NAME==VERSION``."""
    from packaging.requirements import Requirement

    s = next(x for x in kb.sglang if x.version == sglang)  # type: ignore[attr-defined]
    out = []
    for pin in s.extension_pins:
        req = Requirement(pin.requirement)
        exact = [x.version for x in req.specifier if x.operator == "=="]
        if len(exact) == 1 and req.marker is None:
            out.append(f"{pin.dist}=={exact[0]}")
    cubins = [r.version for r in kb.native if r.dist == "flashinfer-cubin"]  # type: ignore[attr-defined]
    if cubins and any(x.startswith("flashinfer-python==") for x in out):
        out.append(f"flashinfer-cubin=={max(cubins, key=Version)}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kb", type=Path)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--resolve", type=int, default=0,
                    help="time this many `kb resolve` runs on a copy of the KB")
    ap.add_argument("--against", type=Path,
                    help="another checkout: its cold CLI (and its own data/kb.json) timed "
                         "alternately with this one's, in the same run")
    ap.add_argument("--only", default="",
                    help="time only the cold commands whose name holds this")
    args = ap.parse_args()

    t0 = time.perf_counter()
    kb = store.load(args.kb)
    t1 = time.perf_counter()
    g = CompatGraph(kb)
    t2 = time.perf_counter()
    print(f"KB load {1000 * (t1 - t0):.1f} ms; graph build {1000 * (t2 - t1):.1f} ms "
          f"({g.g.number_of_nodes()} nodes, {g.g.number_of_edges()} edges)")

    a = time.perf_counter()
    st = Stacks(CompatGraph(kb))
    b = time.perf_counter()
    broken = st.table()["broken"]
    c = time.perf_counter()
    n_broken = sum(len(p) for t in broken.values() for p in t.values())
    print(f"stack graph {1000 * (b - a):.0f} ms ({st.g.number_of_nodes()} releases in "
          f"{len(st.parts)} parts, {st.g.number_of_edges()} edges); every sglang x torch x "
          f"platform resolved in {1000 * (c - b):.0f} ms ({n_broken} broken)")
    if args.resolve:
        _resolve(args.kb or store.default_kb_path(), args.resolve)

    with_pg = [s.version for s in kb.sglang if s.pg.module and s.source == "index"]
    sample = with_pg[:: max(1, len(with_pg) // 8)]
    which_t: list[float] = []
    explain_t: list[float] = []
    for v in sample:
        for _ in range(3):
            a = time.perf_counter()
            query.which_mooncake(g, v, python="3.12", arch="x86_64").to_json()
            which_t.append(time.perf_counter() - a)
            a = time.perf_counter()
            query.explain(g, v, "mooncake-transfer-engine-cuda13==0.3.13.post1",
                          python="3.12", arch="x86_64").to_json()
            explain_t.append(time.perf_counter() - a)
    kb_path = args.kb or store.default_kb_path()
    fast_t: list[float] = []
    fast_load_t: list[float] = []
    for v in sample:
        for _ in range(3):
            a = time.perf_counter()
            table = per_release.load(kb_path, v)
            b = time.perf_counter()
            assert table is not None, f"no fresh resolved table for {v}: run moonpin kb resolve"
            table.which_mooncake(v, python="cp312", arch="x86_64")
            c = time.perf_counter()
            fast_load_t.append(c - a)
            fast_t.append(c - b)
    for name, xs in (("which mooncake", which_t), ("explain", explain_t),
                     ("which (table)", fast_t), ("which (load+table)", fast_load_t)):
        print(f"in-process {name:19} p50 {1000 * pct(xs, 0.5):7.2f} ms   "
              f"p99 {1000 * pct(xs, 0.99):7.2f} ms   ({len(xs)} queries)")

    kb_arg = ["--kb", str(kb_path)]
    newest = max((s.version for s in kb.sglang if s.source == "index"), key=Version)
    own = _own_stack(kb, newest)
    clis = {
        f"which mooncake --sglang {with_pg[-1]}": [
            "which", "mooncake", "--sglang", with_pg[-1], "--python", "3.12", "--arch",
            "x86_64"],
        "which nixl --torch 2.14.1": ["which", "nixl", "--torch", "2.14.1"],
        f"which nixl --torch 2.14.1 --sglang {newest}": [
            "which", "nixl", "--torch", "2.14.1", "--sglang", newest],
        f"which sglang-kernel --sglang {newest}": ["which", "sglang-kernel", "--sglang", newest],
        f"explain sglang=={newest} (mooncake cuda13, the stack's edges)": [
            "explain", f"sglang=={newest}", "mooncake-transfer-engine-cuda13==0.3.13.post1"],
        f"explain sglang=={newest} nixl==1.5.1 sglang-kernel==0.4.10": [
            "explain", f"sglang=={newest}", "nixl==1.5.1", "sglang-kernel==0.4.10"],
        f"explain sglang=={newest} {' '.join(own)}": ["explain", f"sglang=={newest}", *own],
    }
    # ``pins`` and ``constraints`` of files pinning extensions beside SGLang (no mooncake)
    import tempfile

    pinned = tempfile.TemporaryDirectory(prefix="moonpin-bench-pins-")
    for name, lines in (("nixl", ["nixl==1.5.1", "sglang-kernel==0.4.10"]), ("own", own)):
        path = os.path.join(pinned.name, f"{name}.txt")
        with open(path, "w") as f:
            f.write("".join(f"{x}\n" for x in [f"sglang=={newest}", *lines]))
        clis[f"pins ({' '.join(lines)})"] = ["pins", path, "--python", "3.12"]
    clis[f"constraints --sglang {newest}"] = ["constraints", "--sglang", newest, "--python",
                                              "3.12"]
    clis = {k: v for k, v in clis.items() if args.only in k}
    pip = [sys.executable, "-m", "pip", "--version"]
    times: dict[str, list[float]] = {name: [] for name in clis}
    pip_t: list[float] = []
    bare = [sys.executable, "-c", "pass"]
    bare_t: list[float] = []
    other = args.against.resolve() if args.against else None
    theirs: dict[str, list[float]] = {name: [] for name in clis}
    # Each checkout keeps its own cache folder, as one installed moonpin does: the memo of
    # file facts (moonpin.kb.cache.facts_memo) is stamped with the moonpin sources that
    # computed it, so two checkouts (or anyone else's runs) sharing one folder would throw
    # each other's answers away on every run and time the rebuild (the KB's sha256, the
    # tables' shape checks, an fsync'd write) instead of the query.
    import tempfile

    caches = tempfile.TemporaryDirectory(prefix="moonpin-bench-")
    ours_env = {**CHILD_ENV, "MOONPIN_CACHE_DIR": os.path.join(caches.name, "ours")}
    theirs_env = {**CHILD_ENV, "MOONPIN_CACHE_DIR": os.path.join(caches.name, "theirs")}
    for _ in range(args.runs):  # alternated, so each sees the same machine
        for name, argv in clis.items():
            a = time.perf_counter()
            subprocess.run([sys.executable, "-m", "moonpin", *kb_arg, *argv], cwd=ROOT,
                           stdout=subprocess.DEVNULL, check=False, env=ours_env)
            times[name].append(time.perf_counter() - a)
            if other is not None:
                a = time.perf_counter()
                subprocess.run([sys.executable, "-m", "moonpin", "--kb",
                                str(other / "data" / "kb.json"), *argv], cwd=other,
                               stdout=subprocess.DEVNULL, check=False, env=theirs_env)
                theirs[name].append(time.perf_counter() - a)
        for cmd, sink in ((pip, pip_t), (bare, bare_t)):
            a = time.perf_counter()
            subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, check=False, env=CHILD_ENV)
            sink.append(time.perf_counter() - a)
    caches.cleanup()
    p = statistics.median(pip_t)
    print(f"`pip --version` median {1000 * p:.0f} ms; `python -c pass` median "
          f"{1000 * statistics.median(bare_t):.0f} ms ({args.runs} runs each, alternated)")
    for name, xs in times.items():
        c = statistics.median(xs)
        print(f"cold CLI `moonpin {name}` median {1000 * c:.0f} ms; ratio to pip "
              f"{c / p:.2f} (goal <= 0.3)")
        if other is not None:
            o = statistics.median(theirs[name])
            print(f"    {other}: median {1000 * o:.0f} ms; ratio to pip {o / p:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
