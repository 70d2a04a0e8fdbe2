"""Each extension the worker imports, judged: found as the importer finds it, its build
picked by its project's loader rule (:mod:`moonpin.preflight.extensions.seam`), then loaded
into the process ``import torch`` built, as ld.so would (:func:`moonpin.preflight.loader.
loadchain.native_load`: its ``DT_NEEDED`` closure found and mapped, its undefined symbols
bound in the scope its ``dlopen`` flags give, ``RTLD_DEEPBIND`` included). One line per
extension: where it was found, what its loader picks and whether that loads, with a pip
line when it does not. Only ``os`` at import: this runs at worker start."""

from __future__ import annotations

import os
from _collections_abc import Mapping as _Mapping  # what collections.abc re-exports

from moonpin.preflight.extensions import astread, seam
from moonpin.preflight.extensions.pyread import plain
from moonpin.preflight.result import CheckResult

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from moonpin.preflight.access.confined import Confined
    from moonpin.preflight.env.context import Context
    from moonpin.preflight.extensions.seam import Choice, Facts, Pick
    from moonpin.preflight.installed.image_facts import Dist, Torch
    from moonpin.preflight.loader.loadchain import Report
    from moonpin.preflight.pyimport.importer import Found

__all__ = ["GPU_ENV", "gpu_state", "judge_extensions"]

#: The environment variable that states the GPU's capability for the check (``9.0``,
#: ``90``, ``none``), as ``--gpu-capability`` does
GPU_ENV = "MOONPIN_GPU_CAPABILITY"


def gpu_state(given: str | None, image: bool) -> tuple[int | None, bool, str]:
    """(capability, a usable GPU assumed, how that was decided) from ``--gpu-capability``
    (``9.0``/``90``; ``none``: no GPU), else :data:`GPU_ENV`, else: an image is judged for
    the GPU node it is deployed on (present, capability unknown); this machine has one when
    the NVIDIA driver's device nodes are here."""
    text = given if given is not None else os.environ.get(GPU_ENV)
    if text is not None:
        t = text.strip().lower()
        if t in ("none", "no", "cpu", "0", ""):
            return None, False, f"no usable GPU (--gpu-capability {text})"
        digits = t.replace(".", "").removeprefix("sm").removeprefix("sm_")
        if digits.isdigit() and 1 <= len(digits) <= 3:
            return int(digits), True, f"GPU capability {text} (--gpu-capability)"
        return None, True, f"GPU capability {text!r} not understood: taken as unknown"
    if image:
        return None, True, "an image is judged for a GPU node; its capability is not known"
    if os.path.exists("/dev/nvidiactl") or os.path.isdir("/proc/driver/nvidia/gpus"):
        return None, True, "the NVIDIA driver is here; the GPU's capability is not read"
    return None, False, "no usable GPU: no NVIDIA driver here (no /dev/nvidiactl)"


def judge_extensions(ctx: Context, features: Mapping[str, str], flags: Mapping[str, str],
                     torch: Torch | None, dists: Mapping[str, Dist],
                     add: Callable[[CheckResult], None], *, env: Mapping[str, str],
                     gpu: str | None = None, kb_file: str | None = None) -> int:
    """Judge every extension the launch line and a CUDA start import (module doc) in the
    environment of ``ctx``; returns how many lines were said (0: none installed, none
    required). ``kb_file``: the knowledge base whose resolved tables the fix lines ask
    (None: none; its stamp is kept with the lines).

    The lines are kept in the file-facts memo with the stamp of every file and folder the
    walk read and every variable it read (:func:`_remembered`): a later start with the same
    inputs whose stamps all hold says them without walking (no dispatcher, loader or build
    is read, no rule loaded)."""
    state = gpu_state(gpu, ctx.root is not None)
    try:
        lines = _remembered(ctx, features, flags, torch, dists, env, state, kb_file)
    finally:
        if ctx.run.processes:  # the process `import torch` built, each load a copy of it
            from moonpin.preflight.loader.loadchain import release

            release(ctx.run)
    for line in lines:
        add(line)
    return len(lines)


#: the memo entry's format: a change of what the walk says changes it
_WALK = "ext-walk-v1"


class _Untraced(Exception):
    """The walk read something the trace cannot name: its lines, not to be kept."""

    def __init__(self, lines: list[CheckResult]) -> None:
        super().__init__("untraced")
        self.lines = lines


class _SeenEnv(_Mapping):  # type: ignore[type-arg]
    """A worker's environment that records each variable read (its value, or None when
    unset) in :attr:`read`; listing it is reading all (:attr:`all`)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.read: dict[str, str | None] = {}
        self.all = False

    def __getitem__(self, key: str) -> str:
        value = self.env.get(key)
        self.read[key] = value
        if value is None:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        self.all = True
        return iter(self.env)

    def __len__(self) -> int:
        self.all = True
        return len(self.env)


def _remembered(ctx: Context, features: Mapping[str, str], flags: Mapping[str, str],
                torch: Torch | None, dists: Mapping[str, Dist], env: Mapping[str, str],
                state: tuple[int | None, bool, str],
                kb_file: str | None) -> list[CheckResult]:
    """The walk's lines (:func:`_walk`), from the file-facts memo
    (:meth:`moonpin.kb.cache.FileMemo.get_traced`) while nothing it read changed.

    What it read is traced (:class:`moonpin.preflight.access.reads.Reads`: every path stat-ed,
    opened, listed or tested, every variable of ``os.environ``), plus what the walk takes
    from the check's own in-process models rather than from a read: the folders of the
    target's ``sys.path`` and site folders (a package added, removed or shadowed there
    changes their stamp), the ``.pth`` and finder files its importer model read, and the
    knowledge base. The key is everything else it was handed: the target, the launch
    features, torch's label and CUDA, the GPU assumed, the distributions' metadata, and an
    image's environment (a worker's own environment is checked variable by variable)."""
    from moonpin.kb.cache import facts_memo

    memo = facts_memo()
    own_env = env is os.environ or isinstance(env, os._Environ)
    if not memo.enabled:
        return _walk(ctx, features, flags, torch, dists, env, state, kb_file)
    key = repr((_WALK, tuple(ctx.paths), ctx.sites, ctx.root, ctx.ext_suffixes, ctx.version,
                ctx.complete, ctx.machine, ctx.ld_path, ctx.python, sorted(features.items()),
                sorted(flags.items()), (torch.version, torch.cuda) if torch else None,
                sorted((n, d.version, d.root, tuple(d.requires)) for n, d in dists.items()),
                state, None if own_env else sorted(env.items()), kb_file,
                (ctx.user.uid, ctx.user.gids))
               + ((repr(ctx.bounds),) if ctx.bounds is not None else ()))

    def compute() -> tuple[object, set[str], dict[str, str | None]]:
        from moonpin.preflight.access.reads import Reads, plain_folder

        seen = _SeenEnv(env) if own_env else None
        trace = Reads()
        trace.start()
        try:
            lines = _walk(ctx, features, flags, torch, dists,
                          seen if seen is not None else env, state, kb_file)
        finally:
            trace.stop()
        if trace.untraced is not None or trace.all_env or (seen is not None and seen.all):
            raise _Untraced(lines)
        files = {os.fsdecode(p) for p, follow in trace.paths
                 if follow or not plain_folder(p)}
        files.update(ctx.paths)
        files.update(ctx.sites or ())
        files.update(getattr(ctx.importer, "reads", None) or ())
        if kb_file is not None:
            files.add(kb_file)
        read = dict(trace.env)
        read.update(seen.read if seen is not None else {})
        return [[c.name, c.status, c.message, c.fix, list(c.evidence)] for c in lines], \
            files, read

    try:
        got = memo.get_traced(_WALK + "\0" + key, __file__, compute, _shaped)
    except _Untraced as e:
        return e.lines
    return [CheckResult(n, st, m, f, tuple(ev)) for n, st, m, f, ev in got]  # type: ignore[attr-defined]


def _shaped(value: object) -> bool:
    """Whether a remembered walk has the shape :func:`_remembered` keeps."""
    return type(value) is list and all(
        type(v) is list and len(v) == 5 and all(type(x) is str for x in v[:3])
        and v[1] in ("pass", "fail", "warn", "skip") and (v[3] is None or type(v[3]) is str)
        and type(v[4]) is list and all(type(x) is str for x in v[4]) for v in value)


def _walk(ctx: Context, features: Mapping[str, str], flags: Mapping[str, str],
          torch: Torch | None, dists: Mapping[str, Dist], env: Mapping[str, str],
          state: tuple[int | None, bool, str],
          kb_file: str | None = None) -> list[CheckResult]:
    """The extensions judged (:func:`judge_extensions`), their lines in order."""
    from moonpin.preflight.extensions.wanted import extensions
    from moonpin.preflight.installed.image_facts import find_package, locate, read_bytes

    cc, present, said = state
    facts = seam.Facts(torch=torch.version if torch else None,
                       cuda=torch.cuda if torch else None, env=env, gpu=cc,
                       gpu_present=present, gpu_said=said, dists=dists,
                       suffixes=ctx.ext_suffixes,
                       find=lambda name: locate(ctx, name),
                       read=lambda path: read_bytes(path, what="file", within=ctx.confined),
                       within=ctx.confined, python=ctx.python,
                       kb_file=kb_file,
                       tag=f"cp{ctx.version[0]}{ctx.version[1]}", machine=ctx.machine,
                       user=ctx.user, started=lambda: _started(ctx))
    want, unjudged = extensions(features, find_package(ctx, "sglang"), facts, flags)
    out: list[CheckResult] = []
    for said in unjudged:
        out.append(CheckResult("extensions", "skip", said))
    raised: dict[str, tuple[str, str | None]] = {}
    for w in want:
        if not w.ruled:
            out.append(_judge_found(w.name, w.why, w.flag, facts, ctx, torch))
            continue
        line = _judge_one(w.name, w.why, w.required, facts, ctx, torch, raised)
        if line is not None:
            out.append(line)
    return _through(out, raised, facts, ctx) if raised else out


def _started(ctx: Context) -> list[tuple[str, str, str]]:
    """:attr:`seam.Facts.started`: the libraries the site code loads at start."""
    from moonpin.preflight.judge.libraries import started_loads

    return started_loads(ctx)


#: what a failing import raises unless its line names another class
_RAISES_IMPORT = "ImportError"


def _catches(caught: Sequence[str], cls: str) -> bool:
    """Whether ``except`` clauses naming ``caught`` catch ``cls`` (a builtin's name), by
    the builtin classes' own hierarchy (``"*"``: a bare ``except``)."""
    import builtins

    kind = getattr(builtins, cls, None)
    mro = {c.__name__ for c in kind.__mro__} if isinstance(kind, type) else {
        cls, "Exception", "BaseException"}
    return any(c == "*" or c in mro for c in caught)


def _through(out: list[CheckResult], raised: Mapping[str, tuple[str, str | None]],
             facts: Facts, ctx: Context) -> list[CheckResult]:
    """An extension whose own load passes but whose import, on the way, imports another
    judged extension that fails (sglang-kernel 0.4.10's ``elementwise.py``: ``try: import
    flashinfer.norm`` / ``except ImportError``): the other's exception goes through unless
    an ``except`` around that import catches it."""
    done = []
    for line in out:
        found = facts.find(line.name) if line.status in ("pass", "warn") else None
        if found is None or found.module:
            done.append(line)
            continue
        others = [n for n in raised if n != line.name]
        for name, path, at, caught in astread.imports_run(found.folder, line.name, others,
                                                          ctx.confined):
            cls, fix = raised[name]
            if _catches(caught, cls):
                continue
            head = line.message.split(": ", 1)[0]
            shown = os.path.relpath(path, os.path.dirname(found.folder))
            line = CheckResult(line.name, "fail", f"{head}: `import {line.name}` fails: "
                               f"{shown}:{at} imports {name}, whose import raises {cls}"
                               + (f" (its except catches {', '.join(caught)}, not that)"
                                  if caught else ""), fix, line.evidence)
            break
        done.append(line)
    return done


def _judge_found(name: str, why: str, flag: str, facts: Facts, ctx: Context,
                 torch: Torch | None) -> CheckResult:
    """A requested backend's own package that no loader rule here reads: absent, the
    import the backend runs fails (certain); present, its plain import followed
    (:func:`moonpin.preflight.extensions.pyread.plain.plain_import`: the compiled modules it
    reaches, each loaded into the process ``import torch`` built, as the ruled ones are), said under
    that assumption; what it loads dynamically is said not judged."""
    found = facts.find(name)
    if found is None:
        return CheckResult(name, "fail", f"not installed ({why}): `import {name}` fails "
                           "with ModuleNotFoundError when the worker sets the backend up",
                           f"install the package that provides `{name}` (this check knows "
                           f"no distribution of it), or choose another {flag}")
    init = found.folder if found.module else os.path.join(found.folder, "__init__.py")
    owner = _shipped_by(facts, init)  # among the distributions the check read
    where = (f"{owner.name} {owner.version} " if owner else "") + f"at {found.folder}" + (
        f" ({found.how})" if found.editable else "") + f" ({why}; {plain.PLAIN_ASSUMED})"
    evidence = (found.folder,)
    try:
        reached = plain.plain_import(found, name, facts)
    except astread.Unrunnable as e:
        return CheckResult(name, "fail", f"{where}: `import {name}` fails: {e.path} is "
                           f"{e.why}", _replace(facts, e.path, ctx.root), evidence)
    gpu = _gpu_gate(reached, facts)
    if gpu is not None and gpu[0] == "fail":
        return CheckResult(name, "fail", f"{where}: `import {name}` fails: {gpu[1]}",
                           _NEEDS_GPU, evidence)
    builds = list(reached.builds)
    for top, (by, caught) in reached.others.items():  # a top-level build it imports plainly
        module = facts.find(top)
        if module is not None and module.module and module.folder.endswith(facts.suffixes):
            builds.append(plain.Build(top, module.folder, by, caught))
    denied = astread.denied([*reached.files, *(b.file for b in builds)], ctx.user,
                            ctx.root, ctx.version)
    if denied is not None:  # the worker's user, not this check's, opens them
        return CheckResult(name, "fail", f"{where}: `import {name}` fails: {denied.path} "
                           f"is {denied.why}", _replace(facts, denied.path, ctx.root),
                           evidence)
    fix: str | None = (f"install a build of {owner.name if owner else name} made for torch "
           f"{facts.torch_release() or 'as installed'}, or choose another {flag}")
    for m in reached.missing:
        if "?" in m.caught or _catches(m.caught, "ModuleNotFoundError"):
            continue  # under a condition, or caught: the import may go on
        other = (f" ({', '.join(m.other)} is there: built for another Python; this one "
                 f"takes {', '.join(facts.suffixes[:2])})" if m.other else "")
        return CheckResult(name, "fail", f"{where}: `import {name}` fails: {m.by} imports "
                           f"{m.module}: ModuleNotFoundError: No module named "
                           f"'{m.module}'{other}", fix, evidence)
    for top, (by, caught) in reached.others.items() if ctx.complete else ():
        # another package its code certainly imports, found nowhere on the whole sys.path
        # (unless a load it cannot follow names it: a module registered under that name)
        if ("?" in caught or _catches(caught, "ModuleNotFoundError") or facts.find(top)
                or any(f"'{top}'" in d for d in reached.dynamic)):
            continue
        return CheckResult(name, "fail", f"{where}: `import {name}` fails: {by} imports "
                           f"{top}: ModuleNotFoundError: No module named '{top}'",
                           f"install the package that provides `{top}` (a requirement of "
                           f"{name}'s), or choose another {flag}", evidence)
    said, warned = [], []
    for b in builds:
        res = _load(ctx, [b.file], reached.torch and torch is not None)
        shown = os.path.relpath(b.file, os.path.dirname(found.folder))
        problem = _problem(res)
        if problem is not None and "?" not in b.caught and not _catches(b.caught,
                                                                         "ImportError"):
            if owner is None:  # on this failing path only: every distribution of its folder
                from moonpin.preflight.installed.image_facts import read_dists

                owner = _shipped_by(facts, init, among={
                    d.name: d for d in read_dists([os.path.dirname(found.folder)],
                                                  facts.within, ("",))})
            pin = _torch_pin(owner)
            built_for = (f" ({owner.name} {owner.version} requires torch=={pin}, torch here "
                         f"is {facts.torch})" if owner and pin and facts.torch_release() != pin
                         else "")
            own, fix = _mended(res, ctx, f"install a build of {owner.name if owner else name} "
                               f"made for torch {facts.torch_release() or 'as installed'}, "
                               f"or choose another {flag}")
            return CheckResult(name, "fail", f"{where}: `import {name}` fails: {b.by} "
                               f"imports {b.module}: {shown}: {problem}{own}{built_for}",
                               fix or None, evidence)
        if problem is not None:
            warned.append(f"{b.by} imports {b.module} " + (
                "under a condition" if "?" in b.caught else
                "inside a try whose except catches its ImportError") + f": {shown}: {problem}")
            continue
        runtime = _cudart(b.file, ctx.machine, ctx.confined)
        extra = (f"; it needs libcudart.so.{runtime}, torch's CUDA is {facts.cuda}: two "
                 "CUDA runtimes in one process"
                 if runtime is not None and facts.cuda is not None and runtime != facts.cuda
                 else "")
        said.append(f"loads {shown} ({res.count} library needs of {res.objects} objects "
                    f"resolve, {res.refs} undefined symbols bind){extra}")
    stops = _at_import(ctx, name, reached.torch and torch is not None)
    if stops is not None and stops[0] == "fail":
        return CheckResult(name, "fail", f"{where}: `import {name}` fails: {stops[1]}",
                           stops[2], evidence)
    unjudged = reached.dynamic + ([reached.unread] if reached.unread else []) + (
        [stops[1]] if stops is not None else []) + (
        [gpu[1]] if gpu is not None and gpu[0] == "skip" else [])
    detail = "; ".join(said) if said else "no compiled module reached by its imports"
    tail = (f"; {gpu[1]}" if gpu is not None and gpu[0] == "pass" else "") + (
        f"; not judged: {'; '.join(unjudged)}" if unjudged else "") + (
        f"; {'; '.join(warned)}" if warned else "")
    return CheckResult(name, "warn" if warned else "skip" if unjudged else "pass",
                       f"{where}: {detail}{tail}", fix if warned else None, evidence)


#: the fix of an import that raises where no GPU is visible
_NEEDS_GPU = ("its import needs a usable GPU: run the check where the worker runs, or say "
              "the GPU with --gpu-capability (e.g. 9.0)")


def _gpu_gate(reached: plain.Reached, facts: Facts) -> tuple[str, str] | None:
    """What the GPU assumed decides of a plain import whose code raises where torch sees no
    GPU (:attr:`moonpin.preflight.extensions.pyread.plain.Reached.gpu_gates`): ``("fail",
    …)`` with none assumed (``("skip", …)`` when that code runs under a condition), else
    ``("pass", the assumption said)``; None: no such code."""
    if not reached.gpu_gates:
        return None
    at, call, certain = reached.gpu_gates[0]
    said = f"its import raises without a visible GPU ({at}: {call})"
    if facts.gpu_present:
        return "pass", f"{said}; judged as on a host with one ({facts.gpu_said})"
    if certain:
        return "fail", f"{said}, and none is assumed ({facts.gpu_said})"
    return "skip", f"{said} if the code before it gets there ({facts.gpu_said})"


def _torch_pin(dist: Dist | None) -> str | None:
    """The exact torch release ``dist``'s METADATA requires (``torch==2.9.1``), else None."""
    from moonpin.preflight.installed.image_facts import canon

    for req in dist.requires if dist is not None else ():
        head, _, marker = req.partition(";")
        name, eq, version = head.replace(" ", "").partition("==")
        if eq and canon(name.split("[", 1)[0]) == "torch" and "," not in version \
                and "extra" not in marker:
            return version
    return None


def _owner(facts: Facts, rule: object) -> tuple[str, str] | None:
    """The installed distribution of the rule's project (the first of its
    ``DISTRIBUTIONS``): what the installed SGLang pins."""
    for d in getattr(rule, "DISTRIBUTIONS", ()):
        if d in facts.dists:
            return d, facts.dists[d].version
    return None


def _shadowed(facts: Facts, found: Found, owner: tuple[str, str] | None
              ) -> tuple[str, str] | None:
    """(what the line says, the fix) when the package the importer found, which no RECORD
    lists, is a copy found first on the path (``PYTHONPATH``, a ``.pth`` line) while the
    rule's installed distribution ``owner`` has its own, elsewhere: a reinstall of that
    distribution leaves the import finding the same copy. None otherwise (an editable
    install's folder is its distribution's, though no RECORD lists it)."""
    if owner is None or found.editable or found.module:
        return None
    dist = facts.dists.get(owner[0])
    if dist is None:
        return None
    from moonpin.preflight.installed.image_facts import record_path, record_paths

    own = os.path.basename(found.folder) + "/__init__.py"
    try:
        listed = any(record_path(line) == own for line in record_paths(
            dist.meta, whole=True, within=facts.within)) if dist.meta else False
    except OSError:
        return None
    theirs = os.path.join(dist.root, os.path.basename(found.folder))
    if not listed or os.path.normpath(theirs) == os.path.normpath(found.folder) \
            or not os.path.isfile(os.path.join(theirs, "__init__.py")):
        return None
    name = os.path.basename(found.folder)
    said = (f"no installed distribution wrote it: found on the import path before "
            f"{dist.name} {dist.version}'s own {theirs}")
    fix = (f"take {os.path.dirname(found.folder)} off the worker's import path (PYTHONPATH, "
           f"a .pth line) or remove {found.folder}: `import {name}` then finds "
           f"{dist.name}'s; check again after")
    return said, fix


def _found_owner(facts: Facts, rule: object, found: Found
                 ) -> tuple[tuple[str, str] | None, bool]:
    """(the distribution that wrote the package the importer found (:func:`_shipped_by` of
    its ``__init__.py``, or of the module), asking the rule's own distributions first; else,
    when no RECORD lists it (an editable install, a copy on the path), the rule's project as
    installed (:func:`_owner`); whether a RECORD lists it)."""
    path = found.folder if found.module else os.path.join(found.folder, "__init__.py")
    dist = _shipped_by(facts, path, first=getattr(rule, "DISTRIBUTIONS", ()))
    if dist is not None:
        return (dist.name, dist.version), True
    return _owner(facts, rule), False


def _shipped_by(facts: Facts, path: str, first: Sequence[str] = (),
                among: Mapping[str, Dist] | None = None) -> Dist | None:
    """The installed distribution (:attr:`Facts.dists`) that wrote ``path``: the one whose
    RECORD lists it with the file's own size and sha256 (a later install over another
    distribution's files rewrites them, not the other's RECORD: nixl-cu13 1.2.0's
    ``nixl_ep/__init__.py`` over the meta nixl's); failing that, the first whose RECORD lists
    it (a file changed since, or a RECORD without digests). Those named in ``first`` are read
    first, and one of them whose digest matches ends the search (no other RECORD is read);
    torch's and SGLang's long RECORDs are read last (``among``: these distributions instead
    of :attr:`Facts.dists`). RECORDs through
    :func:`moonpin.preflight.installed.image_facts.record_paths`, the one reader; a RECORD
    path is CSV-quoted (:func:`~moonpin.preflight.installed.image_facts.record_path`), relative
    to the distribution's folder (``../`` leaves it, as pip writes a scheme's files outside
    it: ``importlib.metadata``'s ``locate_file``), or absolute, then the image's own path
    (under its root). Nothing a RECORD names is read: only ``path``, for its digest."""
    from moonpin.preflight.installed.image_facts import record_hashes, record_path, record_paths

    dists = facts.dists if among is None else among
    order = [dists[n] for n in first if n in dists]
    order += sorted((d for d in dists.values() if d not in order),
                    key=lambda d: (d.name in ("torch", "sglang"), d.name))
    data: bytes | None = None
    listed: Dist | None = None
    root = facts.within.root
    if root is not None:  # compared as the image names its files
        from moonpin.preflight.access.chroot import image_path
    want = os.path.normpath(image_path(root, path) if root is not None else path)
    for dist in order:
        if not dist.meta:
            continue
        base = image_path(root, dist.root) if root is not None else dist.root
        try:
            lines = [line for line in record_paths(dist.meta, whole=True, within=facts.within)
                     if _recorded_at(record_path(line), base) == want]
        except OSError:
            continue
        if not lines:
            continue
        listed = listed or dist
        entry = next(iter(record_hashes(lines).values()), None)
        if entry is None:
            continue
        if data is None:
            try:
                data = facts.read(path)
            except OSError:
                return listed  # a file that cannot be read: no digest tells them apart
        if len(data) == entry[1] and _record_digest(data) == entry[0]:
            return dist
    return listed


def _recorded_at(rel: str, base: str) -> str | None:
    """The path a RECORD path names, ``os.path.normpath``'d: relative to ``base`` (the folder
    its distribution's metadata is in) or absolute, both in the namespace of the target (an
    image's own paths under its root); None for one no file has (empty, a NUL). Only compared,
    never opened."""
    if not rel or "\0" in rel:
        return None
    return os.path.normpath(os.path.join(base, rel))


def _record_digest(data: bytes) -> str:
    """sha256 as RECORD writes it (the wheel spec: urlsafe base64, no padding)."""
    import base64
    import hashlib

    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _judge_one(name: str, why: str, required: bool, facts: Facts, ctx: Context,
               torch: Torch | None,
               raised: dict[str, tuple[str, str | None]] | None = None) -> CheckResult | None:
    """One extension's line; a failing one also records in ``raised`` the class its import
    raises and its fix line (what an import of it on another's way raises)."""
    line = _judge_line(name, why, required, facts, ctx, torch)
    if line is not None and line.status == "fail" and raised is not None:
        cls = _RAISES_IMPORT  # a build ld.so cannot load, a module not found: ImportError
        for mark in ("fails with ", "its loader raises ", "the import raises "):
            if mark in line.message:  # the class these lines name, as the import raises it
                cls = line.message.split(mark, 1)[1].split(":", 1)[0].split()[0].strip("(),")
                break
        raised[name] = (cls, line.fix)
    return line


def _judge_line(name: str, why: str, required: bool, facts: Facts, ctx: Context,
                torch: Torch | None) -> CheckResult | None:
    rule = seam.rule_for(name)
    found = facts.find(name)
    if found is None:
        if not required:
            return None
        return CheckResult(name, "fail", f"not installed ({why}): `import {name}` fails "
                           f"with ModuleNotFoundError", _install(facts, rule))
    owner, recorded = _found_owner(facts, rule, found)
    shadowed = None if recorded else _shadowed(facts, found, owner)
    if shadowed is not None:  # the line is about the copy found, which no pip line mends
        owner = None
    where = (f"{owner[0]} {owner[1]} " if owner else "") + f"at {found.folder}" + (
        f" ({found.how})" if found.editable else "") + (f" ({shadowed[0]})" if shadowed
                                                        else "")
    try:
        pick: Pick = rule.pick(facts, found)
    except astread.Unrunnable as e:
        return CheckResult(name, "fail", f"{where}: `import {name}` fails: {e.path} "
                           f"is {e.why}", _replace(facts, e.path, ctx.root), (found.folder,))
    denied = astread.denied(_runs(found, pick), ctx.user, ctx.root, ctx.version)
    if denied is not None:  # the worker's user, not this check's, opens them
        return CheckResult(name, "fail", f"{where}: `import {name}` fails: {denied.path} "
                           f"is {denied.why}", _replace(facts, denied.path, ctx.root),
                           (found.folder,))
    notes = "; ".join(pick.notes)
    if pick.unread is not None:
        return CheckResult(name, "skip", f"{where}: not judged: {pick.unread}"
                           + (f" ({notes})" if notes else ""), None, (found.folder,))
    results = [(c, *_judge_choice(c, pick, facts, ctx, torch, rule)) for c in pick.choices]
    failed = [(c, detail, fix) for c, ok, detail, fix in results if not ok]
    if failed:
        _, detail, fix = failed[0]
        when = (f" (for {', '.join(x.when for x, *_ in failed)})"
                if len(pick.choices) > 1 else "")
        also = [f"{x.when}: {d}" for x, ok, d, _ in results if ok and x.when]
        return CheckResult(name, "fail", f"{where}: `import {name}` fails{when}: {detail}"
                           + (f"; loads for {'; '.join(also)}" if also else "")
                           + (f" ({notes})" if notes else "")
                           + ("; " + "; ".join(pick.warnings) if pick.warnings else ""),
                           shadowed[1] if shadowed else
                           _not_fitting(facts, rule, owner, fix if fix is not None
                                        else _generic(facts, rule)) or None,
                           (found.folder,))
    stops = _at_import(ctx, name, torch is not None)
    if stops is not None and stops[0] == "fail":  # no reinstall of the extension mends it
        return CheckResult(name, "fail", f"{where}: `import {name}` fails: {stops[1]}"
                           + (f" ({notes})" if notes else ""), stops[2], (found.folder,))
    detail = "; ".join((f"{c.when}: " if c.when and len(results) > 1 else "") + d
                       for c, _, d, _ in results)
    unjudged = f"; not judged: {stops[1]}" if stops is not None else ""
    return CheckResult(name, "warn" if pick.warnings else "skip" if unjudged else "pass",
                       f"{where}: {detail}" + (f" ({notes})" if notes else "")
                       + ("; " + "; ".join(pick.warnings) if pick.warnings else "") + unjudged,
                       (pick.fix or _generic(facts, rule)) if pick.warnings else None,
                       (found.folder,))


def _runs(found: Found, pick: Pick) -> list[str]:
    """The files ``import`` of ``found`` opens under ``pick``: its ``__init__`` (or module),
    and for each build a choice loads alone, the ``__init__`` of every package above it and
    the build itself."""
    out = [found.folder if found.module else os.path.join(found.folder, "__init__.py")]
    for c in pick.choices:
        if len(c.files) != 1 and not c.every:  # it tries several: the first it opens wins
            continue
        for file in c.files:
            ups = []
            folder = os.path.dirname(file)
            while os.path.isfile(os.path.join(folder, "__init__.py")):
                ups.append(os.path.join(folder, "__init__.py"))
                folder = os.path.dirname(folder)
            out += [*reversed(ups), file]
    return list(dict.fromkeys(out))


def _judge_choice(choice: Choice, pick: Pick, facts: Facts, ctx: Context,
                  torch: Torch | None, rule: object) -> tuple[bool, str, str | None]:
    """(loads, what was found, the fix) for one outcome of the loader."""
    if choice.raises is not None:
        return False, f"its loader raises {choice.raises}", pick.fix or rule.repair(  # type: ignore[attr-defined]
            facts, pick, choice)
    if not choice.files:  # nothing prebuilt: what it loads is torch's import (SGLang's first)
        if torch is not None:
            from moonpin.preflight.judge.libraries import torch_import

            res = torch_import(ctx)  # the torch line's own
            problem = _problem(res)
            if problem is not None:
                return False, f"torch's import on the way fails: {problem}", \
                    _mended(res, ctx, _NO_FIX)[1]
        return True, "imports (nothing prebuilt is loaded at import)", None
    first_problem: tuple[str, str | None] | None = None
    # each file a load of its own (the first that loads wins), or all of them in one
    for builds in [list(choice.files)] if choice.every else [[b] for b in choice.files]:
        res = _load(ctx, builds, torch is not None, choice.mode)
        problem = _problem(res)
        shown = ", ".join(os.path.join(os.path.basename(os.path.dirname(b)),
                                       os.path.basename(b)) for b in builds)
        if problem is None:
            runtime = next((r for b in builds if (r := _cudart(b, ctx.machine, ctx.confined))
                            is not None), None)
            extra = ""
            if runtime is not None and facts.cuda is not None and runtime != facts.cuda:
                extra = (f"; it needs libcudart.so.{runtime}, torch's CUDA is {facts.cuda}: "
                         "two CUDA runtimes in one process")
            return True, (f"loads {shown} ({res.count} library needs of {res.objects} "
                          f"objects resolve, {res.refs} undefined symbols bind"
                          + (", RTLD_DEEPBIND" if choice.mode and choice.mode & 8 else "")
                          + f"){extra}"), None
        if first_problem is None:
            own, fix = _mended(res, ctx, None)
            first_problem = (f"{shown}: {problem}{own}", fix if fix is not None else
                             rule.repair(facts, pick, choice))  # type: ignore[attr-defined]
    assert first_problem is not None
    tried = "" if len(choice.files) == 1 or choice.every else \
        f" (and {len(choice.files) - 1} more tried)"
    return False, first_problem[0] + tried, first_problem[1]


#: the fix of a failure no reinstall of the extension (or its pins) mends and no record of
#: the image names a mend for: said, no line written
_NO_FIX = ""


def _in_torch(res: Report) -> bool:
    """Whether the load failed in torch's own import, before any build of the extension, or
    before the interpreter ran (a preload ld.so stops at)."""
    return res.chain_error is not None and (res.chain_error[0].split(".")[0] == "torch"
                                            or res.chain_error[1] == "an ld.so error")


def _mended(res: Report, ctx: Context, otherwise: str | None) -> tuple[str, str | None]:
    """(what the image's records say about a failed load, for its message; its fix): a
    library nobody put back or a preload (:func:`moonpin.preflight.judge.owners.load_mend`).
    In torch's own import, or before the interpreter runs, no line of the extension's
    mends it: the records' line, or none (:data:`_NO_FIX`); in the extension's own loads,
    the records' line when they name an owner, else ``otherwise`` (the rule's)."""
    from moonpin.preflight.judge.owners import load_mend

    inside = _in_torch(res)
    mend = load_mend(res, ctx)
    if mend is None or not (inside or mend.certain):
        return "", _NO_FIX if inside else otherwise
    return f" ({mend.said})" if not inside else "", mend.fix


def _at_import(ctx: Context, name: str, torch_first: bool
               ) -> tuple[str, str, str | None] | None:
    """What stops ``import name`` in the code it runs at import by calls into other modules
    (:meth:`moonpin.preflight.pyimport.pyrun.Chain.at_import`: a decorator such as
    ``@torch.compile`` that imports, in the end, a standard-library module whose extension
    module does not load here), as ``("fail", said with the way there, its fix)``: the
    image's records' line for the library (:func:`_mended`), never a reinstall of the
    extension; ``("skip", why, None)`` when that walk stopped at its bounds (what it did not
    read may fail the import: no verdict rests on it); None: nothing it follows fails (or
    torch's own import fails, which its line says)."""
    before = _load(ctx, [], torch_first)
    if before.chain_error is not None:
        return None
    res = _load(ctx, [], torch_first, runs=(name,))
    if res.chain_error is None:
        if res.note is not None and res.note != before.note:  # the walk of ``name``'s own
            return "skip", res.note, None
        return None
    from moonpin.preflight.judge.owners import load_mend

    blamed, cls, message, _ = res.chain_error
    mend = load_mend(res, ctx)  # as torch's line: the records' line, else the honest one
    return ("fail", f"its code run at import imports {blamed}, whose import raises {cls}: "
            f"{message}" + (f" ({mend.said})" if mend else ""), mend.fix if mend else None)


def _load(ctx: Context, builds: Sequence[str], torch_first: bool,
          mode: int | None = None, runs: Sequence[str] = ()) -> Report:
    """``builds`` loaded as the worker's interpreter of ``ctx`` loads them (its paths, root,
    loader path, preloads, importer, the check under way), after ``import torch`` when
    ``torch_first`` (none: torch's import alone)."""
    from moonpin.preflight.judge.libraries import load_in

    return load_in(ctx, builds, first=("torch",) if torch_first else (), mode=mode, runs=runs)


def _problem(res: Report) -> str | None:
    """What stops the load, as the loader says it first (None: it loads): the torch line's
    own wording (:func:`moonpin.preflight.judge.libraries.load_problem`), imported on a walk
    only (a warm start replays the lines)."""
    from moonpin.preflight.judge.libraries import load_problem

    return load_problem(res)


def _cudart(build: str, machine: str | None, within: Confined) -> int | None:
    """The CUDA runtime major a build names in its ``DT_NEEDED`` (None: none)."""
    from moonpin.preflight.loader import ldso

    try:
        needed = ldso.read_dynamic_flags(build, machine or os.uname().machine,
                                         within=within)[0]
    except OSError:
        return None
    for n in needed:
        if n.startswith("libcudart.so."):
            tail = n[len("libcudart.so."):].split(".")[0]
            if tail.isdigit():
                return int(tail)
    return None


def _replace(facts: Facts, path: str, root: str | None) -> str:
    """The lines that put back a file the import cannot get through: remove it (named as
    the image names it, where the lines are run), then reinstall the distribution whose
    RECORD lists it (read only on this failing path)."""
    import shlex

    from moonpin.preflight.access.chroot import image_path

    if os.path.isdir(path):  # a folder the worker's user cannot list or search
        return f"chmod a+rX {shlex.quote(image_path(root, path) if root else path)}"
    rm = (f"rm {shlex.quote(image_path(root, path) if root else path)} && "
          if os.path.lexists(path) else "")
    dist = _shipped_by(facts, path)
    if dist is not None:
        return f"{rm}pip install --force-reinstall --no-deps '{dist.name}=={dist.version}'"
    return f"{rm}reinstall the package that ships it"


def _install(facts: Facts, rule: object) -> str:
    """The pip line that installs a missing extension: the release the knowledge base's
    resolved tables say fits this environment (:meth:`Facts.kb_release`; SGLang's pin when
    they agree), or that none does; without their answer, the installed SGLang's pin of its
    distribution, else the distribution by name (no file here says which release)."""
    dists: Sequence[str] = getattr(rule, "DISTRIBUTIONS", ())
    known = facts.kb_release(dists)
    if known is not None:
        return known[0]
    for d in dists:
        pin = facts.pin("sglang", d)
        if pin:
            return f"pip install '{d}=={pin}' (the installed SGLang's pin)"
    if not dists:
        return "install the package that provides it"
    torch = facts.torch_release() or "this torch"
    return (f"pip install '{dists[0]}' (no installed file pins a release: check that it has "
            f"a build for torch {torch} with `moonpin which {dists[0]}`, or run the check "
            "again after)")


def _not_fitting(facts: Facts, rule: object, owner: tuple[str, str] | None,
                 fix: str | None) -> str | None:
    """The fix of an installed extension that does not load. When the torch is the one the
    installed SGLang pins (else torch is what to move: ``fix``, the rule's line) and the
    knowledge base's resolved tables say the installed release does not fit: the release
    they say fits (:meth:`Facts.kb_release`), unless ``fix`` already names it (its steps
    kept: a second one that writes a package folder back), or the torch SGLang admits with
    it; where nothing fits at all, ``fix`` when there is one, else that said. Otherwise
    ``fix``."""
    dists: Sequence[str] = getattr(rule, "DISTRIBUTIONS", ())
    pin = facts.pin("sglang", "torch")
    if not dists or (pin is not None and pin != facts.torch_release()):
        return fix
    installed = [(d, facts.dists[d].version) for d in dists if d in facts.dists]
    if owner is not None and owner not in installed:
        installed.append(owner)
    known = facts.kb_release(dists, installed, pip_only=fix is not None)
    if known is None:
        return fix
    line, named = known
    return fix if fix is not None and named is not None and f"'{named}'" in fix else line


def _generic(facts: Facts, rule: object) -> str | None:
    owner = _owner(facts, rule)
    if owner is None:
        return None
    pin = facts.pin("sglang", owner[0])
    if pin and pin != owner[1]:
        return f"pip install '{owner[0]}=={pin}' (the installed SGLang's pin)"
    return None
