"""SGLang from a source tree, an installed site-packages, or a tagged source archive.

Same extractors as for wheels (``scrapers.sglang``); nothing is imported or run.
A source tree also yields the mooncake version the release itself builds and
tests with (its Dockerfiles and CI scripts), which no package metadata declares.
"""

from __future__ import annotations

import ast
import hashlib
import io
import re
import tarfile
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from kb.errors import ArchiveError, UsageError
from kb.models import Artifact, MooncakePin, SglangRelease
from scrapers import sglang as sg
from scrapers.fetch import Fetcher
from scrapers.pyast import FileAnalysis
from scrapers.pypi import parse_metadata

__all__ = ["find_pins", "release_from_members", "scrape_archive", "scrape_path"]

#: Files of a source tree where the release pins the mooncake it builds and tests with.
_PIN_FILES = re.compile(
    r"(^|/)(docker/[^/]*Dockerfile[^/]*|Dockerfile[^/]*|scripts/ci/[^/]+\.sh|"
    r"\.github/workflows/[^/]+\.ya?ml|[^/]*requirements[^/]*\.txt|pyproject\.toml)$"
)
_PIN_REQ = re.compile(r"(mooncake[-_]transfer[-_]engine(?:[-_][a-z0-9]+)*)\s*(==|>=|~=)\s*"
                      r"([0-9][0-9A-Za-z.+!]*)", re.I)
_PIN_ARG = re.compile(r"\bMOONCAKE_VERSION\s*[=:]\s*[\"']?v?([0-9][0-9A-Za-z.+]*)")
MAX_ARCHIVE = 512 * 1024 * 1024
MAX_MEMBER = 16 * 1024 * 1024


def find_pins(member: str, text: str) -> list[MooncakePin]:
    """``mooncake-transfer-engine==X`` requirements and ``ARG MOONCAKE_VERSION=X`` lines."""
    out: list[MooncakePin] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in _PIN_REQ.finditer(line):
            out.append(MooncakePin(dist=str(canonicalize_name(m.group(1))),
                                   spec=f"{m.group(2)}{m.group(3)}", member=member, line=lineno))
        for m in _PIN_ARG.finditer(line):
            out.append(MooncakePin(dist="mooncake-transfer-engine", spec=f"=={m.group(1)}",
                                   member=member, line=lineno))
    return out


def _version_from_source(text: bytes) -> str | None:
    """``__version__ = "0.5.18"`` read with ast (sglang/version.py)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "__version__"
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            return node.value.value
    return None


def _torch_lines(lines: Iterable[str]) -> tuple[str, ...]:
    out = []
    for line in lines:
        try:
            if canonicalize_name(Requirement(line).name) == "torch":
                out.append(line)
        except InvalidRequirement:
            continue
    return tuple(out)


def _pyproject_requirements(text: str) -> list[str]:
    try:
        import tomllib  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # Python 3.10: no TOML reader in the standard library
        return re.findall(r'"(torch\b[^"]*)"', text)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return []
    project = doc.get("project", {})
    lines = list(project.get("dependencies", []))
    for group in project.get("optional-dependencies", {}).values():
        lines += list(group)
    return [str(x) for x in lines]


def release_from_members(
    members: Iterable[tuple[str, bytes | OSError]],
    *,
    label: str,
    url: str,
    source: str,
    version: str | None,
    fallback_version: str | None = None,
) -> SglangRelease:
    """Build one release from the files of a tree or archive (paths relative, POSIX).

    The SGLang package root is the folder holding ``sglang/__init__.py`` (``python/``
    in the git repository, the site-packages folder in an installed environment).
    """
    if version is not None:  # a bad --version is said before minutes of reading
        try:
            Version(version)
        except InvalidVersion as e:
            raise UsageError(f"{label}: version {version!r} is not PEP 440",
                             hint="pass --version with a PEP 440 version") from e
    files = list(members)
    roots = sorted({p[: -len("sglang/__init__.py")] for p, _ in files
                    if p == "sglang/__init__.py" or p.endswith("/sglang/__init__.py")},
                   key=len)
    if not roots:
        raise UsageError(f"{label}: no sglang package found (no sglang/__init__.py)",
                         hint="point --from-path at an SGLang checkout, its python/ folder, "
                              "or a site-packages folder")
    root = roots[0]
    digest = hashlib.sha256()
    total = 0
    analyses: list[tuple[str, FileAnalysis]] = []
    pins: list[MooncakePin] = []
    requires: list[str] = []
    requires_python: str | None = None
    found_version: str | None = None
    for path, data in sorted(files, key=lambda t: t[0]):
        if isinstance(data, bytes):
            digest.update(path.encode() + b"\0" + hashlib.sha256(data).digest())
            total += len(data)
        rel = path[len(root):] if path.startswith(root) else None
        if rel is not None and rel.startswith("sglang/") and rel.endswith(".py"):
            if isinstance(data, OSError):
                analyses.append((rel, sg._failed(rel, f"unreadable: {data.strerror or data}")))
            else:
                analyses.append((rel, sg.analyze_member(rel, data)))
            if rel == "sglang/version.py" and isinstance(data, bytes):
                found_version = found_version or _version_from_source(data)
        if not isinstance(data, bytes):
            continue
        if _PIN_FILES.search(path):
            pins += find_pins(path, data.decode("utf-8", "replace"))
        if path.endswith("pyproject.toml") and path[: -len("pyproject.toml")] in (root, ""):
            requires += _pyproject_requirements(data.decode("utf-8", "replace"))
        if re.search(r"(^|/)sglang-[^/]+\.dist-info/METADATA$", path):
            meta = parse_metadata(data.decode("utf-8", "replace"))
            requires += list(meta.requires_dist)
            requires_python = meta.requires_python
            found_version = meta.version or found_version
    version = version or found_version or fallback_version
    if not version:
        raise UsageError(f"{label}: cannot tell which SGLang version this is",
                         hint="pass --version, e.g. --version 0.5.18.dev0")
    try:
        Version(version)
    except InvalidVersion as e:
        raise UsageError(f"{label}: version {version!r} is not PEP 440",
                         hint="pass --version with a PEP 440 version") from e
    release = sg.facts_from_files(analyses).release(
        version, source,
        Artifact(filename=label, url=url, sha256=digest.hexdigest(), size=total),
        requires_python=requires_python, torch_requirements=_torch_lines(requires),
        mooncake_pins=tuple(pins))
    # The launch-argument rules, from the same members a wheel's are read from.
    from scrapers import server_args as sa

    by_rel = {path[len(root):]: data for path, data in files if path.startswith(root)}
    wanted = sa.launch_members(n for n in by_rel if n.startswith("sglang/"))
    texts: dict[str, bytes] = {}
    for n in wanted:
        text = by_rel.get(n)
        if isinstance(text, bytes):
            texts[n] = text
    launch = sa.launch_record_from(texts) if texts else None
    if launch is not None:
        release = release.model_copy(update={"launch": launch})
    return release


_SKIP_DIRS = {".git", "node_modules", "__pycache__", ".venv", "build", "dist"}


def _walk(root: Path) -> Iterator[tuple[str, bytes | OSError]]:
    wanted = re.compile(r"(\.py|METADATA|Dockerfile[^/]*|\.sh|\.ya?ml|\.txt|\.toml)$")
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            entries = sorted(d.iterdir())
        except OSError as e:
            yield d.relative_to(root).as_posix() + "/", e
            continue
        for p in entries:
            if p.is_symlink():
                continue
            if p.is_dir():
                if p.name not in _SKIP_DIRS:
                    stack.append(p)
                continue
            rel = p.relative_to(root).as_posix()
            if not wanted.search(rel):
                continue
            try:
                yield rel, p.read_bytes()
            except OSError as e:
                yield rel, e


def scrape_path(path: Path, *, version: str | None = None) -> SglangRelease:
    """An SGLang checkout, its ``python/`` folder, or a site-packages folder."""
    if not path.exists():
        raise UsageError(f"{str(path)!r} does not exist")
    if path.is_file():
        data = path.read_bytes()
        return release_from_members(_archive_members(data, str(path)), label=path.name,
                                    url=path.resolve().as_uri(), source="archive",
                                    version=version)
    return release_from_members(_walk(path), label=str(path), url=path.resolve().as_uri(),
                                source="path", version=version)


def _archive_members(data: bytes, label: str) -> Iterator[tuple[str, bytes | OSError]]:
    """Members of a .tar.gz / .zip source archive, read in memory; never extracted.

    The top folder every git-host archive has (``sglang-0.5.18/``) is stripped.
    """
    try:
        if data[:2] == b"PK":
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                items = [(i.filename, i) for i in zf.infolist() if not i.is_dir()]
                names = [n for n, _ in items]
                strip = _common_top(names)
                for name, info in items:
                    if info.file_size > MAX_MEMBER:
                        continue
                    yield name[len(strip):], zf.read(info)
            return
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tf:
            members = [m for m in tf.getmembers() if m.isfile()]
            strip = _common_top([m.name for m in members])
            for m in members:
                if m.size > MAX_MEMBER:
                    continue
                f = tf.extractfile(m)
                if f is not None:
                    yield m.name[len(strip):], f.read()
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as e:
        raise ArchiveError(f"{label}: not a readable source archive: {e}") from e


def _common_top(names: list[str]) -> str:
    tops = {PurePosixPath(n).parts[0] for n in names if "/" in n}
    if len(tops) == 1 and all("/" in n for n in names):
        return tops.pop() + "/"
    return ""


def scrape_archive(fetcher: Fetcher, url: str, *, version: str | None = None) -> SglangRelease:
    """A tagged source archive by URL (``…/archive/refs/tags/v0.5.18.tar.gz``)."""
    data = fetcher.get_bytes(url, max_bytes=MAX_ARCHIVE)
    if data is None:
        raise UsageError(f"{url}: not found (HTTP 404)", hint="check the tag in the URL")
    m = re.search(r"v?(\d+\.\d+[0-9A-Za-z.+]*)\.(?:tar\.gz|tgz|zip)$", url)
    label = url.rsplit("/", 1)[-1]
    return release_from_members(_archive_members(data, label), label=label, url=url,
                                source="archive", version=version,
                                fallback_version=m.group(1) if m else None)
