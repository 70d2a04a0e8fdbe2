"""Build a ``KnowledgeBase`` from a compact scenario description (see ``cases/*.json``).

The compact form names only what a scenario is about; everything else gets a
plausible default (artifacts, evidence, member paths, ABI tags, names checked):

``sglang``: ``{"version", "module" (omit: imports no mooncake PG module), "names",
"backends", "torch" (Requires-Dist lines), "alternatives", "optional", "source"}``.

``mooncake``: ``{"dist", "version", "wheels": [{"python" (tag or list), "arch",
"platform", "loaders", "builds"}]}``. ``loaders`` maps a loader module to a list of
import templates (the standard prebuilt scheme: regex ``\\d+(?:\\.\\d+)*``, separator
``_``) or to a dict ``{"kind": "prebuilt"|"jit-compile"|"unknown", "imports",
"version_regex", "separator", "toolchain", "sources", "source_names",
"source_backends", "note"}``. A build is ``{"module" ("pg_2_13_0", "_ep", "ep"...),
"names", "backends", "cuda", "torch", "torch_from", "names_checked", "read_error",
"complete", "abi" ("abi3" for a limited-API build)}``.

``torch``: ``{"version", "cuda": {"x86_64": 13, "aarch64": null}}`` (an arch left out has
no variant). ``torch_versions``: extra versions listed on the index (the ``torch``
entries are always listed). ``unread``: :class:`moonpin.kb.models.Unread` fields.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timezone
from typing import Any

from moonpin.kb.models import (
    Artifact,
    Build,
    KnowledgeBase,
    LoaderImport,
    LoaderScheme,
    MooncakeRelease,
    MooncakeWheel,
    PGRequirement,
    ScrapeInfo,
    SglangRelease,
    TorchRelease,
    TorchVariant,
    Unread,
)

__all__ = ["DEFAULT_NAMES_CHECKED", "STANDARD_REGEX", "build_kb", "wheel_filename"]

STANDARD_REGEX = r"\d+(?:\.\d+)*"

#: What the scraper looks for in every extension module's bytes.
DEFAULT_NAMES_CHECKED = (
    "MooncakeBackendOptions", "get_active_ranks", "get_peer_state", "join_group", "mooncake",
    "mooncake-cpu", "recover_ranks", "register_backend", "set_device_filter", "set_host_ip",
    "set_transfer_engine",
)


def _artifact(filename: str) -> Artifact:
    sha = hashlib.sha256(filename.encode()).hexdigest()
    return Artifact(filename=filename, url=f"https://index.invalid/packages/{filename}",
                    sha256=sha, size=1000 + len(filename))


def _sglang(d: dict[str, Any]) -> SglangRelease:
    version = d["version"]
    module = d.get("module")
    evidence = (f"sglang/srt/distributed/parallel_state.py:{100 + i}"
                for i in range(len(d.get("names", [])) or 1))
    pg = PGRequirement(
        module=module,
        alternatives=tuple(d.get("alternatives", ())),
        names=tuple(d.get("names", ())),
        backends=tuple(d.get("backends", ())),
        optional=d.get("optional", False),
        evidence=tuple(evidence) if module else (),
    )
    return SglangRelease(
        version=version,
        source=d.get("source", "index"),
        artifact=_artifact(f"sglang-{version}-py3-none-any.whl"),
        requires_python=d.get("requires_python", ">=3.10"),
        torch_requirements=tuple(d.get("torch", ())),
        files_analyzed=d.get("files_analyzed", 100),
        pg=pg,
    )


def _loader(module: str, spec: list[str] | dict[str, Any]) -> LoaderScheme:
    if isinstance(spec, list):
        spec = {"imports": spec}
    kind = spec.get("kind", "prebuilt")
    member = "mooncake/" + module.removeprefix("mooncake.") + ".py"
    imports = tuple(
        LoaderImport(template=t, line=10 + 10 * i,
                     on_missing=f"Mooncake was not built against torch=={{torch_version}}. ({t})")
        for i, t in enumerate(spec.get("imports", ())))
    prebuilt = kind == "prebuilt"
    return LoaderScheme(
        module=module,
        member=member,
        kind=kind,
        imports=imports,
        version_regex=spec.get("version_regex", STANDARD_REGEX if prebuilt else None),
        separator=spec.get("separator", "_" if prebuilt else None),
        toolchain=tuple(spec.get("toolchain", ())),
        sources=tuple(spec.get("sources", ["mooncake/csrc/pg.cpp"] if kind == "jit-compile"
                                   else ())),
        source_names=tuple(spec.get("source_names", ())),
        source_backends=tuple(spec.get("source_backends", ())),
        note=spec.get("note"),
    )


def _build(d: dict[str, Any], python: str, arch: str) -> Build:
    module = d["module"]
    digits = python.removeprefix("cp")
    abi = d.get("abi", f"cpython-{digits}-{arch}-linux-gnu")
    member = f"mooncake/{module}.{abi}.so"
    m = re.fullmatch(r"(_?[a-z]+)_(\d+(?:_\d+)*)", module)
    if m:
        family, torch, torch_from = m.group(1), m.group(2).replace("_", "."), "filename"
    else:
        family, torch, torch_from = module, None, None
    torch = d.get("torch", torch)
    torch_from = d.get("torch_from", torch_from if torch else None)
    names = tuple(d.get("names", ()))
    backends = tuple(d.get("backends", ()))
    checked = d.get("names_checked")
    if checked is None:
        checked = sorted(set(names) | set(DEFAULT_NAMES_CHECKED))
    cuda = d.get("cuda")
    needed = ["libc10.so", "libtorch.so"] if family != "_ep" else ["libibverbs.so.1"]
    if cuda is not None:
        needed.append(f"libcudart.so.{cuda}")
    return Build(
        member=member,
        family=family,
        torch=torch,
        torch_from=torch_from,
        abi=abi,
        size=1_000_000,
        compressed_size=300_000,
        names=names,
        names_checked=tuple(checked),
        backends=backends,
        needed=tuple(needed),
        needed_method="dynamic" if cuda is not None else "none",
        cuda_major=cuda,
        complete=d.get("complete", True),
        read_error=d.get("read_error"),
    )


def wheel_filename(dist: str, version: str, python: str, platform: str) -> str:
    return f"{dist.replace('-', '_')}-{version}-{python}-{python}-{platform}.whl"


def _wheel(dist: str, version: str, d: dict[str, Any]) -> MooncakeWheel:
    pythons = d["python"] if isinstance(d["python"], list) else [d["python"]]
    arch = d.get("arch", "x86_64")
    platform = d.get("platform", f"manylinux_2_28_{arch}")
    return MooncakeWheel(
        artifact=_artifact(wheel_filename(dist, version, ".".join(pythons), platform)),
        python_tags=tuple(pythons),
        abi_tags=tuple(pythons),
        platform_tags=(platform,),
        loaders=tuple(_loader(m, s) for m, s in d.get("loaders", {}).items()),
        builds=tuple(_build(b, pythons[0], arch) for b in d.get("builds", ())),
    )


def _torch(d: dict[str, Any]) -> TorchRelease:
    version = d["version"]
    variants = []
    for arch, cuda in d.get("cuda", {}).items():
        platform = f"manylinux_2_28_{arch}"
        evidence = (f"nvidia-cuda-runtime-cu{cuda}==...; platform_system == \"Linux\""
                    if cuda is not None else "no CUDA runtime requirement")
        variants.append(TorchVariant(
            platform=platform, arch=arch, cuda_major=cuda, evidence=evidence,
            artifact=_artifact(f"torch-{version}-cp312-cp312-{platform}.whl")))
    return TorchRelease(version=version, variants=tuple(variants))


def build_kb(slice_: dict[str, Any]) -> KnowledgeBase:
    """The KB a compact scenario describes."""
    torch = [_torch(t) for t in slice_.get("torch", ())]
    listed = [t.version for t in torch] + list(slice_.get("torch_versions", ()))
    seen: list[str] = []
    for v in listed:
        if v not in seen:
            seen.append(v)
    return KnowledgeBase(
        scrape=ScrapeInfo(scraped_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
                          index_url="https://index.invalid/", moonpin_version="0.1.0"),
        sglang=tuple(_sglang(s) for s in slice_.get("sglang", ())),
        mooncake=tuple(
            MooncakeRelease(dist=r["dist"], version=r["version"],
                            wheels=tuple(_wheel(r["dist"], r["version"], w)
                                         for w in r.get("wheels", ())))
            for r in slice_.get("mooncake", ())),
        torch=tuple(torch),
        torch_versions=tuple(seen),
        unread=tuple(Unread(**u) for u in slice_.get("unread", ())),
    )
