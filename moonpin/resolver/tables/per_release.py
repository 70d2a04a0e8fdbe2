"""Each SGLang release's tables: mooncake's combinations, requirements, launch rules, explain, fits.

``data/resolved/<sglang version>.json`` holds, for every SGLang release that imports a
mooncake process-group module, every evaluated combination (mooncake release, torch from
the release's own requirement, python, platform) with its verdict and first reason; one
file per SGLang release so a query parses only the few kilobytes it needs. Loading it needs
only the standard library, so ``moonpin which mooncake`` and the runtime check's ``fix:``
line start fast (:func:`fixes_for`); anything it does not hold (an explicit ``--torch``, a
release without a process-group module) goes to the full resolver in
``moonpin.resolver.query``. Beside each, ``_explain-<sglang version>.json`` holds every
check of those combinations, so ``moonpin explain`` of the release answers from it too
(:func:`load_explain`); ``_fits-<dist>-<version>.json`` a mooncake release's verdicts
(:func:`load_fits`), ``_stacks.json`` the stacks' table (:func:`load_stacks`).
"""

from __future__ import annotations

import os

from moonpin.resolver.tables.reading import (
    SCHEMA,
    file_sha256,
    folder,
    read_table_now,
    strs,
    table_name,
)
from moonpin.resolver.tables.torch_labels import cuda_assumed, cuda_fits, label_class, torch_label

TYPE_CHECKING = False
if TYPE_CHECKING:  # the runtime check imports this module: no `re`, `json` or `pathlib` here
    from collections.abc import Iterator
    from typing import Any

__all__ = [
    "MARKS",
    "ORDER",
    "STACKS_NAME",
    "Explained",
    "Fits",
    "Resolved",
    "expand",
    "fits_name",
    "fix_for",
    "fixes_for",
    "load",
    "load_explain",
    "load_fits",
    "load_launch",
    "load_requirement",
    "load_requirements",
    "load_stacks",
    "valid_launch",
]


ORDER = {"compatible": 0, "unknown": 1, "incompatible": 2}
_VERDICTS = ("compatible", "unknown", "incompatible")


# ---------------------------------------------------------------- shape checks
# Each says whether a document read back has exactly the shape ``build`` writes, so that a
# damaged or hand-edited table is ignored (the caller then asks the full resolver) instead
# of failing deep inside a query or the check.


def _int(v: Any) -> bool:
    return type(v) is int


def _opt_index(v: Any, n: int) -> bool:
    return v is None or (type(v) is int and 0 <= v < n)


def _valid_meta(m: Any) -> bool:
    return (type(m) is dict and (m.get("module") is None or type(m.get("module")) is str)
            and all(strs(m.get(k)) for k in ("names", "backends", "torch")))


def _valid_release_table(doc: dict[str, Any]) -> bool:
    strings: Any = doc.get("strings")
    releases, tags = doc.get("releases"), doc.get("release_tags")
    sglang, rows, unread = doc.get("sglang"), doc.get("rows"), doc.get("unread")
    if not (strs(strings) and type(releases) is list and type(tags) is list
            and type(sglang) is dict and type(rows) is dict and type(unread) is list):
        return False
    n, nr = len(strings), len(releases)
    if not all(type(r) is list and len(r) == 2 and strs(r) for r in releases):
        return False
    if len(tags) != nr or not all(type(t) is list and len(t) == 2 and strs(t[0])
                                  and strs(t[1]) for t in tags):
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
            and type(g[1]) is str and strs(g[2]) for g in groups)
        for groups in per.values()) for per in labels["torch"].values())


def _valid_feature(f: Any) -> bool:
    return (type(f) is dict and type(f.get("module")) is str and strs(f.get("names"))
            and type(f.get("feature")) is str and type(f.get("optional")) is bool
            and type(f.get("member")) is str and type(f.get("line")) is int)


def _valid_requirements(doc: dict[str, Any]) -> bool:
    table = doc.get("sglang")
    return type(table) is dict and all(_valid_requirement(m) for m in table.values())


def _valid_requirement(m: Any) -> bool:
    """One release's entry of ``_sglang.json``."""
    return (_valid_meta(m) and strs(m.get("optional_names"))
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
        if not any((k is None and v is None) or (k == "strs" and strs(v))
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
    if rec.get("option_names") is not None and not strs(rec.get("option_names")):
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
        table = Resolved(read_table_now(kb_path, table_name("", sglang),
                                     valid=_valid_release_table))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return table if table.has(sglang) else None


def load_requirements(kb_path: str | os.PathLike[str]) -> dict[str, dict[str, Any]] | None:
    """Every SGLang release's process-group requirement (module, names, optional_names,
    backends) from ``resolved/_sglang.json``; None when missing, damaged or stale. The
    runtime check reads this instead of parsing the whole KB at every worker start."""
    try:
        return dict(read_table_now(kb_path, "_sglang.json", memo=True,
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

    path = os.path.join(folder(kb_path), "_sglang.json")

    def entry() -> list[Any]:
        try:
            doc = read_table_now(kb_path, "_sglang.json", valid=_valid_requirements, sha=False)
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
        launch: dict[str, Any] = read_table_now(kb_path, table_name("_launch-", sglang),
                                             valid=fits)["launch"]
        return launch
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _valid_explain(doc: dict[str, Any]) -> bool:
    """The shape of an explain table (``moonpin.resolver.tables.writer``'s)."""
    strings: Any = doc.get("strings")
    checks, combos = doc.get("checks"), doc.get("combos")
    releases, tags = doc.get("releases"), doc.get("release_tags")
    if not (strs(strings) and type(checks) is list and type(combos) is list
            and type(releases) is list and type(tags) is list and len(tags) == len(releases)
            and strs(doc.get("torch")) and type(doc.get("tags")) is list):
        return False
    n, nc, nr = len(strings), len(checks), len(releases)
    if not (all(type(r) is list and len(r) == 2 and strs(r) for r in releases)
            and all(type(t) is list and len(t) == 2 and strs(t[0]) and strs(t[1])
                    for t in tags)
            and all(type(t) is list and len(t) == 2 and strs(t) for t in doc["tags"])):
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
        return Explained(read_table_now(kb_path, table_name("_explain-", sglang), valid=fits))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def fits_name(dist: str, version: str) -> str:
    """The file of one mooncake release's transposed table (:func:`load_fits`)."""
    return table_name("_fits-", f"{dist}-{version}")


def _valid_fits(doc: dict[str, Any]) -> bool:
    """The shape of a transposed table (``moonpin.resolver.tables.writer``'s)."""
    strings: Any = doc.get("strings")
    sglang, unread, bare = doc.get("sglang"), doc.get("unread"), doc.get("without_module")
    if not (strs(strings) and type(sglang) is list and strs(bare) and type(unread) is list
            and all(type(u) is list and len(u) == 2 and strs(u) for u in unread)
            and strs(doc.get("pythons")) and strs(doc.get("arches"))
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
        return Fits(read_table_now(kb_path, fits_name(dist, version), valid=fits))
    except (OSError, ValueError, KeyError, TypeError):
        return None


#: The stacks table: where an SGLang release's stack does not hold
#: (``moonpin.resolver.stacks.Stacks.table``).
STACKS_NAME = "_stacks.json"


def _valid_stacks(doc: dict[str, Any]) -> bool:
    broken = doc.get("broken")
    return (strs(doc.get("pythons")) and strs(doc.get("arches")) and type(broken) is dict
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
        doc: dict[str, Any] = read_table_now(kb_path, STACKS_NAME, valid=_valid_stacks)
        return doc
    except (OSError, ValueError):
        return None


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
