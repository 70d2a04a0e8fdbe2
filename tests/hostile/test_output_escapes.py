"""What a ``moonpin`` command prints quotes what it read elsewhere: a KB's member names and
messages (a wheel on the index names its members as it likes), a project's pins and include
names, argv echoed back. A terminal control character among them (ESC starting a sequence
that sets the title or clears the screen, BEL, a carriage return) used to reach the terminal
raw; now each is printed as its Python escape, on stdout and stderr alike, while moonpin's
own progress line (``\\r\\x1b[K``) still works. The harness holds every hostile surface to
this (:data:`tests.hostile.harness._TERMINAL_CONTROLS`)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

from moonpin.cli.common import CLEAR_LINE, PrintableStream, printable
from tests.hostile.harness import _TERMINAL_CONTROLS, Outcome, run

ESCAPES = "\x1b]0;owned\x07\x1b[2J"


def _raw_controls(o: Outcome) -> list[str]:
    return _TERMINAL_CONTROLS.findall(o.out) + _TERMINAL_CONTROLS.findall(o.err)


def test_kb_strings_in_show(tmp_path: Path, kb_template: Path) -> None:
    # `moonpin show sglang==0.5.18` printed each import's member name as the KB holds it
    kb_dir = tmp_path / "kb"
    shutil.copytree(kb_template, kb_dir)
    doc = json.loads((kb_dir / "kb.json").read_text())
    rel = next(r for r in doc["sglang"] if r["version"] == "0.5.18")
    for imp in rel["imports"]:
        imp["member"] += ESCAPES
    (kb_dir / "kb.json").write_text(json.dumps(doc))
    shutil.rmtree(kb_dir / "resolved")
    o = run(["--kb", str(kb_dir / "kb.json"), "show", "sglang==0.5.18"], tmp_path / "home")
    assert o.rc == 0, o.err
    assert not _raw_controls(o), o.out[-600:]
    assert "\\x1b]0;owned\\x07" in o.out  # said, escaped


def test_project_lines_in_pins(tmp_path: Path) -> None:
    # a pin line or an include name with escapes was echoed raw in the diagnostics
    req = tmp_path / "requirements.txt"
    req.write_text(f"sglang==0.5.18\ntorch==2.13.0{ESCAPES}\n-r {ESCAPES}missing.txt\n")
    for cmd in ("pins", "renovate"):
        o = run([cmd, str(req)], tmp_path / "home")
        assert o.rc == 2 and "tip:" in o.err, o.err
        assert not _raw_controls(o), o.err[-600:]


def test_argv_echoed_by_the_parser(tmp_path: Path) -> None:
    o = run(["which", "mooncake", f"--sglang{ESCAPES}", "0.5.18"], tmp_path / "home")
    assert o.rc == 2 and not _raw_controls(o), o.err[-600:]


def test_printable_stream_keeps_the_progress_line() -> None:
    out = io.StringIO()
    stream = PrintableStream(out)
    stream.write(CLEAR_LINE + "reading a\rb\x1b[2J")
    stream.write("line\tone\n")
    assert out.getvalue() == CLEAR_LINE + "reading a\\rb\\x1b[2J" + "line\tone\n"
    assert printable("ok\n") == "ok\n" and printable("\udc80") == "\\udc80"
    assert printable("a,b\r\nc\r\x1b\r\n") == "a,b\r\nc\\r\\x1b\r\n"  # CSV rows kept
