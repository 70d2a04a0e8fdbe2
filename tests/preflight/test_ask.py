"""Asking an interpreter what its sys.path is (``env/target._ask``): the child answers and
exits while something it started still holds the pipes; the check kills that session. The
session may have ended by itself in between (its last member exited after the parent was
seen to be gone): that is an answer, not a failure ("target: … No such process", exit 2,
seen once under load on a real image)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from moonpin.preflight.env.target import _ask


def _fake_python(tmp_path: Path) -> str:
    """An "interpreter" that answers, leaves a child holding its output pipes, and exits."""
    exe = tmp_path / "python"
    exe.write_text("#!/bin/sh\necho answer\n(sleep 3) &\nexit 0\n")
    exe.chmod(0o755)
    return str(exe)


def test_a_session_gone_before_it_is_killed_is_an_answer(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.killpg
    calls: list[int] = []

    def killpg(pgid: int, sig: int) -> None:
        calls.append(pgid)
        real(pgid, sig)  # the session ends here ...
        if len(calls) == 1:
            raise ProcessLookupError(3, "No such process")  # ... and was gone when asked

    monkeypatch.setattr(os, "killpg", killpg)
    got = _ask(_fake_python(tmp_path), timeout=30)
    assert got.returncode == 0 and got.stdout == b"answer\n"
    assert calls, "the leftover session was not killed"

