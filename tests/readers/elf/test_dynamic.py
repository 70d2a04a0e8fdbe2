"""The one dynamic-section decoder (moonpin.readers.elf.dynamic, issue 37 "one reading of each
thing"): what it reads from a whole object and from a prefix, its defined outcome on hostile
objects (truncated, huge counts, offsets past the end, strings that never end, a FIFO,
/dev/zero), and that no other module of moonpin decodes ELF headers or dynamic entries, with a
planted-violation control for each kind of check."""

from __future__ import annotations

import ast
import dataclasses
import os
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from moonpin.preflight.loader import ldso
from moonpin.readers.elf import analysis, dynamic
from moonpin.readers.elf.layout import PT_DYNAMIC, ElfError, dynamic_segment, parse_layout
from moonpin.readers.elf.symbols import SymbolError, SymbolTable
from tests.lib.elfbuild import build_so
from tests.lib.ldcases import can_build, judged, lib, module, real

ROOT = Path(__file__).resolve().parents[3]

# ELF64 offsets (gABI "ELF Header", "Program Header")
_PHOFF, _PHDR = 0x20, 56
_P_OFFSET, _P_VADDR, _P_FILESZ, _P_MEMSZ = 8, 16, 32, 40


def _phdr_at(data: bytes, p_type: int) -> int:
    layout = parse_layout(data)
    phoff = struct.unpack_from("<Q", data, _PHOFF)[0]
    i = next(i for i, s in enumerate(layout.segments) if s.type == p_type)
    return phoff + i * _PHDR


def _patch(data: bytes, at: int, fmt: str, *values: int) -> bytes:
    buf = bytearray(data)
    struct.pack_into(fmt, buf, at, *values)
    return bytes(buf)


def _read(data: bytes, total: int | None = None) -> tuple[dynamic.Dynamic | None,
                                                          dynamic.Names | None, list[str]]:
    layout = parse_layout(data, len(data) if total is None else total)
    warnings: list[str] = []
    dyn = dynamic.decode(layout, data)
    strtab = dynamic.string_table(layout, dyn, warnings) if dyn is not None else None
    names = (dynamic.names(dyn, strtab, data, warnings)
             if dyn is not None and strtab is not None else None)
    return dyn, names, warnings


def test_a_whole_object_reads_as_the_loader_reads_it() -> None:
    data = build_so(needed=("libcudart.so.13", "libtorch.so"), runpath="$ORIGIN::/opt",
                    soname="libx.so.1")
    dyn, names, warnings = _read(data)
    assert dyn is not None and dyn.ended == dynamic.END and not warnings
    assert names is not None
    assert names.needed == ("libcudart.so.13", "libtorch.so")
    assert names.soname == "libx.so.1"
    assert names.runpath_tag == "DT_RUNPATH"
    assert names.runpath == ("$ORIGIN", "/opt")
    assert names.search_path == ("$ORIGIN", "", "/opt")  # glibc keeps the empty entry


def test_every_caller_gets_the_same_answer() -> None:
    """analysis (the scrape, the image unpacker, the check's loader model) and the symbol
    tables see the same entries, since they decode them in one place."""
    data = build_so(needed=("liba.so", "libb.so"), runpath=None, rpath="/r")
    dyn, names, _ = _read(data)
    facts = analysis.analyze(data, len(data), ())
    assert names is not None and dyn is not None
    assert (facts.needed, facts.runpath_tag, facts.search_path) == (
        names.needed, names.runpath_tag, names.search_path)
    table = SymbolTable(data)  # each tag's last entry, as the loader keeps it
    assert table.tags == {t: dyn.last(t) for t, _ in dyn.entries}


def test_every_prefix_has_a_defined_outcome() -> None:
    """Cut anywhere, the decoder says SHORT (more bytes would settle it) or answers; the
    prefix reader never raises anything but ElfError (the header itself cut)."""
    data = build_so(padding_before_dynamic=300, dynstr_in_rw=True)
    whole = _read(data)[1]
    assert whole is not None
    seen = set()
    for n in range(0, len(data) + 1, 7):
        try:
            layout = parse_layout(data[:n], len(data))
        except ElfError:
            continue
        dyn = dynamic.decode(layout, data[:n])
        assert dyn is not None
        seen.add(dyn.ended)
        facts = analysis.analyze(data[:n], len(data), ())
        if facts.needed_method == "dt_needed":
            assert facts.needed == whole.needed  # a prefix never answers wrong
    assert {dynamic.SHORT, dynamic.END} <= seen


def _retag(data: bytes, old: int, new: int) -> bytes:
    """``data`` with its first dynamic entry of tag ``old`` retagged ``new`` (its value
    kept): the way to a duplicate tag, which no linker writes."""
    layout = parse_layout(data, len(data))
    dyn = dynamic.decode(layout, data)
    assert dyn is not None
    i = next(i for i, (t, _) in enumerate(dyn.entries) if t == old)
    return _patch(data, dyn.offset + i * 16, "<q", new)


@pytest.mark.parametrize("order", ["used-last", "used-first"])
def test_a_duplicate_tag_counts_as_its_last_entry(order: str) -> None:
    """glibc's ``elf_get_dynamic_info`` keeps the last entry of each tag: a second
    ``DT_RUNPATH`` replaces the first (not joined to it), a second ``DT_SONAME`` likewise;
    every ``DT_NEEDED`` counts. ``build_so`` writes SONAME before RUNPATH, so retagging the
    SONAME makes its string the *first* of two RUNPATHs."""
    first, last = ("/dead", "/live") if order == "used-last" else ("/live", "/dead")
    data = _retag(build_so(needed=("liba.so", "libb.so"), runpath=last, soname=first),
                  dynamic.DT_SONAME, dynamic.DT_RUNPATH)
    dyn, names, warnings = _read(data)
    assert dyn is not None and names is not None and not warnings
    assert [t for t, _ in dyn.entries].count(dynamic.DT_RUNPATH) == 2
    assert names.runpath == (last,) and names.search_path == (last,)
    assert names.needed == ("liba.so", "libb.so") and names.soname is None
    facts = analysis.analyze(data, len(data), ())
    assert facts.runpath == (last,)
    # two SONAMEs: the last one is the object's name
    two = _retag(build_so(needed=(), runpath=last, soname=first), dynamic.DT_RUNPATH,
                 dynamic.DT_SONAME)
    assert _read(two)[1].soname == last  # type: ignore[union-attr]


def test_a_duplicate_string_table_counts_as_its_last() -> None:
    """The first of two ``DT_STRTAB`` entries pointing at garbage: the loader (and so
    the names, the symbol tables and the image unpacker's tables) use the last one."""
    data = build_so(needed=("liba.so",), runpath="/r", soname="libx.so")
    layout = parse_layout(data, len(data))
    dyn = dynamic.decode(layout, data)
    assert dyn is not None
    good = dyn.last(dynamic.DT_STRTAB)
    assert good is not None
    # the RUNPATH entry becomes a STRTAB pointing 1 byte into the real one: every name
    # read through it is off by one
    i = next(i for i, (t, _) in enumerate(dyn.entries) if t == dynamic.DT_RUNPATH)
    bad = _patch(data, dyn.offset + i * 16, "<qQ", dynamic.DT_STRTAB, good + 1)
    got, names, warnings = _read(bad)
    assert got is not None and got.entries[i] == (dynamic.DT_STRTAB, good + 1)
    assert names is not None and names.needed == ("liba.so",), warnings
    assert names.soname == "libx.so"
    # the control: the garbage one last is the one read
    j = next(j for j, (t, _) in enumerate(dyn.entries) if t == dynamic.DT_STRTAB)
    worse = _patch(bad, dyn.offset + j * 16, "<qQ", dynamic.DT_STRTAB, good + 1)
    worse = _patch(worse, dyn.offset + i * 16, "<qQ", dynamic.DT_STRTAB, good)
    assert _read(worse)[1].needed == ("iba.so",)  # type: ignore[union-attr]


def _huge_dynamic() -> bytes:
    """PT_DYNAMIC claiming 2**40 bytes, and the PT_LOAD mapping it as many (the loader reads
    the array where that segment maps its address), the file full of non-NULL entries to its
    end."""
    data = build_so()
    at = _phdr_at(data, PT_DYNAMIC)
    off = struct.unpack_from("<Q", data, at + _P_OFFSET)[0]
    body = bytearray(data[:off]) + struct.pack("<qQ", 0x7000_0000, 1) * 70000
    layout = parse_layout(data)
    dyn = dynamic_segment(layout)
    assert dyn is not None
    phoff = struct.unpack_from("<Q", data, _PHOFF)[0]
    load = next(phoff + i * _PHDR for i, s in enumerate(layout.segments)
                if s.type == 1 and s.vaddr <= dyn.vaddr < s.vaddr + s.filesz)
    body = bytearray(_patch(bytes(body), load + _P_FILESZ, "<QQ", 1 << 40, 1 << 40))
    return _patch(bytes(body), at + _P_FILESZ, "<Q", 1 << 40)


def test_a_huge_count_stops_at_the_cap_quickly() -> None:
    data = _huge_dynamic()
    t = time.monotonic()
    dyn = dynamic.decode(parse_layout(data, len(data)), data)
    assert time.monotonic() - t < 5
    assert dyn is not None and dyn.ended == dynamic.CAP
    assert len(dyn.entries) == dynamic.MAX_ENTRIES
    facts = analysis.analyze(data, len(data), ())
    assert any("over 65536 entries" in w for w in facts.warnings)


def test_the_cap_is_what_bounds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Control: with the cap out of the way, the same object reads every entry, so the test
    above holds the cap, not a property of the object."""
    data = _huge_dynamic()
    monkeypatch.setattr(dynamic, "MAX_ENTRIES", 1 << 30)
    dyn = dynamic.decode(parse_layout(data, len(data)), data)
    assert dyn is not None and dyn.ended != dynamic.CAP and len(dyn.entries) > 65536


@pytest.mark.parametrize("offset", [1 << 62, (1 << 64) - 16])
def test_an_address_or_offset_past_the_end(offset: int) -> None:
    """PT_DYNAMIC's ``p_vaddr`` in no PT_LOAD: the loader cannot read the array (refused);
    its ``p_offset`` past the end: the loader never reads it (glibc reads ``p_vaddr``), so
    the array is read as before."""
    good = build_so()
    data = _patch(good, _phdr_at(good, PT_DYNAMIC) + _P_VADDR, "<Q", offset)
    dyn, names, _ = _read(data)
    assert dyn is None and names is None
    facts = analysis.analyze(data, len(data), ())
    problem = ldso.elf_problem(data, facts)
    assert problem is not None and "lies in no PT_LOAD" in problem, problem
    moved = _patch(good, _phdr_at(good, PT_DYNAMIC) + _P_OFFSET, "<Q", offset)
    assert _read(moved)[0].entries == _read(good)[0].entries != ()  # type: ignore[union-attr]
    assert _read(moved)[1] is not None


def test_a_string_table_past_the_end_or_too_large() -> None:
    data = build_so(dyn_overrides={dynamic.DT_STRTAB: 0xDEAD0000})
    _, names, warnings = _read(data)
    assert names is None and any("not inside any PT_LOAD" in w for w in warnings)
    data = build_so(dyn_overrides={dynamic.DT_STRSZ: 1 << 60})
    _, names, _ = _read(data)
    assert names is not None and names.needed  # the size is clamped to the segment


def test_strings_that_never_end() -> None:
    """A string table whose last string has no NUL: skipped with a warning when the whole
    object is at hand, "more bytes" (None) when only a prefix is."""
    data = build_so(needed=("libz.so.1",), runpath=None, strings=())
    layout = parse_layout(data, len(data))
    dyn = dynamic.decode(layout, data)
    assert dyn is not None
    strtab = dynamic.string_table(layout, dyn, [])
    assert strtab is not None
    start = strtab[0] + dyn.last(dynamic.DT_NEEDED)  # type: ignore[operator]
    cut = bytearray(data)
    cut[start:strtab[1]] = b"x" * (strtab[1] - start)  # no NUL to the table's end
    warnings: list[str] = []
    got = dynamic.names(dyn, strtab, bytes(cut), warnings)
    assert got is not None and got.needed == () and "unterminated" in warnings[-1]
    warnings = []
    assert dynamic.names(dyn, strtab, bytes(cut[:strtab[1] - 1]), warnings) is None
    assert "lies beyond" in warnings[-1]


def test_a_truncated_object_refuses_the_symbol_tables_and_the_loader() -> None:
    data = build_so(padding_before_dynamic=4096)
    dyn_at = parse_layout(data).segments
    cut = data[:next(s.offset for s in dyn_at if s.type == PT_DYNAMIC) + 8]
    with pytest.raises(SymbolError, match="past the end of the file"):
        SymbolTable(cut)
    facts = analysis.analyze(cut, len(data), ())
    assert facts.needed_method != "dt_needed"


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "empty", "not-elf"])
def test_files_the_loader_model_reads(tmp_path: Path, kind: str) -> None:
    """The file-level entry of the check (ldso) on what is not a regular ELF file: a
    defined answer, no hang (a FIFO is opened non-blocking and never read)."""
    p = tmp_path / "lib.so"
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "dev-zero":
        p.symlink_to("/dev/zero")
    elif kind == "empty":
        p.write_bytes(b"")
    else:
        p.write_bytes(b"#!/bin/sh\n" * 10)
    needed, runpath, rpath, problem = ldso.read_dynamic(str(p))
    assert (needed, runpath, rpath) == ((), (), ()) and problem


# --- one decoder: no other module reads ELF headers or dynamic entries ---------------------

#: struct formats of Elf_Ehdr / Elf_Phdr / Elf_Dyn (both classes, both byte orders)
_ELF_FORMATS = ("qQ", "iI", "IIQQQQQQ", "IIIIIIII", "16sHH")


def _decoders(root: Path) -> list[str]:
    """Places outside ``moonpin/readers/elf/`` that read ELF structures themselves: the ELF
    magic compared, an ELF struct format, an ``e_phoff``/``e_machine`` offset read."""
    found = []
    for f in sorted((root / "moonpin").rglob("*.py")):
        rel = f.relative_to(root).as_posix()
        if rel.startswith("moonpin/readers/elf/"):
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, bytes) \
                    and node.value.startswith(b"\x7fELF"):
                found.append(f"{rel}:{node.lineno}: the ELF magic")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and node.value.lstrip("<>=!@").startswith(_ELF_FORMATS):
                found.append(f"{rel}:{node.lineno}: an ELF struct format {node.value!r}")
    return found


def test_no_other_module_decodes_elf() -> None:
    assert _decoders(ROOT) == []


def test_a_planted_decoder_is_found(tmp_path: Path) -> None:
    """Control: a module reading the magic and the dynamic entries itself is found."""
    (tmp_path / "moonpin" / "readers" / "elf").mkdir(parents=True)
    (tmp_path / "moonpin" / "readers" / "elf" / "ok.py").write_text('M = b"\\x7fELF"\n')
    (tmp_path / "moonpin" / "own.py").write_text(
        'import struct\n\ndef f(d):\n    if d[:4] == b"\\x7fELF":\n'
        '        return struct.unpack_from("<qQ", d, 64)\n')
    assert _decoders(tmp_path) == ["moonpin/own.py:4: the ELF magic",
                                   "moonpin/own.py:5: an ELF struct format '<qQ'"]


_DT_FINI = 13


def _retag_file(path: Path, old: int, new: int) -> None:
    path.write_bytes(_retag(path.read_bytes(), old, new))


@pytest.mark.skipif(can_build() is not None, reason=str(can_build()))
@pytest.mark.parametrize("last", ["missing", "found"])
def test_two_runpaths_as_the_real_loader_reads_them(tmp_path: Path, last: str) -> None:
    """A gcc-built extension whose ``DT_SONAME`` is retagged ``DT_RUNPATH`` (GNU ld writes
    SONAME before RUNPATH, so it is the first of two): the real import from a child
    (``python -c "import lcpkg.mod"``) and moonpin's loader model agree. glibc searches
    the last RUNPATH only; moonpin used to search both joined, and called the
    ``missing`` case loadable."""
    site = tmp_path / "site"
    lib(site, "b/liba.so", "int a_fn(void) { return 1; }\n")
    first, final = (("$ORIGIN/../b", "$ORIGIN/../none") if last == "missing"
                    else ("$ORIGIN/../none", "$ORIGIN/../b"))
    mod = module(site, ("a_fn",), needs=("b/liba.so",), runpath=final,
                 args=(f"-Wl,-soname,{first}",))
    _retag_file(mod, dynamic.DT_SONAME, dynamic.DT_RUNPATH)
    tags = [t for t, _ in dynamic.decode(parse_layout(mod.read_bytes()),
                                         mod.read_bytes()).entries]  # type: ignore[union-attr]
    assert tags.count(dynamic.DT_RUNPATH) == 2
    truth = real(site, site)
    assert truth[0] is (last == "found"), truth
    assert judged(site, site)[0] is truth[0]


@pytest.mark.skipif(can_build() is not None, reason=str(can_build()))
def test_two_string_tables_as_the_real_loader_reads_them(tmp_path: Path) -> None:
    """A gcc-built extension whose ``DT_FINI`` (written before ``DT_STRTAB``) is retagged
    ``DT_STRTAB``: its first string table is code. The real import works (glibc reads
    the last); moonpin, which took the first, read garbage for every needed name."""
    site = tmp_path / "site"
    lib(site, "b/liba.so", "int a_fn(void) { return 1; }\n")
    mod = module(site, ("a_fn",), needs=("b/liba.so",), runpath="$ORIGIN/../b")
    data = mod.read_bytes()
    entries = dynamic.decode(parse_layout(data), data).entries  # type: ignore[union-attr]
    tags = [t for t, _ in entries]
    assert tags.index(_DT_FINI) < tags.index(dynamic.DT_STRTAB)
    _retag_file(mod, _DT_FINI, dynamic.DT_STRTAB)
    truth = real(site, site)
    assert truth[0], truth
    assert judged(site, site) == (True, "")


_PT_NOTE = 4
_PHDR64 = "<IIQQQQQQ"


def _two_dynamics(path: Path, how: str) -> None:
    """The gcc-built ``path`` with a second PT_DYNAMIC: its first PT_NOTE after the real
    PT_DYNAMIC (GNU ld writes LOAD…, DYNAMIC, NOTE…) retagged. One of the two is the real
    one, the other starts past the leading DT_NEEDED entries (so names no library):
    ``last-short`` puts the short one last, ``first-short`` first; ``last-empty`` and
    ``first-empty`` give the real one a twin with no file bytes (p_filesz 0)."""
    data = bytearray(path.read_bytes())
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    heads = [phoff + i * phentsize for i in range(phnum)]
    at = next(a for a in heads if struct.unpack_from("<I", data, a)[0] == PT_DYNAMIC)
    note = next(a for a in heads if a > at and struct.unpack_from("<I", data, a)[0] == _PT_NOTE)
    real_ = struct.unpack_from(_PHDR64, data, at)
    dyn = dynamic.decode(parse_layout(bytes(data)), bytes(data))
    assert dyn is not None
    k = next(i for i, (t, _) in enumerate(dyn.entries) if t != dynamic.DT_NEEDED)
    assert k >= 1
    t, fl, off, va, pa, fs, ms, al = real_
    short = (t, fl, off + 16 * k, va + 16 * k, pa + 16 * k, fs - 16 * k, ms - 16 * k, al)
    empty = (t, fl, off, va, pa, 0, ms, al)
    first, last = {"last-short": (real_, short), "first-short": (short, real_),
                   "last-empty": (real_, empty), "first-empty": (empty, real_)}[how]
    struct.pack_into(_PHDR64, data, at, *first)
    struct.pack_into(_PHDR64, data, note, *last)
    path.write_bytes(bytes(data))


def _needing_liba(site: Path) -> Path:
    """``lcpkg.mod`` calling ``a_fn`` of ``b/liba.so`` (its DT_NEEDED, found by its
    RUNPATH), both gcc-built in ``site``; the module's path."""
    lib(site, "b/liba.so", "int a_fn(void) { return 1; }\n")
    return module(site, ("a_fn",), needs=("b/liba.so",), runpath="$ORIGIN/../b")


def _agree(site: Path, loads: bool) -> tuple[Any, Any]:
    """The real import's (ok, error) and the loader model's, each ``loads`` as expected."""
    truth = real(site, site)
    assert truth[0] is loads, truth
    said = judged(site, site)
    assert said[0] is loads, (said, truth)
    return truth, said


@pytest.mark.skipif(can_build() is not None, reason=str(can_build()))
@pytest.mark.parametrize(("how", "loads"), [("last-short", False), ("first-short", True),
                                            ("last-empty", False), ("first-empty", False)])
def test_two_dynamic_segments_as_the_real_loader_reads_them(tmp_path: Path, how: str,
                                                            loads: bool) -> None:
    """A gcc-built extension with two PT_DYNAMIC program headers, imported for real
    (``python -c "import lcpkg.mod"``) and judged by moonpin's loader model: glibc's
    ``_dl_map_object_from_fd`` takes the last (each replaces ``l_ld``), and fails the load
    when one has no file bytes ("object file has no dynamic section"). moonpin took the
    first, and called ``last-short`` (the last names no library: ``undefined symbol:
    a_fn``) and both empty cases loadable, ``first-short`` not."""
    mod = _needing_liba(tmp_path / "site")
    _two_dynamics(mod, how)
    truth, said = _agree(tmp_path / "site", loads)
    if "empty" in how:
        assert "no dynamic section" in truth[1] and "no dynamic section" in said[1]


def test_the_last_dynamic_segment_is_the_one_read() -> None:
    """The readers decode the last PT_DYNAMIC (layout.dynamic_segment), none when one is
    empty; a single one is read as before."""
    data = build_so(needed=("liba.so", "libb.so"), runpath="/r")
    layout = parse_layout(data, len(data))
    (seg,) = [s for s in layout.segments if s.type == PT_DYNAMIC]
    assert dynamic_segment(layout) == seg
    twin = dataclasses.replace(seg, offset=seg.offset + 16, vaddr=seg.vaddr + 16,
                               filesz=seg.filesz - 16)
    two = dataclasses.replace(layout, segments=(*layout.segments, twin))
    assert dynamic_segment(two) == twin
    got = dynamic.decode(two, data)
    assert got is not None and got.offset == twin.offset
    empty = dataclasses.replace(layout, segments=(*layout.segments,
                                                  dataclasses.replace(seg, filesz=0)))
    assert dynamic_segment(empty) is None and dynamic.decode(empty, data) is None


def _moved_dynamic(path: Path, which: str) -> None:
    """The gcc-built ``path`` with its PT_DYNAMIC's ``p_offset`` (``which == "offset"``) or
    ``p_vaddr`` (``"vaddr"``) alone moved past the leading DT_NEEDED entries, the other left
    on the real array: the two no longer name the same bytes, as linkers always make them."""
    data = bytearray(path.read_bytes())
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    at = next(a for a in (phoff + i * phentsize for i in range(phnum))
              if struct.unpack_from("<I", data, a)[0] == PT_DYNAMIC)
    dyn = dynamic.decode(parse_layout(bytes(data)), bytes(data))
    assert dyn is not None
    k = next(i for i, (t, _) in enumerate(dyn.entries) if t != dynamic.DT_NEEDED)
    assert k >= 1
    t, fl, off, va, pa, fs, ms, al = struct.unpack_from(_PHDR64, data, at)
    if which == "offset":
        off += 16 * k
    else:
        va, pa = va + 16 * k, pa + 16 * k
    struct.pack_into(_PHDR64, data, at, t, fl, off, va, pa, fs - 16 * k, ms - 16 * k, al)
    path.write_bytes(bytes(data))


@pytest.mark.skipif(can_build() is not None, reason=str(can_build()))
@pytest.mark.parametrize(("which", "loads"), [("offset", True), ("vaddr", False)])
def test_the_dynamic_array_is_read_at_its_address(tmp_path: Path, which: str,
                                                  loads: bool) -> None:
    """A gcc-built extension whose PT_DYNAMIC ``p_offset`` and ``p_vaddr`` disagree, imported
    for real (``python -c "import lcpkg.mod"``) and judged by moonpin's loader model: glibc
    reads the array at ``p_vaddr`` (``l_ld``, dl-load.c), so moving only ``p_offset`` past
    its DT_NEEDED changes nothing (it loads), and moving only ``p_vaddr`` leaves it naming no
    library (``undefined symbol: a_fn``). moonpin read at ``p_offset``: both the other way."""
    mod = _needing_liba(tmp_path / "site")
    _moved_dynamic(mod, which)
    truth, said = _agree(tmp_path / "site", loads)
    if not loads:
        assert "a_fn" in truth[1] and "a_fn" in said[1], (said, truth)
    data = mod.read_bytes()
    needed = analysis.analyze(data, len(data), set()).needed
    assert ("liba.so" in needed) is loads, needed
