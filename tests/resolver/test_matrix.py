"""The compatibility matrix: cell states on a small KB slice, the four renderers, the CLI."""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from moonpin.kb import store
from moonpin.kb.errors import UsageError
from moonpin.resolver.graph import CompatGraph
from moonpin.resolver.matrix import table as M
from tests.resolver.kbslice import build_kb


def _explain(*a: object, **kw: object) -> dict:
    """``query.explain`` as its ``--json`` dict (a dict today, or a typed answer's
    ``to_json()``: the same shape)."""
    from moonpin.resolver import query

    res = query.explain(*a, **kw)  # type: ignore[arg-type]
    return res if isinstance(res, dict) else res.to_json()


ROOT = Path(__file__).resolve().parents[2]
ALL_NAMES = ["MooncakeBackendOptions", "get_active_ranks", "get_peer_state", "join_group",
             "recover_ranks", "register_backend", "set_device_filter", "set_host_ip",
             "set_transfer_engine"]
BACKENDS = ["mooncake", "mooncake-cpu"]
PG = {"mooncake.pg": ["mooncake.pg_{torch}"]}


def _pg(torch: str, cuda: int, names: list[str] = ALL_NAMES) -> dict[str, Any]:
    return {"module": "pg_" + torch.replace(".", "_"), "names": names, "backends": BACKENDS,
            "cuda": cuda}


SLICE: dict[str, Any] = {
    "sglang": [
        {"version": "0.5.18", "module": "mooncake.pg", "backends": BACKENDS,
         "names": ["MooncakeBackendOptions", "join_group", "set_transfer_engine"],
         "torch": ["torch==2.13.0"]},
        {"version": "0.5.17", "module": "mooncake.pg", "backends": BACKENDS,
         "names": ["MooncakeBackendOptions", "join_group"], "torch": ["torch==2.12.0"]},
        {"version": "0.5.0", "torch": ["torch==2.12.0"]},  # imports no PG module: no row
    ],
    "mooncake": [
        {"dist": "mooncake-transfer-engine", "version": "0.3.13", "wheels": [
            {"python": "cp312", "arch": "x86_64", "loaders": PG,
             "builds": [_pg("2.12.0", 12), _pg("2.13.0", 12)]}]},
        {"dist": "mooncake-transfer-engine", "version": "0.3.8", "wheels": [
            {"python": "cp311", "arch": "x86_64",
             "loaders": {"mooncake.ep": ["mooncake.ep_{torch}"]},
             "builds": [{"module": "ep_2_12_0", "cuda": 12}]}]},
        {"dist": "mooncake-transfer-engine-cuda13", "version": "0.3.12", "wheels": [
            {"python": "cp312", "arch": "x86_64", "loaders": PG,
             "builds": [_pg("2.13.0", 13, [n for n in ALL_NAMES
                                           if n != "set_transfer_engine"])]}]},
        {"dist": "mooncake-transfer-engine-cuda13", "version": "0.3.13", "wheels": [
            {"python": "cp312", "arch": "x86_64", "loaders": PG,
             "builds": [_pg("2.13.0", 13)]}]},
        {"dist": "mooncake-transfer-engine-cuda13", "version": "0.3.14", "wheels": [
            {"python": "cp312", "arch": "x86_64", "loaders": {"mooncake.pg": {
                "kind": "jit-compile", "toolchain": ["ninja", "nvcc (a CUDA toolkit)"],
                "source_names": ALL_NAMES, "source_backends": BACKENDS}}}]},
        {"dist": "mooncake-transfer-engine-npu", "version": "0.3.13", "wheels": [
            {"python": "cp312", "arch": "x86_64", "builds": []}]},
    ],
    "torch": [{"version": "2.12.0", "cuda": {"x86_64": 12}},
              {"version": "2.13.0", "cuda": {"x86_64": 13}}],
    "unread": [
        {"kind": "sglang", "name": "sglang", "version": "0.5.19", "reason": "HTTP 503"},
        {"kind": "mooncake", "name": "mooncake-transfer-engine", "version": "0.3.15",
         "reason": "truncated <zip> \"central directory\""},
    ],
}


@pytest.fixture(scope="module")
def m() -> M.Matrix:
    return M.build_matrix(CompatGraph(build_kb(SLICE)))


def cell(m: M.Matrix, sglang: str, dist: str, version: str, python: str = "cp312",
         arch: str = "x86_64") -> M.Cell:
    hits = [c for c in m.cells if (c.sglang, c.dist, c.mooncake, c.python, c.arch)
            == (sglang, dist, version, python, arch)]
    assert len(hits) == 1, hits
    return hits[0]


MTE, C13 = "mooncake-transfer-engine", "mooncake-transfer-engine-cuda13"


# ----------------------------------------------------------------------- shape


def test_rows_columns_and_scope(m: M.Matrix) -> None:
    assert [(r.sglang, r.torch) for r in m.rows] == [
        ("0.5.19", "?"), ("0.5.18", "2.13.0"), ("0.5.17", "2.12.0")]
    assert m.rows[0].unread == "HTTP 503"
    # default distributions; newest first within each; an unread release is a column
    assert [c.key for c in m.columns] == [
        f"{MTE}==0.3.15", f"{MTE}==0.3.13", f"{MTE}==0.3.8",
        f"{C13}==0.3.14", f"{C13}==0.3.13", f"{C13}==0.3.12"]
    assert m.pythons == ["cp311", "cp312"] and m.arches == ["x86_64"]
    assert len(m.cells) == len(m.rows) * len(m.columns) * 2
    assert m.scope["dists"] == [MTE, C13]


def test_filters() -> None:
    g = CompatGraph(build_kb(SLICE))
    f = M.build_matrix(g, dists=["Mooncake_Transfer_Engine_CUDA13"], python="3.12",
                       arch="x86_64", sglang=">=0.5.18", mooncake="<0.3.14")
    assert [(r.sglang) for r in f.rows] == ["0.5.19", "0.5.18"]
    assert [c.key for c in f.columns] == [f"{C13}==0.3.13", f"{C13}==0.3.12"]
    assert f.pythons == ["cp312"] and f.scope["python"] == "cp312"
    assert len(f.cells) == 4
    t = M.build_matrix(g, torch="2.13.0", sglang="0.5.17", dists=[C13])
    c = cell(t, "0.5.17", C13, "0.3.13")  # --torch overrides the release's own pin
    assert (c.torch, c.state, c.reason) == ("2.13.0", "incompatible",
                                            "sglang does not admit torch 2.13.0")


@pytest.mark.parametrize("kwargs, text", [
    ({"dists": ["no-such-dist"]}, "unknown mooncake distribution"),
    ({"sglang": "~~nope"}, "sglang specifier"),
    ({"mooncake": ">>1"}, "mooncake specifier"),
    ({"python": "2.7.x"}, "cannot read python"),
    ({"arch": "sparc"}, "unknown platform"),
    ({"torch": "two"}, "torch version"),
])
def test_bad_input(kwargs: dict[str, Any], text: str) -> None:
    with pytest.raises(UsageError, match=text):
        M.build_matrix(CompatGraph(build_kb(SLICE)), **kwargs)


# ----------------------------------------------------------------------- cell states


def test_compatible(m: M.Matrix) -> None:
    c = cell(m, "0.5.18", C13, "0.3.13")
    assert (c.state, c.reason, c.reasons) == ("compatible", "", ())
    assert c.wheel and c.wheel.endswith(".whl")
    assert {ch.name for ch in c.checks} >= {"torch requirement", "module present",
                                             "build for torch", "names", "CUDA major"}
    assert cell(m, "0.5.17", MTE, "0.3.13").state == "compatible"


def test_compatible_note_jit_compile(m: M.Matrix) -> None:
    c = cell(m, "0.5.18", C13, "0.3.14")
    assert c.state == "compatible-note"
    assert any("first import" in n and "nvcc" in n and "ninja" in n for n in c.notes)


def test_incompatible_reasons(m: M.Matrix) -> None:
    cases = {
        ("0.5.18", MTE, "0.3.13", "cp312"): "CUDA major: build 12, torch 13",
        ("0.5.17", C13, "0.3.13", "cp312"): "no build for torch 2.12.0",
        ("0.5.18", C13, "0.3.12", "cp312"): "missing name set_transfer_engine",
        ("0.5.18", MTE, "0.3.8", "cp311"): "wrong module: no mooncake.pg",
        ("0.5.18", MTE, "0.3.13", "cp311"): "no wheel for cp311/x86_64",
    }
    for (s, d, v, p), reason in cases.items():
        c = cell(m, s, d, v, p)
        assert (c.state, c.reason) == ("incompatible", reason), c
        assert c.reasons and all(": " in r for r in c.reasons)
        failed = [ch for ch in c.checks if ch.ok is False]
        assert failed and failed[0].detail in c.reasons[0]


def test_evidence_kept(m: M.Matrix) -> None:
    c = cell(m, "0.5.17", C13, "0.3.13")
    build = next(ch for ch in c.checks if ch.name == "build for torch")
    assert build.ok is False
    assert re.search(r"\.whl: mooncake/pg\.py:\d+$", build.evidence[0])
    names = next(ch for ch in cell(m, "0.5.18", C13, "0.3.12").checks if ch.name == "names")
    assert any(re.search(r"\.py:\d+$", e) for e in names.evidence)


def test_unknown_unread_release_and_column(m: M.Matrix) -> None:
    row = [c for c in m.cells if c.sglang == "0.5.19"]
    assert row and {c.state for c in row} == {"unknown"}
    assert "HTTP 503" in row[0].reasons[0]
    col = [c for c in m.cells if c.mooncake == "0.3.15" and c.sglang != "0.5.19"]
    assert col and {c.state for c in col} == {"unknown"}
    assert "central directory" in col[0].reasons[0]


def test_unknown_undecided_check() -> None:
    sl = json.loads(json.dumps(SLICE))
    sl["mooncake"][3]["wheels"][0]["builds"][0].pop("cuda")  # CUDA runtime not read
    c = cell(M.build_matrix(CompatGraph(build_kb(sl))), "0.5.18", C13, "0.3.13")
    assert (c.state, c.reason) == ("unknown", "CUDA major undecided")
    assert c.reasons == ("CUDA major: the build's CUDA runtime is not known (its dynamic "
                         "section was not read)",)


def test_agrees_with_explain(m: M.Matrix) -> None:
    g = CompatGraph(build_kb(SLICE))
    for c in m.cells:
        if c.sglang == "0.5.19" or c.mooncake == "0.3.15":
            continue
        res = _explain(g, c.sglang, f"{c.dist}=={c.mooncake}", python=c.python,
                            arch=c.arch)
        want = res["verdict"]
        assert (c.state if c.state != "compatible-note" else "compatible") == want, c


# ----------------------------------------------------------------------- renderers


def test_csv_one_row_per_cell(m: M.Matrix) -> None:
    text = M.to_csv(m)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert text.splitlines()[0].split(",")[:8] == [
        "sglang", "torch", "dist", "mooncake", "python", "arch", "state", "reason"]
    assert len(rows) == len(m.cells)
    assert {r["state"] for r in rows} <= set(M.STATES)
    assert {r["state"] for r in rows} == set(M.STATES)
    keys = {(r["sglang"], r["dist"], r["mooncake"], r["python"], r["arch"]) for r in rows}
    assert len(keys) == len(rows)


def test_json_round_trip(m: M.Matrix) -> None:
    doc = json.loads(M.to_json(m))
    assert len(doc["cells"]) == len(m.cells)
    assert doc["cells"] == [c.as_dict() for c in m.cells]
    first = next(c for c in doc["cells"] if c["state"] == "incompatible")
    assert first["checks"] and set(first["checks"][0]) == {"name", "ok", "detail", "evidence"}
    assert doc["scope"]["dists"] == [MTE, C13]
    assert doc["kb"]["index_url"] == "https://index.invalid/"
    assert sum(doc["counts"].values()) == len(m.cells)


def test_markdown_deterministic(m: M.Matrix) -> None:
    a = M.to_markdown(m)
    b = M.to_markdown(M.build_matrix(CompatGraph(build_kb(SLICE))))
    assert a == b
    assert "cp312 / x86_64" in a
    lines = [ln for ln in a.splitlines() if ln.startswith("| 0.5.18")]
    assert len(lines) == 1
    assert "✅" in lines[0] and "⚠️ note" in lines[0]
    assert "❌ CUDA major: build 12, torch 13" in lines[0]
    assert "❔ unknown" in a
    assert len(M.to_markdown(m, newest=1).splitlines()) < len(a.splitlines())


def _hostile(m: M.Matrix) -> M.Matrix:
    bad = '<script>alert("x")</script> & \'q\''
    first = m.cells[0]

    def judge(row: M.Row, col: M.Column, a: str, p: str) -> M.Cell:
        c = m.cell(row, col, p, a)
        assert c is not None
        return c._replace(reason=bad, reasons=(bad,), notes=(bad,)) \
            if c == first else c

    kb = dict(m.kb, index_url='https://x.invalid/"><img src=x onerror=alert(1)>')
    return M.Matrix(m.rows, m.columns, m.pythons, m.arches, judge, m.scope, kb)


def test_html_escaped_and_self_contained(m: M.Matrix) -> None:
    page = M.to_html(_hostile(m))
    assert "<script>alert" not in page and "<img" not in page
    assert page.count("<script") == 2 and page.count("</script>") == 2
    assert "&lt;img src=x" in page  # the footer's copy, escaped
    # no resource is loaded from anywhere: no tag with src/href, no url(), no @import
    assert not re.search(r"""<[^>]*\b(src|href)\s*=""", page, re.I)
    assert "url(" not in page and "@import" not in page
    assert "http://" not in M.to_html(m) or "http://" in m.kb["index_url"]


def test_html_footer_and_scope(tmp_path: Path) -> None:
    kb_file = tmp_path / "kb.json"
    store.save(build_kb(SLICE), kb_file)
    mm = M.build_matrix(CompatGraph(store.load(kb_file)), kb_path=kb_file)
    page = M.to_html(mm)
    footer = page[page.index('<footer id="footer">'):]
    import hashlib

    assert str(kb_file) in footer
    assert hashlib.sha256(kb_file.read_bytes()).hexdigest() in footer
    assert "2026-01-01T00:00:00+00:00" in footer and "https://index.invalid/" in footer
    assert "Scope: distributions" in page
    for word in ("f-dist", "f-python", "f-arch", "f-hide"):
        assert f'id="{word}"' in page


# ----------------------------------------------------------------------- docs


def test_docs_matrix_is_current() -> None:
    """Fails when docs/matrix.md no longer matches what the shipped KB produces."""
    kb_path = ROOT / "data" / "kb.json"
    got = M.render_docs(M.build_matrix(CompatGraph(store.load(kb_path)), kb_path=kb_path))
    doc = (ROOT / "docs" / "matrix.md").read_text(encoding="utf-8")
    assert doc == got, f"docs/matrix.md is stale: run `{M.DOCS_COMMAND}`"
    assert M.DOCS_COMMAND in doc.splitlines()[2]


def test_regenerate_docs(tmp_path: Path) -> None:
    kb_file = tmp_path / "kb.json"
    store.save(build_kb(SLICE), kb_file)
    out = tmp_path / "docs" / "matrix.md"
    M.regenerate_docs(kb_file, out)
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Compatibility matrix\n") and "| 0.5.18 |" in text
    # #15: a KB other than the shipped one is named as the one used
    assert "shipped" not in text.splitlines()[2].replace("not the shipped one", "")
    assert f"Generated from the knowledge base `{kb_file}`, not the shipped one" in text
    assert f"moonpin --kb {kb_file} matrix --format md" in text


def test_md_names_the_kb_given_with_kb(kb_file: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """#15: ``matrix --format md --kb X`` named the shipped data/kb.json."""
    assert M.cmd_matrix(_args(kb_file, format="md")) == 0
    out = capsys.readouterr().out
    assert "Generated from the shipped knowledge base" not in out
    assert f"`{kb_file}`" in out.splitlines()[2]
    shipped = ROOT / "data" / "kb.json"
    m = M.build_matrix(CompatGraph(store.load(shipped)), kb_path=shipped, sglang=">=0.5.23")
    assert "Generated from the shipped knowledge base (`data/kb.json`)" in M.render_docs(m)


def test_readme_unchanged_is_not_rewritten(kb_file: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """#15: ``matrix --readme`` said "updated" (and rewrote the file) when nothing changed."""
    import os

    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{M.README_BEGIN}\nold\n{M.README_END}\ntail\n",
                      encoding="utf-8")
    assert M.cmd_matrix(_args(kb_file, readme=str(readme))) == 0
    assert f"the matrix table in {readme}: updated" in capsys.readouterr().err
    first = readme.read_text(encoding="utf-8")
    assert "| 0.5.18 |" in first and first.endswith(f"{M.README_END}\ntail\n")
    os.utime(readme, ns=(1_000_000_000, 1_000_000_000))
    inode = readme.stat().st_ino
    assert M.cmd_matrix(_args(kb_file, readme=str(readme))) == 0
    err = capsys.readouterr().err
    assert "left unchanged (current)" in err and "updated" not in err
    st = readme.stat()
    assert (st.st_ino, st.st_mtime_ns) == (inode, 1_000_000_000)  # not written again
    assert readme.read_text(encoding="utf-8") == first


# ----------------------------------------------------------------------- the command


def _args(kb: Path, **kw: Any) -> argparse.Namespace:
    base: dict[str, Any] = {"kb": str(kb), "format": None, "output": None, "dist": None,
                            "python": None, "arch": None, "sglang": None, "mooncake": None,
                            "torch": None, "json": False}
    base.update(kw)
    return argparse.Namespace(**base)


@pytest.fixture
def kb_file(tmp_path: Path) -> Path:
    p = tmp_path / "kb.json"
    store.save(build_kb(SLICE), p)
    return p


@pytest.mark.parametrize("fmt, check", [
    ("csv", lambda t: t.startswith("sglang,torch,dist,mooncake,python,arch,state,reason")),
    ("json", lambda t: "cells" in json.loads(t)),
    ("md", lambda t: t.startswith("# Compatibility matrix\n\nGenerated from the knowledge base")),
    ("html", lambda t: t.startswith("<!DOCTYPE html>")),
])
def test_cmd_matrix_formats(kb_file: Path, tmp_path: Path, fmt: str, check: Any) -> None:
    out = tmp_path / f"out.{fmt}"
    assert M.cmd_matrix(_args(kb_file, output=str(out))) == 0  # format from the suffix
    assert check(out.read_text(encoding="utf-8"))
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_cmd_matrix_stdout_and_exit_codes(kb_file: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert M.cmd_matrix(_args(kb_file, json=True, dist=[C13])) == 0
    assert json.loads(capsys.readouterr().out)["scope"]["dists"] == [C13]
    # nothing compatible: ep-only wheel against pg-importing releases
    assert M.cmd_matrix(_args(kb_file, format="csv", mooncake="==0.3.8")) == 1
    out = capsys.readouterr().out
    assert "compatible," not in out.replace("incompatible,", "")
    md = _args(kb_file, sglang=">=0.5.18")
    assert M.cmd_matrix(md) == 0
    assert "# Compatibility matrix" not in capsys.readouterr().out  # filtered: not the docs page
    with pytest.raises(UsageError):
        M.cmd_matrix(_args(kb_file, dist=["nope"]))
    with pytest.raises(UsageError):
        M.cmd_matrix(_args(kb_file, sglang="=>bad"))


def test_add_parser(kb_file: Path, tmp_path: Path) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--kb")
    sub = p.add_subparsers(dest="command", required=True)
    M.add_parser(sub)
    out = tmp_path / "m.html"
    args = p.parse_args(["matrix", "--kb", str(kb_file), "--dist", MTE, "--dist", C13,
                         "--python", "3.12", "--arch", "x86_64", "-o", str(out)])
    assert args.func is M.cmd_matrix and args.dist == [MTE, C13]
    assert args.func(args) == 0 and out.read_text().startswith("<!DOCTYPE html>")


def test_readme_matrix_is_current() -> None:
    """Fails when the docs' table (once the README's) no longer matches what the shipped KB
    produces."""
    kb_path = ROOT / "data" / "kb.json"
    readme = (ROOT / "docs" / "guides" / "which.md").read_text(encoding="utf-8")
    m = M.build_matrix(CompatGraph(store.load(kb_path)), kb_path=kb_path)
    assert M.with_readme_table(readme, m) == readme, (
        f"the README's matrix is stale: run `{M.README_COMMAND}`")


def test_readme_without_markers_is_bad_input() -> None:
    with pytest.raises(UsageError, match="no matrix markers"):
        M.with_readme_table("# nothing here\n", M.Matrix.__new__(M.Matrix))


def test_markdown_judges_only_the_cells_it_shows() -> None:
    """The Markdown table is part of the matrix: it judges that part (a cell asked for
    twice is judged once); the whole matrix's cells are the same judged either way."""
    judged: list[tuple[str, ...]] = []
    shipped = CompatGraph.from_path(ROOT / "data" / "kb.json")
    m = M.build_matrix(shipped)
    real = m._judge

    def counting(row: M.Row, col: M.Column, a: str, p: str) -> M.Cell:
        judged.append((row.sglang, row.torch, col.key, a, p))
        return real(row, col, a, p)

    m._judge = counting
    text = M.to_markdown(m)
    total = len(m.rows) * len(m.columns) * len(m.pythons) * len(m.arches)
    shown = text.count("\n| ") - 1  # table lines but the header
    assert shown == 8 and 0 < len(judged) <= 8 * 5 * len(m.scope["dists"]) < total / 10
    assert len(set(judged)) == len(judged)
    assert m.any_compatible and m.cells == M.build_matrix(shipped).cells
    assert len(judged) == total
