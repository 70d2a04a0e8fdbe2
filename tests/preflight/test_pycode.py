"""The bytecode ``import`` runs instead of a module's source (a cache CPython trusts, a
module with no source), and what it binds: read with ``marshal`` and the opcodes of this
interpreter, never run; and the light check's torch label taken from it."""

from __future__ import annotations

import os
import py_compile
import sys
from pathlib import Path

import pytest

from moonpin.preflight.pyimport import pycode
from tests.lib.checkrun import run, small_kb
from tests.lib.images import healthy_image

VERSION = (sys.version_info[0], sys.version_info[1])
MODE = py_compile.PycInvalidationMode


def _compile(text: str, src: Path, cfile: Path, mode: MODE = MODE.TIMESTAMP,
             like: Path | None = None) -> None:
    """``text`` compiled into ``cfile`` as if from ``src`` (with ``like``'s mtime)."""
    tmp = src.with_name("_tmp_" + src.name)
    tmp.write_text(text)
    if like is not None:
        st = like.stat()
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    cfile.parent.mkdir(parents=True, exist_ok=True)
    py_compile.compile(str(tmp), cfile=str(cfile), invalidation_mode=mode, doraise=True)
    tmp.unlink()


def _cache(src: Path) -> Path:
    return src.parent / "__pycache__" / f"{src.stem}.{sys.implementation.cache_tag}.pyc"


def test_which_bytecode_runs(tmp_path: Path) -> None:
    src = tmp_path / "version.py"
    src.write_text("__version__ = '2.13.0'\n")
    assert pycode.runs(str(src), VERSION) is None  # no cache: the source runs
    py_compile.compile(str(src), doraise=True)
    assert pycode.runs(str(src), VERSION) == str(_cache(src))  # its own timestamp cache
    os.utime(src, (1, 1))
    assert pycode.runs(str(src), VERSION) is None  # stale: compiled again
    _compile("__version__ = '2.12.0'\n", src, _cache(src), MODE.UNCHECKED_HASH)
    assert pycode.runs(str(src), VERSION) == str(_cache(src))  # taken unchecked
    _compile("__version__ = '2.12.0'\n", src, _cache(src), MODE.CHECKED_HASH)
    assert pycode.runs(str(src), VERSION) is None  # checked against the source
    other = (VERSION[0], VERSION[1] + 1)
    _compile("__version__ = '2.12.0'\n", src, _cache(src), MODE.UNCHECKED_HASH)
    assert pycode.runs(str(src), other) is None  # another Python's: not read here
    legacy = tmp_path / "legacy.pyc"
    _compile("x = 1\n", tmp_path / "legacy.py", legacy)
    assert pycode.runs(str(legacy), VERSION) == str(legacy)
    legacy.write_bytes(b"\0\0\0\0" + legacy.read_bytes()[4:])  # another magic number
    assert pycode.runs(str(legacy), VERSION) is None


@pytest.mark.parametrize(("text", "name", "want"), [
    ("__version__ = '2.13.0+cu130'\ncuda: str = '13.0'\n", "__version__",
     ("const", "2.13.0+cu130")),
    ("__version__ = '2.13.0+cu130'\ncuda: str = '13.0'\n", "cuda", ("const", "13.0")),
    ("from torch.version import __version__ as v\n", "v",
     ("from", 0, "torch.version", "__version__")),
    ("from .version import v\n", "v", ("from", 1, "version", "v")),
    ("from x import v\n__version__ = TorchVersion(v)\n", "__version__", ("name", "v")),
    ("__version__ = f(a, b)\n", "__version__", ("other",)),
    ("import sys\nif sys.x:\n    __version__ = 'a'\n", "__version__", ("other",)),
    ("for i in x:\n    __version__ = 'a'\n__version__ = 'b'\n", "__version__", ("const", "b")),
])
def test_what_the_bytecode_binds(tmp_path: Path, text: str, name: str, want: object) -> None:
    pyc = tmp_path / "m.pyc"
    _compile(text, tmp_path / "m.py", pyc)
    got = pycode.bindings(str(pyc))
    assert got is not None and got[0].get(name) == want


def test_damaged_bytecode_is_not_read(tmp_path: Path) -> None:
    pyc = tmp_path / "m.pyc"
    _compile("__version__ = 'a'\n", tmp_path / "m.py", pyc)
    pyc.write_bytes(pyc.read_bytes()[:20])
    assert pycode.bindings(str(pyc)) is None


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return healthy_image(tmp_path / "site")


@pytest.mark.parametrize("how", ["unchecked", "same stamp", "no source"])
def test_the_label_the_bytecode_binds(site: Path, tmp_path: Path, how: str) -> None:
    """torch/version.py says 2.13.0, the bytecode the import runs 2.12.0 (an unchecked
    hash cache, a timestamp cache naming the source's mtime and size, a ``version.pyc``
    with no source): the loader maps 2.12.0."""
    kb = small_kb(tmp_path)
    src = site / "torch" / "version.py"
    text = src.read_text()
    other = text.replace("'2.13.0'", "'2.12.0'")
    assert other != text and len(other) == len(text)
    if how == "unchecked":
        _compile(other, src, _cache(src), MODE.UNCHECKED_HASH)
    elif how == "same stamp":
        _compile(other, src, _cache(src), like=src)
    else:
        _compile(other, src, src.with_suffix(".pyc"))
        src.unlink()
    r = run(site, kb=kb)
    assert "pg_2_12_0" in r.line("build"), r.out
    if how == "same stamp":  # the source touched: the cache is no longer taken
        os.utime(src, (1, 1))
        r = run(site, kb=kb)
        assert "pg_2_13_0" in r.line("build"), r.out


def _kb_with_loader(tmp_path: Path, record: bool) -> Path:
    """The small KB, knowing (``record``) the installed mooncake release's loaders."""
    import json

    path = small_kb(tmp_path)
    doc = json.loads(path.read_text())
    if record:
        loader = {"module": "mooncake.pg", "member": "mooncake/pg.py", "kind": "prebuilt",
                  "imports": [{"template": "mooncake.pg_{torch}", "line": 9}],
                  "version_regex": r"\d+(?:\.\d+)*", "separator": "_", "toolchain": [],
                  "sources": [], "source_names": [], "source_backends": [], "note": None}
        doc["mooncake"].append({"dist": "mooncake-transfer-engine-cuda13",
                                "version": "0.3.13.post1", "wheels": [
                                    {"builds": [{"names": []}], "loaders": [loader]}]})
    path.write_text(json.dumps(doc))
    return path


def test_a_loader_that_is_bytecode_with_no_source(site: Path, tmp_path: Path) -> None:
    """``compileall -b`` and the sources removed: ``mooncake/pg.pyc`` is the loader the
    import runs. It is judged as the loader its release ships (a warning says so), not
    read as a build; with no record of that release it cannot be judged (a failure)."""
    src = site / "mooncake" / "pg.py"
    py_compile.compile(str(src), cfile=str(src.with_suffix(".pyc")), doraise=True)
    src.unlink()
    r = run(site, kb=_kb_with_loader(tmp_path, True))
    assert r.rc == 0, r.out
    assert r.line("loader").startswith("warn") and "bytecode with no source" in r.out
    assert "loader finds pg_2_13_0" in r.line("build"), r.out
    assert r.line("libraries").startswith("pass") and r.line("symbols").startswith("pass")
    r = run(site, kb=_kb_with_loader(tmp_path, False))
    assert r.rc == 1 and r.line("loader").startswith("fail"), r.out
    assert "not an ELF object" not in r.out


def test_a_bytecode_loader_unlike_its_releases_is_not_taken_for_it(site: Path,
                                                                   tmp_path: Path) -> None:
    """A ``pg.pyc`` whose constants do not name what the release's loader imports (here
    one that raises) is not judged as that loader: its loading cannot be read."""
    src = site / "mooncake" / "pg.py"
    _compile("raise ImportError('an old loader')\n", src, src.with_suffix(".pyc"))
    src.unlink()
    r = run(site, kb=_kb_with_loader(tmp_path, True))
    assert r.rc == 1 and r.line("loader").startswith("fail"), r.out
    assert "do not name what the loader" in r.line("loader")


def test_a_bytecode_bomb_is_held(site: Path, tmp_path: Path) -> None:
    """A cache the import would take (unchecked hash, this Python's magic number) whose
    marshal stream declares a gigabyte list inside a gigabyte list, 64 deep: read in a held
    child, which runs out of its memory as the import would; the check fails torch on it,
    at once, and the check's own process allocates nothing of it."""
    import importlib.util
    import time

    src = site / "torch" / "version.py"
    cache = _cache(src)
    cache.parent.mkdir(parents=True, exist_ok=True)
    header = importlib.util.MAGIC_NUMBER + (1).to_bytes(4, "little") + bytes(8)
    cache.write_bytes(header + b"[\xff\xff\xff\x07" * 64)
    assert pycode.runs(str(src), VERSION) == str(cache)  # the import would run it
    t0 = time.monotonic()
    assert pycode.bindings(str(cache)) is None and pycode.strings(str(cache)) is None
    assert "MemoryError" in (pycode.unloadable(str(cache)) or "")
    r = run(site, kb=small_kb(tmp_path))
    assert time.monotonic() - t0 < 45
    assert r.rc == 1 and r.status("torch") == "fail" and "version.cpython" in r.line("torch")


@pytest.mark.parametrize(("body", "said"), [
    (b"\xfe\xfe", "is bad marshal data (ValueError: bad marshal data"),
    (b")\x01" * 200000 + b"N", "is bad marshal data (ValueError: recursion limit exceeded"),
    (b"i\x05\x00\x00\x00", "holds a int, not a code object"),
], ids=["unknown type", "nested past marshal's depth", "an int"])
def test_a_cache_the_import_cannot_load_fails_it(site: Path, tmp_path: Path, body: bytes,
                                                 said: str) -> None:
    """A cache the import takes (unchecked hash) that its own marshal.loads refuses:
    `import torch` raises (ValueError, ImportError 'Non-code object'), so does the check,
    with torch's reinstall line."""
    import importlib.util

    src = site / "torch" / "version.py"
    cache = _cache(src)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_bytes(importlib.util.MAGIC_NUMBER + (1).to_bytes(4, "little") + bytes(8) + body)
    assert pycode.unloadable(str(cache)) is not None
    r = run(site, kb=small_kb(tmp_path))
    assert r.rc == 1 and r.status("torch") == "fail", r.out
    assert said in r.line("torch") and "version.cpython" in r.line("torch")
    assert "torch==2.13.0" in r.fixes()[0]
