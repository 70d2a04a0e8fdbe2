"""SGLang from a source tree, an installed site-packages, or a tagged source archive.

Same extractors as for wheels (``moonpin.scrapers.sglang``); nothing is imported or run.
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
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from moonpin.kb.errors import ArchiveError, ReadRefused, UsageError
from moonpin.kb.files import read_regular
from moonpin.kb.models import (
    Artifact,
    BackendImport,
    DistPin,
    LaunchRules,
    MooncakePin,
    SglangRelease,
)
from moonpin.readers.launch import server_args as sa
from moonpin.readers.pyast.usage import FileAnalysis
from moonpin.scrapers import sglang as sg
from moonpin.scrapers.fetch import Fetcher
from moonpin.scrapers.pypi import parse_metadata
from moonpin.scrapers.report import Reporter

__all__ = ["find_pins", "release_from_members", "safe_name", "scrape_archive", "scrape_path"]

#: Files of a source tree where the release pins the mooncake it builds and tests with.
_PIN_FILES = re.compile(
    r"(^|/)(docker/[^/]*Dockerfile[^/]*|Dockerfile[^/]*|scripts/ci/[^/]+\.sh|"
    r"\.github/workflows/[^/]+\.ya?ml|[^/]*requirements[^/]*\.txt|pyproject\.toml)$"
)
_PIN_REQ = re.compile(r"(mooncake[-_]transfer[-_]engine(?:[-_][a-z0-9]+)*)\s*(==|>=|~=)\s*"
                      r"([0-9][0-9A-Za-z.+!]*)", re.I)
_PIN_ARG = re.compile(r"\bMOONCAKE_VERSION\s*[=:]\s*[\"']?v?([0-9][0-9A-Za-z.+]*)")
MAX_ARCHIVE = 512 * 1024 * 1024  # an archive's own bytes (download or file)
MAX_MEMBER = 16 * 1024 * 1024  # one member or tree file (larger ones are not read)
MAX_TOTAL = 512 * 1024 * 1024  # every member or tree file together, decompressed
MAX_NAME = 4096  # characters of a member name


def safe_name(name: str | bytes) -> str:
    """A member or file name as it can be printed and stored whatever its bytes: bytes
    that are not UTF-8 (a tree file's surrogate-escaped name, a zip's) as ``\\xNN``,
    control characters as ``\\uNNNN``-style escapes, and at most :data:`MAX_NAME`
    characters. A name already safe comes back unchanged."""
    if isinstance(name, bytes):
        text = name.decode("utf-8", "backslashreplace")
    else:
        text = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= MAX_NAME else text[:MAX_NAME] + f"...({len(text)} chars)"


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
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # the last two: nested
        return None  # past what the parser holds
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


#: The largest pyproject.toml parsed (SGLang's is ~10 KB; tomllib is super-linear on some
#: hostile shapes, e.g. a table header of 100,000 dotted parts).
MAX_PYPROJECT = 64 * 1024


def _pyproject_requirements(text: str) -> list[str]:
    if len(text) > MAX_PYPROJECT:
        return []
    try:
        import tomllib  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # Python 3.10: no TOML reader in the standard library
        return re.findall(r'"(torch\b[^"]*)"', text)
    try:
        doc = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError, ValueError):  # deep arrays, huge ints
        return []
    project = doc.get("project", {})
    if not isinstance(project, dict):
        return []
    deps = project.get("dependencies", [])
    lines = list(deps) if isinstance(deps, list) else []
    extras = project.get("optional-dependencies", {})
    for group in extras.values() if isinstance(extras, dict) else ():
        lines += list(group) if isinstance(group, list) else []
    return [x for x in lines if isinstance(x, str)]


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 100 else f"{text[:100]!r}... ({len(text)} characters)"


def release_from_members(
    members: Iterable[tuple[str, bytes | OSError]],
    *,
    label: str,
    url: str,
    source: str,
    version: str | None,
    fallback_version: str | None = None,
    reporter: Reporter | None = None,
) -> SglangRelease:
    """Build one release from the files of a tree or archive (paths relative, POSIX).

    The SGLang package root is the folder holding ``sglang/__init__.py`` (``python/``
    in the git repository, the site-packages folder in an installed environment).
    ``reporter`` hears of each source file analysed (a whole tree takes a while).
    """
    if version is not None:  # a bad --version is said before minutes of reading
        _pep440(label, version)
    report = reporter or Reporter()
    files = []
    report.start(f"reading {safe_name(label)[:60]}", 0, unit="files")
    for item in members:
        files.append(item)
        report.advance(item[0])
    report.finish()
    root = _package_root(files, label)
    digest = hashlib.sha256()
    total = 0
    analyses: list[tuple[str, FileAnalysis]] = []
    pins: list[MooncakePin] = []
    requires: list[str] = []
    ext_pins: list[DistPin] = []
    requires_python: str | None = None
    found_version: str | None = None
    report.start(f"analysing {safe_name(label)[:60]}",
                 sum(1 for p, _ in files if p.startswith(root) and p.endswith(".py")
                     and p[len(root):].startswith("sglang/")), unit="sources")
    for path, data in sorted(files, key=lambda t: t[0]):
        if isinstance(data, bytes):
            digest.update(path.encode("utf-8", "surrogateescape") + b"\0"
                          + hashlib.sha256(data).digest())
            total += len(data)
        rel = path[len(root):] if path.startswith(root) else None
        if rel is not None and rel.startswith("sglang/") and rel.endswith(".py"):
            if isinstance(data, OSError):
                analyses.append((rel, sg.failed(rel, f"unreadable: {data.strerror or data}")))
            else:
                analyses.append((rel, sg.analyze_member(rel, data)))
            report.advance(rel, nbytes=len(data) if isinstance(data, bytes) else 0)
            if rel == "sglang/version.py" and isinstance(data, bytes):
                found_version = found_version or _version_from_source(data)
        if not isinstance(data, bytes):
            continue
        if _PIN_FILES.search(path):
            pins += find_pins(path, data.decode("utf-8", "replace"))
        if path.endswith("pyproject.toml") and path[: -len("pyproject.toml")] in (root, ""):
            text = data.decode("utf-8", "replace")
            requires += _pyproject_requirements(text)
            ext_pins += sg.extension_pins_of(_pyproject_requirements(text), text, path)
        if re.search(r"(^|/)sglang-[^/]+\.dist-info/METADATA$", path):
            meta = parse_metadata(data.decode("utf-8", "replace"))
            requires += list(meta.requires_dist)
            ext_pins += sg.extension_pins(meta, data.decode("utf-8", "replace"), path)
            requires_python = meta.requires_python
            found_version = meta.version or found_version
    report.finish()
    version = version or found_version or fallback_version
    if not version:
        raise UsageError(f"{label}: cannot tell which SGLang version this is",
                         hint="pass --version, e.g. --version 0.5.18.dev0")
    _pep440(label, version)
    release = sg.facts_from_files(analyses).release(
        version, source,
        Artifact(filename=label, url=url, sha256=digest.hexdigest(), size=total),
        requires_python=requires_python, torch_requirements=_torch_lines(requires),
        mooncake_pins=tuple(pins))
    launch = _launch(files, root)
    by_rel = {path[len(root):]: data for path, data in files if path.startswith(root)}
    imports: dict[str, tuple[BackendImport, ...] | None] = {}
    errors: dict[str, str] = {}
    for n in sa.backend_modules(by_rel):
        got = by_rel[n]
        if isinstance(got, bytes):
            imports[n] = tuple(BackendImport(module=m, names=names, line=line)
                               for m, names, line in sa.backend_imports(got, n))
        else:
            imports[n], errors[n] = None, f"unreadable: {got}"
    update: dict[str, object] = {
        "launch_backends": sg.launch_backends(launch, by_rel, imports, errors,
                                              sg.guarded_readings(
            (n, d if isinstance(d, bytes) else None) for n, d in by_rel.items()
            if n.startswith("sglang/") and n.endswith(".py"))),
        "extension_pins": tuple(ext_pins)}
    if launch is not None:
        update["launch"] = launch
    return release.model_copy(update=update)


def _pep440(label: str, version: str) -> None:
    try:
        Version(version)
    except (InvalidVersion, ValueError) as e:  # ValueError: past 4,300 digits
        raise UsageError(f"{label}: version {_shown(version)} is not PEP 440",
                         hint="pass --version with a PEP 440 version") from e


def _package_root(files: list[tuple[str, bytes | OSError]], label: str) -> str:
    """The shortest folder prefix holding ``sglang/__init__.py``."""
    roots = sorted({p[: -len("sglang/__init__.py")] for p, _ in files
                    if p == "sglang/__init__.py" or p.endswith("/sglang/__init__.py")},
                   key=len)
    if not roots:
        raise UsageError(f"{label}: no sglang package found (no sglang/__init__.py)",
                         hint="point --from-path at an SGLang checkout, its python/ folder, "
                              "or a site-packages folder")
    return roots[0]


def _launch(files: list[tuple[str, bytes | OSError]], root: str) -> LaunchRules | None:
    """The launch-argument rules, from the same members a wheel's are read from."""
    by_rel = {path[len(root):]: data for path, data in files if path.startswith(root)}
    wanted = sa.launch_members(n for n in by_rel if n.startswith("sglang/"))
    texts: dict[str, bytes] = {}
    for n in wanted:
        text = by_rel.get(n)
        if isinstance(text, bytes):
            texts[n] = text
    try:
        launch: LaunchRules | None = sa.launch_record_from(texts) if texts else None
    except (RecursionError, MemoryError) as e:  # a source nested past what the parser or the
        from moonpin.kb.models import LaunchRules  # rule reader's walk holds: recorded so

        member = sa.HOOKS[0] if sa.HOOKS[0] in texts else sa.SERVER_ARGS
        return LaunchRules(member=member, error=f"{member}: nested too deeply to read "
                           f"({type(e).__name__})")
    return launch


_SKIP_DIRS = {".git", "node_modules", "__pycache__", ".venv", "build", "dist"}


def _walk(root: Path) -> Iterator[tuple[str, bytes | OSError]]:
    """The wanted files of a tree, as (safe relative name, bytes or why not). Symlinks are
    not followed; a FIFO, device or socket is named (with the OSError saying what it is)
    and never opened; a file over :data:`MAX_MEMBER` is named as refused; past
    :data:`MAX_TOTAL` bytes in all the tree is an :class:`ArchiveError`."""
    import os
    import stat

    wanted = re.compile(r"(\.py|METADATA|Dockerfile[^/]*|\.sh|\.ya?ml|\.txt|\.toml)$")
    stack = [(os.fspath(root), "")]
    total = 0
    while stack:
        folder, rel_dir = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as err:
            yield (safe_name(rel_dir) or ".") + "/", err
            continue
        for ent in entries:
            rel = rel_dir + ent.name
            try:
                st = ent.stat(follow_symlinks=False)
            except OSError as err:
                yield safe_name(rel), err
                continue
            if stat.S_ISLNK(st.st_mode):
                continue
            if stat.S_ISDIR(st.st_mode):
                if ent.name not in _SKIP_DIRS:
                    stack.append((ent.path, rel + "/"))
                continue
            if not wanted.search(rel):
                continue
            try:
                data = read_regular(ent.path, cap=MAX_MEMBER, what="tree file")
            except OSError as err:
                yield safe_name(rel), err
                continue
            total += len(data)
            if total > MAX_TOTAL:
                raise ArchiveError(f"{safe_name(os.fspath(root))!r}: its files hold more than "
                                   f"{MAX_TOTAL // (1024 * 1024)} MiB; not read",
                                   hint="point --from-path at the SGLang checkout itself")
            yield safe_name(rel), data


def scrape_path(path: Path, *, version: str | None = None,
                reporter: Reporter | None = None) -> SglangRelease:
    """An SGLang checkout, its ``python/`` folder, or a site-packages folder."""
    if not path.exists():
        raise UsageError(f"{str(path)!r} does not exist",
                         hint="point --from-path at an SGLang checkout or a source archive")
    if path.is_file():
        try:
            data = read_regular(path, cap=MAX_ARCHIVE, what="source archive")
        except ReadRefused as e:
            raise UsageError(str(e), hint=e.hint) from e
        return release_from_members(_archive_members(data, str(path)), label=path.name,
                                    url=path.resolve().as_uri(), source="archive",
                                    version=version, reporter=reporter)
    if not path.is_dir():
        try:
            read_regular(path, cap=MAX_ARCHIVE, what="source tree or archive")
        except ReadRefused as e:  # a FIFO, a device, a socket: named as such
            raise UsageError(str(e), hint="point --from-path at an SGLang checkout or "
                                          "a source archive") from e
    return release_from_members(_walk(path), label=str(path), url=path.resolve().as_uri(),
                                source="path", version=version, reporter=reporter)


_ARCHIVE_HINT = ("point --from-path/--from-url at an SGLang source archive (.tar.gz or .zip, "
                 "as the git host makes it), or download it again")


class _Capped(io.RawIOBase):
    """A decompressed stream that stops at ``cap`` bytes in all (a 5 MB .tar.gz of zeros
    decompresses to gigabytes before tarfile has seen its members)."""

    def __init__(self, inner: io.BufferedIOBase, cap: int, label: str) -> None:
        self.inner, self.cap, self.label, self.total = inner, cap, label, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        data = self.inner.read(min(len(buf), 1 << 20))
        self.total += len(data)
        if self.total > self.cap:
            raise ArchiveError(f"{safe_name(self.label)}: decompresses to more than "
                               f"{self.cap // (1024 * 1024)} MiB; not read", hint=_ARCHIVE_HINT)
        buf[:len(data)] = data
        return len(data)


def _archive_members(data: bytes, label: str) -> Iterator[tuple[str, bytes | OSError]]:
    """Members of a .tar.gz / .zip source archive, read in memory; never extracted.

    The top folder every git-host archive has (``sglang-0.5.18/``) is stripped. Members
    over :data:`MAX_MEMBER` are skipped; more than :data:`MAX_TOTAL` bytes decompressed in
    all, or anything a damaged archive makes zipfile/tarfile/zlib raise, is an
    :class:`ArchiveError` ("not a readable source archive"). Names are :func:`safe_name`.
    """
    try:
        out = _zip_members(data, label) if data[:2] == b"PK" else _tar_members(data, label)
    except ArchiveError:
        raise
    except Exception as e:  # a damaged archive makes zipfile, tarfile and
        # the decompressors raise nearly anything (NotImplementedError for method 99,
        # RuntimeError for encryption, zlib.error, UnicodeDecodeError on a flagged name,
        # IndexError, ValueError for a PAX size): all of it means "unreadable archive"
        raise ArchiveError(f"{safe_name(label)}: not a readable source archive: "
                           f"{type(e).__name__}: {safe_name(str(e))[:300]}",
                           hint=_ARCHIVE_HINT) from e
    names = [n for n, _ in out]
    strip = _common_top(names)
    for name, body in out:
        yield name[len(strip):], body


def _zip_members(data: bytes, label: str) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    total = 0
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        for info in zf.infolist():
            if info.is_dir() or info.file_size > MAX_MEMBER or not info.filename:
                continue
            with zf.open(info) as f:
                body = f.read(MAX_MEMBER + 1)  # not the declared size: the bytes there
            if len(body) > MAX_MEMBER:
                continue
            total += len(body)
            if total > MAX_TOTAL:
                raise ArchiveError(f"{safe_name(label)}: members hold more than "
                                   f"{MAX_TOTAL // (1024 * 1024)} MiB; not read",
                                   hint=_ARCHIVE_HINT)
            out.append((safe_name(info.filename), body))
    return out


def _tar_members(data: bytes, label: str) -> list[tuple[str, bytes]]:
    import bz2
    import gzip
    import lzma

    raw: io.BufferedIOBase
    if data[:2] == b"\x1f\x8b":
        raw = gzip.GzipFile(fileobj=io.BytesIO(data))
    elif data[:3] == b"BZh":
        raw = bz2.BZ2File(io.BytesIO(data))
    elif data[:6] == b"\xfd7zXZ\x00":
        raw = lzma.LZMAFile(io.BytesIO(data))
    else:
        raw = io.BytesIO(data)
    stream = io.BufferedReader(_Capped(raw, MAX_TOTAL, label))
    out: list[tuple[str, bytes]] = []
    with tarfile.open(fileobj=stream, mode="r|") as tf:  # one pass, never seeking back
        for m in tf:
            if m.size > MAX_TOTAL:  # skipping it would read (or loop) that far: refuse now
                raise ArchiveError(f"{safe_name(label)}: member {safe_name(m.name)[:200]!r} "
                                   f"declares {m.size:,} bytes; not read", hint=_ARCHIVE_HINT)
            if not m.isfile() or m.size > MAX_MEMBER or not m.name:
                continue
            f = tf.extractfile(m)
            if f is not None:
                out.append((safe_name(m.name), f.read(MAX_MEMBER + 1)))
    return out


def _common_top(names: list[str]) -> str:
    tops = {PurePosixPath(n).parts[0] for n in names if "/" in n}
    if len(tops) == 1 and all("/" in n for n in names):
        return tops.pop() + "/"
    return ""


def scrape_archive(fetcher: Fetcher, url: str, *, version: str | None = None,
                   reporter: Reporter | None = None) -> SglangRelease:
    """A tagged source archive by URL (``…/archive/refs/tags/v0.5.18.tar.gz``)."""
    data = fetcher.get_bytes(url, max_bytes=MAX_ARCHIVE)
    if data is None:
        raise UsageError(f"{url}: not found (HTTP 404)", hint="check the tag in the URL")
    m = re.search(r"v?(\d+\.\d+[0-9A-Za-z.+]*)\.(?:tar\.gz|tgz|zip)$", url)
    label = url.rsplit("/", 1)[-1]
    return release_from_members(_archive_members(data, label), label=label, url=url,
                                source="archive", version=version,
                                fallback_version=m.group(1) if m else None, reporter=reporter)
