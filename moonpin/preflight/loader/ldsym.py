"""Symbol binding as ld.so does it, object by object: the version needs of an object
against the libraries it names (glibc elf/dl-version.c: ``version `GLIBCXX_3.4.32' not
found``), and each undefined, non-weak symbol looked up in a scope, in order, through each
definer's hash table (elf/dl-lookup.c, :mod:`moonpin.readers.elf.symbols`).

Libraries the host provides (the NVIDIA driver) are named, never read: a C symbol of the
driver's API (``cu*``, ``nvml*``…) left unbound in a scope that needs one is taken as theirs
(their API is C; a C++ name, or a C name of no driver API, never is).
Only ``os`` at import: this runs at worker start.
"""

from __future__ import annotations

import os

from moonpin.preflight.access.confined import NOWHERE, Confined

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = ["HOST_PROVIDED", "Bound", "Lookup", "check_versions", "drop_pages",
           "host_provided", "open_table"]

#: Libraries the NVIDIA container runtime mounts from the host (never in an image).
HOST_PROVIDED = ("libcuda.so", "libnvidia-", "libnvcuvid.so", "libcudadebugger.so")
#: How the C symbols those libraries export begin (``cuInit``, ``cuvidCreateDecoder``,
#: ``cudbgGetAPI``, ``nvmlInit_v2``, ``NvEncodeAPICreateInstance``, ``nvvmCompileProgram``):
#: a symbol named otherwise left unbound is no driver's, and ld.so fails on it.
_DRIVER_API = (b"cu", b"nv", b"Nv", b"NV", b"__cu", b"__nv", b"_nv")
_PYTHON_API = (b"Py", b"_Py")


def host_provided(name: str) -> bool:
    return name.startswith(HOST_PROVIDED)


def open_table(path: str, within: Confined = NOWHERE) -> object | None:
    """The dynamic symbols of the object at ``path`` (a read-only mapping), or None when
    it is not a regular ELF file whose tables can be read (or its links take it out of the
    image root ``within``)."""
    import mmap

    from moonpin.readers.elf.symbols import SymbolError, SymbolTable

    if within.outside(path):  # an image's link out of its root: not there
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        import stat

        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            return None
        m = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    try:
        return SymbolTable(m)  # type: ignore[arg-type]
    except SymbolError:
        return None


class Bound:
    """What binding one object's references found: how many were bound, the symbols left
    to the host's driver, and (object, symbol, version, the objects searched) for each
    reference nothing binds."""

    __slots__ = ("host", "refs", "unbound")

    def __init__(self) -> None:
        self.refs = 0
        self.host: list[str] = []
        self.unbound: list[tuple[str, str, str, tuple[str, ...]]] = []


class Lookup:
    """Lookups in one scope (its objects' symbol tables, in order). Whether some object of
    the scope binds a name does not depend on the order they are asked in (``check_match``
    is per object): the library a version names, then the last definers, go first."""

    def __init__(self, tables: Sequence[object],
                 shared: dict[tuple[bytes, str], object] | None = None,
                 hashes: dict[bytes, int] | None = None) -> None:
        self.tables = list(tables)
        self.in_scope = set(map(id, self.tables))
        #: (name, version) -> an object that binds it, kept across the scopes of one
        #: process (a scope holding that object binds the reference too)
        self.shared = shared if shared is not None else {}
        self.by_name: dict[str, object] = {}
        for t in reversed(self.tables):
            path = getattr(t, "path", "")
            self.by_name[os.path.basename(path)] = t
            try:
                so = t.soname  # type: ignore[attr-defined]
            except ValueError:
                so = None
            if so:
                self.by_name[so] = t
        self.memo: dict[tuple[bytes, str], bool] = {}
        self.recent: list[object] = []
        self.hashes = hashes if hashes is not None else {}
        #: what ld.so says when a lookup makes it abort the process (None: none did)
        self.fatal: str | None = None

    def binds(self, name: bytes, need: object | None) -> bool:
        from moonpin.readers.elf.symbols import gnu_hash

        vkey = need.name if need is not None else ""  # type: ignore[attr-defined]
        hit = self.memo.get((name, vkey))
        if hit is not None:
            return hit
        h = self.hashes.get(name)
        if h is None:
            h = self.hashes[name] = gnu_hash(name)
        named = self.by_name.get(need.file) if need is not None else None  # type: ignore[attr-defined]
        if (named is not None and not named.versioned  # type: ignore[attr-defined]
                and named.defines(name, h, None, None)):  # type: ignore[attr-defined]
            # A version needed of a library that has none, and it defines the name: glibc
            # asserts (elf/dl-lookup.c check_match: "Inconsistency detected by ld.so")
            # when its search reaches that library, and the process dies.
            if self._reaches(named, name, h, need):
                self.memo[(name, vkey)] = False
                self.fatal = self.fatal or (
                    "Inconsistency detected by ld.so: dl-lookup.c: check_match: Assertion "
                    "`version->filename == NULL || ! _dl_name_match_p (version->filename, "
                    f"map)' failed! ({name.decode('utf-8', 'replace')} needs version "
                    f"{vkey} of {getattr(need, 'file', '')}, which defines no versions)")
                return False
        key = (name, vkey)
        known = self.shared.get(key)
        if known is not None and id(known) in self.in_scope:
            self.memo[key] = True
            return True
        recent = self.recent
        found = named if named is not None and named.defines(  # type: ignore[attr-defined]
            name, h, None, need) else None
        if found is None:
            for d in recent:
                if d.defines(name, h, None, need):  # type: ignore[attr-defined]
                    found = d
                    break
            else:
                for d in self.tables:
                    if d.defines(name, h, None, need):  # type: ignore[attr-defined]
                        found = d
                        break
        if found is None:
            self.memo[key] = False
            return False
        self.shared[key] = found
        if not recent or recent[0] is not found:
            if found in recent:
                recent.remove(found)
            recent.insert(0, found)
            del recent[4:]
        self.memo[key] = True
        return True

    def _reaches(self, lib: object, name: bytes, h: int, need: object) -> bool:
        """Whether the scope's search, in order, gets to ``lib`` before an object that
        binds the reference."""
        for d in self.tables:
            if d is lib:
                return True
            if d.defines(name, h, None, need):  # type: ignore[attr-defined]
                return False
        return False

    def bind(self, obj: str, t: object, host: bool, have_exe: bool,
             searched: tuple[str, ...]) -> Bound:
        """Each undefined, non-weak symbol of ``obj`` (its table ``t``) looked up here.
        ``host``: the scope needs a driver library; ``have_exe``: the interpreter is in the
        scope (else the Python API cannot be looked up and is not judged)."""
        from moonpin.readers.elf.symbols import SymbolError

        out = Bound()
        memo, binds = self.memo, self.binds
        refs = 0
        try:
            for ref in t.undefined():  # type: ignore[attr-defined]
                if ref.weak:  # looked up all the same: only ld.so aborting matters
                    if ref.need is not None and self.fatal is None:
                        binds(ref.name, ref.need)
                    continue
                refs += 1
                need = ref.need
                if memo.get((ref.name, need.name if need is not None else "")) or binds(
                        ref.name, need):
                    continue
                file = ref.need.file if ref.need is not None else ""
                if host_provided(file) or (host and ref.name.startswith(_DRIVER_API)
                                           and not file):
                    name = ref.name.decode("utf-8", "replace")
                    if name not in out.host:
                        out.host.append(name)
                    continue
                if not have_exe and ref.name.startswith(_PYTHON_API):
                    continue  # the interpreter is unknown: its API cannot be looked up
                out.unbound.append((obj, ref.name.decode("utf-8", "replace"),
                                    ref.need.name if ref.need is not None else "", searched))
        except SymbolError as e:
            out.unbound.append((obj, f"<its symbol table cannot be read: {e}>", "", ()))
        out.refs = refs
        return out


def drop_pages(tables: Iterable[object | None]) -> None:
    """Give back the pages of the mapped objects read so far (``MADV_DONTNEED``: a
    read-only file mapping is refilled from the page cache when touched again). The
    lookups of one object touch a few pages of each definer's hash and symbol tables;
    summed over the scopes of a real image that was ~35 MiB of the check's peak memory."""
    import mmap

    advice = getattr(mmap, "MADV_DONTNEED", None)
    for t in tables:
        m = getattr(t, "data", None)
        if advice is not None and isinstance(m, mmap.mmap):
            try:
                m.madvise(advice)
            except (OSError, ValueError):
                pass  # only memory is at stake


def check_versions(obj: str, t: object, by_name: dict[str, object],
                   versions: list[tuple[str, str, str, str]]) -> None:
    """Each version ``obj`` needs from a library that defines versions (dl-version.c),
    as (object, version, library path, the newest version of that kind it defines)."""
    needs = t.needs()  # type: ignore[attr-defined]
    for need in needs.values():
        if need.weak or host_provided(need.file):
            continue
        lib = by_name.get(need.file)
        if lib is None:
            continue
        defined = lib.definitions()  # type: ignore[attr-defined]
        if not defined:
            continue  # glibc only warns: "no version information available"
        if any(name == need.name for _, name in defined.values()):
            continue
        kind = need.name.rstrip("0123456789.")
        same = [n for _, n in defined.values() if n.rstrip("0123456789.") == kind]
        newest = max(same, key=_version_key) if same else ""
        where = getattr(lib, "path", need.file)
        entry = (obj, need.name, str(where), newest)
        if entry not in versions:
            versions.append(entry)


def _version_key(name: str) -> tuple[int, ...]:
    tail = name.rstrip("0123456789.")
    return tuple(int(x) for x in name[len(tail):].split(".") if x.isdigit())
