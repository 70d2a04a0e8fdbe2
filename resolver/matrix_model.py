"""The compatibility matrix's values: rows (an SGLang release at a torch), columns (a mooncake
release), cells (one verdict each, with every check) and the matrix with its scope; shared by
the text renderers of :mod:`resolver.matrix` and the page of :mod:`resolver.matrix_html`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from resolver.query import Check

__all__ = [
    "CSV_COLUMNS",
    "PREFERRED_ARCH",
    "PREFERRED_PYTHON",
    "STATES",
    "SYMBOL",
    "Cell",
    "Column",
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


def scope_pick(m: Matrix, python: str | None, arch: str | None) -> tuple[str, str]:
    p = python or (PREFERRED_PYTHON if PREFERRED_PYTHON in m.pythons else m.pythons[0])
    a = arch or (PREFERRED_ARCH if PREFERRED_ARCH in m.arches else m.arches[0])
    return p, a
