"""Opt-in (``-m image``): every fix line ``moonpin check`` prints works when an operator
pastes it into the image's shell.

Needs the real images of ``../shared/tools/realimg/build.sh`` (``MOONPIN_TEST_REALIMG``,
e.g. ``/tmp/realimg``) and the package index (pip downloads what a fix line asks for). Each
variant is copied with hard links (``cp -al``; pip unlinks before it writes, so the image
itself is never changed); the check runs against the copy's interpreter (``--python``),
light; the first failing check's fix line is carried out with the copy's own pip (``pip``
in the line is the copy's ``python -m pip``; the compile step a note gives is run as
written, with ``TORCH_CUDA_ARCH_LIST=9.0`` for the placeholder), and the check runs again,
up to four rounds; the last verdict must be usable, and the deep probe must then agree.

pip runs as in a fresh image: without this machine's own pip configuration (its local
``--find-links`` folder holds a ``+cpu`` torch that a real image does not see).
``python tests/test_image_fixes.py`` prints the table of what happened.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.lib.verdicts import EXTENSION_LINES, mooncake_rc

pytestmark = pytest.mark.image

ROOT = Path(__file__).resolve().parents[1]
REALIMG = os.environ.get("MOONPIN_TEST_REALIMG")
VARIANTS = ["venv", "venv-nopg", "venv-cputorch", "venv-cu12mooncake", "venv-oldmooncake",
            "venv-torch2141", "venv-jit", "venv-jit-sglang-ep", "venv-sglang-ep", "venv-rpath"]


def _env(copy: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIP_", "MOONPIN_", "VIRTUAL_ENV"))}
    env["PIP_CONFIG_FILE"] = os.devnull  # no user config: what a fresh image's pip sees
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    assert REALIMG is not None
    env["LD_LIBRARY_PATH"] = str(Path(REALIMG) / "stubs")
    env["MOONCAKE_PG_JIT_DIR"] = str(copy.parent / "pg_jit")
    env["HOME"] = str(copy.parent / "home")
    if Path("/usr/local/cuda/bin/nvcc").exists():
        env.setdefault("CUDA_HOME", "/usr/local/cuda")
    env["PATH"] = f"{copy / 'bin'}:{env.get('PATH', '')}"
    # this host's /usr/local/cuda is a slim toolkit: the CUDA wheels' headers and libraries
    # complete it for a compile (as build.sh does); a real build image has a full toolkit
    for sp in copy.glob("lib/python3*/site-packages"):
        pkgs = sorted(p for p in sp.glob("nvidia/*") if (p / "include").is_dir())
        env["CPATH"] = ":".join(str(p / "include") for p in pkgs)
        env["LIBRARY_PATH"] = ":".join(str(p / "lib") for p in pkgs)
    return env


def check(copy: Path, deep: bool = False) -> tuple[int, list[str]]:
    cmd = [sys.executable, "-m", "moonpin.preflight", "--python", str(copy / "bin" / "python"),
           "--elastic-ep-backend", "mooncake", "--deep" if deep else "--no-deep"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=_env(copy),
                          timeout=900)
    return proc.returncode, proc.stdout.splitlines()


def commands(fix: str, copy: Path) -> list[str]:
    """The shell commands a fix line asks for, as the copy's own tools. A pip fix is
    ``<the copy's python> -m pip ...`` (what the check writes for ``--python``), or ``pip
    ...``, joined by ``&&``, with a ``  # note`` after it; a compile step the note quotes
    in backticks runs too."""
    py = str(copy / "bin" / "python")
    cmd = fix.partition("  # ")[0].strip()
    out = []
    if cmd.startswith(("pip ", f"{py} -m pip ")):
        steps = [step.strip().split(" (", 1)[0] for step in cmd.split("&&")]
        out.append(" && ".join(f"{py} -m {step}" if step.startswith("pip ") else step
                               for step in steps))
    for quoted in re.findall(r"`([^`]+)`", fix):
        if "import mooncake" in quoted:
            quoted = re.sub(r"TORCH_CUDA_ARCH_LIST=<[^>]*>", "TORCH_CUDA_ARCH_LIST=9.0", quoted)
            out.append(re.sub(r"\bpython\b", py, quoted, count=1))
    return out


def _first_fix(lines: list[str]) -> tuple[str, str] | None:
    """The first of mooncake's failing checks with its fix line (the images hold no
    sgl_kernel nor flashinfer, whose lines the check adds: not what these variants prove)."""
    for i, line in enumerate(lines):
        if line.split("  ", 1)[-1].split(":", 1)[0] in EXTENSION_LINES:
            continue
        if line.startswith(("fail ", "warn  toolchain")) and i + 1 < len(lines) \
                and lines[i + 1].startswith("  fix: "):
            return line, lines[i + 1][len("  fix: "):]
    return None


def walk(variant: str, work: Path) -> list[tuple[str, int, str, str]]:
    """(failing check, exit code, fix line, result of carrying it out) per round."""
    assert REALIMG is not None
    copy = work / variant
    subprocess.run(["cp", "-al", str(Path(REALIMG) / variant), str(copy)], check=True)
    rows: list[tuple[str, int, str, str]] = []
    for _ in range(4):
        _, lines = check(copy)
        rc = mooncake_rc(lines)
        step = _first_fix(lines)
        if rc == 0 and (step is None or not step[0].startswith("warn  toolchain")):
            rows.append(("usable", rc, "", ""))
            return rows
        if step is None:
            rows.append(("no fix line", rc, "", "\n".join(lines)))
            return rows
        done = []
        for cmd in commands(step[1], copy):
            proc = subprocess.run(cmd, shell=True, capture_output=True, text=True,
                                  env=_env(copy), timeout=1800)
            done.append(f"exit {proc.returncode}" + (
                "" if proc.returncode == 0 else ": " + (proc.stderr or proc.stdout)[-300:]))
        rows.append((step[0][:160], rc, step[1], "; ".join(done) or "nothing to run"))
    rows.append(("still failing after 4 rounds", rc, "", ""))
    return rows


@pytest.mark.skipif(not REALIMG, reason="MOONPIN_TEST_REALIMG names no real images")
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_fix_line_works_in_the_image(variant: str) -> None:
    assert REALIMG is not None
    if not (Path(REALIMG) / variant).is_dir():
        pytest.skip(f"{variant} is not built")
    work = Path(tempfile.mkdtemp(prefix="moonpin-fix-", dir=REALIMG))
    try:
        rows = walk(variant, work)
        assert rows[-1][0] == "usable", rows
        _, lines = check(work / variant, deep=True)
        assert mooncake_rc(lines) == 0, "\n".join(lines)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if not REALIMG:
        sys.exit("set MOONPIN_TEST_REALIMG")
    for v in sys.argv[1:] or VARIANTS:
        work = Path(tempfile.mkdtemp(prefix="moonpin-fix-", dir=REALIMG))
        try:
            for failing, rc, fix, result in walk(v, work):
                print(f"| {v} | {failing} (exit {rc}) | {fix} | {result} |", flush=True)
            rc, lines = check(work / v, deep=True)
            print(f"| {v} | deep check after: exit {rc} | | "
                  + "; ".join(x for x in lines if x.startswith(("fail", "warn"))) + " |",
                  flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
