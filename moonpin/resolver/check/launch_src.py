"""The installed SGLang's own launch-argument rules, read from its sources as the scrape reads
a wheel's (:func:`moonpin.readers.server_args.launch_record_from`), for an SGLang the
knowledge base has no record of, or one installed editable from a checkout (whose files may
be ahead of the release its version names): what that installation's parser accepts and its
hooks refuse, not what a release of the same name did.

Read once per version of the files: the member list is kept in the file-facts memo under the
stamp of ``server_args.py`` and its ``arg_groups/fields`` folder, the record under the stamps
of every member, so a warm start stats ~15 files and imports no reader. Only ``os`` at import.
"""

from __future__ import annotations

import os

from moonpin.kb.cache import facts_memo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["installed_launch"]


def _members(pkg: str) -> list[str]:
    """The wheel-relative members (``sglang/srt/...``) the launch record is read from."""
    from moonpin.readers import server_args as sa

    names: list[str] = []
    for rel in (sa.SERVER_ARGS, sa.CUDA_GRAPH_CONFIG, *sa.HOOKS, *sa.RESOLVING_HOOKS,
                sa.CHOICES):
        if os.path.isfile(os.path.join(pkg, rel.partition("/")[2])):
            names.append(rel)
    fields = os.path.join(pkg, sa.FIELDS.partition("/")[2])
    try:
        names += [sa.FIELDS + n for n in sorted(os.listdir(fields)) if n.endswith(".py")]
    except OSError:
        pass
    return sa.launch_members(names)


def _stamps(pkg: str, names: list[str]) -> str:
    parts = []
    for n in names:
        try:
            st = os.stat(os.path.join(pkg, n.partition("/")[2]))
            parts.append(f"{n}\0{st.st_size}\0{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{n}\0-")
    return "\0\0".join(parts)


def _record(pkg: str, names: list[str]) -> dict[str, Any] | None:
    from moonpin.readers import server_args as sa
    from moonpin.resolver.check.image_facts import read_bytes

    texts: dict[str, bytes] = {}
    for n in names:
        try:
            texts[n] = read_bytes(os.path.join(pkg, n.partition("/")[2]), what="SGLang source")
        except OSError:
            continue
    if not texts:
        return None
    rec = sa.launch_record_from(texts)
    return rec.model_dump(mode="json") if rec is not None else None


def _is_names(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(n, str) for n in v)


def _is_record(v: Any) -> bool:
    return v is None or isinstance(v, dict)


def installed_launch(pkg: str) -> dict[str, Any] | None:
    """The launch-rules record (the KB's JSON shape) of the SGLang package folder ``pkg``,
    from its own sources; None when it has no ``server_args.py`` or no elastic-EP rules."""
    server_args = os.path.join(pkg, "srt", "server_args.py")
    if not os.path.isfile(server_args):
        return None
    try:
        fields = os.stat(os.path.join(pkg, "srt", "arg_groups", "fields")).st_mtime_ns
    except OSError:
        fields = 0
    memo = facts_memo()
    try:
        names = memo.get(f"launch-members-v1\0{fields}", server_args,
                         lambda: _members(pkg), _is_names)
        got = memo.get(f"launch-src-v1\0{_stamps(pkg, names)}", server_args,
                       lambda: _record(pkg, names), _is_record)
    except OSError:
        return None
    return got if isinstance(got, dict) else None
