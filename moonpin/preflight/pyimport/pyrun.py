"""What ``import NAME`` loads into the process before anything else is loaded after it:
the import chain, followed from the files (:mod:`moonpin.preflight.pyimport.pyeval`, never
run) against a simulated loader (:class:`moonpin.preflight.loader.ldproc.Process`).

Which modules are walked: every module of the requested package (``mooncake``: its
``__init__``, ``buffer_pool``, ``pg``), and the top-level module of each package they
import (``torch/__init__.py``). Other Python modules are not walked (torch's ~1,500
submodules): a name imported from one is its top-level constant when the file has one
(``USE_GLOBAL_DEPS = True``), else unknown; an extension module any walked code imports is
loaded, wherever it is. The standard library is modelled, never read.

How a module is found is the importer's (:mod:`moonpin.preflight.pyimport.importer`, with the
target's extension suffixes, then ``.py``, then ``.pyc``: ``FileFinder``'s order); an
extension module is ``dlopen``-ed with the interpreter's flags (``sys.getdlopenflags()``,
``RTLD_NOW`` unless the walked code changes them) and must define ``PyInit_<name>``;
``ctypes.CDLL(path, mode)`` is ``dlopen(path, mode | RTLD_NOW)``. A failed load raises what
Python raises (``ImportError``, ``OSError``) with what ``dlerror()`` says, and the walked
``try``/``except`` decide as the real ones would.

Only ``os`` and ``sys`` at import: this runs at worker start.
"""

from __future__ import annotations

import os
import sys

from moonpin.preflight.loader import ldproc
from moonpin.preflight.pyimport import importer
from moonpin.preflight.pyimport.pyeval import (
    UNKNOWN,
    Budget,
    Builtin,
    Died,
    Evaluator,
    ExcClass,
    ExcValue,
    Host,
    Lazy,
    ModuleValue,
    Raised,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from moonpin.preflight.pyimport.atimport import Bounds
    from moonpin.preflight.pyimport.metapath import Importer

__all__ = ["Chain", "Load"]

_CAP_SOURCE = 8 << 20
_EXC_NAMES = frozenset((
    "BaseException", "Exception", "ImportError", "ModuleNotFoundError", "OSError",
    "EnvironmentError", "IOError", "FileNotFoundError", "ValueError", "AttributeError",
    "TypeError", "RuntimeError", "NotImplementedError", "LookupError", "KeyError",
    "IndexError", "AssertionError", "NameError", "SystemError", "UnicodeError",
    "SyntaxError", "PermissionError"))
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"__future__"}
_PLAIN: dict[str, Any] = {"True": True, "False": False, "None": None}


class Load:
    """One load the chain made: the file (or name) ``dlopen`` was given, its mode, what
    ``dlerror()`` said (None: loaded), the module whose code loaded it and how (``import``
    of an extension module, ``ctypes``)."""

    __slots__ = ("error", "how", "mode", "module", "path", "why")

    def __init__(self, path: str, mode: int, error: str | None, module: str,
                 how: str, why: tuple[str, str, str] = ("", "", "")) -> None:
        self.path = path
        self.mode = mode
        self.error = error
        self.module = module
        self.how = how
        #: what the error is about (:attr:`moonpin.preflight.loader.ldproc.Outcome.why`)
        self.why = why


#: How deep the standard library's own imports are followed to its extension modules
#: (:meth:`Chain._std_natives`): a module, its package's modules, theirs
_STD_DEPTH = 4


def _own(name: str, package: bool, target: str) -> bool:
    """Whether ``target`` is a module of the package ``name`` is or lies in (``sqlite3`` ->
    ``sqlite3.dbapi2``); a top-level module has none (``os`` naming ``os.path``)."""
    if not package and "." not in name:
        return False
    return target.partition(".")[0] == name.partition(".")[0] and target != name


def _column0_imports(text: str, package: str) -> list[str]:
    """The modules the ``import``/``from`` lines at column 0 of ``text`` name (relative ones
    against ``package``): a cheap look before a module is parsed (a docstring's line may
    look like one; the parse decides)."""
    out: list[str] = []
    for line in text.splitlines():
        if line.startswith("import "):
            for part in line[7:].partition("#")[0].split(","):
                name = part.strip().split(" ")[0]
                if name:
                    out.append(name)
        elif line.startswith("from "):
            name = line[5:].partition(" import")[0].strip()
            dots = len(name) - len(name.lstrip("."))
            if dots and package:
                up = package.rsplit(".", dots - 1)[0] if dots > 1 else package
                name = f"{up}.{name[dots:]}" if name[dots:] else up
            if name and not name.startswith("."):
                out.append(name)
    return out


#: what :func:`_assigned` says of a line that does not assign the name, or assigns it
#: indented or defines it (then the name is unknown whatever else assigns it)
_NOT_IT, _INDENTED = object(), object()


def _assigned(line: str, name: str) -> Any:
    """The literal ``line`` assigns to ``name`` at column 0 (UNKNOWN: not a literal);
    :data:`_INDENTED` when it assigns it indented or defines it by ``def``/``class``;
    :data:`_NOT_IT` when it does neither."""
    import ast

    stripped = line.lstrip()
    if stripped.startswith(("def ", "class ", "async def ")):
        defined = stripped.split("(", 1)[0].split(":", 1)[0].split()[-1]
        return _INDENTED if defined == name else _NOT_IT
    head = stripped.split("=", 1)[0].split(":", 1)[0].strip()
    if head != name or "=" not in stripped or stripped[
            len(stripped.split("=", 1)[0]):].startswith("=="):
        return _NOT_IT
    if line[:1].isspace():
        return _INDENTED
    rhs = stripped.split("=", 1)[1].split("#", 1)[0].strip()
    if rhs in _PLAIN:
        return _PLAIN[rhs]
    if rhs.isdigit() and len(rhs) < 20:
        return int(rhs)
    try:
        return ast.literal_eval(rhs)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return UNKNOWN


class _Obj:
    """A modelled object with attributes (a file, a ctypes handle or namespace)."""

    __slots__ = ("attrs",)

    def __init__(self, attrs: dict[str, Any]) -> None:
        self.attrs = attrs


class _PathStr(str):
    """A ``pathlib.Path`` the walked code got (``Distribution.locate_file``): its text, as
    ``str()`` and ``os.path`` read it, and ``.exists()``."""

    attrs: dict[str, Any]

    def __new__(cls, path: str, exists: Any) -> _PathStr:
        got = super().__new__(cls, path)
        got.attrs = {"exists": Builtin("exists", lambda a, k: exists.fn([str(got)], {})
                                       if not a and not k else UNKNOWN)}
        return got


class _VersionInfo(tuple):  # type: ignore[type-arg]
    """``sys.version_info`` as far as the target's is known: ``(major, minor)``, compared
    as the tuple, with ``.major`` and ``.minor``."""

    def __new__(cls, version: tuple[int, int]) -> _VersionInfo:
        got = super().__new__(cls, version)
        got.attrs = {"major": version[0], "minor": version[1]}
        return got

    attrs: dict[str, int]


class _Environ(dict):  # type: ignore[type-arg]
    """``os.environ`` as the walked code reads it: ``NAME in os.environ``,
    ``os.environ[NAME]``, ``os.environ.get(NAME, default)`` answer from this process's
    environment (the worker's), each variable read being recorded (a remembered answer
    holds while it is unchanged); listing it is not followed."""

    def __init__(self, read: Any) -> None:
        super().__init__()
        self._read = read

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._read(name) is not None

    def get(self, name: Any, default: Any = None) -> Any:
        return self._read(name, default)

    def __getitem__(self, name: Any) -> Any:
        return self._read(name)

    def _listed(self) -> Any:
        raise Budget("the walked code lists os.environ")

    keys = values = items = _listed  # type: ignore[assignment]


def _route(steps: Sequence[str]) -> str:
    """A walk's route (``file:line imports|calls what`` each) said short: its first step,
    the calls on the way (up to four) and its last two steps, ``…`` where steps are left
    out."""
    keep = {0, len(steps) - 2, len(steps) - 1}
    keep |= set([i for i, s in enumerate(steps) if " calls " in s][:4])
    out: list[str] = []
    for i, s in enumerate(steps):
        if i in keep:
            out.append(s)
        elif out and out[-1] != "…":
            out.append("…")
    return " -> ".join(out)


class Chain(Host):
    """The import system of one interpreter over ``paths`` (its ``sys.path``), its loader
    ``proc``. ``request``: the package whose modules are all walked; ``stop``: files not
    to load (the builds the caller loads itself); ``trace``: every file and folder the
    answer depends on is added to it; ``complete``: ``paths`` are the interpreter's whole
    ``sys.path`` (:attr:`moonpin.preflight.env.context.Context.complete`); ``bounds``: how
    far :meth:`at_import` follows the code an import runs (None: its walk's defaults)."""

    def __init__(self, proc: ldproc.Process, paths: Sequence[str], *, request: str,
                 suffixes: Sequence[str], sites: Sequence[str] | None = None,
                 root: str | None = None, version: tuple[int, int] | None = None,
                 python: str | None = None, stop: Sequence[str] = (),
                 trace: set[str] | None = None, complete: bool = True,
                 importer: Importer | None = None,
                 unloadable: Sequence[str] | None = None,
                 bounds: Bounds | None = None) -> None:
        self.proc = proc
        self.bounds = bounds
        self.complete = complete
        self.paths = list(paths)
        self.request = request.partition(".")[0]
        self.suffixes = tuple(suffixes)
        self.sites = sites
        self.root = root
        self.version = version
        self.python = python
        self.stop = {os.path.normpath(p) for p in stop}
        if importer is None:  # none handed down: one model of this interpreter's importer
            from moonpin.preflight.access.confined import Confined
            from moonpin.preflight.pyimport.metapath import Importer

            importer = Importer(self.paths, sites, root, self.suffixes, within=Confined(root))
        #: the importer model every module is found with (the check's one, from its
        #: :class:`~moonpin.preflight.env.context.Context`)
        self.importer = importer
        #: the image root the chain's reads are confined to (its importer's)
        self.within = importer.within
        self.trace = trace if trace is not None else set()
        self.env_read: dict[str, str | None] = {}
        self.modules: dict[str, ModuleValue] = {}
        self.flags = ldproc.RTLD_NOW  # sys.getdlopenflags()
        self.loads: list[Load] = []
        self.ev = Evaluator(self)
        self._lazy: dict[tuple[str, str], Any] = {}
        self._texts: dict[str, str] = {}
        self._builtins = self._make_builtins()
        #: the standard library's modules whose extension modules were loaded
        self._std_loaded: set[str] = set()
        self._std_busy: set[str] = set()  # being loaded (ctypes._endian imports ctypes)
        #: the standard library's extension modules that fail to load here (None: not yet
        #: known; handed down by a chain over the process this one's is a copy of)
        self._unloadable = None if unloadable is None else list(unloadable)
        #: the modules whose code run at import :meth:`at_import` walked already
        self.walked: set[str] = set()

    # ------------------------------------------------------------------ finding modules
    def _seen(self, path: str) -> None:
        self.trace.add(path)

    def _in_folder(self, folder: str, tail: str) -> tuple[str, str, list[str] | None] | None:
        """``FileFinder`` in ``folder`` (the importer model's,
        :meth:`moonpin.preflight.pyimport.metapath.Importer.file_find`): (kind, file, package
        folders) of ``tail``, kind ``ext``/``py``/``pyc``/``ns`` (a folder only: a namespace
        portion)."""
        self._seen(folder)
        if not os.path.isdir(folder):  # a zip archive on sys.path, or nothing
            from moonpin.preflight.access import zipfs

            got = zipfs.find(folder, tail)
            if got is None:
                return None
            return got[0], got[1] or "", list(got[2]) if got[2] is not None else None
        pkg = os.path.join(folder, tail)
        if os.path.isdir(pkg):
            self._seen(pkg)
        spec = self.importer.file_find(folder, tail)
        if spec is None:
            return None
        search = list(spec.search) if spec.search is not None else None
        if spec.origin is None:
            return "ns", "", search
        from importlib import machinery

        kind = ("py" if spec.origin.endswith(tuple(machinery.SOURCE_SUFFIXES)) else
                "pyc" if spec.origin.endswith(tuple(machinery.BYTECODE_SUFFIXES)) else "ext")
        return kind, spec.origin, search

    def _find(self, name: str) -> tuple[str, str, list[str] | None] | None:
        parent, _, tail = name.rpartition(".")
        if parent:
            pmod = self.modules.get(parent)
            folders = pmod.path if pmod is not None and pmod.path else []
            if pmod is not None and pmod.kind == "py":  # as its __init__ left __path__
                now = pmod.globals.get("__path__")
                if isinstance(now, list) and all(isinstance(x, str) for x in now):
                    folders = now
        else:
            found = importer.found_in(self.importer, name)
            if found is not None and found.how != "namespace":
                init = self._in_folder(os.path.dirname(found.folder), name)
                if init is not None and init[0] != "ns":
                    return init
                if found.how.startswith("editable"):
                    self._seen(found.folder)
                    return self._package_at(found.folder)
            folders = self.paths
        portions: list[str] = []
        for folder in folders:
            got = self._in_folder(folder, tail)
            if got is None:
                continue
            if got[0] != "ns":
                return got
            portions += got[2] or []
        return ("ns", "", portions) if portions else None

    def _package_at(self, folder: str) -> tuple[str, str, list[str] | None] | None:
        got = self._in_folder(os.path.dirname(folder), os.path.basename(folder))
        return got if got is not None else ("ns", "", [folder])

    # ------------------------------------------------------------------ Host
    def import_module(self, name: str, importer_module: ModuleValue) -> ModuleValue:
        if not name:
            raise self._raised(ExcValue("ImportError", "Empty module name", importer_module.name))
        parts = name.split(".")
        mod: ModuleValue | None = None
        for i in range(len(parts)):
            full = ".".join(parts[:i + 1])
            mod = self.modules.get(full)
            if mod is None:
                mod = self._load(full, importer_module)
        assert mod is not None
        return mod

    def _load(self, name: str, by: ModuleValue) -> ModuleValue:
        if name.partition(".")[0] in _STDLIB:
            self._std_natives(name, by, 0)  # raises what a failed load of one raises
            mod = self.modules[name] = self._std(name)
            return mod
        spec = self._find(name)
        if spec is None and "." not in name and not self.complete:
            # --site-packages folders or an --image root kept in part: a top-level module
            # found in none of them may be elsewhere in the image; nothing is known of it
            mod = self.modules[name] = ModuleValue(name, "lazy", None, None, 9)
            return mod
        if spec is None:
            raise self._raised(ExcValue("ModuleNotFoundError", f"No module named '{name}'",
                                  by.name))
        kind, file, path = spec
        if kind == "ns":
            mod = self.modules[name] = ModuleValue(name, "ns", None, path)
            return mod
        tier = 9
        if name.partition(".")[0] == self.request:
            tier = 0
        elif "." not in name and by.tier == 0:
            tier = 1
        if kind == "ext":
            return self._load_ext(name, file, path, by)
        if kind == "pyc" or tier > 1:  # its file is read (and traced) only if asked
            mod = self.modules[name] = ModuleValue(name, "lazy", file, path, tier)
            return mod
        return self._run(name, file, path, tier)

    # ------------------------------------------------------------------ the stdlib's natives
    def _std_natives(self, name: str, by: ModuleValue, depth: int) -> None:
        """The standard library's extension modules ``import name`` loads, each found by
        the importer model on the target's ``sys.path`` (an image's ``lib-dynload``) and
        ``dlopen``-ed as any extension module is (:meth:`_load_ext`: a missing
        ``libbz2.so.1.0`` fails ``_bz2`` as ld.so fails it): ``name`` itself when it is one
        (``math``, ``_ctypes``), else those its source imports at its top level unguarded
        (``bz2.py``'s ``from _bz2 import …``, ``ctypes``'s ``_ctypes``), and so on through
        its own package's modules (``sqlite3`` -> ``sqlite3.dbapi2`` -> ``_sqlite3``). Its
        Python code is modelled, not run (:meth:`_std`); a builtin or frozen module, or one
        not found, is the interpreter's own. Raises what the import raises."""
        if name in self._std_loaded or name in self._std_busy or depth > _STD_DEPTH:
            return
        spec = self._std_spec(name)
        self._std_busy.add(name)
        try:
            if spec is not None and spec[0] == "ext":
                if name not in self.modules:
                    self._load_ext(name, spec[1], spec[2], by)
            elif spec is not None and spec[0] == "py":
                package = spec[2] is not None
                for target in self._std_imports(name, spec[1], package):
                    if _own(name, package, target) or self._is_ext(target):
                        self._std_natives(target, by, depth + 1)
        finally:
            self._std_busy.discard(name)
        self._std_loaded.add(name)  # a failed one is tried again, as Python tries it

    def unloadable_std(self) -> list[str]:
        """The standard library's extension modules (those of the interpreter's folders on
        ``sys.path``: ``lib-dynload``'s ``_bz2``, ``_ctypes``, ``_ssl``…) that do not load
        into a copy of this process (a library they need not found), as ld.so would fail
        them; computed once. When none fails, no code an import runs can
        fail on one, whatever it calls: :meth:`at_import` then reads nothing."""
        if self._unloadable is None:
            found: dict[str, str] = {}
            for folder in self.paths:
                for entry in sorted(self.importer.listing(folder)):
                    stem = next((entry[:-len(x)] for x in self.suffixes if entry.endswith(x)),
                                None)
                    if stem and stem in _STDLIB and stem not in found:
                        found[stem] = os.path.join(folder, entry)
            # one whose needs are all mapped already cannot miss one (most: libc, libm);
            # the others are mapped in a copy for what ld.so needs found, not each symbol
            # bound (a module that maps but binds badly is failed by its own load)
            from moonpin.preflight.loader import ldso

            mapped = {k for k in self.proc.names if "/" not in k}
            rest = []
            for name, file in sorted(found.items()):
                try:
                    needed = ldso.read_dynamic_flags(file, self.proc.machine, self.proc.trace,
                                                     self.within)[0]
                except OSError:
                    needed = ("?",)
                if not set(needed) <= mapped:
                    rest.append((name, file))
            self._unloadable = []
            if rest:
                copy = self.proc.fork(lambda _path: False, self.proc.trace)
                try:
                    self._unloadable = [name for name, file in rest
                                        if copy.dlopen(file, ldproc.RTLD_NOW).error is not None]
                finally:
                    copy.close()
        return list(self._unloadable)

    def at_import(self, modules: Sequence[str]) -> None:
        """The code importing ``modules`` runs by calling into other modules (a decorator
        applied at import, a module-level call: :mod:`moonpin.preflight.pyimport.atimport`),
        followed to the standard library's modules it certainly imports, whose extension
        modules are loaded as an import of them would (:meth:`_std_natives`): raises what
        the first failing one raises, the way there said. Only when one of them fails to
        load here (:meth:`unloadable_std`); raises :class:`Budget` past the walk's bounds
        (:attr:`bounds`), saying which of them does not load."""
        unloadable = self.unloadable_std()
        if not unloadable:
            return
        from moonpin.preflight.pyimport import atimport

        def std(name: str, by: str, file: str, route: list[str]) -> None:
            try:
                self._std_natives(name, ModuleValue(by, "py", file), 0)
            except Raised as r:
                r.exc.message = f"{r.exc.message} (the way there: {_route(route)})"
                raise

        why = atimport.follow(self.importer, modules, std, within=self.within,
                              seen=self._seen, skip=self.walked,
                              roots=[p for p in self.paths if p], bounds=self.bounds)
        if why is not None:
            shown = ", ".join(unloadable[:4]) + (", …" if len(unloadable) > 4 else "")
            raise Budget(f"{why}, and what lies past it may import a module that does not "
                         f"load here ({shown})")

    def _std_spec(self, name: str) -> tuple[str, str, list[str] | None] | None:
        """A standard library module as the importer finds it (:meth:`_find`), a submodule
        in its package's folders (the package itself is modelled, its ``__path__`` not
        kept)."""
        parent, _, tail = name.rpartition(".")
        if not parent:
            return self._find(name)
        up = self._std_spec(parent)
        for folder in (up[2] or []) if up is not None else []:
            got = self._in_folder(folder, tail)
            if got is not None and got[0] != "ns":
                return got
        return None

    def _is_ext(self, name: str) -> bool:
        spec = self._std_spec(name)
        return spec is not None and spec[0] == "ext"

    def _std_imports(self, name: str, file: str, package: bool) -> list[str]:
        """The modules of its own package a standard library source imports at column 0
        (unguarded: ``importlib`` -> ``importlib.metadata``), and when such a line names an
        extension module, every module it certainly imports unguarded (an ``ImportError``
        handler around one lets its failure pass), as :mod:`moonpin.readers.pyast.imports`
        reads them: only those sources are parsed (a docstring's line is not an import)."""
        base = name if package else name.rpartition(".")[0]
        named = _column0_imports(self._text(file), base)
        own = [t for t in named if _own(name, package, t)]
        if not any(self._is_ext(t) for t in named if t not in own):
            return list(dict.fromkeys(own))
        from moonpin.preflight.pyimport.pychain import caught, imports_of

        version = self.version if self.version is not None else sys.version_info[:2]
        try:
            dumped = imports_of(file, (version[0], version[1]), self.within)
        except OSError:
            return []
        out = []
        for raw in dumped:
            if not (isinstance(raw, (tuple, list)) and len(raw) == 5
                    and isinstance(raw[0], str) and type(raw[2]) is int
                    and isinstance(raw[4], str)):
                continue
            module, _, level, _, guard = raw
            if caught("ImportError", guard):
                continue
            if level:
                if level - 1 > base.count(".") or not base:
                    continue
                up = base.rsplit(".", level - 1)[0] if level > 1 else base
                module = f"{up}.{module}" if module else up
            if module:
                out.append(module)
        return list(dict.fromkeys([*own, *out]))

    def _text(self, file: str) -> str:
        """A module's text, read once per chain (:meth:`_constant` reads the same)."""
        text = self._texts.get(file)
        if text is None:
            from moonpin.preflight.access.zipfs import read_source

            self._seen(file)
            try:
                text = read_source(file, cap=_CAP_SOURCE, what="Python source",
                                   within=self.within).decode("utf-8", "replace")
            except OSError:
                text = ""
            self._texts[file] = text
        return text

    def run_file(self, name: str, file: str, path: list[str] | None = None) -> ModuleValue:
        """Module ``name``'s top level, from ``file`` (``path``: a package's folders), run
        through the evaluator as the import would (raises :class:`Raised` when it fails)."""
        return self._run(name, file, path, 0)

    def _run(self, name: str, file: str, path: list[str] | None, tier: int) -> ModuleValue:
        try:
            big = os.stat(file).st_size > _CAP_SOURCE
        except OSError:
            big = False
        if big:  # past what is read here: judged on its head, else found and not followed
            from moonpin.preflight.pyimport.pychain import unread

            why = unread(file, self.within)
            if why is not None:
                raise self._raised(ExcValue("SyntaxError", f"{file}: {why.partition(': ')[2]}",
                                            name, file))
            raise Budget(f"{file} is past the {_CAP_SOURCE >> 20} MiB of source read here")
        mod = self.modules[name] = ModuleValue(name, "py", file, path, tier)
        if path is not None:
            mod.globals["__package__"] = name
        tree = self._parse(file)
        if tree is None:
            del self.modules[name]
            if self._denied(file):  # a check run as the worker's own user
                return self._bytecode_instead(name, file, path, tier)
            raise self._raised(ExcValue("SyntaxError", f"{file} cannot be read as Python"
                                        f"{self._why_not(file)}", name, file))
        try:
            self.ev.run_module(tree, mod)
        except Raised:
            self.modules.pop(name, None)  # a failed import leaves no module behind
            raise
        return mod

    def _denied(self, file: str) -> bool:
        """Whether this process may not open ``file`` (the kernel says so: a check run as
        the worker's own user); opened, never read, and only inside the image's root."""
        if self.within.outside(file):
            return False
        try:
            fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except PermissionError:
            return True
        except (OSError, ValueError):
            return False
        os.close(fd)
        return False

    def _bytecode_instead(self, name: str, file: str, path: list[str] | None,
                          tier: int) -> ModuleValue:
        """A source this process cannot read: CPython's ``SourceLoader.get_code`` only stats
        it and runs its bytecode cache when the cache is valid for it and readable
        (:func:`moonpin.preflight.pyimport.pycode.runs`), a module then known as a sourceless
        one is; otherwise it reads the source and raises ``PermissionError``."""
        from moonpin.preflight.pyimport import pycode

        version = self.version if self.version is not None else sys.version_info[:2]
        cache = pycode.runs(file, (version[0], version[1]))
        if cache is not None:
            self._seen(cache)
            mod = self.modules[name] = ModuleValue(name, "lazy", cache, path, tier)
            return mod
        raise self._raised(ExcValue("PermissionError", f"[Errno 13] Permission denied: "
                                    f"{file!r}", name, file))

    def _why_not(self, file: str) -> str:
        """What the parser says of a file that does not parse (``: invalid syntax (line
        1)``), or nothing when it cannot be read at all."""
        import ast

        from moonpin.preflight.access.zipfs import read_source

        try:
            ast.parse(read_source(file, cap=_CAP_SOURCE, what="Python source",
                                  within=self.within))
        except SyntaxError as e:
            return f": {e.msg}" + (f" (line {e.lineno})" if e.lineno else "")
        except (OSError, ValueError, RecursionError, MemoryError) as e:
            return f" ({type(e).__name__})"
        return ""

    def _parse(self, file: str) -> Any:
        import ast

        from moonpin.preflight.access.zipfs import read_source

        self._seen(file)
        try:
            return ast.parse(read_source(file, cap=_CAP_SOURCE, what="Python source",
                                         within=self.within))
        except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
            return None

    def _load_ext(self, name: str, file: str, path: list[str] | None,
                  by: ModuleValue) -> ModuleValue:
        mod = ModuleValue(name, "ext", file, path)
        if os.path.normpath(file) in self.stop:
            self.modules[name] = mod
            return mod
        out = self.proc.dlopen(file, self.flags)
        self.loads.append(Load(file, self.flags, out.error, self._blame(by), "import",
                               out.why))
        if out.fatal:
            raise Died(out.error)
        if out.error is not None:
            raise self._raised(ExcValue("ImportError", out.error, self._blame(by), file))
        if not self._exports_init(file, name.rpartition(".")[2]):
            message = (f"dynamic module does not define module export function "
                       f"(PyInit_{name.rpartition('.')[2]})")
            self.loads[-1].error = message
            self.loads[-1].why = ("symbol", file, f"PyInit_{name.rpartition('.')[2]}")
            raise self._raised(ExcValue("ImportError", message, self._blame(by), file))
        self.modules[name] = mod
        return mod

    def _exports_init(self, file: str, short: str) -> bool:
        t = self.proc.table(file)
        if t is None or not getattr(t, "has_symbols", False):
            return True  # no symbols to read: not judged
        from moonpin.readers.elf.symbols import SymbolError, gnu_hash

        name = f"PyInit_{short}".encode()
        try:
            return bool(t.defines(name, gnu_hash(name), None, None))  # type: ignore[attr-defined]
        except SymbolError:
            return True

    def _raised(self, exc: ExcValue) -> Raised:
        """``exc`` raised now: its context is the exception being handled, if any."""
        if self.ev.handling and self.ev.handling[-1] is not exc:
            exc.context = self.ev.handling[-1]
        return Raised(exc)

    def _blame(self, by: ModuleValue) -> str:
        return self.ev.running[-1].name if self.ev.running else by.name

    def import_from(self, module: ModuleValue, name: str, importer_module: ModuleValue) -> Any:
        if module.kind == "py" and name in module.globals:
            return module.globals[name]
        if module.path is not None:
            sub = f"{module.name}.{name}"
            if sub in self.modules:
                return self.modules[sub]
            if module.kind != "std" and self._find(sub) is not None:
                return self.import_module(sub, importer_module)
        if module.kind == "ns":
            raise self._raised(ExcValue("ImportError", f"cannot import name '{name}' from "
                                  f"'{module.name}' (unknown location)",
                                  self._blame(importer_module)))
        if module.kind == "lazy":
            return Lazy(module, name)  # read when used: most never are
        return self.module_attr(module, name)

    def module_attr(self, module: ModuleValue, name: str) -> Any:
        if name == "__file__":
            return module.file
        sub = self.modules.get(f"{module.name}.{name}")
        if sub is not None:
            return sub
        if module.kind in ("py", "std"):
            return module.globals.get(name, UNKNOWN)
        if module.kind == "lazy" and module.file and module.file.endswith(".py"):
            return self._constant(module.file, name)
        return module.globals.get(name, UNKNOWN) if name.startswith("__") else UNKNOWN

    def _constant(self, file: str, name: str) -> Any:
        """A Python module's top-level constant ``name`` (a line ``NAME = literal`` at
        column 0, the last one), read from its text, never run; a name also assigned
        indented (under a condition, in a function) or defined by ``def``/``class`` is
        unknown, and so is one the text does not assign. Only the lines that hold the
        name are read (torch's modules are long, and few of their names are asked)."""
        key = (file, name)
        if key in self._lazy:
            return self._lazy[key]
        text = self._text(file)
        value: Any = UNKNOWN
        at = text.find(name)
        while at >= 0:
            start = text.rfind("\n", 0, at) + 1
            stop = text.find("\n", at)
            stop = len(text) if stop < 0 else stop
            for line in text[start:stop].splitlines():  # its line breaks, not only \n
                got = _assigned(line, name) if name in line else _NOT_IT
                if got is _INDENTED:
                    self._lazy[key] = UNKNOWN
                    return UNKNOWN
                if got is not _NOT_IT:
                    value = got
            at = text.find(name, stop)
        self._lazy[key] = value
        return value

    def builtin(self, name: str) -> Any:
        if name in _EXC_NAMES:
            return ExcClass(name)
        return self._builtins.get(name, UNKNOWN)

    # ------------------------------------------------------------------ models
    def _make_builtins(self) -> dict[str, Any]:
        def known(v: Any) -> bool:
            return isinstance(v, (str, bytes, int, float, bool, tuple, list)) or v is None

        def one(fn: Any) -> Builtin:
            def call(a: list[Any], k: dict[str, Any]) -> Any:
                if len(a) != 1 or k or not known(a[0]):
                    return UNKNOWN
                try:
                    return fn(a[0])
                except (TypeError, ValueError):
                    return UNKNOWN
            return Builtin(getattr(fn, "__name__", "builtin"), call)

        def many(fn: Any) -> Builtin:
            return one(lambda v: fn(v) if isinstance(v, (list, tuple)) else UNKNOWN)

        return {
            "len": one(len), "str": one(str), "bool": one(bool), "list": one(list),
            "tuple": one(tuple), "sorted": one(sorted),
            "any": many(lambda v: True if any(x is True for x in v) else (
                UNKNOWN if any(x is UNKNOWN for x in v) else any(v))),
            "all": many(lambda v: False if any(x is False for x in v) else (
                UNKNOWN if any(x is UNKNOWN for x in v) else all(v))),
            "print": Builtin("print", lambda a, k: None),
            "open": Builtin("open", self._open),
            "__import__": Builtin("__import__", lambda a, k: UNKNOWN),
        }

    def _open(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if args and args[0] == "/proc/self/maps":
            text = "\n".join(os.path.realpath(o.path) for o in self.proc.objects)
            return _Obj({"read": Builtin("read", lambda a, k: text),
                         "readlines": Builtin("readlines", lambda a, k: text.splitlines(True))})
        return UNKNOWN

    def _env(self, name: Any, default: Any = None) -> Any:
        if not isinstance(name, str):
            return UNKNOWN
        value = os.environ.get(name)
        self.env_read[name] = value
        return default if value is None else value

    def _std(self, name: str) -> ModuleValue:
        mod = ModuleValue(name, "std", None, [] if "." not in name else None)
        g = mod.globals
        fs = self._fs_check
        if name == "os":
            g.update(sep="/", pathsep=":", name="posix", curdir=".", RTLD_LAZY=ldproc.RTLD_LAZY,
                     RTLD_NOW=ldproc.RTLD_NOW, RTLD_GLOBAL=ldproc.RTLD_GLOBAL, RTLD_LOCAL=0,
                     getenv=Builtin("getenv", lambda a, k: self._env(*a, **k)),
                     environ=_Environ(self._env),
                     path=self._std("os.path"),
                     **{f: self._own(f) for f in ("getuid", "geteuid", "getgid", "getegid",
                                                  "cpu_count")})
        elif name == "os.path":
            g.update(sep="/", **{f: self._pure(getattr(os.path, f)) for f in (
                "join", "dirname", "basename", "normpath", "splitext", "split", "isabs")},
                abspath=self._pure(os.path.abspath), realpath=self._pure(os.path.realpath),
                exists=fs(os.path.exists), isfile=fs(os.path.isfile), isdir=fs(os.path.isdir),
                lexists=fs(os.path.lexists))
        elif name == "sys":
            bits64 = self.proc.machine in ("x86_64", "aarch64", "ppc64le", "s390x", "riscv64")
            g.update(platform="linux", byteorder="little", path=list(self.paths),
                     version_info=(_VersionInfo(self.version) if self.version is not None
                                   else UNKNOWN),
                     maxsize=(1 << 63) - 1 if bits64 else UNKNOWN,
                     implementation=_Obj({"name": "cpython"}),
                     executable=self.python if self.python is not None else UNKNOWN,
                     getdlopenflags=Builtin("getdlopenflags", lambda a, k: self.flags),
                     setdlopenflags=Builtin("setdlopenflags", self._set_flags))
        elif name == "platform":
            machine = self.proc.machine
            g.update(system=Builtin("system", lambda a, k: "Linux"),
                     machine=Builtin("machine", lambda a, k: machine),
                     python_implementation=Builtin("python_implementation",
                                                   lambda a, k: "CPython"))
        elif name == "ctypes":
            cdll = Builtin("CDLL", self._cdll)
            g.update(CDLL=cdll, PyDLL=cdll, RTLD_GLOBAL=ldproc.RTLD_GLOBAL, RTLD_LOCAL=0,
                     DEFAULT_MODE=0, cdll=_Obj({"LoadLibrary": cdll}),
                     pydll=_Obj({"LoadLibrary": cdll}))
        elif name == "glob":
            g.update(glob=Builtin("glob", self._glob), iglob=Builtin("iglob", self._glob))
        elif name == "importlib":
            g.update(import_module=Builtin("import_module", self._import_module))
        elif name == "importlib.metadata":
            g.update(distribution=Builtin("distribution", self._distribution))
        elif name == "pkgutil":
            g.update(extend_path=Builtin("extend_path", self._extend_path))
        elif name == "typing":
            g.update(TYPE_CHECKING=False)
        elif name == "textwrap":
            import textwrap

            g.update(dedent=self._pure(textwrap.dedent))
        return mod

    @staticmethod
    def _own(name: str) -> Builtin:
        """``os.<name>()`` of this process: the worker's (the check runs as it, on its
        machine)."""
        value = getattr(os, name)()
        return Builtin(name, lambda a, k: UNKNOWN if a or k else value)

    def _pure(self, fn: Any) -> Builtin:
        def call(a: list[Any], k: dict[str, Any]) -> Any:
            if k or not a or not all(isinstance(x, str) for x in a):
                return UNKNOWN
            try:
                return fn(*a)
            except (TypeError, ValueError):
                return UNKNOWN
        return Builtin(getattr(fn, "__name__", "os.path"), call)

    def _fs_check(self, fn: Any) -> Builtin:
        def call(a: list[Any], k: dict[str, Any]) -> Any:
            if len(a) != 1 or k or not isinstance(a[0], str):
                return UNKNOWN
            self._seen(a[0])
            return bool(fn(a[0]))
        return Builtin(getattr(fn, "__name__", "os.path"), call)

    def _set_flags(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if len(args) == 1 and isinstance(args[0], int) and not isinstance(args[0], bool):
            self.flags = args[0]
        return None

    def _glob(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        pattern = args[0] if args else kwargs.get("pathname")
        if not isinstance(pattern, str) or kwargs.get("recursive"):
            return UNKNOWN
        import glob

        fixed = pattern
        while glob.has_magic(fixed):
            fixed = os.path.dirname(fixed)
        self._seen(fixed or ".")
        got = glob.glob(pattern)
        for g in got:
            self._seen(os.path.dirname(g))
        return got

    def _distribution(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """``importlib.metadata.distribution(name)``: the first ``<name>-*.dist-info`` on
        the search path, as ``MetadataPathFinder`` finds it (names compared normalised), with
        ``locate_file(path)``: that folder's parent joined with ``path`` (a ``Path``:
        ``str()`` and ``.exists()`` are followed). Not found: not followed (its
        ``PackageNotFoundError`` is not modelled)."""
        name = args[0] if args else kwargs.get("distribution_name")
        if not isinstance(name, str) or not name:
            return UNKNOWN

        def norm(n: str) -> str:
            return n.lower().replace("-", "_").replace(".", "_")

        want = norm(name)
        for folder in self.paths:
            if not folder:
                continue
            self._seen(folder)
            try:
                names = sorted(os.listdir(folder))
            except OSError:
                continue
            for n in names:
                if n.endswith(".dist-info") and norm(n[:-len(".dist-info")].partition("-")[0]) \
                        == want:
                    def locate(a: list[Any], k: dict[str, Any], at: str = folder) -> Any:
                        return self._located(at, a, k)

                    return _Obj({"locate_file": Builtin("locate_file", locate)})
        return UNKNOWN

    def _located(self, folder: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        path = args[0] if args else kwargs.get("path")
        if not isinstance(path, str):
            return UNKNOWN
        return _PathStr(os.path.join(folder, path),
                        exists=self._fs_check(os.path.exists))

    def _extend_path(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """``pkgutil.extend_path(path, name)``: ``path`` with every ``name`` portion of the
        parent's search path (``sys.path`` for a top-level package), in order, and the
        lines of ``name.pkg`` files there."""
        path = args[0] if args else kwargs.get("path")
        name = args[1] if len(args) > 1 else kwargs.get("name")
        if not isinstance(path, list) or not isinstance(name, str):
            return path if not isinstance(name, str) else UNKNOWN
        parent, _, final = name.rpartition(".")
        search: Any = self.paths
        if parent:
            up = self.modules.get(parent)
            search = up.globals.get("__path__") if up is not None else None
            if not isinstance(search, list):
                return list(path)
        out = list(path)
        for entry in search:
            if not isinstance(entry, str) or not os.path.isdir(entry):
                continue
            got = self._in_folder(entry, final)
            out.extend(p for p in (got[2] or () if got is not None else ()) if p not in out)
            pkgfile = os.path.join(entry, name + ".pkg")
            if os.path.isfile(pkgfile):
                self._seen(pkgfile)
                from moonpin.preflight.pyimport.metapath import pkg_lines

                out.extend(pkg_lines(pkgfile, self.within))
        return out

    def _import_module(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        name = args[0] if args else kwargs.get("name")
        if not isinstance(name, str):
            return UNKNOWN
        running = self.ev.running[-1] if self.ev.running else ModuleValue("__main__", "py")
        return self.import_module(name, running)

    def _cdll(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        name = args[0] if args else kwargs.get("name")
        mode = args[1] if len(args) > 1 else kwargs.get("mode", 0)
        handle = args[2] if len(args) > 2 else kwargs.get("handle")
        if handle is not None or name is None:
            return _Obj({})  # an existing handle, or the program itself: nothing loaded
        if not isinstance(name, str):
            return UNKNOWN
        if not isinstance(mode, int) or isinstance(mode, bool):
            mode = 0
        mode |= ldproc.RTLD_NOW  # ctypes (Modules/_ctypes/callproc.c: py_dl_open)
        if self.root is not None and name.startswith("/"):
            # a path the code names (a literal: an image path) or one made from a module's
            # __file__ (a host path under the root): the file the worker opens, under the root
            from moonpin.preflight.access.chroot import host_paths

            name = next(iter(host_paths(self.root, [name])), name)
        if "/" in name:
            self._seen(name)
        out = self.proc.dlopen(name, mode)
        module = self.ev.running[-1].name if self.ev.running else ""
        self.loads.append(Load(name, mode, out.error, module, "ctypes", out.why))
        if out.fatal:
            raise Died(out.error)
        if out.error is not None:
            raise self._raised(ExcValue("OSError", out.error, module, name))
        return _Obj({})
