"""Differential, one loader class a case: moonpin's model of ld.so's search
(moonpin/preflight/loader/ldso.py) against the real loader, on small objects built with gcc
(tests/lib/ldcases.py) and imported for real in a child, from a chosen working folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from moonpin.preflight.loader import ldso
from tests.lib.ldcases import EXT, can_build, judged, lib, module, real

pytestmark = pytest.mark.skipif(can_build() is not None, reason=str(can_build()))
#: patchelf (Debian's, as .ci/run installs it) edits what gcc cannot write (an empty RUNPATH,
#: a DT_NEEDED with a slash or a token).
needs_patchelf = pytest.mark.skipif(shutil.which("patchelf") is None, reason="needs patchelf")

A = "int a_fn(void) { return 1; }\n"


def _agree(site: Path, cwd: Path, expect: bool | None, ld_path: str | None = None) -> None:
    cwd.mkdir(parents=True, exist_ok=True)
    truth = real(site, cwd, ld_path)
    if expect is not None:
        assert truth[0] is expect, truth
    says = judged(site, cwd, ld_path)
    assert says[0] is truth[0], (truth, says)


def _empty_entry(tag: str, value: str) -> Callable[[Path], None]:
    def build(site: Path) -> None:
        lib(site, "w/liba.so", A)
        module(site, ("a_fn",), needs=("w/liba.so",), **{tag: value})  # type: ignore[arg-type]
    return build


@pytest.mark.parametrize(("tag", "value"), [("runpath", "/nonexistent:"),
                                            ("runpath", "/x::/y"),
                                            ("rpath", ":/nonexistent")])
@pytest.mark.parametrize("in_w", [True, False])
def test_an_empty_search_path_entry_is_the_working_folder(tmp_path: Path, tag: str,
                                                          value: str, in_w: bool) -> None:
    site = tmp_path / "site"
    _empty_entry(tag, value)(site)
    _agree(site, site / "w" if in_w else site, in_w)


def test_the_same_load_judged_from_two_working_folders(tmp_path: Path) -> None:
    """The remembered answer of a load that used the working folder is not another's."""
    site = tmp_path / "site"
    _empty_entry("runpath", "/nonexistent:")(site)
    (site / "v").mkdir()
    _agree(site, site / "w", True)
    _agree(site, site / "v", False)
    _agree(site, site / "w", True)


@needs_patchelf
def test_an_empty_runpath_hides_the_rpath_of_its_loaders(tmp_path: Path) -> None:
    site = tmp_path / "site"
    lib(site, "f/libc1.so", "int c_fn(void) { return 1; }\n")
    lib(site, "g/libb.so", "extern int c_fn(void); int b_fn(void) { return c_fn(); }\n",
        needs=("f/libc1.so",))
    module(site, ("b_fn",), needs=("g/libb.so",), rpath="$ORIGIN/../f:$ORIGIN/../g")
    subprocess.run(["patchelf", "--set-rpath", "", str(site / "g/libb.so")], check=True)
    _agree(site, site, False)


@pytest.mark.parametrize("where", ["lib64", "lib/x86_64-linux-gnu", "lib",
                                   "lib/aarch64-linux-gnu"])
@pytest.mark.parametrize("spelling", ["$LIB", "${LIB}"])
def test_the_lib_token(tmp_path: Path, where: str, spelling: str) -> None:
    site = tmp_path / "site"
    lib(site, f"{where}/liba.so", A)
    module(site, ("a_fn",), needs=(f"{where}/liba.so",), runpath=f"$ORIGIN/../{spelling}")
    _agree(site, site, where == ldso.lib_token())


@pytest.mark.parametrize("where", ["x86_64", "haswell", "xeon_phi", "aarch64"])
def test_the_platform_token(tmp_path: Path, where: str) -> None:
    site = tmp_path / "site"
    lib(site, f"{where}/liba.so", A)
    module(site, ("a_fn",), needs=(f"{where}/liba.so",), runpath="$ORIGIN/../$PLATFORM")
    _agree(site, site, where == ldso.platform_token())


@pytest.mark.parametrize(("folder", "entry", "ok"), [
    ("$FOO", "$ORIGIN/../$FOO", True),  # an unknown token is kept as it is
    ("w", "${ORIGIN}/../w", True),
    ("$ORIGINAL", "$ORIGINAL", True),  # not $ORIGIN: a name goes on after it
    ("w", "$ORIGIN/../w/$LIBX/..", False),
])
def test_tokens_as_the_loader_reads_them(tmp_path: Path, folder: str, entry: str,
                                         ok: bool) -> None:
    site = tmp_path / "site"
    lib(site, f"{folder}/liba.so", A)
    module(site, ("a_fn",), needs=(f"{folder}/liba.so",), runpath=entry)
    _agree(site, site, ok)


@pytest.mark.parametrize("found_by_link", [True, False])
def test_origin_of_a_library_opened_through_a_link(tmp_path: Path,
                                                   found_by_link: bool) -> None:
    """``$ORIGIN`` is the folder the library was opened in, not where its link points."""
    site = tmp_path / "site"
    dep = "lcpkg/dep" if found_by_link else "real/dep"
    lib(site, f"{dep}/liba.so", A)
    lib(site, "real/libb.so", "extern int a_fn(void); int b_fn(void) { return a_fn(); }\n",
        needs=(f"{dep}/liba.so",), runpath="$ORIGIN/dep")
    (site / "lcpkg").mkdir(parents=True, exist_ok=True)
    os.symlink("../real/libb.so", site / "lcpkg" / "libb.so")
    module(site, ("b_fn",), needs=("real/libb.so",), runpath="$ORIGIN")
    _agree(site, site, found_by_link)


def _plant(where: Path, kind: str, good: Path) -> None:
    where.parent.mkdir(parents=True, exist_ok=True)
    if kind == "text":
        where.write_text("not an ELF object\n" * 10)
    elif kind == "short":
        where.write_bytes(b"\x7fELF")
    elif kind == "empty":
        where.write_bytes(b"")
    elif kind == "truncated":
        where.write_bytes(good.read_bytes()[:3000])
    elif kind == "folder":
        where.mkdir()
    elif kind == "executable":
        subprocess.run(["gcc", "-no-pie", "-o", str(where), "-x", "c", "-"], check=True,
                       input="int main(void) { return 0; }\n", text=True)
    elif kind == "32-bit":
        subprocess.run(["gcc", "-m32", "-nostdlib", "-shared", "-fPIC", "-o", str(where),
                        "-x", "c", "-"], check=True, input=A, text=True)


_KINDS = ["text", "short", "empty", "truncated", "folder", "executable", "32-bit"]


@pytest.mark.parametrize("kind", _KINDS)
@pytest.mark.parametrize("refs", [True, False])
def test_a_file_of_that_name_earlier_in_the_search(tmp_path: Path, kind: str,
                                                   refs: bool) -> None:
    """ld.so skips a file of another ELF class and goes on; any other file it cannot map
    fails the load (``open_verify``), in the image's folders or the host's alike."""
    site = tmp_path / "site"
    good = lib(site, "good/liba.so", A)
    if kind == "32-bit" and subprocess.run(
            ["gcc", "-m32", "-nostdlib", "-shared", "-o", str(tmp_path / "probe.so"), "-x",
             "c", "-"], input=A, text=True, capture_output=True).returncode != 0:
        pytest.skip("gcc cannot build 32-bit objects here")
    _plant(site / "first" / "liba.so", kind, good)
    _plant(tmp_path / "host" / "liba.so", kind, good)
    module(site, ("a_fn",) if refs else (), needs=("good/liba.so",),
           runpath="$ORIGIN/../first:$ORIGIN/../good")
    _agree(site, site, kind == "32-bit")
    # the same file in a folder of the host's, first on LD_LIBRARY_PATH
    module(site, ("a_fn",) if refs else (), needs=("good/liba.so",), runpath="$ORIGIN/../good")
    _agree(site, site, kind == "32-bit", str(tmp_path / "host"))


@needs_patchelf
def test_a_needed_name_with_a_slash_is_opened_from_the_working_folder(
        tmp_path: Path) -> None:
    site = tmp_path / "site"
    lib(site, "w/liba.so", A)
    mod = module(site, ("a_fn",), needs=("w/liba.so",))
    subprocess.run(["patchelf", "--replace-needed", "liba.so", "w/liba.so", str(mod)],
                   check=True)
    _agree(site, site, True)
    _agree(site, site / "lcpkg", False)
    _agree(site, site, True)


@needs_patchelf
def test_a_needed_name_matches_an_object_loaded_under_its_soname(tmp_path: Path) -> None:
    site = tmp_path / "site"
    lib(site, "w/liba.so", A, soname="liba.so.1")
    lib(site, "v/libb.so", "extern int a_fn(void); int b_fn(void) { return a_fn(); }\n",
        needs=("w/liba.so",))  # needs "liba.so.1": no file of that name anywhere
    module(site, ("b_fn",), needs=("w/liba.so", "v/libb.so"),
           runpath="$ORIGIN/../w:$ORIGIN/../v")
    subprocess.run(["patchelf", "--replace-needed", "liba.so.1", "liba.so",
                    str(site / "lcpkg" / ("mod" + EXT))], check=True)
    _agree(site, site, True)


@pytest.mark.parametrize("nodeflib", [True, False])
def test_nodeflib_searches_no_default_folder(tmp_path: Path, nodeflib: bool) -> None:
    """``-z nodefaultlib``: the object's needs skip the default folders and the loader
    cache's entries in them (libz is found only there)."""
    if not any(Path(d, "libz.so").exists() for d in ldso.system_lib_dirs()):
        pytest.skip("no libz.so to link against here")
    site = tmp_path / "site"
    module(site, ("zlibVersion",),
           args=(*(("-Wl,-z,nodefaultlib",) if nodeflib else ()), "-lz"))
    _agree(site, site, not nodeflib)


@pytest.mark.parametrize("entry", ["{site}/$LIB", "{site}/${{PLATFORM}}/../$LIB",
                                   "$ORIGIN/{up}{site}/$LIB", "/nonexistent;{site}/$LIB",
                                   "{site}/$LIBX"])
def test_ld_library_path_tokens(tmp_path: Path, entry: str) -> None:
    """``LD_LIBRARY_PATH`` is split on ``:`` and ``;`` and its tokens substituted as the
    executable's (``$ORIGIN``: the folder of the interpreter's real file)."""
    site = tmp_path / "site"
    where = ldso.lib_token()
    lib(site, f"{where}/liba.so", A)
    (site / ldso.platform_token()).mkdir(exist_ok=True)
    module(site, ("a_fn",), needs=(f"{where}/liba.so",))
    origin = Path(os.path.realpath(sys.executable)).parent
    value = entry.format(site=site, up="../" * len(origin.parts))
    _agree(site, site, "$LIBX" not in entry, value)


@needs_patchelf
@pytest.mark.parametrize(("needed", "ok"), [("$ORIGIN/../w/liba.so", True),
                                            ("${ORIGIN}/../w/liba.so", True),
                                            ("$ORIGIN/liba.so", False),
                                            ("$LIB/liba.so", False)])
def test_tokens_in_a_needed_name(tmp_path: Path, needed: str, ok: bool) -> None:
    """A ``DT_NEEDED`` entry with tokens is substituted as the needing object's path
    entries are, then opened as a path."""
    site = tmp_path / "site"
    lib(site, "w/liba.so", A)
    mod = module(site, ("a_fn",), needs=("w/liba.so",))
    subprocess.run(["patchelf", "--replace-needed", "liba.so", needed, str(mod)], check=True)
    _agree(site, site, ok)


def _versions(site: Path, name: str, text: str) -> str:
    site.mkdir(parents=True, exist_ok=True)
    script = site / f"{name}.map"
    script.write_text(text)
    return f"-Wl,--version-script={script}"


def _weaken(path: Path, version: str) -> None:
    """Set ``VER_FLG_WEAK`` on the ``.gnu.version_r`` entry of ``version`` (GNU ld sets it
    on no need of a C program; other linkers and patch tools do)."""
    import struct

    d = bytearray(path.read_bytes())
    (shoff,) = struct.unpack_from("<Q", d, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", d, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", d, shoff + i * shentsize) for i in range(shnum)]
    need = next(s for s in secs if s[1] == 0x6FFFFFFE)
    strings = secs[need[6]][4]
    off = need[4]
    while True:
        _, count, _, aux, nxt = struct.unpack_from("<HHIII", d, off)
        at = off + aux
        for _ in range(count):
            _, flags, _, name, step = struct.unpack_from("<IHHII", d, at)
            if d[strings + name:d.index(b"\0", strings + name)].decode() == version:
                struct.pack_into("<H", d, at + 4, flags | 2)
            at += step
        if not nxt:
            break
        off += nxt
    path.write_bytes(bytes(d))


_SYMBOL_CASES = ["hidden visibility", "protected", "tls gone", "data gone", "ifunc",
                 "unique", "weak version need", "weak version need, strong reference",
                 "hidden version", "base version now"]


@pytest.mark.parametrize("case", _SYMBOL_CASES)
def test_symbol_classes(tmp_path: Path, case: str) -> None:
    """Each class built for real, linked against the library as first built, then the
    library changed (as an image's library replaced by another build)."""
    site = tmp_path / "site"
    rp = "$ORIGIN/../w"
    refs: tuple[str, ...] = ("a_fn",)
    weak: tuple[str, ...] = ()
    extra = ""
    first, then, args, then_args = A, None, (), ()
    if case == "hidden visibility":
        then = ('__attribute__((visibility("hidden"))) int a_fn(void) { return 1; }\n'
                "int keep(void) { return a_fn(); }\n")
    elif case == "protected":
        first = '__attribute__((visibility("protected"))) int a_fn(void) { return 1; }\n'
    elif case in ("tls gone", "data gone"):
        kind = "__thread int" if case == "tls gone" else "int"
        first, then, refs = f"{kind} a_var = 3;\n", f"{kind} b_var = 3;\n", ()
        extra = f"extern {kind} a_var; int use_var(void) {{ return a_var; }}"
    elif case == "ifunc":
        first = ("static int impl(void) { return 1; }\n"
                 "static void *res(void) { return (void *)impl; }\n"
                 'int a_fn(void) __attribute__((ifunc("res")));\n')
    elif case == "unique":
        first = (A + '__asm__(".type a_u, @gnu_unique_object\\n.globl a_u\\n.data\\n'
                 'a_u: .long 1\\n.size a_u, 4");\n')
        extra = "extern int a_u; int use_u(void) { return a_u; }"
    elif case.startswith("weak version need"):
        first = A + "int b_fn(void) { return 2; }\n"
        args = (_versions(site, "v", "V1 { global: a_fn; local: *; }; "
                                     "V9 { global: b_fn; } V1;"),)
        then, then_args = A, (_versions(site, "v1", "V1 { global: a_fn; local: *; };"),)
        if case.endswith("strong reference"):
            refs = ("a_fn", "b_fn")
        else:
            weak = ("b_fn",)
    elif case == "hidden version":
        args = (_versions(site, "v", "V1 { global: a_fn; local: *; };"),)
        then = ('int a_old(void) { return 1; }\n__asm__(".symver a_old,a_fn@V1");\n'
                "int other(void) { return 0; }\n")
        then_args = (_versions(site, "v2", "V1 { global: other; }; V2 { global: a_old; } V1;"),)
    elif case == "base version now":
        args = (_versions(site, "v", "V1 { global: a_fn; };"),)
        then = A + "int b_fn(void) { return 2; }\n"
        then_args = (_versions(site, "v2", "V1 { global: b_fn; };"),)
    lib(site, "w/liba.so", first, args=args)
    mod = module(site, refs, weak=weak, needs=("w/liba.so",), runpath=rp, extra=extra)
    if then is not None:
        lib(site, "w/liba.so", then, args=then_args)
    if case.startswith("weak version need"):
        _weaken(mod, "V9")
    expect = case not in ("hidden visibility", "tls gone", "data gone",
                          "weak version need, strong reference")
    _agree(site, site, expect)


@pytest.mark.parametrize(("target", "ok"), [("/nonexistent/liba.so", True), ("liba.so", False)])
@pytest.mark.parametrize("on_ld_path", [True, False])
def test_a_link_of_that_name_earlier_in_the_search(tmp_path: Path, target: str, ok: bool,
                                                   on_ld_path: bool) -> None:
    """A dangling link is not there (``ENOENT``: the search goes on); a loop of links ends
    the list of folders it is in (``ELOOP``): the rest of a ``DT_RUNPATH`` is not searched,
    but after ``LD_LIBRARY_PATH`` the ``DT_RUNPATH`` is."""
    site = tmp_path / "site"
    lib(site, "good/liba.so", A)
    (site / "first").mkdir(parents=True)
    os.symlink(target, site / "first" / "liba.so")
    first = "" if on_ld_path else "$ORIGIN/../first:"
    module(site, ("a_fn",), needs=("good/liba.so",), runpath=f"{first}$ORIGIN/../good")
    _agree(site, site, ok or on_ld_path, str(site / "first") if on_ld_path else None)


@pytest.mark.parametrize("sub", ["glibc-hwcaps/x86-64-v2", "glibc-hwcaps/x86-64-v3",
                                 "glibc-hwcaps/x86-64-v4", "glibc-hwcaps/x86-64-v9", "tls",
                                 "x86_64", "haswell", "tls/x86_64", "xeon_phi", "avx512_1",
                                 "x86_64/tls"])
@pytest.mark.parametrize("on_ld_path", [True, False])
def test_hwcap_subfolders_of_a_search_folder(tmp_path: Path, sub: str,
                                             on_ld_path: bool) -> None:
    """ld.so looks in a search folder's hwcap subfolders first (``ld.so --help`` lists
    them): a library there that lacks the symbol is the one it takes."""
    site = tmp_path / "site"
    lib(site, "good/liba.so", A)
    lib(site, f"good/{sub}/liba.so", "int other(void) { return 0; }\n")
    module(site, ("a_fn",), needs=("good/liba.so",),
           runpath=None if on_ld_path else "$ORIGIN/../good")
    _agree(site, site, None, str(site / "good") if on_ld_path else None)


def test_hwcap_subfolders_are_the_loaders() -> None:
    """The subfolders modelled are those this machine's ld.so says it searches."""
    if os.uname().machine != "x86_64":
        pytest.skip("modelled for x86-64")
    env = {**os.environ, "LD_DEBUG": "libs", "LD_LIBRARY_PATH": "/moonpin-nowhere"}
    err = subprocess.run(["/bin/true"], env=env, capture_output=True, text=True).stderr
    line = next(x for x in err.splitlines() if "search path=/moonpin-nowhere" in x)
    said = line.split("search path=", 1)[1].split()[0].split(":")
    assert said == [f"/moonpin-nowhere/{s}" for s in ldso.hwcap_subdirs()] + [
        "/moonpin-nowhere"]


def _set_visibility(path: Path, name: str, visibility: int) -> None:
    """Set ``st_other`` of ``name``'s ``.dynsym`` entry (as a tool hiding symbols in
    place does)."""
    import struct

    d = bytearray(path.read_bytes())
    (shoff,) = struct.unpack_from("<Q", d, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", d, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", d, shoff + i * shentsize) for i in range(shnum)]
    dynsym = next(s for s in secs if s[1] == 11)  # SHT_DYNSYM
    strings = secs[dynsym[6]][4]
    for at in range(dynsym[4], dynsym[4] + dynsym[5], 24):
        (st_name,) = struct.unpack_from("<I", d, at)
        if d[strings + st_name:d.index(b"\0", strings + st_name)] == name.encode():
            d[at + 5] = (d[at + 5] & ~3) | visibility
    path.write_bytes(bytes(d))


@pytest.mark.parametrize("visibility", [1, 2, 3])  # STV_INTERNAL, STV_HIDDEN, PROTECTED
@pytest.mark.parametrize("side", ["definition", "reference"])
def test_visibility_in_dynsym(tmp_path: Path, visibility: int, side: str) -> None:
    """A hidden or internal symbol left in ``.dynsym`` is local to ld.so: as a definition
    it binds nothing; as a reference it is not looked up (nothing needs to define it)."""
    site = tmp_path / "site"
    liba = lib(site, "w/liba.so", A)
    mod = module(site, ("a_fn",), needs=("w/liba.so",), runpath="$ORIGIN/../w")
    if side == "definition":
        _set_visibility(liba, "a_fn", visibility)
        _agree(site, site, visibility == 3)
    else:
        lib(site, "w/liba.so", "int other(void) { return 0; }\n")
        _set_visibility(mod, "a_fn", visibility)
        _agree(site, site, None)


@pytest.mark.parametrize(("value", "cwd"), [
    ("{site}/pre/libpre.so", "."), ("/nonexistent.so\t{site}/pre/libpre.so", "."),
    ("{site}/pre/libpre.so\t/x.so", "."), ("/nonexistent.so:{site}/pre/libpre.so", "."),
    ("$ORIGIN/{up}{site}/pre/libpre.so", "."), ("pre/libpre.so", "."),
    ("pre/libpre.so", "lcpkg"),
])
def test_ld_preload_as_the_loader_reads_it(tmp_path: Path, value: str, cwd: str) -> None:
    """``LD_PRELOAD`` entries are separated by spaces and colons only (a tab is part of a
    name), their tokens are the executable's, a relative path is the working folder's."""
    site = tmp_path / "site"
    lib(site, "pre/libpre.so", "int b_fn(void) { return 1; }\n")
    module(site, ("b_fn",))
    origin = Path(os.path.realpath(sys.executable)).parent
    pre = value.format(site=site, up="../" * len(origin.parts))
    where = site / cwd
    truth = real(site, where, None, pre)
    assert truth[0] is ("\t" not in value and cwd == "."), truth
    assert judged(site, where, None, pre)[0] is truth[0]


@pytest.mark.parametrize("kind", ["version", "symbol", "same"])
def test_a_host_library_given_another_copy_of_what_it_needs(tmp_path: Path,
                                                            kind: str) -> None:
    """A library outside the import folders (the host's) is taken as consistent, unless a
    library it needs is found elsewhere than where it was (here: an older copy first on
    ``LD_LIBRARY_PATH``): then its version needs and symbols are judged, as ld.so does."""
    site = tmp_path / "site"
    host = tmp_path
    both = "int v1(void) { return 1; } int v2(void) { return 2; }\n"
    if kind == "version":
        new = (_versions(host, "v", "V1 { global: v1; local: *; }; V2 { global: v2; } V1;"),)
        old = (_versions(host, "v1", "V1 { global: v1; local: *; };"),)
    else:
        new = old = ()
    lib(host, "hostlibs/libv.so", both, args=new)
    lib(host, "hostlibs/libh.so", "extern int v2(void); int h_fn(void) { return v2(); }\n",
        needs=("hostlibs/libv.so",))
    lib(host, "old/libv.so", both if kind == "same" else "int v1(void) { return 1; }\n",
        args=old)
    module(site, ("h_fn",), args=(f"-L{host}/hostlibs", "-l:libh.so"))
    _agree(site, site, kind == "same", f"{host}/old:{host}/hostlibs")


@pytest.mark.parametrize("how", ["nodlopen", "pie"])
def test_objects_ld_so_will_not_open_as_a_library(tmp_path: Path, how: str) -> None:
    """``-z nodlopen`` (``DF_1_NOOPEN``): dlopen refuses the object and what needs it; a
    position-independent executable (``DF_1_PIE``) is never loaded as a library."""
    site = tmp_path / "site"
    lib(site, "w/liba.so", A, args=("-Wl,-z,nodlopen",) if how == "nodlopen" else ())
    module(site, ("a_fn",), needs=("w/liba.so",), runpath="$ORIGIN/../w")
    if how == "pie":
        subprocess.run(["gcc", "-pie", "-fPIE", "-rdynamic", "-o", str(site / "w/liba.so"),
                        "-x", "c", "-"], check=True, text=True,
                       input=A + "int main(void) { return a_fn(); }\n")
    _agree(site, site, False)


@pytest.mark.parametrize(("offset", "value"), [
    (7, 9), (7, 1), (7, 3), (8, 1), (9, 1), (15, 1), (0x14, 2), (6, 2), (0x36, 0x40),
])
def test_elf_identification_as_the_loader_checks_it(tmp_path: Path, offset: int,
                                                    value: int) -> None:
    """``open_verify``: the OS ABI (System V or GNU), its ABI version, ``EI_PAD``,
    ``EI_VERSION`` and ``e_version``, ``e_phentsize``; a GNU object of ABI version 1
    (``EI_OSABI`` 3) loads."""
    site = tmp_path / "site"
    liba = lib(site, "w/liba.so", A)
    module(site, ("a_fn",), needs=("w/liba.so",), runpath="$ORIGIN/../w")
    d = bytearray(liba.read_bytes())
    d[offset] = value
    liba.write_bytes(bytes(d))
    _agree(site, site, (offset, value) == (7, 3))


@pytest.mark.parametrize(("field", "value"), [("vaddr", 0x1008), ("align", 0x800),
                                              ("align", 0x200000)])
def test_a_loadable_segment_as_the_loader_maps_it(tmp_path: Path, field: str,
                                                  value: int) -> None:
    """A ``PT_LOAD`` whose address and offset are not at the same place in a page cannot
    be mapped; its ``p_align`` alone is not checked."""
    import struct

    site = tmp_path / "site"
    liba = lib(site, "w/liba.so", A)
    module(site, ("a_fn",), needs=("w/liba.so",), runpath="$ORIGIN/../w")
    d = bytearray(liba.read_bytes())
    (phoff,) = struct.unpack_from("<Q", d, 0x20)
    (phnum,) = struct.unpack_from("<H", d, 0x38)
    loads = [i for i in range(phnum) if struct.unpack_from("<I", d, phoff + 56 * i)[0] == 1]
    struct.pack_into("<Q", d, phoff + 56 * loads[1] + {"vaddr": 16, "align": 48}[field], value)
    liba.write_bytes(bytes(d))
    _agree(site, site, field == "align")
