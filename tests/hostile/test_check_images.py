"""Hostile worker images for ``moonpin check``: the healthy fake image changed in one to
three ways by the seeded mutations of ``tests/resolver/test_check_hostile.py`` (each says
whether it stops ``import mooncake.pg`` from working), judged through moonpin: never a
traceback or a hang, exit non-zero for a broken image and 0 for one whose changes break
nothing, the image left as it was, no process left running (a tenth of the inputs run the
deep probe, which starts children). The unprivileged part runs the check as ``nobody``
with parts of the image unreadable; it needs root to set that up, and skips without."""

from __future__ import annotations

import os
import random
import shutil
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile.harness import DEFAULT_N, FUZZ_N, Case, Outcome, Tally, fresh, survey
from tests.lib.checkrun import NOBODY, python_for_nobody, small_kb
from tests.lib.images import healthy_image
from tests.resolver.test_check_hostile import MUTATIONS, TERMINAL, m_perms

#: The unprivileged part runs through a fresh interpreter per input (~4x the forked
#: child's cost): this share of FUZZ_N.
UNPRIVILEGED_SHARE = 10


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder every user can enter (pytest's own are root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="moonpin-hostile-check-"))
    path.chmod(0o755)
    yield path
    for p in [path, *path.rglob("*")]:
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)
    shutil.rmtree(path, ignore_errors=True)


def _image(rng: random.Random, work: Path, unprivileged: bool) -> tuple[Path, Path, bool, str]:
    site = healthy_image(work / "site")
    kb = small_kb(work)
    pool = MUTATIONS if unprivileged else [m for m in MUTATIONS if m is not m_perms]
    picks = [rng.choice(pool) for _ in range(rng.randint(1, 3))]
    if unprivileged and m_perms not in picks:
        picks[0] = m_perms  # the point of this part
    # each once; those that replace or remove the build last (a later write to a FIFO
    # would block), and only one of them
    order = sorted(dict.fromkeys(picks), key=lambda m: m in TERMINAL)
    broken = False
    done = []
    for m in order:
        try:
            broken |= m(site, rng)
        except (OSError, struct.error):
            pass  # an earlier change removed or cut what this one changes
        done.append(m.__name__)
        if m in TERMINAL:
            break
    for p in [work, *work.rglob("*")]:  # every folder enterable, but the ones m_perms shut
        if not p.is_symlink() and p.is_dir() and p.stat().st_mode & 0o777 != 0o111:
            p.chmod(0o777)
    return site, kb, broken, "+".join(done)


def _surface(base: Path, n: int, fuzz: bool, unprivileged: bool = False) -> Tally:
    def make(rng: random.Random, i: int) -> Case:
        work = fresh(base / f"in{i % 3}")
        work.chmod(0o777)
        site, kb, broken, what = _image(rng, work, unprivileged)
        deep = rng.random() < 0.1
        argv = ["check", "--site-packages", str(site), "--elastic-ep-backend", "mooncake",
                "--kb", str(kb), *(["--deep", "--deep-timeout", "10"] if deep else
                                   ["--no-deep"])]
        image = [p for p in site.rglob("*") if not p.is_dir()]

        def verdict(o: Outcome) -> str | None:
            if deep:  # the probe imports the fake image: its verdict is not the point
                return None
            if broken and o.rc == 0:
                return f"usable, but broken:\n{o.out[-600:]}"
            if not broken and o.rc != 0:
                return f"refused, but loads:\n{o.out[-600:]}\n{o.err[-300:]}"
            return None

        return Case(f"{what}{' --deep' if deep else ''}", argv, keep=image, judge=verdict,
                    home=work / "home", timeout=60,
                    env={"MOONPIN_CHECK_SYSTEM_LIBS": str(site / "_none")},
                    user=NOBODY if unprivileged else None)

    name = "check images" + (" (as nobody)" if unprivileged else "")
    return survey(name, 1919_3 + unprivileged, n, fuzz, base / "home", make)


def _nobody() -> None:
    if os.geteuid() != 0:
        pytest.skip("the unprivileged part needs root, to make parts of the image "
                    "unreadable to the user the check runs as")
    if python_for_nobody() is None:
        pytest.skip("no interpreter of this Python version that nobody may run")


def test_hostile_check_images(base: Path) -> None:
    _surface(base, DEFAULT_N, False).check()


def test_hostile_check_images_unprivileged(base: Path) -> None:
    _nobody()
    _surface(base, max(DEFAULT_N // 2, 1), False, unprivileged=True).check()


@pytest.mark.fuzz
def test_fuzz_check_images(base: Path) -> None:
    _surface(base, FUZZ_N, True).check()


@pytest.mark.fuzz
def test_fuzz_check_images_unprivileged(base: Path) -> None:
    _nobody()
    _surface(base, max(FUZZ_N // UNPRIVILEGED_SHARE, 1), True, unprivileged=True).check()
