"""The HTML matrix looked at in a real browser: headless Chromium, from disk, no network.

``--dump-dom`` gives the DOM after the page's inline script drew the table; a
screenshot (kept in pytest's tmp dir, never in the repo) shows the page is not blank.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from moonpin.kb import store
from moonpin.resolver.graph import CompatGraph
from moonpin.resolver.matrix import table as M
from tests.resolver.kbslice import build_kb
from tests.resolver.test_matrix import C13, MTE, SLICE

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="headless Chromium not installed (Debian package `chromium`; .ci/run installs it)")


def _chromium(tmp: Path, *args: str) -> str:
    assert CHROMIUM is not None
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--disable-extensions", "--disable-dev-shm-usage",
           f"--user-data-dir={tmp / 'profile'}", *args]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


class _Cells(HTMLParser):
    """Collects ``td.cell`` elements: (row's SGLang version, column, state, text)."""

    def __init__(self) -> None:
        super().__init__()
        self.row: str | None = None
        self.cells: list[dict[str, str]] = []
        self._cur: dict[str, str] | None = None
        self.footer = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "tr" and "data-sglang" in a:
            self.row = a["data-sglang"]
        if tag == "td" and "cell" in a.get("class", "").split():
            self._cur = {"sglang": self.row or "", "col": a.get("data-col", ""),
                         "state": a.get("data-state", ""), "title": a.get("title", ""),
                         "text": ""}
            self.cells.append(self._cur)
        if tag == "footer":
            self.footer = True

    def handle_data(self, data: str) -> None:
        if self._cur is not None:
            self._cur["text"] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._cur = None


def _dom_cells(tmp: Path, page: Path) -> _Cells:
    dom = _chromium(tmp, "--dump-dom", page.as_uri())
    assert 'id="matrix"' in dom, dom[:500]
    p = _Cells()
    p.feed(dom)
    return p


def _png_colours(path: Path) -> tuple[int, int, int]:
    """(width, height, distinct byte values in the decompressed image data)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    return width, height, len(set(raw))


def test_slice_page_in_browser(tmp_path: Path) -> None:
    m = M.build_matrix(CompatGraph(build_kb(SLICE)))
    page = tmp_path / "matrix.html"
    page.write_text(M.to_html(m), encoding="utf-8")
    dom = _dom_cells(tmp_path, page)
    # opens on cp312 / x86_64 with every column: 3 rows x 6 columns
    assert len(dom.cells) == len(m.rows) * len(m.columns) == 18
    by = {(c["sglang"], c["col"]): c for c in dom.cells}
    assert by[("0.5.18", f"{C13}==0.3.13")]["state"] == "compatible"
    assert by[("0.5.18", f"{C13}==0.3.14")]["state"] == "compatible-note"
    bad = by[("0.5.18", f"{MTE}==0.3.13")]
    assert bad["state"] == "incompatible" and "CUDA major" in bad["title"]
    assert bad["text"].startswith("✘")  # a symbol and a word, not colour alone
    assert by[("0.5.19", f"{C13}==0.3.13")]["state"] == "unknown"
    assert by[("0.5.18", f"{MTE}==0.3.15")]["state"] == "unknown"
    assert dom.footer


def test_shipped_kb_page_in_browser(tmp_path: Path) -> None:
    kb_path = ROOT / "data" / "kb.json"
    m = M.build_matrix(CompatGraph(store.load(kb_path)), kb_path=kb_path)
    page = tmp_path / "matrix.html"
    page.write_text(M.to_html(m), encoding="utf-8")
    dom = _dom_cells(tmp_path, page)
    assert len(dom.cells) == len(m.rows) * len(m.columns)
    by = {(c["sglang"], c["col"]): c for c in dom.cells}
    assert by[("0.5.18", f"{C13}==0.3.13.post1")]["state"] == "compatible"
    assert by[("0.5.18", f"{MTE}==0.3.13.post1")]["state"] == "incompatible"
    name = by[("0.5.17", f"{C13}==0.3.10.post2")]
    assert name["state"] == "incompatible" and "set_transfer_engine" in name["title"]
    assert by[("0.5.17", f"{MTE}==0.3.8")]["title"].startswith("incompatible: wrong module")

    shot = tmp_path / "m.png"
    _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1600,1000", page.as_uri())
    blank_page = tmp_path / "blank.html"
    blank_page.write_text("<!DOCTYPE html><html><body></body></html>", encoding="utf-8")
    blank = tmp_path / "blank.png"
    _chromium(tmp_path, f"--screenshot={blank}", "--window-size=1600,1000",
              blank_page.as_uri())
    w, h, colours = _png_colours(shot)
    assert (w, h) == (1600, 1000)
    assert _png_colours(blank)[2] <= 4  # a blank page really is one colour
    assert colours > 50, "the matrix screenshot looks blank"
    assert shot.stat().st_size > 10 * blank.stat().st_size
