"""A hostile index's project JSON (``/pypi/<name>/json``) for ``moonpin scrape``: the
loopback index serving a damaged document for one project (a wrong type at any node,
strings where names, versions and digests belong, numbers past 64 bits, negative sizes,
NaN and Infinity, duplicate keys, files lists holding non-objects, ``urls`` disagreeing
with ``releases``, damaged bytes), judged through moonpin on a refresh of a KB scraped
from the same index undamaged: exit 0, 1 (some releases could not be read) or 2 (refused,
with a tip), never a traceback or a hang, no release of the old KB lost or called
unknown, none invented."""

from __future__ import annotations

import contextlib
import json
import random
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.hostile import gen
from tests.hostile.harness import DEFAULT_N, FUZZ_N, Case, Outcome, Tally, survey
from tests.lib.server import FakeIndex
from tests.scrapers.test_scrape_e2e import (
    add_mooncake_and_torch,
    only_present,
    scraped_kb,
    sglang_wheel,
)

PROJECTS = ("sglang", "mooncake-transfer-engine", "torch")
#: Numbers an index must not be trusted with where a size (or any integer) belongs.
NUMBERS = ["2**64", "-1", "-9" * 30, "NaN", "Infinity", "-Infinity", "1e400", "1.5",
           "18446744073709551616", "9" * 400]


@contextlib.contextmanager
def serving() -> Iterator[FakeIndex]:
    """The loopback index of three small projects (the other mooncake ones empty)."""
    with FakeIndex() as idx:
        idx.add_project("sglang", {
            "0.5.4": dict([sglang_wheel("0.5.4", {"sglang/srt/distributed/parallel_state.py":
                                                  "from mooncake import ep\n"})]),
            "0.5.17": dict([sglang_wheel("0.5.17", {
                "sglang/srt/distributed/parallel_state.py":
                    "from mooncake.pg import MooncakeBackendOptions, join_group\n"})]),
        })
        add_mooncake_and_torch(idx)
        only_present(idx)
        yield idx


@pytest.fixture(scope="module")
def index() -> Iterator[FakeIndex]:
    with serving() as idx:
        yield idx


def _doc(index: FakeIndex, project: str) -> dict[str, Any]:
    with urllib.request.urlopen(index.url_for(f"/pypi/{project}/json")) as r:
        doc: dict[str, Any] = json.load(r)
    return doc


def _number(rng: random.Random, doc: dict[str, Any]) -> tuple[str, str]:
    """The document as text with one integer (a size) replaced by a hostile number."""
    sizes = [p for p in gen.paths(doc) if p and p[-1] == "size"]
    path = rng.choice(sizes)
    marker = "__moonpin_number__"
    gen._get(doc, path[:-1])[path[-1]] = marker
    new = rng.choice(NUMBERS)
    new = str(2**64) if new == "2**64" else new
    return json.dumps(doc).replace(f'"{marker}"', new), f"{'/'.join(map(str, path))} = {new[:20]}"


def _duplicate(rng: random.Random, doc: dict[str, Any]) -> tuple[str, str]:
    """The document as text with a key of a file entry given twice, the second value of
    another type or value (JSON parsers keep one of them)."""
    text = json.dumps(doc)
    key = rng.choice(['"sha256": ', '"size": ', '"filename": ', '"url": ', '"digests": '])
    at = [i for i in range(len(text)) if text.startswith(key, i)]
    if not at:
        return text, "no key to duplicate"
    i = rng.choice(at)
    value = rng.choice(['"0000"', "-5", "null", "[]", '{"sha256": 7}', '"x.whl"'])
    return text[:i] + key + value + ", " + text[i:], f"duplicate {key.strip(': ')} = {value}"


def _damage(rng: random.Random, doc: dict[str, Any]) -> tuple[bytes, str]:
    kind = rng.choice(["retype", "retype", "restring", "number", "number", "duplicate",
                       "not-mapping", "urls", "bytes"])
    if kind == "retype":
        new, what = gen.retype(rng, doc)
        return json.dumps(new).encode(), f"retype {what}"
    if kind == "restring":
        new, what = gen.restring(rng, doc)
        return json.dumps(new).encode(), f"restring {what}"
    if kind == "number":
        text, what = _number(rng, json.loads(json.dumps(doc)))
        return text.encode(), f"number {what}"
    if kind == "duplicate":
        text, what = _duplicate(rng, doc)
        return text.encode(), what
    if kind == "not-mapping":
        new = json.loads(json.dumps(doc))
        version = rng.choice(list(new["releases"]))
        value = rng.choice([v for v in gen.HOSTILE_VALUES if not isinstance(v, dict)])
        new["releases"][version].insert(rng.randrange(len(new["releases"][version]) + 1),
                                        value)
        return json.dumps(new).encode(), f"releases/{version} holds {str(value)[:20]!r}"
    if kind == "urls":
        new = json.loads(json.dumps(doc))
        how = rng.choice(["sha256", "size", "drop", "extra"])
        if how == "drop" or not new["urls"]:
            new["urls"] = []
        elif how == "extra":
            new["urls"].append({**new["urls"][0], "filename": "other-1.0-py3-none-any.whl"})
        elif how == "sha256":
            new["urls"][0]["digests"]["sha256"] = "0" * 64
        else:
            new["urls"][0]["size"] += 1
        return json.dumps(new).encode(), f"urls/releases mismatch: {how}"
    data, what = gen.damage_bytes(rng, json.dumps(doc).encode())
    return data, f"bytes: {what}"


def _facts(path: Path) -> dict[str, set[tuple[str, ...]]]:
    """The releases a KB holds facts for, and those it calls unknown."""
    raw = json.loads(path.read_text())
    return {
        "releases": {("sglang", r["version"]) for r in raw["sglang"]}
        | {(m["dist"], m["version"]) for m in raw["mooncake"]}
        | {("torch", t["version"]) for t in raw["torch"]},
        "unread": {(u["name"], u["version"]) for u in raw["unread"]},
        "torch_versions": {(v,) for v in raw["torch_versions"]},
    }


def _surface(tmp_path: Path, index: FakeIndex, n: int, fuzz: bool) -> Tally:
    kb = scraped_kb(index, tmp_path / "kb" / "kb.json")
    pristine = kb.read_bytes()
    base = _facts(kb)
    assert base["releases"] and not base["unread"]
    docs = {p: _doc(index, p) for p in PROJECTS}

    def judge(o: Outcome) -> str | None:
        if o.rc == 2:
            return None if "tip:" in o.err else "refused without a tip"
        now = _facts(kb)
        lost = base["releases"] - now["releases"]
        invented = now["releases"] - base["releases"]
        unknown = base["releases"] & now["unread"]
        gone = base["torch_versions"] - now["torch_versions"]
        problems = [f"{what}: {sorted(keys)}" for what, keys in
                    (("lost", lost), ("invented", invented), ("now unknown", unknown),
                     ("torch versions lost", gone)) if keys]
        return "; ".join(problems) or None

    def make(rng: random.Random, i: int) -> Case:
        for p, doc in docs.items():
            index.add_json(f"/pypi/{p}/json", doc)
        project = rng.choice(PROJECTS)
        data, what = _damage(rng, docs[project])
        index.add(f"/pypi/{project}/json", data, content_type="application/json")
        kb.write_bytes(pristine)
        return Case(f"{project}: {what}"[:200],
                    ["--kb", str(kb), "scrape", "--index-url", index.url + "/", "--jobs", "2"],
                    keep_if_refused=[kb], writes_on=(0, 1), judge=judge, timeout=120)

    return survey("project JSON of the index", 2929_2929, n, fuzz, tmp_path / "home", make)


def test_hostile_project_json(tmp_path: Path, index: FakeIndex) -> None:
    _surface(tmp_path, index, DEFAULT_N, False).check()


@pytest.mark.fuzz
def test_fuzz_project_json(tmp_path: Path, index: FakeIndex) -> None:
    _surface(tmp_path, index, FUZZ_N, True).check()
