"""The compatibility matrix: SGLang releases x mooncake releases, one verdict per cell.

Rows are the SGLang releases that import a mooncake process-group module (newest
first), one row per torch the release admits (almost always exactly one: the pin in
its ``Requires-Dist``); a release the last scrape could not read is a row of
``unknown`` cells. Columns are the releases of the chosen mooncake distributions
(newest first within each distribution). Every cell is decided by
:func:`resolver.query.evaluate` -- the same checks ``moonpin explain`` prints -- at
the row's torch, for one python and one platform.

Defaults (a useful page without flags):

* distributions: ``mooncake-transfer-engine`` and ``mooncake-transfer-engine-cuda13``,
  the two CUDA builds an SGLang deployment on NVIDIA GPUs chooses between (the
  plain one links CUDA 12 up to 0.3.x and CUDA 13 since torch 2.11; ``-cuda13`` is
  the CUDA 13 line). The other six (efa, musa, npu, rocm, non-cuda) serve other
  hardware; ``--dist`` picks them.
* scope: every python and platform the chosen wheels cover. The CSV/JSON hold
  every cell; the HTML page embeds all of them and opens on ``cp312`` / ``x86_64``
  (the most common serving image) with filters to switch; the Markdown table is the
  ``cp312`` / ``x86_64`` slice (one scope reads better than a stack of symbols).
  Every output states its scope.

Cell states: ``compatible``; ``compatible-note`` (compatible, with a note such as
a loader that compiles at first import and needs nvcc + ninja); ``incompatible``
with a short reason; ``unknown`` (not read in the last scrape, or a check the KB
cannot decide). Each cell keeps every check with its evidence.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import html
import io
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from kb.errors import UsageError
from kb.facts import Sglang as SglangRelease
from resolver.graph import CompatGraph
from resolver.inputs import normalize_arch, normalize_python
from resolver.query import Check, Evaluation, TorchChoice, evaluate, parse_spec, resolve_torch

__all__ = [
    "CSV_COLUMNS",
    "DEFAULT_DISTS",
    "DOCS_COMMAND",
    "STATES",
    "Cell",
    "Column",
    "Matrix",
    "Row",
    "add_parser",
    "build_matrix",
    "cmd_matrix",
    "regenerate_docs",
    "render_docs",
    "to_csv",
    "to_html",
    "to_json",
    "to_markdown",
    "with_readme_table",
]

DEFAULT_DISTS = ("mooncake-transfer-engine", "mooncake-transfer-engine-cuda13")
#: The scope the Markdown table shows and the HTML page opens on.
PREFERRED_PYTHON = "cp312"
PREFERRED_ARCH = "x86_64"
STATES = ("compatible", "compatible-note", "incompatible", "unknown")
CSV_COLUMNS = ["sglang", "torch", "dist", "mooncake", "python", "arch", "state", "reason",
               "wheel", "notes"]
DOCS_COMMAND = "moonpin matrix --format md -o docs/matrix.md"
SYMBOL = {"compatible": "✅", "compatible-note": "⚠️", "incompatible": "❌", "unknown": "❔"}


@dataclass(frozen=True)
class Row:
    sglang: str
    torch: str  # the torch the row is evaluated at ("?" when the release was not read)
    module: str | None
    torch_line: str = ""  # the Requires-Dist line that admits it
    cuda: tuple[tuple[str, int | None], ...] = ()  # (arch, CUDA major of that torch)
    unread: str | None = None

    def cuda_for(self, arch: str) -> int | None:
        return dict(self.cuda).get(arch)

    def as_dict(self) -> dict[str, Any]:
        return {"sglang": self.sglang, "torch": self.torch, "module": self.module,
                "torch_line": self.torch_line, "cuda": dict(self.cuda),
                "unread": self.unread}


@dataclass(frozen=True)
class Column:
    dist: str
    mooncake: str
    unread: str | None = None

    @property
    def key(self) -> str:
        return f"{self.dist}=={self.mooncake}"

    def as_dict(self) -> dict[str, Any]:
        return {"dist": self.dist, "mooncake": self.mooncake, "unread": self.unread}


@dataclass(frozen=True)
class Cell:
    sglang: str
    torch: str
    dist: str
    mooncake: str
    python: str
    arch: str
    state: str
    reason: str  # short: "no build for torch 2.14.1"; "" when compatible
    reasons: tuple[str, ...] = ()  # every failing (or undecided) check, in full
    notes: tuple[str, ...] = ()
    checks: tuple[Check, ...] = ()
    wheel: str | None = None

    def row(self) -> dict[str, str]:
        return {"sglang": self.sglang, "torch": self.torch, "dist": self.dist,
                "mooncake": self.mooncake, "python": self.python, "arch": self.arch,
                "state": self.state, "reason": self.reason, "wheel": self.wheel or "",
                "notes": " | ".join(self.notes)}

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = dict(self.row())
        d["wheel"] = self.wheel
        d["notes"] = list(self.notes)
        d["reasons"] = list(self.reasons)
        d["checks"] = [c.as_dict() for c in self.checks]
        return d


@dataclass
class Matrix:
    rows: list[Row]
    columns: list[Column]
    pythons: list[str]
    arches: list[str]
    cells: list[Cell]
    scope: dict[str, Any]
    kb: dict[str, Any]
    _index: dict[tuple[str, str, str, str, str, str], Cell] = field(default_factory=dict,
                                                                    repr=False)

    def cell(self, row: Row, col: Column, python: str, arch: str) -> Cell | None:
        if not self._index:
            self._index = {(c.sglang, c.torch, c.dist, c.mooncake, c.python, c.arch): c
                           for c in self.cells}
        return self._index.get((row.sglang, row.torch, col.dist, col.mooncake, python, arch))

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATES, 0)
        for c in self.cells:
            out[c.state] += 1
        return out

    @property
    def any_compatible(self) -> bool:
        return any(c.state in ("compatible", "compatible-note") for c in self.cells)


# ----------------------------------------------------------------------- building


def _contains(spec: SpecifierSet | None, version: str) -> bool:
    if spec is None:
        return True
    try:
        return spec.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


def _vkey(text: str) -> tuple[int, Version | str]:
    try:
        return (1, Version(text))
    except InvalidVersion:
        return (0, text)


def _short_reason(ev: Evaluation, module: str | None) -> str:
    bad = next((c for c in ev.checks if c.ok is False), None)
    if bad is None:
        und = next((c for c in ev.checks if c.ok is None), None)
        return f"{und.name} undecided" if und else ""
    d = bad.detail
    if bad.name == "wheel for python/platform":
        return f"no wheel for {ev.python}/{ev.arch}"
    if bad.name == "module present":
        return f"wrong module: no {module}" if module else "wrong module"
    if bad.name == "build for torch":
        return f"no build for torch {ev.torch}"
    if bad.name == "names":
        m = re.search(r"imports (.+?) from ", d)
        names = m.group(1) if m else "?"
        return f"missing name{'s' if ',' in names else ''} {names}"
    if bad.name == "backends":
        m = re.search(r"does not register (.+?) \(", d)
        return f"no backend {m.group(1) if m else '?'}"
    if bad.name == "CUDA major":
        m = re.search(r"links CUDA ([\d/]+), torch \S+ is CUDA (\d+)", d)
        if m:
            return f"CUDA major: build {m.group(1)}, torch {m.group(2)}"
        m = re.search(r"libcudart\.so\.(\d+); torch \S+ is a CPU build", d)
        if m:
            return f"CUDA major: build {m.group(1)}, torch CPU"
        return "CUDA major mismatch"
    if bad.name == "torch requirement":
        return f"sglang does not admit torch {ev.torch}"
    return f"{bad.name}: {d}"


def _cell_from(ev: Evaluation, s: SglangRelease, row_torch: str) -> Cell:
    verdict = ev.verdict
    state = verdict
    if verdict == "compatible" and ev.notes:
        state = "compatible-note"
    return Cell(s.version, row_torch, ev.dist, ev.mooncake, ev.python, ev.arch, state,
                _short_reason(ev, s.pg.module), tuple(ev.reasons), tuple(ev.notes),
                tuple(ev.checks), ev.wheel)


def _kb_info(g: CompatGraph, kb_path: Path | None) -> dict[str, Any]:
    info: dict[str, Any] = {
        "path": str(kb_path) if kb_path else None,
        "sha256": None,
        "scraped_at": g.kb.scrape.scraped_at.isoformat(),
        "index_url": g.kb.scrape.index_url,  # None: the package index (pip's default index)
        "moonpin_version": g.kb.scrape.moonpin_version,
    }
    if kb_path is not None:
        with contextlib.suppress(OSError):
            info["sha256"] = hashlib.sha256(kb_path.read_bytes()).hexdigest()
    return info


def build_matrix(g: CompatGraph, *, dists: Sequence[str] | None = None,
                 python: str | None = None, arch: str | None = None,
                 sglang: str | None = None, mooncake: str | None = None,
                 torch: str | None = None, kb_path: Path | None = None) -> Matrix:
    """The matrix for the chosen distributions and scope (see the module docstring).

    ``sglang`` / ``mooncake`` are PEP 440 specifiers (a bare version means ``==``);
    ``torch`` evaluates every row at that torch instead of the one its release
    requires; ``python`` / ``arch`` narrow the scope to one python / platform;
    ``kb_path`` names the file for the footer (its sha256 is computed).
    """
    python, arch = normalize_python(python), normalize_arch(arch)
    s_spec, m_spec = parse_spec(sglang, "sglang"), parse_spec(mooncake, "mooncake")
    known = g.dists()
    unread_mc = {(str(canonicalize_name(u.name)), u.version): u.reason
                 for u in g.kb.unread if u.kind == "mooncake"}
    if dists:
        chosen = []
        for d in dists:
            c = str(canonicalize_name(d))
            if c not in known and c not in {k for k, _ in unread_mc}:
                raise UsageError(f"unknown mooncake distribution {d!r}",
                                 hint="known: " + ", ".join(known))
            if c not in chosen:
                chosen.append(c)
    else:
        chosen = [d for d in DEFAULT_DISTS if d in known] or known
    if torch is not None:
        try:
            Version(torch)
        except InvalidVersion as e:
            raise UsageError(f"torch version {torch!r} is not PEP 440",
                             hint="use e.g. --torch 2.13.0 or 2.13.0+cu130") from e

    # columns: per distribution (in the order chosen), newest release first
    columns: list[Column] = []
    for d in chosen:
        have: dict[str, Column] = {}
        for (dd, _v), r in g.mooncake.items():
            if dd == d and _contains(m_spec, r.version):
                have[r.version] = Column(d, r.version, unread_mc.get((d, r.version)))
        for (dd, ver), reason in unread_mc.items():
            if dd == d and ver not in have and _contains(m_spec, ver):
                if g.find_mooncake(d, ver) is None:
                    have[ver] = Column(d, ver, reason)
        columns += sorted(have.values(), key=lambda c: _vkey(c.mooncake), reverse=True)

    pys: set[str] = set()
    ars: set[str] = set()
    for col in columns:
        for wv in g.wheels(col.dist, col.mooncake):
            pys |= wv.pythons
            ars |= wv.arches
    pythons = [python] if python else sorted(pys, key=lambda p: int(p[2:] or 0)) \
        or [PREFERRED_PYTHON]
    arches = [arch] if arch else sorted(ars) or [PREFERRED_ARCH]

    torch_cache: dict[tuple[str, str], TorchChoice] = {}

    def tchoice(t: str, a: str) -> TorchChoice:
        if (t, a) not in torch_cache:
            torch_cache[(t, a)] = resolve_torch(g, t, a)
        return torch_cache[(t, a)]

    rows: list[Row] = []
    row_rel: dict[tuple[str, str], SglangRelease] = {}
    for sv in sorted(g.sglang, reverse=True):
        s = g.sglang[sv]
        if s.pg.module is None or not _contains(s_spec, s.version):
            continue
        admitted = [(torch, "--torch")] if torch else g.torch_for(s)
        if not admitted:
            admitted = [("?", "no torch release on the index satisfies "
                         + ", ".join(s.torch_requirements))]
        for t, line in reversed(admitted):
            cuda = tuple((a, tchoice(t, a).cuda) for a in arches) if t != "?" else ()
            rows.append(Row(s.version, t, s.pg.module, line, cuda))
            row_rel[(s.version, t)] = s
    for u in g.kb.unread:
        if u.kind == "sglang" and g.find_sglang(u.version) is None \
                and _contains(s_spec, u.version):
            rows.append(Row(u.version, torch or "?", None, "", (), u.reason))
    rows.sort(key=lambda r: _vkey(r.sglang), reverse=True)

    cells: list[Cell] = []
    for row in rows:
        s_rel = row_rel.get((row.sglang, row.torch))
        for col in columns:
            wheels = g.wheels(col.dist, col.mooncake)
            for a in arches:
                for p in pythons:
                    base = (row.sglang, row.torch, col.dist, col.mooncake, p, a)
                    if row.unread is not None or s_rel is None:
                        why = (f"sglang {row.sglang} was not read in the last scrape: "
                               f"{row.unread}" if row.unread is not None else
                               f"sglang {row.sglang}: {row.torch_line}")
                        cells.append(Cell(*base, "unknown", "not read" if row.unread
                                          else "no torch", (why,)))
                        continue
                    w = next((x for x in wheels if p in x.pythons and a in x.arches), None)
                    if col.unread is not None and (w is None or not wheels):
                        why = (f"{col.dist} {col.mooncake} was not (fully) read in the last "
                               f"scrape: {col.unread}")
                        cells.append(Cell(*base, "unknown", "not read", (why,)))
                        continue
                    ev = evaluate(g, s_rel, tchoice(row.torch, a), w, col.dist, col.mooncake,
                                  p, a)
                    cells.append(_cell_from(ev, s_rel, row.torch))
    scope = {
        "dists": chosen,
        "python": python or "all",
        "arch": arch or "all",
        "pythons": pythons,
        "arches": arches,
        "sglang": sglang or "all",
        "mooncake": mooncake or "all",
        "torch": torch or "each release's own",
    }
    return Matrix(rows, columns, pythons, arches, cells, scope, _kb_info(g, kb_path))


# ----------------------------------------------------------------------- text renderers


def to_csv(m: Matrix) -> str:
    """One row per cell (every python and platform in the matrix)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for c in m.cells:
        w.writerow(c.row())
    return buf.getvalue()


def to_json(m: Matrix) -> str:
    doc = {
        "scope": m.scope,
        "kb": m.kb,
        "counts": m.counts(),
        "rows": [r.as_dict() for r in m.rows],
        "columns": [c.as_dict() for c in m.columns],
        "cells": [c.as_dict() for c in m.cells],
    }
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n"


def _short_dist(dist: str) -> str:
    rest = dist.removeprefix("mooncake-transfer-engine")
    return "mte" + rest if rest != dist else dist


def _md_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")


def _scope_pick(m: Matrix, python: str | None, arch: str | None) -> tuple[str, str]:
    p = python or (PREFERRED_PYTHON if PREFERRED_PYTHON in m.pythons else m.pythons[0])
    a = arch or (PREFERRED_ARCH if PREFERRED_ARCH in m.arches else m.arches[0])
    return p, a


def _md_cell(c: Cell | None) -> str:
    if c is None:
        return ""
    if c.state == "compatible":
        return "✅"
    if c.state == "compatible-note":
        return "⚠️ note"
    if c.state == "unknown":
        return "❔ unknown"
    return "❌ " + _md_escape(c.reason)


def to_markdown(m: Matrix, *, newest: int = 8, per_dist: int = 5, python: str | None = None,
                arch: str | None = None) -> str:
    """The newest ``newest`` SGLang releases against the newest ``per_dist`` releases of
    each distribution, for one python / platform (default cp312 / x86_64). Deterministic:
    it depends on the KB's content only (not on its path, nor on the time)."""
    p, a = _scope_pick(m, python, arch)
    rows = m.rows[:newest]
    cols: list[Column] = []
    for d in m.scope["dists"]:
        cols += [c for c in m.columns if c.dist == d][:per_dist]
    out = [
        f"Compatibility of the newest {len(rows)} SGLang releases that import a mooncake "
        f"process-group module with the newest mooncake releases, on **{p} / {a}**, each "
        "SGLang release at the torch it pins.",
        "",
    ]
    if not rows or not cols:
        out.append("_No rows or columns in this scope._")
    else:
        head = ["SGLang", "torch"] + [f"{_short_dist(c.dist)} {c.mooncake}" for c in cols]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "|".join(["---"] * len(head)) + "|")
        for r in rows:
            cuda = r.cuda_for(a)
            torch = r.torch if r.torch == "?" else (
                f"{r.torch} (cu{cuda})" if cuda is not None else f"{r.torch} (cpu)")
            line = [r.sglang, torch] + [_md_cell(m.cell(r, c, p, a)) for c in cols]
            out.append("| " + " | ".join(line) + " |")
    short = sorted({d for d in m.scope["dists"]})
    out += [
        "",
        "✅ compatible · ⚠️ note: compatible with a caveat (e.g. compiles at first import, "
        "needs nvcc + ninja) · ❌ incompatible, with the first reason · ❔ unknown (not read "
        "in the last scrape, or not decidable from the KB). "
        + "; ".join(f"`{_short_dist(d)}` = `{d}`" for d in short if _short_dist(d) != d)
        + ". `moonpin explain sglang==V DIST==V --python 3.12 --arch x86_64` prints every "
        "check and its evidence.",
        "",
        f"Scope: python {p}, platform {a}, distributions {', '.join(m.scope['dists'])}, "
        f"sglang {m.scope['sglang']}, mooncake {m.scope['mooncake']}, torch "
        f"{m.scope['torch']}. Knowledge base scraped {m.kb['scraped_at']} from "
        f"{m.kb['index_url'] or 'the package index'}.",
    ]
    notes = sorted({n for r in rows for c in cols
                    if (cell := m.cell(r, c, p, a)) is not None
                    and cell.state == "compatible-note" for n in cell.notes})
    if notes:
        out += ["", "Notes:", ""] + [f"- {_md_escape(n)}" for n in notes]
    return "\n".join(out) + "\n"


def render_docs(m: Matrix) -> str:
    """``docs/matrix.md``: a one-line header saying how to regenerate it, then the table."""
    return (f"# Compatibility matrix\n\nGenerated from the shipped knowledge base "
            f"(`data/kb.json`); regenerate with `{DOCS_COMMAND}`.\n\n" + to_markdown(m))


README_COMMAND = "moonpin matrix --readme README.md"
README_BEGIN = f"<!-- matrix: begin; generated by `{README_COMMAND}` -->"
README_END = "<!-- matrix: end -->"


def with_readme_table(readme: str, m: Matrix) -> str:
    """``readme`` with the text between the matrix markers replaced by the compact table."""
    try:
        head, rest = readme.split(README_BEGIN, 1)
        _, tail = rest.split(README_END, 1)
    except ValueError:
        raise UsageError("the README has no matrix markers",
                         hint=f"add the lines {README_BEGIN!r} and {README_END!r}") from None
    return f"{head}{README_BEGIN}\n{to_markdown(m)}{README_END}{tail}"


def regenerate_docs(kb_path: Path, out_path: Path) -> None:
    """Write ``out_path`` (``docs/matrix.md``) from the KB at ``kb_path``."""
    m = build_matrix(CompatGraph.from_path(kb_path), kb_path=kb_path)
    _write_atomic(out_path, render_docs(m))


# ----------------------------------------------------------------------- HTML


class _Strings:
    """A string table: the page embeds each distinct string once."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.index: dict[str, int] = {}

    def __call__(self, s: str) -> int:
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.items)
            self.items.append(s)
        return i


_LABELS = (("no wheel", "no wheel"), ("wrong module", "module"),
           ("no build for torch", "no build"), ("missing names", "names"),
           ("missing name", "name"), ("no backend", "backend"), ("CUDA major", "CUDA"),
           ("sglang does not admit", "torch req"))


def _label(c: Cell) -> str:
    """The one or two words an incompatible cell shows in the page (hover: the reason)."""
    return next((w for k, w in _LABELS if c.reason.startswith(k)), "no")


def _page_data(m: Matrix) -> dict[str, Any]:
    st = _Strings()
    row_ix = {(r.sglang, r.torch): i for i, r in enumerate(m.rows)}
    col_ix = {(c.dist, c.mooncake): i for i, c in enumerate(m.columns)}
    py_ix = {p: i for i, p in enumerate(m.pythons)}
    ar_ix = {a: i for i, a in enumerate(m.arches)}
    checks: list[list[Any]] = []
    check_ix: dict[Check, int] = {}
    cells = []
    for c in m.cells:
        cix = []
        for ch in c.checks:
            if ch not in check_ix:
                check_ix[ch] = len(checks)
                checks.append([st(ch.name), ch.ok, st(ch.detail), [st(e) for e in ch.evidence]])
            cix.append(check_ix[ch])
        cells.append([row_ix[(c.sglang, c.torch)], col_ix[(c.dist, c.mooncake)],
                      py_ix[c.python], ar_ix[c.arch], STATES.index(c.state), st(c.reason),
                      cix, [st(n) for n in c.notes], [st(r) for r in c.reasons],
                      st(c.wheel) if c.wheel else -1, st(_label(c))])
    return {
        "rows": [[r.sglang, r.torch, r.module or "", dict(r.cuda), r.unread or ""]
                 for r in m.rows],
        "cols": [[c.dist, c.mooncake, c.unread or ""] for c in m.columns],
        "pythons": m.pythons,
        "arches": m.arches,
        "dists": m.scope["dists"],
        "start": list(_scope_pick(m, None, None)),
        "states": list(STATES),
        "strings": st.items,
        "checks": checks,
        "cells": cells,
    }


def _script_json(obj: Any) -> str:
    """JSON safe inside <script>: no '<', '>' or '&' survives as itself."""
    text = json.dumps(obj, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


_CSS = """
:root{--ok:#1a7f37;--okbg:#dafbe1;--note:#7a5b00;--notebg:#fff3c4;--bad:#a40e26;
--badbg:#ffe4e8;--unk:#4b4f56;--unkbg:#e8eaed;--line:#c9ced6}
*{box-sizing:border-box}
body{margin:0;font:13px/1.35 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#111;
background:#fff}
header{padding:10px 14px;border-bottom:1px solid var(--line)}
h1{font-size:18px;margin:0 0 4px}
.scope{color:#333;margin:2px 0 8px}
form{display:flex;flex-wrap:wrap;gap:14px;align-items:center}
label{white-space:nowrap}
select{font:inherit}
.legend{display:flex;gap:10px;flex-wrap:wrap;margin-top:8px}
.legend span{padding:2px 6px;border:1px solid var(--line);border-radius:3px}
#wrap{overflow:auto;max-height:calc(100vh - 190px);border-bottom:1px solid var(--line)}
table{border-collapse:separate;border-spacing:0}
th,td{border-right:1px solid var(--line);border-bottom:1px solid var(--line);padding:3px 5px;
white-space:nowrap}
thead th{position:sticky;top:0;z-index:2;background:#f3f4f6;font-weight:600;
vertical-align:bottom;text-align:center}
thead th .d{display:block;font-weight:400;color:#444;font-size:11px}
th.rh{position:sticky;left:0;z-index:1;background:#f3f4f6;text-align:left}
thead th.corner{left:0;z-index:3;text-align:left}
th.rh .t{display:block;font-weight:400;color:#444;font-size:11px}
td.cell{cursor:pointer;text-align:left;min-width:4.5em}
td.cell:focus{outline:2px solid #000;outline-offset:-2px}
.s0{background:var(--okbg);color:var(--ok)}
.s1{background:var(--notebg);color:var(--note)}
.s2{background:var(--badbg);color:var(--bad)}
.s3{background:var(--unkbg);color:var(--unk);font-style:italic}
td.dim{opacity:.35}
#panel{position:fixed;right:10px;bottom:10px;width:min(720px,96vw);max-height:60vh;overflow:auto;
background:#fff;border:2px solid #111;border-radius:6px;padding:10px 12px;z-index:10;
box-shadow:0 4px 18px rgba(0,0,0,.25)}
#panel[hidden]{display:none}
#panel h2{font-size:15px;margin:0 0 6px}
#panel ul{margin:4px 0;padding-left:18px}
#panel li{margin:3px 0}
#panel code{font-size:12px;background:#f3f4f6;padding:0 3px;word-break:break-all}
#panel .close{float:right;font:inherit;cursor:pointer}
footer{padding:8px 14px;color:#333;font-size:12px}
footer code{word-break:break-all}
"""

_JS = r"""
(function(){
"use strict";
var D=JSON.parse(document.getElementById("matrix-data").textContent);
var S=D.strings, SYM=["\u2714","\u26a0","\u2718","?"];
var WORD=["ok","note","","unknown"];
var OKM={"true":"\u2714 ok","false":"\u2718 FAIL","null":"? undecided"};
var byKey={};
D.cells.forEach(function(c,i){byKey[c[0]+"|"+c[1]+"|"+c[2]+"|"+c[3]]=i;});
var f={dist:document.getElementById("f-dist"),py:document.getElementById("f-python"),
 ar:document.getElementById("f-arch"),hide:document.getElementById("f-hide")};
function opt(sel,val,text){var o=document.createElement("option");o.value=val;
 o.textContent=text;sel.appendChild(o);}
opt(f.dist,"","all ("+D.dists.length+")");
D.dists.forEach(function(d){opt(f.dist,d,d);});
D.pythons.forEach(function(p,i){opt(f.py,i,p);});
D.arches.forEach(function(a,i){opt(f.ar,i,a);});
f.py.value=String(Math.max(0,D.pythons.indexOf(D.start[0])));
f.ar.value=String(Math.max(0,D.arches.indexOf(D.start[1])));
function shortText(c){
 return SYM[c[4]]+" "+(c[4]===2?S[c[10]]:WORD[c[4]]);}
function el(tag,cls,text){var e=document.createElement(tag);if(cls)e.className=cls;
 if(text!==undefined)e.textContent=text;return e;}
function render(){
 var dist=f.dist.value,pi=+f.py.value,ai=+f.ar.value,hide=f.hide.checked;
 var cols=[],rows=[];
 D.cols.forEach(function(c,i){if(!dist||c[0]===dist)cols.push(i);});
 function cellOf(r,c){var k=byKey[r+"|"+c+"|"+pi+"|"+ai];return k===undefined?null:D.cells[k];}
 function live(c){return c&&c[4]!==2;}
 if(hide){cols=cols.filter(function(ci){
  return D.rows.some(function(_,ri){return live(cellOf(ri,ci));});});}
 D.rows.forEach(function(_,ri){
  if(!hide||cols.some(function(ci){return live(cellOf(ri,ci));}))rows.push(ri);});
 var t=el("table");t.id="matrix";var th=el("thead"),tr=el("tr");
 var corner=el("th","corner rh","SGLang \u00b7 torch");tr.appendChild(corner);
 cols.forEach(function(ci){var c=D.cols[ci];var h=el("th");h.scope="col";
  h.appendChild(el("span","d",c[0].replace("mooncake-transfer-engine","mte")));
  h.appendChild(document.createTextNode(c[1]+(c[2]?" (unread)":"")));tr.appendChild(h);});
 th.appendChild(tr);t.appendChild(th);var tb=el("tbody");
 rows.forEach(function(ri){var r=D.rows[ri];var row=el("tr");row.dataset.sglang=r[0];
  var h=el("th","rh",r[0]);h.scope="row";var cu=r[3][D.arches[ai]];
  var tl=r[1]==="?"?"":(cu===null||cu===undefined?" cpu":" cu"+cu);
  h.appendChild(el("span","t","torch "+r[1]+tl+(r[2]?" \u00b7 "+r[2]:"")));
  row.appendChild(h);
  cols.forEach(function(ci){var c=cellOf(ri,ci),td;
   if(!c){td=el("td","cell","");row.appendChild(td);return;}
   var st=D.states[c[4]];
   td=el("td","cell s"+c[4]+(hide&&c[4]===2?" dim":""),shortText(c));
   td.dataset.state=st;td.dataset.col=D.cols[ci][0]+"=="+D.cols[ci][1];
   td.dataset.cell=byKey[ri+"|"+ci+"|"+pi+"|"+ai];td.tabIndex=0;
   td.title=st+(c[5]>=0&&S[c[5]]?": "+S[c[5]]:"")+" (click for every check)";
   row.appendChild(td);});
  tb.appendChild(row);});
 t.appendChild(tb);var w=document.getElementById("wrap");w.textContent="";w.appendChild(t);
 document.getElementById("shown").textContent=rows.length+" rows \u00d7 "+cols.length+
  " columns on "+D.pythons[pi]+" / "+D.arches[ai];}
function show(i){var c=D.cells[i],r=D.rows[c[0]],col=D.cols[c[1]];
 var p=document.getElementById("panel");
 p.textContent="";var b=el("button","close","\u00d7 close");b.type="button";
 b.onclick=function(){p.hidden=true;};p.appendChild(b);
 p.appendChild(el("h2","",SYM[c[4]]+" "+D.states[c[4]]+": sglang "+r[0]+" + "+col[0]+"=="+col[1]));
 p.appendChild(el("div","","torch "+r[1]+" \u00b7 "+D.pythons[c[2]]+" / "+D.arches[c[3]]+
  (c[9]>=0?" \u00b7 wheel "+S[c[9]]:" \u00b7 no wheel")));
 if(c[8].length){p.appendChild(el("strong","","Reasons"));var u=el("ul");
  c[8].forEach(function(s){u.appendChild(el("li","",S[s]));});p.appendChild(u);}
 if(c[7].length){p.appendChild(el("strong","","Notes"));var n=el("ul");
  c[7].forEach(function(s){n.appendChild(el("li","",S[s]));});p.appendChild(n);}
 if(c[6].length){p.appendChild(el("strong","","Checks"));var l=el("ul");
  c[6].forEach(function(k){var ch=D.checks[k];
   var li=el("li","",OKM[String(ch[1])]+" "+S[ch[0]]+": "+S[ch[2]]);
   ch[3].forEach(function(e){var d=el("div");d.appendChild(document.createTextNode("evidence: "));
    d.appendChild(el("code","",S[e]));li.appendChild(d);});l.appendChild(li);});p.appendChild(l);}
 p.hidden=false;}
document.getElementById("wrap").addEventListener("click",function(e){
 var td=e.target.closest("td.cell");if(td&&td.dataset.cell)show(+td.dataset.cell);});
document.getElementById("wrap").addEventListener("keydown",function(e){
 var td=e.target.closest("td.cell");if(td&&td.dataset.cell&&(e.key==="Enter"||e.key===" ")){
 e.preventDefault();show(+td.dataset.cell);}});
document.addEventListener("keydown",function(e){if(e.key==="Escape")document.getElementById("panel").hidden=true;});
[f.dist,f.py,f.ar,f.hide].forEach(function(x){x.addEventListener("change",render);});
render();
})();
"""


def to_html(m: Matrix) -> str:
    """One self-contained page: inline CSS, inline script, the cells embedded as JSON."""
    e = html.escape
    kb = m.kb
    counts = m.counts()
    sc = m.scope
    scope = (f"Scope: distributions {', '.join(sc['dists'])}; python {sc['python']} "
             f"({', '.join(m.pythons)}); platform {sc['arch']} ({', '.join(m.arches)}); "
             f"sglang {sc['sglang']}; mooncake {sc['mooncake']}; torch {sc['torch']}. "
             f"{len(m.rows)} SGLang rows × {len(m.columns)} mooncake columns; "
             f"{len(m.cells)} cells: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    footer = (f"Built from knowledge base <code>{e(kb['path'] or '(in memory)')}</code> "
              f"(sha256 <code>{e(kb['sha256'] or 'n/a')}</code>), scraped "
              f"{e(kb['scraped_at'])} from "
              + (f"<code>{e(kb['index_url'])}</code>" if kb["index_url"] else "the package index")
              + f" by moonpin "
              f"{e(kb['moonpin_version'])}. Every verdict is read from the release "
              "artifacts; <code>moonpin explain</code> prints the same checks.")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>moonpin: SGLang × mooncake compatibility matrix</title>
<style>{_CSS}</style>
</head>
<body>
<header>
<h1>SGLang × mooncake compatibility matrix</h1>
<p class="scope" id="scope">{e(scope)}</p>
<form id="filters" onsubmit="return false">
<label>Distribution <select id="f-dist"></select></label>
<label>Python <select id="f-python"></select></label>
<label>Platform <select id="f-arch"></select></label>
<label><input type="checkbox" id="f-hide"> hide incompatible</label>
<span id="shown"></span>
</form>
<div class="legend" aria-label="legend">
<span class="s0">✔ ok: compatible</span>
<span class="s1">⚠ note: compatible, with a note</span>
<span class="s2">✘ incompatible (reason in the cell)</span>
<span class="s3">? unknown: not read, or not decidable</span>
<span>Hover a cell for its reason; click (or Enter) for every check and its evidence.</span>
</div>
</header>
<main id="wrap"><noscript>This page draws the table with its inline script; the same
data is in <code>moonpin matrix --format csv</code>.</noscript></main>
<aside id="panel" hidden aria-live="polite"></aside>
<footer id="footer">{footer}</footer>
<script type="application/json" id="matrix-data">{_script_json(_page_data(m))}</script>
<script>{_JS}</script>
</body>
</html>
"""


# ----------------------------------------------------------------------- CLI


def _write_atomic(path: Path, text: str) -> None:
    from kb.store import write_atomic

    write_atomic(path, text.encode("utf-8"))


_SUFFIX = {".html": "html", ".htm": "html", ".md": "md", ".csv": "csv", ".json": "json"}


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``moonpin matrix`` on the CLI's subparsers."""
    p = sub.add_parser("matrix", help="the SGLang x mooncake compatibility matrix "
                       "(HTML page, Markdown, CSV or JSON)")
    p.add_argument("--format", choices=["html", "md", "csv", "json"],
                   help="default: from -o's suffix, else md on stdout")
    p.add_argument("-o", "--output", metavar="FILE", help="write here (atomically), not stdout")
    p.add_argument("--dist", action="append", metavar="NAME",
                   help="a mooncake distribution (repeatable; default: "
                   + " and ".join(DEFAULT_DISTS) + ")")
    p.add_argument("--python", help="one python, 3.12 or cp312 (default: every python the "
                   "wheels cover; Markdown shows cp312)")
    p.add_argument("--arch", help="x86_64 or aarch64 (default: both; Markdown shows x86_64)")
    p.add_argument("--sglang", metavar="SPEC", help="only these SGLang releases, e.g. '>=0.5.17'")
    p.add_argument("--mooncake", metavar="SPEC", help="only these mooncake releases")
    p.add_argument("--torch", metavar="VERSION",
                   help="evaluate every row at this torch (default: what each release pins)")
    p.add_argument("--json", action="store_true", help="same as --format json")
    p.add_argument("--readme", metavar="FILE",
                   help="rewrite the table between the matrix markers of this README")
    p.add_argument("--kb", dest="kb_sub", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_matrix)


def _kb_path_of(args: argparse.Namespace) -> Path:
    from kb.paths import default_kb_path

    given = getattr(args, "kb_sub", None) or getattr(args, "kb", None)
    return Path(given) if given else default_kb_path()


def cmd_matrix(args: argparse.Namespace) -> int:
    """0 when the matrix holds a compatible cell, 1 when none; bad input raises UsageError."""
    out = getattr(args, "output", None)
    fmt = "json" if getattr(args, "json", False) else getattr(args, "format", None)
    if fmt is None:
        fmt = _SUFFIX.get(Path(out).suffix.lower(), "html") if out else "md"
    if fmt not in ("html", "md", "csv", "json"):
        raise UsageError(f"unknown format {fmt!r}", hint="use --format html, md, csv or json")
    kb_path = _kb_path_of(args)
    g = CompatGraph.from_path(kb_path)
    filters = {k: getattr(args, k, None) for k in
               ("python", "arch", "sglang", "mooncake", "torch")}
    dists = getattr(args, "dist", None)
    m = build_matrix(g, dists=dists, kb_path=kb_path, **filters)
    readme = getattr(args, "readme", None)
    if readme:
        path = Path(readme)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise UsageError(f"cannot read {readme!r}: {e.strerror}") from e
        _write_atomic(path, with_readme_table(text, m))
        print(f"updated the matrix table in {readme}", file=sys.stderr)
        return 0 if m.any_compatible else 1
    if fmt == "md":
        text = render_docs(m) if not dists and not any(filters.values()) else to_markdown(m)
    else:
        text = {"html": to_html, "csv": to_csv, "json": to_json}[fmt](m)
    if out:
        _write_atomic(Path(out), text)
        c = m.counts()
        print(f"wrote {out}: {len(m.rows)} rows x {len(m.columns)} columns, "
              + ", ".join(f"{v} {k}" for k, v in c.items()), file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0 if m.any_compatible else 1
