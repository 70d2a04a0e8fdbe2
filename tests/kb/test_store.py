from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from moonpin.kb import store
from moonpin.kb.errors import KBError
from moonpin.kb.models import (
    SCHEMA_VERSION,
    Artifact,
    KnowledgeBase,
    PGRequirement,
    ScrapeInfo,
    SglangRelease,
)

ROOT = Path(__file__).resolve().parents[2]


def small_kb(n: int = 1) -> KnowledgeBase:
    art = Artifact(filename="sglang-0.5.18-py3-none-any.whl", url="http://x/a.whl",
                   sha256="ab" * 32, size=10)
    return KnowledgeBase(
        scrape=ScrapeInfo(scraped_at=datetime(2026, 11, 30, tzinfo=timezone.utc),
                          index_url="http://x/", moonpin_version="0"),
        sglang=tuple(SglangRelease(version=f"0.5.{i}", artifact=art,
                                   pg=PGRequirement(module="mooncake.pg", names=("join_group",)))
                     for i in range(n)),
    )


def test_round_trip(tmp_path: Path) -> None:
    p = tmp_path / "kb.json"
    kb = small_kb(3)
    store.save(kb, p)
    assert store.load(p) == kb
    assert json.loads(p.read_text())["schema_version"] == SCHEMA_VERSION


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"{not json", "not valid JSON"),
        (b'{"schema_version": "1"}', "schema_version"),
        (b"[]", "top level"),
        (json.dumps({"schema_version": SCHEMA_VERSION + 1}).encode(), "newer"),
        (json.dumps({"schema_version": 0}).encode(), "reads"),
    ],
)
def test_bad_files_name_file_field_and_fix(tmp_path: Path, content: bytes, needle: str) -> None:
    p = tmp_path / "kb.json"
    p.write_bytes(content)
    with pytest.raises(KBError) as e:
        store.load(p)
    assert needle in str(e.value)
    assert str(p) in str(e.value)
    assert e.value.hint and "moonpin" in e.value.hint


def test_schema_1_is_read_as_2(tmp_path: Path) -> None:
    """Schema 2 only added optional fields: a schema-1 file loads, with their defaults."""
    p = tmp_path / "kb.json"
    doc = json.loads(small_kb().model_dump_json())
    doc["schema_version"] = 1
    p.write_text(json.dumps(doc))
    assert store.load(p).schema_version == SCHEMA_VERSION >= 2


def test_invalid_field_is_named(tmp_path: Path) -> None:
    p = tmp_path / "kb.json"
    doc = json.loads(small_kb().model_dump_json())
    doc["sglang"][0]["pg"]["names"] = 5
    p.write_text(json.dumps(doc))
    with pytest.raises(KBError, match=r"sglang\.0\.pg\.names"):
        store.load(p)


def test_truncated_file(tmp_path: Path) -> None:
    p = tmp_path / "kb.json"
    data = store.dumps(small_kb(5))
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(KBError, match="not valid JSON"):
        store.load(p)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(KBError, match="not found"):
        store.load(tmp_path / "nope.json")


def test_crash_mid_write_keeps_previous_kb(tmp_path: Path) -> None:
    """A writer killed while writing leaves the old file whole (temp file + os.replace)."""
    p = tmp_path / "kb.json"
    store.save(small_kb(1), p)
    before = p.read_bytes()
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        from moonpin.kb import store
        from tests.kb.test_store import small_kb
        real_fsync = os.fsync
        def die(fd):
            os._exit(9)   # the process dies after writing, before the rename
        os.fsync = die
        store.save(small_kb(50), __import__("pathlib").Path({str(p)!r}))
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT)
    assert r.returncode == 9
    assert p.read_bytes() == before
    assert store.load(p) == small_kb(1)


def _hold(path: str, seconds: float, ready: multiprocessing.synchronize.Event) -> None:  # type: ignore[name-defined]
    with store.kb_lock(Path(path)):
        ready.set()
        time.sleep(seconds)


def test_second_writer_waits_then_reports_holder(tmp_path: Path) -> None:
    p = tmp_path / "kb.json"
    ready = multiprocessing.Event()
    proc = multiprocessing.Process(target=_hold, args=(str(p), 3.0, ready))
    proc.start()
    try:
        assert ready.wait(10)
        with pytest.raises(KBError, match=rf"locked by another scrape \(pid {proc.pid}\)"):
            with store.kb_lock(p, timeout=0.3):
                pass
    finally:
        proc.join()
    with store.kb_lock(p, timeout=1):  # free again once the holder is gone
        pass


def test_default_path_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONPIN_KB", str(tmp_path / "x.json"))
    assert store.default_kb_path() == tmp_path / "x.json"
    monkeypatch.delenv("MOONPIN_KB")
    assert store.default_kb_path().parts[-2:] == ("data", "kb.json")
