"""Every resolved table written when the KB is written (``kb resolve``): the one writer of them.

It imports the full resolver (the stack graph, :mod:`moonpin.resolver.stacks`, and the
queries); the readers beside it (:mod:`.reading`, :mod:`.per_release`, :mod:`.documents`,
:mod:`.native`) read what it writes."""

from __future__ import annotations

import os

from moonpin.resolver.tables.documents import (
    FACTS_NAME,
    NAMES_NAME,
    SUMMARY_NAME,
    TORCH_NAME,
    names_of,
    show_name,
)
from moonpin.resolver.tables.per_release import ORDER, STACKS_NAME, fits_name
from moonpin.resolver.tables.reading import SCHEMA, file_sha256, resolved_path, stamped, table_name

TYPE_CHECKING = False
if TYPE_CHECKING:  # the runtime check imports this module: no `re`, `json` or `pathlib` here
    from collections.abc import Callable, Iterator
    from pathlib import Path
    from typing import Any


__all__ = ["build", "build_fits", "build_matrix", "build_native", "build_stacks", "build_stamped",
           "stack_graph", "write"]


def stack_graph(kb: Any) -> Any:
    """The stack graph (:class:`moonpin.resolver.stacks.Stacks`) of the validated KB
    ``kb``, its :class:`moonpin.resolver.graph.CompatGraph` resolving its stacks with it."""
    from moonpin.resolver.graph import CompatGraph
    from moonpin.resolver.stacks import attach

    return attach(CompatGraph(kb))


def build(kb_path: Path, kb: Any = None, stacks: Any = None) -> dict[str, dict[str, Any]]:
    """Resolve every combination the table holds (imports the full resolver); ``kb``:
    the KB at ``kb_path``, when the caller has loaded it; ``stacks``: its stack graph
    (:func:`stack_graph`), which gains the mooncake edges of the combinations judged.
    Key -> document (:func:`write` names the files)."""
    return dict(_documents(kb_path, kb, stacks))


def _documents(kb_path: Path, kb: Any = None, stacks: Any = None,
               ) -> Iterator[tuple[str, dict[str, Any]]]:
    """:func:`build`'s documents, each given as soon as it is made (:func:`write` writes it
    then, so they are never all held at once)."""
    from moonpin.kb import store
    from moonpin.resolver import query

    kb = kb if kb is not None else store.load(kb_path)
    stacks = stacks if stacks is not None else stack_graph(kb)
    g = stacks.cg
    strings: list[str] = []
    intern = _interner(strings)

    releases = sorted(g.mooncake, key=lambda k: (k[1], k[0]), reverse=True)
    unread = [{"dist": u.name, "version": u.version,
               "reason": f"not read in the last scrape: {u.reason}"}
              for u in kb.unread if u.kind == "mooncake"]
    common = {
        "schema_version": SCHEMA,
        "kb_sha256": file_sha256(kb_path),
        "releases": [[d, str(v)] for d, v in releases],
        # the python tags and platforms each release has wheels for
        "release_tags": [[sorted({p for w in g.wheels(d, str(v)) for p in w.pythons}),
                          sorted({a for w in g.wheels(d, str(v)) for a in w.arches})]
                         for d, v in releases],
        "unread": unread,
    }
    sglang_meta: dict[str, dict[str, Any]] = {}
    # a torch with a local label (``2.13.0+cu126``) is judged per class of CUDA major; none
    # when some loader reads the label itself (then each label is judged from the facts)
    majors = sorted({b.cuda_major for d, v in releases for w in g.wheels(d, str(v))
                     for b in w.wheel.builds if b.cuda_major is not None}
                    | {var.cuda_major for t in g.torch.values() for var in t.variants
                       if var.cuda_major is not None})
    every_torch = [str(t) for t in g.torch_versions]
    labelled = not any(query.loader_reads_label(g, d, str(v), every_torch) for d, v in releases)
    for _, s in sorted(g.sglang.items()):
        if s.pg.module is None or s.source != "index":
            continue
        torches = [t for t, _ in g.torch_for(s)]
        sglang_meta[s.version] = {"module": s.pg.module, "names": list(s.pg.names),
                                  "backends": list(s.pg.backends), "torch": torches}
        out: list[list[Any]] = []
        explain = _Explained()
        for i, (d, v) in enumerate(releases):
            groups: dict[tuple[Any, ...], list[list[Any]]] = {}
            evs = query.combos(g, s, d, str(v), None, None, None)
            stacks.add_mooncake(s, evs)
            explain.add(i, evs)
            for e in evs:
                cuda = next((c.detail for c in e.checks if c.name == "CUDA major"), None)
                key = (i, e.torch, e.arch, ORDER[e.verdict], e.score(),
                       intern(e.reasons[0]) if e.reasons else None,
                       tuple(intern(n) for n in e.notes), intern(cuda))
                groups.setdefault(key, []).append([e.python, intern(e.wheel)])
            for key, members in groups.items():
                out.append([*key[:6], list(key[6]), key[7], members])
        packed, strs = _pack(out, strings)
        labels = ({"labels": {"majors": majors,
                              "torch": _label_rows(g, s, releases, torches, majors)}}
                  if labelled else {})
        yield s.version, {**common, "strings": strs,
                          "sglang": {s.version: sglang_meta[s.version]},
                          "rows": {s.version: packed}, **labels}
        said = explain.doc()
        if said is not None:
            yield f"_explain-{s.version}", {
                **common, "sglang": s.version, "torch": torches,
                "tags": sorted(map(list, query.wheel_tags(s.artifact.filename))), **said}
    yield "_sglang", {
        "schema_version": SCHEMA,
        "kb_sha256": common["kb_sha256"],
        "sglang": {s.version: {"module": s.pg.module, "names": list(s.pg.names),
                               "optional_names": list(s.pg.optional_names),
                               "backends": list(s.pg.backends),
                               "torch": sglang_meta.get(s.version, {}).get("torch", []),
                               "features": _feature_imports(s)}
                   for s in kb.sglang if s.source == "index"},
    }
    for rel in kb.sglang:
        if rel.source == "index" and rel.launch is not None:
            # The runtime check reads one release's launch rules at worker start.
            yield f"_launch-{rel.version}", {"schema_version": SCHEMA,
                                             "kb_sha256": common["kb_sha256"],
                                             "sglang": rel.version,
                                             "launch": rel.launch.model_dump(mode="json")}


def _label_rows(g: Any, s: Any, releases: list[tuple[str, Any]], torches: list[str],
                majors: list[int]) -> dict[str, dict[str, list[list[Any]]]]:
    """The compatible combinations of SGLang release ``s`` at each torch it admits with a
    local label of each class (:func:`.torch_labels.label_classes`): torch ->
    class -> ``[release index, arch, [python, ...]]``, in the order the full resolver
    judges them (:meth:`.per_release.Resolved.at_label` reads it)."""
    from moonpin.resolver import query
    from moonpin.resolver.tables.torch_labels import label_classes

    out: dict[str, dict[str, list[list[Any]]]] = {}
    for t in torches:
        per = out[t] = {}
        for cls, label in label_classes(majors):
            groups: list[list[Any]] = []
            for i, (d, v) in enumerate(releases):
                by_arch: dict[str, list[str]] = {}
                for e in query.combos(g, s, d, str(v), f"{t}+{label}", None, None):
                    if e.verdict == "compatible":
                        by_arch.setdefault(e.arch, []).append(e.python)
                groups += [[i, a, pys] for a, pys in by_arch.items()]
            per[cls] = groups
    return out


def build_fits(kb_path: Path, g: Any) -> dict[str, dict[str, Any]]:
    """File name -> document of each mooncake release's transposed table
    (:func:`.per_release.load_fits`) of the graph ``g`` of the KB at
    ``kb_path``."""
    return dict(_fits_documents(kb_path, g))


def _fits_documents(kb_path: Path, g: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """:func:`build_fits`'s documents, each given as soon as it is made: per mooncake
    release, every combination :func:`moonpin.resolver.query.which_sglang` judges without a
    torch, python or platform, in its order (its first best is the one it places)."""
    from moonpin.resolver import query

    sha = file_sha256(kb_path)
    heads = [s for _, s in sorted(g.sglang.items(), reverse=True)]
    unread = [[u.version, f"not read in the last scrape: {u.reason}"]
              for u in g.kb.unread if u.kind == "sglang"]
    bare = [s.version for s in heads if s.pg.module is None]
    for d, v in sorted(g.mooncake, key=lambda k: (k[1], k[0]), reverse=True):
        version = str(v)
        wheels = g.wheels(d, version)
        strings: list[str] = []
        intern = _interner(strings)
        rows = []
        for s in heads:
            if s.pg.module is None:
                continue
            rows.append([s.version, s.pg.module, [
                [e.torch, e.arch, e.python, intern(e.wheel), ORDER[e.verdict], e.score(),
                 intern(e.reasons[0]) if e.reasons else None,
                 [intern(n) for n in e.notes], intern(e.cuda)]
                for e in query.combos(g, s, d, version, None, None, None)]])
        yield fits_name(d, version), {
            "schema_version": SCHEMA, "kb_sha256": sha, "mooncake": [d, version],
            "pythons": sorted({p for w in wheels for p in w.pythons}),
            "arches": sorted({a for w in wheels for a in w.arches}),
            "cuda_majors": query.cuda_majors(g, d, version),
            "strings": strings, "sglang": rows, "without_module": bare, "unread": unread}


class _Explained:
    """One SGLang release's explain table (:func:`.per_release.load_explain`):
    every combination :func:`build` judges, each with its checks and notes. A text is
    stored with the combination's wheel, python and platform as markers
    (:data:`.per_release.MARKS`), so the checks every python and platform
    share are said once; a release whose texts do not come back whole that way (a NUL in
    one) gets no table (the facts answer it)."""

    def __init__(self) -> None:
        self.said = _Marked()
        self.strings = self.said.strings
        self.marked = self.said.marked
        self.intern = self.said.intern
        self.checks: list[list[Any]] = []
        self.pool: dict[tuple[Any, ...], int] = {}
        self.combos: list[list[Any]] = []

    def add(self, release: int, evaluations: Any) -> None:
        for e in evaluations:
            said = (e.wheel, e.python, e.arch)
            ids = []
            for c in e.checks:
                key = (self.marked(c.name, said), c.ok, self.marked(c.detail, said),
                       tuple(self.marked(x, said) for x in c.evidence))
                if key not in self.pool:
                    self.pool[key] = len(self.checks)
                    self.checks.append([key[0], key[1], key[2], list(key[3])])
                ids.append(self.pool[key])
            self.combos.append([release, e.torch, e.arch, e.python, self.intern(e.wheel), ids,
                                [self.marked(n, said) for n in e.notes]])

    def doc(self) -> dict[str, Any] | None:
        if not self.said.whole:
            return None
        return {"strings": self.strings, "checks": self.checks, "combos": self.combos}


def build_native(kb_path: Path, kb: Any, stacks: Any = None) -> dict[str, dict[str, Any]]:
    """File name -> document of the native extensions' tables
    (:mod:`.native`): the index, and one table per project and
    torch release the KB holds facts of, read off the stack graph's ``installs`` edges
    (``stacks``: :func:`stack_graph`)."""
    return dict(_native_documents(kb_path, kb, stacks))


def _native_documents(kb_path: Path, kb: Any, stacks: Any = None,
                      ) -> Iterator[tuple[str, dict[str, Any]]]:
    """:func:`build_native`'s documents, each given as soon as it is made."""
    from moonpin.resolver import native
    from moonpin.resolver.graph import torch_lines
    from moonpin.resolver.inputs import ARCHES
    from moonpin.resolver.tables import native as rn

    stacks = stacks if stacks is not None else stack_graph(kb)
    g = stacks.cg
    releases = g.kb.native
    if not releases:
        return
    sha = file_sha256(kb_path)
    pythons = native.all_pythons(releases)
    torches = [t.version for t in g.kb.torch]
    projects = sorted({r.project for r in releases})
    keys = {*projects, *(r.dist for r in releases),
            *(p for r in releases for w in r.wheels for p in w.packages)}
    names = {k: list(native.dists_named(g, k)) for k in sorted(keys)}
    sglang: dict[str, Any] = {}
    for s in g.kb.sglang:
        if s.source != "index":
            continue
        edges: dict[str, Any] = {}
        for project in projects:
            e = native.sglang_edges(g, s, project)
            pins = {d: _per_platform(native, lines, pythons, ARCHES)
                    for d, lines in e.pins.items()}
            if pins or e.imports:
                edges[project] = {"pins": pins, "imports": [list(i) for i in e.imports]}
        sglang[s.version] = {"release": f"sglang {s.version}", "filename": s.artifact.filename,
                             "torch": [t for t, _ in g.torch_for(s)], "projects": edges,
                             "torch_lines": [[line, str(spec)]
                                             for line, spec in torch_lines(s)]}
    index = {"schema_version": rn.SCHEMA, "kb_sha256": sha, "names": names, "torch": torches,
             "pythons": pythons, "sglang": sglang}
    yield rn.INDEX, index
    # each SGLang release's held table: what each distribution's releases are beside it at
    # each torch it admits, judged off each project's table as it is made; for the releases
    # that import a mooncake process-group module, the only ones whose plan holds any
    # extension (``moonpin.resolver.pins.writing.renovate.plan_natives``)
    held: dict[str, dict[str, Any]] = {s.version: {} for s in g.kb.sglang
                                       if s.source == "index" and s.pg.module is not None}
    for project in projects:
        mine = sorted((r for r in releases if r.project == project), key=native.newest,
                      reverse=True)
        dists = sorted({r.dist for r in mine})
        wanted = {d: sorted(native.wanted_packages([r for r in mine if r.dist == d]))
                  for d in dists}
        imported = sorted(native.imported_packages(mine))
        for t in torches:
            table = {"schema_version": rn.SCHEMA, "kb_sha256": sha, "project": project,
                     "torch": t, "releases": [[r.dist, r.version] for r in mine],
                     "wanted": wanted, "imported": imported,
                     **_native_evals(stacks, mine, t, pythons)}
            yield rn.entry_name(project, t), table
            for v, by_torch in held.items():
                if t in sglang[v]["torch"]:
                    for d in dists:
                        said = rn.held_verdicts(index, table, v, d, pythons, ARCHES)
                        by_torch.setdefault(t, {})[d] = said._asdict()
    for v, by_torch in held.items():
        yield rn.held_name(v), {"schema_version": rn.SCHEMA, "kb_sha256": sha, "sglang": v,
                                "pythons": pythons, "arches": list(ARCHES), "torch": by_torch}
    seen: set[tuple[str, str]] = set()
    requires: dict[str, dict[str, list[Any]]] = {}  # what each release tabled asks of others
    for r in releases:
        if (r.dist, r.version) in seen:
            continue  # the one a query's release name finds is the first
        seen.add((r.dist, r.version))
        doc = _release_document(stacks, r, torches, pythons)
        if doc is not None:
            yield rn.release_name(r.dist, r.version), {
                "schema_version": rn.SCHEMA, "kb_sha256": sha, **doc}
            requires.setdefault(r.dist, {})[r.version] = [
                doc["pins"], [list(x) for x in rn.locks_of(doc["wheels"])]]
    yield rn.REQUIRES, {"schema_version": rn.SCHEMA, "kb_sha256": sha, "releases": requires}


def _release_document(stacks: Any, r: Any, torches: list[str], pythons: list[str],
                      ) -> dict[str, Any] | None:
    """One extension release's explain table (:func:`.native.
    explain_fast`): every check and note of it at each torch the KB holds facts of, per
    platform and python, as :func:`moonpin.resolver.native.evaluate_native` judges it, and
    what a stack asks of it beside others (the packages it installs, its exact pins, each wheel's
    packages and version locks). None when a text does not come back whole (the facts
    answer)."""
    from moonpin.resolver import native
    from moonpin.resolver.inputs import ARCHES
    from moonpin.resolver.query import resolve_torch

    g = stacks.cg
    said = _Marked()
    pool: dict[tuple[Any, ...], int] = {}
    checks: list[list[Any]] = []
    by_torch: dict[str, list[list[Any]]] = {}
    chosen: dict[str, Any] = {}
    for t in torches:
        rows = by_torch[t] = []
        for a in ARCHES:
            choice = resolve_torch(g, t, a)
            for p in pythons:
                # judged as explain_stack judges it, before its query's packages and
                # SGLang's edges (what the wheel's own checks give is kept in g.memo
                # from the stack graph's installs edges: this costs little)
                ev = native.evaluate_native(g, r, choice, p, a)
                evs, notes = ev.checks, ev.notes
                w = native.wheel_for(r, p, a)
                wheel = None
                if w is not None:
                    wheel = w.artifact.filename
                    chosen.setdefault(wheel, w)
                marks = (wheel, p, a)
                ids = []
                for c in evs:
                    key = (said.marked(c.name, marks), c.ok, said.marked(c.detail, marks),
                           tuple(said.marked(x, marks) for x in c.evidence))
                    if key not in pool:
                        pool[key] = len(checks)
                        checks.append([key[0], key[1], key[2], list(key[3])])
                    ids.append(pool[key])
                rows.append([p, a, said.intern(wheel), ids,
                             [said.marked(n, marks) for n in notes],
                             said.intern(native.loaded_release(g, r, choice, p, a))])
    if not said.whole:
        return None
    mine = [x for x in stacks.cg.kb.native if x.project == r.project and x.dist == r.dist]
    return {
        "dist": r.dist, "version": r.version, "project": r.project,
        "wanted": sorted(native.wanted_packages(mine)),
        "packages": sorted(native.packages(r)),
        "pins": [list(x) for x in native.exact_pins(r)],
        "first": r.wheels[0].artifact.filename if r.wheels else None,
        "wheels": {name: [list(w.packages),
                          [[x.target, x.condition, x.effect, x.key, x.member, x.line]
                           for rl in w.rules for x in rl.steps if x.kind == "lock"]]
                   for name, w in chosen.items()},
        "strings": said.strings, "checks": checks, "torch": by_torch}


class _Marked:
    """A string table whose texts are stored with a combination's wheel, python and
    platform as markers (:data:`.per_release.MARKS`), so what every python
    and platform share is said once; ``whole`` is False once a text would not come back
    whole that way (a NUL in one)."""

    def __init__(self) -> None:
        self.strings: list[str] = []
        self.intern = _interner(self.strings)
        self.whole = True

    def marked(self, text: str, said: tuple[str | None, str, str]) -> int | None:
        """The index of ``text`` with ``said`` (wheel, python, arch) marked."""
        from moonpin.resolver.tables.per_release import MARKS, expand

        out = text
        for value, mark in zip(said, MARKS, strict=True):
            if value:
                out = out.replace(value, mark)
        if "\0" in text or expand(out, said) != text:
            self.whole = False
        return self.intern(out)


def build_stacks(kb_path: Path, stacks: Any) -> dict[str, Any]:
    """The stacks table (:meth:`moonpin.resolver.stacks.Stacks.table`), stamped."""
    return {"schema_version": SCHEMA, "kb_sha256": file_sha256(kb_path), **stacks.table()}


def _per_platform(native: Any, lines: tuple[str, ...], pythons: list[str],
                  arches: tuple[str, ...]) -> dict[str, list[list[Any]]]:
    """The pin ``lines`` that apply on each ``python/arch`` (``*``: the same on all)."""
    by = {f"{p}/{a}": [list(x) for x in native.applicable(lines, p, a)]
          for a in arches for p in pythons}
    first = next(iter(by.values()), [])
    return {"*": first} if all(v == first for v in by.values()) else by


def _native_evals(stacks: Any, releases: list[Any], torch: str, pythons: list[str],
                  ) -> dict[str, Any]:
    """Every combination of ``releases`` at ``torch`` (platform, then python), as the stack
    graph's ``installs`` edges hold them, with the strings they name: ``{"strings": [...],
    "evals": [[entry, ...] per release]}``."""
    from moonpin.resolver.inputs import ARCHES

    strings: list[str] = []
    intern = _interner(strings)

    evals = []
    for r in releases:
        entries = stacks.entries(torch, (r.dist, r.version))
        rows = []
        for a in ARCHES:
            for p in pythons:
                e = entries[(p, a)]
                rows.append([e[0], e[1], e[2], e[3], intern(e[4]), intern(e[5]),
                             intern(e[6]), [intern(n) for n in e[7]],
                             None if e[8] is None else [intern(n) for n in e[8]]])
        evals.append(rows)
    return {"strings": strings, "evals": evals}


def build_stamped(kb_path: Path, kb: Any) -> dict[str, bytes]:
    """File name -> bytes of the stamped documents of ``kb`` (the KB at ``kb_path``): the
    facts, and each release's record for ``show`` (the record ``show`` picks: a local
    record of a version the index also has comes after it in the KB, and is the one
    shown)."""
    return dict(_stamped_documents(kb_path, kb))


def _stamped_documents(kb_path: Path, kb: Any, graph: Any = None,
                       ) -> Iterator[tuple[str, bytes]]:
    """:func:`build_stamped`'s documents, each given as soon as it is made (a later one of
    the same name replaces an earlier one, as in the dictionary); ``graph``: the KB's
    :class:`moonpin.resolver.graph.CompatGraph`, when the caller holds it."""
    from moonpin.kb.facts import from_model, summary_of, to_json
    from moonpin.resolver.graph import CompatGraph

    sha = file_sha256(kb_path)
    graph = graph if graph is not None else CompatGraph(from_model(kb))
    facts = graph.kb
    yield FACTS_NAME, stamped(to_json(facts), sha)
    said = summary_of(facts)
    yield SUMMARY_NAME, stamped(to_json(said), sha)
    yield NAMES_NAME, stamped({**names_of(said), "torch": list(facts.torch_versions),
                               "sglang": [h.version for h in said.sglang]}, sha)
    yield TORCH_NAME, stamped(_torch_document(graph), sha)
    for s in kb.sglang:
        rec = s.model_dump(mode="json", exclude={"launch"})
        yield show_name("sglang", s.version), stamped(
            {"name": "sglang", "version": s.version, "record": rec,
             "launch": s.launch is not None}, sha)
    for r in (*kb.mooncake, *kb.native):
        yield show_name(r.dist, r.version), stamped(
            {"name": r.dist, "version": r.version, "record": r.model_dump(mode="json")}, sha)


def build_matrix(kb_path: Path, g: Any) -> dict[str, Any]:
    """The default matrix's table (:func:`moonpin.resolver.matrix.tabled.load`) of the graph
    ``g`` of the KB at ``kb_path``, every cell and extension column judged now: each
    distinct cell and extension said once in ``cells``/``extensions``, and by index, in the
    order ``Matrix.cells`` and ``Matrix.extensions`` give them, in ``grid``/``ext``."""
    from moonpin.resolver.matrix.model import STATES
    from moonpin.resolver.matrix.table import build_matrix as judged
    from moonpin.resolver.matrix.tabled import KB_KEYS

    m = judged(g)
    strings: list[str] = []
    intern = _interner(strings)
    pool: dict[tuple[Any, ...], int] = {}

    def pooled(key: tuple[Any, ...]) -> int:
        return pool.setdefault(key, len(pool))

    grid = [pooled((STATES.index(c.state), intern(c.reason),
                    tuple(intern(n) for n in c.notes), intern(c.wheel))) for c in m.cells]
    cells = [[k[0], k[1], list(k[2]), k[3]] for k in pool]
    pool = {}
    ext = [pooled((intern(e.requirement), intern(e.reason), e.unknown))
           for _, _, _, e in m.extensions()]
    return {"schema_version": SCHEMA, "kb_sha256": file_sha256(kb_path),
            "kb": {k: m.kb.get(k) for k in KB_KEYS}, "scope": m.scope,
            "rows": [[r.sglang, r.torch, r.module, r.torch_line, [list(c) for c in r.cuda],
                      r.unread] for r in m.rows],
            "columns": [[c.dist, c.mooncake, c.unread] for c in m.columns],
            "pythons": m.pythons, "arches": m.arches, "projects": list(m.projects),
            "strings": strings, "cells": cells, "grid": grid,
            "extensions": [list(k) for k in pool], "ext": ext}


def _torch_document(g: Any) -> dict[str, Any]:
    """The torch facts (:func:`.documents.load_torch`): each torch release the KB
    read, with the index's wheel per platform (its CUDA major and the evidence); each SGLang
    release the graph holds (the index's record of a version before a local one), oldest first,
    with its wheel and torch requirement lines and specifiers; and the torch each extension
    release's builds target: per distribution and version, the ``[module, specifier]`` of each
    build that names one, in the order of its wheels and builds, once each."""
    builds: dict[str, dict[str, list[list[str]]]] = {}
    for r in g.kb.native:
        pairs = builds.setdefault(r.dist, {}).setdefault(r.version, [])
        for w in r.wheels:
            for b in w.builds:
                if b.torch and [b.module, b.torch] not in pairs:
                    pairs.append([b.module, b.torch])
    return {"torch": [{"version": t.version, "variants": [
                [v.arch, v.cuda_major, v.evidence, v.artifact.filename] for v in t.variants]}
                      for t in g.kb.torch],
            "sglang": [[str(v), s.artifact.filename, list(s.torch_requirements),
                        list(s.torch_specifiers)] for v, s in sorted(g.sglang.items())],
            "builds": builds}


def _feature_imports(s: Any) -> dict[str, list[dict[str, Any]]]:
    """feature -> the release's unconditional mooncake imports for it, as the runtime
    check reads them (so a worker start with ``--disaggregation-transfer-backend mooncake``
    need not parse the whole KB)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for i in s.imports:
        if not i.optional:
            out.setdefault(i.feature, []).append(
                {"module": i.module, "names": list(i.names), "feature": i.feature,
                 "optional": False, "member": i.member, "line": i.line})
    return out


def _pack(groups: list[list[Any]], strings: list[str]) -> tuple[list[list[Any]], list[str]]:
    """Re-index one release's groups against its own string table (self-contained file)."""
    local: dict[int, int] = {}
    strs: list[str] = []

    def re_intern(i: int | None) -> int | None:
        if i is None:
            return None
        if i not in local:
            local[i] = len(strs)
            strs.append(strings[i])
        return local[i]

    packed = [[g0[0], g0[1], g0[2], g0[3], g0[4], re_intern(g0[5]),
               [re_intern(n) for n in g0[6]], re_intern(g0[7]),
               [[py, re_intern(w)] for py, w in g0[8]]] for g0 in groups]
    return packed, strs


def write(kb_path: Path) -> Path:
    """Build and write the per-release tables beside the KB; the folder is replaced whole."""
    import json
    import shutil
    from pathlib import Path

    from moonpin.kb import store

    kb = store.load(kb_path)
    stacks = stack_graph(kb)
    final = resolved_path(kb_path)
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix=".resolved.", dir=kb_path.parent))
    try:
        for key, doc in _documents(kb_path, kb, stacks):  # each written as it is made
            prefix = next((p for p in ("_launch-", "_explain-") if key.startswith(p)), "")
            name = ("_sglang.json" if key == "_sglang"
                    else table_name(prefix, key[len(prefix):]))
            (tmp / name).write_bytes(json.dumps(doc, separators=(",", ":")).encode())
        for name, data in _stamped_documents(kb_path, kb, stacks.cg):
            (tmp / name).write_bytes(data)
        for name, doc in _fits_documents(kb_path, stacks.cg):
            (tmp / name).write_bytes(json.dumps(doc, separators=(",", ":")).encode())
        for name, doc in _native_documents(kb_path, kb, stacks):
            (tmp / name).write_bytes(json.dumps(doc, separators=(",", ":")).encode())
        (tmp / STACKS_NAME).write_bytes(json.dumps(build_stacks(kb_path, stacks),
                                                   separators=(",", ":")).encode())
        from moonpin.kb.errors import UsageError
        from moonpin.resolver.matrix import tabled

        try:
            matrix = build_matrix(kb_path, stacks.cg)
        except UsageError:
            # a cell the facts cannot judge: no table (`moonpin matrix` judges from the
            # facts and says why), never a failed resolve after a scrape wrote the KB
            matrix = None
        if matrix is not None:
            (tmp / tabled.MATRIX_NAME).write_bytes(json.dumps(
                matrix, separators=(",", ":")).encode())
        os.chmod(tmp, 0o755)
        old = final.with_name(final.name + ".old")
        if final.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _interner(strings: list[str]) -> Callable[[str | None], int | None]:
    """A function giving each text its index in ``strings`` (appended the first time it is
    seen; None stays None): the tables name a string once and refer to it by number."""
    index: dict[str, int] = {}

    def intern(text: str | None) -> int | None:
        if text is None:
            return None
        if text not in index:
            index[text] = len(strings)
            strings.append(text)
        return index[text]

    return intern
