"""The releases of every project the KB holds as one multipartite networkx graph, whose
cliques are the compatible stacks; resolved when the KB is written (``kb resolve``).

Parts (:data:`Node` ``(part, version)``): ``sglang``, ``torch``, each mooncake distribution
and each native-extension distribution the KB's releases name (nothing here names a
project). Releases of one part are never joined: a stack holds one release of each part it
uses. An edge joins two releases that :mod:`moonpin.resolver.rule` says go together, with
the platforms (``(python, arch)``) it holds on (``on``) and, where it does not, why
(``why``), on the same platform:

* ``requires`` sglang -- torch: the torch SGLang's Requires-Dist admits;
* ``pinned`` sglang -- extension: SGLang's Requires-Dist pin of that distribution
  (:func:`rule.pinned_by`; none: every release);
* ``installs`` torch -- extension: pip installs the release beside that torch
  (:func:`rule.install_failure`: it is installable, has a wheel for the platform
  (:func:`rule.wheel_covers`), its torch requirement admits the torch);
  the edge keeps the release's whole judgement at that torch (``entries``, what
  ``which <extension>`` reads, :func:`moonpin.resolver.native.entry`);
* ``pinned`` extension -- extension: one release's exact Requires-Dist pin of another
  distribution (the meta ``nixl`` pins its ``nixl-cu12``/``nixl-cu13``;
  :func:`moonpin.resolver.native.pins_between`, which ``explain`` of a stack asks too);
  where a build-less release loads its build from the one it pins (the meta ``nixl``'s
  ``nixl_ep`` imports ``nixl_ep_cu<major>`` for torch's CUDA,
  :func:`moonpin.resolver.native.loads_from`), the edge records at which torch and on
  which platforms (``loads``), and the meta's ``installs`` edge is judged by that
  release's: the torch, the meta and the release it loads from are a 3-clique, and a
  stack holding the meta holds it (:meth:`Stacks.loaded`);
* ``pg`` sglang -- mooncake and torch -- mooncake: the combinations the mooncake query judges
  compatible (:func:`moonpin.resolver.query.evaluate`); mooncake's rule is ternary (the
  build for the torch must export what SGLang imports), so the sglang edge keeps the
  torches it holds with (``torches``);
* no edge between releases of two distributions whose wheels install one top-level
  package (``sgl-kernel`` and ``sglang-kernel`` both install ``sgl_kernel/``: pip installs
  the second over the first's files; :func:`rule.collides`): never one stack;
* every other pair of parts: ``free`` (nothing in either release's files constrains it).

A stack is a clique of the edges holding on one platform. Enumerating the maximal cliques of
all parts would multiply the free parts' releases, so :meth:`Stacks.holds` uses the
structure: for one SGLang release at one torch (an edge), the releases of the parts it
requires that are joined to both, then the cliques among those (each part's candidates are
few: SGLang pins exactly).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from moonpin.resolver import native, rule
from moonpin.resolver.graph import CompatGraph
from moonpin.resolver.inputs import ARCHES
from moonpin.resolver.query import resolve_torch

if TYPE_CHECKING:
    import networkx as nx

    from moonpin.kb.facts import NativeRelease, Sglang
    from moonpin.resolver.query import Evaluation

__all__ = ["Node", "Platform", "Stacks", "attach"]

#: A release in the graph: its part (``sglang``, ``torch`` or a distribution) and version.
Node = tuple[str, str]
#: (python tag, arch)
Platform = tuple[str, str]
#: The ``why`` of an edge that breaks nowhere (shared, read-only).
_NOWHERE: Mapping[Platform, str] = MappingProxyType({})

class Stacks:
    """The graph of one KB's releases (see the module's docstring) and its cliques."""

    def __init__(self, g: CompatGraph, pythons: Iterable[str] | None = None,
                 arches: Iterable[str] = ARCHES) -> None:
        import networkx as nx

        self.cg = g
        releases = g.kb.native
        if pythons is None:  # every python an extension's or a mooncake wheel names
            tags = {*native.all_pythons(releases),
                    *(p for d, v in g.mooncake for w in g.wheels(d, str(v))
                      for p in w.pythons)}
            pythons = sorted(tags, key=lambda t: (len(t), t))
        self.pythons = list(pythons)
        self.arches = list(arches)
        self.platforms: frozenset[Platform] = frozenset(
            (p, a) for a in self.arches for p in self.pythons)
        self.g: nx.Graph = nx.Graph()
        #: part -> its releases, in the KB's order
        self.parts: dict[str, list[Node]] = {}
        self._native: dict[Node, NativeRelease] = {}
        self._status: dict[tuple[str, str, str, str], tuple[bool | None, str]] = {}
        #: releases of two distributions installing one top-level package: no edge, and why
        self._apart: dict[tuple[Node, Node], str] = {}
        #: the judgements of the releases a build-less release loads from, per installs edge
        self._judged: dict[tuple[Node, Node, Platform], Any] = {}
        for s in g.sglang.values():
            self._add(("sglang", s.version), "sglang")
        for tv in dict.fromkeys([*(t.version for t in g.kb.torch),
                                 *map(str, g.torch_versions)]):
            self._add(("torch", tv), "torch")
        for d, v in g.mooncake:
            self._add((d, str(v)), "mooncake")
        for r in releases:
            node = (r.dist, r.version)
            if node not in self._native:
                self._add(node, r.project)
                self._native[node] = r
        #: the releases some build-less release pins exactly: what it may load from
        self._sources = {(d, v) for r in releases if any(not w.builds for w in r.wheels)
                         for d, v in native.exact_pins(r)}
        self._edges()

    # -- building ------------------------------------------------------------------

    def _add(self, node: Node, project: str) -> None:
        self.g.add_node(node, part=node[0], project=project)
        self.parts.setdefault(node[0], []).append(node)

    def _join(self, u: Node, v: Node, kind: str, on: frozenset[Platform],
              why: dict[Platform, str] | None = None, **data: Any) -> None:
        # most edges hold everywhere: they share one read-only empty ``why``
        self.g.add_edge(u, v, kind=kind, on=on, why=why or _NOWHERE, **data)

    def _edges(self) -> None:
        g, every = self.cg, self.platforms
        sglang = list(g.sglang.values())
        # sglang -- torch: what its torch requirement admits
        for s in sglang:
            for tv, line in g.torch_for(s):
                if ("torch", tv) in self.g:
                    self._join(("sglang", s.version), ("torch", tv), "requires", every,
                               line=line)
        # extension -- extension: exact pins of one another; free otherwise (made first:
        # the installs edges below record on them what a build-less release loads from)
        nodes = list(self._native)
        pinning = {n: {d for d, _ in native.exact_pins(self._native[n])} for n in nodes}
        installs = {n: native.packages(self._native[n]) for n in nodes}
        for i, u in enumerate(nodes):
            for v in nodes[i + 1:]:
                if u[0] == v[0]:
                    continue
                said = [native.pins_between(self._native[x], self._native[y])
                        for x, y in ((u, v), (v, u)) if y[0] in pinning[x]]
                bad = [d.detail for d in said if d is not None and d.ok is False]
                if bad:
                    self._join(u, v, "pinned", frozenset(),
                               dict.fromkeys(every, "; ".join(bad)))
                    continue
                common = installs[u] & installs[v]
                if common:  # one package's files from two distributions: never one stack
                    self._apart[(u, v)] = self._apart[(v, u)] = rule.collides(
                        f"{u[0]} {u[1]}", common, f"{v[0]} {v[1]}", common).detail
                    continue
                self._join(u, v, "pinned" if said else "free", every)
        # torch -- extension: pip installs it there (the whole judgement kept); for the
        # torch releases the KB has facts of (the tables'), the others when first asked
        for t in (("torch", x.version) for x in g.kb.torch):
            for node in self._native:
                self._installs(t, node)
        # sglang -- extension: its pins of that distribution
        for s in sglang:
            pins: dict[str, tuple[str, ...]] = {}
            for pin in s.extension_pins:
                pins[pin.dist] = (*pins.get(pin.dist, ()), pin.requirement)
            for node, r in self._native.items():
                lines = pins.get(r.dist)
                if not lines:
                    self._join(("sglang", s.version), node, "free", every)
                    continue
                on, why = set(), {}
                # most platforms apply the same lines: one decision (and its words) each
                judged: dict[Any, tuple[bool | None, str]] = {}
                for p, a in every:
                    applies = native.applicable(lines, p, a)
                    hit = judged.get(applies)
                    if hit is None:
                        d = rule.pinned_by(f"sglang {s.version}", r.dist, r.version, applies)
                        hit = judged[applies] = (d.ok, f"sglang's requirement: {d.detail}")
                    if hit[0] is not False:
                        on.add((p, a))
                    else:
                        why[(p, a)] = hit[1]
                self._join(("sglang", s.version), node, "pinned", frozenset(on), why)
        # mooncake -- extension: free (no file of either names the other)
        for m in (n for d in g.dists() for n in self.parts.get(d, [])):
            for node in nodes:
                self._join(m, node, "free", every)

    def _installs(self, t: Node, node: Node) -> None:
        """The ``installs`` edge of a torch and an extension release (made once). A
        build-less release that loads its build from one it pins (the meta ``nixl``) is
        judged with that release's ``installs`` edge at the same torch and platform, and
        the ``pinned`` edge between them records it (``loads``): a stack holding the one
        holds the other, a 3-clique with the torch."""
        if self.g.has_edge(t, node):
            return
        r = self._native[node]
        entries: dict[Platform, list[Any]] = {}
        on: set[Platform] = set()
        why: dict[Platform, str] = {}
        for a in self.arches:
            choice = resolve_torch(self.cg, t[1], a)
            for p in self.pythons:
                w = native.wheel_for(r, p, a)
                source = None if w is None or w.builds else native.loads_from(self.cg, w,
                                                                               choice)
                loaded = None
                if source is not None:
                    loaded = self._loads(t, node, (source.dist, source.version), (p, a))
                ev = native.evaluate_native(self.cg, r, choice, p, a, loaded=loaded)
                if node in self._sources:
                    self._judged[(t, node, (p, a))] = ev
                entries[(p, a)] = native.entry_of(ev, r, p, a)
                bad = _install_failure(ev)
                if bad is None:
                    on.add((p, a))
                else:
                    why[(p, a)] = bad
        self._join(t, node, "installs", frozenset(on), why, entries=entries)

    def _loads(self, t: Node, meta: Node, source: Node, plat: Platform) -> Any:
        """The judgement of ``source`` at ``t`` on ``plat``, read off its ``installs``
        edge, for the build-less ``meta`` that loads from it; the ``pinned`` edge of the
        two records that it does (``loads``: torch -> platforms)."""
        self._installs(t, source)
        data = self.g.get_edge_data(meta, source)
        if data is not None:
            data["source"] = source  # the edge is undirected: which end is loaded from
            data.setdefault("loads", {}).setdefault(t[1], set()).add(plat)
        judged = self._judged.get((t, source, plat))
        if judged is None:  # a pin :attr:`_sources` did not foresee: judged here
            choice = resolve_torch(self.cg, t[1], plat[1])
            judged = native.evaluate_native(self.cg, self._native[source], choice, *plat)
        return lambda _release: judged

    def loaded(self, torch: str, meta: Node, plat: Platform) -> list[Node]:
        """The releases ``meta`` loads its build from at ``torch`` on ``plat`` (the meta
        ``nixl``: the ``nixl-cu<major>`` of torch's CUDA); [] for any other release."""
        if meta in self._native:
            self._installs(("torch", torch), meta)
        return [n for n in self.g.neighbors(meta) if self.g[meta][n].get("source") == n
                and plat in self.g[meta][n].get("loads", {}).get(torch, ())]

    def add_mooncake(self, s: Sglang, evaluations: Iterable[Evaluation]) -> None:
        """The mooncake edges of one SGLang release, from the query's evaluations of its
        combinations (``pg``: see the module's docstring)."""
        for e in evaluations:
            if e.verdict != "compatible":
                continue
            m = (e.dist, e.mooncake)
            snode, tnode = ("sglang", s.version), ("torch", e.torch)
            if m not in self.g or tnode not in self.g:
                continue
            plat = (e.python, e.arch)
            if not self.g.has_edge(snode, m):
                self._join(snode, m, "pg", frozenset(), torches={})
            data = self.g[snode][m]
            data["torches"].setdefault(e.torch, set()).add(plat)
            data["on"] = data["on"] | {plat}
            if not self.g.has_edge(tnode, m):
                self._join(tnode, m, "pg", frozenset())
            self.g[tnode][m]["on"] = self.g[tnode][m]["on"] | {plat}

    # -- reading -------------------------------------------------------------------

    def joined(self, u: Node, v: Node, plat: Platform) -> bool:
        data = self.g.get_edge_data(u, v)
        return data is not None and plat in data["on"]

    def why(self, u: Node, v: Node, plat: Platform) -> str:
        data = self.g.get_edge_data(u, v)
        return self._apart.get((u, v), "") if data is None else data["why"].get(plat, "")

    def entries(self, torch: str, node: Node) -> dict[Platform, list[Any]]:
        """The judgement of one extension release at ``torch`` per platform (the
        ``installs`` edge's; see :func:`moonpin.resolver.native.entry`)."""
        data: dict[Platform, list[Any]] = self.g[("torch", torch)][node]["entries"]
        return data

    def view(self, plat: Platform) -> nx.Graph:
        """The edges that hold on one platform."""
        import networkx as nx

        return nx.subgraph_view(self.g, filter_edge=lambda u, v: plat in self.g[u][v]["on"])

    def holds(self, s: Sglang, torch: str, python: str, arch: str,
              ) -> tuple[bool | None, str]:
        """Whether the SGLang release at ``torch`` is part of a clique holding one release
        of each extension distribution it requires on this python and platform (its
        Requires-Dist pins without an extra): ``(True, "")``; ``(False, why)`` naming the
        edge that breaks it (``sgl-deep-ep: wheel for python/platform: ...``); ``(None,
        why)`` when the KB holds no release meeting a pin."""
        key = (s.version, torch, python, arch)
        hit = self._status.get(key)
        if hit is None:
            hit = self._status[key] = self._holds(s, torch, (python, arch))
        return hit

    def _holds(self, s: Sglang, torch: str, plat: Platform) -> tuple[bool | None, str]:
        snode, tnode = ("sglang", s.version), ("torch", torch)
        if snode not in self.g or tnode not in self.g:
            return None, f"the knowledge base holds no sglang {s.version} or torch {torch}"
        if plat not in self.platforms:
            return None, f"no extension's wheel names {plat[0]} on {plat[1]}"
        required: dict[str, tuple[str, ...]] = {}
        for pin in s.extension_pins:
            required[pin.dist] = (*required.get(pin.dist, ()), pin.requirement)
        out: tuple[bool | None, str] = (True, "")
        candidates: dict[str, list[Node]] = {}
        for dist, lines in sorted(required.items()):
            applies = native.applicable(lines, *plat)
            if not applies:
                continue
            pinned = [n for n in self.parts.get(dist, []) if self.joined(snode, n, plat)]
            if not pinned:
                out = (None, f"the knowledge base holds no {dist} release meeting "
                             + ", ".join(repr(x) for x, _ in applies))
                continue
            for n in pinned:
                self._installs(tnode, n)
            fits = [n for n in pinned if self.joined(tnode, n, plat)]
            if not fits:
                return False, f"{dist}: {self.why(tnode, pinned[0], plat)}"
            candidates[dist] = fits
        if not candidates:
            return out
        import networkx as nx

        view = self.view(plat)
        chosen = [n for ns in candidates.values() for n in ns]
        loads = {n: self.loaded(torch, n, plat) for n in chosen}
        members = list(dict.fromkeys([snode, tnode, *chosen,
                                      *(x for xs in loads.values() for x in xs)]))
        sub = view.subgraph(members)
        for clique in nx.find_cliques(sub, nodes=[snode, tnode]):
            have = set(clique)
            if all(have & set(ns) for ns in candidates.values()) and all(
                    set(loads[n]) <= have for n in chosen if n in have):
                return out
        # no clique holds every part: the first pair of candidates never joined says why
        for d1 in sorted(candidates):
            for d2 in sorted(candidates):
                if d1 < d2:
                    for u in candidates[d1]:
                        for v in candidates[d2]:
                            if not self.joined(u, v, plat):
                                return False, f"{d1}: {self.why(u, v, plat) or 'not with ' + d2}"
        return False, "no stack holds every extension sglang requires"

    def cliques(self, s: Sglang, torch: str, python: str, arch: str,
                parts: Iterable[str]) -> list[list[Node]]:
        """The maximal cliques holding the SGLang release and ``torch`` among the releases of
        ``parts`` joined to both on this platform (the stacks they make). Their number is
        the product of each free part's candidates: ask for the few parts a question is
        about, never all of them."""
        import networkx as nx

        plat = (python, arch)
        snode, tnode = ("sglang", s.version), ("torch", torch)
        chosen = [n for part in parts for n in self.parts.get(part, [])
                  if self.joined(snode, n, plat)]
        for n in chosen:
            if n in self._native:
                self._installs(tnode, n)
        fits = [n for n in chosen if self.joined(tnode, n, plat)]
        # a release that loads its build from another (the meta ``nixl``) brings it along
        loads = {n: self.loaded(torch, n, plat) for n in fits}
        members = list(dict.fromkeys([snode, tnode, *fits,
                                      *(x for xs in loads.values() for x in xs)]))
        sub = self.view(plat).subgraph(members)
        return [sorted(c) for c in nx.find_cliques(sub, nodes=[snode, tnode])
                if all(set(loads.get(n, ())) <= set(c) for n in c)]

    def table(self) -> dict[str, Any]:
        """Every SGLang release at each torch it admits on each platform where its stack
        does not hold, with why: ``{"pythons", "arches", "broken": {sglang: {torch:
        {"python/arch": [ok, why]}}}}`` (ok ``false`` or ``null``; absent: it holds)."""
        broken: dict[str, dict[str, dict[str, list[Any]]]] = {}
        for s in self.cg.sglang.values():
            if s.source != "index":
                continue
            for tv, _ in self.cg.torch_for(s):
                for p, a in sorted(self.platforms):
                    ok, why = self.holds(s, tv, p, a)
                    if ok is not True:
                        broken.setdefault(s.version, {}).setdefault(tv, {})[f"{p}/{a}"] = \
                            [ok, why]
        return {"pythons": self.pythons, "arches": self.arches, "broken": broken}


def _install_failure(ev: Evaluation) -> str | None:
    return rule.install_failure((c.name, c.ok, c.detail) for c in ev.checks)


def attach(g: CompatGraph) -> Stacks:
    """The stack graph of ``g``'s KB, made now and handed to ``g`` to resolve its stacks
    (:meth:`moonpin.resolver.graph.CompatGraph.stack_status`), as ``kb resolve`` does."""
    stacks = Stacks(g)
    g.stacks_from = lambda: stacks
    return stacks
