"""``moonpin check``: is this image's mooncake usable by this SGLang + torch? (light mode)

Run at worker start, before any model I/O. Everything is read from the file system:
installed distributions (``importlib.metadata``), the installed SGLang's own sources (with
the readers' ``ast`` analyzer), the mooncake loaders (``mooncake/pg.py``/``ep.py``) and the
builds they would import, found the way the import system would find them (any suffix in
``importlib.machinery.all_suffixes()``: a real extension module and a ``.py`` stand-in are
read alike). Nothing of torch, mooncake or SGLang is imported, and neither httpx nor
networkx nor the resolver's graph is loaded on this path.

Exit codes: 0 usable (or mooncake not requested), 1 not usable, 2 could not check.

The deep probe (on by default for elastic EP; ``--no-deep`` turns it off) imports torch
and the process-group module in a child interpreter with a timeout, checks each required
name on the imported module, and reads ``torch.distributed.Backend.backend_capability``
for ``mooncake`` and ``mooncake-cpu``. A crash (signal) or a hang is a finding; a host
without the NVIDIA driver (``libcuda.so.1`` missing) "could not import here", which is not
an incompatibility: the light checks decide.

Test hook: ``MOONPIN_CHECK_CUDA_FALLBACK`` replaces ``/usr/local/cuda``, the CUDA root
torch's ``cpp_extension`` falls back to when neither ``CUDA_HOME``/``CUDA_PATH`` nor an
``nvcc`` on ``PATH`` names one (so a test can model a host without a toolkit).
"""

from __future__ import annotations

import os
import sys

from moonpin.kb.cache import facts_memo
from moonpin.preflight.result import CheckResult, Report, shown
from moonpin.preflight.result import report as _report

# A worker runs this at every start, so its modules load nothing past ``os``: ``re``,
# ``json``, ``ast``, ``pathlib``, ``typing`` and ``dataclasses`` each pull in ``re`` and
# ``enum`` (~8 ms, as much as the interpreter's own start). What needs them is imported
# where it is used, and what they would compute from a file is kept in the file-facts memo
# (:func:`moonpin.kb.cache.facts_memo`), validated by the file's size and mtime. The check's
# parts live in the rooms beside it (env/, pyimport/, loader/, installed/, judge/, probe/;
# ARCHITECTURE.md is their map).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, NoReturn

    FixProvider = Callable[[str, str, str, str], list[str]]
    StrPath = str | os.PathLike[str]

    from moonpin.preflight.env.context import Context, Run
    from moonpin.preflight.env.target import Target
    from moonpin.preflight.extensions.seam import Probe
    from moonpin.preflight.installed.image_facts import Dist, KBView, Requirement, Torch
    from moonpin.preflight.judge.fixes import Fixer
    from moonpin.preflight.pyimport.atimport import Bounds
    from moonpin.preflight.pyimport.importer import Sources
else:
    from _collections_abc import Callable as _Callable  # what collections.abc re-exports

    FixProvider = _Callable[[str, str, str, str], list[str]]

__all__ = ["CheckResult", "FixProvider", "Report", "check_image",
           "check_image_file", "main", "requested_features"]

_FLAGS = {
    "--elastic-ep-backend": "elastic-ep",
    "--moe-a2a-backend": "moe-a2a",
    "--disaggregation-transfer-backend": "pd-disaggregation",
    "--hicache-storage-backend": "hicache",
}


def requested_features(launch_args: Sequence[str],
                       elastic_ep_backend: str | None = None) -> dict[str, str]:
    """feature -> backend, for the mooncake-relevant flags in the worker's arguments."""
    out: dict[str, str] = {}
    if elastic_ep_backend:
        out["elastic-ep"] = elastic_ep_backend
    args = list(launch_args)
    for i, a in enumerate(args):
        flag, eq, value = a.partition("=")
        if flag not in _FLAGS:
            continue
        if not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
        out.setdefault(_FLAGS[flag], value)
    return out


def check_image(*, elastic_ep_backend: str | None, launch_args: Sequence[str] = (),
                site_packages: Sequence[StrPath] | None = None, kb_path: StrPath | None = None,
                strict: bool = False, fix_provider: FixProvider | None = None,
                deep: bool | None = None, deep_timeout: float = 120.0,
                source_cache: bool = True, python: str | None = None,
                rootfs: StrPath | None = None, config: Any = None,
                partial_root: bool = False, where: bool = True,
                gpu: str | None = None, image_env: Sequence[str] = (),
                interpreter: str | None = None, bounds: Bounds | None = None) -> Report:
    """Read the image and decide whether the requested mooncake features can work, and
    whether each native extension the launch line imports loads
    (:mod:`moonpin.preflight.extensions`).

    The image is ``python``'s environment (its ``sys.path``, Python version and extension
    suffixes; it runs the deep probe), else the ``site_packages`` folders, else an active
    virtualenv moonpin does not run from, else this interpreter
    (:mod:`moonpin.preflight.env.target`).
    ``rootfs``: an image's unpacked root filesystem, judged from outside with its
    ``config`` (:mod:`moonpin.preflight.env.rootfs`; nothing in it runs, no deep probe;
    a runtime bundle, or its ``rootfs/``, brings its ``config.json``), ``image_env``
    (``KEY=VALUE``) over the config's ``Env``, and ``interpreter``, the image's python to
    judge instead of the one its entry point runs;
    ``partial_root``: that root holds only what the check reads of the image (``--image``),
    so a top-level module it lacks may still be in the image.

    ``source_cache=False`` reads every SGLang source instead of trusting the analysis of
    unchanged files (see :mod:`moonpin.preflight.installed.sources`), and every build, loader
    and table instead of trusting the file-facts memo (:func:`moonpin.kb.cache.facts_memo`).

    ``where=False`` leaves :attr:`Report.found` (where the importer finds sglang, mooncake
    and torch) empty: only the JSON output shows it, and the text output of a worker start
    does without the ~1 ms it costs.

    ``gpu``: the GPU capability the worker runs on (``9.0``; ``none``), for a loader that
    picks its build by it (:func:`moonpin.preflight.extensions.verdict.gpu_state`).

    ``bounds``: how far the code an import runs by calls is followed
    (:class:`moonpin.preflight.pyimport.atimport.Bounds`; None: that walk's defaults); an
    extension whose walk reaches them is "not judged"."""
    target = None
    env: Any = os.environ
    if rootfs is not None:
        from moonpin.preflight.env import target as tg
        from moonpin.preflight.env.rootfs import bundle, target_for, with_overrides
        from moonpin.preflight.env.rootfs import image_env as env_of

        try:
            root = os.fspath(rootfs)
            if config is None:  # a `umoci unpack` bundle (or its rootfs/): its config.json
                root, config = bundle(root)
            config = with_overrides(config, image_env)
            target = target_for(root, config, interpreter)
            env = env_of(config)
        except tg.TargetError as e:
            return _report([CheckResult("target", "fail", str(e), e.tip or "pass the root "
                                        "folder of an unpacked image (--rootfs) holding its "
                                        "Python")], strict, could_not_check=True)
    from moonpin.preflight import written
    from moonpin.preflight.env.context import Run

    run = Run()  # what this check starts beside reading (children computing ahead)
    memo = facts_memo()
    memo.enabled = source_cache
    found: dict[str, Any] = {}
    seen: dict[str, Any] = {}
    try:
        report = _check_image(elastic_ep_backend=elastic_ep_backend, launch_args=launch_args,
                              site_packages=site_packages, kb_path=kb_path, strict=strict,
                              fix_provider=fix_provider, deep=deep, deep_timeout=deep_timeout,
                              source_cache=source_cache, python=python, target=target,
                              found=found if where else None, partial_root=partial_root,
                              seen=seen, run=run, env=env, gpu=gpu, bounds=bounds)
        report.found = found
        report = written.for_pip(report, seen.get("target"))
    finally:
        if run.pending or run.ready or run.processes:  # a load begun ahead and not taken:
            run.close()  # its child is ended; a process kept by the loads is unmapped
        memo.enabled = True
        memo.flush()  # what was learned; a cache that cannot be written costs only time
    return written.for_target(report, target, python)


def _check_image(*, elastic_ep_backend: str | None, launch_args: Sequence[str],
                 site_packages: Sequence[StrPath] | None, kb_path: StrPath | None,
                 strict: bool, fix_provider: FixProvider | None, deep: bool | None,
                 deep_timeout: float, source_cache: bool, python: str | None,
                 found: dict[str, Any] | None, target: Target | None = None,
                 partial_root: bool = False, seen: dict[str, Any] | None = None,
                 run: Run | None = None, env: Any = None, gpu: str | None = None,
                 bounds: Bounds | None = None) -> Report:
    """The walk: each room entered once, in the order of its layers (ARCHITECTURE.md; held by
    ``tests/preflight/test_walk.py``): the environment, the importer's model, what is
    installed, the judgements every project shares, the extensions' rules with the
    ``OWN_LINES`` rule's own lines, the probe. What a room found is handed to the next as
    values; a room says its lines with ``add``."""
    features = requested_features(launch_args, elastic_ep_backend)
    # the OWN_LINES rule (mooncake's) says which launch choices import it; judged in its own
    # lines (moonpin.preflight.extensions.seam)
    own = _own_rule()
    wanted = {f: b for f, b in features.items() if b in own.CHOICES.get(f, ())}
    others = {f: b for f, b in features.items() if f not in wanted}
    asked = ", ".join(f"{f}={b}" for f, b in features.items()) or f"no {own.IMPORT} flag"
    nothing = _report([CheckResult(own.IMPORT, "skip", f"{own.IMPORT} backend not requested "
                                   f"({asked}); nothing to check")], strict=False)
    checks: list[CheckResult] = []
    add = checks.append
    env = os.environ if env is None else env
    kb_file = os.fspath(kb_path) if kb_path is not None else None

    # env: which environment, and the Context every room reads it through
    said: list[CheckResult] = []
    target = target or _target(site_packages, python, said.append)
    if target is None:  # (a typo among the backends is not judged without an environment)
        return _report(said, strict, could_not_check=True) if wanted else nothing
    from moonpin.preflight.env.context import Context

    if seen is not None:
        seen["target"] = target
    paths = target.paths
    # the environment as every part of the check reads it, with one model of its importer
    ctx = Context.of(target, complete=site_packages is None and not partial_root, run=run,
                     env=env, bounds=bounds)
    add(CheckResult("target", "pass", target.describe()))
    tag = target.tag  # the Python tag fix lines name (cp312)
    if target.guessed is not None:
        add(CheckResult("interpreter", "warn", *target.guessed))
    # an interpreter that cannot start (one that answered, --python, ran its own lines)
    modelled = site_packages is not None or target.root is not None  # site read, not run
    stop = ctx.interpreter_stop() if modelled else None
    for unread in ctx.unread_site() if modelled and stop is None else ():
        add(CheckResult("interpreter", "warn", unread))
    if not wanted:  # the other extensions only (moonpin.preflight.extensions_only)
        if stop is not None and others:  # the worker never starts: nothing it imports runs
            return _report([*checks, CheckResult("interpreter", "fail", *stop)], strict)
        if others:
            from moonpin.preflight.judge.choices import refused_backends

            refused = refused_backends(others, _FLAGS, target, kb_path)
            if refused:  # a typo is not "mooncake not requested": SGLang refuses it at launch
                return _report(refused, strict=False, could_not_check=True)
        from moonpin.preflight.extensions_only import judge_alone

        lines = judge_alone(ctx, features, _FLAGS, env, gpu, kb_file)
        return _report([*checks, *lines], strict) if lines else nothing

    # installed: what the importer finds, the distributions, SGLang's sources, the KB
    from moonpin.preflight.installed import image_facts as im

    unlisted = ([u for u in map(im.unlistable, paths) if u]
                if site_packages is not None and stop is None else [])
    if stop is None and not unlisted:
        sglang_src = im.sglang_sources(ctx, source_cache)
        from moonpin.preflight.extensions.seam import DISTRIBUTIONS

        dists, owned = im.by_name(paths, ctx.confined, DISTRIBUTIONS, own.DISTRIBUTIONS[0])
        sglang, torch_d = dists.get("sglang"), dists.get("torch")
        kb, kb_said = _knowledge_base(kb_file, sglang.version if sglang else None)
        if found is not None:
            found.update(_where(ctx, target, site_packages is not None and python is None,
                                dists, owned, sglang_src, own.IMPORT))
        torch_found = im.find_package(ctx, "torch")
        from moonpin.preflight.installed import sources

        begin = ("elastic-ep" in wanted and sglang_src is not None
                 and sources.will_read(sglang_src, source_cache))
        guess = kb.requirement(sglang.version if sglang else None) if begin else None
        if begin:  # the OWN_LINES project's package found before the load ahead forks: the
            im.locate(ctx, own.IMPORT)  # child and the walk then share the importer's answer

    # judge: what every project shares (a backend SGLang refuses, torch, SGLang's needs and
    # pins, the launch line)
    if others:
        from moonpin.preflight.judge.choices import own_launch, refused_backends

        # the installed SGLang as the walk read it (not read again)
        known = ((sglang.version if sglang else None, own_launch(sglang_src, sglang, kb))
                 if stop is None and not unlisted else None)
        refused = refused_backends(others, _FLAGS, target, kb_path, known)
        if refused:  # a typo is not "mooncake not requested": SGLang refuses it at launch
            return _report(refused, strict=False, could_not_check=True)
    if stop is not None:
        add(CheckResult("interpreter", "fail", *stop))
        return _report(checks, strict)
    if unlisted:  # the importer finds nothing there: no "not installed" diagnosis
        add(CheckResult("site-packages", "fail", "; ".join(unlisted) + ": nothing installed "
                        "there can be imported", "make it readable by the worker's user "
                        "(chmod a+rX on the folder)"))
        return _report(checks, strict)
    from moonpin.preflight.judge.fixes import Fixer, Project
    from moonpin.preflight.judge.sglang import (
        check_launch,
        check_sglang_torch,
        sglang_requirement,
    )
    from moonpin.preflight.judge.torch_check import torch_of

    # the fix lines name the OWN_LINES project as its rule says it
    fixer = Fixer(fix_provider, kb_file, Project(own.IMPORT, own.DISTRIBUTIONS[0],
                                                 own.PREBUILD))
    fixer.python = tag
    if target.machine is not None:
        fixer.arch = target.machine
    fixer.installed(dists, owned)  # the fix lines learn the installed versions
    add(CheckResult("launch", "pass", f"{own.IMPORT} requested for "
                    + ", ".join(sorted(wanted))))
    add(kb_said)
    start = len(checks)
    torch = torch_of(torch_d, fixer, add, ctx, torch_found, imports=False)
    # torch's line, from its files: its import is judged after the fork (below)
    at = next((i for i in range(start, len(checks)) if checks[i].name == "torch"), None)
    if sglang is not None and torch is not None:  # the torch SGLang itself pins
        check_sglang_torch(sglang, torch.version, fixer, add, ctx.markers)
    # on a cold start the OWN_LINES rule's long piece is begun on a second core while
    # SGLang's sources are read, for the requirement the KB records for the release (a
    # guess the sources then confirm: a load asked for with other inputs is computed afresh)
    ahead = _ahead(own, ctx, wanted, owned, torch, sglang, sglang_src, guess, kb, fixer,
                   source_cache) if begin and torch is not None else None
    if torch is not None and at is not None:  # the modelled `import torch`, on this core
        from moonpin.preflight.judge.torch_check import imported  # while the child works

        checks[at] = imported(ctx, checks[at], fixer)
    req = sglang_requirement(ctx, sglang, kb, add, source_cache, sglang_src, ahead,
                             modules=own.MODULES)
    if launch_args:  # the worker's own launch arguments against this release's rules
        from moonpin.preflight.judge.choices import own_launch

        check_launch(list(launch_args), sglang.version if sglang else None, kb, add,
                     own_launch(sglang_src, sglang, kb))

    # extensions: the worker's other native extensions, one line each; then the OWN_LINES
    # rule's own lines
    from moonpin.preflight.extensions.seam import Job

    if torch is not None:
        from moonpin.preflight.extensions.verdict import judge_extensions

        judge_extensions(ctx, features, _FLAGS, torch, dists, add, env=env, gpu=gpu,
                         kb_file=kb.path)
    probe = own.own_lines(Job(ctx=ctx, wanted=wanted, dists=owned, torch=torch,
                              sglang=sglang, sglang_src=sglang_src, req=req, kb=kb,
                              fixer=fixer, add=add, source_cache=source_cache))
    if probe is None:
        return _report(checks, strict)

    # probe: the target's own interpreter imports the module (not for an image's files)
    if deep is None:
        deep = "elastic-ep" in wanted
    if target.root is not None:
        add(CheckResult("deep probe", "skip", "nothing in the image runs (judged from its "
                        "files: --rootfs/--image); light checks only"))
    elif not deep:
        add(CheckResult("deep probe", "skip", "not requested (--no-deep); light checks only"))
    elif torch is None and torch_found is None:
        # what the import finds decides, not the metadata (a torch folder whose dist-info
        # does not read, a NUL in its METADATA, still imports and is probed)
        add(CheckResult("deep probe", "skip", "torch is not installed: nothing to import"))
    else:
        _deep(checks, probe, site_packages if python is None else None, deep_timeout,
              target.python or sys.executable)
    return _report(checks, strict)


def _own_rule() -> Any:
    """The loader rule whose project says its own lines (the seam's ``OWN_RULE``), imported,
    not asked: the walk enters the extensions' room once, after the judgements every project
    shares."""
    import importlib

    from moonpin.preflight.extensions import seam

    return importlib.import_module(seam.OWN_RULE)


def _ahead(own: Any, ctx: Context, wanted: dict[str, str], owned: list[Dist], torch: Torch,
           sglang: Dist | None, src: Sources | None, guess: Requirement | None, kb: KBView,
           fixer: Fixer, source_cache: bool) -> Callable[[], dict[str, object]]:
    """The OWN_LINES rule's ``ahead`` hook as work for a child
    (:mod:`moonpin.preflight.prefetch`), run there only: each load it computes, recorded."""

    def work() -> dict[str, object]:
        from moonpin.preflight.extensions.seam import Job

        record: dict[str, object] = {}
        ctx.run.record = record
        own.ahead(Job(ctx=ctx, wanted=wanted, dists=owned, torch=torch, sglang=sglang,
                      sglang_src=src, req=guess, kb=kb, fixer=fixer, add=lambda c: None,
                      source_cache=source_cache))
        return record

    return work


def _where(ctx: Context, target: Target, given_sites: bool, dists: dict[str, Dist],
           owned: list[Dist], sglang_src: Sources | None, own: str) -> dict[str, Any]:
    """Where the importer finds sglang, the OWN_LINES project (``own``: mooncake) and torch,
    for ``--json`` (:func:`moonpin.preflight.installed.where.where`); ``PYTHONPATH`` is the
    target's unless the environment is ``--site-packages`` folders, which do not add it."""
    from moonpin.preflight.installed.image_facts import locate
    from moonpin.preflight.installed.where import editable_dist, where

    pythonpath = [] if given_sites else [
        p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    out = {}
    for name in ("sglang", own, "torch"):
        got = locate(ctx, name)
        dist: Dist | None
        if name == own:
            owner = [d for d in owned if got is not None
                     and got.folder == os.path.join(d.root, own)]
            dist = (owner or owned)[0] if owner or owned else None
        else:
            dist = dists.get(name)
        out[name] = where(got, target.paths, target.sites, pythonpath, dist,
                          editable_dist(dist, ctx.confined) if dist is not None else False,
                          target.cwd,
                          sglang_src if name == "sglang" else None, ctx.confined)
    return out


def _target(site_packages: Sequence[StrPath] | None, python: str | None,
            add: Callable[[CheckResult], None]) -> Target | None:
    """The environment to read (:mod:`moonpin.preflight.env.target`), or None (said with
    ``add``)."""
    from moonpin.preflight.env import target as tg

    if site_packages is not None:
        missing = [os.fspath(p) for p in site_packages if not os.path.isdir(p)]
        if missing:
            add(CheckResult("site-packages", "fail", f"not a folder: {', '.join(missing)}"))
            return None
    try:
        if python is not None:
            target = tg.from_python(python)
            if site_packages is not None:  # those folders, with what their .pth files add
                given = tg.from_site_packages([os.fspath(p) for p in site_packages])
                target.paths, target.sites = given.paths, given.sites
            return target
        if site_packages is not None:
            return tg.from_site_packages([os.fspath(p) for p in site_packages])
        return tg.default()
    except tg.TargetError as e:
        add(CheckResult("target", "fail", str(e), "pass the image's interpreter, e.g. "
                        "--python /opt/venv/bin/python"))
        return None


def _knowledge_base(kb_file: str | None, sglang: str | None = None
                    ) -> tuple[KBView, CheckResult]:
    """The KB as the check reads it, and the line that says so; ``sglang``: the installed
    release (its entry is all a start that passes reads of the resolved index)."""
    from moonpin.kb.paths import default_kb_file
    from moonpin.preflight.installed.image_facts import KBView

    kb = KBView(kb_file or default_kb_file(), sglang)
    if not kb.ok:
        return kb, CheckResult("kb", "warn", kb.msg + "; the image is still read",
                               "run `moonpin scrape --full` to rebuild it, or pass --kb PATH")
    from moonpin.resolver.tables.documents import age_note

    old = age_note(kb.path)
    return kb, (CheckResult("kb", "warn", f"read {kb.msg}; {old}",
                            "run `moonpin scrape` (or pass a newer KB with --kb)")
                if old else CheckResult("kb", "pass", f"read {kb.msg}"))


def _deep(checks: list[CheckResult], probe: Probe, site_packages: Sequence[StrPath] | None,
          timeout: float, python: str) -> None:
    """The deep probe's results added to ``checks``; what it saw then settles a light
    library guess (:func:`moonpin.preflight.probe.deep_probe._downgrade_light_libraries`)."""
    from moonpin.preflight.extensions import seam
    from moonpin.preflight.probe.deep_probe import deep_probe, downgrade_light_libraries

    # another extension's line (sgl_kernel's, flashinfer's) fixes that import, not this one
    others = {n for n in seam.RULES if n not in seam.OWN_LINES}
    if probe.module is None:
        checks.append(CheckResult("deep probe", "skip", probe.why))
        return
    for r in deep_probe(probe.module, probe.names, site_packages, timeout, python,
                        probe.backends):
        # the light check's install line, where it has one, fixes what the deep
        # probe then sees: say that line rather than the library hint
        pip_fix = next((c.fix for c in checks if c.status == "fail" and c.fix
                        and c.fix.startswith("pip ") and c.name not in others), None)
        if r.status == "fail" and pip_fix and r.name == "deep probe":
            r = CheckResult(r.name, r.status, r.message, pip_fix, r.evidence)
        checks.append(r)
    checks[:] = downgrade_light_libraries(checks)


# ------------------------------------------------------------------ command line


def _seconds(text: str) -> float:
    """A finite positive number of seconds (argparse's type for --deep-timeout)."""
    import argparse

    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value < 1e9):  # also refuses nan and inf
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} is not a number of seconds above 0 (e.g. --deep-timeout 300)")
    return value


def _parser(json_errors: bool = False) -> Any:
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> NoReturn:
            """argparse's refusal as every moonpin command says it: the usage, the error
            with a tip (the nearest option), and with ``--json`` the check's JSON
            document on stdout (could not check, exit 2)."""
            from moonpin.resolver.spelling import argparse_hint

            if len(message) > 400:
                message = message[:400] + f"... ({len(message):,} characters)"
            tip = argparse_hint(self, message) or f"`{self.prog} --help` says what it takes"
            self.print_usage(sys.stderr)
            print(shown(f"{self.prog}: error: {message}") + "\ntip: " + shown(tip),
                  file=sys.stderr)
            if json_errors:
                import json

                doc = json.loads(_report([CheckResult("arguments", "fail", message, tip)],
                                         strict=False, could_not_check=True).to_json())
                doc.update(error=message, tip=tip)
                print(json.dumps(doc, indent=1))
            raise SystemExit(2)

        def _get_formatter(self) -> argparse.HelpFormatter:
            from moonpin.resolver.inputs import help_width  # not shutil's, and its compressors

            return self.formatter_class(prog=self.prog, width=help_width())  # type: ignore[call-arg]

    p = Parser(prog="moonpin check",
                                description="check this image's mooncake before worker start",
                                epilog="exit codes: 0 usable; 1 not usable (or, with --strict, "
                                       "a warning); 2 could not check")
    p.add_argument("--elastic-ep-backend", default=None, metavar="BACKEND",
                   help="the worker's --elastic-ep-backend (mooncake: check what it needs)")
    p.add_argument("--enable-dp-attention", action="store_true",
                   help="accepted; does not change the light checks")
    p.add_argument("--site-packages", action="append", default=None,
                   metavar="PATH", help="read this folder instead of sys.path (repeatable); "
                   "its Python version comes from its path (lib/python3.X/site-packages)")
    p.add_argument("--python", default=None, metavar="PATH",
                   help="check this interpreter's environment (its sys.path, Python version "
                   "and extension suffixes; the deep probe runs it). Default: an active "
                   "virtualenv other than moonpin's own, else this interpreter")
    p.add_argument("--rootfs", default=None, metavar="DIR",
                   help="judge an unpacked image root (what `docker export` or `umoci "
                   "unpack` leaves) from outside, running nothing in it; a umoci/runc bundle "
                   "(or its rootfs/) brings its config.json: Env, args, cwd")
    p.add_argument("--image", default=None, metavar="PATH",
                   help="judge an image file (an OCI layout or archive, a `docker save` "
                   "tarball) before it is deployed: unpacked to a temporary folder, then "
                   "as --rootfs with the image's Env and Entrypoint")
    p.add_argument("--image-env", action="append", default=None, metavar="KEY=VALUE",
                   help="with --rootfs/--image: set this variable of the image's environment "
                   "(repeatable; over its config's Env, as `docker run -e`), e.g. "
                   "PATH=/opt/venv/bin:/usr/bin:/bin for a `docker export` tree")
    p.add_argument("--interpreter", default=None, metavar="PATH-IN-IMAGE",
                   help="with --rootfs/--image: judge this python of the image (e.g. "
                   "/opt/venv/bin/python) instead of the one its entry point runs")
    p.add_argument("--platform", default=None, metavar="OS/ARCH",
                   help="with --image: the image of a multi-platform index (linux/amd64)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="one line when usable; only the failing checks otherwise")
    p.add_argument("--kb", default=None, help="knowledge-base file (default: the one "
                   "commands read)")
    p.add_argument("--strict", action="store_true", help="warnings fail")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--deep", action=argparse.BooleanOptionalAction, default=None,
                   help="import the module in a child interpreter (default: on for elastic EP)")
    p.add_argument("--deep-timeout", type=_seconds, default=120.0, metavar="SECONDS",
                   help="how long the deep probe may take (default 120)")
    p.add_argument("--gpu-capability", default=None, metavar="CC",
                   help="the GPU the worker runs on (9.0, 10.0; none: no GPU), for a loader "
                   "that picks its build by it (sgl_kernel's sm<NN>). Default: "
                   "$MOONPIN_GPU_CAPABILITY, else every choice is judged")
    p.add_argument("--no-cache", dest="cache", action="store_false",
                   help="read every SGLang source; neither use nor write the analysis cache "
                        "($MOONPIN_CACHE_DIR, default ~/.cache/moonpin)")
    return p


class _Args:
    """What :func:`_parser` would return, for the common command lines."""

    def __init__(self) -> None:
        self.elastic_ep_backend: str | None = None
        self.enable_dp_attention = False
        self.site_packages: list[str] | None = None
        self.python: str | None = None
        self.rootfs: str | None = None
        self.image: str | None = None
        self.platform: str | None = None
        self.image_env: list[str] | None = None
        self.interpreter: str | None = None
        self.quiet = False
        self.kb: str | None = None
        self.strict = False
        self.json = False
        self.deep: bool | None = None
        self.deep_timeout = 120.0
        self.cache = True
        self.gpu_capability: str | None = None


_FLAGS_ONLY = {"--enable-dp-attention": ("enable_dp_attention", True),
               "--strict": ("strict", True), "--json": ("json", True),
               "--deep": ("deep", True), "--no-deep": ("deep", False),
               "--no-cache": ("cache", False), "-q": ("quiet", True),
               "--quiet": ("quiet", True)}
_VALUED = {"--elastic-ep-backend", "--site-packages", "--kb", "--deep-timeout", "--python",
           "--rootfs", "--image", "--platform", "--gpu-capability", "--image-env",
           "--interpreter"}


def _fast_parse(argv: Sequence[str]) -> _Args | None:
    """Parse the options of :func:`_parser` without loading argparse (a worker start pays
    for every import); None for anything unusual (help, abbreviations, errors), which
    argparse then handles with its own messages."""
    ns = _Args()
    i = 0
    while i < len(argv):
        opt, eq, value = argv[i].partition("=")
        i += 1
        if opt in _FLAGS_ONLY and not eq:
            attr, val = _FLAGS_ONLY[opt]
            setattr(ns, attr, val)
            continue
        if opt not in _VALUED:
            return None
        if not eq:
            if i >= len(argv) or argv[i].startswith("-"):
                return None
            value = argv[i]
            i += 1
        if opt == "--elastic-ep-backend":
            ns.elastic_ep_backend = value
        elif opt == "--site-packages":
            ns.site_packages = [*(ns.site_packages or []), value]
        elif opt == "--kb":
            ns.kb = value
        elif opt in ("--python", "--rootfs", "--image", "--platform", "--interpreter"):
            setattr(ns, opt[2:], value)
        elif opt == "--gpu-capability":
            ns.gpu_capability = value
        elif opt == "--image-env":
            ns.image_env = [*(ns.image_env or []), value]
        else:
            try:
                ns.deep_timeout = float(value)
            except ValueError:
                return None
            if not (0 < ns.deep_timeout < 1e9):
                return None  # argparse says why
    return ns


def _exclusive(ns: _Args) -> CheckResult | None:
    """The failure of a command line naming two images, or None."""
    given = [opt for opt, value in (("--image", ns.image), ("--rootfs", ns.rootfs),
                                    ("--python", ns.python),
                                    ("--site-packages", ns.site_packages)) if value]
    if len(given) > 1 and given[0] in ("--image", "--rootfs"):
        if given[1] == "--python":  # meant: the image's own interpreter
            inside = (ns.python if ns.rootfs and ns.python and ns.python.startswith("/")
                      and os.path.lexists(os.path.join(ns.rootfs, ns.python.lstrip("/")))
                      else "/opt/venv/bin/python")
            return CheckResult("command line", "fail", f"{given[0]} and --python cannot be "
                               "used together: --python runs an interpreter of this machine, "
                               f"{given[0]} judges the image from its files",
                               f"to name the image's interpreter, pass --interpreter {inside} "
                               "(a path inside the image) instead of --python")
        return CheckResult("command line", "fail", f"{given[0]} and {given[1]} cannot be "
                           "used together: each names the image to judge",
                           f"drop {given[1]}: {given[0]} names the image, and "
                           "--interpreter/--image-env say how it runs")
    if (ns.image_env or ns.interpreter) and not (ns.image or ns.rootfs):
        return CheckResult("command line", "fail", "--image-env and --interpreter describe "
                           "an image judged from its files: they need --rootfs or --image",
                           "pass --rootfs DIR or --image PATH too (for an interpreter of this "
                           "machine: --python PATH)")
    if ns.platform is not None and ns.image is None:
        return CheckResult("command line", "fail", "--platform picks the image of an image "
                           "file's index: it needs --image", "pass --image PATH too, or drop "
                           "--platform")
    return None


def check_image_file(path: str, platform: str | None = None, *,
                     elastic_ep_backend: str | None = None, launch_args: Sequence[str] = (),
                     kb_path: StrPath | None = None, strict: bool = False,
                     gpu: str | None = None, image_env: Sequence[str] = (),
                     interpreter: str | None = None) -> Report:
    """``--image``: the image file at ``path`` (``platform``: the image of a multi-platform
    index) unpacked to a temporary folder, removed afterwards (also on an error or an
    interrupt), judged as ``--rootfs`` with its config (``gpu``, ``image_env``,
    ``interpreter``: as :func:`check_image` takes them)."""
    import shutil
    import tempfile

    try:
        import importlib

        from moonpin.preflight.env.rootfs import unpack_to

        ImageError = importlib.import_module("moonpin.readers.image.manifest").ImageError
    except ImportError as e:
        return _report([CheckResult("image", "fail", f"this moonpin cannot read image "
                                    f"files ({e})", "unpack the image (`docker export`, "
                                    "`umoci unpack`) and pass --rootfs DIR")],
                       strict=False, could_not_check=True)
    dest = tempfile.mkdtemp(prefix="moonpin-image.")
    try:
        # what each loader rule reads of an image, its data (read, not asked: the walk
        # enters the extensions' room once, after the environment's)
        from moonpin.preflight.extensions import seam

        reads = [getattr(importlib.import_module(f"{seam.RULES_PACKAGE}.{m}"), "IMAGE_READS", {})
                 for m in seam.RULES.values()]
        config = unpack_to(path, platform, dest, reads)
        return check_image(elastic_ep_backend=elastic_ep_backend, launch_args=launch_args,
                           kb_path=kb_path, strict=strict, source_cache=False,
                           rootfs=dest, config=config, partial_root=True, gpu=gpu,
                           image_env=image_env, interpreter=interpreter)
    except (ImageError, OSError) as e:  # OSError: the file itself cannot be read
        tip = getattr(e, "tip", None) or getattr(e, "hint", None)
        return _report([CheckResult("image", "fail", str(e), tip or "pass an OCI image "
                                    "layout or archive, or a `docker save` tarball")],
                       strict=False, could_not_check=True)
    finally:  # here, not in the environment's room: the walk leaves it once
        shutil.rmtree(dest, ignore_errors=True)


def _errors(report: Report) -> None:
    """The failures that stopped the check, on stderr, each with its tip."""
    for c in report.checks:
        if c.status == "fail":
            print(shown(f"moonpin check: error: {c.name}: {c.message}") + "\ntip: "
                  + shown(c.fix or "check the command line (--site-packages, --python, --kb)"),
                  file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    launch: list[str] = []
    if "--" in args_in:
        i = args_in.index("--")
        args_in, launch = args_in[:i], args_in[i + 1:]
    ns = _fast_parse(args_in)
    if ns is None:  # help, or something to complain about: argparse says it properly
        try:
            ns = _parser("--json" in args_in).parse_args(args_in)
        except SystemExit as e:  # argparse: bad arguments are "could not check"
            return 2 if e.code else 0
    clash = _exclusive(ns)
    if clash is not None:
        report = _report([clash], strict=False, could_not_check=True)
    elif ns.image is not None:
        report = check_image_file(ns.image or "", ns.platform,
                                  elastic_ep_backend=ns.elastic_ep_backend,
                                  launch_args=launch, kb_path=ns.kb, strict=ns.strict,
                                  gpu=ns.gpu_capability, image_env=ns.image_env or (),
                                  interpreter=ns.interpreter)
    else:
        report = check_image(elastic_ep_backend=ns.elastic_ep_backend, launch_args=launch,
                             site_packages=ns.site_packages, kb_path=ns.kb,
                             strict=ns.strict, deep=ns.deep, deep_timeout=ns.deep_timeout,
                             source_cache=ns.cache, python=ns.python, rootfs=ns.rootfs,
                             where=ns.json, gpu=ns.gpu_capability,
                             image_env=ns.image_env or (), interpreter=ns.interpreter)
    if report.exit_code == 2:  # could not check: said as every command says bad input
        _errors(report)
    try:
        if ns.json:
            print(report.to_json())
        elif report.exit_code == 2:
            if not ns.quiet:
                print("\n".join(report.stopped_lines()))
        elif ns.quiet:
            print("\n".join(report.quiet_lines()))
        else:
            print("\n".join(report.lines()))
    except BrokenPipeError:  # the reader left (`| head`): the verdict's exit code still holds
        from moonpin.kb.files import to_devnull

        to_devnull(1)
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
