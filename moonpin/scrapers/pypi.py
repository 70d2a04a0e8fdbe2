"""The package index's JSON API (``/pypi/<name>/json``), parsed by pure functions.

File URLs in the JSON can be relative (``../../packages/...``); they are
resolved against the API URL, as a browser would, and recorded in the KB only as
their path relative to the index's files (``moonpin.kb.models.files_path``).

Which index: ``--index-url``, then ``MOONPIN_INDEX_URL``, then the user's pip
configuration (``PIP_INDEX_URL``, then ``pip config``), then pip's own default. No
index host is written in moonpin's code: the default comes from pip at run time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from email.parser import HeaderParser
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit, urlunsplit

from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from moonpin.kb.errors import FetchError, UsageError
from moonpin.kb.models import Artifact, files_path

if TYPE_CHECKING:
    from moonpin.scrapers.fetch import Fetcher

__all__ = [
    "IndexFile",
    "Metadata",
    "ProjectReleases",
    "api_url",
    "fetch_project",
    "index_url_from_env",
    "json_root",
    "metadata_member",
    "named_index_url",
    "parse_metadata",
    "parse_project",
    "pip_index_url",
    "public_url",
    "wheel_pythons",
    "wheel_tags",
]


_TIP = ("pass --index-url (or set MOONPIN_INDEX_URL) to the index root that serves "
        "/pypi/<name>/json, e.g. --index-url https://mirror.example/")


def named_index_url(explicit: str | None = None) -> str | None:
    """The index the user named for moonpin: ``--index-url``, then ``MOONPIN_INDEX_URL``
    (its JSON API root, or a pip-style ``.../simple/`` URL of it)."""
    url = explicit or os.environ.get("MOONPIN_INDEX_URL") or None
    if url is None:
        return None
    url = url if url.endswith("/") else url + "/"
    # a pip-style index URL (``.../simple/``) names the same index: use its JSON API root
    return url[: -len("simple/")] if url.endswith("/simple/") else url


def index_url_from_env(explicit: str | None = None,
                       environ: Mapping[str, str] | None = None,
                       pip_config: Callable[[], dict[str, str]] | None = None) -> str:
    """The JSON API root to scrape: the named index, else the default one (pip's)."""
    return named_index_url(explicit) or json_root(*pip_index_url(environ, pip_config))


def pip_index_url(environ: Mapping[str, str] | None = None,
                  pip_config: Callable[[], dict[str, str]] | None = None) -> tuple[str, str]:
    """(index URL, where it came from) as pip would choose it for ``pip install``.

    ``PIP_INDEX_URL``, then ``install.index-url``/``global.index-url`` of pip's
    configuration files (``pip config list``), then pip's own default index.
    """
    env = os.environ if environ is None else environ
    if env.get("PIP_INDEX_URL"):
        return env["PIP_INDEX_URL"].split()[0], "PIP_INDEX_URL"
    config = (pip_config or _pip_config_list)()
    for key in ("install.index-url", "global.index-url"):
        if config.get(key):
            return config[key].split()[0], f"pip's configuration ({key})"
    try:
        from pip._internal.models.index import PyPI  # the default pip ships
    except ImportError as e:
        raise UsageError("cannot tell which package index to read: pip is not installed "
                         "here and no index is configured", hint=_TIP) from e
    return str(PyPI.url), "pip's default index"


def _pip_config_list() -> dict[str, str]:
    """``pip config list`` (every file pip reads, merged as pip merges them)."""
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                             capture_output=True, text=True, timeout=60, check=False,
                             env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    except (OSError, subprocess.TimeoutExpired):
        return {}  # no pip to ask: its default (or the error naming the fix) follows
    values: dict[str, str] = {}
    for line in out.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep and len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            values[key.strip()] = value[1:-1]
    return values


def json_root(index_url: str, source: str = "the index URL") -> str:
    """The JSON API root of a pip index URL: ``<root>/simple/`` -> ``<root>/``.

    A URL already at the root (pip's default is given that way) is kept.
    """
    parts = urlsplit(index_url)
    if parts.scheme not in ("http", "https"):
        raise UsageError(f"{source} names {public_url(index_url)!r}, which is not an HTTP "
                         "index: moonpin reads the JSON API (/pypi/<name>/json)", hint=_TIP)
    path = parts.path.rstrip("/")
    if path.endswith("/simple") or path == "simple":
        path = path[: -len("simple")]
    elif path:
        raise UsageError(f"{source} names {public_url(index_url)!r}: cannot tell its JSON API "
                         "root (/pypi/<name>/json) from a URL that does not end in /simple/",
                         hint=_TIP)
    path = path if path.endswith("/") else path + "/"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def public_url(url: str) -> str:
    """``url`` without a user name or password (safe to print or record)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def api_url(index_url: str, project: str) -> str:
    return urljoin(index_url, f"pypi/{canonicalize_name(project)}/json")


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str  # absolute, for fetching now; never recorded
    size: int
    sha256: str
    yanked: bool
    requires_python: str | None
    has_metadata: bool  # PEP 658/714: the index says <url>.metadata exists
    # relative to the index's files (moonpin.kb.models.files_path): what the KB records
    path: str = ""

    @property
    def is_wheel(self) -> bool:
        return self.filename.endswith(".whl")

    def artifact(self) -> Artifact:
        """The KB's record of this file: filename, path, sha256, size (no host)."""
        return Artifact(filename=self.filename, path=self.path or files_path(self.url),
                        sha256=self.sha256,
                        size=self.size, yanked=self.yanked)


@dataclass(frozen=True)
class ProjectReleases:
    name: str
    api_url: str
    releases: dict[str, tuple[IndexFile, ...]]  # version string -> files
    skipped: tuple[tuple[str, str], ...]  # (version or filename, why) not usable
    #: PEP 440 versions the index lists but whose files could not be read: the release
    #: exists, its facts are unknown this time (a refresh keeps what the KB had)
    unreadable: tuple[str, ...] = ()

    def versions(self) -> list[str]:
        return sorted(self.releases, key=Version)

    def listed(self) -> list[str]:
        """Every PEP 440 version the index lists, readable or not."""
        return sorted({*self.releases, *self.unreadable}, key=Version)


#: Sizes past this are not a file an index serves (nor a 64-bit signed integer).
_MAX_SIZE = 2**63 - 1
_HEX = frozenset("0123456789abcdef")


class _Malformed(ValueError):
    """A value of the project document that is not what the JSON API describes."""


def _field(entry: Mapping[str, Any], key: str, kind: type | tuple[type, ...],
           *, optional: bool = False) -> Any:
    """``entry[key]`` checked to be ``kind`` (a bool is not an int; None only if optional)."""
    if key not in entry or entry[key] is None:
        if optional:
            return None
        raise _Malformed(f"no {key!r}")
    value = entry[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise _Malformed(f"{key!r} is {type(value).__name__} {_short(value)}, "
                         f"not {' or '.join(k.__name__ for k in kinds)}")
    return value


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, (dict, list)) else f"of {len(value)}"
    return text if len(text) <= 60 else text[:57] + "..."


def _index_file(f: Any, url: str, root: str) -> IndexFile:
    """One entry of a release's files list, every value checked for type and range."""
    if not isinstance(f, dict):
        raise _Malformed(f"a file entry is {type(f).__name__} {_short(f)}, not an object")
    filename = _field(f, "filename", str)
    if not filename or "/" in filename or len(filename) > 1024:
        raise _Malformed(f"file name {_short(filename)} is not a file name")
    href = _field(f, "url", str)
    digests = _field(f, "digests", dict)
    sha = _field(digests, "sha256", str)
    if len(sha) != 64 or not set(sha) <= _HEX:
        raise _Malformed(f"{filename}: sha256 {_short(sha)} is not 64 hex digits")
    size = _field(f, "size", int)
    if not 0 <= size <= _MAX_SIZE:
        raise _Malformed(f"{filename}: size {_short(size)} is out of range")
    yanked = _field(f, "yanked", bool, optional=True)
    requires_python = _field(f, "requires_python", str, optional=True)
    meta = [_field(f, k, (bool, dict), optional=True)
            for k in ("core-metadata", "data-dist-info-metadata")]
    try:
        absolute = urljoin(url, href)
        path = files_path(absolute, root)
    except ValueError as e:  # urljoin refuses a malformed IPv6 host, for one
        raise _Malformed(f"{filename}: url {_short(href)} is not a URL ({e})") from e
    return IndexFile(filename=filename, url=absolute, path=path, size=size, sha256=sha,
                     yanked=bool(yanked), requires_python=requires_python or None,
                     has_metadata=any(bool(m) for m in meta))


def _latest_files(doc: dict[str, Any], info: dict[str, Any]) -> tuple[str, Any] | None:
    """(version, ``urls``) when the document lists the latest release's files twice."""
    version = info.get("version")
    if "urls" not in doc or not isinstance(version, str):
        return None
    return version, doc["urls"]


def parse_project(doc: Any, url: str) -> ProjectReleases:
    """Turn one ``/pypi/<name>/json`` document into files per release.

    Every value is checked for the type and range the JSON API documents, here and
    nowhere else. Versions that are not PEP 440 are listed in ``skipped``; a release
    whose files list is not what the API describes (a wrong type anywhere in it, a size
    out of range, a files list holding a non-object, ``urls`` disagreeing with
    ``releases`` for the latest release) is listed in ``skipped`` and ``unreadable``
    with the reason, and none of its files is used: never silently dropped, never half
    read.
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("releases"), dict):
        raise FetchError(url, "not a package index JSON document (no 'releases' object)")
    info = doc.get("info")
    info = info if isinstance(info, dict) else {}
    name = info.get("name")
    name = name if isinstance(name, str) and name else url
    releases: dict[str, tuple[IndexFile, ...]] = {}
    skipped: list[tuple[str, str]] = []
    unreadable: list[str] = []
    root = urljoin(url, "../../")  # <index>/pypi/<name>/json -> <index>/
    latest = _latest_files(doc, info)
    for version, files in doc["releases"].items():
        try:
            Version(version)
        except InvalidVersion:
            skipped.append((version if len(version) <= 60 else version[:57] + "...",
                            "not a PEP 440 version"))
            continue
        try:
            if not isinstance(files, list):
                raise _Malformed(f"its files are {type(files).__name__} {_short(files)}, "
                                 "not a list")
            out = tuple(_index_file(f, url, root) for f in files)
            if latest is not None and latest[0] == version:
                _same_files(out, latest[1], url, root)
        except _Malformed as e:
            skipped.append((version, f"the index's listing is not readable: {e}"))
            unreadable.append(version)
            continue
        releases[version] = out
    return ProjectReleases(name, url, releases, tuple(skipped), tuple(unreadable))


def _same_files(files: tuple[IndexFile, ...], urls: Any, url: str, root: str) -> None:
    """``urls`` (the latest release's files) must list what ``releases`` lists for it."""
    if not isinstance(urls, list):
        raise _Malformed(f"'urls' is {type(urls).__name__} {_short(urls)}, not a list")
    listed = {(f.filename, f.sha256, f.size) for f in (_index_file(u, url, root) for u in urls)}
    if listed != {(f.filename, f.sha256, f.size) for f in files}:
        raise _Malformed("'urls' and 'releases' list different files for this release")


def fetch_project(fetcher: Fetcher, index_url: str, project: str) -> ProjectReleases:
    url = api_url(index_url, project)
    try:
        doc = fetcher.get_json(url)
    # json refuses an integer past its digit limit (4,300) and nesting past the recursion
    # limit (each a document no index serves)
    except (ValueError, RecursionError) as e:
        raise FetchError(url, f"not a package index JSON document ({e})",
                         hint="a proxy or a broken mirror may be answering for the index; "
                              "check --index-url") from e
    return parse_project(doc, url)


@dataclass(frozen=True)
class Metadata:
    name: str
    version: str
    requires_dist: tuple[str, ...]
    requires_python: str | None


def parse_metadata(text: str) -> Metadata:
    """Core metadata (METADATA / PKG-INFO, an RFC 822 header block)."""
    msg = HeaderParser().parsestr(text, headersonly=True)
    return Metadata(
        name=msg.get("Name", ""),
        version=msg.get("Version", ""),
        requires_dist=tuple(str(v) for v in msg.get_all("Requires-Dist") or ()),
        requires_python=msg.get("Requires-Python"),
    )


def metadata_member(names: list[str], filename: str) -> str:
    """The wheel's one ``<name>-<version>.dist-info/METADATA``, checked against its file name.

    Several .dist-info folders, none, or one naming another project are each an error
    (pip refuses such wheels too).
    """
    from moonpin.kb.errors import ArchiveError

    dist_infos = sorted({n.split("/", 1)[0] for n in names
                         if n.split("/", 1)[0].endswith(".dist-info")})
    if len(dist_infos) != 1:
        raise ArchiveError(f"{filename}: expected one .dist-info folder, found "
                           f"{len(dist_infos)} ({', '.join(dist_infos) or 'none'})")
    folder = dist_infos[0]
    try:
        name, version, _, _ = parse_wheel_filename(filename)
    except InvalidWheelFilename as e:
        raise ArchiveError(f"{filename}: {e}") from e
    di_name, _, di_version = folder[: -len(".dist-info")].rpartition("-")
    if canonicalize_name(di_name) != name:
        raise ArchiveError(f"{filename}: its .dist-info folder {folder!r} names another "
                           f"project ({di_name!r})")
    try:
        if Version(di_version) != version:
            raise ArchiveError(f"{filename}: its .dist-info folder {folder!r} is for version "
                               f"{di_version}")
    except InvalidVersion as e:
        raise ArchiveError(f"{filename}: .dist-info folder {folder!r} has no valid version") \
            from e
    member = f"{folder}/METADATA"
    if member not in names:
        raise ArchiveError(f"{filename}: no {member}")
    return member


def wheel_tags(filename: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(python tags, abi tags, platform tags) of a wheel file name."""
    try:
        _, _, _, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return (), (), ()
    return (
        tuple(sorted({t.interpreter for t in tags})),
        tuple(sorted({t.abi for t in tags})),
        tuple(sorted({t.platform for t in tags})),
    )


def wheel_pythons(files: Iterable[IndexFile]) -> tuple[str, ...] | None:
    """The CPython interpreters (``cp311``, …) a release's files can be installed on, from
    their names (the wheel spec's tags, ``packaging.utils.parse_wheel_filename``); None when
    any Python can take one (an sdist, a ``py3`` or an ``abi3`` wheel) or nothing is
    listed. pip and uv find nothing to install on another interpreter ("no wheels with a
    matching Python implementation tag")."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    out: set[str] = set()
    listed = False
    for f in files:
        if f.yanked:
            continue
        listed = True
        if not f.is_wheel:
            return None  # an sdist builds anywhere
        try:
            tags = parse_wheel_filename(f.filename)[3]
        except InvalidWheelFilename:
            continue
        for t in tags:
            if not t.interpreter.startswith("cp") or t.abi == "abi3":
                return None
            out.add(t.interpreter)
    return tuple(sorted(out, key=lambda i: (len(i), i))) if listed and out else None
