"""The compatibility matrix's values: rows (an SGLang release at a torch), columns (a mooncake
release), cells (one verdict each, with every check) and the matrix with its scope; shared by
the text renderers of :mod:`moonpin.resolver.matrix.table` and the page of
:mod:`moonpin.resolver.matrix.page`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # the default matrix read from its table loads no query
    from moonpin.resolver.answers import Check

__all__ = [
    "CSV_COLUMNS",
    "PREFERRED_ARCH",
    "PREFERRED_PYTHON",
    "STATES",
    "SYMBOL",
    "Cell",
    "CellKey",
    "Column",
    "Extension",
    "Matrix",
    "Row",
    "scope_pick",
]

#: The scope the Markdown table shows and the HTML page opens on.
PREFERRED_PYTHON = "cp312"
PREFERRED_ARCH = "x86_64"
STATES = ("compatible", "compatible-note", "incompatible", "unknown")
CSV_COLUMNS = ["sglang", "torch", "dist", "mooncake", "python", "arch", "state", "reason",
               "wheel", "notes"]
SYMBOL = {"compatible": "✅", "compatible-note": "⚠️", "incompatible": "❌", "unknown": "❔"}


class Row(NamedTuple):
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


class Column(NamedTuple):
    dist: str
    mooncake: str
    unread: str | None = None

    @property
    def key(self) -> str:
        return f"{self.dist}=={self.mooncake}"

    def as_dict(self) -> dict[str, Any]:
        return {"dist": self.dist, "mooncake": self.mooncake, "unread": self.unread}


class Cell(NamedTuple):
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


class Extension(NamedTuple):
    """A row's extension column: the newest release of ``project`` that fits the row's
    SGLang release at its torch (its pins, its launch choices' imports and the torch both
    admit, :func:`moonpin.resolver.native.which_native`), or why none does."""

    project: str
    requirement: str | None  # "sglang-kernel==0.4.10"; None: none fits
    reason: str = ""  # the newest release's first failed (or undecided) check, when none fits
    unknown: bool = False  # none is known to fit, and one cannot be decided

    def text(self) -> str:
        """The column as plain text (CSV): the requirement, or ``none: <reason>`` /
        ``unknown: <reason>``."""
        if self.requirement is not None:
            return self.requirement
        return f"{'unknown' if self.unknown or not self.reason else 'none'}: {self.reason}"

    def as_dict(self) -> dict[str, Any]:
        return {"project": self.project, "requirement": self.requirement,
                "reason": self.reason, "unknown": self.unknown}


#: The key of a cell: sglang, torch, dist, mooncake, python, arch.
CellKey = tuple[str, str, str, str, str, str]


class Matrix:
    """The rows, columns and scope, and a cell for each (row, column, arch, python),
    judged when first asked for: a renderer that shows part of the matrix (the Markdown
    table) judges that part, ``cells`` judges every one."""

    def __init__(self, rows: list[Row], columns: list[Column], pythons: list[str],
                 arches: list[str], judge: Callable[[Row, Column, str, str], Cell],
                 scope: dict[str, Any], kb: dict[str, Any], projects: tuple[str, ...] = (),
                 extension: Callable[[Row, str, str, str], Extension] | None = None) -> None:
        self.rows, self.columns, self.pythons, self.arches = rows, columns, pythons, arches
        self.scope, self.kb = scope, kb
        self._judge = judge
        self._done: dict[CellKey, Cell] = {}
        self._where: dict[tuple[str, str], Row] | None = None
        #: the native-extension projects with a column each (the KB's)
        self.projects = projects
        self._extension = extension
        self._ext: dict[tuple[str, str, str, str, str], Extension] = {}

    def extension(self, row: Row, project: str, python: str, arch: str) -> Extension | None:
        """The row's column of ``project`` on this python and platform (judged once)."""
        if self._extension is None or project not in self.projects:
            return None
        key = (row.sglang, row.torch, project, python, arch)
        if key not in self._ext:
            self._ext[key] = self._extension(row, project, python, arch)
        return self._ext[key]

    def _get(self, row: Row, col: Column, python: str, arch: str) -> Cell:
        key = (row.sglang, row.torch, col.dist, col.mooncake, python, arch)
        hit = self._done.get(key)
        if hit is None:
            hit = self._done[key] = self._judge(row, col, arch, python)
        return hit

    def _each(self) -> Iterator[Cell]:
        for row in self.rows:
            for col in self.columns:
                for a in self.arches:
                    for p in self.pythons:
                        yield self._get(row, col, p, a)

    def extensions(self) -> Iterator[tuple[Row, str, str, Extension]]:
        """Every row's extension columns: ``(row, python, arch, extension)`` by row, arch,
        python and project (the KB's projects; none when the matrix has no judge)."""
        for row in self.rows:
            for a in self.arches:
                for p in self.pythons:
                    for project in self.projects:
                        e = self.extension(row, project, p, a)
                        if e is not None:
                            yield row, p, a, e

    @property
    def cells(self) -> list[Cell]:
        """Every cell, by row, column, arch and python."""
        return list(self._each())

    def cell(self, row: Row, col: Column, python: str, arch: str) -> Cell | None:
        if python not in self.pythons or arch not in self.arches or col not in self.columns:
            return None
        if self._where is None:
            self._where = {(r.sglang, r.torch): r for r in self.rows}
        if self._where.get((row.sglang, row.torch)) != row:
            return None
        return self._get(row, col, python, arch)

    def cell_row(self, sglang: str, torch: str) -> Row | None:
        """The row of this SGLang release at this torch."""
        if self._where is None:
            self._where = {(r.sglang, r.torch): r for r in self.rows}
        return self._where.get((sglang, torch))

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATES, 0)
        for c in self._each():
            out[c.state] += 1
        return out

    @property
    def any_compatible(self) -> bool:
        """Whether a cell is compatible: among those judged so far, else judging the rest
        until one is."""
        ok = ("compatible", "compatible-note")
        return (any(c.state in ok for c in list(self._done.values()))
                or any(c.state in ok for c in self._each()))


def scope_pick(m: Matrix, python: str | None, arch: str | None) -> tuple[str, str]:
    p = python or (PREFERRED_PYTHON if PREFERRED_PYTHON in m.pythons else m.pythons[0])
    a = arch or (PREFERRED_ARCH if PREFERRED_ARCH in m.arches else m.arches[0])
    return p, a
