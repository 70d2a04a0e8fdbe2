"""Which versions work together, and why: the checks, and the queries built on them.

Compatibility of (SGLang S, torch T, mooncake wheel W, python P, platform A) is
decided exactly as the scraped code behaves: T satisfies S's torch requirement;
W has a wheel for P and A; the module S imports is in W; W's loader finds a build
for T's suffix (computed with the loader's own regex and separator, so a local
label such as ``+cu130`` is dropped); those builds export every name S imports
and register the backends S needs; and the CUDA major they link matches T's.
Each check is ``ok`` True / False, or None when the KB cannot decide it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from kb.errors import UsageError
from kb.models import Build, LoaderScheme, SglangRelease
from resolver import rule
from resolver.graph import CompatGraph, WheelView, torch_lines
from resolver.inputs import normalize_arch, normalize_python

__all__ = [
    "Check",
    "Evaluation",
    "TorchChoice",
    "check_mooncake",
    "evaluate",
    "explain",
    "get_sglang",
    "normalize_arch",
    "normalize_python",
    "parse_release",
    "parse_spec",
    "resolve_torch",
    "triples",
    "which_mooncake",
    "which_sglang",
    "which_torch",
]



@dataclass(frozen=True)
class Check:
    name: str
    ok: bool | None
    detail: str
    evidence: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail,
                "evidence": list(self.evidence)}


@dataclass(frozen=True)
class TorchChoice:
    """A torch the question is about: its version and the CUDA major assumed for it."""

    text: str
    version: Version
    cuda: int | None
    cuda_known: bool
    cuda_why: str


@dataclass
class Evaluation:
    sglang: str
    dist: str
    mooncake: str
    torch: str
    python: str
    arch: str
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    wheel: str | None = None

    @property
    def verdict(self) -> str:
        return rule.verdict(c.ok for c in self.checks)

    @property
    def reasons(self) -> list[str]:
        bad = [c for c in self.checks if c.ok is False] or [c for c in self.checks if c.ok is None]
        return [f"{c.name}: {c.detail}" for c in bad]

    def score(self) -> int:
        return sum(1 for c in self.checks if c.ok)


# ----------------------------------------------------------------------- input


def parse_release(text: str) -> tuple[str, str]:
    """``NAME==VERSION`` (any PEP 503 spelling of the name) -> (canonical name, version)."""
    name, sep, version = text.partition("==")
    if not sep or not name.strip() or not version.strip():
        raise UsageError(f"{text!r} does not name one release",
                         hint="use NAME==VERSION, e.g. mooncake-transfer-engine==0.3.13.post1")
    try:
        Version(version.strip())
    except InvalidVersion as e:
        raise UsageError(f"{version.strip()!r} in {text!r} is not a PEP 440 version",
                         hint="use NAME==VERSION with a release's version, e.g. "
                              "sglang==0.5.18") from e
    return str(canonicalize_name(name.strip())), version.strip()


def _nearest(version: str, pool: Iterable[str]) -> str:
    try:
        v = Version(version)
    except InvalidVersion:
        return ", ".join(list(pool)[-3:])
    ordered = sorted(set(pool), key=Version)
    near = [p for p in ordered if Version(p) < v][-2:] + [p for p in ordered if Version(p) > v][:2]
    return ", ".join(near) or "none"


def get_sglang(g: CompatGraph, version: str) -> SglangRelease:
    try:
        s = g.find_sglang(version)
    except InvalidVersion as e:
        raise UsageError(f"sglang version {version!r} is not PEP 440") from e
    if s is None:
        unread = [u for u in g.kb.unread if u.kind == "sglang" and u.version == version]
        if unread:
            raise UsageError(f"sglang {version} could not be read in the last scrape "
                             f"({unread[0].reason}); its compatibility is unknown",
                             hint="run `moonpin scrape --only sglang` again")
        raise UsageError(f"sglang {version} is not in the knowledge base (nearest known: "
                         f"{_nearest(version, (str(v) for v in g.sglang))})",
                         hint="run `moonpin scrape` to refresh it")
    return s


def check_mooncake(g: CompatGraph, dist: str, version: str) -> None:
    dist = str(canonicalize_name(dist))
    if dist not in g.dists():
        raise UsageError(f"unknown mooncake distribution {dist!r}",
                         hint="known: " + ", ".join(g.dists()))
    if g.find_mooncake(dist, version) is None:
        if any(u.name == dist and u.version == version for u in g.kb.unread):
            raise UsageError(f"{dist} {version} could not be read in the last scrape; its "
                             "compatibility is unknown", hint="run `moonpin scrape` again")
        pool = [str(v) for d, v in g.mooncake if d == dist]
        raise UsageError(f"{dist} {version} is not in the knowledge base (nearest known: "
                         f"{_nearest(version, pool)})", hint="run `moonpin scrape` to refresh it")


def resolve_torch(g: CompatGraph, text: str, arch: str) -> TorchChoice:
    """A torch as given: ``2.13.0+cu126`` names its CUDA variant; a bare version means
    the wheel the index publishes for ``arch`` (its CUDA major from the KB)."""
    try:
        v = Version(text)
    except InvalidVersion as e:
        raise UsageError(f"torch version {text!r} is not PEP 440",
                         hint="use e.g. --torch 2.13.0 or 2.13.0+cu130") from e
    if v.local:
        m = re.fullmatch(r"cu(\d+)", v.local)
        if m:
            # cu126 -> 12, cu130 -> 13, cu92 -> 9: the last digit is the minor version
            major = int(m.group(1)[:-1])
            return TorchChoice(text, v, major, True, f"local label +{v.local}")
        if v.local in ("cpu",):
            return TorchChoice(text, v, None, True, "local label +cpu (a CPU build)")
        if v.local.startswith("rocm"):
            return TorchChoice(text, v, None, True, f"local label +{v.local} (ROCm, no CUDA)")
    rel = g.torch.get(Version(v.public))
    if rel is not None:
        for var in rel.variants:
            if var.arch == arch:
                why = (f"the index's {var.artifact.filename} ({var.evidence})")
                return TorchChoice(text, v, var.cuda_major, True, why)
    return TorchChoice(text, v, None, False,
                       f"no CUDA facts for torch {v.public} on {arch} in the KB")


# ----------------------------------------------------------------------- the checks


def _requirement(s: SglangRelease, module: str | None = None) -> rule.Requirement:
    """The rule's facts for a release's requirement (``module``: the one it ends up with)."""
    pg = s.pg
    return rule.Requirement(module=module or pg.module, names=tuple(pg.names),
                            backends=tuple(pg.backends), optional_names=tuple(pg.optional_names),
                            alternatives=tuple(pg.alternatives), release=f"sglang {s.version}")


def _torch_facts(t: TorchChoice) -> rule.TorchFacts:
    return rule.TorchFacts(t.text, t.cuda, t.cuda_known, t.cuda_why)


def _build_facts(b: Build) -> rule.BuildFacts:
    """The rule's facts for a scraped build: a build read in part, or with an error, is
    incomplete; ``needed_method`` ``none`` means its dynamic section was not read."""
    return rule.BuildFacts(member=b.member, names=frozenset(b.names),
                           backends=frozenset(b.backends), cuda=b.cuda_major,
                           names_checked=frozenset(b.names_checked),
                           complete=b.read_error is None and b.strings_complete,
                           cuda_read=b.needed_method != "none")


def _scheme(ld: LoaderScheme) -> rule.Scheme:
    return rule.Scheme(kind=ld.kind, imports=tuple(i.template for i in ld.imports),
                       version_regex=ld.version_regex, separator=ld.separator,
                       member=ld.member, note=ld.note)


def _check(name: str, d: rule.Decision, evidence: Iterable[str] = ()) -> Check:
    return Check(name, d.ok, d.detail, tuple(evidence))


def _torch_requirement(s: SglangRelease, t: TorchChoice) -> Check:
    lines = torch_lines(s)
    if not lines:
        return Check("torch requirement", True, "SGLang declares no torch requirement")
    hit = [line for line, req in lines if req.specifier.contains(t.version.public,
                                                                prereleases=True)]
    return Check(
        "torch requirement", bool(hit),
        f"torch {t.version} satisfies {hit[0]!r}" if hit else
        f"torch {t.version} does not satisfy SGLang's {', '.join(repr(x) for x, _ in lines)}",
        (f"{s.artifact.filename}: METADATA Requires-Dist",))


def _module(ev: Evaluation, s: SglangRelease, w: WheelView, python: str, arch: str,
            ) -> tuple[str, LoaderScheme | None] | None:
    """The module the import ends up with (SGLang's, or its ImportError fallback) and its
    loader; the ``module present`` check when the wheel has none (then None)."""
    req = _requirement(s)
    here = {m for m in (req.module, *req.alternatives) if m is not None and (
        w.loader(m) is not None or w.builds_named(m.removeprefix("mooncake."), python, arch))}
    module = rule.choose_module(req, here)
    filename = w.wheel.artifact.filename
    if module is None:
        have = sorted({ld.module for ld in w.wheel.loaders} |
                      {"mooncake." + b.member.rsplit("/", 1)[-1].split(".")[0]
                       for b in w.wheel.builds})
        ev.checks.append(_check("module present", rule.no_module(req, filename, have),
                                s.pg.evidence))
        return None
    if module != req.module:
        ev.notes.append(f"{filename} has no {req.module}; sglang {s.version} falls back to "
                        f"{module}, which it has")
    return module, w.loader(module)


def _direct_build(ev: Evaluation, t: TorchChoice, w: WheelView, module: str, python: str,
                  arch: str) -> list[rule.BuildFacts] | None:
    """A loader-less module: the extension itself (0.3.7's ``ep.so``)."""
    b = w.builds_named(module.removeprefix("mooncake."), python, arch)[0]
    filename = w.wheel.artifact.filename
    ev.checks.append(Check("module present", True,
                           f"{module} is the extension module {b.member}",
                           (f"{filename}: {b.member}",)))
    d = rule.direct_build(b.member, b.torch, b.torch_from, t.text)
    ev.checks.append(_check("build for torch", d,
                            () if d.ok is None else (f"{filename}: {b.member}",)))
    return None if d.ok is False else [_build_facts(b)]


def _loaded_builds(ev: Evaluation, t: TorchChoice, w: WheelView, loader: LoaderScheme,
                   python: str, arch: str) -> list[rule.BuildFacts] | None:
    """The builds a prebuilt loader imports for this torch; None (and the failed or
    undecided ``build for torch`` check) when it finds none."""
    scheme = _scheme(loader)
    filename = w.wheel.artifact.filename
    builds: list[Build] = []
    for imp in loader.imports:
        target = rule.loader_target(scheme, imp.template, t.text)
        if target is None:
            ev.checks.append(Check("build for torch", None,
                                   f"cannot compute {imp.template} for torch {t.text} with "
                                   "the loader's rule"))
            return None
        mshort = target.removeprefix("mooncake.")
        found = w.builds_named(mshort, python, arch)
        if not found:
            same = sorted({b.member.rsplit("/", 1)[-1].split(".")[0] for b in w.wheel.builds
                           if b.member.rsplit("/", 1)[-1].startswith(
                               mshort.split("_")[0] or mshort)})
            d = rule.no_build(loader.member, target, t.text, filename, same,
                              f" for {python} on {arch}")
            detail = d.detail
            if imp.on_missing:
                said = imp.on_missing.splitlines()[0].replace(
                    "{torch_version}", rule.loader_suffix(scheme, t.text, ".") or t.text)
                detail += f"; at import: {said!r}"
            ev.checks.append(Check("build for torch", False, detail,
                                   (f"{filename}: {loader.member}:{imp.line}",)))
            return None
        builds.append(found[0])
    ev.checks.append(Check("build for torch", True,
                           f"{loader.member} loads {', '.join(b.member for b in builds)}",
                           tuple(f"{filename}: {b.member}" for b in builds)))
    return [_build_facts(b) for b in builds]


def _builds(ev: Evaluation, t: TorchChoice, w: WheelView, module: str,
            loader: LoaderScheme | None, python: str, arch: str,
            ) -> list[rule.BuildFacts] | None:
    """``module present`` and ``build for torch``: the builds the import loads (a JIT
    loader's sources stand for the build it compiles); None when that is decided."""
    if loader is None:
        return _direct_build(ev, t, w, module, python, arch)
    filename = w.wheel.artifact.filename
    ev.checks.append(Check("module present", True,
                           f"{loader.member} loads {module} ({loader.kind})",
                           (f"{filename}: {loader.member}",)))
    if loader.kind == "unknown":
        ev.checks.append(Check("build for torch", None,
                               f"{loader.member}: loading scheme not recognised "
                               f"({loader.note})"))
        return None
    if loader.kind != "jit-compile":
        return _loaded_builds(ev, t, w, loader, python, arch)
    ev.checks.append(Check(
        "build for torch", True,
        f"{loader.member} compiles {', '.join(loader.sources)} against the installed "
        f"torch at first import", (f"{filename}: {loader.member}",)))
    cuda_tools = [x for x in loader.toolchain if "MUSA" not in x and "MACA" not in x]
    ev.notes.append(f"{ev.dist}=={ev.mooncake} compiles its process-group extension at "
                    f"first import: the image needs {', '.join(cuda_tools or loader.toolchain)}")
    # every name was looked for in the sources: names_checked None
    return [rule.BuildFacts(member=loader.member, names=frozenset(loader.source_names),
                            backends=frozenset(loader.source_backends))]


def evaluate(g: CompatGraph, s: SglangRelease, t: TorchChoice, w: WheelView | None,
             dist: str, version: str, python: str, arch: str) -> Evaluation:
    """Every check for one combination; ``w`` None means the release has no wheel for P/A.
    The KB supplies the facts, :mod:`resolver.rule` decides."""
    ev = Evaluation(s.version, dist, version, t.text, python, arch,
                    wheel=w.wheel.artifact.filename if w else None)
    ev.checks.append(_torch_requirement(s, t))
    if s.pg.module is None:
        ev.notes.append(f"sglang {s.version} imports no mooncake process-group module: "
                        "compatible with any mooncake (or none)")
        return ev
    if w is None:
        ev.checks.append(Check("wheel for python/platform", False,
                               f"{dist} {version} has no wheel for {python} on {arch}"))
        return ev
    ev.checks.append(Check("wheel for python/platform", True,
                           f"{w.wheel.artifact.filename} covers {python} on {arch}",
                           (w.wheel.artifact.filename,)))
    chosen = _module(ev, s, w, python, arch)
    if chosen is None:
        return ev
    module, loader = chosen
    builds = _builds(ev, t, w, module, loader, python, arch)
    if builds is None:
        return ev
    req = _requirement(s, module)
    jit = loader is not None and loader.kind == "jit-compile"
    ev.checks.append(_check("names", rule.names(req, builds), s.pg.evidence))
    opt_missing = rule.optional_missing(req, builds)
    if opt_missing and ev.checks[-1].ok is True:
        ev.notes.append(f"the build lacks {', '.join(opt_missing)}, which sglang {s.version} "
                        "uses only behind an optional import (it runs without)")
    ev.checks.append(_check("backends", rule.backends(req, builds),
                            () if jit else (b.member for b in builds)))
    ev.checks.append(_check("CUDA major", rule.cuda_major(builds, _torch_facts(t), jit=jit)))
    return ev


# ----------------------------------------------------------------------- queries


def _torches(g: CompatGraph, s: SglangRelease, torch: str | None) -> list[str]:
    if torch is not None:
        return [torch]
    return [v for v, _ in g.torch_for(s)]


def _combos(g: CompatGraph, s: SglangRelease, dist: str, version: str, torch: str | None,
            python: str | None, arch: str | None) -> list[Evaluation]:
    wheels = g.wheels(dist, version)
    pythons = [python] if python else sorted({p for w in wheels for p in w.pythons})
    arches = [arch] if arch else sorted({a for w in wheels for a in w.arches})
    out = []
    torches = _torches(g, s, torch)
    if not torches or (s.pg.module is None and torch is None):
        # Nothing to decide per torch: one (the newest admitted) stands for all.
        torches = torches[-1:] or [str(v) for v in g.torch_versions[-1:]]
    for tt in torches:
        for a in arches:
            t = resolve_torch(g, tt, a)
            for p in pythons:
                w = next((x for x in wheels if p in x.pythons and a in x.arches), None)
                out.append(evaluate(g, s, t, w, dist, version, p, a))
    return out


def _best(evs: list[Evaluation]) -> Evaluation | None:
    if not evs:
        return None
    order = {"compatible": 0, "unknown": 1, "incompatible": 2}
    return min(evs, key=lambda e: (order[e.verdict], -e.score()))


def _covers(evs: list[Evaluation]) -> list[dict[str, Any]]:
    out = [{"python": e.python, "arch": e.arch, "torch": e.torch, "wheel": e.wheel,
            "cuda": next((c.detail for c in e.checks if c.name == "CUDA major"), None)}
           for e in evs if e.verdict == "compatible"]
    return sorted(out, key=lambda w: (w["torch"], w["arch"], w["python"]))


def _place(entry: dict[str, Any], evs: list[Evaluation], best: Evaluation,
           buckets: tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]],
           ) -> None:
    """File one candidate under compatible / excluded / unknown by its best combination."""
    compatible, excluded, unknown = buckets
    if best.verdict == "compatible":
        entry["wheels"] = _covers(evs)
        compatible.append(entry)
    else:
        entry["reason"] = best.reasons[0] if best.reasons else "unknown"
        (unknown if best.verdict == "unknown" else excluded).append(entry)


def which_mooncake(g: CompatGraph, sglang: str, *, torch: str | None = None,
                   python: str | None = None, arch: str | None = None,
                   dist: str | None = None) -> dict[str, Any]:
    python, arch = normalize_python(python), normalize_arch(arch)
    s = get_sglang(g, sglang)
    dists = [str(canonicalize_name(dist))] if dist else g.dists()
    if dist and dists[0] not in g.dists():
        raise UsageError(f"unknown mooncake distribution {dist!r}",
                         hint="known: " + ", ".join(g.dists()))
    compatible, excluded, unknown = [], [], []
    notes: list[str] = []
    releases = sorted((k for k in g.mooncake if k[0] in dists), key=lambda k: (k[1], k[0]),
                      reverse=True)
    unread_keys = {(u.name, u.version) for u in g.kb.unread if u.kind == "mooncake"}
    for d, v in releases:
        if (d, str(v)) in unread_keys:
            continue  # listed below as unknown: never a verdict from what was half read
        evs = _combos(g, s, d, str(v), torch, python, arch)
        best = _best(evs)
        if best is None:
            continue
        if s.pg.module is None:
            notes = best.notes
        entry: dict[str, Any] = {"dist": d, "version": str(v), "requirement": f"{d}=={v}"}
        if best.verdict == "compatible":
            entry["wheels"] = _covers(evs)
            entry["notes"] = sorted({n for e in evs if e.verdict == "compatible" for n in e.notes})
            compatible.append(entry)
        elif best.verdict == "unknown":
            entry["reason"] = best.reasons[0] if best.reasons else "unknown"
            unknown.append(entry)
        else:
            entry["reason"] = best.reasons[0]
            excluded.append(entry)
    for u in g.kb.unread:
        if u.kind == "mooncake" and u.name in dists:
            unknown.append({"dist": u.name, "version": u.version,
                            "reason": f"not read in the last scrape: {u.reason}"})
    return {
        "query": {"sglang": s.version, "torch": torch or [t for t in _torches(g, s, None)],
                  "python": python or "all", "arch": arch or "all", "dist": dist or "all",
                  "module": s.pg.module, "names": list(s.pg.names),
                  "backends": list(s.pg.backends)},
        "compatible": compatible,
        "excluded": excluded,
        "unknown": unknown,
        "notes": notes,
    }


def which_sglang(g: CompatGraph, mooncake: str, *, torch: str | None = None,
                 python: str | None = None, arch: str | None = None) -> dict[str, Any]:
    python, arch = normalize_python(python), normalize_arch(arch)
    dist, version = parse_release(mooncake)
    check_mooncake(g, dist, version)
    compatible: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    unknown: list[dict[str, Any]] = []
    no_module = []
    for v in sorted(g.sglang, reverse=True):
        s = g.sglang[v]
        if s.pg.module is None:
            no_module.append(s.version)
            continue
        evs = _combos(g, s, dist, version, torch, python, arch)
        best = _best(evs)
        if best is None:
            continue
        _place({"version": s.version, "requirement": f"sglang=={s.version}",
                "module": s.pg.module}, evs, best, (compatible, excluded, unknown))
    unknown += [{"version": u.version, "reason": f"not read in the last scrape: {u.reason}"}
                for u in g.kb.unread if u.kind == "sglang"]
    return {"query": {"mooncake": f"{dist}=={version}", "torch": torch or "each release's",
                      "python": python or "all", "arch": arch or "all"},
            "compatible": compatible, "excluded": excluded, "unknown": unknown,
            "without_mooncake_pg": no_module}


def which_torch(g: CompatGraph, sglang: str, mooncake: str, *, python: str | None = None,
                arch: str | None = None) -> dict[str, Any]:
    python, arch = normalize_python(python), normalize_arch(arch)
    s = get_sglang(g, sglang)
    dist, version = parse_release(mooncake)
    check_mooncake(g, dist, version)
    compatible: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    unknown: list[dict[str, Any]] = []
    for tv in reversed(g.torch_versions):
        if tv.is_prerelease:
            continue
        evs = _combos(g, s, dist, version, str(tv), python, arch)
        best = _best(evs)
        if best is None:
            continue
        _place({"version": str(tv), "requirement": f"torch=={tv}"}, evs, best,
               (compatible, excluded, unknown))
    return {"query": {"sglang": s.version, "mooncake": f"{dist}=={version}",
                      "python": python or "all", "arch": arch or "all"},
            "compatible": compatible, "excluded": excluded, "unknown": unknown}


def explain(g: CompatGraph, sglang: str, mooncake: str, *, torch: str | None = None,
            python: str | None = None, arch: str | None = None) -> dict[str, Any]:
    python, arch = normalize_python(python), normalize_arch(arch)
    dist, version = parse_release(mooncake)
    unread = [u for u in g.kb.unread
              if (u.kind == "sglang" and u.version == sglang and g.find_sglang(sglang) is None)
              or (u.kind == "mooncake" and u.name == dist and u.version == version
                  and g.find_mooncake(dist, version) is None)]
    if unread:
        return {
            "query": {"sglang": sglang, "mooncake": f"{dist}=={version}", "torch": torch,
                      "python": python or "all", "arch": arch or "all"},
            "verdict": "unknown",
            "reasons": [f"{u.name} {u.version} was not read in the last scrape: {u.reason}"
                        for u in unread],
            "notes": [], "evaluated": {"torch": torch, "python": python, "arch": arch,
                                       "wheel": None},
            "checks": [], "combinations": [],
        }
    s = get_sglang(g, sglang)
    check_mooncake(g, dist, version)
    evs = _combos(g, s, dist, version, torch, python, arch)
    if not evs:  # the release publishes no wheel at all: nothing to install anywhere
        tt = (_torches(g, s, torch) or [str(v) for v in g.torch_versions[-1:]] or ["0"])[-1]
        evs = [evaluate(g, s, resolve_torch(g, tt, arch or "x86_64"), None, dist, version,
                        python or "any python", arch or "any platform")]
    best = _best(evs)
    assert best is not None
    verdict = best.verdict
    return {
        "query": {"sglang": s.version, "mooncake": f"{dist}=={version}",
                  "torch": torch or [t for t in _torches(g, s, None)],
                  "python": python or "all", "arch": arch or "all"},
        "verdict": verdict,
        "reasons": best.reasons,
        "notes": best.notes,
        "evaluated": {"torch": best.torch, "python": best.python, "arch": best.arch,
                      "wheel": best.wheel},
        "checks": [c.as_dict() for c in best.checks],
        "combinations": [{"torch": e.torch, "python": e.python, "arch": e.arch,
                          "verdict": e.verdict, "reason": (e.reasons or [""])[0]}
                         for e in evs],
    }


def parse_spec(text: str | None, what: str) -> SpecifierSet | None:
    """A PEP 440 specifier from the command line; a bare version means ``==``."""
    if text is None:
        return None
    t = text.strip()
    if t and t[0].isdigit():
        t = "==" + t
    try:
        return SpecifierSet(t)
    except InvalidSpecifier as e:
        raise UsageError(f"{what} specifier {text!r} is not PEP 440",
                         hint="use e.g. '>=0.5.17' or '==0.3.13.post1'") from e



def triples(g: CompatGraph, *, sglang: str | None = None, torch: str | None = None,
            mooncake: str | None = None, dist: str | None = None, python: str | None = None,
            arch: str | None = None) -> list[dict[str, str]]:
    python, arch = normalize_python(python), normalize_arch(arch)
    s_spec, t_spec, m_spec = (parse_spec(sglang, "sglang"), parse_spec(torch, "torch"),
                              parse_spec(mooncake, "mooncake"))
    dists = [str(canonicalize_name(dist))] if dist else g.dists()
    out = []
    for sv, s in sorted(g.sglang.items(), reverse=True):
        if s.pg.module is None or (s_spec is not None and not s_spec.contains(sv, True)):
            continue
        torches = [t for t in _torches(g, s, None)
                   if t_spec is None or t_spec.contains(Version(t), True)]
        for (d, mv) in sorted(g.mooncake, key=lambda k: (k[1], k[0]), reverse=True):
            if d not in dists or (m_spec is not None and not m_spec.contains(mv, True)):
                continue
            for t in torches:
                for e in _combos(g, s, d, str(mv), t, python, arch):
                    if e.verdict == "compatible":
                        out.append({"sglang": s.version, "torch": t, "dist": d,
                                    "mooncake": str(mv), "python": e.python, "arch": e.arch})
    return out
