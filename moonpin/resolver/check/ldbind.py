"""Whether every symbol a mooncake build leaves undefined is bound when the loader maps it,
as ld.so binds them: in the lookup scope of the object that needs it (the executable's
global scope, then the breadth-first ``DT_NEEDED`` closure of the object dlopen loaded),
honouring symbol versions, through each definer's hash table (:mod:`moonpin.readers.elfsym`).

What is checked: every undefined, non-weak symbol of the builds and of the image's own
objects in their closure (files under the target's import folders: ``engine.so``, the
``*.libs`` folders, torch's ``lib/``), and each version an object needs from a library
that defines versions (glibc elf/dl-version.c: ``version `GLIBCXX_3.4.32' not found``).
torch's libraries are bound in the scope ``import torch`` loads them in (``torch/_C``),
after torch's ``libtorch_global_deps.so``, which torch loads ``RTLD_GLOBAL``. Python's
extensions are loaded with ``RTLD_NOW`` (``sys.getdlopenflags()``), so every reference
binds at import, functions included.

Libraries the host provides (the NVIDIA driver) are named, never read: a C symbol left
unbound in a scope that holds one is taken as theirs (their API is C; a C++ name never is).
The answer is kept in the file-facts memo under the stamps of every object in the scopes.
For an image's root filesystem (``root``), the loader's search is the image's
(:func:`moonpin.resolver.check.ldso.resolve`), the interpreter is resolved inside it, and so are the
paths of its loader cache.
Only ``os`` at import: this runs at worker start.
"""

from __future__ import annotations

import os

from moonpin.kb.cache import facts_memo
from moonpin.resolver.check import ldso

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any

__all__ = ["HOST_PROVIDED", "Binding", "bind", "demangle", "host_provided"]

#: Libraries the NVIDIA container runtime mounts from the host (never in an image).
HOST_PROVIDED = ("libcuda.so", "libnvidia-", "libnvcuvid.so", "libcudadebugger.so")
_MAX_OBJECTS = 512
_PYTHON_API = (b"Py", b"_Py")


def host_provided(name: str) -> bool:
    return name.startswith(HOST_PROVIDED)


class Binding:
    """What :func:`bind` found. ``unbound``: (object, symbol, version or "", the objects
    searched) for each reference nothing binds; ``versions``: (object, version, library
    path, the newest version of that kind it defines) for each missing version; counts."""

    __slots__ = ("host", "objects", "refs", "skipped", "unbound", "versions")

    def __init__(self) -> None:
        self.unbound: list[tuple[str, str, str, tuple[str, ...]]] = []
        self.versions: list[tuple[str, str, str, str]] = []
        self.host: list[str] = []
        self.objects = 0
        self.refs = 0
        self.skipped: str | None = None

    def dump(self) -> tuple[object, ...]:
        return (tuple(self.unbound), tuple(self.versions), tuple(self.host), self.objects,
                self.refs, self.skipped)

    @classmethod
    def load(cls, value: object) -> Binding | None:
        b = cls()
        try:
            if not isinstance(value, (list, tuple)) or len(value) != 6:
                return None
            b.unbound = [(str(o), str(s), str(v), tuple(str(x) for x in w))
                         for o, s, v, w in value[0]]
            b.versions = [(str(o), str(v), str(p), str(n)) for o, v, p, n in value[1]]
            b.host = [str(h) for h in value[2]]
            objects, refs, skipped = value[3], value[4], value[5]
            if type(objects) is not int or type(refs) is not int or not (
                    skipped is None or isinstance(skipped, str)):
                return None
            b.objects, b.refs, b.skipped = objects, refs, skipped
        except (TypeError, ValueError):
            return None
        return b


class _Walk:
    """Objects found by the loader's search, breadth-first from each root, sharing what is
    already loaded (a ``DT_NEEDED`` name matches a loaded object's name)."""

    def __init__(self, cache: dict[str, str], machine: str, root: str | None = None,
                 ld_path: Sequence[str] | None = None) -> None:
        self.loaded: dict[str, str] = {}
        self.cache = cache
        self.machine = machine
        self.root = root
        self.ld_path = ldso.in_root(root, ldso.env_ld_path() if ld_path is None else ld_path)
        self.system = ldso.system_lib_dirs(root, machine)
        self.host: set[str] = set()
        self.missing: set[str] = set()
        #: what each object's dynamic section says, read once per process
        self._dynamic: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...],
                                       str | None]] = {}

    def closure(self, root: str) -> list[str]:
        order: list[str] = []
        seen: set[str] = set()
        queue = [ldso.Node(root, None)]
        self.loaded.setdefault(os.path.basename(root), root)
        while queue and len(seen) < _MAX_OBJECTS:
            node = queue.pop(0)
            key = os.path.normpath(node.path)
            if key in seen:
                continue
            seen.add(key)
            dyn = self._dynamic.get(key)
            if dyn is None:
                try:
                    dyn = self._dynamic[key] = ldso.read_dynamic(node.path, self.machine)
                except OSError:
                    continue
            needed, node.runpath, node.rpath, problem = dyn
            order.append(node.path)
            if problem is not None:
                continue
            for name in needed:
                if host_provided(name):
                    self.host.add(name)
                    continue
                where = self.loaded.get(name)
                if where is None:
                    where = ldso.search(name, node, self.ld_path, set(), self.system,
                                         self.root)
                    if where is None and name in self.cache:
                        where = self.cache[name]
                        if self.root is not None:  # the image's path, under its root
                            where = (ldso.in_root(self.root, [where]) or [""])[0] or None
                    if where is None:
                        self.missing.add(name)
                        continue
                    self.loaded[name] = where
                queue.append(ldso.Node(where, node))
        return order


def _stamp(paths: Sequence[str]) -> str:
    parts = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            parts.append(f"{p}\0-")
            continue
        parts.append(f"{p}\0{st.st_size}\0{st.st_mtime_ns}")
    return "\0\0".join(parts)


def _torch_root(paths: Sequence[str], suffixes: Sequence[str]) -> str | None:
    for sp in paths:
        for suffix in suffixes:
            cand = os.path.join(sp, "torch", "_C" + suffix)
            if os.path.isfile(cand):
                return cand
    return None


def bind(builds: Sequence[str], paths: Sequence[str], interpreter: str | None,
         suffixes: Sequence[str] = (".so",), machine: str | None = None,
         root: str | None = None, ld_path: Sequence[str] | None = None) -> Binding:
    """Bind what ``builds`` (and the image's objects in their closure) leave undefined,
    as importing them in ``interpreter`` would (module doc). ``root``: the image's root
    folder; ``ld_path``: its ``LD_LIBRARY_PATH`` (default: this process's)."""
    machine = machine or os.uname().machine
    if root is not None:
        cache = ldso.ld_cache_paths(ldso.ld_cache_file(root))
    else:
        cache = {} if "MOONPIN_CHECK_SYSTEM_LIBS" in os.environ else ldso.ld_cache_paths()
    walk = _Walk(cache, machine, root, ld_path)
    for d in ldso.image_lib_dirs(paths):  # torch's and the CUDA packages' libraries are
        for name in ldso.listing(d):      # found by name, as the library check finds them
            walk.loaded.setdefault(name, os.path.join(d, name))
    global_scope: list[str] = []
    if root is not None:
        mapped = ldso.in_root(root, [interpreter]) if interpreter else []
        exe = mapped[0] if mapped else None
    else:
        exe = os.path.realpath(interpreter) if interpreter else None
    if exe is not None and os.path.isfile(exe):
        global_scope += walk.closure(exe)
        walk.missing.clear()  # the interpreter runs: what it needs is there, found or not
    for sp in paths:
        deps = os.path.join(sp, "torch", "lib", "libtorch_global_deps.so")
        if os.path.isfile(deps):
            global_scope += [p for p in walk.closure(deps) if p not in global_scope]
            break
    roots: list[tuple[str, list[str]]] = []
    torch_c = _torch_root(paths, suffixes)
    if torch_c is not None:
        roots.append((torch_c, walk.closure(torch_c)))
    for b in builds:
        roots.append((b, walk.closure(b)))
    every = sorted({*global_scope, *(p for _, c in roots for p in c)})
    key = (f"bind-v1\0{machine}\0{exe}\0{','.join(sorted(walk.host))}\0"
           f"{','.join(sorted(walk.missing))}\0{_stamp(every)}")
    got = facts_memo().get(key, builds[0], lambda: _bind_now(
        global_scope, roots, paths, walk, exe is not None).dump(),
        lambda v: Binding.load(v) is not None)
    out = Binding.load(got)
    assert out is not None
    return out


def _owned(path: str, paths: Sequence[str], root: str | None = None) -> bool:
    """Whether ``path`` is under an import folder (an image's root itself, the working
    folder of ``python -m`` in ``WORKDIR /``, holds everything and is not counted)."""
    real = os.path.realpath(path)
    top = os.path.realpath(root) if root is not None else None
    return any(real.startswith(os.path.realpath(sp).rstrip("/") + "/") for sp in paths
               if top is None or os.path.realpath(sp) != top)


def _open(path: str) -> object | None:
    import mmap

    from moonpin.kb.files import outside
    from moonpin.readers.elfsym import SymbolError, SymbolTable

    if outside(path):  # an image's link out of its root: not there
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


def _bind_now(global_scope: list[str], roots: list[tuple[str, list[str]]],
              paths: Sequence[str], walk: _Walk, have_exe: bool) -> Binding:
    from moonpin.readers.elfsym import SymbolError, gnu_hash

    out = Binding()
    if walk.missing:
        out.skipped = ("a library the loader cannot find (" + ", ".join(sorted(walk.missing))
                       + "): symbols are bound once it is there")
        return out
    tables: dict[str, object | None] = {}

    def table(p: str) -> object | None:
        if p not in tables:
            t = tables[p] = _open(p)
            if t is not None:
                t.path = p  # type: ignore[attr-defined]
        return tables[p]

    hashes: dict[bytes, int] = {}
    checked: set[str] = set()
    host_names = sorted(walk.host)
    for root, local in roots:
        scope: list[str] = []
        for p in [*global_scope, *local]:
            if p not in scope:
                scope.append(p)
        by_name: dict[str, object] = {}
        for p in scope:
            t = table(p)
            if t is not None:
                by_name.setdefault(os.path.basename(p), t)
                try:
                    so = t.soname  # type: ignore[attr-defined]
                except SymbolError:
                    so = None
                if so:
                    by_name.setdefault(so, t)
        memo: dict[tuple[bytes, str], bool] = {}
        recent: list[object] = []  # the objects that bound the last references
        tables_in_scope = [t for t in (table(p) for p in scope) if t is not None]
        for obj in local:
            if obj in checked or not (obj == root or _owned(obj, paths, walk.root)):
                continue
            checked.add(obj)
            t = table(obj)
            if t is None:
                continue
            out.objects += 1
            try:
                _versions(obj, t, by_name, out)
                for ref in t.undefined():  # type: ignore[attr-defined]
                    if ref.weak:
                        continue
                    out.refs += 1
                    vkey = ref.need.name if ref.need is not None else ""
                    hit = memo.get((ref.name, vkey))
                    if hit is None:
                        h = hashes.get(ref.name)
                        if h is None:
                            h = hashes[ref.name] = gnu_hash(ref.name)
                        # Whether some object of the scope binds it does not depend on
                        # the order they are asked in (check_match is per object): the
                        # library a version names, then the last definers, go first.
                        hit = False
                        named = by_name.get(ref.need.file) if ref.need is not None else None
                        for d in (*((named,) if named is not None else ()), *recent,
                                  *tables_in_scope):
                            if d.defines(ref.name, h, None,  # type: ignore[attr-defined]
                                         ref.need):
                                hit = True
                                if d in recent:
                                    recent.remove(d)
                                recent.insert(0, d)
                                del recent[4:]
                                break
                        memo[(ref.name, vkey)] = hit
                    if hit:
                        continue
                    file = ref.need.file if ref.need is not None else ""
                    if host_provided(file) or (host_names and not ref.name.startswith(b"_Z")
                                               and not file):
                        if ref.name.decode("utf-8", "replace") not in out.host:
                            out.host.append(ref.name.decode("utf-8", "replace"))
                        continue
                    if not have_exe and ref.name.startswith(_PYTHON_API):
                        continue  # the interpreter is unknown: its API cannot be looked up
                    out.unbound.append((obj, ref.name.decode("utf-8", "replace"), vkey,
                                        tuple(os.path.basename(p) for p in scope)))
            except SymbolError as e:
                out.unbound.append((obj, f"<its symbol table cannot be read: {e}>", "", ()))
            _drop_pages(tables.values())
    return out


def _drop_pages(tables: Iterable[object | None]) -> None:
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


def _versions(obj: str, t: object, by_name: dict[str, object], out: Binding) -> None:
    """Each version ``obj`` needs from a library that defines versions (dl-version.c)."""
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
        if entry not in out.versions:
            out.versions.append(entry)


def _version_key(name: str) -> tuple[int, ...]:
    tail = name.rstrip("0123456789.")
    return tuple(int(x) for x in name[len(tail):].split(".") if x.isdigit())


_DEMANGLE: Any = None


def demangle(name: str) -> str:
    """The C++ name a mangled symbol stands for (libstdc++'s ``__cxa_demangle``), or the
    name itself when it is not mangled or cannot be demangled here."""
    global _DEMANGLE
    if not name.startswith("_Z") or len(name) > 4096:
        return name
    try:
        import ctypes
        import ctypes.util

        if _DEMANGLE is None:
            lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
            fn = lib.__cxa_demangle
            fn.restype = ctypes.c_void_p
            fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.POINTER(ctypes.c_int)]
            _DEMANGLE = (fn, ctypes.CDLL(None).free)
        fn, free = _DEMANGLE
        status = ctypes.c_int(0)
        ptr = fn(name.encode(), None, None, ctypes.byref(status))
        if status.value != 0 or not ptr:
            return name
        try:
            return ctypes.string_at(ptr).decode("utf-8", "replace")
        finally:
            free(ctypes.c_void_p(ptr))
    except (OSError, AttributeError, ValueError):
        return name
