"""Hostile project files for ``moonpin pins`` and ``moonpin renovate``: requirements files
with includes, ``pyproject.toml``, Dockerfiles and scripts, damaged in the ways
``tests/resolver/test_pins_hostile.py`` pins down one by one (special files, nesting,
long lines and numbers, odd bytes, include chains, CRLF, symlinks, read-only files),
judged through moonpin: exit 0/1 with a verdict or 2 naming file and line, never a
traceback or a hang; a read-only run changes nothing, a refused ``--write`` changes
nothing, and a ``--write`` that writes keeps line endings, mode and symlinks."""

from __future__ import annotations

import os
import random
import stat
from pathlib import Path

import pytest

from tests.hostile import gen
from tests.hostile.harness import DEFAULT_N, FUZZ_N, Case, Outcome, Tally, fresh, survey

STACK = ["sglang==0.5.18", "torch==2.13.0", "mooncake-transfer-engine-cuda13==0.3.12  # old"]

#: Lines a pins file may hold that a reader must survive.
HOSTILE_LINES = [
    "sglang==" + "1" * 5000, "sglang==" + "9" * 70, "torch==2.13.0" + " " * 100_000 + "x",
    "sglang >>= " + "x" * 30_000, "sglang===${V}", "sglang==1!.5.18", "sglang==0.5.18; ?",
    "-r /dev/zero", "-r missing.txt", "-c " + "c/" * 2000 + "x.txt", "-r .", "-r " + "\x00",
    "torch==2.13.0 \\", "\\", "--hash=sha256:" + "0" * 64, "sglang[" + "a," * 5000 + "]==0.5.18",
    "mooncake-transfer-engine==0.3.13 --hash=sha256:" + "f" * 64, "\ufeffsglang==0.5.18",
    "sglang==0.5.18 # " + "\u202e" * 100, "ｓｇｌａｎｇ==0.5.18", "torch==2.13.0+cu130",
    "sglang @ file:///etc/passwd", "sglang==0.5.18; python_version ~= 'abc'",
    "torch==2.13.0\x1b]0;owned\x07\x1b[2J", "sglang==0.5.18 # \x1b[31m\r\x08",
    "-r \x1b[2Jmissing.txt",
]


def _requirements(rng: random.Random, folder: Path) -> tuple[list[Path], str]:
    lines = list(STACK)
    what = []
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(["line", "line", "chain", "include-special", "bytes", "crlf",
                           "many", "continuation"])
        if kind == "line":
            line = rng.choice(HOSTILE_LINES)
            lines.insert(rng.randrange(len(lines) + 1), line)
            what.append(f"line {line[:40]!r}")
        elif kind == "chain":
            depth = rng.choice([3, 40, 600])
            for d in range(depth):
                body = f"-r c{d + 1}.txt\n" if d < depth - 1 else "sglang==0.5.18\n"
                (folder / f"c{d}.txt").write_text(body)
            lines.append("-r c0.txt")
            what.append(f"{depth} chained includes")
        elif kind == "include-special":
            inc = folder / "base.txt"
            special = gen.make_special(rng.choice(gen.SPECIALS), inc)
            lines.append("-r base.txt")
            what.append(f"an include that is {special}")
        elif kind == "bytes":
            junk, how = gen.damage_bytes(rng, "\n".join(lines).encode())
            (folder / "requirements.txt").write_bytes(junk)
            return [folder / "requirements.txt"], f"requirements: {how}"
        elif kind == "crlf":
            lines = [x + "\r" for x in lines]
            what.append("CRLF")
        elif kind == "many":
            lines += ["torch==2.13.0"] * rng.choice([100, 20_000])
            what.append("many lines")
        else:
            lines[0] = lines[0] + " \\"
            what.append("a continuation")
    f = folder / "requirements.txt"
    f.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogateescape")
    return [f], "requirements: " + ", ".join(what)


def _pyproject(rng: random.Random, folder: Path) -> tuple[list[Path], str]:
    deps = ", ".join(f'"{x.split("  ")[0]}"' for x in STACK)
    base = f'[project]\nname = "x"\ndependencies = [{deps}]\n'
    kind = rng.choice(["nest", "dotted", "type", "bigint", "string", "bad", "uv", "crlf"])
    text = {
        "nest": base + "x = " + "[" * rng.choice([50, 3000]) + "]" * 50 + "\n",
        "dotted": base + "[" + ".".join(["a"] * rng.choice([100, 100_000])) + "]\n",
        "type": '[project]\ndependencies = {"a": 5}\n',
        "bigint": base + "x = " + "9" * 5000 + "\n",
        "string": base + 'x = "' + "\\\\" * 200_000 + '"\n',
        "bad": base + rng.choice(["[project\n", "x = \n", "\x00\n", "[[a]]\n[a]\n"]),
        "uv": base + '[tool.uv]\nconstraint-dependencies = ["torch==' + "1" * 5000 + '"]\n',
        "crlf": base.replace("\n", "\r\n"),
    }[kind]
    f = folder / "pyproject.toml"
    f.write_text(text, encoding="utf-8")
    return [f], f"pyproject: {kind}"


def _dockerfile(rng: random.Random, folder: Path) -> tuple[list[Path], str]:
    lines = ["FROM lmsysorg/sglang:v0.5.18", "ARG SGLANG_VERSION=0.5.18",
             "RUN pip install torch==2.13.0 mooncake-transfer-engine-cuda13==0.3.12"]
    kind = rng.choice(["arg", "install", "long", "continuation", "crlf", "nul"])
    if kind == "arg":
        lines.append("ARG MOONCAKE_VERSION=" + rng.choice(["9" * 5000, "${X}", "", "a b"]))
    elif kind == "install":
        lines.append("RUN uv pip install " + " ".join(rng.choice(HOSTILE_LINES)[:200]
                                                      for _ in range(rng.randint(1, 5))))
    elif kind == "long":
        lines.append("RUN pip install " + "x" * rng.choice([10_000, 1_000_000]))
    elif kind == "continuation":
        lines += ["RUN pip install \\"] * rng.choice([10, 5000]) + ["  torch==2.13.0"]
    elif kind == "crlf":
        lines = [x + "\r" for x in lines]
    else:
        lines.append("ARG X=\x00\x01\x7f")
    f = folder / "Dockerfile"
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [f], f"Dockerfile: {kind}"


def _project(rng: random.Random, folder: Path) -> tuple[list[Path], str]:
    pick = rng.random()
    if pick < 0.1:
        f = folder / "requirements.txt"
        return [f], f"requirements: {gen.make_special(rng.choice(gen.SPECIALS), f)}"
    files, what = (_requirements if pick < 0.6 else _pyproject if pick < 0.8
                   else _dockerfile)(rng, folder)
    if rng.random() < 0.1 and files[0].is_file():  # the pins file behind a symlink
        real = files[0].with_name("real-" + files[0].name)
        files[0].rename(real)
        files[0].symlink_to(real.name)
        files.append(real)
        what += ", behind a symlink"
    if rng.random() < 0.1 and files[-1].is_file() and not files[-1].is_symlink():
        files[-1].chmod(rng.choice([0o444, 0o600, 0o640]))
        what += f", mode {stat.S_IMODE(files[-1].stat().st_mode):o}"
    return files, what


def _layout(path: Path) -> tuple[bool, int, int, int] | None:
    """What a write must keep of a file: symlink or not, mode, CRLF and bare LF counts."""
    try:
        data = path.read_bytes() if path.is_file() else b""
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return None
    crlf = data.count(b"\r\n")
    return path.is_symlink(), mode, crlf, data.count(b"\n") - crlf


def _surface(tmp_path: Path, kb_template: Path, n: int, fuzz: bool) -> Tally:
    kb = kb_template / "kb.json"

    def make(rng: random.Random, i: int) -> Case:
        folder = fresh(tmp_path / f"in{i % 3}")
        files, what = _project(rng, folder)
        every = sorted(p for p in folder.rglob("*"))
        mode = rng.choice(["read", "read", "json", "diff", "write", "renovate"])
        if mode == "renovate":
            return Case(f"{what} (renovate)", ["--kb", str(kb), "renovate", str(files[0])],
                        keep=[*every, kb])
        opts = {"read": [], "json": ["--json"], "diff": ["--diff"], "write": ["--write"]}[mode]
        opts += rng.choice([[], [], ["--strategy", "latest"], ["--keep", "torch"],
                            ["--exit-zero"]])
        argv = ["--kb", str(kb), "pins", str(files[0]), *opts]
        if mode != "write":
            return Case(f"{what} ({mode})", argv, keep=[*every, kb])
        before = {p: _layout(p) for p in files}

        def kept_layout(o: Outcome) -> str | None:
            for p, was in before.items():
                now = _layout(p)
                if was is None or now is None:
                    continue
                if now[:2] != was[:2] or (was[2] and not was[3] and now[3]):
                    return (f"--write changed the layout of {p.name}: (symlink, mode, CRLF, "
                            f"LF) {was} -> {now}")
            return None

        return Case(f"{what} (write)", argv, keep=[kb], keep_if_refused=every,
                    writes_on=(0, 1), judge=kept_layout)

    return survey("pins and renovate files", 1919_19, n, fuzz, tmp_path / "home", make)


def test_hostile_pins_files(tmp_path: Path, kb_template: Path) -> None:
    _surface(tmp_path, kb_template, DEFAULT_N, False).check()


@pytest.mark.fuzz
def test_fuzz_pins_files(tmp_path: Path, kb_template: Path) -> None:
    _surface(tmp_path, kb_template, FUZZ_N, True).check()
