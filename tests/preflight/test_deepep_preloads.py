"""deep_ep's NCCL check reads the preloads through the loader model's one reading of
``LD_PRELOAD`` (:func:`moonpin.preflight.loader.ldso.preload_entries`): separators, tokens,
relative paths and image paths as ld.so takes them, each entry kept as the worker wrote it
for the message and the fix. The rule used to split the variable itself (on any white
space, no tokens), so it saw a preload ld.so ignores and missed one ld.so maps; each value
below is held against the real loader (``/proc/self/maps`` of this interpreter run with it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from moonpin.preflight.loader import ldso
from tests.lib.checkrun import Run
from tests.lib.deepep_sources import deep_ep_image
from tests.lib.extimages import gcc_so
from tests.lib.images import add_dist

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

DEEPEP = ("--gpu-capability", "9.0", "--", "--moe-a2a-backend", "deepep")


def _site(tmp_path: Path) -> Path:
    site = deep_ep_image(tmp_path / "site")
    gcc_so(site / "nvidia/nccl/lib/libnccl.so.2", defines=["ncclGetVersion"],
           soname="libnccl.so.2")
    add_dist(site, "nvidia-nccl-cu13", "2.30.7",
             files=["nvidia/nccl/lib/libnccl.so.2", "nvidia/nccl/__init__.py"])
    return site


def _mapped(value: str, cwd: Path, alt: Path) -> bool:
    """Whether the real loader maps ``alt`` in this interpreter run with ``value``."""
    code = ("import sys\nsys.stdout.write(str(any(l.split()[-1] == sys.argv[1] for l in "
            "open('/proc/self/maps') if len(l.split()) > 5)))")
    proc = subprocess.run([sys.executable, "-c", code, os.path.realpath(alt)], cwd=cwd,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "LD_PRELOAD": value})
    return proc.stdout.strip() == "True"


def _check(site: Path, env: dict[str, str], cwd: Path) -> Run:
    """The check of ``site`` run from ``cwd`` with ``env``, as its worker: the variable is
    its own process's too, so the real ld.so's "cannot be preloaded" lines on its stderr
    are expected."""
    cmd = [sys.executable, "-m", "moonpin.preflight", "--site-packages", str(site),
           "--no-deep", *DEEPEP]
    full = {k: v for k, v in os.environ.items() if k != "MOONPIN_KB"}
    full["MOONPIN_CHECK_SYSTEM_LIBS"] = str(site / "_no_system_libs")
    full.update(env)
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=full, timeout=60)
    rest = [e for e in proc.stderr.splitlines() if "from LD_PRELOAD cannot be preloaded" not in e]
    assert not rest, proc.stderr
    return Run(proc)


def _values(alt_dir: Path) -> dict[str, tuple[str, str]]:
    """Each case: (LD_PRELOAD, the folder under ``alt_dir`` its libnccl.so.2 lies in)."""
    up = "../" * len(Path(os.path.realpath(sys.executable)).parent.parts)
    return {
        "plain": (f"{alt_dir}/a/libnccl.so.2", "a"),
        "tab-is-part-of-the-name": (f"{alt_dir}/a/libnccl.so.2\t/x.so", "a"),
        "spaces-colons-empties": (f" :{alt_dir}/a/libnccl.so.2:: /none.so ", "a"),
        "origin": (f"$ORIGIN/{up}{str(alt_dir).lstrip('/')}/a/libnccl.so.2", "a"),
        "origin-braced": (f"${{ORIGIN}}/{up}{str(alt_dir).lstrip('/')}/a/libnccl.so.2", "a"),
        "lib": (f"{alt_dir}/$LIB/libnccl.so.2", ldso.lib_token()),
        "platform": (f"{alt_dir}/$PLATFORM/libnccl.so.2", ldso.platform_token()),
        "relative": ("a/libnccl.so.2", "a"),
        "a-name-searched": ("libnccl.so.2", "a"),
        "a-name-with-a-token": ("${ORIGIN}libnccl.so.2", "a"),
    }


@pytest.mark.parametrize("case", list(_values(Path("/x"))))
def test_deep_eps_preloads_are_the_loaders(tmp_path: Path, case: str) -> None:
    site = _site(tmp_path)
    alt_dir = tmp_path / "alt"
    value, folder = _values(alt_dir)[case]
    alt = gcc_so(alt_dir / folder / "libnccl.so.2", defines=["ncclGetVersion", "ncclNew"],
                 soname="libnccl.so.2")
    real = _mapped(value, alt_dir, alt)
    # the check runs in the worker's working folder (a relative entry is its)
    env = {"CUDA_HOME": "/opt/cuda", "LD_PRELOAD": value}
    r = _check(site, env, alt_dir)
    line = r.line("deep_ep")
    assert ("Duplicate NCCL runtime" in line) is real, (real, r.out)
    if real:  # the message and the fix name the entry as the worker wrote it
        entry = next(e for e in value.replace(":", " ").split(" ") if "libnccl" in e)
        assert f"LD_PRELOAD maps {entry} before" in line, r.out
        assert r.fixes()[0].startswith(f"fix: remove {entry} from LD_PRELOAD"), r.out


def test_the_entries_keep_how_they_were_written(tmp_path: Path) -> None:
    """One reading gives both: the entry as written and what the loader opens."""
    lib = ldso.lib_token()
    got = ldso.preload_entries("/a/$LIB/x.so:\t ${LIB}y.so::libz.so /b/c.so",
                               "/usr/bin/python3")
    assert [(p.written, p.path) for p in got] == [
        ("/a/$LIB/x.so", f"/a/{lib}/x.so"), ("\t", "\t"),
        ("${LIB}y.so", "${LIB}y.so"), ("libz.so", "libz.so"), ("/b/c.so", "/b/c.so")]
    root = tmp_path / "root"
    (root / "opt/pre").mkdir(parents=True)
    (root / "opt/pre/libn.so").write_bytes(b"")
    (root / "opt/link").symlink_to("pre")
    got = ldso.preload_entries("$ORIGIN/../../opt/link/libn.so /opt/none.so rel/x.so libq.so",
                               "/usr/bin/python3", str(root))
    libn = os.path.realpath(root / "opt/pre/libn.so")
    assert [(p.written, os.path.realpath(p.path) if "/" in p.path else p.path)
            for p in got] == [("$ORIGIN/../../opt/link/libn.so", libn), ("libq.so", "libq.so")]
    (root / "etc").mkdir()
    (root / "etc/ld.so.preload").write_text("# ours\n/opt/link/libn.so\tlibq.so # x\n")
    got = ldso.preload_file(str(root), "/usr/bin/python3")
    assert [(p.written, os.path.realpath(p.path) if "/" in p.path else p.path)
            for p in got] == [("/opt/link/libn.so", libn), ("libq.so", "libq.so")]


@pytest.mark.parametrize("line", [True, False])
def test_a_libnccl_the_site_code_loads_is_a_second_nccl(tmp_path: Path, line: bool) -> None:
    """A ``.pth`` ``import`` line whose module loads another ``libnccl.so.2`` with
    ``ctypes`` at every start: it is in ``/proc/self/maps`` when deep_ep's check runs, a
    second NCCL (hunt I: ``AssertionError: Duplicate NCCL runtime`` in a copy of the real
    stack image, while the check, reading only ld.so's preloads, passed). The fix takes the
    line out; without it (the control) the import passes."""
    site = _site(tmp_path)
    alt = gcc_so(tmp_path / "alt" / "libnccl.so.2", defines=["ncclGetVersion", "ncclNew"],
                 soname="libnccl.so.2")
    (site / "zz_nccl.py").write_text(
        f"import ctypes\nctypes.CDLL({str(alt)!r}, mode=ctypes.RTLD_GLOBAL)\n")
    pth = site / "zz_nccl.pth"
    pth.write_text("import zz_nccl\n" if line else "")
    r = _check(site, {"CUDA_HOME": "/opt/cuda"}, tmp_path)
    said = r.line("deep_ep")
    assert ("Duplicate NCCL runtime" in said) is line, r.out
    if line:
        assert f"zz_nccl (imported at every start by {pth}) maps {alt} before" in said, r.out
        assert r.fixes()[0].startswith(
            f"fix: remove {alt} from what zz_nccl loads at start (take `import zz_nccl` out "
            f"of {pth})"), r.out
