"""Wheels of the worker's other native extensions, read by one machinery from a recipe each
(``moonpin.scrapers.projects``): the central directory, METADATA, the members that hold
the loader rule (parsed with ``ast``), and the recipe's builds.

A build is fetched whole (its ``.dynamic`` lies at the end of the file) only when the
wheel is for x86_64 and its compressed size is at most :data:`WHOLE_CAP`; otherwise a
prefix of :data:`PREFIX_CAP` bytes gives its sonames and CUDA runtime. A build of another
Python ABI of the same release, architecture and module is not fetched again: its facts
carry ``bytes_from`` naming the one read (the builds differ only in the CPython API they
bind, not in torch's); neither are bytes another wheel of the release already held (same
CRC-32 and sizes). Sharing stays within a release, whose wheels are read in a fixed order,
so ``bytes_from`` does not depend on the order the releases are read in.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from moonpin.kb.errors import ArchiveError
from moonpin.kb.models import LoaderRule, NativeBuild, NativeWheel, RuleStep, UnmetRequirement
from moonpin.readers.native import builds as nb
from moonpin.readers.native import keyeval, rules
from moonpin.scrapers.fetch import Fetcher
from moonpin.scrapers.projects import Recipe, RuleInput
from moonpin.scrapers.pypi import IndexFile, metadata_member, parse_metadata, wheel_tags
from moonpin.scrapers.remote_zip import HttpSource, RemoteZip

__all__ = ["PREFIX_CAP", "WHOLE_CAP", "SharedBuilds", "build_module", "read_order",
           "scrape_wheel", "torch_target", "unmet"]

WHOLE_CAP = 24 * 1024 * 1024
PREFIX_CAP = 4 * 1024 * 1024
_SOURCE_CAP = 4 * 1024 * 1024
_MEMBER_CAP = 4 * 1024 * 1024 * 1024
#: what a whole build read may expand to (a 24 MB deflate stream of a 1 GB member is refused)
WHOLE_READ_CAP = 256 * 1024 * 1024
_SO = re.compile(r"^(?P<stem>[^/]+?)(?:\.(?P<abi>cpython-[^./]+|abi3|[^./]*-linux-gnu))?\.so$")


def build_module(member: str) -> tuple[str, str | None]:
    """(dotted module name, ABI tag) of a build member: ``a/b.cpython-312-x86_64-linux-gnu.so``
    -> ``("a.b", "cpython-312-x86_64-linux-gnu")``."""
    head, _, name = member.rpartition("/")
    m = _SO.match(name)
    stem, abi = (m.group("stem"), m.group("abi")) if m else (name[:-3], None)
    return ".".join([*(head.split("/") if head else []), stem]), abi


class SharedBuilds:
    """Build facts already read in this scrape, by (dist, version, arch, module) and by
    (dist, version, CRC-32, size, compressed size). Both keys hold one release: its wheels
    are read one after another in :func:`read_order`, so which build reads and which reuse
    it is the same in every scrape, whatever order the releases' threads run in, and
    whether or not a refresh kept another release that holds the same bytes."""

    def __init__(self) -> None:
        self.by_module: dict[tuple[str, str, str, str], NativeBuild] = {}
        self.by_content: dict[tuple[str, str, int, int, int], NativeBuild] = {}
        self.lock = threading.Lock()


def _arch(platforms: Iterable[str]) -> str:
    for p in platforms:
        for a in ("x86_64", "aarch64"):
            if p.endswith(a):
                return a
    return "any"


def read_order(filename: str) -> tuple[bool, bool, str]:
    """The order a release's wheels are read in: cp312 x86_64 first, whose whole builds
    the other wheels of the release then reuse (see :class:`SharedBuilds`)."""
    return "x86_64" not in filename, "-cp312-" not in filename, filename


#: the facts a build shares with the builds that reuse its reading (:func:`_build` copies them)
_SHARED = ("needed", "needed_method", "cuda_major", "undefined", "torch_undefined",
           "torch_undefined_digest", "complete", "read_error", "init")


def torch_target(module: str, steps: Iterable[RuleStep], torch_versions: Iterable[str],
                 ) -> tuple[str | None, str | None]:
    """(key, specifier) of a build whose name a ``dispatch`` step computes from
    ``torch.__version__``: the key is read off the name, the specifier is ``==X.Y.*`` when
    every final torch release on the index whose key it is shares that minor."""
    for s in steps:
        if s.kind != "dispatch" or s.key is None or "__version__" not in s.key:
            continue
        head, _, tail = s.target.partition("{key}")
        if not (module.startswith(head) and module.endswith(tail)) or len(module) <= len(
                head) + len(tail):
            continue
        key = module[len(head):len(module) - len(tail) if tail else None]
        series = set()
        for v in torch_versions:
            try:
                ver = Version(v)
            except InvalidVersion:
                continue
            if not ver.is_prerelease and keyeval.evaluate(s.key, v) == key:
                series.add(ver.release[:2])
        if len(series) == 1:
            major, minor = series.pop()
            return key, f"=={major}.{minor}.*"
        return key, None
    return None, None


def _pinned_torch(lines: Iterable[str]) -> str | None:
    for line in lines:
        try:
            r = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(r.name) == "torch" and r.marker is None:
            pins = [s for s in r.specifier if s.operator in ("==", "===") and "*" not in s.version]
            if len(pins) == 1:
                return f"=={pins[0].version}"
    return None


def unmet(lines: Iterable[str], listed: dict[str, list[str]]) -> tuple[UnmetRequirement, ...]:
    """Requirements (without an ``extra``) on a distribution whose releases on the index
    (``listed``: canonical name -> versions) are known, that no listed release meets."""
    out = []
    for line in lines:
        try:
            r = Requirement(line)
        except InvalidRequirement:
            continue
        if r.marker is not None and "extra" in str(r.marker):
            continue
        name = canonicalize_name(r.name)
        if name not in listed:
            continue
        ok = [v for v in listed[name] if r.specifier.contains(v, prereleases=True)]
        if not ok:
            have = listed[name]
            newest = max(have, key=Version) if have else None
            out.append(UnmetRequirement(
                requirement=line,
                reason=f"the index has no {name} release matching {r.specifier or '(any)'}"
                       + (f" (newest: {newest})" if newest else " (it lists none)")))
    return tuple(out)


def scrape_wheel(fetcher: Fetcher, recipe: Recipe, dist: str, version: str, wheel: IndexFile,
                 torch_versions: tuple[str, ...], shared: SharedBuilds,
                 ) -> tuple[NativeWheel, int, int]:
    """One wheel: (its facts, bytes fetched, lower bound of bytes needed)."""
    src = HttpSource(fetcher, wheel.url, wheel.size, label=wheel.filename)
    # a prefix of a build past the default member cap is still read (only PREFIX_CAP of it
    # is decompressed); whole reads are capped by WHOLE_READ_CAP below
    z = RemoteZip(src, member_cap=_MEMBER_CAP)
    names = z.names()
    py_tags, abi_tags, plat_tags = wheel_tags(wheel.filename)
    meta_member = metadata_member(names, wheel.filename)
    rule_members = [n for n in names if recipe.rule_members.match(n)]
    build_members = [n for n in names if recipe.builds.match(n)]
    z.prefetch([meta_member, *rule_members])
    meta = parse_metadata(z.read(meta_member, cap=_SOURCE_CAP).decode("utf-8", "replace"))
    modules = frozenset({*(build_module(b)[0] for b in build_members), *recipe.packages})
    packages = tuple(sorted({n.split("/", 1)[0] for n in names if "/" in n
                             and n.split("/", 1)[1] == "__init__.py"}))
    rule_list = _rules(z, recipe, rule_members, modules)
    all_steps = [s for r in rule_list for s in r.steps]
    pin = _pinned_torch(meta.requires_dist)
    arch = _arch(plat_tags)
    out_builds = []
    for b in build_members:
        module, abi = build_module(b)
        key, spec = torch_target(module, all_steps, torch_versions)
        torch_from = "filename" if spec else None
        if spec is None and pin is not None:
            spec, torch_from = pin, "requires-dist"
        e = z.by_name[b]
        base = NativeBuild(member=b, module=module, abi=abi, torch=spec,
                           torch_from=torch_from,  # type: ignore[arg-type]
                           torch_key=key, size=e.file_size, compressed_size=e.compressed_size)
        out_builds.append(_build(z, base, (dist, version, arch, wheel.filename), shared))
    model = NativeWheel(
        artifact=wheel.artifact(), python_tags=py_tags, abi_tags=abi_tags,
        platform_tags=plat_tags, requires_python=meta.requires_python,
        requires_dist=meta.requires_dist,
        torch_requirements=tuple(line for line in meta.requires_dist
                                 if re.match(r"^\s*torch\b(?![-_.\w])", line)),
        rules=tuple(rule_list), builds=tuple(out_builds), packages=packages)
    return model, src.fetched, z.needed_bytes


def _rules(z: RemoteZip, recipe: Recipe, members: list[str], modules: frozenset[str],
           ) -> list[LoaderRule]:
    by_package: dict[str, list[str]] = {}
    for m in members:
        match = recipe.rule_members.match(m)
        assert match is not None
        by_package.setdefault(match.group("package"), []).append(m)
    out = []
    for package, ms in sorted(by_package.items()):
        steps: list[RuleStep] = []
        errors: list[str] = []
        for m in sorted(ms):
            try:
                tree = rules.parse(z.read(m, cap=_SOURCE_CAP), m)
                steps += recipe.read(RuleInput(m, package, tree, modules, recipe.dists))
            except ArchiveError as e:
                errors.append(f"{m}: {e}")
            except (SyntaxError, ValueError) as e:  # not Python, NUL bytes, odd encoding
                errors.append(f"{m}: does not parse ({type(e).__name__}: {e})")
            except (RecursionError, MemoryError) as e:  # nested too deep for the parser
                errors.append(f"{m}: nested too deeply to read ({type(e).__name__})")
        steps.sort(key=lambda s: (ms.index(s.member) if s.member in ms else 0, s.line, s.order))
        out.append(LoaderRule(package=package, members=tuple(sorted(ms)),
                              steps=tuple(s.model_copy(update={"order": i})
                                          for i, s in enumerate(steps)),
                              errors=tuple(errors)))
    return out


def _build(z: RemoteZip, base: NativeBuild, where: tuple[str, str, str, str],
           shared: SharedBuilds) -> NativeBuild:
    dist, version, arch, filename = where
    e = z.by_name[base.member]
    by_module = (dist, version, arch, base.module)
    content = (dist, version, e.crc, e.file_size, e.compressed_size)
    name = base.module.rsplit(".", 1)[-1]
    with shared.lock:
        # the same bytes under another module name define another PyInit_<name> than the
        # one asked for: read them (copying init as unknown made the facts depend on order)
        prior = next((p for p in (shared.by_content.get(content),
                                  shared.by_module.get(by_module))
                      if p is not None and p.module.rsplit(".", 1)[-1] == name), None)
    if prior is not None:
        return base.model_copy(update={k: getattr(prior, k)
                                       for k in (*_SHARED, "bytes_from")})
    whole = arch == "x86_64" and e.compressed_size <= WHOLE_CAP
    try:
        data = (z.read(base.member, cap=WHOLE_READ_CAP) if whole
                else z.read_prefix(base.member, PREFIX_CAP))
    except ArchiveError as ex:
        return base.model_copy(update={"complete": False, "read_error": str(ex)})
    got = nb.read_build(data, e.file_size, base.module.rsplit(".", 1)[-1])
    build = base.model_copy(update={
        "needed": got.needed, "needed_method": got.needed_method, "cuda_major": got.cuda_major,
        "undefined": got.undefined, "torch_undefined": got.torch_undefined,
        "torch_undefined_digest": got.torch_undefined_digest, "init": got.init,
        "complete": got.complete, "read_error": got.read_error})
    if got.read_error is None:
        kept = build.model_copy(update={"bytes_from": f"{base.member} in {filename}"})
        with shared.lock:
            shared.by_content.setdefault(content, kept)
            shared.by_module.setdefault(by_module, kept)
    return build
