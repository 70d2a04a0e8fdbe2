"""A fake worker image built from a scenario's KB slice, for the agreement test.

:func:`image_for` takes the combination ``moonpin explain`` evaluated (torch, python, arch,
wheel) and writes the site-packages tree a worker with exactly those facts would have:

* torch: ``torch/version.py`` with the version and the CUDA major the query assumed
  (:func:`tests.lib.images.add_torch`);
* the mooncake wheel: each loader as a real-shaped ``pg.py``/``ep.py`` (the loader's own
  regex and separator applied to ``torch.__version__``, then ``importlib.import_module``
  of each template), a JIT loader as :data:`tests.lib.images.JIT_LOADER`; each build an
  ELF object (:func:`tests.lib.elfbuild.build_so`) holding its names and backends as
  strings and ``libcudart.so.<cuda>`` as DT_NEEDED, named ``<module><ext suffix>``;
* SGLang: its dist-info with its torch requirement; its process-group requirement comes
  from the scenario's own KB, written next to the image and given with ``--kb``.

A scenario the image cannot express raises :class:`Inexpressible` with the reason.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

from moonpin.kb import store
from moonpin.kb.models import Build, KnowledgeBase, LoaderScheme
from moonpin.resolver.graph import CompatGraph, WheelView
from moonpin.resolver.query import resolve_torch
from tests.lib.elfbuild import build_so
from tests.lib.images import JIT_LOADER, add_dist, add_torch, ext_suffix

__all__ = ["Image", "Inexpressible", "image_for", "loader_source"]

#: What the placeholder stands for in a scraped import template
#: (moonpin.readers.pyast.loader.TORCH).
TORCH = "{torch}"


class Inexpressible(Exception):
    """The scenario names a fact a site-packages tree cannot carry."""


@dataclass(frozen=True)
class Image:
    site: Path
    kb: Path


def loader_source(ld: LoaderScheme) -> str:
    """A real-shaped loader for a scraped scheme (what mooncake's ``pg.py`` looks like)."""
    if ld.kind == "jit-compile":  # naming the sources the KB read, as the real one does
        names = tuple(src.rsplit("/", 1)[-1] for src in ld.sources) or ("pg_py.cpp",)
        return JIT_LOADER.replace('("pg_py.cpp", "mooncake_backend.cpp")', repr(names))
    if ld.kind != "prebuilt":
        # a computed name the scraper cannot follow (the "unknown" scheme)
        return ("import importlib\nimport os\n\n"
                "_m = importlib.import_module(os.environ.get('MOONCAKE_PG', 'mooncake.x'))\n")
    lines = ["import importlib", "import re", "", "import torch", ""]
    if ld.version_regex is not None:
        # a raw string, as mooncake writes it (the scraped regex holds no quote)
        lines.append(f'torch_version = re.match(r"{ld.version_regex}", '
                     "torch.__version__).group()")
    else:
        lines.append("torch_version = torch.__version__")
    sep = ld.separator if ld.separator is not None else "."
    lines.append(f"version_suffix = torch_version.replace('.', {sep!r})")
    for imp in ld.imports:
        head, placeholder, tail = imp.template.partition(TORCH)
        expr = repr(head) + (" + version_suffix" if placeholder else "")
        if tail:
            expr += f" + {tail!r}"
        lines += ["", "try:", f"    backend_module = importlib.import_module({expr})",
                  "except ModuleNotFoundError:",
                  "    raise ImportError(f\"Mooncake was not built against "
                  "torch=={torch_version}.\")",
                  "globals().update({k: v for k, v in backend_module.__dict__.items() "
                  "if not k.startswith('_')})"]
    return "\n".join(lines) + "\n"


def _build_bytes(b: Build) -> bytes:
    if b.read_error is not None or not b.complete:
        raise Inexpressible(f"{b.member}: its bytes were not read completely in the KB "
                            "(an image's bytes always are)")
    needed = [f"libcudart.so.{b.cuda_major}"] if b.cuda_major is not None else []
    machine = platform.machine()
    # a build whose torch the scraper read from its bytes says it there, as 0.3.7's does
    said = ([f"Mooncake Backend requires torch=={b.torch}"]
            if b.torch is not None and b.torch_from == "bytes" else [])
    return build_so(needed=[*needed, "libtorch.so"], strings=[*b.names, *b.backends, *said],
                    machine=machine if machine in ("x86_64", "aarch64") else "x86_64")


def _wheel(g: CompatGraph, dist: str, version: str, wheel: str | None) -> WheelView:
    for w in g.wheels(dist, version):
        if w.wheel.artifact.filename == wheel:
            return w
    raise Inexpressible(f"{dist} {version} has no wheel for the evaluated python/platform "
                        "(an installed image always has one)")


def image_for(kb: KnowledgeBase, explained: dict[str, object], root: Path) -> Image:
    """The image for the combination ``explained`` (``query.explain``'s answer) chose."""
    g = CompatGraph(kb)
    q = explained["query"]
    ev = explained["evaluated"]
    assert isinstance(q, dict) and isinstance(ev, dict)
    sglang = g.find_sglang(str(q["sglang"]))
    if sglang is None:
        raise Inexpressible("the SGLang release was not read (no facts to install)")
    dist, _, version = str(q["mooncake"]).partition("==")
    if g.find_mooncake(dist, version) is None:
        raise Inexpressible(f"{dist} {version} was not read (no facts to install)")
    t = resolve_torch(g, str(ev["torch"]), str(ev["arch"]))
    if not t.cuda_known:
        raise Inexpressible(f"torch's CUDA major is unknown ({t.cuda_why}); an image's "
                            "torch always says")
    site = root / "site-packages"
    site.mkdir(parents=True)
    add_torch(site, t.text, t.cuda)
    add_dist(site, "sglang", sglang.version, requires=sglang.torch_requirements)
    files: dict[str, bytes] = {"mooncake/__init__.py": b""}
    if sglang.pg.module is not None:
        w = _wheel(g, dist, version, ev["wheel"] if isinstance(ev["wheel"], str) else None)
        for ld in w.wheel.loaders:
            files[ld.member] = loader_source(ld).encode()
            if ld.kind == "jit-compile":
                for src in ld.sources:  # the names and backends the KB read from them
                    files[src] = "".join(f'm.def("{n}", &f);\n' for n in (
                        *ld.source_names, *ld.source_backends)).encode()
        for b in w.wheel.builds:
            stem = b.member.rsplit("/", 1)[-1].split(".", 1)[0]
            files[f"mooncake/{stem}{ext_suffix()}"] = _build_bytes(b)
    for rel, data in files.items():
        p = site / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    add_dist(site, dist, version, files=list(files))
    kb_path = root / "kb.json"
    store.save(kb, kb_path)
    return Image(site, kb_path)
