"""What every pins reader shares: the :class:`Pin` and :class:`PinError` values, the limits
on a pins file, text located by (line, column), and one requirement string read into a pin.

The contract these values keep (lines, columns, exact versions, notes) is documented in
:mod:`moonpin.resolver.pins.reading.walk`; the readers per file kind are
:mod:`~moonpin.resolver.pins.reading.requirements`, :mod:`~moonpin.resolver.pins.reading.pyproject`,
:mod:`~moonpin.resolver.pins.reading.shell` and :mod:`~moonpin.resolver.pins.reading.regex`.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from packaging.version import InvalidVersion, Version

from moonpin.kb.distributions import DISTRIBUTIONS

__all__ = [
    "DEFAULT_NOTE",
    "GROUP_NAME",
    "HASH_NOTE",
    "MAX_FILE_BYTES",
    "MAX_INCLUDE_DEPTH",
    "MAX_LINE_CHARS",
    "MAX_TOML_DEPTH",
    "MAX_TOML_DOTS",
    "MAX_VERSION_CHARS",
    "MOONCAKE_FAMILY",
    "NAME_RE",
    "NATIVE",
    "TRACKED",
    "UNUSED_DEFAULT",
    "VALUE_KINDS",
    "VARIABLE_NOTE",
    "VERSION_VARIABLES",
    "Found",
    "Locate",
    "Logical",
    "Pin",
    "PinError",
    "Text",
    "canon",
    "cut",
    "join_notes",
    "pin_from_requirement",
    "read_for_rewrite",
    "shifted",
    "value_pin",
]

#: The mooncake family, as the scrapers know it.
MOONCAKE_FAMILY: tuple[str, ...] = DISTRIBUTIONS
#: The distributions of the worker's other native extensions, each project's (what the
#: native scrape's recipes read, ``moonpin.scrapers.projects``; kept equal to them by
#: tests/resolver/test_pins_native.py, without loading the recipes' models here).
NATIVE: dict[str, tuple[str, ...]] = {
    "nixl": ("nixl", "nixl-cu12", "nixl-cu13"),
    "sglang-kernel": ("sglang-kernel", "sgl-kernel"),
    "deep-ep": ("sgl-deep-ep",),
    "flashinfer": ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache"),
}
TRACKED: frozenset[str] = frozenset(("sglang", "torch", *MOONCAKE_FAMILY,
                                     *(d for ds in NATIVE.values() for d in ds)))

#: Dockerfile / shell variables read as pins, and the distribution each one names.
VERSION_VARIABLES: dict[str, str] = {
    "SGLANG_VERSION": "sglang",
    "TORCH_VERSION": "torch",
    "PYTORCH_VERSION": "torch",
    "MOONCAKE_VERSION": "mooncake-transfer-engine",
    "MOONCAKE_TRANSFER_ENGINE_VERSION": "mooncake-transfer-engine",
}

#: One name for the group everywhere (``moonpin pins`` updates and the Renovate fragment);
#: Renovate turns it into the branch ``renovate/sglang-stack``.
GROUP_NAME = "sglang stack"

HASH_NOTE = "has --hash: a new version needs new hashes"

#: The note of a ``pip install`` requirement whose version is a shell variable.
VARIABLE_NOTE = "version from a shell variable"
#: The note of the default of ``name==${VAR:-default}`` (followed by ``${VAR}``), and what
#: is added when the file gives ``VAR`` a value: that default is then not what is installed
#: (it is rewritten with the other pins, never judged or called a disagreement).
DEFAULT_NOTE = "the default of "
UNUSED_DEFAULT = ", unused: the file sets it"

#: Pin kinds whose text is a bare version (Renovate's value is then the version itself).
VALUE_KINDS = frozenset({"dockerfile-arg", "docker-image", "regex"})

#: Limits on what a pins file may make moonpin do (issue 19): the size read, how deep
#: ``-r``/``-c`` includes nest, how long a logical line or a version may be, and how deep
#: a pyproject.toml may nest or how many dotted parts a key or header may have before
#: tomllib (which recurses, and is quadratic in dotted parts) sees it.
MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_INCLUDE_DEPTH = 64
MAX_LINE_CHARS = 64 * 1024
MAX_VERSION_CHARS = 200
MAX_TOML_DEPTH = 64
MAX_TOML_DOTS = 64



def read_for_rewrite(path: str) -> str:
    """A pins file's text exactly as stored (``\\r\\n`` kept: no newline translation), read
    like :func:`read_pins` reads it. Raises ``OSError`` (``moonpin.kb.errors.ReadRefused``)."""
    from moonpin.kb.files import read_regular

    return read_regular(path, cap=MAX_FILE_BYTES, what="pins file").decode("utf-8")


def cut(text: str, limit: int = 200) -> str:
    """Echoed input cut to ``limit`` characters, saying how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


class _Pin(NamedTuple):
    """:class:`Pin`'s fields."""

    name: str
    spec: str
    version: str | None
    path: str
    line: int
    col: int
    raw: str
    kind: str
    extras: tuple[str, ...] = ()
    marker: str | None = None
    note: str | None = None
    #: physical line that ``col`` is on (a continuation can move the version below ``line``);
    #: left at 0 it becomes ``line``.
    version_line: int = 0
    #: where the name starts on ``line`` (-1: not known), so a switch of distribution
    #: renames this requirement and not another of the same name on that line.
    name_col: int = -1
    #: where the written specifier ``spec`` starts (the value, for a bare-value kind), or
    #: where one goes for a requirement with none, on physical line ``spec_line`` (0 becomes
    #: ``line``); -1 when not known. An update pins a range or an unpinned requirement there.
    spec_line: int = 0
    spec_col: int = -1
    #: the ``--platform`` of the Dockerfile stage the pin is installed in, as resolved
    #: (``linux/arm64``; ``""`` for a stage without one; a variable the build sets stays
    #: ``$TARGETPLATFORM``), and where that ``FROM`` is; None outside a stage (see
    #: :mod:`moonpin.resolver.pins.reading.platforms`)
    platform: str | None = None
    platform_at: str = ""
    #: the image reference at that ``FROM`` when its tag names an architecture
    #: (``lmsysorg/sglang:v0.5.18-cu130-arm64``): the stage's platform without a
    #: ``--platform``, said against one that disagrees (see ``platforms.stage_arch``)
    platform_tag: str = ""


class Pin(_Pin):
    """One requirement of a tracked distribution, where it is written (see
    :mod:`moonpin.resolver.pins.reading.walk` for what ``line``, ``col`` and ``version`` mean)."""

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> Pin:
        pin = super().__new__(cls, *args, **kwargs)
        if pin.version_line and pin.spec_line:
            return pin
        return pin._replace(version_line=pin.version_line or pin.line,
                            spec_line=pin.spec_line or pin.line)


class PinError(NamedTuple):
    """A line that could not be read; ``line == 0`` is a whole file that could not be (a
    missing file, a folder, a FIFO), and ``tip`` then says what to do about it."""

    path: str
    line: int
    message: str
    tip: str | None = None


# --------------------------------------------------------------------------- text helpers

Locate = Callable[[int], tuple[int, int]]  # offset in a string -> (physical line, column)


class Text:
    """A decoded file with offset <-> (line, col), lines as ``str.splitlines`` counts them."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines()
        self.starts: list[int] = []
        pos = 0
        for chunk in text.splitlines(keepends=True):
            self.starts.append(pos)
            pos += len(chunk)

    def locate(self, offset: int) -> tuple[int, int]:
        i = max(bisect.bisect_right(self.starts, offset) - 1, 0)
        return i + 1, offset - (self.starts[i] if self.starts else 0)


class Logical(NamedTuple):
    """One logical line joined from physical lines, remembering where each piece came from."""

    text: str
    first_line: int
    segs: list[tuple[int, int, int]]  # (offset in text, physical line, column on that line)

    def locate(self, offset: int) -> tuple[int, int]:
        starts = [s[0] for s in self.segs]
        i = max(bisect.bisect_right(starts, offset) - 1, 0)
        start, line, col = self.segs[i]
        return line, col + offset - start


def shifted(locate: Locate, base: int) -> Locate:
    return lambda offset: locate(base + offset)


def _is_url_or_path(text: str) -> bool:
    t = text.strip()
    return (
        "://" in t
        or t.startswith((".", "/", "~", "file:"))
        or "/" in t.split(";")[0]
        or "\\" in t
        or t.endswith((".whl", ".tar.gz", ".zip"))
    )


def canon(name: str) -> str:
    from moonpin.resolver.inputs import canonical_name

    return canonical_name(name)


NAME_RE = re.compile(r"\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(\[[^\]]*\])?\s*")
_EXACT_RE = re.compile(r"(===|==)\s*([^\s,;)]+)")


class Found:
    """What a read collected: the pins, and the lines that could not be read."""

    __slots__ = ("errors", "pins")

    def __init__(self, pins: list[Pin] | None = None,
                 errors: list[PinError] | None = None) -> None:
        self.pins: list[Pin] = [] if pins is None else pins
        self.errors: list[PinError] = [] if errors is None else errors

    def add(self, res: Pin | PinError | None) -> None:
        if isinstance(res, Pin):
            self.pins.append(res)
        elif isinstance(res, PinError):
            self.errors.append(res)


def join_notes(*notes: str | None) -> str | None:
    kept = [n for n in notes if n]
    return "; ".join(dict.fromkeys(kept)) if kept else None




def _wheel_pin_parts(ref: str) -> tuple[str, str, int] | None:
    """``(name, version as written, offset of version in ref)`` for a wheel file reference."""
    base_start = max(ref.rfind("/"), ref.rfind("\\")) + 1
    base = ref[base_start:].split("#")[0].split("?")[0]
    if not base.endswith(".whl"):
        return None
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        name, _, _, _ = parse_wheel_filename(base)
    except InvalidWheelFilename:
        return None
    parts = base.split("-")
    return canon(name), parts[1], base_start + len(parts[0]) + 1


def _vcs_tag_version(url: str) -> tuple[str, int] | None:
    """The release a VCS reference's tag names and its offset in ``url``
    (``git+https://…/sglang@v0.5.18#egg=sglang`` -> ``("0.5.18", …)``), or None for a branch,
    a commit or no ref (pip's ``vcs+URL@REF``: the ref after the path's last ``@``)."""
    if not re.match(r"(git|hg|svn|bzr)\+", url):
        return None
    end = min((i for i in (url.find("#"), url.find("?")) if i >= 0), default=len(url))
    at = url.rfind("@", 0, end)
    if at < 0 or "/" in url[at + 1:end]:
        return None
    ref = url[at + 1:end]
    start = at + 1 + (1 if ref[:1] in "vV" else 0)
    text = url[start:end]
    if not re.fullmatch(r"\d+(\.\d+)+((a|b|rc)\d+)?(\.post\d+)?", text):
        return None
    return text, start


def _reference_name(ref: str) -> str | None:
    egg = re.search(r"[#&]egg=([A-Za-z0-9][A-Za-z0-9._-]*)", ref)
    if egg:
        return canon(egg.group(1))
    wheel = _wheel_pin_parts(ref)
    if wheel:
        return wheel[0]
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*@", ref)
    if m:
        return canon(m.group(1))
    path = ref.split("#")[0].split("[")[0]
    for comp in reversed(re.split(r"[/\\]", path)):
        if comp and canon(comp) in TRACKED:
            return canon(comp)
    return None


def pin_from_requirement(
    req_text: str,
    locate: Locate,
    path: str,
    kind: str,
    *,
    notes: Sequence[str] = (),
    editable: bool = False,
) -> Pin | PinError | None:
    """A Pin for a tracked requirement, None for an untracked one, PinError if unreadable.

    ``req_text`` is the requirement exactly as found; ``locate`` maps an offset in it to the
    physical (line, col) of the file.
    """
    raw = req_text.strip()
    lead = len(req_text) - len(req_text.lstrip())
    line0, _ = locate(lead)
    named_url = re.match(r"\s*[\w.-]+\s*(\[[^\]]*\])?\s*@", raw) is not None
    if editable or (_is_url_or_path(raw) and not named_url):
        name = _reference_name(raw)
        if name is None:
            return None  # a path or URL we cannot name: not one of ours as far as we can tell
        if name not in TRACKED:
            return None
        note = "editable install" if editable else "direct reference"
        wheel = _wheel_pin_parts(raw)
        if wheel and not editable:
            vline, vcol = locate(lead + wheel[2])
            return Pin(name, "", wheel[1], path, line0, vcol, raw, kind,
                       note=join_notes(note, *notes), version_line=vline)
        tag = None if editable else _vcs_tag_version(raw)
        if tag is not None:
            vline, vcol = locate(lead + tag[1])
            return Pin(name, "", tag[0], path, line0, vcol, raw, kind,
                       note=join_notes(note, "the tag's release", *notes), version_line=vline)
        return Pin(name, "", None, path, line0, -1, raw, kind, note=join_notes(note, *notes))
    req: Any = _plain_requirement(raw)  # a _Plain, or packaging's Requirement
    if req is None:
        from packaging.requirements import InvalidRequirement, Requirement

        try:
            req = Requirement(raw)
        except InvalidRequirement as exc:
            return PinError(path, line0, f"invalid requirement {cut(raw)!r}: {cut(str(exc))}")
    name = canon(req.name)
    if name not in TRACKED:
        return None
    extras = tuple(sorted(req.extras))
    marker = str(req.marker) if req.marker is not None else None
    if req.url:
        wheel = _wheel_pin_parts(req.url)
        ref_note = join_notes("direct reference", *notes)
        if wheel:
            off = raw.find(req.url) + wheel[2]
            vline, vcol = locate(lead + off)
            return Pin(name, "", wheel[1], path, line0, vcol, raw, kind, extras, marker,
                       ref_note, version_line=vline)
        tag = _vcs_tag_version(req.url)
        if tag is not None and raw.find(req.url) >= 0:
            vline, vcol = locate(lead + raw.find(req.url) + tag[1])
            return Pin(name, "", tag[0], path, line0, vcol, raw, kind, extras, marker,
                       join_notes("direct reference", "the tag's release", *notes),
                       version_line=vline)
        return Pin(name, "", None, path, line0, -1, raw, kind, extras, marker, ref_note)
    m = NAME_RE.match(raw)
    spec_start = m.end() if m else 0
    semi = raw.find(";", spec_start)
    spec = raw[spec_start : semi if semi >= 0 else len(raw)].strip()
    _, name_col = locate(lead)
    exact = [
        s for s in req.specifier
        if s.operator == "===" or (s.operator == "==" and not s.version.endswith(".*"))
    ]
    if len(exact) == 1 and len(exact[0].version) > MAX_VERSION_CHARS:
        return PinError(path, line0, f"the version of {name} is {len(exact[0].version):,} "
                        f"characters long (at most {MAX_VERSION_CHARS}): not a version moonpin "
                        "can judge")
    if len(exact) == 1:
        for em in _EXACT_RE.finditer(raw, spec_start):
            if em.group(1) == exact[0].operator and not em.group(2).endswith(".*"):
                vline, vcol = locate(lead + em.start(2))
                return Pin(name, spec, em.group(2), path, line0, vcol, raw, kind, extras,
                           marker, join_notes(*notes), version_line=vline,
                           name_col=name_col)
    note = "range" if spec else "unpinned"
    # a range is replaced where it is written; a bare name gets one after its extras
    at = spec_start if spec else (m.end(2) if m and m.group(2) else m.end(1) if m else -1)
    sline, scol = locate(lead + at) if at >= 0 else (line0, -1)
    return Pin(name, spec, None, path, line0, -1, raw, kind, extras, marker,
               join_notes(note, *notes), name_col=name_col, spec_line=sline, spec_col=scol)


#: A requirement that is a name, extras and version clauses, nothing else (no marker, no
#: URL): what most lines of a requirements file are. Linear on any input (no two
#: repetitions can share a run of blanks).
_PLAIN_RE = re.compile(
    r"([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)(?:[ \t]*\[([A-Za-z0-9._, \t-]*)\])?[ \t]*"
    r"((?:===|==|!=|~=|<=|>=|<|>)[ \t]*[A-Za-z0-9_.*+!-]+"
    r"(?:[ \t]*,[ \t]*(?:===|==|!=|~=|<=|>=|<|>)[ \t]*[A-Za-z0-9_.*+!-]+)*)?")


class _Plain(NamedTuple):
    """What :class:`packaging.requirements.Requirement` says of a plain requirement."""

    name: str
    extras: frozenset[str]
    specifier: Any
    marker: None = None
    url: None = None


def _plain_requirement(raw: str) -> _Plain | None:
    """``raw`` read without :mod:`packaging.requirements` (whose import costs a query
    more than its answer) when it is plain; None for anything else, or a clause
    :class:`~packaging.specifiers.SpecifierSet` refuses (then the full parser reads it,
    and says what is wrong)."""
    m = _PLAIN_RE.fullmatch(raw)
    if m is None:
        return None
    extras = m.group(2)
    names = [e.strip() for e in extras.split(",")] if extras is not None else []
    if any(not _EXTRA_RE.fullmatch(e) for e in names if e or len(names) > 1):
        return None
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        spec = SpecifierSet(m.group(3) or "")
    except InvalidSpecifier:
        return None
    return _Plain(m.group(1), frozenset(e for e in names if e), spec)


_EXTRA_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")


def value_pin(
    name: str, value: str, line: int, col: int, path: str, raw: str, kind: str,
    *, version_line: int = 0, note: str | None = None,
) -> Pin:
    """A pin whose version is a bare value (Docker ARG, regex ``currentValue``) written at
    ``col`` of ``version_line`` (for an empty value: where one goes)."""
    if value == "":
        return Pin(name, "", None, path, line, -1, raw, kind,
                   note=join_notes("unpinned", note), version_line=version_line,
                   spec_line=version_line, spec_col=col)
    try:
        if len(value) > MAX_VERSION_CHARS:
            raise InvalidVersion(value)
        Version(value)
    except ValueError:  # InvalidVersion, or int()'s limit on a number of 4,300+ digits
        # not a version: no place to write one (the value may be a git ref, or huge)
        return Pin(name, cut(value), None, path, line, -1, cut(raw), kind,
                   note=join_notes(f"not a PEP 440 version: {cut(value, 60)!r}", note),
                   version_line=version_line)
    return Pin(name, "==" + value, value, path, line, col, raw, kind, note=note,
               version_line=version_line)


