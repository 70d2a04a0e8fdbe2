"""The light check judges the Python modules ``import mooncake.pg`` runs before its build is
loaded (mooncake's ``__init__``, the loader's own imports, ``import torch``), and the label
``torch.__version__`` as the import binds it, on throwaway images run as a worker would.

Each failing image has its control: the same image repaired passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lib.checkrun import assert_healthy, run, small_kb
from tests.lib.images import healthy_image

REINSTALL_TORCH = "pip install --force-reinstall --no-deps 'torch==2.13.0,!=2.13.0+cpu'"
REINSTALL_MOONCAKE = ("pip install --force-reinstall --no-deps "
                      "'mooncake-transfer-engine-cuda13==0.3.13.post1'")


@pytest.fixture
def kb(tmp_path: Path) -> Path:
    return small_kb(tmp_path)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return healthy_image(tmp_path / "site")


def _fails(site: Path, kb: Path, check: str, *said: str, fix: str | None = None) -> None:
    r = run(site, kb=kb)
    assert r.rc == 1, r.out
    line = r.line(check)
    assert line.startswith("fail"), r.out
    for s in said:
        assert s in line, line
    if fix is not None:
        assert fix in r.out


def test_the_images_own_chain_is_found_and_read(site: Path, kb: Path) -> None:
    r = run(site, kb=kb)
    assert_healthy(r)
    assert r.line("import chain").startswith("pass")


@pytest.mark.parametrize(("damage", "said"), [
    (lambda t: (t / "__init__.py").unlink(), "no __init__.py"),
    (lambda t: (t / "version.py").unlink(), "no module 'torch.version'"),
    (lambda t: (t / "torch_version.py").unlink(), "no module 'torch.torch_version'"),
    (lambda t: (t / "version.py").write_text("__version__ = (\n"), "does not compile"),
    (lambda t: (t / "version.py").write_text("cuda = '13.0'\n"), "defines no __version__"),
])
def test_a_torch_that_cannot_be_imported(site: Path, kb: Path, damage: object,
                                         said: str) -> None:
    good = {p: p.read_bytes() for p in (site / "torch").glob("*.py")}
    damage(site / "torch")  # type: ignore[operator]
    _fails(site, kb, "torch", "`import torch` fails", said, fix=REINSTALL_TORCH)
    for p in (site / "torch").glob("*.py"):
        p.unlink()
    for p, data in good.items():
        p.write_bytes(data)
    assert_healthy(run(site, kb=kb))


def test_a_label_the_import_computes_is_said(site: Path, kb: Path) -> None:
    """A label computed by a call of the module's own: not evaluated, said."""
    (site / "torch" / "version.py").write_text(
        "def _v():\n    return ''.join(reversed('0.31.2'))\n__version__ = _v()\n"
        "cuda = '13.0'\n")
    r = run(site, kb=kb)
    assert r.rc == 0, r.out
    assert r.line("torch label").startswith("warn") and "computed" in r.line("torch label")


@pytest.mark.parametrize(("code", "env", "build"), [
    ("import os\n__version__ = os.environ.get('MOONPIN_T_TV', '2.13.0')\n", {}, "pg_2_13_0"),
    ("import os\n__version__ = os.environ.get('MOONPIN_T_TV', '2.13.0')\n",
     {"MOONPIN_T_TV": "2.12.0"}, "pg_2_12_0"),
    ("import sys\nif sys.version_info >= (3, 8):\n    __version__ = '2.12.0'\nelse:\n"
     "    __version__ = '2.13.0'\n", {}, "pg_2_12_0"),
])
def test_a_label_computed_from_the_environment_or_python(site: Path, kb: Path, code: str,
                                                         env: dict[str, str],
                                                         build: str) -> None:
    """version.py's label from an environment variable, or under a condition on the Python
    version: evaluated as the import would (in the worker's environment), never run."""
    (site / "torch" / "version.py").write_text(code + "cuda = '13.0'\n")
    r = run(site, kb=kb, env=env)
    assert build in r.line("build"), r.out
    assert "torch label" not in r.out


@pytest.mark.parametrize("expr", ["f'{_base}+cu130'", "_base + '+cu130'",
                                  "'{}+cu130'.format(_base)", "'+'.join([_base, 'cu130'])"])
def test_a_label_computed_from_literals_is_the_label(site: Path, kb: Path, expr: str) -> None:
    """A custom build's version.py computing its label (an f-string, ``+ suffix``) from
    literals: the loader maps that label, here another release's, so its build is judged."""
    (site / "torch" / "version.py").write_text(
        f"_base = '2.12.0'\n__version__ = {expr}\ncuda = '13.0'\n")
    r = run(site, kb=kb)
    assert "torch 2.12.0" in r.line("torch"), r.out
    assert "pg_2_12_0" in r.line("build"), r.out
    assert "torch label" not in r.out
    (site / "torch" / "version.py").write_text(
        f"_base = '2.13.0'\n__version__ = {expr}\ncuda = '13.0'\n")
    r = run(site, kb=kb)
    assert "pg_2_13_0" in r.line("build"), r.out


def test_the_label_is_what_the_import_binds(site: Path, kb: Path) -> None:
    """torch/__init__ binding its own literal wins over what version.py holds: that file is
    then never read by the import, and the loader maps __init__'s label."""
    (site / "torch" / "__init__.py").write_text("__version__ = '2.12.0+cu130'\n")
    r = run(site, kb=kb)
    assert "torch 2.12.0+cu130" in r.line("torch"), r.out
    assert "pg_2_12_0" in r.line("build")


@pytest.mark.parametrize(("init", "said"), [
    ("raise ImportError('built without RDMA')\n", "raises ImportError: built without RDMA"),
    ("from mooncake import gone_helpers\n", "gone_helpers"),
    ("import mooncake.gone\n", "No module named 'mooncake.gone'"),
    ("def broken(:\n", "mooncake/__init__.py cannot be read as Python: invalid syntax"),
    ("try:\n    import mooncake.helper\nexcept ImportError:\n    pass\n",
     "mooncake/helper.py cannot be read as Python"),  # a SyntaxError is not an ImportError
])
def test_a_mooncake_package_that_cannot_be_imported(site: Path, kb: Path, init: str,
                                                   said: str) -> None:
    (site / "mooncake" / "helper.py").write_text("def (\n")
    (site / "mooncake" / "__init__.py").write_text(init)
    _fails(site, kb, "import chain", "`import mooncake.pg` fails", said,
           fix=REINSTALL_MOONCAKE)
    (site / "mooncake" / "__init__.py").write_text("")
    assert_healthy(run(site, kb=kb))


@pytest.mark.parametrize("init", [
    "try:\n    import mooncake.store\nexcept ImportError:\n    store = None\n",
    "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    import mooncake.gone\n",
    "def lazy():\n    import mooncake.gone\n",
    "from pkgutil import extend_path\n__path__ = extend_path(__path__, __name__)\n",
])
def test_what_may_not_run_does_not_fail(site: Path, kb: Path, init: str) -> None:
    (site / "mooncake" / "__init__.py").write_text(init)
    r = run(site, kb=kb)
    assert_healthy(r)


def test_the_loaders_own_imports(site: Path, kb: Path) -> None:
    loader = site / "mooncake" / "pg.py"
    text = loader.read_text()
    loader.write_text("from mooncake import native_helpers\n" + text)
    _fails(site, kb, "import chain", "has no native_helpers", "imported by mooncake/pg.py:1")
    (site / "mooncake" / "native_helpers.py").write_text("X = 1\n")
    assert_healthy(run(site, kb=kb))


def test_a_top_level_module_missing_from_site_packages_folders_may_be_elsewhere(
        site: Path, kb: Path) -> None:
    """``--site-packages`` names folders, not the whole ``sys.path``: a top-level module in
    none of them may be in another (the interpreter's own, a system folder)."""
    loader = site / "mooncake" / "pg.py"
    loader.write_text("import mooncake_native_helpers\n" + loader.read_text())
    assert_healthy(run(site, kb=kb))


def test_a_module_extend_path_finds_in_a_second_folder(site: Path, kb: Path,
                                                       tmp_path: Path) -> None:
    """mooncake's ``__init__`` runs ``__path__ = extend_path(__path__, __name__)``: a
    ``mooncake/`` folder on ``sys.path`` after site-packages (a ``.pth`` path line) is part
    of the package, so ``pg.py`` moved there is still ``mooncake.pg``; without the
    ``extend_path`` line it is not."""
    init = site / "mooncake" / "__init__.py"
    init.write_text("from pkgutil import extend_path\n\n__path__ = extend_path(__path__, "
                    "__name__)\n")
    other = tmp_path / "other" / "mooncake"
    other.mkdir(parents=True)
    (site / "mooncake" / "pg.py").rename(other / "pg.py")
    (site / "other.pth").write_text(f"{other.parent}\n")
    r = run(site, kb=kb)
    assert r.line("import chain").startswith("pass"), r.out
    init.write_text("")
    r = run(site, kb=kb)
    assert r.rc == 1 and "mooncake.pg" in r.out, r.out


@pytest.mark.parametrize("cond", ["'MOONPIN_T_FLAG' in os.environ",
                                  "os.environ['MOONPIN_T_FLAG'] == '1'",
                                  "os.environ.get('MOONPIN_T_FLAG') is not None",
                                  "not 'MOONPIN_T_FLAG' not in os.environ"])
def test_torch_raising_on_an_environment_variable(site: Path, kb: Path, cond: str) -> None:
    """torch's ``__init__`` raising when a variable is set: the import fails in the
    environment that sets it, and works in one that does not."""
    init = site / "torch" / "__init__.py"
    init.write_text(f"import os\nif {cond}:\n    raise ImportError('flag set')\n"
                    + init.read_text())
    r = run(site, kb=kb, env={"MOONPIN_T_FLAG": "1"})
    assert r.rc == 1 and "flag set" in r.line("import chain"), r.out
    assert_healthy(run(site, kb=kb))


@pytest.mark.parametrize(("file", "code", "shadows"), [
    ("sitecustomize.py", "import sys\nsys.path.insert(0, {d!r})\n", True),
    ("sitecustomize.py", "import sys, os\nsys.path[:0] = [os.path.join({d!r})]\n", True),
    ("sitecustomize.py", "import sys\nsys.path.append({d!r})\n", False),  # after ours
    ("sitecustomize.py", "import sys\nraise RuntimeError('x')\nsys.path.insert(0, {d!r})\n",
     False),  # site prints the error and goes on; the insert never ran
    ("zz.pth", "import sys; sys.path.insert(0, {d!r})\n", True),
    ("zz.pth", "import sys; sys.path.extend([{d!r}])\n", False),
])
def test_a_path_the_site_code_inserts(site: Path, kb: Path, tmp_path: Path, file: str,
                                      code: str, shadows: bool) -> None:
    """``site`` runs ``.pth`` ``import`` lines and ``sitecustomize``: a folder they put
    ahead of site-packages holding a ``mooncake`` whose ``pg`` raises is what the import
    finds (read for ``--site-packages`` too, never run)."""
    shadow = tmp_path / "shadow" / "mooncake"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    (shadow / "pg.py").write_text("raise ImportError('the shadow pg')\n")
    (site / file).write_text(code.format(d=str(shadow.parent)))
    r = run(site, kb=kb)
    if shadows:
        assert r.rc == 1 and "shadow/mooncake/pg.py" in r.line("import chain"), r.out
    else:
        assert_healthy(r)


def test_a_remembered_computed_label_follows_the_environment(site: Path, kb: Path) -> None:
    (site / "torch" / "version.py").write_text(
        "import os\n__version__ = os.environ.get('MOONPIN_T_TV', '2.13.0')\ncuda = '13.0'\n")
    for env, build in (({}, "pg_2_13_0"), ({"MOONPIN_T_TV": "2.12.0"}, "pg_2_12_0"),
                       ({}, "pg_2_13_0")):
        r = run(site, kb=kb, env=env)
        assert build in r.line("build"), (env, r.out)


@pytest.mark.parametrize(("line", "found"), [
    ("import os", True),
    ("import nonexistent_module_moonpin", False),  # ModuleNotFoundError
    ("import\tnonexistent_module_moonpin", False),
    ("import sys; raise SystemError('no')", False),
])
def test_a_pth_line_that_raises_hides_the_rest_of_its_file(site: Path, kb: Path,
                                                           tmp_path: Path, line: str,
                                                           found: bool) -> None:
    """``site`` ignores a ``.pth`` file's lines after an ``import`` line that raises: a
    path line there (the folder holding mooncake's ``pg.py``, part of the package through
    ``extend_path``) is never added."""
    init = site / "mooncake" / "__init__.py"
    init.write_text("from pkgutil import extend_path\n\n__path__ = extend_path(__path__, "
                    "__name__)\n")
    other = tmp_path / "other" / "mooncake"
    other.mkdir(parents=True)
    (site / "mooncake" / "pg.py").rename(other / "pg.py")
    (site / "other.pth").write_text(f"{line}\n{other.parent}\n")
    r = run(site, kb=kb)
    if found:
        assert_healthy(r)
    else:
        assert r.rc == 1 and "mooncake.pg" in r.out, r.out


@pytest.mark.parametrize("cond", [
    "sys.maxsize > 2**32", "sys.version_info.major == 3", "sys.version_info.minor >= 8",
    "sys.implementation.name == 'cpython'", "platform.python_implementation() == 'CPython'",
    "os.getuid() >= 0", "(os.cpu_count() or 0) > 0", "1 << 31 > 0",
])
def test_torch_raising_under_a_condition_the_worker_meets(site: Path, kb: Path,
                                                          cond: str) -> None:
    """What a worker's interpreter and machine say of themselves (64-bit, CPython, its
    version's parts, its user, its CPUs), as the evaluated ``torch/__init__`` asks."""
    init = site / "torch" / "__init__.py"
    text = init.read_text()
    init.write_text(f"import os, platform, sys\nif {cond}:\n    raise ImportError('met')\n"
                    + text)
    r = run(site, kb=kb)
    assert r.rc == 1 and "met" in r.line("import chain"), r.out
    init.write_text(f"import os, platform, sys\nif not ({cond}):\n    raise ImportError('met')\n"
                    + text)
    assert_healthy(run(site, kb=kb))
