"""moonpin.preflight.pyimport.pychain: the Python modules an import certainly runs, judged as the
real importer judges them.

The differential test writes random module trees (packages, namespace portions, pkgutil
``extend_path`` packages over two ``sys.path`` folders, relative imports, guarded and
conditional imports, missing modules, modules that do not compile or that raise) and holds
the walker's verdict to what ``import`` does in a fresh interpreter (``-I -S``, only those
folders on ``sys.path``): a problem found exactly when the import fails. Every statement the
generator writes is one the walker models, so a disagreement is a bug of the walker.
``MOONPIN_PYCHAIN_CASES`` raises the number of trees (default 40, seeded)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from importlib import machinery
from pathlib import Path

import pytest

from moonpin.preflight.access.confined import NOWHERE
from moonpin.preflight.pyimport import pychain

VERSION = (sys.version_info[0], sys.version_info[1])
SUFFIXES = tuple(machinery.EXTENSION_SUFFIXES)


def _walk(paths: list[Path], module: str, complete: bool = True) -> list[pychain.Problem]:
    return pychain.walk([str(p) for p in paths], module, VERSION, SUFFIXES, None, complete)[0]


def _real(paths: list[Path], module: str) -> tuple[bool, str]:
    code = ("import sys; sys.path[:0] = " + repr([str(p) for p in paths])
            + f"; import {module}")
    proc = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", code], capture_output=True,
                          text=True, timeout=60)
    return proc.returncode == 0, (proc.stderr.strip().splitlines() or [""])[-1]


def _w(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONPIN_CACHE_DIR", str(tmp_path / "cache"))


def _tree(rng: random.Random, root: Path) -> tuple[list[Path], str]:
    """A random tree under ``root``: the folders for sys.path and the module to import."""
    a, b = root / "a", root / "b"
    names = [f"zq{i}" for i in range(rng.randint(3, 7))]
    broken = rng.random() < 0.6
    # zq0 is a package with the entry module; others are modules or packages
    kinds = {n: rng.choice(["module", "package", "namespace", "extend"]) for n in names}
    kinds["zq0"] = rng.choice(["package", "extend"])
    bodies: dict[str, list[str]] = {n: [] for n in names}
    sub: dict[str, list[str]] = {n: [] for n in names}

    def ref() -> str:
        n = rng.choice(names)
        if kinds[n] != "module" and rng.random() < 0.5:
            s = f"s{rng.randint(0, 2)}"
            sub[n].append(s)
            return f"{n}.{s}"
        return n

    for n in names:
        for _ in range(rng.randint(0, 3)):
            target = ref()
            form = rng.choice(["import", "from", "if", "guard", "typecheck", "finally",
                               "class", "def", "import_module"])
            stmt = {
                "import": f"import {target}",
                "from": (f"from {target.rpartition('.')[0]} import {target.rpartition('.')[2]}"
                         if "." in target else f"import {target} as _x"),
                "if": f"if len(__name__) > 2:\n    import {target}\nelse:\n    import {target}",
                "guard": f"try:\n    import {target}\nexcept ImportError:\n    pass",
                "typecheck": f"TYPE_CHECKING = False\nif TYPE_CHECKING:\n    import {target}",
                "finally": f"try:\n    pass\nfinally:\n    import {target}",
                "class": f"class K:\n    import {target}",
                "def": f"def f():\n    import {target}",
                "import_module": f"import importlib\nimportlib.import_module({target!r})",
            }[form]
            bodies[n].append(stmt)
    if broken:
        victim = rng.choice(names)
        how = rng.choice(["missing-module", "syntax", "raise", "compiler", "missing-sub"])
        if how == "missing-module":
            bodies[victim].append("import zqmissing")
        elif how == "syntax":
            bodies[victim].append("def (:")
        elif how == "raise":
            bodies[victim].append("raise ImportError('unsupported here')")
        elif how == "compiler":
            bodies[victim].append("return 1")
        else:
            pkg = rng.choice([n for n in names if kinds[n] != "module"] or ["zq0"])
            kinds[pkg] = "package" if kinds[pkg] == "module" else kinds[pkg]
            bodies[victim].append(f"import {pkg}.gone")
    for n in names:
        body = "\n".join(bodies[n]) + "\n"
        kind = kinds[n]
        if kind == "module":
            _w(a / f"{n}.py", body)
        elif kind == "package":
            _w(a / n / "__init__.py", body)
        elif kind == "namespace":  # a PEP 420 portion in each folder, no code of its own
            (a / n).mkdir(parents=True, exist_ok=True)
            (b / n).mkdir(parents=True, exist_ok=True)
        else:  # pkgutil-style: its submodules may live in the second folder
            _w(a / n / "__init__.py", "from pkgutil import extend_path\n"
               "__path__ = extend_path(__path__, __name__)\n" + body)
            (b / n).mkdir(parents=True, exist_ok=True)
        for s in set(sub[n]):
            where = b if kind in ("namespace", "extend") and rng.random() < 0.5 else a
            _w(where / n / f"{s}.py", f"from .. import {n} as _p\n" if rng.random() < 0.3
               else "X = 1\n")
    entry = "zq0.entry"
    _w((a / "zq0" / "entry.py"), "from . import *\n" if rng.random() < 0.1 else
       f"import {ref()}\n")
    return [a, b], entry


N = int(os.environ.get("MOONPIN_PYCHAIN_CASES", "40"))


@pytest.mark.parametrize("seed", range(N))
def test_the_walker_agrees_with_the_importer(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    paths, module = _tree(rng, tmp_path / "t")
    ok, err = _real(paths, module)
    problems = _walk(paths, module)
    said = "; ".join(f"{p.module}: {p.detail} (by {p.by})" for p in problems)
    assert ok is (not problems), f"import {'works' if ok else 'fails: ' + err}; walker: {said}"


def test_a_missing_module_names_its_importer(tmp_path: Path) -> None:
    _w(tmp_path / "zq" / "__init__.py", "from zq import inner\n")
    _w(tmp_path / "zq" / "inner.py", "import os\n\nimport zq.gone\n")
    (p,) = _walk([tmp_path], "zq")
    assert p.module == "zq.gone" and p.file is None and p.by.endswith("inner.py:3")


def test_a_top_level_module_found_nowhere_is_missing_only_on_a_whole_sys_path(
        tmp_path: Path) -> None:
    """With ``--site-packages`` folders the module may be in another folder of the image."""
    _w(tmp_path / "zq" / "__init__.py", "import zqelsewhere\nimport zq.gone\n")
    assert {p.module for p in _walk([tmp_path], "zq")} == {"zqelsewhere", "zq.gone"}
    assert {p.module for p in _walk([tmp_path], "zq", complete=False)} == {"zq.gone"}


def test_the_standard_library_is_the_interpreters(tmp_path: Path) -> None:
    _w(tmp_path / "zq" / "__init__.py", "import os, json.decoder\nimport importlib.util\n")
    assert _walk([tmp_path], "zq") == []


def test_what_a_package_computes_as_its_path_is_not_judged(tmp_path: Path) -> None:
    _w(tmp_path / "zq" / "__init__.py", "__path__ = [_where()]\nimport zq.elsewhere\n")
    assert _walk([tmp_path], "zq") == []


def test_sources_past_the_budget_are_found_not_read(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _w(tmp_path / "zq" / "__init__.py", "import zq.big\n")
    _w(tmp_path / "zq" / "big.py", "import zq.gone\n" + "x = 1\n" * 5000)
    assert [p.module for p in _walk([tmp_path], "zq")] == ["zq.gone"]
    monkeypatch.setattr(pychain, "BUDGET", 1000)
    assert _walk([tmp_path], "zq") == []  # big.py is found, and not read


def test_a_valid_bytecode_cache_spares_the_compile(tmp_path: Path) -> None:
    """CPython's own .pyc of this very source says it compiled; without one the walker
    compiles it (``return`` outside a function is refused only by the compiler)."""
    src = tmp_path / "zq" / "__init__.py"
    _w(src, "import os\n")
    import py_compile

    py_compile.compile(str(src), doraise=True)
    assert pychain._cached_compiled(str(src), src.stat(), VERSION, NOWHERE)
    src.write_text("import os  \n")  # another size: the cache is stale
    assert not pychain._cached_compiled(str(src), src.stat(), VERSION, NOWHERE)


def test_attribute_follows_torch_version_as_torch_binds_it(tmp_path: Path) -> None:
    t = tmp_path / "torch"
    _w(t / "__init__.py", "from torch.torch_version import __version__ as __version__\n")
    _w(t / "torch_version.py", "from torch.version import __version__ as internal_version\n"
       "class TorchVersion(str):\n    pass\n__version__ = TorchVersion(internal_version)\n")
    _w(t / "version.py", "__version__ = '2.13.0a0+gitabc.nv25.10'\ncuda = '13.0'\n")
    got = pychain.attribute([str(tmp_path)], "torch", "__version__", VERSION, SUFFIXES)
    assert got[0] == "2.13.0a0+gitabc.nv25.10" and got[1] is None and len(got[2]) == 5
    # the files the answer depends on: the four modules and version.py's bytecode cache
    assert got[2][-1].endswith(f"__pycache__/version.cpython-{VERSION[0]}{VERSION[1]}.pyc")
    (t / "version.py").write_text("cuda = '13.0'\n")
    value, problem, _ = pychain.attribute([str(tmp_path)], "torch", "__version__", VERSION,
                                          SUFFIXES)
    assert value is None and problem is not None and "defines no __version__" in problem
    ok, err = _real([tmp_path], "torch")
    assert not ok and "cannot import name '__version__'" in err
    (t / "version.py").unlink()
    value, problem, _ = pychain.attribute([str(tmp_path)], "torch", "__version__", VERSION,
                                          SUFFIXES)
    assert problem is not None and "no module 'torch.version'" in problem
    (t / "version.py").write_text("import os\n__version__ = os.environ['V']\n")
    assert pychain.attribute([str(tmp_path)], "torch", "__version__", VERSION,
                             SUFFIXES)[:2] == (None, None)  # computed: not followed


@pytest.mark.parametrize(("text", "value"), [
    ("FLAG = True\n", True),
    ("FLAG = 1\nFLAG = 2  # the last\n", 2),
    ("FLAG: bool = False\n", False),
    ("FLAG = ['a', 1]\n", ["a", 1]),
    ("FLAG = compute()\n", "unknown"),
    ("FLAG = 1\nif x:\n    FLAG = 2\n", "unknown"),  # assigned under a condition
    ("FLAG = 1\ndef FLAG():\n    pass\n", "unknown"),
    ("FLAG == 1\nFLAGS = 3\nMY_FLAG = 4\n", "unknown"),  # no assignment of the name itself
    ("X = 1\r\nFLAG = 5\r\n", 5),
    ("\x0cFLAG = 6\n", 6),  # a form feed ends a line, as str.splitlines says
    ("A = 'FLAG'; FLAG = 7\n", "unknown"),
    ("", "unknown"),
])
def test_a_lazy_modules_constant_is_read_from_its_text(tmp_path: Path, text: str,
                                                       value: object) -> None:
    """A module the chain does not walk (torch's submodules) answers a name with the
    literal a column-0 line assigns it, unknown when anything else assigns or defines it."""
    from moonpin.preflight.loader import ldproc
    from moonpin.preflight.pyimport.pyeval import UNKNOWN, ModuleValue
    from moonpin.preflight.pyimport.pyrun import Chain

    mod = tmp_path / "m.py"
    mod.write_text(text, newline="")
    chain = Chain(ldproc.Process(machine=os.uname().machine, owned=lambda p: False),
                  [str(tmp_path)], request="", suffixes=(".so",))
    got = chain.module_attr(ModuleValue("m", "lazy", str(mod), None, 9), "FLAG")
    assert (got is UNKNOWN) if value == "unknown" else got == value
    assert str(mod) in chain.trace
