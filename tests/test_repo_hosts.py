"""No file of the repository names the default package index's host or its file host.

The names are not written here either: they are asked of pip at test time, the way
``moonpin.scrapers.pypi`` asks pip for the default index at run time.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _hosts() -> list[bytes]:
    from pip._internal.models.index import PyPI

    hosts = {urlsplit(PyPI.url).hostname or "", PyPI.file_storage_domain}
    assert all(hosts) and len(hosts) == 2, hosts  # pip still names both
    return sorted(h.lower().encode() for h in hosts)


def _tracked() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [p for p in out.stdout.decode().split("\0") if p]


def _naming(root: Path, files: list[str], hosts: list[bytes]) -> list[str]:
    found = []
    for rel in files:
        try:
            data = (root / rel).read_bytes().lower()
        except (FileNotFoundError, IsADirectoryError):
            continue  # deleted in the work tree, or a submodule
        found += [f"{rel}: {h.decode()}" for h in hosts if h in data]
    return found


def test_no_tracked_file_names_the_index_hosts() -> None:
    found = _naming(ROOT, _tracked(), _hosts())
    assert not found, "files naming the package index's hosts:\n" + "\n".join(found)


def test_the_scan_finds_a_host_in_any_case(tmp_path: Path) -> None:
    hosts = _hosts()
    (tmp_path / "a.json").write_bytes(b'{"url": "https://' + hosts[-1].upper() + b'/x.whl"}')
    (tmp_path / "b.md").write_text("the package index")
    assert _naming(tmp_path, ["a.json", "b.md", "gone.txt"], hosts) == \
        [f"a.json: {hosts[-1].decode()}"]
