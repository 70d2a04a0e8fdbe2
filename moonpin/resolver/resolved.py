"""Answers resolved when the KB is written, so a query or a worker's check loads no graph.

``data/resolved/<sglang version>.json`` sit beside ``data/kb.json`` and are derived from
it (each records the KB's sha256; a stale one is ignored); one file per SGLang release so
a query parses only the few kilobytes it needs. It holds, for every SGLang release that imports
a mooncake process-group module, every evaluated combination (mooncake release, torch
from the release's own requirement, python, platform) with its verdict and first reason.
Loading it needs only the standard library, so ``moonpin which mooncake`` and the runtime
check's ``fix:`` line start fast; anything it does not hold (an explicit ``--torch``, a
release without a process-group module) goes to the full resolver in ``moonpin.resolver.query``.
Beside each, ``_explain-<sglang version>.json`` holds every check of those combinations, so
``moonpin explain`` of the release answers from it too (:func:`load_explain`).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # the runtime check imports this module: no `re`, `json` or `pathlib` here
    from collections.abc import Iterable, Iterator
    from pathlib import Path
    from typing import Any

    from moonpin.kb.facts import Facts, Summary

__all__ = [
    "FACTS_NAME",
    "KB_MAX_AGE_DAYS",
    "MARKS",
    "MAX_TABLE_BYTES",
    "NAMES_NAME",
    "ORDER",
    "STACKS_NAME",
    "SUMMARY_NAME",
    "TORCH_NAME",
    "Explained",
    "Fits",
    "Resolved",
    "age_note",
    "cuda_assumed",
    "cuda_fits",
    "expand",
    "facts_file",
    "file_sha256",
    "fits_name",
    "fix_for",
    "fixes_for",
    "label_class",
    "label_classes",
    "label_cuda",
    "load",
    "load_explain",
    "load_facts",
    "load_fits",
    "load_launch",
    "load_requirement",
    "load_requirements",
    "load_show",
    "load_stacks",
    "load_summary",
    "load_torch",
    "names",
    "names_of",
    "read_table",
    "release_names",
    "resolved_path",
    "show_name",
    "stamped",
    "summary",
    "table_name",
    "torch_label",
    "valid_launch",
]

SCHEMA = 1
ORDER = {"compatible": 0, "unknown": 1, "incompatible": 2}
_VERDICTS = ("compatible", "unknown", "incompatible")


def resolved_path(kb_path: str | os.PathLike[str]) -> Path:
    """The folder of per-release tables beside a KB file."""
    from pathlib import Path

    return Path(_folder(kb_path))


def _folder(kb_path: str | os.PathLike[str]) -> str:
    return os.path.join(os.path.dirname(os.fspath(kb_path)), "resolved")


def facts_file(kb_path: str | os.PathLike[str]) -> str:
    """Where the KB's derived facts are (``resolved/_facts.json`` beside it)."""
    return os.path.join(_folder(kb_path), FACTS_NAME)


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


def _read_table(kb_path: str | os.PathLike[str], name: str, *, memo: bool = False,
                valid: Any = None, sha: bool = True) -> Any:
    """The table ``name`` beside ``kb_path`` when it belongs to this KB (its ``kb_sha256``
    is the KB's) and has the shape ``valid(doc)`` expects; raises OSError/ValueError
    otherwise (a FIFO, a device, an oversized, deep or damaged table included: derived
    files are input like any other). ``memo``: keep the parsed document in
    :func:`moonpin.kb.cache.facts_memo`, so a worker start skips ``json``. ``sha=False``:
    the caller compares the table's ``schema_version`` and ``kb_sha256`` itself."""
    path = os.path.join(_folder(kb_path), name)

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
    return _read_once(kb_path, name, lambda: _read_table(kb_path, name, valid=valid))


# ---------------------------------------------------------------- shape checks
# Each says whether a document read back has exactly the shape ``build`` writes, so that a
# damaged or hand-edited table is ignored (the caller then asks the full resolver) instead
# of failing deep inside a query or the check.


def _strs(v: Any) -> bool:
    return type(v) is list and all(type(x) is str for x in v)


def _int(v: Any) -> bool:
    return type(v) is int


def _opt_index(v: Any, n: int) -> bool:
    return v is None or (type(v) is int and 0 <= v < n)


def _valid_meta(m: Any) -> bool:
    return (type(m) is dict and (m.get("module") is None or type(m.get("module")) is str)
            and all(_strs(m.get(k)) for k in ("names", "backends", "torch")))


def _valid_release_table(doc: dict[str, Any]) -> bool:
    strings: Any = doc.get("strings")
    releases, tags = doc.get("releases"), doc.get("release_tags")
    sglang, rows, unread = doc.get("sglang"), doc.get("rows"), doc.get("unread")
    if not (_strs(strings) and type(releases) is list and type(tags) is list
            and type(sglang) is dict and type(rows) is dict and type(unread) is list):
        return False
    n, nr = len(strings), len(releases)
    if not all(type(r) is list and len(r) == 2 and _strs(r) for r in releases):
        return False
    if len(tags) != nr or not all(type(t) is list and len(t) == 2 and _strs(t[0])
                                  and _strs(t[1]) for t in tags):
        return False
    if not all(type(u) is dict and all(type(u.get(k)) is str
                                       for k in ("dist", "version", "reason")) for u in unread):
        return False
    if set(rows) != set(sglang) or not all(_valid_meta(m) for m in sglang.values()):
        return False
    for groups in rows.values():
        if type(groups) is not list:
            return False
        for g in groups:
            if not (type(g) is list and len(g) == 9 and _int(g[0]) and 0 <= g[0] < nr
                    and type(g[1]) is str and type(g[2]) is str and g[3] in (0, 1, 2)
                    and _int(g[3]) and _int(g[4]) and _opt_index(g[5], n)
                    and type(g[6]) is list and all(_opt_index(x, n) and x is not None
                                                   for x in g[6])
                    and _opt_index(g[7], n) and type(g[8]) is list
                    and all(type(m) is list and len(m) == 2 and type(m[0]) is str
                            and _opt_index(m[1], n) for m in g[8])):
                return False
    return "labels" not in doc or _valid_labels(doc["labels"], nr)


def _valid_labels(labels: Any, nr: int) -> bool:
    """The table's combinations at a labelled torch: majors, torch -> class -> groups."""
    if not (type(labels) is dict and type(labels.get("majors")) is list
            and all(_int(m) for m in labels["majors"]) and type(labels.get("torch")) is dict):
        return False
    return all(type(per) is dict and all(
        type(groups) is list and all(
            type(g) is list and len(g) == 3 and _int(g[0]) and 0 <= g[0] < nr
            and type(g[1]) is str and _strs(g[2]) for g in groups)
        for groups in per.values()) for per in labels["torch"].values())


def _valid_feature(f: Any) -> bool:
    return (type(f) is dict and type(f.get("module")) is str and _strs(f.get("names"))
            and type(f.get("feature")) is str and type(f.get("optional")) is bool
            and type(f.get("member")) is str and type(f.get("line")) is int)


def _valid_requirements(doc: dict[str, Any]) -> bool:
    table = doc.get("sglang")
    return type(table) is dict and all(_valid_requirement(m) for m in table.values())


def _valid_requirement(m: Any) -> bool:
    """One release's entry of ``_sglang.json``."""
    return (_valid_meta(m) and _strs(m.get("optional_names"))
            and type(m.get("features")) is dict
            and all(type(k) is str and type(v) is list and all(_valid_feature(f) for f in v)
                    for k, v in m["features"].items()))


_FLAG_FIELDS: dict[str, tuple[Any, ...]] = {
    "name": (str,), "dest": (str,), "default": (str,), "choices": ("strs", None),
    "type": (str, None), "action": (str, None), "line": (int,), "deprecated_for": ("strs",),
    "nargs": (str, None), "const": (str,), "aliases": ("strs",)}
_RULE_FIELDS: dict[str, tuple[Any, ...]] = {
    "kind": (str,), "condition": (str,), "message": (str,), "reads": ("strs",),
    "guard": (str, None), "function": (str,), "line": (int,), "path": (str,)}
_WRITE_FIELDS: dict[str, tuple[Any, ...]] = {
    "attr": (str,), "value": (str,), "guard": (str, None), "line": (int,)}


def _fields_ok(d: Any, fields: dict[str, tuple[Any, ...]]) -> bool:
    if type(d) is not dict:
        return False
    for key, kinds in fields.items():
        if key not in d:
            return False
        v = d[key]
        if not any((k is None and v is None) or (k == "strs" and _strs(v))
                   or (isinstance(k, type) and type(v) is k) for k in kinds):
            return False
    return True


def valid_launch(rec: Any) -> bool:
    """Whether ``rec`` has the shape of a ``moonpin.kb.models.LaunchRules`` dumped as JSON (what
    :func:`moonpin.resolver.args.rules.rules_from_json` reads)."""
    if type(rec) is not dict:
        return False
    flags, rules, constants = rec.get("flags"), rec.get("rules"), rec.get("constants")
    if not (type(flags) is list and type(rules) is list and type(constants) is dict):
        return False
    if not all(type(k) is str and type(v) is str for k, v in constants.items()):
        return False
    if rec.get("option_names") is not None and not _strs(rec.get("option_names")):
        return False
    if rec.get("error") is not None and type(rec.get("error")) is not str:
        return False
    if not all(_fields_ok(f, _FLAG_FIELDS) and (f.get("path") is None
                                                or type(f["path"]) is str) for f in flags):
        return False
    return all(_fields_ok(r, _RULE_FIELDS) and r["kind"] in ("assert", "raise")
               and type(r.get("writes")) is list
               and all(_fields_ok(w, _WRITE_FIELDS) for w in r["writes"]) for r in rules)


class Resolved:
    """The resolved table of one KB file."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.strings: list[str] = doc["strings"]
        self.releases: list[list[str]] = doc["releases"]
        self.sglang: dict[str, dict[str, Any]] = doc["sglang"]
        self.rows: dict[str, list[list[Any]]] = doc["rows"]
        self.release_tags: list[list[list[str]]] = doc["release_tags"]

    def has(self, sglang: str) -> bool:
        return sglang in self.rows

    def holds(self, sglang: str, torch: str | None) -> bool:
        """Whether the table answers ``which mooncake`` for this release and torch (None:
        each torch the release admits, which is what the table holds)."""
        return sglang in self.rows and (torch is None or torch in self.sglang[sglang]["torch"])

    def compatible(self, sglang: str) -> list[tuple[str, str, str, str, str]]:
        """Every compatible combination the table holds for the release: (dist, mooncake,
        torch, arch, python), in the order the full resolver judges them (release newest
        first, then torch as the release admits them, arch, python)."""
        torches = {t: i for i, t in enumerate(self.sglang[sglang]["torch"])}
        found = sorted((grp[0], torches.get(grp[1], -1), grp[2], py, grp[1])
                       for grp in self.rows[sglang] if grp[3] == 0
                       for py, _ in grp[8])
        return [(*self.releases[rel], torch_v, ar, py)  # type: ignore[misc]
                for rel, _, ar, py, torch_v in found]

    def at_label(self, sglang: str, torch: str) -> list[tuple[str, str, str, str, str]] | None:
        """:meth:`compatible` at a torch with a local label (``2.13.0+cu126``, the public
        release spelt as the table spells it): [] when the release does not admit it; None
        when the table holds no verdicts at a label (a loader reads the label itself)."""
        public, _, local = torch.partition("+")
        labels = self.doc.get("labels")
        if labels is None:
            return None
        if public not in self.sglang[sglang]["torch"]:
            return []
        cls = label_class(local, labels["majors"])
        if cls is None:  # the label says nothing of CUDA: the index's build, as tabled
            return [(d, v, torch, a, p) for d, v, t, a, p in self.compatible(sglang)
                    if t == public]
        groups = labels["torch"].get(public, {}).get(cls)
        if groups is None:
            return None
        return [(*self.releases[i], torch, a, p)  # type: ignore[misc]
                for i, a, pys in sorted(groups) for p in sorted(pys)]

    def which_mooncake(self, sglang: str, *, python: str | None = None,
                       arch: str | None = None, dist: str | None = None,
                       torch: str | None = None) -> dict[str, Any]:
        """The same answer as ``moonpin.resolver.query.which_mooncake`` (``torch``: one of the
        torch releases the table holds, see :meth:`holds`)."""
        meta = self.sglang[sglang]
        s = self.strings
        # A stored group is [release, torch, arch, verdict, score, reason, notes, cuda,
        # [[python, wheel], ...]]: the combinations that differ only in python.
        by_release: dict[int, list[list[Any]]] = {}
        for grp in self.rows[sglang]:
            rel, torch_v, ar = grp[0], grp[1], grp[2]
            if (arch and ar != arch) or (torch is not None and torch_v != torch):
                continue
            for py, wheel in grp[8]:
                if python and py != python:
                    continue
                by_release.setdefault(rel, []).append(
                    [rel, torch_v, py, ar, grp[3], grp[4], grp[5], grp[6], wheel, grp[7]])
        compatible: list[dict[str, Any]] = []
        excluded: list[dict[str, Any]] = []
        unknown: list[dict[str, Any]] = []
        unread = {(u["dist"], u["version"]) for u in self.doc["unread"]}
        for idx, (d, v) in enumerate(self.releases):
            if (dist and d != dist) or (d, v) in unread:
                continue
            rows = by_release.get(idx)
            if not rows:
                # As the full resolver says it: the first (python, platform) asked for
                # that this release has no wheel for.
                pys, ars = self.release_tags[idx]
                p0 = python or (sorted(pys)[0] if pys else None)
                a0 = arch or (sorted(ars)[0] if ars else None)
                if p0 is None or a0 is None:
                    continue
                excluded.append({"dist": d, "version": v, "requirement": f"{d}=={v}",
                                 "reason": f"wheel for python/platform: {d} {v} has no wheel "
                                           f"for {p0} on {a0}"})
                continue
            best = min(rows, key=lambda r: (r[4], -r[5]))
            entry: dict[str, Any] = {"dist": d, "version": v, "requirement": f"{d}=={v}"}
            if best[4] == 0:
                ok = [r for r in rows if r[4] == 0]
                wheels = [{"python": r[2], "arch": r[3], "torch": r[1],
                           "wheel": s[r[8]] if r[8] is not None else None,
                           "cuda": s[r[9]] if r[9] is not None else None} for r in ok]
                entry["wheels"] = sorted(wheels, key=lambda w: (w["torch"], w["arch"],
                                                                w["python"]))
                entry["notes"] = sorted({s[n] for r in ok for n in r[7]})
                compatible.append(entry)
            else:
                entry["reason"] = s[best[6]] if best[6] is not None else "unknown"
                (unknown if best[4] == 1 else excluded).append(entry)
        for u in self.doc["unread"]:
            if not dist or u["dist"] == dist:
                unknown.append(dict(u))
        return {
            "query": {"sglang": sglang, "torch": torch or list(meta["torch"]),
                      "python": python or "all",
                      "arch": arch or "all", "dist": dist or "all", "module": meta["module"],
                      "names": list(meta["names"]), "backends": list(meta["backends"])},
            "compatible": compatible,
            "excluded": excluded,
            "unknown": unknown,
            "notes": [],
        }


def load(kb_path: str | os.PathLike[str], sglang: str) -> Resolved | None:
    """The table for one SGLang release of this KB, or None when it is missing,
    unreadable, damaged or stale (then the caller asks the full resolver)."""
    try:
        table = Resolved(_read_table(kb_path, table_name("", sglang),
                                     valid=_valid_release_table))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return table if table.has(sglang) else None


def load_requirements(kb_path: str | os.PathLike[str]) -> dict[str, dict[str, Any]] | None:
    """Every SGLang release's process-group requirement (module, names, optional_names,
    backends) from ``resolved/_sglang.json``; None when missing, damaged or stale. The
    runtime check reads this instead of parsing the whole KB at every worker start."""
    try:
        return dict(_read_table(kb_path, "_sglang.json", memo=True,
                                valid=_valid_requirements)["sglang"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def load_requirement(kb_path: str | os.PathLike[str],
                     version: str) -> tuple[bool, dict[str, Any] | None]:
    """Whether :func:`load_requirements` would give a table (``resolved/_sglang.json`` of
    this KB, well formed), and ``version``'s entry in it (None: the table lacks it).

    What a worker start needs of the table, without it: the verdict on the whole table and
    the one entry are kept per release in :func:`moonpin.kb.cache.facts_memo` against the
    table's stamp, so a start neither loads nor re-validates every release's entry (~70
    KB of memo); whether the table belongs to the KB is asked afresh (the KB's sha256,
    itself kept against the KB's stamp)."""
    from moonpin.kb.cache import facts_memo

    path = os.path.join(_folder(kb_path), "_sglang.json")

    def entry() -> list[Any]:
        try:
            doc = _read_table(kb_path, "_sglang.json", valid=_valid_requirements, sha=False)
        except (OSError, ValueError, KeyError, TypeError):
            return [None, None, None]
        return [doc.get("schema_version"), doc.get("kb_sha256"), doc["sglang"].get(version)]

    try:
        got = facts_memo().get("requirement-v1\0" + version, path, entry, _valid_entry_memo)
        if got[0] != SCHEMA or got[1] != file_sha256(kb_path):
            return False, None
    except OSError:  # the table, or the KB, cannot be read: no table
        return False, None
    return True, got[2]


def _valid_entry_memo(v: Any) -> bool:
    return (type(v) is list and len(v) == 3 and (v[2] is None or _valid_requirement(v[2]))
            and (v[0] is None or type(v[0]) is int) and (v[1] is None or type(v[1]) is str))


def load_launch(kb_path: str | os.PathLike[str], sglang: str) -> dict[str, Any] | None:
    """One SGLang release's launch-rules record (``moonpin.kb.models.LaunchRules`` as JSON) from
    ``resolved/_launch-<version>.json``; None when missing, damaged or stale."""

    def fits(doc: dict[str, Any]) -> bool:
        return doc.get("sglang") == sglang and valid_launch(doc.get("launch"))

    try:
        launch: dict[str, Any] = _read_table(kb_path, table_name("_launch-", sglang),
                                             valid=fits)["launch"]
        return launch
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _valid_explain(doc: dict[str, Any]) -> bool:
    """The shape of an explain table (``moonpin.resolver.tables.writer``'s)."""
    strings: Any = doc.get("strings")
    checks, combos = doc.get("checks"), doc.get("combos")
    releases, tags = doc.get("releases"), doc.get("release_tags")
    if not (_strs(strings) and type(checks) is list and type(combos) is list
            and type(releases) is list and type(tags) is list and len(tags) == len(releases)
            and _strs(doc.get("torch")) and type(doc.get("tags")) is list):
        return False
    n, nc, nr = len(strings), len(checks), len(releases)
    if not (all(type(r) is list and len(r) == 2 and _strs(r) for r in releases)
            and all(type(t) is list and len(t) == 2 and _strs(t[0]) and _strs(t[1])
                    for t in tags)
            and all(type(t) is list and len(t) == 2 and _strs(t) for t in doc["tags"])):
        return False
    for c in checks:
        if not (type(c) is list and len(c) == 4 and _opt_index(c[0], n) and c[0] is not None
                and c[1] in (True, False, None) and type(c[1]) is not int
                and _opt_index(c[2], n) and c[2] is not None and type(c[3]) is list
                and all(_opt_index(x, n) and x is not None for x in c[3])):
            return False
    for r in combos:
        if not (type(r) is list and len(r) == 7 and _int(r[0]) and 0 <= r[0] < nr
                and type(r[1]) is str and type(r[2]) is str and type(r[3]) is str
                and _opt_index(r[4], n) and type(r[5]) is list
                and all(_opt_index(x, nc) and x is not None for x in r[5])
                and type(r[6]) is list and all(_opt_index(x, n) and x is not None
                                               for x in r[6])):
            return False
    return True


#: What an explain table writes in place of a combination's wheel, python and platform.
MARKS = ("\0w", "\0p", "\0a")


def expand(text: str, said: tuple[str | None, str, str]) -> str:
    """A text of an explain table with its :data:`MARKS` replaced by ``said``: the
    combination's (wheel, python, arch)."""
    if "\0" not in text:
        return text
    for value, mark in reversed(tuple(zip(said, MARKS, strict=True))):
        if value:
            text = text.replace(mark, value)
    return text


class Explained:
    """One SGLang release's explain table: every combination ``which mooncake`` judges
    (mooncake release, torch the release admits, platform, python), each with every check
    made and its notes, so ``explain`` answers without the KB's facts."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.sglang: str = doc["sglang"]
        self.torch: tuple[str, ...] = tuple(doc["torch"])
        #: the (python, arch) pairs of the SGLang wheel the checks cite
        self.tags: frozenset[tuple[str, str]] = frozenset(
            (p, a) for p, a in doc["tags"])
        self._strings: list[str] = doc["strings"]
        self._checks: list[list[Any]] = doc["checks"]
        self._combos: list[list[Any]] = doc["combos"]
        self._tags: list[list[list[str]]] = doc["release_tags"]
        self._release = {(d, v): i for i, (d, v) in enumerate(doc["releases"])}

    def evaluations(self, dist: str, version: str, torch: str | None, python: str | None,
                    arch: str | None) -> list[tuple[Any, ...]] | None:
        """Each combination ``moonpin.resolver.query.combos`` makes for this mooncake
        release, in its order, as ``(torch, python, arch, wheel, checks, notes)`` (a check
        ``(name, ok, detail, evidence)``); None when the table does not hold every one."""
        idx = self._release.get((dist, version))
        if idx is None:
            return None
        pys, ars = self._tags[idx]
        torches = [torch] if torch is not None else list(self.torch)
        arches = [arch] if arch else sorted(ars)
        pythons = [python] if python else sorted(pys)
        if not (torches and arches and pythons):
            return None
        s = self._strings
        rows = {(r[1], r[2], r[3]): r for r in self._combos if r[0] == idx}
        out = []
        for t in torches:
            for a in arches:
                for p in pythons:
                    r = rows.get((t, a, p))
                    if r is None:
                        return None
                    wheel = None if r[4] is None else s[r[4]]
                    said = (wheel, p, a)
                    checks = [(expand(s[c[0]], said), c[1], expand(s[c[2]], said),
                               tuple(expand(s[x], said) for x in c[3]))
                              for c in (self._checks[i] for i in r[5])]
                    out.append((t, p, a, wheel, checks, [expand(s[n], said) for n in r[6]]))
        return out


def load_explain(kb_path: str | os.PathLike[str], sglang: str) -> Explained | None:
    """One SGLang release's explain table (``resolved/_explain-<version>.json``, written
    for each release the per-release tables hold); None when missing, damaged or stale."""

    def fits(doc: dict[str, Any]) -> bool:
        return doc.get("sglang") == sglang and _valid_explain(doc)

    try:
        return Explained(_read_table(kb_path, table_name("_explain-", sglang), valid=fits))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def fits_name(dist: str, version: str) -> str:
    """The file of one mooncake release's transposed table (:func:`load_fits`)."""
    return table_name("_fits-", f"{dist}-{version}")


def _valid_fits(doc: dict[str, Any]) -> bool:
    """The shape of a transposed table (``moonpin.resolver.tables.writer``'s)."""
    strings: Any = doc.get("strings")
    sglang, unread, bare = doc.get("sglang"), doc.get("unread"), doc.get("without_module")
    if not (_strs(strings) and type(sglang) is list and _strs(bare) and type(unread) is list
            and all(type(u) is list and len(u) == 2 and _strs(u) for u in unread)
            and _strs(doc.get("pythons")) and _strs(doc.get("arches"))
            and type(doc.get("cuda_majors")) is list
            and all(type(c) is int for c in doc["cuda_majors"])):
        return False
    n = len(strings)
    for entry in sglang:
        if not (type(entry) is list and len(entry) == 3 and type(entry[0]) is str
                and type(entry[1]) is str and type(entry[2]) is list):
            return False
        for r in entry[2]:
            if not (type(r) is list and len(r) == 9 and type(r[0]) is str
                    and type(r[1]) is str and type(r[2]) is str and _opt_index(r[3], n)
                    and r[4] in (0, 1, 2) and _int(r[4]) and _int(r[5])
                    and _opt_index(r[6], n) and type(r[7]) is list
                    and all(_opt_index(x, n) and x is not None for x in r[7])
                    and _opt_index(r[8], n)):
                return False
    return True


class Fits:
    """One mooncake release's transposed table: each SGLang release that imports a
    process-group module (newest first), with every combination ``which sglang --mooncake``
    judges beside it (each torch the release admits, platform, python: those of the
    release's wheels), in the order the full resolver judges them."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.strings: list[str] = doc["strings"]
        self.pythons: list[str] = doc["pythons"]
        self.arches: list[str] = doc["arches"]
        self.unread: list[list[str]] = doc["unread"]
        self.without_module: list[str] = doc["without_module"]
        #: the CUDA majors the release's builds link, sorted
        self.cuda_majors: list[int] = doc["cuda_majors"]
        self._sglang: list[list[Any]] = doc["sglang"]

    def holds(self, python: str | None, arch: str | None) -> bool:
        """Whether the table holds the combinations of this python and platform (None:
        every one): those of the release's wheels."""
        return (python is None or python in self.pythons) and (
            arch is None or arch in self.arches)

    def sglang(self, python: str | None, arch: str | None,
               ) -> Iterator[tuple[str, str, list[tuple[Any, ...]]]]:
        """(SGLang version, its module, its combinations on this python and platform as
        ``(torch, arch, python, wheel, verdict, score, reason, notes, cuda)``), newest
        first."""
        s = self.strings

        def text(i: int | None) -> str | None:
            return None if i is None else s[i]

        for version, module, rows in self._sglang:
            yield version, module, [
                (r[0], r[1], r[2], text(r[3]), _VERDICTS[r[4]], r[5], text(r[6]),
                 tuple(s[n] for n in r[7]), text(r[8]))
                for r in rows if (arch is None or r[1] == arch)
                and (python is None or r[2] == python)]


def load_fits(kb_path: str | os.PathLike[str], dist: str, version: str) -> Fits | None:
    """The transposed table of mooncake release ``dist`` ``version`` (as the KB names it),
    ``resolved/_fits-<dist>-<version>.json``; None when missing, damaged, stale or of
    another release."""
    def fits(doc: dict[str, Any]) -> bool:
        return doc.get("mooncake") == [dist, version] and _valid_fits(doc)

    try:
        return Fits(_read_table(kb_path, fits_name(dist, version), valid=fits))
    except (OSError, ValueError, KeyError, TypeError):
        return None


#: The stacks table: where an SGLang release's stack does not hold
#: (``moonpin.resolver.stacks.Stacks.table``).
STACKS_NAME = "_stacks.json"


def _valid_stacks(doc: dict[str, Any]) -> bool:
    broken = doc.get("broken")
    return (_strs(doc.get("pythons")) and _strs(doc.get("arches")) and type(broken) is dict
            and all(type(by_torch) is dict and all(
                type(by_plat) is dict and all(
                    type(k) is str and type(v) is list and len(v) == 2
                    and v[0] in (False, None) and type(v[1]) is str
                    for k, v in by_plat.items())
                for by_plat in by_torch.values())
                for by_torch in broken.values()))


def load_stacks(kb_path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The stacks table of the KB file (``pythons``, ``arches``, ``broken``), None when
    missing, damaged or stale."""
    try:
        doc: dict[str, Any] = _read_table(kb_path, STACKS_NAME, valid=_valid_stacks)
        return doc
    except (OSError, ValueError):
        return None


#: The derived facts file: the part of the KB a query reads (``moonpin.kb.facts``).
FACTS_NAME = "_facts.json"


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


def _read_stamped(kb_path: str | os.PathLike[str], name: str) -> Any:
    """The body of the stamped document ``name`` beside ``kb_path``; ValueError/OSError when
    it is missing, another KB's, another moonpin's, or damaged."""
    from moonpin.kb.files import loads_json, read_regular, sha256_hex

    path = os.path.join(_folder(kb_path), name)
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


def _read_once(kb_path: str | os.PathLike[str], name: str, read: Any) -> Any:
    """``read()``, the document ``name`` beside ``kb_path``, remembered while neither file
    changes (a None is not remembered: a missing document may be written meanwhile)."""
    key = _stat_key(os.fspath(kb_path), os.path.join(_folder(kb_path), name))
    hit = _READ.get(name)
    if key is not None and hit is not None and hit[0] == key:
        return hit[1]
    found = read()
    if found is not None and key is not None:
        _READ[name] = (key, found)
    return found


def load_facts(kb_path: str | os.PathLike[str]) -> Facts | None:
    """The KB's facts from ``resolved/_facts.json`` (no pydantic); None when that file is
    missing, stale, damaged or of another shape (then the caller reads the KB itself)."""
    found: Facts | None = _read_once(kb_path, FACTS_NAME, lambda: _load_facts(kb_path))
    return found


def _load_facts(kb_path: str | os.PathLike[str]) -> Facts | None:
    import gc

    from moonpin.kb.facts import FactsError, from_json

    # Reading makes some 60,000 objects, none of them in a cycle: the collector's passes
    # over them (a third of the time) find nothing to free.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return from_json(_read_stamped(kb_path, FACTS_NAME))
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
            return summary_from_json(_read_stamped(kb_path, SUMMARY_NAME))
        except (OSError, ValueError, FactsError, RecursionError):
            return None
    found: Summary | None = _read_once(kb_path, SUMMARY_NAME, read)
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
    return (all(_strs(x) for x in lists) and all(
        type(p) is dict and all(type(k) is str and _strs(v) for k, v in p.items())
        for p in pools)
        and (doc.get("scraped_at") is None or type(doc.get("scraped_at")) is str)
        and all(doc.get(k) is None or _strs(doc[k]) for k in ("torch", "sglang"))
        and _pep440([*doc["index"], *doc["every"], *(doc.get("torch") or ()),
                     *(doc.get("sglang") or ()),
                     *(v for p in pools for vs in p.values() for v in vs)]))


def _stamped_doc(kb_path: str | os.PathLike[str], name: str,
                 valid: Any) -> dict[str, Any] | None:
    """The stamped document ``name`` beside the KB, read once a process, when ``valid``
    holds of it; None when it is missing, stale, damaged or of another shape."""
    def read() -> dict[str, Any] | None:
        try:
            doc = _read_stamped(kb_path, name)
        except (OSError, ValueError, RecursionError):
            return None
        return doc if valid(doc) else None

    found: dict[str, Any] | None = _read_once(kb_path, name, read)
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
                and _strs(x[2]) and type(x[3]) is list
                and all(y is None or type(y) is str for y in x[3]) for x in sglang)
            and type(builds) is dict and all(
                type(by) is dict and all(
                    type(pairs) is list and all(type(p) is list and len(p) == 2 and _strs(p)
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
        doc = _read_stamped(kb_path, show_name(name, version))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("name") != name or doc.get("version") != version:
        return None
    return doc


def fix_for(sglang: str, torch: str, python: str, arch: str, *,
            kb_path: str | os.PathLike[str] | None = None) -> list[str]:
    """Requirement lines of the mooncake releases compatible with this set, newest first.

    [] when the table does not know (a stale or missing table, an SGLang release it does
    not hold, a torch other than the one the release requires).
    """
    return [req for req, _ in fixes_for(sglang, torch, python, arch, kb_path=kb_path)]


def fixes_for(sglang: str, torch: str, python: str, arch: str, *,
              kb_path: str | os.PathLike[str] | None = None) -> list[tuple[str, str | None]]:
    """:func:`fix_for`, each requirement with its note (a release that compiles at first
    import says what it needs; prebuilt releases, which come first, have None)."""
    if kb_path is None:
        from moonpin.kb.paths import default_kb_path

        kb_path = default_kb_path()
    table = load(kb_path, sglang)
    if table is None or not table.has(sglang):
        return []
    from packaging.version import Version

    label = torch_label(torch)
    if label is None:
        return []  # +cpu, +rocm…: no prebuilt CUDA mooncake fits
    public, major = label
    answer = table.which_mooncake(sglang, python=python, arch=arch)
    if not cuda_assumed([w["cuda"] for e in (*answer["compatible"], *answer["excluded"])
                         for w in e.get("wheels", ())], major):
        return []  # the table resolved the index's other CUDA variant: ask the resolver
    plain: list[tuple[str, str | None]] = []
    noted: list[tuple[str, str | None]] = []
    for entry in answer["compatible"]:
        fits = [w for w in entry["wheels"] if Version(w["torch"]).public == public
                and cuda_fits(w["cuda"] or "", major)]
        if fits:
            # prefer a prebuilt wheel over one that compiles at first import
            notes = entry.get("notes") or ()
            (noted if notes else plain).append(
                (entry["requirement"], "; ".join(str(n) for n in notes) or None))
    return plain + noted


def torch_label(torch: str) -> tuple[str, int | None] | None:
    """(public release, CUDA major) of an installed torch's label as the tables can answer
    for it (``2.14.1+cu130`` -> ``("2.14.1", 13)``; ``2.14.1`` -> ``("2.14.1", None)``: the
    index's own build); None for a label the tables do not resolve (not a version, a local
    part other than ``cuNNN``: ``+cpu``, ``+rocm6.4``). The tables assumed the index's
    variant of each torch; a local label names another."""

    from packaging.version import InvalidVersion, Version

    try:
        tv = Version(torch)
    except InvalidVersion:
        return None
    said = label_cuda(tv.local) if tv.local else None
    if tv.local and (said is None or said[0] is None):
        return None
    return tv.public, said[0] if said else None


def label_cuda(local: str) -> tuple[int | None, str] | None:
    """What a torch's local label says of its CUDA: ``cu126`` -> 12 (the last digit is the
    minor: ``cu92`` is 9), ``cpu`` and ``rocm6.4`` -> None (no CUDA), each with the words
    saying so; None when the label says nothing of it (then the index's variant of the
    release is what it is)."""
    import re

    m = re.fullmatch(r"cu(\d\d+)", local)
    if m:
        return int(m.group(1)[:-1]), f"local label +{local}"
    if local == "cpu":
        return None, "local label +cpu (a CPU build)"
    if local.startswith("rocm"):
        return None, f"local label +{local} (ROCm, no CUDA)"
    return None


def label_class(local: str, majors: Iterable[int]) -> str | None:
    """The class of torch builds a local label is judged as, among the CUDA ``majors`` some
    extension build links: ``cu<N>`` for one of them, ``cu`` for any other CUDA major (no
    build links it: each is judged alike), ``none`` for a build without CUDA; None when the
    label says nothing of CUDA (the index's variant). Verdicts differ between classes only
    (the rule compares the majors a build links with torch's); see
    :meth:`Resolved.at_label`."""
    said = label_cuda(local)
    if said is None:
        return None
    if said[0] is None:
        return "none"
    return f"cu{said[0]}" if said[0] in set(majors) else "cu"


def label_classes(majors: Iterable[int]) -> list[tuple[str, str]]:
    """Each class of :func:`label_class` with a local label of it (``("cu12", "cu120")``)."""
    ms = sorted(set(majors))
    return ([(f"cu{m}", f"cu{m}0") for m in ms]
            + [("cu", f"cu{(ms[-1] if ms else 0) + 1}0"), ("none", "cpu")])


def cuda_assumed(words: Iterable[str | None], major: int | None) -> bool:
    """Whether the tables' ``CUDA major`` checks (``words``: their details, ``... torch
    2.14.1 is CUDA 13 (...)``) were made for a torch of CUDA ``major`` (None: the index's own
    build, always): False when they name only another CUDA (the resolver must answer)."""
    import re

    if major is None:
        return True
    assumed = {int(m.group(1)) for w in words
               if (m := re.search(r"torch \S+ is CUDA (\d+)", w or ""))}
    return not assumed or major in assumed


def cuda_fits(words: str | None, major: int | None) -> bool:
    """Whether a compatible wheel's ``CUDA major`` words say its build links CUDA ``major``
    (or is built at import against torch's; None words: it links none)."""
    return (major is None or words is None or f"build links CUDA {major}," in words
            or "built at import" in words)


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

