"""The one decoding of an ELF object's dynamic section (gABI chapter 5, "Dynamic Section"):
its entries up to ``DT_NULL``, the string table they point into, and the names the dynamic
loader reads there (``DT_NEEDED``, ``DT_SONAME``, ``DT_RUNPATH``/``DT_RPATH``) with
``DT_FLAGS_1``. Of a tag given twice the last entry counts, as in glibc (:meth:`Dynamic.info`),
except ``DT_NEEDED``, of which every entry counts.

Every reader of dynamic entries decodes them here: :mod:`moonpin.readers.elf.analysis` (a
prefix of a wheel's member for the scrape; a whole object for the check's loader model,
:mod:`moonpin.preflight.loader.ldso`, the image unpacker and the native builds) and
:mod:`moonpin.readers.elf.symbols` (the tables the loader binds symbols with). The ELF header
and the program headers come from :func:`moonpin.readers.elf.layout.parse_layout`, the one
reader of them.

Hostile input has a defined outcome: at most :data:`MAX_ENTRIES` entries are read (a real
extension has ~40-60), a string is searched for at most :data:`MAX_NAME_BYTES`, every offset
is checked against the bytes at hand, and :attr:`Dynamic.ended` tells an array cut short by
the end of those bytes (a prefix, or a truncated file) from one whose segment ends without
``DT_NULL``. Nothing here raises for bad input. Imports ``struct`` and the layout only.
"""

from __future__ import annotations

import struct

from moonpin.readers.elf.layout import (
    ElfLayout,
    dynamic_range,
    file_end,
    struct_formats,
    vaddr_to_offset,
)

__all__ = [
    "CAP",
    "DT_FLAGS_1",
    "DT_NEEDED",
    "DT_NULL",
    "DT_RPATH",
    "DT_RUNPATH",
    "DT_SONAME",
    "DT_STRSZ",
    "DT_STRTAB",
    "END",
    "MAX_ENTRIES",
    "MAX_NAME_BYTES",
    "SHORT",
    "UNTERMINATED",
    "Dynamic",
    "Names",
    "decode",
    "names",
    "string_table",
]

# gABI "Dynamic Section": the d_tag values read here (elf.h for DT_FLAGS_1).
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ = 0, 1, 5, 10
DT_SONAME, DT_RPATH, DT_RUNPATH = 14, 15, 29
DT_FLAGS_1 = 0x6FFFFFFB

#: Entries read at most: far beyond any real object, and a bound on a hostile PT_DYNAMIC.
MAX_ENTRIES = 65536
#: Longest dynamic string (soname / path) accepted; PATH_MAX on Linux. Bounds the NUL search
#: per entry, so N entries cost O(N * 4096), not O(N * size).
MAX_NAME_BYTES = 4096

#: How the read of a dynamic array ended (:attr:`Dynamic.ended`): at its ``DT_NULL``; at
#: :data:`MAX_ENTRIES`; at the end of its segment's file image, with no ``DT_NULL``; at the
#: end of the bytes at hand, before the segment's end.
END, CAP, UNTERMINATED, SHORT = "end", "cap", "unterminated", "short"


class Dynamic:
    """The dynamic array of one object, as far as the bytes at hand hold it: ``entries``,
    ``(d_tag, d_val)`` in file order up to ``DT_NULL`` (not included); ``ended``, how the
    read ended (:data:`END`, :data:`CAP`, :data:`UNTERMINATED`, :data:`SHORT`); ``offset``
    and ``end``, the file range of the segment (``end`` clamped to the file size when the
    layout knows it)."""

    __slots__ = ("end", "ended", "entries", "offset")

    def __init__(self, entries: tuple[tuple[int, int], ...], ended: str, offset: int,
                 end: int) -> None:
        self.entries = entries
        self.ended = ended
        self.offset = offset
        self.end = end

    def info(self) -> dict[int, int]:
        """The value of each tag as the loader keeps it: the *last* entry of a tag wins
        (glibc elf/get-dynamic-info.h ``elf_get_dynamic_info``: ``info[dyn->d_tag] = dyn``
        for every entry up to ``DT_NULL``, so a later duplicate overwrites an earlier one).
        Only ``DT_NEEDED`` is read entry by entry (elf/dl-deps.c walks ``l_ld``)."""
        return dict(self.entries)

    def last(self, tag: int) -> int | None:
        """The value of the last entry of ``tag``, the one the loader uses (None: none)."""
        for t, v in reversed(self.entries):
            if t == tag:
                return v
        return None

    def has(self, tag: int) -> bool:
        return any(t == tag for t, _ in self.entries)


def decode(layout: ElfLayout, data: bytes, base: int = 0) -> Dynamic | None:
    """The dynamic array of the object whose bytes from offset ``base`` are ``data`` (its
    first ``len(data)`` bytes by default; the image unpacker holds only the segment's)
    (None: it has no ``PT_DYNAMIC`` the loader reads, see
    :func:`~moonpin.readers.elf.layout.dynamic_range`: the last one, read where its address
    is mapped, as glibc reads it; or ``data`` starts past it)."""
    where = dynamic_range(layout)
    if where is None or base > where[0]:
        return None
    start, seg_end = where[0], file_end(layout, where[1])
    entry = struct.Struct(struct_formats(layout.bits, layout.little)[2])
    step = entry.size
    avail = min(seg_end, base + len(data))
    entries: list[tuple[int, int]] = []
    pos = start
    while pos + step <= avail:
        if len(entries) >= MAX_ENTRIES:
            return Dynamic(tuple(entries), CAP, start, seg_end)
        tag, val = entry.unpack_from(data, pos - base)
        if tag == DT_NULL:  # gABI: DT_NULL marks the end of the _DYNAMIC array
            return Dynamic(tuple(entries), END, start, seg_end)
        entries.append((tag, val))
        pos += step
    return Dynamic(tuple(entries), SHORT if avail < seg_end else UNTERMINATED, start,
                   seg_end)


def string_table(layout: ElfLayout, dyn: Dynamic, warnings: list[str]
                 ) -> tuple[int, int] | None:
    """The file range ``[start, stop)`` of ``DT_STRTAB``: from the file offset its address
    maps to (it holds an address, not an offset) to the end of that ``PT_LOAD``'s file image
    or ``DT_STRSZ`` bytes, whichever is first, so a hostile size cannot push a read past
    either. None (with a warning saying why) when there is no such table."""
    addr = dyn.last(DT_STRTAB)
    if addr is None:
        warnings.append("PT_DYNAMIC has no DT_STRTAB")
        return None
    mapped = vaddr_to_offset(layout, addr)
    if mapped is None:
        warnings.append(f"DT_STRTAB {addr:#x} is not inside any PT_LOAD file image")
        return None
    start, seg_stop = mapped
    strsz = dyn.last(DT_STRSZ)
    stop = seg_stop if strsz is None else min(seg_stop, start + strsz)
    return start, max(start, stop)


class _Unavailable(Exception):
    """A dynamic string lies beyond the bytes at hand."""


def _string(strtab: tuple[int, int], strsz: int | None, data: bytes, index: int,
            warnings: list[str]) -> str | None:
    """The NUL-terminated string at ``index`` of the string table: None when it is corrupt
    (warned and skipped); raises :class:`_Unavailable` when it runs past the bytes at hand,
    that is when more bytes would settle it."""
    start, stop = strtab
    pos = start + index
    if (strsz is not None and index >= strsz) or pos >= stop:
        warnings.append(f"dynamic string offset {index:#x} is outside DT_STRTAB; skipped")
        return None
    cap = pos + MAX_NAME_BYTES + 1
    limit = min(stop, len(data), cap)
    nul = data.find(b"\0", pos, limit)
    if nul >= 0:
        return data[pos:nul].decode("utf-8", "backslashreplace")
    if cap <= min(stop, len(data)) or stop <= len(data):
        warnings.append(f"dynamic string at offset {index:#x} is unterminated or too long")
        return None
    raise _Unavailable


class Names:
    """The names the loader reads from the dynamic section. ``runpath`` is the effective
    search path without its empty entries: the last ``DT_RUNPATH``'s, else the last
    ``DT_RPATH``'s (gABI "Shared Object Dependencies": with ``DT_RUNPATH`` present, ``DT_RPATH`` is
    ignored), ``runpath_tag`` saying which; ``search_path`` is the same list as glibc keeps
    it (elf/dl-load.c ``fillin_rpath``: an empty entry is the working folder, ``""``; a
    string empty as a whole is no entry); ``flags_1`` is the last ``DT_FLAGS_1`` (0: none)."""

    __slots__ = ("flags_1", "needed", "runpath", "runpath_tag", "search_path", "soname")

    def __init__(self, needed: tuple[str, ...], runpath: tuple[str, ...],
                 runpath_tag: str | None, soname: str | None,
                 search_path: tuple[str, ...], flags_1: int) -> None:
        self.needed = needed
        self.runpath = runpath
        self.runpath_tag = runpath_tag
        self.soname = soname
        self.search_path = search_path
        self.flags_1 = flags_1


def names(dyn: Dynamic, strtab: tuple[int, int], data: bytes, warnings: list[str]
          ) -> Names | None:
    """``DT_NEEDED``, ``DT_SONAME``, ``DT_RUNPATH``/``DT_RPATH`` and ``DT_FLAGS_1`` of
    ``dyn``, its strings read from ``strtab`` (:func:`string_table`) in ``data``, as glibc
    reads them: every ``DT_NEEDED`` in order (elf/dl-deps.c), and of every other tag the
    last entry alone (:meth:`Dynamic.info`): a duplicate ``DT_RUNPATH`` replaces the earlier
    one rather than adding to it, and its string is the only one read. None (with a warning)
    when a string lies beyond the bytes at hand; a corrupt one is warned about and skipped."""
    info = dyn.info()
    strsz = info.get(DT_STRSZ)
    needed: list[str] = []
    strings: dict[int, str | None] = {}
    try:
        for tag, val in dyn.entries:  # bounded by MAX_ENTRIES
            if tag == DT_NEEDED:
                s = _string(strtab, strsz, data, val, warnings)
                if s is not None:
                    needed.append(s)
        for tag in (DT_SONAME, DT_RUNPATH, DT_RPATH):
            if tag in info:
                strings[tag] = _string(strtab, strsz, data, info[tag], warnings)
    except _Unavailable:
        start, stop = strtab
        warnings.append(f"dynamic string table ({start:#x}..{stop:#x}) lies beyond the "
                        f"{len(data)}-byte prefix")
        return None
    flags_1 = info.get(DT_FLAGS_1, 0)
    soname = strings.get(DT_SONAME)
    # get-dynamic-info.h: "If both RUNPATH and RPATH are given, the latter is ignored."
    path_tag = (DT_RUNPATH if DT_RUNPATH in info else DT_RPATH if DT_RPATH in info
                else None)
    if path_tag is None:
        return Names(tuple(needed), (), None, soname, (), flags_1)
    s = strings.get(path_tag) or ""
    # gABI: a colon-separated list of directories; the loader keeps empty entries (the
    # working folder) of a string that is not empty as a whole.
    return Names(tuple(needed), tuple(p for p in s.split(":") if p),
                 "DT_RUNPATH" if path_tag == DT_RUNPATH else "DT_RPATH", soname,
                 tuple(s.split(":")) if s else (), flags_1)
