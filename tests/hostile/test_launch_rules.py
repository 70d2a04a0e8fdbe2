"""A knowledge base edited by hand (or written by another) whose launch rules hold hostile
expressions: ``moonpin args`` evaluates each rule's guard, writes, condition and message
placeholders with ``ast``, and a text nested past what the parser holds (``MemoryError``),
past what it builds (``RecursionError``), or past what the recursive evaluation goes, was a
traceback. Such a rule is "not checked" with the reason; the other rules are judged as
before. The seeded surface draws those and other texts into the rules' fields."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from tests.hostile.harness import DEFAULT_N, FUZZ_N, Case, Outcome, Tally, fresh, run, survey

#: Texts no launch rule of a real release holds, each a way a reader can fail.
HOSTILE_EXPRESSIONS = [
    "-" * 100_000 + "1",  # the parser: MemoryError
    "+".join(["self.pp_size"] * 100_000),  # the parser: RecursionError building the tree
    "+".join(["self.pp_size"] * 600),  # parses; the recursive evaluation goes 600 deep
    " or ".join(["self.pp_size == 1"] * 50_000),  # wide, not deep
    "(" * 300 + "1" + ")" * 300, "self.pp_size ==", "\x00", "", "x" * 100_000,
    "not " * 100_000 + "True", "[" * 150 + "]" * 150, "self." + ".".join(["a"] * 50_000),
    "{" + "{" * 1000, "f'{self.pp_size}'", "lambda: 1", "__import__('os').system('x')",
]
LAUNCH = ["--", "--elastic-ep-backend", "mooncake", "--pp-size", "2"]


def _edited(kb_dir: Path, rng: random.Random, fields: tuple[str, ...], n: int) -> str:
    """The KB of ``kb_dir`` with ``n`` launch-rule fields of sglang 0.5.18 replaced (its
    derived tables removed: the KB itself is then read)."""
    kb = kb_dir / "kb.json"
    doc = json.loads(kb.read_text())
    rel = next(r for r in doc["sglang"] if r["version"] == "0.5.18")
    said = []
    for _ in range(n):
        rule = rng.choice(rel["launch"]["rules"])
        field = rng.choice(fields)
        text = rng.choice(HOSTILE_EXPRESSIONS)
        if field == "writes":
            if not rule["writes"]:
                continue
            rng.choice(rule["writes"])["value"] = text
        elif field == "message":
            rule["message"] = "{" + text + "}"
        else:
            rule[field] = text
        said.append(f"{field} = {text[:20]!r}…")
    kb.write_text(json.dumps(doc))
    shutil.rmtree(kb_dir / "resolved", ignore_errors=True)
    return "; ".join(said)


@pytest.mark.parametrize("text", HOSTILE_EXPRESSIONS[:3])
def test_deep_rule_conditions_are_not_checked(tmp_path: Path, kb_template: Path,
                                              text: str) -> None:
    kb_dir = tmp_path / "kb"
    shutil.copytree(kb_template, kb_dir)
    doc = json.loads((kb_dir / "kb.json").read_text())
    rel = next(r for r in doc["sglang"] if r["version"] == "0.5.18")
    for rule in rel["launch"]["rules"]:
        rule["condition"] = text
    (kb_dir / "kb.json").write_text(json.dumps(doc))
    shutil.rmtree(kb_dir / "resolved")
    o = run(["--kb", str(kb_dir / "kb.json"), "args", "--sglang", "0.5.18", "--verbose",
             *LAUNCH], tmp_path / "home")
    assert o.rc == 0 and "Traceback" not in o.err, o.err[-1500:]
    assert "nested too deeply to" in o.out, o.out[-1500:]


def _surface(tmp_path: Path, template: Path, n: int, fuzz: bool) -> Tally:
    def make(rng: random.Random, i: int) -> Case:
        folder = fresh(tmp_path / f"in{i % 3}")
        shutil.rmtree(folder)
        shutil.copytree(template, folder)
        what = _edited(folder, rng, ("condition", "guard", "writes", "message"),
                       rng.randint(1, 6))
        argv = ["--kb", str(folder / "kb.json"), "args", "--sglang", "0.5.18",
                *rng.choice([[], ["--verbose"], ["--json"]]), *LAUNCH]

        def answered(o: Outcome) -> str | None:  # a verdict, whatever the rules say
            return None if o.rc in (0, 1) else f"exit {o.rc}:\n{o.err[-600:]}"

        return Case(what, argv, keep=[folder / "kb.json"], judge=answered,
                    home=tmp_path / f"home{i % 3}")

    return survey("launch rules of a KB edited by hand", 4343, n, fuzz, tmp_path, make)


def test_hostile_launch_rules(tmp_path: Path, kb_template: Path) -> None:
    _surface(tmp_path, kb_template, DEFAULT_N, False).check()


@pytest.mark.fuzz
def test_fuzz_launch_rules(tmp_path: Path, kb_template: Path) -> None:
    _surface(tmp_path, kb_template, FUZZ_N, True).check()
