"""The light check of a whole-stack worker image next to the imports it stands for.

    python bench/stack.py [--venv /tmp/realimg/stack] [--stubs DIR] [--runs N] [--against DIR]
                          [-- <the worker's launch arguments>]

On a real image's environment (``tests/realimg/stack.sh``: sglang, torch, sglang-kernel,
nixl, sgl-deep-ep, flashinfer, mooncake), alternately in one run:

* the import the check stands for, in a fresh interpreter of that environment: ``import
  torch, sgl_kernel, nixl_ep, flashinfer; from nixl_ep import Buffer`` (what Dynamo's
  elastic-EP line loads but mooncake's process group, which this image compiles at first
  import: timing that would flatter the check). On a host without a GPU it runs on the stub
  driver (``--stubs``, ``tests/realimg/make_libcuda_stub.sh``) with no device visible, as
  ``tests/realimg/probe_stack.py`` does;
* ``python -m moonpin.preflight --python <venv>/bin/python --no-deep --no-cache -- <launch
  arguments>``: the light check, cold (every source read, every build scanned, every symbol
  bound), with the same environment; and the same with its caches warm (every worker start
  after the first).

The goal (issue 39): the cold light check <= 0.25x the import. ``deep_ep`` is not in the
import: sgl-deep-ep refuses to load without a GPU, and torch's device query that lets it
(the stub NVML) makes ``sgl_kernel``'s own fail, so the two cannot share one process here;
leaving it out only makes the import shorter and the ratio harder. ``--against DIR`` times
another moonpin tree's cold check alternately too (the previous commit:
``git archive HEAD~1 | tar -x -C DIR``). Default launch arguments: Dynamo's elastic-EP worker
(``--elastic-ep-backend mooncake --moe-a2a-backend nixl``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMPORT = "import torch, sgl_kernel, nixl_ep, flashinfer; from nixl_ep import Buffer"
DYNAMO = ["--elastic-ep-backend", "mooncake", "--moe-a2a-backend", "nixl"]


#: Runs the measured command in a child of its own and prints its wall time, exit code and
#: the largest RSS of any process of its tree (RUSAGE_CHILDREN of this wrapper alone).
_WRAP = """
import resource, subprocess, sys, time
t = time.perf_counter()
p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
dt = time.perf_counter() - t
print(dt, p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, int, int]:
    """(wall seconds, exit code, peak RSS in KiB) of one run of ``cmd``."""
    out = subprocess.run([sys.executable, "-c", _WRAP, *cmd], env=env, cwd=cwd,
                         capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), int(out[1]), int(out[2])


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--venv", type=Path, default=Path("/tmp/realimg/stack"))
    ap.add_argument("--stubs", type=Path, default=Path("/tmp/realimg/stack-stubs"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--against", type=Path, metavar="DIR")
    ap.add_argument("launch", nargs="*", help="the worker's launch arguments (after --)")
    args = ap.parse_args()
    python = args.venv / "bin" / "python"
    if not python.exists():
        ap.error(f"{python} does not exist: build it with tests/realimg/stack.sh")
    launch = args.launch or DYNAMO
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MOONPIN_", "VIRTUAL_ENV", "PYTHONPATH"))
           and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(LD_LIBRARY_PATH=str(args.stubs), CUDA_VISIBLE_DEVICES="")
    with tempfile.TemporaryDirectory() as tmp:
        env["MOONPIN_CACHE_DIR"] = str(Path(tmp) / "cache")
        env["FLASHINFER_WORKSPACE_BASE"] = str(Path(tmp) / "flashinfer")
        imp = [str(python), "-c", IMPORT]
        check = [sys.executable, "-m", "moonpin.preflight", "--python", str(python),
                 "--no-deep", "--", *launch]
        cold = [*check[:-len(launch) - 1], "--no-cache", "--", *launch]
        trees = [("this tree", ROOT)]
        if args.against:
            trees.append((str(args.against), args.against.resolve()))
        rc_imp = timed(imp, env, ROOT)[1]
        if rc_imp != 0:
            print(f"the import fails in {args.venv} (exit {rc_imp}): not a working image",
                  file=sys.stderr)
            return 2
        codes = {name: timed(check, env, tree)[1] for name, tree in trees}  # warms the cache
        t_imp: list[float] = []
        t_cold: dict[str, list[float]] = {name: [] for name, _ in trees}
        t_warm: list[float] = []
        peak = {name: 0 for name, _ in trees}
        load = os.getloadavg()[0]
        for _ in range(args.runs):
            t_imp.append(timed(imp, env, ROOT)[0])
            for name, tree in trees:
                took, _, rss = timed(cold, env, tree)
                t_cold[name].append(took)
                peak[name] = max(peak[name], rss)
            t_warm.append(timed(check, env, ROOT)[0])
    i = statistics.median(t_imp)
    print(f"{args.runs} runs alternated on {args.venv}; launch: {' '.join(launch)}; "
          f"check exit codes {codes}; load average {load:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end")
    print(f"  {'import (' + IMPORT + ')':70s} {i:6.2f} s")
    for name, _ in trees:
        c = statistics.median(t_cold[name])
        print(f"  {'light check, cold (--no-cache), ' + name:70s} {c:6.2f} s  "
              f"{c / i:.2f}x the import (goal <= 0.25x); peak memory "
              f"{peak[name] / 1024:.0f} MiB")
    w = statistics.median(t_warm)
    print(f"  {'light check, caches warm':70s} {w:6.2f} s  {w / i:.2f}x the import")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
