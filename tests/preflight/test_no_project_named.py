"""The machinery names no project (issue 37, the seam): the judgements every project shares
(``moonpin/preflight/judge/``), the walks and the extensions' machinery hold no string naming a
project whose loader rule sits behind the seam (``mooncake``, ``nixl_ep``, ``sgl_kernel``, …)
outside docstrings and comments: what a project is comes from its rule, handed in as values."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import moonpin.preflight
from moonpin.preflight.extensions import seam

PREFLIGHT = Path(moonpin.preflight.__file__).parent
#: The machinery: every module of judge/, probe/ and installed/ (the deep probe is handed the
#: module, the names and the backends it looks for; what is installed is read for the
#: distributions, modules and backend names the rules hand in), the walks, and the modules
#: that ask the rules (the seam itself lists them in its registries, ``RULES`` and
#: ``DISTRIBUTIONS``).
MACHINERY = sorted([*(PREFLIGHT / "judge").glob("*.py"), *(PREFLIGHT / "probe").glob("*.py"),
                    *(PREFLIGHT / "installed").glob("*.py"),
                    *(PREFLIGHT / n for n in ("run.py", "written.py", "extensions_only.py")),
                    *(PREFLIGHT / "extensions" / n for n in ("verdict.py", "wanted.py",
                                                             "astread.py")),
                    *(PREFLIGHT / "extensions" / "pyread").glob("*.py")])
#: What a module may name, with why: the knowledge base's sections are named after projects
#: (its schema), and the check refuses a KB whose section it reads is misshapen, as pydantic
#: would.
KNOWN = {"installed/image_facts.py": ["mooncake"]}
#: Each rule's import name and the distributions that provide it.
PROJECTS = sorted({*seam.RULES, *(d for name in seam.RULES
                                  for d in seam.rule_for(name).DISTRIBUTIONS)})


def project_literals(source: str) -> list[str]:
    """The string constants of ``source`` that name a project, docstrings and a command's
    help (``add_argument``/``ArgumentParser``'s words, its documentation) left out."""
    tree = ast.parse(source)
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                 ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and (
                getattr(call.func, "attr", None) == "add_argument"
                or getattr(call.func, "id", None) in ("ArgumentParser", "Parser")):
            docs |= {id(n) for n in ast.walk(call)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs and any(p in node.value for p in PROJECTS)]


def test_the_checker_sees_a_planted_name() -> None:
    assert project_literals('"""mooncake, in a docstring."""\n# mooncake\nx = 1\n') == []
    assert project_literals('def f():\n    return "no mooncake fits"\n') == ["no mooncake fits"]
    assert project_literals('x = f"{p} and nixl"\n') == [" and nixl"]
    assert project_literals('p.add_argument("--x", help="mooncake")\n') == []


@pytest.mark.parametrize("path", MACHINERY, ids=lambda p: str(p.relative_to(PREFLIGHT)))
def test_the_machinery_names_no_project(path: Path) -> None:
    rel = path.relative_to(PREFLIGHT).as_posix()
    assert project_literals(path.read_text()) == KNOWN.get(rel, [])


def test_the_rules_distributions_are_read() -> None:
    """Every rule's distributions are among those whose metadata the check reads (the seam's
    ``DISTRIBUTIONS``, handed to ``installed/``), and the walks hand it in."""
    for name in seam.RULES:
        for dist in seam.rule_for(name).DISTRIBUTIONS:
            assert dist.startswith(seam.DISTRIBUTIONS), (name, dist)
    for walk in ("run.py", "extensions_only.py"):
        assert "DISTRIBUTIONS" in (PREFLIGHT / walk).read_text(), walk
