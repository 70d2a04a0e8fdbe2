"""``which`` of a native extension from tables resolved at ``kb resolve``, so the question
loads neither the KB's facts nor pydantic or networkx.

``resolved/_native.json`` is the index: every name a question may use (project,
distribution, import name) with the project and distributions it means, the pythons the
answer spans, the torch releases tabled, and for each SGLang release the torches it admits
and what it asks of each project (:class:`moonpin.resolver.native.SglangEdges`: its pins,
evaluated per python and platform, ``*`` when the same on all, and its launch choices'
imports). One
``resolved/_native-<project>-<torch>.json`` per project and torch holds every combination
(release, platform, python) as :func:`moonpin.resolver.native.evaluate_native` judges it
without a query's narrowing: :func:`judge` then applies the query's packages and SGLang's
edges, as the full resolver does (it answers the same way, through :func:`answer`).

A question the tables do not hold (a torch or SGLang release spelt otherwise, a python
no wheel names) is answered by the full resolver. Standard library only at import.
"""

from __future__ import annotations

import os

from moonpin.resolver import rule
from moonpin.resolver.answers import Candidate, Covered, Which

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import Any

    #: one combination: [python, arch, verdict order, score, first reason, CUDA words,
    #: wheel, notes, packages the wheel installs (None: no wheel)]
    Entry = list[Any]
    #: (release words, artifact, pins(dist, python, arch) -> lines or None, imports)
    Edges = tuple[str, str, Callable[[str, str, str], "Sequence[tuple[str, str | None]] | None"],
                  Sequence[tuple[str, str]]]

__all__ = ["INDEX", "ORDER", "answer", "entry_name", "judge", "which_fast"]

SCHEMA = 1
INDEX = "_native.json"
ORDER = {"compatible": 0, "unknown": 1, "incompatible": 2}
_VERDICTS = ("compatible", "unknown", "incompatible")


def entry_name(project: str, torch: str) -> str:
    """The file name of one project's table at one torch."""
    from moonpin.resolver.resolved import table_name

    return table_name(f"_native-{project}-", torch)


def judge(entry: Entry, dist: str, version: str, wanted: frozenset[str],
          edges: Edges | None) -> tuple[int, int, str | None]:
    """(verdict order, score, first reason) of one combination resolved without a query's
    narrowing, with the query's ``wanted`` packages and SGLang's ``edges`` (None: no
    SGLang release asked): the checks in :func:`moonpin.resolver.native.evaluate_native`'s
    order (installable, SGLang's edges, wheel, module present, the rest)."""
    python, arch, verdict, score, reason, _, wheel, _, packages = entry
    if reason is not None and reason.startswith("installable:"):
        return verdict, score, reason
    said: list[tuple[bool | None, str]] = []
    if edges is not None:
        release, _, pins, imports = edges
        lines = pins(dist, python, arch)
        if lines is not None:
            d = rule.pinned_by(release, dist, version, lines)
            said.append((d.ok, "sglang's requirement: " + d.detail))
        if imports and packages is not None:
            d = rule.launch_imports(release, wheel, packages, imports)
            said.append((d.ok, "sglang's import: " + d.detail))
    ok = sum(1 for o, _ in said if o)
    bad = next((t for o, t in said if o is False), None)
    if bad is not None:
        return 2, 1 + ok, bad
    if packages is not None and wanted:
        d = rule.provides(wheel, packages, wanted)
        if d.ok is False:
            return 2, 2 + ok, "module present: " + d.detail
    if verdict == 2:
        return 2, score + ok, reason
    undecided = next((t for o, t in said if o is None), None)
    if undecided is not None:
        return 1, score + ok, undecided
    return verdict, score + ok, reason


def answer(query: dict[str, Any], releases: Iterable[tuple[str, str, Sequence[tuple[str, Entry]]]],
           wanted: frozenset[str], edges: Edges | None) -> Which:
    """The answer from each release's combinations (``(dist, version, [(torch, entry)])``,
    newest first, the combinations in the order asked): a release is compatible where one
    is, else excluded or unknown with its best combination's first reason."""
    compatible: list[Candidate] = []
    excluded: list[Candidate] = []
    unknown: list[Candidate] = []
    for dist, version, entries in releases:
        if not entries:
            continue
        judged = [(t, e, judge(e, dist, version, wanted, edges)) for t, e in entries]
        best = min(judged, key=lambda j: (j[2][0], -j[2][1]))
        entry = Candidate(version, f"{dist}=={version}", dist=dist)
        if best[2][0] == 0:
            ok = [(t, e) for t, e, j in judged if j[0] == 0]
            covers = tuple(sorted((Covered(e[0], e[1], t, e[6], e[5]) for t, e in ok),
                                  key=lambda c: (c.torch, c.arch, _minor(c.python))))
            notes = tuple(sorted({n for _, e in ok for n in e[7]}))
            compatible.append(entry._replace(wheels=covers, notes=notes))
        else:
            why = entry._replace(reason=best[2][2] or "unknown")
            (unknown if best[2][0] == 1 else excluded).append(why)
    return Which(query, tuple(compatible), tuple(excluded), tuple(unknown))


def _minor(tag: str) -> int:
    try:
        return int(tag.removeprefix("cp3").rstrip("t") or -1)
    except ValueError:
        return -1


# ----------------------------------------------------------------------- the fast path


def _strs(v: Any) -> bool:
    return type(v) is list and all(type(x) is str for x in v)


def _lines(v: Any) -> bool:
    return type(v) is list and all(
        type(x) is list and len(x) == 2 and type(x[0]) is str
        and (x[1] is None or type(x[1]) is str) for x in v)


def _valid_edges(v: Any) -> bool:
    return (type(v) is dict and type(v.get("pins", {})) is dict
            and all(type(d) is str and type(by) is dict
                    and all(type(k) is str and _lines(x) for k, x in by.items())
                    for d, by in v.get("pins", {}).items())
            and _lines(v.get("imports", [])))


def _valid_sglang(v: Any) -> bool:
    return (type(v) is dict and type(v.get("release")) is str
            and type(v.get("filename")) is str and _strs(v.get("torch"))
            and type(v.get("projects")) is dict
            and all(type(k) is str and _valid_edges(x) for k, x in v["projects"].items()))


def _valid_index(doc: dict[str, Any]) -> bool:
    names = doc.get("names")
    return (doc.get("schema_version") == SCHEMA and type(names) is dict
            and all(type(n) is list and len(n) == 2 and type(n[0]) is str and _strs(n[1])
                    for n in names.values())
            and _strs(doc.get("torch")) and _strs(doc.get("pythons"))
            and type(doc.get("sglang")) is dict
            and all(_valid_sglang(v) for v in doc["sglang"].values()))


def _valid_table(doc: dict[str, Any]) -> bool:
    strings: Any = doc.get("strings")
    releases, evals = doc.get("releases"), doc.get("evals")
    if not (doc.get("schema_version") == SCHEMA and _strs(strings) and type(releases) is list
            and all(_strs(r) and len(r) == 2 for r in releases)
            and type(doc.get("wanted")) is dict
            and all(_strs(v) for v in doc["wanted"].values())
            and type(evals) is list and len(evals) == len(releases)):
        return False
    n = len(strings)

    def ref(i: Any) -> bool:
        return i is None or (type(i) is int and 0 <= i < n)

    def refs(v: Any) -> bool:
        return type(v) is list and all(type(i) is int and 0 <= i < n for i in v)

    return all(type(rows) is list and all(
        type(e) is list and len(e) == 9 and type(e[0]) is str and type(e[1]) is str
        and e[2] in (0, 1, 2) and type(e[3]) is int and ref(e[4]) and ref(e[5])
        and ref(e[6]) and refs(e[7]) and (e[8] is None or refs(e[8])) for e in rows)
        for rows in evals)


def which_fast(kb_path: str | os.PathLike[str], what: str, *, torch: str | None,
               sglang: str | None, python: str | None, arch: str | None,
               dist: str | None) -> Which | None:
    """The answer from the resolved tables, or None when they do not hold the question
    (the full resolver then answers, and says what is wrong with a bad one)."""
    from moonpin.resolver.resolved import read_table

    try:
        index = read_table(kb_path, INDEX, valid=_valid_index)
    except (OSError, ValueError):
        return None
    named = index["names"].get(what.strip())
    if named is None:
        from moonpin.resolver.inputs import canonical_name

        named = index["names"].get(str(canonical_name(what.strip())))
    if not (isinstance(named, list) and len(named) == 2):
        return None
    project, dists = named
    if dist is not None:
        if dist not in dists:
            return None
        dists = [dist]
    edges = None
    if sglang is not None:
        s = index["sglang"].get(sglang)
        if s is None:
            return None
        edges = _edges(s, project)
    torches = [torch] if torch is not None else (
        list(index["sglang"][sglang]["torch"]) if sglang is not None else None)
    if not torches or any(t not in index["torch"] for t in torches):
        return None
    from moonpin.resolver.inputs import ARCHES, normalize_arch, normalize_python

    python, arch = normalize_python(python), normalize_arch(arch)
    if python is not None and python not in index["pythons"]:
        return None
    tables = []
    for t in torches:
        try:
            tables.append((t, read_table(kb_path, entry_name(project, t),
                                         valid=_valid_table)))
        except (OSError, ValueError):
            return None
    first = tables[0][1]
    chosen = [(i, d, v) for i, (d, v) in enumerate(first["releases"]) if d in dists]
    wanted = frozenset(p for d in dists for p in first["wanted"].get(d, ()))
    arches = [arch] if arch else list(ARCHES)
    pythons = [python] if python else list(index["pythons"])

    def entries(i: int) -> list[tuple[str, Entry]]:
        out = []
        for t, table in tables:
            rows = {(e[0], e[1]): e for e in table["evals"][i]}
            for a in arches:
                for p in pythons:
                    e = rows.get((p, a))
                    if e is not None:
                        out.append((t, _unpack(e, table["strings"])))
        return out

    query: dict[str, Any] = {"project": project, "dists": dists,
                             "torch": torches[0] if torch is not None else torches,
                             "python": python or "all", "arch": arch or "all"}
    if sglang is not None:
        query["sglang"] = sglang
    return answer(query, ((d, v, entries(i)) for i, d, v in chosen), wanted, edges)


def _unpack(e: list[Any], strings: list[str]) -> Entry:
    """A stored combination with its strings back."""
    def s(i: int | None) -> str | None:
        return None if i is None else strings[i]

    return [e[0], e[1], e[2], e[3], s(e[4]), s(e[5]), s(e[6]), [strings[n] for n in e[7]],
            None if e[8] is None else [strings[n] for n in e[8]]]


def _edges(s: dict[str, Any], project: str) -> Edges:
    """SGLang's edges to ``project`` as the index stores them."""
    mine = s.get("projects", {}).get(project, {})
    pins: dict[str, dict[str, list[list[Any]]]] = mine.get("pins", {})

    def pins_for(dist: str, python: str, arch: str) -> list[tuple[str, str | None]] | None:
        if dist not in pins:
            return None
        by = pins[dist]
        return [(line, spec) for line, spec in by.get("*", by.get(f"{python}/{arch}", ()))]

    return (s["release"], s["filename"], pins_for,
            [(p, why) for p, why in mine.get("imports", ())])
