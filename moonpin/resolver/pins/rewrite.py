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
from moonpin.resolver.pins.base import HASH_NOTE, MAX_FILE_BYTES, Pin, cut

__all__ = ["Rewrite", "apply_updates", "plan_rewrite", "read_for_rewrite", "write_keeping",
           "write_rewrite"]


def read_for_rewrite(path: str) -> str:
    """A pins file's text exactly as stored (``\\r\\n`` kept: no newline translation), read
    like :func:`read_pins` reads it. Raises ``OSError`` (``moonpin.kb.errors.ReadRefused``)."""
    from moonpin.kb.files import read_regular

    return read_regular(path, cap=MAX_FILE_BYTES, what="pins file").decode("utf-8")


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


def _pin_loose(lines: dict[str, list[str]], pin: Pin, new_name: str, version: str) -> bool:
    """Give an unpinned or ranged requirement line the exact version: its range (or nothing)
    after the name and extras becomes ``==version``. Only a requirement written on one line
    of a requirements file or a ``pip install`` line."""
    if pin.kind not in ("requirements", "constraints", "pip-install") or (pin.note and (
            "reference" in pin.note or "editable" in pin.note or "variable" in pin.note)):
        return False
    text = lines[pin.path][pin.line - 1]
    m = _name_pattern(pin.name).search(text)
    if m is None:
        return False
    end = m.end()
    ex = re.match(r"\s*\[[^\]]*\]", text[end:])
    if ex:
        end += ex.end()
    rest = text[end:]
    if pin.spec:
        at = rest.find(pin.spec)
        if at < 0 or rest[:at].strip():
            return False
        rest = rest[:at] + "==" + version + rest[at + len(pin.spec):]
    else:
        rest = "==" + version + rest
    head = text[:m.start()] + (new_name if new_name != pin.name else m.group(0))
    lines[pin.path][pin.line - 1] = head + text[m.end():end] + rest
    return True


def apply_updates(pins: Sequence[Pin], updates: Sequence[dict[str, Any]],
                  texts: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The files' new texts with ``updates`` applied at the pins' recorded places, and the
    updates that could not be written (with why). Only the versions (and, for a switch of
    distribution, the name) change; comments, extras, markers and layout stay."""
    by_place = {(p.path, p.version_line, p.version): p for p in pins if p.version is not None}
    lines = {path: text.splitlines(keepends=True) for path, text in texts.items()}
    problems: list[str] = []
    edits: dict[tuple[str, int], list[tuple[int, str, str]]] = {}
    renames: list[tuple[Pin, str]] = []
    loose = {(p.path, p.line, p.name): p for p in pins if p.version is None}
    for u in updates:
        where = f"{u['packageFile']}:{u['line']}"
        if "currentVersion" in u and u["currentVersion"] is None:
            lpin = loose.get((u["packageFile"], u["line"], u["depName"]))
            if lpin is None or not _pin_loose(lines, lpin, u["newName"], u["newVersion"]):
                problems.append(f"{where}: no requirement text to pin for {u['depName']}")
            continue
        pin = by_place.get((u["packageFile"], u["line"], u["currentVersion"]))
        if pin is None or pin.col < 0:
            problems.append(f"{where}: no version text to rewrite for {u['depName']}")
            continue
        if pin.note and HASH_NOTE in pin.note:
            problems.append(f"{where}: {u['depName']} is pinned with --hash; a new version "
                            "needs new hashes (pip-compile --generate-hashes): not written")
            continue
        if u["newName"] != u["depName"]:
            if pin.kind == "dockerfile-arg":
                # the ARG holds the version; the distribution is named where it is installed
                var = re.split(r"[=\s]", pin.raw.strip(), maxsplit=1)[0]
                users = [p for p in pins if p.path == pin.path and p.version is None
                         and p.name == pin.name and re.search(
                             rf"\$\{{?{re.escape(var)}\b", p.spec)]
                if not users:
                    problems.append(f"{where}: {var} carries a version only; switch the "
                                    f"package to {u['newName']} where it is installed")
                    continue
                renames += [(p, u["newName"]) for p in users]
            else:
                renames.append((pin, u["newName"]))
        edits.setdefault((pin.path, pin.version_line), []).append(
            (pin.col, pin.version or "", u["newVersion"]))
    for (path, lineno), changes in edits.items():
        text = lines[path][lineno - 1]
        for col, old, new in sorted(changes, reverse=True):  # right to left keeps columns
            if text[col:col + len(old)] != old:
                problems.append(f"{path}:{lineno}: the file changed since it was read")
                continue
            text = text[:col] + new + text[col + len(old):]
        lines[path][lineno - 1] = text
    for pin, new_name in renames:
        text = lines[pin.path][pin.line - 1]
        lines[pin.path][pin.line - 1] = _name_pattern(pin.name).sub(new_name, text, count=1)
    return {path: "".join(ls) for path, ls in lines.items()}, problems


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
