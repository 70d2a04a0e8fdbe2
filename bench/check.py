"""Runtime check speed: light mode next to a bare interpreter and an import, deep mode next to
`import torch`.

    python bench/check.py [--runs N] [--site-packages PATH] [--kb PATH] [--against DIR]

Light mode: wall time of `python -m moonpin.preflight --elastic-ep-backend mooncake
--no-deep` over a healthy fake image (built in a temp folder from tests/lib/images.py unless
--site-packages names a real one), with moonpin's caches warm (every worker start after the
image's first check: the kept verdict replayed, moonpin/preflight/verdict.py; also timed
recomputed from the memos below it, `MOONPIN_CHECK_MEMO=0`) and cold (`--no-cache`: every
SGLang source read, every build scanned, every symbol bound), each as a ratio to `python -c
pass` and to `python -c "import mooncake.pg"` (the import the check stands for; only with
--site-packages of an image with mooncake, on this environment's LD_LIBRARY_PATH: a host
without a GPU needs the stub libcuda.so.1 there), all run alternately so that each sees the
same machine. Goals: warm <= 3x `python -c pass`, cold <= 0.25x the import, peak memory
(each child's own ru_maxrss) < 50 MiB. Also printed: the skip path (the fixed cost of
`python -m`) and, in a fresh interpreter, the warm start's validation of the SGLang source
cache alone (the stamps file: one stat per folder and per source, no walk of the importer
model). Deep mode (goal <= 1.2x
`python -c "import torch"`) needs a site-packages folder with a real torch; it is timed next
to `python -c "import torch"` with the same PYTHONPATH.

`--against DIR` times the light check (warm, recomputed, cold) of another moonpin tree too
(the previous commit: `git archive HEAD~1 | tar -x -C DIR`), run alternately with this one's
in the same run on the same image, each with its own cache folder, so that a change is
measured side by side on the same machine load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


#: Children may write .pyc files, as an installed package has them: this machine sets
#: PYTHONDONTWRITEBYTECODE, which would time compiling moonpin's sources on every run.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


#: Times, in a fresh interpreter, what a warm start spends validating the SGLang source
#: cache: loading the stamps file, one stat per folder, path, file and source the walk and
#: the scan read (moonpin.preflight.installed.stamps), and the analyzer's hash; a walk fails it.
_STAMP_CHECK = """
import sys, time
from moonpin.preflight.installed import image_facts as im, sources
from moonpin.preflight.env import target
from moonpin.preflight.env.context import Context
ctx = Context.of(target.from_site_packages([sys.argv[1]]))
def walk(*_):
    raise SystemExit("walked")
im.package_sources = walk
t = time.perf_counter()
src = im.sglang_sources(ctx)
facts = sources.scan(src)
took = time.perf_counter() - t
doc = src.stamps.doc
print(src.count(), len(doc["groups"]) + len(doc["folders"]), int(facts.cache == "warm"),
      took)
"""


def wall(cmd: list[str], env: dict[str, str] | None = None) -> float:
    return measured(cmd, env)[0]


#: CPU seconds (user + system) of each run, by command: on a shared machine the wall time
#: swings with the other load, the CPU time much less.
CPU: dict[str, list[float]] = {}


def measured(cmd: list[str], env: dict[str, str] | None = None,
             tag: str = "", cwd: Path = ROOT) -> tuple[float, int]:
    """Wall time and peak resident memory (KiB, the child's own ru_maxrss) of one run; its
    CPU time goes to :data:`CPU` (under the command and ``tag``); ``cwd``: the moonpin tree
    whose ``python -m moonpin.preflight`` runs."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env or CHILD_ENV)
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0  # reaped above
    CPU.setdefault(" ".join(cmd) + tag, []).append(usage.ru_utime + usage.ru_stime)
    return time.perf_counter() - t0, usage.ru_maxrss


def _cpu(cmd: list[str], tag: str = "") -> float:
    return statistics.median(CPU[" ".join(cmd) + tag])


def _date_back(tree: Path) -> None:
    """Every file and folder under ``tree`` an hour older."""
    for folder, _, names in os.walk(tree, topdown=False):
        for p in [*(os.path.join(folder, n) for n in names), folder]:
            st = os.stat(p)
            os.utime(p, ns=(st.st_atime_ns - 3600 * 10**9, st.st_mtime_ns - 3600 * 10**9))


def _row(label: str, t: float, bare: float, imp: float | None, cpu: float,
         rss: int | None = None, goal: str = "") -> str:
    vs_imp = f"{t / imp:7.3f}x" if imp else "       -"
    mem = f"{rss / 1024:6.1f} MiB" if rss is not None else ""
    return (f"{label:34s} {t * 1000:8.1f} ms  {t / bare:6.2f}x  {cpu:6.2f}x  {vs_imp}  "
            f"{mem:10s} {goal}").rstrip()


def _check_module(tree: Path) -> str | None:
    """The module ``python -m`` runs for the check in a moonpin tree (its package's names
    through the layout's history)."""
    for name in ("preflight", "check", "resolver/check"):
        if (tree / "moonpin" / name / "__main__.py").is_file():
            return "moonpin." + name.replace("/", ".")
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--site-packages", type=Path)
    ap.add_argument("--kb", type=Path)
    ap.add_argument("--against", type=Path, metavar="DIR",
                    help="another moonpin tree (the previous commit) timed alternately")
    args = ap.parse_args()
    other = args.against.resolve() if args.against else None
    omodule = _check_module(other) if other is not None else None
    if other is not None and omodule is None:
        ap.error(f"{other} holds no moonpin/preflight/__main__.py (nor an older layout's)")

    with tempfile.TemporaryDirectory() as tmp:
        CHILD_ENV["MOONPIN_CACHE_DIR"] = str(Path(tmp) / "cache")
        site = args.site_packages
        if site is None:
            from tests.lib.images import healthy_image

            site = healthy_image(Path(tmp) / "site")
            _date_back(site)  # as an image built earlier is (recent folders are re-listed)
        check = [sys.executable, "-m", "moonpin.preflight", "--elastic-ep-backend", "mooncake",
                 "--site-packages", str(site), "--no-deep"]
        if args.kb:
            check += ["--kb", str(args.kb)]
        rc = subprocess.run(check, cwd=ROOT, capture_output=True, check=False,
                            env=CHILD_ENV).returncode
        bare = [sys.executable, "-c", "pass"]
        # What a light check cannot skip on this image: the interpreter, runpy (`python -m`)
        # and moonpin's modules (the skip path), then one stat per SGLang folder and source
        # (and per path and file the importer walk read), which validates the source cache
        # the way bytecode is validated.
        stamps = [sys.executable, "-c", _STAMP_CHECK, str(site)]
        skip = [sys.executable, "-m", "moonpin.preflight"]
        cold = [*check, "--no-cache"]
        ocheck = [sys.executable, "-m", omodule or "", *check[3:]]  # the other tree's
        ocold = [*ocheck, "--no-cache"]
        with_mooncake = args.site_packages is not None and (site / "mooncake").is_dir()
        imp = [sys.executable, "-c", "import mooncake.pg"]
        ienv = {**CHILD_ENV, "PYTHONPATH": str(site)}
        wall(check)  # a warm start: its verdict is kept (the cold one above forked)
        wall(bare)  # warm the page cache
        # the warm start without the kept verdict: every memo below it walked
        recompute = {**CHILD_ENV, "MOONPIN_CHECK_MEMO": "0"}
        t_again: list[float] = []
        t_bare: list[float] = []
        t_warm: list[float] = []
        t_skip: list[float] = []
        m_warm: list[int] = []
        walk: list[float] = []
        files = folders = 0
        # the other tree: its own cache folder (its memos are its own), the same image
        oenv = {**CHILD_ENV, "MOONPIN_CACHE_DIR": str(Path(tmp) / "cache-against")}
        orecompute = {**oenv, "MOONPIN_CHECK_MEMO": "0"}
        o_warm: list[float] = []
        o_again: list[float] = []
        o_cold: list[float] = []
        if other is not None:
            measured(ocheck, oenv, " [against warm-up]", other)  # its cold start, then warm
            measured(ocheck, oenv, " [against warm-up]", other)
        for _ in range(args.runs):
            t_bare.append(wall(bare))
            took, rss = measured(check)
            t_warm.append(took)
            m_warm.append(rss)
            t_skip.append(wall(skip))
            t_again.append(measured(check, recompute, " [recomputed]")[0])
            if other is not None:
                o_warm.append(measured(ocheck, oenv, " [against]", other)[0])
                o_again.append(measured(ocheck, orecompute, " [against recomputed]",
                                        other)[0])
            out = subprocess.run(stamps, cwd=ROOT, capture_output=True, text=True, check=False,
                                 env=CHILD_ENV).stdout.split()
            if len(out) == 4 and out[2] == "1":
                files, folders = int(out[0]), int(out[1])
                walk.append(float(out[3]))
        # the cold check (and the import it stands for) take ~0.3-2 s: fewer runs
        t_bare2: list[float] = []
        t_cold: list[float] = []
        t_imp: list[float] = []
        m_cold: list[int] = []
        for _ in range(max(3, args.runs // 3)):
            t_bare2.append(wall(bare))
            if with_mooncake:
                t_imp.append(wall(imp, ienv))
            took, rss = measured(cold)
            t_cold.append(took)
            m_cold.append(rss)
            if other is not None:
                o_cold.append(measured(ocold, oenv, " [against cold]", other)[0])
    b, w, s, b2, c = (statistics.median(x) for x in (t_bare, t_warm, t_skip, t_bare2, t_cold))
    i = statistics.median(t_imp) if t_imp else None
    cb = _cpu(bare)
    print(f"{args.runs} runs warm, {len(t_cold)} cold, alternated; exit code {rc}; wall "
          "times, and the CPU time (user + system) ratio")
    print(f"{'':34s} {'median':>11s}  {'vs pass':>7s}  {'(cpu)':>7s}  {'vs import':>8s}  "
          f"{'peak':10s}")
    print(_row("python -c pass", b, b, i, 1.0))
    if i is not None:
        print(_row("python -c 'import mooncake.pg'", i, b2, i, _cpu(imp) / cb))
    print(_row("light check, caches warm", w, b, i, _cpu(check) / cb, max(m_warm),
               "goal <= 3x python -c pass, < 50 MiB"))
    print(_row("  the same, verdict recomputed", statistics.median(t_again), b, i,
               _cpu(check, " [recomputed]") / cb, None, "MOONPIN_CHECK_MEMO=0: every memo read"))
    print(_row("light check, cold (--no-cache)", c, b2, i, _cpu(cold) / cb, max(m_cold),
               "goal <= 0.25x the import, < 50 MiB"))
    print(_row("skip path (python -m, no mooncake)", s, b, i, _cpu(skip) / cb, None,
               "interpreter, runpy and moonpin's modules"))
    if other is not None:
        print(f"the same three, {other} (alternated with the above):")
        print(_row("  light check, caches warm", statistics.median(o_warm), b, i,
                   _cpu(ocheck, " [against]") / cb))
        print(_row("  the same, verdict recomputed", statistics.median(o_again), b, i,
                   _cpu(ocheck, " [against recomputed]") / cb))
        print(_row("  light check, cold (--no-cache)", statistics.median(o_cold), b2, i,
                   _cpu(ocold, " [against cold]") / cb))
    if walk:
        v = statistics.median(walk)
        print(f"  of the warm check: the source cache validated ({files} sources, {folders} "
              f"folders: stamps file loaded, one stat each), {v * 1000:.1f} ms in a fresh "
              f"interpreter ({v / b:.2f}x a bare start)")
    if args.site_packages is None or not (args.site_packages / "torch").is_dir():
        print("deep mode: skipped (needs --site-packages PATH of an image with torch)")
        return 0
    env = {**CHILD_ENV, "PYTHONPATH": str(args.site_packages)}
    deep = [c for c in check if c != "--no-deep"] + ["--deep"]
    torch_import = [sys.executable, "-c", "import torch"]

    def wall_env(cmd: list[str]) -> float:
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=False, env=env)
        return time.perf_counter() - t0

    wall_env(torch_import)
    t_deep = [wall_env(deep) for _ in range(max(3, args.runs // 3))]
    t_torch = [wall_env(torch_import) for _ in range(max(3, args.runs // 3))]
    d, t = statistics.median(t_deep), statistics.median(t_torch)
    print(f"check --deep                median {d * 1000:7.1f} ms; `import torch` median "
          f"{t * 1000:7.1f} ms; ratio {d / t:.2f}x (goal <= 1.2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
