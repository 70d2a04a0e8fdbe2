"""The package index's JSON API (``/pypi/<name>/json``), parsed by pure functions.

File URLs in the JSON can be relative (``../../packages/...``); they are
resolved against the API URL, as a browser would.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from email.parser import HeaderParser
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from kb.errors import FetchError

if TYPE_CHECKING:
    from scrapers.fetch import Fetcher

#: The public index; ``--index-url`` / ``MOONPIN_INDEX_URL`` point elsewhere.
DEFAULT_INDEX_URL = "https://pypi.org/"

__all__ = [
    "DEFAULT_INDEX_URL",
    "IndexFile",
    "Metadata",
    "ProjectReleases",
    "api_url",
    "fetch_project",
    "index_url_from_env",
    "metadata_member",
    "parse_metadata",
    "parse_project",
    "wheel_tags",
]


def index_url_from_env(explicit: str | None = None) -> str:
    """``--index-url`` wins, then ``MOONPIN_INDEX_URL``, then the public index."""
    url = explicit or os.environ.get("MOONPIN_INDEX_URL") or DEFAULT_INDEX_URL
    return url if url.endswith("/") else url + "/"


def api_url(index_url: str, project: str) -> str:
    return urljoin(index_url, f"pypi/{canonicalize_name(project)}/json")


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str  # absolute
    size: int
    sha256: str
    yanked: bool
    requires_python: str | None
    has_metadata: bool  # PEP 658/714: the index says <url>.metadata exists

    @property
    def is_wheel(self) -> bool:
        return self.filename.endswith(".whl")


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
                out.append(
                    IndexFile(
                        filename=str(f["filename"]),
                        url=urljoin(url, str(f["url"])),
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
