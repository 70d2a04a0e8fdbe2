"""``which`` for the worker's other native extensions (nixl, sglang-kernel, DeepEP,
FlashInfer): the releases with a build for a torch, judged by :mod:`moonpin.resolver.rule`.

One combination (release R of distribution D, torch T, python P, platform A) is checked in
this order, each check the rule's: R is installable (its Requires-Dist pins are on the
index); R has a wheel for P and A; T satisfies R's torch Requires-Dist; the wheel's loader
finds a build for T (the builds' torch targets, read from their names through the loader's
own rule or from an exact torch pin); and the CUDA runtime the builds link is T's. A wheel
without builds whose loader imports another distribution's package (the meta ``nixl``,
``nixl_ep`` importing ``nixl_ep_cu<major>`` for torch's CUDA major) is judged by the
release it pins exactly whose builds link T's CUDA major.

The facts are the KB's ``native`` releases (``CompatGraph.kb.native``, from the derived facts
file like every query's); nothing here names a project: which distributions a name means is
read from those releases.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

from packaging.version import InvalidVersion, Version

from moonpin.kb.errors import UsageError
from moonpin.resolver import rule, spelling
from moonpin.resolver.answers import Which
from moonpin.resolver.graph import CompatGraph, build_python, canonical_name
from moonpin.resolver.inputs import ARCHES, normalize_arch, normalize_python
from moonpin.resolver.query import (
    Check,
    Evaluation,
    TorchChoice,
    get_sglang,
    resolve_torch,
    torch_release,
)
from moonpin.resolver.tables import native as rn
from moonpin.resolver.tables.native import COLLISION, stack_answer

if TYPE_CHECKING:
    from moonpin.kb.facts import NativeRelease, NativeWheel, Sglang

__all__ = [
    "COLLISION",
    "SglangEdges",
    "all_pythons",
    "applicable",
    "dists_named",
    "entry",
    "entry_of",
    "evaluate_native",
    "exact_pins",
    "explain_stack",
    "imported_packages",
    "is_extension",
    "known_version",
    "loaded_release",
    "loads_from",
    "newest",
    "newest_fit",
    "packages",
    "pins_between",
    "pins_hold",
    "project_packages",
    "sglang_edges",
    "triples",
    "wanted_packages",
    "wheel_for",
    "which_native",
]


def _releases(g: CompatGraph) -> tuple[NativeRelease, ...]:
    return g.kb.native


def dists_named(g: CompatGraph, what: str) -> tuple[str, list[str]]:
    """The project and distributions ``what`` names, read from the KB's releases: a
    project's name means all its distributions (``nixl``: nixl, nixl-cu12, nixl-cu13), then
    a distribution's name that distribution, then an import name the distributions whose
    wheels install that package (``sgl_kernel``: sgl-kernel and sglang-kernel)."""
    releases = _releases(g)
    text = what.strip()
    canon = str(canonical_name(text))
    by_project: dict[str, list[str]] = {}
    for r in releases:
        dists = by_project.setdefault(r.project, [])
        if r.dist not in dists:
            dists.append(r.dist)
    if canon in by_project:
        return canon, sorted(by_project[canon])
    for project, dists in by_project.items():
        if text in dists:
            return project, [text]
    importing: dict[str, str] = {}
    for r in releases:
        if any(text in w.packages for w in r.wheels):
            importing.setdefault(r.dist, r.project)
    if importing:
        return next(iter(importing.values())), sorted(importing)
    for project, dists in by_project.items():
        if canon in dists:
            return project, [canon]
    known = sorted({*by_project, *(d for ds in by_project.values() for d in ds)})
    raise UsageError(f"which takes mooncake, sglang, torch or a native extension the "
                     f"knowledge base holds, not {what!r}",
                     hint="`moonpin which -h` says what each needs; the extensions: "
                     + ", ".join(known) if known else
                     "`moonpin scrape --only native` reads the native extensions (the "
                     "knowledge base holds none)")


# ----------------------------------------------------------------------- one wheel


def _covers(w: NativeWheel, python: str, arch: str) -> bool:
    return rule.wheel_covers(w.python_tags, w.abi_tags, w.platform_tags, w.requires_python,
                             python, arch)


def _minor(tag: str) -> int:
    try:
        return int(tag.removeprefix("cp3").rstrip("t") or -1)
    except ValueError:
        return -1


def _targets(w: NativeWheel, python: str, arch: str) -> list[rule.NativeTarget]:
    out = []
    for b in w.builds:
        py, ar = build_python(b.abi)
        if b.abi is None or b.abi.startswith("abi3") or (py == python and ar == arch):
            out.append(rule.NativeTarget(b.member, b.torch, b.torch_from))
    return out


def _cuda_facts(w: NativeWheel, members: Iterable[str]) -> list[rule.BuildFacts]:
    chosen = set(members)
    return [rule.BuildFacts(member=b.member, cuda=b.cuda_major,
                            cuda_read=b.needed_method != "none")
            for b in w.builds if b.member in chosen]


def applicable(lines: tuple[str, ...], python: str, arch: str,
               ) -> tuple[tuple[str, str | None], ...]:
    """The Requires-Dist ``lines`` that apply to an install without extras on this python
    and platform, each with its specifier (None: it does not parse)."""
    return _torch_lines(lines, python, arch)


@lru_cache(maxsize=1024)
def _torch_lines(lines: tuple[str, ...], python: str, arch: str,
                 ) -> tuple[tuple[str, str | None], ...]:
    """The torch Requires-Dist ``lines`` that apply to an install without extras on this
    python and platform, each with its specifier (None: it does not parse); every marker
    key is the combination's (:func:`moonpin.readers.markers.tag_environment`), none this
    process's. A python tag that names no interpreter: every line applies."""
    # packaging.requirements (its grammar's regexes) is imported by the questions that read
    # a Requires-Dist line: ``triples`` reads none
    from packaging.requirements import InvalidRequirement, Requirement

    from moonpin.readers.markers import tag_environment

    try:
        env: dict[str, str] | None = tag_environment(python, arch)
    except ValueError:
        env = None
    out: list[tuple[str, str | None]] = []
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            out.append((line, None))
            continue
        if env is not None and req.marker is not None and not req.marker.evaluate(env):
            continue
        out.append((line, str(req.specifier)))
    return tuple(out)


@lru_cache(maxsize=1024)
def _pinned(requires_dist: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """The distributions Requires-Dist requires at one exact version (no extra)."""
    from packaging.requirements import InvalidRequirement, Requirement

    out = []
    for line in requires_dist:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and "extra" in str(req.marker):
            continue
        exact = [s.version for s in req.specifier if s.operator in ("==", "===")]
        if len(exact) == 1 and "*" not in exact[0]:
            out.append((str(canonical_name(req.name)), exact[0]))
    return tuple(out)


def wanted_packages(releases: Iterable[NativeRelease]) -> frozenset[str]:
    """The packages the releases' loader rules load: what the extension is imported as."""
    return frozenset(rl.package for r in releases for w in r.wheels for rl in w.rules)


def imported_packages(releases: Iterable[NativeRelease]) -> frozenset[str]:
    """Of the packages the releases' loader rules load (:func:`wanted_packages`), those no
    other of their rules imports: what a project of several distributions is imported as
    (the meta ``nixl``'s ``nixl_ep``, whose rule imports or dispatches to the
    ``nixl_ep_cu13`` a backend distribution installs; a backend alone does not give
    ``import nixl_ep``). All of them when every one is imported by another."""
    rules = [rl for r in releases for w in r.wheels for rl in w.rules]
    wanted = frozenset(rl.package for rl in rules)
    inner: set[str] = set()
    for rl in rules:
        for step in rl.steps:
            if step.kind not in ("import", "dispatch"):
                continue
            top = step.target.split(".", 1)[0]
            pattern = re.compile(".+".join(re.escape(part) for part in
                                           re.split(r"\{[^}]*\}", top)))
            inner.update(p for p in wanted if p != rl.package and pattern.fullmatch(p))
    return (wanted - inner) or wanted


class SglangEdges(NamedTuple):
    """What an SGLang release asks of one project's releases, from its own files: its
    Requires-Dist lines naming the project's distributions (``pins``: dist -> lines) and the
    project's packages its launch choices import (``imports``: ``(package, why)``)."""

    release: str  # "sglang 0.5.23"
    filename: str  # the artifact they were read from
    pins: dict[str, tuple[str, ...]]
    imports: tuple[tuple[str, str], ...]


def packages(r: NativeRelease) -> frozenset[str]:
    """The top-level packages the release's wheels install (read from their files)."""
    return frozenset(p for w in r.wheels for p in w.packages)


def project_packages(g: CompatGraph, project: str) -> frozenset[str]:
    """Every top-level package the project's releases install or load."""
    return frozenset(p for r in _releases(g) if r.project == project for w in r.wheels
                     for p in (*w.packages, *(rl.package for rl in w.rules)))


def sglang_edges(g: CompatGraph, s: Sglang, project: str) -> SglangEdges:
    """The edges between the SGLang release ``s`` and ``project`` (:class:`SglangEdges`)."""
    dists = {r.dist for r in _releases(g) if r.project == project}
    pins: dict[str, tuple[str, ...]] = {}
    for p in s.extension_pins:
        if p.dist in dists:
            pins[p.dist] = (*pins.get(p.dist, ()), p.requirement)
    packages = project_packages(g, project)
    imports: list[tuple[str, str]] = []
    for b in s.launch_backends:
        # the choice's module's imports, then those under a test on its value
        found = [(b.member, i.module, i.line) for i in b.imports]
        found += [(g.member, g.module, g.line) for g in b.guarded]
        for member, module, line in found:
            top = module.split(".")[0]
            if top in packages and top not in [p for p, _ in imports]:
                imports.append((top, f"{b.flag} {b.choice}: {member}:{line}"))
    return SglangEdges(f"sglang {s.version}", s.artifact.filename, pins, tuple(imports))


def _edge_checks(edges: SglangEdges, r: NativeRelease, w: NativeWheel | None, python: str,
                 arch: str) -> list[Check]:
    """The checks of the edges ``edges`` for release ``r`` (wheel ``w``)."""
    out = []
    lines = edges.pins.get(r.dist, ())
    if lines:
        d = rule.pinned_by(edges.release, r.dist, r.version, _torch_lines(lines, python, arch))
        out.append(Check("sglang's requirement", d.ok, d.detail,
                         (f"{edges.filename}: METADATA Requires-Dist",)))
    if edges.imports and w is not None:
        d = rule.launch_imports(edges.release, w.artifact.filename, w.packages, edges.imports)
        out.append(Check("sglang's import", d.ok, d.detail,
                         tuple(f"{edges.filename}: {why.split(': ', 1)[1]}"
                               for _, why in edges.imports)))
    return out


def wheel_for(r: NativeRelease, python: str, arch: str) -> NativeWheel | None:
    """The release's wheel pip chooses for this python and platform (the first that fits)."""
    return next((x for x in r.wheels if _covers(x, python, arch)),
                None)


def evaluate_native(g: CompatGraph, r: NativeRelease, t: TorchChoice, python: str,
                    arch: str, *, wanted: frozenset[str] = frozenset(),
                    edges: SglangEdges | None = None,
                    loaded: Callable[[NativeRelease], Evaluation] | None = None,
                    ) -> Evaluation:
    """Every check of one combination (see the module's docstring); ``wanted``: the
    packages a release must install (:func:`wanted_packages`); ``edges``: what an SGLang
    release asks of it (its pins and its launch choices' imports). A build-less wheel that
    loads its build from a release it pins (:func:`loads_from`) takes that release's
    judgement at the same torch and platform whole: ``loaded`` gives it (the stack graph
    hands in its own ``installs`` edge of that release: a 3-clique of torch, the meta
    release and the one it loads from); without it, it is judged here."""
    w = wheel_for(r, python, arch)
    ev = Evaluation("", r.dist, r.version, t.text, python, arch,
                    wheel=w.artifact.filename if w else None)
    name = f"{r.dist} {r.version}"
    d = rule.installable(name, [(u.requirement, u.reason) for u in r.uninstallable])
    ev.checks.append(Check("installable", d.ok, d.detail))
    if d.ok is False:
        return ev
    if edges is not None:
        ev.checks += _edge_checks(edges, r, w, python, arch)
        if any(c.ok is False for c in ev.checks):
            return ev
    if w is None:
        had = "only a source archive" if r.sdist_only or not r.wheels else "no wheel"
        ev.checks.append(Check("wheel for python/platform", False,
                               f"{name} has {had} for {python} on {arch}"))
        return ev
    filename = w.artifact.filename
    ev.checks.append(Check("wheel for python/platform", True,
                           f"{filename} covers {python} on {arch}", (filename,)))
    # what follows reads this wheel alone: kept per wheel, torch and platform when no
    # python changes it (an abi3 or pure-Python wheel serves every python alike)
    key = ("native", filename, t, arch, None if _python_free(w) else python, wanted)
    kept = g.memo.get(key)
    if kept is None:
        rest = Evaluation("", r.dist, r.version, t.text, python, arch, wheel=filename)
        _judge_wheel(g, rest, r, w, t, python, arch, wanted, loaded)
        kept = g.memo[key] = (tuple(rest.checks), tuple(rest.notes))
    ev.checks += kept[0]
    ev.notes += kept[1]
    return ev


def _python_free(w: NativeWheel) -> bool:
    """Nothing past the wheel's choice depends on the python: its builds are all abi3 (or
    it has none and pins no other release), and no torch requirement has a marker."""
    if any(";" in line for line in w.torch_requirements):
        return False
    if not w.builds:
        return not _pinned(w.requires_dist)
    return all(b.abi is not None and b.abi.startswith("abi3") for b in w.builds)


def _judge_wheel(g: CompatGraph, ev: Evaluation, r: NativeRelease, w: NativeWheel,
                 t: TorchChoice, python: str, arch: str, wanted: frozenset[str],
                 loaded: Callable[[NativeRelease], Evaluation] | None) -> None:
    """The checks of one wheel past its choice (see :func:`evaluate_native`)."""
    name = f"{r.dist} {r.version}"
    filename = w.artifact.filename
    d = rule.provides(filename, w.packages, wanted)
    if d.ok is False:
        ev.checks.append(Check("module present", d.ok, d.detail, (filename,)))
        return
    d = rule.torch_admitted(name, _torch_lines(w.torch_requirements, python, arch),
                            t.text)
    ev.checks.append(Check("torch requirement", d.ok, d.detail,
                           (f"{filename}: METADATA Requires-Dist",)))
    if d.ok is False:
        return
    targets = _targets(w, python, arch)
    package = ", ".join(rl.package for rl in w.rules) or ", ".join(w.packages) or r.dist
    # a build-less wheel only: the release it loads from has builds, so this never nests
    source = loads_from(g, w, t) if not w.builds else None
    if source is not None:
        via = (loaded or (lambda x: evaluate_native(g, x, t, python, arch)))(source)
        ev.checks += [c._replace(detail=f"{via.dist} {via.mooncake}: {c.detail}")
                      for c in via.checks if c.name != "installable"]
        ev.notes += [f"{package} loads its build from {via.dist}=={via.mooncake} (pinned "
                     f"by {filename})", *via.notes]
        return
    d = rule.native_build(package, targets, t.text, filename)
    fits = [x.member for x in targets if rule.native_fits(x, t.text)]
    ev.checks.append(Check("build for torch", d.ok, d.detail,
                           tuple(f"{filename}: {m}" for m in fits)))
    if d.ok is not True or not targets:
        return
    facts = _cuda_facts(w, fits)
    ev.checks.append(Check("CUDA major", *_decided(rule.cuda_major(
        facts, rule.TorchFacts(t.text, t.cuda, t.cuda_known, t.cuda_why))), ()))
    if any(s.kind == "env" and s.effect for rl in w.rules for s in rl.steps):
        env = next(s for rl in w.rules for s in rl.steps if s.kind == "env" and s.effect)
        ev.notes.append(f"{env.member}:{env.line}: {env.target} set opens the build with "
                        f"{env.effect}")


def _decided(d: rule.Decision) -> tuple[bool | None, str]:
    return d.ok, d.detail


def loaded_release(g: CompatGraph, r: NativeRelease, t: TorchChoice, python: str,
                   arch: str) -> str | None:
    """``dist==version`` of the release whose build ``r``'s wheel for this python and
    platform loads at torch ``t`` (:func:`loads_from`), when torch's CUDA major decides it;
    None: it loads its own or none, or the choice is not decided (a torch without CUDA: the
    loader then tries each backend in turn, so none is left unloaded)."""
    w = wheel_for(r, python, arch)
    src = loads_from(g, w, t) if w is not None and not w.builds else None
    if src is None or t.cuda is None or t.cuda not in {
            b.cuda_major for x in src.wheels for b in x.builds}:
        return None
    return f"{src.dist}=={src.version}"


def loads_from(g: CompatGraph, w: NativeWheel, t: TorchChoice) -> NativeRelease | None:
    """The release a build-less wheel loads its build from: of the KB's releases with
    builds it pins exactly (the meta ``nixl``: ``nixl-cu12``/``nixl-cu13``), the one whose
    builds link torch's CUDA major (its loader imports ``nixl_ep_cu<major>``), else the
    first; None when it pins none."""
    pinned = []
    for dist, version in _pinned(w.requires_dist):
        r = next((x for x in _releases(g) if x.dist == dist and x.version == version), None)
        if r is not None and any(x.builds for x in r.wheels):
            pinned.append(r)
    if not pinned:
        return None
    same = [r for r in pinned if t.cuda is not None and t.cuda in
            {b.cuda_major for x in r.wheels for b in x.builds}]
    return (same or pinned)[0]


# ----------------------------------------------------------------------- which


def _torches(g: CompatGraph, torch: str | None, sglang: str | None) -> list[str]:
    if torch is not None:
        return [torch_release(g, torch)]
    if sglang is None:
        raise UsageError("`which` of a native extension needs --torch VERSION or --sglang "
                         "VERSION", hint="e.g. moonpin which nixl --torch 2.14.1")
    s = get_sglang(g, sglang)
    return [v for v, _ in g.torch_for(s)]


def all_pythons(releases: Sequence[NativeRelease]) -> list[str]:
    tags = {t for r in releases for w in r.wheels for t in w.python_tags
            if t.startswith("cp")}
    return sorted(tags, key=_minor)


def which_native(g: CompatGraph, what: str, *, torch: str | None = None,
                 sglang: str | None = None, python: str | None = None,
                 arch: str | None = None, dist: str | None = None,
                 as_imported: bool = False) -> Which:
    """The releases of the extension ``what`` names (see :func:`dists_named`) that load
    with ``torch`` (or with each torch ``sglang`` admits), newest first; every excluded
    release with the first check it fails. ``as_imported``: a question of the whole project
    asks for the releases that give what it is imported as (:func:`imported_packages`:
    ``which nixl`` the meta, not a backend alone); else for releases of any of its
    distributions that load (what a pin of a backend moves to)."""
    python, arch = normalize_python(python), normalize_arch(arch)
    project, dists = dists_named(g, what)
    if dist is not None:
        want = str(canonical_name(dist))
        if want not in dists:
            raise UsageError(f"{what} has no distribution {dist!r}",
                             hint="known: " + ", ".join(dists))
        dists = [want]
    edges = None
    if sglang is not None:
        s = get_sglang(g, sglang)
        sglang, edges = s.version, sglang_edges(g, s, project)
    torches = _torches(g, torch, sglang)
    chosen = [r for r in _releases(g) if r.dist in dists]
    whole = as_imported and {r.dist for r in _releases(g) if r.project == project} == set(dists)
    wanted = imported_packages(chosen) if whole else wanted_packages(chosen)
    pythons = [python] if python else all_pythons(_releases(g))
    arches = [arch] if arch else list(ARCHES)
    query: dict[str, Any] = {"project": project, "dists": dists,
                             "torch": torches[0] if torch is not None else torches,
                             "python": python or "all", "arch": arch or "all"}
    if sglang is not None:
        query["sglang"] = sglang
    fast_edges = None if edges is None else _as_table_edges(edges)
    return rn.answer(query, ((r.dist, r.version, [
        (tt, entry(g, r, resolve_torch(g, tt, a), p, a))
        for tt in torches for a in arches for p in pythons])
        for r in sorted(chosen, key=newest, reverse=True)), wanted, fast_edges)


def newest_fit(g: CompatGraph, what: str, *, torch: str, sglang: str, python: str,
               arch: str) -> tuple[str | None, str, bool]:
    """What :func:`which_native` (one torch, python and platform, with ``sglang``'s edges)
    recommends, judging the releases newest first only until one fits (the matrix's
    extension columns ask it of every row): ``(requirement, "", False)``; none fits:
    ``(None, the first unknown release's reason, True)`` when one is unknown, else
    ``(None, the newest release's reason, False)``."""
    python, arch = normalize_python(python) or python, normalize_arch(arch) or arch
    project, dists = dists_named(g, what)
    s = get_sglang(g, sglang)
    edges = _as_table_edges(sglang_edges(g, s, project))
    chosen = sorted((r for r in _releases(g) if r.dist in dists), key=newest, reverse=True)
    wanted = imported_packages(chosen)
    t = resolve_torch(g, torch_release(g, torch), arch)
    unknown: str | None = None
    excluded: str | None = None
    for r in chosen:
        verdict, _, why = rn.judge(entry(g, r, t, python, arch), r.dist, r.version, wanted,
                                   edges)
        if verdict == 0:
            return f"{r.dist}=={r.version}", "", False
        if verdict == 1 and unknown is None:
            unknown = why or "unknown"
        elif verdict == 2 and excluded is None:
            excluded = why or "unknown"
    if unknown is not None:
        return None, unknown, True
    return None, excluded or "", False


def entry(g: CompatGraph, r: NativeRelease, t: TorchChoice, python: str,
          arch: str) -> list[Any]:
    """One combination as a resolved table stores it (:data:`moonpin.resolver.tables.
    native.Entry`): judged without a query's packages or SGLang's edges, which
    :func:`moonpin.resolver.tables.native.judge` applies."""
    return entry_of(evaluate_native(g, r, t, python, arch), r, python, arch)


def entry_of(ev: Evaluation, r: NativeRelease, python: str, arch: str) -> list[Any]:
    """:func:`entry` of the evaluation ``ev`` of ``r`` on this python and platform."""
    w = wheel_for(r, python, arch)
    cuda = next((c.detail for c in ev.checks if c.name == "CUDA major"), None)
    return [python, arch, rn.ORDER[ev.verdict], ev.score(),
            ev.reasons[0] if ev.reasons else None, cuda, ev.wheel, list(ev.notes),
            None if w is None else list(w.packages)]


def exact_pins(r: NativeRelease) -> tuple[tuple[str, str], ...]:
    """The distributions the release's wheels require at one exact version (no extra), as
    ``(dist, version)``: the meta ``nixl``'s ``nixl-cu12``/``nixl-cu13``."""
    seen: dict[str, str] = {}
    for w in r.wheels:
        for dist, version in _pinned(w.requires_dist):
            seen.setdefault(dist, version)
    return tuple(seen.items())


def _as_table_edges(edges: SglangEdges) -> Any:
    """``edges`` in the form :func:`moonpin.resolver.tables.native.judge` takes."""
    def pins(dist: str, python: str, arch: str) -> Any:
        lines = edges.pins.get(dist)
        return None if not lines else _torch_lines(lines, python, arch)

    return (edges.release, edges.filename, pins, edges.imports)


def newest(r: NativeRelease) -> tuple[bool, Version, str]:
    """Final releases before pre-releases (pip installs a pre-release only when asked),
    each newest first."""
    try:
        v = Version(r.version)
    except InvalidVersion:
        return False, Version("0"), r.dist
    return not v.is_prerelease, v, r.dist


def known_version(g: CompatGraph, dist: str, version: str) -> NativeRelease:
    """The KB's release ``dist`` ``version`` (any PEP 440 spelling); a UsageError naming
    the nearest otherwise."""
    pool = [r.version for r in _releases(g) if r.dist == dist]
    v = spelling.version(version, what=dist, flag=f"{dist}==", pool=pool)
    for r in _releases(g):
        if r.dist == dist and Version(r.version) == Version(v):
            return r
    raise spelling.not_known(v, pool, what=dist, flag=f"{dist}==")


# ----------------------------------------------------------------------- SGLang's pins


def pins_between(a: NativeRelease, b: NativeRelease) -> rule.Decision | None:
    """Whether ``b`` meets ``a``'s exact Requires-Dist pin of ``b``'s distribution (the meta
    ``nixl`` 1.5.1 requires ``nixl-cu13==1.5.1``), by :func:`rule.pinned_by`; None when
    ``a`` pins nothing of it. One edge of the stack graph (``moonpin.resolver.stacks``)."""
    want = dict(exact_pins(a)).get(b.dist)
    if want is None:
        return None
    return rule.pinned_by(f"{a.dist} {a.version}", b.dist, b.version,
                          [(f"{b.dist}=={want}", f"=={want}")])


def pins_hold(g: CompatGraph, s: Sglang, torch: str, python: str, arch: str,
              ) -> tuple[bool | None, str]:
    """Whether each extension the SGLang release ``s`` requires on this python and platform
    (its Requires-Dist pins without an extra) has a release meeting the pin that pip installs
    beside ``torch`` there: a clique of the stack graph (``moonpin.resolver.stacks``,
    :meth:`moonpin.resolver.graph.CompatGraph.stack_status`); a set without one cannot be
    installed. None: the KB holds no release meeting the pin."""
    return g.stack_status(s, torch, python, arch)


def triples(g: CompatGraph, **kw: Any) -> list[dict[str, str]]:
    """:func:`moonpin.resolver.query.triples` without the sets whose SGLang release requires
    an extension none of whose pinned releases pip installs there (:func:`pins_hold`)."""
    from moonpin.resolver.query import triples as mooncake_triples

    rows = mooncake_triples(g, **kw)
    # the facts unread: every row is of an index release's table, at a torch it admits
    tabled = not g.loaded
    out = []
    for row in rows:
        said = g.stack_tabled(row["sglang"], row["torch"], row["python"], row["arch"],
                              lambda: True) if tabled else None
        if said is None:
            s = g.find_sglang(row["sglang"])
            said = (True, "") if s is None else pins_hold(g, s, row["torch"], row["python"],
                                                           row["arch"])
        if said[0] is not False:
            out.append(row)
    return out


# ----------------------------------------------------------------------- explain a stack


def is_extension(g: CompatGraph, name: str) -> bool:
    """``name`` (canonical) is a distribution of the KB's native releases."""
    return any(r.dist == name for r in _releases(g))


def _locks(stack: Sequence[NativeRelease], python: str, arch: str) -> list[Check]:
    """The version locks one extension of the stack holds on another (flashinfer's)."""
    versions = {r.dist: r.version for r in stack}
    out = []
    for r in stack:
        w = next((x for x in r.wheels if _covers(x, python, arch)),
                 None)
        for rl in w.rules if w is not None else ():
            for s in rl.steps:
                if s.kind == "lock" and s.target in versions:
                    d = rule.lock(r.dist, r.version, s.target, versions[s.target],
                                  s.condition, s.effect, s.key)
                    out.append(Check(f"{r.dist} lock", d.ok, d.detail,
                                     (f"{w.artifact.filename if w else r.dist}: "
                                      f"{s.member}:{s.line}",)))
    return out


def _pin_edges(stack: Sequence[NativeRelease]) -> list[Check]:
    """The exact pins one release of the stack holds on another (the stack graph's
    extension edges): a failing check for each pin the other release does not meet, since
    pip installs no such set."""
    out = []
    for r in stack:
        for o in stack:
            d = pins_between(r, o) if o is not r else None
            if d is not None and d.ok is not True:
                w = r.wheels[0] if r.wheels else None
                out.append(Check(f"{r.dist}=={r.version} pin", d.ok, d.detail, (
                    f"{w.artifact.filename}: METADATA Requires-Dist" if w else r.dist,)))
    return out


def _collisions(stack: Sequence[NativeRelease], python: str, arch: str) -> list[Check]:
    """A failing check for each two releases of the stack of different distributions
    whose wheels install one top-level package (:func:`rule.collides`): the stack graph
    joins them by no edge."""
    out = []
    for i, r in enumerate(stack):
        for o in stack[i + 1:]:
            if o.dist == r.dist:
                continue
            d = rule.collides(f"{r.dist}=={r.version}", packages(r),
                              f"{o.dist}=={o.version}", packages(o))
            if d.ok is False:
                common = ", ".join(sorted(packages(r) & packages(o)))
                wheels = [wheel_for(x, python, arch) or (x.wheels[0] if x.wheels else None)
                          for x in (r, o)]
                out.append(Check(COLLISION, False, d.detail, tuple(
                    f"{w.artifact.filename}: top-level {common}" for w in wheels if w)))
    return out


def _stack_edges(g: CompatGraph, s: Sglang, project: str,
                 stack: Sequence[NativeRelease]) -> SglangEdges:
    """SGLang's edges to ``project`` within a stack: a package its launch choices import is
    asked of each release only while no release of the stack installs it (``nixl`` installs
    the ``nixl_ep`` that ``nixl-cu13`` beside it does not)."""
    e = sglang_edges(g, s, project)
    installed = {p for r in stack if r.project == project for w in r.wheels
                 for p in w.packages}
    return e._replace(imports=tuple(i for i in e.imports if i[0] not in installed))


def explain_stack(g: CompatGraph, sglang: str | None, extensions: Sequence[tuple[str, str]],
                  *, torch: str | None = None, python: str | None = None,
                  arch: str | None = None) -> dict[str, Any]:
    """Whether each extension of a stack (``(dist, version)``) loads with its torch (given,
    else the newest the SGLang release admits) on one python and platform, one check per
    extension; the pair judged is the given one, else the first on which most load.
    Returns ``query``, ``checks``, ``evaluated`` and ``combinations`` as
    :class:`moonpin.resolver.answers.Explanation` holds them."""
    python, arch = normalize_python(python), normalize_arch(arch)
    stack = [known_version(g, d, v) for d, v in extensions]
    s = get_sglang(g, sglang) if sglang is not None else None
    if torch is not None:
        tt = torch_release(g, torch)
    elif s is not None and g.torch_for(s):
        tt = g.torch_for(s)[-1][0]
    else:
        raise UsageError("explain of extensions needs torch==T or sglang==V",
                         hint="e.g. moonpin explain sglang==0.5.23 nixl-cu13==1.5.1")
    wanted = {r.dist: wanted_packages([x for x in _releases(g) if x.project == r.project
                                       and x.dist == r.dist]) for r in stack}
    edges = {r.project: _stack_edges(g, s, r.project, stack) for r in stack} \
        if s is not None else {}
    pythons = [python] if python else list(reversed(all_pythons(_releases(g))))
    if s is not None and python is None:  # SGLang's own wheel's python first
        own = [p for p in pythons if f"-{p}-" in s.artifact.filename]
        pythons = own + [p for p in pythons if p not in own]
    arches = [arch] if arch else list(ARCHES)
    judged: list[tuple[str, str, list[Check], list[str], list[str]]] = []
    for a in arches:
        t = resolve_torch(g, tt, a)
        for p in pythons:
            checks: list[Check] = []
            notes: list[str] = []
            idles: list[str] = []
            if s is not None:
                from moonpin.resolver.graph import torch_lines

                d = rule.torch_admitted(f"sglang {s.version}", [
                    (line, str(spec)) for line, spec in torch_lines(s)], tt)
                checks.append(Check("torch requirement", d.ok, d.detail,
                                    (f"{s.artifact.filename}: METADATA Requires-Dist",)))
            said_of = [(r.dist, r.version, dict(exact_pins(r)),
                        loaded_release(g, r, t, p, a)) for r in stack]
            for r in stack:
                ev = evaluate_native(g, r, t, p, a, wanted=wanted[r.dist],
                                     edges=edges.get(r.project))
                imported = s is not None and bool(packages(r) & {
                    x for x, _ in sglang_edges(g, s, r.project).imports})
                idle = rn.unloaded(said_of, r.dist, r.version, tt, imported)
                check, ev_notes = rn.extension_check(r.dist, r.version, ev.checks, ev.notes,
                                                     idle)
                checks.append(check)
                notes += [n for n in ev_notes if n not in notes]
                if idle is not None:
                    idles.append(idle.detail)
            checks += _locks(stack, p, a)
            checks += _pin_edges(stack)
            checks += _collisions(stack, p, a)
            judged.append((p, a, checks, notes, idles))
    return stack_answer(s.version if s else None, tt, extensions, python, arch, judged)
