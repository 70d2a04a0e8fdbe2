"""The code an import runs by calling into other modules (issue 39, the libbz2 root:
``deep_ep/utils/math.py``'s ``@torch.compile`` runs ``torch.compile``'s body, whose calls and
imports reach ``networkx`` and its ``import bz2``), followed from the files
(:func:`moonpin.preflight.pyimport.atimport.follow`): which standard-library modules it
certainly imports, uncaught, and the way there. Throwaway site folders; what the real
import does with these trees is checked in ``test_stdlib_natives.py``."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from moonpin.preflight.access.confined import NOWHERE
from moonpin.preflight.pyimport import atimport
from moonpin.preflight.pyimport.metapath import Importer


@pytest.fixture(autouse=True)
def _hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONPIN_CACHE_DIR", str(tmp_path / "cache"))


def _site(tmp_path: Path, files: dict[str, str]) -> Path:
    site = tmp_path / "site"
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(textwrap.dedent(text))
    return site


def _follow(site: Path, start: str = "pkg", **kw: object) -> tuple[dict[str, list[str]],
                                                                    str | None]:
    imp = Importer([str(site)], [str(site)], None, (".so",))
    got: dict[str, list[str]] = {}

    def std(name: str, by: str, file: str, route: list[str]) -> None:
        got[name] = route

    why = atimport.follow(imp, [start], std, within=NOWHERE, roots=[str(site)], **kw)  # type: ignore[arg-type]
    return got, why


#: the decorator module of the cases: its function imports a submodule, whose top level
#: imports bz2 (torch.compile -> torch._dynamo… -> networkx -> bz2, in small)
HELPER = {
    "helper/__init__.py": """
        def deco(fn=None, **kw):
            from helper import compiler
            return fn
        def factory(**kw):
            return deco
        """,
    "helper/compiler.py": "import json\nfrom .graphs import plot\n",
    "helper/graphs.py": "import bz2\n\ndef plot():\n    pass\n",
}


@pytest.mark.parametrize("init", [
    "from helper import deco\n\n@deco\ndef f():\n    pass\n",
    "import helper\n\n@helper.deco(dynamic=True)\ndef f():\n    pass\n",
    "from helper import deco as d\n\nclass C:\n    @d\n    def m(self):\n        pass\n",
    "import helper as h\n\nh.deco()\n",
    "from helper import deco\n\ndef g(x=deco()):\n    pass\n",
    "from . import sub\n",  # through a submodule, whose module-level call runs it
])
def test_a_call_at_import_reaches_what_the_called_function_imports(
        tmp_path: Path, init: str) -> None:
    site = _site(tmp_path, {**HELPER, "pkg/__init__.py": init,
                            "pkg/sub.py": "from helper import deco\nX = deco(len)\n"})
    got, why = _follow(site)
    assert why is None
    assert "bz2" in got, got
    route = got["bz2"]
    assert route[-1] == "helper/graphs.py:1 imports bz2", route
    assert any(" calls " in s for s in route), route
    assert "json" in got  # what the import certainly runs on the way, too


@pytest.mark.parametrize("init", [
    # the call's failure is caught where it is made
    "try:\n    from helper import deco\n    deco()\nexcept ImportError:\n    deco = None\n",
    # a call under a condition may not run
    "import os\nfrom helper import deco\nif os.environ.get('X'):\n    deco()\n",
    # defined, never called at import
    "from helper import deco\n\ndef later():\n    deco()\n",
    # through a value: a method of an object is not followed
    "import helper\n\nobj = helper.factory()\nobj.deco()\n",
    # a stdlib function is the interpreter's, not read
    "import functools\n\n@functools.lru_cache()\ndef f():\n    pass\n",
])
def test_what_may_not_run_or_is_caught_is_not_handed_on(tmp_path: Path, init: str) -> None:
    site = _site(tmp_path, {**HELPER, "pkg/__init__.py": init})
    got, why = _follow(site)
    assert why is None
    assert "bz2" not in got, got


def test_an_except_importerror_inside_the_called_function_is_honoured(tmp_path: Path) -> None:
    site = _site(tmp_path, {
        "helper/__init__.py": "def deco(fn=None):\n    try:\n        import bz2\n"
                              "    except ImportError:\n        bz2 = None\n    return fn\n",
        "pkg/__init__.py": "from helper import deco\n\n@deco\ndef f():\n    pass\n"})
    assert "bz2" not in _follow(site)[0]
    # an except of another kind does not catch it
    (site / "helper/__init__.py").write_text(
        "def deco(fn=None):\n    try:\n        import bz2\n    except KeyError:\n"
        "        pass\n    return fn\n")
    atimport._READ.clear()
    assert "bz2" in _follow(site)[0]


def test_recursion_and_import_loops_end(tmp_path: Path) -> None:
    """A function calling itself, two calling each other, two modules importing each other
    and calling into each other at import: each is walked once."""
    site = _site(tmp_path, {
        "a/__init__.py": "import b\n\ndef f(n=0):\n    return f(n + 1)\n\n"
                         "def g():\n    import b\n    b.h()\n\nf()\ng()\n",
        "b/__init__.py": "import a\n\ndef h():\n    a.g()\n    import lzma\n\nh()\n",
    })
    got, why = _follow(site, "a")
    assert why is None
    assert list(got) == ["lzma"], got


def test_re_exports_are_followed_to_the_function(tmp_path: Path) -> None:
    """``torch.compile`` -> ``torch._dynamo.optimize`` (``from .eval_frame import optimize``)
    -> ``_optimize`` -> ``get_compiler_fn``'s ``from .repro.after_dynamo import …``."""
    site = _site(tmp_path, {
        "tt/__init__.py": "def compile(model=None, **kw):\n    import tt.dyn\n"
                          "    return tt.dyn.optimize(kw)(model)\n",
        "tt/dyn/__init__.py": "from .frame import optimize\n",
        "tt/dyn/frame.py": "import os\n\ndef optimize(*a):\n"
                           "    if os.environ.get('OFF'):\n        return None\n"
                           "    return _optimize(a)\n\n"
                           "def _optimize(a):\n    get_fn(a)\n\n"
                           "def get_fn(a):\n    from .repro import wrap\n    return wrap\n",
        "tt/dyn/repro.py": "import bz2\n\ndef wrap():\n    pass\n",
        "pkg/__init__.py": "import tt\n\n@tt.compile(dynamic=True)\ndef f():\n    pass\n",
    })
    got, _ = _follow(site)
    assert got["bz2"][-1] == "tt/dyn/repro.py:1 imports bz2"
    calls = [s.split(" calls ")[1] for s in got["bz2"] if " calls " in s]
    assert calls == ["tt.compile", "tt.dyn.optimize", "_optimize", "get_fn"], got["bz2"]


def test_a_bound_is_said(tmp_path: Path) -> None:
    files = {f"m{i}.py": f"import m{i + 1}\n" for i in range(30)}
    site = _site(tmp_path, {**files, "m30.py": "import bz2\n"})
    assert "bz2" in _follow(site, "m0")[0]
    got, why = _follow(site, "m0", bounds=atimport.Bounds(modules=10))
    assert got == {} and why is not None and "as far as 10 modules (m10 not read)" in why


@pytest.mark.parametrize("text", ["def f(:\n", "\0", "x = (" * 300 + ")" * 300 + "\n"])
def test_a_file_it_cannot_read_claims_nothing(tmp_path: Path, text: str) -> None:
    site = _site(tmp_path, {"pkg/__init__.py": "from helper import deco\ndeco()\n",
                            "helper/__init__.py": text})
    got, why = _follow(site)
    assert got == {} and why is None


def test_skip_is_shared_between_walks(tmp_path: Path) -> None:
    """A module the import of another package walked already is not read again (the
    check's extensions share the torch process's walk)."""
    site = _site(tmp_path, {**HELPER, "pkg/__init__.py": "import helper.graphs\n",
                            "other/__init__.py": "import helper.graphs\n"})
    skip: set[str] = set()
    assert "bz2" in _follow(site, "pkg", skip=skip)[0]
    assert {"pkg", "helper", "helper.graphs"} <= skip
    assert _follow(site, "other", skip=skip)[0] == {}


@pytest.mark.parametrize("kind", ["fifo", "zero", "huge"])
def test_hostile_module_files_end_and_claim_nothing(tmp_path: Path, kind: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A FIFO, a link to ``/dev/zero``, a file past the source cap where the called module
    is: the walk neither blocks nor reads without end, and claims nothing of it."""
    import os

    site = _site(tmp_path, {"pkg/__init__.py": "from helper import deco\ndeco()\n",
                            "helper/__init__.py": "def deco():\n    from . import impl\n"})
    target = site / "helper" / "impl.py"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "zero":
        target.symlink_to("/dev/zero")
    else:
        monkeypatch.setattr(atimport, "_CAP_SOURCE", 1 << 10)
        target.write_text("import bz2\n" + "#" * (2 << 10) + "\n")
    got, why = _follow(site)
    assert got == {} and why is None


def test_a_bound_on_calls_is_said(tmp_path: Path) -> None:
    chain = "".join(f"def f{i}():\n    f{i + 1}()\n\n" for i in range(50))
    site = _site(tmp_path, {"pkg/__init__.py": chain + "def f50():\n    import bz2\n\nf0()\n"})
    assert "bz2" in _follow(site)[0]
    got, why = _follow(site, bounds=atimport.Bounds(calls=20))
    assert got == {} and why is not None and "as far as 20 calls (pkg.f20 not read)" in why


def test_a_body_this_python_cannot_parse_does_not_hide_the_top_level(tmp_path: Path) -> None:
    """A function body in a newer Python's syntax (PEP 701's f-strings are 3.12's; a stray
    token stands for them) is never parsed: the module's top level is still read (before,
    the whole module was read as nothing)."""
    site = _site(tmp_path, {"pkg/__init__.py": "import json\n\ndef f(d):\n"
                                               "    return f\"{d[\"k\"]}\" $\n\nimport bz2\n"})
    got, why = _follow(site)
    assert why is None and "bz2" in got, got
