"""The check's library resolution: every shared library a build needs, and those
its shipped libraries need, found and mapped as the dynamic loader would
(:mod:`moonpin.preflight.loader.ldso`),
with the fix line that names what provides a missing one: the judged image's own records'
(:mod:`moonpin.preflight.judge.owners`), as for every other load."""

from __future__ import annotations

import os

from moonpin.preflight.installed.image_facts import CUDART
from moonpin.preflight.result import CheckResult

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from moonpin.preflight.access.confined import Confined
    from moonpin.preflight.env.context import Context
    from moonpin.preflight.judge.fixes import Fixer
    from moonpin.preflight.loader.loadchain import Report

__all__ = ["chain_mend", "check_libraries", "load_in", "load_problem", "provider_hint",
           "site_loads", "started_loads", "torch_first", "torch_import"]


#: A CUDA runtime a build needs beside a torch built without CUDA: torch's CUDA build
#: brings it (its nvidia-cuda-runtime requirement), not another distribution of the build's.
_CPU_TORCH_CUDART = ("the CUDA runtime, which a CUDA build of torch brings (its "
                     "nvidia-cuda-runtime requirement): this torch is CPU-only")
#: torch's own CUDA libraries, and what their absence says when no RECORD lists them gone
_TORCH_CUDA = ("libc10_cuda.so", "libtorch_cuda.so")
_TORCH_CUDA_LIB = ("a CUDA build of torch ships it, and no RECORD lists it gone: this torch is "
                   "CPU-only")


def provider_hint(error: str) -> str | None:
    """What a loader's message ``error`` says is missing, in words (the deep probe's real
    import), or None: who provides it is the light check's line, from the image's records."""
    import re

    m = re.search(r"(lib[\w.+-]+\.so[\w.]*): cannot open shared object file", error)
    if not m:
        return None
    return f"{m.group(1)} is missing: install what provides it in the image"


def _within(path: str, folder: str) -> bool:
    """``PurePath(path).is_relative_to(folder)``: lexical, as pathlib has it."""
    path, folder = os.path.normpath(path), os.path.normpath(folder)
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _owner(path: str, paths: Sequence[str], project: str) -> str | None:
    """Which package's files ``path`` is: ``project``'s (the builds' package, mooncake: its
    folder, or a ``*.libs`` folder a repaired wheel vendors), ``torch``, ``nvidia`` (torch's
    CUDA packages), or None."""
    for sp in paths:
        for name in (project, "torch", "nvidia"):
            if name and _within(path, os.path.join(sp, name)):
                return name
        if _within(path, sp) and os.path.basename(os.path.dirname(path)).endswith(".libs"):
            return project
    return None


def _fix_for(path: str, paths: Sequence[str], fixer: Fixer | None, project: str) -> str:
    """What puts the file at ``path`` back: the distribution whose files it is."""
    owner = _owner(path, paths, project)
    if owner == "torch" and fixer is not None:
        return fixer.torch_files()
    if owner == "nvidia" and fixer is not None:
        return fixer.torch_files(deps=True)
    if owner and owner == project:
        return (f"reinstall the {project} distribution that ships it (see the install line "
                "above), or restore the file")
    return "restore the file: reinstall what installed it in the image"


def load_in(ctx: Context, builds: Sequence[str], module: str | None = None, *,
            first: Sequence[str] = (), after: Sequence[str] = (), mode: int | None = None,
            runs: Sequence[str] = ()) -> Report:
    """``builds`` loaded as the worker's interpreter of ``ctx`` loads them
    (:func:`moonpin.preflight.loader.loadchain.native_load` with its paths, root, loader
    path, preloads, importer and the check under way): the one way from a check's context to
    the loader's model, for torch's line, mooncake's builds and every extension's."""
    from moonpin.preflight.loader.loadchain import native_load

    return native_load(builds, ctx.paths, module, python=ctx.python,
                       suffixes=ctx.ext_suffixes, machine=ctx.machine, root=ctx.root,
                       ld_path=ctx.ld_path, sites=ctx.sites, version=ctx.version,
                       first=first, after=after, complete=ctx.complete, run=ctx.run,
                       mode=mode, importer=ctx.importer, preload=ctx.preload, runs=runs,
                       bounds=ctx.bounds, user=ctx.user, customize=ctx.customize)


def check_libraries(builds: Sequence[str], ctx: Context,
                     add: Callable[[CheckResult], None], fixer: Fixer | None = None,
                     module: str | None = None, first: Sequence[str] = (),
                     after: Sequence[str] = ()) -> None:
    """``import module`` in the environment of ``ctx`` (its interpreter's global scope is
    where the builds' symbols are bound) as far as the builds (what it loads first, and
    whether it gets there), then every shared library the builds need, found and mapped,
    and their symbols bound, as the dynamic loader would
    (:mod:`moonpin.preflight.loader.loadchain`). ``first``, ``after``: modules imported before
    and after ``module``."""
    paths = ctx.paths
    project = (module or "").partition(".")[0]  # whose builds these are (mooncake)
    res = load_in(ctx, builds, module, first=first, after=after)
    if res.chain_error is not None:
        _chain_failure(res, module or "", paths, add, fixer, project, ctx)
        return
    if res.note is not None:
        add(CheckResult("import chain", "skip", f"`import {module}`: {res.note}; the builds "
                        "are loaded after what it loaded so far"))
        # What the rest of the chain would have loaded is not known: a library or a symbol
        # it may provide is not decided here (said, not failed)
        said = add

        def add(c: CheckResult) -> None:
            if (c.status == "fail" and c.name == "symbols") or (
                    c.status == "fail" and c.name == "libraries" and "cannot be found" in
                    c.message):
                c = CheckResult(c.name, "skip", c.message + " (not decided: the import chain "
                                "was not followed to its end, and what it loads may provide "
                                "it)", None, c.evidence)
            said(c)
    for path, problem in sorted(res.bad.items()):
        add(CheckResult("libraries", "fail",
                        f"{path} cannot be loaded: {problem}",
                        _fix_for(path, paths, fixer, project),
                        (path,)))
    driver = dict(res.host_missing)
    others = dict(res.missing)
    if others:
        from moonpin.preflight.judge.owners import missing_mend

        cpu = fixer is not None and fixer.torch_cpu  # the CUDA runtime comes with CUDA torch
        # who provides each, from the image's records (a RECORD, the dpkg database, the
        # needer's requirements), as torch's line and every extension's load say it
        mends = {n: missing_mend(n, o, ctx) for n, o in sorted(others.items())}

        def whose(n: str) -> str:
            if mends[n].certain:
                return mends[n].said
            if cpu and n.startswith(CUDART):
                return _CPU_TORCH_CUDART
            if n.startswith(_TORCH_CUDA):
                return _TORCH_CUDA_LIB
            return mends[n].said

        detail = "; ".join(f"{n} (needed by {o}): {whose(n)}" for n, o in sorted(others.items()))
        fixes = list(dict.fromkeys(m.fix for m in mends.values()))
        fix = "; ".join(fixes)
        if all(m.certain for m in mends.values()):
            fix = " && ".join(fixes)  # each a command the records name
        elif fixer is not None and all(n.startswith(_TORCH_CUDA) or (cpu and n.startswith(CUDART))
                                       for n in others):
            fix = fixer.cuda_torch()  # a CPU torch: the same release's CUDA build
        elif fixer is not None and all(n.startswith(CUDART) for n in others):
            fix = fixer.line()  # the build is for another CUDA: the distribution that fits
        add(CheckResult("libraries", "fail", f"{len(others)} shared librar"
                        f"{'y' if len(others) == 1 else 'ies'} the build needs cannot be "
                        f"found: {detail}", fix))
    elif not res.bad:
        add(CheckResult("libraries", "pass",
                        f"{res.count} shared-library needs of {res.objects} objects resolve"
                        + (" (but for the NVIDIA driver)" if driver else "")))
        _check_symbols(res, builds, paths, ctx.root, add, fixer, project)
    if driver and ctx.root is not None:  # an image never holds it: the runtime mounts it
        add(CheckResult("driver", "skip", f"{', '.join(sorted(driver))} (the NVIDIA driver) "
                        "is the host's: the NVIDIA container runtime mounts it at run time"))
    elif driver:
        add(CheckResult("driver", "warn",
                        f"{', '.join(sorted(driver))} (the NVIDIA driver) is not visible here; "
                        "a worker needs it (the NVIDIA container runtime mounts it), a build or "
                        "CI host without a GPU does not have it"))


def torch_first(ctx: Context, module: str, add: Callable[[CheckResult], None],
                fixer: Fixer | None, before: str) -> bool:
    """Whether ``import torch``, which ``import module`` runs first, gets through in the
    modelled interpreter (:func:`torch_import`, the torch line's own); if not, its failure
    said as ``import module``'s ``import chain`` line (``before``: what it fails before),
    as :func:`check_libraries` says it for a build loaded after torch. For a loader that
    compiles its build against the installed torch at first import: nothing is compiled
    when torch does not import."""
    res = torch_import(ctx)
    if res.chain_error is not None:
        _chain_failure(res, module, ctx.paths, add, fixer, module.partition(".")[0], ctx,
                       before)
        return False
    problem = load_problem(res)
    if problem is None:
        return True
    add(CheckResult("import chain", "fail", f"`import {module}` fails before {before}: "
                    f"`import torch` fails: {problem} (torch's line has the fix)", ""))
    return False


def _chain_failure(res: Report, module: str, paths: Sequence[str],
                   add: Callable[[CheckResult], None], fixer: Fixer | None,
                   project: str, ctx: Context, before: str = "the build is loaded") -> None:
    """``import module`` fails before the builds are loaded (``before``), in the code of the
    module ``res.chain_error`` blames: said as that package's failure, with the fix that puts
    back what the failed load is about (:func:`chain_mend`)."""
    assert res.chain_error is not None
    blamed, cls, message, where = res.chain_error
    note, fix = chain_mend(res, paths, fixer, project, ctx)
    if blamed.partition(".")[0] == "torch" and project != "torch" and _torch_fails(ctx):
        # torch's own import: torch's line says it with this fix (torch_check.imported); a
        # torch submodule only this import reaches keeps its fix here
        note, fix = f"{note} (torch's line has the fix)", ""
    file = where.partition(" line ")[0] if where else ""
    at = f" ({where})" if where and where not in message else ""
    add(CheckResult("import chain", "fail",
                    f"`import {module}` fails before {before}: `import {blamed}` "
                    f"raises {cls}: {message}{note}{at}", fix, (file,) if file else ()))


def _torch_fails(ctx: Context) -> bool:
    """Whether ``import torch`` itself fails in the modelled interpreter (the torch line's
    own import, :func:`torch_import`)."""
    return load_problem(torch_import(ctx)) is not None


def torch_import(ctx: Context) -> Report:
    """``import torch`` in the worker's interpreter of ``ctx`` as the loader's model runs it
    (its paths, root, loader path, preloads, importer, the check under way): the one process
    the torch line and each extension's load start from (:func:`moonpin.preflight.loader.
    loadchain.native_load` keeps it for the check, and its answer in the memo)."""
    return load_in(ctx, [], first=("torch",))


def chain_mend(res: Report, paths: Sequence[str], fixer: Fixer | None, project: str,
               ctx: Context) -> tuple[str, str]:
    """(what to add to the message of ``res.chain_error``, beginning "; " or empty; the fix
    that puts back what its last failed load is about: the cause): a library or a preload
    the image's records name a mend for (:func:`moonpin.preflight.judge.owners.load_mend`)
    first; a library older than an object needs; torch's own files; the package's
    distribution. ``project``: whose builds the load is for (mooncake; torch for
    ``import torch`` itself)."""
    assert res.chain_error is not None
    from moonpin.preflight.judge.owners import load_mend

    within = ctx.confined
    mend = load_mend(res, ctx)
    blamed, _, message, _ = res.chain_error
    package = blamed.partition(".")[0]
    failed = [w for *_, err, _, _, w in res.loads if err is not None]
    kind, subject, detail = failed[-1] if failed else ("", "", "")
    note = ""
    if kind == "version":
        version, obj, newest = [*detail.split("\0"), "", ""][:3]
        note = (f"; {subject} defines at most {newest}" if newest else
                f"; {subject} defines no version of that kind")
        fix = _version_fix(subject, obj, version, paths, fixer, project)
    elif kind == "bad" and _owner(subject, paths, project) != package:
        fix = _fix_for(subject, paths, fixer, project)
    elif package == "torch" and fixer is not None:
        missing = _missing_name(message) or (subject if kind == "missing" else None)
        own = missing is None or _torch_ships(missing, paths, within)
        fix = fixer.torch_files(deps=not own)
        if not own:
            fix += (f" (it reinstalls the packages torch requires too; if none of them "
                    f"ships {missing}, install what provides it in the image)")
    elif fixer is not None and package == fixer.project.name:
        fix = fixer.reinstall()
    else:
        fix = (f"reinstall the distribution that provides {package} (its files do not "
               "load), then run the check again")
    if mend is not None and mend.certain:  # the records name the owner, or the preload
        fix, note = mend.fix, f"{note} ({mend.said})"
    start = None
    if subject:
        start = (_loaded_at_start(res, subject, ctx) if kind != "symbol"
                 else _bound_at_start(res, subject, ctx))
    if start is not None:  # not the image's library: what site runs put it there
        note, fix = f"{note}; {start[0]}", start[1]
    return note, fix


def _loaded_at_start(res: Report, lib: str, ctx: Context, why: str = ""
                     ) -> tuple[str, str] | None:
    """(what to say, the fix) when ``lib``, the library a failed load is about, was loaded
    with ``ctypes`` by the code ``site`` runs at every start of the interpreter
    (:func:`site_loads`): it is in the process before anything the worker imports, and a
    library installed elsewhere would not replace it. None otherwise. ``why``: what to add
    to what is said (how the failed object came to use it)."""
    real = os.path.realpath(lib)
    for path, module, pth_file in site_loads(res.loads, ctx):
        if os.path.realpath(path) == real:
            spec = None if pth_file else ctx.importer.find(module)
            file = spec.origin if spec is not None and spec.origin else module
            by = (f"the import line of {pth_file}" if pth_file else
                  f"`import {module}` ({file})")
            return (f"{module}, which {by} imports at every start of the interpreter, loads "
                    f"{lib} with ctypes before anything else{why}",
                    (f"take `import {module}` out of {pth_file}" if pth_file else
                     f"make {file} not load {lib}")
                    + f" (or make {module} load the library the image's own objects need), "
                    "then run the check again")
    return None


def _bound_at_start(res: Report, obj: str, ctx: Context) -> tuple[str, str] | None:
    """:func:`_loaded_at_start` for an ``undefined symbol`` of ``obj``: a library the code
    ``site`` runs at start loaded with ``ctypes`` under a name ``obj`` needs (``DT_NEEDED``)
    is the one ld.so takes for that need (a loaded object whose name or soname matches is
    not searched again: glibc elf/dl-load.c ``_dl_map_object``), so a symbol only the
    image's own copy defines is not found. None otherwise."""
    from moonpin.preflight.loader.ldso import read_dynamic

    try:
        needed = set(read_dynamic(obj, ctx.machine, within=ctx.confined)[0])
    except OSError:
        return None
    for path, _, _ in site_loads(res.loads, ctx):
        name = next((n for n in (os.path.basename(path),
                                 os.path.basename(os.path.realpath(path))) if n in needed), None)
        if name is not None:
            return _loaded_at_start(res, path, ctx, f", and {os.path.basename(obj)}, which "
                                    f"needs {name}, binds to it")
    return None


def site_loads(loads: Sequence[Sequence[Any]], ctx: Context) -> list[tuple[str, str, str]]:
    """The libraries of a load's ``loads`` that the code ``site`` runs at every start of the
    interpreter loaded with ``ctypes`` (a ``.pth`` ``import`` line's module, ``sitecustomize``:
    :func:`moonpin.preflight.pyimport.sitefiles.startup_imports`), as (the path it was
    given, the module, the ``.pth`` file or ``""``)."""
    from moonpin.preflight.pyimport.sitefiles import startup_imports

    if not ctx.sites:
        return []
    mine = [(str(path), str(m).partition(".")[0]) for path, _, err, m, how, _ in loads
            if err is None and how == "ctypes"]
    if not mine:
        return []
    starts = dict(reversed(startup_imports(ctx.sites, ctx.confined, ctx.customize)))
    return [(path, m, starts[m]) for path, m in mine if m in starts]


def started_loads(ctx: Context) -> list[tuple[str, str, str]]:
    """:func:`site_loads` of the worker's start, as the process ``import torch`` starts from
    has them (:func:`torch_import`)."""
    return site_loads(torch_import(ctx).loads, ctx)


def _version_fix(lib: str, obj: str, version: str, paths: Sequence[str],
                 fixer: Fixer | None, project: str) -> str:
    """A library older than an object needs: put back the package whose file it is, or
    install a newer one."""
    owner = _owner(lib, paths, project)
    if owner in ("torch", "nvidia") or (owner and owner == project):
        return _fix_for(lib, paths, fixer, project)
    return (f"install a newer {os.path.basename(lib)} in the image (the one "
            f"{os.path.basename(obj)} was built against defines {version}), or a build of "
            f"{os.path.basename(obj)} made for this image's {os.path.basename(lib)}")


def _torch_ships(name: str, paths: Sequence[str], within: Confined) -> bool:
    """Whether torch's own distribution lists a file named ``name`` (its RECORD)."""
    from moonpin.preflight.installed.image_facts import record_paths

    for sp in paths:
        try:
            infos = [n for n in os.listdir(sp) if n.startswith("torch-")
                     and n.endswith(".dist-info")]
        except OSError:
            continue
        for info in infos:
            try:
                listed = record_paths(os.path.join(sp, info), within=within)
            except OSError:
                continue
            if any(p.endswith("/" + name) for p in listed):
                return True
    return False


def _missing_name(message: str) -> str | None:
    """The first library ``dlerror()`` says cannot be found in ``message`` (a failure
    raised while handling one names it in its context), or None."""
    import re

    m = re.search(r"(?:^|[\s;(])([^\s:/;()]+): cannot open shared object file", message)
    return m.group(1) if m else None


_TORCH_NAMESPACES = ("c10::", "at::", "torch::", "caffe2::", "c10d::")


def _built_for(build: str) -> str | None:
    """The torch release a build's file name says it is for: ``pg_2_13_0…`` -> 2.13.0."""
    stem = os.path.basename(build).split(".", 1)[0]
    for head in ("pg_", "ep_"):
        if stem.startswith(head):
            parts = stem[len(head):].split("_")
            if len(parts) >= 2 and all(x.isdigit() for x in parts):
                return ".".join(parts)
    return None


def _check_symbols(b: Report, builds: Sequence[str], paths: Sequence[str], root: str | None,
                   add: Callable[[CheckResult], None], fixer: Fixer | None,
                   project: str) -> None:
    """Every symbol the builds and the image's objects they load leave undefined, bound
    as ld.so binds them (:mod:`moonpin.preflight.loader.ldproc`)."""
    by_lib: dict[str, list[tuple[str, str, str]]] = {}
    for need in b.versions:
        by_lib.setdefault(need[2], []).append((need[0], need[1], need[3]))
    from moonpin.preflight.loader.loadchain import owned

    def shadowed(obj: str) -> bool:  # a host library judged: it needs a copy from elsewhere
        return obj not in builds and not owned(obj, paths, root)

    for lib, needs in by_lib.items():  # one failure per library: what ld.so says first
        obj, version, newest = needs[0]
        more = sorted({v for _, v, _ in needs} - {version})
        others = len({o for o, _, _ in needs}) - 1
        fix = (f"install a newer {os.path.basename(lib)} in the image (the one "
               f"{os.path.basename(obj)} was built against defines {version}), or "
               "a build of it made for this image's")
        if shadowed(obj):
            fix = (f"{os.path.basename(obj)} is the host's, built against the host's "
                   f"{os.path.basename(lib)}; the copy in {os.path.dirname(lib)} is found "
                   "first: remove it, or that folder from LD_LIBRARY_PATH")
        add(CheckResult("symbols", "fail",
                        f"version `{version}' not found (required by {obj}): {lib} defines "
                        + (f"at most {newest}" if newest else "no version of that kind")
                        + (f"; also needed: {', '.join(more)}" if more else "")
                        + (f"; {others} more object{'s' * (others != 1)} need{'s' * (others == 1)}"
                           " versions it lacks" if others else ""),
                        fix, (obj, lib)))
    # ld.so checks the version needs of every object a dlopen maps before it relocates any
    # (elf/dl-open.c: _dl_check_map_versions, then _dl_relocate_object): with a need unmet
    # the import fails on the version, and no symbol is bound, so none is reported
    unbound = [] if b.versions else b.unbound
    if unbound:
        from moonpin.preflight.loader import ldbind

        first = unbound[0]
        names = [ldbind.demangle(s) + (f"@{v}" if v else "") for _, s, v, _ in unbound]
        objs = sorted({os.path.basename(o) for o, _, _, _ in unbound})
        shown = "; ".join(names[:3]) + (f" (+{len(names) - 3} more)" if len(names) > 3 else "")
        searched = ", ".join(first[3][:12]) + (f" (+{len(first[3]) - 12})"
                                                if len(first[3]) > 12 else "")
        torchy = all(ldbind.demangle(s).startswith(_TORCH_NAMESPACES)
                     for _, s, _, _ in unbound)
        built = _built_for(first[0]) if first[0] in builds else None
        fix = (f"reinstall the {project} distribution that ships it (see the install line "
               "above)")
        if shadowed(first[0]):
            fix = (f"{os.path.basename(first[0])} is the host's: a library it needs is found "
                   "outside the host's folders (LD_LIBRARY_PATH, an image's folder) and is "
                   "not the one it was built against; remove that copy, or its folder from "
                   "LD_LIBRARY_PATH")
        elif fixer is not None:
            repair = fixer.torch_reinstall() if torchy else None
            if repair is not None:  # torch's label is not its distribution's: put it back
                fix = (f"{repair} (torch's files were replaced in place: its version.py "
                       f"says {fixer.torch_label}, so the loader picked "
                       f"{os.path.basename(first[0]).split('.')[0]})")
            elif torchy and built is not None:
                # Which of the two holds another release's binaries the names cannot tell
                # (a vendor torch labelled as upstream, or a build overwritten): both are put
                # back as the index ships them.
                fix = fixer.pip([f"torch=={built}", *(f"{n}=={v}" for n, v in fixer.owned)],
                                f"{os.path.basename(first[0])} was built for torch {built}; "
                                "the installed torch's libraries or this build are another "
                                "release's")
            else:
                fix = fixer.line()
        add(CheckResult("symbols", "fail",
                        f"{len(names)} undefined symbol{'s' if len(names) != 1 else ''} "
                        f"cannot be bound (the import fails with `undefined symbol`): {shown}; "
                        f"needed by {', '.join(objs)}; searched {searched}", fix,
                        tuple(sorted({o for o, _, _, _ in unbound}))))
    if not unbound and not b.versions:
        note = (f"; {len(b.host)} left to the host's driver" if b.host else "")
        add(CheckResult("symbols", "pass", f"{b.refs} undefined symbols of {b.bound} "
                        f"objects bind as ld.so binds them{note}"))


def load_problem(res: Report) -> str | None:
    """What stops the load, as the loader would say it first (None: it loads)."""
    if res.chain_error is not None:
        blamed, cls, message, _ = res.chain_error
        return f"`import {blamed}` raises {cls}: {message}"
    if res.bad:
        path, why = sorted(res.bad.items())[0]
        return f"{path} cannot be loaded: {why}"
    if res.missing:
        lib, by = next(iter(res.missing.items()))  # the first ld.so meets, breadth first
        return f"{lib} (needed by {by}) cannot be found"
    if res.versions:
        obj, version, lib, _ = res.versions[0]
        return f"version `{version}' not found (required by {os.path.basename(obj)}) in {lib}"
    if res.unbound:
        from moonpin.preflight.loader import ldbind

        obj, sym, version, _ = res.unbound[0]
        more = len(res.unbound) - 1
        return (f"undefined symbol: {sym}" + (f", version {version}" if version else "")
                + f" ({ldbind.demangle(sym)}; needed by {os.path.basename(obj)})"
                + (f" (+{more} more)" if more else ""))
    return None
