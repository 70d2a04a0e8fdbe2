"""The remembered verdict of a warm worker start (moonpin/preflight/verdict.py): replayed
only while everything the run read still holds, recomputed on any change, never kept from a
run that was not fully traced."""

from __future__ import annotations

import json
import marshal
import os
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

from moonpin.preflight import verdict
from tests.lib.checkrun import ROOT, small_kb
from tests.lib.extimages import add_nixl, torch_image
from tests.lib.images import healthy_image
from tests.preflight.test_extensions_warm import copied_moonpin, warm

_CHECK = "moonpin.preflight.run"  # what a replayed start never loads


class Start:
    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.rc, self.out = proc.returncode, proc.stdout
        imports = [line for line in proc.stderr.splitlines() if line.startswith("import time:")]
        self.err = "".join(line + "\n" for line in proc.stderr.splitlines()
                           if not line.startswith("import time:"))
        self.replayed = not any(line.rstrip().endswith(_CHECK) for line in imports)


def start(site: Path, *args: str, kb: Path, env: dict[str, str] | None = None,
          deep: bool = False, cwd: Path = ROOT,
          launch: tuple[str, ...] = ("--elastic-ep-backend", "mooncake")) -> Start:
    """``python -m moonpin.preflight`` as a worker runs it (with ``-X importtime``, which
    tells whether the check itself was loaded), of the moonpin in ``cwd``."""
    cmd = [sys.executable, "-X", "importtime", "-m", "moonpin.preflight",
           "--site-packages", str(site), *launch, "--kb", str(kb)]
    if not deep:
        cmd.append("--no-deep")
    full = {k: v for k, v in os.environ.items() if k != "MOONPIN_KB"}
    full["MOONPIN_CHECK_SYSTEM_LIBS"] = str(site / "_no_system_libs")
    full.update(env or {})
    return Start(subprocess.run([*cmd, *args], cwd=cwd, capture_output=True, text=True,
                                env=full, timeout=120))


def memos() -> list[Path]:
    return sorted(Path(os.environ["MOONPIN_CACHE_DIR"]).glob("check-verdict-*"))


@pytest.fixture
def image(tmp_path: Path) -> tuple[Path, Path]:
    site = healthy_image(tmp_path / "site")
    kb = small_kb(tmp_path)
    time.sleep(0.15)  # older than the racy window: a first warm start may keep its answer
    return site, kb


def remembered(site: Path, *args: str, kb: Path, env: dict[str, str] | None = None,
               **how: Any) -> Start:
    """Start until the answer is remembered (a cold start forks, so the warm one keeps it);
    the first replayed start. The forked child writes the memo after the start returns: on
    a loaded machine, wait for it (up to 10 s) before the next start."""
    for _ in range(4):
        got = start(site, *args, kb=kb, env=env, **how)
        if got.replayed:
            return got
        deadline = time.monotonic() + 10
        while not memos() and time.monotonic() < deadline:
            time.sleep(0.05)
    raise AssertionError(f"never replayed; memos: {memos()}\n{got.out}{got.err}")


@pytest.mark.parametrize("args", [(), ("-q",), ("--json",)])
def test_a_warm_start_replays_what_the_check_says(image: tuple[Path, Path],
                                                  args: tuple[str, ...]) -> None:
    site, kb = image
    fresh = start(site, *args, "--no-cache", kb=kb)
    assert fresh.rc == 0 and not fresh.replayed
    again = remembered(site, *args, kb=kb)
    assert (again.rc, again.out, again.err) == (fresh.rc, fresh.out, fresh.err)
    if args == ("--json",):
        assert json.loads(again.out)["exit_code"] == 0


def _remove_build(site: Path) -> None:
    for f in (site / "mooncake").glob("pg_2_13_0*"):
        f.unlink()


def _import_a_missing_name(site: Path) -> None:
    src = next(p for p in (site / "sglang").rglob("*.py") if "mooncake.pg" in p.read_text())
    with open(src, "a") as f:
        f.write("\nfrom mooncake.pg import NoSuchName\n")


def _shadow_the_loader(site: Path) -> None:
    """A package beside a module of the same name is what the importer takes."""
    (site / "mooncake" / "pg").mkdir()
    (site / "mooncake" / "pg" / "__init__.py").write_text("")


def _label_from_the_environment(site: Path) -> None:
    (site / "torch" / "version.py").write_text(
        "import os\n__version__ = os.environ.get('MOONPIN_T_LABEL', '2.13.0')\n"
        "cuda = '13.0'\nhip = None\n")


@pytest.mark.parametrize("change", [_remove_build, _import_a_missing_name,
                                    _shadow_the_loader])
def test_each_change_is_judged_afresh(image: tuple[Path, Path], change: object) -> None:
    site, kb = image
    assert remembered(site, kb=kb).rc == 0
    change(site)  # type: ignore[operator]
    after = start(site, kb=kb)
    fresh = start(site, "--no-cache", kb=kb)
    assert not after.replayed
    assert after.rc == fresh.rc == 1 and after.out == fresh.out


def test_an_environment_variable_the_check_read(image: tuple[Path, Path]) -> None:
    """torch's version code reads a variable: another value is another build to load."""
    site, kb = image
    _label_from_the_environment(site)
    time.sleep(0.15)
    assert remembered(site, kb=kb).rc == 0
    assert start(site, kb=kb, env={"UNREAD_BY_THE_CHECK": "1"}).replayed  # not read: same
    env = {"MOONPIN_T_LABEL": "2.14.1"}
    after = start(site, kb=kb, env=env)
    assert not after.replayed and after.rc == 1, after.out
    assert after.out == start(site, "--no-cache", kb=kb, env=env).out


def test_a_change_of_status_alone_is_judged_again(image: tuple[Path, Path]) -> None:
    """The stamp is the ctime: a ``chmod``, or a file rewritten with its mtime put back
    (``cp -p``, ``tar``, ``touch -r``), is not replayed past."""
    site, kb = image
    assert remembered(site, kb=kb).rc == 0
    loader = site / "mooncake" / "pg.py"
    st = loader.stat()
    loader.chmod(0o600)
    os.utime(loader, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert loader.stat().st_mtime_ns == st.st_mtime_ns
    after = start(site, kb=kb)
    assert not after.replayed and after.rc == 0


def test_runs_that_are_not_kept(image: tuple[Path, Path]) -> None:
    site, kb = image
    for _ in range(2):
        assert start(site, "--no-cache", kb=kb).rc == 0
    assert memos() == []
    missing = start(site.parent / "nowhere", kb=kb)  # could not check: exit 2
    again = start(site.parent / "nowhere", kb=kb)
    assert missing.rc == again.rc == 2 and not again.replayed and memos() == []


def test_a_run_with_a_child_is_not_kept(image: tuple[Path, Path]) -> None:
    """The deep probe imports in a child: nothing the parent traced says what it read."""
    site, kb = image
    for _ in range(2):
        got = start(site, kb=kb, deep=True)
        assert not got.replayed
    assert memos() == []


@pytest.mark.parametrize("damage", ["garbage", "shape", "huge code", "foreign", "fifo",
                                    "dev-zero"])
def test_a_damaged_or_foreign_memo_is_not_replayed(image: tuple[Path, Path],
                                                   damage: str) -> None:
    site, kb = image
    good = remembered(site, kb=kb)
    memo = memos()[0]
    if damage == "garbage":
        memo.write_bytes(b"\xff" * 64)
    elif damage in ("shape", "huge code"):
        doc = marshal.loads(memo.read_bytes()[12:])
        if damage == "shape":
            doc["out"] = [(3, "usable\n")]
        else:  # a 5,000-digit exit code
            doc["code"] = 10**4999
        payload = marshal.dumps(doc)
        memo.write_bytes(b"MPC1" + len(payload).to_bytes(4, "little")
                         + zlib.crc32(payload).to_bytes(4, "little") + payload)
    elif damage == "foreign":
        memo.chmod(0o666)  # writable by others: not ours to trust
    elif damage == "fifo":
        memo.unlink()
        os.mkfifo(memo)
    else:
        memo.unlink()
        memo.symlink_to("/dev/zero")
    after = start(site, kb=kb)
    assert not after.replayed and (after.rc, after.out) == (good.rc, good.out)


# ---------------------------------------------------------------- the recorder itself


def test_the_recorder_traces_reads_variables_and_what_spoils_a_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONPIN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SEEN", "1")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("x")
    (tmp_path / "d" / "link").symlink_to("f")
    rec = verdict.Recorder(["x"])
    rec.start()
    try:
        os.stat(tmp_path / "d" / "f")
        fd = os.open(tmp_path / "d", os.O_RDONLY | os.O_DIRECTORY)
        os.stat("f", dir_fd=fd)
        os.close(fd)
        with os.scandir(tmp_path / "d") as it:
            kinds = {e.name: e.is_file() for e in it}
        assert os.environ.get("SEEN") == "1" and "UNSET_ONE" not in os.environ
        print("said")
    finally:
        rec.stop()
    d = os.fsencode(tmp_path / "d")
    assert kinds == {"f": True, "link": True}
    assert {(d + b"/f", True), (d, True), (d + b"/link", True)} <= rec.paths
    assert (d + b"/f", False) not in rec.paths  # the listing's own type: the folder's stamp
    assert rec.env == {"SEEN": "1", "UNSET_ONE": None} and not rec.all_env
    assert rec.out == [(1, "said"), (1, "\n")] and rec.untraced is None
    rec.start()
    try:
        dict(os.environ)
        (tmp_path / "written").write_text("x")
    finally:
        rec.stop()
    assert rec.all_env and rec.untraced is not None and "written" in rec.untraced
    assert os.stat is not None and "Recorder" not in repr(os.environ.__class__)


def test_stamps_see_a_chmod_and_a_missing_path(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    many = [os.fsencode(f"m{i}") for i in range(verdict._FEW + 1)]
    for name in many:
        (tmp_path / os.fsdecode(name)).write_text("")
    groups = [(os.fsencode(tmp_path), True, [b"f", b"gone"]),
              (os.fsencode(tmp_path), True, many),
              (os.fsencode(tmp_path / "nofolder"), True, many)]
    before = verdict.stamps(groups)
    assert before[3] < 0 and before[-3] < 0  # -errno
    st = f.stat()
    time.sleep(0.01)
    f.chmod(0o600)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert verdict.stamps(groups) != before


def _start_raw(site: Path, kb: Path, stdout: Any, preexec: Any = None) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "moonpin.preflight", "--site-packages", str(site),
           "--elastic-ep-backend", "mooncake", "--kb", str(kb), "--no-deep"]
    env = {k: v for k, v in os.environ.items() if k != "MOONPIN_KB"}
    env["MOONPIN_CHECK_SYSTEM_LIBS"] = str(site / "_no_system_libs")
    proc = subprocess.run(cmd, cwd=ROOT, stdout=stdout, stderr=subprocess.PIPE, text=True,
                          env=env, timeout=120, preexec_fn=preexec)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("how", ["reader gone", "descriptor closed"])
def test_output_nobody_reads_keeps_the_verdict(image: tuple[Path, Path], how: str) -> None:
    """`check | head` whose reader left, or a start with descriptor 1 closed: the exit code
    is the verdict's, computed and replayed alike, with no traceback."""
    site, kb = image
    for _ in range(4):  # cold, kept, replayed...
        if how == "reader gone":
            r, w = os.pipe()
            os.close(r)
            try:
                rc, err = _start_raw(site, kb, w)
            finally:
                os.close(w)
        else:
            rc, err = _start_raw(site, kb, subprocess.DEVNULL, lambda: os.close(1))
        assert rc == 0 and "Traceback" not in err and "Exception ignored" not in err, err
    assert start(site, kb=kb).rc == 0


def test_a_folder_walked_through_is_not_stamped_by_its_listing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """realpath's lstat of each folder on the way to a file asks its kind, not its listing: a
    name added beside it (another job's file in /tmp) keeps the verdict; the file itself, or
    the folder swapped for a link, does not."""
    monkeypatch.setenv("MOONPIN_CACHE_DIR", str(tmp_path / "cache"))
    busy = tmp_path / "busy"
    (busy / "venv").mkdir(parents=True)
    (busy / "venv" / "f").write_text("x")
    time.sleep(0.15)  # older than the racy window
    argv = [f"walked-through-{tmp_path.name}"]
    rec = verdict.Recorder(argv)
    rec.start()
    try:
        with open(os.path.realpath(busy / "venv" / "f")) as f:
            f.read()
        print("answer")
    finally:
        rec.stop()
    assert (os.fsencode(busy), False) in rec.paths  # realpath walked through it
    assert rec.finish(0) is None
    out = sys.stdout
    try:
        assert verdict.replay(argv) == 0
        (busy / "another-jobs-file").write_text("")
        assert verdict.replay(argv) == 0  # busy's listing changed: not what was asked
        (busy / "venv" / "f").write_text("y")
        assert verdict.replay(argv) is None
    finally:
        sys.stdout = out


def test_a_trace_inside_a_spoiled_one_leaves_the_real_calls(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The extensions' trace runs inside the kept verdict's; when the outer one is spoiled
    (stopped) first, stopping the inner one must not put the outer's patches back."""
    from moonpin.preflight.access.reads import Reads

    monkeypatch.setenv("MOONPIN_CACHE_DIR", str(tmp_path / "cache"))
    real = (os.stat, os.open, os.environ, __builtins__)
    outer = verdict.Recorder(["nested"])
    outer.start()
    inner = Reads()
    try:
        inner.start()
        os.stat(tmp_path)
        outer.spoil("a child process")  # as _spawner does
        inner.stop()
    finally:
        inner.stop()
        outer.stop()
    assert (os.stat, os.open, os.environ, __builtins__) == real
    assert (os.fsencode(tmp_path), True) in inner.paths and outer.untraced == "a child process"


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("module", ["extensions/rules/nixl_rule.py",
                                    "extensions/rules/nixl_rule.py#",
                                    "extensions/seam.py", "pyimport/pyeval.py"])
def test_an_edited_moonpin_module_is_judged_again(tmp_path: Path, module: str) -> None:
    """The answer is moonpin's modules', not only those the recording start loaded: a start
    whose extensions' walk was answered from its memo loads no loader rule, yet a rule
    edited alone is not replayed past. The edit here changes the answer (the rule's note)
    or changes nothing a line shows (a comment); the check cannot tell them apart."""
    tree = copied_moonpin(tmp_path / "tree")
    site = torch_image(tmp_path / "site")
    add_nixl(site)
    kb = small_kb(tmp_path)
    time.sleep(0.15)
    how: dict[str, Any] = {"cwd": tree, "launch": ("--", "--moe-a2a-backend", "nixl")}
    assert not warm(site, *how["launch"], kb=kb, cwd=tree).walked  # the walk remembered
    time.sleep(0.15)
    before = remembered(site, kb=kb, **how)  # kept from a start that loaded no rule
    assert before.rc == 0 and " picks " in before.out, before.out
    path = tree / "moonpin" / "preflight" / module.rstrip("#")
    text = path.read_text()
    time.sleep(0.05)
    if module.endswith("nixl_rule.py"):
        assert text.count("{name} picks {") == 1
        path.write_text(text.replace("{name} picks {", "{name} now picks {"))
    else:
        path.write_text(text + "# edited\n")
    after = start(site, kb=kb, **how)
    fresh = start(site, "--no-cache", kb=kb, **how)
    assert not after.replayed
    assert (after.rc, after.out) == (fresh.rc, fresh.out)
    assert (" now picks " in after.out) == module.endswith("nixl_rule.py")
    time.sleep(0.15)
    assert remembered(site, kb=kb, **how).out == after.out  # and kept again
