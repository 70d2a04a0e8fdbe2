"""Build minimal, valid ELF shared objects for tests (fake wheels, fake images).

The objects are real enough for ``readelf -d -l -W`` and for moonpin's own
``moonpin.readers.elf.analysis`` parser, but not for ``dlopen``: there is no code, no symbol
table and no section header table (gABI "ELF Header": e_shoff 0 means none).

File layout produced (offsets grow downwards)::

    ELF header                      \\
    program headers (LOAD R, LOAD RW, DYNAMIC)   | PT_LOAD R, vaddr == offset
    .dynstr   (unless dynstr_in_rw)  |
    .rodata   (NUL-separated strings)/
    <padding_before_dynamic zero bytes, in no segment; like .debug_* sections>
    .dynamic                        \\  PT_LOAD RW, vaddr == offset + 0x1000
    .dynstr   (if dynstr_in_rw)      /  (PT_DYNAMIC covers .dynamic only)

``dynstr_in_rw`` mimics patchelf/auditwheel-repaired modules, whose .dynstr
is rewritten behind .dynamic in an extra segment at the end of the file.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

__all__ = ["MACHINES", "PAGE", "build_so"]

#: e_machine values (gABI "ELF Header" / psABI supplements).
MACHINES: dict[str, int] = {"x86_64": 62, "aarch64": 183, "i386": 3, "arm": 40, "ppc64": 21}
#: Page size used for PT_LOAD alignment (System V ABI "Program Loading").
PAGE = 0x1000

_PT_LOAD, _PT_DYNAMIC = 1, 2
_PF_X, _PF_W, _PF_R = 1, 2, 4
_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_STRSZ = 0, 1, 5, 10
_DT_SONAME, _DT_RPATH, _DT_RUNPATH = 14, 15, 29


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def build_so(
    needed: Sequence[str] = ("libcudart.so.13", "libtorch.so"),
    runpath: str | None = "$ORIGIN",
    strings: Sequence[str | bytes] = ("mooncake", "mooncake-cpu", "set_transfer_engine"),
    machine: str | int = "x86_64",
    padding_before_dynamic: int = 0,
    *,
    soname: str | None = None,
    rpath: str | None = None,
    bits: int = 64,
    little: bool = True,
    dynstr_in_rw: bool = False,
    dyn_overrides: Mapping[int, int] | None = None,
) -> bytes:
    """Return the bytes of a minimal ET_DYN object.

    ``needed`` become DT_NEEDED entries in order; ``runpath``/``rpath``/``soname``
    become DT_RUNPATH/DT_RPATH/DT_SONAME when not None; ``strings`` are stored
    NUL-separated in the read-only PT_LOAD (bytes are stored verbatim, so a
    test can plant unterminated or binary data). ``dyn_overrides`` replaces the
    value of an emitted tag (e.g. ``{5: 0xdead0000}`` for an unmapped
    DT_STRTAB) to build hostile inputs.
    """
    if bits not in (32, 64):
        raise ValueError("bits must be 32 or 64")
    e_machine = MACHINES[machine] if isinstance(machine, str) else machine
    end = "<" if little else ">"
    ehdr_size, phent = (64, 56) if bits == 64 else (52, 32)
    dyn_fmt = end + ("qQ" if bits == 64 else "iI")
    dyn_ent = struct.calcsize(dyn_fmt)
    phnum = 3

    # .dynstr: offset 0 is the empty string (gABI "String Table").
    dynstr = bytearray(b"\0")
    str_index: dict[str, int] = {}

    def add(s: str) -> int:
        if s not in str_index:
            str_index[s] = len(dynstr)
            dynstr.extend(s.encode() + b"\0")
        return str_index[s]

    dyn_entries: list[tuple[int, int]] = [(_DT_NEEDED, add(n)) for n in needed]
    if soname is not None:
        dyn_entries.append((_DT_SONAME, add(soname)))
    if rpath is not None:
        dyn_entries.append((_DT_RPATH, add(rpath)))
    if runpath is not None:
        dyn_entries.append((_DT_RUNPATH, add(runpath)))
    n_dyn = len(dyn_entries) + 3  # + DT_STRTAB, DT_STRSZ, DT_NULL

    rodata = bytearray(b"\0")
    for s in strings:
        rodata.extend(s if isinstance(s, bytes) else s.encode() + b"\0")

    # Read-only segment: headers, [.dynstr], .rodata; vaddr == offset.
    pos = ehdr_size + phnum * phent
    ro_dynstr_off = None
    if not dynstr_in_rw:
        ro_dynstr_off = pos
        pos += len(dynstr)
    rodata_off = pos
    ro_end = rodata_off + len(rodata)

    # RW segment after the padding; vaddr = offset + PAGE keeps p_vaddr and
    # p_offset congruent modulo the page size and off the R segment's pages.
    rw_off = _align(ro_end + padding_before_dynamic, 8)
    rw_delta = PAGE
    dyn_size = n_dyn * dyn_ent
    rw_size = dyn_size
    if dynstr_in_rw:
        rw_dynstr_off = rw_off + dyn_size
        rw_size += len(dynstr)
        strtab_vaddr = rw_dynstr_off + rw_delta
    else:
        assert ro_dynstr_off is not None
        strtab_vaddr = ro_dynstr_off

    dyn_entries += [(_DT_STRTAB, strtab_vaddr), (_DT_STRSZ, len(dynstr))]
    if dyn_overrides:
        dyn_entries = [(t, dyn_overrides.get(t, v)) for t, v in dyn_entries]
    dyn_entries.append((_DT_NULL, 0))
    dynamic = b"".join(struct.pack(dyn_fmt, t, v) for t, v in dyn_entries)

    ident = b"\x7fELF" + bytes([2 if bits == 64 else 1, 1 if little else 2, 1]) + bytes(9)
    ehdr_fmt = end + ("16sHHIQQQIHHHHHH" if bits == 64 else "16sHHIIIIIHHHHHH")
    shentsize = 64 if bits == 64 else 40
    ehdr = struct.pack(
        ehdr_fmt, ident, 3, e_machine, 1, 0, ehdr_size, 0, 0, ehdr_size, phent, phnum,
        shentsize, 0, 0,
    )  # fmt: skip

    def phdr(p_type: int, flags: int, off: int, vaddr: int, size: int, align: int) -> bytes:
        # Elf64_Phdr has p_flags second, Elf32_Phdr seventh (gABI "Program Header").
        if bits == 64:
            fields = (p_type, flags, off, vaddr, vaddr, size, size, align)
            return struct.pack(end + "IIQQQQQQ", *fields)
        fields = (p_type, off, vaddr, vaddr, size, size, flags, align)
        return struct.pack(end + "IIIIIIII", *fields)

    phdrs = (
        phdr(_PT_LOAD, _PF_R, 0, 0, ro_end, PAGE)
        + phdr(_PT_LOAD, _PF_R | _PF_W, rw_off, rw_off + rw_delta, rw_size, PAGE)
        + phdr(_PT_DYNAMIC, _PF_R | _PF_W, rw_off, rw_off + rw_delta, dyn_size, 8)
    )

    out = bytearray(ehdr + phdrs)
    if not dynstr_in_rw:
        out += dynstr
    out += rodata
    out += bytes(rw_off - len(out))
    out += dynamic
    if dynstr_in_rw:
        out += dynstr
    return bytes(out)


# --- appended: symbol version needs (.gnu.version_r) -------------------------------------


def elf_hash(name: bytes) -> int:
    """SysV ELF hash (gABI "Hash Table"), written out here independently of
    moonpin.readers.elf.analysis."""
    h = 0
    for c in name:
        h = ((h << 4) + c) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g
    return h


def verneed_table(needs: Sequence[tuple[int, Sequence[tuple[str, int]]]],
                  little: bool = True, weak: bool = False) -> bytes:
    """Elfxx_Verneed/Elfxx_Vernaux entries (LSB "Symbol Versioning") as GNU ld lays them
    out: each Verneed followed by its Vernaux entries. ``needs``: (vn_file, [(version
    name, vna_name)]) per library; version indexes count up from 2."""
    end = "<" if little else ">"
    out = bytearray()
    index = 2
    for i, (file_ref, versions) in enumerate(needs):
        last = i == len(needs) - 1
        nxt = 0 if last else 16 * (len(versions) + 1)
        out += struct.pack(end + "HHIII", 1, len(versions), file_ref, 16, nxt)
        for j, (name, name_ref) in enumerate(versions):
            anext = 0 if j == len(versions) - 1 else 16
            out += struct.pack(end + "IHHII", elf_hash(name.encode()), 2 if weak else 0, index,
                               name_ref, anext)
            index += 1
    return bytes(out)


def build_so_versioned(
    needed: Sequence[str] = ("libcudart.so.12", "libtorch.so", "libc.so.6"),
    versions: Mapping[str, Sequence[str]] | None = None,
    *,
    padding_before_dynamic: int = 4 * 1024 * 1024,
    little: bool = True,
    **kwargs: object,
) -> tuple[bytes, int]:
    """Like a patchelf-repaired extension: .dynamic and .dynstr at the end of the file
    behind ``padding_before_dynamic`` bytes, a .gnu.version_r table early in the read-only
    PT_LOAD. ``versions``: library -> version names its symbols need (default: CUDA's
    runtime versions its symbols by its own soname, libc by GLIBC_*). vn_file is each
    library's real .dynstr offset, so a version named like its library shares the string.
    Returns (bytes, file offset of the table)."""
    if versions is None:
        versions = {n: ([n] if n.startswith("libcudart") else ["GLIBC_2.2.5", "GLIBC_2.14"])
                    for n in needed if n.startswith(("libcudart", "libc."))}
    refs: dict[str, int] = {}
    pos = 1
    for n in needed:  # build_so's .dynstr: "\0", then the DT_NEEDED names in order
        refs.setdefault(n, pos)
        pos += len(n) + 1
    extra = pos + 4096  # version names not in .dynstr: any offset past it
    table = verneed_table(
        [(refs[lib], [(v, refs.get(v, extra + k)) for k, v in enumerate(vs)])
         for lib, vs in versions.items()], little=little)
    slot = b"\xee" * (len(table) + 8)
    strings = list(kwargs.pop("strings", ("mooncake", "mooncake-cpu")))  # type: ignore[call-overload]
    data = bytearray(build_so(needed=needed, strings=[*strings, slot], little=little,
                              dynstr_in_rw=True, padding_before_dynamic=padding_before_dynamic,
                              **kwargs))  # type: ignore[arg-type]
    at = data.find(slot)
    at += -at % 4
    data[at:at + len(table)] = table
    return bytes(data), at
