"""Every command the docs show, cold, against `pip --version`, side by side in one run.

    python bench/commands.py [--runs N] [--kb PATH] [--only SUBSTRING] [--against CHECKOUT]

Each command runs as a fresh `moonpin` process (the installed script beside this
interpreter) on the shipped KB (or ``--kb``), alternating with `pip --version` run by the
same interpreter, so both see the same machine at the same moment. Prints one line per
command: its median wall time, the median of the `pip --version` runs taken next to it,
the ratio (issue #15's goal: <= 0.30), and the median CPU time (user + system) of each,
with their ratio: on a loaded machine the wall times wait for a core, the CPU times much
less. ``--against`` times another checkout's sources (and its own data/) too, alternately,
on the line below each command. Exit 0 always: it measures, it does not judge.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MOONPIN = Path(sys.executable).with_name("moonpin")

#: Children may write .pyc files, as an installed package has them.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

CUDA13 = "mooncake-transfer-engine-cuda13==0.3.13.post1"

#: The commands the README and the docs show (quick start and guides), with real values.
COMMANDS: list[list[str]] = [
    ["--version"],
    ["which", "mooncake", "--sglang", "0.5.18"],
    ["which", "mooncake", "--sglang", "0.5.18", "--python", "3.12", "--arch", "x86_64"],
    ["which", "mooncake", "--sglang", "0.5.18", "--torch", "2.13.0"],
    ["which", "mooncake", "--sglang", "v0.5.18"],
    ["which", "mooncake", "--sglang", "0.5.99"],
    ["which", "sglang", "--mooncake", CUDA13],
    ["which", "torch", "--sglang", "0.5.18", "--mooncake", CUDA13],
    ["explain", "sglang==0.5.18", CUDA13],
    ["explain", "sglang==0.5.17", "mooncake-transfer-engine==0.3.8", "--python", "3.12",
     "--arch", "x86_64"],
    ["triples", "--sglang", "0.5.18"],
    ["triples", "--sglang", ">=0.5.17"],
    ["show", "sglang==0.5.18"],
    ["show", CUDA13],
    ["show", "torch==2.13.0"],
    ["kb", "info"],
    ["pins", "{req}"],
    ["pins", "{docker}", "{req}", "--json", "--diff"],
    ["triples", "--sglang", "0.5.18", "--torch", "2.13.0+cu126"],
    ["renovate", "{req}"],
    ["constraints", "--sglang", "0.5.18", "--python", "3.12", "--arch", "x86_64"],
    ["constraints", "--sglang", "0.5.23"],  # every extension held (issue 39)
    ["args", "--sglang", "0.5.23", "--", "--model-path", "m", "--elastic-ep-backend",
     "mooncake", "--max-ep-size", "16"],
    ["matrix", "--format", "md"],
    # the native extensions beside SGLang (issue 39): which, explain, pins, renovate, triples
    ["which", "nixl", "--sglang", "0.5.23", "--torch", "2.14.1"],
    ["which", "nixl", "--torch", "2.14.1", "--python", "3.12", "--arch", "x86_64", "--why"],
    ["which", "sglang-kernel", "--sglang", "0.5.23"],
    ["which", "sgl-deep-ep", "--sglang", "0.5.23"],
    ["which", "flashinfer-python", "--sglang", "0.5.23"],
    ["explain", "sglang==0.5.23", "torch==2.14.1", "nixl==1.5.1", "sglang-kernel==0.4.10",
     "sgl-deep-ep==0.1.2.post1", "flashinfer-python==0.7.2", "--python", "3.12", "--arch",
     "x86_64"],
    ["pins", "{ext}"],
    ["renovate", "{ext}"],
    ["triples", "--sglang", "0.5.23"],
]


def _children_cpu() -> float:
    """User plus system CPU seconds of the children waited for so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _timed(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system) and exit status of one run of argv."""
    a, ca = time.perf_counter(), _children_cpu()
    rc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, check=False).returncode
    return time.perf_counter() - a, _children_cpu() - ca, rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--kb", type=Path, help="a KB other than the shipped one")
    ap.add_argument("--only", help="run only commands containing this text")
    ap.add_argument("--against", type=Path,
                    help="another checkout of moonpin (its sources and its own data/), run "
                         "by this interpreter alternately with this one's, in the same run")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text(f"sglang==0.5.18\ntorch==2.13.0\n{CUDA13}\n")
        ext = Path(tmp) / "requirements-ext.txt"  # SGLang 0.5.23's worker with nixl
        ext.write_text("sglang==0.5.23\ntorch==2.14.1\nnixl==1.5.1\nsglang-kernel==0.4.10\n"
                       "sgl-deep-ep==0.1.2.post1\nflashinfer-python==0.7.2\n")
        docker = Path(tmp) / "Dockerfile"  # an arm64 stage on a CUDA 13 image, CUDA 12 mooncake
        docker.write_text("FROM --platform=linux/arm64 lmsysorg/sglang:v0.5.18-cu130\n"
                          "RUN pip install mooncake-transfer-engine==0.3.13.post1\n")
        env = dict(CHILD_ENV, MOONPIN_CACHE_DIR=str(Path(tmp) / "cache"))
        if args.kb:
            env["MOONPIN_KB"] = str(args.kb)
        # The other checkout: its package first on sys.path, its own cache folder (the
        # memo of file facts is stamped with the sources that computed it).
        other_env = None
        if args.against:
            other_env = dict(env, PYTHONPATH=str(args.against.resolve()),
                             MOONPIN_CACHE_DIR=str(Path(tmp) / "cache-other"))
        pip = [sys.executable, "-m", "pip", "--version"]
        worst = worst_cpu = 0.0
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"{'command':70} {'moonpin':>9} {'pip':>7} {'ratio':>6} {'CPU':>7} "
              f"{'pip':>7} {'ratio':>5}")
        for cmd in COMMANDS:
            argv = [a.replace("{req}", str(req)).replace("{docker}", str(docker))
                    .replace("{ext}", str(ext)) for a in cmd]
            line = "moonpin " + " ".join(cmd).replace("{req}", "requirements.txt").replace(
                "{docker}", "Dockerfile").replace("{ext}", "requirements-ext.txt")
            if args.only and args.only not in line:
                continue
            runs = {"ours": ([str(MOONPIN), *argv], env)}
            if other_env is not None:
                runs["theirs"] = ([str(MOONPIN), *argv], other_env)
            for cmdline, e in runs.values():  # once to warm the file cache and .pyc files
                _timed(cmdline, e, tmp)
            wall: dict[str, list[float]] = {k: [] for k in [*runs, "pip"]}
            cpu: dict[str, list[float]] = {k: [] for k in [*runs, "pip"]}
            rc = 0
            for _ in range(args.runs):  # alternated, so each sees the same machine
                for key, (cmdline, e) in [*runs.items(), ("pip", (pip, env))]:
                    w, c, code = _timed(cmdline, e, tmp)
                    wall[key].append(w)
                    cpu[key].append(c)
                    rc = code if key == "ours" else rc
            p, pc = statistics.median(wall["pip"]), statistics.median(cpu["pip"])
            for key in runs:
                m, mc = statistics.median(wall[key]), statistics.median(cpu[key])
                label = line[:70] if key == "ours" else f"    {args.against}"[:70]
                print(f"{label:70} {1000 * m:7.0f}ms {1000 * p:5.0f}ms {m / p:6.2f}"
                      f" {1000 * mc:5.0f}ms {1000 * pc:5.0f}ms {mc / pc:5.2f}"
                      f"{'' if key != 'ours' or rc in (0, 1) else f'  (exit {rc})'}")
                if key == "ours":
                    worst = max(worst, m / p)
                    worst_cpu = max(worst_cpu, mc / pc)
        print(f"worst ratio {worst:.2f} wall, {worst_cpu:.2f} CPU (goal <= 0.30); load "
              f"average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
