"""The runtime check's reading of SGLang sources, and its cache validated like bytecode."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from moonpin.kb import cache as kb_cache
from moonpin.preflight.installed import sources
from moonpin.preflight.pyimport import importer, metapath
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
    for stamps in cache.glob("check-stamps-*.marshal"):
        stamps.unlink()  # the facts file is what is damaged here, and read
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
    probe = ("import sys; from pathlib import Path; "
             "from moonpin.preflight.installed import sources; "
             f"f = sources.scan(Path({str(pkg)!r}), cache_dir=Path({str(cache)!r})); "
             "print(f.cache, sorted(f.derived['names']) != [], "
             "'moonpin.readers.pyast.usage' in sys.modules)")
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


# ---------------------------------------------------------------- the warm start's stamps
# A start that finds nothing changed stats every folder and every source against the stamps
# file (moonpin.preflight.installed.stamps) and reads nothing else: no walk of the importer model,
# no facts file; a folder whose mtime is recent is not trusted (racy), so these tests date
# the tree back first, as an image built earlier is.

_OLD_NS = 1_600_000_000 * 10**9


def _settle(pkg: Path) -> None:
    """Date every folder and file under ``pkg`` back, each to its own old time."""
    for i, (folder, _, files) in enumerate(os.walk(pkg)):
        for j, name in enumerate(files):
            t = _OLD_NS + i * 10**9 + j * 1000
            os.utime(os.path.join(folder, name), ns=(t, t))
        t = _OLD_NS + i * 10**9 + 999_000
        os.utime(folder, ns=(t, t))


@contextlib.contextmanager
def _keep_folder_stamp(folder: Path) -> Iterator[None]:
    """Put ``folder``'s mtime back after a change in it: a change no listing-free check
    could see through the folder, only through the file's own stamp."""
    st = folder.stat()
    yield
    os.utime(folder, ns=(st.st_atime_ns, st.st_mtime_ns))


def _quick_scan(pkg: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> sources.SourceFacts:
    """A scan that fails when it needs more than the stamps file (the per-file facts, or a
    walk of the tree)."""
    with monkeypatch.context() as m:
        def refuse(*_: object) -> None:
            raise AssertionError("the warm start read more than the stamps")

        m.setattr(sources, "_load_cache", refuse)
        m.setattr(importer, "folder_sources", refuse)
        m.setattr(metapath.Importer, "module_names", refuse)
        return sources.scan(pkg, cache_dir=cache)


def test_a_settled_tree_is_checked_by_stamps_alone(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pkg, cache = _pkg(tmp_path), tmp_path / "cache"
    _settle(pkg)
    cold = sources.scan(pkg, cache_dir=cache)
    warm = _quick_scan(pkg, cache, monkeypatch)
    assert warm.cache == "warm" and warm.read == 0 and warm.files == cold.files == 7
    assert warm.derived == cold.derived
    assert warm.derived == sources.scan(pkg, use_cache=False).derived


@pytest.mark.parametrize("change", ["edit in place", "replaced (bind mount)",
                                    "replaced by a folder"])
def test_a_source_changed_under_an_unchanged_folder_is_seen(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    """An in-place edit and a file mounted over a source (a ConfigMap) leave the folder's
    stamp as it was: the source's own stamp tells."""
    pkg, cache = _pkg(tmp_path), tmp_path / "cache"
    _settle(pkg)
    sources.scan(pkg, cache_dir=cache)
    assert _quick_scan(pkg, cache, monkeypatch).cache == "warm"  # control
    ela = pkg / "srt" / "elastic_ep" / "elastic_ep.py"
    text = ela.read_text().replace("join_group", "join_group_v2")
    with _keep_folder_stamp(ela.parent):
        if change == "edit in place":
            with open(ela, "r+") as f:  # same inode, as `sed -i` does not but an editor may
                f.write(text)
        elif change == "replaced (bind mount)":
            other = tmp_path / "configmap.py"
            other.write_text(text)
            os.replace(other, ela)
        else:
            ela.unlink()
            ela.mkdir()
    facts = sources.scan(pkg, cache_dir=cache)
    truth = sources.scan(pkg, use_cache=False)
    assert facts.derived == truth.derived
    if change != "replaced by a folder":
        assert "join_group_v2" in _names(facts) and facts.cache == "stale"
    else:
        assert "join_group" not in _names(facts)


def test_new_and_removed_sources_and_folders_are_seen(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    pkg, cache = _pkg(tmp_path), tmp_path / "cache"
    _settle(pkg)
    sources.scan(pkg, cache_dir=cache)
    deep = pkg / "srt" / "new_pkg" / "deeper"
    deep.mkdir(parents=True)
    (deep / "hot.py").write_text("from mooncake.pg import hot_fix\n")
    _settle(pkg)  # even dated back, the parents' stamps differ from the recorded ones
    assert "hot_fix" in _names(sources.scan(pkg, cache_dir=cache))
    assert "hot_fix" in _names(_quick_scan(pkg, cache, monkeypatch))  # recorded
    (deep / "hot.py").unlink()
    _settle(pkg)
    gone = sources.scan(pkg, cache_dir=cache)
    assert "hot_fix" not in _names(gone) and gone.files == 7


def _relisted(cache: Path, pkg: Path) -> list[str]:
    (sfile,) = cache.glob("check-stamps-*.marshal")
    doc = kb_cache.load(sfile)
    assert isinstance(doc, dict)
    return [os.path.relpath(folder, pkg) for folder, _ in doc["relist"]]


@pytest.mark.parametrize("recent", [True, False])
def test_a_recent_folder_is_listed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         recent: bool) -> None:
    """A folder changed within the clock's resolution of being listed may change again
    keeping its stamp (git's racy-clean case): every start lists that folder again (only
    that one), and sees such a change. A folder walked when older is trusted by its stamp:
    the same change, made by hand, goes unseen there (the documented limit)."""
    import time

    pkg, cache = _pkg(tmp_path), tmp_path / "cache"
    _settle(pkg)
    folder = pkg / "srt" / "distributed"
    if recent:
        later = time.time_ns() + 30 * 10**9  # "just now" for the length of the test
        os.utime(folder, ns=(later, later))
    sources.scan(pkg, cache_dir=cache)
    assert _relisted(cache, pkg) == (["srt/distributed"] if recent else [])
    listed: list[str] = []
    real_listing = metapath.Importer.listing

    def listing(self: metapath.Importer, path: str) -> dict[str, int]:
        listed.append(path)
        return real_listing(self, path)

    monkeypatch.setattr(metapath.Importer, "listing", listing)
    assert _quick_scan(pkg, cache, monkeypatch).cache == "warm"  # no walk, no facts file
    assert listed == ([f"{pkg}/srt/distributed"] if recent else [])
    with _keep_folder_stamp(folder):  # a change in the same tick: the stamp stays
        (folder / "late.py").write_text("from mooncake.pg import late_name\n")
    facts = sources.scan(pkg, cache_dir=cache)
    assert ("late_name" in _names(facts)) == recent
    assert "late_name" in _names(sources.scan(pkg, use_cache=False))  # control


@pytest.mark.parametrize(("age_s", "whole_seconds", "trusted"), [
    (1, False, False), (5, False, True), (5, True, False), (30, True, True)])
def test_the_racy_window_follows_the_clock_of_the_file_system(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, age_s: int, whole_seconds: bool,
        trusted: bool) -> None:
    """A stamp in whole seconds comes from a file system with a coarse clock: the window in
    which a second change could hide is longer. (Both windows widened here, 2 s and 20 s,
    so that a slow machine does not move a case across one.)"""
    import time

    monkeypatch.setattr(kb_cache, "RACY_NS", 2 * 10**9)
    monkeypatch.setattr(kb_cache, "RACY_COARSE_NS", 20 * 10**9)
    pkg, cache = _pkg(tmp_path), tmp_path / "cache"
    _settle(pkg)
    t = time.time_ns() - age_s * 10**9
    t = t - t % 10**9 if whole_seconds else t - (1 if t % 10**9 == 0 else 0)
    os.utime(pkg / "srt", ns=(t, t))
    sources.scan(pkg, cache_dir=cache)
    assert _relisted(cache, pkg) == ([] if trusted else ["srt"])
    assert _quick_scan(pkg, cache, monkeypatch).cache == "warm"


@pytest.mark.parametrize("damage", ["groups", "stamps", "derived", "names", "found", "kinds"])
def test_a_damaged_stamps_file_is_a_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           damage: str) -> None:
    pkg, cache = _pkg(tmp_path), tmp_path / "cache"
    _settle(pkg)
    truth = sources.scan(pkg, cache_dir=cache)
    (sfile,) = cache.glob("check-stamps-*.marshal")
    doc = kb_cache.load(sfile)
    assert isinstance(doc, dict)
    if damage == "groups":
        doc["groups"] = [[3, None]]
    elif damage == "stamps":
        flat = doc["scan"]["stamps"]
        doc["scan"]["stamps"] = [*flat[:-1], flat[-1] + 1]
    elif damage == "derived":
        doc["scan"]["derived"] = {"module": "mooncake.pg", "names": [1]}
    elif damage == "names":
        doc["groups"][0][1] = [*doc["groups"][0][1], "missing.py"]
    elif damage == "found":
        doc["found"] = ["only", "two"]
    else:
        doc["kind"] = [*doc["kind"], 1]
    assert kb_cache.store(sfile, doc) is None
    facts = sources.scan(pkg, cache_dir=cache)
    assert facts.derived == truth.derived
    assert _quick_scan(pkg, cache, monkeypatch).derived == truth.derived  # rewritten
