"""The package's shape (issue 28): one import package, no import circles, no private name
imported from another module, no module over 800 lines. Each rule is checked on the real
tree and, as a control, on a small tree that breaks it."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "moonpin"
MAX_LINES = 800


def _modules(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package under root."""
    out = {}
    for f in sorted((root / package).rglob("*.py")):
        parts = list(f.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = f
    return out


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes inside ``if TYPE_CHECKING:`` (not imported at run time)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and \
                node.test.id == "TYPE_CHECKING":
            skip.update(id(n) for n in ast.walk(node))
    return skip


def problems(root: Path, package: str = PACKAGE) -> dict[str, list[str]]:
    """What breaks the rules: 'circle', 'private', 'size' -> descriptions."""
    mods = _modules(root, package)
    graph: nx.DiGraph = nx.DiGraph()
    found: dict[str, list[str]] = {"circle": [], "private": [], "size": []}
    for name, path in mods.items():
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n") + (not text.endswith("\n") and bool(text))
        if lines > MAX_LINES:
            found["size"].append(f"{name}: {lines} lines")
        tree = ast.parse(text, str(path))
        skip = _type_checking_only(tree)
        graph.add_node(name)
        bound: dict[str, str] = {}  # local name -> module of the package it is bound to
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                    node.module.split(".")[0] == package:
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    if sub in mods:
                        graph.add_edge(name, sub)
                        bound[a.asname or a.name] = sub
                    else:
                        if node.module != name:
                            graph.add_edge(name, node.module)
                        if a.name.startswith("_") and not a.name.startswith("__"):
                            found["private"].append(f"{name} imports {a.name} from "
                                                    f"{node.module}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == package and a.name in mods:
                        graph.add_edge(name, a.name)
                        if a.asname:
                            bound[a.asname] = a.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.value.id in bound and node.attr.startswith("_") and \
                    not node.attr.startswith("__"):
                found["private"].append(f"{name} uses {bound[node.value.id]}.{node.attr}")
    graph.remove_edges_from(nx.selfloop_edges(graph))
    for cycle in nx.simple_cycles(graph):
        found["circle"].append(" -> ".join([*cycle, cycle[0]]))
        if len(found["circle"]) >= 10:
            break
    return found


def test_the_package_keeps_its_shape() -> None:
    found = problems(ROOT)
    assert not found["circle"], "import circles:\n" + "\n".join(found["circle"])
    assert not found["private"], "private names across modules:\n" + "\n".join(found["private"])
    assert not found["size"], "modules over 800 lines:\n" + "\n".join(found["size"])


def test_only_moonpin_at_the_top() -> None:
    """Nothing but the moonpin package holds Python code at the repository's top level
    that the wheel would install (the folders it used to install beside it are gone)."""
    for name in ("kb", "readers", "resolver", "scrapers"):
        assert not (ROOT / name).exists(), f"{name}/ is back at the top level"
    assert (ROOT / PACKAGE / "__init__.py").is_file()


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


@pytest.mark.parametrize(("files", "kind"), [
    ({"pkg/__init__.py": "", "pkg/a.py": "from pkg import b\n",
      "pkg/b.py": "def f():\n    from pkg.a import x\n"}, "circle"),
    ({"pkg/__init__.py": "", "pkg/a.py": "x = 1\n_y = 2\n",
      "pkg/b.py": "from pkg.a import _y\n"}, "private"),
    ({"pkg/__init__.py": "", "pkg/a.py": "_y = 2\n",
      "pkg/b.py": "from pkg import a\nprint(a._y)\n"}, "private"),
    ({"pkg/__init__.py": "", "pkg/a.py": "x = 1\n" * 801}, "size"),
])
def test_each_rule_catches_what_breaks_it(tmp_path: Path, files: dict[str, str],
                                          kind: str) -> None:
    _write(tmp_path, files)
    found = problems(tmp_path, "pkg")
    assert found[kind], found
    assert not any(v for k, v in found.items() if k != kind), found


def test_type_checking_imports_are_no_circle(tmp_path: Path) -> None:
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "from pkg import b\n",
                      "pkg/b.py": "TYPE_CHECKING = False\nif TYPE_CHECKING:\n"
                                  "    from pkg.a import x\n"})
    assert problems(tmp_path, "pkg") == {"circle": [], "private": [], "size": []}
