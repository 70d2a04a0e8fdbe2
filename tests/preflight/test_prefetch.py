"""A cold check loads the elastic-EP module on a second core while SGLang's sources are read
(moonpin/preflight/prefetch.py): the verdict is the one a single process reaches, a
wrong guess or a failed child is a miss the check computes itself, and no child outlives
the check or writes to its output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from moonpin.preflight import prefetch
from moonpin.preflight.env.context import Run
from moonpin.preflight.loader import loadchain
from moonpin.preflight.run import check_image
from tests.lib.checkrun import ROOT, run, small_kb
from tests.lib.images import healthy_image

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def _gone(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def _kb_recording(tmp_path: Path, module: str) -> Path:
    path = small_kb(tmp_path)
    doc = json.loads(path.read_text())
    doc["sglang"][0]["pg"]["module"] = module
    path.write_text(json.dumps(doc))
    return path


def _same_both_ways(site: Path, kb: Path) -> str:
    forked = run(site, "--no-cache", kb=kb)
    alone = run(site, "--no-cache", kb=kb, env={"MOONPIN_CHECK_FORK": "0"})
    assert (forked.rc, forked.out) == (alone.rc, alone.out)
    return forked.out


def test_the_verdict_is_the_single_process_one(tmp_path: Path) -> None:
    out = _same_both_ways(healthy_image(tmp_path / "site"), small_kb(tmp_path))
    assert out.rstrip().endswith("usable (deep probe not run: --no-deep)")


def test_a_failing_load_is_said_the_same(tmp_path: Path) -> None:
    site = healthy_image(tmp_path / "site", needed=("libgone.so.1",))
    out = _same_both_ways(site, small_kb(tmp_path))
    assert "libgone.so.1" in out and "not usable" in out


def test_a_wrong_guess_is_computed_afresh(tmp_path: Path) -> None:
    """The KB records mooncake.ep for the release, its sources import mooncake.pg: the
    child loads ep, the check needs pg's load and computes it."""
    out = _same_both_ways(healthy_image(tmp_path / "site"), _kb_recording(tmp_path, "mooncake.ep"))
    assert "the installed sources need mooncake.pg" in out and "pg_2_13_0" in out


def _in_process(site: Path, kb: Path) -> list[tuple[str, str, str]]:
    report = check_image(elastic_ep_backend="mooncake", site_packages=[site], kb_path=kb,
                         deep=False, source_cache=False)
    return [(c.name, c.status, c.message) for c in report.checks]


def test_the_load_comes_from_the_child(tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    site, kb = healthy_image(tmp_path / "site"), small_kb(tmp_path)
    alone = _in_process(site, kb)
    taken: list[object] = []
    real = loadchain._prefetched

    def spy(run: Run, key: str) -> object:
        got = real(run, key)
        taken.append(got)
        return got

    started: list[prefetch.Pending] = []
    start = prefetch.start

    def counted(work: object) -> prefetch.Pending | None:
        got = start(work)  # type: ignore[arg-type]
        if got is not None:
            started.append(got)
        return got

    monkeypatch.setattr(loadchain, "_prefetched", spy)
    monkeypatch.setattr(prefetch, "start", counted)
    monkeypatch.setattr(prefetch, "_may_fork", lambda: True)
    assert _in_process(site, kb) == alone
    # the torch line's own import (computed here while the child works) is not the child's
    assert len(started) == 1 and [t for t in taken if t is not None]
    assert _gone(started[0].pid)


def test_a_child_not_taken_is_ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check stops before the load (no build for this torch): the child is killed and
    reaped when the check ends."""
    site = healthy_image(tmp_path / "site", torch_builds=("2.12.0",))
    started: list[prefetch.Pending] = []
    start = prefetch.start

    def slow(work: object) -> prefetch.Pending | None:
        got = start(lambda: time.sleep(60))
        if got is not None:
            started.append(got)
        return got

    monkeypatch.setattr(prefetch, "start", slow)
    monkeypatch.setattr(prefetch, "_may_fork", lambda: True)
    t0 = time.monotonic()
    checks = _in_process(site, small_kb(tmp_path))
    assert time.monotonic() - t0 < 30
    assert ("build", "fail") in [(n, s) for n, s, _ in checks]
    assert len(started) == 1 and _gone(started[0].pid)


@pytest.mark.parametrize("work", [lambda: os._exit(3), lambda: 1 / 0, lambda: object()],
                         ids=["exits", "raises", "unmarshalable"])
def test_a_failed_child_is_a_miss(work: object) -> None:
    p = prefetch.start(work)  # type: ignore[arg-type]
    assert p is not None
    assert p.take() is None and _gone(p.pid)
    assert p.take() is None  # taken once


def test_an_answer_comes_back() -> None:
    p = prefetch.start(lambda: {"k": ((1, "a"), {"x"}, {"E": None})})
    assert p is not None and p.take() == {"k": ((1, "a"), {"x"}, {"E": None})}


def test_a_wrong_shaped_answer_is_computed_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    class Fake:
        def take(self) -> object:
            return {"key": ("not a report", {"f"}, {}), "other": 1}

    run = Run()
    run.pending.append(Fake())  # type: ignore[arg-type]
    assert loadchain._prefetched(run, "key") is None
    assert loadchain._prefetched(run, "other") is None


def test_no_fork_beside_another_thread() -> None:
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert prefetch.start(lambda: 1) is None
    finally:
        stop.set()
        t.join()


def test_no_fork_when_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONPIN_CHECK_FORK", "0")
    assert prefetch.start(lambda: 1) is None


def test_the_child_writes_nothing_to_the_output() -> None:
    code = ("from moonpin.preflight import prefetch\n"
            "import sys\n"
            "p = prefetch.start(lambda: (print('child out'), sys.stderr.write('err'), 7)[2])\n"
            "print(p.take())\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "7\n", "")


def test_no_child_beside_the_deep_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A load begun ahead that the check did not take is ended before the deep probe
    imports the image (it would take a core from it)."""
    from moonpin.preflight import run as check_run

    site = healthy_image(tmp_path / "site", torch_builds=("2.12.0",))
    start = prefetch.start
    started: list[prefetch.Pending] = []

    def sleeper(work: object) -> prefetch.Pending | None:
        got = start(lambda: time.sleep(60))
        if got is not None:
            started.append(got)
        return got

    monkeypatch.setattr(prefetch, "start", sleeper)
    monkeypatch.setattr(prefetch, "_may_fork", lambda: True)
    beside: list[bool] = []
    monkeypatch.setattr(check_run, "_deep", lambda *a, **k: beside.append(
        all(_gone(p.pid) for p in started)))
    check_image(elastic_ep_backend="mooncake", site_packages=[site], kb_path=small_kb(tmp_path),
                deep=True, source_cache=False)
    assert len(started) == 1 and beside == [True]


def test_isolated_answers() -> None:
    assert prefetch.isolated(lambda: {"a": (1, 2)}) == (True, {"a": (1, 2)})


def test_isolated_holds_a_memory_bomb() -> None:
    """marshal trusts declared lengths: nested lists each declaring 2**27 items ask for a
    gigabyte a level before reading any item. The child runs out, this process does not."""
    import marshal

    bomb = b"[\xff\xff\xff\x07" * 64
    t0 = time.monotonic()
    assert prefetch.isolated(lambda: marshal.loads(bomb), memory=64 << 20) == (False, None)
    assert time.monotonic() - t0 < 20


def test_isolated_holds_time(monkeypatch: pytest.MonkeyPatch) -> None:
    start = prefetch.start
    started: list[prefetch.Pending] = []

    def counted(work: Any) -> prefetch.Pending | None:
        got = start(work)
        if got is not None:
            started.append(got)
        return got

    monkeypatch.setattr(prefetch, "start", counted)
    t0 = time.monotonic()
    assert prefetch.isolated(lambda: time.sleep(60), timeout=1.0) == (False, None)
    assert time.monotonic() - t0 < 10 and len(started) == 1 and _gone(started[0].pid)


def test_a_check_that_stops_before_the_load_ends_cleanly(tmp_path: Path) -> None:
    """torch's label read from its bytecode cache (a held child: prefetch is loaded), then
    no mooncake installed: the check stops before the load chain's module is ever loaded,
    and ends with its verdict, not a KeyError."""
    import py_compile
    import shutil

    site = healthy_image(tmp_path / "site")
    py_compile.compile(str(site / "torch" / "version.py"), doraise=True)
    shutil.rmtree(site / "mooncake")
    r = run(site, "--no-cache", kb=small_kb(tmp_path))
    assert r.rc == 1 and r.status("mooncake package") == "fail", r.out + r.err
