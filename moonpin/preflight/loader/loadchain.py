"""The native side of ``import mooncake.pg`` (or any module), judged from files: what the
import chain loads before the builds (:mod:`moonpin.preflight.pyimport.pyrun`: mooncake's
``__init__`` and what it imports, guarded or not, then ``import torch``: its
``ctypes.CDLL`` of ``libtorch_global_deps.so`` with ``RTLD_GLOBAL``, the CUDA libraries it
preloads, ``torch._C``), then each build ``dlopen``-ed into that process as the loader
would (:mod:`moonpin.preflight.loader.ldproc`).

A library is found by name only when the chain loaded it or ld.so's own search finds it:
torch's ``lib/`` folder and the ``nvidia/*/lib`` folders are not searched for a build
unless its own paths name them. The answer is kept in the file-facts memo under the
stamps of every file and folder it read (:meth:`moonpin.kb.cache.FileMemo.get_traced`): a
warm start pays one ``stat`` for each.

Only ``os`` at import: this runs at worker start.
"""

from __future__ import annotations

import os

from moonpin.kb.cache import facts_memo
from moonpin.preflight.access.chroot import host_paths, image_path
from moonpin.preflight.access.confined import Confined
from moonpin.preflight.loader import ldso
from moonpin.preflight.loader.findings import Findings

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from moonpin.preflight.access.identity import Identity
    from moonpin.preflight.env.context import Run
    from moonpin.preflight.loader import ldproc
    from moonpin.preflight.pyimport.atimport import Bounds
    from moonpin.preflight.pyimport.metapath import Importer
    from moonpin.preflight.pyimport.pyeval import ModuleValue
    from moonpin.preflight.pyimport.pyrun import Chain

__all__ = ["Report", "native_load", "owned", "release"]


class Report(Findings):
    """What the import and the builds' loads did.

    ``chain_error``: (the module whose code failed, the exception's class, its message,
    the file a failed load named or where it was raised), when the import fails before
    the builds are loaded; ``loads``: (path, mode, error, module, how) of each load the
    chain made; what the builds' loads found (:class:`moonpin.preflight.loader.findings.
    Findings`: ``missing``, ``bad``, ``versions``, ``unbound``, ``host``, ``host_missing``
    and the counts, of the builds and the image's objects their loads walk); ``note``:
    why the chain was not followed to its end (None: it was)."""

    __slots__ = ("chain_error", "cwd", "loads", "note")

    def __init__(self) -> None:
        super().__init__()
        self.chain_error: tuple[str, str, str, str] | None = None
        self.loads: list[tuple[str, int, str | None, str, str, tuple[str, str, str]]] = []
        self.note: str | None = None
        #: the working folder, when a search path used it (an empty or relative entry)
        self.cwd: str | None = None

    def dump(self) -> tuple[object, ...]:
        return (self.chain_error, tuple(self.loads), self.missing, self.bad,
                tuple(self.versions), tuple(self.unbound), tuple(self.host),
                self.host_missing, self.count, self.objects, self.refs, self.bound, self.note,
                self.cwd)

    @classmethod
    def load(cls, value: object) -> Report | None:
        r = cls()
        try:
            if not isinstance(value, tuple) or len(value) != 14:
                return None
            (err, loads, missing, bad, versions, unbound, host, host_missing, count, objects,
             refs, bound, note, cwd) = value
            r.chain_error = None if err is None else (str(err[0]), str(err[1]), str(err[2]),
                                                      str(err[3]))
            r.loads = [(str(p), int(m), None if e is None else str(e), str(mod), str(how),
                        (str(why[0]), str(why[1]), str(why[2])))
                       for p, m, e, mod, how, why in loads]
            r.missing = {str(k): str(v) for k, v in missing.items()}
            r.bad = {str(k): str(v) for k, v in bad.items()}
            r.versions = [(str(o), str(v), str(p), str(n)) for o, v, p, n in versions]
            r.unbound = [(str(o), str(s), str(v), tuple(str(x) for x in w))
                         for o, s, v, w in unbound]
            r.host = [str(h) for h in host]
            r.host_missing = {str(k): str(v) for k, v in host_missing.items()}
            if not all(type(n) is int for n in (count, objects, refs, bound)):
                return None
            r.count, r.objects, r.refs, r.bound = count, objects, refs, bound
            r.note = None if note is None else str(note)
            r.cwd = None if cwd is None else str(cwd)
        except (TypeError, ValueError, AttributeError):
            return None
        return r


def owned(path: str, paths: Sequence[str], root: str | None = None) -> bool:
    """Whether ``path`` is under an import folder (an image's root itself, the working
    folder of ``python -m`` in ``WORKDIR /``, holds everything and is not counted)."""
    return _under(path, _folders(paths, root))


def _folders(paths: Sequence[str], root: str | None) -> tuple[str, ...]:
    """The import folders :func:`owned` counts, each as its real and its normal path with
    a final ``/`` (``str.startswith`` takes them all at once)."""
    top = os.path.realpath(root) if root is not None else None
    out: list[str] = []
    for sp in paths:
        real = os.path.realpath(sp)
        if top is None or real != top:
            out += [real.rstrip("/") + "/", os.path.normpath(sp).rstrip("/") + "/"]
    return tuple(out)


def _under(path: str, folders: tuple[str, ...]) -> bool:
    normal = os.path.normpath(path)
    # a link is its own too: the path as named, and the file it leads to
    return normal.startswith(folders) or os.path.realpath(path).startswith(folders)


def native_load(builds: Sequence[str], paths: Sequence[str], module: str | None, *,
                python: str | None, suffixes: Sequence[str] = (".so",),
                machine: str | None = None, root: str | None = None,
                ld_path: Sequence[str] | None = None, sites: Sequence[str] | None = None,
                version: tuple[int, int] | None = None, first: Sequence[str] = (),
                after: Sequence[str] = (), complete: bool = True,
                run: Run | None = None, mode: int | None = None,
                importer: Importer | None = None,
                preload: Sequence[str] | None = None, runs: Sequence[str] = (),
                bounds: Bounds | None = None, user: Identity | None = None,
                customize: Sequence[str] = ("sitecustomize",)) -> Report:
    """``import module`` in ``python`` over ``paths`` up to the builds, then each build
    ``dlopen``-ed (module doc); ``module`` None: nothing is imported. ``first``: modules
    imported before it (a build that is the module itself, 0.3.7's ``ep``, needs torch
    loaded: SGLang imports torch first), ``after``: after it. ``root``: an image's root
    folder; ``ld_path``: its ``LD_LIBRARY_PATH`` (default: this process's); ``complete``:
    ``paths`` are the interpreter's whole ``sys.path``. ``run``: the check under way,
    whose children may have computed the load ahead (:mod:`moonpin.preflight.prefetch`), and
    where a child records what it computes. ``mode``: the builds' ``dlopen`` flags (default
    ``RTLD_NOW``, as an extension import has them). ``importer``: the check's one model of
    the interpreter's importer over ``paths`` (:attr:`moonpin.preflight.env.context.Context.
    importer`), which the import chain finds its modules with (None: one is made).
    ``preload``: the ``LD_PRELOAD`` entries the interpreter starts with (an image's: names,
    or host paths under ``root``; default: this process's for this machine, none for an
    image), mapped at its start before what it needs, then ``/etc/ld.so.preload``'s.
    ``runs``: packages whose own import is not modelled here (a rule reads it) but whose
    code run at import by calls is followed after the builds load
    (:meth:`moonpin.preflight.pyimport.pyrun.Chain.at_import`: the standard library's
    extension modules it reaches, loaded into the same process). ``bounds``: how far the
    code run at import is followed (None: the walk's defaults). ``user``: who the
    interpreter runs as, whose reading of ``/etc/ld.so.preload`` ld.so's is (None: this
    process's). ``customize``: the modules ``site`` imports by name at the start
    (:func:`moonpin.preflight.pyimport.sitefiles.startup_imports`)."""
    machine = machine or os.uname().machine
    pre = ("\x02".join(preload) if preload is not None
           else os.environ.get("LD_PRELOAD", "") if root is None else "")
    ld = (ldso.env_ld_path(_interpreter(python, None) if root is None else None)
          if ld_path is None else list(ld_path))
    # what the import before the builds is computed from: the key of the process a check
    # keeps for it (``Run.processes``), and the memo key's first part (one reading of each)
    key_of_import = (machine, python or "", tuple(first), tuple(ld), root or "",
                     tuple(suffixes), tuple(paths),
                     os.environ.get("MOONPIN_CHECK_SYSTEM_LIBS", "\x01"), pre, complete,
                     (user.uid, user.gids) if user is not None else None, tuple(customize)) + (
                         (repr(bounds),) if bounds is not None else ())
    key = repr(("native-v5", key_of_import, module or "", tuple(after), tuple(builds), mode)
               + ((tuple(runs),) if runs else ()))

    def compute() -> tuple[object, set[str], dict[str, str | None]]:
        ahead = _prefetched(run, key) if run is not None else None
        if ahead is not None:
            return ahead
        shared = run.processes if run is not None and not module and not after else None
        got = _compute(builds, paths, [*first, *([module] if module else []), *after],
                       module or "", python, suffixes, machine, root, ld, sites, version,
                       complete, mode, importer, shared,
                       repr((key_of_import, sites, version, id(importer))), preload, runs,
                       bounds, user, customize)
        if run is not None and run.record is not None:
            run.record[key] = got
        return got

    within = Confined(root)  # a link out of the image root: computed, never kept
    # what the answer is filed under (no builds: only the import chain, filed under the root)
    anchor = builds[0] if builds else (root or os.sep)
    got = facts_memo().get_traced(key, anchor, compute,
                                  lambda v: Report.load(v) is not None, within=within.root)
    out = Report.load(got)
    assert out is not None
    if out.cwd is not None:  # remembered for one working folder: this one's is its own
        try:
            here = os.getcwd()
        except OSError:
            here = ""
        if out.cwd != here:
            key += f"\0cwd\0{here}"
            out = Report.load(facts_memo().get_traced(key, anchor, compute,
                                                      lambda v: Report.load(v) is not None,
                                                      within=within.root))
            assert out is not None
    return out


def _prefetched(run: Run, key: str) -> tuple[object, set[str], dict[str, str | None]] | None:
    """What a child of ``run`` computed ahead for ``key`` (everything the load is computed
    from), when one did and its answer has the shape :func:`_compute` returns; else None."""
    while run.pending:
        got = run.pending.pop().take()
        if type(got) is dict:
            run.ready.update(got)
    ahead = run.ready.pop(key, None)
    if (type(ahead) is tuple and len(ahead) == 3 and type(ahead[1]) is set
            and all(type(f) is str for f in ahead[1]) and type(ahead[2]) is dict
            and Report.load(ahead[0]) is not None):
        return ahead  # type: ignore[return-value]
    return None


class _Imported:
    """The process an import chain left (:func:`_imported`): the loader's state, what the
    chain read (``trace``, ``env_read``), the loads it made, and how it ended
    (``chain_error``, ``note``: as :class:`Report` says them)."""

    __slots__ = ("chain", "chain_error", "env_read", "loads", "note", "proc", "trace")

    def __init__(self, proc: ldproc.Process, trace: ldso.Trace) -> None:
        self.proc = proc
        #: the import chain that built it (None: the interpreter never ran)
        self.chain: Chain | None = None
        self.trace = trace
        self.chain_error: tuple[str, str, str, str] | None = None
        self.note: str | None = None
        self.loads: list[tuple[str, int, str | None, str, str, tuple[str, str, str]]] = []
        self.env_read: dict[str, str | None] = {}

    def close(self) -> None:
        self.proc.close()

    def holds(self, builds: Sequence[str]) -> bool:
        """Whether loading ``builds`` into a copy of this process is what a chain stopped
        before them would have given: the chain loaded none of them (it was computed
        without stopping there, and without their symbols judged as its own)."""
        wanted = {os.path.normpath(b) for b in builds}
        return not any(os.path.normpath(p) in wanted
                       for p in [*(o.path for o in self.proc.objects),
                                 *(x[0] for x in self.loads)])


def _imported(paths: Sequence[str], modules: Sequence[str], request: str, python: str | None,
              suffixes: Sequence[str], machine: str, root: str | None, ld: Sequence[str],
              sites: Sequence[str] | None, version: tuple[int, int] | None, complete: bool,
              importer: Importer | None, stop: Sequence[str],
              preload: Sequence[str] | None = None, bounds: Bounds | None = None,
              user: Identity | None = None, customize: Sequence[str] = ("sitecustomize",)
              ) -> _Imported:
    """The interpreter started and ``modules`` imported in it (module doc), up to the files
    in ``stop`` (not loaded: the builds its caller loads itself); the process is the
    caller's to close."""
    from moonpin.preflight.loader import ldproc
    from moonpin.preflight.pyimport.pyeval import Budget, Died, ModuleValue, Raised
    from moonpin.preflight.pyimport.pyrun import Chain

    trace: set[str] = set()
    traced = ldso.Trace(trace)
    if root is not None:
        cache_file = ldso.ld_cache_file(root)
        cache = ldso.ld_cache_paths(cache_file, Confined(root))
    elif "MOONPIN_CHECK_SYSTEM_LIBS" in os.environ:
        cache_file, cache = "", {}
    else:
        cache_file = "/etc/ld.so.cache"
        cache = ldso.ld_cache_paths()
    if cache_file:
        trace.add(cache_file)
    mine = _Owned(paths, root, stop)
    proc = ldproc.Process(machine=machine, root=root, ld_path=host_paths(root, ld),
                          cache=cache, owned=mine, trace=traced)
    out = _Imported(proc, traced)
    try:
        exe = _interpreter(python, root)
        if exe is not None:  # LD_PRELOAD's objects, then /etc/ld.so.preload's (elf/rtld.c)
            pre = (list(preload) if preload is not None else
                   ldso.env_preload(exe, traced) if root is None else [])
            proc.start(exe, [*pre, *(p.path for p in ldso.preload_file(
                root, image_path(root, exe) if root is not None else exe, traced, user))])
            if proc.start_error is not None:  # the interpreter never runs: nothing imports
                out.chain_error = (modules[0] if modules else os.path.basename(exe),
                                   "an ld.so error", "the interpreter does not start: "
                                   f"{proc.start_error}", exe)
                return out
        chain = Chain(proc, paths, request=request, suffixes=suffixes,
                      sites=sites, root=root, version=version, python=python, stop=stop,
                      trace=trace, complete=complete, importer=importer, bounds=bounds)
        main = ModuleValue("__main__", "py", tier=0)
        try:
            _site_imports(chain, main, sites, root, trace, customize)
            if modules:
                for m in modules:
                    chain.import_module(m, main)
                chain.at_import(modules)  # the code they run at import by calls, followed
        except Raised as r:
            e = r.exc
            out.chain_error = (e.module, e.cls, _said(e), e.path)
        except Died as d:
            loads = [x for x in chain.loads if x.error is not None]
            path = loads[-1].path if loads else ""
            module = loads[-1].module if loads else modules[-1] if modules else ""
            out.chain_error = (module, "a crash", str(d), path)
        except Budget as b:
            out.note = f"the import chain was not followed to its end ({b})"
        except (RecursionError, MemoryError) as e:  # a source nested past the stack
            out.note = ("the import chain was not followed to its end (a module nests "
                        f"too deep to follow: {type(e).__name__})")
        out.loads = [(x.path, x.mode, x.error, x.module, x.how, x.why) for x in chain.loads]
        out.env_read = chain.env_read
        out.chain = chain
    except BaseException:
        proc.close()  # each table's mapping holds a descriptor: not left to the collector
        raise
    return out


def _site_imports(chain: Chain, main: ModuleValue, sites: Sequence[str] | None, root: str | None,
                  trace: set[str], customize: Sequence[str]) -> None:
    """What ``site`` imports at the interpreter's start (``.pth`` ``import`` lines,
    ``sitecustomize``, ``usercustomize``: :func:`moonpin.preflight.pyimport.sitefiles.
    startup_imports`), imported into the process before anything else, as the worker's
    start does: a library their code loads (``ctypes.CDLL``) is mapped when the extensions
    load. ``site`` reports an exception of one and goes on, so one is no failure here (a
    crash is: the caller's)."""
    from moonpin.preflight.pyimport.pyeval import Budget, Raised
    from moonpin.preflight.pyimport.sitefiles import pth_files, startup_imports

    if not sites:
        return
    within = Confined(root)  # the folders too: a .pth file added there is another start
    trace.update([*sites, *(f for s in sites for f in pth_files(s, within))])
    for name, _ in startup_imports(sites, within, customize):
        try:
            chain.import_module(name, main)
        except (Raised, Budget):
            continue


class _Owned:
    """Whether an object's symbols are judged (``Process.owned``): one of the ``builds``, or
    under an import folder (:func:`owned`), each path's answer kept (a check asks of the
    same few hundred objects again for every load)."""

    __slots__ = ("builds", "folders", "known")

    def __init__(self, paths: Sequence[str], root: str | None, builds: Sequence[str] = (),
                 shared: _Owned | None = None) -> None:
        self.builds = set(builds)
        self.folders: tuple[str, ...] = (shared.folders if shared is not None
                                         else _folders(paths, root))
        self.known: dict[str, bool] = shared.known if shared is not None else {}

    def __call__(self, path: str) -> bool:
        if path in self.builds:
            return True
        hit = self.known.get(path)
        if hit is None:
            hit = self.known[path] = _under(path, self.folders)
        return hit


def _compute(builds: Sequence[str], paths: Sequence[str], modules: Sequence[str],
             request: str, python: str | None, suffixes: Sequence[str], machine: str,
             root: str | None,
             ld: Sequence[str], sites: Sequence[str] | None,
             version: tuple[int, int] | None, complete: bool, mode: int | None = None,
             importer: Importer | None = None, shared: dict[str, object] | None = None,
             base: str = "", preload: Sequence[str] | None = None, runs: Sequence[str] = (),
             bounds: Bounds | None = None, user: Identity | None = None,
             customize: Sequence[str] = ("sitecustomize",)
             ) -> tuple[object, set[str], dict[str, str | None]]:
    """``modules`` imported, then ``builds`` loaded (:func:`native_load`). ``shared``: where
    the check keeps the processes its imports built (``Run.processes``), ``base`` the key
    of this one's: the builds are loaded into a copy of that process (``import torch``
    modelled once per check, as the worker's one process imports it once), which is kept
    for the next load with the same import."""
    from moonpin.preflight.loader import ldproc

    after = shared.get(base) if shared is not None else None
    reused = isinstance(after, _Imported)
    if not isinstance(after, _Imported) and shared is not None:
        after = _imported(paths, modules, request, python, suffixes, machine, root, ld,
                          sites, version, complete, importer, (), preload, bounds, user,
                          customize)
        shared[base] = after
    if isinstance(after, _Imported) and after.holds(builds):
        if reused:  # what it read, read again: a trace around this load sees it too
            _touch(after.trace.paths)
        traced = ldso.Trace(set(after.trace.paths))
        traced.used_cwd = after.trace.used_cwd
        owner = after.proc.owned
        proc = after.proc.fork(_Owned(paths, root, builds, owner if isinstance(
            owner, _Owned) else None), traced)
        env_read = dict(after.env_read)
    else:  # a load of its own: the chain stops before the builds
        after = _imported(paths, modules, request, python, suffixes, machine, root, ld,
                          sites, version, complete, importer, builds, preload, bounds, user,
                          customize)
        proc, traced, env_read = after.proc, after.trace, after.env_read
    try:
        out = Report()
        out.chain_error, out.note, out.loads = after.chain_error, after.note, after.loads
        if out.chain_error is None:
            for build in builds:
                got = proc.dlopen(build, ldproc.RTLD_NOW if mode is None else mode)
                _merge(out, got)
                counted = [o for o in got.searchlist if o.path == build
                           or _image_object(o.path, paths)]
                out.objects += len(counted)
                out.count += sum(len(o.needed) for o in counted)
            out.host_missing = dict(proc.host_missing)
            if runs and after.chain is not None and not (
                    out.missing or out.bad or out.versions or out.unbound):
                _at_import(out, after.chain, proc, runs, builds, traced.paths)
        if traced.used_cwd:
            try:
                out.cwd = os.getcwd()
            except OSError:
                out.cwd = ""
        return out.dump(), traced.paths, env_read
    finally:
        proc.close()  # each table's mapping holds a descriptor: not left to the collector


def _at_import(out: Report, chain: Chain, proc: ldproc.Process, runs: Sequence[str],
               builds: Sequence[str], trace: set[str]) -> None:
    """The code importing ``runs`` runs by calls, followed in ``proc`` (the process
    ``chain`` left, or a copy of it, the builds loaded): its failure is the import's."""
    from moonpin.preflight.pyimport.pyeval import Budget, Raised
    from moonpin.preflight.pyimport.pyrun import Chain

    unloadable = chain.unloadable_std()
    if not unloadable:
        return
    more = Chain(proc, chain.paths, request="", suffixes=chain.suffixes, sites=chain.sites,
                 root=chain.root, version=chain.version, python=chain.python, stop=builds,
                 trace=trace, complete=chain.complete, importer=chain.importer,
                 unloadable=unloadable, bounds=chain.bounds)
    more.walked.update(chain.walked)
    try:
        more.at_import(runs)
    except Raised as r:
        e = r.exc
        out.chain_error = (e.module, e.cls, _said(e), e.path)
    except Budget as b:  # said whole: its line is "not judged" (extensions.verdict)
        out.note = str(b)
    except (RecursionError, MemoryError) as e:
        out.note = f"the code run at import was not followed to its end ({type(e).__name__})"
    out.loads = [*out.loads, *((x.path, x.mode, x.error, x.module, x.how, x.why)
                               for x in more.loads)]  # not the shared process's list


def release(run: Run) -> None:
    """Close the processes ``run`` keeps for the loads after one import (their symbol
    tables unmapped): the loads that share them are done."""
    for p in run.processes.values():
        p.close()
    run.processes.clear()


def _touch(paths: set[str]) -> None:
    """``stat`` each of ``paths``: a process kept from an earlier load is read again by
    nothing, and a trace of reads around this one (the extensions' kept lines) must still
    see what it was built from."""
    for p in paths:
        try:
            os.stat(p)
        except (OSError, ValueError):
            pass


def _image_object(path: str, paths: Sequence[str]) -> bool:
    """Whether a library is one the image's mooncake ships (its own folder, or a ``*.libs``
    folder a repaired wheel vendors): counted with the build in the report."""
    if os.path.basename(os.path.dirname(path)).endswith(".libs"):
        return True
    folder = os.path.normpath(path)
    return any(folder.startswith(os.path.join(os.path.normpath(sp), "mooncake") + "/")
               for sp in paths)


def _said(e: object) -> str:
    """An exception's message, on one line, with the one it was raised while handling."""
    message = getattr(e, "message", None)
    text = " ".join(message.split()) if isinstance(message, str) else ""
    if len(text) > 600:
        text = text[:600] + "…"
    context = getattr(e, "context", None)
    if context is not None:
        text = (text + "; " if text else "") + (f"raised while handling "
                                                f"{getattr(context, 'cls', '')}: "
                                                + _said(context))
    return text or "(no message)"


def _interpreter(python: str | None, root: str | None) -> str | None:
    if python is None:
        return None
    if root is not None:
        mapped = host_paths(root, [python])
        exe = mapped[0] if mapped else None
    else:
        exe = os.path.realpath(python)
    return exe if exe is not None and os.path.isfile(exe) else None


def _merge(out: Report, got: ldproc.Outcome) -> None:
    if got.fatal and got.error is not None and got.searchlist:  # ld.so aborts the process
        out.bad.setdefault(got.searchlist[0].path, "loading it makes ld.so abort the "
                           f"process ({got.error})")
    for k, v in got.missing.items():
        out.missing.setdefault(k, v)
    for k, v in got.bad.items():
        out.bad.setdefault(k, v)
    out.versions += [v for v in got.versions if v not in out.versions]
    out.unbound += got.unbound
    out.host += [h for h in got.host if h not in out.host]
    out.refs += got.refs
    out.bound += got.bound
