"""Reading and writing the knowledge-base file.

Writes are atomic (temp file in the same folder, fsync, ``os.replace``) and
serialised by an advisory lock on ``<kb>.lock``, so an interrupted or a
concurrent scrape never leaves a half-written KB behind.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from moonpin.kb.errors import KBError, ReadRefused, WriteFailed
from moonpin.kb.files import MiB, loads_json, read_regular, write_atomic
from moonpin.kb.models import READABLE_SCHEMAS, SCHEMA_VERSION, KnowledgeBase
from moonpin.kb.paths import default_kb_path, scrape_kb_file, user_kb_file

__all__ = ["default_kb_path", "dumps", "inside_package", "kb_lock", "load", "save",
           "scrape_kb_path", "write_atomic"]

_RESCRAPE = "run `moonpin scrape --full --kb {path}` to rebuild it from the index"

#: The largest KB file read (the shipped one is ~5 MB).
MAX_KB_BYTES = 256 * MiB


def load(path: Path | None = None) -> KnowledgeBase:
    """Load and validate a KB file; every failure names the file, the field and the fix."""
    path = path or default_kb_path()
    hint = _RESCRAPE.format(path=path)
    try:
        raw = read_regular(path, cap=MAX_KB_BYTES, what="knowledge base")
    except ReadRefused as e:
        if e.errno == errno.ENOENT:
            raise KBError(f"knowledge base not found: {str(path)!r}", hint=hint) from e
        raise KBError(str(e), hint=f"{e.hint}; or {hint}" if e.limit and "limit" in e.reason
                      else "point --kb/MOONPIN_KB at a knowledge-base file, or " + hint) from e
    try:
        doc = loads_json(raw)
    except ValueError as e:
        raise KBError(f"knowledge base {str(path)!r}: {e}", hint=hint) from e
    if not isinstance(doc, dict):
        raise KBError(f"knowledge base {str(path)!r}: top level must be an object", hint=hint)
    version = doc.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise KBError(
            f"knowledge base {str(path)!r}: field 'schema_version' is missing or not an integer",
            hint=hint,
        )
    if version > SCHEMA_VERSION:
        raise KBError(
            f"knowledge base {str(path)!r} has schema_version {version}, newer than this "
            f"moonpin understands ({SCHEMA_VERSION})",
            hint="upgrade moonpin (`pip install -U moonpin`), or " + hint,
        )
    if version < SCHEMA_VERSION and version not in READABLE_SCHEMAS:
        raise KBError(
            f"knowledge base {str(path)!r} has schema_version {version}; this moonpin "
            f"reads {', '.join(str(v) for v in sorted(READABLE_SCHEMAS))}",
            hint=hint,
        )
    try:
        if version < SCHEMA_VERSION:  # only optional fields were added since: read as new
            doc["schema_version"] = SCHEMA_VERSION
            kb = KnowledgeBase.model_validate_json(json.dumps(doc))
        else:
            kb = KnowledgeBase.model_validate_json(raw)
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise KBError(
            f"knowledge base {str(path)!r}: field {field!r}: {first['msg']} "
            f"({e.error_count()} error(s))",
            hint=hint,
        ) from e
    _check_versions(kb, path, hint)
    return kb


def _check_versions(kb: KnowledgeBase, path: Path, hint: str) -> None:
    """Every release version is PEP 440 (the graph and every query parse them)."""
    from packaging.version import InvalidVersion, Version

    fields: list[tuple[str, str]] = []
    for kind in ("sglang", "mooncake", "torch"):
        fields += [(f"{kind}.{i}.version", r.version) for i, r in enumerate(getattr(kb, kind))]
    fields += [(f"torch_versions.{i}", v) for i, v in enumerate(kb.torch_versions)]
    for field, value in fields:
        try:
            Version(value)
        except (InvalidVersion, ValueError) as e:  # ValueError: past int()'s 4,300 digits
            shown = value if len(value) <= 80 else value[:80] + f"... ({len(value)} characters)"
            raise KBError(f"knowledge base {str(path)!r}: field {field!r}: {shown!r} is not a "
                          "PEP 440 version", hint=hint) from e


def scrape_kb_path() -> Path:
    """The KB ``moonpin scrape`` writes when none is named
    (:func:`moonpin.kb.paths.scrape_kb_file`):
    on an installed moonpin the user KB, never the copy inside site-packages."""
    return Path(scrape_kb_file())


def inside_package(path: Path) -> bool:
    """Whether ``path`` lies inside moonpin's own installed ``kb`` package (the shipped KB
    of a wheel install), where nothing is ever written."""
    here = Path(__file__).resolve().parent
    try:
        where = path.resolve(strict=False)
    except (OSError, RuntimeError):  # a symlink loop: not ours to write either way
        return False
    return (here / "data") in (where, *where.parents)


def _refuse_package(path: Path) -> None:
    if inside_package(path):
        raise KBError(f"{str(path)!r} is the knowledge base installed with moonpin; moonpin "
                      "never writes inside its installed package",
                      hint=f"`moonpin scrape` writes the user KB ({user_kb_file()}) when no "
                           "--kb is given; or pass --kb PATH of a file you own")


def dumps(kb: KnowledgeBase) -> bytes:
    """Serialise deterministically (stable diffs when the KB is committed)."""
    return kb.model_dump_json(indent=1).encode() + b"\n"


def save(kb: KnowledgeBase, path: Path) -> None:
    """Write atomically: the old file survives whole until the new one is complete.

    Callers that read-modify-write hold :func:`kb_lock` around the whole cycle.
    """
    _refuse_package(path)
    write_atomic(path, dumps(kb), what="knowledge base")


@contextlib.contextmanager
def kb_lock(path: Path, *, timeout: float = 30.0) -> Iterator[None]:
    """Hold ``<kb>.lock`` exclusively; wait up to ``timeout`` seconds, then say who holds it."""
    import fcntl  # POSIX only; moonpin scrapes on Linux hosts

    _refuse_package(path)
    lock_path = path.with_name(path.name + ".lock")
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        what = ("is a directory" if e.errno == errno.EISDIR
                else "is a symlink" if e.errno == errno.ELOOP
                else f"cannot be made: {e.strerror or type(e).__name__}")
        raise WriteFailed(str(lock_path), what, what="lock file of the knowledge base",
                          errno=e.errno or 0,
                          hint=f"the KB's folder {str(lock_path.parent)!r} must be writable "
                               f"and {lock_path.name!r} a regular file (remove it if it is "
                               "not)") from e
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
                    raise KBError(
                        f"knowledge base {str(path)!r} is locked by another scrape "
                        f"(pid {holder}) for more than {timeout:.0f}s",
                        hint=f"wait for it to finish, or remove {str(lock_path)!r} "
                        "if that process is gone",
                    ) from e
                time.sleep(0.1)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # closing releases the flock
