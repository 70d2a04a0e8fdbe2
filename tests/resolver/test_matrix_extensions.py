"""The matrix's native-extension columns in every format (issue 39): csv, json and html
name, for each row, python and platform, the newest release of each project that fits, as
the Markdown table and ``which <project> --sglang V --torch T`` do."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from moonpin.resolver import native
from moonpin.resolver.graph import CompatGraph
from moonpin.resolver.matrix import table as M
from tests.resolver.test_matrix_browser import CHROMIUM, _chromium
from tests.resolver.test_stacks import _stack_kb

PROJECTS = ["nixl", "sglang-kernel"]


@pytest.fixture(scope="module")
def m() -> M.Matrix:
    return M.build_matrix(CompatGraph(_stack_kb()))


def test_the_projects_are_the_kb_s(m: M.Matrix) -> None:
    assert list(m.projects) == PROJECTS


def test_csv_has_a_column_per_project(m: M.Matrix) -> None:
    text = M.to_csv(m)
    head = text.splitlines()[0].split(",")
    assert head == [*M.CSV_COLUMNS, *PROJECTS]
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == len(m.cells)
    at14 = next(r for r in rows if r["torch"] == "2.14.1" and r["python"] == "cp312"
                and r["arch"] == "x86_64")
    assert at14["sglang-kernel"] == "sglang-kernel==0.4.10"
    # the project is imported as nixl_ep: the meta, not the backend it loads its build from
    assert at14["nixl"] == "nixl==1.5.1"
    at13 = next(r for r in rows if r["torch"] == "2.13.0" and r["python"] == "cp312"
                and r["arch"] == "x86_64")
    assert at13["sglang-kernel"].startswith("none: torch requirement: torch 2.13.0 does not "
                                            "satisfy sglang-kernel 0.4.10's"), at13


def test_json_holds_every_extension_column(m: M.Matrix) -> None:
    doc = json.loads(M.to_json(m))
    assert doc["projects"] == PROJECTS
    ext = doc["extensions"]
    assert len(ext) == len(m.rows) * len(m.pythons) * len(m.arches) * len(PROJECTS)
    for e in ext:
        row = m.cell_row(e["sglang"], e["torch"])
        assert row is not None
        want = m.extension(row, e["project"], e["python"], e["arch"])
        assert want is not None and e == {"sglang": row.sglang, "torch": row.torch,
                                          "python": e["python"], "arch": e["arch"],
                                          **want.as_dict()}
    assert {"sglang": "0.5.23", "torch": "2.14.1", "python": "cp312", "arch": "x86_64",
            "project": "sglang-kernel", "requirement": "sglang-kernel==0.4.10",
            "reason": "", "unknown": False} in ext


def test_html_embeds_and_draws_the_extension_columns(m: M.Matrix) -> None:
    page = M.to_html(m)
    data = json.loads(re.search(r'<script type="application/json" id="matrix-data">(.*?)'
                                r"</script>", page, re.S).group(1))  # type: ignore[union-attr]
    assert data["projects"] == PROJECTS
    assert len(data["ext"]) == len(m.rows) * len(m.pythons) * len(m.arches) * len(PROJECTS)
    strings = data["strings"]
    fits = {strings[x[4]] for x in data["ext"] if x[4] >= 0}
    assert {"sglang-kernel==0.4.10", "nixl==1.5.1"} <= fits
    assert "D.projects.forEach" in page and "extCell(" in page


def test_the_columns_say_what_which_says(m: M.Matrix) -> None:
    """:func:`native.newest_fit` (what the columns ask, stopping at the first release
    that fits) recommends what the whole ``which`` answer does, or gives its reason."""
    g = CompatGraph(_stack_kb())
    for row in m.rows:
        for project in PROJECTS:
            for a in m.arches:
                for p in m.pythons:
                    res = native.which_native(g, project, torch=row.torch, sglang=row.sglang,
                                              python=p, arch=a, as_imported=True)
                    best = res.recommended()
                    got = native.newest_fit(g, project, torch=row.torch, sglang=row.sglang,
                                            python=p, arch=a)
                    if best is not None:
                        assert got == (best["requirement"], "", False)
                    elif res.unknown:
                        assert got == (None, res.unknown[0].reason, True)
                    else:
                        assert got == (None, res.excluded[0].reason, False)


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed")
def test_the_page_draws_the_extension_columns_in_a_browser(m: M.Matrix, tmp_path: Path) -> None:
    page = tmp_path / "matrix.html"
    page.write_text(M.to_html(m), encoding="utf-8")
    dom = _chromium(tmp_path, "--dump-dom", page.as_uri())
    heads = re.findall(r'<th class="x" scope="col"><span class="d">extension</span>([^<]*)</th>',
                       dom)
    assert heads == PROJECTS
    cells = re.findall(r'<td class="ext (s\d)"[^>]*data-project="([^"]+)"[^>]*>([^<]*)</td>|'
                       r'<td class="ext (s\d)"[^>]*>([^<]*)</td>', dom)
    texts = [c[2] or c[4] for c in cells]
    # two rows (torch 2.13.0 and 2.14.1) on cp312 / x86_64, one cell per project each
    assert len(texts) == len(m.rows) * len(PROJECTS)
    assert "✔ sglang-kernel==0.4.10" in texts
    assert any(t.startswith("✘ torch requirement") for t in texts), texts
