"""Read facts out of an ELF shared object from a *prefix* of its bytes.

moonpin inspects compiled Python extension modules inside wheels without
downloading them whole: a wheel member is deflate-compressed, so the only cheap
thing we can get is the first N uncompressed bytes (stream-decompressing from
the start). This module therefore works on a prefix plus the total file size
(known from the zip central directory) and reports how much of the file it
needed and whether it got it.

Only bytes are read; nothing is loaded, mapped or executed. Input is treated as
hostile: every offset and size taken from the file is bounds-checked against
the bytes actually present before use, no allocation is sized from a file
field, every loop is bounded, and the only exception raised for bad input is
:class:`ElfError` (a :class:`ValueError`), with :class:`ElfTruncatedError` as
the "give me more bytes" subclass.

Typical use::

    head = read_prefix(64 * 1024)
    layout = parse_layout(head, total_size)            # ELF header + program headers
    want = min(required_prefix(layout), CAP)
    data = read_prefix(want)
    want = min(required_prefix(layout, data), CAP)     # may grow once: .dynstr
    if want > len(data):
        data = read_prefix(want)
    facts = analyze(data, total_size, wanted={"join_group"}, patterns=[TORCH_RE])

The ELF header, the program headers and the segment helpers are in
:mod:`moonpin.readers.elf.layout` (re-exported here); this module reads the dynamic section,
the strings and the symbol version needs, and :func:`analyze` puts them together.

References: "ELF gABI" is the System V ABI generic chapters 4 ("Object Files":
ELF Header, Program Header) and 5 ("Program Loading and Dynamic Linking":
Dynamic Section, Shared Object Dependencies); "psABI" is the processor
supplement (x86-64 / AArch64), which only fixes ``e_machine`` and page sizes.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from moonpin.readers.elf.layout import (
    ET_DYN,
    ET_EXEC,
    ET_REL,
    PF_R,
    PF_W,
    PF_X,
    PT_DYNAMIC,
    PT_LOAD,
    ElfError,
    ElfLayout,
    ElfTruncatedError,
    Segment,
    dynamic_segment,
    file_end,
    is_elf,
    parse_layout,
    rodata_segments,
    strings_prefix,
    struct_formats,
    vaddr_to_offset,
)
from moonpin.readers.elf.symbols import elf_hash  # the SysV hash, as stored in vna_hash

__all__ = [
    "DT_NEEDED",
    "DT_NULL",
    "DT_RPATH",
    "DT_RUNPATH",
    "DT_SONAME",
    "DT_STRSZ",
    "DT_STRTAB",
    "ET_DYN",
    "ET_EXEC",
    "ET_REL",
    "MAX_NAME_BYTES",
    "PF_R",
    "PF_W",
    "PF_X",
    "PT_DYNAMIC",
    "PT_LOAD",
    "ElfError",
    "ElfFacts",
    "ElfLayout",
    "ElfTruncatedError",
    "Segment",
    "VersionNeed",
    "analyze",
    "elf_hash",
    "find_version_needs",
    "is_elf",
    "parse_layout",
    "required_prefix",
    "strings_prefix",
    "versioned_libraries",
]

# --- constants (ELF gABI) -------------------------------------------------------

# gABI "Dynamic Section": d_tag values we use.
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ = 0, 1, 5, 10
DT_SONAME, DT_RPATH, DT_RUNPATH = 14, 15, 29
DT_FLAGS_1 = 0x6FFFFFFB
#: ``DT_FLAGS_1`` bit: the object's own needs search neither the default folders nor the
#: loader cache's entries in them (glibc elf/dl-load.c ``_dl_map_object``)
DF_1_NODEFLIB = 0x800

# --- limits (why: hostile input must not make us loop or allocate without bound) --

# .dynamic of a real extension has ~40-60 entries; 65536 is far beyond any real
# object and bounds the loop on a hostile PT_DYNAMIC.
_MAX_DYN_ENTRIES = 65536
#: Longest dynamic-string (soname / path) we accept; PATH_MAX on Linux. Bounds
#: the NUL search per DT_NEEDED entry so N entries cost O(N * 4096), not O(N * size).
MAX_NAME_BYTES = 4096
# Caps on reported results; a hostile file could otherwise produce millions.
_MAX_HEURISTIC_NAMES = 1024
_MAX_MATCHES = 1024
_MAX_MATCH_ITERATIONS = 100_000

# Soname-looking C strings for the .dynstr heuristic: lib*.so[.N...] and the
# program interpreters ld-linux*.so.N / ld64.so.N that glibc objects list in
# DT_NEEDED. Candidates are found with a cheap literal-led regex and then
# checked whole with _SONAME_FULL.
_SONAME_CANDIDATE = re.compile(rb"(?:lib|ld-linux|ld64)[A-Za-z0-9_+.\-]{0,250}\x00")
_SONAME_FULL = re.compile(
    rb"(?:lib[A-Za-z0-9_+.\-]*|ld-linux[A-Za-z0-9_.\-]*|ld64)\.so(?:\.[0-9]+)*"
)


# --- public types -------------------------------------------------------------------


@dataclass(frozen=True)
class ElfFacts:
    """What :func:`analyze` could establish from the available prefix.

    ``needed_method``:
      * ``"dt_needed"`` -- ``needed``/``runpath``/``soname`` were read from the
        PT_DYNAMIC entries and the DT_STRTAB string table: authoritative.
      * ``"dynstr-heuristic"`` -- PT_DYNAMIC (or its string table) lay beyond the
        prefix, so ``needed`` lists soname-looking C strings (``lib*.so*``,
        ``ld-linux*.so*``) from the first read-only PT_LOAD, where GNU ld puts
        .dynstr. It can over-report (.dynstr also names libraries of versioned
        symbols, and patchelf leaves the pre-repair names behind) and
        under-report (sonames not starting with ``lib``, or a .dynstr that
        patchelf/auditwheel moved to the end of the file). ``runpath`` and
        ``soname`` are then empty/None.
      * ``"none"`` -- nothing known: no PT_DYNAMIC at all, or the heuristic
        region was unavailable or held no soname.

    ``runpath`` is the effective library search path: the DT_RUNPATH entries, or
    DT_RPATH ones when there is no DT_RUNPATH (gABI "Shared Object
    Dependencies": the dynamic linker ignores DT_RPATH when DT_RUNPATH exists);
    ``runpath_tag`` says which ("DT_RUNPATH" / "DT_RPATH" / None). ``runpath`` leaves out
    empty entries; ``search_path`` is the same list as the dynamic loader keeps it
    (glibc elf/dl-load.c ``fillin_rpath``): an empty entry (``a::b``, a leading or trailing
    ``:``) is kept as ``""``, the working folder, and a string empty as a whole is no entry
    (``decompose_rpath`` ignores it; the tag still hides ``DT_RPATH``).

    ``strings`` is the subset of the wanted names that occur as exact C strings
    in the available read-only data; ``matches`` the distinct regex matches in
    first-seen order. ``complete`` is true when the prefix covered everything
    :func:`required_prefix` asks for. ``warnings`` explains fallbacks and
    anything corrupt that was skipped.
    """

    machine: str
    needed: tuple[str, ...]
    needed_method: str
    runpath: tuple[str, ...]
    soname: str | None
    strings: frozenset[str]
    matches: tuple[str, ...]
    complete: bool
    runpath_tag: str | None = None
    layout: ElfLayout | None = None
    warnings: tuple[str, ...] = ()
    #: when ``needed_method`` is not "dt_needed": the version needs found in the first
    #: read-only PT_LOAD (see :func:`find_version_needs`), for :func:`versioned_libraries`
    version_needs: tuple[VersionNeed, ...] = ()
    search_path: tuple[str, ...] = ()
    #: ``DT_FLAGS_1`` (0 when absent)
    flags_1: int = 0


# --- dynamic section ----------------------------------------------------------------


@dataclass(frozen=True)
class _Dynamic:
    """Decoded PT_DYNAMIC entries plus the located string table."""

    entries: tuple[tuple[int, int], ...]
    strtab: tuple[int, int] | None  # file range [start, end) of DT_STRTAB, clamped
    strsz: int | None  # declared DT_STRSZ


def _read_dynamic(layout: ElfLayout, data: bytes, warnings: list[str]) -> _Dynamic | None:
    """Read the dynamic array (gABI "Dynamic Section") if it lies in ``data``.

    Returns None (with a warning saying why) when there is no PT_DYNAMIC or it
    extends beyond the prefix before its DT_NULL terminator.
    """
    dyn = dynamic_segment(layout)
    if dyn is None:
        warnings.append("no PT_DYNAMIC segment: no dynamic dependencies recorded")
        return None
    _, _, dyn_fmt = struct_formats(layout.bits, layout.little)
    entsize = struct.calcsize(dyn_fmt)
    seg_end = file_end(layout, dyn.end)
    avail = min(seg_end, len(data))
    entries: list[tuple[int, int]] = []
    pos = dyn.offset
    terminated = False
    while pos + entsize <= avail:
        if len(entries) >= _MAX_DYN_ENTRIES:
            warnings.append(f"PT_DYNAMIC has over {_MAX_DYN_ENTRIES} entries; rest ignored")
            terminated = True
            break
        tag, val = struct.unpack_from(dyn_fmt, data, pos)
        if tag == DT_NULL:  # gABI: DT_NULL marks the end of the _DYNAMIC array
            terminated = True
            break
        entries.append((tag, val))
        pos += entsize
    if not terminated:
        if avail < seg_end:
            warnings.append(
                f"PT_DYNAMIC ({dyn.offset:#x}..{dyn.end:#x}) lies beyond the "
                f"{len(data)}-byte prefix"
            )
            return None
        warnings.append("PT_DYNAMIC has no DT_NULL terminator")

    strtab_addr = next((v for t, v in entries if t == DT_STRTAB), None)
    strsz = next((v for t, v in entries if t == DT_STRSZ), None)
    strtab: tuple[int, int] | None = None
    if strtab_addr is None:
        warnings.append("PT_DYNAMIC has no DT_STRTAB")
    else:
        # DT_STRTAB holds an address, not a file offset (gABI "Dynamic Section").
        mapped = vaddr_to_offset(layout, strtab_addr)
        if mapped is None:
            warnings.append(f"DT_STRTAB {strtab_addr:#x} is not inside any PT_LOAD file image")
        else:
            start, seg_stop = mapped
            # A hostile DT_STRSZ cannot push reads past the segment or the file.
            stop = seg_stop if strsz is None else min(seg_stop, start + strsz)
            strtab = (start, max(start, stop))
    return _Dynamic(tuple(entries), strtab, strsz)


class _Unavailable(Exception):
    """Internal: a dynamic string lies beyond the prefix."""


def _dyn_string(
    strtab: tuple[int, int], strsz: int | None, data: bytes, index: int, warnings: list[str]
) -> str | None:
    """Return the NUL-terminated string at ``index`` in the DT_STRTAB file range.

    None means corrupt (warned and skipped); raises _Unavailable when the string
    runs past the end of the prefix, i.e. more bytes would settle it.
    """
    start, stop = strtab
    pos = start + index
    if (strsz is not None and index >= strsz) or pos >= stop:
        warnings.append(f"dynamic string offset {index:#x} is outside DT_STRTAB; skipped")
        return None
    cap = pos + MAX_NAME_BYTES + 1  # bounds the memchr per entry
    limit = min(stop, len(data), cap)
    nul = data.find(b"\0", pos, limit)
    if nul >= 0:
        return data[pos:nul].decode("utf-8", "backslashreplace")
    if cap <= min(stop, len(data)) or stop <= len(data):
        warnings.append(f"dynamic string at offset {index:#x} is unterminated or too long")
        return None
    raise _Unavailable


@dataclass(frozen=True)
class _DynNames:
    needed: tuple[str, ...]
    runpath: tuple[str, ...]
    runpath_tag: str | None
    soname: str | None
    search_path: tuple[str, ...] = ()


def _resolve_names(dyn: _Dynamic, data: bytes, warnings: list[str]) -> _DynNames | None:
    """Resolve DT_NEEDED / DT_SONAME / DT_RUNPATH / DT_RPATH; None if not all available."""
    if dyn.strtab is None:
        return None
    needed: list[str] = []
    runpath: list[str] = []
    rpath: list[str] = []
    soname: str | None = None
    raw: dict[int, list[str]] = {DT_RUNPATH: [], DT_RPATH: []}
    try:
        for tag, val in dyn.entries:  # bounded by _MAX_DYN_ENTRIES
            if tag not in (DT_NEEDED, DT_SONAME, DT_RUNPATH, DT_RPATH):
                continue
            s = _dyn_string(dyn.strtab, dyn.strsz, data, val, warnings)
            if s is None:
                continue
            if tag == DT_NEEDED:
                needed.append(s)
            elif tag == DT_SONAME:
                soname = soname if soname is not None else s
            else:
                # gABI: the path is a colon-separated list of directories.
                (runpath if tag == DT_RUNPATH else rpath).extend(p for p in s.split(":") if p)
                if s:  # the loader keeps empty entries: the working folder
                    raw[tag].extend(s.split(":"))
    except _Unavailable:
        start, stop = dyn.strtab
        warnings.append(
            f"dynamic string table ({start:#x}..{stop:#x}) lies beyond the {len(data)}-byte prefix"
        )
        return None
    has_runpath = any(t == DT_RUNPATH for t, _ in dyn.entries)
    has_rpath = any(t == DT_RPATH for t, _ in dyn.entries)
    # gABI "Shared Object Dependencies": with DT_RUNPATH present, DT_RPATH is ignored.
    if has_runpath:
        return _DynNames(tuple(needed), tuple(runpath), "DT_RUNPATH", soname,
                         tuple(raw[DT_RUNPATH]))
    if has_rpath:
        return _DynNames(tuple(needed), tuple(rpath), "DT_RPATH", soname, tuple(raw[DT_RPATH]))
    return _DynNames(tuple(needed), (), None, soname)


# --- required prefix ----------------------------------------------------------------


def required_prefix(layout: ElfLayout, prefix: bytes = b"") -> int:
    """Return how many leading bytes :func:`analyze` needs for a complete answer.

    That is the end of the program header table, of every read-only-data
    PT_LOAD (where .rodata lives; segments are in ascending order, so this is
    the end of the last one) and of PT_DYNAMIC. Where DT_STRTAB points is only
    known once .dynamic has been read, so when ``prefix`` covers PT_DYNAMIC the
    answer also covers the dynamic string table (which patchelf/auditwheel
    often moves behind .dynamic). Call again with the longer prefix until the
    answer stops growing (at most one extra round). Clamped to the file size
    when ``parse_layout`` was given one; hostile sizes can otherwise make this
    huge, so callers should cap it.
    """
    need = layout.header_bytes_needed
    for seg in rodata_segments(layout):
        need = max(need, seg.end)
    dyn_seg = dynamic_segment(layout)
    if dyn_seg is not None:
        need = max(need, dyn_seg.end)
        if prefix:
            dyn = _read_dynamic(layout, prefix, [])
            if dyn is not None and dyn.strtab is not None:
                need = max(need, dyn.strtab[1])
    return file_end(layout, need)


# --- string scanning ----------------------------------------------------------------


def _regions(layout: ElfLayout, data_len: int) -> tuple[list[tuple[int, int]], list[int]]:
    """Available read-only-data byte ranges, merged where they overlap, plus their starts.

    Merging keeps hostile overlapping segments from multiplying scan time. Each
    segment start is also returned, as it counts as a string boundary; the
    matching region end for a start is found with the merged list.
    """
    spans: list[tuple[int, int]] = []
    for seg in rodata_segments(layout):  # bounded by the 64 KiB phdr table
        lo, hi = seg.offset, min(file_end(layout, seg.end), data_len)
        if lo < hi:
            spans.append((lo, hi))
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if merged and lo < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged, sorted({lo for lo, _ in spans})


def _find_exact(
    data: bytes, regions: list[tuple[int, int]], starts: list[tuple[int, int]], word: bytes
) -> bool:
    """Whether ``word`` occurs as a whole C string in the regions.

    A whole C string is preceded by a NUL or starts a segment, and is followed
    by a NUL inside the available bytes (a string cut off by the end of the
    prefix is not known to end there). ``starts`` pairs each segment start
    with the end of the region holding it.
    """
    needle = b"\0" + word + b"\0"
    for lo, hi in regions:
        if data.find(needle, lo, hi) >= 0:
            return True
    terminated = word + b"\0"
    return any(data.startswith(terminated, s, hi) for s, hi in starts)


def _start_bounds(regions: list[tuple[int, int]], starts: list[int]) -> list[tuple[int, int]]:
    """Pair each segment start with the end of the merged region that contains it."""
    out: list[tuple[int, int]] = []
    i = 0
    for s in starts:  # both sorted: one linear pass
        while i < len(regions) and regions[i][1] <= s:
            i += 1
        if i < len(regions) and regions[i][0] <= s:
            out.append((s, regions[i][1]))
    return out


def _scan_patterns(
    data: bytes,
    regions: list[tuple[int, int]],
    patterns: Iterable[re.Pattern[bytes]],
    warnings: list[str],
) -> tuple[str, ...]:
    """Distinct non-empty matches of each pattern over the read-only data, first-seen order.

    Patterns run on the raw bytes (``finditer(data, lo, hi)`` avoids copying a
    25 MB segment); write them so they cannot cross a NUL.
    """
    found: dict[str, None] = {}
    iterations = 0
    for pat in patterns:
        for lo, hi in regions:
            for m in pat.finditer(data, lo, hi):
                iterations += 1
                if iterations > _MAX_MATCH_ITERATIONS or len(found) >= _MAX_MATCHES:
                    warnings.append("too many pattern matches; result truncated")
                    return tuple(found)
                if m.end() > m.start():
                    found.setdefault(m.group(0).decode("utf-8", "backslashreplace"), None)
    return tuple(found)


def _heuristic_needed(layout: ElfLayout, data: bytes, warnings: list[str]) -> tuple[str, ...]:
    """Soname-looking C strings in the first read-only PT_LOAD (see ElfFacts)."""
    ro = rodata_segments(layout)
    if not ro:
        warnings.append("no read-only PT_LOAD to scan for sonames")
        return ()
    seg = ro[0]
    lo, hi = seg.offset, min(file_end(layout, seg.end), len(data))
    if lo >= hi:
        warnings.append("first read-only PT_LOAD lies beyond the prefix")
        return ()
    names: dict[str, None] = {}
    for m in _SONAME_CANDIDATE.finditer(data, lo, hi):
        start = m.start()
        if start > lo and data[start - 1] != 0:
            continue  # tail of a longer string, e.g. "foo_libbar.so"
        raw = m.group(0)[:-1]
        if _SONAME_FULL.fullmatch(raw):
            names.setdefault(raw.decode("ascii"), None)
            if len(names) >= _MAX_HEURISTIC_NAMES:
                warnings.append("too many soname-like strings; heuristic result truncated")
                break
    return tuple(names)


# --- symbol version needs (.gnu.version_r) -----------------------------------------
#
# LSB Core "Symbol Versioning" (Elfxx_Verneed / Elfxx_Vernaux, section SHT_GNU_verneed).
# GNU ld puts .gnu.version_r in the first read-only PT_LOAD, next to .dynsym, so it is in
# the first few hundred KB even when patchelf/auditwheel moved .dynamic and .dynstr to the
# end of a 25 MB file (and filled the old .dynstr with "X"). Its strings are offsets into
# that moved .dynstr, but each Vernaux carries vna_hash, the SysV ELF hash of the version
# name: a library versioning its symbols by its own soname (libcudart.so.12 defines version
# "libcudart.so.12") is recognised by that hash and by vna_name == vn_file (the linker
# stores the one string once).

_VERNEED = 16  # sizeof(Elfxx_Verneed) == sizeof(Elfxx_Vernaux), both classes
_MAX_VERNEED_FILES = 256
_MAX_VERNAUX = 256


@dataclass(frozen=True)
class VersionNeed:
    """One Elfxx_Vernaux of a Elfxx_Verneed entry, with where it was read."""

    offset: int  # file offset of the Vernaux entry
    file_ref: int  # vn_file: .dynstr offset of the needed library's soname
    name_ref: int  # vna_name: .dynstr offset of the version name
    hash: int  # vna_hash: elf_hash(version name)
    index: int  # vna_other: the version index symbols refer to


def _verneed_chain(data: bytes, start: int, hi: int, little: bool) -> list[VersionNeed] | None:
    """The Verneed chain at ``start`` if every entry is well formed, else None."""
    e = "<" if little else ">"
    out: list[VersionNeed] = []
    seen_index: set[int] = set()
    pos = start
    for _ in range(_MAX_VERNEED_FILES):
        if pos + _VERNEED > hi:
            return None
        ver, cnt, file_ref, aux, nxt = struct.unpack_from(e + "HHIII", data, pos)
        if ver != 1 or not 0 < cnt <= _MAX_VERNAUX or aux != _VERNEED:
            return None
        a = pos + aux
        for i in range(cnt):
            if a + _VERNEED > hi:
                return None
            h, flags, other, name_ref, anext = struct.unpack_from(e + "IHHII", data, a)
            last = i == cnt - 1
            if flags & ~0x3 or other < 2 or other in seen_index or h > 0x0FFFFFFF \
                    or anext != (0 if last else _VERNEED):
                return None
            seen_index.add(other)
            out.append(VersionNeed(a, file_ref, name_ref, h, other))
            a += anext
        if nxt == 0:
            return out
        if nxt != _VERNEED * (cnt + 1):
            return None
        pos += nxt
    return None


def find_version_needs(layout: ElfLayout, data: bytes) -> tuple[VersionNeed, ...]:
    """The version needs of the first read-only PT_LOAD, found by their structure.

    Without section headers or .dynamic (both may lie beyond the prefix) the table is
    found by scanning 4-aligned offsets for a chain of at least two well-formed
    Verneed entries (vn_version 1, vn_aux 16, consecutive entries, Vernaux links 16/0,
    distinct version indexes >= 2, hashes < 2**28). Empty when none is found.
    """
    ro = rodata_segments(layout)
    if not ro:
        return ()
    seg = ro[0]
    lo, hi = seg.offset, min(file_end(layout, seg.end), len(data))
    one = b"\x01\x00" if layout.little else b"\x00\x01"
    pos = data.find(one, lo, hi)
    while 0 <= pos < hi:
        if pos % 4 == 0:
            chain = _verneed_chain(data, pos, hi, layout.little)
            if chain is not None and len({n.file_ref for n in chain}) >= 2:
                return tuple(chain)
        pos = data.find(one, pos + 1, hi)
    return ()


def versioned_libraries(needs: Iterable[VersionNeed], candidates: Iterable[str]
                        ) -> list[tuple[str, VersionNeed]]:
    """The ``candidates`` (sonames) a build needs by a version named like the library:
    vna_hash is the candidate's ELF hash and vna_name is the very string of vn_file."""
    by_hash = {elf_hash(c.encode()): c for c in candidates}
    return [(by_hash[n.hash], n) for n in needs
            if n.hash in by_hash and n.name_ref == n.file_ref]


# --- entry point --------------------------------------------------------------------


def analyze(
    prefix: bytes,
    total_size: int,
    wanted: Iterable[str],
    patterns: Iterable[re.Pattern[bytes]] = (),
) -> ElfFacts:
    """Extract dependencies and strings of interest from a prefix of an ELF file.

    ``prefix`` is the first ``len(prefix)`` bytes of a file of ``total_size``
    bytes. The ELF header and program header table must be inside it (else
    :class:`ElfTruncatedError`); everything else degrades gracefully, see
    :class:`ElfFacts` for what each field means when bytes are missing.
    ``wanted`` names are matched as exact NUL-terminated C strings in the
    read-only data (a name only occurring inside a longer string does not
    count; note this also misses literals the linker tail-merged into a longer
    one). ``patterns`` are bytes regexes run over the same data.
    Raises only :class:`ElfError` for bad input.
    """
    layout = parse_layout(prefix, total_size)
    warnings: list[str] = []

    needed: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()
    runpath_tag: str | None = None
    soname: str | None = None
    search_path: tuple[str, ...] = ()
    flags_1 = 0
    method = "none"
    dyn = _read_dynamic(layout, prefix, warnings)
    names = _resolve_names(dyn, prefix, warnings) if dyn is not None else None
    if names is not None:
        method = "dt_needed"
        needed, runpath, soname = names.needed, names.runpath, names.soname
        runpath_tag, search_path = names.runpath_tag, names.search_path
        flags_1 = next((v for t, v in reversed(dyn.entries) if t == DT_FLAGS_1), 0
                       ) if dyn is not None else 0
    elif dynamic_segment(layout) is not None:
        needed = _heuristic_needed(layout, prefix, warnings)
        if needed:
            method = "dynstr-heuristic"
        else:
            warnings.append("dynstr heuristic found no soname-like strings")

    regions, seg_starts = _regions(layout, len(prefix))
    starts = _start_bounds(regions, seg_starts)
    found: set[str] = set()
    for name in set(wanted):
        word = name.encode("utf-8")
        if word and b"\0" not in word and _find_exact(prefix, regions, starts, word):
            found.add(name)
    matches = _scan_patterns(prefix, regions, patterns, warnings)

    complete = len(prefix) >= required_prefix(layout, prefix)
    version_needs = find_version_needs(layout, prefix) if method != "dt_needed" else ()
    return ElfFacts(
        machine=layout.machine,
        needed=needed,
        needed_method=method,
        runpath=runpath,
        soname=soname,
        strings=frozenset(found),
        matches=matches,
        complete=complete,
        runpath_tag=runpath_tag,
        layout=layout,
        warnings=tuple(warnings),
        version_needs=version_needs,
        search_path=search_path,
        flags_1=flags_1,
    )
