"""Every shell example in the README and the docs runs, and prints what the page says.

An example is a ``console`` block: ``$ command`` lines, each followed by the output it
prints (stdout and stderr, as a terminal shows them). The commands of one page run in order
in one empty folder (a page's ``printf ... > requirements.txt`` is there for the next
command), with ``.venv/bin/moonpin`` (and ``moonpin``) the moonpin under test, on the
shipped knowledge base. A ``python`` block runs with this interpreter; a ``# ->`` comment
after it starts the output it prints.

An example that needs what a test cannot have says so on the line before its block,
``<!-- example: skip needs-image -->`` (a real worker image), ``needs-network`` (the live
index), ``api-pending`` (an interface not shipped yet) or ``own-test`` (a test of its own
runs it with what it needs: tests/test_api.py the preflight snippet): it is counted, never
run here. A
``sh`` block is a command's synopsis (``skip synopsis``) or a recipe too long to run here
(``skip recipe``, e.g. the test suite itself); it must say which. A ``text`` block is
output alone, unless it starts with ``$ `` (then it is a console block in disguise, and
refused).

``MOONPIN_RECORD_EXAMPLES=1 python -m pytest tests/test_docs_examples.py`` rewrites the
outputs from what the commands print now (after a KB refresh); the diff is then part of
the change's review."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SKIPS = {"needs-image", "needs-network", "api-pending", "synopsis", "recipe", "own-test"}
FENCE = re.compile(r"^```(console|python|sh|bash|shell|text)\n(.*?)^```$", re.M | re.S)
RECORD = os.environ.get("MOONPIN_RECORD_EXAMPLES") == "1"


def _blocks(text: str) -> list[tuple[str, str, str | None, tuple[int, int]]]:
    """(kind, body, skip reason, span of the body) of each example block of a page."""
    out = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = re.fullmatch(r"<!-- example: skip ([\w-]+) -->", before.strip())
        out.append((m.group(1), m.group(2), skip.group(1) if skip else None, m.span(2)))
    return out


def _console(body: str) -> list[tuple[str, str]]:
    """(command, the output the page shows) of a console block."""
    pairs: list[tuple[str, list[str]]] = []
    joined = body.replace("\\\n", "")  # a command continued with a backslash
    for line in joined.splitlines():
        if line.startswith("$ "):
            pairs.append((line[2:], []))
        elif pairs:
            pairs[-1][1].append(line)
        else:
            raise AssertionError(f"a console block starts with output, not `$ `: {line!r}")
    return [(c, "\n".join(o)) for c, o in pairs]


def _workdir(tmp: Path) -> tuple[Path, dict[str, str]]:
    script = Path(sys.executable).with_name("moonpin")
    if not script.exists():
        pytest.skip(f"no moonpin script beside {sys.executable}")
    (tmp / ".venv" / "bin").mkdir(parents=True)
    for name in ("moonpin", "python", "python3"):
        (tmp / ".venv" / "bin" / name).symlink_to(script if name == "moonpin"
                                                  else Path(sys.executable))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOONPIN_")}
    env.update(COLUMNS="100", NO_COLOR="1", MOONPIN_KB_MAX_AGE_DAYS="0",
               MOONPIN_KB=str(ROOT / "data" / "kb.json"),
               PATH=f"{tmp / '.venv' / 'bin'}:{env.get('PATH', '')}")
    return tmp, env


def _run(command: str, cwd: Path, env: dict[str, str]) -> str:
    r = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=300)
    return (r.stdout + r.stderr).replace(str(ROOT), "<checkout>").rstrip("\n")


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_examples_print_what_the_page_says(page: Path, tmp_path: Path) -> None:
    text = page.read_text(encoding="utf-8")
    blocks = _blocks(text)
    for n, (kind, body, skip, _) in enumerate(blocks):
        assert skip is None or skip in SKIPS, f"{page.name}: unknown skip reason {skip!r}"
        if page.name == "README.md" and n == 0:  # the two set-up lines: .ci/run runs them
            assert body.startswith("python3 -m venv .venv && .venv/bin/pip install . &&"), body
            continue
        if kind in ("sh", "bash", "shell") and skip is None:
            raise AssertionError(f"{page.name}: a {kind} block must be a console block "
                                 f"(run, output compared) or say why not:\n{body[:200]}")
        if kind == "text" and body.startswith("$ ") and skip is None:
            raise AssertionError(f"{page.name}: a text block of commands: make it a "
                                 f"console block:\n{body[:200]}")
    runnable = [b for b in blocks if b[2] is None and b[0] in ("console", "python")]
    if not runnable:
        pytest.skip(f"{page.name}: no runnable example ({len(blocks)} marked skip)")
    cwd, env = _workdir(tmp_path)
    edits: list[tuple[tuple[int, int], str]] = []
    for kind, body, _, span in runnable:
        if kind == "python":
            code, _, shown = body.partition("# ->\n")
            got = _run(f"python - <<'EOF'\n{code}EOF", cwd, env)
            if RECORD:
                edits.append((span, code + ("# ->\n" + got + "\n" if got else "")))
            else:
                assert got == shown.rstrip("\n"), (page.name, code)
            continue
        new = []
        for command, shown in _console(body):
            got = _run(command, cwd, env)
            new.append(f"$ {command}" + (f"\n{got}" if got else ""))
            if not RECORD:
                assert got == shown, f"{page.name}: `{command}` printed:\n{got}"
        if RECORD:
            edits.append((span, "\n".join(new) + "\n"))
    if RECORD and edits:
        for (start, end), body in sorted(edits, reverse=True):
            text = text[:start] + body + text[end:]
        page.write_text(text, encoding="utf-8")


def test_every_example_block_is_run_or_says_why_not() -> None:
    """A shell example in another fence (sh, bash) would never be compared: the examples
    with output are console blocks; a sh block is a recipe without output and must be one
    that the console blocks run too, or marked."""
    counts = {"run": 0, **dict.fromkeys(SKIPS, 0)}
    for page in PAGES:
        for kind, body, skip, _ in _blocks(page.read_text(encoding="utf-8")):
            if kind != "text" or body.startswith("$ "):
                counts[skip or "run"] += 1
    assert counts["run"] >= 5, counts
