"""The compatibility matrix: SGLang releases x mooncake releases, one verdict per cell.

Rows are the SGLang releases that import a mooncake process-group module (newest
first), one row per torch the release admits (almost always exactly one: the pin in
its ``Requires-Dist``); a release the last scrape could not read is a row of
``unknown`` cells. Columns are the releases of the chosen mooncake distributions
(newest first within each distribution). Every cell is decided by
:func:`moonpin.resolver.query.evaluate` -- the same checks ``moonpin explain`` prints -- at
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

The values (rows, columns, cells) are in :mod:`moonpin.resolver.matrix.model`, the HTML page in
:mod:`moonpin.resolver.matrix.page`; this module builds the matrix, renders CSV, JSON and Markdown,
and is the ``moonpin matrix`` command.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from moonpin.kb.errors import UsageError
from moonpin.resolver.matrix.model import (
    CSV_COLUMNS,
    PREFERRED_ARCH,
    PREFERRED_PYTHON,
    STATES,
    Cell,
    Column,
    Extension,
    Matrix,
    Row,
    scope_pick,
)

if TYPE_CHECKING:  # the default matrix read from its table (tabled.py) judges nothing
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    from moonpin.kb.facts import Sglang as SglangRelease
    from moonpin.resolver.graph import CompatGraph
    from moonpin.resolver.query import Evaluation, TorchChoice

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
    "render",
    "render_docs",
    "to_csv",
    "to_html",
    "to_json",
    "to_markdown",
    "update_readme",
    "with_readme_table",
]

DEFAULT_DISTS = ("mooncake-transfer-engine", "mooncake-transfer-engine-cuda13")
DOCS_COMMAND = "moonpin matrix --format md -o docs/matrix.md"


# ----------------------------------------------------------------------- building


def _contains(spec: SpecifierSet | None, version: str) -> bool:
    from packaging.version import InvalidVersion, Version

    if spec is None:
        return True
    try:
        return spec.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


def _vkey(text: str) -> tuple[int, Version | str]:
    from packaging.version import InvalidVersion, Version

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
        from moonpin.kb.cache import file_digest

        with contextlib.suppress(OSError):
            info["sha256"] = file_digest(kb_path)
    return info


def _chosen_dists(g: CompatGraph, dists: Sequence[str] | None,
                  unread_mc: dict[tuple[str, str], str]) -> list[str]:
    from moonpin.resolver.inputs import canonical_name

    known = g.dists()
    if not dists:
        return [d for d in DEFAULT_DISTS if d in known] or known
    chosen: list[str] = []
    for d in dists:
        c = str(canonical_name(d))
        if c not in known and c not in {k for k, _ in unread_mc}:
            raise UsageError(f"unknown mooncake distribution {d!r}",
                             hint="known: " + ", ".join(known))
        if c not in chosen:
            chosen.append(c)
    return chosen


def _columns(g: CompatGraph, chosen: list[str], m_spec: SpecifierSet | None,
             unread_mc: dict[tuple[str, str], str]) -> list[Column]:
    """Per distribution (in the order chosen), newest release first; a release the last
    scrape could not read is a column too."""
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
    return columns


def _platforms(g: CompatGraph, columns: list[Column], python: str | None,
               arch: str | None) -> tuple[list[str], list[str]]:
    """The pythons and arches of the scope: the one asked, else every one the wheels cover."""
    pys: set[str] = set()
    ars: set[str] = set()
    for col in columns:
        for wv in g.wheels(col.dist, col.mooncake):
            pys |= wv.pythons
            ars |= wv.arches
    pythons = [python] if python else sorted(pys, key=lambda p: int(p[2:] or 0)) \
        or [PREFERRED_PYTHON]
    arches = [arch] if arch else sorted(ars) or [PREFERRED_ARCH]
    return pythons, arches


class _Torches:
    """``resolve_torch`` remembered per (torch, arch)."""

    def __init__(self, g: CompatGraph) -> None:
        self.g = g
        self.seen: dict[tuple[str, str], TorchChoice] = {}

    def __call__(self, t: str, a: str) -> TorchChoice:
        from moonpin.resolver.query import resolve_torch

        if (t, a) not in self.seen:
            self.seen[(t, a)] = resolve_torch(self.g, t, a)
        return self.seen[(t, a)]


def _rows(g: CompatGraph, s_spec: SpecifierSet | None, torch: str | None,
          arches: list[str], tchoice: _Torches
          ) -> tuple[list[Row], dict[tuple[str, str], SglangRelease]]:
    """One row per SGLang release that imports a process-group module and each torch it
    admits (or ``torch``), newest first; a release the last scrape could not read is a row
    of unknown cells."""
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
            if t != "?":  # a row at no torch is judged unknown, never at torch '?'
                row_rel[(s.version, t)] = s
    for u in g.kb.unread:
        if u.kind == "sglang" and g.find_sglang(u.version) is None \
                and _contains(s_spec, u.version):
            rows.append(Row(u.version, torch or "?", None, "", (), u.reason))
    rows.sort(key=lambda r: _vkey(r.sglang), reverse=True)
    return rows, row_rel


def _judge(g: CompatGraph, row_rel: dict[tuple[str, str], SglangRelease],
           tchoice: _Torches) -> Callable[[Row, Column, str, str], Cell]:
    """The function judging one cell (row, column, arch, python)."""
    from moonpin.resolver.query import evaluate

    def judge(row: Row, col: Column, a: str, p: str) -> Cell:
        s_rel = row_rel.get((row.sglang, row.torch))
        base = (row.sglang, row.torch, col.dist, col.mooncake, p, a)
        if row.unread is not None or s_rel is None:
            why = (f"sglang {row.sglang} was not read in the last scrape: {row.unread}"
                   if row.unread is not None else f"sglang {row.sglang}: {row.torch_line}")
            return Cell(*base, "unknown", "not read" if row.unread else "no torch", (why,))
        wheels = g.wheels(col.dist, col.mooncake)
        w = next((x for x in wheels if p in x.pythons and a in x.arches), None)
        if col.unread is not None and (w is None or not wheels):
            why = (f"{col.dist} {col.mooncake} was not (fully) read in the last scrape: "
                   f"{col.unread}")
            return Cell(*base, "unknown", "not read", (why,))
        ev = evaluate(g, s_rel, tchoice(row.torch, a), w, col.dist, col.mooncake, p, a)
        return _cell_from(ev, s_rel, row.torch)
    return judge


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
    from packaging.version import InvalidVersion, Version

    from moonpin.resolver.inputs import canonical_name, normalize_arch, normalize_python
    from moonpin.resolver.query import parse_spec

    python, arch = normalize_python(python), normalize_arch(arch)
    s_spec, m_spec = parse_spec(sglang, "sglang"), parse_spec(mooncake, "mooncake")
    unread_mc = {(str(canonical_name(u.name)), u.version): u.reason
                 for u in g.kb.unread if u.kind == "mooncake"}
    chosen = _chosen_dists(g, dists, unread_mc)
    if torch is not None:
        try:
            Version(torch)
        except InvalidVersion as e:
            raise UsageError(f"torch version {torch!r} is not PEP 440",
                             hint="use e.g. --torch 2.13.0 or 2.13.0+cu130") from e
    columns = _columns(g, chosen, m_spec, unread_mc)
    pythons, arches = _platforms(g, columns, python, arch)
    tchoice = _Torches(g)
    rows, row_rel = _rows(g, s_spec, torch, arches, tchoice)
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
    projects = tuple(sorted({r.project for r in g.kb.native}))
    return Matrix(rows, columns, pythons, arches, _judge(g, row_rel, tchoice), scope,
                  _kb_info(g, kb_path), projects, _extension(g, row_rel))


def _extension(g: CompatGraph, row_rel: dict[tuple[str, str], SglangRelease],
               ) -> Callable[[Row, str, str, str], Extension]:
    """The function judging a row's extension column: ``which <project> --sglang V --torch
    T`` on one python and platform (SGLang's own pins and launch choices' imports, and the
    torch, through the one rule)."""
    def judge(row: Row, project: str, python: str, arch: str) -> Extension:
        if row.unread is not None or (row.sglang, row.torch) not in row_rel:
            return Extension(project, None, "not read" if row.unread else "no torch", True)
        from moonpin.resolver.native import newest_fit

        requirement, reason, unknown = newest_fit(g, project, torch=row.torch,
                                                  sglang=row.sglang, python=python, arch=arch)
        return Extension(project, requirement, reason, unknown)
    return judge


# ----------------------------------------------------------------------- text renderers


def to_csv(m: Matrix) -> str:
    """One row per cell (every python and platform in the matrix), then one column per
    native-extension project: the newest release of it that fits the cell's SGLang
    release, torch, python and platform (:meth:`Extension.text`)."""
    buf = io.StringIO()
    import csv

    projects = [p for p in m.projects if p not in CSV_COLUMNS]
    w = csv.DictWriter(buf, fieldnames=[*CSV_COLUMNS, *projects], lineterminator="\n")
    w.writeheader()
    for c in m.cells:
        row = m.cell_row(c.sglang, c.torch)
        exts = {} if row is None else {
            x: e.text() for x in projects
            if (e := m.extension(row, x, c.python, c.arch)) is not None}
        w.writerow({**c.row(), **exts})
    return buf.getvalue()


def to_json(m: Matrix) -> str:
    doc = {
        "scope": m.scope,
        "kb": m.kb,
        "counts": m.counts(),
        "rows": [r.as_dict() for r in m.rows],
        "columns": [c.as_dict() for c in m.columns],
        "cells": [c.as_dict() for c in m.cells],
        "projects": list(m.projects),
        "extensions": [{"sglang": r.sglang, "torch": r.torch, "python": p, "arch": a,
                        **e.as_dict()} for r, p, a, e in m.extensions()],
    }
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n"


def _short_dist(dist: str) -> str:
    rest = dist.removeprefix("mooncake-transfer-engine")
    return "mte" + rest if rest != dist else dist


def _md_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")


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


def _md_extension(e: Extension | None) -> str:
    if e is None:
        return ""
    if e.requirement is not None:
        return "✅ " + _md_escape(e.requirement)
    if e.unknown or not e.reason:
        return "❔ unknown"
    return "❌ " + _md_escape(e.reason.split(":", 1)[0])


def to_markdown(m: Matrix, *, newest: int = 8, per_dist: int = 5, python: str | None = None,
                arch: str | None = None) -> str:
    """The newest ``newest`` SGLang releases against the newest ``per_dist`` releases of
    each distribution, for one python / platform (default cp312 / x86_64). Deterministic:
    it depends on the KB's content only (not on its path, nor on the time)."""
    p, a = scope_pick(m, python, arch)
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
        head = (["SGLang", "torch"] + [f"{_short_dist(c.dist)} {c.mooncake}" for c in cols]
                + list(m.projects))
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "|".join(["---"] * len(head)) + "|")
        for r in rows:
            cuda = r.cuda_for(a)
            torch = r.torch if r.torch == "?" else (
                f"{r.torch} (cu{cuda})" if cuda is not None else f"{r.torch} (cpu)")
            line = ([r.sglang, torch] + [_md_cell(m.cell(r, c, p, a)) for c in cols]
                    + [_md_extension(m.extension(r, x, p, a)) for x in m.projects])
            out.append("| " + " | ".join(line) + " |")
    short = sorted({d for d in m.scope["dists"]})
    out += [
        "",
        "✅ compatible · ⚠️ note: compatible with a caveat (e.g. compiles at first import, "
        "needs nvcc + ninja) · ❌ incompatible, with the first reason · ❔ unknown (not read "
        "in the last scrape, or not decidable from the KB). "
        + "; ".join(f"`{_short_dist(d)}` = `{d}`" for d in short if _short_dist(d) != d)
        + ". `moonpin explain sglang==V DIST==V --python 3.12 --arch x86_64` prints every "
        "check and its evidence."
        + (" The last columns name the newest release of each native extension that fits "
           "the row (SGLang's own pins and what its launch choices import, at the row's "
           "torch; ❌ with the first check the newest release fails, ❔ when the KB cannot "
           "decide); `moonpin which "
           "PROJECT --sglang V --torch T` lists them all." if m.projects else ""),
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


def _is_shipped(path: str | None) -> bool:
    """Whether ``path`` is the knowledge base moonpin ships (``data/kb.json`` of the
    checkout, or its copy inside the installed ``kb`` package)."""
    import os

    from moonpin import kb

    if path is None:
        return False
    here = os.path.dirname(os.path.realpath(kb.__file__))
    shipped = {os.path.join(here, "data", "kb.json"),
               os.path.join(os.path.dirname(os.path.dirname(here)), "data", "kb.json")}
    return os.path.realpath(path) in shipped


def _in_checkout(path: str | None) -> bool:
    """The KB file is the one of a moonpin repository checkout (a ``pyproject.toml`` and
    ``docs/`` beside its ``data/``), not of an installed copy."""
    import os

    if not path:
        return False
    root = os.path.dirname(os.path.dirname(os.path.realpath(path)))
    return (os.path.isfile(os.path.join(root, "pyproject.toml"))
            and os.path.isdir(os.path.join(root, "docs")))


def render_docs(m: Matrix) -> str:
    """``docs/matrix.md``: a one-line header naming the KB it comes from and saying how to
    regenerate it, then the table. The shipped KB is named by its place in the repository
    (so the page does not depend on where the checkout is); any other by its path."""
    path = m.kb.get("path")
    if _is_shipped(path) and _in_checkout(path):
        source = (f"Generated from the shipped knowledge base (`data/kb.json`); regenerate "
                  f"with `{DOCS_COMMAND}`.")
    elif _is_shipped(path):  # an installed copy: the repository's docs/ workflow is not here
        source = ("Generated from the knowledge base installed with moonpin; regenerate "
                  "with `moonpin matrix --format md`.")
    elif path:
        source = (f"Generated from the knowledge base `{path}`, not the shipped one; "
                  f"regenerate with `moonpin --kb {path} matrix --format md`.")
    else:
        source = "Generated from a knowledge base held in memory, not the shipped one."
    return f"# Compatibility matrix\n\n{source}\n\n" + to_markdown(m)


#: The page holding the table (once the README; the manual is in docs/ now).
README_COMMAND = "moonpin matrix --readme docs/guides/which.md"
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
    from moonpin.resolver.graph import CompatGraph

    m = build_matrix(CompatGraph.from_path(kb_path), kb_path=kb_path)
    _write_atomic(out_path, render_docs(m))


# ----------------------------------------------------------------------- CLI


def _write_atomic(path: Path, text: str) -> None:
    from moonpin.kb.store import write_atomic

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
    p.add_argument("--json", action="store_true", help="answer in JSON on stdout: the matrix "
                   "itself (--format json), or with -o/--readme where it was written (the "
                   "file's format is then --format or -o's suffix)")
    p.add_argument("--readme", metavar="FILE",
                   help="rewrite the table between the matrix markers of this README")
    p.add_argument("--kb", dest="kb_sub", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_matrix)


def _kb_path_of(args: argparse.Namespace) -> Path:
    from moonpin.kb.paths import default_kb_path

    given = getattr(args, "kb_sub", None) or getattr(args, "kb", None)
    return Path(given) if given else default_kb_path()


def update_readme(path: Path, m: Matrix) -> bool:
    """Rewrite the table between the matrix markers of the README at ``path``; False (and
    nothing written) when it is already current. Raises :class:`UsageError` for a README
    that cannot be read or has no markers."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot read {str(path)!r}: {e.strerror}") from e
    table = with_readme_table(text, m)
    if table == text:
        return False
    _write_atomic(path, table)
    return True


def render(m: Matrix, fmt: str, *, docs: bool = False) -> str:
    """The matrix in ``fmt`` (html, md, csv, json); with ``docs``, md is the docs page (the
    header naming its KB, then the table)."""
    if fmt == "md":
        return render_docs(m) if docs else to_markdown(m)
    return {"html": to_html, "csv": to_csv, "json": to_json}[fmt](m)


def to_html(m: Matrix) -> str:
    """The matrix as one self-contained page (see :mod:`moonpin.resolver.matrix.page`)."""
    from moonpin.resolver.matrix import (
        page as matrix_html,  # the page's code: only when a page is asked for
    )

    return matrix_html.to_html(m)


def cmd_matrix(args: argparse.Namespace) -> int:
    """0 when the matrix holds a compatible cell, 1 when none; bad input raises UsageError."""
    out = getattr(args, "output", None)
    readme = getattr(args, "readme", None)
    fmt = getattr(args, "format", None)
    if getattr(args, "json", False) and not (out or readme):
        fmt = "json"  # --json: stdout is one JSON document, the matrix; beside -o it is only
    if fmt is None:  # the answer's form (where it wrote), and the file's format is -o's suffix
        fmt = _SUFFIX.get(Path(out).suffix.lower(), "html") if out else "md"
    if fmt not in ("html", "md", "csv", "json"):
        raise UsageError(f"unknown format {fmt!r}", hint="use --format html, md, csv or json")
    kb_path = _kb_path_of(args)
    filters = {k: getattr(args, k, None) for k in
               ("python", "arch", "sglang", "mooncake", "torch")}
    dists = getattr(args, "dist", None)
    m = None
    if fmt in ("md", "csv") and not dists and not any(filters.values()):
        # the default matrix, resolved at `kb resolve`: without the checks these two print
        from moonpin.resolver.matrix import tabled

        m = tabled.load(kb_path)
    if m is None:
        from moonpin.resolver.graph import CompatGraph

        m = build_matrix(CompatGraph.from_path(kb_path), dists=dists, kb_path=kb_path,
                         **filters)
    # --json asks for one JSON document on stdout, whatever else is asked: where the matrix
    # went when it was written to a file
    said_json = getattr(args, "json", False) and (readme or out)
    if readme:
        updated = update_readme(Path(readme), m)
        said = "updated" if updated else "left unchanged (current)"
        print(f"the matrix table in {readme}: {said}", file=sys.stderr)
        if said_json:
            _emit({"readme": readme, "updated": updated, "counts": m.counts()})
    elif out:
        _write_atomic(Path(out), render(m, fmt, docs=not dists and not any(filters.values())))
        print(f"wrote {out}: {len(m.rows)} rows x {len(m.columns)} columns, "
              + ", ".join(f"{v} {k}" for k, v in m.counts().items()), file=sys.stderr)
        if said_json:
            _emit({"wrote": out, "format": fmt, "rows": len(m.rows),
                   "columns": len(m.columns), "counts": m.counts()})
    else:
        sys.stdout.write(render(m, fmt, docs=not dists and not any(filters.values())))
    return 0 if m.any_compatible else 1


def _emit(doc: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")
