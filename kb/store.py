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

from kb.errors import KBError
from kb.files import write_atomic
from kb.models import READABLE_SCHEMAS, SCHEMA_VERSION, KnowledgeBase
from kb.paths import default_kb_path

__all__ = ["default_kb_path", "dumps", "kb_lock", "load", "save", "write_atomic"]

_RESCRAPE = "run `moonpin scrape --full --kb {path}` to rebuild it from the index"


def load(path: Path | None = None) -> KnowledgeBase:
    """Load and validate a KB file; every failure names the file, the field and the fix."""
    path = path or default_kb_path()
    hint = _RESCRAPE.format(path=path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError as e:
        raise KBError(f"knowledge base not found: {str(path)!r}", hint=hint) from e
    except OSError as e:
        raise KBError(f"cannot read knowledge base {str(path)!r}: {e.strerror}", hint=hint) from e
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise KBError(f"knowledge base {str(path)!r} is not valid JSON: {e}", hint=hint) from e
    if not isinstance(doc, dict):
        raise KBError(f"knowledge base {str(path)!r}: top level must be an object", hint=hint)
    version = doc.get("schema_version")
    if not isinstance(version, int):
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
            return KnowledgeBase.model_validate_json(json.dumps(doc))
        return KnowledgeBase.model_validate_json(raw)
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise KBError(
            f"knowledge base {str(path)!r}: field {field!r}: {first['msg']} "
            f"({e.error_count()} error(s))",
            hint=hint,
        ) from e


def dumps(kb: KnowledgeBase) -> bytes:
    """Serialise deterministically (stable diffs when the KB is committed)."""
    return kb.model_dump_json(indent=1).encode() + b"\n"


def save(kb: KnowledgeBase, path: Path) -> None:
    """Write atomically: the old file survives whole until the new one is complete.

    Callers that read-modify-write hold :func:`kb_lock` around the whole cycle.
    """
    write_atomic(path, dumps(kb))


@contextlib.contextmanager
def kb_lock(path: Path, *, timeout: float = 30.0) -> Iterator[None]:
    """Hold ``<kb>.lock`` exclusively; wait up to ``timeout`` seconds, then say who holds it."""
    import fcntl  # POSIX only; moonpin scrapes on Linux hosts

    lock_path = path.with_name(path.name + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
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
