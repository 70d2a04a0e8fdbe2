"""The graph a query gets reads the KB's facts only when a lookup needs them (issue 27's
speed goal: ``moonpin renovate requirements.txt`` is answered by the release tables), and
answers the same either way."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from moonpin.cli.main import main
from moonpin.kb.facts import Facts
from moonpin.resolver import query
from moonpin.resolver.graph import CompatGraph
from moonpin.resolver.tables import documents, per_release

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = str(ROOT / "data" / "kb.json")
CUDA13 = "mooncake-transfer-engine-cuda13==0.3.13.post1"


def _facts() -> Facts:
    found = documents.load_facts(SHIPPED)
    assert found is not None
    return found


@pytest.mark.parametrize("sglang", ["0.5.18", "0.5.23", "0.5.3.post2"])
def test_which_mooncake_from_the_table_is_the_full_answer(sglang: str) -> None:
    lazy = CompatGraph.from_path(SHIPPED)
    got = query.which_mooncake(lazy, sglang, arch="x86_64").to_json()
    assert not lazy.loaded  # the release's table answered
    full = query.which_mooncake(CompatGraph(_facts()), sglang, arch="x86_64").to_json()
    assert got == full


@pytest.mark.parametrize("sglang", ["0.5.18", "0.5.23"])
def test_which_mooncake_at_a_pinned_torch_reads_no_facts(sglang: str) -> None:
    """``pins`` of a set pinning torch asks ``which mooncake --torch``: the torch spelt from
    the KB's names document and the release's table answer it (the facts were read to
    spell the torch, ~20 ms of the command)."""
    lazy = CompatGraph.from_path(SHIPPED)
    table = per_release.load(SHIPPED, sglang)
    assert table is not None
    torch = table.sglang[sglang]["torch"][-1]
    got = query.which_mooncake(lazy, sglang, torch=torch, python="3.12").to_json()
    assert not lazy.loaded
    full = CompatGraph(_facts())
    assert got == query.which_mooncake(full, sglang, torch=torch, python="3.12").to_json()
    assert lazy.torch_releases() == full.torch_versions
    assert query.torch_release(lazy, torch.rsplit(".0", 1)[0] + "+cu126") == \
        query.torch_release(full, torch.rsplit(".0", 1)[0] + "+cu126")


@pytest.mark.parametrize("kw", [{"sglang": "0.5.18"}, {"sglang": ">=0.5.17"},
                                {"sglang": "0.5.23", "python": "3.12"}, {"torch": ">=2.13"},
                                {"sglang": "0.5.18", "torch": "2.13.0+cu126"},
                                {"sglang": ">=0.5.17", "torch": "==2.14.1+cu130"}])
def test_triples_from_the_tables_read_no_facts(kw: dict[str, str]) -> None:
    """``triples`` of the releases the tables hold, the stacks table judging each set's
    extension pins: the facts unread (they were read to list the releases), the same rows."""
    from moonpin.resolver import native

    lazy = CompatGraph.from_path(SHIPPED)
    got = native.triples(lazy, **kw)
    assert not lazy.loaded
    assert got and got == native.triples(CompatGraph(_facts(), kb_path=SHIPPED), **kw)


def test_the_summary_names_every_sglang_release() -> None:
    lazy = CompatGraph.from_path(SHIPPED)
    versions = lazy.sglang_versions()
    assert not lazy.loaded
    assert sorted(versions) == sorted(CompatGraph(_facts()).sglang)


def test_a_lookup_reads_the_facts(tmp_path: Path) -> None:
    lazy = CompatGraph.from_path(SHIPPED)
    assert lazy.find_sglang("0.5.18") is not None and lazy.loaded
    with pytest.raises(AttributeError):
        lazy.no_such_attribute  # noqa: B018  # only the facts' names load them


def _renovate(capsys: pytest.CaptureFixture[str], req: Path) -> tuple[int, dict[str, Any]]:
    try:
        code = main(["--kb", SHIPPED, "renovate", str(req)])
    except SystemExit as e:
        code = int(e.code or 0)
    return code, json.loads(capsys.readouterr().out)


def test_renovate_on_requirements_reads_no_facts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text(f"sglang==0.5.18\ntorch==2.13.0\n{CUDA13}\n")
    want = _renovate(capsys, req)
    assert want[0] == 0 and want[1]["packageRules"]

    def refuse(path: str) -> Any:
        raise AssertionError(f"the facts of {path} were read")

    monkeypatch.setattr(CompatGraph, "_read", staticmethod(refuse))
    assert _renovate(capsys, req) == want
    # nor the summary: the SGLang releases it may move to are the names document's
    # (was: the facts module imported and the typed summary read, ~6 ms of ~70)
    code = ("import sys\nfrom moonpin.cli.main import main\n"
            "try:\n    main(['--kb', sys.argv[1], 'renovate', sys.argv[2]])\n"
            "except SystemExit:\n    pass\n"
            "print('moonpin.kb.facts' in sys.modules, file=sys.stderr)\n")
    got = subprocess.run([sys.executable, "-c", code, SHIPPED, str(req)], capture_output=True,
                         text=True, check=False)
    assert got.stderr.strip().splitlines()[-1] == "False", got.stderr
    assert json.loads(got.stdout) == want[1]


@pytest.mark.parametrize("sglang", ["0.5.18", "0.5.23", "0.5.3.post2"])
@pytest.mark.parametrize("kw", [{}, {"python": "3.12"}, {"arch": "aarch64"},
                                {"torch": "2.14.1", "python": "3.11", "arch": "x86_64"}])
def test_explain_from_the_table_is_the_full_answer(sglang: str, kw: dict[str, str]) -> None:
    """``explain`` of a release the tables hold reads its explain table, not the facts (a
    torch the release does not admit is left to the facts), and answers as they do."""
    for mooncake in (CUDA13, "mooncake-transfer-engine==0.3.8"):
        lazy = CompatGraph.from_path(SHIPPED)
        got = query.explain(lazy, sglang, mooncake, **kw).to_json()
        admitted = kw.get("torch") in (None, *(t for t, _ in CompatGraph(_facts()).torch_for(
            CompatGraph(_facts()).sglang[Version(sglang)])))
        assert lazy.loaded is not admitted
        assert got == query.explain(CompatGraph(_facts()), sglang, mooncake, **kw).to_json()


@pytest.mark.parametrize("sglang", ["0.5.23", "0.5.18"])
def test_constraints_read_no_facts_and_say_what_the_facts_say(
        sglang: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``moonpin constraints --sglang S`` (with every extension held) from the tables and
    the KB's summary: the version locks from the extensions' explain tables, the releases
    a range excludes from the summary (was: the facts read for both)."""
    from moonpin.resolver.pins.writing import constraints, renovate

    plan = renovate.plan_stack(CompatGraph(_facts()), sglang, natives=None)
    want = constraints.render(CompatGraph(_facts()), plan, "txt",
                              where=constraints.judged_for(None, None))

    def refuse(path: str) -> Any:
        raise AssertionError(f"the facts of {path} were read")

    monkeypatch.setattr(CompatGraph, "_read", staticmethod(refuse))
    assert main(["--kb", SHIPPED, "constraints", "--sglang", sglang]) in (0, None)
    assert capsys.readouterr().out == want


def test_constraints_load_no_specifier_parser_nor_pins_readers() -> None:
    """``moonpin constraints --sglang 0.5.23`` answers from the tables: it imports neither
    ``packaging.specifiers`` (the graph and the queries imported it at module level, a
    few ms of a command whose budget is 0.3× ``pip --version``) nor the pins files'
    readers (the Renovate writer imported them for its group name)."""
    code = ("import sys, runpy\n"
            "sys.argv = ['moonpin', '--kb', sys.argv[1], 'constraints', '--sglang', '0.5.23']\n"
            "try:\n    runpy.run_module('moonpin', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m in ('packaging.specifiers', "
            "'moonpin.resolver.pins.reading.base', 'networkx', 'pydantic')), file=sys.stderr)\n")
    got = subprocess.run([sys.executable, "-c", code, SHIPPED], capture_output=True,
                         text=True, check=False)
    assert got.stdout.startswith("# moonpin constraints: sglang 0.5.23"), got.stdout
    assert got.stderr.strip().splitlines()[-1] == "[]", got.stderr
