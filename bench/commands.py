"""Every command the docs show, cold, against `pip --version`, side by side in one run.

    python bench/commands.py [--runs N] [--kb PATH] [--only SUBSTRING]

Each command runs as a fresh `moonpin` process (the installed script beside this
interpreter) on the shipped KB (or ``--kb``), alternating with `pip --version` run by the
same interpreter, so both see the same machine at the same moment. Prints one line per
command: its median wall time, the median of the `pip --version` runs taken next to it,
and the ratio (issue #15's goal: <= 0.30). Exit 0 always: it measures, it does not judge.
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
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--kb", type=Path, help="a KB other than the shipped one")
    ap.add_argument("--only", help="run only commands containing this text")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text(f"sglang==0.5.18\ntorch==2.13.0\n{CUDA13}\n")
        docker = Path(tmp) / "Dockerfile"  # an arm64 stage on a CUDA 13 image, CUDA 12 mooncake
        docker.write_text("FROM --platform=linux/arm64 lmsysorg/sglang:v0.5.18-cu130\n"
                          "RUN pip install mooncake-transfer-engine==0.3.13.post1\n")
        env = dict(CHILD_ENV, MOONPIN_CACHE_DIR=str(Path(tmp) / "cache"))
        if args.kb:
            env["MOONPIN_KB"] = str(args.kb)
        pip = [sys.executable, "-m", "pip", "--version"]
        worst = 0.0
        print(f"{'command':70} {'moonpin':>9} {'pip':>7} {'ratio':>6}")
        for cmd in COMMANDS:
            argv = [a.replace("{req}", str(req)).replace("{docker}", str(docker)) for a in cmd]
            line = "moonpin " + " ".join(cmd).replace("{req}", "requirements.txt").replace(
                "{docker}", "Dockerfile")
            if args.only and args.only not in line:
                continue
            subprocess.run([str(MOONPIN), *argv], env=env, cwd=tmp, capture_output=True,
                           check=False)  # once to warm the OS's file cache and .pyc files
            ours: list[float] = []
            theirs: list[float] = []
            rc = 0
            for _ in range(args.runs):
                a = time.perf_counter()
                rc = subprocess.run([str(MOONPIN), *argv], env=env, cwd=tmp,
                                    capture_output=True, check=False).returncode
                b = time.perf_counter()
                subprocess.run(pip, env=env, capture_output=True, check=False)
                c = time.perf_counter()
                ours.append(b - a)
                theirs.append(c - b)
            m, p = statistics.median(ours), statistics.median(theirs)
            worst = max(worst, m / p)
            print(f"{line[:70]:70} {1000 * m:7.0f}ms {1000 * p:5.0f}ms {m / p:6.2f}"
                  f"{'' if rc in (0, 1) else f'  (exit {rc})'}")
        print(f"worst ratio {worst:.2f} (goal <= 0.30)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
