"""moonpin.readers.pyast.imports: the imports a module certainly runs, and how it binds a name."""

from __future__ import annotations

import textwrap

import pytest

from moonpin.preflight.pyimport.pychain import caught
from moonpin.readers.pyast.imports import binding, certain_imports


def _mods(src: str) -> list[str]:
    imports, error = certain_imports(textwrap.dedent(src).encode(), "m.py")
    assert error is None or "raise" in src, error
    return ["." * i.level + i.module + (f":{','.join(i.names)}" if i.names else "")
            + (f"[{i.guard}]" if i.guard else "") for i in imports]


@pytest.mark.parametrize(("src", "want"), [
    ("import a\nimport b.c as d\n", ["a", "b.c"]),
    ("from a.b import c, d\nfrom . import e\nfrom ..f import g\n", ["a.b:c,d", ".:e", "..f:g"]),
    ("from __future__ import annotations\nimport a\n", ["a"]),
    ("if X:\n    import a\n    import b\nelse:\n    import b\n", ["b"]),
    ("if TYPE_CHECKING:\n    import a\n", []),
    # a guarded import runs; a failure of a kind its handlers catch is quiet
    ("try:\n    import a\nexcept ImportError:\n    a = None\n", ["a[ImportError]"]),
    ("try:\n    import a\nexcept (ValueError, ModuleNotFoundError):\n    pass\n",
     ["a[ModuleNotFoundError,ValueError]"]),
    ("try:\n    try:\n        import a\n    except ValueError:\n        pass\n"
     "except ImportError:\n    pass\n", ["a[ImportError,ValueError]"]),
    ("try:\n    import a\nexcept:\n    pass\n", []),            # catches everything
    ("try:\n    import a\nexcept Exception:\n    pass\n", []),
    ("try:\n    import a\nexcept ValueError:\n    pass\nfinally:\n    import b\n",
     ["a[ValueError]", "b"]),
    ("try:\n    import a\nfinally:\n    import b\n", ["a", "b"]),
    ("with x:\n    import a\n", ["a"]),
    ("class C:\n    import a\n\ndef f():\n    import b\n", ["a"]),
    ("for x in y:\n    import a\nwhile z:\n    import b\n", []),
    ("import importlib\nm = importlib.import_module('a.b')\n__import__('c')\n",
     ["importlib", "a.b", "c"]),
    ("import importlib\nm = importlib.import_module('a' + s)\n", ["importlib"]),
    ("import a\nraise ImportError('x')\nimport b\n", ["a"]),
])
def test_certain_imports(src: str, want: list[str]) -> None:
    assert _mods(src) == want


@pytest.mark.parametrize(("src", "fails"), [
    ("raise ImportError('unsupported')\n", True),
    ("if X:\n    raise ValueError\nelse:\n    raise TypeError\n", True),
    ("if X:\n    raise ValueError\n", False),
    ("try:\n    raise ValueError\nexcept ValueError:\n    pass\n", False),
    ("def f():\n    raise ValueError\n", False),
    ("def (:\n", True),                       # does not parse
    ("return 1\n", True),                     # parses; only the compiler refuses it
    ("x = 1\n\0\n", True),                    # a NUL byte
])
def test_what_certainly_fails(src: str, fails: bool) -> None:
    _, error = certain_imports(src.encode(), "m.py")
    assert (error is not None) is fails, error


@pytest.mark.parametrize(("kind", "guard", "quiet"), [
    ("ModuleNotFoundError", "ImportError", True),
    ("ImportError", "ModuleNotFoundError", False),
    ("SyntaxError", "ImportError", False),
    ("TabError", "SyntaxError", True),
    ("ModuleNotFoundError", "", False),
    ("MyOwnError", "ImportError", True),  # its bases are not known here: may be caught
])
def test_what_a_guard_catches(kind: str, guard: str, quiet: bool) -> None:
    assert caught(kind, guard) is quiet


def test_the_compile_check_can_be_skipped_for_a_cached_source() -> None:
    # CPython holds a valid .pyc of this source: it will not compile it again
    assert certain_imports(b"return 1\n", "m.py", check_compile=False)[1] is None
    assert certain_imports(b"def (:\n", "m.py", check_compile=False)[1] is not None


@pytest.mark.parametrize(("src", "name", "want"), [
    ("__version__ = '2.13.0'\n", "__version__", ("const", "2.13.0")),
    ("from torch.torch_version import __version__ as __version__\n", "__version__",
     ("from", 0, "torch.torch_version", "__version__")),
    ("from .version import v as __version__\n", "__version__", ("from", 1, "version", "v")),
    ("from x import v\n__version__ = TorchVersion(v)\n", "__version__", ("name", "v")),
    ("__version__ = 'a'\n__version__ = 'b'\n", "__version__", ("const", "b")),
    ("__version__ = 'a'\nif X:\n    __version__ = 'b'\n", "__version__", None),
    ("__version__ = get()\n", "__version__", None),
    ("cuda = '13.0'\n", "__version__", ("absent",)),
    ("cuda: str\n", "cuda", ("absent",)),       # an annotation alone binds nothing
    ("from x import *\n", "__version__", None),  # may come from the star import
    ("def __getattr__(n):\n    return 1\n", "__version__", None),
    ("globals()['__version__'] = '1'\n", "__version__", None),
    ("a.__version__ = '1'\n", "__version__", ("absent",)),
    ("__version__, x = 'a', 'b'\n", "__version__", ("const", "a")),
    ("__version__, x = f(), 'b'\n", "__version__", None),
    # a label a custom build computes from literals: folded as CPython computes it
    ("_b = '2.12.0'\n__version__ = f'{_b}+cu130'\n", "__version__", ("const", "2.12.0+cu130")),
    ("__version__ = '2.12.0' + '+cu130'\n", "__version__", ("const", "2.12.0+cu130")),
    ("M, m = 2, 12\n__version__ = f'{M}.{m}.0'\n", "__version__", ("const", "2.12.0")),
    ("__version__ = '{}.{}.0'.format(2, 12)\n", "__version__", ("const", "2.12.0")),
    ("__version__ = '%d.%d.0' % (2, 12)\n", "__version__", ("const", "2.12.0")),
    ("__version__ = '.'.join(['2', '12', '0'])\n", "__version__", ("const", "2.12.0")),
    ("__version__ = str(2) + '.12.0'\n", "__version__", ("const", "2.12.0")),
    ("__version__ = f'{2!r:>3}'\n", "__version__", ("const", "  2")),
    # not folded: a name not bound to a literal, a call of the module's own, a width that
    # would make a gigabyte, an environment lookup
    ("__version__ = f'{_b}+cu130'\n", "__version__", None),
    ("def str(x):\n    return ''\n__version__ = str(2) + '.12.0'\n", "__version__", None),
    ("__version__ = f'{1:>999999999}'\n", "__version__", None),
    ("__version__ = '%999999999d' % 1\n", "__version__", None),
    ("__version__ = '{:>999999999}'.format(1)\n", "__version__", None),
    ("import os\n__version__ = os.environ.get('V', '2.12.0')\n", "__version__", None),
])
def test_binding(src: str, name: str, want: object) -> None:
    assert binding(src.encode(), "m.py", name) == want


def test_imports_for_type_checkers_are_no_code_path() -> None:
    """``if TYPE_CHECKING:`` (also ``typing.TYPE_CHECKING``) is false at run time: what
    its body imports no code path runs; its ``else`` and the rest do."""
    from moonpin.readers.pyast.imports import any_imports

    src = (b"import typing\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
           b"    import mori\nelse:\n    import nixl_ep\nif typing.TYPE_CHECKING:\n"
           b"    from deep_ep import Buffer\n"
           b"def f():\n    import mori.ops\n")
    assert any_imports(src, "m.py") == [("typing", 1), ("typing", 2), ("nixl_ep", 6),
                                        ("mori.ops", 10)]
