"""The compatibility rule, once: plain facts in, (ok, words) out.

Two fact sources call it: the KB query (:mod:`moonpin.resolver.query`, facts from the scraped
knowledge base) and the image check (:mod:`moonpin.preflight.run`, facts read from a worker's
site-packages). Neither the facts nor the rule know where the facts came from.

Every decision returns a :class:`Decision`: ``ok`` True (fits), False (does not fit) or
None (the facts cannot decide), and ``detail``, the words both paths report.

This module imports nothing at import time (not even ``dataclasses`` or ``typing``,
which pull in ``re``, ``enum`` and ``inspect``): the worker-start check imports it, and
its warm start loads nothing past ``os`` and ``marshal``. ``re`` and ``packaging`` are
imported inside the one function that needs each. The fact classes are plain frozen
classes with ``__slots__``, compared and hashed by value.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Sequence
    from typing import TypeVar

    _F = TypeVar("_F", bound="_Frozen")

__all__ = [
    "INSTALL_CHECKS",
    "TORCH",
    "BuildFacts",
    "Decision",
    "NativeTarget",
    "Requirement",
    "Scheme",
    "TorchFacts",
    "backends",
    "choose_module",
    "collides",
    "cuda_major",
    "direct_build",
    "install_failure",
    "installable",
    "launch_imports",
    "loader_suffix",
    "loader_target",
    "loader_targets",
    "lock",
    "names",
    "native_build",
    "native_fits",
    "needs_cuda_torch",
    "no_build",
    "no_module",
    "not_loaded",
    "optional_missing",
    "pinned_by",
    "provides",
    "python_requires",
    "torch_admitted",
    "verdict",
    "wheel_covers",
]

#: The placeholder a scraped import template holds for the loader's computed suffix
#: (the same string as ``moonpin.readers.pyast.loader.TORCH``).
TORCH = "{torch}"


# ----------------------------------------------------------------------- facts


class _Frozen:
    """Immutable after ``__init__``; equal, hashed and shown by its slots' values."""

    __slots__: tuple[str, ...] = ()

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, k) for k in self.__slots__)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot delete {name!r}")

    def _set(self, **values: object) -> None:
        for k, v in values.items():
            object.__setattr__(self, k, v)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return False
        assert isinstance(other, _Frozen)
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._values()))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__)
        return f"{type(self).__name__}({args})"

    def replace(self: _F, **changes: object) -> _F:
        """A copy with ``changes`` (as :func:`dataclasses.replace`)."""
        values = {k: getattr(self, k) for k in self.__slots__}
        values.update(changes)
        return type(self)(**values)


class Requirement(_Frozen):
    """What one SGLang release needs of mooncake.

    ``module`` is the process-group module it imports (None: none at all);
    ``alternatives`` the modules it falls back to on ImportError, in order; ``names`` the
    names it imports unconditionally, ``optional_names`` those behind an optional import;
    ``backends`` the torch.distributed backend names it asks for. ``release`` names the
    release in the words (``"sglang 0.5.18"``).
    """

    __slots__ = ("alternatives", "backends", "module", "names", "optional_names", "release")
    module: str | None
    names: tuple[str, ...]
    backends: tuple[str, ...]
    optional_names: tuple[str, ...]
    alternatives: tuple[str, ...]
    release: str

    def __init__(self, module: str | None, names: Iterable[str] = (),
                 backends: Iterable[str] = (), optional_names: Iterable[str] = (),
                 alternatives: Iterable[str] = (), release: str = "sglang") -> None:
        self._set(module=module, names=tuple(names), backends=tuple(backends),
                  optional_names=tuple(optional_names), alternatives=tuple(alternatives),
                  release=release)


class BuildFacts(_Frozen):
    """What one extension module (a build) provides, as read from its bytes.

    ``names``/``backends``: the names and backend strings found in it. ``names_checked``:
    the names that were looked for (None: every name asked of it, as when the reader is
    given the requirement's names). ``complete``: every byte that holds names was read.
    ``cuda``: the CUDA major of the ``libcudart.so.N`` it links (None: none found);
    ``cuda_read``: its dynamic section (or version needs) was read, so None above means
    it links no CUDA runtime rather than "not known".
    """

    __slots__ = (
        "backends",
        "complete",
        "cuda",
        "cuda_read",
        "member",
        "names",
        "names_checked",
    )
    member: str
    names: frozenset[str]
    backends: frozenset[str]
    cuda: int | None
    names_checked: frozenset[str] | None
    complete: bool
    cuda_read: bool

    def __init__(self, member: str, names: Iterable[str] = (), backends: Iterable[str] = (),
                 cuda: int | None = None, names_checked: Iterable[str] | None = None,
                 complete: bool = True, cuda_read: bool = True) -> None:
        self._set(member=member, names=frozenset(names), backends=frozenset(backends),
                  cuda=cuda,
                  names_checked=None if names_checked is None else frozenset(names_checked),
                  complete=complete, cuda_read=cuda_read)


class TorchFacts(_Frozen):
    """The torch the question is about: ``version`` as ``torch.__version__`` says it
    (``2.13.0+cu130``); ``cuda`` its CUDA major (None: a CPU or ROCm build);
    ``cuda_known`` False when nothing says which; ``cuda_why`` where that came from."""

    __slots__ = ("cuda", "cuda_known", "cuda_why", "version")
    version: str
    cuda: int | None
    cuda_known: bool
    cuda_why: str

    def __init__(self, version: str, cuda: int | None, cuda_known: bool = True,
                 cuda_why: str = "") -> None:
        self._set(version=version, cuda=cuda, cuda_known=cuda_known, cuda_why=cuda_why)


class Scheme(_Frozen):
    """How a mooncake loader module (``mooncake/pg.py``) picks its build.

    ``kind``: ``prebuilt`` (imports each template, :data:`TORCH` replaced by the suffix
    it computes from ``torch.__version__``), ``jit-compile`` (compiles at first import)
    or ``unknown``. The suffix is ``re.match(version_regex, torch.__version__).group()``
    (the whole version when ``version_regex`` is None) with ``.`` replaced by
    ``separator`` (None: the loader computes none).
    """

    __slots__ = ("imports", "kind", "member", "note", "separator", "version_regex")
    kind: str
    imports: tuple[str, ...]
    version_regex: str | None
    separator: str | None
    member: str
    note: str | None

    def __init__(self, kind: str, imports: Iterable[str] = (), version_regex: str | None = None,
                 separator: str | None = None, member: str = "mooncake/pg.py",
                 note: str | None = None) -> None:
        self._set(kind=kind, imports=tuple(imports), version_regex=version_regex,
                  separator=separator, member=member, note=note)


class NativeTarget(_Frozen):
    """One compiled build of a native extension (nixl's ``nixl_ep_cpp_torch214``,
    sgl_kernel's ``sm90/common_ops``) and the torch it targets: ``torch`` a PEP 440
    specifier (``==2.14.*`` from its name through the loader's own rule, ``==2.14.1`` from
    the wheel's exact pin; None: nothing says which), ``torch_from`` which of the two."""

    __slots__ = ("member", "torch", "torch_from")
    member: str
    torch: str | None
    torch_from: str | None

    def __init__(self, member: str, torch: str | None = None,
                 torch_from: str | None = None) -> None:
        self._set(member=member, torch=torch, torch_from=torch_from)


class Decision(_Frozen):
    """One decision: ``ok`` True / False / None (cannot decide) and its words."""

    __slots__ = ("detail", "ok")
    ok: bool | None
    detail: str

    def __init__(self, ok: bool | None, detail: str) -> None:
        self._set(ok=ok, detail=detail)


# ----------------------------------------------------------------------- module


def choose_module(req: Requirement, shipped: Collection[str]) -> str | None:
    """The module the import system ends up with: SGLang's own, else the first of its
    ImportError fallbacks that ``shipped`` (the modules the package provides) holds."""
    for m in (req.module, *req.alternatives):
        if m is not None and m in shipped:
            return m
    return None


def no_module(req: Requirement, where: str, have: Iterable[str]) -> Decision:
    """The ``module present`` failure: ``where`` (a wheel, an install) lacks the module."""
    listed = ", ".join(have) or "no extension modules"
    return Decision(False, f"{req.release} imports {req.module}; {where} has no "
                           f"{req.module} (it has: {listed})")


# ----------------------------------------------------------------------- build for torch


def loader_suffix(scheme: Scheme, torch_version: str, separator: str | None = None,
                  ) -> str | None:
    """The suffix the loader computes from ``torch.__version__`` (``2_13_0`` for
    ``2.13.0+cu130``); None when it computes none, or its pattern does not compile or
    match (``re.match(...).group()`` then raises at import). ``separator`` overrides the
    scheme's (``.`` gives the version the loader's error message names)."""
    sep = scheme.separator if separator is None else separator
    if sep is None:
        return None
    base = torch_version
    if scheme.version_regex is not None:
        import re

        try:
            m = re.match(scheme.version_regex, torch_version)
        except (re.error, RecursionError):
            return None
        if m is None:
            return None
        base = m.group()
    return base.replace(".", sep)


def loader_target(scheme: Scheme, template: str, torch_version: str) -> str | None:
    """The module one import template names for this torch (``mooncake.pg_{torch}`` ->
    ``mooncake.pg_2_13_0``); None when the loader cannot compute its suffix."""
    if TORCH not in template:
        return template
    suffix = loader_suffix(scheme, torch_version)
    return None if suffix is None else template.replace(TORCH, suffix)


def loader_targets(scheme: Scheme, torch_version: str) -> tuple[tuple[str, ...] | None, str]:
    """The modules a prebuilt loader imports for this torch, in order, and ``""``; or
    None and the words saying why they cannot be computed."""
    out = []
    for template in scheme.imports:
        target = loader_target(scheme, template, torch_version)
        if target is None:
            return None, (f"cannot compute {template} for torch {torch_version} with the "
                          "loader's rule")
        out.append(target)
    return tuple(out), ""


def no_build(loader: str, target: str, torch_version: str, where: str,
             others: Sequence[str] = (), context: str = "") -> Decision:
    """The ``build for torch`` failure: the loader imports ``target``, ``where`` has no
    such build (``context``: for which python/platform; ``others``: similar builds)."""
    msg = (f"{loader} imports {target} for torch {torch_version}; {where} has no such "
           f"build{context}")
    if others:
        msg += f" (it has {', '.join(others)})"
    return Decision(False, msg)


def direct_build(member: str, built_for: str | None, built_from: str | None,
                 torch_version: str) -> Decision:
    """A loader-less extension (0.3.7's ``ep.so``) fits the torch release it was built
    for (the local label does not count: ``2.8.0+cu128`` is 2.8.0)."""
    if built_for is None:
        return Decision(None, f"{member} names no torch release it was built for")
    from packaging.version import InvalidVersion, Version

    try:
        public = Version(torch_version).public
        ok = Version(built_for) == Version(public)
    except InvalidVersion:
        return Decision(None, f"{member} was built for torch {built_for}; "
                              f"{torch_version!r} is not a PEP 440 version")
    return Decision(ok, f"{member} was built for torch {built_for} ({built_from})"
                        + ("" if ok else f", not {public}"))


# ----------------------------------------------------------------------- names, backends


def _provided(builds: Sequence[BuildFacts]) -> tuple[set[str], bool]:
    names: set[str] = set()
    for b in builds:
        names |= b.names
    return names, all(b.complete for b in builds)


def names(req: Requirement, builds: Sequence[BuildFacts]) -> Decision:
    """Every name SGLang imports is in the builds; None when a missing one was never
    looked for, or the bytes that would hold it were not read."""
    have, complete = _provided(builds)
    missing = [n for n in req.names if n not in have]

    def checked(n: str) -> bool:
        return complete and any(b.names_checked is None or n in b.names_checked
                                for b in builds)

    if missing and not any(checked(n) for n in missing):
        return Decision(None, f"not known whether {', '.join(missing)} exist: those bytes "
                              "were not read")
    if not missing:
        return Decision(True, f"provides {', '.join(req.names) or 'every name imported'}")
    return Decision(False, f"{req.release} imports {', '.join(missing)} from {req.module}; "
                           f"the build does not export "
                           f"{'it' if len(missing) == 1 else 'them'}")


def optional_missing(req: Requirement, builds: Sequence[BuildFacts]) -> tuple[str, ...]:
    """Names SGLang imports only behind an optional import that the builds lack (it runs
    without them); only names that were looked for."""
    have, _ = _provided(builds)
    return tuple(n for n in req.optional_names if n not in have and any(
        b.names_checked is None or n in b.names_checked for b in builds))


def backends(req: Requirement, builds: Sequence[BuildFacts]) -> Decision:
    """The builds register every backend SGLang asks torch.distributed for."""
    registered: set[str] = set()
    for b in builds:
        registered |= b.backends
    lacking = [b for b in req.backends if b not in registered]
    if not lacking:
        return Decision(True, f"registers {', '.join(req.backends)}")
    complete = all(b.complete for b in builds)
    return Decision(False if complete else None,
                    f"does not register {', '.join(lacking)} (registers "
                    f"{', '.join(sorted(registered)) or 'none'})")


# ----------------------------------------------------------------------- CUDA


def needs_cuda_torch(requires: Collection[str], toolchain: Collection[str] = ()) -> bool:
    """A compiling loader that refuses a torch without CUDA: its ``requires`` (read from it
    with ``ast``) say ``cuda-torch``; for a KB read before those were recorded, its
    toolchain names ``CUDA_HOME`` (which ``torch.utils.cpp_extension`` sets to None for a
    torch built without CUDA)."""
    return "cuda-torch" in requires or (not requires and any("CUDA_HOME" in t
                                                             for t in toolchain))


def cuda_major(builds: Sequence[BuildFacts], torch: TorchFacts, *, jit: bool = False,
               cuda_torch: bool = False) -> Decision:
    """The CUDA runtime the builds link is the one torch brings (``jit``: the build is
    compiled at import against the installed torch, so it always is; ``cuda_torch``: and
    the compiling loader refuses a torch without CUDA, see :func:`needs_cuda_torch`)."""
    if jit and cuda_torch and torch.cuda is None:
        if not torch.cuda_known:
            return Decision(None, f"compiled at import against a CUDA torch; {torch.cuda_why}")
        from moonpin.kb.distributions import torch_requirement

        public = torch.version.partition("+")[0]
        return Decision(False, f"compiled at first import against a CUDA torch (the loader "
                               f"refuses when torch.utils.cpp_extension.CUDA_HOME is None, as "
                               f"for every CPU torch, and links c10_cuda and torch_cuda); torch "
                               f"{torch.version} is a CPU build ({torch.cuda_why}); install the "
                               f"index's CUDA build: pip install --force-reinstall "
                               f"'{torch_requirement(public)}'")
    if jit:
        return Decision(True, "built at import against the installed torch's CUDA")
    majors = sorted({b.cuda for b in builds if b.cuda is not None})
    if not majors:
        if builds and all(b.cuda_read for b in builds):
            return Decision(None, "the builds link no CUDA runtime (libcudart)")
        return Decision(None, "the build's CUDA runtime is not known (its dynamic section "
                              "was not read)")
    linked = "/".join(map(str, majors))
    if not torch.cuda_known:
        return Decision(None, f"build links CUDA {linked}; {torch.cuda_why}")
    if torch.cuda is None:
        return Decision(False, f"build links libcudart.so.{majors[0]}; torch {torch.version} "
                               f"is a CPU build ({torch.cuda_why})")
    return Decision(majors == [torch.cuda],
                    f"build links CUDA {linked}, torch {torch.version} is CUDA {torch.cuda} "
                    f"({torch.cuda_why})")


# ----------------------------------------------------------------------- python


def python_requires(requires: str | None, python: str, release: str,
                    wheel_pythons: Collection[str] | None = None) -> Decision:
    """The release installs on CPython ``python`` (``cp312``, ``cp313t``, ``3.12``): its
    ``Requires-Python`` admits it and its files include one for that interpreter
    (``wheel_pythons``, None: any); pip and uv install it nowhere else ("requires a
    different Python", "no wheels with a matching Python implementation tag"). None when
    the specifier does not parse, or admits only some patch releases of that minor."""
    minor = python.removeprefix("cp").removeprefix("py").rstrip("t").replace(".", "")
    if not minor.isdigit() or len(minor) < 2:
        return Decision(None, f"{python!r} is not a CPython version")
    said = f"3.{minor[1:]}"
    d = _requires_python(requires, said, release)
    if d.ok is not False and wheel_pythons is not None and f"cp{minor}" not in wheel_pythons:
        return Decision(False, f"{release} publishes wheels for {', '.join(wheel_pythons)} "
                               f"only (no sdist): pip and uv find none for python {said}")
    return d


def _requires_python(requires: str | None, said: str, release: str) -> Decision:
    if not requires:
        return Decision(True, f"{release} declares no requires-python")
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        spec = SpecifierSet(requires)
    except InvalidSpecifier:
        return Decision(None, f"{release}'s requires-python {requires!r} does not parse")
    first, last = spec.contains(f"{said}.0", True), spec.contains(f"{said}.99", True)
    if first and last:
        return Decision(True, f"python {said} satisfies {release}'s requires-python "
                              f"{requires!r}")
    if first or last:
        return Decision(None, f"{release}'s requires-python {requires!r} admits only some "
                              f"python {said} releases")
    return Decision(False, f"{release} requires python {requires!r}; python {said} is not "
                           "admitted (pip and uv will not install it there)")


# ----------------------------------------------------------------------- native extensions


def _public(torch_version: str) -> str | None:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(torch_version).public
    except InvalidVersion:
        return None


def installable(release: str, unmet: Sequence[tuple[str, str]]) -> Decision:
    """The release can be installed: each ``(requirement, why)`` is a Requires-Dist line no
    release on the index meets (the ``nixl`` 1.5.2 meta release pins backends the index
    lacks)."""
    if not unmet:
        return Decision(True, f"{release}: every requirement is on the index")
    return Decision(False, f"{release} requires " + "; ".join(
        f"{req} ({why})" for req, why in unmet))


def provides(where: str, installs: Collection[str], wanted: Collection[str]) -> Decision:
    """``where`` installs one of the packages the extension is imported as (``wanted``: the
    packages its loader rules load, over the project's releases; empty: any will do)."""
    got = sorted(set(installs) & set(wanted))
    if got or not wanted:
        return Decision(True, f"{where} installs {', '.join(got or sorted(installs))}")
    return Decision(False, f"{where} installs no {'/'.join(sorted(wanted))} (it installs "
                           f"{', '.join(sorted(installs)) or 'no package'})")


def pinned_by(release: str, dist: str, version: str,
              lines: Sequence[tuple[str, str | None]]) -> Decision:
    """``dist`` ``version`` satisfies what ``release`` (an SGLang release) requires of it:
    its Requires-Dist lines naming ``dist`` that apply (``(line, specifier)``; a specifier
    None does not parse). None of them: it requires nothing of ``dist``."""
    if not lines:
        return Decision(True, f"{release} requires nothing of {dist}")
    public = _public(version)
    if public is None:
        return Decision(None, f"{dist} {version!r} is not a PEP 440 version")
    unread = [line for line, spec in lines if spec is None]
    bad = [line for line, spec in lines if spec is not None and not _contains(spec, public)]
    if bad:
        return Decision(False, f"{release} requires {', '.join(repr(x) for x in bad)}; "
                               f"pip will not install {dist} {version} beside it")
    if unread:
        return Decision(None, f"{release}'s {', '.join(repr(x) for x in unread)} does not "
                              "parse")
    return Decision(True, f"{dist} {version} satisfies {release}'s "
                          + ", ".join(repr(line) for line, _ in lines))


def collides(one: str, one_installs: Collection[str], other: str,
             other_installs: Collection[str]) -> Decision:
    """Two releases of different distributions can share one environment only when their
    wheels install no common top-level package (``one_installs``/``other_installs``, as
    each wheel's files name them). pip installs the second over the first's files without
    a word (no error, nothing from ``pip check``): the package then holds whichever files
    came last, and uninstalling either removes the files both listed in their RECORD."""
    both = sorted(set(one_installs) & set(other_installs))
    if not both:
        return Decision(True, f"{one} and {other} install no common package")
    return Decision(False, f"{one} and {other} both install {', '.join(p + '/' for p in both)}:"
                           " pip installs the second over the first without a word, and "
                           f"`import {both[0]}` runs whichever was installed last")


def not_loaded(release: str, torch_version: str,
               required_by: Sequence[tuple[str, str | None]], imported: bool = False,
               ) -> Decision | None:
    """Whether a release a stack installs is loaded at all: ``required_by`` holds, for each
    other release of the stack that requires it exactly, ``(that release, the release its
    loader loads its build from at this torch)`` (None: it loads no other's build). When
    each of them loads another release's build in its place (a meta distribution
    requiring one backend per CUDA major and importing the one torch's CUDA picks) and
    nothing else imports it (``imported``: SGLang imports a package it installs), pip
    installs it but no import runs its code: its builds are not judged, only what pip
    does with it (:data:`INSTALL_CHECKS`). None: it is judged as any other release."""
    if imported or not required_by or any(x is None or x == release
                                          for _, x in required_by):
        return None
    by, instead = required_by[0]
    return Decision(True, f"{release} is installed ({by} requires it) but not loaded: "
                          f"{by}'s loader loads {instead} with torch {torch_version}; "
                          f"{release}'s builds are never imported")


def launch_imports(release: str, where: str, installs: Collection[str],
                   needed: Sequence[tuple[str, str]]) -> Decision:
    """``where`` installs each package ``release`` imports for a launch choice (``needed``:
    ``(package, why)``, why as ``--moe-a2a-backend nixl: <member>:<line>``)."""
    lacking = [(p, why) for p, why in needed if p not in installs]
    if not lacking:
        return Decision(True, f"{where} installs {', '.join(sorted({p for p, _ in needed}))} "
                              f"that {release} imports")
    return Decision(False, f"{release} imports {lacking[0][0]} ({lacking[0][1]}); {where} "
                           f"installs no {lacking[0][0]} (it installs "
                           f"{', '.join(sorted(installs)) or 'no package'})")


def torch_admitted(release: str, lines: Sequence[tuple[str, str | None]],
                   torch_version: str) -> Decision:
    """``torch_version`` satisfies one of the release's torch Requires-Dist lines
    (``(line, specifier)``; a specifier None does not parse). ``torch`` unpinned admits
    any torch: the very gap a build per torch release falls into."""
    if not lines:
        return Decision(True, f"{release} declares no torch requirement")
    public = _public(torch_version)
    if public is None:
        return Decision(None, f"{torch_version!r} is not a PEP 440 version")
    for line, spec in lines:
        if spec is not None and _contains(spec, public):
            return Decision(True, f"torch {torch_version} satisfies {release}'s {line!r}")
    return Decision(False, f"torch {torch_version} does not satisfy {release}'s "
                           + ", ".join(repr(line) for line, _ in lines))


#: (specifier, version) -> whether it contains it: a query asks the same few pairs of
#: hundreds of builds (packaging builds a specifier's ranges anew each time, most of the
#: time of a ``which``). Bounded: cleared when full.
_CONTAINS: dict[tuple[str, str], bool | None] = {}


def _contains(spec: str, version: str) -> bool | None:
    """``version`` (a public PEP 440 version) is in ``spec``; None when ``spec`` does not
    parse."""
    key = (spec, version)
    if key in _CONTAINS:
        return _CONTAINS[key]
    exact = spec.strip()[2:].strip() if spec.strip().startswith("==") else ""
    if exact and not exact.startswith("=") and not any(c in exact for c in ",*<>!~ "):
        # one exact pin (most SGLang and wheel pins): version equality, as the specifier
        # decides it, without importing packaging.specifiers (a query's start-up)
        from packaging.version import InvalidVersion, Version

        try:
            have = Version(version)
            # PEP 440: a pin without a local label ignores the candidate's
            fits: bool | None = Version(exact) == (have if "+" in exact
                                                   else Version(have.public))
        except InvalidVersion:
            fits = None
    else:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        try:
            fits = SpecifierSet(spec).contains(version, prereleases=True)
        except InvalidSpecifier:
            fits = None
    if len(_CONTAINS) >= 4096:
        _CONTAINS.clear()
    _CONTAINS[key] = fits
    return fits


def _tag_minor(tag: str) -> int:
    try:
        return int(tag.removeprefix("cp3").rstrip("t") or -1)
    except ValueError:
        return -1


#: (Requires-Python, python tag) -> whether it admits it (a query asks the same few pairs of
#: hundreds of wheels). Bounded: cleared when full.
_ADMITS: dict[tuple[str, str], bool] = {}


def _admits_python(requires_python: str | None, python: str) -> bool:
    """The wheel's Requires-Python admits ``python`` (one that does not parse: any)."""
    if not requires_python:
        return True
    key = (requires_python, python)
    hit = _ADMITS.get(key)
    if hit is None:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        try:
            hit = SpecifierSet(requires_python).contains(f"3.{_tag_minor(python)}", True)
        except InvalidSpecifier:
            hit = True
        if len(_ADMITS) >= 4096:
            _ADMITS.clear()
        _ADMITS[key] = hit
    return hit


def wheel_covers(python_tags: Collection[str], abi_tags: Collection[str],
                 platform_tags: Collection[str], requires_python: str | None, python: str,
                 arch: str) -> bool:
    """pip installs a wheel with these tags on CPython ``python`` (``cp312``) and ``arch``:
    an ``abi3`` wheel on its python and every later one, a ``py3`` wheel on any, another
    on its own tag, each where its Requires-Python admits it; on a platform tag of that
    architecture, or ``any``."""
    if "abi3" in abi_tags:
        base = next((t for t in python_tags if t.startswith("cp")), None)
        fits = (base is not None and _tag_minor(python) >= _tag_minor(base)
                and _admits_python(requires_python, python))
    elif any(t in ("py3", "py2.py3") for t in python_tags):
        fits = _admits_python(requires_python, python)
    else:
        fits = python in python_tags
    return fits and any(p == "any" or p.endswith(arch) for p in platform_tags)


#: The checks pip itself makes when it installs a release beside SGLang: a stack failing
#: one cannot be installed. The others (a build for torch, its CUDA runtime) fail only when
#: the extension is imported, which depends on the launch line (deep_ep: ``--moe-a2a-backend
#: deepep``), so they are ``which``/``explain``/the check's to say, not a stack's.
INSTALL_CHECKS = frozenset({"installable", "sglang's requirement",
                            "wheel for python/platform", "torch requirement"})


def install_failure(checks: Iterable[tuple[str, bool | None, str]]) -> str | None:
    """The first of ``checks`` (``(name, ok, detail)``, a release's judgement beside a
    torch) that pip itself fails installing it (:data:`INSTALL_CHECKS`), as ``name:
    detail``; None when pip installs it (a source archive only: pip builds it)."""
    for name, ok, detail in checks:
        if ok is False and name in INSTALL_CHECKS and "only a source archive" not in detail:
            return f"{name}: {detail}"
    return None


def native_fits(target: NativeTarget, torch_version: str) -> bool | None:
    """The build targets this torch release (the local label does not count); None when
    nothing says which torch it targets."""
    if target.torch is None:
        return None
    public = _public(torch_version)
    return None if public is None else _contains(target.torch, public)


def lock(package: str, version: str, other: str, other_version: str, condition: str | None,
         effect: str | None, disabled_by: str | None = None) -> Decision:
    """A version lock a package's import checks (flashinfer's ``flashinfer-cubin`` exactly
    its own version, ``flashinfer-jit-cache`` the version or it plus ``+<label>``):
    a mismatch fails the import when its ``effect`` is ``raise``, and is ignored (with a
    warning) when ``ignore``."""
    from packaging.version import InvalidVersion, Version

    try:
        same = Version(other_version) == Version(version)
        local = Version(other_version).public == Version(version).public and bool(
            Version(other_version).local)
    except InvalidVersion:
        return Decision(None, f"{other} {other_version!r} is not a PEP 440 version")
    ok = same or (condition == "exact-or-local" and local)
    off = f" ({disabled_by} turns the check off)" if disabled_by else ""
    if ok:
        return Decision(True, f"{package} {version} accepts {other} {other_version}")
    if effect == "ignore":
        return Decision(True, f"{package} {version} ignores {other} {other_version} with a "
                              f"warning (it wants {version})")
    return Decision(False, f"{package} {version} refuses {other} {other_version} at import "
                           f"(it wants {version}){off}")


def native_build(package: str, targets: Sequence[NativeTarget], torch_version: str,
                 where: str) -> Decision:
    """``package``'s loader finds a build for this torch among ``targets`` (the builds
    ``where`` ships for the python and platform asked). No build at all: the package is
    pure Python, loadable with any torch."""
    if not targets:
        return Decision(True, f"{where} ships no compiled build of {package}: any torch")
    fits = [t for t in targets if native_fits(t, torch_version)]
    if fits:
        return Decision(True, f"{package} loads {', '.join(t.member for t in fits)} "
                              f"(built for torch {fits[0].torch}, from its "
                              f"{fits[0].torch_from or 'facts'})")
    known = sorted({t.torch for t in targets if t.torch is not None})
    if not known:
        return Decision(None, f"{where}: nothing says which torch {package}'s builds "
                              f"({', '.join(t.member for t in targets)}) were built for")
    return Decision(False, f"{package} has no build for torch {torch_version} in {where} "
                           f"(it has builds for torch {', '.join(known)})")


# ----------------------------------------------------------------------- verdict


def verdict(oks: Iterable[bool | None]) -> str:
    """``incompatible`` when a check failed, else ``unknown`` when one could not decide,
    else ``compatible``."""
    seen = set(oks)
    if False in seen:
        return "incompatible"
    if None in seen:
        return "unknown"
    return "compatible"
