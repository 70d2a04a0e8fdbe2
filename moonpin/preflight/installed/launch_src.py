"""The installed SGLang's own launch-argument rules, read from its sources as the scrape reads
a wheel's (:func:`moonpin.readers.launch.server_args.launch_record_from`), for an SGLang the
knowledge base has no record of, or one installed editable from a checkout (whose files may
be ahead of the release its version names): what that installation's parser accepts and its
hooks refuse, not what a release of the same name did.

Read once per version of the files: the record is kept in the file-facts memo under the
stamps of every member, so a warm start stats ~15 files and imports no reader. Only ``os``
at import.
"""

from __future__ import annotations

import os
import zlib

from moonpin.kb.cache import facts_memo
from moonpin.preflight.access.confined import NOWHERE, Confined

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = ["installed_launch"]


def _members(names: list[str]) -> list[str]:
    """The wheel-relative members (``sglang/srt/...``) the launch record is read from, of
    the module files the importer loads."""
    from moonpin.readers.launch import server_args as sa

    return sa.launch_members(names)


def _stamps(files: Mapping[str, str], names: list[str]) -> str:
    parts = []
    for n in names:
        try:
            st = os.stat(files[n])
            parts.append(f"{n}\0{files[n]}\0{st.st_size}\0{st.st_mtime_ns}")
        except (OSError, KeyError):
            parts.append(f"{n}\0-")
    return "\0\0".join(parts)


def _record(files: Mapping[str, str], names: list[str], within: Confined
            ) -> dict[str, Any] | None:
    from moonpin.preflight.installed.image_facts import read_bytes
    from moonpin.readers.launch import server_args as sa

    texts: dict[str, bytes] = {}
    for n in names:
        try:
            texts[n] = read_bytes(files[n], what="SGLang source", within=within)
        except (OSError, KeyError):
            continue
    if not texts:
        return None
    rec = sa.launch_record_from(texts)
    return rec.model_dump(mode="json") if rec is not None else None


def _is_names(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(n, str) for n in v)


def _is_record(v: Any) -> bool:
    return v is None or isinstance(v, dict)


def installed_launch(files: Mapping[str, str], within: Confined = NOWHERE
                     ) -> dict[str, Any] | None:
    """The launch-rules record (the KB's JSON shape) of an installed SGLang, from the
    module files ``import sglang.<x>`` loads (``files``: ``sglang/srt/server_args.py`` -> the
    file, :class:`moonpin.preflight.pyimport.importer.Sources`); None when it has no
    ``server_args.py`` or no elastic-EP rules."""
    server_args = files.get("sglang/srt/server_args.py")
    if server_args is None or not os.path.isfile(server_args):
        return None
    listing = sorted(n for n in files if n.startswith("sglang/srt/"))
    memo = facts_memo()
    try:
        digest = zlib.crc32("\0".join(listing).encode("utf-8", "replace"))
        names = memo.get(f"launch-members-v2\0{len(listing)}\0{digest}",
                         server_args, lambda: _members(listing), _is_names,
                         within=within.root)
        got = memo.get(f"launch-src-v2\0{_stamps(files, names)}", server_args,
                       lambda: _record(files, names, within), _is_record, within=within.root)
    except OSError:
        return None
    return got if isinstance(got, dict) else None
