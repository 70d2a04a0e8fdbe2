"""The user KB: `moonpin scrape` on an installed moonpin never writes into site-packages.

An installed moonpin is simulated as a wheel lays it out (``moonpin/kb/data/kb.json`` and
``moonpin/kb/data/resolved/`` inside the ``kb`` package, made read-only), run in a child
interpreter whose ``sys.path`` has that copy first.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib

from moonpin.kb import paths
from tests.lib.server import FakeIndex
from tests.scrapers.test_local import make_tree
from tests.scrapers.test_scrape_e2e import index, scraped_kb  # noqa: F401

#: The packages a wheel installs (pyproject's hatch list), so a new one is never left out.
_PACKAGES = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(
))["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]

ROOT = Path(__file__).resolve().parents[2]


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*"))}


def _chmod_tree(root: Path, writable: bool) -> None:
    for p in [root, *root.rglob("*")]:
        if p.is_dir():
            p.chmod(0o755 if writable else 0o555)
        else:
            p.chmod(0o644 if writable else 0o444)


@pytest.fixture
def installed(index: FakeIndex, tmp_path: Path) -> Iterator[Path]:  # noqa: F811
    """A read-only site-packages holding moonpin and a KB scraped from the fake index."""
    kb_file = scraped_kb(index, tmp_path / "scraped" / "kb.json")
    site = tmp_path / "site-packages"
    for pkg in _PACKAGES:
        shutil.copytree(ROOT / pkg, site / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (site / "moonpin" / "kb" / "data").mkdir()
    shutil.copy(kb_file, site / "moonpin" / "kb" / "data" / "kb.json")
    shutil.copytree(kb_file.parent / "resolved", site / "moonpin" / "kb" / "data" / "resolved")
    _chmod_tree(site, writable=False)
    yield site
    _chmod_tree(site, writable=True)  # so that pytest can remove it


def moonpin(site: Path, *argv: str, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    child = {k: v for k, v in os.environ.items() if k != "MOONPIN_KB"}
    child.update({"PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1", **(env or {})})
    return subprocess.run(
        [sys.executable, "-c", "import sys; from moonpin.cli.main import main; "
         "raise SystemExit(main(sys.argv[1:]))", *argv],
        capture_output=True, text=True, cwd=site.parent, env=child, timeout=300)


def test_scrape_on_an_installed_moonpin_writes_the_user_kb(
        installed: Path, index: FakeIndex, tmp_path: Path) -> None:  # noqa: F811
    shipped = installed / "moonpin" / "kb" / "data" / "kb.json"
    user = Path(os.environ["XDG_DATA_HOME"]) / "moonpin" / "kb.json"
    before = _snapshot(installed)

    r = moonpin(installed, "kb", "info", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert (info["kb"], info["kb_source"], info["other_kb"]) == (str(shipped), "shipped", None)

    # a refresh with nothing new: nothing is written, and nothing lands in site-packages
    r = moonpin(installed, "scrape", "--index-url", index.url + "/", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["changed"] is False

    tree = make_tree(tmp_path / "src")
    r = moonpin(installed, "scrape", "--from-path", str(tree))
    assert r.returncode == 0, r.stderr
    assert f"recorded sglang 0.5.99 from {tree} (" in r.stdout and str(user) in r.stdout
    assert user.is_file() and (user.parent / "resolved").is_dir()
    assert (user.parent / "kb.json.lock").is_file()
    assert _snapshot(installed) == before  # nothing written, not even a lock

    r = moonpin(installed, "kb", "info", "--json")
    info = json.loads(r.stdout)
    assert (info["kb"], info["kb_source"]) == (str(user), "user")
    assert info["other_kb"]["kb"] == str(shipped)
    assert info["sglang_releases"] == 3 and info["sglang_range"] == ["0.5.4", "0.5.99"]
    assert info["sglang_recorded_locally"] == ["0.5.99"]
    r = moonpin(installed, "kb", "info")
    assert "the user KB `moonpin scrape` writes" in r.stdout
    assert f"not read: the shipped KB {shipped}" in r.stdout

    # every command reads it: the release recorded from the tree is known
    r = moonpin(installed, "show", "sglang==0.5.99", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["source"] != "index"
    r = moonpin(installed, "which", "mooncake", "--sglang", "v0.5.17", "--json")
    assert r.returncode == 0, r.stderr

    # `kb resolve` of the KB inside the package is refused, not written
    r = moonpin(installed, "kb", "resolve", env={"MOONPIN_KB": str(shipped)})
    assert r.returncode == 2
    assert "never writes inside its installed package" in r.stderr and "tip: " in r.stderr
    r = moonpin(installed, "scrape", "--from-path", str(tree), env={"MOONPIN_KB": str(shipped)})
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert _snapshot(installed) == before


def _kb_at(path: Path, when: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema_version": 3, "scrape": {"scraped_at": when}}))
    return path


def test_the_newer_kb_is_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MOONPIN_KB", raising=False)
    shipped = paths.shipped_kb_file()
    user = Path(paths.user_kb_file())
    assert user.parent.parent == Path(os.environ["XDG_DATA_HOME"])
    assert paths.default_kb_file() == shipped  # no user KB
    _kb_at(user, "2001-01-01T00:00:00Z")
    choice = paths.kb_choice()
    assert (choice.path, choice.source, choice.other) == (shipped, "shipped", str(user))
    assert paths.default_kb_file() == shipped
    _kb_at(user, "2999-01-01T00:00:00+00:00")
    assert paths.default_kb_file() == str(user) and paths.kb_choice().source == "user"
    user.write_text("{not json")  # damaged: read, so that the command names it
    assert paths.default_kb_file() == str(user)
    monkeypatch.setenv("MOONPIN_KB", str(tmp_path / "x.json"))
    assert paths.default_kb_file() == str(tmp_path / "x.json")
    assert paths.scrape_kb_file() == str(tmp_path / "x.json")


def test_the_scrape_time_is_read_from_the_head_or_the_whole_file(tmp_path: Path) -> None:
    head = _kb_at(tmp_path / "a.json", "2026-12-01T21:14:40Z")
    assert paths.scraped_at(str(head)) == "2026-12-01T21:14:40Z"
    late = tmp_path / "b.json"  # the key past the first bytes: the whole file is parsed
    late.write_text(json.dumps({"pad": "x" * 20000,
                                "scrape": {"scraped_at": "2026-01-02T03:04:05Z"}}))
    assert paths.scraped_at(str(late)) == "2026-01-02T03:04:05Z"
    assert paths.scraped_at(str(tmp_path / "missing.json")) is None


def test_a_user_kb_that_is_not_a_file_is_named_not_opened(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from moonpin.cli.main import main

    monkeypatch.delenv("MOONPIN_KB", raising=False)
    user = Path(paths.user_kb_file())
    user.parent.mkdir(parents=True)
    os.mkfifo(user)  # a plain open() would block here for ever
    assert paths.scraped_at(str(user)) is None
    assert paths.default_kb_file() == str(user)
    with pytest.raises(SystemExit) as e:
        main(["kb", "info"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and str(user) in err and "FIFO" in err and "tip: " in err


def test_xdg_data_home_must_be_absolute(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", "relative/dir")
    assert paths.user_kb_file() == os.path.join(os.path.expanduser("~"), ".local", "share",
                                                "moonpin", "kb.json")


def test_a_checkout_scrapes_its_own_data_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MOONPIN_KB", raising=False)
    if not os.access(ROOT / "data", os.W_OK) or (ROOT / "moonpin" / "kb" / "data").exists():
        pytest.skip("not an editable checkout with a writable data/ folder")
    assert paths.scrape_kb_file() == str(ROOT / "data" / "kb.json")


def test_a_read_only_checkout_scrapes_the_user_kb(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MOONPIN_KB", raising=False)
    monkeypatch.setattr(os, "access", lambda p, mode: False if mode == os.W_OK else True)
    assert not paths.shipped_is_writable()
    assert paths.scrape_kb_file() == paths.user_kb_file()
