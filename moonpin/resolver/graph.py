"""The compatibility graph, derived from a loaded KB (never stored).

Queries look facts up in plain dictionaries built from :class:`moonpin.kb.facts.Facts` (the part of
the KB a query reads; :meth:`CompatGraph.from_path` takes it from the derived
``resolved/_facts.json`` when that belongs to the KB, so a query imports neither pydantic
nor networkx). Which torch releases an SGLang release admits is computed when first asked.

:attr:`CompatGraph.g` is the same facts as a networkx graph, built on first use. Nodes are
typed tuples (:data:`Node`): ``("sglang", version)``, ``("torch", version)``,
``("mooncake", dist, version)``, ``("wheel", filename)``, ``("build", filename, member)``.
Edges carry a ``kind``: ``requires`` (sglang -> torch, with the requirement line),
``has`` (mooncake -> wheel), ``contains`` (wheel -> build), ``targets`` (build -> torch).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any

from packaging.version import InvalidVersion, Version

from moonpin.resolver.inputs import canonical_name

if TYPE_CHECKING:
    import networkx as nx
    from packaging.specifiers import SpecifierSet

    from moonpin.kb.facts import Build, Facts, Loader, Mooncake, Sglang, Torch, Wheel
    from moonpin.kb.models import KnowledgeBase

__all__ = ["CompatGraph", "Node", "WheelView", "arch_of_platform", "build_python",
           "canonical_name", "parse_torch_lines", "torch_lines"]

#: A graph node: its kind (``sglang``, ``torch``, ``mooncake``, ``wheel``, ``build``)
#: followed by what names it (version; dist and version; filename; filename and member).
Node = tuple[str, ...]


def arch_of_platform(platform: str) -> str | None:
    for arch in ("x86_64", "aarch64"):
        if platform.endswith(arch):
            return arch
    return None


def build_python(abi: str | None) -> tuple[str | None, str | None]:
    """``cpython-312-x86_64-linux-gnu`` -> ("cp312", "x86_64"); abi3 -> (None, None)."""
    if not abi:
        return None, None
    m = re.match(r"cpython-(\d+)-(x86_64|aarch64)", abi)
    if m:
        return f"cp{m.group(1)}", m.group(2)
    return None, None


@lru_cache(maxsize=4096)
def torch_lines(release: Sglang) -> tuple[tuple[str, SpecifierSet], ...]:
    """The release's torch requirement lines that parse, each with its text and its
    version specifier (the facts carry it, read when the KB was written)."""
    return parse_torch_lines(release.torch_requirements, release.torch_specifiers)


def parse_torch_lines(requirements: Iterable[str], specifiers: Iterable[str | None],
                      ) -> tuple[tuple[str, SpecifierSet], ...]:
    """:func:`torch_lines` of a release's ``torch_requirements`` and ``torch_specifiers``
    (as the facts, or a resolved table, hold them)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    out = []
    for line, spec in zip(requirements, specifiers, strict=False):
        if spec is None:
            continue
        try:
            out.append((line, SpecifierSet(spec)))
        except InvalidSpecifier:
            continue
    return tuple(out)





class WheelView:
    """One mooncake wheel with what queries ask of it: the CPython tags and the
    architectures it covers."""

    __slots__ = ("_named", "arches", "dist", "memo", "pythons", "version", "wheel")

    def __init__(self, dist: str, version: str, wheel: Wheel) -> None:
        self.dist = dist
        self.version = version
        self.wheel = wheel
        self.pythons = frozenset(t for t in wheel.python_tags if t.startswith("cp"))
        self.arches = frozenset(a for p in wheel.platform_tags if (a := arch_of_platform(p)))
        self._named: dict[tuple[str, str, str], list[Build]] = {}
        #: what queries derive from this wheel's facts, kept (see ``moonpin.resolver.query``)
        self.memo: dict[Any, Any] = {}

    def __repr__(self) -> str:
        return f"WheelView({self.dist}=={self.version}, {self.wheel.artifact.filename})"

    def loader(self, module: str) -> Loader | None:
        return next((ld for ld in self.wheel.loaders if ld.module == module), None)

    def builds_named(self, module_short: str, python: str, arch: str) -> list[Build]:
        """Builds the import system would load for ``mooncake.<module_short>`` here."""
        key = (module_short, python, arch)
        got = self._named.get(key)
        if got is None:
            got = self._named[key] = []
            for b in self.wheel.builds:
                stem = b.member.rsplit("/", 1)[-1].split(".", 1)[0]
                if stem != module_short:
                    continue
                py, ar = build_python(b.abi)
                if (b.abi and b.abi.startswith("abi3")) or (py == python and ar == arch):
                    got.append(b)
        return list(got)


class CompatGraph:
    """The KB's facts, with the lookups queries need.

    A graph :meth:`from_path` gives reads the facts when a lookup first needs them (a
    question the KB file's resolved tables answer needs none: ``renovate`` on a
    requirements file); :meth:`sglang_versions` answers from the KB's summary until then."""

    #: the facts and the lookups built from them (set by :meth:`_load`)
    kb: Facts
    sglang: dict[Version, Sglang]
    mooncake: dict[tuple[str, Version], Mooncake]
    torch: dict[Version, Torch]
    torch_versions: list[Version]
    _wheels: dict[tuple[str, str], list[WheelView]]

    #: what :meth:`_load` sets: a lookup of one of them before it reads the facts
    _LAZY = frozenset({"kb", "sglang", "mooncake", "torch", "torch_versions", "_wheels"})

    def __init__(self, kb: Facts | KnowledgeBase | None, *,
                 kb_path: str | None = None) -> None:
        #: the validated KB the facts came from, when the graph was built from one
        self._model: KnowledgeBase | None = None
        #: the KB file the facts were read from (its resolved tables answer for it)
        self.kb_path = kb_path
        self._torch_for: dict[str, list[tuple[str, str]]] = {}
        #: what queries derive from the facts, kept (see ``moonpin.resolver.query``)
        self.memo: dict[Any, Any] = {}
        #: makes the stack graph that resolves :meth:`stack_status` when no resolved table
        #: of the KB file holds it (``moonpin.resolver.stacks.attach`` or the API hands it
        #: in; None: stacks are not judged)
        self.stacks_from: Callable[[], Any] | None = None
        if kb is not None:
            self._load(kb)
        elif kb_path is None:
            raise ValueError("a graph needs a KB or the path of one")

    if not TYPE_CHECKING:  # (mypy keeps checking every other attribute's name)
        def __getattr__(self, name: str) -> Any:
            # only for an attribute not set yet: the facts of a graph made by from_path
            if name not in CompatGraph._LAZY or "kb_path" not in self.__dict__:
                raise AttributeError(name)
            self._load(self._read(self.kb_path or ""))
            return self.__dict__[name]

    @property
    def loaded(self) -> bool:
        """Whether the facts were read (a lookup needed them)."""
        return "kb" in self.__dict__

    def sglang_versions(self) -> list[Version]:
        """Every SGLang version the KB holds (the keys of :attr:`sglang`), from its names
        document, else its summary, while the facts are not read."""
        if not self.loaded and self.kb_path is not None:
            from moonpin.resolver.tables import documents

            named = documents.names(self.kb_path)
            held = named.get("sglang") if named is not None else None
            if held is None:
                found = documents.load_summary(self.kb_path)
                held = [h.version for h in found.sglang] if found is not None else None
            if held is not None:
                try:
                    return list({Version(v): None for v in held})
                except InvalidVersion:
                    pass
        return list(self.sglang)

    @staticmethod
    def _read(path: str) -> Facts | KnowledgeBase:
        from moonpin.resolver.tables import documents

        found = documents.load_facts(path)
        if found is not None:
            return found
        from pathlib import Path

        from moonpin.kb import store

        return store.load(Path(path))

    def _load(self, kb: Facts | KnowledgeBase) -> None:
        from moonpin.kb import facts as kf

        if not isinstance(kb, kf.Facts):  # a validated KnowledgeBase (tests, a fresh scrape)
            self._model = kb
            kb = kf.from_model(kb)
        self.kb = kb
        self.sglang = {}
        self.mooncake: dict[tuple[str, Version], Mooncake] = {}
        self.torch: dict[Version, Torch] = {}
        self.torch_versions: list[Version] = []
        for v in kb.torch_versions:
            try:
                self.torch_versions.append(Version(v))
            except InvalidVersion:
                continue
        self.torch_versions.sort()
        for t in kb.torch:
            self.torch[Version(t.version)] = t
        for s in kb.sglang:
            if s.source != "index" and Version(s.version) in self.sglang:
                continue  # the index's record of a version wins over a local one
            self.sglang[Version(s.version)] = s
        self._wheels = {}
        for r in kb.mooncake:
            self.mooncake[(r.dist, Version(r.version))] = r
            self._wheels[(r.dist, r.version)] = [WheelView(r.dist, r.version, w)
                                                 for w in r.wheels]

    @classmethod
    def from_path(cls, kb_path: str | os.PathLike[str] | None = None) -> CompatGraph:
        """The graph of the KB at ``kb_path`` (default: the shipped one), read from its
        derived facts when they belong to it, else from the KB itself."""
        from moonpin.kb.paths import default_kb_path
        from moonpin.resolver.tables import documents

        path = os.fspath(kb_path) if kb_path is not None else os.fspath(default_kb_path())
        if not (os.path.isfile(path)
                and os.path.isfile(documents.facts_file(path))):
            return cls(cls._read(path), kb_path=path)  # no derived facts: read (and check) now
        return cls(None, kb_path=path)

    def launch(self, version: str) -> dict[str, Any] | None:
        """The SGLang release's launch-rules record (``moonpin.kb.models.LaunchRules`` as JSON),
        None when the KB holds none. Read from ``resolved/_launch-<version>.json`` when
        that belongs to the KB, else from the KB itself."""
        if self._model is None and self.kb_path is not None:
            from moonpin.resolver.tables import per_release

            rec = per_release.load_launch(self.kb_path, version)
            if rec is not None:
                return rec
            from pathlib import Path

            from moonpin.kb import store

            self._model = store.load(Path(self.kb_path))
        if self._model is None:
            return None
        for r in self._model.sglang:
            if r.version == version and r.launch is not None:
                out: dict[str, Any] = r.launch.model_dump(mode="json")
                return out
        return None

    @cached_property
    def g(self) -> nx.DiGraph:
        """The facts as a networkx graph (see the module's docstring)."""
        import networkx as nx

        g: nx.DiGraph = nx.DiGraph()
        for t in self.kb.torch:
            g.add_node(("torch", t.version), release=t)
        for version in self.torch_versions:
            g.add_node(("torch", str(version)))
        for s in self.sglang.values():
            node = ("sglang", s.version)
            g.add_node(node, release=s)
            for tv, line in self.torch_for(s):
                g.add_edge(node, ("torch", tv), kind="requires", line=line)
        for (dist, _), r in self.mooncake.items():
            rnode = ("mooncake", dist, r.version)
            g.add_node(rnode, release=r)
            for wv in self._wheels[(dist, r.version)]:
                wnode = ("wheel", wv.wheel.artifact.filename)
                g.add_node(wnode, wheel=wv)
                g.add_edge(rnode, wnode, kind="has")
                for b in wv.wheel.builds:
                    bnode = ("build", wv.wheel.artifact.filename, b.member)
                    g.add_node(bnode, build=b)
                    g.add_edge(wnode, bnode, kind="contains")
                    if b.torch:
                        g.add_edge(bnode, ("torch", b.torch), kind="targets")
        return g

    # -- lookups ------------------------------------------------------------------

    def stack_status(self, s: Sglang, torch: str, python: str, arch: str,
                     ) -> tuple[bool | None, str]:
        """Whether the extensions the SGLang release requires (its Requires-Dist pins)
        install beside ``torch`` on this python and platform: a clique of the stack graph
        (``moonpin.resolver.stacks``), read from the KB file's resolved table when that
        belongs to it (a torch the release does not admit, or a python no wheel names, is not
        judged there), else resolved by :attr:`stacks_from`; ``(True, "")`` when neither
        is there. ``(False | None, why)`` otherwise, why naming the edge that breaks it."""
        key = ("stack", s.version, torch, python, arch)
        hit = self.memo.get(key)
        if hit is not None:
            return hit  # type: ignore[no-any-return]
        out: tuple[bool | None, str] | None = None
        if s.source == "index":
            out = self.stack_tabled(s.version, torch, python, arch,
                                    lambda: any(t == torch for t, _ in self.torch_for(s)))
        if out is None:
            if self.stacks_from is None:
                out = (True, "")
            else:
                if "stacks" not in self.memo:
                    self.memo["stacks"] = self.stacks_from()
                out = self.memo["stacks"].holds(s, torch, python, arch)
        self.memo[key] = out
        return out

    def stack_tabled(self, sglang: str, torch: str, python: str, arch: str,
                     admitted: Callable[[], bool]) -> tuple[bool | None, str] | None:
        """:meth:`stack_status` of the index's SGLang release ``sglang`` as the KB file's
        stacks table says it (``admitted()``: whether the release admits ``torch``); None
        when there is no such table (then the stack graph judges)."""
        if self.kb_path is None:
            return None
        from moonpin.resolver.tables import per_release

        if "stacks-table" not in self.memo:
            self.memo["stacks-table"] = per_release.load_stacks(self.kb_path)
        table = self.memo["stacks-table"]
        if table is None:
            return None
        # the table holds each torch the release admits on every python a wheel names;
        # another torch or python is not judged here (SGLang's torch requirement, or the
        # lack of a wheel, already refuses it)
        said = None
        if python in table["pythons"] and arch in table["arches"] and admitted():
            said = table["broken"].get(sglang, {}).get(torch, {}).get(f"{python}/{arch}")
        return (True, "") if said is None else (said[0], said[1])

    def sglang_heads(self) -> list[tuple[Version, str, str, str | None]]:
        """(version, its spelling, source, process-group module) of each SGLang release
        :attr:`sglang` holds (the index's record of a version wins over a local one), newest
        first; from the KB's summary while the facts are not read."""
        if not self.loaded and self.kb_path is not None:
            from moonpin.resolver.tables import documents

            found = documents.load_summary(self.kb_path)
            if found is not None:
                try:
                    won: dict[Version, tuple[str, str, str | None]] = {}
                    for h in found.sglang:  # as _load keeps them
                        v = Version(h.version)
                        if h.source != "index" and v in won:
                            continue
                        won[v] = (h.version, h.source, h.module)
                    return [(v, *won[v]) for v in sorted(won, reverse=True)]
                except InvalidVersion:
                    pass
        return [(v, s.version, s.source, s.pg.module)
                for v, s in sorted(self.sglang.items(), reverse=True)]

    def torch_releases(self) -> list[Version]:
        """:attr:`torch_versions` (every torch release the KB lists, sorted), from the KB's
        names document while the facts are not read (spelling a torch as typed needs no
        more)."""
        if not self.loaded and self.kb_path is not None:
            from moonpin.resolver.tables import documents

            found = documents.names(self.kb_path)
            listed = found.get("torch") if found is not None else None
            if listed is not None:
                out = []
                for v in listed:
                    try:
                        out.append(Version(v))
                    except InvalidVersion:
                        continue
                return sorted(out)
        return self.torch_versions

    def dists(self) -> list[str]:
        """The mooncake distributions the KB holds releases of (from its names document,
        else its summary, while the facts are not read)."""
        if not self.loaded and self.kb_path is not None:
            from moonpin.resolver.tables import documents

            named = documents.names(self.kb_path)
            if named is not None:
                return list(named["dists"])
            found = documents.load_summary(self.kb_path)
            if found is not None:
                return sorted({m.dist for m in found.mooncake})
        return sorted({d for d, _ in self.mooncake})

    def wheels(self, dist: str, version: str) -> list[WheelView]:
        return list(self._wheels.get((dist, version), ()))

    def torch_for(self, sglang: Sglang) -> list[tuple[str, str]]:
        """Torch releases the SGLang release admits (oldest first), with the line that
        admits each; [] for a release not in the KB."""
        winner = self.sglang.get(Version(sglang.version))  # the index's record, if any
        if winner is None:
            return []
        got = self._torch_for.get(winner.version)
        if got is None:
            seen: dict[str, str] = {}
            for text, spec in torch_lines(winner):
                for tv in self.torch_versions:
                    if spec.contains(tv, prereleases=True):
                        seen[str(tv)] = text  # the last line admitting it, as the graph had
            got = self._torch_for[winner.version] = sorted(seen.items(),
                                                           key=lambda t: Version(t[0]))
        return list(got)

    def builds_targeting(self, torch: str) -> list[Node]:
        return [("build", wv.wheel.artifact.filename, b.member)
                for views in self._wheels.values() for wv in views
                for b in wv.wheel.builds if b.torch == torch]

    def find_sglang(self, version: str) -> Sglang | None:
        return self.sglang.get(Version(version))

    def find_mooncake(self, dist: str, version: str) -> Mooncake | None:
        return self.mooncake.get((canonical_name(dist), Version(version)))
