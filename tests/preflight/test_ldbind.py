"""Symbol binding as ld.so does it (moonpin/preflight/loader/ldbind.py), on ELF objects the real
toolchain
builds (gcc and GNU ld: GNU hash tables, version scripts), each checked against what the
real loader does with the same files (ctypes.CDLL with RTLD_NOW in a child)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from moonpin.kb.cache import facts_memo
from moonpin.preflight.loader import ldbind
from tests.lib.ldbinding import Binding, bind

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def _so(folder: Path, name: str, code: str, *, libs: tuple[str, ...] = (),
        version_script: str | None = None, soname: str | None = None,
        hash_style: str = "gnu") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / f"{name}.c"
    src.write_text(code)
    out = folder / name
    cmd = ["gcc", "-shared", "-fPIC", "-nostdlib", "-o", str(out), str(src),
           f"-Wl,--hash-style={hash_style}", "-Wl,--no-as-needed",
           f"-Wl,-soname,{soname or name}", f"-L{folder}", "-Wl,-rpath,$ORIGIN"]
    if version_script is not None:
        vs = folder / f"{name}.map"
        vs.write_text(version_script)
        cmd.append(f"-Wl,--version-script={vs}")
    cmd += [lib if "/" in lib else f"-l:{lib}" for lib in libs]
    subprocess.run(cmd, check=True, capture_output=True)
    src.unlink()
    return out


def _real_loader(path: Path) -> str:
    """What dlopen(RTLD_NOW) says of ``path``: 'ok' or its error."""
    code = ("import ctypes, os, sys\n"
            "try:\n    ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW)\n    print('ok')\n"
            "except OSError as e:\n    print(e)\n")
    return subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, timeout=30).stdout.strip()


@pytest.fixture(autouse=True)
def _hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONPIN_CHECK_SYSTEM_LIBS", "")
    monkeypatch.setenv("MOONPIN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)


def _bind(build: Path, site: Path) -> Binding:
    return bind([str(build)], [str(site)], None)


def test_a_missing_symbol_is_named_as_the_loader_names_it(tmp_path: Path) -> None:
    lib = tmp_path / "site" / "mooncake"
    _so(lib, "libdep.so", "int foo(void) { return 1; }\nint other(void) { return 2; }\n")
    build = _so(lib, "pg_2_13_0.so", "extern int foo(void);\n"
                "int call(void) { return foo(); }\n", libs=("libdep.so",))
    assert _real_loader(build) == "ok" and not _bind(build, tmp_path / "site").unbound
    _so(lib, "libdep.so", "int other(void) { return 2; }\n")  # foo gone, as in another release
    assert "undefined symbol: foo" in _real_loader(build)
    got = _bind(build, tmp_path / "site")
    assert [(Path(o).name, s) for o, s, _, _ in got.unbound] == [("pg_2_13_0.so", "foo")]
    assert "libdep.so" in got.unbound[0][3]  # the objects searched


def test_a_symbol_found_only_in_a_later_needed_library_binds(tmp_path: Path) -> None:
    lib = tmp_path / "site" / "mooncake"
    _so(lib, "libfirst.so", "int unrelated(void) { return 0; }\n")
    _so(lib, "libsecond.so", "int foo(void) { return 1; }\n")
    build = _so(lib, "pg.so", "extern int foo(void);\nint call(void) { return foo(); }\n",
                libs=("libfirst.so", "libsecond.so"))
    assert _real_loader(build) == "ok"
    got = _bind(build, tmp_path / "site")
    assert not got.unbound and got.refs == 1


def test_a_symbol_of_an_indirect_dependency_binds_breadth_first(tmp_path: Path) -> None:
    """foo is defined by a library the build does not name: its dependency's dependency."""
    lib = tmp_path / "site" / "mooncake"
    _so(lib, "libdeep.so", "int foo(void) { return 1; }\n")
    _so(lib, "libmid.so", "int mid(void) { return 0; }\n", libs=("libdeep.so",))
    build = _so(lib, "pg.so", "extern int foo(void);\nint call(void) { return foo(); }\n",
                libs=("libmid.so",))
    assert _real_loader(build) == "ok"
    assert not _bind(build, tmp_path / "site").unbound


def test_a_weak_reference_needs_no_definition(tmp_path: Path) -> None:
    lib = tmp_path / "site" / "mooncake"
    build = _so(lib, "pg.so", "extern int maybe(void) __attribute__((weak));\n"
                "int call(void) { return maybe ? maybe() : 0; }\n")
    assert _real_loader(build) == "ok"
    got = _bind(build, tmp_path / "site")
    assert not got.unbound and got.refs == 0


def test_a_version_the_library_does_not_define(tmp_path: Path) -> None:
    lib = tmp_path / "site" / "mooncake"
    _so(lib, "libv.so.1", "int foo(void) { return 1; }\n", soname="libv.so.1",
        version_script="LIBV_1.1 { global: foo; local: *; };\n")
    build = _so(lib, "pg.so", "extern int foo(void);\nint call(void) { return foo(); }\n",
                libs=("libv.so.1",))
    assert _real_loader(build) == "ok" and not _bind(build, tmp_path / "site").versions
    # the image's copy is older: it defines LIBV_1.0 only (as an old libstdc++ lacks
    # GLIBCXX_3.4.32)
    _so(lib, "libv.so.1", "int foo(void) { return 1; }\n", soname="libv.so.1",
        version_script="LIBV_1.0 { global: foo; local: *; };\n")
    assert "version `LIBV_1.1' not found" in _real_loader(build)
    got = _bind(build, tmp_path / "site")
    assert [(Path(o).name, v, n) for o, v, _, n in got.versions] == [
        ("pg.so", "LIBV_1.1", "LIBV_1.0")]


def test_a_sysv_hash_table_is_read_too(tmp_path: Path) -> None:
    lib = tmp_path / "site" / "mooncake"
    _so(lib, "libdep.so", "int other(void) { return 2; }\n", hash_style="sysv")
    build = _so(lib, "pg.so", "extern int foo(void);\nint call(void) { return foo(); }\n",
                libs=("libdep.so",), hash_style="sysv")
    assert "undefined symbol: foo" in _real_loader(build)
    assert [s for _, s, _, _ in _bind(build, tmp_path / "site").unbound] == ["foo"]
    _so(lib, "libdep.so", "int foo(void) { return 1; }\n", hash_style="sysv")
    assert _real_loader(build) == "ok" and not _bind(build, tmp_path / "site").unbound


def test_the_driver_is_host_provided_not_bound(tmp_path: Path) -> None:
    """A build needing libcuda.so.1: the image has no driver (the container runtime mounts
    it); its C API is left to the host, a C++ name never is."""
    lib = tmp_path / "site" / "mooncake"
    stub = _so(tmp_path / "host", "libcuda.so.1", "int cuInit(int f) { return 0; }\n",
               soname="libcuda.so.1")
    build = _so(lib, "pg.so", "extern int cuInit(int);\nint call(void) { return cuInit(0); }\n",
                libs=(str(stub),))
    got = _bind(build, tmp_path / "site")
    assert not got.unbound and got.host == ["cuInit"]
    cpp = _so(lib, "pg2.so", "extern int _ZN3c104cuda5checkEv(void);\n"
              "int call(void) { return cuInit(0) + _ZN3c104cuda5checkEv(); }\n"
              "extern int cuInit(int);\n", libs=(str(stub),))
    assert [s for _, s, _, _ in _bind(cpp, tmp_path / "site").unbound] == [
        "_ZN3c104cuda5checkEv"]


def test_a_c_name_of_no_driver_api_is_not_the_drivers(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A build needing libcuda.so.1 and a plain C symbol its libraries no longer define
    (a library rebuilt without it): the driver exports its API (``cu*``, ``nvml*``…), not
    that name, and the real loader fails on it."""
    lib = tmp_path / "site" / "mooncake"
    stub = _so(tmp_path / "host", "libcuda.so.1", "int cuInit(int f) { return 0; }\n",
               soname="libcuda.so.1")
    _so(lib, "libdep.so", "int mp_foo(void) { return 1; }\n")
    build = _so(lib, "pg.so", "extern int cuInit(int);\nextern int mp_foo(void);\n"
                "int call(void) { return cuInit(0) + mp_foo(); }\n",
                libs=(str(stub), "libdep.so"))
    monkeypatch.setenv("LD_LIBRARY_PATH", str(stub.parent))  # the host's driver, for ld.so
    assert _real_loader(build) == "ok" and not _bind(build, tmp_path / "site").unbound
    _so(lib, "libdep.so", "int mp_bar(void) { return 1; }\n")  # mp_foo gone
    assert "undefined symbol: mp_foo" in _real_loader(build)
    got = _bind(build, tmp_path / "site")
    assert [s for _, s, _, _ in got.unbound] == ["mp_foo"] and got.host == ["cuInit"]


def test_a_remembered_answer_is_dropped_when_a_definer_changes(tmp_path: Path) -> None:
    lib = tmp_path / "site" / "mooncake"
    _so(lib, "libdep.so", "int foo(void) { return 1; }\n")
    build = _so(lib, "pg.so", "extern int foo(void);\nint call(void) { return foo(); }\n",
                libs=("libdep.so",))
    assert not _bind(build, tmp_path / "site").unbound
    facts_memo().flush()
    _so(lib, "libdep.so", "int bar(void) { return 1; }\n")  # the build's stamp is unchanged
    assert [s for _, s, _, _ in _bind(build, tmp_path / "site").unbound] == ["foo"]


def test_demangle() -> None:
    name = "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb"
    got = ldbind.demangle(name)
    assert got in (name, "c10::cuda::c10_cuda_check_implementation(int, char const*, "
                         "char const*, unsigned int, bool)")
    if shutil.which("c++filt"):
        assert got.startswith("c10::cuda::c10_cuda_check_implementation(")
    assert ldbind.demangle("foo") == "foo"


def test_the_check_fails_a_build_whose_torch_symbols_are_not_there(tmp_path: Path) -> None:
    """The user's command on an image whose torch label is right but whose libc10 is
    another release's: the light check fails with the symbol, demangled, and a fix."""
    import os

    from tests.lib.images import PG_NAMES, ext_suffix, healthy_image

    site = healthy_image(tmp_path / "site")
    lib = site / "torch" / "lib"
    sym = "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb"
    strings = "".join(f'const char *s{i} = "{n}";\n'
                      for i, n in enumerate((*PG_NAMES, "mooncake", "mooncake-cpu")))
    build_dir = tmp_path / "b"
    _so(build_dir, "libcudart.so.13", "int cudart(void) { return 0; }\n",
        soname="libcudart.so.13")
    _so(lib, "libc10.so", "int unrelated(void) { return 0; }\n")
    built = _so(build_dir, "pg.so", strings + f"extern int {sym}(void);\n"
                f"int call(void) {{ return {sym}(); }}\n",
                libs=(str(lib / "libc10.so"), "libcudart.so.13"))
    os.replace(built, site / "mooncake" / f"pg_2_13_0{ext_suffix()}")
    argv = [sys.executable, "-m", "moonpin.preflight", "--site-packages", str(site),
            "--elastic-ep-backend", "mooncake", "--no-deep"]
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=root)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("fail  symbols"))
    assert "c10::cuda::c10_cuda_check_implementation" in line or sym in line
    assert "needed by pg_2_13_0" in line and "libc10.so" in line
    assert "'torch==2.13.0,!=2.13.0+cpu'" in proc.stdout  # the release the build was made for
    _so(lib, "libc10.so", f"int {sym}(void) {{ return 0; }}\n")  # the matching libc10
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pass  symbols: 1 undefined symbols" in proc.stdout


def test_an_old_library_is_one_failure_naming_what_the_loader_says_first(tmp_path: Path) -> None:
    """An image whose libv.so.1 is older than two of its objects need (as an old
    libstdc++ lacks GLIBCXX_3.4.20 and later for torch and the build alike): one failure
    for the library, naming the first version the loader names and the rest; no symbol is
    reported unbound (ld.so checks every version need before it binds anything)."""
    import os

    from tests.lib.images import PG_NAMES, ext_suffix, healthy_image

    site = healthy_image(tmp_path / "site")
    pkg = site / "mooncake"
    strings = "".join(f'const char *s{i} = "{n}";\n'
                      for i, n in enumerate((*PG_NAMES, "mooncake", "mooncake-cpu")))
    new = "LIBV_1.0 { global: foo; local: *; };\nLIBV_1.1 { global: bar; } LIBV_1.0;\n" \
          "LIBV_1.2 { global: baz; } LIBV_1.1;\n"
    code = "int foo(void) { return 1; }\nint bar(void) { return 2; }\nint baz(void) { return 3; }\n"
    _so(pkg, "libv.so.1", code, soname="libv.so.1", version_script=new)
    _so(pkg, "libw.so", "extern int baz(void);\nint w(void) { return baz(); }\n",
        libs=("libv.so.1",))
    _so(pkg, "libcudart.so.13", "int cudart(void) { return 0; }\n", soname="libcudart.so.13")
    built = _so(tmp_path / "b", "pg.so", strings + "extern int bar(void);\nextern int baz(void);\n"
                "extern int w(void);\nint call(void) { return bar() + baz() + w(); }\n",
                libs=(str(pkg / "libv.so.1"), str(pkg / "libw.so"), str(pkg / "libcudart.so.13")))
    build = pkg / f"pg_2_13_0{ext_suffix()}"
    os.replace(built, build)
    argv = [sys.executable, "-m", "moonpin.preflight", "--site-packages", str(site),
            "--elastic-ep-backend", "mooncake", "--no-deep"]
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "MOONPIN_CHECK_SYSTEM_LIBS": str(site / "_none")}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=root, env=env)
    assert "pass  symbols:" in proc.stdout and proc.returncode == 0, proc.stdout
    _so(pkg, "libv.so.1", "int foo(void) { return 1; }\n", soname="libv.so.1",
        version_script="LIBV_1.0 { global: foo; local: *; };\n")  # the older copy
    loader = _real_loader(build)
    assert "version `LIBV_1.1' not found" in loader or "version `LIBV_1.2' not found" in loader
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=root, env=env)
    assert proc.returncode == 1, proc.stdout
    failing = [x for x in proc.stdout.splitlines() if x.startswith("fail")]
    assert len(failing) == 1, proc.stdout
    first = loader.partition(": ")[2] or loader
    assert failing[0].startswith("fail  symbols: version `LIBV_1.")
    assert "defines at most LIBV_1.0" in failing[0] and "also needed: LIBV_1." in failing[0]
    assert "1 more object needs versions it lacks" in failing[0], failing[0]
    assert "undefined symbol" not in proc.stdout and first


def test_a_version_needed_of_a_library_that_has_none_aborts(tmp_path: Path) -> None:
    """The build needs foo@LIBV_1 of libv.so.1; the image's libv.so.1 has no versions at
    all but defines foo: ld.so's check_match asserts and the process dies (an except
    clause cannot catch it), even for a weak reference."""
    import subprocess as sp

    from moonpin.preflight.loader.loadchain import native_load

    lib = tmp_path / "site" / "mooncake"
    _so(lib, "libv.so.1", "int foo(void) { return 1; }\n", soname="libv.so.1",
        version_script="LIBV_1 { global: foo; local: *; };\n")
    for weak in (False, True):
        decl = "extern int foo(void)" + (" __attribute__((weak));\n" if weak else ";\n")
        build = _so(lib, "pg.so", decl + "int call(void) { return foo ? foo() : 0; }\n",
                    libs=("libv.so.1",))
        assert _real_loader(build) == "ok"
        assert not native_load([str(build)], [str(tmp_path / "site")], None,
                               python=None).bad
        _so(lib, "libv.so.1", "int foo(void) { return 1; }\n", soname="libv.so.1")
        code = "import ctypes, os, sys\nctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW)\n"
        died = sp.run([sys.executable, "-c", code, str(build)], capture_output=True, text=True,
                      timeout=30)
        assert died.returncode != 0 and "Inconsistency detected by ld.so" in died.stderr
        got = native_load([str(build)], [str(tmp_path / "site")], None, python=None)
        assert "ld.so abort" in got.bad[str(build)], got.bad
        _so(lib, "libv.so.1", "int foo(void) { return 1; }\n", soname="libv.so.1",
            version_script="LIBV_1 { global: foo; local: *; };\n")
