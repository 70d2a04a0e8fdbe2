"""Runtime check speed: light mode next to a bare interpreter, deep mode next to `import torch`.

    python bench/check.py [--runs N] [--site-packages PATH] [--kb PATH]

Light mode: wall time of `python -m moonpin.resolver.check --elastic-ep-backend mooncake` over a
healthy fake image (built in a temp folder from tests/lib/images.py unless --site-packages
names a real one), as a ratio to `python -c pass`, the two run alternately so both see the
same machine (goal: <= 3x). Timed twice: with moonpin's caches warm (every worker start
after the image's first check: the SGLang source analysis and the file-facts memo) and with
`--no-cache` (every source read, the files that can import the process-group module parsed,
every build scanned). Also printed: the skip path (the fixed cost of `python -m`) and the
stat walk alone that validates the source cache. Deep mode (goal <= 1.2x
`python -c "import torch"`) needs a site-packages folder with a real torch
(`--site-packages PATH`); it is timed next to `python -c "import torch"` with the same
PYTHONPATH.
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


#: Times, in a fresh interpreter, the stat walk that validates the SGLang source cache.
_STAT_WALK = """
import os, sys, time
from moonpin.resolver.check.sources import _stat_tree
pkg = os.path.join(sys.argv[1], "sglang")
t = time.perf_counter()
tree = _stat_tree(pkg) if os.path.isdir(pkg) else {}
print(len(tree), time.perf_counter() - t)
"""


def wall(cmd: list[str], env: dict[str, str] | None = None) -> float:
    return measured(cmd, env)[0]


def measured(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int]:
    """Wall time and peak resident memory (KiB, the child's own ru_maxrss) of one run."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env or CHILD_ENV)
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0  # reaped above
    return time.perf_counter() - t0, usage.ru_maxrss


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--site-packages", type=Path)
    ap.add_argument("--kb", type=Path)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        CHILD_ENV["MOONPIN_CACHE_DIR"] = str(Path(tmp) / "cache")
        site = args.site_packages
        if site is None:
            from tests.lib.images import healthy_image

            site = healthy_image(Path(tmp) / "site")
        check = [sys.executable, "-m", "moonpin.resolver.check", "--elastic-ep-backend", "mooncake",
                 "--site-packages", str(site), "--no-deep"]
        if args.kb:
            check += ["--kb", str(args.kb)]
        rc = subprocess.run(check, cwd=ROOT, capture_output=True, check=False).returncode
        bare = [sys.executable, "-c", "pass"]
        # What a light check cannot skip on this image: the interpreter, runpy (`python -m`)
        # and moonpin's modules (the skip path), then one stat per SGLang source, which
        # validates the source cache the way bytecode is validated.
        stats = [sys.executable, "-c", _STAT_WALK, str(site)]
        skip = [sys.executable, "-m", "moonpin.resolver.check"]
        wall(check)
        wall(bare)  # warm the page cache
        t_check: list[float] = []
        t_bare: list[float] = []
        t_skip: list[float] = []
        t_cold: list[float] = []
        walk: list[float] = []
        files = 0
        for _ in range(args.runs):
            t_bare.append(wall(bare))
            out = subprocess.run(stats, cwd=ROOT, capture_output=True, text=True, check=False,
                                 env=CHILD_ENV).stdout.split()
            if out:
                files, took = int(out[0]), float(out[1])
                walk.append(took)
            t_check.append(wall(check))
            t_cold.append(wall([*check, "--no-cache"]))
            t_skip.append(wall(skip))
    b, c, s, n = (statistics.median(x) for x in (t_bare, t_check, t_skip, t_cold))
    print(f"python -c pass              median {b * 1000:7.1f} ms  ({args.runs} runs)")
    print(f"check, mooncake requested   median {c * 1000:7.1f} ms  ratio {c / b:.2f}x, "
          f"+{(c - b) * 1000:.0f} ms (goal <= 3x, about +50 ms; exit code {rc}; "
          "caches warm)")
    print(f"check, --no-cache           median {n * 1000:7.1f} ms  ratio {n / b:.2f}x, "
          f"+{(n - b) * 1000:.0f} ms (every SGLang source read, every build scanned)")
    print(f"check, not requested (skip) median {s * 1000:7.1f} ms  ratio {s / b:.2f}x "
          "(interpreter, runpy and moonpin's modules: the floor of `python -m`)")
    if walk:
        w = statistics.median(walk)
        print(f"  of the warm check: one stat per SGLang source, {files} files: {w * 1000:.1f} ms "
              f"({w / b:.2f}x a bare start)")
    if args.site_packages is not None and (args.site_packages / "mooncake").is_dir():
        # The light check against what it stands for: importing the module SGLang imports
        # (torch, then the build ld.so binds), alternated, with this environment's
        # LD_LIBRARY_PATH (a host without a GPU needs the stub libcuda.so.1 there).
        ienv = {**CHILD_ENV, "PYTHONPATH": str(args.site_packages)}
        imp = [sys.executable, "-c", "import mooncake.pg"]
        t_imp, t_warm, t_nc, m_warm, m_nc = [], [], [], [], []
        for _ in range(max(3, args.runs // 3)):
            t_imp.append(wall(imp, ienv))
            took, rss = measured(check)
            t_warm.append(took)
            m_warm.append(rss)
            took, rss = measured([*check, "--no-cache"])
            t_nc.append(took)
            m_nc.append(rss)
        i, w, nc = (statistics.median(x) for x in (t_imp, t_warm, t_nc))
        print(f"`import mooncake.pg`        median {i * 1000:7.1f} ms; light check warm "
              f"{w * 1000:.1f} ms ({w / b:.2f}x python -c pass, goal <= 3x), cold "
              f"{nc * 1000:.1f} ms ({nc / i:.2f}x the import, goal <= 0.25x)")
        print(f"  peak memory: warm {max(m_warm) / 1024:.1f} MiB, cold {max(m_nc) / 1024:.1f} "
              "MiB (goal < 50 MiB)")
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
