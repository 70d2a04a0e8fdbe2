"""Where the dynamic loader finds each library an extension module needs, and whether every
object it would map from the image can be mapped: ld.so(8), read from bytes, nothing loaded.

The search for a ``DT_NEEDED`` name of object *O* follows glibc's ``_dl_map_object``
(elf/dl-load.c), as ld.so(8) documents it:

1. a name already loaded matches (what the import chain loaded before the build,
   :mod:`moonpin.preflight.loader.ldproc`, and every library mapped earlier in this walk,
   which is breadth-first like the loader's);
2. when *O* has no ``DT_RUNPATH``: the ``DT_RPATH`` of *O*, then of the object that loaded
   *O*, and so on up the chain of loaders (``$ORIGIN`` is each one's own folder);
3. ``LD_LIBRARY_PATH``;
4. *O*'s own ``DT_RUNPATH`` (for its direct needs only: it is not inherited);
5. the loader cache (``/etc/ld.so.cache``) and the default folders.

An object with both tags has its ``DT_RPATH`` ignored (glibc elf/get-dynamic-info.h).
Objects of the image (mooncake's folder and the ``*.libs`` folders wheels vendor) are read
and judged as the loader would judge them: an ELF shared object of this machine's class,
byte order and ``e_machine``, as long as its program headers and section table say, whose
dynamic section and string table lie in a loaded segment and whose every ``DT_NEEDED``
entry reads whole. Libraries of the host (the driver, libibverbs) are only looked up.

For an image's root filesystem (``root``, :mod:`moonpin.preflight.access.chroot`) every
folder of that search is the image's (``DT_RPATH``/``DT_RUNPATH`` entries, its
``LD_LIBRARY_PATH``, its ``/etc/ld.so.cache`` and default folders), resolved under the root.

Only ``os`` at import: this runs at worker start (see :mod:`moonpin.preflight.run`).
"""

from __future__ import annotations

import os

from moonpin.kb.cache import facts_memo
from moonpin.preflight.access.chroot import host_paths
from moonpin.preflight.access.confined import NOWHERE, Confined
from moonpin.preflight.loader import ldhost
from moonpin.preflight.loader.ldhost import platform_token

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from moonpin.preflight.access.identity import Identity

__all__ = [
    "DF_1_NODEFLIB",
    "DF_1_NOOPEN",
    "DF_1_PIE",
    "E_MACHINE",
    "NO_DIRS",
    "PRELOAD_FILE",
    "Node",
    "Preload",
    "Trace",
    "candidates",
    "elf_problem",
    "env_ld_path",
    "env_preload",
    "expand",
    "hwcap_subdirs",
    "ld_cache_file",
    "ld_cache_paths",
    "ld_path_folders",
    "lib_token",
    "listing",
    "platform_token",
    "preload_entries",
    "preload_file",
    "read_dynamic",
    "read_dynamic_flags",
    "system_lib_dirs",
]

#: ``e_machine`` of the ELF objects a Python on this machine can load (psABI supplements).
E_MACHINE = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "ppc64le": 21,
             "s390x": 22, "riscv64": 243}
_DEFAULT_LIB_DIRS = ("/lib64", "/usr/lib64", "/lib", "/usr/lib")
_ET_NAMES = {0: "an object of no type (ET_NONE)", 1: "a relocatable object (ET_REL)",
             2: "an executable (ET_EXEC)", 4: "a core file (ET_CORE)"}
_PT_LOAD = 1
_ELFOSABI_SYSV, _ELFOSABI_GNU = 0, 3
#: glibc's LIBC_ABI_MAX (include/libc-abis.h: the GNU ABI versions it knows are below it;
#: 4 since glibc 2.35 added LIBC_ABI_ABSOLUTE)
_LIBC_ABI_MAX = 4
#: What :func:`read_dynamic` gives for a ``DT_RUNPATH`` whose string is empty (a NUL is
#: in no ELF string): it searches nothing, but its presence hides the ``DT_RPATH`` chain.
NO_DIRS = "\0"


class Trace:
    """What one load computed by :mod:`moonpin.preflight.loader.loadchain` depends on, handed
    to what reads for it: every file :func:`read_dynamic_flags` reads and every folder
    :func:`listing` lists (``paths``), and whether a search path of this machine used the
    working folder (``used_cwd``: an empty or relative entry; the answer then depends on
    it)."""

    __slots__ = ("paths", "used_cwd")

    def __init__(self, paths: set[str] | None = None) -> None:
        self.paths = paths if paths is not None else set()
        self.used_cwd = False


def elf_problem(data: bytes, facts: object, machine: str | None = None) -> str | None:
    """Why the dynamic loader would refuse to map this ELF object on ``machine`` (default:
    this one), or None. ``facts`` is :func:`moonpin.readers.elf.analysis.analyze`'s answer on
    ``data`` (the whole file)."""
    layout = getattr(facts, "layout", None)
    if layout is None:
        return "its ELF header cannot be read"
    machine = machine or os.uname().machine
    if layout.bits != 64:
        return f"a {layout.bits}-bit ELF object (ELFCLASS{layout.bits}); this Python is 64-bit"
    if not layout.little:
        return "a big-endian ELF object (ELFDATA2MSB); this machine is little-endian"
    # the rest of e_ident and e_version (open_verify, elf/dl-load.c)
    osabi, abiversion = layout.osabi, layout.abiversion
    if osabi not in (_ELFOSABI_SYSV, _ELFOSABI_GNU):
        return (f"of OS ABI {osabi} (EI_OSABI), neither System V nor GNU (ld.so: ELF file "
                "OS ABI invalid)")
    if abiversion >= (_LIBC_ABI_MAX if osabi == _ELFOSABI_GNU else 1):
        return (f"of ABI version {abiversion} (EI_ABIVERSION), past what this C library "
                "knows (ld.so: ELF file ABI version invalid)")
    if layout.ident_pad:
        return "nonzero padding in e_ident (EI_PAD; ld.so refuses it)"
    if layout.version != 1:
        return ("of an ELF version other than 1 (e_version; ld.so: ELF file version "
                "does not match current one)")
    want = E_MACHINE.get(machine)
    if want is not None and layout.e_machine != want:
        return (f"built for {layout.machine} (e_machine {layout.e_machine}); this machine "
                f"runs {machine}")
    if layout.elf_type != 3:
        return (f"{_ET_NAMES.get(layout.elf_type, f'of ELF type {layout.elf_type}')}, "
                "not a shared object (ET_DYN)")
    size = len(data)
    loads = [s for s in layout.segments if s.type == _PT_LOAD]
    if not loads:
        return "has no loadable segment (PT_LOAD)"
    page = _page_size()
    for s in loads:
        if (s.vaddr - s.offset) % page:
            return (f"a loadable segment at offset {s.offset:#x} whose address {s.vaddr:#x} "
                    "is not on the same place in a page (ld.so: ELF load command "
                    "address/offset not page-aligned)")
    short = max(loads, key=lambda s: s.end)
    if short.end > size:
        return (f"truncated: its segments reach byte {short.end:,}, the file has {size:,}")
    shend = layout.shoff + layout.shentsize * layout.shnum
    if layout.shoff and shend > size:
        return f"truncated: its section table ends at byte {shend:,}, the file has {size:,}"
    method = getattr(facts, "needed_method", "none")
    warnings = [w for w in getattr(facts, "warnings", ()) if "dynamic string" in w
                or "DT_STRTAB" in w or "PT_DYNAMIC" in w]
    if method != "dt_needed":
        why = "; ".join(warnings) or "no dynamic section"
        return f"its dynamic section cannot be read as the loader reads it ({why})"
    if warnings:
        return "a dynamic entry cannot be read whole (" + "; ".join(warnings) + ")"
    return None


def _page_size() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") or 4096
    except (ValueError, OSError):
        return 4096


def _read_dynamic_now(path: str, machine: str, within: Confined
                      ) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], str | None,
                                 int]:
    if within.outside(path):  # an image's link out of its root: not there
        raise FileNotFoundError(2, "outside the image root", path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        import stat

        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return (), (), (), "not a regular file", 0
        import mmap

        if st.st_size == 0:
            return (), (), (), "an empty file, not an ELF object (ld.so: file too short)", 0
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as m:
            from moonpin.readers.elf import analysis as elf

            if not elf.is_elf(bytes(m[:4])):  # ld.so's words (elf/dl-load.c, open_verify)
                why = "file too short" if st.st_size < 64 else "invalid ELF header"
                return (), (), (), f"not an ELF object (ld.so: {why})", 0
            try:
                facts = elf.analyze(m, len(m), ())  # type: ignore[arg-type]
            except elf.ElfError as e:
                return (), (), (), f"not a valid ELF object ({e})", 0
            problem = elf_problem(m, facts, machine)  # type: ignore[arg-type]
    finally:
        os.close(fd)
    needed, found = tuple(facts.needed), tuple(facts.search_path)
    flags = facts.flags_1 & (DF_1_NODEFLIB | DF_1_NOOPEN | DF_1_PIE)
    if facts.runpath_tag == "DT_RPATH":
        return needed, (), found, problem, flags
    if facts.runpath_tag == "DT_RUNPATH" and not found:
        found = (NO_DIRS,)  # an empty DT_RUNPATH: no folder, but DT_RPATH is still hidden
    return needed, found, (), problem, flags


def _shape(value: object) -> bool:
    """The shape of a remembered :func:`read_dynamic` answer (a damaged entry fails it)."""
    def strs(v: object) -> bool:
        return isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)

    return (isinstance(value, (list, tuple)) and len(value) == 5 and strs(value[0])
            and strs(value[1]) and strs(value[2])
            and (value[3] is None or isinstance(value[3], str)) and type(value[4]) is int)


def read_dynamic(path: str, machine: str | None = None, trace: Trace | None = None,
                 within: Confined = NOWHERE
                 ) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], str | None]:
    """``(DT_NEEDED, DT_RUNPATH, DT_RPATH, problem)`` of an ELF object (file-facts memo).
    The path entries are as ld.so keeps them: an empty one (``""``) is the working folder,
    and a ``DT_RUNPATH`` empty as a whole is ``(NO_DIRS,)`` (no folder, yet present: the
    object's needs do not search ``DT_RPATH``). ``problem`` says why the loader would
    refuse it (:func:`elf_problem`), or is None.
    Raises OSError when the file cannot be opened. ``trace``: where the read is recorded."""
    return read_dynamic_flags(path, machine, trace, within)[:4]  # type: ignore[return-value]


def read_dynamic_flags(path: str, machine: str | None = None, trace: Trace | None = None,
                       within: Confined = NOWHERE
                       ) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...],
                                  str | None, int]:
    """:func:`read_dynamic`, and the object's ``DT_FLAGS_1`` bits ld.so acts on when it
    maps it: ``DF_1_NODEFLIB`` (its own needs search neither the default folders nor the
    loader cache's entries in them), ``DF_1_NOOPEN`` (``dlopen`` refuses it and whatever
    needs it), ``DF_1_PIE`` (an executable: never loaded as a library)."""
    machine = machine or os.uname().machine
    if trace is not None:
        trace.paths.add(path)
    needed, runpath, rpath, problem, flags = facts_memo().get(
        f"dynamic-v4\0{machine}", path, lambda: _read_dynamic_now(path, machine, within),
        _shape, within=within.root)
    return tuple(needed), tuple(runpath), tuple(rpath), problem, int(flags)


#: ``DT_FLAGS_1`` bits (elf.h)
DF_1_NODEFLIB, DF_1_NOOPEN, DF_1_PIE = 0x800, 0x40, 0x08000000


def ld_cache_paths(path: str = "/etc/ld.so.cache", within: Confined = NOWHERE
                   ) -> dict[str, str]:
    """Each library file name the loader's cache knows -> the path it lists first for it
    in one of this machine's default folders (else the first it lists)."""
    known = _CACHE_PATHS.get((path, within.root))
    if known is not None:
        return known
    try:
        got = facts_memo().get("ld.so.cache-map", path, lambda: _cache_map(path, within),
                               within=within.root)
    except OSError:
        return {}
    out = ({k: v for k, v in got.items() if isinstance(k, str) and isinstance(v, str)}
           if isinstance(got, dict) else {})
    _CACHE_PATHS[path, within.root] = out
    return out


def _cache_map(path: str, within: Confined) -> dict[str, str]:
    ours = tuple(d.rstrip("/") + "/" for d in system_lib_dirs())
    out: dict[str, str] = {}
    for full in _scan_ld_cache(path, within):
        name = full.rpartition("/")[2]
        if name not in out or (full.startswith(ours) and not out[name].startswith(ours)):
            out[name] = full
    return out


_CACHE_PATHS: dict[tuple[str, str | None], dict[str, str]] = {}


def _scan_ld_cache(path: str, within: Confined) -> list[str]:
    """Each NUL-delimited string of the cache that is an absolute path whose file name
    holds ``.so`` (at most 512 bytes before it, 64 after), in the cache's order."""
    data = within.read(path, cap=64 << 20, what="loader cache")
    out: dict[str, None] = {}
    for chunk in data.split(b"\0")[1:-1]:  # delimited on both sides
        if chunk[:1] != b"/":
            continue
        start = chunk.rfind(b"/") + 1
        at = chunk.find(b".so", start)
        while at >= 0:
            if 2 <= at <= 513 and len(chunk) - at - 3 <= 64:
                out.setdefault(chunk.decode("utf-8", "replace"))
                break
            at = chunk.find(b".so", at + 1)
    return list(out)


def system_lib_dirs(root: str | None = None, machine: str | None = None) -> list[str]:
    """The loader's default folders. ``MOONPIN_CHECK_SYSTEM_LIBS`` (colon-separated) replaces
    them and the loader cache: the tests' hook, so a fake image is judged alike on any host.
    With ``root``, the image's own, as host folders under it (the hook does not apply)."""
    override = os.environ.get("MOONPIN_CHECK_SYSTEM_LIBS")
    if override is not None and root is None:
        return [d for d in override.split(":") if d]
    machine = machine or os.uname().machine
    dirs = [*_DEFAULT_LIB_DIRS, f"/lib/{machine}-linux-gnu", f"/usr/lib/{machine}-linux-gnu"]
    return dirs if root is None else host_paths(root, dirs)


def ld_cache_file(root: str | None = None) -> str:
    """The loader cache of the image (``/etc/ld.so.cache``, under ``root`` when given)."""
    if root is None:
        return "/etc/ld.so.cache"
    got = host_paths(root, ["/etc/ld.so.cache"])  # none: a loop, read as no cache
    return got[0] if got else os.path.join(root, "etc", "ld.so.cache")


_LISTINGS: dict[str, frozenset[str]] = {}


def listing(folder: str, trace: Trace | None = None) -> frozenset[str]:
    """The names in ``folder`` (empty when it cannot be listed), read once per process;
    ``trace``: where the listing is recorded."""
    if trace is not None:
        trace.paths.add(folder)
    got = _LISTINGS.get(folder)
    if got is None:
        try:
            got = frozenset(os.listdir(folder))
        except OSError:
            got = frozenset()
        _LISTINGS[folder] = got
    return got


class Node:
    __slots__ = ("loader", "nodeflib", "path", "rpath", "runpath")

    def __init__(self, path: str, loader: Node | None) -> None:
        self.path = path
        self.loader = loader
        self.runpath: tuple[str, ...] = ()
        self.rpath: tuple[str, ...] = ()
        #: ``DF_1_NODEFLIB``: its needs search no default folder (nor the cache's there)
        self.nodeflib = False


def expand(entries: Sequence[str], obj: str, root: str | None = None,
           trace: Trace | None = None) -> list[str]:
    """``DT_RPATH``/``DT_RUNPATH`` entries of the object at ``obj`` as the folders ld.so
    searches (elf/dl-load.c ``fillin_rpath``, ``_dl_dst_substitute``): the dynamic string
    tokens ``$ORIGIN`` (the object's folder as it was opened, links not resolved), ``$LIB``
    and ``$PLATFORM``, bare or in braces and ending where a name cannot go on, replaced;
    another ``$`` kept as it is. On this machine an empty or relative entry is the working
    folder or under it, as for ``LD_LIBRARY_PATH`` (:func:`env_ld_path`); for an image's
    root it is left out (the worker's working folder is not known). ``trace``: told when
    the working folder was used."""
    out = []
    for e in entries:
        if e == NO_DIRS:
            continue
        if "$" in e:
            e = _substitute(e, obj, root)
            if not e:  # a token with no value: the entry is dropped
                continue
        if e or root is None:
            out.append(e)
    if root is not None:
        return out
    if not all(e.startswith("/") for e in out) and trace is not None:
        trace.used_cwd = True
    return _here(out)


_TOKENS = ("ORIGIN", "LIB", "PLATFORM")


def _substitute(entry: str, obj: str, root: str | None) -> str:
    out: list[str] = []
    at = 0
    while True:
        dollar = entry.find("$", at)
        if dollar < 0:
            return "".join(out) + entry[at:]
        out.append(entry[at:dollar])
        rest = entry[dollar + 1:]
        for token in _TOKENS:
            if rest.startswith("{" + token + "}"):
                size = len(token) + 2
            elif rest.startswith(token) and not (rest[len(token):len(token) + 1].isalnum()
                                                  or rest[len(token):len(token) + 1] == "_"):
                size = len(token)
            else:
                continue
            value = (os.path.dirname(obj) if token == "ORIGIN" else
                     lib_token(root) if token == "LIB" else platform_token())
            if not value:
                return ""
            out.append(value)
            at = dollar + 1 + size
            break
        else:
            out.append("$")
            at = dollar + 1


_LD_SO = {"x86_64": "/lib64/ld-linux-x86-64.so.2", "aarch64": "/lib/ld-linux-aarch64.so.1",
          "ppc64le": "/lib64/ld64.so.2", "s390x": "/lib/ld64.so.1",
          "riscv64": "/lib/ld-linux-riscv64-lp64d.so.1"}


def lib_token(root: str | None = None) -> str:
    """What ``$LIB`` is to ld.so: its own library folder below ``/`` or ``/usr`` (glibc's
    ``slibdir``): ``lib/x86_64-linux-gnu`` on Debian and Ubuntu, ``lib64`` on RHEL and
    Fedora, read from where the loader's file really lies (in the image, with ``root``)."""
    machine = os.uname().machine
    interp = _LD_SO.get(machine, "/lib64/ld-linux-x86-64.so.2")
    if root is None:
        real = os.path.realpath(interp)
    else:
        got = host_paths(root, [interp])
        real = "/" + os.path.relpath(got[0], root) if got else interp
    folder = os.path.dirname(real)
    for top in ("/usr/", "/"):
        if folder.startswith(top) and folder != top.rstrip("/"):
            return folder[len(top):]
    return "lib64"


def hwcap_subdirs(root: str | None = None) -> list[str]:
    """:func:`moonpin.preflight.loader.ldhost.hwcap_subdirs` for the C library of this
    machine, or of the image at ``root``."""
    key = root or ""
    known = _SUBDIRS.get(key)
    if known is None:
        known = _SUBDIRS[key] = ldhost.hwcap_subdirs(_glibc_version(root))
    return known


_SUBDIRS: dict[str, list[str]] = {}


def _glibc_version(root: str | None) -> tuple[int, ...]:
    """The C library's version: this process's, or the image's ``libc.so.6``'s."""
    if root is None:
        return ldhost.glibc_version(None)
    return ldhost.glibc_version([os.path.join(d, "libc.so.6") for d in system_lib_dirs(root)])


def _variants(folder: str, root: str | None, trace: Trace | None = None) -> list[str]:
    """``folder``'s hwcap subfolders that are there, in ld.so's order, then itself."""
    names = listing(folder, trace)
    if names.isdisjoint(ldhost.HWCAP_TOPS):
        return [folder]
    return [*(os.path.join(folder, s) for s in hwcap_subdirs(root)
              if s.partition("/")[0] in names), folder]


def _in(folder: str, name: str, root: str | None = None,
        trace: Trace | None = None) -> str | None:
    # One listing per folder instead of a stat per (folder, name); a listed name is then
    # opened as ld.so's open_path opens it (:func:`_open_path`).
    if name in listing(folder, trace):
        cand = os.path.join(folder, name)
        if root is not None:  # its symbolic links followed inside the image
            got = host_paths(root, [cand])
            return got[0] if got and os.path.isfile(got[0]) else None
        try:
            os.stat(cand)
        except OSError as e:
            import errno

            return None if e.errno in (errno.ENOENT, errno.EACCES) else _STOP
        return cand
    return None


#: What :func:`_in` answers for a name the loader cannot open for another reason than
#: its absence: the list of folders being searched ends there
_STOP = "\0stop"


def env_ld_path(exe: str | None = None) -> list[str]:
    """This process's ``LD_LIBRARY_PATH`` folders (:func:`ld_path_folders`; ``exe``: the
    executable whose folder is ``$ORIGIN``, default this interpreter)."""
    value = os.environ.get("LD_LIBRARY_PATH")  # set but empty: no search path at all
    return ld_path_folders(value, exe) if value else []


def ld_path_folders(value: str, exe: str | None = None,
                    root: str | None = None) -> list[str]:
    """``LD_LIBRARY_PATH`` as the folders ld.so searches (glibc elf/dl-load.c
    ``_dl_init_paths``): entries separated by ``:`` or ``;``, the dynamic string tokens
    substituted as in a ``DT_RUNPATH`` of the executable (``$ORIGIN`` is the folder of its
    real file, ``/proc/self/exe``; ``exe`` default: this interpreter). An empty entry
    (``a::b``, a leading or trailing ``:``) is the working folder to ld.so, as a relative
    one is relative to it (``fillin_rpath`` keeps both; the file is then opened relative to
    the working folder): both are given here as absolute folders. With ``root`` (an
    image's), they are left out."""
    entries = value.replace(";", ":").split(":")
    if "$" not in value:
        return _here(entries) if root is None else [e for e in entries if e]
    if exe is None:
        import sys

        exe = os.path.realpath(sys.executable)
    out = []
    for e in entries:
        if "$" in e:
            e = _substitute(e, exe, root)
            if not e:
                continue
        if e or root is None:
            out.append(e)
    return _here(out) if root is None else out


def env_preload(exe: str | None = None, trace: Trace | None = None) -> list[str]:
    """This process's ``LD_PRELOAD`` entries (:func:`preload_entries`; ``exe``: the
    executable whose folder is ``$ORIGIN``, default this interpreter)."""
    return [p.path for p in preload_entries(os.environ.get("LD_PRELOAD") or "", exe, None,
                                             trace)]


class Preload:
    """One object ld.so preloads: the entry as the worker wrote it (``written``, before its
    tokens are substituted: what a message names and a fix removes) and what the loader
    opens for it (``path``: a name without ``/``, searched as the executable's own needs
    are, or this machine's path: the host's under the root, for an image). A plain class:
    ``typing`` is not loaded at a worker's start."""

    __slots__ = ("line", "path", "written")

    def __init__(self, written: str, path: str, line: int | None = None) -> None:
        self.written = written
        self.path = path
        self.line = line  # its line in :data:`PRELOAD_FILE`; None for ``LD_PRELOAD``'s

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Preload) and other.written == self.written
                and other.path == self.path)

    def __hash__(self) -> int:
        return hash((self.written, self.path))

    def __repr__(self) -> str:
        return f"Preload({self.written!r}, {self.path!r}, {self.line!r})"


def preload_entries(value: str, exe: str | None = None, root: str | None = None,
                    trace: Trace | None = None) -> list[Preload]:
    """``LD_PRELOAD``'s entries as ld.so reads them (elf/rtld.c ``handle_preload_list``):
    separated by spaces or colons only (a tab is part of a name), tokens substituted in a
    path as the executable's (``exe``, default this interpreter; an image's own path with
    ``root``).
    A name without ``/`` is kept as it is (searched as the executable's own needs are); a
    path is this machine's (a relative one under the working folder, ``trace`` told so),
    or with ``root`` an image's path given as the host path it names under the root (one
    that resolves to nothing there is left out: ld.so ignores it, and so is a relative
    one: the worker's working folder is not known). Each with the entry as written
    (:class:`Preload`); the one reading of the variable, for the loader and the messages."""
    out = [Preload(e, e) for e in value.replace(":", " ").split(" ") if e]
    if "$" in value:
        if exe is None:
            import sys

            exe = os.path.realpath(sys.executable)
        # only in a path: a name without "/" is searched as written (elf/dl-load.c
        # _dl_map_object tests for "/" before expand_dynamic_string_token)
        out = [Preload(p.written, _substitute(p.path, exe, root))
               if "$" in p.path and "/" in p.path else p for p in out]
        out = [p for p in out if p.path]
    if root is not None:
        mapped: list[Preload] = []
        for p in out:
            if "/" not in p.path:
                mapped.append(p)
            elif p.path.startswith("/"):
                mapped += [Preload(p.written, h) for h in host_paths(root, [p.path])
                           if os.path.lexists(h)]
        return mapped
    if all(p.path.startswith("/") or "/" not in p.path for p in out):
        return out
    if trace is not None:
        trace.used_cwd = True
    try:
        cwd = os.getcwd()
    except OSError:  # no working folder: a relative path opens nothing
        return [p for p in out if p.path.startswith("/") or "/" not in p.path]
    return [Preload(p.written, os.path.join(cwd, p.path))
            if "/" in p.path and not p.path.startswith("/") else p for p in out]


#: ld.so's own list of objects to preload in every process (elf/rtld.c ``preload_file``)
PRELOAD_FILE = "/etc/ld.so.preload"
_PRELOAD_CAP = 1 << 20


def preload_file(root: str | None = None, exe: str | None = None,
                 trace: Trace | None = None, reader: Identity | None = None) -> list[Preload]:
    """The entries of :data:`PRELOAD_FILE` (the image's with ``root``), preloaded after
    ``LD_PRELOAD``'s (elf/rtld.c ``dl_main``): names separated by white space or ``:``
    (``strsep`` on ``": \\t\\n"``), ``#`` starting a comment to the end of its line; each
    taken as :func:`preload_entries` takes one (``written``: as the file has it; ``line``:
    where, for the messages and fix lines). None there, or one the process cannot read:
    nothing. ld.so reads it only when ``access(R_OK)`` succeeds, which is asked as the
    process's real user (``reader``: who the worker runs as,
    :meth:`~moonpin.preflight.access.identity.Identity.may_read`; an image's ``User`` 65534
    skips a file only root may read, silently; None: whether this process can), and only
    a regular file is read. ``trace``: the file is recorded, found or not."""
    from moonpin.kb.files import read_regular

    where = host_paths(root, [PRELOAD_FILE]) if root is not None else [PRELOAD_FILE]
    if trace is not None:
        trace.paths.add(os.path.join(root, PRELOAD_FILE.lstrip("/")) if root is not None
                        else PRELOAD_FILE)
        trace.paths.update(where)
    if not where or (reader is not None and not reader.may_read(where[0], root)):
        return []
    try:
        data = read_regular(where[0], cap=_PRELOAD_CAP, what="ld.so's preload list",
                            within=root)
    except OSError:
        return []
    out: list[Preload] = []
    for n, line in enumerate(data.decode("utf-8", "surrogateescape").split("\n"), 1):
        names = line.partition("#")[0].replace("\t", " ")  # no name spans a line
        out += [Preload(p.written, p.path, n) for p in preload_entries(names, exe, root)]
    return out


def _here(entries: Sequence[str]) -> list[str]:
    """Search-path entries of this machine as the folders ld.so opens in: an empty one
    the working folder, a relative one under it (dropped when there is no working
    folder: the loader finds nothing there either)."""
    if all(e.startswith("/") for e in entries):
        return list(entries)
    try:
        cwd = os.getcwd()
    except OSError:
        return [e for e in entries if e.startswith("/")]
    return [e if e.startswith("/") else os.path.join(cwd, e) if e else cwd for e in entries]


def candidates(name: str, node: Node, ld_path: Sequence[str],
               cache: dict[str, str], system: Sequence[str],
               root: str | None = None, exe_rpath: Sequence[str] = (),
               trace: Trace | None = None) -> Iterator[str]:
    """Each file ld.so would try for ``name`` needed by ``node``, in its order
    (``_dl_map_object``); the loader skips one of another ELF class or machine and goes
    on (``open_verify``), so a caller may too. ``cache``: each name the loader cache holds
    -> its path there (:func:`ld_cache_paths`).
    ``exe_rpath``: the executable's ``DT_RPATH`` folders, searched after the chain of
    loaders when ``node`` has no ``DT_RUNPATH``. ``trace``: where what the search read
    is recorded."""
    if "$" in name:  # tokens in a DT_NEEDED are the needing object's (_dl_map_object)
        name = _substitute(name, node.path, root)
        if not name:
            return
    if "/" in name:  # a path: used as it is, no search
        if root is not None:
            got = host_paths(root, ["/" + name.lstrip("/")])  # relative: the working folder
            if got and os.path.isfile(got[0]):
                yield got[0]
        elif os.path.lexists(name):
            if not name.startswith("/") and trace is not None:
                trace.used_cwd = True
            yield name
        return
    lists: list[list[str]] = []  # each searched by one open_path call
    if not node.runpath:
        chain: Node | None = node
        while chain is not None:
            lists.append(host_paths(root, expand(chain.rpath, chain.path, root, trace)))
            chain = chain.loader
        lists.append(list(exe_rpath))
    lists.append(list(ld_path))
    lists.append(host_paths(root, expand(node.runpath, node.path, root, trace)))
    for dirs in lists:
        yield from _open_path(dirs, name, root, trace)
    listed = cache.get(name)
    if listed is not None and not (node.nodeflib and _in_system(listed, system)):
        found = host_paths(root, [listed])
        if found and os.path.isfile(found[0]):
            yield found[0]
    if node.nodeflib:
        return
    yield from _open_path(system, name, root, trace)  # also after a cache entry whose file is gone


def _open_path(dirs: Sequence[str], name: str, root: str | None,
               trace: Trace | None = None) -> Iterator[str]:
    """``name`` in each of ``dirs`` in turn, each first in its hwcap subfolders
    (:func:`hwcap_subdirs`) (elf/dl-load.c ``open_path``): a name that is
    not there (``ENOENT``, a dangling link) or not readable goes on to the next folder;
    any other error opening it (a loop of links) ends this list of folders."""
    for folder in dirs:
        for d in _variants(folder, root, trace):
            hit = _in(d, name, root, trace)
            if hit is _STOP:
                return
            if hit is not None:
                yield hit


def _in_system(path: str, system: Sequence[str]) -> bool:
    """Whether a loader-cache entry lies in a default folder (``_dl_is_system_dir``)."""
    folder = os.path.dirname(path).rstrip("/")
    return any(folder == d.rstrip("/") for d in system)
