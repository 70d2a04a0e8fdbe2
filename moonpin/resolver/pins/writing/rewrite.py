"""Rewriting pins files in place: only the versions (and, for a switch of distribution, the
name) change; comments, extras, markers, layout and line endings stay, and a write keeps the
file's mode and symlink (:func:`write_keeping`). :func:`plan_rewrite` and
:func:`write_rewrite` are ``moonpin pins --diff`` / ``--write``."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from moonpin.kb.errors import UsageError
from moonpin.resolver.pins.reading.base import (
    HASH_NOTE,
    VALUE_KINDS,
    Pin,
    cut,
    read_for_rewrite,
)

__all__ = ["Rewrite", "apply_updates", "plan_rewrite", "read_for_rewrite", "write_keeping",
           "write_rewrite"]


def write_keeping(path: str, text: str) -> str:
    """Write ``text`` to ``path`` atomically, keeping what the edit does not change: the file's
    mode, and a symlink (its target is written; the link stays). Returns the path written.
    Raises ``OSError`` naming the path; the file is then unchanged."""
    target, tmp = _stage(path, text)
    _replace(tmp, target)
    return target


def _stage(path: str, text: str) -> tuple[str, str]:
    """``text`` written and synced to a temporary file beside ``path``'s target, with its mode:
    ``(target, temporary)``. Nothing of ``path`` changes; on ``OSError`` no temporary is left."""
    import stat
    import tempfile

    target = os.path.realpath(path)
    st = os.stat(target)  # ELOOP / ENOENT for a link that leads nowhere
    if not stat.S_ISREG(st.st_mode):
        raise OSError(21, "not a regular file", target)
    folder, name = os.path.split(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    try:
        os.fchmod(fd, stat.S_IMODE(st.st_mode))
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        _unlink(tmp)
        raise
    return target, tmp


def _replace(tmp: str, target: str) -> None:
    try:
        os.replace(tmp, target)
    except BaseException:
        _unlink(tmp)
        raise


def _unlink(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass


def _name_pattern(name: str) -> re.Pattern[str]:
    """Any PEP 503-equivalent spelling of ``name`` (``mooncake_transfer_engine`` …)."""
    parts = re.split(r"[-_.]+", name)
    return re.compile(r"(?<![\w.-])" + r"[-_.]+".join(map(re.escape, parts)) + r"(?![\w-])",
                      re.IGNORECASE)


#: Where a pin's version comes from when it is not text of its own line: an update cannot be
#: written there (the note says where it comes from instead).
_NOT_WRITTEN_HERE = ("reference", "editable", "variable", "environment")


class _Edit(NamedTuple):
    """One replacement on one physical line: ``old`` at ``col`` becomes ``new``."""

    col: int
    old: str
    new: str


def _loose_edit(line: str, pin: Pin, version: str,
                exclude: Sequence[str] | None = None, value: str = "") -> _Edit | None:
    """The edit that gives an unpinned or ranged requirement (or a bare value without a
    version) the exact ``version`` where its specifier is written: ``>=0.3.10`` (or nothing)
    becomes ``==version``; an ``ARG X`` becomes ``ARG X=version``. A ``value`` that is
    not an exact pin (a range kept, with exclusions: ``>=2.14,<2.15,!=2.14.1+cpu``) is
    written as it is. None when there is no such place (a reference, a variable, a range
    written over several lines)."""
    if pin.spec_col < 0 or (pin.note and any(w in pin.note for w in _NOT_WRITTEN_HERE)):
        return None
    if pin.kind in VALUE_KINDS:
        if pin.spec:
            return None  # a value that is not a version (a git ref): not ours to replace
        sep = "=" if pin.kind == "dockerfile-arg" and line[pin.spec_col - 1:pin.spec_col] \
            != "=" else ""
        return _Edit(pin.spec_col, "", sep + version)
    if line[pin.spec_col:pin.spec_col + len(pin.spec)] != pin.spec:
        return None
    if value[:1] in ("<", ">", "!", "~"):
        return _Edit(pin.spec_col, pin.spec, value)
    return _Edit(pin.spec_col, pin.spec, ",".join(["==" + version, *(exclude or ())]))


def _exclusion_edits(line: str, pin: Pin, exclude: Sequence[str] | None) -> list[_Edit]:
    """The edits that give an exact requirement's new version its exclusions (``!=V+cpu``
    written right after the version) and drop the ones its old version had
    (``,!=OLD+cpu``), on the version's own line."""
    if not exclude or pin.col < 0 or pin.version is None or pin.kind in VALUE_KINDS:
        return []
    end = pin.col + len(pin.version)
    if line[pin.col:end] != pin.version:
        return []
    stop = min((i for i in (line.find(c, end) for c in ";\"'#") if i >= 0), default=len(line))
    olds = list(re.finditer(r"\s*,\s*!=\s*" + re.escape(pin.version) + r"\+[A-Za-z0-9.]+",
                            line[end:stop]))
    first = olds[0].group(0) if olds and olds[0].start() == 0 else ""
    edits = [_Edit(end, first, "," + ",".join(exclude))]
    edits += [_Edit(end + m.start(), m.group(0), "") for m in olds if m.start() > 0]
    return edits


def _rename_edit(line: str, pin: Pin, new_name: str) -> _Edit | None:
    """The edit that renames ``pin``'s distribution on its line: where its name is written
    (``name_col``), else its first spelling on the line."""
    pattern = _name_pattern(pin.name)
    m = pattern.match(line, pin.name_col) if pin.name_col >= 0 else None
    m = m or pattern.search(line)
    return _Edit(m.start(), m.group(0), new_name) if m else None


def apply_updates(pins: Sequence[Pin], updates: Sequence[dict[str, Any]],
                  texts: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The files' new texts with ``updates`` applied at the pins' recorded places, and the
    updates that could not be written (with why). Only the versions (and, for a switch of
    distribution, the name) change; comments, extras, markers and layout stay. Every edit
    is placed on the text as read, and each line's edits are made right to left, so two
    requirements on one line (a pyproject array, a ``pip install`` line) keep their
    places."""
    by_place = {(p.path, p.version_line, p.col, p.version): p for p in pins
                if p.version is not None}
    lines = {path: text.splitlines(keepends=True) for path, text in texts.items()}
    problems: list[str] = []
    edits: dict[tuple[str, int], set[_Edit]] = {}
    loose = {(p.path, p.version_line, p.col, p.name): p for p in pins if p.version is None}

    def add(path: str, lineno: int, edit: _Edit | None) -> bool:
        if edit is None:
            return False
        edits.setdefault((path, lineno), set()).add(edit)
        return True

    def line_of(path: str, lineno: int) -> str:
        return lines[path][lineno - 1] if 0 < lineno <= len(lines[path]) else ""

    for u in updates:
        where = f"{u['packageFile']}:{u['line']}"
        renamed = u["newName"] != u["depName"]
        if "currentVersion" in u and u["currentVersion"] is None:
            pin = loose.get((u["packageFile"], u["line"], u["col"], u["depName"]))
            edit = None if pin is None else _loose_edit(line_of(pin.path, pin.spec_line), pin,
                                                        u["newVersion"], u.get("exclude"),
                                                        str(u.get("newValue", "")))
            if pin is None or edit is None:
                problems.append(f"{where}: {_why_not_pinned(pin, u)}")
                continue
            line = pin.spec_line
        else:
            pin = by_place.get((u["packageFile"], u["line"], u["col"], u["currentVersion"]))
            if pin is None or pin.col < 0:
                problems.append(f"{where}: {_why_not_rewritten(pin, u)}")
                continue
            if pin.note and HASH_NOTE in pin.note:
                problems.append(f"{where}: {u['depName']} is pinned with --hash; a new version"
                                " needs new hashes (pip-compile --generate-hashes): not written")
                continue
            edit, line = _Edit(pin.col, pin.version or "", u["newVersion"]), pin.version_line
            for extra in _exclusion_edits(line_of(pin.path, line), pin, u.get("exclude")):
                add(pin.path, line, extra)
        renames = [pin] if renamed else []
        if renamed and pin.kind == "dockerfile-arg":
            # the ARG holds the version; the distribution is named where it is installed
            var = re.split(r"[=\s]", pin.raw.strip(), maxsplit=1)[0]
            renames = [p for p in pins if p.path == pin.path and p.version is None
                       and p.name == pin.name and re.search(
                           rf"\$\{{?{re.escape(var)}\b", p.spec)]
            if not renames:
                problems.append(f"{where}: {var} carries a version only; switch the "
                                f"package to {u['newName']} where it is installed")
                continue
        add(pin.path, line, edit)
        for r in renames:
            if not add(r.path, r.line, _rename_edit(line_of(r.path, r.line), r,
                                                    u["newName"])):
                problems.append(f"{r.path}:{r.line}: {r.name} is not written on its line; "
                                f"not renamed to {u['newName']}")
    for (path, lineno), changes in edits.items():
        text = line_of(path, lineno)
        done: set[int] = set()
        for e in sorted(changes, key=lambda e: (e.col, e.old, e.new), reverse=True):
            if text[e.col:e.col + len(e.old)] != e.old or e.col in done:
                problems.append(f"{path}:{lineno}: the file changed since it was read")
                continue
            done.add(e.col)
            text = text[:e.col] + e.new + text[e.col + len(e.old):]
        lines[path][lineno - 1] = text
    return {path: "".join(ls) for path, ls in lines.items()}, problems


def _why_not_pinned(pin: Pin | None, update: dict[str, Any]) -> str:
    """Why an unpinned or ranged requirement cannot be given its version in the file."""
    name, version = update["depName"], update["newVersion"]
    if pin is not None and pin.note and "environment" in pin.note:
        return (f"{name}'s version comes from the environment ({pin.note.split(';')[0]}); "
                f"set it to give {name} {version}")
    if pin is not None and pin.note and "variable" in pin.note:
        return (f"{name}'s version is a shell variable with no value in the file; give it "
                f"{version} where it is set")
    return f"no requirement text to pin for {name}"


def _why_not_rewritten(pin: Pin | None, update: dict[str, Any]) -> str:
    """Why an exact pin's version cannot be rewritten in the file."""
    name, version = update["depName"], update["newVersion"]
    if pin is not None and pin.note and "from the environment" in pin.note:
        var = pin.note.split(" from the environment")[0].split("; ")[-1]
        return f"{name}'s version comes from {var} in the environment: set it to {version}"
    return f"no version text to rewrite for {name}"


class Rewrite(NamedTuple):
    """The files an update set touches: their text now and after, the unified diff, and the
    updates that could not be written (with why)."""

    paths: tuple[str, ...]
    old: dict[str, str]
    new: dict[str, str]
    problems: tuple[str, ...]

    def diff(self) -> Iterator[str]:
        import difflib

        for p in self.paths:
            yield from difflib.unified_diff(self.old[p].splitlines(keepends=True),
                                            self.new[p].splitlines(keepends=True),
                                            fromfile=p, tofile=p)


def plan_rewrite(pins: Sequence[Pin], updates: Sequence[dict[str, Any]]) -> Rewrite:
    """Read each file the updates touch again and apply them (nothing is written). Raises
    :class:`UsageError` naming a file that can no longer be read."""
    paths = tuple(sorted({u["packageFile"] for u in updates}))
    texts: dict[str, str] = {}
    for p in paths:
        try:
            texts[p] = read_for_rewrite(p)
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"cannot read {cut(p, 300)} again to rewrite it: "
                             f"{getattr(e, 'reason', None) or e}; it is unchanged",
                             hint="run again once the file is a readable regular file") from None
    new, problems = apply_updates(pins, updates, texts)
    return Rewrite(paths, texts, new, tuple(problems))


def write_rewrite(plan: Rewrite) -> Iterator[tuple[str, str]]:
    """Write every changed file as one change (line endings, mode and symlinks kept), yielding
    ``(path, path written)`` once all are written. Every new text is first written beside its
    file; only when all of them are there does each replace its file, so a file that cannot be
    written (full disk, permissions, a broken symlink) leaves every file unchanged: raises
    :class:`UsageError` naming it. A replace that fails after others (a rename, which does not
    need space) puts the files already replaced back."""
    changed = [p for p in plan.paths if plan.new[p] != plan.old[p]]
    staged: list[tuple[str, str, str]] = []
    try:
        for p in changed:
            try:
                target, tmp = _stage(p, plan.new[p])
            except OSError as e:
                raise _not_written(p, e) from None
            staged.append((p, target, tmp))
        done: list[tuple[str, str]] = []
        for p, target, tmp in staged:
            try:
                _replace(tmp, target)
            except OSError as e:
                for q, t in done:
                    write_keeping(t, plan.old[q])
                raise _not_written(p, e) from None
            done.append((p, target))
    finally:
        for _, _, tmp in staged:
            _unlink(tmp)
    for p, target, _ in staged:
        yield p, target


def _not_written(p: str, e: OSError) -> UsageError:
    return UsageError(f"cannot write {cut(p, 300)}: {e.strerror or e}; nothing was written "
                      "(every file is unchanged)",
                      hint="free space or fix permissions (or the symlink), then run again")
