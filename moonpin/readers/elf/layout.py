"""The layout of an ELF file: its identification, ELF header and program headers, and the
segments they describe (the first few KB of the file; :func:`parse_layout`).

The part of :mod:`moonpin.readers.elf.analysis` that everything else builds on: the gABI
constants of the header and program headers, :class:`ElfError` / :class:`ElfTruncatedError`,
:class:`Segment` and :class:`ElfLayout`, and the helpers that locate segments (read-only
data, PT_DYNAMIC, virtual address to file offset). Input is treated as hostile, as in
:mod:`moonpin.readers.elf.analysis`: every size is bounds-checked against the bytes present.

References: "ELF gABI" is the System V ABI generic chapters 4 ("Object Files": ELF Header,
Program Header); "psABI" is the processor supplement (x86-64 / AArch64), which only fixes
``e_machine``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "ET_DYN",
    "ET_EXEC",
    "ET_REL",
    "PF_R",
    "PF_W",
    "PF_X",
    "PT_DYNAMIC",
    "PT_LOAD",
    "ElfError",
    "ElfLayout",
    "ElfTruncatedError",
    "Segment",
    "dynamic_range",
    "dynamic_segment",
    "file_end",
    "header_machine",
    "is_elf",
    "parse_layout",
    "rodata_segments",
    "strings_prefix",
    "struct_formats",
    "vaddr_to_offset",
]

# --- constants (ELF gABI) -------------------------------------------------------

_MAGIC = b"\x7fELF"  # gABI "ELF Identification": EI_MAG0..EI_MAG3
_EI_NIDENT = 16
_EI_CLASS, _EI_DATA, _EI_VERSION, _EI_OSABI, _EI_ABIVERSION = 4, 5, 6, 7, 8
_ELFCLASS32, _ELFCLASS64 = 1, 2
_ELFDATA2LSB, _ELFDATA2MSB = 1, 2
_EV_CURRENT = 1

# gABI "ELF Header": e_type values.
ET_REL, ET_EXEC, ET_DYN = 1, 2, 3

# gABI "Program Header": p_type and p_flags values.
PT_LOAD, PT_DYNAMIC = 1, 2
PF_X, PF_W, PF_R = 0x1, 0x2, 0x4
# gABI "Sections" (extended numbering): e_phnum == PN_XNUM means the real count
# lives in section header 0. Real extension modules have ~10-15 program headers.
_PN_XNUM = 0xFFFF

# gABI "ELF Header" e_machine values (psABI supplements). Only x86_64 and
# aarch64 matter for Mooncake wheels; the rest make error messages readable.
_MACHINES: dict[int, str] = {
    2: "sparc",
    3: "i386",
    8: "mips",
    20: "ppc",
    21: "ppc64",
    22: "s390",
    40: "arm",
    43: "sparcv9",
    62: "x86_64",
    183: "aarch64",
    243: "riscv",
    258: "loongarch",
}

# --- limits (why: hostile input must not make us loop or allocate without bound) --

# Linux's load_elf_phdrs() refuses program header tables larger than 64 KiB;
# nothing a real loader accepts is bigger, so neither do we.
_MAX_PHDR_TABLE_BYTES = 65536


# --- public types -------------------------------------------------------------------


class ElfError(ValueError):
    """The input is not a readable ELF file (corrupt, unsupported or too short)."""


class ElfTruncatedError(ElfError):
    """The prefix ends before a structure that must be read.

    ``needed`` is the prefix length that would suffice for this step, so the
    caller can fetch that much and retry.
    """

    def __init__(self, what: str, needed: int, have: int) -> None:
        super().__init__(f"truncated {what}: need {needed} bytes, have {have}")
        self.needed = needed
        self.have = have


@dataclass(frozen=True)
class Segment:
    """One program header (gABI "Program Header"), bit-width neutral."""

    type: int
    flags: int
    offset: int
    filesz: int
    vaddr: int
    memsz: int

    @property
    def end(self) -> int:
        """File offset one past the segment's file image (``p_offset + p_filesz``)."""
        return self.offset + self.filesz

    @property
    def is_readonly_data(self) -> bool:
        """PT_LOAD mapped readable, not writable, not executable (where .rodata lives)."""
        return self.type == PT_LOAD and self.flags & (PF_R | PF_W | PF_X) == PF_R


@dataclass(frozen=True)
class ElfLayout:
    """ELF identity plus program headers: everything in the first few KB."""

    bits: int
    little: bool
    machine: str
    elf_type: int
    segments: tuple[Segment, ...]
    header_bytes_needed: int
    e_machine: int = 0
    file_size: int | None = None
    #: the rest of e_ident the loader checks (glibc elf/dl-load.c ``open_verify``):
    #: EI_OSABI, EI_ABIVERSION, and whether any EI_PAD byte is nonzero
    osabi: int = 0
    abiversion: int = 0
    ident_pad: bool = False
    #: e_version (gABI: EV_CURRENT, 1)
    version: int = 1
    #: the section header table: e_shoff, e_shentsize, e_shnum (0: none)
    shoff: int = 0
    shentsize: int = 0
    shnum: int = 0


# --- header parsing -----------------------------------------------------------------


def is_elf(prefix: bytes) -> bool:
    """Return whether ``prefix`` starts with the ELF magic (gABI "ELF Identification")."""
    return prefix[:4] == _MAGIC


def header_machine(prefix: bytes) -> int | None:
    """``e_machine`` from the first 20 bytes of an ELF file, in its byte order (gABI "ELF
    Header": ``e_ident``, ``e_type``, then ``e_machine``); None when they are not an ELF
    file's. For a caller that needs only the machine of a large file (an interpreter)."""
    if len(prefix) < 20 or not is_elf(prefix) or prefix[_EI_DATA] not in (_ELFDATA2LSB,
                                                                          _ELFDATA2MSB):
        return None
    return int.from_bytes(prefix[18:20], "little" if prefix[_EI_DATA] == _ELFDATA2LSB else "big")


def struct_formats(bits: int, little: bool) -> tuple[str, str, str]:
    """struct formats for Elf_Ehdr, Elf_Phdr, Elf_Dyn (gABI "Data Representation")."""
    end = "<" if little else ">"
    if bits == 64:
        # Elf64_Phdr puts p_flags second (for alignment); Elf32_Phdr puts it 7th.
        return end + "16sHHIQQQIHHHHHH", end + "IIQQQQQQ", end + "qQ"
    return end + "16sHHIIIIIHHHHHH", end + "IIIIIIII", end + "iI"


def parse_layout(prefix: bytes, total_size: int | None = None) -> ElfLayout:
    """Parse the ELF header and program header table from ``prefix``.

    Needs ``max(e_ehsize, e_phoff + e_phnum * e_phentsize)`` bytes (reported as
    ``header_bytes_needed``; raises :class:`ElfTruncatedError` with that number
    when the prefix is shorter). ``total_size``, when given, is the full file
    size: tables beyond it are corrupt, and :func:`required_prefix` clamps to it.
    Both ELFCLASS32/64 and both byte orders are parsed.
    """
    have = len(prefix)
    if total_size is not None:
        if total_size < 0:
            raise ElfError(f"negative total_size {total_size}")
        if have > total_size:
            raise ElfError(f"prefix ({have} bytes) is longer than total_size ({total_size})")
    if prefix[:4] != _MAGIC[: min(have, 4)] or (total_size is not None and total_size < 4):
        raise ElfError("not an ELF file (bad magic)")
    if have < _EI_NIDENT:
        raise ElfTruncatedError("ELF identification", _EI_NIDENT, have)

    ei_class, ei_data, ei_version = prefix[_EI_CLASS], prefix[_EI_DATA], prefix[_EI_VERSION]
    if ei_class == _ELFCLASS64:
        bits = 64
    elif ei_class == _ELFCLASS32:
        bits = 32
    else:
        raise ElfError(f"unsupported ELF class {ei_class} (EI_CLASS)")
    if ei_data not in (_ELFDATA2LSB, _ELFDATA2MSB):
        raise ElfError(f"unsupported ELF data encoding {ei_data} (EI_DATA)")
    if ei_version != _EV_CURRENT:
        raise ElfError(f"unsupported ELF version {ei_version} (EI_VERSION)")
    little = ei_data == _ELFDATA2LSB

    ehdr_fmt, phdr_fmt, _ = struct_formats(bits, little)
    ehdr_size = struct.calcsize(ehdr_fmt)
    phdr_size = struct.calcsize(phdr_fmt)
    if total_size is not None and total_size < ehdr_size:
        raise ElfError(f"file ({total_size} bytes) is smaller than an ELF header ({ehdr_size})")
    if have < ehdr_size:
        raise ElfTruncatedError("ELF header", ehdr_size, have)
    (ident, e_type, e_machine, e_version, _, e_phoff, e_shoff, _, _, e_phentsize, e_phnum,
     e_shentsize, e_shnum, _) = struct.unpack_from(ehdr_fmt, prefix, 0)
    machine = _MACHINES.get(e_machine, f"EM_{e_machine}")

    def made(segments: tuple[Segment, ...], needed: int) -> ElfLayout:
        return ElfLayout(bits, little, machine, e_type, segments, needed, e_machine, total_size,
                         osabi=ident[_EI_OSABI], abiversion=ident[_EI_ABIVERSION],
                         ident_pad=any(ident[_EI_ABIVERSION + 1:]), version=e_version,
                         shoff=e_shoff, shentsize=e_shentsize, shnum=e_shnum)

    if e_phnum == _PN_XNUM:
        raise ElfError("extended program header numbering (PN_XNUM) is not supported")
    if e_phnum == 0:
        # gABI "ELF Header": no program header table (e.g. a relocatable object).
        return made((), ehdr_size)
    if e_phentsize != phdr_size:
        # Loaders (Linux binfmt_elf, glibc rtld) insist on the native entry size.
        raise ElfError(f"e_phentsize {e_phentsize} != {phdr_size} for ELFCLASS{bits}")
    table = e_phnum * phdr_size
    if table > _MAX_PHDR_TABLE_BYTES:
        raise ElfError(f"program header table too large ({e_phnum} entries)")
    table_end = e_phoff + table
    if total_size is not None and table_end > total_size:
        raise ElfError(
            f"program header table ({e_phoff:#x}..{table_end:#x}) extends beyond end of "
            f"file ({total_size} bytes)"
        )
    needed = max(ehdr_size, table_end)
    if have < table_end:
        raise ElfTruncatedError("program header table", needed, have)

    segments: list[Segment] = []
    for i in range(e_phnum):  # bounded: e_phnum * phdr_size <= 64 KiB
        f = struct.unpack_from(phdr_fmt, prefix, e_phoff + i * phdr_size)
        if bits == 64:
            p_type, p_flags, p_offset, p_vaddr, _, p_filesz, p_memsz, _ = f
        else:
            p_type, p_offset, p_vaddr, _, p_filesz, p_memsz, p_flags, _ = f
        segments.append(Segment(p_type, p_flags, p_offset, p_filesz, p_vaddr, p_memsz))
    return made(tuple(segments), needed)


# --- segment helpers ---------------------------------------------------------------


def file_end(layout: ElfLayout, end: int) -> int:
    """Clamp an offset to the file size when it is known."""
    return end if layout.file_size is None else min(end, layout.file_size)


def rodata_segments(layout: ElfLayout) -> list[Segment]:
    """PT_LOAD segments holding read-only data (.rodata, and .dynstr for GNU ld).

    Modern GNU ld / lld (``-z separate-code``, binutils >= 2.31 default on
    x86_64) give read-only data its own R-only PT_LOAD. Older links put .text
    and .rodata into one R+X segment; when no R-only PT_LOAD exists we fall back
    to the readable, non-writable ones so such objects still work.
    """
    loads = [s for s in layout.segments if s.type == PT_LOAD]
    ro = [s for s in loads if s.is_readonly_data]
    if ro:
        return ro
    return [s for s in loads if s.flags & (PF_R | PF_W) == PF_R]


def strings_prefix(layout: ElfLayout) -> int:
    """How many leading bytes cover the read-only data (where the strings of interest
    live): a prefix this long answers "which names", even when ``.dynamic`` lies further."""
    return file_end(layout, max((s.end for s in rodata_segments(layout)),
                                 default=layout.header_bytes_needed))


def dynamic_segment(layout: ElfLayout) -> Segment | None:
    """The PT_DYNAMIC entry the loader reads: the last one. gABI allows one, but glibc's
    ``_dl_map_object_from_fd`` (dl-load.c) walks every program header and each PT_DYNAMIC
    replaces ``l_ld``; one with no file bytes (``p_filesz`` 0, as separate debuginfo has)
    sets ``empty_dynamic`` and the load fails with "object file has no dynamic section",
    so there is none then (None, as with no PT_DYNAMIC at all)."""
    found = None
    for s in layout.segments:
        if s.type == PT_DYNAMIC:
            if s.filesz == 0:
                return None
            found = s
    return found


def dynamic_range(layout: ElfLayout) -> tuple[int, int] | None:
    """The file range ``[start, end)`` the loader reads the dynamic array from. glibc's
    ``_dl_map_object_from_fd`` (dl-load.c) sets ``l_ld`` to PT_DYNAMIC's ``p_vaddr`` (plus
    the load bias) and reads the array from the mapped segments; its ``p_offset`` is never
    read. So the bytes are those the PT_LOAD holding ``p_vaddr`` maps there (linkers make
    the two agree; an edited object need not), at most ``p_filesz`` of them and to the end of
    that PT_LOAD's file image. None: no PT_DYNAMIC the loader reads (:func:`dynamic_segment`),
    or its address lies in no PT_LOAD's file image."""
    seg = dynamic_segment(layout)
    if seg is None:
        return None
    got = vaddr_to_offset(layout, seg.vaddr)
    if got is None:
        return None
    start, image_end = got
    return start, min(start + seg.filesz, image_end)


def vaddr_to_offset(layout: ElfLayout, vaddr: int) -> tuple[int, int] | None:
    """Map a virtual address to (file offset, end of that segment's file image).

    gABI "Program Header": a PT_LOAD maps file bytes [p_offset, p_offset+p_filesz)
    to [p_vaddr, p_vaddr+p_filesz); bytes up to p_memsz are zero-fill with no
    file image, so addresses there (and outside every PT_LOAD) are unmapped.
    """
    for s in layout.segments:
        if s.type == PT_LOAD and s.vaddr <= vaddr < s.vaddr + s.filesz:
            return s.offset + (vaddr - s.vaddr), file_end(layout, s.end)
    return None
