"""Opt-in (``-m image``): on the real image of ``../shared/tools/realimg/build.sh``
(``MOONPIN_TEST_REALIMG``, e.g. ``/tmp/realimg``), images of the classes issue 25 names,
each made in a hard-link copy: the light check's verdict, for ``--python``,
``--site-packages`` and the copy's own interpreter, equals what importing the module SGLang
imports does there (with the stub NVIDIA driver on ``LD_LIBRARY_PATH``).

* a build missing a ``DT_NEEDED`` its symbols need (``patchelf --remove-needed``, as
  Mooncake PR #2255's wheel was);
* a ``libstdc++.so.6`` older than the image's objects need (built with gcc and a version
  script ending at ``GLIBCXX_3.4.19``, first on ``LD_LIBRARY_PATH``);
* SGLang installed editable from a checkout (the wheel's sources unpacked, ``pip install
  -e --no-deps --no-build-isolation`` with the copy's setuptools), at the release and at a
  dev version ahead of every release with a source change in the mooncake import;
* torch whose label is another release's (``pg_2_12_0`` copied over ``pg_2_13_0``);
* torch's own import chain broken (``torch._C`` gone or not ELF, ``libtorch_global_deps.so``
  gone, a torch library truncated, a CUDA package's library gone, one only a preload
  loads gone): the import fails in ``import torch``, and the check says so with torch's
  fix, not mooncake's.

Nothing is fetched from the index. Changed files are copied first (never edited through a
hard link), so the image itself is never changed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lib.verdicts import mooncake_fails, mooncake_rc, verdicts

pytestmark = pytest.mark.image

ROOT = Path(__file__).resolve().parents[1]
REALIMG = os.environ.get("MOONPIN_TEST_REALIMG")
SITE = "lib/python3.11/site-packages"
BUILD = "pg_2_13_0.cpython-311-x86_64-linux-gnu.so"


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    if not REALIMG or not (Path(REALIMG) / "venv" / "bin" / "python").exists():
        pytest.fail("set MOONPIN_TEST_REALIMG to the folder build.sh made (with venv/)")
    dst = tmp_path / "img"
    subprocess.run(["cp", "-al", str(Path(REALIMG) / "venv"), str(dst)], check=True)
    return dst


def _own(path: Path) -> None:
    """``path`` as a file of its own (no longer a hard link into the image)."""
    tmp = path.with_name(path.name + ".own")
    shutil.copy2(path, tmp)
    os.replace(tmp, path)


def _env(extra_ld: str = "") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MOONPIN_", "VIRTUAL_ENV", "PYTHONPATH"))}
    assert REALIMG is not None
    env["LD_LIBRARY_PATH"] = ":".join(filter(None, [str(Path(REALIMG) / "stubs"), extra_ld]))
    return env


def _real(img: Path, code: str, env: dict[str, str], cwd: Path | None = None
          ) -> tuple[bool, str]:
    proc = subprocess.run([str(img / "bin" / "python"), "-c", code], capture_output=True,
                          text=True, timeout=600, env=env, cwd=cwd or img.parent)
    return proc.returncode == 0, (proc.stderr.strip().splitlines() or [""])[-1]


def _checks(img: Path, env: dict[str, str], tmp: Path, cwd: Path | None = None
            ) -> dict[str, tuple[int, str]]:
    """The light check's exit code and output, the three ways (``cwd``: every one run
    there, as the worker is)."""
    deps = tmp / "deps"  # moonpin's one dependency its fix lines use, for the own interpreter
    if not deps.exists():
        deps.mkdir()
        import packaging

        (deps / "packaging").symlink_to(Path(packaging.__file__).parent)
    tail = ["--elastic-ep-backend", "mooncake", "--no-deep"]
    runs = {
        "--python": ([sys.executable, "-m", "moonpin.preflight", "--python",
                      str(img / "bin" / "python"), *tail], ROOT, env),
        "--site-packages": ([sys.executable, "-m", "moonpin.preflight", "--site-packages",
                             str(img / SITE), *tail], ROOT, env),
        "own": ([str(img / "bin" / "python"), "-m", "moonpin.preflight", *tail], tmp,
                {**env, "PYTHONPATH": f"{ROOT}{os.pathsep}{deps}"}),
    }
    out = {}
    for how, (cmd, where, e) in runs.items():
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                              cwd=cwd or where, env=e)
        assert proc.returncode in (0, 1), (how, proc.stdout, proc.stderr)
        out[how] = (proc.returncode, proc.stdout)
    return out


def _agree(img: Path, tmp: Path, code: str = "import mooncake.pg", extra_ld: str = "",
           env_extra: dict[str, str] | None = None, cwd: Path | None = None
           ) -> tuple[bool, str, dict[str, tuple[int, str]]]:
    env = {**_env(extra_ld), **(env_extra or {})}
    ok, err = _real(img, code, env, cwd)
    got = _checks(img, env, tmp, cwd)
    for how, (rc, out) in got.items():
        # the import judged here is mooncake's; the check also judges sgl_kernel and
        # flashinfer on a CUDA torch, which these images lack (their imports fail too)
        assert mooncake_rc(out) == (0 if ok else 1), \
            f"{how}: {code} {'works' if ok else err}:\n{out}"
        assert rc == max(mooncake_rc(out), "error" in verdicts(out).values()), out
    return ok, err, got


def test_the_image_itself_is_usable(copy: Path, tmp_path: Path) -> None:
    ok, _, _ = _agree(copy, tmp_path)
    assert ok


def test_a_build_missing_a_needed_library(copy: Path, tmp_path: Path) -> None:
    if shutil.which("patchelf") is None:
        pytest.fail("needs patchelf (apt-get install patchelf)")
    build = copy / SITE / "mooncake" / BUILD
    _own(build)
    subprocess.run(["patchelf", "--remove-needed", "libmooncake_pg.so", str(build)],
                   check=True)
    ok, err, got = _agree(copy, tmp_path)
    assert not ok and "undefined symbol: " in err
    symbol = err.rpartition("undefined symbol: ")[2]
    for _, out in got.values():
        assert symbol in out and f"needed by {BUILD}" in out


def test_a_libstdcxx_older_than_the_image_needs(copy: Path, tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        pytest.fail("needs gcc")
    old = tmp_path / "oldstdcxx"
    old.mkdir()
    names = (["GLIBCXX_3.4", *(f"GLIBCXX_3.4.{i}" for i in range(1, 20)), "CXXABI_1.3",
              *(f"CXXABI_1.3.{i}" for i in range(1, 16))])
    script, code = [], []
    for i, n in enumerate(names):
        sym = "moonpin_" + n.replace(".", "_")
        script.append(f"{n} {{ global: {sym}; {'local: *; ' if i == 0 else ''}}};")
        code.append(f"int {sym}(void) {{ return {i}; }}")
    (old / "v.map").write_text("\n".join(script) + "\n")
    (old / "s.c").write_text("\n".join(code) + "\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(old / "libstdc++.so.6"),
                    "-Wl,-soname,libstdc++.so.6", f"-Wl,--version-script={old / 'v.map'}",
                    str(old / "s.c")], check=True)
    ok, err, got = _agree(copy, tmp_path, extra_ld=str(old))
    assert not ok and "version `GLIBCXX_3.4.2" in err and "not found" in err
    said = err[err.index("version `"):]  # version `GLIBCXX_3.4.20' not found (required by …)
    for _, out in got.values():
        lines = mooncake_fails(out)
        assert lines and said in lines[0], out
        assert lines[0].startswith("fail  torch:") and "defines at most GLIBCXX_3.4.19" in lines[0]
        # one cause (torch's import), with its fix; mooncake's import, a consequence, fails
        # pointing there
        assert len(lines) == 2 and lines[1].startswith("fail  import chain:"), out
        assert "torch's line has the fix" in lines[1], out


def _editable(copy: Path, tmp: Path, version: str) -> Path:
    """SGLang's released sources as a checkout, installed editable into ``copy``."""
    wheels = sorted((Path(REALIMG or "") / "dl").glob("sglang-0.5.21-*.whl"))
    if not wheels:
        pytest.fail("no SGLang 0.5.21 wheel in $MOONPIN_TEST_REALIMG/dl")
    checkout = tmp / f"sglang-{version}" / "python"
    checkout.mkdir(parents=True)
    import zipfile

    with zipfile.ZipFile(wheels[0]) as z:
        z.extractall(checkout, [n for n in z.namelist() if n.startswith("sglang/")])
    (checkout / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=64"]\n'
        'build-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "sglang"\nversion = "{version}"\n\n'
        '[tool.setuptools.packages.find]\ninclude = ["sglang*"]\n')
    py = str(copy / "bin" / "python")
    env = {**_env(), "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    for cmd in (["uninstall", "-y", "sglang"],
                ["install", "--no-deps", "--no-build-isolation", "-e", str(checkout)]):
        subprocess.run([py, "-m", "pip", "-q", *cmd], check=True, env=env, timeout=600,
                       capture_output=True)
    return checkout / "sglang"


def test_editable_sglang_at_the_release(copy: Path, tmp_path: Path) -> None:
    pkg = _editable(copy, tmp_path, "0.5.21")
    where = subprocess.run([str(copy / "bin" / "python"), "-c", "import importlib.util as u;"
                            " print(u.find_spec('sglang').origin)"], capture_output=True,
                           text=True, check=True).stdout.strip()
    assert where == str(pkg / "__init__.py")
    ok, _, got = _agree(copy, tmp_path, "from mooncake.pg import MooncakeBackendOptions")
    assert ok
    for _, out in got.values():
        assert f"sglang 0.5.21 from {pkg} (editable) needs mooncake.pg" in out


def test_editable_sglang_ahead_of_every_release(copy: Path, tmp_path: Path) -> None:
    pkg = _editable(copy, tmp_path, "0.5.99.dev0")
    src = pkg / "srt" / "distributed" / "parallel_state.py"
    text = src.read_text()
    old = "from mooncake.pg import MooncakeBackendOptions\n"
    assert old in text
    src.write_text(text.replace(old, "from mooncake.pg import MooncakeBackendOptions, "
                                     "MooncakeElasticOptionsV2\n", 1))
    ok, err, got = _agree(copy, tmp_path, "from mooncake.pg import MooncakeBackendOptions, "
                                          "MooncakeElasticOptionsV2")
    assert not ok and "MooncakeElasticOptionsV2" in err
    for _, out in got.values():
        assert f"sglang 0.5.99.dev0 from {pkg} (editable)" in out
        assert "fail  names:" in out and "MooncakeElasticOptionsV2" in out


def test_torch_labelled_as_another_release(copy: Path, tmp_path: Path) -> None:
    pkg = copy / SITE / "mooncake"
    os.unlink(pkg / BUILD)
    shutil.copy2(pkg / "pg_2_12_0.cpython-311-x86_64-linux-gnu.so", pkg / BUILD)
    ok, err, got = _agree(copy, tmp_path)
    assert not ok and "undefined symbol: _ZN4c10d" in err
    for _, out in got.values():
        assert "fail  symbols:" in out and "c10d::ProcessGroup::" in out


def test_torch_version_py_saying_another_release(copy: Path, tmp_path: Path) -> None:
    """torch's files say 2.12.0 (``torch.__version__``), its metadata 2.13.0: mooncake's
    loader reads the label, loads ``pg_2_12_0`` against 2.13.0's libraries and fails; the
    check judges the label, not pip's view of it."""
    version_py = copy / SITE / "torch" / "version.py"
    _own(version_py)
    text = version_py.read_text()
    assert "__version__ = '2.13.0" in text
    version_py.write_text(text.replace("__version__ = '2.13.0", "__version__ = '2.12.0", 1))
    ok, err, got = _agree(copy, tmp_path)
    assert not ok and "pg_2_12_0" in err and "undefined symbol: " in err
    for _, out in got.values():
        assert "loader finds pg_2_12_0" in out
        assert "fail  symbols:" in out
        assert "pip install --force-reinstall --no-deps 'torch==2.13.0,!=2.13.0+cpu'" in out


@pytest.mark.parametrize("damage", ["rm torch/version.py", "rm torch/torch_version.py",
                                    "rm torch/__init__.py", "syntax torch/version.py",
                                    "rm mooncake/buffer_pool.py",
                                    "raise mooncake/__init__.py"])
def test_a_python_chain_the_import_cannot_run(copy: Path, tmp_path: Path, damage: str) -> None:
    """The Python modules ``import mooncake.pg`` runs before its build: a missing or broken
    one fails the import, and the check, with a fix line that reinstalls its owner."""
    how, rel = damage.split()
    target = copy / SITE / rel
    target.unlink()
    if how == "syntax":
        target.write_text("__version__ = (\n")
    elif how == "raise":
        target.write_text("raise ImportError('built without RDMA support')\n")
    ok, _, got = _agree(copy, tmp_path)
    assert not ok
    owner = "torch==2.13.0,!=2.13.0+cpu" if rel.startswith("torch") else \
        "mooncake-transfer-engine-cuda13==0.3.13.post1"
    for _, out in got.values():
        fails = mooncake_fails(out)
        assert fails and ("import chain" in fails[0] or "torch:" in fails[0]), out
        assert f"pip install --force-reinstall --no-deps '{owner}'" in out


def test_a_cuda_label_that_is_not_what_torch_links(copy: Path, tmp_path: Path) -> None:
    """version.py says CUDA 12.8, torch's libraries link libcudart.so.13: the CUDA 13 build
    loads, and the check judges by the libraries."""
    version_py = copy / SITE / "torch" / "version.py"
    _own(version_py)
    version_py.write_text(version_py.read_text().replace("cuda: Optional[str] = '13.0'",
                                                         "cuda: Optional[str] = '12.8'"))
    assert "'12.8'" in version_py.read_text()
    ok, _, got = _agree(copy, tmp_path)
    assert ok
    for _, out in got.values():
        assert "links libcudart.so.13; torch/version.py says cuda = '12.8'" in out


TORCH_C = "torch/_C.cpython-311-x86_64-linux-gnu.so"


def _break(copy: Path, rel: str, how: str) -> None:
    path = copy / SITE / rel
    if how == "remove":
        os.unlink(path)
    elif how == "not-elf":
        os.unlink(path)
        path.write_bytes(b"hi\n")
    else:  # truncate
        data = path.read_bytes()
        os.unlink(path)
        path.write_bytes(data[:len(data) // 4])


@pytest.mark.parametrize(("rel", "how", "said", "deps"), [
    (TORCH_C, "remove", "Failed to load PyTorch C extensions", False),
    (TORCH_C, "not-elf", "_C.cpython-311-x86_64-linux-gnu.so", False),
    ("torch/lib/libtorch_global_deps.so", "remove", "libtorch_global_deps.so", False),
    ("torch/lib/libtorch_cpu.so", "truncate", "libtorch_cpu.so", False),
    ("torch/lib/libc10.so", "remove", "libc10.so", False),
    ("nvidia/cudnn/lib/libcudnn.so.9", "remove", "libcudnn.so.9", True),
    ("nvidia/cu13/lib/libnvJitLink.so.13", "remove", "libnvJitLink.so.13", True),
])
def test_torch_failing_to_import_is_torchs_failure(copy: Path, tmp_path: Path, rel: str,
                                                    how: str, said: str, deps: bool) -> None:
    _break(copy, rel, how)
    env = _env()
    ok, _ = _real(copy, "import mooncake.pg", env)
    assert not ok
    got = _checks(copy, env, tmp_path)
    for how_run, (rc, out) in got.items():
        assert rc == 1, (how_run, out)
        fails = mooncake_fails(out)
        # the cause is torch's line, which holds the fix; mooncake's import chain, which
        # fails with it, points there
        assert [f.split(":")[0] for f in fails] == ["fail  torch", "fail  import chain"], \
            (how_run, out)
        assert "`import torch` raises" in fails[0] and said in fails[0], (how_run, out)
        assert "torch's line has the fix" in fails[1], (how_run, out)
        fix = "pip install --force-reinstall " + ("" if deps else "--no-deps ") + \
            "'torch==2.13.0,!=2.13.0+cpu'"
        lines = out.splitlines()
        after = lines[lines.index(fails[0]) + 1]
        m = re.search(r"which (\S+) (\S+)'s RECORD lists\)", fails[0])
        if m:  # the image's records name the file's distribution: put back that one
            fix = f"pip install --force-reinstall --no-deps '{m[1]}=={m[2]}'"
        assert after.startswith("  fix:") and fix in after, (how_run, out)
        assert "mooncake-transfer-engine" not in out.split("import chain")[1]


def test_a_preload_failing_is_not_a_failure(copy: Path, tmp_path: Path) -> None:
    """torch's CUDA preloads run in a try/except Exception: one library gone stops them
    (libcupti here, which nothing else needs) and the import goes on."""
    _break(copy, "nvidia/cu13/lib/libcupti.so.13", "remove")
    ok, _, got = _agree(copy, tmp_path)
    assert ok
    for _, out in got.values():
        assert "pass  libraries:" in out and "pass  symbols:" in out


def test_mooncakes_guarded_store_failing_is_not_a_failure(copy: Path, tmp_path: Path) -> None:
    """mooncake/__init__.py imports mooncake.store inside try/except ImportError: store.so
    not loading is no failure of `import mooncake.pg`."""
    _break(copy, "mooncake/store.so", "not-elf")
    ok, _, _ = _agree(copy, tmp_path)
    assert ok


@pytest.mark.parametrize(("expr", "works"), [
    ("f'{_base}+cu130'", True), ("_base + '+cu130'", True),
    ("'{}.{}.0+cu130'.format(2, 12)", False), ("f'{2}.{12}.0' + '+cu130'", False),
])
def test_a_torch_label_computed_from_literals(copy: Path, tmp_path: Path, expr: str,
                                             works: bool) -> None:
    """A custom build's version.py computing ``__version__`` (an f-string, ``+ suffix``):
    the loader maps what it computes; 2.12.0's build fails against 2.13.0's libraries."""
    version_py = copy / SITE / "torch" / "version.py"
    _own(version_py)
    text = version_py.read_text()
    old = "__version__ = '2.13.0+cu130'"
    assert old in text
    version_py.write_text(text.replace(old, f"_base = '2.13.0'\n__version__ = {expr}", 1))
    ok, _, got = _agree(copy, tmp_path)
    assert ok is works
    for _, out in got.values():
        assert ("loader finds pg_2_13_0" if works else "loader finds pg_2_12_0") in out, out


def test_the_loader_in_a_second_mooncake_folder(copy: Path, tmp_path: Path) -> None:
    """mooncake's ``__init__`` extends its ``__path__`` (``pkgutil.extend_path``): ``pg.py``
    moved to a ``mooncake/`` folder a ``.pth`` line adds is still ``mooncake.pg``."""
    other = tmp_path / "other" / "mooncake"
    other.mkdir(parents=True)
    shutil.copy2(copy / SITE / "mooncake" / "pg.py", other / "pg.py")
    os.unlink(copy / SITE / "mooncake" / "pg.py")
    (copy / SITE / "other.pth").write_text(f"{other.parent}\n")
    ok, _, _ = _agree(copy, tmp_path)
    assert ok


@pytest.mark.parametrize("file", ["sitecustomize.py", "zz-shadow.pth"])
def test_site_code_inserting_a_folder_that_shadows_mooncake(copy: Path, tmp_path: Path,
                                                            file: str) -> None:
    shadow = tmp_path / "shadow" / "mooncake"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    (shadow / "pg.py").write_text("raise ImportError('the shadow pg')\n")
    line = f"import sys; sys.path.insert(0, {str(shadow.parent)!r})\n"
    (copy / SITE / file).write_text(line)
    ok, err, got = _agree(copy, tmp_path)
    assert not ok and "the shadow pg" in err
    for _, out in got.values():
        assert "shadow/mooncake/pg.py" in out, out


def _empty_library(folder: Path, soname: str) -> None:
    """A shared object named ``soname`` in ``folder`` (made here) that defines nothing the
    image needs."""
    if shutil.which("gcc") is None:
        pytest.fail("needs gcc")
    folder.mkdir()
    (folder / "e.c").write_text("int moonpin_empty(void) { return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(folder / soname),
                    f"-Wl,-soname,{soname}", str(folder / "e.c")], check=True)


def test_an_empty_ld_library_path_entry_is_the_working_folder(copy: Path,
                                                              tmp_path: Path) -> None:
    """``LD_LIBRARY_PATH=<stub>:`` (a trailing colon): ld.so looks in the working folder
    before the build's ``DT_RUNPATH``, where an empty ``libmooncake_pg.so`` is found."""
    wd = tmp_path / "wd"
    _empty_library(wd, "libmooncake_pg.so")
    assert REALIMG is not None
    ld = {"LD_LIBRARY_PATH": str(Path(REALIMG) / "stubs") + ":"}
    ok, err, got = _agree(copy, tmp_path, env_extra=ld, cwd=wd)
    assert not ok and "undefined symbol" in err
    for _, out in got.values():
        assert "fail  symbols:" in out, out
    ok, _, _ = _agree(copy, tmp_path, env_extra={"LD_LIBRARY_PATH": str(Path(REALIMG) / "stubs")},
                      cwd=wd)
    assert ok


def test_torch_raising_when_a_variable_is_set(copy: Path, tmp_path: Path) -> None:
    init = copy / SITE / "torch" / "__init__.py"
    _own(init)
    text = init.read_text()
    init.write_text(text.replace("import builtins\n", "import builtins\nimport os as _os\n"
                                 "if 'MOONPIN_T_NO_TORCH' in _os.environ:\n"
                                 "    raise ImportError('refused')\n", 1))
    ok, err, _ = _agree(copy, tmp_path, env_extra={"MOONPIN_T_NO_TORCH": "1"})
    assert not ok and "refused" in err
    ok, _, _ = _agree(copy, tmp_path)
    assert ok


@pytest.mark.parametrize("extends", [True, False])
def test_mooncake_from_a_zip_archive_ahead_of_site_packages(copy: Path, tmp_path: Path,
                                                            extends: bool) -> None:
    """A ``.pth`` line inserting a zip archive of mooncake's Python files (and its builds)
    first on ``sys.path``: with the real ``__init__`` (``extend_path``) the builds come
    from site-packages and the import works; with an ``__init__`` that does not extend
    ``__path__``, ``pg_2_13_0`` is looked for in the archive, where zipimport imports no
    extension module, and the import fails."""
    import zipfile

    mc = copy / SITE / "mooncake"
    arc = tmp_path / "mc.zip"
    with zipfile.ZipFile(arc, "w") as z:
        z.writestr("mooncake/__init__.py", (mc / "__init__.py").read_text() if extends else "")
        for name in ("pg.py", "buffer_pool.py", BUILD):
            z.write(mc / name, f"mooncake/{name}")
    (copy / SITE / "aa-zip.pth").write_text(f"import sys; sys.path.insert(0, {str(arc)!r})\n")
    ok, err, got = _agree(copy, tmp_path, "from mooncake.pg import MooncakeBackendOptions")
    assert ok is extends, err
    for _, out in got.values():
        assert extends or "zipimport imports no extension module" in out, out


@pytest.mark.parametrize("how", ["unchecked-hash cache", "version.pyc, no source"])
def test_a_torch_label_the_bytecode_binds(copy: Path, tmp_path: Path, how: str) -> None:
    """The import runs bytecode, not torch/version.py: an unchecked-hash cache, or a
    ``version.pyc`` left with no source, binding another release's label (2.12.0):
    ``pg_2_12_0`` is loaded and fails."""
    import py_compile

    version_py = copy / SITE / "torch" / "version.py"
    other = tmp_path / "version.py"
    other.write_text(version_py.read_text().replace("'2.13.0+cu130'", "'2.12.0+cu130'", 1))
    if how.startswith("unchecked"):
        cache = version_py.parent / "__pycache__" / "version.cpython-311.pyc"
        if cache.exists():
            os.unlink(cache)
        py_compile.compile(str(other), cfile=str(cache), doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    else:
        py_compile.compile(str(other), cfile=str(version_py.with_suffix(".pyc")),
                           doraise=True)
        os.unlink(version_py)
    ok, err, got = _agree(copy, tmp_path)
    assert not ok and "pg_2_12_0" in err
    for _, out in got.values():
        assert "loader finds pg_2_12_0" in out, out


def test_a_loader_left_as_bytecode_only(copy: Path, tmp_path: Path) -> None:
    """``compileall -b`` and mooncake's ``pg.py`` removed: ``pg.pyc`` is the loader; the
    import works, and the check judges it as the loader the release ships."""
    import py_compile

    pg = copy / SITE / "mooncake" / "pg.py"
    py_compile.compile(str(pg), cfile=str(pg.with_suffix(".pyc")), doraise=True)
    os.unlink(pg)
    ok, _, got = _agree(copy, tmp_path, "from mooncake.pg import MooncakeBackendOptions")
    assert ok
    for _, out in got.values():
        assert "pg.pyc is bytecode with no source" in out and "loader finds pg_2_13_0" in out


def test_a_c_symbol_a_vendored_library_lost(copy: Path, tmp_path: Path) -> None:
    """The build needs a library of mooncake's folder that needs a plain C symbol of
    another, rebuilt without it: ld.so fails on it (the host driver, also in the scope,
    exports only its cu*/nvml* API)."""
    if shutil.which("gcc") is None or shutil.which("patchelf") is None:
        pytest.fail("needs gcc and patchelf")
    mc = copy / SITE / "mooncake"
    (tmp_path / "def.c").write_text("int mp_foo(void) { return 1; }\n")
    (tmp_path / "use.c").write_text("extern int mp_foo(void);\n"
                                    "int mp_use(void) { return mp_foo(); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "libmpdef.so"),
                    "-Wl,-soname,libmpdef.so", str(tmp_path / "def.c")], check=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(mc / "libmpuse.so"),
                    "-Wl,-soname,libmpuse.so", str(tmp_path / "use.c"), f"-L{tmp_path}",
                    "-lmpdef", "-Wl,-rpath,$ORIGIN"], check=True)
    (tmp_path / "def.c").write_text("int mp_bar(void) { return 1; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(mc / "libmpdef.so"),
                    "-Wl,-soname,libmpdef.so", str(tmp_path / "def.c")], check=True)
    build = mc / BUILD
    _own(build)
    subprocess.run(["patchelf", "--add-needed", "libmpuse.so", str(build)], check=True)
    ok, err, got = _agree(copy, tmp_path)
    assert not ok and "undefined symbol: mp_foo" in err
    for _, out in got.values():
        assert "fail  symbols:" in out and "mp_foo" in out, out


@pytest.mark.parametrize(("code", "env", "works"), [
    ("import os\n__version__ = os.environ.get('MOONPIN_T_TV', '2.13.0+cu130')", {}, True),
    ("import os\n__version__ = os.environ.get('MOONPIN_T_TV', '2.13.0+cu130')",
     {"MOONPIN_T_TV": "2.12.0"}, False),
    ("import sys\nif sys.version_info >= (3, 8):\n    __version__ = '2.12.0+cu130'\nelse:\n"
     "    __version__ = '2.13.0+cu130'", {}, False),
])
def test_a_torch_label_from_the_environment_or_python(copy: Path, tmp_path: Path, code: str,
                                                      env: dict[str, str], works: bool) -> None:
    version_py = copy / SITE / "torch" / "version.py"
    _own(version_py)
    version_py.write_text(version_py.read_text().replace("__version__ = '2.13.0+cu130'",
                                                         code, 1))
    ok, _, got = _agree(copy, tmp_path, env_extra=env)
    assert ok is works
    for _, out in got.values():
        assert ("loader finds pg_2_13_0" if works else "loader finds pg_2_12_0") in out, out


def test_ld_preload_in_the_global_scope(copy: Path, tmp_path: Path) -> None:
    """``LD_PRELOAD`` of an empty library named ``libmooncake_pg.so``: ld.so maps it at
    the interpreter's start, and the build's ``DT_NEEDED`` of that name is that object, so
    its symbols are missing; a preload that cannot be opened is ignored."""
    if shutil.which("gcc") is None:
        pytest.fail("needs gcc")
    (tmp_path / "e.c").write_text("int moonpin_empty(void) { return 0; }\n")
    empty = tmp_path / "pre" / "libmooncake_pg.so"
    empty.parent.mkdir()
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(empty),
                    "-Wl,-soname,libmooncake_pg.so", str(tmp_path / "e.c")], check=True)
    ok, err, got = _agree(copy, tmp_path, env_extra={"LD_PRELOAD": str(empty)})
    assert not ok and "undefined symbol" in err
    for _, out in got.values():
        assert "fail  symbols:" in out, out
    ok, _, _ = _agree(copy, tmp_path, env_extra={"LD_PRELOAD": str(tmp_path / "none.so")})
    assert ok


@pytest.mark.parametrize("entries", [":$ORIGIN", "/nonexistent::$ORIGIN",
                                     "/nonexistent:$ORIGIN"])
def test_an_empty_runpath_entry_is_the_working_folder(copy: Path, tmp_path: Path,
                                                      entries: str) -> None:
    """The build's ``DT_RUNPATH`` set with an empty entry (``patchelf --set-rpath``): ld.so
    searches the working folder there, where a ``libmooncake_pg.so`` that is no ELF object
    fails the import; from a clean folder it loads. Only the third spelling, without an
    empty entry, never looks there."""
    if shutil.which("patchelf") is None:
        pytest.fail("needs patchelf")
    build = copy / SITE / "mooncake" / BUILD
    _own(build)
    subprocess.run(["patchelf", "--set-rpath", entries, str(build)], check=True)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "libmooncake_pg.so").write_text("not an ELF object\n")
    clean = tmp_path / "clean"
    clean.mkdir()
    ok, err, _ = _agree(copy, tmp_path, cwd=bad)
    assert ok is (entries == "/nonexistent:$ORIGIN"), err
    ok, err, _ = _agree(copy, tmp_path, cwd=clean)
    assert ok, err


def test_a_file_the_loader_cannot_map_first_on_ld_library_path(copy: Path,
                                                                tmp_path: Path) -> None:
    """A host folder first on ``LD_LIBRARY_PATH`` holding a ``libibverbs.so.1`` that is no
    ELF object: ld.so fails the build's load on it, as the check does."""
    host = tmp_path / "host"
    host.mkdir()
    (host / "libibverbs.so.1").write_text("not an ELF object\n" * 8)
    ok, err, _ = _agree(copy, tmp_path, extra_ld=str(host))
    assert not ok and "libibverbs.so.1" in err


def test_a_dangling_link_earlier_in_a_libraries_rpath(copy: Path, tmp_path: Path) -> None:
    """``libmooncake_pg.so``'s ``DT_RPATH`` is ``$ORIGIN`` then the wheel's ``.libs``: a
    dangling link of a vendored library's name in ``mooncake/`` is skipped by ld.so
    (``ENOENT``), which goes on to the real one; a loop of links there fails the load."""
    libs = copy / SITE / "mooncake_transfer_engine_cuda13.libs"
    glog = next(p.name for p in libs.iterdir() if p.name.startswith("libglog-"))
    link = copy / SITE / "mooncake" / glog
    link.symlink_to("/nonexistent/" + glog)
    ok, err, _ = _agree(copy, tmp_path)
    assert ok, err
    link.unlink()
    link.symlink_to(glog)
    ok, err, _ = _agree(copy, tmp_path)
    assert not ok and glog in err


@pytest.mark.parametrize("sub", ["glibc-hwcaps/x86-64-v2", "tls", "glibc-hwcaps/x86-64-v9"])
def test_a_library_in_a_hwcap_subfolder_of_mooncakes_folder(copy: Path, tmp_path: Path,
                                                            sub: str) -> None:
    """ld.so searches ``mooncake/<hwcap subfolder>/`` before ``mooncake/`` itself
    (``ld.so --help``): a ``libasio.so`` there that defines nothing is the one it maps
    (the build's symbols then do not bind); a subfolder it does not search changes
    nothing."""
    if shutil.which("gcc") is None:
        pytest.fail("needs gcc")
    folder = copy / SITE / "mooncake" / sub
    folder.mkdir(parents=True)
    (tmp_path / "e.c").write_text("int moonpin_empty(void) { return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(folder / "libasio.so"),
                    "-Wl,-soname,libasio.so", str(tmp_path / "e.c")], check=True)
    ok, err, _ = _agree(copy, tmp_path)  # "tls": searched before glibc 2.37 only
    if sub != "tls":
        assert ok is (sub.endswith("v9") or os.uname().machine != "x86_64"), err


def test_a_host_library_given_another_copy_of_what_it_needs(copy: Path,
                                                            tmp_path: Path) -> None:
    """``libmooncake_pg.so`` needs the host's ``libcurl.so.4``; a ``libnghttp2.so.14``
    that defines nothing, first on ``LD_LIBRARY_PATH``, is what libcurl then maps: the
    load fails on libcurl's symbols, and the fix names the shadowing copy's folder."""
    shadow = tmp_path / "shadow"
    _empty_library(shadow, "libnghttp2.so.14")
    ok, err, got = _agree(copy, tmp_path, extra_ld=str(shadow))
    assert not ok and "libcurl.so.4" in err
    for _, out in got.values():
        assert "is the host's" in out, out


@pytest.mark.parametrize("entry", ["{tmp}/$LIB", "{tmp}/${{LIB}}", "{tmp}/$LIBX"])
def test_a_token_in_ld_library_path(copy: Path, tmp_path: Path, entry: str) -> None:
    """ld.so substitutes ``$LIB`` in ``LD_LIBRARY_PATH`` (``lib/x86_64-linux-gnu`` on
    Debian, ``lib64`` on RHEL): a ``libmooncake_pg.so`` that is no ELF object in that
    folder is found before the build's own; ``$LIBX`` is no token, and names no folder."""
    from moonpin.preflight.loader.ldso import lib_token

    folder = tmp_path / lib_token()
    folder.mkdir(parents=True)
    (folder / "libmooncake_pg.so").write_text("not an ELF object\n" * 8)
    ok, err, _ = _agree(copy, tmp_path, extra_ld=entry.format(tmp=tmp_path))
    assert ok is entry.endswith("$LIBX"), err
