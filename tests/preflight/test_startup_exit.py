"""A ``.pth`` ``import`` line that ends the interpreter while ``site`` starts it: no program
runs, so the check fails (``--site-packages``); a line that raises an ``Exception`` only
makes ``site`` skip the rest of its file. Each case is held against what ``site`` itself
does with the folder, in a child interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from moonpin.preflight.pyimport.startup import line_exit
from tests.lib.checkrun import run, small_kb
from tests.lib.images import healthy_image

LINES = [
    ("import sys; sys.exit(3)", True),
    ("import os; os._exit(0)", True),
    ("import os; os.abort()", True),
    ("import sys; raise SystemExit('bye')", True),
    ("import sys; raise KeyboardInterrupt", True),
    ("import sys;sys.exit()", True),
    ("import\tsys; sys.exit(1)", True),
    ("import sys; raise ValueError('caught by site')", False),
    ("import nosuchmodule_xyz; import sys; sys.exit(3)", False),  # ImportError first
    ("import sys; exit(3)", False),  # `exit` is set by site after the .pth files: NameError
    ("import sys; sys.exit(3) if sys.maxsize < 0 else None", False),  # not certain: not run
    ("import sys; print('x', file=sys.stderr); sys.exit(2)", False),  # not claimed (a call)
]


def _limit() -> None:  # the truth's child: /dev/zero read to its end meets a wall
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def _site_runs(site: Path) -> bool:
    """Whether an interpreter that adds ``site`` as ``site`` does reaches a program (within
    10 s and 1 GiB)."""
    code = f"import site; site.addsitedir({str(site)!r}); print('reached')"
    try:
        proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True,
                              text=True, timeout=10, preexec_fn=_limit)
    except subprocess.TimeoutExpired:
        return False
    return "reached" in proc.stdout


@pytest.mark.parametrize(("line", "ends"), LINES)
def test_the_line_is_judged_as_site_runs_it(tmp_path: Path, line: str, ends: bool) -> None:
    site = healthy_image(tmp_path / "site")
    (site / "zz-start.pth").write_text(line + "\n")
    truth = _site_runs(site)
    got = run(site, kb=small_kb(tmp_path))
    stops = any(x.startswith("fail  interpreter:") for x in got.lines)
    if ends and "print(" not in line:
        assert not truth and stops and got.rc == 1, got.out
        assert f"remove that line from {site / 'zz-start.pth'}" in got.out
    elif truth:
        assert not stops and got.rc == 0, got.out
    else:  # a line site cannot survive that is not claimed: never a wrong failure
        assert not stops


def test_lines_after_one_that_raises_are_not_run(tmp_path: Path) -> None:
    site = healthy_image(tmp_path / "site")
    (site / "zz-start.pth").write_text("import nosuchmodule_xyz\nimport sys; sys.exit(3)\n")
    assert _site_runs(site)
    got = run(site, kb=small_kb(tmp_path))
    assert got.rc == 0 and "interpreter:" not in got.out


@pytest.mark.parametrize("line", ["import sys; sys.exit(", "\0", "import os; os._exit(0)" * 3,
                                  "import sys; sys.exit" + "(" * 300 + ")" * 300])
def test_a_line_that_does_not_parse_claims_nothing(line: str) -> None:
    assert line_exit(line) is None


@pytest.mark.parametrize(("kind", "ends"), [("fifo", True), ("/dev/zero", True),
                                             ("/dev/null", False), ("folder", False)])
def test_a_pth_whose_read_never_ends(tmp_path: Path, kind: str, ends: bool) -> None:
    """``site`` opens and reads every ``.pth`` to its end: a FIFO blocks the start for
    ever, ``/dev/zero`` is read until memory runs out; ``/dev/null`` and a folder (which
    ``site`` cannot open) are passed over."""
    import os
    import time

    site = healthy_image(tmp_path / "site")
    pth = site / "zz-start.pth"
    if kind == "fifo":
        os.mkfifo(pth)
    elif kind == "folder":
        pth.mkdir()
    else:
        pth.symlink_to(kind)
    assert _site_runs(site) is not ends
    t = time.monotonic()
    got = run(site, kb=small_kb(tmp_path))
    assert time.monotonic() - t < 30
    stops = [x for x in got.lines if x.startswith("fail  interpreter:")]
    if ends:
        assert got.rc == 1 and stops and f"{pth} is a " in stops[0], got.out
        assert f"fix: rm {pth}" in got.out
    else:
        assert got.rc == 0 and not stops, got.out
