"""The compatibility graph, derived from a loaded KB (never stored).

Nodes are typed tuples: ``("sglang", version)``, ``("torch", version)``,
``("mooncake", dist, version)``, ``("wheel", filename)``, ``("build", filename, member)``.
Edges carry a ``kind``: ``requires`` (sglang -> torch, with the requirement line),
``has`` (mooncake -> wheel), ``contains`` (wheel -> build), ``targets`` (build -> torch).
The facts themselves stay on the KB models the nodes point to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

import networkx as nx
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from kb.models import (
    Build,
    KnowledgeBase,
    LoaderScheme,
    MooncakeRelease,
    MooncakeWheel,
    SglangRelease,
    TorchRelease,
)

__all__ = ["CompatGraph", "WheelView", "arch_of_platform", "build_python", "torch_lines"]

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


def torch_lines(release: SglangRelease) -> list[tuple[str, Requirement]]:
    """The release's torch requirement lines that parse, each with its text."""
    out = []
    for line in release.torch_requirements:
        try:
            out.append((line, Requirement(line)))
        except InvalidRequirement:
            continue
    return out


@dataclass(frozen=True)
class WheelView:
    """One mooncake wheel with what queries ask of it."""

    dist: str
    version: str
    wheel: MooncakeWheel

    @cached_property
    def pythons(self) -> frozenset[str]:
        return frozenset(t for t in self.wheel.python_tags if t.startswith("cp"))

    @cached_property
    def arches(self) -> frozenset[str]:
        return frozenset(a for p in self.wheel.platform_tags if (a := arch_of_platform(p)))

    def loader(self, module: str) -> LoaderScheme | None:
        return next((ld for ld in self.wheel.loaders if ld.module == module), None)

    def builds_named(self, module_short: str, python: str, arch: str) -> list[Build]:
        """Builds the import system would load for ``mooncake.<module_short>`` here."""
        out = []
        for b in self.wheel.builds:
            stem = b.member.rsplit("/", 1)[-1].split(".", 1)[0]
            if stem != module_short:
                continue
            py, ar = build_python(b.abi)
            if (b.abi and b.abi.startswith("abi3")) or (py == python and ar == arch):
                out.append(b)
        return out


class CompatGraph:
    """The KB as a graph, with the lookups queries need."""

    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = kb
        self.g: nx.DiGraph = nx.DiGraph()
        self.sglang: dict[Version, SglangRelease] = {}
        self.mooncake: dict[tuple[str, Version], MooncakeRelease] = {}
        self.torch: dict[Version, TorchRelease] = {}
        self.torch_versions: list[Version] = []
        for v in kb.torch_versions:
            try:
                self.torch_versions.append(Version(v))
            except InvalidVersion:
                continue
        self.torch_versions.sort()
        for t in kb.torch:
            self.torch[Version(t.version)] = t
            self.g.add_node(("torch", t.version), release=t)
        for tv in self.torch_versions:
            self.g.add_node(("torch", str(tv)))
        for s in kb.sglang:
            if s.source != "index" and Version(s.version) in self.sglang:
                continue  # the index's record of a version wins over a local one
            self.sglang[Version(s.version)] = s
            node = ("sglang", s.version)
            self.g.add_node(node, release=s)
            for text, req in torch_lines(s):
                for tv in self.torch_versions:
                    if req.specifier.contains(tv, prereleases=True):
                        self.g.add_edge(node, ("torch", str(tv)), kind="requires",
                                        line=text)
        for r in kb.mooncake:
            self.mooncake[(r.dist, Version(r.version))] = r
            rnode = ("mooncake", r.dist, r.version)
            self.g.add_node(rnode, release=r)
            for w in r.wheels:
                wnode = ("wheel", w.artifact.filename)
                self.g.add_node(wnode, wheel=WheelView(r.dist, r.version, w))
                self.g.add_edge(rnode, wnode, kind="has")
                for b in w.builds:
                    bnode = ("build", w.artifact.filename, b.member)
                    self.g.add_node(bnode, build=b)
                    self.g.add_edge(wnode, bnode, kind="contains")
                    if b.torch:
                        self.g.add_edge(bnode, ("torch", b.torch), kind="targets")

    # -- lookups ------------------------------------------------------------------

    def dists(self) -> list[str]:
        return sorted({d for d, _ in self.mooncake})

    def wheels(self, dist: str, version: str) -> list[WheelView]:
        rnode = ("mooncake", dist, version)
        if rnode not in self.g:
            return []
        return [self.g.nodes[w]["wheel"] for w in self.g.successors(rnode)]

    def torch_for(self, sglang: SglangRelease) -> list[tuple[str, str]]:
        """Torch releases the SGLang release admits, with the line that admits each."""
        node = ("sglang", sglang.version)
        if node not in self.g:
            return []
        out = [(n[1], d["line"]) for _, n, d in self.g.out_edges(node, data=True)
               if d.get("kind") == "requires"]
        return sorted(out, key=lambda t: Version(t[0]))

    def builds_targeting(self, torch: str) -> list[Node]:
        node = ("torch", torch)
        if node not in self.g:
            return []
        return [u for u, _, d in self.g.in_edges(node, data=True) if d.get("kind") == "targets"]

    def find_sglang(self, version: str) -> SglangRelease | None:
        return self.sglang.get(Version(version))

    def find_mooncake(self, dist: str, version: str) -> MooncakeRelease | None:
        return self.mooncake.get((str(canonicalize_name(dist)), Version(version)))
