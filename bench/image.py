"""Reading an image file: moonpin's unpack next to decompressing its layers with tar.

    python bench/image.py [--layout PATH] [--venv /tmp/realimg/venv] [--runs N]

Packs the real venv with umoci under a minimal root (tests/lib/umoci.py, as the
``-m image`` test does) unless ``--layout`` names such an OCI layout already, then, side by
side and alternately: ``moonpin.readers.image.layers.unpack`` with the default keep policy in a
child process (its wall time and peak memory, ``ru_maxrss``), and ``tar -xOzf`` of every layer
to /dev/null (sum over the layers, each a subprocess). Prints the seconds, their ratio
(goal <= 1.3x), the bytes kept against the image's bytes, and the peak memory (goal
<= 200 MiB).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_CHILD = """
import json, os, resource, sys, time
sys.path.insert(0, sys.argv[3])
from moonpin.readers.image.manifest import open_image
from moonpin.readers.image.layers import unpack
t = time.perf_counter()
img = open_image(sys.argv[1])
unpack(img, sys.argv[2])
dt = time.perf_counter() - t
kept = 0
for d, _dirs, files in os.walk(sys.argv[2]):
    for f in files:
        p = os.path.join(d, f)
        if not os.path.islink(p):
            kept += os.stat(p).st_size
print(json.dumps({"seconds": dt, "kept": kept, "describe": img.describe(),
                  "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def _layers(layout: Path) -> list[Path]:
    from moonpin.readers.image.manifest import open_image

    img = open_image(str(layout))
    return [layout / layer.name for layer in img.layers]


def time_unpack(layout: Path, scratch: Path) -> dict[str, float]:
    dest = scratch / "dest"
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir()
    out = subprocess.run([sys.executable, "-c", _CHILD, str(layout), str(dest), str(ROOT)],
                         capture_output=True, text=True, check=True)
    shutil.rmtree(dest)
    res: dict[str, float] = json.loads(out.stdout)
    return res


def time_tar(blobs: list[Path]) -> float:
    total = 0.0
    for b in blobs:
        with open(b, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        t = time.perf_counter()
        # umoci 0.4.7 `insert` layers lack the end-of-archive blocks: GNU tar decompresses
        # all of them, then exits 2 ("Unexpected EOF in archive"); the time is the same
        subprocess.run(["tar", "-xOzf" if gz else "-xOf", str(b)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
        total += time.perf_counter() - t
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layout", type=Path, help="an OCI layout packed as tests/lib/umoci.py does")
    ap.add_argument("--venv", type=Path, default=Path("/tmp/realimg/venv"))
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="moonpin-bench-image-") as tmp:
        scratch = Path(tmp)
        layout = args.layout
        if layout is None:
            from tests.lib.umoci import pack_venv

            t = time.perf_counter()
            layout = pack_venv(scratch / "oci", args.venv,
                               replaced="lib/python3.11/site-packages/sglang/version.py",
                               deleted="lib/python3.11/site-packages/sglang-0.5.21.dist-info/"
                                       "INSTALLER")
            print(f"packed {args.venv} with umoci in {time.perf_counter() - t:.0f} s")
        blobs = _layers(layout)
        image_bytes = sum(b.stat().st_size for b in blobs)
        ours, theirs, rss = [], [], 0.0
        res: dict[str, float] = {}
        for _ in range(args.runs):
            theirs.append(time_tar(blobs))
            res = time_unpack(layout, scratch)
            ours.append(res["seconds"])
            rss = max(rss, res["maxrss_kib"])
        o, t_ = min(ours), min(theirs)
        print(f"image: {res['describe']}, {image_bytes / 2**30:.2f} GiB of layers")
        print(f"tar -xOzf of the layers to /dev/null: {t_:.1f} s (runs: "
              + ", ".join(f"{x:.1f}" for x in theirs) + ")")
        print(f"moonpin unpack (default policy):       {o:.1f} s (runs: "
              + ", ".join(f"{x:.1f}" for x in ours) + ")")
        print(f"ratio: {o / t_:.2f}x (goal <= 1.3x)")
        print(f"kept: {res['kept'] / 2**30:.2f} GiB of {image_bytes / 2**30:.2f} GiB stored")
        print(f"peak memory of the unpacking process: {rss / 1024:.0f} MiB (goal <= 200 MiB)")


if __name__ == "__main__":
    main()
