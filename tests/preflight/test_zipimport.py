"""A zip archive on ``sys.path`` (or a folder in one) is searched as ``zipimport`` searches
it: packages, modules and namespace portions in it, never an extension module; the light
check reads the modules it finds there and judges mooncake imported from one."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from moonpin.preflight.pyimport.metapath import Importer
from tests.lib.checkrun import assert_healthy, run, small_kb
from tests.lib.images import ext_suffix, healthy_image

EXT = ext_suffix()


def _zip(path: Path, members: dict[str, str | bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def _pyc(tmp: Path) -> bytes:
    import py_compile

    (tmp / "b.py").write_text("x = 1\n")
    return Path(py_compile.compile(str(tmp / "b.py"), cfile=str(tmp / "b.pyc"),
                                   doraise=True)).read_bytes()


def _real(paths: list[str], names: list[str]) -> dict[str, list[object]]:
    """What CPython's importer finds for each name over ``paths`` (origin, search)."""
    code = ("import importlib.util as u, json, sys\nsys.path[:] = json.loads(sys.argv[1])\n"
            "out = {}\nfor n in json.loads(sys.argv[2]):\n    try:\n"
            "        s = u.find_spec(n)\n    except ImportError:\n        s = None\n"
            "    out[n] = None if s is None else [s.origin if s.has_location else None, "
            "list(s.submodule_search_locations) if s.submodule_search_locations is not None "
            "else None]\nprint(json.dumps(out))\n")
    proc = subprocess.run([sys.executable, "-S", "-c", code, json.dumps(paths),
                           json.dumps(names)], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def test_the_model_finds_in_an_archive_as_zipimport_does(tmp_path: Path) -> None:
    arc = _zip(tmp_path / "deps.zip", {
        "pkg/__init__.py": "", "pkg/mod.py": "", "pkg/sub/x.py": "", "pkg/dir/": "",
        "pkg/dir/y.py": "",
        f"pkg/ext{EXT}": b"\x7fELF", "single.py": "", "lib/inner/__init__.py": "",
        "bytecode.pyc": _pyc(tmp_path),
    })
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / f"ext2{EXT}").write_bytes(b"\x7fELF")
    paths = [str(arc), str(arc / "lib"), str(tmp_path / "plain")]
    names = ["pkg", "pkg.mod", "pkg.sub", "pkg.sub.x", "pkg.dir", "pkg.dir.y", "pkg.ext",
             "single", "inner",
             "bytecode", "ext2", "nothing"]
    real = _real(paths, names)
    imp = Importer(paths, [])
    for n in names:
        spec = imp.find(n)
        got = None if spec is None else [spec.origin, list(spec.search)
                                         if spec.search is not None else None]
        assert got == real[n], n


@pytest.mark.parametrize(("init", "works"), [
    ("from pkgutil import extend_path\n__path__ = extend_path(__path__, __name__)\n", True),
    ("", False),
])
def test_mooncake_imported_from_an_archive(tmp_path: Path, init: str, works: bool) -> None:
    """A ``.pth`` line puts an archive holding mooncake's Python files ahead of
    site-packages: its ``pg.py`` loads the build only through ``extend_path`` (the
    site-packages folder); without it ``mooncake.pg_2_13_0`` is looked for in the archive,
    where zipimport finds no extension module, and the import fails."""
    site = healthy_image(tmp_path / "site")
    kb = small_kb(tmp_path)
    mc = site / "mooncake"
    arc = _zip(tmp_path / "mc.zip", {
        "mooncake/__init__.py": init, "mooncake/pg.py": (mc / "pg.py").read_text(),
        f"mooncake/pg_2_13_0{EXT}": (mc / f"pg_2_13_0{EXT}").read_bytes()})
    (site / "aa.pth").write_text(f"import sys; sys.path.insert(0, {str(arc)!r})\n")
    r = run(site, kb=kb)
    if works:
        assert_healthy(r)
    else:
        assert r.rc == 1 and "zipimport imports no extension module" in r.line("build"), r.out
    (site / "aa.pth").unlink()
    assert_healthy(run(site, kb=kb))
