"""A module's top level parsed with its functions' bodies blanked
(:mod:`moonpin.readers.pyast.toplevel`): the same tree as the whole file's but for the
bodies, each function's span included, in the shapes a line-wise cut can get wrong."""

from __future__ import annotations

import ast
import copy

import pytest

from moonpin.readers.pyast.toplevel import bodies_blanked, top_level

#: module texts: a ``def`` in a docstring, a body whose string or backslash reaches past its
#: indentation, methods, decorators, nested and one-line functions, a ``def`` under an
#: ``if``, a multi-line header, comments after a body, CRLF line ends
SHAPES = [
    'def f():\n    import lzma\n    return 1\n\n\nimport bz2\n',
    '"""Example:\n\n    def g():\n        import lzma\n"""\nimport bz2\n',
    'def f():\n    x = """\nimport lzma\n"""\n    return x\n\nimport bz2\n',
    'def f():\n    return \\\nlzma()\n\nimport bz2\n',
    'import helper\n\nclass C:\n    @helper.deco\n    def m(self):\n        import lzma\n'
    '    X = helper.make()\n\n    def n(self): return 1\n\nimport bz2\n',
    'def f(\n    a: int,\n    b: str = "x:",\n) -> None:  # a comment\n    def g():\n'
    '        import lzma\n    g()\n\n\nif True:\n    def h():\n        pass\n'
    '    import bz2\n',
    'def f(): return 1\ndef g():\n    import lzma\nimport bz2\n',
    'async def f():\n    import lzma\n\n    # a comment\n\n# another\nimport bz2\n',
    'def f():\r\n    import lzma\r\n    return [\r\n        1,\r\n    ]\r\nimport bz2\r\n',
    'def f():\n    x = (\n1)\n    return x\nimport bz2\n',
]


def _shape(tree: ast.Module) -> tuple[str, list[tuple[str, int, int | None]]]:
    """The tree with every function's body left out, and each function's span."""
    tree = copy.deepcopy(tree)
    spans = []
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            spans.append((n.name, n.lineno, n.end_lineno))
            n.body = []
    return ast.dump(tree), spans


@pytest.mark.parametrize("text", SHAPES)
def test_the_top_level_is_the_whole_files(text: str) -> None:
    whole = ast.parse(text)
    got = top_level(text.encode())
    assert _shape(got)[0] == _shape(whole)[0]
    tops = {(n.name, n.lineno, n.end_lineno) for n in whole.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    assert tops <= set(_shape(got)[1])  # a top-level function's span: what is read of it


def test_bodies_are_blanked_and_lines_kept() -> None:
    text = b"import os\n\ndef f():\n    import lzma\n    return 1\n\nX = 1\n"
    cut = bodies_blanked(text)
    assert cut is not None
    assert cut[0] == b"import os\n\ndef f():\n\n    ...\n\nX = 1\n" and cut[1] == [5]


@pytest.mark.parametrize("text", [b"x = 1\n", b"def f(): return 1\n", b"\tdef f():\n\t\tpass\n"])
def test_nothing_to_blank_is_none(text: bytes) -> None:
    assert bodies_blanked(text) is None
