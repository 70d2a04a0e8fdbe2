"""Reading requirements and constraints files as pip reads them (``pip/_internal/req/
req_file.py``): ``\\`` continuations joined, comments cut, options skipped, ``-e`` read as
a reference and ``-r``/``-c`` handed back as :class:`Include` for the caller to follow."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import NamedTuple

from moonpin.resolver.pins.reading.base import (
    HASH_NOTE,
    MAX_LINE_CHARS,
    NAME_RE,
    TRACKED,
    Locate,
    Logical,
    Pin,
    PinError,
    Text,
    canon,
    join_notes,
    pin_from_requirement,
    shifted,
)

__all__ = ["Include", "comment_start", "pip_logical_lines", "requirement_lines"]

_INCLUDE_RE = re.compile(
    r"(--requirement|--constraint|--editable|-r|-c|-e)(?:\s*=\s*|\s+|(?=[^\s=-]))(.*)$"
)


class Include(NamedTuple):
    """A ``-r``/``-c`` line: the file it names (as written), and the kind it is read as."""

    line: int
    value: str
    kind: str


def comment_start(text: str) -> int:
    """Where pip's ``(^|\\s+)#.*$`` comment starts in ``text`` (with the whitespace before
    it), or -1; in linear time (the regex is quadratic on a long run of spaces)."""
    i = text.find("#")
    while i >= 0:
        if i == 0 or text[i - 1].isspace():
            j = i
            while j > 0 and text[j - 1].isspace():
                j -= 1
            return j
        i = text.find("#", i + 1)
    return -1


def pip_logical_lines(lines: list[str]) -> Iterator[Logical]:
    """pip's ``join_lines``: ``\\`` joins lines; a comment line ends a continuation."""
    pieces: list[tuple[str, int, int]] = []
    for number, line in enumerate(lines, start=1):
        is_comment = line.lstrip().startswith("#")
        if not line.endswith("\\") or is_comment:
            if pieces:
                # pip prefixes a comment line with a space that is not in the file
                pieces.append((" " + line, number, -1) if is_comment else (line, number, 0))
                yield _make_logical(pieces)
                pieces = []
            else:
                yield _make_logical([(line, number, 0)])
        else:
            pieces.append((line[:-1], number, 0))
    if pieces:
        yield _make_logical(pieces)


def _make_logical(pieces: list[tuple[str, int, int]]) -> Logical:
    """Join (text, physical line, column of the text's first character) pieces."""
    text = ""
    segs: list[tuple[int, int, int]] = []
    for piece, number, col in pieces:
        segs.append((len(text), number, col))
        text += piece
    return Logical(text, pieces[0][1], segs)


def requirement_lines(text: Text, shown: str, kind: str
                      ) -> Iterator[Pin | PinError | Include | None]:
    """Every requirement of ``text`` (a ``kind`` file shown as ``shown``), in order: a Pin
    for a tracked one, None for another, PinError for a line that cannot be read, Include
    for a ``-r``/``-c`` line."""
    for logical in pip_logical_lines(text.lines):
        if len(logical.text) > MAX_LINE_CHARS:
            yield PinError(shown, logical.first_line, f"line is {len(logical.text):,} "
                           f"characters long (at most {MAX_LINE_CHARS:,}); not read")
            continue
        cut = comment_start(logical.text)
        body = logical.text[:cut] if cut >= 0 else logical.text
        if body.strip():
            yield _line(logical, body, shown, kind)


def _line(logical: Logical, body: str, shown: str, kind: str
          ) -> Pin | PinError | Include | None:
    lead = len(body) - len(body.lstrip())
    stripped = body.strip()
    if stripped.startswith("-"):
        inc = _INCLUDE_RE.match(stripped)
        if inc is None:
            return None  # a global option (--index-url, --pre, ...): not a pin
        opt, value = inc.group(1), inc.group(2).strip()
        if opt in ("-e", "--editable"):
            off = lead + inc.start(2) + (len(inc.group(2)) - len(inc.group(2).lstrip()))
            return pin_from_requirement(value, shifted(logical.locate, off), shown, kind,
                                        editable=True)
        sub_kind = "constraints" if opt in ("-c", "--constraint") else kind
        # pip expands ${NAME} in an include's path too (a name not set stays as written)
        value = _ENV_VAR.sub(lambda v: os.environ.get(v.group(1), v.group(0)), value)
        return Include(logical.first_line, value.strip("'\""), sub_kind)
    opt_m = re.search(r"\s-", stripped)
    req_text = stripped[: opt_m.start()] if opt_m else stripped
    options = stripped[opt_m.start():] if opt_m else ""
    notes = [HASH_NOTE] if re.search(r"(^|\s)--hash\b", options) else []
    if _ENV_VAR.search(req_text):
        return _expanded(req_text, shifted(logical.locate, lead), shown, kind, notes)
    return pin_from_requirement(req_text, shifted(logical.locate, lead), shown, kind,
                                notes=notes)


#: pip expands ``${NAME}`` (upper case, digits and ``_`` only) from the environment in
#: every line of a requirements file, and leaves a name that is not set as written
#: (``pip/_internal/req/req_file.py``, ``expand_env_variables``).
_ENV_VAR = re.compile(r"\$\{([A-Z0-9_]+)\}")


def _expanded(req_text: str, locate: Locate, shown: str, kind: str, notes: list[str]
              ) -> Pin | PinError | None:
    """A requirement with ``${VAR}``: read as pip reads it once the environment is
    expanded. Its version is then not text of the file (it is not rewritten); a variable
    that is not set leaves a pin that is not judged, saying why."""
    names = list(dict.fromkeys(_ENV_VAR.findall(req_text)))
    unset = [n for n in names if n not in os.environ]
    said = ", ".join(f"${{{n}}}" for n in names)
    if unset:
        m = NAME_RE.match(req_text)
        name = canon(m.group(1)) if m and "$" not in m.group(0) else None
        if name not in TRACKED:
            return None
        line0, _ = locate(0)
        missing = ", ".join(f"${{{n}}}" for n in unset)
        return Pin(name, req_text[m.end():].split(";")[0].strip() if m else "", None, shown,
                   line0, -1, req_text, kind,
                   note=join_notes(f"version from {missing}, not set in the environment: "
                                   "not judged (pip would read it as written)", *notes))
    text = _ENV_VAR.sub(lambda v: os.environ[v.group(1)], req_text)
    res = pin_from_requirement(text, lambda off: (locate(0)[0], -1), shown, kind,
                               notes=[*notes, f"{said} from the environment"])
    if isinstance(res, Pin):
        res = res._replace(raw=req_text, col=-1, version_line=res.line)
    return res
