"""Hostile command lines for the queries (``which``, ``explain``, ``show``, ``triples``,
``matrix``, ``constraints``, ``kb info``): huge and odd versions, specifiers and names,
unicode, control characters, option soup, judged through moonpin: an answer (0/1) or a
refusal (2) with a ``tip:`` and the input cut short, never a traceback or a hang, the KB
and its resolved tables left as they were."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.hostile.harness import DEFAULT_N, FUZZ_N, Case, Outcome, Tally, run, survey

VERSIONS = [
    "0.5.18", "0.5.17", "2.13.0", "0.3.13.post1", "1" * 5000, "9" * 65, "9" * 64, "1!0.5.18",
    "1!.5.18", "0.5.18+local.build", "v0.5.18", "0.5.18.dev0", "0.5.18rc1", "banana", "",
    " ", "0.5.18\n0.5.19", "0.5.*", "===0.5.18", "0" * 4097, ".".join(["1"] * 3000),
    "0.5.18" + "\u200b", "０.５.１８", "\udcff", "-1", "1e999", "NaN", "0x10",
    "2.13.0+cu" + "1" * 70,
]
SPECS = [">=0.5", "==0.5.18", "<0", "~=" + "1" * 5000, ">=0.5,<0.6," * 2000, "!=*", "===x",
         ">0.5.17;python_version<'3'", "", "*", ">=" + "1." * 3000 + "1", "~=1"]
DISTS = ["mooncake-transfer-engine", "mooncake-transfer-engine-cuda13", "mooncake",
         "MOONCAKE_TRANSFER.ENGINE", "torch", "sglang", "numpy", "x" * 5000, "", "-", "ß",
         "../../etc/passwd", "mooncake-transfer-engine[extra]"]
NAMES = ["sglang", "torch", "mooncake", *DISTS]
WORDS = ["--json", "--why", "--help", "-h", "--", "-", "--kb", "--sglang", "--torch",
         "--format", "--arch", "--python", "=", "==", "\x1b[31m", "\u202e", "🙂", "'", '"',
         "$(id)", "`id`", "%s%n", "{}", "\\", "\t", " " * 3000, "a" * 100_000]
ARCHES = ["x86_64", "aarch64", "arm64", "riscv", "", "x" * 5000, "x86_64\n"]
PYTHONS = ["3.12", "cp312", "3", "3.99", "2.7", "", "3." + "9" * 5000, "python3"]


def _pick(rng: random.Random, choices: list[str]) -> str:
    if rng.random() < 0.15:  # a fresh string of odd characters
        alphabet = "0123456789.!+*=<>~,;_-aZß🙂\u200b\u202e\t \x7f\x1b"
        return "".join(rng.choice(alphabet) for _ in range(rng.choice([1, 5, 40, 5000])))
    return rng.choice(choices)


def _release(rng: random.Random) -> str:
    return f"{_pick(rng, NAMES)}{rng.choice(['==', '==', '===', '>=', '@', '', '=='])}" \
        f"{_pick(rng, VERSIONS)}"


def _options(rng: random.Random, command: str) -> list[str]:
    pool = {
        "which": [("--sglang", VERSIONS), ("--torch", VERSIONS), ("--dist", DISTS),
                  ("--arch", ARCHES), ("--python", PYTHONS)],
        "explain": [("--torch", VERSIONS), ("--arch", ARCHES), ("--python", PYTHONS)],
        "triples": [("--sglang", SPECS), ("--torch", SPECS), ("--mooncake", SPECS),
                    ("--dist", DISTS), ("--format", ["table", "json", "csv", "ß", ""]),
                    ("--arch", ARCHES), ("--python", PYTHONS)],
        "matrix": [("--format", ["html", "md", "csv", "json", "pdf"]), ("--dist", DISTS),
                   ("--sglang", SPECS), ("--mooncake", SPECS), ("--torch", VERSIONS),
                   ("--arch", ARCHES), ("--python", PYTHONS)],
        "constraints": [("--sglang", VERSIONS), ("--format", ["txt", "uv", "toml"]),
                        ("--arch", ARCHES), ("--python", PYTHONS)],
    }.get(command, [])
    out: list[str] = []
    for _ in range(rng.choice([0, 1, 2, 3, 6])):
        if pool and rng.random() < 0.8:
            opt, values = rng.choice(pool)
            out += [opt, _pick(rng, values)] if rng.random() < 0.95 else [opt]
        else:
            out.append(_pick(rng, WORDS))
    return out


def _argv(rng: random.Random, out_dir: Path) -> list[str]:
    command = rng.choice(["which", "which", "explain", "explain", "show", "triples",
                          "matrix", "constraints", "kb info"])
    if command == "which":
        head = ["which", _pick(rng, ["mooncake", "sglang", "torch", "numpy", ""])]
        if rng.random() < 0.8:
            head += ["--sglang", _pick(rng, VERSIONS)]
    elif command == "explain":
        head = ["explain", *(_release(rng) for _ in range(rng.choice([0, 1, 2, 2, 3, 50])))]
    elif command == "show":
        head = ["show", *(_release(rng) for _ in range(rng.choice([0, 1, 1, 2])))]
    elif command == "matrix":  # written only inside the sandbox
        head = ["matrix", "-o", str(out_dir / rng.choice(["m.html", "m.md", "sub/m.csv", "."]))]
    elif command == "constraints":
        head = ["constraints"] + (["--sglang", _pick(rng, VERSIONS)] if rng.random() < 0.9
                                  else [])
    else:
        head = command.split()
    argv = head + _options(rng, head[0])
    if rng.random() < 0.1:
        rng.shuffle(argv)  # option soup
    return argv


def _short_errors(o: Outcome) -> str | None:
    if len(o.err) > 4000:  # an echoed input is cut to a few hundred characters
        return f"{len(o.err):,} characters on stderr:\n{o.err[:300]}"
    return None


def _surface(tmp_path: Path, kb_template: Path, n: int, fuzz: bool) -> Tally:
    kb = kb_template / "kb.json"
    tables = sorted((kb_template / "resolved").glob("*.json"))
    out_dir = tmp_path / "out"
    out_dir.mkdir()

    def make(rng: random.Random, i: int) -> Case:
        argv = _argv(rng, out_dir)
        if rng.random() < 0.05:
            argv = [rng.choice(["--kb", "--version", "help", "-h"]), *argv]
        return Case(" ".join(a[:30] for a in argv)[:120], ["--kb", str(kb), *argv],
                    keep=[kb, *tables], judge=_short_errors, timeout=60)

    return survey("query argv", 1919_2, n, fuzz, tmp_path / "home", make)


def test_hostile_query_argv(tmp_path: Path, kb_template: Path) -> None:
    _surface(tmp_path, kb_template, DEFAULT_N, False).check()


@pytest.mark.fuzz
def test_fuzz_query_argv(tmp_path: Path, kb_template: Path) -> None:
    _surface(tmp_path, kb_template, FUZZ_N, True).check()


@pytest.mark.parametrize("argv", [
    ["triples", "--format", "ß"], ["constraints"], ["which", "numpy"], ["kb"],
    ["explain", "sglang==0.5.18", "--arch"], ["nonsense"], ["show", "a", "b", "c"],
    ["which", "mooncake", "--sglang", "0.5.18", "--no-such-option=" + "x" * 3000]])
def test_argparse_errors_end_with_a_tip_and_echo_little(tmp_path: Path, kb_template: Path,
                                                        argv: list[str]) -> None:
    o = run(["--kb", str(kb_template / "kb.json"), *argv], tmp_path)
    assert o.rc == 2 and "Traceback" not in o.err
    assert o.err.rstrip().splitlines()[-1].startswith("tip: `moonpin"), o.err
    assert len(o.err) < 1500, len(o.err)


@pytest.mark.parametrize("argv", [
    ["which", "torch"], ["which", "torch", "--sglang", "0.5.18"],
    ["explain", "ß==1!.5.18", "mooncake-transfer-engine==1!.5.18"],
    ["explain", "sglang===0.5.18\u200b"], ["show", "sglang==" + "x" * 3000]])
def test_refused_queries_end_with_a_tip(tmp_path: Path, kb_template: Path,
                                        argv: list[str]) -> None:
    """Found by the query argv surface: these exited 2 without a tip."""
    o = run(["--kb", str(kb_template / "kb.json"), *argv], tmp_path)
    assert o.rc == 2 and "Traceback" not in o.err, o.err
    assert o.err.rstrip().splitlines()[-1].startswith("tip: "), o.err
    assert len(o.err) < 8000, len(o.err)


@pytest.mark.parametrize("argv", [
    ["show", "-- , \U0001f642\u202e\x7f" * 700], ["--kb", " " * 3000, "kb", "info"],
    ["--kb", "/nonexistent/" + "d" * 3500, "which", "mooncake", "--sglang", "0.5.18"]])
def test_a_long_echoed_input_is_cut(tmp_path: Path, kb_template: Path,
                                    argv: list[str]) -> None:
    """Found by the query argv surface: a 4,000-character argument or KB path came back
    whole (12 KB of stderr with its escapes)."""
    if argv[0] != "--kb":
        argv = ["--kb", str(kb_template / "kb.json"), *argv]
    o = run(argv, tmp_path)
    assert o.rc == 2 and "Traceback" not in o.err, o.err
    assert len(o.err) < 2000 and "more characters" in o.err and "\ntip: " in o.err, o.err


@pytest.mark.parametrize("release", ["sglang===0.5.*", "sglang==0.5.*",
                                     "mooncake-transfer-engine===banana"])
def test_show_of_a_requirement_that_is_not_one_release(tmp_path: Path, kb_template: Path,
                                                       release: str) -> None:
    """Found by the query argv surface: InvalidVersion traceback (exit 1) in show."""
    o = run(["--kb", str(kb_template / "kb.json"), "show", release], tmp_path)
    assert o.rc == 2 and "Traceback" not in o.err, o.err
    assert "is not a PEP 440 version" in o.err and "\ntip: " in o.err
