"""moonpin's model of the importer (:mod:`moonpin.preflight.pyimport.metapath`) against CPython's
own, on random layouts (:mod:`tests.lib.importlayouts`; 40 seeded layouts by default,
``MOONPIN_IMPORT_LAYOUTS=2000`` for a large run), and the check's verdicts on one layout of
each class: module files in FileFinder's order, setuptools' finder declining a folder with
no ``__init__``, ``extend_path`` packages, and SGLang's Docker image (a checkout's root found
as a namespace portion from the working folder, its modules through the editable finder).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import machinery
from pathlib import Path

import pytest

from moonpin.preflight.pyimport import importer, metapath
from tests.lib import importlayouts
from tests.lib.checkrun import ROOT, run, small_kb
from tests.lib.editable_templates import SETUPTOOLS_FINDER
from tests.lib.images import add_dist, add_mooncake, add_torch
from tests.preflight.test_importer import editable_dist, write_sglang_sources

EXT = machinery.EXTENSION_SUFFIXES
LAYOUTS = int(os.environ.get("MOONPIN_IMPORT_LAYOUTS", "40"))


def test_random_layouts_agree_with_the_importer(tmp_path: Path) -> None:
    failed = []
    for seed in range(LAYOUTS):
        base = tmp_path / str(seed)
        base.mkdir()
        lay = importlayouts.generate(seed, base)
        bad = importlayouts.compare(lay)
        if bad:
            failed.append(f"seed {seed}:\n" + "\n".join(bad) + "\n" + lay.describe())
    assert not failed, "\n\n".join(failed[:3]) + f"\n({len(failed)} of {LAYOUTS} disagree)"


def test_the_harness_sees_a_wrong_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                        ) -> None:
    """Control: a model that prefers ``.py`` to an extension module disagrees somewhere."""
    init = metapath.Importer.__init__

    def py_first(self: metapath.Importer, *a: object, **k: object) -> None:
        init(self, *a, **k)  # type: ignore[arg-type]
        self.suffixes = (".py", *self.ext, ".pyc")

    monkeypatch.setattr(metapath.Importer, "__init__", py_first)
    for seed in range(200):
        base = tmp_path / str(seed)
        base.mkdir()
        if importlayouts.compare(importlayouts.generate(seed, base)):
            return
    pytest.fail("200 layouts and no disagreement with a model that has the order wrong")


def _real(paths: list[Path], name: str, cwd: Path | None = None) -> str | None:
    code = ("import importlib.util, sys; s = importlib.util.find_spec(sys.argv[1]); "
            "print(s.origin if s and s.has_location else None)")
    out = subprocess.run([sys.executable, "-S", "-c", code, name], capture_output=True,
                         text=True, timeout=60, check=True, cwd=cwd,
                         env={"PYTHONPATH": os.pathsep.join(map(str, paths))})
    got = out.stdout.strip()
    return None if got == "None" else got


@pytest.mark.parametrize(("files", "want"), [
    (["pg.py", f"pg{EXT[-1]}"], f"pg{EXT[-1]}"),  # an extension before a source
    (["pg.py", "pg.pyc"], "pg.py"),
    (["pg.pyc"], "pg.pyc"),  # sourceless bytecode is a module
    (["pg/__init__.pyc", "pg.py"], "pg/__init__.pyc"),  # a package before a module file
    ([f"pg/__init__{EXT[0]}", "pg/__init__.py"], f"pg/__init__{EXT[0]}"),
    (["pg/x.txt", "pg.pyc"], "pg.pyc"),  # a namespace folder after every module file
])
def test_module_files_in_filefinder_order(tmp_path: Path, files: list[str], want: str
                                          ) -> None:
    pkg = tmp_path / "mooncake"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for f in files:
        p = pkg / f
        p.parent.mkdir(parents=True, exist_ok=True)
        if f.endswith(".pyc"):
            import py_compile

            src = tmp_path / "src.py"
            src.write_text("")
            py_compile.compile(str(src), cfile=str(p), doraise=True)
        else:
            p.write_text("")
    got = metapath.Importer([str(tmp_path)], []).find("mooncake.pg")
    assert got is not None and got.origin == str(pkg / want)
    assert _real([tmp_path], "mooncake.pg") == str(pkg / want)
    from moonpin.preflight.env.context import Context
    from moonpin.preflight.installed import image_facts

    # an environment whose importer finds no mooncake: the package folder searched alone
    ctx = Context([], sites=[], ext_suffixes=EXT)
    assert image_facts.module_file(ctx, "mooncake", str(pkg), "pg") == str(pkg / want)


def test_top_level_module_file_and_sourceless_package(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "torch").mkdir(parents=True)  # a namespace portion first: the module file wins
    b.mkdir()
    (b / "torch.py").write_text("")
    got = importer.find([str(a), str(b)], "torch", [])
    assert got is not None and got.module and got.folder == str(b / "torch.py")
    assert _real([a, b], "torch") == str(b / "torch.py")
    (a / "torch" / "__init__.pyc").write_bytes(b"")
    got = importer.find([str(a), str(b)], "torch", [])
    assert got is not None and not got.module and got.folder == str(a / "torch")


def _setuptools_site(site: Path, name: str, folder: Path,
                     namespaces: dict[str, list[str]] | None = None) -> None:
    mod = f"__editable___{name}_1_0_finder"
    (site / f"{mod}.py").write_text(SETUPTOOLS_FINDER.format(
        mapping={name: str(folder)}, namespaces=namespaces or {},
        name=f"__editable__.{name}-1.0.finder"))
    (site / f"__editable__.{name}-1.0.pth").write_text(f"import {mod}; {mod}.install()")


def test_setuptools_finder_declines_a_folder_without_init(tmp_path: Path) -> None:
    """``_find_spec`` looks for ``__init__.py`` then the folder's path with each suffix:
    a mapped folder without either is not a package of that finder."""
    site = tmp_path / "site-packages"
    site.mkdir()
    checkout = tmp_path / "co" / "mooncake"
    checkout.mkdir(parents=True)
    (checkout / "pg.py").write_text("")
    _setuptools_site(site, "mooncake", checkout)
    assert importer.find([str(site)], "mooncake", [str(site)]) is None
    (tmp_path / "co" / "mooncake.py").write_text("")  # the folder's path with a suffix
    got = importer.find([str(site)], "mooncake", [str(site)])
    assert got is not None and got.module and got.folder == str(tmp_path / "co" /
                                                                 "mooncake.py")
    env_real = subprocess.run(
        [sys.executable, "-S", "-c", "import site, sys, importlib.util; "
         f"site.addsitedir({str(site)!r}); print(importlib.util.find_spec('mooncake').origin)"],
        capture_output=True, text=True, check=True, timeout=60)
    assert env_real.stdout.strip() == str(tmp_path / "co" / "mooncake.py")


def _mooncake_split(tmp_path: Path) -> tuple[Path, Path]:
    """mooncake in a first site folder (its loader, ``extend_path`` in its
    ``__init__``), its torch build only in a ``mooncake/`` folder of a second one."""
    first = tmp_path / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / \
        "site-packages"
    first.mkdir(parents=True)
    add_torch(first)
    add_mooncake(first)
    init = first / "mooncake" / "__init__.py"
    init.write_text("from pkgutil import extend_path\n__path__ = extend_path(__path__, "
                    "__name__)\n")
    second = tmp_path / "more"
    (second / "mooncake").mkdir(parents=True)
    build = next((first / "mooncake").glob("pg_2_13_0*"))
    build.rename(second / "mooncake" / build.name)
    (first / "more.pth").write_text(f"{second}\n")
    return first, second


def test_extend_path_finds_the_build_in_another_mooncake_folder(tmp_path: Path) -> None:
    first, second = _mooncake_split(tmp_path)
    build = next((second / "mooncake").glob("pg_2_13_0*"))
    write_sglang_sources(first / "sglang", "0.5.23")
    add_dist(first, "sglang", "0.5.23")
    r = run(first, kb=small_kb(tmp_path))
    assert r.status("build") == "pass" and build.name in r.line("build:"), r.out
    assert r.rc == 0, r.out
    doc = json.loads(run(first, "--json", kb=small_kb(tmp_path)).out)
    got = doc["found"]["mooncake"]
    assert [p["folder"] for p in got["path"]] == [str(first / "mooncake"),
                                                 str(second / "mooncake")]
    assert got["path"][1]["how"] == ".pth"
    # control: without extend_path the build is not found (as `import` would not)
    (first / "mooncake" / "__init__.py").write_text("")
    r = run(first, kb=small_kb(tmp_path))
    assert r.status("build") == "fail" and "no such build" in r.line("build:"), r.out


def docker_layout(tmp_path: Path) -> tuple[Path, Path, Path]:
    """SGLang's image: ``WORKDIR /sgl-workspace`` holding the checkout, ``pip install -e
    python`` into the interpreter's site folder (setuptools' finder, ``NAMESPACES`` for
    ``sglang.srt`` which has no ``__init__.py``). The checkout's tests import a mooncake
    name no release has: read, they would fail the check. Returns the site folder of a venv
    (its ``bin/python`` beside), the working folder and ``python/sglang``."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / \
        "site-packages"
    add_torch(site)
    add_mooncake(site)
    work = tmp_path / "sgl-workspace"
    checkout = work / "sglang"
    pkg = checkout / "python" / "sglang"
    write_sglang_sources(pkg, "0.5.23")
    (pkg / "srt" / "__init__.py").unlink()
    for junk in ("test/srt/test_elastic.py", "benchmark/bench_ep.py"):
        p = checkout / junk
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("from mooncake.pg import NoReleaseHasThis\n")
    _setuptools_site(site, "sglang", pkg, {"sglang.srt": [str(pkg / "srt")]})
    editable_dist(site, "0.5.23", str(checkout / "python"))
    return site, work, pkg


def test_docker_layout_reads_python_sglang_not_the_checkout(tmp_path: Path) -> None:
    site, work, pkg = docker_layout(tmp_path)
    imp = metapath.Importer([str(work), str(site)], [str(site)])
    top = imp.find("sglang")
    assert top is not None and top.origin is None and top.search == (str(work / "sglang"),)
    src = importer.package_sources(imp, "sglang")
    assert src is not None and src.roots == (str(pkg),)
    assert all(p.startswith(str(pkg) + "/") for p in src.files.values())
    assert "sglang/srt/elastic_ep/elastic_ep.py" in src.files
    assert "sglang/__init__.py" not in src.files  # never run: sglang is the namespace
    kb = small_kb(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    python = site.parents[2] / "bin" / "python"
    real = subprocess.run([str(python), "-c", "import importlib.util as u, sglang; print("
                           "list(sglang.__path__), u.find_spec("
                           "'sglang.srt.elastic_ep.elastic_ep').origin)"], cwd=work,
                          capture_output=True, text=True, timeout=60, env=env, check=True)
    assert real.stdout.split() == [f"['{work / 'sglang'}']",
                                   str(pkg / "srt" / "elastic_ep" / "elastic_ep.py")]
    proc = subprocess.run([sys.executable, "-m", "moonpin.preflight", "--python",
                           str(python), "--json", "--elastic-ep-backend", "mooncake",
                           "--no-deep", "--kb", str(kb)],
                          cwd=work, capture_output=True, text=True, timeout=60,
                          env={**env, "PYTHONPATH": str(ROOT),
                               "MOONPIN_CHECK_SYSTEM_LIBS": str(site / "_none")})
    doc = json.loads(proc.stdout)
    assert doc["exit_code"] == 0, proc.stdout
    line = next(c["message"] for c in doc["checks"] if c["name"] == "sglang")
    assert f"from {pkg} (editable; `import sglang` finds the namespace portion " \
        f"{work / 'sglang'}" in line and "NoReleaseHasThis" not in line
    got = doc["found"]["sglang"]
    assert got["how"] == "namespace" and got["portions"] == [
        {"folder": str(work / "sglang"), "how": "working folder", "file": None}]
    assert got["submodules"][0]["tool"] == "setuptools"
    assert got["submodules"][0]["modules"] == got["sources"]["files"] == len(src.files)


DOCKER = os.environ.get("MOONPIN_TEST_DOCKER")


@pytest.mark.image
@pytest.mark.skipif(not DOCKER, reason="MOONPIN_TEST_DOCKER names no prepared layout")
def test_real_sglang_docker_layout() -> None:
    """Opt-in (``-m image``, ``MOONPIN_TEST_DOCKER=/tmp/h2/dock``): the real SGLang 0.5.21
    checkout installed ``pip install -e python`` the way SGLang's Docker image does, with
    the real torch and mooncake of ``../shared/tools/realimg``. Prepare it with::

        D=/tmp/h2/dock; cp -al <image>/sgl-workspace $D/sgl-workspace
        /usr/bin/python3 -m venv --without-pip $D/venv
        cp -al <its dist-packages>/. $D/venv/lib/python3.11/site-packages/
        # the finder's MAPPING rewritten to $D/sgl-workspace (the link broken first), and a
        # test file in the checkout's root importing a name no mooncake has:
        mkdir -p $D/sgl-workspace/sglang/test/srt
        echo 'from mooncake.pg import NoReleaseHasThis' > $D/sgl-workspace/sglang/test/srt/t.py

    From the working folder, ``import sglang`` is the checkout root as a namespace portion
    and its modules come from ``python/sglang`` through setuptools' finder: the check reads
    those (not the root's tests), says so, and agrees with ``import mooncake.pg``."""
    assert DOCKER is not None
    base = Path(DOCKER)
    work = base / "sgl-workspace"
    python = base / "venv" / "bin" / "python"
    pkg = work / "sglang" / "python" / "sglang"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    stubs = os.environ.get("MOONPIN_TEST_STUBS", "/tmp/realimg/stubs")
    real = subprocess.run([str(python), "-c", "import sglang, importlib.util as u; "
                           "print(list(sglang.__path__)); from mooncake.pg import "
                           "MooncakeBackendOptions, join_group"], cwd=work, timeout=300,
                          capture_output=True, text=True, env={**env, "LD_LIBRARY_PATH": stubs})
    assert real.returncode == 0, real.stderr[-2000:]
    assert real.stdout.split()[0] == f"['{work / 'sglang'}']"
    proc = subprocess.run([sys.executable, "-m", "moonpin.preflight", "--python",
                           str(python), "--json", "--elastic-ep-backend", "mooncake",
                           "--no-deep"], cwd=work, capture_output=True, text=True,
                          timeout=300, env={**env, "PYTHONPATH": str(ROOT),
                                            "LD_LIBRARY_PATH": stubs})
    doc = json.loads(proc.stdout)
    assert doc["usable"] is True, proc.stdout[-3000:]
    line = next(c["message"] for c in doc["checks"] if c["name"] == "sglang")
    assert f"from {pkg} (editable; `import sglang` finds the namespace portion" in line
    assert "NoReleaseHasThis" not in proc.stdout
    got = doc["found"]["sglang"]
    assert got["how"] == "namespace" and got["portions"][0]["how"] == "working folder"
    assert got["sources"]["roots"] == [str(pkg)] and got["sources"]["files"] > 3000
    assert got["submodules"][0]["modules"] == got["sources"]["files"]
    import packaging  # moonpin's own dependency its fix lines use, nothing else

    deps = Path(os.environ.get("TMPDIR", "/tmp")) / f"moonpin-docker-deps-{os.getpid()}"
    deps.mkdir(exist_ok=True)
    if not (deps / "packaging").exists():
        (deps / "packaging").symlink_to(Path(packaging.__file__).parent)
    own = subprocess.run([str(python), "-m", "moonpin.preflight", "--elastic-ep-backend",
                          "mooncake", "--no-deep"], cwd=work, capture_output=True, text=True,
                         timeout=300, env={**env, "PYTHONPATH": f"{ROOT}{os.pathsep}{deps}",
                                           "LD_LIBRARY_PATH": stubs})
    assert own.returncode == 0 and "NoReleaseHasThis" not in own.stdout, own.stdout
    assert f"from {pkg} (editable; `import sglang` finds the namespace portion" in own.stdout
    site = base / "venv" / "lib" / "python3.11" / "site-packages"
    alone = subprocess.run([sys.executable, "-m", "moonpin.preflight", "--site-packages",
                            str(site), "--json", "--elastic-ep-backend", "mooncake",
                            "--no-deep"], cwd=ROOT, capture_output=True, text=True,
                           timeout=300, env={**env, "LD_LIBRARY_PATH": stubs})
    other = json.loads(alone.stdout)
    assert other["usable"] is True and other["found"]["sglang"]["folder"] == str(pkg)
