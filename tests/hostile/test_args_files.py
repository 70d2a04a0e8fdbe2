"""Hostile launch files for ``moonpin args --file``: manifests and shell scripts, judged
through moonpin (exit 0/1 with verdicts, or 2 naming the file and a limit; never a
traceback or a hang; the file left as it was)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.hostile import gen
from tests.hostile.harness import DEFAULT_N, FUZZ_N, Case, Tally, fresh, run, survey

FLAGS = ["--model-path", "m", "--tp-size", "2", "--elastic-ep-backend", "mooncake",
         "--enable-eplb", "--ep-size", "8", "--moe-a2a-backend", "mooncake",
         "--deepep-mode", "auto", "--chunked-prefill-size", "-1"]

MANIFEST = """apiVersion: apps/v1
kind: Deployment
spec:
  template:
    spec:
      containers:
      - name: worker
        image: lmsysorg/sglang:v0.5.18-cu130
        command: ["python3", "-m", "sglang.launch_server"]
        args: [{args}]
"""


def _yaml(rng: random.Random) -> str:
    args = ", ".join(f'"{a}"' for a in rng.sample(FLAGS, rng.randint(0, len(FLAGS))))
    base = MANIFEST.format(args=args)
    kind = rng.choice(["flow", "block", "laughs", "tag", "scalar", "bigint", "docs",
                       "invalid", "crlf", "alias-loop", "spaces", "merge"])
    if kind == "flow":
        d = rng.choice([101, 1000, 5000, 100_000])
        return base + "x: " + rng.choice([gen.deep(d), gen.deep(d, "{a: ", "}")]) + "\n"
    if kind == "block":
        return base + "".join(" " * i + "k:\n" for i in range(rng.choice([200, 3000])))
    if kind == "laughs":
        lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
        for i in range(1, 10):
            lines.append(f"{chr(97 + i)}: &{chr(97 + i)} [" + ",".join(
                [f"*{chr(96 + i)}"] * 9) + "]")
        return base + "\n".join(lines) + "\n"
    if kind == "tag":
        return base + "x: !!python/object/apply:os.system ['echo pwned']\n"
    if kind == "scalar":
        return base.replace('"m"', '"' + "\\\\" * rng.choice([1000, 500_000]) + '"')
    if kind == "bigint":
        return base + "x: " + "9" * 5000 + "\n"
    if kind == "docs":
        return "---\n".join([base] * rng.choice([2, 300]))
    if kind == "invalid":
        return base + rng.choice(["x: [\n", "\t- bad\n", "x: {a: 1\n", "? ? ?\n", "x: *nope\n"])
    if kind == "crlf":
        return base.replace("\n", "\r\n")
    if kind == "alias-loop":
        return base + "x: &x\n  y: *x\n"
    if kind == "spaces":
        return base + " " * 200_000 + "# c\n"
    return base + "x: &m {a: 1}\ny:\n  <<: [*m, *m, *m]\n"


def _shell(rng: random.Random) -> str:
    line = "python -m sglang.launch_server " + " ".join(
        rng.sample(FLAGS, rng.randint(0, len(FLAGS))))
    kind = rng.choice(["quote", "backslash", "long", "vars", "nested", "many", "nul",
                       "comment", "heredoc", "subshell"])
    if kind == "quote":
        return line + ' "' + "\nx" * rng.choice([10, 5000]) + "\n"
    if kind == "backslash":
        return line + " " + "\\" * rng.choice([1001, 200_000]) + "\n"
    if kind == "long":
        return line + " --model-path " + "a" * rng.choice([70_000, 1_000_000]) + "\n"
    if kind == "vars":
        return "A=$B\nB=${A:-${B:-${C}}}\n" + line + " --tp $A ${B} ${@} $((1+1))\n"
    if kind == "nested":
        inner = line
        for _ in range(rng.choice([3, 12])):
            inner = "bash -c " + repr(inner)
        return inner + "\n"
    if kind == "many":
        return (line + "\n") * rng.choice([100, 5000])
    if kind == "nul":
        return line + "\x00\x00\xff\n"
    if kind == "comment":
        return " " * 100_000 + "#" + line + "\n" + line + "\n"
    if kind == "heredoc":
        return "cat <<EOF\n" + line + "\nEOF\n" + line + " <<< 'x'\n"
    return "(" * 500 + line + ")" * 500 + "\n"


def _input(rng: random.Random, folder: Path) -> tuple[Path, list[str], str]:
    pick = rng.random()
    fmt: list[str] = []
    if pick < 0.12:
        f = folder / "launch.yaml"
        return f, fmt, gen.make_special(rng.choice(gen.SPECIALS), f)
    if pick < 0.55:
        f = folder / "launch.yaml"
        text = _yaml(rng)
        what = "yaml"
    elif pick < 0.9:
        f = folder / "launch.sh"
        text = _shell(rng)
        what = "shell"
    else:
        f = folder / "launch.txt"
        data, what = gen.damage_bytes(rng, _yaml(rng).encode())
        f.write_bytes(data)
        fmt = ["--format", rng.choice(["yaml", "shell", "auto"])]
        return f, fmt, what
    f.write_bytes(text.encode("utf-8", "surrogateescape"))
    if rng.random() < 0.2:
        fmt = ["--format", rng.choice(["yaml", "shell"])]
    return f, fmt, f"{what} {len(text)} characters"


def _surface(tmp_path: Path, kb_template: Path, n: int, fuzz: bool) -> Tally:
    kb = kb_template / "kb.json"

    def make(rng: random.Random, i: int) -> Case:
        f, fmt, what = _input(rng, fresh(tmp_path / f"in{i % 3}"))
        return Case(what, ["--kb", str(kb), "args", "--file", str(f), *fmt, "--sglang",
                           "0.5.18"], keep=[f, kb])

    return survey("args files and manifests", 2019, n, fuzz, tmp_path / "home", make)


def test_hostile_args_files(tmp_path: Path, kb_template: Path) -> None:
    _surface(tmp_path, kb_template, DEFAULT_N, False).check()


@pytest.mark.fuzz
def test_fuzz_args_files(tmp_path: Path, kb_template: Path) -> None:
    _surface(tmp_path, kb_template, FUZZ_N, True).check()


@pytest.mark.parametrize(("kind", "said"), [
    ("fifo", "FIFO"), ("dev-zero", "character device"), ("directory", "directory"),
    ("oversized", "over the 8 MiB limit"), ("loop", "symlink loop")])
def test_a_refused_launch_file_ends_in_a_tip(tmp_path: Path, kb_template: Path, kind: str,
                                              said: str) -> None:
    """``args --file`` on a file read_regular refuses (moonpin.kb.errors.ReadRefused): exit 2, the
    file and the reason named, and the refusal's own tip (not a traceback, not a hang)."""
    f = tmp_path / "launch.yaml"
    if kind == "oversized":
        with open(f, "wb") as out:
            out.truncate(9 * 1024 * 1024)
    else:
        gen.make_special(kind, f)
    o = run(["--kb", str(kb_template / "kb.json"), "args", "--file", str(f), "--sglang",
             "0.5.18"], tmp_path / "home", timeout=30)
    assert o.rc == 2, (o.rc, o.err)
    assert str(f) in o.err and said in o.err and "Traceback" not in o.err
    assert "\ntip: point moonpin at a regular launch file (at most 8 MiB)" in o.err
