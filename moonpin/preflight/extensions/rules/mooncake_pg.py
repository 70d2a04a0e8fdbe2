"""Mooncake's own lines (its rule's ``OWN_LINES`` judgement, :mod:`.mooncake_rule`): the
installed mooncake package (:func:`package`); for elastic EP the process-group module this
SGLang imports, the loader that module is, the build it picks for this torch, and that build's
names, backends and CUDA major, decided by the one compatibility rule
(:mod:`moonpin.resolver.rule`) from the image's facts (:func:`check_pg`); the modules SGLang's
other mooncake features import (:func:`check_feature`).
"""

from __future__ import annotations

import os

from moonpin.kb.cache import facts_memo
from moonpin.preflight.access.confined import NOWHERE
from moonpin.preflight.installed.build_facts import (
    UNREADABLE_SCHEME,
    BuildFacts,
    find_ninja,
    find_nvcc,
    on_path,
    read_build,
    scheme_shape,
    str_or_none,
)
from moonpin.preflight.installed.build_facts import built_for as _built_for
from moonpin.preflight.installed.image_facts import (
    CAP_BUILD,
    KBView,
    Requirement,
    Torch,
    file_name,
    file_suffix,
    find_package,
    list_folder,
    locate,
    module_file,
    not_files,
    read_bytes,
    shipped_like,
    torch_version_py,
    unlistable,
    vendor_reason,
)
from moonpin.preflight.judge.libraries import check_libraries, torch_first
from moonpin.preflight.result import CheckResult

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence
    from typing import Any

    from moonpin.preflight.access.confined import Confined
    from moonpin.preflight.env.context import Context
    from moonpin.preflight.installed.image_facts import Dist
    from moonpin.preflight.judge.fixes import Fixer
    from moonpin.preflight.pyimport.importer import Sources

__all__ = ["BACKENDS", "MODULES", "TOP", "UNREADABLE", "build_module", "check_feature",
           "check_pg", "choose_module", "memo",
           "package", "scheme_of"]


#: the process-group modules, SGLang's current one first: what the installed files are read
#: for
MODULES = ("mooncake.pg", "mooncake.ep")
#: the torch.distributed backend names mooncake registers (what a build's bytes are read for)
BACKENDS = ("mooncake", "mooncake-cpu")
#: the package every module above is in
TOP = "mooncake"
#: The words of a loader the light check cannot read (the deep probe settles it by its end,
#: :data:`moonpin.preflight.installed.build_facts.UNREADABLE_SCHEME`).
UNREADABLE = f"its loading scheme is none a mooncake release uses, {UNREADABLE_SCHEME}"


def choose_module(req: Any, shipped: Collection[str]) -> str | None:
    """Which process-group module ``import`` ends up with for SGLang's requirement ``req``
    (:class:`moonpin.resolver.rule.Requirement`) when the package ships ``shipped``."""
    from moonpin.resolver import rule

    return rule.choose_module(req, shipped)


def memo(kind: str, path: str, compute: Callable[[], Any],
         valid: Callable[[Any], bool], within: Confined = NOWHERE) -> Any:
    """``facts_memo().get`` (:meth:`moonpin.kb.cache.FileMemo.get`); a loader in a zip archive
    on ``sys.path`` (no file of its own to stamp) is computed afresh each time."""
    from moonpin.kb.cache import facts_memo

    try:
        return facts_memo().get(kind, path, compute, valid, within=within.root)
    except OSError:
        from moonpin.preflight.access import zipfs

        if zipfs.size(path) is None:
            raise
    return compute()


def scheme_of(loader_path: str, module: str, within: Confined = NOWHERE) -> dict[str, Any]:
    """The loader's scheme (:func:`moonpin.preflight.installed.build_facts.read_scheme`), kept
    in the file-facts memo under the loader's stamp (:func:`memo`); raises OSError when the
    loader cannot be read."""
    from moonpin.preflight.installed.build_facts import read_scheme, scheme_shape

    scheme: dict[str, Any] = memo("loader-v6\0" + module, loader_path,
                                  lambda: read_scheme(loader_path, module, within,
                                                      "mooncake loader"),
                                  scheme_shape, within)
    if not isinstance(scheme, dict) or "problem" not in scheme:  # a damaged memo entry
        scheme = read_scheme(loader_path, module, within, "mooncake loader")
    return scheme


def build_module(scheme: dict[str, Any], template: str, module: str, loader_path: str,
                 torch: str, within: Confined = NOWHERE) -> str | None:
    """The module one of the loader's imports (``template``: ``mooncake.pg_{torch}``) names
    for torch ``torch`` (``mooncake.pg_2_13_0``); None when the loader's pattern does not
    match torch's version (its ``re.match(...).group()`` raises at import)."""
    placeholder = scheme["placeholder"]
    if placeholder not in template:
        return template
    from moonpin.preflight.installed.build_facts import str_or_none
    from moonpin.resolver import rule

    rscheme = rule.Scheme(scheme["kind"], scheme["imports"], scheme["version_regex"],
                          scheme["separator"], loader_path, scheme["note"])
    suffix = memo(f"suffix-v3\0{module}\0{torch}", loader_path,
                  lambda: rule.loader_suffix(rscheme, torch), str_or_none, within)
    return template.replace(placeholder, suffix) if isinstance(suffix, str) else None


def _check_direct_build(path: str, req: Any, torch: Torch | None, ctx: Context,
                        kb: KBView, fixer: Fixer, add: Callable[[CheckResult], None]) -> None:
    """A module that is an extension itself, with no Python loader: the torch it was built
    for (from its bytes), then its names, backends, CUDA and libraries, as for a build."""
    from moonpin.resolver import rule

    if torch is None:
        add(CheckResult("build", "skip", "no torch: whether the build fits is unknown"))
        return
    b = read_build(path, (*req.names, *req.optional_names, *req.backends), ctx.confined,
                   BACKENDS)
    if b.error:
        add(CheckResult("build facts", "fail", b.error, fixer.reinstall()))
        return
    try:
        built_for = facts_memo().get("built-for", path, lambda: _built_for(path, ctx.confined),
                                     str_or_none, within=ctx.confined.root)
    except OSError as e:
        add(CheckResult("build", "fail", f"cannot read {path}: {e.strerror or e}",
                        fixer.reinstall()))
        return
    d = rule.direct_build(file_name(path), built_for if isinstance(built_for, str) else None,
                          "bytes", torch.version)
    add(CheckResult("build", "pass" if d.ok else "skip" if d.ok is None else "fail",
                    d.detail, None if d.ok is not False else fixer.line(), (path,)))
    if d.ok is False:
        return
    _judge_builds(req, [rule.BuildFacts(path, b.names, b.backends, b.cuda)], torch,
                  req.module, kb, fixer, add)
    if file_suffix(path) == ".so":
        # SGLang imports torch before the module: it is the build itself here
        check_libraries([path], ctx, add, fixer, req.module,
                        first=("torch",) if find_package(ctx, "torch") else ())


def _named(ctx: Context, path: str) -> str:
    """``path`` as the fix lines name it: the image's path under ``--rootfs``/``--image``."""
    import shlex

    from moonpin.preflight.access.chroot import image_path

    return shlex.quote(image_path(ctx.root, path) if ctx.root else path)


def _reachable(ctx: Context, paths: Sequence[str], module: str, fixer: Fixer,
               add: Callable[[CheckResult], None], what: str = "pg module") -> bool:
    """Whether the worker's user (``ctx.user``, not this check's) reaches every one of
    ``paths``, the files ``import <module>`` runs or maps, as the importer and the kernel
    do (:func:`moonpin.preflight.extensions.astread.denied`); if not, the failure is said:
    a folder it cannot list or search is made so with ``chmod``, a file it cannot read is
    put back by reinstalling."""
    from moonpin.preflight.extensions import astread

    denied = astread.denied(paths, ctx.user, ctx.root, ctx.version)
    if denied is None:
        return True
    fix = (f"chmod a+rX {_named(ctx, denied.path)}" if os.path.isdir(denied.path)
           else fixer.reinstall())
    add(CheckResult(what, "fail", f"`import {module}` fails: {denied.path} is {denied.why}",
                    fix, (denied.path,)))
    return False


def _rule_requirement(req: Requirement | None) -> Any:
    """The image's SGLang requirement as :class:`moonpin.resolver.rule.Requirement`: unknown (no
    sources, no KB record) means either half of the rename, and the names unchecked."""
    from moonpin.resolver import rule

    if req is None or req.module is None:
        return rule.Requirement(MODULES[0], backends=BACKENDS, alternatives=MODULES[1:],
                                release="this SGLang")
    return rule.Requirement(req.module, req.names, req.backends, req.optional_names,
                            req.alternatives, release="this SGLang")


def _judge_builds(req: Any, facts: list[Any], torch: Torch, module: str, kb: KBView,
                  fixer: Fixer, add: Callable[[CheckResult], None], jit: bool = False,
                  cuda_torch: bool = False) -> None:
    """Names, backends and CUDA major, decided by :mod:`moonpin.resolver.rule` as the KB query
    decides them, in its words; the image adds where a missing name first appears and
    the install line."""
    from moonpin.resolver import rule

    have: set[str] = set().union(*(f.names for f in facts))
    missing = [n for n in req.names if n not in have]
    if req.names:
        d = rule.names(req, facts)
        if d.ok is False:
            firsts = "; ".join(f"{n} first in {_first_providing(kb, n) or 'no KB release'}"
                               for n in missing)
            add(CheckResult("names", "fail", f"{d.detail} ({firsts}; the import succeeds, the "
                            "engine fails later)", fixer.line()))
        else:
            add(CheckResult("names", "pass" if d.ok else "skip", d.detail))
    else:
        add(CheckResult("names", "skip", "no required names known (sources and KB unavailable)"))
    absent = rule.optional_missing(req, facts)
    if absent and not missing:
        add(CheckResult("optional names", "pass",
                        f"{module} lacks {', '.join(absent)}, which this SGLang uses only behind "
                        "an optional import (it runs without)"))
    d = rule.backends(req, facts)
    add(CheckResult("backends", "pass" if d.ok else "fail", d.detail,
                    None if d.ok else fixer.line()))
    t = rule.TorchFacts(torch.version, torch.cuda, True, torch.cuda_evidence)
    d = rule.cuda_major(facts, t, jit=jit, cuda_torch=cuda_torch)
    if d.ok is None:
        add(CheckResult("cuda", "skip", d.detail))
    elif d.ok:
        add(CheckResult("cuda", "pass", d.detail))
    elif torch.cuda is None:
        add(CheckResult("cuda", "fail", d.detail, fixer.cuda_torch()))
    else:
        bad = sorted({f.cuda for f in facts if f.cuda not in (None, torch.cuda)})
        add(CheckResult("cuda", "fail", f"{d.detail}: the build needs libcudart.so.{bad[0]} "
                        "(wrong mooncake distribution)", fixer.line()))


def check_pg(pkg: str, ctx: Context, req: Requirement | None, torch: Torch | None,
              kb: KBView, fixer: Fixer,
              add: Callable[[CheckResult], None]) -> None:
    """The process-group module SGLang imports, as the importer of ``ctx`` would find it in ``pkg``,
    then what it loads: itself (a build with no loader), a build it compiles at first
    import, or the prebuilt build its suffix rule picks for this torch."""
    if req is not None and req.module is None:
        add(CheckResult("pg module", "pass", "this SGLang imports no mooncake process-group "
                        "module"))
        return
    unlisted = unlistable(pkg)
    if unlisted is None and not ctx.user.may_list(pkg, ctx.root):  # the worker's, not ours
        unlisted = f"{pkg} cannot be listed by the worker's user ({ctx.user.said})"
    if unlisted is not None:  # the importer finds nothing in it: no package diagnosis
        add(CheckResult("pg module", "fail", f"{unlisted}: `import mooncake.pg` / "
                        "`mooncake.ep` fails whatever is installed", "make it readable by the "
                        f"worker's user (chmod -R a+rX {_named(ctx, pkg)})", (pkg,)))
        return
    rreq = _rule_requirement(req)
    module = _pg_module(ctx, pkg, rreq, fixer, add)
    if module is None:
        return
    loader_path = module_file(ctx, TOP, pkg, module.split(".")[1])
    assert loader_path is not None
    init = os.path.join(pkg, "__init__.py")
    if not _reachable(ctx, [*([init] if os.path.isfile(init) else []), loader_path],
                      module, fixer, add):
        return
    add(CheckResult("pg module", "pass", f"{module} found: {file_name(loader_path)}",
                    evidence=(loader_path,)))
    # Two readings of the import chain: the modules it certainly runs, found and compiling
    # (:mod:`moonpin.preflight.pyimport.pychain`), and what it loads, run from the files up to
    # the builds (:mod:`moonpin.preflight.loader.loadchain`, with the libraries). One failed
    # import is one failure: the second reading's, when it has one (it says what Python
    # raises); the first's only when the second saw nothing wrong, said after it.
    chain = _check_chain(module, ctx, fixer, skip=("torch",) if torch is None else ())
    # the lines are gathered, not said through a function of this module: the shared
    # judgements (judge/) they pass through call nothing above them
    lines: list[CheckResult] = []
    try:
        _check_loading(pkg, ctx, req, rreq, module, loader_path, torch, kb, fixer,
                       lines.append)
    finally:
        for c in lines:
            add(c)
        if chain is not None and not any(c.name == "import chain" and c.status == "fail"
                                         for c in lines):
            add(chain)


def _check_loading(pkg: str, ctx: Context, req: Requirement | None, rreq: Any,
                   module: str, loader_path: str, torch: Torch | None, kb: KBView,
                   fixer: Fixer, add: Callable[[CheckResult], None]) -> None:
    """What the process-group module loads: itself, a build it compiles, or the prebuilt
    build its suffix rule picks (:func:`check_pg`)."""
    if file_suffix(loader_path) == ".pyc":  # bytecode with no source (compileall -b)
        scheme = _released_scheme(loader_path, module, kb, fixer, add, ctx.confined)
    elif file_suffix(loader_path) != ".py":  # the module is the build itself (0.3.7's ep.so)
        _check_direct_build(loader_path, rreq.replace(module=module), torch, ctx, kb,
                            fixer, add)
        return
    else:
        scheme = _loader_scheme(loader_path, module, fixer, add, ctx.confined)
    if scheme is None:
        return
    if scheme["kind"] == "jit-compile":
        _check_compiling_loader(scheme, rreq.replace(module=module), loader_path, pkg, ctx,
                                torch, kb, fixer, add)
        return
    if torch is None:
        add(CheckResult("build", "skip", "no torch: the build the loader picks is unknown"))
        return
    if module != rreq.module:
        add(CheckResult("fallback", "pass", f"this mooncake has no {rreq.module}; SGLang falls "
                        f"back to {module} on ImportError, which it has"))
    wanted = (*(req.names if req is not None else ()),
              *(req.optional_names if req is not None else ()), *rreq.backends)
    builds = _loader_builds(ctx, scheme, module, loader_path, pkg, torch, wanted, fixer, add)
    if builds is not None:
        # a bytecode loader is not walked: torch, which it imports first, is imported
        # first here (as SGLang does)
        _check_prebuilt(builds, scheme, rreq.replace(module=module), ctx, torch, kb, fixer,
                        add, ("torch",) if file_suffix(loader_path) == ".pyc" else ())


def _check_chain(module: str, ctx: Context, fixer: Fixer,
                 skip: Sequence[str] = ()) -> CheckResult:
    """The Python modules ``import <module>`` certainly runs before its build is loaded
    (:mod:`moonpin.preflight.pyimport.pychain`): each must be found and compile. ``skip``: the
    top-level packages whose failure is already said (torch's, by the torch check)."""
    from moonpin.preflight.pyimport import pychain

    problems, found = pychain.walk_memoised(ctx.paths, module, ctx.version, ctx.ext_suffixes,
                                            ctx.root, ctx.complete, ctx.sites)
    problems = [p for p in problems if p.module.partition(".")[0] not in skip]
    if not problems:
        return CheckResult("import chain", "pass", f"`import {module}` finds and compiles the "
                           f"{found} modules it certainly runs before its build (as far as "
                           "read)")
    first = problems[0]
    top = first.module.partition(".")[0]
    what = (f"{first.file} {first.detail}" if first.file is not None else first.detail)
    more = (f"; {len(problems) - 1} more: " + ", ".join(p.module for p in problems[1:4])
            + (" …" if len(problems) > 4 else "")) if len(problems) > 1 else ""
    owner = None if top in ("torch", "mooncake") else _owner(ctx.paths, top, ctx.confined)
    return CheckResult("import chain", "fail",
                       f"`import {module}` fails: {what} (imported by {first.by}){more}",
                       fixer.reinstall_owner(top, owner),
                       tuple(p.file for p in problems if p.file is not None))


def _owner(paths: Sequence[str], top: str, within: Confined) -> tuple[str, str] | None:
    """The installed distribution that ships the top-level package ``top`` (its
    ``top_level.txt``, else its RECORD), as (name, version); read only on a failure."""
    from moonpin.preflight.installed.image_facts import record_paths

    for folder in paths:
        try:
            entries = sorted(e.name for e in os.scandir(folder) if e.name.endswith(".dist-info"))
        except OSError:
            continue
        for name in entries:
            dist, _, version = name[:-len(".dist-info")].partition("-")
            for member in ("top_level.txt", "RECORD"):
                try:
                    if member == "RECORD":
                        listed = list(record_paths(os.path.join(folder, name), within=within))
                    else:
                        listed = read_bytes(os.path.join(folder, name, member), 64 << 20,
                                            "top_level.txt", within).decode("utf-8", "replace"
                                                                    ).splitlines()
                except OSError:
                    continue
                heads = {p.split("/", 1)[0].strip() for p in listed}
                if top in heads or f"{top}.py" in heads:
                    return dist, version
                break
    return None


def _pg_module(ctx: Context, pkg: str, rreq: Any, fixer: Fixer,
               add: Callable[[CheckResult], None]) -> str | None:
    """The process-group module ``import`` finds for this requirement (its own or the one it
    falls back to, :func:`moonpin.resolver.rule.choose_module`), or None (said with ``add``)."""
    shipped = [m for m in MODULES if module_file(ctx, TOP, pkg, m.split(".")[1])]
    accepted = [m for m in (rreq.module, *rreq.alternatives) if m]
    module: str | None = choose_module(rreq, shipped)
    if module is not None:
        return module
    odd = [w for m in accepted for w in not_files(ctx, TOP, pkg, m.split(".")[1])]
    if odd:
        add(CheckResult("pg module", "fail", f"{'; '.join(odd)}: the importer skips it, so "
                        f"`import {accepted[0]}` fails", fixer.reinstall(), (pkg,)))
        return None
    ships = " and ".join(shipped) or "neither mooncake.pg nor mooncake.ep"
    add(CheckResult("pg module", "fail",
                    f"the engine imports {' or '.join(accepted)}; the installed mooncake "
                    f"ships {ships} (the other half of the ep/pg rename)", fixer.line(),
                    (pkg,)))
    return None


def _loader_scheme(loader_path: str, module: str, fixer: Fixer,
                   add: Callable[[CheckResult], None], within: Confined
                   ) -> dict[str, Any] | None:
    """The loader's scheme (from the file-facts memo), or None when the loader cannot be
    read, imported or understood (said with ``add``)."""
    lname = file_name(loader_path)
    try:
        scheme = scheme_of(loader_path, module, within)
    except OSError as e:
        add(CheckResult("loader", "fail", f"cannot read {loader_path}: {e.strerror}"))
        return None
    if scheme["problem"]:
        add(CheckResult("loader", "fail", f"{loader_path}: {scheme['problem']}; "
                        f"`import {module}` fails", fixer.reinstall(), (loader_path,)))
        return None
    if scheme["kind"] == "unknown":
        # No mooncake release ships such a loader (every one in the KB is prebuilt or
        # compiles at import): a changed or damaged file, whose loading cannot be read.
        add(CheckResult("loader", "fail", f"{lname}: {scheme['note']}; {UNREADABLE}",
                        "restore it (" + fixer.reinstall() + "), or run with --deep to "
                        "import it", (loader_path,)))
        return None
    return scheme


def _released_scheme(loader_path: str, module: str, kb: KBView, fixer: Fixer,
                     add: Callable[[CheckResult], None], within: Confined
                     ) -> dict[str, Any] | None:
    """A loader that is bytecode with no source (``pg.pyc``: what it does cannot be read
    here): the scheme of the loader the installed mooncake release ships, from the KB, said
    as an assumption; None when the KB has no record of it (said with ``add``)."""
    from moonpin.readers.pyast.loader import TORCH

    lname = file_name(loader_path)
    doc = kb.doc()
    for dist, version in fixer.owned:
        for rel in (doc or {}).get("mooncake") or ():
            if not isinstance(rel, dict) or (rel.get("dist"), rel.get("version")) != (
                    dist, version):
                continue
            for wheel in rel.get("wheels") or ():
                for ld in (wheel.get("loaders") or ()) if isinstance(wheel, dict) else ():
                    if not isinstance(ld, dict) or ld.get("module") != module:
                        continue
                    imports = [i.get("template") for i in ld.get("imports") or ()
                               if isinstance(i, dict)]
                    scheme: dict[str, Any] = {"kind": ld.get("kind"), "note": ld.get("note"),
                              "toolchain": list(ld.get("toolchain") or ()),
                              "imports": imports,
                              "version_regex": ld.get("version_regex"),
                              "separator": ld.get("separator"), "placeholder": TORCH,
                              "problem": None, "cache": None,
                              "sources": list(ld.get("sources") or ()),
                              "source_names": list(ld.get("source_names") or ())}
                    if not scheme_shape(scheme) or scheme["kind"] != "prebuilt":
                        continue
                    if not _like_released(loader_path, scheme, within):
                        add(CheckResult("loader", "fail", f"{lname} is bytecode with no "
                                        "source, and its constants do not name what the "
                                        f"loader {dist} {version} ships imports: what `import "
                                        f"{module}` loads cannot be read without importing "
                                        "it", "restore its source (" + fixer.reinstall()
                                        + "), or run with --deep to import it",
                                        (loader_path,)))
                        return None
                    said = ", ".join(str(i) for i in imports)
                    add(CheckResult("loader", "warn", f"{lname} is bytecode with no source: "
                                    "what it imports cannot be read here; judged as the "
                                    f"loader {dist} {version} ships ({ld.get('member')}, "
                                    f"imports {said})",
                                    "run with --deep to import it", (loader_path,)))
                    return scheme
    add(CheckResult("loader", "fail", f"{lname} is bytecode with no source, and no mooncake "
                    f"release the knowledge base knows ships it: what `import {module}` "
                    f"loads cannot be read without importing it", "restore its source ("
                    + fixer.reinstall() + "), or run with --deep to import it",
                    (loader_path,)))
    return None


def _like_released(pyc: str, scheme: dict[str, Any], within: Confined) -> bool:
    """Whether bytecode that can be read here (:func:`moonpin.preflight.pyimport.pycode.
    strings`) holds what the release's loader imports: each import's fixed part and its
    version pattern (a bytecode that cannot be read is given the benefit of the doubt)."""
    from moonpin.preflight.pyimport import pycode

    consts = pycode.strings(pyc, within)
    if consts is None:
        return True
    placeholder = str(scheme["placeholder"])
    wanted = [str(i).partition(placeholder)[0].rstrip(str(scheme["separator"] or "_"))
              for i in scheme["imports"]]
    if scheme.get("version_regex"):
        wanted.append(str(scheme["version_regex"]))
    return all(any(w in c for c in consts) for w in wanted if w)


def _check_compiling_loader(scheme: dict[str, Any], rreq: Any, loader_path: str, pkg: str,
                            ctx: Context, torch: Torch | None, kb: KBView, fixer: Fixer,
                            add: Callable[[CheckResult], None]) -> None:
    """A loader that compiles at first import: the names its C++ sources bind, judged as a
    build's, then what compiling needs (:func:`_check_jit`)."""
    from moonpin.resolver import rule

    if scheme.get("sources") and torch is not None:  # what the compiled module binds
        names = set(scheme.get("source_names") or ())
        _judge_builds(rreq, [rule.BuildFacts(loader_path, names - set(BACKENDS),
                                             names & set(BACKENDS))],
                      torch, rreq.module, kb, fixer, add, jit=True,
                      cuda_torch=rule.needs_cuda_torch(scheme.get("requires") or (),
                                                       scheme.get("toolchain") or ()))
    torch_pkg = find_package(ctx, "torch")
    # it imports torch, then compiles against it (or loads what it compiled): with torch's
    # import failing, neither happens, whatever the cache and the tools
    if torch is not None and not torch_first(
            ctx, rreq.module, add, fixer, "its adapter is compiled against torch or loaded"):
        return
    consts = torch_version_py(torch_pkg, ctx.confined) if torch_pkg else None
    _check_jit(scheme, ctx, loader_path, pkg, consts, add, fixer.project.prebuild, rreq.module,
               torch_pkg)


def _loader_builds(ctx: Context, scheme: dict[str, Any], module: str, loader_path: str, pkg: str,
                   torch: Torch, wanted: Sequence[str], fixer: Fixer,
                   add: Callable[[CheckResult], None]) -> list[BuildFacts] | None:
    """The builds a prebuilt loader imports for this torch (its own suffix rule, as the KB
    query applies it: :func:`moonpin.resolver.rule.loader_suffix`), read; None when one is not
    installed as a file the importer takes (said with ``add``)."""
    lname = file_name(loader_path)
    placeholder = scheme["placeholder"]
    builds: list[BuildFacts] = []
    for template in scheme["imports"]:
        got = build_module(scheme, template, module, loader_path, torch.version,
                           ctx.confined)
        if got is None:
            add(CheckResult("loader", "fail",
                            f"{lname}: its pattern {scheme['version_regex']!r} does not "
                            f"match torch's version {torch.version!r}; `import {module}` "
                            "fails", fixer.reinstall(), (loader_path,)))
            return None
        name = got
        bshort = name.removeprefix("mooncake.")
        found = module_file(ctx, TOP, pkg, bshort)
        odd = not_files(ctx, TOP, pkg, bshort) if found is None else []
        if odd:
            add(CheckResult("build", "fail", f"{lname} imports {name} for torch "
                            f"{torch.version}; {'; '.join(odd)}: the importer skips it, so the "
                            "import fails", fixer.reinstall(), (pkg,)))
            return None
        if found is None:
            head = template.removeprefix("mooncake.").partition(placeholder)[0]
            others = shipped_like(ctx, TOP, pkg, head) if placeholder in template else []
            same = [o for o in others if o.split(".", 1)[0] == bshort]
            msg = (f"{lname} imports {name} for torch {torch.version}; no such "
                   "build is installed")
            if same:
                msg += f" for this Python (only {', '.join(same)})"
            msg += f"; builds shipped: {', '.join(others) or 'none'}"
            if not os.path.isdir(pkg):
                msg += (f" ({pkg} is in a zip archive on sys.path: zipimport imports no "
                        "extension module from it)")
            add(CheckResult("build", "fail", msg, fixer.line(), (pkg,)))
            return None
        builds.append(read_build(found, wanted, ctx.confined, BACKENDS))
    add(CheckResult("build", "pass", "loader finds " + ", ".join(file_name(b.path) for b in builds),
                    evidence=tuple(b.path for b in builds)))
    return builds


def _check_prebuilt(builds: list[BuildFacts], scheme: dict[str, Any], rreq: Any,
                    ctx: Context, torch: Torch, kb: KBView, fixer: Fixer,
                    add: Callable[[CheckResult], None], first: Sequence[str] = ()) -> None:
    """What the loader's builds provide, judged (:func:`_judge_builds`), and the libraries
    they need (``first``: modules imported before the loader)."""
    from moonpin.resolver import rule

    errors = [b.error for b in builds if b.error]
    if errors:
        add(CheckResult("build facts", "fail", "; ".join(errors), fixer.reinstall()))
        return
    reason = vendor_reason(torch.version)
    pg_build = next((b for b in builds
                     if scheme["placeholder"] in scheme["imports"][builds.index(b)]), None)
    if reason and pg_build is not None:
        add(CheckResult("torch build", "warn",
                        f"{reason}: the loader maps it onto "
                        f"{file_name(pg_build.path).split('.')[0]}, "
                        "a build for the upstream release; it loads but is not proven "
                        "ABI-compatible with this torch", "use an upstream torch release, or "
                        "build mooncake from source against this torch"))
    if pg_build is not None and not _reachable(ctx, [pg_build.path], rreq.module, fixer, add,
                                               "build"):
        return
    facts = [rule.BuildFacts(b.path, b.names, b.backends, b.cuda) for b in builds]
    _judge_builds(rreq, facts, torch, rreq.module, kb, fixer, add)
    so_builds = [b.path for b in builds if file_suffix(b.path) == ".so" and b.error is None]
    if so_builds:
        check_libraries(so_builds, ctx, add, fixer, rreq.module, first=first)


def _working_folder() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # removed: a relative cache folder resolves nowhere
        return None


def _visible_gpu() -> bool:
    """An NVIDIA device node (what the container runtime mounts for a GPU) or an explicit
    TORCH_CUDA_ARCH_LIST: what the compiling loader needs to pick architectures."""
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return True
    return any(n.startswith("nvidia") and n[6:].isdigit() for n in list_folder("/dev"))


def _check_jit(scheme: dict[str, Any], ctx: Context, loader: str, pkg: str,
               torch_consts: dict[str, Any] | None, add: Callable[[CheckResult], None],
               prebuild: str, module: str | None = None, torch_pkg: str | None = None) -> None:
    """A loader that compiles at first import: an adapter it compiled for this image, in
    the key folder it computes (:func:`.mooncake_jit.cache_key`), is reused; otherwise the
    tools this torch needs must be there, and a host with no visible GPU cannot compile (a
    limit of the host, like a missing driver, not of the image)."""
    from moonpin.preflight.extensions.rules import mooncake_jit as jit

    # the worker's cache folder: its environment and home (an image's, under its root); a
    # relative one is its working folder's (an image's WorkingDir; this process's, for this
    # machine: the check runs as the worker)
    home = jit.home_of(ctx.env, ctx.user.uid, ctx.root)
    cwd = _working_folder() if ctx.root is None else ctx.working_dir
    roots = jit.cache_roots(scheme.get("cache") or {}, ctx.env, home, cwd)
    adapters = jit.compiled_adapters(roots, pkg, ctx.confined)
    key = jit.cache_key(loader, pkg, torch_pkg, torch_consts, ctx.env, ctx.version,
                        ctx.confined) if adapters and torch_pkg else None
    other = ""
    # the worker lists the key folder (its glob) and maps the adapter as its own user
    barred = [a for a in adapters if not (ctx.user.may_list(os.path.dirname(a), ctx.root)
                                          and ctx.user.may_read(a, ctx.root))]
    adapters = [a for a in adapters if a not in barred]
    if barred and not adapters:
        other = (f"; the adapter in {os.path.dirname(barred[0])} cannot be read by the "
                 f"worker's user ({ctx.user.said}), so it compiles anew")
    if key is not None:
        theirs = [a for a in adapters if os.path.basename(os.path.dirname(a)) != key]
        adapters = [a for a in adapters if a not in theirs]
        if theirs and not adapters:
            other = (f"; the adapter in {os.path.dirname(theirs[0])} was compiled for other "
                     f"inputs (the loader computes the key {key}: another torch, Python or "
                     "mooncake build), so it compiles anew")
    if adapters:
        add(CheckResult("adapter", "pass",
                        f"{file_name(loader)} compiles at first import; an adapter compiled for "
                        f"this image is in {os.path.dirname(adapters[0])}, which it reuses "
                        "while torch and its sources are unchanged (the deep probe confirms)",
                        evidence=(adapters[0],)))
        # the loader compiles and loads the adapter itself, after `import torch`: what it
        # runs first is mooncake's package and torch, not the compiling code
        check_libraries(adapters[:1], ctx, add, module=(module or "mooncake").split(".")[0],
                        after=("torch",) if find_package(ctx, "torch") else ())
        return
    found: list[str] = []
    missing: list[str] = []
    for tool in jit.tools_for(scheme["toolchain"], torch_consts):
        if tool.startswith("ninja"):
            got = find_ninja(ctx)
        elif tool.startswith("nvcc"):
            got = find_nvcc(ctx)
        else:
            got = on_path(ctx, tool.split()[0])
        (found if got else missing).append(f"{tool} at {got}" if got else tool)
    where = (f" (looked in {roots[0]}{other})" if roots else "")
    if missing:
        add(CheckResult("toolchain", "fail",
                        f"{file_name(loader)} compiles at first import, no adapter is compiled "
                        f"for this image{where}, and it needs {', '.join(missing)}, not found",
                        "install " + ", ".join(missing) + f" in the image, or {prebuild}",
                        (loader,)))
        return
    if ctx.root is not None:  # judged from the image's files: no host GPU matters
        add(CheckResult("toolchain", "warn",
                        f"{file_name(loader)} compiles at first import and no adapter is compiled "
                        f"in the image{where}: each worker compiles it for minutes at its first "
                        f"import (with {', '.join(found) or 'the tools'} found in the image)",
                        prebuild, (loader,)))
        return
    if not _visible_gpu():
        add(CheckResult("toolchain", "warn",
                        f"{file_name(loader)} compiles at first import and no adapter is compiled "
                        f"for this image{where}; this host shows no GPU and "
                        "TORCH_CUDA_ARCH_LIST is unset, so it cannot compile here (not a "
                        "fault of the image: a worker with a GPU compiles for minutes at "
                        "first import)", prebuild, (loader,)))
        return
    add(CheckResult("toolchain", "pass",
                    f"{file_name(loader)} compiles at first import with {', '.join(found) or 'no '}"
                    "; note: the first import compiles for minutes (about 2.5 min on 2 cores); "
                    + prebuild, evidence=(loader,)))


def package(ctx: Context, mooncakes: Sequence[Dist], fixer: Fixer,
            add: Callable[[CheckResult], None]) -> str | None:
    """The mooncake/ package folder the installed distributions provide, or None (said)."""
    if not mooncakes:
        add(CheckResult("mooncake installed", "fail",
                        "no mooncake distribution installed (none installed)", fixer.line()))
        return None
    listing = ", ".join(f"{d.name} {d.version}" for d in mooncakes)
    by_root: dict[str, list[Dist]] = {}
    for d in mooncakes:
        if d.files is None or any(f.lstrip("./").startswith("mooncake/") for f in d.files):
            by_root.setdefault(d.root, []).append(d)
    clash = next((ds for ds in by_root.values() if len(ds) > 1), None)
    if clash:
        said = f"{len(clash)} mooncake distributions installed over one mooncake/ folder " \
               f"({', '.join(f'{d.name} {d.version}' for d in clash)})"
        owner, wrong = _sole_owner(clash)
        if owner is not None:
            # every file the import can load is the one this distribution installed
            add(CheckResult("mooncake installed", "warn",
                            f"{said}: every file of {owner.name} {owner.version} there is the "
                            "one it installed (its RECORD hashes), so the import loads it; "
                            "uninstalling either distribution later removes the shared files",
                            fixer.pip([f"{owner.name}=={owner.version}"],
                                      "clean up: one distribution over the folder"),
                            (clash[0].root,)))
        else:
            add(CheckResult("mooncake installed", "fail",
                            f"{said}: its files are a mix of both ({wrong})",
                            fixer.line() if fixer.line().startswith("pip ") else
                            f"pip uninstall -y {' '.join(d.name for d in clash)}; then "
                            f"{fixer.line()}",
                            (clash[0].root,)))
    found = locate(ctx, "mooncake")
    pkg = found.folder if found is not None else None
    if not clash:  # named where it is when not in a distribution's own folder
        elsewhere = found is not None and not any(
            found.folder == os.path.join(d.root, "mooncake") for d in mooncakes)
        add(CheckResult("mooncake installed", "pass", listing + (
            f" from {found.folder} ({'editable' if found.editable else found.how})"
            if found is not None and elsewhere else "")))
    if pkg is None:
        add(CheckResult("mooncake package", "fail",
                        f"{listing} is installed but no mooncake/ package folder was found",
                        fixer.reinstall()))
    return pkg


def _sole_owner(clash: list[Dist]) -> tuple[Dist | None, str]:
    """Of distributions sharing one ``mooncake/`` folder, the one whose every package file
    (``mooncake/…``, its ``….libs/``) is on disk with its RECORD hash and size, or None and
    what is wrong for each (missing, another build's)."""
    import base64
    import hashlib
    import stat

    def bad(d: Dist) -> list[str]:
        own = [(rel, h) for rel, h in d.hashes.items() if "__pycache__" not in rel and (
            rel.startswith("mooncake/") or rel.split("/", 1)[0].endswith(".libs"))]
        if not own:
            return ["its RECORD has no hashes"]
        out = []
        for rel, (digest, size) in own:
            path = os.path.join(d.root, rel)
            try:
                st = os.stat(path)
                if not stat.S_ISREG(st.st_mode):
                    raise OSError("not a regular file")
                h = hashlib.sha256()
                if st.st_size == size:
                    with open(path, "rb") as f:
                        for chunk in iter(lambda: f.read(1 << 20), b""):
                            h.update(chunk)
            except OSError:
                out.append(f"{rel} missing")
                continue
            if st.st_size != size or base64.urlsafe_b64encode(
                    h.digest()).rstrip(b"=").decode() != digest:
                out.append(f"{rel} is another build's")
        return out

    said = []
    for d in clash:
        wrong = bad(d)
        if not wrong:
            return d, ""
        said.append(f"{d.name}: {', '.join(wrong[:3])}"
                    + (f" and {len(wrong) - 3} more" if len(wrong) > 3 else ""))
    return None, "; ".join(said)


def check_feature(feature: str, ctx: Context, pkg: str, version: str | None, kb: KBView,
                   add: Callable[[CheckResult], None], sglang_pkg: Sources | None = None,
                   source_cache: bool = True) -> None:
    """A mooncake feature other than elastic EP: the modules and names this SGLang release
    imports for it unconditionally must be installed. What it imports comes from the KB's
    import records, or, for a release the KB does not know, from the installed sources."""
    known = kb.feature_imports(version, feature) if kb.ok else None
    records: list[dict[str, Any]] = known or []
    origin = ""
    if known is None:
        scanned = None
        if sglang_pkg is not None:
            from moonpin.preflight.installed import sources

            try:
                scanned = sources.scan(sglang_pkg, use_cache=source_cache, every_import=True)
            except OSError:
                scanned = None
        if scanned is None:
            add(CheckResult(feature, "skip", "what this SGLang imports for it is neither in the "
                            "knowledge base nor readable from its sources; only the "
                            "installation is checked"))
            return
        records = [{"module": i.module, "names": list(i.names), "feature": i.feature,
                    "optional": i.optional, "member": i.path, "line": i.line}
                   for i in scanned.feature_imports]
        origin = " (from the installed sources; the KB does not know this release)"
    needs: dict[str, set[str]] = {}
    for imp in records:
        if imp.get("feature") == feature and not imp.get("optional"):
            needs.setdefault(imp["module"], set()).update(imp.get("names") or ())
    if not needs:
        add(CheckResult(feature, "pass", f"sglang {version} imports no mooncake module for it "
                        "unconditionally" + origin))
        return
    problems = []
    for module, names in sorted(needs.items()):
        short = module.removeprefix("mooncake.")
        path = (module_file(ctx, TOP, pkg, short) if short != module
                else os.path.join(pkg, "__init__.py"))
        if path is None or not os.path.isfile(path):
            problems.append(f"{module} is not installed")
            continue
        facts = read_build(path, names, ctx.confined, BACKENDS)
        if facts.error:
            problems.append(facts.error)
            continue
        absent = sorted(names - facts.names) if file_suffix(path) in (".py", ".so") else []
        if absent and file_suffix(path) == ".so":
            # The linker merges a string into the tail of a longer one ("TransferEngine" into
            # "InnerTransferEngine"): a NUL-terminated tail is the same C string.
            data = read_bytes(path, CAP_BUILD, "extension build", ctx.confined)
            absent = [n for n in absent if n.encode() + b"\0" not in data]
        if absent:
            problems.append(f"{module} lacks {', '.join(absent)}")
    evidence = tuple(f"{i['member']}:{i['line']}" for i in records
                     if i.get("feature") == feature and not i.get("optional"))
    if problems:
        add(CheckResult(feature, "fail", f"sglang {version} needs for {feature}: "
                        + "; ".join(problems) + origin, "install the mooncake release this "
                        "SGLang release is built and tested with", evidence))
    else:
        add(CheckResult(feature, "pass", "provides " + ", ".join(
            f"{m} ({', '.join(sorted(n)) or 'module'})" for m, n in sorted(needs.items()))
            + origin, evidence=evidence))


def _first_providing(kbv: KBView, name: str) -> str | None:
    """The first mooncake release (in KB order) with a build naming ``name``."""
    kb = kbv.doc()
    if kb is None:
        return None
    from packaging.version import Version

    found: list[tuple[Version, str]] = []
    for rel in kb.get("mooncake") or ():
        try:
            if any(name in (b.get("names") or ()) for w in rel.get("wheels") or ()
                   for b in w.get("builds") or ()):
                found.append((Version(rel["version"]), f"{rel['dist']} {rel['version']}"))
        except (ValueError, KeyError, TypeError, AttributeError):  # ValueError: InvalidVersion too
            continue
    return min(found)[1] if found else None
