"""The check judges loading as the dynamic loader and the importer will (issue: never usable
when it cannot load, never refused when it can). Each broken image has its healthy twin
as the negative control."""

from __future__ import annotations

import os
import platform
import shutil
import struct
import subprocess
import sysconfig
import tempfile
from pathlib import Path

import pytest

from moonpin.preflight.installed.build_facts import UNREADABLE_SCHEME
from moonpin.preflight.loader import ldso
from moonpin.preflight.probe.deep_probe import downgrade_light_libraries
from moonpin.preflight.run import CheckResult
from moonpin.readers.elf import analysis as elf
from tests.lib.checkrun import NOBODY, ROOT, assert_healthy, python_for_nobody, run, small_kb
from tests.lib.elfbuild import build_so
from tests.lib.images import PG_NAMES, ext_suffix, healthy_image
from tests.lib.ldbinding import dlopen_alone

MACHINE = platform.machine() if platform.machine() in ("x86_64", "aarch64") else "x86_64"
OTHER = "aarch64" if MACHINE == "x86_64" else "x86_64"


def _build(site: Path) -> Path:
    return site / "mooncake" / f"pg_2_13_0{ext_suffix()}"


def _good(needed: tuple[str, ...] | list[str] = ("libcudart.so.13", "libtorch.so"),
          **kw: object) -> bytes:
    return build_so(needed=needed, strings=[*PG_NAMES, "mooncake", "mooncake-cpu"],
                    machine=MACHINE, **kw)  # type: ignore[arg-type]


# ----------------------------------------------------------------- DT_RPATH inheritance


def _rpath_image(tmp_path: Path, engine_tag: str) -> Path:
    """mooncake 0.3.10's layout: the build (RUNPATH $ORIGIN) needs engine.so, whose
    DT_RPATH names the wheel's .libs folder; libglog there has no path of its own and
    needs libgflags beside it."""
    site = healthy_image(tmp_path / "site", needed=("engine.so",))
    libs = site / "mooncake_transfer_engine.libs"
    libs.mkdir()
    path = "$ORIGIN:$ORIGIN/../mooncake_transfer_engine.libs"
    kw = {"rpath": path, "runpath": None} if engine_tag == "rpath" else {"runpath": path}
    (site / "mooncake" / "engine.so").write_bytes(
        build_so(needed=["libglog-1.so.0"], strings=[], machine=MACHINE, **kw))  # type: ignore[arg-type]
    (libs / "libglog-1.so.0").write_bytes(
        build_so(needed=["libgflags-2.so.2"], runpath=None, strings=[], machine=MACHINE))
    (libs / "libgflags-2.so.2").write_bytes(build_so(needed=[], strings=[], machine=MACHINE))
    return site


def test_dt_rpath_of_the_loading_object_is_inherited(tmp_path: Path) -> None:
    r = run(_rpath_image(tmp_path, "rpath"), kb=small_kb(tmp_path))
    assert_healthy(r)
    assert "of 4 objects" in r.line("libraries")  # build, engine, libglog, libgflags


def test_dt_runpath_is_not_inherited(tmp_path: Path) -> None:
    # the same chain with DT_RUNPATH on engine.so: libglog's own need is not found
    r = run(_rpath_image(tmp_path, "runpath"), kb=small_kb(tmp_path))
    assert r.rc == 1
    assert "libgflags-2.so.2 (needed by libglog-1.so.0)" in r.line("libraries")


def test_rpath_is_ignored_beside_runpath(tmp_path: Path) -> None:
    site = healthy_image(tmp_path / "site", needed=("libx.so",))
    (site / "mooncake" / "sub").mkdir()
    (site / "mooncake" / "sub" / "libx.so").write_bytes(build_so(needed=[], strings=[]))
    # both tags: DT_RPATH ($ORIGIN/sub, where libx.so is) is ignored
    _build(site).write_bytes(_good(needed=["libcudart.so.13", "libtorch.so", "libx.so"],
                                   runpath="$ORIGIN", rpath="$ORIGIN/sub"))
    r = run(site, kb=small_kb(tmp_path))
    assert r.rc == 1 and "libx.so" in r.line("libraries")
    _build(site).write_bytes(_good(needed=["libcudart.so.13", "libtorch.so", "libx.so"],
                                   runpath=None, rpath="$ORIGIN/sub"))
    assert_healthy(run(site, kb=small_kb(tmp_path)))


@pytest.mark.parametrize(("value", "want"), [
    ("/opt/a::/opt/b", ["/opt/a", "{cwd}", "/opt/b"]),  # an empty entry: the working folder
    ("/opt/a:", ["/opt/a", "{cwd}"]),
    (":/opt/a", ["{cwd}", "/opt/a"]),
    ("rel:/opt/a", ["{cwd}/rel", "/opt/a"]),              # relative: under it
    ("", []),                                             # set but empty: no search path
])
def test_ld_library_path_entries_as_ld_so_opens_them(tmp_path: Path, monkeypatch: object,
                                                    value: str, want: list[str]) -> None:
    monkeypatch.chdir(tmp_path)  # type: ignore[attr-defined]
    monkeypatch.setenv("LD_LIBRARY_PATH", value)  # type: ignore[attr-defined]
    assert ldso.env_ld_path() == [w.format(cwd=tmp_path) for w in want]


def test_a_library_in_the_working_folder_through_an_empty_entry(tmp_path: Path,
                                                                 monkeypatch: object) -> None:
    """``LD_LIBRARY_PATH=/x::`` makes ld.so open ``libx.so`` in the working folder: found
    there ahead of the build's ``DT_RUNPATH`` (the real loader's order), as a relative
    ``DT_RUNPATH`` entry is."""
    build = tmp_path / "site" / "b.so"
    build.parent.mkdir()
    build.write_bytes(build_so(needed=["libx.so"], strings=[], machine=MACHINE))
    wd = tmp_path / "wd"
    wd.mkdir()
    (wd / "libx.so").write_bytes(build_so(needed=[], strings=[], machine=MACHINE))
    monkeypatch.chdir(wd)  # type: ignore[attr-defined]
    for value, found in (("/nonexistent", False), ("/nonexistent::", True), (":", True)):
        monkeypatch.setenv("LD_LIBRARY_PATH", value)  # type: ignore[attr-defined]
        res = dlopen_alone(str(build), MACHINE)
        assert ("libx.so" in res.missing) is not found, value
    monkeypatch.setenv("LD_LIBRARY_PATH", "/nonexistent")  # type: ignore[attr-defined]
    build.write_bytes(build_so(needed=["libx.so"], strings=[], machine=MACHINE, runpath="."))
    assert not dlopen_alone(str(build), MACHINE).missing
    build.write_bytes(build_so(needed=["libx.so"], strings=[], machine=MACHINE,
                               runpath="../wd2"))
    assert "libx.so" in dlopen_alone(str(build), MACHINE).missing


def test_resolution_counts_a_library_loaded_earlier_once(tmp_path: Path) -> None:
    a = tmp_path / "a.so"
    a.write_bytes(build_so(needed=["libb.so", "libc.so"], runpath="$ORIGIN", strings=[]))
    (tmp_path / "libb.so").write_bytes(build_so(needed=["libc.so"], runpath=None, strings=[]))
    (tmp_path / "libc.so").write_bytes(build_so(needed=[], strings=[]))
    res = dlopen_alone(str(a), "x86_64")
    # libb finds libc already mapped (by a), although libb has no path of its own
    assert not res.missing and not res.bad and res.objects == 3


# ----------------------------------------------------------------- the build's bytes


def _e_type(data: bytes, value: int) -> bytes:
    return data[:16] + struct.pack("<H", value) + data[18:]


@pytest.mark.parametrize(("make", "cause"), [
    (lambda: build_so(needed=["libtorch.so"], strings=[*PG_NAMES, "mooncake", "mooncake-cpu"],
                      bits=32, machine="i386"), "32-bit"),
    (lambda: build_so(needed=["libtorch.so"], strings=[*PG_NAMES, "mooncake", "mooncake-cpu"],
                      little=False, machine="ppc64"), "big-endian"),
    (lambda: build_so(needed=["libtorch.so"], strings=[*PG_NAMES, "mooncake", "mooncake-cpu"],
                      machine=OTHER), "this machine runs"),
    (lambda: _e_type(_good(), 1), "relocatable object (ET_REL)"),
    (lambda: _good(padding_before_dynamic=4096)[:3000], "truncated"),
    (lambda: _good(dyn_overrides={elf.DT_STRTAB: 0xDEAD0000}), "dynamic section"),
    (lambda: build_so(needed=["libtorch.so", "lib" + "x" * 5000 + ".so"],
                      strings=[*PG_NAMES, "mooncake", "mooncake-cpu"], machine=MACHINE),
     "cannot be read whole"),
])
def test_a_build_the_loader_cannot_map_fails(tmp_path: Path, make: object, cause: str) -> None:
    site = healthy_image(tmp_path / "site")
    kb = small_kb(tmp_path)
    assert_healthy(run(site, kb=kb))  # the negative control: the image as built
    _build(site).write_bytes(make())  # type: ignore[operator]
    r = run(site, kb=kb)
    assert r.rc == 1, r.out
    assert "cannot be loaded" in r.out and cause in r.out, r.out


def test_all_program_header_offsets_zero(tmp_path: Path) -> None:
    data = bytearray(_good())
    phoff, phent, phnum = struct.unpack_from("<Q", data, 0x20)[0], 56, 3
    for i in range(phnum):
        struct.pack_into("<Q", data, phoff + i * phent + 8, 0)
    site = healthy_image(tmp_path / "site")
    _build(site).write_bytes(bytes(data))
    r = run(site, kb=small_kb(tmp_path))
    assert r.rc == 1 and "cannot be loaded" in r.out, r.out


# ----------------------------------------------------------------- the loader module


@pytest.mark.parametrize(("text", "cause"), [
    (b"# -*- coding: nosuch -*-\nimport torch\n", "unknown encoding"),
    (b"import torch\x00\n", "NUL byte"),
    (b"import importlib\nimport os\nm = importlib.import_module(os.environ['X'])\n",
     "loading scheme is none a mooncake release uses"),
    (b"import torch\ndef broken(:\n", "cannot compile"),
    (b"", "empty"),
    (b"   \n\n", "empty"),
])
def test_a_loader_python_cannot_import_fails(tmp_path: Path, text: bytes, cause: str) -> None:
    site = healthy_image(tmp_path / "site")
    (site / "mooncake" / "pg.py").write_bytes(text)
    r = run(site, kb=small_kb(tmp_path))
    assert r.rc == 1, r.out
    assert r.status("loader") == "fail" and cause in r.line("loader"), r.out
    assert "pg.py" in r.line("loader")


def test_a_loader_pattern_that_never_matches_fails(tmp_path: Path) -> None:
    site = healthy_image(tmp_path / "site")
    pg = site / "mooncake" / "pg.py"
    pg.write_text(pg.read_text().replace('r"\\d+(?:\\.\\d+)*"', 'r"v(\\d+)"'))
    assert 'r"v(' in pg.read_text()
    r = run(site, kb=small_kb(tmp_path))
    assert r.rc == 1 and "does not match torch's version" in r.line("loader"), r.out


# ----------------------------------------------------------------- libraries via $ORIGIN


@pytest.mark.parametrize("kind", ["garbage", "folder", "devnull", "empty"])
def test_an_origin_library_that_cannot_be_loaded_fails(tmp_path: Path, kind: str) -> None:
    site = healthy_image(tmp_path / "site", needed=("libmooncake_pg.so",))
    lib = site / "mooncake" / "libmooncake_pg.so"
    lib.write_bytes(build_so(needed=[], strings=[], machine=MACHINE))
    kb = small_kb(tmp_path)
    assert_healthy(run(site, kb=kb))
    lib.unlink()
    if kind == "garbage":
        lib.write_bytes(b"not an elf object at all" * 10)
    elif kind == "folder":
        lib.mkdir()
    elif kind == "devnull":
        lib.symlink_to("/dev/null")
    else:
        lib.write_bytes(b"")
    r = run(site, kb=kb)
    assert r.rc == 1, r.out
    assert "libmooncake_pg.so cannot be loaded" in r.out, r.out


# ----------------------------------------------------------------- builds that are not files


@pytest.mark.parametrize("kind", ["fifo", "folder", "devnull", "dangling"])
def test_a_build_that_is_not_a_regular_file_is_named(tmp_path: Path, kind: str) -> None:
    site = healthy_image(tmp_path / "site")
    build = _build(site)
    build.unlink()
    if kind == "fifo":
        os.mkfifo(build)
        what = "a FIFO"
    elif kind == "folder":
        build.mkdir()
        what = "a folder"
    elif kind == "devnull":
        build.symlink_to("/dev/null")
        what = "character device"
    else:
        build.symlink_to(tmp_path / "gone.so")
        what = "dangling symbolic link"
    r = run(site, kb=small_kb(tmp_path))
    assert r.rc == 1, r.out
    line = r.line("build")
    assert what in line and "not a file" in line, line
    assert "only " not in line  # never "only <the very file>" as if it were another build
    assert any("--force-reinstall --no-deps" in f for f in r.fixes()), r.out


# ----------------------------------------------------------------- folders the user cannot read




def _as_nobody(python: str, site: Path, kb: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MOONPIN_KB", "PYTHONPATH")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]])
    env["MOONPIN_CHECK_SYSTEM_LIBS"] = str(site / "_none")
    env["HOME"] = str(site / "_home")
    return subprocess.run(
        [python, "-m", "moonpin.preflight", "--site-packages", str(site), "--no-deep",
         "--elastic-ep-backend", "mooncake", "--kb", str(kb)],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=60,
        user=NOBODY, group=NOBODY)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the check as another user")
@pytest.mark.parametrize("folder", ["mooncake", "torch", "."])
def test_a_folder_the_worker_cannot_list_is_unreadable(folder: str) -> None:
    python = python_for_nobody()
    if python is None:
        pytest.skip("no interpreter of this Python version the unprivileged user can run")
    # pytest's tmp_path lies in a folder only root can enter
    tmp_path = Path(tempfile.mkdtemp(prefix="moonpin-nobody-"))
    try:
        _unreadable_case(python, tmp_path, folder)
    finally:
        for p in [tmp_path, *tmp_path.rglob("*")]:
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o755)
        shutil.rmtree(tmp_path)


def _unreadable_case(python: str, tmp_path: Path, folder: str) -> None:
    tmp_path.chmod(0o755)
    site = healthy_image(tmp_path / "site")
    kb = small_kb(tmp_path)
    kb.chmod(0o644)
    for p in [site, *site.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    ok = _as_nobody(python, site, kb)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    (site / folder).chmod(0o111)
    r = _as_nobody(python, site, kb)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "cannot be listed by this user (uid 65534" in r.stdout, r.stdout
    assert "not installed" not in r.stdout and "rename" not in r.stdout, r.stdout


# ----------------------------------------------------------------- the deep probe decides


def test_a_deep_import_that_worked_overrules_a_light_library_guess() -> None:
    checks = [
        CheckResult("libraries", "fail", "1 shared library the build needs cannot be found: x"),
        CheckResult("deep import", "pass", "import mooncake.pg works with torch 2.13.0"),
        CheckResult("deep backends", "pass", "registered: mooncake ('cuda',), mooncake-cpu"),
    ]
    out = downgrade_light_libraries(checks)
    assert out[0].status == "warn" and "deep import" in out[0].message
    # so is a loader whose scheme the light check cannot read, but not one that is broken
    unread = CheckResult("loader", "fail", "pg.py: x; " + UNREADABLE_SCHEME)
    broken = CheckResult("loader", "fail", "pg.py: Python cannot compile it")
    out = downgrade_light_libraries([unread, broken, *checks[1:]])
    assert [c.status for c in out[:2]] == ["warn", "fail"]
    # a deep probe that failed, or backends missing, leaves the light verdict standing
    failed = [checks[0], CheckResult("deep probe", "fail", "import mooncake.pg fails: x")]
    assert downgrade_light_libraries(failed)[0].status == "fail"
    partial = [*checks[:2], CheckResult("deep backends", "fail", "no mooncake-cpu")]
    assert downgrade_light_libraries(partial)[0].status == "fail"
    # the light reading of what `import torch` loads is a library guess too
    chain = CheckResult("import chain", "fail", "`import mooncake.pg` fails before the build "
                        "is loaded: `import torch` raises OSError: x")
    assert downgrade_light_libraries([chain, *checks[1:]])[0].status == "warn"
