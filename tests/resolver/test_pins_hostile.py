"""Hostile pins files (issue 19, the pins/renovate lines): bounded reads, bounded parsers,
writes that keep what they do not change, messages that name file and line and stay short.
Each judged by a real ``moonpin`` subprocess: exit 2 (or 0/1), no traceback, no hang."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from moonpin.resolver.pins.read import MAX_INCLUDE_DEPTH, read_pins
from moonpin.resolver.pins.reading.requirements import comment_start

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "kb.json"
STACK = "sglang==0.5.18\ntorch==2.13.0\nmooncake-transfer-engine-cuda13==0.3.12  # old\n"


def moonpin(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "moonpin", "--kb", str(SHIPPED), *args],
                       capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.returncode in (0, 1, 2)
    return r


def _bad_input(r: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "tip:" in r.stderr
    assert len(r.stderr) < 2000, len(r.stderr)
    for n in needles:
        assert n in r.stderr, (n, r.stderr)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_as_the_file_or_an_include_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "requirements.txt"
    os.mkfifo(fifo)
    r = moonpin("pins", str(fifo), timeout=30)
    _bad_input(r, f"{fifo} is a FIFO", "tip: give a regular file")
    assert ":0:" not in r.stderr
    inc = tmp_path / "base.txt"
    inc.write_text("-r requirements.txt\nsglang==0.5.18\n", encoding="utf-8")
    _bad_input(moonpin("pins", str(inc), timeout=30), f"{inc}:1:", "included file", "FIFO")
    _bad_input(moonpin("renovate", str(fifo), timeout=30), "FIFO")


def test_dev_zero_a_symlink_loop_and_a_folder(tmp_path: Path) -> None:
    zero = tmp_path / "requirements.txt"
    zero.symlink_to("/dev/zero")
    _bad_input(moonpin("pins", str(zero)), "character device")
    inc = tmp_path / "z.txt"
    inc.write_text("-r /dev/zero\n", encoding="utf-8")
    _bad_input(moonpin("pins", str(inc)), f"{inc}:1:", "character device")
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.symlink_to(b)
    b.symlink_to(a)
    _bad_input(moonpin("pins", str(a)), "symlink loop")
    folder = tmp_path / "reqs"
    folder.mkdir()
    _bad_input(moonpin("pins", str(folder)), "is a directory")
    (tmp_path / "d.txt").write_text("-r reqs\nsglang==0.5.18\n", encoding="utf-8")
    _bad_input(moonpin("pins", str(tmp_path / "d.txt")), "d.txt:1:", "is a directory")


def test_missing_and_empty_files_are_named(tmp_path: Path) -> None:
    missing = tmp_path / "missing.txt"
    _bad_input(moonpin("pins", str(missing)), str(missing), "does not exist")
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    _bad_input(moonpin("pins", str(empty)), str(empty), "no pin of sglang")
    _bad_input(moonpin("renovate", str(empty)), str(empty), "no exact sglang pin")


def test_600_chained_includes_end_in_a_clear_error(tmp_path: Path) -> None:
    for i in range(600):
        body = f"-r c{i + 1}.txt\n" if i < 599 else "sglang==0.5.18\n"
        (tmp_path / f"c{i}.txt").write_text(body, encoding="utf-8")
    _, errors = read_pins([tmp_path / "c0.txt"])
    (err,) = errors
    assert f"nest deeper than {MAX_INCLUDE_DEPTH}" in err.message and err.line == 1
    _bad_input(moonpin("pins", str(tmp_path / "c0.txt")), "nest deeper")


def test_comment_search_is_linear_on_a_long_run_of_spaces(tmp_path: Path) -> None:
    line = "sglang==0.5.18" + " " * 60_000 + "x"
    start = time.perf_counter()
    assert comment_start(line) == -1
    assert comment_start("a" + " " * 60_000 + "#c") == 1
    assert comment_start("#only") == 0 and comment_start("a#b") == -1
    req = tmp_path / "requirements.txt"
    req.write_text(line[:-1] + "# pinned\n", encoding="utf-8")
    pins, errors = read_pins([req])
    assert time.perf_counter() - start < 2.0
    assert errors == [] and pins[0].version == "0.5.18"
    # past the line limit: refused, named by line, not echoed whole
    req.write_text("torch==2.13.0\nsglang==0.5.18" + " " * 100_000 + "x\n", encoding="utf-8")
    _bad_input(moonpin("pins", str(req)), f"{req}:2:", "characters long")


def test_toml_nesting_and_dotted_headers_are_refused_before_tomllib(tmp_path: Path) -> None:
    deep = tmp_path / "pyproject.toml"
    deep.write_text("[project]\ndependencies = " + "[" * 3000 + "]" * 3000 + "\n",
                    encoding="utf-8")
    _bad_input(moonpin("pins", str(deep)), f"{deep}:2:", "nest deeper")
    dotted = tmp_path / "d" / "pyproject.toml"
    dotted.parent.mkdir()
    dotted.write_text("[" + ".".join(["a"] * 100_000) + "]\n", encoding="utf-8")
    start = time.perf_counter()
    _bad_input(moonpin("pins", str(dotted)), f"{dotted}:1:", "dotted parts")
    assert time.perf_counter() - start < 20
    # a normal pyproject with brackets inside strings still reads
    ok = tmp_path / "ok" / "pyproject.toml"
    ok.parent.mkdir()
    ok.write_text('[project]\ndependencies = ["sglang[all]==0.5.18", "x[a]>=1"]\n',
                  encoding="utf-8")
    pins, errors = read_pins([ok])
    assert errors == [] and [p.version for p in pins] == ["0.5.18"]


def test_a_5000_digit_version_is_refused_cleanly(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("sglang==" + "1" * 5000 + "\n", encoding="utf-8")
    _bad_input(moonpin("pins", str(req)), f"{req}:1:", "5,000 characters")
    docker = tmp_path / "Dockerfile"
    docker.write_text("ARG SGLANG_VERSION=" + "9" * 5000 + "\n", encoding="utf-8")
    r = moonpin("pins", str(docker))
    assert r.returncode in (1, 2) and len(r.stdout) + len(r.stderr) < 3000
    _bad_input(moonpin("renovate", "--sglang", "1" * 5000), "too long to be a release")


def test_renovate_on_a_non_pep440_pin_names_file_and_line(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    # (``sglang===${V}`` is pip's ${V} expansion now: a pin that is not judged, see
    # test_pins_spellings)
    req.write_text("torch==2.13.0\nsglang===nightly-build\n", encoding="utf-8")
    _bad_input(moonpin("renovate", str(req)), f"{req}:2:", "not a PEP 440 version")
    _bad_input(moonpin("pins", str(req)), f"{req}:2:", "not a PEP 440 version")


def test_a_long_bad_line_is_echoed_cut(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("sglang >>= " + "x" * 30_000 + "\n", encoding="utf-8")
    r = moonpin("pins", str(req))
    _bad_input(r, f"{req}:1:", "more characters")


def test_write_keeps_crlf_mode_and_writes_through_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real-requirements.txt"
    real.write_bytes(STACK.replace("\n", "\r\n").encode())
    real.chmod(0o640)
    link = tmp_path / "requirements.txt"
    link.symlink_to(real.name)
    r = moonpin("pins", str(link), "--write")
    assert r.returncode == 0, r.stderr  # what it leaves is compatible (issue 27)
    assert link.is_symlink() and os.readlink(link) == real.name
    data = real.read_bytes()
    assert data == (STACK.replace("0.3.12", "0.3.13.post1").replace("\n", "\r\n")).encode()
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert "through the symlink" in r.stderr
    again = moonpin("pins", str(link))
    assert again.returncode == 0, again.stdout


def test_write_through_a_dangling_symlink_is_refused(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text(STACK, encoding="utf-8")
    from moonpin.resolver.pins.read import write_keeping

    dangling = tmp_path / "gone.txt"
    dangling.symlink_to(tmp_path / "nowhere.txt")
    with pytest.raises(OSError):
        write_keeping(str(dangling), "x")
    assert not (tmp_path / "nowhere.txt").exists()


def _pins_main(capsys: pytest.CaptureFixture[str], *files: str) -> tuple[int, str]:
    from moonpin.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["--kb", str(SHIPPED), "pins", *files])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return int(e.value.code or 0), err


@pytest.mark.parametrize("make, said, tip", [
    ("missing", "missing.txt does not exist; nothing was judged", "tip: check the path"),
    ("folder", "reqs is a directory, not a regular file; nothing was judged",
     "tip: give the files in it, e.g. moonpin pins {tmp}/reqs/requirements.txt"),
    ("empty folder", "reqs is a directory, not a regular file; nothing was judged",
     "tip: give a file, not a folder"),
    ("fifo", "requirements.txt is a FIFO (named pipe), not a regular file; nothing was judged",
     "tip: give a regular file"),
    ("other kind", "notes.md is not a requirements or constraints file", "--match"),
])
def test_a_file_given_that_cannot_be_read_is_named_as_such(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], make: str, said: str,
        tip: str) -> None:
    """#15: no ``FILE:0:``, no "line(s) could not be read", a tip that fits the file."""
    path = {"missing": tmp_path / "missing.txt", "folder": tmp_path / "reqs",
            "empty folder": tmp_path / "reqs", "fifo": tmp_path / "requirements.txt",
            "other kind": tmp_path / "notes.md"}[make]
    if make == "folder":
        path.mkdir()
        (path / "requirements.txt").write_text("sglang==0.5.18\n", encoding="utf-8")
        (path / "README.md").write_text("not read\n", encoding="utf-8")
    elif make == "empty folder":
        path.mkdir()
    elif make == "fifo":
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs here")
        os.mkfifo(path)
    elif make == "other kind":
        path.write_text("sglang 0.5.18\n", encoding="utf-8")
    code, err = _pins_main(capsys, str(path))
    assert code == 2
    first = err.splitlines()[0]
    assert first.startswith("moonpin: error: ") and str(path) in first, err
    assert said in first, err
    assert tip.format(tmp=tmp_path) in err, err
    assert ":0" not in err and "line(s)" not in err and "fix or remove" not in err
    assert "README.md" not in err


def test_an_empty_file_is_named_and_said_to_be_empty(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    code, err = _pins_main(capsys, str(empty))
    assert code == 2 and f"{empty} is empty" in err and "tip:" in err
    comments = tmp_path / "requirements.txt"
    comments.write_text("# nothing pinned yet\nnumpy==2.0\n", encoding="utf-8")
    code, err = _pins_main(capsys, str(comments))
    assert code == 2 and f"no pin of sglang, torch or a mooncake distribution in {comments}" \
        in err and "is empty" not in err


def test_a_missing_file_beside_a_bad_line_lists_both(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "requirements.txt"
    bad.write_text("sglang==0.5.18\ntorch=2.13.0\n", encoding="utf-8")
    missing = tmp_path / "gone.txt"
    code, err = _pins_main(capsys, str(bad), str(missing))
    assert code == 2
    assert f"{bad}:2: invalid requirement" in err
    assert f"{missing} does not exist" in err and f"{missing}:0" not in err
    assert "1 file(s) and 1 line(s) could not be read; nothing was judged" in err
    assert "tip: check the path" in err and "fix or remove those lines" in err
