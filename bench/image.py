"""``moonpin check --image`` of a packed image file next to ``gzip -dc`` of its layers.

    python bench/image.py [--layout PATH] [--venv /tmp/realimg/stack] [--runs N]
                          [--unpack-only] [-- <the worker's launch arguments>]

Packs the venv with umoci under a minimal root (``tests.lib.umoci.pack_venv``, as the
``-m image`` tests do) unless ``--layout`` names such an OCI layout already (an OCI archive
or a docker-archive works too), then, alternately in one run: ``gzip -dc`` of every layer
blob to /dev/null (the floor: every byte of a gzip layer must be inflated to find its
members), and ``moonpin check --image <layout> --no-deep`` end to end in a child
(``--unpack-only``: only the reading of the layers, ``moonpin.readers.image.layers.unpack``).
Prints both side by side with their ratio (goal <= 1.3x), the check's peak memory (the
largest process of its tree, ``ru_maxrss``; goal <= 200 MiB) and the most the check's
temporary folder ever held (sampled every 0.2 s; the files it keeps of the image).
Default launch arguments: Dynamo's elastic-EP worker (``--moe-a2a-backend nixl
--elastic-ep-backend mooncake``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: Runs the measured command in a child and prints its wall time and the largest RSS of
#: any process of its tree (RUSAGE_CHILDREN: the largest waited-for descendant).
_WRAP = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "rc": p.returncode, "out": p.stdout[-4000:],
                  "err": p.stderr[-2000:],
                  "maxrss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""
_UNPACK = """
import os, sys, tempfile
sys.path.insert(0, sys.argv[2])
from moonpin.readers.image.manifest import open_image
from moonpin.readers.image.layers import unpack
with tempfile.TemporaryDirectory() as dest:
    img = open_image(sys.argv[1])
    unpack(img, dest)
    print(img.describe())
"""


def _blobs(layout: Path) -> list[Path]:
    from moonpin.readers.image.manifest import open_image

    img = open_image(str(layout))
    if not layout.is_dir():
        raise SystemExit("gzip -dc needs the layer files: give an OCI layout folder")
    return [layout / layer.name for layer in img.layers]


def time_gzip(blobs: list[Path]) -> float:
    total = 0.0
    for b in blobs:
        with open(b, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        t = time.perf_counter()
        with open(b, "rb") as src:
            subprocess.run(["gzip", "-dc"] if gz else ["cat"], stdin=src,
                           stdout=subprocess.DEVNULL, check=True)
        total += time.perf_counter() - t
    return total


class _TmpWatch:
    """The most a folder (and everything under it) held, sampled while a run lasts."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.peak, self._stop = folder, 0, threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            n = 0
            for d, _dirs, files in os.walk(self.folder):
                for f in files:
                    try:
                        n += os.lstat(os.path.join(d, f)).st_blocks * 512
                    except OSError:
                        pass
            self.peak = max(self.peak, n)

    def __enter__(self) -> _TmpWatch:
        self._t.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._t.join()


def time_check(layout: Path, scratch: Path, launch: list[str], unpack_only: bool
               ) -> dict[str, object]:
    tmp = scratch / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp), "MOONPIN_CHECK_MEMO": "0"}
    cmd = ([sys.executable, "-c", _UNPACK, str(layout), str(ROOT)] if unpack_only else
           [sys.executable, "-m", "moonpin", "check", "--image", str(layout), "--no-deep",
            "--", *launch])
    with _TmpWatch(tmp) as watch:
        out = subprocess.run([sys.executable, "-c", _WRAP, *cmd], capture_output=True,
                             text=True, check=True, cwd=ROOT, env=env)
    res: dict[str, object] = json.loads(out.stdout)
    res["tmp_peak"] = watch.peak
    return res


def main() -> None:
    argv = sys.argv[1:]
    launch = ["--moe-a2a-backend", "nixl", "--elastic-ep-backend", "mooncake"]
    if "--" in argv:
        i = argv.index("--")
        argv, launch = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layout", type=Path, help="an OCI layout packed as tests/lib/umoci.py does")
    ap.add_argument("--venv", type=Path, default=Path("/tmp/realimg/stack"))
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--unpack-only", action="store_true",
                    help="time the reading of the layers only, not the whole check")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="moonpin-bench-image-") as tmp:
        scratch = Path(tmp)
        layout = args.layout
        if layout is None:
            from tests.lib.umoci import pack_venv

            site = next((args.venv / "lib").glob("python3*/site-packages"))
            sglang = next(site.glob("sglang-*.dist-info"))
            t = time.perf_counter()
            layout = pack_venv(scratch / "oci", args.venv,
                               replaced=str((site / "sglang/version.py").relative_to(args.venv)),
                               deleted=str((sglang / "INSTALLER").relative_to(args.venv)))
            print(f"packed {args.venv} with umoci in {time.perf_counter() - t:.0f} s")
        blobs = _blobs(layout)
        stored = sum(b.stat().st_size for b in blobs)
        ours: list[float] = []
        theirs: list[float] = []
        rss = tmp_peak = 0
        res: dict[str, object] = {}
        for _ in range(args.runs):
            theirs.append(time_gzip(blobs))
            res = time_check(layout, scratch, launch, args.unpack_only)
            ours.append(float(res["seconds"]))  # type: ignore[arg-type]
            rss = max(rss, int(res["maxrss_kib"]))  # type: ignore[call-overload]
            tmp_peak = max(tmp_peak, int(res["tmp_peak"]))  # type: ignore[call-overload]
        what = "unpack of the layers" if args.unpack_only else "check --image, end to end"
        o, t_ = min(ours), min(theirs)
        out = str(res.get("out", "")).strip().splitlines()
        print(f"image: {layout}, {len(blobs)} layers, {stored / 2**30:.2f} GiB stored")
        print(f"{'gzip -dc of the layers':28s} {t_:7.1f} s  (runs: "
              + ", ".join(f"{x:.1f}" for x in theirs) + ")")
        print(f"{what:28s} {o:7.1f} s  (runs: " + ", ".join(f"{x:.1f}" for x in ours)
              + f"; exit {res.get('rc')})")
        print(f"ratio: {o / t_:.2f}x (goal <= 1.3x)")
        print(f"peak memory of the check's processes: {rss / 1024:.0f} MiB (goal <= 200 MiB)")
        print(f"most the temporary folder held: {tmp_peak / 2**20:.0f} MiB")
        if out:
            print("last line of the check: " + out[-1])


if __name__ == "__main__":
    main()
