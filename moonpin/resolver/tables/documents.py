"""The KB-wide documents beside it: its facts, summary, names, torch facts, a release's show.

Each is a stamped document (:func:`.reading.read_stamped`), read once
a process, None when missing, stale, damaged or of another shape (the caller then reads the
KB or its facts itself).
"""

from __future__ import annotations

import os

from moonpin.resolver.tables.reading import folder, read_once, read_stamped, strs, table_name

TYPE_CHECKING = False
if TYPE_CHECKING:  # the runtime check imports this module: no `re`, `json` or `pathlib` here
    from typing import Any

    from moonpin.kb.facts import Facts, Summary

__all__ = [
    "FACTS_NAME",
    "KB_MAX_AGE_DAYS",
    "NAMES_NAME",
    "SUMMARY_NAME",
    "TORCH_NAME",
    "age_note",
    "facts_file",
    "load_facts",
    "load_show",
    "load_summary",
    "load_torch",
    "names",
    "names_of",
    "release_names",
    "show_name",
    "summary",
]


#: The derived facts file: the part of the KB a query reads (``moonpin.kb.facts``).
FACTS_NAME = "_facts.json"


def facts_file(kb_path: str | os.PathLike[str]) -> str:
    """Where the KB's derived facts are (``resolved/_facts.json`` beside it)."""
    return os.path.join(folder(kb_path), FACTS_NAME)


def load_facts(kb_path: str | os.PathLike[str]) -> Facts | None:
    """The KB's facts from ``resolved/_facts.json`` (no pydantic); None when that file is
    missing, stale, damaged or of another shape (then the caller reads the KB itself)."""
    found: Facts | None = read_once(kb_path, FACTS_NAME, lambda: _load_facts(kb_path))
    return found


def _load_facts(kb_path: str | os.PathLike[str]) -> Facts | None:
    import gc

    from moonpin.kb.facts import FactsError, from_json

    # Reading makes some 60,000 objects, none of them in a cycle: the collector's passes
    # over them (a third of the time) find nothing to free.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return from_json(read_stamped(kb_path, FACTS_NAME))
    except (OSError, ValueError, FactsError, RecursionError):
        return None
    finally:
        if enabled:
            gc.enable()


SUMMARY_NAME = "_summary.json"

def load_summary(kb_path: str | os.PathLike[str]) -> Summary | None:
    """The KB's :class:`moonpin.kb.facts.Summary` from ``resolved/_summary.json``; None when it
    is missing, stale, damaged or of another shape (then the caller reads the facts)."""
    def read() -> Summary | None:
        from moonpin.kb.facts import FactsError, summary_from_json

        try:
            return summary_from_json(read_stamped(kb_path, SUMMARY_NAME))
        except (OSError, ValueError, FactsError, RecursionError):
            return None
    found: Summary | None = read_once(kb_path, SUMMARY_NAME, read)
    return found


def summary(kb_path: str | os.PathLike[str]) -> Summary | None:
    """The KB's summary: from its document, else from its facts; None when neither is
    there (the caller reads the KB itself)."""
    found = load_summary(kb_path)
    if found is None:
        from moonpin.kb.facts import summary_of

        facts = load_facts(kb_path)
        found = summary_of(facts) if facts is not None else None
    return found


#: The names a KB holds, as users' input is read against (:func:`names`).
NAMES_NAME = "_names.json"

def _pep440(versions: Any) -> bool:
    """Each of ``versions`` is a PEP 440 version (the common shapes by a pattern, the rest
    asked of packaging), as the summary's reader holds its own."""
    import re

    plain = re.compile(r"\d{1,30}(?:\.\d{1,30}){0,10}(?:(?:a|b|rc)\d{1,30})?"
                       r"(?:\.post\d{1,30})?(?:\.dev\d{1,30})?").fullmatch
    for v in versions:
        if type(v) is not str:
            return False
        if plain(v) is None:
            from packaging.version import InvalidVersion, Version

            try:
                Version(v)
            except (InvalidVersion, ValueError):
                return False
    return True


def _valid_names(doc: Any) -> bool:
    if type(doc) is not dict:
        return False
    lists: list[Any] = [doc.get("index"), doc.get("every"), doc.get("dists")]
    pools: list[Any] = [doc.get("mooncake"), doc.get("native"),
                        *([doc["mooncake_read"]] if "mooncake_read" in doc else [])]
    return (all(strs(x) for x in lists) and all(
        type(p) is dict and all(type(k) is str and strs(v) for k, v in p.items())
        for p in pools)
        and (doc.get("scraped_at") is None or type(doc.get("scraped_at")) is str)
        and all(doc.get(k) is None or strs(doc[k]) for k in ("torch", "sglang"))
        and _pep440([*doc["index"], *doc["every"], *(doc.get("torch") or ()),
                     *(doc.get("sglang") or ()),
                     *(v for p in pools for vs in p.values() for v in vs)]))


def _stamped_doc(kb_path: str | os.PathLike[str], name: str,
                 valid: Any) -> dict[str, Any] | None:
    """The stamped document ``name`` beside the KB, read once a process, when ``valid``
    holds of it; None when it is missing, stale, damaged or of another shape."""
    def read() -> dict[str, Any] | None:
        try:
            doc = read_stamped(kb_path, name)
        except (OSError, ValueError, RecursionError):
            return None
        return doc if valid(doc) else None

    found: dict[str, Any] | None = read_once(kb_path, name, read)
    return found


def names(kb_path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """:func:`names_of` the KB: from ``resolved/_names.json`` (no facts module, no typed
    summary: what the reading of users' input and the age note need), else from its
    summary; None when neither is there (the caller reads the KB itself). The document
    also holds ``torch``, every torch release the KB lists (its ``torch_versions``), and
    ``sglang``, the version of each SGLang record it holds (``every`` less the releases
    not read), which the summary only counts or types, and ``mooncake_read``
    (:func:`names_of`): a caller falls back to the summary or the facts without them (a
    document written before them)."""
    found = _stamped_doc(kb_path, NAMES_NAME, _valid_names)
    if found is None:
        s = summary(kb_path)
        found = names_of(s) if s is not None else None
    return found


def names_of(s: Summary) -> dict[str, Any]:
    """:func:`release_names`, with ``dists`` (the mooncake distributions of the releases
    read), ``mooncake_read`` (each one's releases read, as the summary lists them: the
    unread ones left out) and ``scraped_at`` (the scrape's time, ISO 8601, None when
    unknown)."""
    when = s.scrape.scraped_at
    read: dict[str, list[str]] = {}
    for m in s.mooncake:
        read.setdefault(m.dist, []).append(m.version)
    return {**release_names(s), "dists": sorted(read), "mooncake_read": read,
            "scraped_at": when.isoformat() if when is not None else None}


def release_names(s: Summary) -> dict[str, Any]:
    """The releases a KB names, as users' input is read against (``latest``, "did you
    mean"): ``index``, the SGLang releases of the index; ``every``, every SGLang version
    it names (local records and unread releases too); ``mooncake``, each distribution's
    releases (unread ones too); ``native``, each extension distribution's releases."""
    mooncake: dict[str, list[str]] = {}
    for m in s.mooncake:
        mooncake.setdefault(m.dist, []).append(m.version)
    for u in s.unread:
        if u.kind == "mooncake":
            mooncake.setdefault(u.name, []).append(u.version)
    native: dict[str, list[str]] = {}
    for n in s.native:
        native.setdefault(n.dist, []).append(n.version)
    return {"index": [r.version for r in s.sglang if r.source == "index"],
            "every": [r.version for r in s.sglang]
            + [u.version for u in s.unread if u.kind == "sglang"],
            "mooncake": mooncake, "native": native}


#: The torch facts a KB holds (:func:`load_torch`).
TORCH_NAME = "_torch.json"


def _valid_torch(doc: Any) -> bool:
    """The shape ``moonpin.resolver.tables.writer`` writes ``_torch.json`` in."""
    if type(doc) is not dict:
        return False
    torch, sglang, builds = doc.get("torch"), doc.get("sglang"), doc.get("builds")
    return (type(torch) is list and all(
                type(t) is dict and type(t.get("version")) is str
                and type(t.get("variants")) is list and all(
                    type(v) is list and len(v) == 4 and type(v[0]) is str
                    and (v[1] is None or type(v[1]) is int) and type(v[2]) is str
                    and type(v[3]) is str for v in t["variants"]) for t in torch)
            and type(sglang) is list and all(
                type(x) is list and len(x) == 4 and type(x[0]) is str and type(x[1]) is str
                and strs(x[2]) and type(x[3]) is list
                and all(y is None or type(y) is str for y in x[3]) for x in sglang)
            and type(builds) is dict and all(
                type(by) is dict and all(
                    type(pairs) is list and all(type(p) is list and len(p) == 2 and strs(p)
                                                for p in pairs) for pairs in by.values())
                for by in builds.values()))


def load_torch(kb_path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The KB's torch facts from ``resolved/_torch.json``: ``torch``, each torch release it read
    (``version``, ``variants``: ``[arch, CUDA major or None, evidence, wheel]`` of the index's
    wheel per platform); ``sglang``, each SGLang release a query holds (the index's record of a
    version before a local one), oldest first, as ``[version, its wheel, its torch requirement
    lines, their specifiers]``; ``builds``, per extension distribution and version, the
    ``[module, torch specifier]`` of each of its builds that names one. None when the document
    is missing, stale, damaged or of another shape (then the caller reads the facts)."""
    return _stamped_doc(kb_path, TORCH_NAME, _valid_torch)


def show_name(name: str, version: str) -> str:
    """The file of one release's ``show`` document (``_show-sglang-0.5.18.json``)."""
    return table_name("_show-", f"{name}-{version}")


def load_show(kb_path: str | os.PathLike[str], name: str, version: str,
              ) -> dict[str, Any] | None:
    """One release's ``show`` document: ``record``, its KB record as JSON (for SGLang
    without ``launch``, which is in its ``_launch-`` table; ``launch`` says whether it has
    one); None when missing, stale or damaged."""
    try:
        doc = read_stamped(kb_path, show_name(name, version))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("name") != name or doc.get("version") != version:
        return None
    return doc


#: Days after its scrape a KB is called old (``which``, ``pins``, ``check`` say so, and how
#: to refresh it); ``$MOONPIN_KB_MAX_AGE_DAYS`` sets another, 0 never.
KB_MAX_AGE_DAYS = 30


def age_note(kb_path: str | os.PathLike[str], now: float | None = None) -> str | None:
    """What to say of a KB scraped more than :data:`KB_MAX_AGE_DAYS` ago (its date, its
    age, how to refresh it); None when it is younger, or its date cannot be read."""
    import time
    from datetime import datetime

    try:
        limit = float(os.environ.get("MOONPIN_KB_MAX_AGE_DAYS", KB_MAX_AGE_DAYS))
    except ValueError:
        limit = KB_MAX_AGE_DAYS
    if limit <= 0:
        return None
    found = names(kb_path)
    said = found.get("scraped_at") if found is not None else None
    if said is None:
        return None
    try:
        when = datetime.fromisoformat(said)
    except ValueError:
        return None
    if when.tzinfo is None:
        from datetime import timezone

        when = when.replace(tzinfo=timezone.utc)
    days = ((time.time() if now is None else now) - when.timestamp()) / 86400
    if days <= limit:
        return None
    return (f"the knowledge base was scraped {when.date().isoformat()}, {int(days)} days ago "
            f"(older than {limit:g} days): releases since then are not in it; `moonpin "
            "scrape` refreshes it (it fetches only what is new)")
