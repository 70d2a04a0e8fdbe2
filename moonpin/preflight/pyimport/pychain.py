"""The Python modules ``import mooncake.pg`` runs before its build is loaded, found as the
importer finds them: ``mooncake/__init__.py`` and what it certainly imports, the loader
``pg.py``, ``torch/__init__.py`` and so on, breadth-first. A module that certainly runs and is
missing, or does not compile, makes the import fail (``ModuleNotFoundError``,
``SyntaxError``), whatever the versions and builds say: that is the import system's verdict,
and the check must reach it too.

What "certainly runs" means is :mod:`moonpin.readers.pyast.imports`'s (top level, both branches
of an ``if``, a ``try`` body only when no handler catches ``ImportError``). The standard
library is the interpreter's own and is not read; an extension module found on the way is
left to the library and symbol checks (:mod:`moonpin.preflight.judge.libraries`). A module
whose package computes its ``__path__`` (pkgutil's ``extend_path``) is looked for in every
folder of that name on ``sys.path``, as ``extend_path`` makes it.

Reading is bounded: sources are parsed breadth-first up to :data:`BUDGET` bytes on a cold
start (what is parsed is kept in the file-facts memo, validated by each file's size and
mtime, so a warm start parses nothing); past the budget, the modules already known to be
imported are still looked for, and nothing is concluded about what they import. CPython's
own bytecode cache (``__pycache__/<name>.<tag>.pyc`` whose header names this very source's
mtime and size) means the source compiled, so only a source without one is compiled here.

Only ``os`` and ``sys`` at import: this runs at worker start.
"""

from __future__ import annotations

import os
import sys

from moonpin.kb.cache import facts_memo
from moonpin.kb.files import endless_fd
from moonpin.preflight.access.confined import NOWHERE, Confined

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from moonpin.preflight.pyimport.metapath import Importer

    #: evaluates a computed binding: (file, module, attr, the variables read) -> its value
    Evaluate = Callable[[str, str, str, dict[str, str | None]], str | None]

__all__ = [
    "BUDGET",
    "Problem",
    "Spec",
    "attribute",
    "attribute_memoised",
    "caught",
    "imports_of",
    "unread",
    "walk",
    "walk_memoised",
]

#: Source bytes parsed on a cold start, breadth-first from the imported module.
BUDGET = 128 << 10
_CAP_SOURCE = 16 << 20
#: How a module's facts say its import never ends (:func:`_cached_compiled`).
_HANGS = "never ends: its bytecode cache "
_MAX_MODULES = 2000


class Spec:
    """A module as the importer finds it: ``kind`` is ``package``, ``module`` or
    ``namespace``; ``file`` what runs (None for a namespace package); ``search`` where its
    submodules are looked for; ``dynamic`` when its ``__init__`` computes ``__path__``."""

    __slots__ = ("dynamic", "file", "kind", "name", "search")

    def __init__(self, name: str, kind: str, file: str | None,
                 search: tuple[str, ...] = ()) -> None:
        self.name = name
        self.kind = kind
        self.file = file
        self.search = search
        #: how its ``__init__`` sets ``__path__``: "" not at all, "extend_path" (pkgutil),
        #: "computed" (otherwise: where its submodules are is not known here), "unread"
        #: (past the reading budget: not known either)
        self.dynamic = ""


class Problem:
    """A module the import certainly runs that is missing or does not compile: the module,
    its file (None: missing), what is wrong, and who imports it (``file:line``)."""

    __slots__ = ("by", "detail", "file", "module")

    def __init__(self, module: str, file: str | None, detail: str, by: str) -> None:
        self.module = module
        self.file = file
        self.detail = detail
        self.by = by

    def dump(self) -> tuple[str, str | None, str, str]:
        return (self.module, self.file, self.detail, self.by)

    @classmethod
    def load(cls, v: Any) -> Problem | None:
        if not (isinstance(v, (tuple, list)) and len(v) == 4
                and all(isinstance(x, str) for x in (v[0], v[2], v[3]))
                and (v[1] is None or isinstance(v[1], str))):
            return None
        return cls(v[0], v[1], v[2], v[3])


#: What each exception a module's import can fail with is a kind of (builtins only).
_BASES = {
    "ModuleNotFoundError": ("ModuleNotFoundError", "ImportError"),
    "ImportError": ("ImportError",),
    "SyntaxError": ("SyntaxError",),
    "IndentationError": ("IndentationError", "SyntaxError"),
    "TabError": ("TabError", "IndentationError", "SyntaxError"),
    "hang": (),  # an import that never ends is caught by nothing
}


def caught(kind: str, guard: str) -> bool:
    """Whether a failure raising ``kind`` is caught by a ``try`` that catches ``guard``
    (:attr:`Import.guard`). An exception this reader does not know the bases of (a class of
    the module's own) is taken as caught by any guard: it may derive from what is caught."""
    if not guard:
        return False
    names = set(guard.split(","))
    bases = _BASES.get(kind)
    if bases is None:
        return True
    return any(b in names for b in bases)


def _stdlib(name: str) -> bool:
    top = name.partition(".")[0]
    names = getattr(sys, "stdlib_module_names", ())
    return top in names or top in sys.builtin_module_names


class _Walk:
    """One walk's state: the target's importer (:class:`moonpin.preflight.pyimport.metapath.
    Importer`, shared with the rest of the check), what it found, and the reading budget."""

    def __init__(self, imp: Importer, version: tuple[int, int]) -> None:
        self.imp = imp
        self.version = version
        #: the module files found (their stamps, and their bytecode caches', vouch for a
        #: remembered walk: :func:`walk_memoised`)
        self.touched: set[str] = set()
        self.specs: dict[str, Spec | None] = {}
        self.budget = BUDGET
        self.parsed = 0
        self.checked = 0

    def find(self, name: str) -> Spec | None:
        """``name`` as ``import name`` finds it, its parents imported first."""
        if name in self.specs:
            return self.specs[name]
        got = self.imp.find(name)
        spec: Spec | None = None
        if got is not None:
            hooks = self.imp.hooks
            if got.origin is None:
                spec = Spec(name, "namespace", None,
                            tuple(p for p in got.search or () if p not in hooks))
            elif got.search is None:
                spec = Spec(name, "module", got.origin)
                self.touched.add(got.origin)
            else:
                search = self.imp.package_path(name) or got.search
                spec = Spec(name, "package", got.origin,
                            tuple(p for p in search if p not in hooks))
                self.touched.add(got.origin)
        self.specs[name] = spec
        return spec


def _importer(paths: Sequence[str], suffixes: Sequence[str], root: str | None,
              imp: Importer | None) -> Importer:
    if imp is not None:
        return imp
    from moonpin.preflight.pyimport.metapath import Importer as _Importer

    return _Importer(paths, None, root, suffixes, within=Confined(root))


def _pyc(path: str, version: tuple[int, int]) -> str:
    folder, base = os.path.split(path)
    stem = base.rpartition(".")[0]
    return os.path.join(folder, "__pycache__", f"{stem}.cpython-{version[0]}{version[1]}.pyc")


def _cached_compiled(path: str, st: os.stat_result, version: tuple[int, int],
                     within: Confined) -> bool | str:
    """Whether CPython holds a timestamp bytecode cache of this very source (PEP 552 header:
    flags 0, then the source's mtime and size as uint32), so it will not compile it again;
    or, as a string, why reading that cache never ends. CPython's ``SourceLoader.get_code``
    opens and reads whatever is at the cache's name before it looks at it: a FIFO there
    blocks the import for ever, a character device that never ends (``/dev/zero``) is read
    until memory runs out. Here it is opened without blocking and read only when regular."""
    import stat

    pyc = _pyc(path, version)
    if within.outside(pyc):  # an image root's link out of it: not the image's file
        return False
    try:
        fd = os.open(pyc, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False  # none, or one the importer cannot open either: it compiles the source
    try:
        never = endless_fd(fd)
        if never is not None:
            return f"{_pyc_name(pyc)} is {never}: the import " + (
                "blocks reading it" if "FIFO" in never else "reads it until memory runs out")
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # /dev/null too: the importer compiles
            return False
        head = os.read(fd, 16)
    except OSError:
        return False
    finally:
        os.close(fd)
    if len(head) != 16 or head[4:8] != b"\0\0\0\0":
        return False
    mtime = int.from_bytes(head[8:12], "little")
    size = int.from_bytes(head[12:16], "little")
    return mtime == (int(st.st_mtime) & 0xFFFFFFFF) and size == (st.st_size & 0xFFFFFFFF)


def _pyc_name(pyc: str) -> str:
    """``__pycache__/pg.cpython-312.pyc``: the bytecode cache named beside its source."""
    folder, base = os.path.split(pyc)
    return f"{os.path.basename(folder)}/{base}"


def _facts_ok(v: Any) -> bool:
    return (isinstance(v, tuple) and len(v) == 5 and isinstance(v[0], (tuple, list))
            and (v[1] is None or isinstance(v[1], str))
            and v[2] in ("", "extend_path", "computed") and isinstance(v[3], dict)
            and isinstance(v[4], bool))


def _read(path: str, version: tuple[int, int], within: Confined
          ) -> tuple[tuple[Any, ...], str | None, str, dict[str, Any], bool]:
    """One parse of a module (:func:`moonpin.readers.pyast.imports.read_module`): the imports
    that certainly run, dumped; the compile error or None; how it sets its ``__path__``
    (:attr:`Spec.dynamic`); its top-level bindings; whether it makes names otherwise."""
    from moonpin.preflight.access.zipfs import read_source
    from moonpin.readers.pyast.imports import read_module

    data = read_source(path, cap=_CAP_SOURCE, what="Python source", within=within)
    try:
        st = os.stat(path)
        compiled = _cached_compiled(path, st, version, within)
    except OSError:
        compiled = False
    imports, error, bound, opaque = read_module(data, path, check_compile=compiled is not True)
    if isinstance(compiled, str):  # read before the source is compiled or run
        error = f"{_HANGS}{compiled}"
    dynamic = ""
    if b"__path__" in data:
        rest = data.replace(b"__path__ = extend_path(__path__, __name__)", b"")
        if b"extend_path" in data:
            dynamic = "extend_path"
        if any(k in rest for k in (b"__path__ =", b"__path__=", b"__path__.", b"__path__[",
                                   b"__path__ +=")):
            dynamic = "computed"
    return tuple(i.dump() for i in imports), error, dynamic, bound, opaque


#: What this process read of each module already (the walk and the label read the same
#: files; with the memo off, ``--no-cache``, each would parse torch/__init__.py again)
_READ: dict[tuple[str, int, int, tuple[int, int], str | None], Any] = {}


def _size(path: str) -> int:
    """A module file's size (a member's of a zip archive on ``sys.path``); raises OSError."""
    try:
        return os.stat(path).st_size
    except OSError:
        from moonpin.preflight.access import zipfs

        got = zipfs.size(path)
        if got is None:
            raise
        return got


def _facts(path: str, version: tuple[int, int], within: Confined
           ) -> tuple[tuple[Any, ...], str | None, str, dict[str, Any], bool]:
    """:func:`_read`, through the file-facts memo (raises OSError); a module in a zip
    archive on ``sys.path`` is read from it, not remembered."""
    try:
        st = os.stat(path)
    except OSError:
        from moonpin.preflight.access import zipfs

        if zipfs.size(path) is None:
            raise
        return _read(path, version, within)
    here = (path, st.st_size, st.st_mtime_ns, version, within.root)
    got = _READ.get(here)
    if got is None:
        got = _READ[here] = facts_memo().get("pychain-v5", path,
                                             lambda: _read(path, version, within), _facts_ok,
                                             within=within.root)
    return got  # type: ignore[no-any-return]


def imports_of(path: str, version: tuple[int, int], within: Confined = NOWHERE
               ) -> tuple[Any, ...]:
    """The imports a module's source certainly runs, each dumped as
    :meth:`moonpin.readers.pyast.imports.Import.dump` gives it (module, names, level, line,
    guard), through the file-facts memo as the walk reads them; raises OSError."""
    return tuple(_facts(path, version, within)[0])


def walk_memoised(paths: Sequence[str], module: str, version: tuple[int, int],
                  suffixes: Sequence[str], root: str | None = None, complete: bool = True,
                  sites: Sequence[str] | None = None) -> tuple[list[Problem], int]:
    """:func:`walk`, remembered in the file-facts memo with the stamp of every folder its
    importer listed, every path whose kind it asked, every file it read and every module
    file it found (and their bytecode caches): a warm start stats them and walks nothing.
    Not remembered for an image's root (its paths resolve through its own links)."""
    if root is not None:
        return walk(paths, module, version, suffixes, root, complete)
    from moonpin.preflight.pyimport.metapath import Importer as _Importer

    key = "\0".join(("pychain-walk-v1", module, f"{version[0]}.{version[1]}", str(complete),
                     ",".join(suffixes), *paths, "\0", *(sites or ())))

    def compute() -> tuple[Any, set[str], dict[str, str | None]]:
        imp = _Importer(paths, sites, None, suffixes, record=True)
        box: list[_Walk] = []
        problems, found = walk(paths, module, version, suffixes, None, complete, imp, box)
        files = {*(imp.stamps or ()), *(imp.reads or ()), *imp.kinds()}
        for f in box[0].touched:
            files |= {f, _pyc(f, version)}
        return ([p.dump() for p in problems], found), files, {}

    def ok(v: Any) -> bool:
        return (isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], list)
                and type(v[1]) is int and all(Problem.load(x) is not None for x in v[0]))

    got = facts_memo().get_traced(key, __file__, compute, ok)
    return [p for p in map(Problem.load, got[0]) if p is not None], got[1]


def walk(paths: Sequence[str], module: str, version: tuple[int, int],
         suffixes: Sequence[str], root: str | None = None,
         complete: bool = True, imp: Importer | None = None,
         box: list[_Walk] | None = None) -> tuple[list[Problem], int]:
    """The problems of ``import module``'s Python chain, and how many modules were found.
    ``complete``: ``paths`` is the target's whole ``sys.path`` (a top-level module found
    nowhere is then missing; with ``--site-packages`` folders it may be elsewhere).

    An import inside a ``try`` is followed with the exceptions its handlers catch (the
    guard): a failure of that kind beneath it is quiet (``ImportError`` for a missing
    module), any other (a ``SyntaxError``) still fails the import, as it propagates."""
    w = _Walk(_importer(paths, suffixes, root, imp), version)
    if box is not None:
        box.append(w)
    problems: list[Problem] = []
    queue: list[tuple[str, str, str]] = []  # (module, who imports it, guard)
    done: set[tuple[str, str]] = set()
    read: set[str] = set()
    facts: dict[str, Any] = {}  # module -> its read facts (bindings for `from X import Y`)

    def need(name: str, by: str, guard: str) -> None:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            queue.append((".".join(parts[:i]), by, guard))

    def fail(guard: str, kind: str, problem: Problem) -> None:
        if not caught(kind, guard):
            problems.append(problem)

    need(module, f"import {module}", "")
    while queue and len(done) < _MAX_MODULES:
        name, by, guard = queue.pop(0)
        if "\0" in name:  # `from X import Y`: Y is X's attribute, else its submodule X.Y
            _from(w, facts, name, by, guard, need, fail)
            continue
        if (name, guard) in done or (name, "") in done or _stdlib(name):
            continue
        done.add((name, guard))
        parent = name.rpartition(".")[0]
        if parent and w.find(parent) is None:
            continue  # reported for the parent
        spec = w.find(name)
        if spec is None:
            up = w.specs.get(parent) if parent else None
            if up is not None and up.dynamic in ("computed", "unread"):
                continue  # its __init__ sets __path__ some way not known here
            if not parent and not complete:
                continue
            where = ("any folder of sys.path" if not parent else
                     ", ".join((up.search if up is not None else ())[:2]) or parent)
            fail(guard, "ModuleNotFoundError",
                 Problem(name, None, f"no module {name!r} in {where}", by))
            continue
        w.checked += 1
        f = spec.file
        if f is None or not f.endswith(".py"):
            continue  # a namespace package runs nothing; an extension is loaded, not read
        try:
            size = _size(f)
        except OSError as e:
            fail(guard, "OSError", Problem(name, f, f"cannot be read ({e.strerror})", by))
            continue
        if f not in read:
            if size > w.budget:  # past the budget (cold and warm alike): found, not read,
                spec.dynamic = "unread"  # but for what its head certainly says
                why = unread(f, w.imp.within)
                if why is not None:
                    fail(guard, "SyntaxError", Problem(name, f, f"does not compile: {why}", by))
                continue
            w.budget -= size
            read.add(f)
        try:
            got = _facts(f, version, w.imp.within)
        except OSError as e:
            if _over_cap(e):  # past moonpin's cap, as past the budget
                spec.dynamic = "unread"
                why = unread(f, w.imp.within)
                if why is not None:
                    fail(guard, "SyntaxError", Problem(name, f, f"does not compile: {why}", by))
                continue
            if _denied(e) and _runs_cache(f, version):
                continue  # the import runs its bytecode cache, read as a sourceless module's
            fail(guard, "OSError", Problem(name, f, f"cannot be read ({e})", by))
            continue
        w.parsed += 1
        dumped, error, dynamic, _, _ = got
        spec.dynamic = dynamic
        facts[name] = got
        if error is not None:
            if error.startswith("raises "):
                fail(guard, error.split()[1], Problem(name, f, error, by))
            elif error.startswith(_HANGS):  # no handler ends a read that never returns
                fail(guard, "hang", Problem(name, f, error, by))
            else:
                fail(guard, "SyntaxError", Problem(name, f, f"does not compile: {error}", by))
        package = name if spec.kind == "package" else parent
        for raw in dumped:  # Import.dump(): (module, names, level, line, guard)
            if not (isinstance(raw, (tuple, list)) and len(raw) == 5):
                continue
            module_, names, level, line, inner = raw
            if not (isinstance(module_, str) and type(level) is int
                    and isinstance(inner, str)):
                continue
            here = ",".join(sorted(set(filter(None, f"{guard},{inner}".split(",")))))
            if level:
                if not package or level - 1 > package.count("."):
                    fail(here, "ImportError", Problem(name, f, f"line {line}: attempted "
                                                     "relative import beyond top-level package",
                                                     by))
                    continue
                base = package.rsplit(".", level - 1)[0] if level > 1 else package
                target = f"{base}.{module_}" if module_ else base
            else:
                target = module_
            if target:
                need(target, f"{_short(f, paths)}:{line}", here)
                for attr in names if isinstance(names, (tuple, list)) else ():
                    if isinstance(attr, str) and attr != "*":
                        queue.append((f"{target}\0{attr}", f"{_short(f, paths)}:{line}", here))
    return problems, w.checked


def _denied(e: OSError) -> bool:
    """Whether the kernel refused this process the file (a check run as the worker's user)."""
    import errno

    return e.errno in (errno.EACCES, errno.EPERM)


def _runs_cache(path: str, version: tuple[int, int]) -> bool:
    """Whether CPython's ``SourceLoader.get_code`` runs ``path``'s bytecode cache without
    reading the source (it only stats it: a valid cache it can read,
    :func:`moonpin.preflight.pyimport.pycode.runs`), so a source this user cannot read is
    no failure; when the cache is stale or unreadable it reads the source and raises
    ``PermissionError``. Seen with the real import as an unprivileged user."""
    from moonpin.preflight.pyimport import pycode

    return pycode.runs(path, version) is not None


def _over_cap(e: OSError) -> bool:
    """Whether :func:`moonpin.kb.files.read_regular` refused a file for its size (a cap of
    moonpin's: Python itself imports a 20 MB module), not for what the importer meets too."""
    import errno

    return e.errno == errno.EFBIG


#: What is read of a source that is not parsed (past the budget or the cap).
_HEAD = 64 << 10


def _nul_at(path: str, within: Confined) -> int:
    """The offset of the first NUL byte in the first :data:`_HEAD` bytes of ``path`` (-1:
    none, or not a regular file that can be read)."""
    import stat

    if within.outside(path):  # as read_regular refuses it
        return -1
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return -1
    try:
        return os.read(fd, _HEAD).find(b"\0") if stat.S_ISREG(os.fstat(fd).st_mode) else -1
    except OSError:
        return -1
    finally:
        os.close(fd)


def unread(path: str, within: Confined = NOWHERE) -> str | None:
    """Why a source too large to parse here certainly does not compile, judged on its head
    (through the file-facts memo: a warm start reads nothing), or None: a NUL byte there (a
    sparse or binary file in a module's place) is what CPython refuses to compile."""
    try:
        at = facts_memo().get("pyhead-v1", path, lambda: _nul_at(path, within),
                              lambda v: type(v) is int, within=within.root)
    except OSError:
        return None
    if at < 0:
        return None
    return f"SyntaxError: source code string cannot contain null bytes (byte {at})"


def _self_import(b: Any, package: str, attr: str) -> bool:
    """Whether the binding is ``from <package> import attr`` (``from . import attr`` in its
    ``__init__``): made by importing the submodule itself, not there before it."""
    if not (isinstance(b, (tuple, list)) and len(b) == 4 and b[0] == "from" and b[3] == attr
            and type(b[1]) is int and isinstance(b[2], str)):
        return False
    level, module = b[1], b[2]
    if not level:
        return module == package
    if level - 1 > package.count("."):
        return False
    base = package.rsplit(".", level - 1)[0] if level > 1 else package
    return (f"{base}.{module}" if module else base) == package


def _from(w: _Walk, facts: dict[str, Any], entry: str, by: str, guard: str,
          need: Any, fail: Any) -> None:
    """``from X import Y`` after ``X`` ran (CPython's ``_handle_fromlist``): an attribute
    ``X`` binds is taken; otherwise the submodule ``X.Y`` is imported, and with neither the
    import fails (``cannot import name``). What ``X`` binds is known only when it was read
    and makes no names some other way; otherwise nothing is concluded."""
    package, _, attr = entry.partition("\0")
    spec = w.specs.get(package)
    if spec is None or _stdlib(package):
        return
    got = facts.get(package)
    if spec.kind != "namespace":
        if got is None or got[4]:  # not read, or opaque: its attributes are not known
            return
        b = got[3].get(attr) if isinstance(got[3], dict) else None
        if b is not None and not _self_import(b, package, attr):
            return  # an attribute: nothing more is imported
    if spec.kind == "module":
        fail(guard, "ImportError", Problem(package, spec.file, f"defines no {attr} "
                                           f"(`from {package} import {attr}`)", by))
        return
    sub = f"{package}.{attr}"
    if w.find(sub) is not None:
        need(sub, by, guard)
        return
    if spec.dynamic in ("computed", "unread"):
        return
    fail(guard, "ImportError", Problem(package, spec.file, f"has no {attr}, as an attribute "
                                       f"or a submodule (`from {package} import {attr}`)", by))


def _short(path: str, paths: Sequence[str] = ()) -> str:
    """``torch/torch_version.py`` for a file under a folder of ``sys.path`` (or a site
    folder): the package path."""
    norm = os.path.normpath(path)
    bases = [b for b in (os.path.normpath(p).rstrip(os.sep) + os.sep for p in paths)
             if norm.startswith(b)]
    if bases:  # the deepest folder holding it (a root as the working folder holds all)
        return norm[len(max(bases, key=len)):].replace(os.sep, "/")
    parts = norm.split(os.sep)
    for i in range(len(parts) - 1, 0, -1):
        if parts[i - 1] in ("site-packages", "dist-packages"):
            return "/".join(parts[i:])
    return path


def _resolve(bound: dict[str, Any], opaque: bool, name: str) -> tuple[Any, ...] | None:
    """:func:`moonpin.readers.pyast.imports.resolve_binding`, on memoised facts (no ``ast``)."""
    got = bound.get(name)
    if not isinstance(got, (tuple, list)) or not got or not isinstance(got[0], str):
        return None if opaque or got is not None else ("absent",)
    if got[0] == "const" and len(got) == 2:
        return tuple(got)
    if got[0] == "name" and len(got) == 2 and isinstance(got[1], str):
        return tuple(got)
    if (got[0] == "from" and len(got) == 4 and type(got[1]) is int
            and isinstance(got[2], str) and isinstance(got[3], str)):
        return tuple(got)
    return None


def attribute_memoised(paths: Sequence[str], module: str, attr: str,
                       version: tuple[int, int], suffixes: Sequence[str],
                       root: str | None = None, sites: Sequence[str] | None = None,
                       evaluate: Evaluate | None = None) -> tuple[str | None, str | None]:
    """:func:`attribute`'s value and problem, remembered as :func:`walk_memoised` is
    (with the environment variables ``evaluate`` read)."""
    if root is not None:
        return attribute(paths, module, attr, version, suffixes, root,
                         evaluate=_bound(evaluate, {}))[:2]
    from moonpin.preflight.pyimport.metapath import Importer as _Importer

    key = "\0".join(("pychain-attr-v4", module, attr, f"{version[0]}.{version[1]}",
                     ",".join(suffixes), *paths, "\0", *(sites or ()),
                     "\0eval" if evaluate is not None else ""))

    def compute() -> tuple[Any, set[str], dict[str, str | None]]:
        imp = _Importer(paths, sites, None, suffixes, record=True)
        env: dict[str, str | None] = {}
        value, problem, files = attribute(paths, module, attr, version, suffixes, None, imp,
                                          evaluate=_bound(evaluate, env))
        traced = {*(imp.stamps or ()), *(imp.reads or ()), *imp.kinds(), *files}
        return (value, problem), traced, env

    def ok(v: Any) -> bool:
        return (isinstance(v, tuple) and len(v) == 2
                and all(x is None or isinstance(x, str) for x in v))

    got = facts_memo().get_traced(key, __file__, compute, ok)
    return got[0], got[1]


def _bound(evaluate: Evaluate | None, env: dict[str, str | None]
           ) -> Callable[[str, str, str], str | None] | None:
    if evaluate is None:
        return None
    return lambda f, m, a: evaluate(f, m, a, env)


def attribute(paths: Sequence[str], module: str, attr: str, version: tuple[int, int],
              suffixes: Sequence[str], root: str | None = None, imp: Importer | None = None,
              evaluate: Callable[[str, str, str], str | None] | None = None
              ) -> tuple[str | None, str | None, tuple[str, ...]]:
    """``module.attr`` as importing ``module`` sets it, followed statically through the
    imports and assignments that bind it (``torch.__version__``: ``torch/__init__.py`` ->
    ``torch/torch_version.py`` -> ``torch/version.py``): (its value as a string, None), or
    (None, why the import fails on the way), or (None, None) when the chain is not one this
    reader follows; and the files read. ``evaluate(file, module, attr)``: the value of a
    binding the static reading does not follow (a computed one), or None."""
    w = _Walk(_importer(paths, suffixes, root, imp), version)
    files: list[str] = []
    name, want = module, attr
    for _ in range(12):
        parts = name.split(".")
        spec = None
        for i in range(1, len(parts) + 1):  # each parent package runs first
            spec = w.find(".".join(parts[:i]))
            if spec is None:
                by = f" (imported by {_short(files[-1], paths)})" if files else ""
                return None, f"no module {'.'.join(parts[:i])!r}{by}", tuple(files)
        assert spec is not None
        f = spec.file
        if f is None or not f.endswith((".py", ".pyc")):
            return None, None, tuple(files)
        files.append(f)
        if f.endswith(".pyc"):  # no source: what the bytecode binds, when it can be read
            from moonpin.preflight.pyimport import pycode

            code = pycode.runs(f, version)
            broken = pycode.unloadable(code, w.imp.within) if code is not None else None
            if broken is not None:
                return None, f"{_short(f, paths)} {broken}: the import fails on it", tuple(files)
            facts_b = pycode.bindings(code, w.imp.within) if code is not None else None
            if facts_b is None:
                return None, None, tuple(files)
            got = _resolve(facts_b[0], facts_b[1], want)
            if got is None:
                return None, None, tuple(files)
            if got[0] == "absent":
                return None, f"{_short(f, paths)} defines no {want}", tuple(files)
            if got[0] == "const":
                return str(got[1]), None, tuple(files)
            if got[0] == "name":
                want = str(got[1])
                continue
            from_name = _from_module(got, name, spec.kind)
            if from_name is None:
                return None, None, tuple(files)
            name, want = from_name, str(got[3])
            continue
        try:
            facts = _facts(f, version, w.imp.within)
        except OSError as e:
            if _over_cap(e):  # a limit of moonpin's, not the importer's: not followed,
                why = unread(f, w.imp.within)  # but for what its head certainly says
                return None, f"{f} does not compile: {why}" if why else None, tuple(files)
            return None, f"{f} cannot be read ({e})", tuple(files)
        if facts[1] is not None:
            what = (facts[1] if facts[1].startswith(("raises", _HANGS))
                    else f"does not compile: {facts[1]}")
            return None, f"{f} {what}", tuple(files)
        got = _resolve(facts[3], facts[4], want)
        if got is None:
            computed = evaluate(f, name, want) if evaluate is not None else None
            return computed, None, tuple(files)
        if got[0] == "absent":
            return None, (f"{_short(f, paths)} defines no {want} ({name}.{want} is imported"
                          + (f" by {_short(files[-2], paths)})" if len(files) > 1 else ")")
                          ), tuple(files)
        if got[0] == "const":
            from moonpin.preflight.pyimport import pycode

            code = pycode.runs(f, version)  # the import runs its bytecode cache, not it
            if code is None:
                files.append(_pyc(f, version))  # a cache written later is seen
                return str(got[1]), None, tuple(files)
            files.append(code)
            broken = pycode.unloadable(code, w.imp.within)
            if broken is not None:
                return None, (f"{_short(f, paths)}: its bytecode cache {os.path.basename(code)}, "
                              f"which the import runs, {broken}"), tuple(files)
            facts_b = pycode.bindings(code, w.imp.within)
            cached = _resolve(facts_b[0], facts_b[1], want) if facts_b is not None else None
            if cached is not None and cached[0] == "const":
                return str(cached[1]), None, tuple(files)
            return (str(got[1]) if cached is None or cached == got else None), None, tuple(files)
        if got[0] == "name":
            want = str(got[1])
            continue
        source_name = _from_module(got, name, spec.kind)
        if source_name is None:
            return None, None, tuple(files)
        name, want = source_name, str(got[3])
    return None, None, tuple(files)


def _from_module(got: tuple[Any, ...], name: str, kind: str) -> str | None:
    """The module a ``("from", level, module, attr)`` binding of module ``name`` imports
    from (a relative import resolved against its package), or None when it climbs past
    the top."""
    level, source = int(got[1]), str(got[2])
    if level:
        package = name if kind == "package" else name.rpartition(".")[0]
        if level - 1 > package.count("."):
            return None
        base = package.rsplit(".", level - 1)[0] if level > 1 else package
        source = f"{base}.{source}" if source else base
    return source
