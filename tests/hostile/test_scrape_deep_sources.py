"""Artifacts whose Python sources nest past what Python's parser holds (``MemoryError``:
"too complex") or past what a recursive walk of the parsed tree reaches (``RecursionError``),
scraped from the index and from a source tree: the release is named unread (or, from a
tree, its launch rules are recorded as unreadable), never a traceback. Each failed before:
``moonpin scrape`` ended in a traceback on a wheel from the index holding such a
``server_args.py`` or ``mooncake/pg.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moonpin.cli.main import main
from tests.lib.elfbuild import build_so
from tests.lib.server import FakeIndex
from tests.lib.wheels import build_wheel
from tests.scrapers.test_scrape_e2e import (
    LOADER_PG,
    SERVER_ARGS,
    SGL_NEW,
    add_mooncake_and_torch,
    only_present,
    sglang_wheel,
)

#: Parses, but a recursive walk of it goes 600 levels down (Python allows 1,000).
WALKED_DEEP = "+".join(["a"] * 600)
#: The parser refuses it: MemoryError ("too complex"), or RecursionError building the tree.
PARSER_DEEP = ["-" * 100_000 + "1", "+".join(["a"] * 100_000)]


@pytest.mark.parametrize("what", ["server_args.py hook", "server_args.py parser",
                                  "server_args.py tree", "mooncake/pg.py parser"])
def test_index_artifact_with_deep_source_is_unread(tmp_path: Path, what: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with FakeIndex() as idx:
        sa = SERVER_ARGS
        if what == "server_args.py hook":
            sa = sa.replace("if self.elastic_ep_backend is not None:",
                            f"if self.elastic_ep_backend == {WALKED_DEEP}:")
        elif what != "mooncake/pg.py parser":
            sa = f"x = {PARSER_DEEP[what.endswith('tree')]}\n{sa}"
        idx.add_project("sglang", {"0.5.17": dict([sglang_wheel("0.5.17", {
            "sglang/srt/distributed/parallel_state.py": SGL_NEW,
            "sglang/srt/server_args.py": sa})])})
        add_mooncake_and_torch(idx)
        if what == "mooncake/pg.py parser":
            so = build_so(needed=["libcudart.so.13", "libtorch.so"],
                          strings=["mooncake", "mooncake-cpu", "join_group"])
            idx.add_project("mooncake-transfer-engine", {"0.3.13": dict([build_wheel(
                "mooncake-transfer-engine", "0.3.13",
                {"mooncake/__init__.py": "", "mooncake/pg.py": f"{LOADER_PG}x = {PARSER_DEEP[0]}\n",
                 "mooncake/pg_2_13_0.cpython-312-x86_64-linux-gnu.so": so},
                tag="cp312-cp312-manylinux_2_28_x86_64")])})
        only_present(idx)
        kb = tmp_path / "kb.json"
        rc = main(["--kb", str(kb), "scrape", "--full", "--index-url", idx.url + "/",
                   "--jobs", "2", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1, out
    unread = [u for u in out["unread"] if "nested too deeply to read" in u["reason"]]
    assert len(unread) == 1, out["unread"]
    assert unread[0]["kind"] == ("mooncake" if what.startswith("mooncake") else "sglang")


@pytest.mark.parametrize("what", ["version.py", "server_args.py hook", "server_args.py"])
def test_tree_with_deep_source(tmp_path: Path, what: str, empty_kb: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    from tests.hostile.test_scrape_trees import _tree

    tree = tmp_path / "tree"
    _tree(tree)
    if what == "version.py":  # Python cannot import it, so the version is not known
        (tree / "sglang" / "version.py").write_text(f'__version__ = "0.5.99"\nx = '
                                                    f"{PARSER_DEEP[0]}\n")
    elif what == "server_args.py hook":
        (tree / "sglang" / "srt" / "server_args.py").write_text(SERVER_ARGS.replace(
            "if self.elastic_ep_backend is not None:",
            f"if self.elastic_ep_backend == {WALKED_DEEP}:"))
    else:
        (tree / "sglang" / "srt" / "server_args.py").write_text(
            f"x = {PARSER_DEEP[1]}\n{SERVER_ARGS}")
    argv = ["--kb", str(empty_kb), "scrape", "--from-path", str(tree)]
    if what == "version.py":
        with pytest.raises(SystemExit) as stop:
            main(argv)
        err = capsys.readouterr().err
        assert stop.value.code == 2, err
        assert "cannot tell which SGLang version" in err and "tip:" in err, err
        return
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    from moonpin.kb import store

    launch = store.load(empty_kb).sglang[-1].launch
    assert launch is not None and "nested too deeply to read" in (launch.error or ""), launch
