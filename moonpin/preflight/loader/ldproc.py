"""One process as the dynamic loader keeps it, simulated from the files: the objects mapped
(by the names they were loaded under, their ``DT_SONAME`` and their file), the global
lookup scope, and what one more ``dlopen`` does (glibc elf/dl-open.c):

1. map the object and, breadth-first, its ``DT_NEEDED`` closure (elf/dl-deps.c); a name
   matches an object already mapped by a name it was loaded under or its ``DT_SONAME``
   (``_dl_map_object``), else it is searched (:func:`moonpin.preflight.loader.ldso.candidates`;
   an object of another ELF class or machine is skipped and the search goes on, as
   ``open_verify`` does); a file already mapped under another name is that object;
2. check the version needs of every new object (elf/dl-version.c);
3. with ``RTLD_NOW`` (Python's extension imports and ``ctypes`` always), bind every
   undefined, non-weak symbol of every new object in its scope: the global scope, then
   the new root's breadth-first closure (elf/dl-lookup.c, through
   :mod:`moonpin.readers.elf.symbols`);
4. on success keep the new objects (with ``RTLD_GLOBAL``, the closure joins the global
   scope); on a failure keep nothing, and say what ``dlerror()`` would say first.

Only objects under the target's import folders (``owned``) are judged and bound: the
host's own libraries (libc, libstdc++, libibverbs) are looked up and their needs followed,
but taken as consistent, unless one maps a library of the image's or one found on
``LD_LIBRARY_PATH`` (a copy shadowing the one it was built against): then it is judged.
Libraries the host's driver provides
(:func:`moonpin.preflight.loader.ldsym.host_provided`) are looked for, never read; a C
symbol left unbound in a scope that needs one is taken as theirs. Nothing is loaded or
run. Only ``os`` at import: this runs at worker start.
"""

from __future__ import annotations

import os

from moonpin.preflight.access.chroot import host_paths
from moonpin.preflight.access.confined import Confined
from moonpin.preflight.loader import ldso, ldsym
from moonpin.preflight.loader.findings import Findings

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["RTLD_DEEPBIND", "RTLD_GLOBAL", "RTLD_LAZY", "RTLD_NOW", "Obj", "Outcome",
           "Process"]

RTLD_LAZY, RTLD_NOW, RTLD_GLOBAL = 1, 2, 0x100  # <dlfcn.h> (glibc, every Linux ABI)
#: <bits/dlfcn.h> (glibc, every Linux ABI): the new objects look symbols up in their own
#: closure before the global scope (elf/dl-open.c dl_open_worker_begin: with
#: ``__RTLD_DEEPBIND`` the object's own ``l_searchlist`` is ``l_scope[0]``)
RTLD_DEEPBIND = 0x8
_MAX_OBJECTS = 512


class Obj(ldso.Node):
    """A mapped object (``struct link_map``): its path, the object that first needed it
    (``l_loader``, whose ``DT_RPATH`` its own needs inherit) and what its dynamic section
    says. ``deps``: the objects its ``DT_NEEDED`` entries found (None: not walked yet)."""

    __slots__ = ("deps", "host_needs", "needed", "problem", "soname")

    def __init__(self, path: str, loader: ldso.Node | None) -> None:
        super().__init__(path, loader)
        self.needed: tuple[str, ...] = ()
        self.problem: str | None = None
        self.soname: str | None = None
        self.deps: list[Obj] | None = None
        self.host_needs = False


class Outcome(Findings):
    """What one ``dlopen`` did. ``error``: what ``dlerror()`` says (None: loaded); what it
    found wrong on the way (:class:`Findings`) is kept too, for the report."""

    __slots__ = ("error", "fatal", "searchlist", "why")

    def __init__(self) -> None:
        super().__init__()
        self.error: str | None = None
        #: the loaded object's breadth-first closure (``l_searchlist``)
        self.searchlist: list[Obj] = []
        #: what ``error`` is about: (kind, subject, detail): ``missing`` (a library name,
        #: the object needing it), ``bad`` (a path, why), ``version`` (the library's path,
        #: "version\0object\0newest it defines"), ``symbol`` (the object, the symbol)
        self.why: tuple[str, str, str] = ("", "", "")
        #: ld.so aborted the process (an assertion): nothing catches it
        self.fatal = False

    def first(self, message: str, kind: str, subject: str, detail: str = "") -> None:
        if self.error is None:
            self.error = message
            self.why = (kind, subject, detail)


def _file_id(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class Process:
    """The loader's state in a process of ``machine`` (module doc). ``owned(path)``: whether
    an object's symbols are bound; ``root``: an image's root folder (the search is the
    image's); ``ld_path``: ``LD_LIBRARY_PATH`` as host folders; ``cache``: the loader
    cache, each name's path; ``trace``: where every file and folder it reads is recorded
    (:class:`moonpin.preflight.loader.ldso.Trace`)."""

    def __init__(self, *, machine: str, owned: Callable[[str], bool],
                 root: str | None = None, ld_path: Sequence[str] = (),
                 cache: dict[str, str] | None = None,
                 trace: ldso.Trace | None = None) -> None:
        self.machine = machine
        self.trace = trace
        self.owned = owned
        self.root = root
        #: its reads confined to the image root (:class:`Confined`, made once per process)
        self.within = Confined(root)
        self.ld_path = list(ld_path)
        self.cache = cache or {}
        self.system = ldso.system_lib_dirs(root, machine)
        self.objects: list[Obj] = []
        self.names: dict[str, Obj] = {}
        self.ids: dict[tuple[int, int], Obj] = {}
        self.global_scope: list[Obj] = []
        self.exe_rpath: list[str] = []
        self.have_exe = False
        self.tables: dict[str, object | None] = {}
        #: driver libraries (:func:`~moonpin.preflight.loader.ldsym.host_provided`) needed
        #: and not found here -> the object needing one
        self.host_missing: dict[str, str] = {}
        self._definers: dict[tuple[bytes, str], object] = {}  # ldsym.Lookup.shared
        self._hashes: dict[bytes, int] = {}
        self._ld_dirs: set[str] | None = None
        #: mapping for a dlopen (not the process's start): DF_1_NOOPEN objects are refused
        self._opening = False
        #: the tables this process shares with the one it was forked from (not its to close)
        self._borrowed: frozenset[str] = frozenset()
        #: why ld.so stops the process before the interpreter runs (:meth:`start`; None: it runs)
        self.start_error: str | None = None

    def fork(self, owned: Callable[[str], bool], trace: ldso.Trace | None) -> Process:
        """A copy of this process to ``dlopen`` more into, this one left as it is (what the
        check's extensions each load into: the process ``import torch`` built, once). The
        objects are copied, their dependencies and loaders among the copies; the symbol
        tables read so far are shared (read only; closed by this process, not the copy),
        and so is each name's hash. ``owned`` and ``trace``: the copy's own (module doc)."""
        new = Process.__new__(Process)
        copies: dict[int, Obj] = {}
        for o in self.objects:
            c = copies[id(o)] = Obj.__new__(Obj)
            for slot in (*ldso.Node.__slots__, *Obj.__slots__):
                setattr(c, slot, getattr(o, slot))

        def same(o: Obj) -> Obj:
            return copies.get(id(o), o)

        for c in copies.values():
            if c.deps is not None:
                c.deps = [same(d) for d in c.deps]
            if isinstance(c.loader, Obj):
                c.loader = same(c.loader)
        new.machine, new.root, new.within = self.machine, self.root, self.within
        new.owned, new.trace = owned, trace
        new.ld_path, new.cache, new.system = list(self.ld_path), self.cache, self.system
        new.objects = [same(o) for o in self.objects]
        new.names = {k: same(o) for k, o in self.names.items()}
        new.ids = {k: same(o) for k, o in self.ids.items()}
        new.global_scope = [same(o) for o in self.global_scope]
        new.exe_rpath, new.have_exe = list(self.exe_rpath), self.have_exe
        new.tables = dict(self.tables)
        new.host_missing = dict(self.host_missing)
        new._definers = dict(self._definers)
        new._hashes = self._hashes
        new._ld_dirs = None
        new._opening = False
        new._borrowed = frozenset(self.tables)
        new.start_error = self.start_error
        return new

    # ------------------------------------------------------------------ the executable
    def start(self, exe: str, preload: Sequence[str] = ()) -> None:
        """Map the interpreter and its closure as the kernel and ld.so did at its start: its
        global scope. What it needs is there (it runs), found or not. ``preload``: the
        ``LD_PRELOAD`` entries, mapped after the interpreter and before what it needs (a
        path as it is, a name searched as the interpreter's own needs are); one that cannot
        be loaded is ignored, as ld.so ignores it."""
        main = self._map(exe, None, exe=True)
        if main.problem is not None:
            return
        self.have_exe = True
        if not main.runpath:
            self.exe_rpath = host_paths(self.root, ldso.expand(main.rpath, exe, self.root,
                                                                 self.trace))
        out = Outcome()
        new: list[Obj] = [main]
        names: dict[str, Obj] = {}
        ids: dict[tuple[int, int], Obj] = {}
        key = _file_id(exe)
        if key is not None:
            ids[key] = main
        self._soname(main, names)
        pre: list[Obj] = []
        for entry in preload:
            if "/" in entry:
                o = self._new(entry, None, new, ids, judged=True)
                if o.problem is not None:
                    new.remove(o)
                    continue
                self._soname(o, names)
                names.setdefault(entry, o)
            else:
                found = self._find(entry, main, new, names, ids, Outcome())
                if found is None or found.problem is not None:
                    continue
                o = found
            if o not in pre:
                pre.append(o)
        scope = self._closure(main, new, names, ids, out, pre)
        self._commit(new, names, ids)
        self.global_scope = scope
        if pre:
            self.start_error = self._preload_failure(main, scope)

    def _preload_failure(self, main: Obj, scope: Sequence[Obj]) -> str | None:
        """What ld.so says when a need of a preloaded object (or of its own needs) is not
        found: the preloaded objects' needs are mapped with the executable's
        (elf/rtld.c ``dl_main``: ``_dl_map_object_deps`` of the main map with the preloads),
        where one not found is fatal ("error while loading shared libraries"; the process
        ends before the interpreter runs), unlike a preloaded object itself that cannot be
        loaded, which is ignored. The executable's own needs are taken as met (it runs)."""
        mains: set[int] = set()
        stack = [main]
        while stack:
            o = stack.pop()
            if id(o) not in mains:
                mains.add(id(o))
                stack += o.deps or []
        for o in scope:
            if id(o) in mains or o.problem is not None:
                continue
            for name in o.needed:
                if not ldsym.host_provided(name) and name not in self.names:
                    return (f"error while loading shared libraries: {name}: cannot open "
                            f"shared object file: No such file or directory (needed by "
                            f"{o.path}, preloaded)")
        return None

    # ------------------------------------------------------------------ dlopen
    def loaded(self, path: str) -> bool:
        """Whether the file at ``path`` is mapped."""
        key = _file_id(path)
        return path in self.names or (key is not None and key in self.ids)

    def dlopen(self, path: str, mode: int = RTLD_NOW) -> Outcome:
        """``dlopen(path, mode)`` (module doc)."""
        self._opening = True
        out = Outcome()
        new: list[Obj] = []
        names: dict[str, Obj] = {}
        ids: dict[tuple[int, int], Obj] = {}
        root = self._root(path, new, names, ids, out)
        if root is None:
            return out
        searchlist = out.searchlist = self._closure(root, new, names, ids, out)
        out.objects = len(searchlist)
        if out.error is None:
            self._versions(searchlist, new, names, out)
        if out.error is None and mode & RTLD_NOW:
            self._relocate(searchlist, new, out, deep=bool(mode & RTLD_DEEPBIND))
        elif out.error is None:  # RTLD_LAZY: functions bind at their first call
            out.unbound.clear()
        if out.error is not None:
            return out  # nothing of this dlopen stays mapped
        self._commit(new, names, ids)
        if mode & RTLD_GLOBAL:
            self.global_scope += [o for o in searchlist if o not in self.global_scope]
        return out

    def _root(self, path: str, new: list[Obj], names: dict[str, Obj],
              ids: dict[tuple[int, int], Obj], out: Outcome) -> Obj | None:
        hit = self.names.get(path)
        if hit is not None:
            return hit
        if "/" not in path:  # a bare name: searched as a DT_NEEDED of no object is
            found = next(iter(ldso.candidates(path, ldso.Node("", None), self.ld_path,
                                              self.cache, self.system, self.root,
                                              trace=self.trace)), None)
            if found is None:
                out.first(f"{path}: cannot open shared object file: No such file or directory",
                          "missing", path)
                out.missing[path] = path
                return None
            hit = self._known(found, path, ids, names)
            if hit is not None:
                return hit
            obj = self._new(found, None, new, ids)
            names[path] = obj
            self._soname(obj, names)
        else:
            hit = self._known(path, path, ids, names)
            if hit is not None:
                return hit
            if not os.path.exists(path):
                out.first(f"{path}: cannot open shared object file: No such file or directory",
                          "bad", path, "no such file")
                out.bad[path] = "cannot be read (No such file or directory)"
                return None
            obj = self._new(path, None, new, ids, judged=True)
            names[path] = obj
            self._soname(obj, names)
        if obj.problem is not None:
            out.first(f"{obj.path}: {obj.problem}", "bad", obj.path, obj.problem)
            out.bad[obj.path] = obj.problem
            out.objects = 1
            return None
        return obj

    def _known(self, path: str, name: str, ids: dict[tuple[int, int], Obj],
               names: dict[str, Obj]) -> Obj | None:
        """The object mapped from the file at ``path`` (under another name), now also
        matching ``name``; None when it is not mapped."""
        key = _file_id(path)
        hit = (ids.get(key) or self.ids.get(key)) if key is not None else None
        if hit is not None:
            names.setdefault(name, hit)
        return hit

    def _map(self, path: str, loader: ldso.Node | None, judged: bool = False,
             exe: bool = False) -> Obj:
        """``path`` read as the loader maps it, with why the loader would refuse it: a file
        of the host's as well as the image's (a file that is no ELF shared object of this
        machine fails ``dlopen`` wherever it lies; ``judged`` is kept for the callers that
        name a path). ``exe``: the executable itself (a PIE, not refused)."""
        obj = Obj(path, loader)
        try:
            obj.needed, obj.runpath, obj.rpath, obj.problem, flags = (
                ldso.read_dynamic_flags(path, self.machine, self.trace, self.within))
            obj.nodeflib = bool(flags & ldso.DF_1_NODEFLIB)
            if obj.problem is None and flags & ldso.DF_1_PIE and not exe:
                obj.problem = ("a position-independent executable (DF_1_PIE), not a "
                               "library (ld.so: cannot dynamically load position-independent "
                               "executable)")
            elif obj.problem is None and flags & ldso.DF_1_NOOPEN and self._opening:
                obj.problem = ("marked not to be opened by dlopen (DF_1_NOOPEN; ld.so: shared "
                               "object cannot be dlopen()ed)")
        except OSError as e:
            obj.problem = f"cannot open shared object file: {e.strerror or e}"
        if obj.problem is None:
            table = self.table(path)
            try:
                obj.soname = table.soname if table is not None else None  # type: ignore[attr-defined]
            except ValueError:
                obj.soname = None
        return obj

    def _new(self, path: str, loader: ldso.Node | None, new: list[Obj],
             ids: dict[tuple[int, int], Obj], judged: bool = False) -> Obj:
        obj = self._map(path, loader, judged)
        new.append(obj)
        key = _file_id(path)
        if key is not None:
            ids[key] = obj
        return obj

    def _soname(self, o: Obj, names: dict[str, Obj]) -> None:
        """A mapped object also answers to its ``DT_SONAME`` (``_dl_map_object``)."""
        if o.soname and o.problem is None and o.soname not in self.names:
            names.setdefault(o.soname, o)

    def _find(self, name: str, node: Obj, new: list[Obj], names: dict[str, Obj],
              ids: dict[tuple[int, int], Obj], out: Outcome) -> Obj | None:
        """The object ``name`` (a ``DT_NEEDED`` of ``node``) matches or maps; None when
        it is not found or cannot be mapped (said in ``out``)."""
        hit = names.get(name) or self.names.get(name)
        if hit is not None:
            return hit
        other_class = None
        for where in ldso.candidates(name, node, self.ld_path, self.cache, self.system,
                                     self.root, self.exe_rpath, self.trace):
            key = _file_id(where)
            known = (ids.get(key) or self.ids.get(key)) if key is not None else None
            if known is not None:
                names[name] = known
                return known
            obj = self._map(where, node)
            if obj.problem is not None and obj.problem.startswith(_OTHER_CLASS):
                other_class = obj.problem  # skipped: the search goes on (open_verify)
                continue
            new.append(obj)
            if key is not None:
                ids[key] = obj
            names[name] = obj
            self._soname(obj, names)
            return obj
        out.missing.setdefault(name, os.path.basename(node.path))
        out.first(f"{name}: " + ("wrong ELF class or machine (" + other_class + ")"
                                 if other_class else
                                 "cannot open shared object file: No such file or directory"),
                  "missing", name, node.path)
        return None

    def _closure(self, root: Obj, new: list[Obj], names: dict[str, Obj],
                 ids: dict[tuple[int, int], Obj], out: Outcome,
                 after: Sequence[Obj] = ()) -> list[Obj]:
        """The breadth-first closure of ``root`` (``l_searchlist``), mapping what it needs
        (elf/dl-deps.c); new objects join ``new``. ``after``: objects right after the root
        (the preloaded ones, at the start)."""
        order: list[Obj] = []
        seen: set[int] = set()
        queue = [root, *after]
        at = 0
        while at < len(queue) and len(order) < _MAX_OBJECTS:
            o = queue[at]
            at += 1
            if id(o) in seen:
                continue
            seen.add(id(o))
            order.append(o)
            if o.problem is not None:
                out.bad.setdefault(o.path, o.problem)
                out.first(f"{o.path}: {o.problem}", "bad", o.path, o.problem)
                continue
            out.count += len(o.needed)
            if o.deps is None:
                o.deps = []
                for name in o.needed:
                    if ldsym.host_provided(name):
                        o.host_needs = True
                        if next(iter(ldso.candidates(name, o, self.ld_path, self.cache,
                                                     self.system, self.root, self.exe_rpath,
                                                     self.trace)), None) is None:
                            out.host_missing.setdefault(name, os.path.basename(o.path))
                            self.host_missing.setdefault(name, os.path.basename(o.path))
                        continue
                    dep = self._find(name, o, new, names, ids, out)
                    if dep is not None:
                        o.deps.append(dep)
            queue += o.deps
        return order

    def _commit(self, new: list[Obj], names: dict[str, Obj],
                ids: dict[tuple[int, int], Obj]) -> None:
        self.objects += new
        for o in new:
            self.names.setdefault(o.path, o)
        for k, v in names.items():
            self.names.setdefault(k, v)
        self.ids.update(ids)

    # ------------------------------------------------------------------ versions, symbols
    def _judged(self, o: Obj) -> bool:
        """Whether ``o``'s version needs and symbols are checked: an object of the image's
        (``owned``), or one of the host's that maps a library of the image's or one found
        on ``LD_LIBRARY_PATH`` (a copy shadowing the one it was built against: an older
        ``libstdc++``, ``libz``, ``libnghttp2``). A host library among host libraries is
        taken as consistent."""
        if self.owned(o.path):
            return True
        return any(self.owned(d.path) or self._on_ld_path(d.path) for d in o.deps or ())

    def _on_ld_path(self, path: str) -> bool:
        if self._ld_dirs is None:
            self._ld_dirs = {os.path.normpath(d) for d in self.ld_path}
        return bool(self._ld_dirs) and os.path.normpath(os.path.dirname(path)) in self._ld_dirs

    def close(self) -> None:
        """Unmap every symbol table read (the process model is done with), but those a
        forked copy shares with its original (:meth:`fork`)."""
        for path, t in self.tables.items():
            if path in self._borrowed:
                continue
            m = getattr(t, "data", None)
            if m is not None and hasattr(m, "close"):
                try:
                    m.close()
                except (OSError, ValueError, BufferError):
                    pass  # a view of it still held: the collector unmaps it
        self.tables.clear()
        self._definers.clear()

    def table(self, path: str) -> object | None:
        if path not in self.tables:
            t = self.tables[path] = ldsym.open_table(path, self.within)
            if t is not None:
                t.path = path  # type: ignore[attr-defined]
        return self.tables[path]

    def _by_name(self, names: dict[str, Obj]) -> dict[str, object]:
        """Each name an object answers to -> its symbol table (``find_needed``)."""
        out: dict[str, object] = {}
        for mapping in (names, self.names):
            for k, o in mapping.items():
                t = self.table(o.path)
                if t is not None:
                    out.setdefault(k, t)
                    out.setdefault(os.path.basename(o.path), t)
                    if o.soname:
                        out.setdefault(o.soname, t)
        return out

    def _versions(self, searchlist: list[Obj], new: list[Obj], names: dict[str, Obj],
                  out: Outcome) -> None:
        from moonpin.readers.elf.symbols import SymbolError

        fresh = [o for o in searchlist if o in new and self._judged(o)]
        if not fresh:
            return
        by_name = self._by_name(names)
        for o in fresh:
            t = self.table(o.path)
            if t is None:
                continue
            try:
                ldsym.check_versions(o.path, t, by_name, out.versions)
            except SymbolError:
                continue  # reported by the binding
        if out.versions:
            obj, version, lib, newest = out.versions[0]
            out.first(f"{lib}: version `{version}' not found (required by {obj})", "version",
                      lib, f"{version}\0{obj}\0{newest}")

    def _relocate(self, searchlist: list[Obj], new: list[Obj], out: Outcome,
                  deep: bool = False) -> None:
        """Bind the new objects' symbols in their scope: the global scope, then the new
        root's closure; ``deep`` (``RTLD_DEEPBIND``): that closure first, then the global
        scope (a library's own definitions win over ones loaded before it)."""
        first, then = (searchlist, self.global_scope) if deep else (self.global_scope,
                                                                     searchlist)
        scope: list[Obj] = [*first]
        scope += [o for o in then if o not in scope]
        tables = [t for t in (self.table(o.path) for o in scope if o.problem is None)
                  if t is not None]
        host = any(o.host_needs for o in scope)
        names = tuple(os.path.basename(o.path) for o in scope)
        lookup = ldsym.Lookup(tables, self._definers, self._hashes)
        # dl-open.c relocates the new objects from the last mapped back to the root: the
        # first undefined symbol ld.so names is a dependency's
        walked = set(map(id, searchlist))
        for o in reversed(new):
            if id(o) not in walked or o.problem is not None or not self._judged(o):
                continue
            t = self.table(o.path)
            if t is None:
                continue
            out.bound += 1
            fatal = lookup.fatal
            got = lookup.bind(o.path, t, host, self.have_exe, names)
            out.refs += got.refs
            out.host += [h for h in got.host if h not in out.host]
            if out.error is None and fatal is None and lookup.fatal is not None:
                out.fatal = True  # ld.so aborts relocating this object: nothing after it
                out.first(lookup.fatal, "fatal", o.path, lookup.fatal)
            if got.unbound:  # the first object that fails stops ld.so: dlopen fails there
                obj, sym, version, _ = got.unbound[0]
                out.first(f"{obj}: undefined symbol: {sym}" + (f", version {version}"
                                                               if version else ""),
                          "symbol", obj, sym)
            out.unbound += got.unbound  # all of them, for the report
        ldsym.drop_pages(self.tables.values())


#: How :func:`moonpin.preflight.loader.ldso.elf_problem` says an object is of another class
#: or machine: ld.so skips it in a search.
_OTHER_CLASS = ("a 32-bit ELF object", "built for ")
