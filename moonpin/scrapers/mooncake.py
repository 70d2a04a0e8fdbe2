"""mooncake wheels: loaders, compiled builds, the names and backends each build provides.

For every wheel file: the central directory (one suffix range), the loader
modules, and the compiled ``pg_*``/``ep_*``/``_ep`` builds. A build's facts come
from a prefix of its bytes (ELF header, read-only data, ``.dynamic``), streamed
out of the deflate data and capped, never the whole wheel.

Builds that are the same compiled module for another Python ABI of the same
release and platform are read once: their facts carry ``bytes_from`` naming
the build they were read from (same source, same pybind11 definitions). So are
builds whose bytes another wheel of the release already holds (the same CRC-32, size
and compressed size in the central directory). Sharing stays within a release, whose
wheels are read in a fixed order, so ``bytes_from`` does not depend on the order the
releases are read in (a ``.post`` re-shipping its predecessor's builds reads them again).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from moonpin.kb.errors import ArchiveError
from moonpin.kb.models import Build, LoaderScheme, MooncakeWheel
from moonpin.readers.elf import analysis as elf
from moonpin.readers.pyast.loader import TORCH, analyze_loader, cpp_string_names
from moonpin.scrapers.fetch import Fetcher
from moonpin.scrapers.pypi import IndexFile, metadata_member, parse_metadata, wheel_tags
from moonpin.scrapers.remote_zip import HttpSource, RemoteZip

__all__ = [
    "BASE_NAMES",
    "BuildName",
    "SharedReads",
    "parse_build_name",
    "read_order",
    "scrape_wheel",
    "torch_from_suffix",
]

#: Names looked for in every build, besides those the scraped SGLang releases import.
BASE_NAMES = frozenset({
    "MooncakeBackendOptions", "set_transfer_engine", "get_peer_state", "recover_ranks",
    "join_group", "set_device_filter", "get_active_ranks", "mooncake", "mooncake-cpu",
    "register_backend",
})
BACKENDS = ("mooncake", "mooncake-cpu")
_REQUIRES_TORCH = re.compile(rb"requires torch==([0-9][0-9A-Za-z.+]*)")
_CUDART = re.compile(r"^libcudart\.so\.(\d+)")
#: Never stream more than this much of one build (0.3.7's debug build is 25 MB) for its
#: dynamic section; the read-only data (the names) may take up to STRINGS_CAP.
PREFIX_CAP = 3 * 1024 * 1024
STRINGS_CAP = 8 * 1024 * 1024

_BUILD = re.compile(r"^mooncake/(?P<module>_?[a-z]+(?:_[0-9]+)*)\.(?P<abi>[^/]+)\.so$")


@dataclass(frozen=True)
class BuildName:
    member: str
    module: str  # e.g. "pg_2_13_0"
    abi: str  # e.g. "cpython-312-x86_64-linux-gnu"


def parse_build_name(member: str) -> BuildName | None:
    """An extension module directly under ``mooncake/`` (``pg_2_13_0.cpython-312-….so``)."""
    m = _BUILD.match(member)
    if not m or not m.group("abi").startswith(("cpython-", "abi3", "pypy")):
        return None
    return BuildName(member, m.group("module"), m.group("abi"))


def torch_from_suffix(module: str, template: str, separator: str) -> str | None:
    """Invert a loader template: ``pg_2_13_0`` with ``mooncake.pg_{torch}`` and "_" -> "2.13.0"."""
    short = template.removeprefix("mooncake.")
    if TORCH not in short:
        return None
    head, _, tail = short.partition(TORCH)
    if not (module.startswith(head) and module.endswith(tail)) or len(module) <= len(head):
        return None
    core = module[len(head):len(module) - len(tail) if tail else None]
    text = core.replace(separator, ".") if separator else core
    try:
        Version(text)
    except InvalidVersion:
        return None
    return text


class SharedReads:
    """Facts already read for (dist, version, arch, module) and for (dist, version,
    CRC-32, size, compressed size). Both keys hold one release, whose wheels one thread
    reads one after another in a fixed order, so which build reads and which reuse it is
    the same in every scrape (the dicts are only touched under the GIL)."""

    def __init__(self) -> None:
        self.done: dict[tuple[str, str, str, str], Build] = {}
        #: (dist, version, CRC-32, size, compressed size) -> the build read from those bytes
        self.by_content: dict[tuple[str, str, int, int, int], Build] = {}


def read_order(filename: str) -> tuple[bool, str]:
    """The order a release's wheels are read in: cp312 first, whose builds the other
    wheels of the release then reuse (see :class:`SharedReads`)."""
    return "-cp312-" not in filename, filename


def _family_and_torch(module: str, loaders: Iterable[LoaderScheme]) -> tuple[str, str | None]:
    for ld in loaders:
        for imp in ld.imports:
            if ld.separator is not None:
                t = torch_from_suffix(module, imp.template, ld.separator)
                if t is not None:
                    return imp.template.removeprefix("mooncake.").partition(TORCH)[0].rstrip(
                        ld.separator), t
            if imp.template == f"mooncake.{module}":
                return module, None
    return module, None


def _arch(abi: str) -> str:
    for a in ("x86_64", "aarch64"):
        if a in abi:
            return a
    return abi


def _read_build(z: RemoteZip, b: BuildName, wanted: frozenset[str]) -> dict[str, object]:
    """Stream the prefix of a build that holds its ELF facts; return Build fields."""
    e = z.by_name[b.member]
    out: dict[str, object] = {"size": e.file_size, "compressed_size": e.compressed_size,
                              "names_checked": tuple(sorted(wanted))}
    try:
        head = z.read_prefix(b.member, 64 * 1024)
        layout = elf.parse_layout(head, e.file_size)
        need = elf.required_prefix(layout)
        data = head
        for _ in range(2):  # a second round covers a .dynstr moved behind .dynamic
            need = min(need, PREFIX_CAP, e.file_size)
            if need > len(data):
                data = z.read_prefix(b.member, need)
            more = min(elf.required_prefix(layout, data), PREFIX_CAP, e.file_size)
            if more <= len(data):
                break
            need = more
        names_end = min(elf.strings_prefix(layout), e.file_size)
        if len(data) < names_end <= STRINGS_CAP:
            data = z.read_prefix(b.member, names_end)
        facts = elf.analyze(data, e.file_size, wanted, [_REQUIRES_TORCH])
        strings_complete = len(data) >= elf.strings_prefix(layout)
    except (elf.ElfError, ArchiveError) as ex:
        out["read_error"] = str(ex)
        out["complete"] = out["strings_complete"] = False
        return out
    out["names"] = tuple(sorted(n for n in facts.strings if n not in BACKENDS))
    out["backends"] = tuple(n for n in BACKENDS if n in facts.strings)
    out["needed"] = facts.needed
    out["needed_method"] = facts.needed_method
    out["runpath"] = facts.runpath
    out["complete"] = facts.complete
    out["strings_complete"] = strings_complete
    for lib in facts.needed:
        m = _CUDART.match(lib)
        if m:
            out["cuda_major"] = int(m.group(1))
    if "cuda_major" not in out and facts.needed_method != "dt_needed":
        out.update(_cudart_by_version(facts, len(data)))
    for match in facts.matches:
        m2 = _REQUIRES_TORCH.search(match.encode())
        if m2:
            out["bytes_torch"] = m2.group(1).decode()
    return out


#: sonames the CUDA runtime has used, each also the version name of its symbols
_CUDART_SONAMES = tuple(f"libcudart.so.{m}{minor}" for m in range(9, 21) for minor in ("", ".0"))


def _cudart_by_version(facts: elf.ElfFacts, prefix_len: int) -> dict[str, object]:
    """The CUDA runtime a build links, from its symbol version needs, when .dynamic and
    .dynstr lay beyond the prefix read (patchelf moves them to the end of the file)."""
    found = elf.versioned_libraries(facts.version_needs, _CUDART_SONAMES)
    majors = {int(m.group(1)) for name, _ in found if (m := _CUDART.match(name))}
    if len(majors) != 1:
        return {}
    name, need = found[0]
    return {
        "cuda_major": majors.pop(),
        "needed": tuple(dict.fromkeys((*facts.needed, *(n for n, _ in found)))),
        "needed_method": "verneed-hash",
        "needed_evidence": (
            f".gnu.version_r entry at offset {need.offset:#x} (first read-only PT_LOAD) "
            f"needs version {name!r} of the library it names (vna_hash {need.hash:#x} = "
            f"ELF hash of {name!r}, vna_name == vn_file); .dynamic lay beyond the "
            f"{prefix_len}-byte prefix read"),
    }


def scrape_wheel(
    fetcher: Fetcher,
    dist: str,
    version: str,
    wheel: IndexFile,
    wanted: frozenset[str],
    shared: SharedReads,
) -> tuple[MooncakeWheel, int, int]:
    """Read one mooncake wheel file; returns it and the bytes fetched for it."""
    src = HttpSource(fetcher, wheel.url, wheel.size, label=wheel.filename)
    z = RemoteZip(src)
    names = z.names()
    py_tags, abi_tags, plat_tags = wheel_tags(wheel.filename)
    own_abis = {t.replace("cp", "cpython-", 1) for t in abi_tags if t.startswith("cp")}
    loader_members = [n for n in names if n in ("mooncake/pg.py", "mooncake/ep.py")]
    meta_names = [metadata_member(names, wheel.filename)]
    jit_sources = [n for n in names if re.match(r"^mooncake/_pg_jit/.+\.(cpp|cc|cu)$", n)]
    z.prefetch(loader_members + meta_names[:1] + jit_sources)
    loaders = [_loader(z, m, names, wanted) for m in loader_members]
    requires_dist: tuple[str, ...] = ()
    if meta_names:
        requires_dist = parse_metadata(
            z.read(meta_names[0], cap=4 * 1024 * 1024).decode("utf-8", "replace")).requires_dist

    builds: list[Build] = []
    libraries: list[Build] = []
    for n in names:
        bn = parse_build_name(n)
        if bn is None:
            if re.match(r"^mooncake/libmooncake_[a-z_]+\.so$", n):
                libraries.append(Build(member=n, family=n.rsplit("/", 1)[1][:-3],
                                       size=z.by_name[n].file_size,
                                       compressed_size=z.by_name[n].compressed_size,
                                       complete=False))
            continue
        if not any(bn.module.startswith(p) for p in ("pg", "ep", "_ep")):
            continue
        builds.append(_build(z, n, bn, (dist, version, wheel.filename), loaders, own_abis,
                             wanted, shared))
    wheel_model = MooncakeWheel(
        artifact=wheel.artifact(),
        python_tags=py_tags, abi_tags=abi_tags, platform_tags=plat_tags,
        loaders=tuple(loaders), builds=tuple(builds), libraries=tuple(libraries),
        requires_dist=requires_dist,
    )
    return wheel_model, src.fetched, z.needed_bytes


def _loader(z: RemoteZip, member: str, names: list[str], wanted: frozenset[str],
            ) -> LoaderScheme:
    """The loading scheme of ``mooncake/pg.py`` or ``ep.py``; a JIT loader's sources are
    read for the names and backends they define."""
    module = "mooncake." + member.rsplit("/", 1)[1][:-3]
    scheme = analyze_loader(z.read(member, cap=4 * 1024 * 1024), member, module, names)
    if scheme.kind == "jit-compile":
        found: set[str] = set()
        for s in scheme.sources:
            found |= cpp_string_names(z.read(s, cap=16 * 1024 * 1024))
        scheme = scheme.model_copy(update={
            "source_names": tuple(sorted(found & wanted - set(BACKENDS))),
            "source_backends": tuple(b for b in BACKENDS if b in found),
        })
    return scheme


def _build(z: RemoteZip, n: str, bn: BuildName, where: tuple[str, str, str],
           loaders: list[LoaderScheme], own_abis: set[str], wanted: frozenset[str],
           shared: SharedReads) -> Build:
    """One build member of the wheel (``where``: dist, version, wheel filename): its bytes
    read when this wheel's interpreter loads it, else the facts of the same bytes read
    elsewhere (``shared``), else recorded as not read."""
    dist, version, filename = where
    family, torch = _family_and_torch(bn.module, loaders)
    key = (dist, version, _arch(bn.abi), bn.module)
    entry = z.by_name[n]
    content = (dist, version, entry.crc, entry.file_size, entry.compressed_size)
    prior = shared.done.get(key)
    # Read bytes for builds this wheel's interpreter loads; reuse for other ABIs.
    own = any(bn.abi.startswith(a + "-") for a in own_abis) or not own_abis
    if prior is None and own:
        prior = shared.by_content.get(content)  # the same bytes, read in another wheel
    if prior is not None and prior.read_error is None:
        fields: dict[str, object] = {
            k: getattr(prior, k) for k in ("names", "backends", "needed", "needed_method",
                                           "needed_evidence", "runpath", "cuda_major",
                                           "complete",
                                           "strings_complete", "names_checked")
        }
        fields["bytes_from"] = prior.bytes_from
        if prior.torch_from == "bytes":
            torch = prior.torch
        fields["size"] = entry.file_size
        fields["compressed_size"] = entry.compressed_size
    elif own:
        fields = _read_build(z, bn, wanted)
        bytes_torch = fields.pop("bytes_torch", None)
        if torch is None and isinstance(bytes_torch, str):
            torch = bytes_torch
            fields["torch_from"] = "bytes"
    else:
        fields = {"size": entry.file_size, "compressed_size": entry.compressed_size,
                  "complete": False, "strings_complete": False,
                  "read_error": "not read: built for another Python ABI than this wheel's"}
    if torch is not None and "torch_from" not in fields:
        fields["torch_from"] = "filename" if prior is None or prior.torch_from != "bytes" \
            else "bytes"
    build = Build(member=n, family=family, torch=torch, abi=bn.abi,
                  **fields)  # type: ignore[arg-type]
    if own and prior is None and build.read_error is None:
        shared.done[key] = shared.by_content[content] = build.model_copy(update={
            "bytes_from": f"{n} in {filename}"})
    elif own and prior is not None and key not in shared.done:
        shared.done[key] = prior
    return build

