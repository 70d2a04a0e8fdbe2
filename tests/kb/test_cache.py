"""moonpin's cache folder and the knowledge-base digest it remembers."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from kb import cache


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
    assert (cache.cache_dir() / "digests.json").is_file()
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

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert cache.cache_dir() is None
    f = tmp_path / "kb.json"
    f.write_text("{}")
    assert cache.file_digest(f) == hashlib.sha256(b"{}").hexdigest()

    from resolver import sources
    from tests.lib.images import add_sglang

    add_sglang(tmp_path / "site")
    facts = sources.scan(tmp_path / "site" / "sglang")
    assert facts.cache == "off" and facts.imports  # read, not remembered
