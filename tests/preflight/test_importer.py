"""Where the check finds SGLang (and mooncake, torch): :mod:`moonpin.preflight.pyimport.importer`
against the
layouts the editable installers write, copied from real installs (pip 23.2 with setuptools
84.2, hatchling with and without ``dev-mode-exact``, scikit-build-core 1.1 in redirect mode),
and end to end: the check names the editable folder and judges a checkout ahead of every
release by its sources, as ``import sglang`` in that environment finds them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from moonpin.preflight.env.target import from_site_packages
from moonpin.preflight.pyimport import importer
from tests.lib.checkrun import ROOT, run, small_kb
from tests.lib.images import (
    SGLANG_ELASTIC,
    SGLANG_PARALLEL_STATE,
    add_dist,
    add_mooncake,
    add_torch,
)

DEV = "0.5.99.dev0"

#: setuptools' generated finder, as ``_finder_template`` in
#: setuptools/command/editable_wheel.py writes it (its lookup, trimmed to what a top-level
#: package needs; install() verbatim): it runs in the venv tests below.
SETUPTOOLS_FINDER = '''from __future__ import annotations
import sys
from importlib.machinery import ModuleSpec, PathFinder
from importlib.util import spec_from_file_location
from pathlib import Path

MAPPING: dict[str, str] = {mapping!r}
NAMESPACES: dict[str, list[str]] = {{}}
PATH_PLACEHOLDER = '__editable__.sglang-{version}.finder' + ".__path_hook__"


class _EditableFinder:  # MetaPathFinder
    @classmethod
    def find_spec(cls, fullname: str, path=None, target=None) -> ModuleSpec | None:
        if fullname in MAPPING:
            init = Path(MAPPING[fullname], "__init__.py")
            return spec_from_file_location(fullname, init)
        parent, _, child = fullname.rpartition(".")
        if parent and parent in MAPPING:
            return PathFinder.find_spec(fullname, path=[MAPPING[parent]])
        return None


def install():
    if not any(finder == _EditableFinder for finder in sys.meta_path):
        sys.meta_path.append(_EditableFinder)

    if not NAMESPACES:
        return
'''


def write_sglang_sources(pkg: Path, version: str = DEV, extra_name: str = "") -> None:
    """SGLang's elastic-EP sources (``python/sglang/`` of a checkout); ``extra_name`` is
    imported from ``mooncake.pg`` besides the released names (no release has it)."""
    names = "MooncakeBackendOptions" + (f", {extra_name}" if extra_name else "")
    files = {
        "__init__.py": f'__version__ = "{version}"\n',
        "srt/__init__.py": "", "srt/distributed/__init__.py": "",
        "srt/distributed/parallel_state.py": SGLANG_PARALLEL_STATE.format(module="pg").replace(
            "import MooncakeBackendOptions", f"import {names}"),
        "srt/elastic_ep/__init__.py": "",
        "srt/elastic_ep/elastic_ep.py": SGLANG_ELASTIC.format(module="pg"),
        "srt/server_args.py": 'CHOICES = ["none", "mooncake"]\n',
    }
    for rel, text in files.items():
        p = pkg / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def editable_dist(site: Path, version: str, url: str) -> None:
    folder = add_dist(site, "sglang", version)
    (folder / "direct_url.json").write_text(
        '{"dir_info": {"editable": true}, "url": "file://' + url + '"}')


def setuptools_editable(site: Path, checkout: Path, version: str = DEV) -> Path:
    """What ``pip install -e python`` writes for SGLang's flat layout (observed)."""
    pkg = checkout / "python" / "sglang"
    tag = version.replace(".", "_")
    (site / f"__editable__.sglang-{version}.pth").write_text(
        f"import __editable___sglang_{tag}_finder; __editable___sglang_{tag}_finder.install()")
    (site / f"__editable___sglang_{tag}_finder.py").write_text(
        SETUPTOOLS_FINDER.format(mapping={"sglang": str(pkg)}, version=version))
    editable_dist(site, version, str(checkout / "python"))
    return pkg


def hatch_editable(site: Path, project: Path, exact: bool = False) -> Path:
    """hatchling: a path line by default; ``dev-mode-exact`` an editables redirect."""
    pkg = project / "src" / "sglang"
    if exact:
        (site / "_editable_impl_sglang.pth").write_text("import _editable_impl_sglang")
        (site / "_editable_impl_sglang.py").write_text(
            "from editables.redirector import RedirectingFinder as F\nF.install()\n"
            f"F.map_module('sglang', '{pkg}/__init__.py')")
    else:
        (site / "_editable_impl_sglang.pth").write_text(f"{project / 'src'}\n")
    editable_dist(site, DEV, str(project))
    return pkg


def skbc_editable(site: Path, project: Path) -> Path:
    """scikit-build-core ``editable.mode = "redirect"``: the finder call and a path line."""
    pkg = project / "src" / "sglang"
    (site / "_editable_skbc_sglang.pth").write_text(
        f"import _editable_skbc_sglang\n{project / 'src'}\n")
    (site / "_editable_skbc_sglang.py").write_text(
        "import sys\n\n\ndef install(known_source_files, known_wheel_files, "
        "known_directories=None, known_packages=None, path=None, rebuild=False, "
        "verbose=False, build_options=None, install_options=None, install_dir=''):\n"
        "    pass\n\n\n"
        f"install({{'sglang': '{pkg}/__init__.py'}}, {{}}, {{'sglang': ['{pkg}']}}, "
        "['sglang'], None, False, True, [], [], '')\n")
    editable_dist(site, DEV, str(project))
    return pkg


def image(tmp_path: Path) -> Path:
    site = tmp_path / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / \
        "site-packages"
    site.mkdir(parents=True)
    add_torch(site)
    add_mooncake(site)
    return site


def found(site: Path, name: str = "sglang") -> importer.Found | None:
    t = from_site_packages([str(site)])
    return importer.find(t.paths, name, t.sites)


def test_setuptools_finder_found_statically(tmp_path: Path) -> None:
    site = image(tmp_path)
    pkg = setuptools_editable(site, tmp_path / "sgl-workspace" / "sglang")
    write_sglang_sources(pkg)
    got = found(site)
    assert got is not None and got.folder == str(pkg) and got.editable
    assert "setuptools" in got.how


def test_sys_path_package_wins_over_setuptools_finder(tmp_path: Path) -> None:
    """install() appends the finder to sys.meta_path: PathFinder is asked first."""
    site = image(tmp_path)
    write_sglang_sources(setuptools_editable(site, tmp_path / "co"))
    write_sglang_sources(site / "sglang", "0.5.23")
    got = found(site)
    assert got is not None and got.folder == str(site / "sglang") and not got.editable


def test_scikit_build_core_redirect_wins_over_sys_path(tmp_path: Path) -> None:
    """scikit-build-core inserts its finder at sys.meta_path[0]."""
    site = image(tmp_path)
    write_sglang_sources(skbc_editable(site, tmp_path / "proj"))
    write_sglang_sources(site / "sglang", "0.5.23")
    got = found(site)
    assert got is not None and got.folder == str(tmp_path / "proj" / "src" / "sglang")


@pytest.mark.parametrize("exact", [False, True])
def test_hatch_editable(tmp_path: Path, exact: bool) -> None:
    site = image(tmp_path)
    pkg = hatch_editable(site, tmp_path / "proj", exact)
    write_sglang_sources(pkg)
    got = found(site)
    if exact:  # without the editables package the redirect's import fails
        assert got is None
        (site / "editables").mkdir()
        (site / "editables" / "__init__.py").write_text("")
        assert found(site) is None  # `from editables.redirector import ...` fails too
        (site / "editables" / "redirector.py").write_text("")
        got = found(site)
    assert got is not None and got.folder == str(pkg)


def test_pth_path_lines_relative_and_missing(tmp_path: Path) -> None:
    site = image(tmp_path)
    (site / "extra" / "sglang").mkdir(parents=True)
    (site / "extra" / "sglang" / "__init__.py").write_text("")
    (site / "a.pth").write_text("# comment\n\nmissing-dir\nextra\nimport os; x = 1\n")
    assert importer.pth_paths(str(site)) == [str(site / "extra")]
    got = found(site)
    assert got is not None and got.folder == str(site / "extra" / "sglang")


def test_namespace_portions_across_entries(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "mooncake").mkdir(parents=True)
    (b / "mooncake").mkdir(parents=True)
    got = importer.find([str(a), str(b)], "mooncake", [])
    assert got is not None and got.how == "namespace"
    assert got.portions == (str(a / "mooncake"), str(b / "mooncake"))


def test_damaged_finder_is_not_a_package(tmp_path: Path) -> None:
    site = image(tmp_path)
    (site / "__editable__.sglang-1.pth").write_text(
        "import __editable___sglang_1_finder; __editable___sglang_1_finder.install()")
    (site / "__editable___sglang_1_finder.py").write_text("MAPPING = {'sglang': (\n")
    assert found(site) is None


def dev_checkout_image(tmp_path: Path) -> tuple[Path, Path]:
    site = image(tmp_path)
    pkg = setuptools_editable(site, tmp_path / "sgl-workspace" / "sglang")
    write_sglang_sources(pkg, extra_name="NoReleaseHasThis")
    return site, pkg


def test_check_judges_an_editable_checkout_ahead_of_every_release(tmp_path: Path) -> None:
    """``moonpin check --site-packages S --elastic-ep-backend mooncake --no-deep`` on an
    editable SGLang 0.5.99.dev0 importing a name no mooncake has: it used to say "the
    sglang package folder was not found" and accept anything (exit 0)."""
    site, pkg = dev_checkout_image(tmp_path)
    r = run(site, kb=small_kb(tmp_path))
    assert r.line("sglang:") == (
        f"pass  sglang: sglang {DEV} from {pkg} (editable) needs mooncake.pg "
        "(MooncakeBackendOptions, NoReleaseHasThis, get_peer_state, join_group, recover_ranks, "
        "set_transfer_engine; backends mooncake, mooncake-cpu) (not in the KB: sources only)")
    assert r.status("names") == "fail" and "NoReleaseHasThis" in r.line("names:")
    assert r.rc == 1


def test_check_passes_the_same_checkout_with_released_names(tmp_path: Path) -> None:
    site = image(tmp_path)
    pkg = setuptools_editable(site, tmp_path / "co")
    write_sglang_sources(pkg)
    r = run(site, kb=small_kb(tmp_path))
    assert r.status("sglang") == "pass" and f"from {pkg} (editable)" in r.line("sglang:")
    assert r.status("names") == "pass", r.out


def _venv(tmp_path: Path) -> tuple[Path, Path]:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    return venv / "bin" / "python", site


@pytest.mark.parametrize("style", ["setuptools", "hatch", "hatch-exact", "scikit-build-core"])
def test_check_finds_what_the_importer_finds(tmp_path: Path, style: str) -> None:
    """In a real venv: ``--python``, ``--site-packages`` and the venv's own interpreter all
    name the folder ``python -c "import sglang"`` imports there."""
    python, site = _venv(tmp_path)
    add_torch(site)
    add_mooncake(site)
    if style == "setuptools":
        pkg = setuptools_editable(site, tmp_path / "co")
    elif style == "scikit-build-core":
        pkg = skbc_editable(site, tmp_path / "proj")
        write_sglang_sources(site / "sglang", "0.5.23")  # shadowed by the redirect
    else:
        pkg = hatch_editable(site, tmp_path / "proj", exact=style == "hatch-exact")
        if style == "hatch-exact":  # a stand-in redirector with the real one's install()
            (site / "editables").mkdir()
            (site / "editables" / "__init__.py").write_text("")
            (site / "editables" / "redirector.py").write_text(
                "import importlib.util, sys\n\nclass RedirectingFinder:\n    _r = {}\n"
                "    @classmethod\n    def map_module(cls, name, path):\n"
                "        cls._r[name] = path\n    @classmethod\n"
                "    def find_spec(cls, fullname, path=None, target=None):\n"
                "        p = cls._r.get(fullname)\n"
                "        return importlib.util.spec_from_file_location(fullname, p) if p "
                "else None\n    @classmethod\n    def install(cls):\n"
                "        if cls not in sys.meta_path:\n            sys.meta_path.append(cls)\n")
    if style == "scikit-build-core":  # a stand-in finder with the real one's placement
        text = (site / "_editable_skbc_sglang.py").read_text().replace(
            "    pass\n", "    import importlib.util\n    class F:\n"
            "        @staticmethod\n        def find_spec(n, p=None, t=None):\n"
            "            f = known_source_files.get(n)\n"
            "            return importlib.util.spec_from_file_location(n, f) if f else None\n"
            "    sys.meta_path.insert(0, F)\n")
        (site / "_editable_skbc_sglang.py").write_text(text)
    write_sglang_sources(pkg, extra_name="NoReleaseHasThis")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    real = subprocess.run([str(python), "-c", "import sglang, os; "
                           "print(os.path.dirname(sglang.__file__))"], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path, env=env, check=True)
    assert real.stdout.strip() == str(pkg)
    kb = small_kb(tmp_path)
    r = run(site, kb=kb)  # --site-packages
    assert f"from {pkg} (editable)" in r.line("sglang:"), r.out
    assert r.status("names") == "fail" and r.rc == 1
    alone = subprocess.run([sys.executable, "-m", "moonpin.preflight", "--python", str(python),
                            "--elastic-ep-backend", "mooncake", "--no-deep", "--kb", str(kb)],
                           cwd=ROOT, capture_output=True, text=True, timeout=60,
                           env={**env, "MOONPIN_CHECK_SYSTEM_LIBS": str(site / "_none")})
    assert f"from {pkg} (editable)" in alone.stdout and alone.returncode == 1, alone.stdout
    deps = tmp_path / "deps"  # moonpin's own dependency its fix lines use, nothing else
    deps.mkdir()
    import packaging

    (deps / "packaging").symlink_to(Path(packaging.__file__).parent)
    own = subprocess.run([str(python), "-m", "moonpin.preflight", "--elastic-ep-backend",
                          "mooncake", "--no-deep", "--kb", str(kb)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60,
                         env={**env, "PYTHONPATH": f"{ROOT}{os.pathsep}{deps}",
                              "MOONPIN_CHECK_SYSTEM_LIBS": str(site / "_none")})
    assert f"from {pkg} (editable)" in own.stdout, own.stdout + own.stderr


def test_torch_read_where_the_importer_finds_it(tmp_path: Path) -> None:
    """A torch from a checkout (``python setup.py develop``: its folder on a ``.pth`` path
    line, its metadata in site-packages): torch/version.py is read from the checkout."""
    site = tmp_path / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / \
        "site-packages"
    site.mkdir(parents=True)
    checkout = tmp_path / "pytorch"
    add_torch(checkout)
    for d in checkout.glob("torch-*.dist-info"):
        d.rename(site / d.name)
    (site / "torch.pth").write_text(f"{checkout}\n")
    add_mooncake(site)
    write_sglang_sources(site / "sglang", "0.5.23")
    add_dist(site, "sglang", "0.5.23")
    r = run(site, kb=small_kb(tmp_path))
    assert "torch/version.py" in r.line("torch:"), r.out
    assert r.rc == 0, r.out


_BACKENDS = {
    "setuptools": ('requires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"',
                   "[tool.setuptools.packages.find]\ninclude = [\"sglang*\"]\n", "python"),
    "hatchling": ('requires = ["hatchling"]\nbuild-backend = "hatchling.build"',
                  '[tool.hatch.build.targets.wheel]\npackages = ["src/sglang"]\n', "src"),
    "hatchling-exact": ('requires = ["hatchling"]\nbuild-backend = "hatchling.build"',
                        '[tool.hatch.build.targets.wheel]\npackages = ["src/sglang"]\n'
                        "dev-mode-exact = true\n", "src"),
    "scikit-build-core": ('requires = ["scikit-build-core"]\n'
                          'build-backend = "scikit_build_core.build"',
                          '[tool.scikit-build]\nwheel.packages = ["src/sglang"]\n'
                          'editable.mode = "redirect"\n', "src"),
}


@pytest.mark.live
@pytest.mark.parametrize("backend", sorted(_BACKENDS))
def test_real_editable_install(tmp_path: Path, backend: str) -> None:
    """``pip install -e`` with the real build backend from the package index (opt-in:
    ``-m live``): the check names what ``import sglang`` imports in that venv."""
    requires, tool, layout = _BACKENDS[backend]
    project = tmp_path / "proj"
    pkg = project / layout / "sglang"
    write_sglang_sources(pkg, extra_name="NoReleaseHasThis")
    base = project if layout == "src" else project / layout
    (base / "pyproject.toml").write_text(
        f"[build-system]\n{requires}\n[project]\nname = \"sglang\"\nversion = \"{DEV}\"\n"
        + tool)
    if backend == "scikit-build-core":
        (base / "CMakeLists.txt").write_text(
            "cmake_minimum_required(VERSION 3.15)\nproject(sglang LANGUAGES NONE)\n")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    extra = ["editables"] if backend == "hatchling-exact" else []
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "-e", str(base),
                    *extra], check=True, timeout=600, env=env, capture_output=True)
    site = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True, env=env).stdout.strip())
    add_torch(site)
    add_mooncake(site)
    real = subprocess.run([str(python), "-c", "import sglang, os; "
                           "print(os.path.dirname(sglang.__file__))"], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path, env=env, check=True)
    assert real.stdout.strip() == str(pkg)
    kb = small_kb(tmp_path)
    r = run(site, kb=kb)
    assert f"from {pkg} (editable)" in r.line("sglang:") and r.rc == 1, r.out
    alone = subprocess.run([sys.executable, "-m", "moonpin.preflight", "--python", str(python),
                            "--elastic-ep-backend", "mooncake", "--no-deep", "--kb", str(kb)],
                           cwd=ROOT, capture_output=True, text=True, timeout=60,
                           env={**env, "MOONPIN_CHECK_SYSTEM_LIBS": str(site / "_none")})
    assert f"from {pkg} (editable)" in alone.stdout and alone.returncode == 1, alone.stdout


def test_editable_mooncake_named_and_read(tmp_path: Path) -> None:
    """mooncake installed editable (setuptools' finder): its folder is named and its
    loader and build are read there."""
    site = image(tmp_path)
    write_sglang_sources(site / "sglang", "0.5.23")
    add_dist(site, "sglang", "0.5.23")
    checkout = tmp_path / "Mooncake"
    checkout.mkdir()
    (site / "mooncake").rename(checkout / "mooncake")
    (site / "__editable__.mooncake-0.3.13.post1.pth").write_text(
        "import __editable___mooncake_0_3_13_post1_finder; "
        "__editable___mooncake_0_3_13_post1_finder.install()")
    (site / "__editable___mooncake_0_3_13_post1_finder.py").write_text(
        SETUPTOOLS_FINDER.format(mapping={"mooncake": str(checkout / "mooncake")},
                                 version="0.3.13.post1"))
    r = run(site, kb=small_kb(tmp_path))
    assert f"from {checkout / 'mooncake'} (editable)" in r.line("mooncake installed:"), r.out
    assert r.status("build") == "pass" and r.rc == 0, r.out


def test_pth_lines_follow_their_own_site_folder(tmp_path: Path) -> None:
    """``site.addsitedir`` adds a folder then its ``.pth`` lines, folder by folder: a
    package on the first folder's path line wins over one in the second folder."""
    first, second, extra = tmp_path / "s1", tmp_path / "s2", tmp_path / "extra"
    for d in (first, second / "sglang", extra / "sglang"):
        d.mkdir(parents=True)
    (second / "sglang" / "__init__.py").write_text("")
    (extra / "sglang" / "__init__.py").write_text("")
    (first / "x.pth").write_text(f"{extra}\n")
    t = from_site_packages([str(first), str(second)])
    assert t.paths == [str(first), str(extra), str(second)]
    got = importer.find(t.paths, "sglang", t.sites)
    assert got is not None and got.folder == str(extra / "sglang")


@pytest.mark.parametrize(("cfg", "read"), [
    ("version = 3.11.7\n", True),    # before gh-113659's fix: site processes it
    ("version = 3.11.8\n", False),   # the fix's release: skipped
    ("version_info = 3.12.1.final.0\n", True),
    ("version = 3.13.0\n", False),
    (None, False),                   # no virtualenv to tell: a current release assumed
])
def test_a_hidden_pth_file_as_the_release_reads_it(tmp_path: Path, cfg: str | None,
                                                   read: bool) -> None:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    extra = tmp_path / "extra"
    extra.mkdir()
    (site / ".hidden.pth").write_text(f"{extra}\n")
    if cfg is not None:
        (tmp_path / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n" + cfg)
    assert (str(extra) in from_site_packages([str(site)]).paths) is read
