"""Hostile worker images for ``moonpin check``: the healthy fake image changed in one to
three ways by the seeded mutations of ``tests/preflight/test_check_hostile.py`` (each says
whether it stops ``import mooncake.pg`` from working), judged through moonpin: never a
traceback or a hang, exit non-zero for a broken image and 0 for one whose changes break
nothing, the image left as it was, no process left running (a tenth of the inputs run the
deep probe, which starts children). The unprivileged part runs the check as ``nobody``
with parts of the image unreadable; it needs root to set that up, and skips without."""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.hostile.gen import HOSTILE_VALUES
from tests.hostile.harness import (
    DEFAULT_N,
    FUZZ_N,
    ROOT,
    Case,
    Outcome,
    Tally,
    fresh,
    run,
    survey,
)
from tests.lib.checkrun import NOBODY, python_for_nobody, small_kb
from tests.lib.images import healthy_image
from tests.preflight.test_check_hostile import MUTATIONS, TERMINAL, m_perms

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


# ---------------------------------------------------------------- the KB the check reads
# The check reads the KB file itself (``image_facts._load_kb``) when its derived documents
# are missing or stale, and the derived documents (``resolved/_sglang.json``, the release's
# table and launch table, ``_summary.json``) otherwise: a value of the wrong type at any
# node of either is a KB error ("kb: ... corrupt"), never a traceback.

#: The derived documents the check reads for the healthy image's SGLang (0.5.23).
CHECK_DERIVED = ("_sglang.json", "0.5.23.json", "_launch-0.5.23.json", "_summary.json")


@pytest.fixture(scope="module")
def check_kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped KB cut to the healthy image's releases, with its resolved documents."""
    from moonpin.kb import store
    from moonpin.resolver.tables import writer

    full = store.load(ROOT / "data" / "kb.json")
    sg = tuple(r for r in full.sglang if r.version in ("0.5.18", "0.5.23"))
    mc = tuple(m for m in full.mooncake if (m.dist, m.version) in {
        ("mooncake-transfer-engine-cuda13", "0.3.13.post1"),
        ("mooncake-transfer-engine", "0.3.9")})
    small = full.model_copy(update={"sglang": sg, "mooncake": mc, "unread": ()})
    folder = tmp_path_factory.mktemp("check-kb")
    store.save(small, folder / "kb.json")
    writer.write(folder / "kb.json")
    return folder


def _retype_walk(rng: random.Random, doc: Any) -> tuple[Any, str]:
    """``doc`` with one node replaced by a value of another type, the node found by walking
    down from the root (stopping at each level with probability 1/3): shallow nodes, the
    ones the check reads, come up as often as the deep leaves of the launch rules."""
    doc = json.loads(json.dumps(doc))
    path: list[Any] = []
    node = doc
    while isinstance(node, (dict, list)) and node and (not path or rng.random() > 1 / 3):
        key = rng.choice(list(node) if isinstance(node, dict) else range(len(node)))
        path.append(key)
        node = node[key]
    if not path:
        return doc, "nothing to change"
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    new = rng.choice([v for v in HOSTILE_VALUES if type(v) is not type(node) and v is not None])
    parent[path[-1]] = new
    return doc, f"{'/'.join(map(str, path))}: {type(node).__name__} -> {str(new)[:30]!r}"


def _kb_surface(base: Path, template: Path, n: int, fuzz: bool) -> Tally:
    def make(rng: random.Random, i: int) -> Case:
        work = fresh(base / f"kb{i % 3}")
        work.chmod(0o777)
        shutil.copytree(template, work / "kb")
        kb = work / "kb" / "kb.json"
        if rng.random() < 0.5:
            doc, what = _retype_walk(rng, json.loads(kb.read_text()))
            kb.write_text(json.dumps(doc))
            what = "kb.json " + what
        else:
            name = rng.choice(CHECK_DERIVED)
            table = work / "kb" / "resolved" / name
            raw = table.read_text()
            head, sep, body = raw.partition("\n")
            stamped = sep and head.startswith('{"schema_version"') and "body_sha256" in head
            doc, what = _retype_walk(rng, json.loads(body if stamped else raw))
            text = json.dumps(doc)
            if stamped:  # stamped again, so that the body is believed and its shape read
                import hashlib
                meta = json.loads(head)
                meta["body_sha256"] = hashlib.sha256(text.encode()).hexdigest()
                text = json.dumps(meta) + "\n" + text
            table.write_text(text)
            what = f"{name} {what}"
        site = healthy_image(work / "site")
        broken = rng.random() < 0.5
        if broken:  # the failure paths read more of the KB (fix lines, who provides a name)
            rng.choice([m for m in MUTATIONS if m is not m_perms])(site, rng)
        backend = rng.choice(["mooncake", "mooncake", "mooncake", "nixl", "mooncak"])
        launch = rng.choice([[], ["--", "--elastic-ep-backend", backend,
                                  "--enable-dp-attention"]])
        argv = ["check", "--site-packages", str(site), "--elastic-ep-backend", backend,
                "--kb", str(kb), "--no-deep", *rng.choice([[], ["--json"]]), *launch]
        return Case(what + (" (broken image)" if broken else ""), argv,
                    keep=[kb], home=work / "home", timeout=60,
                    env={"MOONPIN_CHECK_SYSTEM_LIBS": str(site / "_none")})

    return survey("check's KB and derived documents", 2525, n, fuzz, base / "home", make)


def test_hostile_check_kb(base: Path, check_kb: Path) -> None:
    _kb_surface(base, check_kb, DEFAULT_N * 2, False).check()


@pytest.mark.fuzz
def test_fuzz_check_kb(base: Path, check_kb: Path) -> None:
    _kb_surface(base, check_kb, FUZZ_N, True).check()


@pytest.mark.parametrize(("path", "value", "said"), [
    (("sglang", 1, "pg"), 5, "sglang[1].pg is an int (5), not a mapping"),
    (("sglang", 1, "pg", "names"), "x", "sglang[1].pg.names is a str ('x'), not a list"),
    (("sglang", 1), 7, "sglang[1] is an int (7), not a mapping"),
    (("sglang", 1, "imports", 0), "x", "sglang[1].imports[0] is a str ('x'), not a mapping"),
    (("mooncake", 0, "wheels", 0, "builds"), {"a": 1},
     "mooncake[0].wheels[0].builds is a dict ({'a': 1}), not a list"),
    (("sglang", 1, "launch"), 3, "sglang[1].launch is not a record of the expected shape"),
])
def test_check_kb_of_the_wrong_type_is_a_kb_error(base: Path, check_kb: Path,
                                                  path: tuple[Any, ...], value: Any,
                                                  said: str) -> None:
    # `moonpin check --kb K` on a KB edited so that sglang[1].pg is 5 was an AttributeError
    kb = base / "kb.json"
    doc = json.loads((check_kb / "kb.json").read_text())
    assert doc["sglang"][1]["version"] == "0.5.23"
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    kb.write_text(json.dumps(doc))
    site = healthy_image(base / "site")
    for extra in ([], ["--strict"]):
        o = run(["check", "--site-packages", str(site), "--elastic-ep-backend", "mooncake",
                 "--kb", str(kb), "--no-deep", *extra, "--", "--elastic-ep-backend",
                 "mooncake"], base / "home", env={"MOONPIN_CHECK_SYSTEM_LIBS": str(base)})
        assert "Traceback" not in o.err and not o.err, o.err
        kb_line = next(line for line in o.out.splitlines() if line.startswith(("warn  kb:",
                                                                            "fail  kb:")))
        assert kb_line.endswith(f"knowledge base {kb} is corrupt ({said}); the image is "
                                "still read" + " (--strict)" * bool(extra)), kb_line
        assert o.rc == (1 if extra else 0), o.out
