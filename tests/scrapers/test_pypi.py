"""Which index a scrape reads, and how the KB names the index's files without a host."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kb import store
from kb.errors import UsageError
from kb.models import SCHEMA_VERSION, files_path
from scrapers.pypi import (
    index_url_from_env,
    json_root,
    named_index_url,
    parse_project,
    pip_index_url,
    public_url,
)
from tests.kb.test_store import small_kb


def _no_config() -> dict[str, str]:
    return {}


@pytest.mark.parametrize(("url", "root"), [
    ("https://mirror.example/simple", "https://mirror.example/"),
    ("https://mirror.example/simple/", "https://mirror.example/"),
    ("https://m.example/api/pypi/remote/simple/", "https://m.example/api/pypi/remote/"),
    ("https://mirror.example/", "https://mirror.example/"),
    ("https://mirror.example", "https://mirror.example/"),
])
def test_json_root_of_a_pip_index_url(url: str, root: str) -> None:
    assert json_root(url) == root


@pytest.mark.parametrize(("url", "why"), [
    ("file:///opt/pypi/simple", "not an HTTP index"),
    ("https://mirror.example/root/pypi/+simple/", "does not end in /simple/"),
])
def test_json_root_names_the_url_and_what_to_pass(url: str, why: str) -> None:
    with pytest.raises(UsageError, match=why) as ei:
        json_root(url, "PIP_INDEX_URL")
    assert "PIP_INDEX_URL" in str(ei.value) and "--index-url" in (ei.value.hint or "")


def test_pip_index_url_order() -> None:
    env = {"PIP_INDEX_URL": "https://a.example/simple https://b.example/simple"}
    assert pip_index_url(env, _no_config) == ("https://a.example/simple", "PIP_INDEX_URL")
    cfg = {"global.index-url": "https://g.example/simple",
           "install.index-url": "https://i.example/simple"}
    url, source = pip_index_url({}, lambda: cfg)
    assert url == "https://i.example/simple" and "install.index-url" in source
    url, source = pip_index_url({}, lambda: {"global.index-url": "https://g.example/simple"})
    assert url == "https://g.example/simple"


def test_default_index_comes_from_pip_at_run_time() -> None:
    from pip._internal.models.index import PyPI

    assert pip_index_url({}, _no_config) == (PyPI.url, "pip's default index")
    assert index_url_from_env(None, {}, _no_config) == json_root(PyPI.url)


def test_named_index_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONPIN_INDEX_URL", "http://127.0.0.1:9")
    assert named_index_url() == "http://127.0.0.1:9/"
    assert named_index_url("http://10.0.0.1/x") == "http://10.0.0.1/x/"
    assert named_index_url("http://10.0.0.1/x/simple") == "http://10.0.0.1/x/"
    monkeypatch.delenv("MOONPIN_INDEX_URL")
    assert named_index_url() is None


def test_pip_config_list_is_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The real ``pip config list``, pointed at a config file of this test's own."""
    from scrapers.pypi import _pip_config_list

    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://conf.example/simple\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    assert _pip_config_list().get("global.index-url") == "https://conf.example/simple"


def test_public_url_drops_credentials() -> None:
    assert public_url("https://u:secret@m.example/simple/") == "https://m.example/simple/"
    assert public_url("https://m.example/") == "https://m.example/"


@pytest.mark.parametrize(("url", "index", "path"), [
    # served by the index under <index>/packages/ (its JSON links ../../packages/...)
    ("https://idx.example/packages/packages/ab/cd/ef/x.whl", "https://idx.example/",
     "packages/ab/cd/ef/x.whl"),
    # linked on a separate file host: the path from that host's root
    ("https://files.example/packages/ab/cd/ef/x.whl", "https://idx.example/",
     "packages/ab/cd/ef/x.whl"),
    ("http://127.0.0.1:5/packages/ab/x.whl", "http://127.0.0.1:5/", "ab/x.whl"),
])
def test_files_path_names_no_host(url: str, index: str, path: str) -> None:
    assert files_path(url, index) == path


def test_parse_project_records_the_path_not_the_host() -> None:
    doc = {"info": {"name": "sglang"}, "releases": {"0.5.18": [
        {"filename": "s-0.5.18-py3-none-any.whl", "size": 5, "digests": {"sha256": "00"},
         "url": "../../packages/packages/ab/s-0.5.18-py3-none-any.whl"},
        {"filename": "s-0.5.18.tar.gz", "size": 5, "digests": {"sha256": "01"},
         "url": "https://files.example/packages/cd/s-0.5.18.tar.gz"}]}}
    a, b = parse_project(doc, "https://idx.example/pypi/sglang/json").releases["0.5.18"]
    assert a.url == "https://idx.example/packages/packages/ab/s-0.5.18-py3-none-any.whl"
    art = a.artifact()
    assert art.path == "packages/ab/s-0.5.18-py3-none-any.whl" and art.url is None
    assert "example" not in art.model_dump_json()
    assert b.artifact().path == "packages/cd/s-0.5.18.tar.gz"


def test_an_older_schema_file_is_read_with_paths(tmp_path: Path) -> None:
    """Schema 2 recorded absolute URLs; loading converts them, the scrape rewrites them."""
    doc = json.loads(small_kb().model_dump_json())
    doc["schema_version"] = 2
    doc["scrape"]["index_url"] = "https://idx.example/"
    for r in doc["sglang"]:
        r["artifact"].pop("path")
        r["artifact"]["url"] = "https://idx.example/packages/packages/ab/" \
            + r["artifact"]["filename"]
    p = tmp_path / "kb.json"
    p.write_text(json.dumps(doc))
    kb = store.load(p)
    assert kb.schema_version == SCHEMA_VERSION
    art = kb.sglang[0].artifact
    assert art.url is None and art.path == "packages/ab/" + art.filename
    assert "idx.example/packages" not in store.dumps(kb).decode()
