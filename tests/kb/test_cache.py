"""moonpin's cache folder and the knowledge-base digest it remembers."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from moonpin.kb import cache


def test_cache_dir_follows_the_environment(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONPIN_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("MOONPIN_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "moonpin"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "moonpin"


def test_file_digest_is_remembered_per_size_and_mtime(tmp_path: Path) -> None:
    f = tmp_path / "kb.json"
    f.write_text('{"a": 1}')
    first = cache.file_digest(f)
    assert first == hashlib.sha256(b'{"a": 1}').hexdigest()
    assert (cache.cache_dir() / "check-facts.marshal").is_file()
    st = f.stat()
    f.write_text('{"b": 2}')  # same size, same mtime: the memo answers (as bytecode would)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert cache.file_digest(f) == first
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # control: a new mtime re-hashes
    assert cache.file_digest(f) == hashlib.sha256(b'{"b": 2}').hexdigest()


def test_file_digest_without_a_writable_cache(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    monkeypatch.setenv("MOONPIN_CACHE_DIR", str(blocker))
    f = tmp_path / "kb.json"
    f.write_text("{}")
    assert cache.file_digest(f) == hashlib.sha256(b"{}").hexdigest()
    assert blocker.read_text() == "not a folder"


def test_store_is_atomic_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "c" / "doc.json"
    assert cache.store(target, {"x": [1, 2]}) is None
    assert cache.load(target) == {"x": [1, 2]}
    target.write_text("{broken")
    assert cache.load(target) is None
    assert [p.name for p in target.parent.iterdir()] == ["doc.json"]


def test_no_home_folder_means_no_cache_not_a_crash(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A container running as a UID without a passwd entry and no $HOME."""
    monkeypatch.delenv("MOONPIN_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    import pwd

    def no_entry(uid: int) -> None:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    assert cache.cache_dir() is None and cache.facts_memo().path is None
    f = tmp_path / "kb.json"
    f.write_text("{}")
    assert cache.file_digest(f) == hashlib.sha256(b"{}").hexdigest()

    from moonpin.preflight.installed import sources
    from tests.lib.images import add_sglang

    add_sglang(tmp_path / "site")
    facts = sources.scan(tmp_path / "site" / "sglang")
    assert facts.cache == "off" and facts.imports  # read, not remembered


def test_file_memo_answers_per_stamp_and_survives_damage(tmp_path: Path) -> None:
    memo_file = tmp_path / "memo.marshal"
    src = tmp_path / "src.txt"
    src.write_text("one")
    calls: list[str] = []

    def compute() -> str:
        calls.append(src.read_text())
        return src.read_text().upper()

    memo = cache.FileMemo(str(memo_file))
    assert memo.get("upper", src, compute) == "ONE" and memo.flush() is None
    again = cache.FileMemo(str(memo_file))  # another process
    assert again.get("upper", src, compute) == "ONE" and calls == ["one"]
    st = src.stat()
    src.write_text("two")
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert again.get("upper", src, compute) == "TWO" and calls == ["one", "two"]
    for damage in (b"", b"\x00garbage", memo_file.read_bytes()[:7]):
        memo_file.write_bytes(damage)
        assert cache.FileMemo(str(memo_file)).get("upper", src, compute) == "TWO"
    with pytest.raises(FileNotFoundError):  # nothing is remembered for a missing file
        again.get("upper", tmp_path / "missing", compute)
    off = cache.FileMemo(str(memo_file))
    off.enabled = False  # --no-cache
    before = len(calls)
    assert off.get("upper", src, compute) == "TWO" and len(calls) == before + 1
    # off, a file asked of again in the same check is read once (the KB's sha256 by each
    # table a cold check reads), again when its stamp changes or the memo is switched
    assert off.get("upper", src, compute) == "TWO" and len(calls) == before + 1
    st = src.stat()
    src.write_text("six")
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert off.get("upper", src, compute) == "SIX" and len(calls) == before + 2
    off.enabled = True
    off.enabled = False
    assert off.get("upper", src, compute) == "SIX" and len(calls) == before + 3
    assert off.flush() is None and b"SIX" not in memo_file.read_bytes()  # nothing kept


def test_file_memo_keeps_its_size_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache.FileMemo, "LIMIT", 3)
    memo_file = tmp_path / "memo.marshal"
    files = []
    for i in range(5):
        f = tmp_path / f"f{i}"
        f.write_text(str(i))
        files.append(f)
    first = cache.FileMemo(str(memo_file))
    for f in files:
        first.get("k", f, f.read_text)
    first.flush()
    second = cache.FileMemo(str(memo_file))
    second.get("k", files[0], files[0].read_text)
    second.get("k", tmp_path / "f4", lambda: "changed")  # a hit: f4 is unchanged
    (tmp_path / "f5").write_text("5")
    second.get("k", tmp_path / "f5", lambda: "5")
    second.flush()  # 6 entries > 3: only the three this process used are kept
    kept = cache.load(memo_file)["entries"]
    assert sorted(k.rsplit("/", 1)[-1] for k in kept) == ["f0", "f4", "f5"]


# ------------------------------------------------------- a cache is untrusted input


@pytest.mark.parametrize("damage", [
    b"(\xff\xff\xff\x7f",  # a marshal tuple of 2**31-1 items: MemoryError, or worse
    b"[\x00\x00\x00\x10",
    b"MPC1" + b"\xff" * 8 + b"(\xff\xff\xff\x7f",  # framed, but length and CRC wrong
    b"",
])
def test_a_damaged_cache_file_loads_as_nothing(tmp_path: Path, damage: bytes) -> None:
    f = tmp_path / "c.marshal"
    f.write_bytes(damage)
    assert cache.load(f) is None


def test_a_cache_file_not_ours_or_writable_by_others_is_not_read(tmp_path: Path) -> None:
    f = tmp_path / "c.marshal"
    assert cache.store(f, {"x": 1}) is None
    assert cache.load(f) == {"x": 1}
    os.chmod(f, 0o666)
    assert cache.load(f) is None
    os.chmod(f, 0o644)
    assert cache.load(f) == {"x": 1}


@pytest.mark.parametrize("special", ["fifo", "dev-zero", "directory", "loop"])
def test_a_cache_that_is_not_a_file_is_ignored(tmp_path: Path, special: str) -> None:
    from tests.hostile.gen import make_special

    f = tmp_path / "c.marshal"
    make_special(special, f)
    assert cache.load(f) is None


def test_memo_values_of_the_wrong_shape_are_recomputed(tmp_path: Path) -> None:
    memo_file = tmp_path / "memo.marshal"
    src = tmp_path / "src"
    src.write_text("abc")
    memo = cache.FileMemo(str(memo_file))
    assert memo.get("k", src, lambda: ["a", "b"]) == ["a", "b"]
    assert memo.flush() is None
    doc = cache.load(memo_file)
    key = next(iter(doc["entries"]))
    st = src.stat()
    doc["entries"][key] = (st.st_size, st.st_mtime_ns, 5)  # right stamp, wrong type
    assert cache.store(memo_file, doc) is None

    def strs(v: object) -> bool:
        return isinstance(v, list) and all(isinstance(x, str) for x in v)

    again = cache.FileMemo(str(memo_file))
    assert again.get("k", src, lambda: ["fresh"], strs) == ["fresh"]
    broken = cache.FileMemo(str(memo_file))  # a validator that fails is a "no"
    assert broken.get("k", src, lambda: ["fresh"], lambda v: v[99]) == ["fresh"]
    unchecked = cache.FileMemo(str(memo_file))  # control: without a validator it is trusted
    assert unchecked.get("k", src, lambda: ["fresh"]) == 5


def test_file_digest_refuses_a_fifo_and_ignores_a_wrong_typed_memo(tmp_path: Path) -> None:
    fifo = tmp_path / "kb.json"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="FIFO"):
        cache.file_digest(fifo)
    f = tmp_path / "kb2.json"
    f.write_text("{}")
    memo = cache.facts_memo()
    st = f.stat()
    memo._entries()[f"sha256\0{f}"] = (st.st_size, st.st_mtime_ns, 12345)
    assert cache.file_digest(f) == hashlib.sha256(b"{}").hexdigest()


def test_prune_keeps_the_newest_of_a_kind(tmp_path: Path) -> None:
    """Each image checked leaves a stamps and a sources file: past the limit, the least
    recently written of that kind go, nothing else."""
    for i in range(6):
        f = tmp_path / f"check-stamps-{i:08x}.marshal"
        f.write_bytes(b"x")
        os.utime(f, ns=(i * 10**9, i * 10**9))
    (tmp_path / "check-facts.marshal").write_bytes(b"x")
    (tmp_path / "check-sources-0.marshal").write_bytes(b"x")
    cache.prune(str(tmp_path), "check-stamps-", keep=4)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "check-facts.marshal", "check-sources-0.marshal",
        *(f"check-stamps-{i:08x}.marshal" for i in range(2, 6))]
    cache.prune(str(tmp_path / "missing"), "check-stamps-")  # nothing to list: nothing done


def test_a_check_of_many_images_keeps_a_bounded_cache(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from moonpin.preflight.installed import sources
    from tests.lib.images import add_sglang

    monkeypatch.setattr(cache, "KEEP_SETS", 3)
    for i in range(5):
        site = tmp_path / f"site{i}"
        add_sglang(site)
        sources.scan(site / "sglang", cache_dir=tmp_path / "cache")
    names = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert sum(n.startswith("check-sources-") for n in names) == 3
    assert sum(n.startswith("check-stamps-") for n in names) == 3
