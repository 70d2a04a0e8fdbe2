"""Which index a scrape reads, and how the KB names the index's files without a host."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moonpin.kb import store
from moonpin.kb.errors import UsageError
from moonpin.kb.models import SCHEMA_VERSION, files_path
from moonpin.scrapers.pypi import (
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
    from moonpin.scrapers.pypi import _pip_config_list

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
        {"filename": "s-0.5.18-py3-none-any.whl", "size": 5, "digests": {"sha256": "00" * 32},
         "url": "../../packages/packages/ab/s-0.5.18-py3-none-any.whl"},
        {"filename": "s-0.5.18.tar.gz", "size": 5, "digests": {"sha256": "01" * 32},
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


def _listing(**entry: object) -> dict[str, object]:
    """A project document whose 0.5.18 lists one wheel, ``entry`` over its fields."""
    good = {"filename": "sglang-0.5.18-py3-none-any.whl", "size": 5,
            "digests": {"sha256": "a" * 64},
            "url": "../../packages/ab/sglang-0.5.18-py3-none-any.whl"}
    return {"info": {"name": "sglang", "version": "0.5.18"},
            "releases": {"0.5.17": [{**good, "filename": "sglang-0.5.17-py3-none-any.whl"}],
                         "0.5.18": [{**good, **entry}]}}


# Each of these raised from parse_project on 31caf67 (issue 29: AttributeError on a files
# list holding a non-object and on an info that is not one, TypeError on a files list
# that is not a list, OverflowError on an infinite size), or turned into a fact.
@pytest.mark.parametrize(("doc", "why"), [
    ({"releases": {"0.5.18": ["banana"]}}, "a file entry is str"),
    ({"releases": {"0.5.18": [7]}}, "a file entry is int"),
    ({"releases": {"0.5.18": [[1]]}}, "a file entry is list"),
    ({"releases": {"0.5.18": 5}}, "its files are int"),
    ({"releases": {"0.5.18": {"a": 1}}}, "its files are dict"),
    (_listing(size=float("inf")), "'size' is float inf"),
    (_listing(size=float("nan")), "'size' is float nan"),
    (_listing(size=2**64), "out of range"),
    (_listing(size=-1), "out of range"),
    (_listing(size=True), "'size' is bool"),
    (_listing(size="5"), "'size' is str"),
    (_listing(digests=[]), "'digests' is list"),
    (_listing(digests={"sha256": 5}), "'sha256' is int"),
    (_listing(digests={"sha256": "banana"}), "not 64 hex digits"),
    (_listing(filename=["x"]), "'filename' is list"),
    (_listing(filename=""), "is not a file name"),
    (_listing(url={"a": 1}), "'url' is dict"),
    (_listing(url="http://[::1"), "is not a URL"),
    (_listing(yanked="no"), "'yanked' is str"),
    (_listing(requires_python=3), "'requires_python' is int"),
    ({**_listing(), "urls": []}, "'urls' and 'releases' list different files"),
    ({**_listing(), "urls": 5}, "'urls' is int"),
])
def test_a_listing_not_as_the_api_describes_is_an_unreadable_release(
        doc: dict[str, object], why: str) -> None:
    p = parse_project(doc, "https://idx.example/pypi/sglang/json")
    assert "0.5.18" not in p.releases and p.unreadable == ("0.5.18",)
    assert "0.5.18" in p.listed()
    ((_, reason),) = [s for s in p.skipped if s[0] == "0.5.18"]
    assert why in reason, reason
    if "0.5.17" in doc["releases"]:  # type: ignore[operator]
        assert len(p.releases["0.5.17"]) == 1  # the other releases are read as ever


@pytest.mark.parametrize("info", [[], "x", 5, {"name": ["x"]}])
def test_an_info_that_is_not_an_object_is_not_a_traceback(info: object) -> None:
    p = parse_project({"info": info, "releases": {}}, "https://idx.example/pypi/sglang/json")
    assert p.name == "https://idx.example/pypi/sglang/json"


def test_a_well_formed_listing_is_read_whole() -> None:
    doc = {**_listing(), "urls": _listing()["releases"]["0.5.18"]}  # type: ignore[index]
    p = parse_project(doc, "https://idx.example/pypi/sglang/json")
    assert p.unreadable == () and p.skipped == ()
    (f,) = p.releases["0.5.18"]
    assert (f.size, f.sha256, f.yanked) == (5, "a" * 64, False)
