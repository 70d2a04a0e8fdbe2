"""The runtime check's reading of SGLang sources, and its cache validated like bytecode."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from moonpin.kb import cache as kb_cache
from moonpin.resolver.check import sources
from tests.lib.images import add_sglang


def _pkg(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    add_sglang(site)
    return site / "sglang"


def _names(facts: sources.SourceFacts) -> set[str]:
    return set(facts.derived["names"])


def _touch_same(path: Path, text: str) -> None:
    """Rewrite ``path`` keeping its size and modification time: an edit no cache can see."""
    st = path.stat()
    assert len(text.encode()) == st.st_size
    path.write_text(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_cold_then_warm_give_the_same_facts(tmp_path: Path) -> None:
    pkg, cache = _pkg(tmp_path), tmp_path / "cache"
    cold = sources.scan(pkg, cache_dir=cache)
    assert cold.cache == "cold" and cold.read == cold.files == 7
    warm = sources.scan(pkg, cache_dir=cache)
    assert warm.cache == "warm" and warm.read == 0
    assert warm.derived == cold.derived == sources.derive(cold)
    assert warm.derived["backends"] == ["mooncake", "mooncake-cpu"]
    assert _names(warm) == {"MooncakeBackendOptions", "get_peer_state", "join_group",
                            "recover_ranks", "set_transfer_engine"}
    off = sources.scan(pkg, use_cache=False)
    assert off.cache == "off" and off.read == 7 and off.imports == cold.imports
    assert off.derived == cold.derived


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    pkg, cache = _pkg(tmp_path), tmp_path / "cache"
    sources.scan(pkg, cache_dir=cache)
    target = pkg / "srt" / "server_args.py"
    st = target.stat()
    target.write_text("from mooncake.pg import brand_new\n")
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    facts = sources.scan(pkg, cache_dir=cache)
    assert facts.cache == "stale" and facts.read == 1
    assert "brand_new" in _names(facts)
    again = sources.scan(pkg, cache_dir=cache)  # the rewritten cache holds the change
    assert again.cache == "warm" and "brand_new" in _names(again)


def test_added_and_removed_files(tmp_path: Path) -> None:
    pkg, cache = _pkg(tmp_path), tmp_path / "cache"
    sources.scan(pkg, cache_dir=cache)
    (pkg / "srt" / "extra.py").write_text("import mooncake.pg\nmooncake.pg.extra_name()\n")
    added = sources.scan(pkg, cache_dir=cache)
    assert added.read == 1 and "extra_name" in _names(added)
    (pkg / "srt" / "elastic_ep" / "elastic_ep.py").unlink()
    removed = sources.scan(pkg, cache_dir=cache)
    assert removed.cache == "stale" and removed.read == 0
    assert "join_group" not in _names(removed) and "extra_name" in _names(removed)


def test_an_edit_keeping_size_and_mtime_needs_no_cache(tmp_path: Path) -> None:
    """The documented limit (the same as Python's bytecode cache), and its way out."""
    pkg, cache = _pkg(tmp_path), tmp_path / "cache"
    sources.scan(pkg, cache_dir=cache)
    ela = pkg / "srt" / "elastic_ep" / "elastic_ep.py"
    _touch_same(ela, ela.read_text().replace("join_group", "joint_grup"))
    assert "join_group" in _names(sources.scan(pkg, cache_dir=cache))
    truth = _names(sources.scan(pkg, use_cache=False))
    assert "joint_grup" in truth and "join_group" not in truth


def test_an_analyzer_change_invalidates_the_cache(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    pkg, cache = _pkg(tmp_path), tmp_path / "cache"
    sources.scan(pkg, cache_dir=cache)
    assert sources.scan(pkg, cache_dir=cache).cache == "warm"
    monkeypatch.setattr(sources, "_analyzer_hash", lambda: "another analyzer")
    again = sources.scan(pkg, cache_dir=cache)
    assert again.cache == "cold" and again.read == 7


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "wrong shape",
                                    "bad facts", "bad derived"])
def test_a_damaged_cache_is_ignored_and_rewritten(tmp_path: Path, damage: str) -> None:
    pkg, cache = _pkg(tmp_path), tmp_path / "cache"
    truth = sources.scan(pkg, cache_dir=cache)
    (cfile,) = cache.glob("check-sources-*.marshal")
    raw = cfile.read_bytes()
    doc = kb_cache.load(cfile)
    assert isinstance(doc, dict)
    if damage == "garbage":
        cfile.write_bytes(b"{{{ not marshal" + bytes(range(256)))
    elif damage == "truncated":
        cfile.write_bytes(raw[:100])
    elif damage == "empty":
        cfile.write_bytes(b"")
    elif damage == "wrong shape":
        doc["files"] = ["not", "a", "mapping"]
        assert kb_cache.store(cfile, doc) is None
    elif damage == "bad derived":
        doc["derived"] = {"module": 3, "names": "join_group"}
        assert kb_cache.store(cfile, doc) is None
    else:  # a file's facts: read when another file changes and the facts are rebuilt
        rel = "sglang/srt/elastic_ep/elastic_ep.py"
        doc["files"][rel][2] = {"imports": [{"module": "mooncake.pg"}], "calls": [],
                                "backends": []}
        assert kb_cache.store(cfile, doc) is None
        other = pkg / "srt" / "server_args.py"
        st = other.stat()
        os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    facts = sources.scan(pkg, cache_dir=cache)
    assert facts.derived == truth.derived
    if damage != "bad derived":
        assert facts.read >= 1
    again = sources.scan(pkg, cache_dir=cache)
    assert again.cache == "warm" and again.read == 0 and again.derived == truth.derived


def test_an_unwritable_cache_costs_time_not_answers(tmp_path: Path) -> None:
    pkg = _pkg(tmp_path)
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache folder should be")
    facts = sources.scan(pkg, cache_dir=blocker)
    assert facts.cache_error and str(blocker) in facts.cache_error
    assert "join_group" in _names(facts)
    assert blocker.read_text().startswith("a file")  # untouched


def test_bytecode_folders_are_not_sources(tmp_path: Path) -> None:
    pkg = _pkg(tmp_path)
    pyc = pkg / "srt" / "__pycache__"
    pyc.mkdir()
    (pyc / "fake.py").write_text("from mooncake.pg import never\n")
    facts = sources.scan(pkg, use_cache=False)
    assert facts.files == 7 and "never" not in _names(facts)
    (pkg / "srt" / "real.py").write_text("from mooncake.pg import seen\n")  # control
    assert "seen" in _names(sources.scan(pkg, use_cache=False))


def test_unreadable_source_raises_for_the_kb_fallback(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads files whatever their mode")
    pkg = _pkg(tmp_path)
    (pkg / "srt" / "server_args.py").chmod(0)
    with pytest.raises(PermissionError):
        sources.scan(pkg, use_cache=False)


def test_every_import_parses_the_other_mooncake_files_once(tmp_path: Path) -> None:
    pkg, cache = _pkg(tmp_path), tmp_path / "cache"
    store = pkg / "srt" / "mem_cache" / "mooncake_store.py"
    store.parent.mkdir(parents=True)
    store.write_text("from mooncake.store import MooncakeDistributedStore\n")
    pg_only = sources.scan(pkg, cache_dir=cache)
    assert pg_only.feature_imports == pg_only.imports  # only the process-group files
    assert all(i.module != "mooncake.store" for i in pg_only.imports)
    every = sources.scan(pkg, cache_dir=cache, every_import=True)
    assert every.read == 2  # the store and server_args.py ("mooncake" as a choice)
    hicache = [i for i in every.feature_imports if i.module == "mooncake.store"]
    assert [(i.names, i.feature) for i in hicache] == [(("MooncakeDistributedStore",),
                                                        "hicache")]
    assert every.imports == pg_only.imports  # the elastic-EP facts do not change
    again = sources.scan(pkg, cache_dir=cache, every_import=True)
    assert again.cache == "warm" and again.read == 0
    assert again.feature_imports == every.feature_imports


def test_a_warm_start_does_not_load_the_analyzer(tmp_path: Path) -> None:
    import subprocess
    import sys

    pkg, cache = _pkg(tmp_path), tmp_path / "cache"
    sources.scan(pkg, cache_dir=cache)
    probe = ("import sys; from pathlib import Path; from moonpin.resolver.check import sources; "
             f"f = sources.scan(Path({str(pkg)!r}), cache_dir=Path({str(cache)!r})); "
             "print(f.cache, sorted(f.derived['names']) != [], "
             "'moonpin.readers.pyast' in sys.modules)")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["warm", "True", "False"]
    (pkg / "srt" / "new.py").write_text("x = 1\n")  # control: a change loads it
    out = subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["stale", "True", "True"]


@pytest.mark.parametrize("special", ["fifo", "dev-zero"])
def test_a_source_that_is_not_a_file_is_oserror(tmp_path: Path, special: str) -> None:
    from tests.hostile.gen import make_special

    pkg = _pkg(tmp_path)
    make_special(special, pkg / "srt" / "hostile.py")
    with pytest.raises(OSError, match="not a regular file"):
        sources.scan(pkg, use_cache=False)
