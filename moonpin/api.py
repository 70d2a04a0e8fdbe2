"""moonpin's public Python face: what the ``moonpin`` command does, as functions returning
typed values. ``import moonpin`` loads none of it (PEP 562); each name loads what it needs
when it is first used.

* :func:`check` -- will this environment's worker start? (``moonpin check``)
* :class:`Target` -- which environment :func:`check` reads.
* :func:`which` / :func:`explain` -- what the knowledge base says of a release or a set
  (``moonpin which``, ``moonpin explain``).
* :func:`judge_pins` -- a project's pins judged, with the updates that make them compatible
  (``moonpin pins``).

Errors: bad input raises :class:`moonpin.MoonpinError` (its ``hint`` is the line that fixes
it); :func:`check` never raises for what it finds in the environment: its :class:`Report`
says it (``exit_code`` 0 usable, 1 not usable, 2 could not check)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from moonpin.preflight.result import Report
    from moonpin.resolver.answers import Explanation, Which
    from moonpin.resolver.graph import CompatGraph
    from moonpin.resolver.pins.judging.judge import Judgement

__all__ = ["Target", "check", "explain", "judge_pins", "which"]


class Target:
    """The environment :func:`check` reads; make one with a constructor:

    * ``Target.current()`` -- what ``moonpin check`` reads with no option: an active
      virtualenv other than the one moonpin runs from, else this interpreter;
    * ``Target.python(path)`` -- that interpreter's environment (``--python``);
    * ``Target.site_packages(*folders)`` -- those folders (``--site-packages``);
    * ``Target.rootfs(folder)`` -- an unpacked image root, judged from outside (``--rootfs``);
    * ``Target.image(path, platform=None)`` -- an image file: an OCI layout or archive, a
      ``docker save`` tarball (``--image``, ``--platform``).

    A frozen value (compared, hashed and shown by its fields, as a frozen dataclass is),
    written out by hand: ``dataclasses`` costs every query ~5-8 ms of imports."""

    __slots__ = ("kind", "paths", "platform")
    __match_args__ = ("kind", "paths", "platform")

    kind: str
    paths: tuple[str, ...]
    platform: str | None

    def __init__(self, kind: str, paths: tuple[str, ...] = (),
                 platform: str | None = None) -> None:
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "paths", paths)
        object.__setattr__(self, "platform", platform)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: a Target is frozen")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: a Target is frozen")

    def _fields(self) -> tuple[str, tuple[str, ...], str | None]:
        return (self.kind, self.paths, self.platform)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._fields())

    def __reduce__(self) -> tuple[type[Target], tuple[str, tuple[str, ...], str | None]]:
        return (type(self), self._fields())

    def __repr__(self) -> str:
        return (f"{type(self).__qualname__}(kind={self.kind!r}, paths={self.paths!r}, "
                f"platform={self.platform!r})")

    @classmethod
    def current(cls) -> Target:
        return cls("current")

    @classmethod
    def python(cls, interpreter: str | os.PathLike[str]) -> Target:
        return cls("python", (os.fspath(interpreter),))

    @classmethod
    def site_packages(cls, *folders: str | os.PathLike[str]) -> Target:
        if not folders:
            from moonpin.kb.errors import UsageError

            raise UsageError("Target.site_packages needs at least one folder",
                             hint="e.g. Target.site_packages('/opt/venv/lib/python3.12/"
                                  "site-packages')")
        return cls("site-packages", tuple(os.fspath(f) for f in folders))

    @classmethod
    def rootfs(cls, folder: str | os.PathLike[str]) -> Target:
        return cls("rootfs", (os.fspath(folder),))

    @classmethod
    def image(cls, path: str | os.PathLike[str], platform: str | None = None) -> Target:
        return cls("image", (os.fspath(path),), platform)


def check(target: Target | None = None, launch_args: Sequence[str] = (), *,
          elastic_ep_backend: str | None = None, kb: str | os.PathLike[str] | None = None,
          strict: bool = False, deep: bool | None = None,
          deep_timeout: float = 120.0, gpu_capability: str | None = None) -> Report:
    """Judge ``target`` (default :meth:`Target.current`) for the worker launched with
    ``launch_args`` (its own arguments, e.g. ``["--elastic-ep-backend", "mooncake"]``) and
    return the :class:`~moonpin.preflight.result.Report`: ``usable``, ``exit_code``, one
    :class:`~moonpin.preflight.result.CheckResult` per check with its fix line, ``lines()`` as
    ``moonpin check`` prints them and ``to_json()``. ``deep`` runs the deep probe (the
    environment's own interpreter imports the extensions in a child; the default: for
    elastic EP, and never for ``rootfs``/``image``). ``gpu_capability`` (``"9.0"``,
    ``"none"``): the GPU the worker runs on, for a loader that picks its build by it
    (``--gpu-capability``; unset: every build such a loader may pick is judged)."""
    from moonpin.preflight.run import check_image, check_image_file

    t = target or Target.current()
    kb_path = os.fspath(kb) if kb is not None else None
    launch = list(launch_args)
    if t.kind == "image":
        return check_image_file(t.paths[0], t.platform, elastic_ep_backend=elastic_ep_backend,
                                launch_args=launch, kb_path=kb_path, strict=strict,
                                gpu=gpu_capability)
    return check_image(elastic_ep_backend=elastic_ep_backend, launch_args=launch,
                       site_packages=list(t.paths) if t.kind == "site-packages" else None,
                       python=t.paths[0] if t.kind == "python" else None,
                       rootfs=t.paths[0] if t.kind == "rootfs" else None,
                       kb_path=kb_path, strict=strict, deep=deep, deep_timeout=deep_timeout,
                       gpu=gpu_capability)


def which(what: str, *, sglang: str | None = None, mooncake: str | None = None,
          torch: str | None = None, python: str | None = None, arch: str | None = None,
          dist: str | None = None, kb: str | os.PathLike[str] | None = None) -> Which:
    """The releases of ``what`` (``mooncake``, ``sglang`` or ``torch``) that work with the
    others given, best first (``Which.recommended()``), with every excluded release and
    why. ``mooncake`` is ``DIST==VERSION``.

    ``what`` may also name a native extension the KB holds, by its project, distribution
    or import name (``nixl``, ``sglang-kernel``, ``sgl-deep-ep``, ``flashinfer-python``,
    ``nixl_ep``, ``sgl_kernel``, ``deep_ep``, ``flashinfer``): its releases with a build
    for ``torch`` (or for each torch the ``sglang`` release admits); ``dist`` narrows it
    to one distribution."""
    from moonpin.kb.errors import UsageError

    kb_file = _kb_file(kb)
    if what == "mooncake":
        if not sglang:
            raise UsageError("`which mooncake` needs --sglang VERSION",
                             hint="e.g. moonpin which mooncake --sglang 0.5.18")
        fast = _which_mooncake_fast(kb_file, sglang, torch, python, arch, dist)
        if fast is not None:
            return fast
    elif what == "sglang" and not mooncake:
        raise UsageError("`which sglang` needs --mooncake DIST==VERSION",
                         hint="e.g. moonpin which sglang --mooncake "
                              "mooncake-transfer-engine==0.3.13")
    elif what == "torch" and not (sglang and mooncake):
        raise UsageError("`which torch` needs --sglang VERSION and --mooncake DIST==VERSION",
                         hint="e.g. moonpin which torch --sglang 0.5.18 "
                              "--mooncake mooncake-transfer-engine==0.3.13")
    if what not in ("mooncake", "sglang", "torch"):
        from moonpin.resolver.tables.native import which_fast

        got = which_fast(kb_file, what, torch=torch, sglang=sglang, python=python, arch=arch,
                         dist=dist, as_imported=True)
        if got is not None:
            return got
    from moonpin.resolver import query

    g = _graph(kb_file)
    if what not in ("mooncake", "sglang", "torch"):
        from moonpin.resolver import native

        return native.which_native(g, what, torch=torch, sglang=sglang, python=python,
                                   arch=arch, dist=dist, as_imported=True)
    if what == "mooncake":
        assert sglang is not None
        return query.which_mooncake(g, sglang, torch=torch, python=python, arch=arch,
                                    dist=dist)
    if what == "sglang":
        assert mooncake is not None
        return query.which_sglang(g, mooncake, torch=torch, python=python, arch=arch)
    assert sglang is not None and mooncake is not None
    return query.which_torch(g, sglang, mooncake, python=python, arch=arch, torch=torch)


def _which_mooncake_fast(kb_file: str, sglang: str, torch: str | None, python: str | None,
                         arch: str | None, dist: str | None) -> Which | None:
    """The answer from the release's resolved table when it holds the question (without
    reading the KB's facts); None: the full resolver answers."""
    from moonpin.resolver.tables import per_release

    table = per_release.load(kb_file, sglang)
    if table is None or not table.holds(sglang, torch):
        return None
    from moonpin.resolver.inputs import canonical_name, normalize_arch, normalize_python

    name = None
    if dist:
        name = canonical_name(dist)
        if name not in {d for d, _ in table.releases}:
            return None  # let the full path say what is wrong with it
    from moonpin.resolver.answers import Which

    return Which.from_json(table.which_mooncake(
        sglang, python=normalize_python(python), arch=normalize_arch(arch), dist=name,
        torch=torch))


def explain(*releases: str, torch: str | None = None, python: str | None = None,
            arch: str | None = None, kb: str | os.PathLike[str] | None = None) -> Explanation:
    """Whether ``sglang==V`` and a mooncake ``DIST==V`` (and optionally ``torch==T``) work
    together, check by check with the evidence each rests on. Native extensions of the
    stack (``nixl-cu13==1.5.1``, ``sglang-kernel==0.4.10``...) add one check each: its
    build for that torch on the python and platform judged (then mooncake is optional)."""
    from moonpin.kb.errors import UsageError
    from moonpin.resolver.spelling import parse_release

    kb_file = _kb_file(kb)
    kinds = _kinds(kb_file)
    g = _graph(kb_file) if kinds is None else None
    sglang = mooncake = None
    extensions: list[tuple[str, str]] = []
    for item in releases:
        name, version = parse_release(item)
        if name == "sglang":
            sglang = version
        elif name == "torch":
            torch = version
        elif (name not in kinds[0] and name in kinds[1]) if kinds is not None else (
                g is not None and name not in g.dists() and _is_extension(g, name)):
            extensions.append((name, version))
        else:
            mooncake = f"{name}=={version}"
    if extensions:
        return _explain_stack(kb_file, g, sglang, mooncake, extensions, torch, python, arch)
    if sglang is None or mooncake is None:
        raise UsageError("explain needs sglang==V and a mooncake DIST==V or extension "
                         "releases (and optionally torch==T)",
                         hint="e.g. moonpin explain sglang==0.5.18 "
                              "mooncake-transfer-engine-cuda13==0.3.13")
    from moonpin.resolver import query

    return query.explain(g or _graph(kb_file), sglang, mooncake, torch=torch, python=python,
                         arch=arch)


def _kinds(kb_file: str) -> tuple[set[str], set[str]] | None:
    """The mooncake distributions and the native extensions' distributions the KB holds,
    from its names (no facts read); None without them (then the graph says)."""
    from moonpin.resolver.tables import documents

    found = documents.names(kb_file)
    if found is None:
        return None
    return set(found["dists"]), set(found["native"])


def _graph(kb_file: str) -> CompatGraph:
    """The KB file's graph; its stacks come from the file's resolved table, else (a KB
    without one) from the stack graph, made when first asked (importing it otherwise costs
    a query's start-up)."""
    from moonpin.resolver.graph import CompatGraph

    g = CompatGraph.from_path(kb_file)

    def stacks() -> object:
        from moonpin.resolver.stacks import Stacks

        return Stacks(g)

    g.stacks_from = stacks
    return g


def _is_extension(g: CompatGraph, name: str) -> bool:
    from moonpin.resolver import native

    return native.is_extension(g, name)


def _explain_stack(kb_file: str, g: CompatGraph | None, sglang: str | None,
                   mooncake: str | None, extensions: list[tuple[str, str]],
                   torch: str | None, python: str | None, arch: str | None) -> Explanation:
    """:func:`explain` of a stack with native extensions: the mooncake pair's checks (when
    a mooncake release is named) and one check per extension, on the same torch, python
    and platform; from the resolved tables where they hold the stack, else from the
    facts."""
    from moonpin.resolver import rule
    from moonpin.resolver.answers import Explanation
    from moonpin.resolver.tables.native import explain_fast

    base = None
    if mooncake is not None:
        if sglang is None:
            from moonpin.kb.errors import UsageError

            raise UsageError("explain of a mooncake release needs sglang==V",
                             hint=f"e.g. moonpin explain sglang==0.5.23 {mooncake}")
        from moonpin.resolver import query

        g = g or _graph(kb_file)
        base = query.explain(g, sglang, mooncake, torch=torch, python=python, arch=arch)
        ev = base.evaluated
        torch = ev["torch"] or torch
        python, arch = ev["python"] or python, ev["arch"] or arch
    got = explain_fast(kb_file, sglang, extensions, torch=torch, python=python, arch=arch)
    if got is None:
        from moonpin.resolver import native

        got = native.explain_stack(g or _graph(kb_file), sglang, extensions, torch=torch,
                                   python=python, arch=arch)
    checks = [c.as_dict() for c in got["checks"]]
    if base is not None:
        checks = [*base.checks, *(c for c in checks if c["name"] != "torch requirement")]
    oks = [c["ok"] for c in checks]
    bad = [c for c in checks if c["ok"] is False] or [c for c in checks if c["ok"] is None]
    query_ = dict(got["query"])
    if base is not None:
        query_["mooncake"] = base.query["mooncake"]
    return Explanation(
        query=query_, verdict=rule.verdict(oks),
        reasons=tuple(f"{c['name']}: {c['detail']}" for c in bad),
        notes=tuple([*(base.notes if base else ()), *got["notes"]]),
        evaluated={**got["evaluated"], "wheel": base.evaluated["wheel"] if base else None},
        checks=tuple(checks),
        combinations=tuple(base.combinations if base else got["combinations"]))


def judge_pins(files: Sequence[str | os.PathLike[str]], *, python: str | None = None,
               arch: str | None = None, strategy: str = "minimal", keep: str | None = None,
               patterns: Sequence[tuple[str, str]] = (),
               kb: str | os.PathLike[str] | None = None) -> Judgement:
    """The verdict on the set the project's files pin (requirements and constraints files,
    pyproject.toml, Dockerfiles, shell scripts; ``patterns``: ``(regex, package)`` pairs
    for other files) and the updates that make it compatible; what ``moonpin pins``
    prints. Without ``python``: each Python the project's ``requires-python`` admits where
    the pins' markers tell Pythons apart, else the lowest it admits. The find-links folders
    and indexes the files add are judged too (a CPU torch they can supply). The judgement's
    ``pins`` and ``pinned`` are the pins read and the set judged.

    Raises :class:`moonpin.MoonpinError`: ``PinsUnreadable`` (its ``details``, one line per
    file or line that could not be read) when anything could not be read, a usage error
    when nothing is pinned or an exact pin is not a version."""
    from moonpin.resolver.graph import CompatGraph
    from moonpin.resolver.pins import read as pins
    from moonpin.resolver.pins.writing import output

    names = [os.fspath(f) for f in files]
    found = pins.read_pins_or_fail(names, patterns)
    if not found:
        raise output.nothing_pinned(names)
    pinned = pins.pinned_set(found)
    pins.check_versions(pinned)
    python_from = None
    if python is None and (project := pins.project_python(names)) is not None:
        python, python_from = project
    allowed, allowed_from = pins.project_pythons(names)
    out = pins.judge(CompatGraph.from_path(_kb_file(kb)), pinned, python=python, arch=arch,
                     strategy=strategy, keep=keep, python_from=python_from,
                     sources=pins.index_sources(names), pythons=allowed,
                     pythons_from=allowed_from)
    return out._replace(pins=tuple(found), pinned=pinned)


def _kb_file(kb: str | os.PathLike[str] | None) -> str:
    from moonpin.kb.paths import default_kb_file

    return os.fspath(kb) if kb is not None else default_kb_file()

