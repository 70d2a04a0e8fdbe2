"""Reading ``pyproject.toml``: ``[project] dependencies``, its optional-dependencies groups,
PEP 735 ``[dependency-groups]`` (``uv sync`` installs ``dev`` by default, ``pip install
--group`` any; an ``{include-group = …}`` entry is the other group's, already read) and
``[tool.uv]`` constraint / override dependencies, each located in the text (PEP 621; uv's
settings reference). :mod:`tomllib` reads the file on Python 3.11+, after
:func:`toml_guard` has bounded its nesting; on 3.10 a line-based reader does."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from typing import Any

from moonpin.resolver.pins.reading.base import (
    MAX_TOML_DEPTH,
    MAX_TOML_DOTS,
    Locate,
    Pin,
    PinError,
    Text,
    cut,
    pin_from_requirement,
)

__all__ = ["TomlEntry", "pyproject_pins", "requires_python", "toml_arrays", "toml_arrays_linewise",
           "toml_document", "toml_guard"]

# (kind, where it is when not [project] dependencies or [tool.uv] -- "optional-dependencies
# group 'gpu'", "dependency group 'dev'" -- or None, requirement string, offset of its opening
# quote in the file or -1 when not found, quote character)
TomlEntry = tuple[str, str | None, str, int, str]

_UV_KEYS = {"constraint-dependencies": "uv-constraint", "override-dependencies": "uv-override"}


def _toml_locator(text: Text, value: str, lit_start: int, quote: str) -> Locate:
    """Offset in a requirement string -> (line, col) of that character in the file."""

    def locate(offset: int) -> tuple[int, int]:
        if lit_start < 0:
            return 0, -1
        return text.locate(lit_start + 1 + len(_toml_escape(value[:offset], quote)))

    return locate


def _toml_escape(value: str, quote: str) -> str:
    if quote == "'":
        return value
    return value.replace("\\", "\\\\").replace('"', '\\"')


if sys.version_info >= (3, 11):

    def _toml_load(text: str) -> tuple[dict[str, Any], tuple[int, str] | None]:
        import tomllib  # here: only a pyproject.toml needs it

        try:
            return tomllib.loads(text), None
        except tomllib.TOMLDecodeError as exc:
            m = re.search(r"at line (\d+)", str(exc))
            return {}, (int(m.group(1)) if m else 0, f"invalid TOML: {cut(str(exc))}")
        except (RecursionError, ValueError) as exc:  # past toml_guard's limits all the same
            return {}, (0, f"TOML too deeply nested or too large to read: "
                           f"{cut(type(exc).__name__)}")

else:  # Python 3.10: no tomllib; toml_arrays uses toml_arrays_linewise instead

    def _toml_load(text: str) -> tuple[dict[str, Any], tuple[int, str] | None]:
        raise NotImplementedError("tomllib needs Python 3.11")


def toml_document(text: str) -> dict[str, Any] | None:
    """The whole TOML document, read within :func:`toml_guard`'s limits; None when it is
    not TOML, is past them, or (Python 3.10) there is no tomllib."""
    if sys.version_info < (3, 11) or toml_guard(text) is not None:
        return None
    data, err = _toml_load(text)
    return None if err is not None else data


def toml_guard(text: str) -> tuple[int, str] | None:
    """A nesting depth or dotted-key length past the limits, found in one linear pass
    before tomllib (recursive; quadratic in dotted parts) runs: (line, message) or None.
    Strings are skipped; multi-line strings are treated as runs of one-line strings, which
    can only over-count brackets inside them."""
    depth = 0
    for number, line in enumerate(text.splitlines(), start=1):
        i, n = 0, len(line)
        dots = 0
        key_part = True
        while i < n:
            c = line[i]
            if c == "#":
                break
            if c in "\"'":
                j = i + 1
                while j < n and line[j] != c:
                    j += 2 if c == '"' and line[j] == "\\" else 1
                i = j + 1
                continue
            if c in "[{":
                depth += 1
                if depth > MAX_TOML_DEPTH:
                    return number, (f"arrays or tables nest deeper than {MAX_TOML_DEPTH}; "
                                    "not read")
            elif c in "]}":
                depth = max(depth - 1, 0)
            elif c == "=":
                key_part = False
            elif c == "." and key_part:
                dots += 1
                if dots > MAX_TOML_DOTS:
                    return number, (f"a key or table header has more than {MAX_TOML_DOTS} "
                                    "dotted parts; not read")
            i += 1
    return None


def toml_arrays(text: str) -> tuple[list[TomlEntry], tuple[int, str] | None]:
    if sys.version_info < (3, 11):
        return toml_arrays_linewise(text), None
    data, err = _toml_load(text)
    if err is not None:
        return [], err
    wanted: list[tuple[str, str | None, str, str, list[object]]] = []
    project = data.get("project", {})
    if isinstance(project, dict):
        wanted.append(("pyproject", None, "project", "dependencies",
                       _as_list(project.get("dependencies"))))
        groups = project.get("optional-dependencies", {})
        if isinstance(groups, dict):
            for group, reqs in groups.items():
                wanted.append(("pyproject", f"optional-dependencies group {group!r}",
                               "project.optional-dependencies", group, _as_list(reqs)))
    dep_groups = data.get("dependency-groups", {})
    if isinstance(dep_groups, dict):
        for group, reqs in dep_groups.items():
            wanted.append(("pyproject", f"dependency group {group!r}", "dependency-groups",
                           group, _as_list(reqs)))
    tool = data.get("tool", {})
    uv = tool.get("uv", {}) if isinstance(tool, dict) else {}
    if isinstance(uv, dict):
        for key, kind in _UV_KEYS.items():
            wanted.append((kind, None, "tool.uv", key, _as_list(uv.get(key))))
    out: list[TomlEntry] = []
    for kind, group, table, key, reqs in wanted:
        cursor = _toml_key_offset(text, table, key)
        for req in reqs:
            if not isinstance(req, str):
                continue
            best: tuple[int, str] | None = None
            for quote in ('"', "'"):
                pos = text.find(quote + _toml_escape(req, quote) + quote, cursor)
                if pos >= 0 and (best is None or pos < best[0]):
                    best = (pos, quote)
            if best is None:
                out.append((kind, group, req, -1, '"'))
                continue
            out.append((kind, group, req, best[0], best[1]))
            cursor = best[0] + len(_toml_escape(req, best[1])) + 2
    return out, None


def _as_list(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else []


def _toml_key_offset(text: str, table: str, key: str) -> int:
    header = re.search(
        r"^[ \t]*\[[ \t]*" + r"[ \t]*\.[ \t]*".join(map(re.escape, table.split(".")))
        + r"[ \t]*\][ \t]*(#.*)?$", text, re.MULTILINE)
    start = header.end() if header else 0
    k = re.compile(r"^[ \t]*[\"']?" + re.escape(key) + r"[\"']?[ \t]*=", re.MULTILINE)
    m = k.search(text, start)
    return m.end() if m else start


def toml_arrays_linewise(text: str) -> list[TomlEntry]:
    """Python 3.10 fallback: the arrays, written under their own table headers.

    Reads ``key = [ "req", 'req', ... ]`` (one or many lines, comments allowed) in
    ``[project]`` (``dependencies``), ``[project.optional-dependencies]`` and
    ``[dependency-groups]`` (every key; an inline-table entry is skipped) and
    ``[tool.uv]`` (``constraint-dependencies`` / ``override-dependencies``). Basic strings
    may use ``\\"`` and ``\\\\``; other escapes, multi-line strings, dotted keys and inline
    tables are not read.
    """
    out: list[TomlEntry] = []
    table = ""
    pos = 0
    n = len(text)
    line_re = re.compile(r"[^\n]*\n?")
    while pos < n:
        m = line_re.match(text, pos)
        assert m is not None
        line = m.group(0)
        header = re.match(r"[ \t]*\[([^\[\]]+)\][ \t]*(#.*)?$", line.rstrip("\r\n"))
        if header:
            table = re.sub(r"\s+", "", header.group(1)).replace('"', "").replace("'", "")
            pos = m.end()
            continue
        km = re.match(r"[ \t]*[\"']?([A-Za-z0-9_.-]+)[\"']?[ \t]*=[ \t]*\[", line)
        place: tuple[str, str | None] | None = None
        if km:
            key = km.group(1)
            if table == "project" and key == "dependencies":
                place = ("pyproject", None)
            elif table == "project.optional-dependencies":
                place = ("pyproject", f"optional-dependencies group {key!r}")
            elif table == "dependency-groups":
                place = ("pyproject", f"dependency group {key!r}")
            elif table == "tool.uv" and key in _UV_KEYS:
                place = (_UV_KEYS[key], None)
        if km is None or place is None:
            pos = m.end()
            continue
        i = pos + km.end()
        while i < n and text[i] != "]":
            c = text[i]
            if c == "#":
                nl = text.find("\n", i)
                i = n if nl < 0 else nl
            elif c == "{":  # an inline table ({include-group = "dev"}): no requirement
                close = text.find("}", i)
                i = n if close < 0 else close + 1
            elif c in "\"'":
                j = i + 1
                chars: list[str] = []
                while j < n and text[j] != c and text[j] != "\n":
                    if c == '"' and text[j] == "\\" and j + 1 < n:
                        j += 1
                    chars.append(text[j])
                    j += 1
                out.append((place[0], place[1], "".join(chars), i, c))
                i = j + 1
            else:
                i += 1
        pos = i + 1
    return out



def pyproject_pins(shown: str, text: Text) -> Iterator[Pin | PinError | None]:
    """Every requirement of the four arrays, located; one PinError for a file that is not
    TOML (or past the limits), nothing else then."""
    err = toml_guard(text.text)
    entries: list[TomlEntry] = []
    if err is None:
        entries, err = toml_arrays(text.text)
    if err is not None:
        yield PinError(shown, err[0], err[1])
        return
    for kind, group, value, lit_start, quote in entries:
        note = group
        res = pin_from_requirement(value, _toml_locator(text, value, lit_start, quote),
                                   shown, kind, notes=[note] if note else [])
        if isinstance(res, PinError) and lit_start < 0:
            res = PinError(shown, 0, res.message + " (its line was not found)")
        yield res


def requires_python(text: str) -> str | None:
    """``[project] requires-python`` (PEP 621) as written, or None (absent, not a string,
    or a file that is not TOML: :func:`pyproject_pins` reports that)."""
    if toml_guard(text) is not None:
        return None
    if sys.version_info < (3, 11):
        m = re.search(r"(?m)^\s*requires-python\s*=\s*[\"']([^\"']*)[\"']", text)
        return m.group(1) if m else None
    data, err = _toml_load(text)
    project = data.get("project") if err is None else None
    value = project.get("requires-python") if isinstance(project, dict) else None
    return value if isinstance(value, str) else None
