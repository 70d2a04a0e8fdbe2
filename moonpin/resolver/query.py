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

import functools
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from packaging.version import Version

from moonpin.kb.distributions import torch_requirement
from moonpin.kb.errors import UsageError
from moonpin.resolver import rule, spelling
from moonpin.resolver.answers import Candidate, Check, Covered, Explanation, Which
from moonpin.resolver.graph import CompatGraph, WheelView, canonical_name, torch_lines
from moonpin.resolver.inputs import normalize_arch, normalize_python
from moonpin.resolver.spelling import parse_release
from moonpin.resolver.tables.torch_labels import label_cuda

if TYPE_CHECKING:  # a query answered from the resolved tables loads neither
    from packaging.specifiers import SpecifierSet

    from moonpin.kb.facts import Build, Loader, Sglang, Wheel

__all__ = [
    "Check",
    "Evaluation",
    "Judged",
    "TorchChoice",
    "check_mooncake",
    "combos",
    "cuda_majors",
    "evaluate",
    "explain",
    "get_sglang",
    "loader_reads_label",
    "normalize_arch",
    "normalize_python",
    "parse_release",
    "parse_spec",
    "resolve_torch",
    "torch_release",
    "torch_requirement_check",
    "triples",
    "wheel_tags",
    "which_mooncake",
    "which_sglang",
    "which_torch",
]



# Records are named tuples and slotted classes, not dataclasses: ``dataclasses`` imports
# ``inspect`` (with ``ast``, ``dis`` and ``tokenize``), a tenth of a query's time budget.


class TorchChoice(NamedTuple):
    """A torch the question is about: its version and the CUDA major assumed for it."""

    text: str
    version: Version
    cuda: int | None
    cuda_known: bool
    cuda_why: str


class Evaluation:
    """Every check of one combination, in the order they were made."""

    __slots__ = ("arch", "checks", "dist", "mooncake", "notes", "python", "sglang", "torch",
                 "wheel")

    def __init__(self, sglang: str, dist: str, mooncake: str, torch: str, python: str,
                 arch: str, *, wheel: str | None = None) -> None:
        self.sglang, self.dist, self.mooncake, self.torch = sglang, dist, mooncake, torch
        self.python, self.arch, self.wheel = python, arch, wheel
        self.checks: list[Check] = []
        self.notes: list[str] = []

    @property
    def verdict(self) -> str:
        return rule.verdict(c.ok for c in self.checks)

    @property
    def reasons(self) -> list[str]:
        bad = [c for c in self.checks if c.ok is False] or [c for c in self.checks if c.ok is None]
        return [f"{c.name}: {c.detail}" for c in bad]

    def score(self) -> int:
        return sum(1 for c in self.checks if c.ok)

    @property
    def cuda(self) -> str | None:
        """The detail of the ``CUDA major`` check (None: not made)."""
        return next((c.detail for c in self.checks if c.name == "CUDA major"), None)


class Judged(NamedTuple):
    """One combination as a resolved table holds it: what :class:`Evaluation` says of it
    that an answer places (its verdict, score, first reason, notes, ``CUDA major`` detail)."""

    torch: str
    arch: str
    python: str
    wheel: str | None
    verdict: str
    points: int
    reason: str | None
    notes: tuple[str, ...]
    cuda: str | None

    @property
    def reasons(self) -> list[str]:
        return [] if self.reason is None else [self.reason]

    def score(self) -> int:
        return self.points


# ----------------------------------------------------------------------- input


def _nearest(version: str, pool: Iterable[str]) -> str:
    return ", ".join(spelling.close_versions(version, list(pool))) or "none"


def get_sglang(g: CompatGraph, version: str) -> Sglang:
    """The SGLang release ``version`` names (``latest``, ``v0.5.18`` and any PEP 440
    spelling of a known release accepted); a UsageError with the nearest known otherwise."""
    pool = [s.version for s in g.sglang.values()]
    if spelling.is_latest(version):
        version = spelling.release(version, pool, flag="sglang ")
    version = spelling.version(version, what="sglang", flag="sglang ", pool=pool)
    s = g.find_sglang(version)
    if s is None:
        unread = [u for u in g.kb.unread if u.kind == "sglang" and u.version == version]
        if unread:
            raise UsageError(f"sglang {version} could not be read in the last scrape "
                             f"({unread[0].reason}); its compatibility is unknown",
                             hint="run `moonpin scrape --only sglang` again")
        raise spelling.not_known(version, pool, flag="sglang ")
    return s


def check_mooncake(g: CompatGraph, dist: str, version: str) -> None:
    """A UsageError unless ``dist`` ``version`` is a mooncake release of the KB (the error
    says what was probably meant)."""
    dist = spelling.name(dist, g.dists())
    pool = [str(v) for d, v in g.mooncake if d == dist]
    version = spelling.version(version, what=dist, flag=f"{dist}==", pool=pool)
    if g.find_mooncake(dist, version) is None:
        if any(u.name == dist and u.version == version for u in g.kb.unread):
            raise UsageError(f"{dist} {version} could not be read in the last scrape; its "
                             "compatibility is unknown", hint="run `moonpin scrape` again")
        raise spelling.not_known(version, pool, what=dist, flag=f"{dist}==")


def torch_release(g: CompatGraph, text: str) -> str:
    """The ``torch.__version__`` a torch as typed names, the text the loader's rule and the
    tables read: PEP 440 equality with a release of the KB, in the KB's spelling
    (``2.13`` and ``2.13.0.0`` are ``2.13.0``, as ``torch==2.13`` installs 2.13.0); a local
    label is kept as a distinct build (``2.13+cu126`` is ``2.13.0+cu126``). A version the
    KB does not hold is padded to torch's three release segments."""
    listed = g.torch_releases()
    text = spelling.version(text, what="torch", flag="--torch ", pool=[str(t) for t in listed])
    v = Version(text)
    public = Version(v.public)
    known = next((t for t in listed if t == public), None)
    if known is not None:
        base = str(known)
    else:
        release = (*v.release, 0, 0)[:max(3, len(v.release))]
        while len(release) > 3 and release[-1] == 0:
            release = release[:-1]
        base = ".".join(map(str, release)) + _after_release(public)
    return base + (f"+{v.local}" if v.local else "")


def _after_release(v: Version) -> str:
    """What a version says past its release segments (``a1``, ``.post1``, ``.dev0``)."""
    out = ""
    if v.pre is not None:
        out += f"{v.pre[0]}{v.pre[1]}"
    if v.post is not None:
        out += f".post{v.post}"
    if v.dev is not None:
        out += f".dev{v.dev}"
    return out


@lru_cache(maxsize=4096)
def resolve_torch(g: CompatGraph, text: str, arch: str) -> TorchChoice:
    """A torch as given: ``2.13.0+cu126`` names its CUDA variant; a bare version means
    the wheel the index publishes for ``arch`` (its CUDA major from the KB)."""
    text = torch_release(g, text)
    v = Version(text)
    said = label_cuda(v.local) if v.local else None
    if said is not None:
        return TorchChoice(text, v, said[0], True, said[1])
    table = None
    if not g.loaded and g.kb_path is not None:  # the torch table while the facts are unread
        from moonpin.resolver.tables.documents import load_torch

        table = load_torch(g.kb_path)
    if table is not None:
        variants: list[list[Any]] = next(
            (t["variants"] for t in table["torch"] if Version(t["version"]) == Version(v.public)),
            [])
        for a, cuda, evidence, wheel in variants:
            if a == arch:
                return TorchChoice(text, v, cuda, True, f"the index's {wheel} ({evidence})")
    else:
        rel = g.torch.get(Version(v.public))
        for var in rel.variants if rel is not None else ():
            if var.arch == arch:
                why = (f"the index's {var.artifact.filename} ({var.evidence})")
                return TorchChoice(text, v, var.cuda_major, True, why)
    return TorchChoice(text, v, None, False,
                       f"no CUDA facts for torch {v.public} on {arch} in the KB")


# ----------------------------------------------------------------------- the checks


def _requirement(s: Sglang, module: str | None = None) -> rule.Requirement:
    """The rule's facts for a release's requirement (``module``: the one it ends up with)."""
    pg = s.pg
    return rule.Requirement(module=module or pg.module, names=tuple(pg.names),
                            backends=tuple(pg.backends), optional_names=tuple(pg.optional_names),
                            alternatives=tuple(pg.alternatives), release=f"sglang {s.version}")


def _torch_facts(t: TorchChoice) -> rule.TorchFacts:
    return rule.TorchFacts(t.text, t.cuda, t.cuda_known, t.cuda_why)


# The facts are immutable: what a query derives from one is kept in the memo of the wheel
# or graph that holds it (one query evaluates the same build, loader and torch line for
# many combinations). Keyed by the object's identity, which the memo keeps alive.

_T = TypeVar("_T")
_Ev = TypeVar("_Ev", "Evaluation", "Judged")


def _kept(memo: dict[Any, Any], key: tuple[Any, ...], obj: object, make: Callable[[], _T],
          ) -> _T:
    full = (id(obj), key)
    hit = memo.get(full)
    if hit is not None and hit[0] is obj:
        out: _T = hit[1]
        return out
    value = make()
    memo[full] = (obj, value)
    return value


def _build_facts(b: Build) -> rule.BuildFacts:
    """The rule's facts for a scraped build: a build read in part, or with an error, is
    incomplete; ``needed_method`` ``none`` means its dynamic section was not read."""
    return rule.BuildFacts(member=b.member, names=frozenset(b.names),
                           backends=frozenset(b.backends), cuda=b.cuda_major,
                           names_checked=frozenset(b.names_checked),
                           complete=b.read_error is None and b.strings_complete,
                           cuda_read=b.needed_method != "none")


def _scheme(ld: Loader) -> rule.Scheme:
    return rule.Scheme(kind=ld.kind, imports=tuple(i.template for i in ld.imports),
                       version_regex=ld.version_regex, separator=ld.separator,
                       member=ld.member, note=ld.note)


def _check(name: str, d: rule.Decision, evidence: Iterable[str] = ()) -> Check:
    return Check(name, d.ok, d.detail, tuple(evidence))


def _torch_requirement(s: Sglang, t: TorchChoice) -> Check:
    return torch_requirement_check(torch_lines(s), t.version, s.artifact.filename)


def torch_requirement_check(lines: tuple[tuple[str, SpecifierSet], ...], version: Version,
                            filename: str) -> Check:
    """The ``torch requirement`` check of torch ``version`` against SGLang's torch requirement
    ``lines`` (:func:`moonpin.resolver.graph.torch_lines`; ``filename``: its wheel)."""
    if not lines:
        return Check("torch requirement", True, "SGLang declares no torch requirement")
    hit = [line for line, spec in lines if spec.contains(version.public, prereleases=True)]
    return Check(
        "torch requirement", bool(hit),
        f"torch {version} satisfies {hit[0]!r}" if hit else
        f"torch {version} does not satisfy SGLang's {', '.join(repr(x) for x, _ in lines)}",
        (f"{filename}: METADATA Requires-Dist",))


def _module(ev: Evaluation, s: Sglang, w: WheelView, python: str, arch: str,
            ) -> tuple[str, Loader | None] | None:
    """The module the import ends up with (SGLang's, or its ImportError fallback) and its
    loader; the ``module present`` check when the wheel has none (then None)."""
    req = _kept(w.memo, ("req",), s, lambda: _requirement(s))
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
    return None if d.ok is False else [_kept(w.memo, ("bf",), b, lambda: _build_facts(b))]


def _similar_builds(wheel: Wheel, mshort: str) -> list[str]:
    """The wheel's builds of the family ``mshort`` names (``pg_2_12_0`` -> every ``pg_*``)."""
    stem = mshort.split("_")[0] or mshort
    return sorted({b.member.rsplit("/", 1)[-1].split(".")[0] for b in wheel.builds
                   if b.member.rsplit("/", 1)[-1].startswith(stem)})


def _loaded_builds(ev: Evaluation, t: TorchChoice, w: WheelView, loader: Loader,
                   python: str, arch: str) -> list[rule.BuildFacts] | None:
    """The builds a prebuilt loader imports for this torch; None (and the failed or
    undecided ``build for torch`` check) when it finds none."""
    scheme = _kept(w.memo, ("scheme",), loader, lambda: _scheme(loader))
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
            same = _kept(w.memo, ("similar", mshort), w.wheel,
                         functools.partial(_similar_builds, w.wheel, mshort))
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
    return [_kept(w.memo, ("bf",), b, functools.partial(_build_facts, b)) for b in builds]


#: Local labels a loader's rule is tried on (:func:`loader_reads_label`).
_LABELS = ("cu126", "cu130", "cpu", "rocm6.4", "git1234abc")


def loader_reads_label(g: CompatGraph, dist: str, version: str, torches: Iterable[str]) -> bool:
    """Whether a prebuilt loader of the release imports another build for a torch with a
    local label (``2.13.0+cu126``) than for its public version, for one of ``torches``:
    its rule reads ``torch.__version__`` past the release, so a verdict made at one label
    does not stand for another (the resolved tables then hold none at a label)."""
    for w in g.wheels(dist, version):
        for loader in w.wheel.loaders:
            if loader.kind in ("unknown", "jit-compile"):  # as :func:`_builds` dispatches
                continue
            scheme = _scheme(loader)
            for imp in loader.imports:
                for t in torches:
                    plain = rule.loader_target(scheme, imp.template, t)
                    if any(rule.loader_target(scheme, imp.template, f"{t}+{label}") != plain
                           for label in _LABELS):
                        return True
    return False


def _builds(ev: Evaluation, t: TorchChoice, w: WheelView, module: str,
            loader: Loader | None, python: str, arch: str,
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


def evaluate(g: CompatGraph, s: Sglang, t: TorchChoice, w: WheelView | None,
             dist: str, version: str, python: str, arch: str) -> Evaluation:
    """Every check for one combination; ``w`` None means the release has no wheel for P/A.
    The KB supplies the facts, :mod:`moonpin.resolver.rule` decides."""
    ev = Evaluation(s.version, dist, version, t.text, python, arch,
                    wheel=w.wheel.artifact.filename if w else None)
    ev.checks.append(_kept(g.memo, ("treq", t), s, lambda: _torch_requirement(s, t)))
    ev.checks.append(_kept(g.memo, ("python", python), s, lambda: _check(
        "python", rule.python_requires(s.requires_python, python, f"sglang {s.version}",
                                       s.wheel_pythons),
        (f"{s.artifact.filename}: METADATA Requires-Python",))))
    stack_ok, why = g.stack_status(s, t.text, python, arch)
    if stack_ok is False:  # only where it breaks: its many holding cases say nothing new
        ev.checks.append(Check("sglang's extensions", False, why,
                               (f"{s.artifact.filename}: METADATA Requires-Dist",)))
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
    req = _kept(g.memo, ("req", module), s, lambda: _requirement(s, module))
    jit = loader is not None and loader.kind == "jit-compile"
    ev.checks.append(_check("names", rule.names(req, builds), s.pg.evidence))
    opt_missing = rule.optional_missing(req, builds)
    if opt_missing and ev.checks[-1].ok is True:
        ev.notes.append(f"the build lacks {', '.join(opt_missing)}, which sglang {s.version} "
                        "uses only behind an optional import (it runs without)")
    ev.checks.append(_check("backends", rule.backends(req, builds),
                            () if jit else (b.member for b in builds)))
    ev.checks.append(_check("CUDA major", rule.cuda_major(
        builds, _torch_facts(t), jit=jit, cuda_torch=jit and loader is not None
        and rule.needs_cuda_torch(loader.requires, loader.toolchain))))
    return ev


# ----------------------------------------------------------------------- queries


def _torches(g: CompatGraph, s: Sglang, torch: str | None) -> list[str]:
    if torch is not None:
        return [torch]
    return [v for v, _ in g.torch_for(s)]


def combos(g: CompatGraph, s: Sglang, dist: str, version: str, torch: str | None,
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


def _refused_torch(g: CompatGraph, s: Sglang, torch: str | None, dist: str, version: str,
                   python: str | None, arch: str | None) -> str | None:
    """The reason SGLang's torch requirement refuses ``torch`` for every combination of the
    release (the first check of each, so the reason an answer gives whichever combination
    it picks), or None: then the combinations are judged one by one. Also None when the
    release has no combination to judge (no wheel, and no python or platform given)."""
    if torch is None or s.pg.module is None:
        return None
    wheels = g.wheels(dist, version)
    if not ((python or any(w.pythons for w in wheels)) and (arch or any(w.arches for w in wheels))):
        return None
    key = ("torch given", torch)  # the requirement reads the version alone: any arch
    if key not in g.memo:
        g.memo[key] = resolve_torch(g, torch, arch or "x86_64")
    t = g.memo[key]
    c = _kept(g.memo, ("treq", t), s, lambda: _torch_requirement(s, t))
    return None if c.ok else f"{c.name}: {c.detail}"


def wheel_tags(filename: str) -> frozenset[tuple[str, str]]:
    """The (python tag, arch) pairs a wheel's file name covers (none for an sdist)."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    tags: set[tuple[str, str]] = set()
    try:
        for t in parse_wheel_filename(filename)[3]:
            tags |= {(t.interpreter, a) for a in ("x86_64", "aarch64") if a in t.platform}
    except InvalidWheelFilename:  # an sdist: no python or platform of its own
        pass
    return frozenset(tags)


def _shown(evs: list[Evaluation], tags: frozenset[tuple[str, str]]) -> Evaluation:
    """The combination ``explain`` prints: the best verdict; among equals, the python and
    platform of the SGLang wheel whose facts the checks cite (``tags``, :func:`wheel_tags`
    of it when the python or the platform is not given: its evidence then speaks of the
    combination shown), else x86_64 and the newest python."""
    order = {"compatible": 0, "unknown": 1, "incompatible": 2}

    def minor(p: str) -> int:
        digits = p.removeprefix("cp")
        return int(digits[1:]) if digits[1:].isdigit() else 0

    return min(evs, key=lambda e: (order[e.verdict], -e.score(),
                                   (e.python, e.arch) not in tags, e.arch != "x86_64",
                                   -minor(e.python)))


def _best(evs: Sequence[_Ev]) -> _Ev | None:
    if not evs:
        return None
    order = {"compatible": 0, "unknown": 1, "incompatible": 2}
    return min(evs, key=lambda e: (order[e.verdict], -e.score()))


def _covers(evs: Sequence[Evaluation | Judged]) -> tuple[Covered, ...]:
    out = [Covered(e.python, e.arch, e.torch, e.wheel, e.cuda)
           for e in evs if e.verdict == "compatible"]
    return tuple(sorted(out, key=lambda w: (w.torch, w.arch, w.python)))


class _Buckets:
    """The candidates of one ``which`` answer, filed as they are judged."""

    def __init__(self) -> None:
        self.compatible: list[Candidate] = []
        self.excluded: list[Candidate] = []
        self.unknown: list[Candidate] = []

    def place(self, entry: Candidate, evs: Sequence[Evaluation | Judged],
              best: Evaluation | Judged, *, notes: bool = False) -> None:
        """File one candidate by its best combination (``notes``: a compatible one carries
        the notes of its compatible combinations)."""
        if best.verdict == "compatible":
            said = tuple(sorted({n for e in evs if e.verdict == "compatible"
                                 for n in e.notes})) if notes else None
            self.compatible.append(entry._replace(wheels=_covers(evs), notes=said))
        else:
            why = entry._replace(reason=best.reasons[0] if best.reasons else "unknown")
            (self.unknown if best.verdict == "unknown" else self.excluded).append(why)

    def which(self, query: dict[str, Any], **rest: Any) -> Which:
        return Which(query, tuple(self.compatible), tuple(self.excluded),
                     tuple(self.unknown), **rest)


def _table(g: CompatGraph, sglang: str, torch: str | None) -> Any:
    """The resolved table of the graph's KB file that holds this question (see
    :mod:`moonpin.resolver.tables`), or None: then the question is resolved here."""
    if g.kb_path is None:
        return None
    from moonpin.resolver.tables import per_release

    key = ("table", sglang)
    if key not in g.memo:
        g.memo[key] = per_release.load(g.kb_path, sglang)
    table = g.memo[key]
    return table if table is not None and table.holds(sglang, torch) else None


def which_mooncake(g: CompatGraph, sglang: str, *, torch: str | None = None,
                   python: str | None = None, arch: str | None = None,
                   dist: str | None = None) -> Which:
    python, arch = normalize_python(python), normalize_arch(arch)
    torch = None if torch is None else torch_release(g, torch)
    if dist is None:
        # the release's table, when it holds the question, answers without the facts (the
        # path below would take that table too: the release is named as the KB names it)
        table = _table(g, sglang, torch)
        if table is not None:
            return Which.from_json(table.which_mooncake(sglang, python=python, arch=arch,
                                                        dist=None, torch=torch))
    s = get_sglang(g, sglang)
    dists = [str(canonical_name(dist))] if dist else g.dists()
    if dist and dists[0] not in g.dists():
        raise UsageError(f"unknown mooncake distribution {dist!r}",
                         hint="known: " + ", ".join(g.dists()))
    table = _table(g, s.version, torch)
    if table is not None:
        return Which.from_json(table.which_mooncake(s.version, python=python, arch=arch,
                                                    dist=dist and dists[0], torch=torch))
    out = _Buckets()
    notes: list[str] = []
    releases = sorted((k for k in g.mooncake if k[0] in dists), key=lambda k: (k[1], k[0]),
                      reverse=True)
    unread_keys = {(u.name, u.version) for u in g.kb.unread if u.kind == "mooncake"}
    for d, v in releases:
        if (d, str(v)) in unread_keys:
            continue  # listed below as unknown: never a verdict from what was half read
        refused = _refused_torch(g, s, torch, d, str(v), python, arch)
        if refused is not None:
            out.excluded.append(Candidate(str(v), f"{d}=={v}", dist=d, reason=refused))
            continue
        evs = combos(g, s, d, str(v), torch, python, arch)
        best = _best(evs)
        if best is None:
            continue
        if s.pg.module is None:
            notes = best.notes
        out.place(Candidate(str(v), f"{d}=={v}", dist=d), evs, best, notes=True)
    out.unknown += [Candidate(u.version, dist=u.name,
                              reason=f"not read in the last scrape: {u.reason}")
                    for u in g.kb.unread if u.kind == "mooncake" and u.name in dists]
    return out.which(
        {"sglang": s.version, "torch": torch or [t for t in _torches(g, s, None)],
         "python": python or "all", "arch": arch or "all", "dist": dist or "all",
         "module": s.pg.module, "names": list(s.pg.names), "backends": list(s.pg.backends)},
        notes=tuple(notes))


def which_sglang(g: CompatGraph, mooncake: str, *, torch: str | None = None,
                 python: str | None = None, arch: str | None = None) -> Which:
    python, arch = normalize_python(python), normalize_arch(arch)
    torch = None if torch is None else torch_release(g, torch)
    dist, version = parse_release(mooncake)
    fast = _sglang_tabled(g, dist, version, python, arch) if torch is None else None
    if fast is not None:
        return fast
    check_mooncake(g, dist, version)
    out = _Buckets()
    no_module = []
    for v in sorted(g.sglang, reverse=True):
        s = g.sglang[v]
        if s.pg.module is None:
            no_module.append(s.version)
            continue
        entry = Candidate(s.version, f"sglang=={s.version}", module=s.pg.module)
        refused = _refused_torch(g, s, torch, dist, version, python, arch)
        if refused is not None:
            out.excluded.append(entry._replace(reason=refused))
            continue
        evs = combos(g, s, dist, version, torch, python, arch)
        best = _best(evs)
        if best is None:
            continue
        out.place(entry, evs, best)
    out.unknown += [Candidate(u.version, reason=f"not read in the last scrape: {u.reason}")
                    for u in g.kb.unread if u.kind == "sglang"]
    return out.which({"mooncake": f"{dist}=={version}", "torch": torch or "each release's",
                      "python": python or "all", "arch": arch or "all"},
                     without_mooncake_pg=tuple(no_module))


def _sglang_tabled(g: CompatGraph, dist: str, version: str, python: str | None,
                   arch: str | None) -> Which | None:
    """:func:`which_sglang` without a torch, from the mooncake release's transposed table
    (:func:`moonpin.resolver.tables.per_release.load_fits`), without the facts; None when there is
    no such table (the release named otherwise than the KB names it included) or it does
    not hold this python or platform: then the facts answer."""
    if g.kb_path is None:
        return None
    from moonpin.resolver.tables import per_release

    table = per_release.load_fits(g.kb_path, dist, version)
    if table is None or not table.holds(python, arch):
        return None
    out = _Buckets()
    for sv, module, rows in table.sglang(python, arch):
        evs = [Judged(*r) for r in rows]
        best = _best(evs)
        if best is not None:
            out.place(Candidate(sv, f"sglang=={sv}", module=module), evs, best)
    out.unknown += [Candidate(v, reason=why) for v, why in table.unread]
    return out.which({"mooncake": f"{dist}=={version}", "torch": "each release's",
                      "python": python or "all", "arch": arch or "all"},
                     without_mooncake_pg=tuple(table.without_module))


def which_torch(g: CompatGraph, sglang: str, mooncake: str, *, python: str | None = None,
                arch: str | None = None, torch: str | None = None) -> Which:
    """The torch builds that fit: each release the KB holds, as the index publishes it
    (its CUDA major per arch); ``torch`` judges that build alone (``2.13.0+cu126``)."""
    python, arch = normalize_python(python), normalize_arch(arch)
    if torch is None:
        fast = _torch_tabled(g, sglang, *parse_release(mooncake), python, arch)
        if fast is not None:
            return fast
    s = get_sglang(g, sglang)
    dist, version = parse_release(mooncake)
    check_mooncake(g, dist, version)
    out = _Buckets()
    given = [] if torch is None else [Version(torch_release(g, torch))]
    for tv in given or reversed(g.torch_versions):
        if tv.is_prerelease and not given:
            continue
        refused = _refused_torch(g, s, str(tv), dist, version, python, arch)
        if refused is not None:
            out.excluded.append(Candidate(str(tv), torch_requirement(str(tv)), reason=refused))
            continue
        evs = combos(g, s, dist, version, str(tv), python, arch)
        best = _best(evs)
        if best is None:
            continue
        out.place(Candidate(str(tv), torch_requirement(str(tv))), evs, best)
    query = {"sglang": s.version, "mooncake": f"{dist}=={version}", "python": python or "all",
             "arch": arch or "all"}
    if given:
        query["torch"] = str(given[0])
    said = () if out.compatible else _other_cuda(
        out, s.version, dist, version, lambda: cuda_majors(g, dist, version))
    return out.which(query, notes=said)


def cuda_majors(g: CompatGraph, dist: str, version: str) -> list[int]:
    """The CUDA majors the builds of mooncake release ``dist`` ``version`` link, sorted."""
    return sorted({b.cuda_major for w in g.wheels(dist, version) for b in w.wheel.builds
                   if b.cuda_major is not None})


def _torch_tabled(g: CompatGraph, sglang: str, dist: str, version: str, python: str | None,
                  arch: str | None) -> Which | None:
    """:func:`which_torch` without a torch, from the mooncake release's transposed table and
    the torch facts' table (SGLang's torch requirement lines), without the facts; None when
    either is missing or stale, or does not hold the question (the releases named otherwise
    than the KB names them, a python or platform no wheel names, an SGLang release without
    a torch requirement or a process-group module): then the facts answer."""
    if g.kb_path is None:
        return None
    from moonpin.resolver.graph import parse_torch_lines
    from moonpin.resolver.tables import documents, per_release

    table = per_release.load_fits(g.kb_path, dist, version)
    torch_doc = documents.load_torch(g.kb_path) if table is not None else None
    if table is None or torch_doc is None or not table.holds(python, arch) \
            or not table.pythons or not table.arches:
        return None
    found = next(((module, rows) for sv, module, rows in table.sglang(python, arch)
                  if sv == sglang), None)
    said = next((x for x in torch_doc["sglang"] if x[0] == sglang), None)
    if found is None or said is None or len(said) != 4:
        return None
    lines = parse_torch_lines(said[2], said[3])
    if not lines:
        return None
    out = _Buckets()
    for tv in reversed(g.torch_releases()):
        if tv.is_prerelease:
            continue
        c = torch_requirement_check(lines, tv, said[1])
        if not c.ok:
            out.excluded.append(Candidate(str(tv), torch_requirement(str(tv)),
                                          reason=f"{c.name}: {c.detail}"))
            continue
        evs = [Judged(*r) for r in found[1] if r[0] == str(tv)]
        best = _best(evs)
        if best is not None:
            out.place(Candidate(str(tv), torch_requirement(str(tv))), evs, best)
    query = {"sglang": sglang, "mooncake": f"{dist}=={version}", "python": python or "all",
             "arch": arch or "all"}
    notes = () if out.compatible else _other_cuda(out, sglang, dist, version,
                                                  lambda: table.cuda_majors)
    return out.which(query, notes=notes)


def _other_cuda(out: _Buckets, sglang: str, dist: str, version: str,
                cudas: Callable[[], list[int]]) -> tuple[str, ...]:
    """Why nothing fits, when a torch SGLang admits is refused only for the CUDA major of
    the index's build: the KB lists no other build of it (PyTorch's own index publishes
    ``+cuXXX`` ones), so it is named, not proposed (``cudas()``: the CUDA majors the
    release's builds link)."""
    for c in out.excluded:
        reason = c.reason or ""
        if reason.startswith("CUDA major:") and "+" not in c.version:
            majors = cudas()
            cuda = "/".join(map(str, majors)) or "another"
            label = f"+cu{majors[0]}6" if majors == [12] else f"+cu{majors[0]}0" if majors else ""
            tip = (f"; e.g. `moonpin which torch --sglang {sglang} --mooncake {dist}=={version} "
                   f"--torch {c.version}{label}` judges one (whether PyTorch publishes that "
                   "label is not in the knowledge base)") if label else ""
            return (f"torch {c.version} as the index publishes it is refused for its CUDA "
                    f"major ({reason.split(': ', 1)[1].split(' (')[0]}); {dist}=={version} "
                    f"needs a CUDA {cuda} build of torch {c.version}, which the knowledge "
                    f"base does not list (PyTorch's own index publishes +cuXXX builds){tip}",)
    return ()


def explain(g: CompatGraph, sglang: str, mooncake: str, *, torch: str | None = None,
            python: str | None = None, arch: str | None = None) -> Explanation:
    python, arch = normalize_python(python), normalize_arch(arch)
    fast = _explained(g, sglang, mooncake, torch, python, arch)
    if fast is not None:
        return fast
    torch = None if torch is None else torch_release(g, torch)
    dist, version = parse_release(mooncake)
    unread = [u for u in g.kb.unread
              if (u.kind == "sglang" and u.version == sglang and g.find_sglang(sglang) is None)
              or (u.kind == "mooncake" and u.name == dist and u.version == version
                  and g.find_mooncake(dist, version) is None)]
    if unread:
        return Explanation(
            query={"sglang": sglang, "mooncake": f"{dist}=={version}", "torch": torch,
                   "python": python or "all", "arch": arch or "all"},
            verdict="unknown",
            reasons=tuple(f"{u.name} {u.version} was not read in the last scrape: {u.reason}"
                          for u in unread),
            notes=(), evaluated={"torch": torch, "python": python, "arch": arch,
                                 "wheel": None},
            checks=(), combinations=())
    s = get_sglang(g, sglang)
    check_mooncake(g, dist, version)
    evs = combos(g, s, dist, version, torch, python, arch)
    if not evs:  # the release publishes no wheel at all: nothing to install anywhere
        tt = (_torches(g, s, torch) or [str(v) for v in g.torch_versions[-1:]] or ["0"])[-1]
        evs = [evaluate(g, s, resolve_torch(g, tt, arch or "x86_64"), None, dist, version,
                        python or "any python", arch or "any platform")]
    tags = wheel_tags(s.artifact.filename) if python is None or arch is None else frozenset()
    return _explanation(s.version, f"{dist}=={version}",
                        torch or [t for t in _torches(g, s, None)], python, arch, evs, tags)


def _explanation(sglang: str, mooncake: str, torch: str | list[str], python: str | None,
                 arch: str | None, evs: list[Evaluation],
                 tags: frozenset[tuple[str, str]]) -> Explanation:
    """The answer of :func:`explain` from the evaluations of its combinations (``tags``:
    the SGLang wheel's, see :func:`_shown`)."""
    best = _shown(evs, tags)
    return Explanation(
        query={"sglang": sglang, "mooncake": mooncake, "torch": torch,
               "python": python or "all", "arch": arch or "all"},
        verdict=best.verdict,
        reasons=tuple(best.reasons),
        notes=tuple(best.notes),
        evaluated={"torch": best.torch, "python": best.python, "arch": best.arch,
                   "wheel": best.wheel},
        checks=tuple(c.as_dict() for c in best.checks),
        combinations=tuple({"torch": e.torch, "python": e.python, "arch": e.arch,
                            "verdict": e.verdict, "reason": (e.reasons or [""])[0]}
                           for e in evs))


def _explained(g: CompatGraph, sglang: str, mooncake: str, torch: str | None,
               python: str | None, arch: str | None) -> Explanation | None:
    """:func:`explain` from the release's explain table (written at ``kb resolve``, see
    :func:`moonpin.resolver.tables.per_release.load_explain`), without the KB's facts; None when the
    table does not hold the question as asked (a torch, python or platform it did not
    judge, a release spelled otherwise): then the facts answer."""
    if g.kb_path is None:
        return None
    from moonpin.resolver.tables import per_release

    key = ("explain-table", sglang)
    if key not in g.memo:
        g.memo[key] = per_release.load_explain(g.kb_path, sglang)
    table = g.memo[key]
    if table is None or (torch is not None and torch not in table.torch):
        return None
    dist, version = parse_release(mooncake)  # (a torch in the table is one the KB holds)
    found = table.evaluations(dist, version, torch, python, arch)
    if found is None:
        return None
    evs = [_evaluation(sglang, dist, version, *row) for row in found]
    tags = table.tags if python is None or arch is None else frozenset()
    return _explanation(sglang, f"{dist}=={version}", torch or list(table.torch), python,
                        arch, evs, tags)


def _evaluation(sglang: str, dist: str, version: str, torch: str, python: str, arch: str,
                wheel: str | None, checks: list[tuple[str, bool | None, str, tuple[str, ...]]],
                notes: list[str]) -> Evaluation:
    ev = Evaluation(sglang, dist, version, torch, python, arch, wheel=wheel)
    ev.checks = [Check(*c) for c in checks]
    ev.notes = list(notes)
    return ev


def parse_spec(text: str | None, what: str) -> SpecifierSet | None:
    """A PEP 440 specifier from the command line; a bare version means ``==``."""
    if text is None:
        return None
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    t = text.strip()
    if t and t[0].isdigit():
        t = "==" + t
    try:
        return SpecifierSet(t)
    except InvalidSpecifier as e:
        raise UsageError(f"{what} specifier {text!r} is not PEP 440",
                         hint="use e.g. '>=0.5.17' or '==0.3.13.post1'") from e



def _triples_from(rows: Iterable[tuple[str, str, str, str, str]], sglang: str,
                  torches: set[str], dists: set[str], m_spec: SpecifierSet | None,
                  versions: dict[tuple[str, str], Version], python: str | None,
                  arch: str | None) -> list[dict[str, str]]:
    """:func:`triples` of one SGLang release, from its resolved table's compatible ``rows``
    (``versions``: the graph's mooncake releases by their spelling)."""
    return [{"sglang": sglang, "torch": t, "dist": d, "mooncake": mv, "python": p, "arch": a}
            for d, mv, t, a, p in rows
            if d in dists and t in torches and (python is None or p == python)
            and (arch is None or a == arch)
            and (m_spec is None or ((d, mv) in versions
                                    and m_spec.contains(versions[(d, mv)], True)))]


def triples(g: CompatGraph, *, sglang: str | None = None, torch: str | None = None,
            mooncake: str | None = None, dist: str | None = None, python: str | None = None,
            arch: str | None = None) -> list[dict[str, str]]:
    python, arch = normalize_python(python), normalize_arch(arch)
    s_spec, t_spec, m_spec = (parse_spec(sglang, "sglang"), parse_spec(torch, "torch"),
                              parse_spec(mooncake, "mooncake"))
    dists = [str(canonical_name(dist))] if dist else g.dists()
    if dist and dists[0] not in g.dists():
        raise UsageError(f"unknown mooncake distribution {dist!r}",
                         hint="known: " + ", ".join(g.dists()))
    if s_spec is not None and not any(s_spec.contains(v, True) for v in g.sglang_versions()):
        # a release the KB does not hold is unknown, not "0 compatible"
        exact = [c.version for c in s_spec if c.operator in ("==", "===")]
        if len(exact) == 1 and "*" not in exact[0]:
            get_sglang(g, exact[0])  # raises naming the nearest known release
        known = sorted(g.sglang)
        raise UsageError(f"no sglang release in the knowledge base is in {sglang!r} (it "
                         f"holds {known[0]} .. {known[-1]})",
                         hint="`moonpin kb info` lists them; `moonpin scrape` refreshes")
    out = []
    # the mooncake releases by their spelling, for --mooncake (the facts: asked only then)
    versions = {(d, str(v)): v for d, v in g.mooncake} if m_spec is not None else {}
    # ``==2.13.0+cu126`` names a local build the KB's releases never equal: that build,
    # judged wherever SGLang admits its release (as ``--torch`` is in the other queries)
    local = [torch_release(g, c.version) for c in t_spec or ()
             if c.operator in ("==", "===") and "+" in c.version]
    for sv, spelt, source, module in g.sglang_heads():
        if module is None or (s_spec is not None and not s_spec.contains(sv, True)):
            continue
        # an index release's table holds the torches it admits (each release's own
        # ``_torches``), and each at a local label: the facts are read only for a release
        # no table answers
        table = None if source != "index" else _table(g, spelt, None)
        if table is not None and local:
            rows = table.at_label(spelt, local[0])
            if rows is not None:
                out += _triples_from(rows, spelt, {local[0]}, set(dists), m_spec, versions,
                                     python, arch)
                continue
        elif table is not None:
            torches = [t for t in table.sglang[spelt]["torch"]
                       if t_spec is None or t_spec.contains(Version(t), True)]
            out += _triples_from(table.compatible(spelt), spelt, set(torches), set(dists),
                                 m_spec, versions, python, arch)
            continue
        s = g.sglang[sv]
        torches = [t for t in _torches(g, s, None)
                   if t_spec is None or t_spec.contains(Version(t), True)]
        if local:
            torches = [t for t in local[:1] if any(
                Version(Version(t).public) == Version(r) for r in _torches(g, s, None))]
        for (d, mv) in sorted(g.mooncake, key=lambda k: (k[1], k[0]), reverse=True):
            if d not in dists or (m_spec is not None and not m_spec.contains(mv, True)):
                continue
            for t in torches:
                for e in combos(g, s, d, str(mv), t, python, arch):
                    if e.verdict == "compatible":
                        out.append({"sglang": s.version, "torch": t, "dist": d,
                                    "mooncake": str(mv), "python": e.python, "arch": e.arch})
    return out
