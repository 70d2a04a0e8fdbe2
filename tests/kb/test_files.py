"""moonpin.kb.files: the one way to read an outside file, bounded JSON, and atomic writes that
fail naming the path."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from moonpin.kb.errors import KBError, MoonpinError, ReadRefused, WriteFailed
from moonpin.kb.files import loads_json, read_regular, write_atomic

ROOT = Path(__file__).resolve().parents[2]


def test_reads_a_regular_file(tmp_path: Path) -> None:
    f = tmp_path / "a"
    f.write_bytes(b"x" * 1000)
    assert read_regular(f, cap=1000) == b"x" * 1000
    (tmp_path / "link").symlink_to("a")  # a symlink to a regular file is followed
    assert read_regular(tmp_path / "link", cap=1000) == b"x" * 1000
    f.write_bytes(b"")
    assert read_regular(f, cap=0) == b""


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "kb.json"
    os.mkfifo(fifo)
    done: list[BaseException] = []
    t = threading.Thread(target=lambda: _catch(done, fifo), daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), "reading a FIFO blocked"
    (e,) = done
    assert isinstance(e, ReadRefused) and "FIFO" in str(e) and str(fifo) in str(e)


def _catch(out: list[BaseException], path: Path) -> None:
    try:
        read_regular(path, cap=100, what="knowledge base")
    except BaseException as e:  # the test looks at what it was
        out.append(e)


@pytest.mark.parametrize(("make", "needle", "code"), [
    (lambda p: p.symlink_to("/dev/zero"), "character device", errno.EINVAL),
    (lambda p: p.mkdir(), "directory", errno.EISDIR),
    (lambda p: (p.with_name("b").symlink_to(p.name), p.symlink_to("b")), "symlink loop",
     errno.ELOOP),
    (lambda p: None, "does not exist", errno.ENOENT),
    (lambda p: p.symlink_to("nowhere"), "does not exist", errno.ENOENT),
])
def test_what_is_not_a_regular_file_is_named(tmp_path: Path, make: object, needle: str,
                                             code: int) -> None:
    p = tmp_path / "f"
    make(p)  # type: ignore[operator]
    with pytest.raises(ReadRefused) as e:
        read_regular(p, cap=100, what="cache file")
    assert needle in str(e.value) and "cache file" in str(e.value) and str(p) in str(e.value)
    assert e.value.errno == code and isinstance(e.value, OSError)
    assert isinstance(e.value, MoonpinError) and e.value.hint
    assert e.value.strerror == e.value.reason  # "cannot read X: {strerror}" reads well


def test_over_the_cap_is_refused_before_reading(tmp_path: Path) -> None:
    f = tmp_path / "big"
    with open(f, "wb") as fh:
        fh.truncate(10 * 1024 * 1024 * 1024)  # sparse: 10 GiB that cost nothing
    t = time.monotonic()
    with pytest.raises(ReadRefused, match=r"10,737,418,240 bytes, over the 1 MiB limit") as e:
        read_regular(f, cap=1024 * 1024, what="launch file")
    assert time.monotonic() - t < 1 and e.value.limit == 1024 * 1024


def test_a_file_growing_while_read_never_returns_more_than_the_cap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "grows"
    f.write_bytes(b"x" * 10)
    real_read = os.read

    def read(fd: int, n: int) -> bytes:  # the file grew by 100 bytes since fstat
        with open(f, "ab") as g:
            g.write(b"y" * 100)
        return real_read(fd, n + 200)

    monkeypatch.setattr(os, "read", read)
    with pytest.raises(ReadRefused, match="grew past"):
        read_regular(f, cap=50)


def test_refused_reads_pickle_across_processes(tmp_path: Path) -> None:
    import pickle

    with pytest.raises(ReadRefused) as e:
        read_regular(tmp_path, cap=5, what="tree file")
    again = pickle.loads(pickle.dumps(e.value))
    assert str(again) == str(e.value) and again.errno == e.value.errno


def test_kb_files_imports_nothing_heavy() -> None:
    code = ("import sys; before = set(sys.modules); import moonpin.kb.files; "
            "print(sorted(set(sys.modules) - before))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert set(eval(out)) <= {"__future__", "moonpin", "moonpin.resolver",
                              "moonpin.guard", "moonpin.kb", "moonpin.kb.errors",
                              "moonpin.kb.files", "stat", "_stat"}, out


@pytest.mark.parametrize(("data", "needle"), [
    (b"[" * 100_000 + b"]" * 100_000, "nested deeper"),
    (b'{"a": ' + b"9" * 5000 + b"}", "4300 digits"),
    (b'{"a": 1', "not valid JSON"),
    (b"[\"\xff\"]", "not UTF-8"),
    (b"-" * 100_000 + b"1", "not valid JSON"),
])
def test_loads_json_fails_only_with_valueerror(data: bytes, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        loads_json(data)


def test_loads_json_reads_what_json_reads() -> None:
    assert loads_json(b'{"a": [1, 2.5, null, "x"]}') == {"a": [1, 2.5, None, "x"]}
    assert loads_json("[" * 200 + "]" * 200) is not None


def test_write_atomic_failure_names_the_path(tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.mkdir()  # a folder where the file should go
    with pytest.raises(WriteFailed) as e:
        write_atomic(target, b"x", what="matrix")
    assert str(target) in str(e.value) and "matrix" in str(e.value) and e.value.hint
    assert isinstance(e.value, OSError) and e.value.strerror
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temp file left
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(WriteFailed, match="cannot be written"):
        write_atomic(blocker / "sub" / "kb.json", b"x")


def test_kb_lock_that_cannot_be_made_is_a_kb_error(tmp_path: Path) -> None:
    from moonpin.kb import store

    kb = tmp_path / "kb.json"
    (tmp_path / "kb.json.lock").mkdir()
    with pytest.raises(WriteFailed, match="is a directory") as e:
        with store.kb_lock(kb):
            pass
    assert "kb.json.lock" in str(e.value) and isinstance(e.value, MoonpinError)
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    with pytest.raises(WriteFailed, match="cannot be made"):
        with store.kb_lock(blocker / "kb.json"):
            pass


@pytest.mark.parametrize(("content", "needle"), [
    (b"[" * 100_000 + b"]" * 100_000, "nested deeper"),
    (b'{"schema_version": ' + b"9" * 5000 + b"}", "digits"),
    (b'{"schema_version": true}', "schema_version"),
])
def test_hostile_kb_files_are_kb_errors(tmp_path: Path, content: bytes, needle: str) -> None:
    from moonpin.kb import store

    p = tmp_path / "kb.json"
    p.write_bytes(content)
    with pytest.raises(KBError, match=needle) as e:
        store.load(p)
    assert str(p) in str(e.value) and e.value.hint


@pytest.mark.parametrize("special", ["fifo", "dev-zero", "directory", "loop"])
def test_a_kb_that_is_not_a_file_is_named(tmp_path: Path, special: str) -> None:
    from moonpin.kb import store
    from tests.hostile.gen import make_special

    p = tmp_path / "kb.json"
    make_special(special, p)
    with pytest.raises(KBError) as e:
        store.load(p)
    assert str(p) in str(e.value) and e.value.hint


@pytest.mark.parametrize("version", ["banana", "1" * 5000, ""])
def test_a_kb_version_that_is_not_pep440_is_refused_at_load(tmp_path: Path,
                                                            version: str) -> None:
    import json

    from moonpin.kb import store
    from tests.kb.test_store import small_kb

    p = tmp_path / "kb.json"
    store.save(small_kb(2), p)
    doc = json.loads(p.read_text())
    doc["sglang"][1]["version"] = version
    p.write_text(json.dumps(doc))
    with pytest.raises(KBError, match=r"field 'sglang\.1\.version'.*not a PEP 440") as e:
        store.load(p)
    assert len(str(e.value)) < 400  # a long value is cut, not echoed whole


def test_sha256_hex_is_hashlib_sha256() -> None:
    import hashlib

    from moonpin.kb.files import sha256_hex

    for data in (b"", b"moonpin", bytes(range(256)) * 4099):
        assert sha256_hex(data) == hashlib.sha256(data).hexdigest()
