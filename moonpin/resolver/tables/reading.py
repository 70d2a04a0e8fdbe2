"""Where the resolved tables are and how one is read: named, bounded, stamped, once a process.

``data/resolved/`` sits beside ``data/kb.json`` and is derived from it when the KB is written
(:mod:`.writer`): each table records the KB's sha256, so a stale one is ignored, and a
table is input like any other (a FIFO, a device, an oversized, deep or damaged one is
refused). The stamped documents (``_facts.json``, ``_show-*.json``, ...) carry the sha256 of
their body too. Reading needs only the standard library: the runtime check reads them.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # the runtime check imports this module: no `re`, `json` or `pathlib` here
    from pathlib import Path
    from typing import Any

__all__ = [
    "MAX_TABLE_BYTES",
    "file_sha256",
    "folder",
    "read_once",
    "read_stamped",
    "read_table",
    "read_table_now",
    "resolved_path",
    "stamped",
    "strs",
    "table_name",
]


SCHEMA = 1


def resolved_path(kb_path: str | os.PathLike[str]) -> Path:
    """The folder of per-release tables beside a KB file."""
    from pathlib import Path

    return Path(folder(kb_path))


def folder(kb_path: str | os.PathLike[str]) -> str:
    return os.path.join(os.path.dirname(os.fspath(kb_path)), "resolved")


def file_sha256(path: str | os.PathLike[str]) -> str:
    from moonpin.kb.cache import file_digest

    return file_digest(path)


#: The largest table read (the shipped KB's largest is ~60 KB; ``_sglang.json`` ~1 MB).
MAX_TABLE_BYTES = 64 * 1024 * 1024

_NAME_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.+!_-")


def table_name(prefix: str, version: str) -> str:
    """The file name of a version's table (``0.5.18.json``, ``_launch-0.5.18.json``). A
    version too long for a file name (or with a character a file name should not hold)
    gets ``<prefix><length>-<crc32>.json`` instead; the table records its version, so a
    colliding name is told apart on read."""
    name = f"{prefix}{version}.json"
    if (len(name.encode()) <= 200 and version[:1] not in ("", ".", "-")
            and all(c in _NAME_CHARS for c in version)):
        return name
    import zlib

    return f"{prefix}~{len(version)}-{zlib.crc32(version.encode()):08x}.json"


def read_table_now(kb_path: str | os.PathLike[str], name: str, *, memo: bool = False,
                valid: Any = None, sha: bool = True) -> Any:
    """The table ``name`` beside ``kb_path`` when it belongs to this KB (its ``kb_sha256``
    is the KB's) and has the shape ``valid(doc)`` expects; raises OSError/ValueError
    otherwise (a FIFO, a device, an oversized, deep or damaged table included: derived
    files are input like any other). ``memo``: keep the parsed document in
    :func:`moonpin.kb.cache.facts_memo`, so a worker start skips ``json``. ``sha=False``:
    the caller compares the table's ``schema_version`` and ``kb_sha256`` itself."""
    path = os.path.join(folder(kb_path), name)

    def parse() -> Any:
        from moonpin.kb.files import loads_json, read_regular

        return loads_json(read_regular(path, cap=MAX_TABLE_BYTES, what="resolved table"))

    def fits(doc: Any) -> bool:
        return isinstance(doc, dict) and (valid is None or bool(valid(doc)))

    if memo:
        from moonpin.kb.cache import facts_memo

        doc = facts_memo().get("json", path, parse, fits)
        fitting = fits(doc)
    else:
        doc = parse()
        # the verdict on the shape, kept against the file's stamp (each table a query
        # reads costs its validation ~0.5 ms)
        fitting = isinstance(doc, dict) and (valid is None or _remembered(
            path, f"valid\0{getattr(valid, '__name__', '')}", lambda: bool(valid(doc)),
            _is_bool))
    if not fitting:
        raise ValueError(f"{path}: not a resolved table of this moonpin")
    if sha and (doc.get("schema_version") != SCHEMA
                or doc.get("kb_sha256") != file_sha256(kb_path)):
        raise ValueError(f"{path} does not belong to {kb_path}")
    return doc


def read_table(kb_path: str | os.PathLike[str], name: str, *, valid: Any = None) -> Any:
    """The derived table ``name`` beside ``kb_path`` when it is this KB's and has the shape
    ``valid(doc)`` expects; raises OSError/ValueError otherwise. Read once a process while
    neither file changes (``constraints`` asks the extensions' index once per distribution):
    the document is shared, its readers never change it."""
    return read_once(kb_path, name, lambda: read_table_now(kb_path, name, valid=valid))


def strs(v: Any) -> bool:
    """A list of strings: the shape checks' commonest test (:mod:`.per_release`, :mod:`.native`,
    :mod:`.documents`)."""
    return type(v) is list and all(type(x) is str for x in v)


# ---------------------------------------------------------------- stamped documents
# ``_facts.json`` and the ``_show-*.json`` documents are written as one JSON header line
# (schema, the KB's sha256, the sha256 of the rest) and the body: a reader believes a body
# only when it hashes to its stamp, so a damaged byte anywhere makes the file ignored (a
# shape check alone would pass a changed name or number).


def stamped(body: Any, kb_sha256: str) -> bytes:
    import json

    from moonpin.kb.files import sha256_hex

    data = json.dumps(body, separators=(",", ":")).encode()
    head = {"schema_version": SCHEMA, "kb_sha256": kb_sha256, "body_sha256": sha256_hex(data)}
    return json.dumps(head).encode() + b"\n" + data


def _remembered(path: str, kind: str, compute: Any, valid: Any) -> Any:
    """``compute()``, a fact of the file at ``path`` as read now, remembered in
    :func:`moonpin.kb.cache.facts_memo` against its stamp (size and mtime, as Python keeps
    bytecode), the memo written at once when it learned it."""
    from moonpin.kb.cache import facts_memo

    memo = facts_memo()
    computed = []

    def work() -> Any:
        computed.append(True)
        return compute()

    try:
        value = memo.get(kind, path, work, valid)
    except OSError:  # no stamp: the fact as computed now
        return compute()
    if computed:
        memo.flush()
    return value


def _is_sha256(value: Any) -> bool:
    return type(value) is str and len(value) == 64


def _is_bool(value: Any) -> bool:
    return type(value) is bool


def read_stamped(kb_path: str | os.PathLike[str], name: str) -> Any:
    """The body of the stamped document ``name`` beside ``kb_path``; ValueError/OSError when
    it is missing, another KB's, another moonpin's, or damaged."""
    from moonpin.kb.files import loads_json, read_regular, sha256_hex

    path = os.path.join(folder(kb_path), name)
    raw = read_regular(path, cap=MAX_TABLE_BYTES, what="resolved table")
    head_bytes, sep, data = raw.partition(b"\n")
    head = loads_json(head_bytes) if sep else None
    if not isinstance(head, dict) or head.get("schema_version") != SCHEMA:
        raise ValueError(f"{path}: not a resolved document of this moonpin")
    if head.get("body_sha256") != _remembered(path, "body-sha256", lambda: sha256_hex(data),
                                              _is_sha256):
        raise ValueError(f"{path}: damaged (its body does not hash to its stamp)")
    if head.get("kb_sha256") != file_sha256(kb_path):
        raise ValueError(f"{path} does not belong to {kb_path}")
    return loads_json(data)


#: Documents read in this process, by name, with the stat of the files they came from (a
#: command that spells the user's input and then answers reads each once).
_READ: dict[str, tuple[tuple[object, ...], Any]] = {}


def _stat_key(*paths: str) -> tuple[object, ...] | None:
    try:
        return tuple((p, st.st_ino, st.st_size, st.st_mtime_ns)
                     for p in paths for st in (os.stat(p),))
    except OSError:
        return None


def read_once(kb_path: str | os.PathLike[str], name: str, read: Any) -> Any:
    """``read()``, the document ``name`` beside ``kb_path``, remembered while neither file
    changes (a None is not remembered: a missing document may be written meanwhile)."""
    key = _stat_key(os.fspath(kb_path), os.path.join(folder(kb_path), name))
    hit = _READ.get(name)
    if key is not None and hit is not None and hit[0] == key:
        return hit[1]
    found = read()
    if found is not None and key is not None:
        _READ[name] = (key, found)
    return found
