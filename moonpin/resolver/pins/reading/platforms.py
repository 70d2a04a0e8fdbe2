"""The platform a Dockerfile stage is built for (``FROM --platform=linux/arm64 …``), and the
architectures a project's pins are judged on because of it.

A stage's ``--platform`` is the architecture its pins are installed on: they are judged and
updated for it, as a requirement's marker limits it to where it holds. The value is read as
Docker reads it: ``os/arch[/variant]`` (``linux/arm64/v8`` is aarch64, ``linux/amd64`` is
x86_64), a ``$VAR``/``${VAR}`` (``${VAR:-default}``) from the ``ARG`` defaults before the
first ``FROM``; BuildKit's automatic ``$BUILDPLATFORM``/``$TARGETPLATFORM`` (and their
``OS``/``ARCH``/``VARIANT`` parts) are set by the build, so such a stage is judged on every
architecture, and the verdict says why. ``FROM stage`` keeps that stage's platform. A stage
without ``--platform`` is built for the target platform (any). Pins outside any stage (a
requirements file the Dockerfile does not install) apply on every architecture the project
builds for: the architectures its stages declare, or both when none does.

An image tag that names an architecture (``lmsysorg/sglang:v0.5.18-cu130-arm64``, ``…-amd64``,
``…-aarch64``, ``…-x86_64``: one ``-``/``_``/``.``-separated part of the tag, in Docker's or
``uname -m``'s spelling) is a single-architecture image: the stage runs that architecture,
as a ``--platform`` says it. A ``--platform`` the build sets gives way to it; one that names
another architecture disagrees with it: said, and the stage is judged on the tag's (the
build either fails or runs the image's own architecture).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple, TypeVar

from moonpin.resolver.pins.reading.base import Pin, cut

__all__ = ["ARCHES", "Stage", "Stages", "applies", "arch_of", "disagreement", "judged_on",
           "marker_applies", "project_arches", "stage_arch", "stage_note", "tag_platform"]

_T = TypeVar("_T")

#: The architectures moonpin judges (the wheels the knowledge base holds are for these).
ARCHES = ("x86_64", "aarch64")

#: BuildKit's automatic platform arguments: their value is the build's, not the file's.
_AUTOMATIC = frozenset(f"{w}{p}" for w in ("BUILD", "TARGET")
                       for p in ("PLATFORM", "OS", "ARCH", "VARIANT"))

#: Docker's (GOARCH) architecture names, and the ``uname -m`` names the wheels use.
_DOCKER_ARCH = {"amd64": "x86_64", "x86_64": "x86_64", "x86-64": "x86_64",
                "arm64": "aarch64", "aarch64": "aarch64"}

#: The architectures a tag part names, as Docker's platform names them.
_TAG_ARCH = {"amd64": "amd64", "x86_64": "amd64", "x86-64": "amd64", "arm64": "arm64",
             "arm64v8": "arm64", "aarch64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x",
             "riscv64": "riscv64"}

# Patterns, compiled (and cached by :mod:`re`) when a shell file is first read, not at import:
#: ``FROM [--flag=value ...] image [AS name]`` (Docker takes a flag's value after ``=`` only)
_FROM = r"(?i)\s*FROM\s+((?:--\S+\s+)*)(\S+)(?:\s+AS\s+(\S+))?\s*$"
_FLAG = r"(?i)--platform=(\S+)"
_VAR = r"\$(?:\{(\w+)(?::?-([^}]*))?\}|(\w+))"
_GLOBAL_ARG = r"(?i)\s*ARG\s+(\w+)(?:=(\S*))?\s*$"
#: one architecture name as a part of a tag (``x86_64`` and ``x86-64`` hold a separator)
_TAG_PART = (r"(?i)(?:^|[-_.])(x86[-_]64|amd64|arm64v8|arm64|aarch64|ppc64le|s390x|riscv64)"
             r"(?=$|[-_.])")


class Stage(NamedTuple):
    """The platform of one stage as resolved (``""``: no ``--platform``, the target's), and
    where its ``FROM`` is (``Dockerfile:3``)."""

    platform: str
    at: str
    tag: str = ""


class Stages:
    """Follows a Dockerfile's ``FROM`` lines: :attr:`current` is the stage the lines seen
    so far are in (None before the first ``FROM``, and in a shell script)."""

    def __init__(self, shown: str) -> None:
        self.shown = shown
        self.current: Stage | None = None
        self.named: dict[str, Stage] = {}
        self.defaults: dict[str, str | None] = {}  # global ARGs (before the first FROM)

    def see(self, text: str, line: int) -> None:
        m = re.match(_FROM, text)
        if m is None:
            g = re.match(_GLOBAL_ARG, text)
            if g is not None and self.current is None:
                self.defaults[g.group(1)] = g.group(2)
            return
        flag = re.search(_FLAG, m.group(1) or "")
        image = m.group(2)
        named = self.named.get(image.lower()) if flag is None else None
        if named is not None:  # FROM an earlier stage: its platform
            self.current = named._replace(at=f"{self.shown}:{line}")
        else:
            platform = self._resolved(flag.group(1).strip("'\"")) if flag is not None else ""
            resolved = self._resolved(image)
            tagged = tag_platform(resolved)
            if tagged is not None and (not platform or arch_of(platform) == "*"):
                platform = tagged  # no --platform, or one the build sets: the tag's
            self.current = Stage(platform, f"{self.shown}:{line}",
                                 resolved if tagged is not None else "")
        if m.group(3):
            self.named[m.group(3).lower()] = self.current

    def _resolved(self, value: str) -> str:
        """``value`` with the variables the file gives a default replaced; one set by the
        build (BuildKit's, or an ``ARG`` without default) stays as written."""

        def sub(v: re.Match[str]) -> str:
            name = v.group(1) or v.group(3)
            if name in _AUTOMATIC:
                return v.group(0)
            got = self.defaults.get(name)
            if got:
                return got
            return v.group(2) if v.group(2) else v.group(0)

        return re.sub(_VAR, sub, value)

    def stamp(self, res: _T) -> _T:
        """A pin (or an installed file) with the current stage's platform; anything else,
        or outside a stage, as it is."""
        if self.current is None or not hasattr(res, "platform_at"):
            return res
        return res._replace(platform=self.current.platform,  # type: ignore[attr-defined, no-any-return]
                            platform_at=self.current.at, platform_tag=self.current.tag)


def tag_platform(image: str) -> str | None:
    """The platform an image reference's tag names (``lmsysorg/sglang:v0.5.18-cu130-arm64``
    -> ``linux/arm64``), or None: no tag, a tag naming no architecture or two, or one left
    to a variable."""
    ref = image.split("@", 1)[0]
    name, _, tag = ref.rpartition(":")
    if not name or "/" in tag or "$" in tag:
        return None
    found = {_TAG_ARCH[m.group(1).lower().replace("_", "-")]
             for m in re.finditer(_TAG_PART, tag)}
    return f"linux/{found.pop()}" if len(found) == 1 else None


def stage_arch(pin: Pin) -> str | None:
    """:func:`arch_of` the pin's stage: the architecture its image's tag names, else its
    ``--platform``'s (see :func:`disagreement`)."""
    tagged = tag_platform(pin.platform_tag) if pin.platform_tag else None
    return arch_of(tagged if tagged is not None and pin.platform is not None else pin.platform)


def disagreement(pin: Pin) -> str | None:
    """What to say when the stage's ``--platform`` names another architecture than the one
    its image's tag names, else None."""
    if not pin.platform_tag or not pin.platform:
        return None
    tagged = arch_of(tag_platform(pin.platform_tag))
    stated = arch_of(pin.platform)
    if stated in (None, "*") or stated == tagged:
        return None
    return (f"FROM --platform={cut(pin.platform, 80)} at {cut(pin.platform_at, 200)} names "
            f"{stated}, but its image {cut(pin.platform_tag, 200)} is tagged for {tagged} (an "
            f"image of one architecture: the build fails, or runs {tagged} under emulation): "
            f"its pins are judged on {tagged}; use the image's {stated} tag, or drop "
            "--platform")


def arch_of(platform: str | None) -> str | None:
    """The architecture a stage's platform builds for: ``x86_64``/``aarch64``, another
    architecture as Docker names it (``ppc64le``, ``arm``), ``*`` for a platform set by the
    build (a variable, or no ``--platform``), None outside a stage."""
    if platform is None:
        return None
    if not platform or "$" in platform:
        return "*"
    parts = platform.lower().split("/")
    if parts == ["linux"]:  # an OS alone: the architecture is the build's
        return "*"
    arch = parts[1] if len(parts) > 1 else parts[0]
    if len(parts) > 1 and parts[0] != "linux":
        return f"{parts[0]}/{arch}"
    return _DOCKER_ARCH.get(arch, arch)


def applies(pin: Pin, arch: str) -> bool:
    """Whether ``pin``'s stage is built for ``arch`` (a pin outside a stage, or in one
    whose platform the build sets, is installed on any)."""
    stage = stage_arch(pin)
    return stage in (None, "*") or stage == arch


def stage_note(pin: Pin) -> str:
    """``FROM --platform=linux/arm64 at Dockerfile:1``, or ``FROM
    lmsysorg/sglang:v0.5.18-cu130-arm64 (tagged for aarch64) at Dockerfile:1``."""
    tagged = tag_platform(pin.platform_tag) if pin.platform_tag else None
    if tagged is not None:
        return (f"FROM {cut(pin.platform_tag, 200)} (tagged for {arch_of(tagged)}) "
                f"at {cut(pin.platform_at, 200)}")
    return f"FROM --platform={cut(pin.platform or '', 80)} at {cut(pin.platform_at, 200)}"


def project_arches(pins: Sequence[Pin]) -> tuple[list[str], list[str], str | None]:
    """The architectures the project builds for, as its Dockerfile stages declare them:
    ``(judged, not judgeable, what to say)``. Both of :data:`ARCHES` when no stage declares
    one (or one is set by the build: then said); an architecture moonpin has no wheels for
    is returned apart."""
    stated: dict[str, Pin] = {}
    open_: Pin | None = None
    for p in pins:
        a = stage_arch(p)
        if a == "*":
            open_ = open_ or p
        elif a is not None:
            stated.setdefault(a, p)
    if not stated:
        if open_ is not None and open_.platform:
            return list(ARCHES), [], (f"{stage_note(open_)} is set when the image is built: "
                                      "every architecture")
        return list(ARCHES), [], None
    judged = [a for a in ARCHES if a in stated or open_ is not None]
    other = [a for a in stated if a not in ARCHES]
    said = "; ".join(f"{stage_note(p)}" for a, p in stated.items())
    if open_ is not None:
        said += ("; " + (f"{stage_note(open_)} is set when the image is built"
                         if open_.platform else
                         f"the stage at {open_.platform_at} has no --platform"))
    return judged, other, said


def judged_on(pins: Sequence[Pin], arch: str | None, where: str,
              ) -> tuple[str | None, str, list[str], list[str] | None]:
    """The arch to judge on as the project's Dockerfile stages build it (``--arch`` when
    given), the platform said, notes, and the reasons when no stage builds for an
    architecture moonpin judges: ``(arch or None for both, where, notes, reasons or None)``."""
    disagree = list(dict.fromkeys(d for p in pins if (d := disagreement(p))))
    if arch is not None:
        off = {stage_note(p) for p in pins if not applies(p, arch)}
        return arch, where, [*disagree, *(f"{s} is another architecture: its stage's pins are "
                                          f"not judged on {arch} (--arch)"
                                          for s in sorted(off))], None
    judged, other, said = project_arches(pins)
    notes = disagree + list(dict.fromkeys(
        f"{stage_note(p)}: moonpin judges x86_64 and aarch64 only (the wheels the knowledge "
        "base holds); that stage is not judged" for p in pins if stage_arch(p) in other))
    if said:
        where = where.replace("x86_64 and aarch64", " and ".join(judged or ["no arch"])
                              + f" ({said})")
    if not judged:
        return None, where, [], notes
    return (judged[0] if len(judged) == 1 else None), where, notes, None


def marker_applies(pin: Pin, arch: str, python: str | None) -> bool:
    """Whether ``pin``'s marker holds on Linux on ``arch`` (and ``python`` when given:
    ``cp312``, ``3.12``; the running interpreter's version otherwise), as pip evaluates it
    (``Marker.evaluate``) in that interpreter's environment
    (:func:`moonpin.readers.markers.environment`: every key the target's, none this
    process's): False means the requirement is absent there. A marker that cannot be
    evaluated applies."""
    if not applies(pin, arch):
        return False
    if not pin.marker:
        return True
    import sys

    from packaging.markers import InvalidMarker, Marker, UndefinedEnvironmentName

    from moonpin.readers.markers import environment

    version = sys.version_info[:2]
    digits = (python or "").removeprefix("cp").removeprefix("py").rstrip("t").replace(".", "")
    if digits.isdigit() and len(digits) >= 2:  # cp312, 3.12, 312: python_version 3.12
        version = (int(digits[0]), int(digits[1:3] if len(digits) > 3 else digits[1:]))
    env = environment(version, arch)
    try:
        return bool(Marker(pin.marker).evaluate(env))
    except (InvalidMarker, UndefinedEnvironmentName, ValueError):
        return True
