"""The native extensions' tables: ``which <extension>`` and ``explain`` of a stack read from them.

They are resolved at ``kb resolve`` (:mod:`.writer`), so the question loads neither the KB's
facts nor pydantic or networkx.

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

Beside them, ``resolved/_ext-<dist>-<version>.json`` per release: every check it is
judged by at each torch and platform, so ``explain`` of a stack naming extensions answers
from the tables too (:func:`explain_fast`).

A question the tables do not hold (a torch or SGLang release spelt otherwise, a python
no wheel names) is answered by the full resolver. Standard library only at import.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from moonpin.resolver import rule
from moonpin.resolver.answers import Candidate, Covered, Which
from moonpin.resolver.tables.reading import strs

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

__all__ = ["COLLISION", "INDEX", "ORDER", "REQUIRES", "Fitting", "Held", "HeldVerdicts",
           "answer", "entry_name", "explain_fast", "extension_check", "fitting", "held_name",
           "held_questions", "held_releases", "held_verdicts", "judge", "locks_of",
           "on_index", "release_name", "release_packages", "release_pins", "stack_answer",
           "unloaded", "version_locks", "which_fast"]

SCHEMA = 1
INDEX = "_native.json"
#: The name of the check that two releases of a stack install one top-level package.
COLLISION = "one package, two distributions"
ORDER = {"compatible": 0, "unknown": 1, "incompatible": 2}
_VERDICTS = ("compatible", "unknown", "incompatible")


def entry_name(project: str, torch: str) -> str:
    """The file name of one project's table at one torch."""
    from moonpin.resolver.tables.reading import table_name

    return table_name(f"_native-{project}-", torch)


def judge(entry: Entry, dist: str, version: str, wanted: frozenset[str],
          edges: Edges | None, memo: dict[Any, rule.Decision] | None = None,
          ) -> tuple[int, int, str | None]:
    """(verdict order, score, first reason) of one combination resolved without a query's
    narrowing, with the query's ``wanted`` packages and SGLang's ``edges`` (None: no
    SGLang release asked): the checks in :func:`moonpin.resolver.native.evaluate_native`'s
    order (installable, SGLang's edges, wheel, module present, the rest). ``memo``: the
    decisions made already with the same ``wanted`` and ``edges`` (one answer's): a
    release's combinations, one per python, platform and torch, mostly ask the same of
    SGLang's pins, and what a wheel installs is the wheel's."""
    python, arch, verdict, score, reason, _, wheel, _, packages = entry
    if reason is not None and reason.startswith("installable:"):
        return verdict, score, reason
    said: list[tuple[bool | None, str]] = []
    if edges is not None:
        release, _, pins, imports = edges
        lines = pins(dist, python, arch)
        if lines is not None:
            d = _kept(memo, (dist, version, *lines), rule.pinned_by, release, dist, version,
                      lines)
            said.append((d.ok, "sglang's requirement: " + d.detail))
        if imports and packages is not None:
            d = _kept(memo, ("import", wheel), rule.launch_imports, release, wheel, packages,
                      imports)
            said.append((d.ok, "sglang's import: " + d.detail))
    ok = sum(1 for o, _ in said if o)
    bad = next((t for o, t in said if o is False), None)
    if bad is not None:
        return 2, 1 + ok, bad
    if packages is not None and wanted:
        d = _kept(memo, ("provides", wheel), rule.provides, wheel, packages, wanted)
        if d.ok is False:
            return 2, 2 + ok, "module present: " + d.detail
    if verdict == 2:
        return 2, score + ok, reason
    undecided = next((t for o, t in said if o is None), None)
    if undecided is not None:
        return 1, score + ok, undecided
    return verdict, score + ok, reason


def _kept(memo: dict[Any, rule.Decision] | None, key: Any,
          decide: Callable[..., rule.Decision], *args: Any) -> rule.Decision:
    """``decide(*args)``, kept in ``memo`` under ``key``."""
    d = None if memo is None else memo.get(key)
    if d is None:
        d = decide(*args)
        if memo is not None:
            memo[key] = d
    return d


def answer(query: dict[str, Any], releases: Iterable[tuple[str, str, Sequence[tuple[str, Entry]]]],
           wanted: frozenset[str], edges: Edges | None) -> Which:
    """The answer from each release's combinations (``(dist, version, [(torch, entry)])``,
    newest first, the combinations in the order asked): a release is compatible where one
    is, else excluded or unknown with its best combination's first reason."""
    compatible: list[Candidate] = []
    excluded: list[Candidate] = []
    unknown: list[Candidate] = []
    memo: dict[Any, rule.Decision] = {}  # of these edges only
    for dist, version, entries in releases:
        if not entries:
            continue
        judged = [(t, e, judge(e, dist, version, wanted, edges, memo)) for t, e in entries]
        best = _best(judged)
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


def _best(judged: Sequence[tuple[str, Entry, tuple[int, int, str | None]]],
          ) -> tuple[str, Entry, tuple[int, int, str | None]]:
    """The combination that speaks for a release among ``(torch, entry, judged)`` in the
    order asked: the best verdict, then the most checks that hold; of equal ones, one with
    a wheel tells more than one without (cp39 has none), then the first."""
    return min(judged, key=lambda j: (j[2][0], -j[2][1], j[1][8] is None))


def _minor(tag: str) -> int:
    try:
        return int(tag.removeprefix("cp3").rstrip("t") or -1)
    except ValueError:
        return -1


# ----------------------------------------------------------------------- the fast path


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
            and type(v.get("filename")) is str and strs(v.get("torch"))
            and _lines(v.get("torch_lines", []))
            and type(v.get("projects")) is dict
            and all(type(k) is str and _valid_edges(x) for k, x in v["projects"].items()))


def _valid_index(doc: dict[str, Any]) -> bool:
    names = doc.get("names")
    return (doc.get("schema_version") == SCHEMA and type(names) is dict
            and all(type(n) is list and len(n) == 2 and type(n[0]) is str and strs(n[1])
                    for n in names.values())
            and strs(doc.get("torch")) and strs(doc.get("pythons"))
            and type(doc.get("sglang")) is dict
            and all(_valid_sglang(v) for v in doc["sglang"].values()))


def _valid_table(doc: dict[str, Any]) -> bool:
    strings: Any = doc.get("strings")
    releases, evals = doc.get("releases"), doc.get("evals")
    if not (doc.get("schema_version") == SCHEMA and strs(strings) and type(releases) is list
            and all(strs(r) and len(r) == 2 for r in releases)
            and type(doc.get("wanted")) is dict
            and all(strs(v) for v in doc["wanted"].values())
            and ("imported" not in doc or strs(doc["imported"]))
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
               dist: str | None, as_imported: bool = False) -> Which | None:
    """The answer from the resolved tables, or None when they do not hold the question
    (the full resolver then answers, and says what is wrong with a bad one).
    ``as_imported``: a question of the whole project asks for the releases that give what
    it is imported as (``which nixl``: the meta, not a backend alone); else of releases of
    any of its distributions that load (what a pin of a backend moves to)."""
    from moonpin.resolver.tables.reading import read_table

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
    # the project as imported: what it is imported as; else what the distributions install
    # (a table without ``imported``, from before it: every package, as then)
    imported = first.get("imported") if as_imported and set(dists) == set(first["wanted"]) \
        else None
    wanted = frozenset(imported) if imported else frozenset(
        p for d in dists for p in first["wanted"].get(d, ()))
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


# ------------------------------------------------------------ held beside an SGLang release
#
# ``resolved/_held-<sglang version>.json``, one per SGLang release of the index that imports a
# mooncake process-group module (the releases a plan holds extensions beside): for each
# torch it admits and each extension distribution, every release's verdict beside it at
# each platform and python, as :func:`which_fast` judges them (:func:`held_verdicts`), and
# the first reason ``which`` gives of a release it excludes, for each python and platform
# a question may name (``reasons`` and ``excluded``; a table written before them has
# neither), so ``constraints``, ``renovate`` and ``pins`` learn which releases load beside
# the SGLang releases they allow, and why none does, without judging every combination of
# every release again (:func:`held_releases`).


def held_name(sglang: str) -> str:
    """The file name of one SGLang release's held table."""
    from moonpin.resolver.tables.reading import table_name

    return table_name("_held-", sglang)


def held_questions(pythons: Sequence[str], arches: Sequence[str],
                   ) -> list[tuple[str | None, str | None]]:
    """The (python, platform) a held question may name, None for every one, in the order of
    a held table's ``excluded`` (platforms outer, each first as None)."""
    return [(p, a) for a in (None, *arches) for p in (None, *pythons)]


class HeldVerdicts(NamedTuple):
    """What a held table says of one distribution at one torch (:func:`held_verdicts`)."""

    versions: list[str]
    verdicts: list[str]
    reasons: list[str]
    excluded: list[int | None]


def held_verdicts(index: dict[str, Any], table: dict[str, Any], sglang: str, dist: str,
                  pythons: Sequence[str], arches: Sequence[str]) -> HeldVerdicts:
    """The releases of ``dist`` in ``table`` (one project's table at one torch, in its
    order) and, for each, one character per ``(arch, python)`` (arches outer): the verdict
    order :func:`judge` gives that combination beside SGLang release ``sglang`` of
    ``index`` (``0`` compatible, ``1`` unknown, ``2`` incompatible), ``-`` where the table
    has none; :func:`which_fast`'s question ``dist=dist``, one combination at a time. A
    release incompatible everywhere is left out (:func:`held_releases` says none of it).
    ``excluded``: for each question of :func:`held_questions`, the first of :func:`which_fast`'s
    excluded releases as ``dist==version: reason``, an index into ``reasons`` (None: it
    excludes none)."""
    edges = _edges(index["sglang"][sglang], table["project"])
    wanted = frozenset(table["wanted"].get(dist, ()))
    memo: dict[Any, rule.Decision] = {}
    combos = [(p, a) for a in arches for p in pythons]
    versions, verdicts = [], []
    every: list[tuple[str, list[tuple[str, Entry, tuple[int, int, str | None]] | None]]] = []
    for (d, v), rows in zip(table["releases"], table["evals"], strict=True):
        if d != dist:
            continue
        by = {(e[0], e[1]): e for e in rows}
        judged: list[tuple[str, Entry, tuple[int, int, str | None]] | None] = []
        for p, a in combos:
            e = by.get((p, a))
            entry = None if e is None else _unpack(e, table["strings"])
            judged.append(None if entry is None else (
                table["torch"], entry, judge(entry, d, v, wanted, edges, memo)))
        said = "".join("-" if j is None else str(j[2][0]) for j in judged)
        if "0" in said or "1" in said:
            versions.append(v)
            verdicts.append(said)
        every.append((v, judged))
    reasons: list[str] = []
    excluded: list[int | None] = []
    for python, arch in held_questions(pythons, arches):
        first = None
        for v, judged in every:  # which_fast's answer: its first release excluded
            asked = [j for (p, a), j in zip(combos, judged, strict=True) if j is not None
                     and python in (None, p) and arch in (None, a)]
            if asked and (best := _best(asked))[2][0] == 2:
                first = f"{dist}=={v}: {best[2][2] or 'unknown'}"
                break
        if first is not None and first not in reasons:
            reasons.append(first)
        excluded.append(None if first is None else reasons.index(first))
    return HeldVerdicts(versions, verdicts, reasons, excluded)


def _valid_held(doc: dict[str, Any]) -> bool:
    pythons: Any = doc.get("pythons")
    arches: Any = doc.get("arches")
    by_torch = doc.get("torch")
    if not (doc.get("schema_version") == SCHEMA and type(doc.get("sglang")) is str
            and strs(pythons) and strs(arches) and type(by_torch) is dict):
        return False
    width = len(pythons) * len(arches)
    asked = (len(pythons) + 1) * (len(arches) + 1)

    def said(x: dict[str, Any]) -> bool:  # no reasons in a table written before them
        if "reasons" not in x and "excluded" not in x:
            return True
        excluded = x.get("excluded")
        return (strs(x.get("reasons")) and type(excluded) is list and len(excluded) == asked
                and all(i is None or (type(i) is int and 0 <= i < len(x["reasons"]))
                        for i in excluded))

    return all(type(t) is str and type(by_dist) is dict and all(
        type(d) is str and type(x) is dict and strs(x.get("versions"))
        and strs(x.get("verdicts")) and len(x["versions"]) == len(x["verdicts"])
        and all(len(c) == width and not c.strip("012-") for c in x["verdicts"]) and said(x)
        for d, x in by_dist.items()) for t, by_dist in by_torch.items())


class Held(NamedTuple):
    """:func:`held_releases`' answer: the versions ``which`` calls compatible and those it
    calls unknown; ``excluded``, the first release it excludes with its first reason
    (``dist==version: reason``; None: none), when ``says_excluded`` (a table written
    before the reasons does not say: ask :func:`which_fast`)."""

    compatible: list[str]
    unknown: list[str]
    excluded: str | None
    says_excluded: bool


def held_releases(kb_path: str | os.PathLike[str], dist: str, *, torch: str, sglang: str,
                  python: str | None, arch: str | None) -> Held | None:
    """The versions of ``dist``'s releases :func:`which_fast` calls compatible and those it
    calls unknown, and the first it excludes, for ``which DIST --torch TORCH --sglang
    SGLANG`` on ``python`` and ``arch`` (None: every one) with ``dist=DIST``, from the
    SGLang release's held table; None when that does not hold the question (then
    :func:`which_fast` answers)."""
    from moonpin.kb.errors import UsageError
    from moonpin.resolver.inputs import normalize_arch, normalize_python
    from moonpin.resolver.tables.reading import read_table

    try:
        doc = read_table(kb_path, held_name(sglang), valid=_valid_held)
        python, arch = normalize_python(python), normalize_arch(arch)
    except (OSError, ValueError, UsageError):
        return None
    found = doc["torch"].get(torch, {}).get(dist) if doc["sglang"] == sglang else None
    pythons, arches = doc["pythons"], doc["arches"]
    if found is None or (python is not None and python not in pythons) or (
            arch is not None and arch not in arches):
        return None
    at = [i * len(pythons) + j for i, a in enumerate(arches) for j, p in enumerate(pythons)
          if (arch is None or a == arch) and (python is None or p == python)]
    compatible, unknown = [], []
    for version, said in zip(found["versions"], found["verdicts"], strict=True):
        best = min((said[i] for i in at if said[i] != "-"), default=None)
        if best == "0":
            compatible.append(version)
        elif best == "1":
            unknown.append(version)
    says = "excluded" in found
    first = found["excluded"][held_questions(pythons, arches).index((python, arch))] \
        if says else None
    return Held(compatible, unknown, None if first is None else found["reasons"][first], says)


class Fitting(NamedTuple):
    """What the tables say of one project's releases for one installed environment
    (:func:`fitting`): ``fits``, the releases that fit it, best first (as ``which``
    recommends); ``excluded``, those that do not, newest first, each with its first reason;
    ``torch`` and ``cuda``, the torch release and CUDA major judged (None: the index's
    build); ``elsewhere``, when nothing fits, (torch, the best release that fits it) for
    each other torch the installed SGLang admits; ``query``, the ``which`` question asked."""

    fits: tuple[Candidate, ...]
    excluded: tuple[Candidate, ...]
    torch: str
    cuda: int | None
    elsewhere: tuple[tuple[str, Candidate], ...]
    query: dict[str, Any]


def fitting(kb_path: str | os.PathLike[str], what: str, *, sglang: str | None, torch: str,
            python: str, arch: str) -> Fitting | None:
    """The releases of ``what`` (a distribution's name) that fit an environment holding
    SGLang ``sglang`` (None: none; its pins and launch imports are the edges, as ``which
    <what> --sglang``), torch ``torch`` as installed (its label: ``2.14.1+cu130``), on
    ``python`` (``cp312``) and ``arch``: :func:`which_fast`'s answer, each release kept only
    where a wheel fits this torch release and its CUDA major. None when the tables do not
    hold the question (missing, damaged, another KB's, older than the SGLang release, a
    torch they do not table or a label they cannot answer for: ``+cpu``, a CUDA the
    index's build is not); then nothing is said of the KB."""
    from moonpin.kb.errors import UsageError
    from moonpin.resolver.tables.torch_labels import cuda_assumed, cuda_fits, torch_label

    label = torch_label(torch)
    if label is None:
        return None
    public, major = label

    def ask(t: str) -> Which | None:
        try:
            return which_fast(kb_path, what, torch=t, sglang=sglang, python=python,
                              arch=arch, dist=None)
        except UsageError:  # a python or platform no release names: not the tables'
            return None

    def fit(answer: Which, t: str, cuda: int | None) -> tuple[Candidate, ...]:
        return tuple(c for c in answer.ranked() if any(
            w.torch == t and cuda_fits(w.cuda, cuda) for w in c.wheels or ()))

    answer = ask(public)
    if answer is None or not cuda_assumed(
            (w.cuda for c in answer.compatible for w in c.wheels or ()), major):
        return None
    fits = fit(answer, public, major)
    elsewhere: list[tuple[str, Candidate]] = []
    if not fits and sglang is not None:
        from moonpin.resolver.tables.reading import read_table

        admitted = read_table(kb_path, INDEX, valid=_valid_index)["sglang"][sglang]["torch"]
        for t in reversed(admitted):  # the newest torch first; pip installs the index's
            other = ask(t) if t != public else None
            best = fit(other, t, None) if other is not None else ()
            if best:
                elsewhere.append((t, best[0]))
    return Fitting(fits, answer.excluded, public, major, tuple(elsewhere), answer.query)


def release_pins(kb_path: str | os.PathLike[str], dist: str, version: str,
                 ) -> dict[str, str] | None:
    """The exact releases of other distributions one extension release requires
    (``nixl`` 1.5.1: ``nixl-cu12`` and ``nixl-cu13`` 1.5.1), from the requirements table,
    else its explain table; None when neither holds it."""
    said = _requires(kb_path, dist, version)
    if said is not None:
        return {d: v for d, v in said[0]}
    r = _read_release(kb_path, dist, version)
    return dict(r.pins) if r is not None else None


def release_packages(kb_path: str | os.PathLike[str], dist: str, version: str,
                     ) -> frozenset[str] | None:
    """The top-level packages one extension release's wheels install (``nixl`` 1.5.1:
    ``nixl``, ``nixl_ep``), from its explain table; None when the table does not hold it."""
    r = _read_release(kb_path, dist, version)
    return r.packages if r is not None else None


def on_index(kb_path: str | os.PathLike[str], of: str, dist: str, version: str,
             ) -> bool | None:
    """Whether the tables record ``dist`` ``version`` as a release pip can install from the
    index, among the releases of the project of ``of`` (a name a ``which`` question may use:
    the project's, a distribution's, an import name): False when
    that project is tabled and this release is not (a distribution the index has none of,
    whose project's recipe reads it: ``flashinfer-jit-cache``), or its install fails
    (``installable``: an exact requirement the index does not have); None when the tables
    do not hold ``of``'s project (missing, damaged, another KB's)."""
    from moonpin.resolver.tables.reading import read_table

    try:
        names = read_table(kb_path, INDEX, valid=_valid_index)["names"]
    except (OSError, ValueError):
        return None
    project, mine = names.get(of), names.get(dist)
    if project is None:
        return None
    if mine is None or mine[0] != project[0]:
        return False
    r = _read_release(kb_path, dist, version)
    return r is not None and r.installable()


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


# ----------------------------------------------------------------------- explain a stack
#
# ``resolved/_ext-<dist>-<version>.json``, one per extension release: every check and note
# :func:`moonpin.resolver.native.evaluate_native` makes of it at each torch the KB holds
# facts of, per platform and python, judged without a query's packages or SGLang's edges
# (the stack graph's ``installs`` edge), its texts with the combination's wheel, python and
# platform marked (:data:`.per_release.MARKS`); and what a stack asks of it
# beside others: the packages it installs, its exact pins, each chosen wheel's packages
# and version locks. :func:`explain_fast` composes them with SGLang's edges (the index)
# as :func:`moonpin.resolver.native.explain_stack` does.


def release_name(dist: str, version: str) -> str:
    """The file name of one extension release's explain table."""
    from moonpin.resolver.tables.reading import table_name

    return table_name("_ext-", f"{dist}-{version}")


def _valid_release(doc: dict[str, Any]) -> bool:
    strings: Any = doc.get("strings")
    checks, by_torch, wheels = doc.get("checks"), doc.get("torch"), doc.get("wheels")
    if not (doc.get("schema_version") == SCHEMA and strs(strings) and type(checks) is list
            and type(by_torch) is dict and type(wheels) is dict
            and all(type(doc.get(k)) is str for k in ("dist", "version", "project"))
            and strs(doc.get("wanted")) and strs(doc.get("packages"))
            and type(doc.get("pins")) is list
            and all(strs(x) and len(x) == 2 for x in doc["pins"])
            and (doc.get("first") is None or type(doc.get("first")) is str)):
        return False
    n, nc = len(strings), len(checks)

    def ref(i: Any, size: int) -> bool:
        return type(i) is int and 0 <= i < size

    def opt(v: Any) -> bool:
        return v is None or type(v) is str

    for c in checks:
        if not (type(c) is list and len(c) == 4 and ref(c[0], n)
                and c[1] in (True, False, None) and type(c[1]) is not int and ref(c[2], n)
                and type(c[3]) is list and all(ref(x, n) for x in c[3])):
            return False
    for w in wheels.values():
        if not (type(w) is list and len(w) == 2 and strs(w[0]) and type(w[1]) is list
                and all(type(x) is list and len(x) == 6 and type(x[0]) is str
                        and opt(x[1]) and opt(x[2]) and opt(x[3]) and type(x[4]) is str
                        and type(x[5]) is int for x in w[1])):
            return False
    return all(type(rows) is list and all(
        type(r) is list and len(r) == 6 and type(r[0]) is str and type(r[1]) is str
        and (r[2] is None or ref(r[2], n)) and type(r[3]) is list
        and all(ref(x, nc) for x in r[3]) and type(r[4]) is list
        and all(ref(x, n) for x in r[4]) and (r[5] is None or ref(r[5], n))
        for r in rows) for rows in by_torch.values())


class _Release:
    """One extension release's explain table, read back."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.dist: str = doc["dist"]
        self.version: str = doc["version"]
        self.project: str = doc["project"]
        self.wanted = frozenset(doc["wanted"])
        self.packages = frozenset(doc["packages"])
        self.pins = {d: v for d, v in doc["pins"]}
        self.first: str | None = doc["first"]
        self.wheels: dict[str, list[Any]] = doc["wheels"]
        self._strings: list[str] = doc["strings"]
        self._checks: list[list[Any]] = doc["checks"]
        self._torch: dict[str, list[list[Any]]] = doc["torch"]

    def holds(self, torch: str) -> bool:
        return torch in self._torch

    def installable(self) -> bool:
        """Whether pip can install it from the index (no ``installable`` check fails)."""
        return not any(self._strings[c[0]] == "installable" and c[1] is False
                       for c in self._checks)

    def judged(self, torch: str, python: str, arch: str,
               ) -> tuple[str | None, list[Any], list[str], str | None] | None:
        """(the wheel pip chooses, every check, every note, the release it loads its build
        from as ``dist==version``) at ``torch`` on this python and platform; None when the
        table does not hold it."""
        from moonpin.resolver.answers import Check
        from moonpin.resolver.tables.per_release import expand

        row = next((r for r in self._torch.get(torch, ()) if r[0] == python and r[1] == arch),
                   None)
        if row is None:
            return None
        s = self._strings
        wheel = None if row[2] is None else s[row[2]]
        said = (wheel, python, arch)
        checks = [Check(expand(s[c[0]], said), c[1], expand(s[c[2]], said),
                        tuple(expand(s[x], said) for x in c[3]))
                  for c in (self._checks[i] for i in row[3])]
        return (wheel, checks, [expand(s[n], said) for n in row[4]],
                None if row[5] is None else s[row[5]])


def _read_release(kb_path: str | os.PathLike[str], dist: str, version: str,
                  ) -> _Release | None:
    from moonpin.resolver.tables.reading import read_table

    try:
        doc = read_table(kb_path, release_name(dist, version), valid=_valid_release)
    except (OSError, ValueError):
        return None
    if doc.get("dist") != dist or doc.get("version") != version:
        return None  # another release's table under a colliding name
    return _Release(doc)


def version_locks(kb_path: str | os.PathLike[str], dist: str, version: str,
                  ) -> list[tuple[str, str | None, str | None, str | None]] | None:
    """Every version lock (target, condition, effect, key) the wheels of one extension
    release hold on another distribution, from the requirements table, else its explain
    table; None when neither holds the release (stale, damaged, not tabled): the caller
    reads the facts."""
    said = _requires(kb_path, dist, version)
    if said is not None:
        return [(t, c, e, k) for t, c, e, k in said[1]]
    r = _read_release(kb_path, dist, version)
    return None if r is None else locks_of(r.wheels)


def locks_of(wheels: dict[str, list[Any]],
             ) -> list[tuple[str, str | None, str | None, str | None]]:
    """The version locks (target, condition, effect, key) of an explain table's ``wheels``,
    each once, in their order."""
    out: list[tuple[str, str | None, str | None, str | None]] = []
    for _, locks in wheels.values():
        for target, condition, effect, key, _member, _line in locks:
            if (target, condition, effect, key) not in out:
                out.append((target, condition, effect, key))
    return out


# ``resolved/_requires.json``: for every extension release with an explain table, what a
# stack asks of it beside others without the rest of that table: its exact pins and its
# version locks, so ``constraints``, ``renovate`` and ``pins`` read one small table where
# they would read the explain table of every release they allow (a table written before it
# is missing: then they read those).

#: The requirements table's name.
REQUIRES = "_requires.json"


def _valid_requires(doc: dict[str, Any]) -> bool:
    releases = doc.get("releases")

    def opt(v: Any) -> bool:
        return v is None or type(v) is str

    return (doc.get("schema_version") == SCHEMA and type(releases) is dict and all(
        type(d) is str and type(by) is dict and all(
            type(v) is str and type(x) is list and len(x) == 2
            and type(x[0]) is list and all(strs(p) and len(p) == 2 for p in x[0])
            and type(x[1]) is list and all(
                type(k) is list and len(k) == 4 and type(k[0]) is str
                and opt(k[1]) and opt(k[2]) and opt(k[3]) for k in x[1])
            for v, x in by.items()) for d, by in releases.items()))


def _requires(kb_path: str | os.PathLike[str], dist: str, version: str,
              ) -> tuple[list[list[str]], list[list[Any]]] | None:
    """(exact pins, version locks) of one release from the requirements table; None when it
    does not hold the release."""
    from moonpin.resolver.tables.reading import read_table

    try:
        doc = read_table(kb_path, REQUIRES, valid=_valid_requires)
    except (OSError, ValueError):
        return None
    x = doc["releases"].get(dist, {}).get(version)
    return None if x is None else (x[0], x[1])


def explain_fast(kb_path: str | os.PathLike[str], sglang: str | None,
                 extensions: Sequence[tuple[str, str]], *, torch: str | None,
                 python: str | None, arch: str | None) -> dict[str, Any] | None:
    """:func:`moonpin.resolver.native.explain_stack` from the resolved tables (the index
    and each release's explain table), without the KB's facts; None when they do not hold
    the question as asked (a release, torch or python spelt otherwise or not tabled, a
    stale or damaged table): then the full resolver answers."""
    from moonpin.resolver.inputs import ARCHES, normalize_arch, normalize_python
    from moonpin.resolver.tables.reading import read_table

    python, arch = normalize_python(python), normalize_arch(arch)
    try:
        index = read_table(kb_path, INDEX, valid=_valid_index)
    except (OSError, ValueError):
        return None
    s = None
    if sglang is not None:
        s = index["sglang"].get(sglang)
        if s is None or "torch_lines" not in s:
            return None
    if torch is not None:
        tt = torch
    elif s is not None and s["torch"]:
        tt = s["torch"][-1]
    else:
        return None  # the full resolver says what is missing
    if tt not in index["torch"] or (python is not None and python not in index["pythons"]):
        return None
    stack = []
    for d, v in extensions:
        r = _read_release(kb_path, d, v)
        if r is None or not r.holds(tt):
            return None
        stack.append(r)
    edges: dict[str, Edges] = {}
    if s is not None:
        for r in stack:
            if r.project not in edges:
                installed = {p for x in stack if x.project == r.project for p in x.packages}
                release, filename, pins, imports = _edges(s, r.project)
                edges[r.project] = (release, filename, pins,
                                    [i for i in imports if i[0] not in installed])
    pythons = [python] if python else list(reversed(index["pythons"]))
    if s is not None and python is None:  # SGLang's own wheel's python first
        own = [p for p in pythons if f"-{p}-" in s["filename"]]
        pythons = own + [p for p in pythons if p not in own]
    arches = [arch] if arch else list(ARCHES)
    judged: list[tuple[str, str, list[Any], list[str], list[str]]] = []
    for a in arches:
        for p in pythons:
            got = _judge_stack(s, sglang, stack, edges, tt, p, a)
            if got is None:
                return None
            judged.append((p, a, *got))
    return stack_answer(sglang if s is not None else None, tt, extensions, python, arch, judged)


def unloaded(stack: Sequence[tuple[str, str, dict[str, str], str | None]], dist: str,
             version: str, torch: str, imported: bool) -> rule.Decision | None:
    """:func:`moonpin.resolver.rule.not_loaded` of the release ``dist`` ``version`` in a
    stack given as ``(dist, version, its exact pins, the release it loads its build from
    at this torch as "dist==version" or None)`` per release."""
    from packaging.version import InvalidVersion, Version

    def meets(want: str | None) -> bool:
        try:
            return want is not None and Version(want) == Version(version)
        except InvalidVersion:
            return False

    return rule.not_loaded(f"{dist}=={version}", torch, [
        (f"{d}=={v}", loads) for d, v, pins, loads in stack
        if (d, v) != (dist, version) and meets(pins.get(dist))], imported)


def extension_check(dist: str, version: str, checks: Sequence[Any], notes: Sequence[str],
                    not_loaded: rule.Decision | None) -> tuple[Any, list[str]]:
    """explain's line of one extension of a stack from its checks and notes, and the notes
    it adds: a release installed but not loaded (``not_loaded``, :func:`unloaded`) is judged
    by what pip does with it alone, its builds' checks and notes left out, and said."""
    from moonpin.resolver.answers import Check

    if not_loaded is not None:
        checks = [c for c in checks if c.name in rule.INSTALL_CHECKS]
        notes = [not_loaded.detail]
    bad = ([f"{c.name}: {c.detail}" for c in checks if c.ok is False]
           or [f"{c.name}: {c.detail}" for c in checks if c.ok is None])
    ok = rule.verdict(c.ok for c in checks)
    if bad:
        detail = bad[0]
    elif not_loaded is not None:
        detail = "installed, not loaded (see the note)"
    else:
        detail = next((c.detail for c in reversed(checks) if c.name == "build for torch"),
                      "loads")
    return Check(f"{dist}=={version}", {"compatible": True, "incompatible": False}.get(ok),
                 detail, tuple(e for c in checks for e in c.evidence
                               if c.name == "build for torch")), list(notes)


def stack_answer(sglang: str | None, tt: str, extensions: Sequence[tuple[str, str]],
                 python: str | None, arch: str | None,
                 judged: Sequence[tuple[str, str, list[Any], list[str], list[str]]],
                 ) -> dict[str, Any]:
    """explain's answer of a stack judged on each (python, platform) of ``judged``: the
    checks and notes of the best one (compatible before unknown before incompatible, then the
    most checks that hold; ``unloaded``, those of its notes saying a release is installed
    but not loaded), and every combination's verdict with its first failing reason."""
    order = {"compatible": 0, "unknown": 1, "incompatible": 2}

    def rank(j: tuple[str, str, list[Any], list[str], list[str]]) -> tuple[int, int]:
        return (order[rule.verdict(c.ok for c in j[2])], -sum(1 for c in j[2] if c.ok))

    best = min(judged, key=rank)
    return {
        "query": {"sglang": sglang, "torch": tt,
                  "extensions": [f"{d}=={v}" for d, v in extensions],
                  "python": python or "all", "arch": arch or "all"},
        "checks": best[2], "notes": best[3], "unloaded": best[4],
        "evaluated": {"torch": tt, "python": best[0], "arch": best[1], "wheel": None},
        "combinations": [{"torch": tt, "python": p, "arch": a,
                          "verdict": rule.verdict(c.ok for c in cs),
                          "reason": next((f"{c.name}: {c.detail}" for c in cs
                                          if c.ok is False), "")}
                         for p, a, cs, _, _ in judged]}


def _judge_stack(s: dict[str, Any] | None, sglang: str | None, stack: Sequence[_Release],
                 edges: dict[str, Edges], tt: str, python: str, arch: str,
                 ) -> tuple[list[Any], list[str], list[str]] | None:
    """Every check of the stack on one python and platform, in
    :func:`moonpin.resolver.native.explain_stack`'s order, the notes, and those of them
    saying a release is installed but not loaded; None when a table does not hold the
    combination."""
    from moonpin.resolver.answers import Check

    checks: list[Any] = []
    notes: list[str] = []
    if s is not None:
        d = rule.torch_admitted(f"sglang {sglang}", [(line, spec) for line, spec in
                                                     s["torch_lines"]], tt)
        checks.append(Check("torch requirement", d.ok, d.detail,
                            (f"{s['filename']}: METADATA Requires-Dist",)))
    wheels: list[str | None] = []
    idles: list[str] = []
    found = [r.judged(tt, python, arch) for r in stack]
    if any(f is None for f in found):
        return None
    said_of = [(r.dist, r.version, r.pins, f[3]) for r, f in zip(stack, found, strict=True)
               if f is not None]
    for r, f in zip(stack, found, strict=True):
        assert f is not None
        wheel, own, said, _ = f
        wheels.append(wheel)
        evs, ev_notes = _compose(r, wheel, own, said, edges.get(r.project), python, arch)
        imported = s is not None and bool(r.packages & {
            p for p, _ in _edges(s, r.project)[3]})
        idle = unloaded(said_of, r.dist, r.version, tt, imported)
        check, ev_notes = extension_check(r.dist, r.version, evs, ev_notes, idle)
        checks.append(check)
        notes += [n for n in ev_notes if n not in notes]
        if idle is not None:
            idles.append(idle.detail)
    versions = {r.dist: r.version for r in stack}
    for r, wheel in zip(stack, wheels, strict=True):  # the version locks
        for target, condition, effect, key, member, line in (
                r.wheels.get(wheel, [[], []])[1] if wheel is not None else ()):
            if target in versions:
                d = rule.lock(r.dist, r.version, target, versions[target], condition,
                              effect, key)
                checks.append(Check(f"{r.dist} lock", d.ok, d.detail,
                                    (f"{wheel}: {member}:{line}",)))
    for r in stack:  # the exact pins one release holds on another
        for o in stack:
            want = r.pins.get(o.dist) if (o.dist, o.version) != (r.dist, r.version) else None
            if want is None:
                continue
            d = rule.pinned_by(f"{r.dist} {r.version}", o.dist, o.version,
                               [(f"{o.dist}=={want}", f"=={want}")])
            if d.ok is not True:
                checks.append(Check(f"{r.dist}=={r.version} pin", d.ok, d.detail, (
                    f"{r.first}: METADATA Requires-Dist" if r.first else r.dist,)))
    for i, r in enumerate(stack):  # two distributions installing one package
        for j in range(i + 1, len(stack)):
            o = stack[j]
            if o.dist == r.dist:
                continue
            d = rule.collides(f"{r.dist}=={r.version}", r.packages,
                              f"{o.dist}=={o.version}", o.packages)
            if d.ok is False:
                common = ", ".join(sorted(r.packages & o.packages))
                shown = [wheels[k] or stack[k].first for k in (i, j)]
                checks.append(Check(COLLISION, False, d.detail, tuple(
                    f"{w}: top-level {common}" for w in shown if w)))
    return checks, notes, idles


def _compose(r: _Release, wheel: str | None, own: list[Any], notes: list[str],
             edges: Edges | None, python: str, arch: str) -> tuple[list[Any], list[str]]:
    """The checks and notes :func:`moonpin.resolver.native.evaluate_native` makes of ``r``
    with its distribution's packages and SGLang's ``edges``, from those it made without
    them (``own``: installable, the wheel, then the wheel's own): the edges' checks after
    ``installable``, and the packages' check ending the judgement where it fails."""
    from moonpin.resolver.answers import Check

    out = list(own[:1])
    if not out or out[0].ok is False:
        return out, []
    if edges is not None:
        release, filename, pins, imports = edges
        lines = pins(r.dist, python, arch)
        if lines is not None:  # SGLang pins the distribution (here, maybe no line applies)
            d = rule.pinned_by(release, r.dist, r.version, lines)
            out.append(Check("sglang's requirement", d.ok, d.detail,
                             (f"{filename}: METADATA Requires-Dist",)))
        if imports and wheel is not None:
            d = rule.launch_imports(release, wheel, r.wheels[wheel][0], imports)
            out.append(Check("sglang's import", d.ok, d.detail,
                             tuple(f"{filename}: {why.split(': ', 1)[1]}"
                                   for _, why in imports)))
        if any(c.ok is False for c in out):
            return out, []
    if wheel is None:
        return out + own[1:], []
    d = rule.provides(wheel, r.wheels[wheel][0], r.wanted)
    if d.ok is False:
        return [*out, own[1], Check("module present", d.ok, d.detail, (wheel,))], []
    return out + own[1:], notes
