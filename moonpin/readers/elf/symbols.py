"""An ELF object's dynamic symbols, read the way the dynamic loader reads them: the symbols
it leaves undefined (with the version each needs), and lookups of a name in its hash table.

The loader never reads a whole ``.dynsym``: it hashes the name, tests the bloom filter of
``DT_GNU_HASH`` (or walks the ``DT_HASH`` bucket), follows one chain and compares names.
:class:`SymbolTable` does the same on a read-only mapping of the file, so a lookup in a
1 GB ``libtorch_cuda.so`` touches a few pages of it. Matching follows glibc's
``check_match`` (elf/dl-lookup.c): the symbol types the loader binds, no undefined or
valueless definition, local symbols never, and a version needed from ``.gnu.version_r``
against the definer's ``.gnu.version``/``.gnu.version_d``.

References: gABI chapter 5 ("Dynamic Section", "Hash Table", "Symbol Table" in chapter
4); the GNU hash section is glibc's ``_dl_setup_hash``/``do_lookup_x`` and binutils'
``bfd/elflink.c``; symbol versioning is the LSB "Symbol Versioning" chapter.

The ELF header and program headers are read by :func:`moonpin.readers.elf.layout.parse_layout`
and the dynamic section by :func:`moonpin.readers.elf.dynamic.decode`, as for every other
reader of them.

Bytes only, never loaded or executed; every offset read from the file is checked against
its length and every loop is bounded by it, so a hostile object raises :class:`SymbolError`
(a :class:`ValueError`) and nothing else. Imports ``struct``, ``operator`` and the other two
ELF readers (the check loads them before it binds anything).
"""

from __future__ import annotations

import struct
from operator import mul as _mul

from moonpin.readers.elf import dynamic
from moonpin.readers.elf.layout import ElfError, is_elf, parse_layout, vaddr_to_offset

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

__all__ = ["Need", "SymbolError", "SymbolTable", "Undefined", "elf_hash", "gnu_hash"]

_DT_HASH, _DT_STRTAB, _DT_SYMTAB, _DT_STRSZ, _DT_SONAME = 4, 5, 6, 10, 14
_DT_GNU_HASH = 0x6FFFFEF5
_DT_VERSYM, _DT_VERDEF, _DT_VERDEFNUM = 0x6FFFFFF0, 0x6FFFFFFC, 0x6FFFFFFD
_DT_VERNEED, _DT_VERNEEDNUM = 0x6FFFFFFE, 0x6FFFFFFF
_SHN_UNDEF, _SHN_ABS = 0, 0xFFF1
_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE = 1, 2, 10
_STT_TLS = 6
#: Symbol types the loader binds (glibc ALLOWED_STT: NOTYPE, OBJECT, FUNC, COMMON, TLS,
#: GNU_IFUNC).
_BOUND_TYPES = frozenset((0, 1, 2, 5, 6, 10))
_VER_FLG_BASE, _VER_FLG_WEAK = 1, 2
_HIDDEN = 0x8000
#: ``st_other`` visibilities glibc takes as local wherever they are in ``.dynsym``
#: (``dl_symbol_visibility_binds_local_p``: STV_INTERNAL, STV_HIDDEN)
_BINDS_LOCAL = (1, 2)
#: Entries of any one table read at most (a real libtorch_cpu has ~76,000 symbols).
_MAX_ENTRIES = 1 << 22
_MAX_NAME = 4096


class SymbolError(ValueError):
    """The object's dynamic symbol tables cannot be read (the message says which part)."""


def gnu_hash(name: bytes) -> int:
    """The GNU hash of a symbol name (glibc ``dl_new_hash``: h = h * 33 + c, from 5381),
    as its closed form mod 2**32: 5381 * 33**n + sum(c_i * 33**(n-1-i))."""
    n = len(name)
    if n >= len(_POWERS):
        h = 5381
        for c in name:
            h = (h * 33 + c) & 0xFFFFFFFF
        return h
    total: int = sum(map(_mul, name, _DOWN[len(_DOWN) - n:]))
    return (5381 * _POWERS[n] + total) & 0xFFFFFFFF


def _powers(count: int) -> list[int]:
    out = [1]
    for _ in range(count):
        out.append(out[-1] * 33 & 0xFFFFFFFF)
    return out


_POWERS = _powers(1024)  # 33**k mod 2**32
_DOWN = _POWERS[-2::-1]  # 33**1022 ... 33**0: the last n are a name's weights


def elf_hash(name: bytes) -> int:
    """The System V hash of a name (gABI "Hash Table"): ``DT_HASH`` and version hashes."""
    h = 0
    for c in name:
        h = ((h << 4) + c) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h


class Need:
    """A version one object needs from another (``.gnu.version_r``): ``GLIBCXX_3.4.32``
    from ``libstdc++.so.6``; ``weak`` needs (``VER_FLG_WEAK``) are not enforced."""

    __slots__ = ("file", "hash", "hidden", "name", "weak")

    def __init__(self, file: str, name: str, hash: int, weak: bool, hidden: bool) -> None:
        self.file = file
        self.name = name
        self.hash = hash
        self.weak = weak
        self.hidden = hidden


class Undefined:
    """A symbol the object leaves to others: its name, whether it is weak (the loader
    leaves it 0 when nothing defines it), and the version it needs (None: any)."""

    __slots__ = ("name", "need", "weak")

    def __init__(self, name: bytes, weak: bool, need: Need | None) -> None:
        self.name = name
        self.weak = weak
        self.need = need


class SymbolTable:
    """The dynamic symbols of one ELF object held in ``data`` (bytes or a read-only
    mmap). Raises :class:`SymbolError` when its headers or dynamic section cannot be read;
    an object with no dynamic symbol table has ``has_symbols`` False (it defines and needs
    nothing the loader would see)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.size = len(data)
        if self.size < 52 or not is_elf(bytes(data[:4])):
            raise SymbolError("not an ELF object")
        try:
            layout = parse_layout(data)  # type: ignore[arg-type]
        except ElfError as err:
            raise SymbolError(str(err)) from None
        self._layout = layout
        self.bits = layout.bits
        e = "<" if layout.little else ">"
        self._e = e
        self._word = struct.Struct(e + "I")
        self._half = struct.Struct(e + "H")
        if self.bits == 64:
            self._addr = struct.Struct(e + "Q")
            self._sym = struct.Struct(e + "IBBHQQ")
        else:
            self._addr = self._word
            self._sym = struct.Struct(e + "IIIBBH")
        self._syment = self._sym.size
        #: the value of each tag as the loader keeps it: the last entry of a tag wins
        #: (:meth:`moonpin.readers.elf.dynamic.Dynamic.info`)
        self.tags: dict[int, int] = {}
        dyn = dynamic.decode(layout, data)  # type: ignore[arg-type]
        if dyn is not None:
            if dyn.ended == dynamic.SHORT:
                at = dyn.offset + len(dyn.entries) * (16 if self.bits == 64 else 8)
                raise SymbolError(f"a table reaches past the end of the file (byte {at:,})")
            self.tags = dyn.info()
        self.has_symbols = _DT_SYMTAB in self.tags and _DT_STRTAB in self.tags
        self._strtab = self._file_offset(self.tags[_DT_STRTAB]) if self.has_symbols else 0
        self._strsz = self.tags.get(_DT_STRSZ, self.size - self._strtab)
        self._symtab = self._file_offset(self.tags[_DT_SYMTAB]) if self.has_symbols else 0
        self._versym = (self._file_offset(self.tags[_DT_VERSYM])
                        if _DT_VERSYM in self.tags else None)
        self._gnu: tuple[int, int, int, int, int, int] | None = None
        self._sysv: tuple[int, int, int] | None = None
        if self.has_symbols:
            self._setup_hash()
        self._defs: dict[int, tuple[int, str]] | None = None
        self._base: set[int] = set()  # verdef indexes of the base entry (VER_FLG_BASE)
        self._needs: dict[int, Need] | None = None

    # --- bounded reads ---------------------------------------------------------------
    def _unpack(self, fmt: str | struct.Struct, at: int) -> tuple[int, ...]:
        s = fmt if isinstance(fmt, struct.Struct) else struct.Struct(fmt)
        if at < 0 or at + s.size > self.size:
            raise SymbolError(f"a table reaches past the end of the file (byte {at:,})")
        return s.unpack_from(self.data, at)

    def _file_offset(self, vaddr: int) -> int:
        mapped = vaddr_to_offset(self._layout, vaddr)
        if mapped is None:
            raise SymbolError(f"address {vaddr:#x} lies in no loaded segment")
        return mapped[0]

    def string(self, offset: int) -> bytes:
        """The NUL-terminated string at ``offset`` of the dynamic string table."""
        if not 0 <= offset < self._strsz:
            raise SymbolError(f"a name at {offset:,} past the string table's {self._strsz:,}")
        at = self._strtab + offset
        end = self.data.find(b"\0", at, min(at + _MAX_NAME, self.size))
        if end < 0:
            raise SymbolError(f"an unterminated name at byte {at:,}")
        return bytes(self.data[at:end])

    def _setup_hash(self) -> None:
        if _DT_GNU_HASH in self.tags:
            at = self._file_offset(self.tags[_DT_GNU_HASH])
            nbuckets, symoffset, bloom_size, bloom_shift = self._unpack(self._e + "IIII", at)
            if not nbuckets or not bloom_size or bloom_size & (bloom_size - 1):
                raise SymbolError(f"a GNU hash table of {nbuckets} buckets and "
                                  f"{bloom_size} bloom words")
            bloom = at + 16
            buckets = bloom + bloom_size * self._addr.size
            chains = buckets + 4 * nbuckets
            if chains > self.size or nbuckets > _MAX_ENTRIES or bloom_size > _MAX_ENTRIES:
                raise SymbolError("the GNU hash table reaches past the end of the file")
            self._gnu = (nbuckets, symoffset, bloom_size, bloom_shift, bloom, buckets)
            self._chains = chains
        elif _DT_HASH in self.tags:
            at = self._file_offset(self.tags[_DT_HASH])
            nbucket, nchain = self._unpack(self._e + "II", at)
            if at + 8 + 4 * (nbucket + nchain) > self.size or not nbucket:
                raise SymbolError("the SysV hash table reaches past the end of the file")
            self._sysv = (nbucket, nchain, at + 8)

    def _symbol(self, index: int) -> tuple[int, int, int, int, int]:
        """(st_name, st_info, st_other, st_shndx, st_value) of symbol ``index``."""
        f = self._unpack(self._sym, self._symtab + index * self._syment)
        if self.bits == 64:
            return f[0], f[1], f[2], f[3], f[4]
        return f[0], f[3], f[4], f[5], f[1]

    def _versym_of(self, index: int) -> int | None:
        if self._versym is None:
            return None
        return self._unpack(self._half, self._versym + 2 * index)[0]

    # --- what the object defines and needs ------------------------------------------
    @property
    def versioned(self) -> bool:
        """Whether the object has symbol versions (``DT_VERSYM``)."""
        return self._versym is not None

    @property
    def soname(self) -> str | None:
        if not self.has_symbols or _DT_SONAME not in self.tags:
            return None
        return self.string(self.tags[_DT_SONAME]).decode("utf-8", "replace")

    def _count(self) -> int:
        """How many symbols ``.dynsym`` holds, as the hash tables say."""
        if self._sysv is not None:
            return self._sysv[1]
        if self._gnu is None:
            return 0
        nbuckets, symoffset, _, _, _, buckets = self._gnu
        top = 0
        for i in range(nbuckets):
            top = max(top, self._unpack(self._word, buckets + 4 * i)[0])
        if top < symoffset:
            return symoffset
        for _ in range(_MAX_ENTRIES):
            if self._unpack(self._word, self._chains + 4 * (top - symoffset))[0] & 1:
                return top + 1
            top += 1
        raise SymbolError("a GNU hash chain that never ends")

    def definitions(self) -> dict[int, tuple[int, str]]:
        """Version index -> (hash, name) of what ``.gnu.version_d`` defines (the base
        entry, the object's own name, included)."""
        if self._defs is None:
            self._defs = {}
            if _DT_VERDEF in self.tags:
                at = self._file_offset(self.tags[_DT_VERDEF])
                for _ in range(min(self.tags.get(_DT_VERDEFNUM, 0), 65536)):
                    _, flags, ndx, cnt, vhash, aux, nxt = self._unpack(self._e + "HHHHIII", at)
                    if cnt:
                        name = self.string(self._unpack(self._word, at + aux)[0])
                        self._defs[ndx & 0x7FFF] = (vhash, name.decode("utf-8", "replace"))
                        if flags & _VER_FLG_BASE:
                            self._base.add(ndx & 0x7FFF)
                    if not nxt:
                        break
                    at += nxt
        return self._defs

    def version_names(self) -> list[str]:
        """The versions this object defines, but its base entry, in table order."""
        base = self.definitions().get(1)
        return [n for i, (_, n) in sorted(self.definitions().items())
                if i != 1 or base is None]

    def needs(self) -> dict[int, Need]:
        """Version index -> the :class:`Need` ``.gnu.version_r`` records under it."""
        if self._needs is None:
            self._needs = {}
            if _DT_VERNEED in self.tags:
                at = self._file_offset(self.tags[_DT_VERNEED])
                for _ in range(min(self.tags.get(_DT_VERNEEDNUM, 0), 65536)):
                    _, cnt, file_off, aux, nxt = self._unpack(self._e + "HHIII", at)
                    file = self.string(file_off).decode("utf-8", "replace")
                    a = at + aux
                    for _ in range(min(cnt, 65536)):
                        vhash, flags, other, name_off, anext = self._unpack(
                            self._e + "IHHII", a)
                        self._needs[other & 0x7FFF] = Need(
                            file, self.string(name_off).decode("utf-8", "replace"), vhash,
                            bool(flags & _VER_FLG_WEAK), bool(other & _HIDDEN))
                        if not anext:
                            break
                        a += anext
                    if not nxt:
                        break
                    at += nxt
        return self._needs

    def undefined(self) -> Iterator[Undefined]:
        """The global and weak symbols this object leaves undefined, in table order."""
        if not self.has_symbols:
            return
        needs = self.needs()
        # GNU hash: the linker puts every symbol it does not hash (the undefined ones)
        # before symoffset; with DT_HASH every symbol is walked.
        end = min(self._gnu[1] if self._gnu is not None else self._count(), _MAX_ENTRIES)
        if end <= 1:
            return
        # one read of the entries (and of their versions), checked against the file
        first, last = self._symtab + self._syment, self._symtab + end * self._syment
        if first < 0 or last > self.size:
            raise SymbolError(f"a table reaches past the end of the file (byte {last:,})")
        entries = self._sym.iter_unpack(bytes(self.data[first:last]))
        versions: Sequence[int] | None = None
        if self._versym is not None:
            at, stop = self._versym + 2, self._versym + 2 * end
            if at < 0 or stop > self.size:
                raise SymbolError(f"a table reaches past the end of the file (byte {stop:,})")
            versions = struct.unpack(f"{self._e}{end - 1}H", bytes(self.data[at:stop]))
        wide = self.bits == 64
        data, strtab, strsz, size = self.data, self._strtab, self._strsz, self.size
        find = data.find
        for i, f in enumerate(entries):
            name_off, info, other, shndx = ((f[0], f[1], f[2], f[3]) if wide
                                            else (f[0], f[3], f[4], f[5]))
            bind = info >> 4
            if (shndx != _SHN_UNDEF or bind not in (_STB_GLOBAL, _STB_WEAK) or not name_off
                    or other & 3 in _BINDS_LOCAL):
                continue  # a hidden or internal reference binds in its object: no lookup
            v = versions[i] if versions is not None else None
            need = needs.get(v & 0x7FFF) if v is not None and (v & 0x7FFF) > 1 else None
            # self.string(name_off), written out (one per reference)
            at = strtab + name_off
            end = find(b"\0", at, min(at + _MAX_NAME, size)) if name_off < strsz else -2
            if end < 0:
                self.string(name_off)  # raises SymbolError, saying why
            yield Undefined(bytes(data[at:end]), bind == _STB_WEAK, need)

    def defines(self, name: bytes, gnu: int, sysv: int | None, need: Need | None) -> bool:
        """Whether the loader binds a reference to ``name`` (needing ``need``) here.
        ``gnu``/``sysv`` are the name's hashes (``sysv`` None: computed when needed).

        An unversioned reference (glibc ``check_match``, elf/dl-lookup.c) takes a
        definition of version index 0, 1 or 2 at once; one of a later version only when it
        is not hidden and the only such definition of the name here (``num_versions ==
        1``: "no possible ambiguities").

        The GNU table (bloom words, bucket, chain) is walked here, inline: this runs for
        every reference of every object a check binds (~20,000 on a real image)."""
        g = self._gnu
        if g is None:
            others = 0
            for index in self._sysv_chain(name, sysv):
                got = self._matches(index, name, need)
                if got == _MATCH:
                    return True
                others += got == _OTHER_VERSION
            return need is None and others == 1
        nbuckets, symoffset, bloom_size, shift, bloom, buckets = g
        data = self.data
        bits = self.bits
        # the bloom words and buckets lie inside the file (checked in _setup_hash)
        word = self._addr.unpack_from(data, bloom + ((gnu // bits) & (bloom_size - 1))
                                      * self._addr.size)[0]
        if not (word >> (gnu % bits)) & 1 or not (word >> ((gnu >> shift) % bits)) & 1:
            return False
        unpack = self._word.unpack_from
        index = unpack(data, buckets + 4 * (gnu % nbuckets))[0]
        if index < symoffset:
            return False
        at = self._chains + 4 * (index - symoffset)
        last = self.size - 4
        want = gnu | 1
        others = 0
        for _ in range(_MAX_ENTRIES):
            if at > last:
                raise SymbolError(f"a table reaches past the end of the file (byte {at:,})")
            h = unpack(data, at)[0]
            if (h | 1) == want:
                got = self._matches(index, name, need)
                if got == _MATCH:
                    return True
                others += got == _OTHER_VERSION
            if h & 1:
                return need is None and others == 1
            index += 1
            at += 4
        raise SymbolError("a GNU hash chain that never ends")

    def _sysv_chain(self, name: bytes, sysv: int | None) -> Iterator[int]:
        """The symbol indexes of ``name``'s ``DT_HASH`` bucket chain (the GNU table's walk
        is :meth:`defines`'s own)."""
        if self._sysv is None:
            return
        nbucket, nchain, at = self._sysv
        h = elf_hash(name) if sysv is None else sysv
        index = self._unpack(self._word, at + 4 * (h % nbucket))[0]
        for _ in range(min(nchain, _MAX_ENTRIES) + 1):
            if index == 0 or index >= nchain:
                return
            yield index
            index = self._unpack(self._word, at + 4 * (nbucket + index))[0]
        raise SymbolError("a SysV hash chain that loops")

    def _named(self, offset: int, name: bytes) -> bool:
        """Whether the string at ``offset`` is ``name``: compared in place when it is
        (the usual case, a hash match), else as :meth:`string` reads it (which refuses a
        bad offset or an unterminated name)."""
        at = self._strtab + offset
        n = len(name)
        if 0 <= offset < self._strsz and n < _MAX_NAME and at + n < self.size \
                and self.data[at:at + n + 1] == name + b"\0":
            return True
        return self.string(offset) == name

    def _matches(self, index: int, name: bytes, need: Need | None) -> int:
        """glibc ``check_match``: _MATCH, _NO, or _OTHER_VERSION (an unversioned reference
        meeting a non-hidden definition of version index 3 or later)."""
        name_off, info, other, shndx, value = self._symbol(index)
        kind, bind = info & 0xF, info >> 4
        if (kind not in _BOUND_TYPES or shndx == _SHN_UNDEF
                or (value == 0 and shndx != _SHN_ABS and kind != _STT_TLS)
                or bind not in (_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE)
                or other & 3 in _BINDS_LOCAL):  # hidden, internal: ignored (do_lookup_x)
            return _NO
        if not self._named(name_off, name):
            return _NO
        v = self._versym_of(index)
        if v is None:
            return _MATCH  # an unversioned object satisfies any version (glibc accepts it)
        ndx = v & 0x7FFF
        if need is None:
            if ndx < 3:
                return _MATCH
            return _NO if v & _HIDDEN else _OTHER_VERSION
        # l_versions[ndx]: the object's version definitions but its base entry (dl-version.c
        # records no hash for VER_FLG_BASE), so index 0 and 1 have hash 0
        defs = self.definitions()  # fills _base
        defined = defs.get(ndx) if ndx not in self._base else None
        dhash, dname = defined if defined is not None else (0, None)
        if (dhash != need.hash or dname != need.name) and (need.hidden or dhash
                                                           or v & _HIDDEN):
            return _NO
        return _MATCH


_NO, _MATCH, _OTHER_VERSION = 0, 1, 2
