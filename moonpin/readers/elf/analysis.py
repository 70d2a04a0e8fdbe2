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
:mod:`moonpin.readers.elf.layout`, the dynamic section is decoded by
:mod:`moonpin.readers.elf.dynamic` (both re-exported here); this module reads the strings and
the symbol version needs, and :func:`analyze` puts them together.

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

from moonpin.readers.elf import dynamic
from moonpin.readers.elf.dynamic import (
    DT_NEEDED,
    DT_NULL,
    DT_RPATH,
    DT_RUNPATH,
    DT_SONAME,
    DT_STRSZ,
    DT_STRTAB,
    MAX_NAME_BYTES,
)
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
    dynamic_range,
    dynamic_segment,
    file_end,
    is_elf,
    parse_layout,
    rodata_segments,
    strings_prefix,
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

#: ``DT_FLAGS_1`` bit: the object's own needs search neither the default folders nor the
#: loader cache's entries in them (glibc elf/dl-load.c ``_dl_map_object``)
DF_1_NODEFLIB = 0x800

# --- limits (why: hostile input must not make us loop or allocate without bound) --

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


def _read_dynamic(layout: ElfLayout, data: bytes, warnings: list[str]
                  ) -> tuple[dynamic.Dynamic, tuple[int, int] | None] | None:
    """The dynamic array (:func:`moonpin.readers.elf.dynamic.decode`) and the file range of
    its string table, if the array lies in ``data``; None (with a warning saying why) when
    there is no PT_DYNAMIC or it extends beyond the prefix before its DT_NULL."""
    dyn = dynamic.decode(layout, data)
    if dyn is None:
        seg = dynamic_segment(layout)
        if any(s.type == PT_DYNAMIC and s.filesz == 0 for s in layout.segments):
            warnings.append("a PT_DYNAMIC segment has no file bytes (ld.so: object file has "
                            "no dynamic section)")
        elif seg is not None and dynamic_range(layout) is None:
            warnings.append(f"PT_DYNAMIC's address {seg.vaddr:#x} lies in no PT_LOAD's file "
                            "image (ld.so reads the dynamic array there)")
        else:
            warnings.append("no PT_DYNAMIC segment: no dynamic dependencies recorded")
        return None
    if dyn.ended == dynamic.CAP:
        warnings.append(f"PT_DYNAMIC has over {dynamic.MAX_ENTRIES} entries; rest ignored")
    elif dyn.ended == dynamic.SHORT:
        warnings.append(f"PT_DYNAMIC ({dyn.offset:#x}..{dyn.end:#x}) lies beyond the "
                        f"{len(data)}-byte prefix")
        return None
    elif dyn.ended == dynamic.UNTERMINATED:
        warnings.append("PT_DYNAMIC has no DT_NULL terminator")
    return dyn, dynamic.string_table(layout, dyn, warnings)


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
    read = _read_dynamic(layout, prefix, []) if prefix else None
    return _required(layout, read[1] if read is not None else None)


def _required(layout: ElfLayout, strtab: tuple[int, int] | None) -> int:
    """:func:`required_prefix`, the string table's range already known (None: not yet)."""
    need = layout.header_bytes_needed
    for seg in rodata_segments(layout):
        need = max(need, seg.end)
    where = dynamic_range(layout)
    if where is not None:
        need = max(need, where[1])
        if strtab is not None:
            need = max(need, strtab[1])
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
    read = _read_dynamic(layout, prefix, warnings)
    strtab = read[1] if read is not None else None
    names = (dynamic.names(read[0], strtab, prefix, warnings)
             if read is not None and strtab is not None else None)
    if names is not None:
        method = "dt_needed"
        needed, runpath, soname = names.needed, names.runpath, names.soname
        runpath_tag, search_path = names.runpath_tag, names.search_path
        flags_1 = names.flags_1
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

    complete = len(prefix) >= _required(layout, strtab)
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
