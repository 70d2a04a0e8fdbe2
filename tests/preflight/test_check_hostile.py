"""Seeded broken images: the light check never calls an image usable that cannot load, and
never refuses one that can (issue: the check judges loading as the loader does).

Each image is the healthy fake image changed in one to three ways drawn from
:data:`MUTATIONS`; each way says whether it stops ``import mooncake.pg`` (or SGLang's use
of it) from working. The check runs in a subprocess, as an unprivileged user when this
runs as root (so permissions count), and must: exit in {0, 1, 2}, print no traceback,
finish within its timeout, exit non-zero for a broken image and 0 for an image whose
changes break nothing. ``MOONPIN_FUZZ_IMAGES=2000`` runs the opt-in count (default 40,
which CI runs); ``MOONPIN_FUZZ_SEED`` picks another seed.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.lib.checkrun import NOBODY, ROOT, python_for_nobody, small_kb
from tests.lib.elfbuild import build_so
from tests.lib.images import PG_NAMES, ext_suffix, healthy_image

COUNT = int(os.environ.get("MOONPIN_FUZZ_IMAGES", "40"))
SEED = int(os.environ.get("MOONPIN_FUZZ_SEED", "20261201"))
MACHINE = "x86_64" if os.uname().machine not in ("x86_64", "aarch64") else os.uname().machine
OTHER = "aarch64" if MACHINE == "x86_64" else "x86_64"
STRINGS = [*PG_NAMES, "mooncake", "mooncake-cpu"]


def _build(site: Path) -> Path:
    return site / "mooncake" / f"pg_2_13_0{ext_suffix()}"


def _so(**kw: object) -> bytes:
    args: dict[str, object] = {"needed": ["libcudart.so.13", "libtorch.so"],
                               "strings": STRINGS, "machine": MACHINE}
    args.update(kw)
    return build_so(**args)  # type: ignore[arg-type]


# Each mutation changes the image and returns True when it breaks loading.
Mutation = Callable[[Path, random.Random], bool]


def m_class(site: Path, rnd: random.Random) -> bool:
    _build(site).write_bytes(rnd.choice([
        lambda: _so(bits=32, machine="i386"), lambda: _so(little=False, machine="ppc64"),
        lambda: _so(machine=OTHER)])())
    return True


def m_type(site: Path, rnd: random.Random) -> bool:
    data = bytearray(_build(site).read_bytes())
    struct.pack_into("<H", data, 16, rnd.choice([0, 1, 2, 4]))
    _build(site).write_bytes(bytes(data))
    return True


def m_truncate(site: Path, rnd: random.Random) -> bool:
    data = _build(site).read_bytes()
    _build(site).write_bytes(data[:rnd.randrange(0, len(data))])
    return True


def m_dynamic(site: Path, rnd: random.Random) -> bool:
    _build(site).write_bytes(rnd.choice([
        lambda: _so(dyn_overrides={5: 0xDEAD0000}),
        lambda: _so(needed=["libtorch.so", "lib" + "y" * rnd.randrange(4100, 6000) + ".so"]),
        lambda: _phoff_zero(_so())])())
    return True


def _phoff_zero(data: bytes) -> bytes:
    out = bytearray(data)
    phoff = struct.unpack_from("<Q", out, 0x20)[0]
    for i in range(3):
        struct.pack_into("<Q", out, phoff + i * 56 + 8, 0)
    return bytes(out)


def m_loader(site: Path, rnd: random.Random) -> bool:
    pg = site / "mooncake" / "pg.py"
    text = pg.read_bytes()
    choice = rnd.randrange(5)
    if choice == 0:
        pg.write_bytes(b"# -*- coding: klingon -*-\n" + text)
    elif choice == 1:
        at = rnd.randrange(len(text))
        pg.write_bytes(text[:at] + b"\0" + text[at:])
    elif choice == 2:
        pg.write_bytes(text + b"\ndef broken(:\n")
    elif choice == 3:
        pg.write_bytes(b"")
    else:
        pg.write_bytes(text.replace(b'r"\\d+(?:\\.\\d+)*"', b'r"v(\\d+)"'))
    return True


def m_origin_lib(site: Path, rnd: random.Random) -> bool:
    _build(site).write_bytes(_so(needed=["libcudart.so.13", "libtorch.so",
                                         "libmooncake_pg.so"]))
    lib = site / "mooncake" / "libmooncake_pg.so"
    choice = rnd.randrange(5)
    if choice == 0:
        lib.write_bytes(os.urandom(rnd.randrange(1, 300)))
    elif choice == 1:
        lib.mkdir()
    elif choice == 2:
        lib.symlink_to("/dev/null")
    elif choice == 3:
        lib.write_bytes(_so(needed=[], strings=[], machine=OTHER))
    # else: the library is missing, and no host folder provides it
    return True


def m_not_a_file(site: Path, rnd: random.Random) -> bool:
    b = _build(site)
    b.unlink()
    choice = rnd.randrange(4)
    if choice == 0:
        os.mkfifo(b)
    elif choice == 1:
        b.mkdir()
    elif choice == 2:
        b.symlink_to("/dev/null")
    else:
        b.symlink_to(site / "nowhere.so")
    return True


def m_facts(site: Path, rnd: random.Random) -> bool:
    drop = rnd.choice(STRINGS)
    if rnd.random() < 0.3:
        _build(site).write_bytes(_so(needed=["libcudart.so.12", "libtorch.so"]))
    else:
        _build(site).write_bytes(_so(strings=[s for s in STRINGS if s != drop]))
    return True


def m_gone(site: Path, rnd: random.Random) -> bool:
    _build(site).unlink()
    return True


def m_perms(site: Path, rnd: random.Random) -> bool:
    if os.geteuid() != 0:
        return False  # root reads anything: nothing to test here
    target = rnd.choice([site / "mooncake", site / "torch", _build(site),
                         site / "mooncake" / "pg.py"])
    target.chmod(0o111 if target.is_dir() else 0o000)
    return True


def m_benign(site: Path, rnd: random.Random) -> bool:
    choice = rnd.randrange(4)
    if choice == 0:
        (site / "mooncake" / "README.txt").write_text("notes\n")
    elif choice == 1:
        (site / "mooncake" / f"pg_2_99_0{ext_suffix()}").write_bytes(_so(machine=OTHER))
    elif choice == 2:
        pg = site / "mooncake" / "pg.py"
        pg.write_text("# a comment\n" + pg.read_text())
    else:
        (site / "mooncake" / "pg_2_13_0.cpython-39-x86_64-linux-gnu.so").write_bytes(b"junk")
    return False


BREAKING: list[Mutation] = [m_class, m_type, m_truncate, m_dynamic, m_loader, m_origin_lib,
                            m_not_a_file, m_facts, m_gone, m_perms]
MUTATIONS: list[Mutation] = [*BREAKING, m_benign, m_benign, m_benign]
TERMINAL = (m_not_a_file, m_gone, m_perms)


def _judge(python: str, site: Path, kb: Path, as_nobody: bool,
           extra_args: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MOONPIN_KB", "PYTHONPATH")}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]]),
               MOONPIN_CHECK_SYSTEM_LIBS=str(site / "_none"),
               HOME=str(site.parent / "home"), MOONPIN_CACHE_DIR=str(site.parent / "cache"))
    extra: dict[str, int] = {"user": NOBODY, "group": NOBODY} if as_nobody else {}
    return subprocess.run(
        [python, "-m", "moonpin.preflight", "--site-packages", str(site), "--no-deep",
         "--elastic-ep-backend", "mooncake", "--kb", str(kb), *(extra_args or [])],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=60, **extra)  # type: ignore[call-overload]


def test_seeded_broken_images_are_never_usable() -> None:
    rnd = random.Random(SEED)
    nobody = python_for_nobody() if os.geteuid() == 0 else None
    python = nobody or sys.executable
    base = Path(tempfile.mkdtemp(prefix="moonpin-hostile-"))
    base.chmod(0o755)
    wrong: list[str] = []
    try:
        for i in range(COUNT):
            work = base / str(i)
            work.mkdir()
            work.chmod(0o777)
            site = healthy_image(work / "site")
            kb = small_kb(work)
            picks = [rnd.choice(MUTATIONS) for _ in range(rnd.randint(1, 3))]
            broken = False
            # each once; those that replace or remove the build last (a later write to a
            # FIFO would block), and only one of them
            order = sorted(dict.fromkeys(picks), key=lambda m: m in TERMINAL)
            for m in order:
                try:
                    broken |= m(site, rnd)
                except (OSError, struct.error):
                    pass  # an earlier change removed or cut what this one changes
                if m in TERMINAL:
                    break
            picks = order
            if m_perms in picks and nobody is None:
                continue  # permissions do not count for root
            for p in [work, *work.rglob("*")]:
                if not p.is_symlink() and (p.is_dir() and p.stat().st_mode & 0o777 != 0o111):
                    p.chmod(0o777)
            r = _judge(python, site, kb, nobody is not None)
            names = "+".join(m.__name__ for m in dict.fromkeys(picks))
            if r.returncode not in (0, 1, 2) or "Traceback" in r.stderr:
                wrong.append(f"#{i} {names}: exit {r.returncode}: {r.stderr[-400:]}")
            elif broken and r.returncode == 0:
                wrong.append(f"#{i} {names}: usable, but broken:\n{r.stdout}")
            elif not broken and r.returncode != 0:
                wrong.append(f"#{i} {names}: refused, but loads:\n{r.stdout}")
            for p in [work, *work.rglob("*")]:
                if p.is_dir() and not p.is_symlink():
                    p.chmod(0o755)
            shutil.rmtree(work)
    finally:
        for p in [base, *base.rglob("*")]:
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)
    assert not wrong, f"{len(wrong)} of {COUNT} images judged wrongly:\n" + "\n".join(wrong[:10])


@pytest.mark.parametrize("mutation", BREAKING, ids=lambda m: m.__name__)
def test_each_breaking_change_alone(tmp_path: Path, mutation: Mutation) -> None:
    """Every kind of damage, once, with a fixed seed (runs as root: permissions aside)."""
    if mutation is m_perms:
        pytest.skip("permissions need the unprivileged run above")
    site = healthy_image(tmp_path / "site")
    kb = small_kb(tmp_path)
    assert _judge(sys.executable, site, kb, False).returncode == 0  # the control
    mutation(site, random.Random(7))
    r = _judge(sys.executable, site, kb, False)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stdout + r.stderr


# ----------------------------------------------------------------- files the check reads


def _metadata(site: Path, name: str) -> Path:
    return next(site.glob(f"{name}-*.dist-info")) / "METADATA"


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


HOSTILE_FILES: dict[str, Callable[[Path, Path], None]] = {
    "METADATA a FIFO": lambda s, k: _fifo(_metadata(s, "torch")),
    "METADATA /dev/zero": lambda s, k: _zero(_metadata(s, "sglang")),
    "RECORD a FIFO": lambda s, k: _fifo(_metadata(s, "mooncake_transfer_engine_cuda13")
                                         .with_name("RECORD")),
    "version.py a FIFO": lambda s, k: _fifo(s / "torch" / "version.py"),
    "version.py /dev/zero": lambda s, k: _zero(s / "torch" / "version.py"),
    "version.py nested": lambda s, k: (s / "torch" / "version.py").write_text(
        "x = " + "-" * 200_000 + "1\ncuda = '13.0'\n"),
    "version.py long cuda": lambda s, k: (s / "torch" / "version.py").write_text(
        "cuda = '" + "9" * 5000 + ".0'\n"),
    "loader nested": lambda s, k: (s / "mooncake" / "pg.py").write_text(
        "x = " + "'a'+" * 5000 + "'a'\n"),
    "loader bad regex": lambda s, k: (s / "mooncake" / "pg.py").write_text(
        (s / "mooncake" / "pg.py").read_text().replace('r"\\d+(?:\\.\\d+)*"', 'r"(\\d+"')),
    "build a FIFO": lambda s, k: _fifo(_build(s)),
    "KB a FIFO": lambda s, k: _fifo(k),
    "KB /dev/zero": lambda s, k: _zero(k),
    "KB nested": lambda s, k: k.write_text("[" * 100_000 + "]" * 100_000),
    "KB schema a list": lambda s, k: k.write_text('{"schema_version": [2], "sglang": []}'),
    "KB long number": lambda s, k: k.write_text('{"schema_version": ' + "9" * 5000
                                                 + ', "sglang": []}'),
    "SGLang marker invalid": lambda s, k: _metadata(s, "sglang").write_text(
        _metadata(s, "sglang").read_text()
        + 'Requires-Dist: torch==2.14.1; python_version ~= "abc"\n'),
    "torch marker invalid": lambda s, k: (_metadata(s, "torch").write_text(
        "Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0\n"
        'Requires-Dist: nvidia-cuda-runtime-cu12; python_version ~= "abc"\n'),
        (s / "torch" / "version.py").unlink()),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_FILES))
def test_hostile_files_in_the_image_never_crash_or_hang(tmp_path: Path, case: str) -> None:
    site = healthy_image(tmp_path / "site")
    kb = small_kb(tmp_path)
    HOSTILE_FILES[case](site, kb)
    for extra in ([], ["--deep", "--deep-timeout", "20"]):
        r = _judge(sys.executable, site, kb, False, extra)
        assert r.returncode in (0, 1, 2), r.stdout + r.stderr
        assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr


def test_memo_entries_of_the_wrong_shape_cost_time_not_answers(tmp_path: Path) -> None:
    """Every fact the check keeps in its memo replaced by a value of the wrong type or
    shape (the right size and mtime, so the memo would trust it): the same verdict, no
    traceback. (A value of the right shape but wrong content is the memo's documented
    limit, as it is Python's for bytecode: --no-cache.)"""
    from moonpin.kb import cache

    site = healthy_image(tmp_path / "site")
    kb = small_kb(tmp_path)
    first = _judge(sys.executable, site, kb, False)
    assert first.returncode == 0, first.stdout
    memo = tmp_path / "cache" / "check-facts.marshal"
    doc = cache.load(memo)
    assert isinstance(doc, dict) and doc["entries"], "the first run remembered nothing"
    for bad in (5, 3.5, [1, 2], (1,), [1, 2, 3, 4, 5], [[1], [2], [3], 4], {"kind": 5},
                {"imports": "x"}):
        doc["entries"] = {k: (v[0], v[1], bad) for k, v in doc["entries"].items()}
        assert cache.store(memo, doc) is None
        r = _judge(sys.executable, site, kb, False)
        assert "Traceback" not in r.stderr, r.stderr
        assert r.returncode == 0, (bad, r.stdout)
