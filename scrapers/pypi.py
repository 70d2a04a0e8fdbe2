"""The package index's JSON API (``/pypi/<name>/json``), parsed by pure functions.

File URLs in the JSON can be relative (``../../packages/...``); they are
resolved against the API URL, as a browser would, and recorded in the KB only as
their path relative to the index's files (``kb.models.files_path``).

Which index: ``--index-url``, then ``MOONPIN_INDEX_URL``, then the user's pip
configuration (``PIP_INDEX_URL``, then ``pip config``), then pip's own default. No
index host is written in moonpin's code: the default comes from pip at run time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
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

from kb.errors import FetchError, UsageError
from kb.models import Artifact, files_path

if TYPE_CHECKING:
    from scrapers.fetch import Fetcher

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
    path: str = ""  # relative to the index's files (kb.models.files_path): what the KB records

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

    def versions(self) -> list[str]:
        return sorted(self.releases, key=Version)


def parse_project(doc: Any, url: str) -> ProjectReleases:
    """Turn one ``/pypi/<name>/json`` document into files per release.

    Versions that are not PEP 440 and entries without a sha256 are listed in
    ``skipped`` with the reason, never silently dropped.
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("releases"), dict):
        raise FetchError(url, "not a package index JSON document (no 'releases' object)")
    info = doc.get("info") or {}
    name = str(info.get("name") or url)
    releases: dict[str, tuple[IndexFile, ...]] = {}
    skipped: list[tuple[str, str]] = []
    root = urljoin(url, "../../")  # <index>/pypi/<name>/json -> <index>/
    for version, files in doc["releases"].items():
        try:
            Version(version)
        except InvalidVersion:
            skipped.append((version, "not a PEP 440 version"))
            continue
        out: list[IndexFile] = []
        for f in files or ():
            try:
                sha = f["digests"]["sha256"]
                absolute = urljoin(url, str(f["url"]))
                out.append(
                    IndexFile(
                        filename=str(f["filename"]),
                        url=absolute,
                        path=files_path(absolute, root),
                        size=int(f["size"]),
                        sha256=str(sha),
                        yanked=bool(f.get("yanked", False)),
                        requires_python=f.get("requires_python") or None,
                        has_metadata=bool(
                            f.get("core-metadata") or f.get("data-dist-info-metadata")
                        ),
                    )
                )
            except (KeyError, TypeError, ValueError) as e:
                skipped.append((str(f.get("filename", version)), f"malformed file entry: {e!r}"))
        releases[version] = tuple(out)
    return ProjectReleases(name, url, releases, tuple(skipped))


def fetch_project(fetcher: Fetcher, index_url: str, project: str) -> ProjectReleases:
    url = api_url(index_url, project)
    return parse_project(fetcher.get_json(url), url)


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
    from kb.errors import ArchiveError

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
