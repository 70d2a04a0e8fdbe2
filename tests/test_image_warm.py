"""Opt-in (``-m image``): on a hard-link copy of the real image of
``../shared/tools/realimg/build.sh`` (``MOONPIN_TEST_REALIMG``), a warm start of the light
check (its caches written by an earlier check, as in the image build) sees what changed in
SGLang's sources since: an edit in place that leaves the folder's stamp as it was (an editor,
or a file bind-mounted over a source), a new folder with a new source. Each time its verdict
is the one ``--no-cache`` reaches, reading every source, whether the start before it
computed its verdict or replayed the one it kept (moonpin/preflight/verdict.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from moonpin.kb.cache import load
from tests.lib.verdicts import mooncake_rc

pytestmark = pytest.mark.image

ROOT = Path(__file__).resolve().parents[1]
REALIMG = os.environ.get("MOONPIN_TEST_REALIMG")
SITE = "lib/python3.11/site-packages"
ELASTIC = "sglang/srt/elastic_ep/elastic_ep.py"


def _check(site: Path, cache: Path, *extra: str) -> tuple[int, str]:
    assert REALIMG is not None
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MOONPIN_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env["LD_LIBRARY_PATH"] = str(Path(REALIMG) / "stubs")
    env["MOONPIN_CACHE_DIR"] = str(cache)
    proc = subprocess.run([sys.executable, "-m", "moonpin.preflight", "--site-packages",
                           str(site), "--elastic-ep-backend", "mooncake", "--no-deep", *extra],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert proc.returncode in (0, 1), proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if "  sglang: " in ln)
    # the image holds no sgl_kernel nor flashinfer (the check says so): mooncake's verdict
    return mooncake_rc(proc.stdout), line


def _inodes(img: Path) -> dict[str, tuple[int, int]]:
    """(ctime, link count) of every file of the copy."""
    out = {}
    for folder, _, files in os.walk(img):
        for name in files:
            st = os.lstat(os.path.join(folder, name))
            out[os.path.join(folder, name)] = (st.st_ctime_ns, st.st_nlink)
    return out


#: how long to wait for the shared image's files to hold still through one check
QUIET_S = 120.0


def _kept(img: Path, site: Path, cache: Path, first: tuple[int, str]) -> None:
    """A warm unchanged start gives ``first`` and keeps its verdict. The copy's files are
    hard links of the shared image's, so another job's ``cp -al`` or clean-up of its own
    copy changes their link count, hence their ctime (the verdict's stamp): a run during
    that is rightly not kept ("a file changed too recently"). Such a run is tried again,
    once it is seen that some file's ctime or link count moved while nothing here wrote;
    a run not kept while every file held still fails."""
    deadline = time.monotonic() + QUIET_S
    while True:
        before = _inodes(img)
        assert _check(site, cache) == first
        if list(cache.glob("check-verdict-*.marshal")):
            return
        moved = sum(1 for k, v in _inodes(img).items() if before.get(k) != v)
        assert moved, "the verdict was not kept though no file of the image changed"
        if time.monotonic() > deadline:
            pytest.skip(f"other jobs relinked the shared image's files through every try "
                        f"for {QUIET_S:.0f} s ({moved} files moved in the last)")
        time.sleep(1.0)


def test_a_warm_start_sees_what_changed_in_the_sources(tmp_path: Path) -> None:
    if not REALIMG or not (Path(REALIMG) / "venv" / "bin" / "python").exists():
        pytest.fail("set MOONPIN_TEST_REALIMG to the folder build.sh made (with venv/)")
    img = tmp_path / "img"
    subprocess.run(["cp", "-al", str(Path(REALIMG) / "venv"), str(img)], check=True)
    site, cache = img / SITE, tmp_path / "cache"
    first = _check(site, cache)  # the image build's check: writes the caches
    assert first[0] == 0 and "join_group" in first[1]
    (stamps,) = cache.glob("check-stamps-*.marshal")
    doc = load(stamps)
    assert isinstance(doc, dict) and doc["scan"] is not None
    assert doc["relist"] == []  # every folder trusted by its stamp: nothing listed again
    _kept(img, site, cache, first)  # control: warm, unchanged (its verdict kept)
    assert _check(site, cache) == first  # replayed

    source = site / ELASTIC
    folder = source.parent
    kept = folder.stat()
    own = source.with_name(source.name + ".own")  # never edit through the hard link
    shutil.copy2(source, own)
    os.replace(own, source)
    with open(source, "a") as f:  # an edit in place: the folder's stamp does not change
        f.write("\n\ndef _hot_fix():\n    from mooncake.pg import hot_fixed_name\n")
    os.utime(folder, ns=(kept.st_atime_ns, kept.st_mtime_ns))
    assert folder.stat().st_mtime_ns == kept.st_mtime_ns
    warm = _check(site, cache)
    assert warm == _check(site, cache, "--no-cache")
    assert warm[0] == 1 and "hot_fixed_name" in warm[1]

    new = site / "sglang" / "srt" / "hot_fix_pkg"
    new.mkdir()
    (new / "patch.py").write_text("from mooncake.pg import another_new_name\n")
    warm = _check(site, cache)
    assert warm == _check(site, cache, "--no-cache")
    assert "another_new_name" in warm[1] and "hot_fixed_name" in warm[1]
