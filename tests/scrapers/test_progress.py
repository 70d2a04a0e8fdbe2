"""Progress: through the reporter, on stderr only when it is a terminal."""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

from moonpin.scrapers.local import scrape_path
from moonpin.scrapers.report import Reporter, StderrReporter
from tests.lib.server import FakeIndex
from tests.scrapers.test_local import make_tree
from tests.scrapers.test_scrape_e2e import index, scraped_kb  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]


class Recorder(Reporter):
    def __init__(self) -> None:
        self.events: list[tuple[str, ...]] = []

    def start(self, what: str, total: int, *, unit: str = "releases") -> None:
        self.events.append(("start", what, str(total), unit))

    def advance(self, label: str, *, nbytes: int = 0) -> None:
        self.events.append(("advance", label))

    def finish(self) -> None:
        self.events.append(("finish",))


def test_a_tree_reports_each_file_read_and_each_source_analysed(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "src")
    rec = Recorder()
    rel = scrape_path(tree, reporter=rec)
    starts = [e for e in rec.events if e[0] == "start"]
    assert [(e[1].split()[0], e[3]) for e in starts] == [("reading", "files"),
                                                        ("analysing", "sources")]
    assert starts[0][2] == "0"  # not known before the walk
    n_files = sum(1 for p in tree.rglob("*") if p.is_file())
    sources = ["sglang/__init__.py", "sglang/bad.py", "sglang/srt/distributed/parallel_state.py",
               "sglang/version.py"]
    assert starts[1][2] == str(len(sources))
    first = rec.events.index(starts[1])
    assert sum(e[0] == "advance" for e in rec.events[:first]) == n_files
    assert sorted(e[1] for e in rec.events[first:] if e[0] == "advance") == sources
    assert rec.events.count(("finish",)) == 2
    assert rel.version == "0.5.99"


def test_the_progress_line_is_drawn_only_on_a_terminal() -> None:
    live = io.StringIO()
    r = StderrReporter(live, live=True, summary=False)
    r.start("analysing x", 3, unit="sources")
    for name in ("a.py", "b.py", "c.py"):
        r.advance(name)
    r.finish()
    text = live.getvalue()
    assert "analysing x 0/3 sources" in text and "analysing x 3/3 sources c.py" in text
    assert text.endswith("\r\x1b[K")  # the line is cleared, nothing is left behind
    quiet = io.StringIO()
    r = StderrReporter(quiet, live=False, summary=False)
    r.start("reading x", 0, unit="files")
    r.advance("a")
    r.finish()
    assert quiet.getvalue() == ""
    unknown = io.StringIO()
    r = StderrReporter(unknown, live=True, summary=False)
    r.start("reading x", 0, unit="files")
    r.advance("a")  # within REDRAW of the start: not redrawn
    r.finish()
    assert "reading x 0 files" in unknown.getvalue() and "/0" not in unknown.getvalue()


def test_a_scrape_summary_still_prints_when_not_a_terminal() -> None:
    out = io.StringIO()
    r = StderrReporter(out, live=False)
    r.start("sglang", 2)
    r.advance("0.5.18", nbytes=2_000_000)
    r.advance("0.5.17")
    r.finish()
    lines = out.getvalue().splitlines()
    assert lines[0] == "sglang: 2 releases to read"
    assert lines[-1].startswith("sglang: 2/2 releases, 2.0 MB fetched, ")


def test_a_ci_log_gets_a_line_every_few_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a stream that is not a terminal (a CI log) a long batch says where it is every
    PERIOD seconds (issue 40: nothing between three warnings and the summary for 4 min)."""
    from moonpin.scrapers import report

    clock = [100.0]
    monkeypatch.setattr(report.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    r = StderrReporter(out, live=False)
    r.start("mooncake", 10)
    for n in range(10):
        clock[0] += 2.0  # an artifact every 2 s: a line every 5 s
        r.advance(f"mooncake-transfer-engine 0.3.{n}", nbytes=1_000_000)
    r.finish()
    lines = out.getvalue().splitlines()
    assert lines[0] == "mooncake: 10 releases to read"
    assert lines[1] == "mooncake: 3/10 releases, 3.0 MB, 6s (last: mooncake-transfer-engine 0.3.2)"
    assert len(lines) == 1 + 3 + 1, lines  # at 6, 12 and 18 s; then the summary
    assert lines[-1].startswith("mooncake: 10/10 releases, 10.0 MB fetched, 20.0s")


def _scrape_from_path(kb: Path, tree: Path, *, tty: bool) -> tuple[int, str, str]:
    argv = [sys.executable, "-m", "moonpin", "--kb", str(kb), "scrape", "--from-path",
            str(tree)]
    if not tty:
        r = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=300)
        return r.returncode, r.stdout, r.stderr
    master, slave = pty.openpty()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=slave, cwd=ROOT, text=True)
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        seen += chunk
    out, _ = p.communicate(timeout=60)
    os.close(master)
    return p.returncode, out, seen.decode(errors="replace")


def test_scrape_from_path_shows_progress_on_a_terminal_only(
        index: FakeIndex, tmp_path: Path) -> None:  # noqa: F811
    kb = scraped_kb(index, tmp_path / "kb" / "kb.json")
    tree = make_tree(tmp_path / "src")
    code, out, err = _scrape_from_path(kb, tree, tty=False)
    assert code == 0 and "recorded sglang 0.5.99" in out
    assert err == ""  # a pipe: nothing but warnings would go there
    code, out, err = _scrape_from_path(kb, tree, tty=True)
    assert code == 0 and "recorded sglang 0.5.99" in out
    assert "analysing " in err and "sources" in err and "reading " in err
    assert "resolving the answers of" in err
    assert err.endswith("\r\x1b[K")  # and the terminal is left clean
