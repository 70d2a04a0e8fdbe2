"""Hostile files in the Python chain of ``import mooncake.pg`` (``mooncake/__init__.py``, the
loader ``pg.py``, ``torch/__init__.py``, ``torch/torch_version.py``, ``torch/version.py``),
their bytecode caches, and what lies beside them, judged through ``moonpin check``: never a
traceback or a hang, the image left as it was, no escape sequence in the report, and the
verdict CPython's importer reaches. Each seeded input changes one to three of those files
in one way each (a FIFO, ``/dev/zero``, a folder, a symlink loop, a 300 MB sparse file in a
module's place; a NUL byte, a BOM, a coding cookie right or wrong, Latin-1 bytes in a comment
or a string, nesting past the parser's limits, a top-level ``raise``; a ``__pycache__`` file
that is a FIFO or a device; loops and ``.pth`` lines naming devices), each saying whether
``import mooncake.pg`` then fails; the unprivileged part (root only) runs the check as
``nobody`` with one module, bytecode cache or package folder shut to it. The default run
judges ``MOONPIN_HOSTILE_N`` inputs, ``-m fuzz`` ``MOONPIN_FUZZ_N`` (a tenth as nobody)."""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.hostile import gen
from tests.hostile.harness import DEFAULT_N, FUZZ_N, Case, Outcome, Tally, fresh, survey
from tests.lib.checkrun import NOBODY, python_for_nobody, small_kb
from tests.lib.images import healthy_image

#: The modules ``import mooncake.pg`` runs before its build, in the fake image.
CHAIN = ("mooncake/__init__.py", "mooncake/pg.py", "torch/__init__.py",
         "torch/torch_version.py", "torch/version.py")
#: The one module whose loss changes nothing: ``mooncake`` is then a namespace package.
OPTIONAL = "mooncake/__init__.py"
ESC = "\x1b]0;owned\x07\x1b[2J"

#: Content changes: (what, the bytes made of the module's, whether the import then fails).
EDITS: list[tuple[str, Callable[[bytes], bytes], bool]] = [
    ("a NUL byte", lambda b: b + b"\x00\n", True),
    ("a UTF-8 BOM", lambda b: b"\xef\xbb\xbf" + b, False),
    ("Latin-1 in a comment", lambda b: b + b"# caf\xe9\n", False),
    ("Latin-1 in a string", lambda b: b + b"_x = 'caf\xe9'\n", True),
    ("a Latin-1 cookie", lambda b: b"# -*- coding: latin-1 -*-\n" + b + b"_x = 'caf\xe9'\n",
     False),
    ("an unknown cookie", lambda b: b"# -*- coding: no-such-codec -*-\n" + b, True),
    ("a BOM and a Latin-1 cookie", lambda b: b"\xef\xbb\xbf# coding: latin-1\n" + b, True),
    ("10,000 unary minuses", lambda b: b + b"_x = " + b"-" * 10_000 + b"1\n", True),
    ("300 nested parentheses", lambda b: b + b"_x = " + b"(" * 300 + b"1" + b")" * 300 + b"\n",
     True),
    ("a top-level raise", lambda b: b + b"raise ImportError('no')\n", True),
    ("a raise that does not run", lambda b: b + b"if False:\n    raise ImportError('no')\n",
     False),
    ("CRLF line ends", lambda b: b.replace(b"\n", b"\r\n"), False),
    ("a 1 MB comment", lambda b: b + b"#" + b"c" * (1 << 20) + b"\n", False),
    ("an escape sequence in a string", lambda b: b + f"_x = {ESC!r}\n".encode(), False),
]
#: What a bytecode cache may be: (what, whether reading it never ends).
PYCS = [("fifo", True), ("dev-zero", True), ("dev-null", False), ("directory", False),
        ("garbage", False), ("dangling", False)]


def _pyc(site: Path, module: str) -> Path:
    source = site / module
    tag = f"cpython-{sys.version_info[0]}{sys.version_info[1]}"
    return source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc"


def _change(rng: random.Random, site: Path, module: str) -> tuple[str, bool]:
    """One change of ``module`` (or of its bytecode cache): what, and whether it breaks."""
    path = site / module
    kind = rng.choice(["special", "edit", "edit", "pyc"])
    if kind == "special":
        what = gen.make_special(rng.choice(gen.SPECIALS), path)
        # not a regular file: the importer skips it (mooncake is then a namespace
        # package); a sparse file is one, of NUL bytes
        return f"{module} is {what}", what == "sparse-huge" or module != OPTIONAL
    if kind == "edit":
        what, edit, breaks = rng.choice(EDITS)
        path.write_bytes(edit(path.read_bytes()))
        return f"{module}: {what}", breaks
    what, breaks = rng.choice(PYCS)
    pyc = _pyc(site, module)
    pyc.parent.mkdir(exist_ok=True)
    if what == "garbage":
        pyc.write_bytes(os.urandom(rng.randrange(0, 64)))
    else:
        gen.make_special(what, pyc)
    return f"{module}'s bytecode cache is {what}", breaks


def _shut(rng: random.Random, site: Path, module: str) -> tuple[str, bool]:
    """One permission the worker's user lacks (the unprivileged part): what, and whether
    the import then fails. CPython opens a module it found by ``stat``; a folder it cannot
    list holds nothing it finds (``FileFinder`` caches an empty listing); a bytecode cache it
    cannot read is compiled afresh."""
    kind = rng.randrange(4)
    if kind == 0:
        (site / module).chmod(0o000)
        return f"{module} unreadable", True
    if kind == 1:
        pyc = _pyc(site, module)
        pyc.parent.mkdir(exist_ok=True)
        pyc.write_bytes(b"\0" * 16)
        pyc.chmod(0o000)
        return f"{module}'s bytecode cache unreadable", False
    folder = site / module.split("/")[0]
    mode = rng.choice([0o311, 0o644])
    folder.chmod(mode)
    return f"{folder.name}/ mode {mode:o}", True


#: What a ``.pth`` that is not a file does to the interpreter's start: ``site`` reads every
#: ``.pth`` to its end, so a FIFO blocks it for ever and ``/dev/zero`` reads until memory runs
#: out (MemoryError, seen with python3.11 under ``ulimit -v``): no program runs. The others
#: (a folder, a loop, a dangling link, ``/dev/null``, a sparse file of NULs) it gets past.
_ENDLESS = {"fifo", "dev-zero"}


def _beside(rng: random.Random, site: Path) -> tuple[str, bool]:
    """A change beside the chain: symlink loops in the packages, ``.pth`` lines naming
    devices, FIFOs and the root, a ``.pth`` that is not a file; and whether it breaks."""
    kind = rng.randrange(4)
    if kind == 0:
        (site / "torch" / "loop").symlink_to("..")
        (site / "mooncake" / "self").symlink_to(".")
        return "symlink loops in torch/ and mooncake/", False
    if kind == 1:
        os.mkfifo(site / "fifo")
        (site / "evil.pth").write_text(f"/proc/self/fd/0\n/dev/zero\n{site / 'fifo'}\n/\n")
        return ".pth lines naming stdin, /dev/zero, a FIFO and /", False
    if kind == 2:
        special = rng.choice(gen.SPECIALS)
        gen.make_special(special, site / "evil.pth")
        return f"a .pth that is not a file ({special})", special in _ENDLESS
    (site / "x.py").mkdir()
    (site / "mooncake" / "y.py").mkdir()
    return "folders named x.py", False


def _surface(base: Path, n: int, fuzz: bool, unprivileged: bool = False) -> Tally:
    def make(rng: random.Random, i: int) -> Case:
        work = fresh(base / f"in{i % 3}")
        site = healthy_image(work / "site")
        kb = small_kb(work)
        picks = rng.sample(CHAIN, rng.randint(1, 3))  # one change per module at most
        said, broken = [], False
        for k, module in enumerate(picks):
            shut = unprivileged and k == len(picks) - 1  # last: a folder may close
            what, breaks = (_shut if shut else _change)(rng, site, module)
            said.append(what)
            broken |= breaks
        if rng.random() < 0.3:
            what, breaks = _beside(rng, site)
            said.append(what)
            broken |= breaks
        argv = ["check", "--site-packages", str(site), "--elastic-ep-backend", "mooncake",
                "--kb", str(kb), "--no-deep", *rng.choice([[], ["-q"], ["--json"]])]
        watched = [p for p in site.rglob("*") if not p.is_dir() and not p.is_symlink()]

        def verdict(o: Outcome) -> str | None:
            if "\x1b" in o.out or "\x1b" in o.err:
                return f"an escape sequence printed:\n{o.out[-600:]!r}"
            if broken and o.rc != 1:
                return f"exit {o.rc}, but `import mooncake.pg` fails:\n{o.out[-800:]}"
            if not broken and o.rc != 0:
                return f"exit {o.rc}, but `import mooncake.pg` works:\n{o.out[-800:]}"
            return None

        return Case("; ".join(said) + (" (breaks)" if broken else ""), argv, keep=watched,
                    judge=verdict, home=work / "home", timeout=60,
                    env={"MOONPIN_CHECK_SYSTEM_LIBS": str(site / "_none"),
                         "LANG": "C.UTF-8"}, user=NOBODY if unprivileged else None)

    name = "check's import chain files" + (" (as nobody)" if unprivileged else "")
    return survey(name, 6868 + unprivileged, n, fuzz, base / "home", make)


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder every user can enter (the unprivileged part runs the check as nobody)."""
    path = Path(tempfile.mkdtemp(prefix="moonpin-hostile-chain-"))
    path.chmod(0o755)
    yield path
    for p in [path, *path.rglob("*")]:
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)
    shutil.rmtree(path, ignore_errors=True)


def _nobody() -> None:
    if os.geteuid() != 0:
        pytest.skip("the unprivileged part needs root, to take permissions from the user "
                    "the check runs as")
    if python_for_nobody() is None:
        pytest.skip("no interpreter of this Python version that nobody may run")


def test_hostile_chain_files(base: Path) -> None:
    _surface(base, DEFAULT_N, False).check()


def test_hostile_chain_files_unprivileged(base: Path) -> None:
    _nobody()
    _surface(base, max(DEFAULT_N // 2, 1), False, unprivileged=True).check()


@pytest.mark.fuzz
def test_fuzz_chain_files(base: Path) -> None:
    _surface(base, FUZZ_N, True).check()


@pytest.mark.fuzz
def test_fuzz_chain_files_unprivileged(base: Path) -> None:
    _nobody()
    _surface(base, max(FUZZ_N // 10, 1), True, unprivileged=True).check()
