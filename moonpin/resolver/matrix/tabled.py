"""The default matrix resolved when the KB is written: ``resolved/_matrix.json`` holds every
cell and extension column of ``moonpin matrix`` without filters (the default distributions,
every python and platform), so its Markdown and CSV renderings read it instead of judging
the cells from the facts. The cells hold what those two print (state, short reason, notes,
wheel), not every reason and check: the JSON and HTML renderings, which print them, judge
from the facts."""

from __future__ import annotations

import os
from typing import Any

from moonpin.resolver.matrix.model import STATES, Cell, Column, Extension, Matrix, Row

__all__ = ["KB_KEYS", "MATRIX_NAME", "load"]

#: The file of the default matrix, beside the other resolved tables.
MATRIX_NAME = "_matrix.json"

#: What the matrix footer says of its KB, from the table (the path and sha256 are asked of
#: the file the matrix is read for).
KB_KEYS = ("scraped_at", "index_url", "moonpin_version")


def _str(v: Any) -> bool:
    return type(v) is str


def _opt(v: Any) -> bool:
    return v is None or type(v) is str


def _strs(v: Any) -> bool:
    return type(v) is list and all(type(x) is str for x in v)


def _ref(v: Any, n: int) -> bool:
    return v is None or (type(v) is int and 0 <= v < n)


def _refs(v: Any, n: int) -> bool:
    return type(v) is list and all(type(x) is int and 0 <= x < n for x in v)


def _valid(doc: dict[str, Any]) -> bool:
    """Whether ``doc`` has exactly the shape
    :func:`moonpin.resolver.tables.writer.build_matrix` writes."""
    values: list[Any] = [doc.get(k) for k in (
        "kb", "scope", "rows", "columns", "pythons", "arches", "projects", "strings", "cells",
        "grid", "extensions", "ext")]
    kb, scope, rows, columns, pythons, arches, projects, strings, cells, grid, exts, ext = values
    if not (type(kb) is dict and all(_opt(kb.get(k)) for k in KB_KEYS)
            and _str(kb.get("scraped_at")) and type(scope) is dict
            and _strs(scope.get("dists")) and all(_str(scope.get(k)) for k in (
                "python", "arch", "sglang", "mooncake", "torch"))
            and _strs(pythons) and _strs(arches) and _strs(projects) and _strs(strings)
            and type(rows) is list and type(columns) is list and type(cells) is list
            and type(exts) is list):
        return False
    n = len(strings)
    if not all(type(r) is list and len(r) == 6 and _str(r[0]) and _str(r[1]) and _opt(r[2])
               and _str(r[3]) and _opt(r[5]) and type(r[4]) is list
               and all(type(c) is list and len(c) == 2 and _str(c[0])
                       and (c[1] is None or type(c[1]) is int) for c in r[4]) for r in rows):
        return False
    if not all(type(c) is list and len(c) == 3 and _str(c[0]) and _str(c[1]) and _opt(c[2])
               for c in columns):
        return False
    if not all(type(c) is list and len(c) == 4 and type(c[0]) is int
               and 0 <= c[0] < len(STATES) and c[1] is not None and _ref(c[1], n)
               and _refs(c[2], n) and _ref(c[3], n) for c in cells):
        return False
    if not all(type(e) is list and len(e) == 3 and _ref(e[0], n) and _ref(e[1], n)
               and e[1] is not None and type(e[2]) is bool for e in exts):
        return False
    per_row = len(arches) * len(pythons)
    return (_refs(grid, len(cells)) and len(grid) == len(rows) * len(columns) * per_row
            and _refs(ext, len(exts)) and len(ext) == len(rows) * per_row * len(projects))


def load(kb_path: str | os.PathLike[str]) -> Matrix | None:
    """The default matrix of the KB at ``kb_path`` from its table, each cell and extension
    column made when first asked for; None when the table is missing, damaged, stale or of
    another shape (then the facts answer)."""
    from moonpin.resolver.tables.reading import read_table

    try:
        doc = read_table(kb_path, MATRIX_NAME, valid=_valid)
    except (OSError, ValueError):
        return None
    s: list[str] = doc["strings"]
    rows = [Row(r[0], r[1], r[2], r[3], tuple((a, c) for a, c in r[4]), r[5])
            for r in doc["rows"]]
    columns = [Column(*c) for c in doc["columns"]]
    pythons, arches, projects = doc["pythons"], doc["arches"], tuple(doc["projects"])
    at_row = {(r.sglang, r.torch): i for i, r in enumerate(rows)}
    at_col = {(c.dist, c.mooncake): i for i, c in enumerate(columns)}
    at_arch = {a: i for i, a in enumerate(arches)}
    at_py = {p: i for i, p in enumerate(pythons)}
    at_project = {p: i for i, p in enumerate(projects)}
    cells, grid = doc["cells"], doc["grid"]
    exts, ext = doc["extensions"], doc["ext"]

    def text(i: int | None) -> str | None:
        return None if i is None else s[i]

    def judge(row: Row, col: Column, arch: str, python: str) -> Cell:
        at = ((at_row[(row.sglang, row.torch)] * len(columns) + at_col[(col.dist, col.mooncake)])
              * len(arches) + at_arch[arch]) * len(pythons) + at_py[python]
        state, reason, notes, wheel = cells[grid[at]]
        return Cell(row.sglang, row.torch, col.dist, col.mooncake, python, arch,
                    STATES[state], s[reason], (), tuple(s[x] for x in notes), (), text(wheel))

    def extension(row: Row, project: str, python: str, arch: str) -> Extension:
        at = ((at_row[(row.sglang, row.torch)] * len(arches) + at_arch[arch]) * len(pythons)
              + at_py[python]) * len(projects) + at_project[project]
        requirement, reason, unknown = exts[ext[at]]
        return Extension(project, text(requirement), s[reason], unknown)

    from moonpin.kb.cache import file_digest

    try:
        sha: str | None = file_digest(kb_path)
    except OSError:
        sha = None
    kb = {"path": os.fspath(kb_path), "sha256": sha, **doc["kb"]}
    return Matrix(rows, columns, pythons, arches, judge, dict(doc["scope"]), kb, projects,
                  extension)
