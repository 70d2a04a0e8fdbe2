"""``import mooncake.pg`` loads torch first: the light check follows that chain from the
files (moonpin/preflight/loader/loadchain.py) and judges the build in the process it
leaves, as the real import does. Hermetic: a torch whose ``__init__.py`` has the shape of
torch 2.13's own (``ctypes.CDLL`` of ``lib/libtorch_global_deps.so`` with
``RTLD_GLOBAL``, the CUDA preloads it globs from ``sys.path`` when the CUDA runtime is in
``/proc/self/maps``, ``from torch._C import *``, the namespace-folder fallback), with every
object built by gcc, so each verdict is compared with the real import in a child."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.lib.checkrun import ROOT, Run, run, small_kb
from tests.lib.images import PG_NAMES, add_mooncake, add_sglang, add_torch, ext_suffix

#: how a fix line pins the installed torch (its CPU build excluded)
TORCH = "'torch==2.13.0,!=2.13.0+cpu'"

_INCLUDE = sysconfig.get_paths()["include"]
pytestmark = pytest.mark.skipif(
    shutil.which("gcc") is None or not Path(_INCLUDE, "Python.h").exists(),
    reason="needs gcc and Python's headers")

TORCH_INIT = '''import ctypes
import glob
import os
import platform
import sys

__version__ = "2.13.0"


def _get_cuda_dep_paths(path, lib_folder, lib_name):
    nvidia_lib_paths = glob.glob(os.path.join(path, "nvidia", lib_folder, "lib", lib_name))
    lib_paths = glob.glob(os.path.join(path, lib_folder, "lib", lib_name))
    return nvidia_lib_paths + lib_paths


def _preload_cuda_lib(lib_folder, lib_name, required=True):
    lib_path = None
    for path in sys.path:
        candidate_lib_paths = _get_cuda_dep_paths(path, lib_folder, lib_name)
        if candidate_lib_paths:
            lib_path = candidate_lib_paths[0]
            break
    if not lib_path and required:
        raise ValueError(f"{lib_name} not found in the system path {sys.path}")
    if lib_path:
        ctypes.CDLL(lib_path)


def _preload_cuda_deps(err=None):
    cuda_libs = [("cu13", "libfzrt.so.*[0-9]"), ("cu13", "libfzjit.so.*[0-9]")]
    if err is not None and not [
        lib for _, lib in cuda_libs if lib.split(".", 1)[0] in err.args[0]
    ]:
        raise err
    for lib_folder, lib_name in cuda_libs:
        _preload_cuda_lib(lib_folder, lib_name)


def _load_global_deps():
    if platform.system() == "Windows":
        return
    lib_name = "libtorch_global_deps.so"
    here = os.path.abspath(__file__)
    global_deps_lib_path = os.path.join(os.path.dirname(here), "lib", lib_name)
    try:
        ctypes.CDLL(global_deps_lib_path, mode=ctypes.RTLD_GLOBAL)
        try:
            with open("/proc/self/maps") as f:
                _maps = f.read()
            if "libfzrt.so" not in _maps:
                return
            _preload_cuda_deps()
        except Exception:
            pass
    except OSError as err:
        _preload_cuda_deps(err)
        ctypes.CDLL(global_deps_lib_path, mode=ctypes.RTLD_GLOBAL)


_load_global_deps()
from torch._C import *  # noqa: F403

try:
    from torch._C import _initExtension
except ImportError:
    import torch._C as _C_for_compiled_check

    if _C_for_compiled_check.__file__ is None:
        raise ImportError("Failed to load PyTorch C extensions: the torch/_C folder was "
                          "imported instead") from None
    raise
'''


def _gcc(out: Path, code: str, *, needs: tuple[str, ...] = (), rpath: str | None = None,
         runpath: str | None = None, soname: str | None = None, link: Path | None = None,
         python: bool = False, versions: Path | None = None) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.with_name(out.name + ".c")
    src.write_text(code)
    cmd = ["gcc", "-shared", "-fPIC", "-nostdlib", "-o", str(out), str(src),
           "-Wl,--no-as-needed", "-Wl,--allow-shlib-undefined"]
    if python:
        cmd.append(f"-I{_INCLUDE}")
    if soname:
        cmd.append(f"-Wl,-soname,{soname}")
    if versions:  # a version script: the symbol versions the object defines
        cmd.append(f"-Wl,--version-script={versions}")
    for path, tag in ((rpath, "--disable-new-dtags"), (runpath, "--enable-new-dtags")):
        if path:
            cmd += [f"-Wl,-rpath,{path}", f"-Wl,{tag}"]
    for n in needs:
        cmd += [f"-L{link or out.parent}", f"-l:{n}"]
    subprocess.run(cmd, check=True, capture_output=True)
    src.unlink()
    return out


def _module(name: str, body: str = "", methods: tuple[str, ...] = ()) -> str:
    defs = "".join(f'{{"{m}", fz_none, METH_NOARGS, NULL}}, ' for m in methods)
    return ("#include <Python.h>\n" + body
            + "static PyObject *fz_none(PyObject *s, PyObject *a) { Py_RETURN_NONE; }\n"
            + f"static PyMethodDef fz_methods[] = {{{defs}{{NULL, NULL, 0, NULL}}}};\n"
            + f'static struct PyModuleDef fz_def = {{PyModuleDef_HEAD_INIT, "{name}", NULL, '
            + "-1, fz_methods};\n"
            + f"PyMODINIT_FUNC PyInit_{name}(void) {{ return PyModule_Create(&fz_def); }}\n")


def _image(tmp_path: Path, build_needs: tuple[str, ...] = ("libc10.so", "libfzrt.so.13"),
           build_code: str = "extern int c10_fn(void);\nint fz_use(void) { return c10_fn(); }\n"
           ) -> Path:
    """torch 2.13.0 as its files load (gcc-built), mooncake 0.3.13.post1's pg loader and
    a pg_2_13_0 build whose RUNPATH ($ORIGIN) finds none of torch's libraries: only what
    `import torch` loaded."""
    site = tmp_path / "site"
    add_torch(site)
    add_sglang(site)
    add_mooncake(site, torch_builds=("2.13.0",), loaders=("pg",))
    torch = site / "torch"
    for f in [*torch.glob("_C*"), *(torch / "lib").iterdir()]:
        f.unlink()
    (torch / "__init__.py").write_text(TORCH_INIT)
    (torch / "_C").mkdir()  # as the wheel's: torch/_C/*.pyi, no __init__
    (torch / "_C" / "__init__.pyi").write_text("")
    cu = site / "nvidia" / "cu13" / "lib"
    for f in cu.iterdir():
        f.unlink()
    _gcc(cu / "libfzrt.so.13", "int fzrt_init(void) { return 0; }\n", soname="libfzrt.so.13")
    _gcc(cu / "libfzjit.so.13", "int fzjit(void) { return 0; }\n", soname="libfzjit.so.13")
    _gcc(cu / "libfzextra.so.1", "int fzextra(void) { return 0; }\n", soname="libfzextra.so.1")
    lib = torch / "lib"
    _gcc(lib / "libtorch_global_deps.so", "int deps(void) { return 0; }\n",
         needs=("libfzrt.so.13",), link=cu, soname="libtorch_global_deps.so",
         rpath="$ORIGIN/../../nvidia/cu13/lib")
    _gcc(lib / "libc10.so", "int c10_fn(void) { return 1; }\n", soname="libc10.so")
    _gcc(lib / "libtorch_python.so", "extern int c10_fn(void);\n"
         "int tp(void) { return c10_fn(); }\n", needs=("libc10.so",), soname="libtorch_python.so",
         rpath="$ORIGIN:$ORIGIN/../../nvidia/cu13/lib")
    _gcc(torch / f"_C{ext_suffix()}", _module("_C", methods=("_initExtension",)),
         needs=("libtorch_python.so",), link=lib, rpath="$ORIGIN/lib", python=True)
    names = "".join(f'"{n}", ' for n in (*PG_NAMES, "mooncake", "mooncake-cpu"))
    build = site / "mooncake" / f"pg_2_13_0{ext_suffix()}"
    build.unlink()
    links = tmp_path / "links"  # what the build was linked against: torch's and CUDA's
    links.mkdir()
    for d in (lib, cu):
        for f in d.iterdir():
            shutil.copy(f, links / f.name)
    _gcc(build, _module("pg_2_13_0", f"__attribute__((used)) const char *fz_names[] = "
                        f"{{{names}}};\n" + build_code), needs=build_needs, link=links,
         runpath="$ORIGIN", python=True)
    shutil.rmtree(links)
    return site


def _real(site: Path) -> tuple[bool, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    proc = subprocess.run([sys.executable, "-c", "import mooncake.pg"], capture_output=True,
                          text=True, timeout=60, env=env, cwd=site.parent)
    return proc.returncode == 0, (proc.stderr.strip().splitlines() or [""])[-1]


def _agree(site: Path, tmp_path: Path) -> tuple[bool, str, Run]:
    ok, err = _real(site)
    r = run(site, kb=small_kb(tmp_path))
    assert r.rc == (0 if ok else 1), f"the import: {'works' if ok else err}\n{r.out}"
    return ok, err, r


def test_the_image_loads(tmp_path: Path) -> None:
    ok, _, r = _agree(_image(tmp_path), tmp_path)
    assert ok and r.status("libraries") == "pass" and r.status("symbols") == "pass"


def test_torch_c_missing_is_torchs_failure(tmp_path: Path) -> None:
    site = _image(tmp_path)
    (site / "torch" / f"_C{ext_suffix()}").unlink()
    ok, err, r = _agree(site, tmp_path)
    assert not ok and "Failed to load PyTorch C extensions" in err
    line = r.line("import chain")
    assert line.startswith("fail") and "`import torch` raises ImportError" in line
    assert "Failed to load PyTorch C extensions" in line
    assert r.fixes() == [f"fix: pip install --force-reinstall --no-deps {TORCH}"]
    assert "mooncake-transfer-engine" not in r.out.split("import chain", 1)[1]


@pytest.mark.parametrize("content", [b"hi\n", b"\x7fELF" + bytes(60), b"#!/bin/sh\n" * 20])
def test_torch_c_not_an_elf_object(tmp_path: Path, content: bytes) -> None:
    site = _image(tmp_path)
    (site / "torch" / f"_C{ext_suffix()}").write_bytes(content)
    ok, err, r = _agree(site, tmp_path)
    assert not ok and "_C" in err
    assert r.status("import chain") == "fail" and "`import torch`" in r.line("import chain")
    assert "'torch==2.13.0,!=2.13.0+cpu'" in r.fixes()[0]


def test_global_deps_missing(tmp_path: Path) -> None:
    """torch 2.13 re-raises the OSError: it names none of the CUDA libraries it knows."""
    site = _image(tmp_path)
    (site / "torch" / "lib" / "libtorch_global_deps.so").unlink()
    ok, err, r = _agree(site, tmp_path)
    assert not ok and "libtorch_global_deps.so: cannot open shared object file" in err
    assert "OSError" in r.line("import chain") and "libtorch_global_deps.so" in r.line(
        "import chain")
    assert r.fixes() == [f"fix: pip install --force-reinstall --no-deps {TORCH}"]


def test_global_deps_unbindable(tmp_path: Path) -> None:
    """libtorch_global_deps.so needs a symbol nothing defines: dlopen fails on it."""
    site = _image(tmp_path)
    lib = site / "torch" / "lib"
    _gcc(lib / "libtorch_global_deps.so", "extern int fz_gone(void);\n"
         "int deps(void) { return fz_gone(); }\n", soname="libtorch_global_deps.so")
    ok, err, r = _agree(site, tmp_path)
    assert not ok and "undefined symbol: fz_gone" in err
    assert "undefined symbol: fz_gone" in r.line("import chain")


def test_a_truncated_torch_library_is_torchs_failure(tmp_path: Path) -> None:
    site = _image(tmp_path)
    lib = site / "torch" / "lib" / "libc10.so"
    lib.write_bytes(lib.read_bytes()[:2000])
    ok, _, r = _agree(site, tmp_path)
    assert not ok
    assert r.status("import chain") == "fail" and "libc10.so" in r.line("import chain")
    assert r.fixes() == [f"fix: pip install --force-reinstall --no-deps {TORCH}"]


def test_the_cuda_runtime_gone_fails_torch_with_its_packages(tmp_path: Path) -> None:
    """No CUDA runtime: libtorch_global_deps.so cannot load, torch's except clause preloads
    the CUDA libraries from sys.path, finds none and raises ValueError."""
    site = _image(tmp_path)
    (site / "nvidia" / "cu13" / "lib" / "libfzrt.so.13").unlink()
    ok, err, r = _agree(site, tmp_path)
    assert not ok and err.startswith("ValueError: libfzrt.so.*[0-9] not found")
    line = r.line("import chain")
    assert "raises ValueError: libfzrt.so.*[0-9] not found in the system path" in line
    # the torch line, from the same modelled import, fails too, and holds the one fix: no
    # record names libfzrt's owner (a folder of torch's CUDA packages, no RECORD lists it);
    # mooncake's line, a consequence, points there rather than saying it twice
    assert r.line("torch").startswith("fail") and "libfzrt.so.13" in r.line("torch"), r.out
    assert "torch's line has the fix" in line
    at = r.lines.index(next(x for x in r.lines if x.startswith("fail  torch")))
    assert r.fixes() == [r.lines[at + 1].strip()], r.out
    assert "install what provides libfzrt.so.13" in r.fixes()[0], r.out


_TORCH_214_GLOBAL_DEPS = '''    here = os.path.abspath(__file__)
    global_deps_lib_path = os.path.join(os.path.dirname(here), "lib", lib_name)
    if not os.path.exists(global_deps_lib_path):
        try:
            from importlib.metadata import distribution

            installed = distribution("torch").locate_file(
                os.path.join("torch", "lib", lib_name)
            )
            if installed.exists():
                global_deps_lib_path = str(installed)
        except Exception:
            pass
'''


def test_global_deps_looked_for_through_the_distributions_metadata(tmp_path: Path) -> None:
    """torch 2.14's ``_load_global_deps``: a ``libtorch_global_deps.so`` not beside
    ``__file__`` is looked for where ``importlib.metadata`` locates torch's files (an
    editable install's); gone from both (the same path here), the load raises OSError. The
    check said pass: the path the unmodelled call might have given was unknown, so
    nothing was loaded."""
    site = _image(tmp_path)
    init = site / "torch" / "__init__.py"
    text = init.read_text()
    old = ("    here = os.path.abspath(__file__)\n    global_deps_lib_path = os.path.join("
           "os.path.dirname(here), \"lib\", lib_name)\n")
    assert old in text
    init.write_text(text.replace(old, _TORCH_214_GLOBAL_DEPS))
    (site / "torch" / "lib" / "libtorch_global_deps.so").unlink()
    ok, err, r = _agree(site, tmp_path)
    assert not ok and "libtorch_global_deps.so: cannot open shared object file" in err
    assert r.line("torch").startswith("fail") and "OSError" in r.line("torch"), r.out
    assert r.fixes() == [f"fix: pip install --force-reinstall --no-deps {TORCH}"]


def _versioned(out: Path, code: str, versions: tuple[str, ...], *, soname: str,
               needs: tuple[str, ...] = (), rpath: str | None = None, exports: str = "") -> None:
    """An object whose symbols carry ``versions`` (each node: the function ``fz_<node>``;
    the first node also ``exports``), linked against ``needs`` (their versions then
    needed)."""
    script = out.parent / (out.name + ".map")
    out.parent.mkdir(parents=True, exist_ok=True)
    script.write_text("".join(f"{v} {{ global: fz_{v}; "
                              f"{f'{exports} local: *; ' if i == 0 else ''}}};\n"
                              for i, v in enumerate(versions)))
    _gcc(out, code + "".join(f"int fz_{v}(void) {{ return {i}; }}\n"
                             for i, v in enumerate(versions)),
         needs=needs, rpath=rpath, soname=soname, versions=script)
    script.unlink()


@pytest.mark.parametrize("versioned", [True, False])
def test_a_library_the_site_code_loads_at_start_is_in_the_process(tmp_path: Path,
                                                                   versioned: bool) -> None:
    """A ``.pth`` ``import`` line whose module loads an older ``libc10.so`` by path with
    ``ctypes`` (``RTLD_GLOBAL``): ``site`` runs it at every start, so that object, not
    torch's own, satisfies ``libtorch_python.so``'s need, and ``import torch`` fails on a
    symbol version it lacks. The check said usable (the site code was never followed into
    the process; hunt I found it on a copy of the real stack image with an old
    ``libstdc++.so.6``); now torch fails as the real import does, and the fix takes the
    line out, after which both the import and the check pass. Unversioned, the older one
    lacks a symbol ``libtorch_python.so`` binds: ``undefined symbol`` (hunt J: a ``.pth``
    module loading another ``libc10.so`` in a copy of the real stack image); the check
    failed torch, but its fix reinstalled torch, which cannot help."""
    site, old = _old_c10(tmp_path) if versioned else _unversioned_c10(tmp_path)
    said = "version `C10_2' not found" if versioned else "undefined symbol: c10_new"
    (site / "zz_early.py").write_text(
        f"import ctypes\nctypes.CDLL({str(old)!r}, mode=ctypes.RTLD_GLOBAL)\n")
    pth = site / "zz_early.pth"
    pth.write_text("import zz_early\n")

    def real() -> subprocess.CompletedProcess[str]:  # site.addsitedir: what site does
        env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH",
                                                               "PYTHONPATH")}
        return subprocess.run([sys.executable, "-c", f"import site; site.addsitedir("
                               f"{str(site)!r}); import mooncake.pg"], capture_output=True,
                              text=True, timeout=60, env=env, cwd=tmp_path)

    proc = real()
    assert proc.returncode != 0 and said in proc.stderr, proc.stderr
    r = run(site, kb=small_kb(tmp_path))
    assert r.rc == 1 and r.line("torch").startswith("fail"), r.out
    assert said in r.line("torch"), r.out
    assert f"{pth} imports at every start" in r.line("torch"), r.out
    assert r.fixes()[0].startswith(f"fix: take `import zz_early` out of {pth} "), r.out
    pth.write_text("")  # the fix carried out
    assert real().returncode == 0
    assert run(site, kb=small_kb(tmp_path)).rc == 0


def _old_c10(tmp_path: Path) -> tuple[Path, Path]:
    """:func:`_image` whose torch ``libtorch_python.so`` needs version ``C10_2`` of its
    ``libc10.so``, and an older ``libc10.so`` defining ``C10_1`` only (returned)."""
    site = _image(tmp_path)
    lib = site / "torch" / "lib"
    _versioned(lib / "libc10.so", "int c10_fn(void) { return 1; }\n", ("C10_1", "C10_2"),
               soname="libc10.so", exports="c10_fn;")
    _versioned(lib / "libtorch_python.so", "extern int fz_C10_2(void);\n"
               "int tp(void) { return fz_C10_2(); }\n", ("TP_1",), soname="libtorch_python.so",
               needs=("libc10.so",), rpath="$ORIGIN:$ORIGIN/../../nvidia/cu13/lib")
    old = tmp_path / "old" / "libc10.so"
    _versioned(old, "int c10_fn(void) { return 1; }\n", ("C10_1",), soname="libc10.so",
               exports="c10_fn;")
    return site, old


def _unversioned_c10(tmp_path: Path) -> tuple[Path, Path]:
    """:func:`_image` whose torch ``libtorch_python.so`` binds ``c10_new`` of its
    unversioned ``libc10.so``, and an older ``libc10.so`` without it (returned)."""
    site = _image(tmp_path)
    lib = site / "torch" / "lib"
    _gcc(lib / "libc10.so", "int c10_fn(void) { return 1; }\nint c10_new(void) { return 2; }\n",
         soname="libc10.so")
    _gcc(lib / "libtorch_python.so", "extern int c10_new(void);\n"
         "int tp(void) { return c10_new(); }\n", soname="libtorch_python.so",
         needs=("libc10.so",), rpath="$ORIGIN:$ORIGIN/../../nvidia/cu13/lib")
    old = tmp_path / "old" / "libc10.so"
    _gcc(old, "int c10_fn(void) { return 1; }\n", soname="libc10.so")
    return site, old


@pytest.mark.parametrize("user_site", [True, False])
def test_a_library_usercustomize_loads_at_start(tmp_path: Path, user_site: bool) -> None:
    """``usercustomize`` in the user's site folder loads the older ``libc10.so`` with
    ``ctypes``: ``site`` imports it at every start when the user site is enabled (a venv with
    ``include-system-site-packages = true``; not under ``PYTHONNOUSERSITE``), and the real
    import fails (hunt J, a copy of the real stack image). The check said usable
    (``usercustomize`` was left out of what ``site`` runs); now it fails torch at the same
    symbol and names the file; with ``PYTHONNOUSERSITE=1`` both pass."""
    site, old = _unversioned_c10(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages",
                    str(venv)], check=True)
    own = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (own / "image.pth").write_text(f"{site}\n")
    user = tmp_path / "home" / ".local" / "lib" / \
        f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    user.mkdir(parents=True)
    custom = user / "usercustomize.py"
    custom.write_text(f"import ctypes\nctypes.CDLL({str(old)!r}, mode=ctypes.RTLD_GLOBAL)\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONUSERBASE", "PYTHONNOUSERSITE",
                        "MOONPIN_KB", "VIRTUAL_ENV")}
    env.update(HOME=str(tmp_path / "home"))
    if not user_site:
        env["PYTHONNOUSERSITE"] = "1"
    real = subprocess.run([str(venv / "bin" / "python"), "-c", "import mooncake.pg"],
                          capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert (real.returncode == 0) is not user_site, real.stderr
    r = Run(subprocess.run([sys.executable, "-m", "moonpin.preflight", "--no-deep",
                            "--elastic-ep-backend", "mooncake", "--python",
                            str(venv / "bin" / "python"), "--kb", str(small_kb(tmp_path))],
                           cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120))
    assert r.rc == (1 if user_site else 0), r.out
    if user_site:
        assert "undefined symbol: c10_new" in r.line("torch"), r.out
        assert f"`import usercustomize` ({custom})" in r.line("torch"), r.out
        assert r.fixes()[0].startswith(f"fix: make {custom} not load {old} "), r.out


@pytest.mark.parametrize(("how", "env"), [("pth", []), ("user", ["HOME=/root"]),
                                          ("user", ["HOME=/root", "PYTHONNOUSERSITE=1"])])
def test_an_image_roots_site_code_loads_a_library_by_its_image_path(
        tmp_path: Path, how: str, env: list[str]) -> None:
    """``--rootfs``: a ``.pth`` module of the image's venv, or the ``usercustomize`` of the
    worker's user site folder (``/root/.local/...``; its venv has the system's site folders),
    loads ``/opt/img/old/libc10.so`` with ``ctypes``, a path of the image. The check said
    usable: a ``ctypes`` load by an image path was looked for on the host ("no such file",
    which ``site`` swallows), and the user site folder was not modelled. Hunt J, a copy of the
    real stack image root (``hunt-J-root-user``, the real import run in a chroot).
    ``PYTHONNOUSERSITE=1``: usable."""
    from moonpin.preflight.env.rootfs import ImageConfig
    from moonpin.preflight.run import check_image
    from tests.preflight.test_check_rootfs import PY, venv_root

    root = tmp_path / "root"
    own = venv_root(root, system_site=True)
    site, old = _unversioned_c10(root / "opt" / "img")
    (own / "img.pth").write_text(f"/{site.relative_to(root)}\n")
    user = root / "root" / ".local" / "lib" / f"python{PY}" / "site-packages"
    user.mkdir(parents=True)
    code = "import ctypes\nctypes.CDLL('/opt/img/old/libc10.so', mode=ctypes.RTLD_GLOBAL)\n"
    if how == "pth":
        (own / "zz_early.py").write_text(code)
        (own / "zz_early.pth").write_text("import zz_early\n")
    else:
        (user / "usercustomize.py").write_text(code)
    assert old == root / "opt/img/old/libc10.so"
    cfg = ImageConfig(env=["PATH=/opt/venv/bin:/usr/bin:/bin", *env])
    rep = check_image(elastic_ep_backend="mooncake", rootfs=root, config=cfg,
                      kb_path=small_kb(tmp_path), deep=False, source_cache=False)
    torch = next(c for c in rep.checks if c.name == "torch")
    if len(env) == 2:
        assert torch.status == "pass", torch.message
        return
    assert torch.status == "fail" and "undefined symbol: c10_new" in torch.message, \
        [(c.name, c.status, c.message) for c in rep.checks]
    if how == "pth":
        assert torch.fix is not None and torch.fix.startswith(
            f"take `import zz_early` out of /opt/venv/lib/python{PY}/site-packages/"
            "zz_early.pth"), torch.fix
        return
    assert "`import usercustomize` (/root/.local/lib/" in torch.message, torch.message
    assert torch.fix is not None and torch.fix.startswith(
        f"make /root/.local/lib/python{PY}/site-packages/usercustomize.py not load "
        "/opt/img/old/libc10.so"), torch.fix


def test_a_library_only_in_a_cuda_package_folder_is_not_found(tmp_path: Path) -> None:
    """The build needs libfzextra.so.1, which sits in nvidia/cu13/lib but which nothing
    `import torch` runs loads: the loader does not find it, nor does the check."""
    site = _image(tmp_path, build_needs=("libc10.so", "libfzextra.so.1"),
                  build_code="int fz_use(void) { return 0; }\n")
    ok, err, r = _agree(site, tmp_path)
    assert not ok and "libfzextra.so.1: cannot open shared object file" in err
    assert r.status("libraries") == "fail" and "libfzextra.so.1" in r.line("libraries")


def test_a_library_torch_preloads_is_found(tmp_path: Path) -> None:
    """libfzjit.so.13 is in torch's preload list: loaded before the build, found by name."""
    site = _image(tmp_path, build_needs=("libc10.so", "libfzjit.so.13"),
                  build_code="extern int fzjit(void);\nint fz_use(void) { return fzjit(); }\n")
    ok, _, r = _agree(site, tmp_path)
    assert ok and r.status("libraries") == "pass"
    # and when torch's preloads stop before it (the runtime is not in /proc/self/maps,
    # so nothing is preloaded), it is not
    init = site / "torch" / "__init__.py"
    init.write_text(init.read_text().replace('"libfzrt.so" not in _maps', "True"))
    ok, err, r = _agree(site, tmp_path)
    assert not ok and "libfzjit.so.13" in err and "libfzjit.so.13" in r.line("libraries")


def test_a_guarded_import_that_fails_is_no_failure(tmp_path: Path) -> None:
    """mooncake/__init__.py imports a store extension inside try/except ImportError: it
    cannot load (a library it needs is gone), so its objects are not loaded, and the
    build, which does not need them, loads."""
    site = _image(tmp_path)
    pkg = site / "mooncake"
    (pkg / "__init__.py").write_text("try:\n    from mooncake.store import BufferPool\n"
                                     "except (ImportError, AttributeError):\n"
                                     "    BufferPool = None\n")
    _gcc(pkg / "libstore_dep.so", "int sd(void) { return 0; }\n", soname="libstore_dep.so")
    _gcc(pkg / "store.so", _module("store"), needs=("libstore_dep.so",), runpath="$ORIGIN",
         python=True)
    ok, _, r = _agree(site, tmp_path)
    assert ok
    (pkg / "libstore_dep.so").unlink()
    ok, _, r = _agree(site, tmp_path)
    assert ok and r.status("libraries") == "pass"
    # unguarded, the same failure is mooncake's: its import fails
    (pkg / "__init__.py").write_text("from mooncake.store import BufferPool\n")
    ok, err, r = _agree(site, tmp_path)
    assert not ok and "libstore_dep.so" in err
    assert "`import mooncake` raises ImportError" in r.line("import chain")
    assert "mooncake-transfer-engine-cuda13==0.3.13.post1" in r.fixes()[0]


def test_objects_a_guarded_import_loaded_are_found_by_name(tmp_path: Path) -> None:
    """The build needs libstore_dep.so, which only mooncake.store's RUNPATH finds: found
    because the guarded import loaded it, and not once it cannot load."""
    site = _image(tmp_path)
    pkg = site / "mooncake"
    (pkg / "__init__.py").write_text("try:\n    from mooncake.store import BufferPool\n"
                                     "except ImportError:\n    BufferPool = None\n")
    _gcc(pkg / "deps" / "libstore_dep.so", "int sd(void) { return 0; }\n",
         soname="libstore_dep.so")
    build = pkg / f"pg_2_13_0{ext_suffix()}"
    names = "".join(f'"{n}", ' for n in (*PG_NAMES, "mooncake", "mooncake-cpu"))
    shutil.copy(site / "torch" / "lib" / "libc10.so", pkg / "deps")
    _gcc(build, _module("pg_2_13_0", f"__attribute__((used)) const char *fz_names[] = "
                        f"{{{names}}};\nint fz_use(void) {{ return 0; }}\n"),
         needs=("libc10.so", "libstore_dep.so"), link=pkg / "deps", runpath="$ORIGIN",
         python=True)
    (pkg / "deps" / "libc10.so").unlink()
    _gcc(pkg / "store.so", _module("store"), needs=("libstore_dep.so",), link=pkg / "deps",
         runpath="$ORIGIN/deps", python=True)
    ok, _, r = _agree(site, tmp_path)
    assert ok and r.status("libraries") == "pass"
    _gcc(pkg / "store.so", _module("store") + "extern int fz_gone(void);\n"
         "int st(void) { return fz_gone(); }\n", needs=("libstore_dep.so",),
         link=pkg / "deps", runpath="$ORIGIN/deps", python=True)
    ok, err, r = _agree(site, tmp_path)
    assert not ok and "libstore_dep.so" in err and "libstore_dep.so" in r.line("libraries")


def test_the_chain_is_remembered_and_its_files_checked(tmp_path: Path) -> None:
    """A warm check answers from the memo while the chain's files are unchanged, and
    sees a change to any of them (here torch's global deps, not a file of the build)."""
    site = _image(tmp_path)
    env = {"MOONPIN_CACHE_DIR": str(tmp_path / "cache")}
    kb = small_kb(tmp_path)
    assert run(site, kb=kb, env=env).rc == 0
    assert run(site, kb=kb, env=env).rc == 0  # from the memo
    (site / "torch" / "lib" / "libtorch_global_deps.so").unlink()
    r = run(site, kb=kb, env=env)
    assert r.rc == 1 and "libtorch_global_deps.so" in r.line("import chain")
    assert ROOT.is_dir()


def test_the_report_extends_what_a_load_found() -> None:
    """One shape for what loading found (findings.Findings): a dlopen's Outcome and the import
    chain's Report extend it, neither declares its fields again."""
    from moonpin.preflight.loader import ldproc
    from moonpin.preflight.loader.findings import Findings
    from moonpin.preflight.loader.loadchain import Report

    for cls in (Report, ldproc.Outcome):
        assert issubclass(cls, Findings)
        assert not set(cls.__slots__) & set(Findings.__slots__), cls
    r = Report()
    assert r.missing == {} and r.count == 0 and Report.load(r.dump()) is not None


# ------------------------------------------------------------------ one `import torch` a check


def _ext(site: Path, name: str, body: str = "", needs: tuple[str, ...] = ()) -> str:
    """An extension module ``name`` in ``site`` (gcc-built), its path."""
    return str(_gcc(site / f"{name}{ext_suffix()}", _module(name, body), needs=needs,
                    link=site / "torch" / "lib", runpath="$ORIGIN", python=True))


def _load(site: Path, build: str, run: object = None, mode: int | None = None) -> object:
    from importlib.machinery import EXTENSION_SUFFIXES

    from moonpin.preflight.loader.loadchain import native_load

    return native_load([build], [str(site)], None, python=sys.executable, first=("torch",),
                       suffixes=EXTENSION_SUFFIXES, run=run, mode=mode)  # type: ignore[arg-type]


def _count_imports(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The modules a chain is asked to import from its top (``import torch``: one each)."""
    from moonpin.preflight.pyimport import pyrun

    asked: list[str] = []
    real = pyrun.Chain.import_module

    def counted(self: pyrun.Chain, name: str, by: object) -> object:
        if getattr(by, "name", "") == "__main__":
            asked.append(name)
        return real(self, name, by)  # type: ignore[arg-type]

    monkeypatch.setattr(pyrun.Chain, "import_module", counted)
    return asked


def test_torch_is_modelled_once_a_check_and_each_load_says_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The extensions a check judges are each loaded into a copy of the process `import
    torch` built once (issue 39's speed); every load says what it says in a process of its
    own: a build that loads, one missing a library, one missing a symbol, one whose load
    fails after one that loaded."""
    from moonpin.kb.cache import facts_memo
    from moonpin.preflight.env.context import Run
    from moonpin.preflight.loader.loadchain import release

    site = _image(tmp_path)
    builds = [_ext(site, "fz_ok", "extern int c10_fn(void);\nint a(void) { return c10_fn(); }\n",
                   ("libc10.so",)),
              _ext(site, "fz_unbound", "extern int fz_nowhere(void);\n"
                   "int b(void) { return fz_nowhere(); }\n"),
              _ext(site, "fz_ok2", "extern int tp(void);\nint c(void) { return tp(); }\n",
                   ("libtorch_python.so",))]
    memo = facts_memo()
    memo.enabled = False  # every load computed, none remembered
    try:
        alone = [_load(site, b).dump() for b in builds]  # type: ignore[attr-defined]
        asked = _count_imports(monkeypatch)
        run = Run()
        shared = [_load(site, b, run).dump() for b in builds]  # type: ignore[attr-defined]
        assert run.processes
        release(run)
        assert not run.processes
    finally:
        memo.enabled = True
    assert asked == ["torch"], asked  # once for the three
    assert shared == alone
    assert alone[0][0] is None and not alone[0][5]  # torch imported, the build binds
    assert "fz_nowhere" in repr(alone[1][5]) and not alone[2][5]


def test_a_load_leaves_nothing_for_the_next(tmp_path: Path) -> None:
    """A build loaded `RTLD_GLOBAL` into the shared process, or one that fails half way,
    changes nothing another load sees: each is judged as in a process of its own."""
    from moonpin.kb.cache import facts_memo
    from moonpin.preflight.env.context import Run
    from moonpin.preflight.loader import ldproc

    site = _image(tmp_path)
    (site / "fzdep").mkdir()
    _gcc(site / "fzdep" / "libfz_global.so", "int fz_g(void) { return 2; }\n",
         soname="libfz_global.so")
    giver = str(_gcc(site / f"fz_giver{ext_suffix()}", _module("fz_giver"),
                     needs=("libfz_global.so",), link=site / "fzdep", runpath="$ORIGIN/fzdep",
                     python=True))
    broken = _ext(site, "fz_broken", "extern int fz_nowhere(void);\n"
                  "int b(void) { return fz_nowhere(); }\n")
    taker = _ext(site, "fz_taker", "extern int fz_g(void);\nint t(void) { return fz_g(); }\n")
    memo = facts_memo()
    memo.enabled = False
    try:
        run = Run()
        glob = ldproc.RTLD_NOW | ldproc.RTLD_GLOBAL
        first = _load(site, giver, run, glob).dump()  # type: ignore[attr-defined]
        _load(site, broken, run).dump()  # type: ignore[attr-defined]
        after = _load(site, taker, run).dump()  # type: ignore[attr-defined]
        alone = _load(site, taker).dump()  # type: ignore[attr-defined]
        (base,) = run.processes.values()
        assert not any("fz_giver" in o.path or "fz_broken" in o.path
                       for o in base.proc.objects)  # type: ignore[attr-defined]
        run.close()
    finally:
        memo.enabled = True
    assert not first[5] and "fz_g" in repr(alone[5])  # the giver loads; the taker alone fails
    assert after == alone


def test_a_build_the_import_loads_itself_is_loaded_on_its_own(tmp_path: Path) -> None:
    """A build `import torch` maps on its way (torch's own `_C`) is not loaded into the
    shared process, where it is mapped already: the chain stops before it, as alone."""
    from moonpin.kb.cache import facts_memo
    from moonpin.preflight.env.context import Run

    site = _image(tmp_path)
    ok = _ext(site, "fz_ok", "extern int c10_fn(void);\nint a(void) { return c10_fn(); }\n",
              ("libc10.so",))
    torch_c = str(next((site / "torch").glob("_C.*so")))
    memo = facts_memo()
    memo.enabled = False
    try:
        run = Run()
        _load(site, ok, run)
        shared = _load(site, torch_c, run).dump()  # type: ignore[attr-defined]
        alone = _load(site, torch_c).dump()  # type: ignore[attr-defined]
        run.close()
    finally:
        memo.enabled = True
    assert shared == alone


def test_a_load_after_the_shared_import_is_stamped_with_its_files(tmp_path: Path) -> None:
    """The second load into the process `import torch` built is remembered with the stamps
    of what that import read too: torch's global deps removed, it is not replayed."""
    from moonpin.preflight.env.context import Run

    site = _image(tmp_path)
    one = _ext(site, "fz_one", "extern int c10_fn(void);\nint a(void) { return c10_fn(); }\n",
               ("libc10.so",))
    two = _ext(site, "fz_two", "extern int tp(void);\nint c(void) { return tp(); }\n",
               ("libtorch_python.so",))
    run = Run()
    _load(site, one, run)
    assert _load(site, two, run).chain_error is None  # type: ignore[attr-defined]
    run.close()
    (site / "torch" / "lib" / "libtorch_global_deps.so").unlink()
    again = _load(site, two, Run())
    assert again.chain_error is not None  # type: ignore[attr-defined]
    assert "libtorch_global_deps.so" in again.chain_error[2]  # type: ignore[attr-defined]
