"""Hostile KB files, resolved tables and cache files, judged through moonpin.

A damaged KB (``--kb``) is refused: exit 2 naming the file, no traceback, the file left as
it was. A damaged derived table (``resolved/*.json``) or cache (``check-facts.marshal``)
is ignored: the answer is the one the undamaged files give, never another. A stamped
document (``_facts.json``, ``_show-*.json``) rewritten on purpose with a hash that fits is
read like a hand-edited KB: checked, never a traceback.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from moonpin.kb import cache
from tests.hostile import gen
from tests.hostile.harness import (
    DEFAULT_N,
    FUZZ_N,
    Case,
    Outcome,
    Tally,
    fresh,
    run,
    runner,
    survey,
)

Surface = Callable[[Path, Path, int, bool], Tally]

QUERIES = [
    ["kb", "info"],
    ["which", "mooncake", "--sglang", "0.5.18"],
    ["show", "sglang==0.5.18"],
    ["triples"],
    ["explain", "sglang==0.5.18", "mooncake-transfer-engine-cuda13==0.3.13"],
]
WHICH = ["which", "mooncake", "--sglang", "0.5.18", "--json"]


def _kb_cases(rng: random.Random, kb: Path) -> str:
    raw = kb.read_bytes()
    pick = rng.random()
    if pick < 0.15:
        return gen.make_special(rng.choice(gen.SPECIALS), kb)
    if pick < 0.55:
        doc, what = gen.retype(rng, json.loads(raw))
        kb.write_text(json.dumps(doc))
        return what
    if pick < 0.65:  # a version that is not PEP 440, in one of the release lists
        doc = json.loads(raw)
        key = rng.choice([k for k in ("sglang", "mooncake", "torch") if doc.get(k)])
        rng.choice(doc[key])["version"] = rng.choice(["banana", "1" * 5000, "", "1.0+"])
        kb.write_text(json.dumps(doc))
        return f"{key} version not PEP 440"
    data, what = gen.damage_bytes(rng, raw)
    kb.write_bytes(data)
    return what


def _surface(tmp_path: Path, template: Path, n: int, fuzz: bool) -> Tally:
    def make(rng: random.Random, i: int) -> Case:
        folder = tmp_path / f"in{i % 4}"
        shutil.rmtree(fresh(folder))
        shutil.copytree(template, folder)
        kb = folder / "kb.json"
        what = _kb_cases(rng, kb)
        return Case(what, ["--kb", str(kb), *rng.choice(QUERIES)],
                    keep=[kb, *sorted((folder / "resolved").glob("*.json"))])

    return survey("KB files (--kb)", 19, n, fuzz, tmp_path / "home", make)


def _derived_cases(rng: random.Random, table: Path) -> str:
    pick = rng.random()
    if pick < 0.15:
        return gen.make_special(rng.choice(gen.SPECIALS), table)
    raw = table.read_bytes()
    if pick < 0.30:  # cut anywhere: never valid JSON (no trailing whitespace)
        at = rng.randrange(1, len(raw))
        table.write_bytes(raw[:at])
        return f"truncated at {at}"
    if pick < 0.40:
        d = rng.choice([1000, 5000, 100_000])
        table.write_text(gen.deep(d))
        return f"{d} nested arrays"
    # another type at any node but the KB digest (a stale table is a different test)
    doc, what = gen.retype(rng, json.loads(raw), keep=(("kb_sha256",), ("schema_version",)))
    table.write_text(json.dumps(doc))
    return what


#: The derived tables damaged, each with a query that reads it: a release's table and the
#: requirements index, a mooncake release's transposed table, the default matrix.
DERIVED = {"0.5.18.json": WHICH, "_sglang.json": WHICH,
           "_fits-mooncake-transfer-engine-cuda13-0.3.13.post1.json": [
               "which", "sglang", "--mooncake", "mooncake-transfer-engine-cuda13==0.3.13.post1",
               "--json"],
           "_matrix.json": ["matrix", "--format", "csv"]}


def _same_answer(template: Path, argv: list[str], home: Path) -> Callable[[Outcome],
                                                                          str | None]:
    """A judge of outcomes: an answer (exit 0) other than ``argv``'s on the undamaged
    ``template`` is a problem (compared as JSON with ``--json``, else as the text)."""
    truth = run(["--kb", str(template / "kb.json"), *argv], home)
    assert truth.rc == 0, truth.err

    def said(out: str) -> object:
        return json.loads(out) if "--json" in argv else out

    answer = said(truth.out)

    def same_answer(o: Outcome) -> str | None:
        if o.rc == 0 and said(o.out) != answer:
            return f"a different answer than the undamaged files give:\n{o.out[:800]}"
        return None

    return same_answer


def _derived_surface(tmp_path: Path, template: Path, n: int, fuzz: bool) -> Tally:
    judges = {name: _same_answer(template, argv, tmp_path / "truth")
              for name, argv in DERIVED.items()}

    def make(rng: random.Random, i: int) -> Case:
        folder = tmp_path / f"in{i % 4}"
        shutil.rmtree(fresh(folder))
        shutil.copytree(template, folder)
        home = tmp_path / f"home{i % 4}"
        kb = folder / "kb.json"
        name = "0.5.18.json"
        if rng.random() < 0.75:
            name = rng.choice(["0.5.18.json", *DERIVED])
            what = f"{name}: " + _derived_cases(rng, folder / "resolved" / name)
        else:  # the memo that remembers the KB's sha256 (and the parsed tables)
            memo = home / "cache" / "check-facts.marshal"
            shutil.rmtree(home / "cache", ignore_errors=True)  # an earlier input's damage
            run_first = runner(fuzz, i)(["--kb", str(kb), *WHICH], home)
            assert run_first.rc == 0, run_first.err
            what = "memo: " + _damage_memo(rng, memo)
        return Case(what, ["--kb", str(kb), *DERIVED[name]], keep=[kb], judge=judges[name],
                    home=home)

    return survey("resolved tables and the file-facts memo", 1919, n, fuzz, tmp_path, make)


#: What the planner behind ``constraints`` reads beside the release tables: the SGLang
#: release's held table (its verdicts and first reasons) and every extension release's pins
#: and locks.
PLANNER = ["constraints", "--sglang", "0.5.18", "--python", "3.12", "--arch", "x86_64",
           "--json"]


def _planner_surface(tmp_path: Path, template: Path, n: int, fuzz: bool) -> Tally:
    same_answer = _same_answer(template, PLANNER, tmp_path / "truth")

    def make(rng: random.Random, i: int) -> Case:
        folder = tmp_path / f"in{i % 4}"
        shutil.rmtree(fresh(folder))
        shutil.copytree(template, folder)
        name = rng.choice(["_held-0.5.18.json", "_requires.json"])
        what = f"{name}: " + _derived_cases(rng, folder / "resolved" / name)
        return Case(what, ["--kb", str(folder / "kb.json"), *PLANNER],
                    keep=[folder / "kb.json"], judge=same_answer,
                    home=tmp_path / f"home{i % 4}")

    return survey("the planner's held and requirements tables", 1949, n, fuzz, tmp_path, make)


def _damage_memo(rng: random.Random, memo: Path) -> str:
    doc = cache.load(memo)
    pick = rng.random()
    if pick < 0.4 or not isinstance(doc, dict):
        data, what = gen.damage_bytes(rng, memo.read_bytes() if memo.is_file() else b"")
        memo.write_bytes(data)
        return what
    if pick < 0.5:
        memo.write_bytes(b"(\xff\xff\xff\x7f")
        return "a marshal header with a huge length"
    if pick < 0.6:
        return gen.make_special(rng.choice(gen.SPECIALS), memo)
    # well framed, but entries of the wrong type with the right stamps
    entries = doc.get("entries", {})
    for k, v in list(entries.items()):
        if isinstance(v, tuple) and len(v) == 3:
            entries[k] = (v[0], v[1], rng.choice([5, None, [1, 2], {"x": 1}, "", b"x",
                                                  ("a",) * 3]))
    cache.store(memo, doc)
    return "entries of the wrong type"


#: Queries that read the stamped documents: the facts (no table judges a local torch
#: build), a release's show document, the torch facts, and the summary and the names
#: users' input is read against.
STAMPED = {"_facts.json": ["triples", "--sglang", "0.5.18", "--torch", "2.13.0+cu126",
                           "--json"],
           "_show-sglang-0.5.18.json": ["show", "sglang==0.5.18", "--json"],
           "_torch.json": ["show", "torch==2.13.0", "--json"],
           "_summary.json": ["which", "mooncake", "--sglang", "v0.5.18", "--json"],
           "_names.json": ["which", "mooncake", "--sglang", "v0.5.18", "--json"]}


def _stamped_cases(rng: random.Random, doc: Path) -> str:
    from moonpin.resolver.tables import reading

    pick = rng.random()
    if pick < 0.15:
        return gen.make_special(rng.choice(gen.SPECIALS), doc)
    raw = doc.read_bytes()
    head, _, body = raw.partition(b"\n")
    if pick < 0.35:
        at = rng.randrange(1, len(raw))
        doc.write_bytes(raw[:at])
        return f"truncated at {at}"
    if pick < 0.55:
        data, what = gen.damage_bytes(rng, body)
        doc.write_bytes(head + b"\n" + data)
        return "body: " + what
    # a crafted document: another type, or another string, at some node, stamped so that
    # it hashes right
    value, what = (gen.retype if pick < 0.8 else gen.restring)(rng, json.loads(body))
    doc.write_bytes(reading.stamped(value, json.loads(head)["kb_sha256"]))
    return "restamped: " + what


def _stamped_surface(tmp_path: Path, template: Path, n: int, fuzz: bool) -> Tally:
    truths = {}
    for name, argv in STAMPED.items():
        truth = run(["--kb", str(template / "kb.json"), *argv], tmp_path / "truth")
        assert truth.rc == 0, truth.err
        truths[name] = json.loads(truth.out)

    def make(rng: random.Random, i: int) -> Case:
        folder = tmp_path / f"in{i % 4}"
        shutil.rmtree(fresh(folder))
        shutil.copytree(template, folder)
        name = rng.choice(sorted(STAMPED))
        what = f"{name}: " + _stamped_cases(rng, folder / "resolved" / name)
        # A document restamped so that it hashes right was written on purpose: like a KB
        # edited by hand it may say something else (never crash); damage never may.
        crafted = "restamped" in what

        def same_answer(o: Outcome) -> str | None:
            if crafted:
                return None
            if o.rc == 0 and json.loads(o.out) != truths[name]:
                return f"a different answer than the undamaged files give:\n{o.out[:800]}"
            return None

        return Case(what, ["--kb", str(folder / "kb.json"), *STAMPED[name]],
                    keep=[folder / "kb.json"], judge=same_answer,
                    home=tmp_path / f"home{i % 4}")

    return survey("stamped facts and show documents", 1931, n, fuzz, tmp_path, make)


@pytest.mark.parametrize("surface", [_surface, _derived_surface, _stamped_surface,
                                     _planner_surface],
                         ids=["kb", "derived", "stamped", "planner"])
def test_hostile_kb_and_derived_files(tmp_path: Path, kb_template: Path, surface: Surface
                                      ) -> None:
    surface(tmp_path, kb_template, DEFAULT_N, False).check()


@pytest.mark.fuzz
@pytest.mark.parametrize("surface", [_surface, _derived_surface, _stamped_surface,
                                     _planner_surface],
                         ids=["kb", "derived", "stamped", "planner"])
def test_fuzz_kb_and_derived_files(tmp_path: Path, kb_template: Path, surface: Surface
                                   ) -> None:
    surface(tmp_path, kb_template, FUZZ_N, True).check()
