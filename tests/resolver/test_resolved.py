"""The resolved tables answer exactly as the full resolver, and only while fresh."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from moonpin.kb import store
from moonpin.resolver import query
from moonpin.resolver.answers import Which
from moonpin.resolver.graph import CompatGraph
from moonpin.resolver.tables import documents, per_release, reading
from tests.lib.server import FakeIndex
from tests.scrapers.test_scrape_e2e import index, scraped_kb  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def kb_path(index: FakeIndex, tmp_path: Path) -> Path:  # noqa: F811
    return scraped_kb(index, tmp_path / "kb.json")


@pytest.mark.parametrize("python", [None, "cp312", "cp39"])
@pytest.mark.parametrize("arch", [None, "x86_64", "aarch64"])
def test_same_answer_as_full_resolver(kb_path: Path, python: str | None,
                                      arch: str | None) -> None:
    g = CompatGraph(store.load(kb_path))  # no KB path: every question resolved here
    fast = CompatGraph.from_path(kb_path)  # answers from the tables where they hold it
    for version in ("0.5.4", "0.5.17"):
        table = per_release.load(kb_path, version)
        assert table is not None
        torches = table.sglang[version]["torch"]
        assert torches and not table.holds(version, "9.9.9")
        for torch in (None, *torches):
            full = query.which_mooncake(g, version, python=python, arch=arch,
                                        torch=torch).to_json()
            assert full["query"]["torch"] == (torch or torches)
            assert Which.from_json(table.which_mooncake(version, python=python, arch=arch,
                                                        torch=torch)).to_json() == full
            assert query.which_mooncake(fast, version, python=python, arch=arch,
                                        torch=torch).to_json() == full


@pytest.mark.parametrize("kw", [{}, {"sglang": "0.5.17"}, {"sglang": ">=0.5.4"},
                                {"torch": ">=2.9"}, {"mooncake": ">=0.3.10"},
                                {"dist": "mooncake-transfer-engine"}, {"python": "3.12"},
                                {"arch": "aarch64", "python": "3.10"}])
def test_triples_from_tables_as_from_the_resolver(kb_path: Path, kw: dict[str, str]) -> None:
    """``triples`` read from the tables lists what the full resolver lists, in its order."""
    full = query.triples(CompatGraph(store.load(kb_path)), **kw)
    fast = CompatGraph.from_path(kb_path)
    assert query._table(fast, "0.5.17", None) is not None  # the tables are what answers
    assert query.triples(fast, **kw) == full
    if not kw:
        assert full  # the fixture KB has compatible triples to compare


@pytest.mark.parametrize("label", ["cu126", "cu130", "cu118", "cpu", "rocm6.4", "git1234",
                                   "cu1"])
@pytest.mark.parametrize("kw", [{}, {"sglang": "0.5.17"}, {"python": "3.12"},
                                {"arch": "aarch64"}, {"dist": "mooncake-transfer-engine"}])
def test_triples_at_a_local_label_from_tables_as_from_the_resolver(
        kb_path: Path, label: str, kw: dict[str, str]) -> None:
    """A torch with a local label is judged from the tables' rows of its CUDA class (a major
    some build links, another major, none) as the full resolver judges that very label."""
    g = CompatGraph(store.load(kb_path))
    fast = CompatGraph.from_path(kb_path)
    table = per_release.load(kb_path, "0.5.17")
    assert table is not None and "labels" in table.doc
    for torch in table.sglang["0.5.17"]["torch"]:
        asked = {**kw, "torch": f"=={torch}+{label}"}
        full = query.triples(g, **asked)
        assert query.triples(fast, **asked) == full
        assert not fast.loaded  # the tables answered
        assert all(row["torch"] == f"{torch}+{label}" for row in full)
        # the fixture's builds link CUDA 13: a cu13 label (or one naming no CUDA, the
        # index's CUDA 13 build) has sets, a cu12 one none
        assert full or label not in ("cu130", "git1234") or kw
        assert not (label == "cu126" and full)


def test_a_loader_reading_the_label_leaves_labels_to_the_resolver(
        kb_path: Path, tmp_path: Path) -> None:
    """A loader whose rule reads the whole ``torch.__version__`` picks another build at each
    label: the tables then hold no verdicts at a label, and the facts answer."""
    from moonpin.resolver.tables import writer

    kb = store.load(kb_path)
    kb = kb.model_copy(update={"mooncake": tuple(m.model_copy(update={"wheels": tuple(
        w.model_copy(update={"loaders": tuple(
            ld.model_copy(update={"version_regex": None}) for ld in w.loaders)})
        for w in m.wheels)}) for m in kb.mooncake)})
    path = tmp_path / "read" / "kb.json"
    path.parent.mkdir()
    store.save(kb, path)
    writer.write(path)
    table = per_release.load(path, "0.5.17")
    assert table is not None and "labels" not in table.doc
    assert table.at_label("0.5.17", table.sglang["0.5.17"]["torch"][0] + "+cu126") is None
    fast = CompatGraph.from_path(path)
    public = table.sglang["0.5.17"]["torch"][0]
    full = query.triples(CompatGraph(store.load(path)), torch=f"=={public}+cu130")
    assert query.triples(fast, torch=f"=={public}+cu130") == full
    assert fast.loaded
    # the label changed the build the loader looks for: fewer sets than at the release
    at_release = query.triples(fast, torch=f"=={public}")
    assert len(full) < len({(r["dist"], r["mooncake"], r["python"], r["arch"])
                            for r in at_release})


def test_stale_or_missing_tables_are_ignored(kb_path: Path) -> None:
    assert per_release.load(kb_path, "0.5.17") is not None
    assert per_release.load(kb_path, "9.9.9") is None
    assert per_release.fix_for("0.5.17", "2.13.0", "cp312", "x86_64", kb_path=kb_path) == [
        "mooncake-transfer-engine==0.3.13"]
    kb_path.write_bytes(kb_path.read_bytes() + b" ")  # the KB changed after resolving
    assert per_release.load(kb_path, "0.5.17") is None
    assert per_release.fix_for("0.5.17", "2.13.0", "cp312", "x86_64", kb_path=kb_path) == []


def test_launch_rules_table_per_release(kb_path: Path) -> None:
    kb = store.load(kb_path)
    rec = next(s for s in kb.sglang if s.version == "0.5.17").launch
    assert rec is not None
    assert per_release.load_launch(kb_path, "0.5.17") == rec.model_dump(mode="json")
    assert per_release.load_launch(kb_path, "0.5.4") is None  # before elastic EP: no rules
    kb_path.write_bytes(kb_path.read_bytes() + b" ")  # stale: not trusted
    assert per_release.load_launch(kb_path, "0.5.17") is None


def test_fix_for_needs_the_torch_the_release_requires(kb_path: Path) -> None:
    assert per_release.fix_for("0.5.17", "2.13.0+cu130", "cp312", "x86_64",
                            kb_path=kb_path) == ["mooncake-transfer-engine==0.3.13"]
    assert per_release.fix_for("0.5.17", "2.12.0", "cp312", "x86_64", kb_path=kb_path) == []
    # the table resolved the index's CUDA 13 torch: another CUDA (or none) is not its answer
    assert per_release.fix_for("0.5.17", "2.13.0+cu126", "cp312", "x86_64", kb_path=kb_path) == []
    assert per_release.fix_for("0.5.17", "2.13.0+cpu", "cp312", "x86_64", kb_path=kb_path) == []
    assert per_release.fix_for("0.5.17", "2.13.0", "cp313", "x86_64", kb_path=kb_path) == []


_HEAVY = (
    "import sys\n"
    "from moonpin.cli.main import main\n"
    "rc = main({argv!r})\n"
    "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
    "('pydantic', 'networkx', 'httpx'))\n"
    "print('HEAVY', heavy, 'RC', rc)\n"
)


def _run_counting_heavy(argv: list[str]) -> tuple[str, list[str]]:
    r = subprocess.run([sys.executable, "-c", _HEAVY.format(argv=argv)], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out, _, tail = r.stdout.rpartition("HEAVY")
    heavy, _, rc = tail.rpartition("RC")
    assert rc.strip() == "0"
    return out, ast.literal_eval(heavy.strip())  # the module names the child printed


_QUERIES = [
    ["which", "mooncake", "--sglang", "0.5.17", "--json"],
    ["which", "mooncake", "--sglang", "0.5.17", "--torch", "2.13.0", "--json"],
    ["which", "sglang", "--mooncake", "mooncake-transfer-engine==0.3.13", "--json"],
    ["explain", "sglang==0.5.17", "mooncake-transfer-engine==0.3.13", "--json"],
    ["triples", "--sglang", "0.5.17", "--format", "json"],
]


@pytest.mark.parametrize("argv", _QUERIES, ids=lambda a: " ".join(a[:2]))
def test_queries_load_no_graph_library_or_models(kb_path: Path, tmp_path: Path,
                                                 argv: list[str]) -> None:
    """From the KB's derived facts a query imports neither pydantic nor networkx; without
    them (a KB copied alone) it reads the KB through pydantic and answers the same."""
    out, heavy = _run_counting_heavy(["--kb", str(kb_path), *argv])
    assert heavy == []
    alone = tmp_path / "alone" / "kb.json"
    alone.parent.mkdir()
    alone.write_bytes(kb_path.read_bytes())
    out2, heavy2 = _run_counting_heavy(["--kb", str(alone), *argv])
    assert "pydantic" in heavy2  # the negative control: the test sees a heavy import
    assert json.loads(out2) == json.loads(out.replace(str(kb_path), str(alone)))


def _restamp(path: Path, body: object, kb_path: Path) -> None:
    """Write ``body`` as a stamped document that hashes right (a crafted file)."""
    path.write_bytes(reading.stamped(body, reading.file_sha256(kb_path)))


def test_damaged_facts_are_ignored(kb_path: Path) -> None:
    """A facts file that is damaged, another KB's, or of the wrong shape even with a
    right stamp, is never believed: the KB itself answers."""
    facts = reading.resolved_path(kb_path) / documents.FACTS_NAME
    head, _, body = facts.read_bytes().partition(b"\n")
    good = documents.load_facts(kb_path)
    assert good is not None and good == CompatGraph(store.load(kb_path)).kb
    facts.write_bytes(head + b"\n" + body.replace(b"0.5.17", b"0.5.71", 1))  # one byte
    assert documents.load_facts(kb_path) is None
    facts.write_bytes(head.replace(b'"kb_sha256": "', b'"kb_sha256": "0', 1) + b"\n" + body)
    assert documents.load_facts(kb_path) is None
    doc = json.loads(body)

    def at(d: dict, *path: int) -> list:
        """The list at ``path`` from the root, through shared entries."""
        node = d["root"]
        for i in path:
            node = node[i]
            node = d["pool"][node] if type(node) is int else node
        return node

    # Facts: schema_version, scrape, sglang, mooncake, ...; Sglang's 6th field is pg.
    damages = [lambda d: at(d, 3, 0).__setitem__(2, 5),           # wheels a number
               lambda d: at(d, 2, 0, 5).__setitem__(2, [1, 2]),   # pg names of ints
               lambda d: d.update(extra=1),
               lambda d: at(d, 1).__setitem__(0, "yesterday"),    # scraped_at
               lambda d: at(d, 3).__setitem__(0, len(d["pool"])),  # no such entry
               lambda d: at(d, 3).__setitem__(0, -1),
               lambda d: at(d, 2, 0).__setitem__(5, 0),    # entry 0 read as a Pg
               lambda d: d.update(format="pooled-0"),
               lambda d: d["pool"].__setitem__(1, 0)]       # an entry that refers
    for damage in damages:
        bad = json.loads(json.dumps(doc))
        damage(bad)
        _restamp(facts, bad, kb_path)
        assert documents.load_facts(kb_path) is None
        assert CompatGraph.from_path(kb_path).kb == good  # read from the KB itself


def test_show_documents_hold_the_kb_record(kb_path: Path) -> None:
    """``show``'s document of a release is its KB record exactly (launch rules put back);
    a damaged or wrong-shaped one is ignored."""
    from moonpin.cli import show

    kb = store.load(kb_path)
    for s in kb.sglang:
        assert show.record(kb_path, "sglang", "sglang", s.version) == s.model_dump(mode="json")
    for r in kb.mooncake:
        assert show.record(kb_path, "mooncake", r.dist, r.version) == r.model_dump(mode="json")
    s = kb.sglang[-1]
    path = reading.resolved_path(kb_path) / documents.show_name("sglang", s.version)
    doc = documents.load_show(kb_path, "sglang", s.version)
    assert doc is not None
    path.write_bytes(path.read_bytes()[:-2])  # cut short
    assert show.record(kb_path, "sglang", "sglang", s.version) is None
    doc["record"]["imports"] = [{"module": 5}]
    _restamp(path, doc, kb_path)
    assert show.record(kb_path, "sglang", "sglang", s.version) is None
    doc["record"] = s.model_dump(mode="json", exclude={"launch"})
    doc["version"] = "0.0.1"  # another release's document under this name
    _restamp(path, doc, kb_path)
    assert show.record(kb_path, "sglang", "sglang", s.version) is None


def test_check_fix_moves_torch_when_no_mooncake_fits_it(kb_path: Path) -> None:
    from moonpin.preflight.extensions.seam import own_rule
    from moonpin.preflight.judge.fixes import Fixer, Project

    own = own_rule()  # mooncake's: the project whose fix lines these are

    def _Fixer(provider: None, kb: Path) -> Fixer:
        return Fixer(provider, kb, Project(own.IMPORT, own.DISTRIBUTIONS[0], own.PREBUILD))

    fixer = _Fixer(None, kb_path)
    fixer.sglang, fixer.torch, fixer.python = "0.5.17", "2.12.0", "cp312"
    line = fixer.line()
    assert line.startswith("pip install 'torch==2.13.0,!=2.13.0+cpu' "
                           "'mooncake-transfer-engine==0.3.13'")
    fits = _Fixer(None, kb_path)
    fits.sglang, fits.torch, fits.python = "0.5.17", "2.13.0", "cp312"
    assert fits.line() == "pip install 'mooncake-transfer-engine==0.3.13'"


def test_shipped_tables_match_the_shipped_kb() -> None:
    """Fails when data/kb.json changed without `moonpin kb resolve` (scrape does both)."""
    kb = ROOT / "data" / "kb.json"
    assert per_release.load_requirements(kb) is not None, "run `moonpin kb resolve`"
    assert per_release.load(kb, "0.5.18") is not None


def test_check_fix_moves_sglang_when_no_mooncake_fits_the_release(kb_path: Path) -> None:
    from moonpin.preflight.extensions.seam import own_rule
    from moonpin.preflight.judge.fixes import Fixer, Project

    own = own_rule()  # mooncake's: the project whose fix lines these are

    def _Fixer(provider: None, kb: Path) -> Fixer:
        return Fixer(provider, kb, Project(own.IMPORT, own.DISTRIBUTIONS[0], own.PREBUILD))

    reqs = per_release.load_requirements(kb_path)
    assert reqs is not None and reqs["0.5.17"]["torch"] == ["2.13.0"]
    fixer = _Fixer(None, kb_path)
    fixer.sglang, fixer.torch, fixer.python = "0.5.4", "2.13.0", "cp312"
    assert fixer.line() == ("pip install 'sglang==0.5.17' 'mooncake-transfer-engine==0.3.13' "
                            "(no mooncake fits sglang 0.5.4 with torch 2.13.0; sglang 0.5.17 "
                            "requires this torch and has one)")


def test_feature_imports_from_the_table_are_the_kbs(tmp_path: Path) -> None:
    """The shipped `_sglang` table's per-feature imports are what the whole KB's import
    records give the runtime check, for every release and feature."""
    import shutil

    from moonpin.preflight.installed.image_facts import KBView

    shipped = ROOT / "data" / "kb.json"
    with_table = tmp_path / "table" / "kb.json"  # the KB and its resolved/ tables
    with_table.parent.mkdir()
    shutil.copy(shipped, with_table)
    shutil.copytree(ROOT / "data" / "resolved", with_table.parent / "resolved")
    alone = tmp_path / "alone" / "kb.json"  # no tables: the check reads the whole KB
    alone.parent.mkdir()
    shutil.copy(shipped, alone)
    table = KBView(str(with_table))
    whole = KBView(str(alone))
    with_table.unlink()  # what `table` answers from here on comes from its tables alone
    versions = [r["version"] for r in json.loads(shipped.read_text())["sglang"]]
    def used(records: list[dict[str, object]] | None) -> list[tuple[object, ...]] | None:
        """What the check reads of each record."""
        if records is None:
            return None
        return [(r["module"], r["names"], r["feature"], r["optional"], r["member"], r["line"])
                for r in records]

    seen = 0
    for v in versions:
        for feature in ("moe-a2a", "pd-disaggregation", "hicache", "elastic-ep"):
            got = used(table.feature_imports(v, feature))
            assert got == used(whole.feature_imports(v, feature)), (v, feature)
            seen += bool(got)
    assert seen > 50  # the records are there to compare
    assert table.feature_imports("0.0.0", "moe-a2a") is None  # a release the KB lacks


# ----------------------------------------------- derived tables are untrusted input


def _retyped(path: Path, edit: object) -> None:
    doc = json.loads(path.read_text())
    edit(doc)  # type: ignore[operator]
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("edit", [
    lambda d: d.update(rows={"0.5.17": [[0, "2.13.0"]]}),
    lambda d: d.update(strings=[1, 2]),
    lambda d: d["rows"]["0.5.17"][0].__setitem__(5, 10**6),  # a string index out of range
    lambda d: d.update(releases=[]),
    lambda d: d.update(unread=[5]),
    lambda d: d["sglang"]["0.5.17"].update(names=[1, 2]),
])
def test_a_damaged_release_table_is_ignored(kb_path: Path, edit: object) -> None:
    table = reading.resolved_path(kb_path) / "0.5.17.json"
    _retyped(table, edit)
    assert per_release.load(kb_path, "0.5.17") is None  # the caller asks the full resolver


@pytest.mark.parametrize("content", [b"[]", b"[" * 100_000 + b"]" * 100_000,
                                     b'{"schema_version": ' + b"9" * 5000 + b"}", b"\xff"])
def test_tables_that_are_not_tables_are_ignored(kb_path: Path, content: bytes) -> None:
    folder = reading.resolved_path(kb_path)
    for name in ("0.5.17.json", "_sglang.json", "_launch-0.5.17.json"):
        (folder / name).write_bytes(content)
    assert per_release.load(kb_path, "0.5.17") is None
    assert per_release.load_requirements(kb_path) is None
    assert per_release.load_launch(kb_path, "0.5.17") is None


def test_a_fifo_table_does_not_block(kb_path: Path) -> None:
    import os

    table = reading.resolved_path(kb_path) / "_sglang.json"
    table.unlink()
    os.mkfifo(table)
    assert per_release.load_requirements(kb_path) is None


@pytest.mark.parametrize("edit", [
    lambda d: d["sglang"]["0.5.17"].update(names=[1, 2]),
    lambda d: d["sglang"]["0.5.17"].update(features=[]),
    lambda d: d["sglang"]["0.5.17"]["features"].update(x=[{"module": 5}]),
    lambda d: d.update(sglang=[]),
])
def test_a_damaged_requirements_table_is_ignored(kb_path: Path, edit: object) -> None:
    assert per_release.load_requirements(kb_path) is not None
    _retyped(reading.resolved_path(kb_path) / "_sglang.json", edit)
    assert per_release.load_requirements(kb_path) is None


@pytest.mark.parametrize("edit", [
    None,
    lambda d: d["sglang"]["0.5.4"].update(names=[1, 2]),  # another release's entry
    lambda d: d["sglang"]["0.5.17"]["features"].update(x=[{"module": 5}]),
    lambda d: d.update(sglang=[]),
    lambda d: d.update(kb_sha256="0" * 64),  # another KB's table
    lambda d: d.update(schema_version=99),
])
def test_one_release_of_the_requirements_table_as_the_whole(
        kb_path: Path, edit: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a worker start reads of ``_sglang.json`` (one release's entry, kept in the
    memo) says what the whole table says, damaged or not, cold and warm."""
    from moonpin.kb import files

    if edit is not None:
        _retyped(reading.resolved_path(kb_path) / "_sglang.json", edit)
    whole = per_release.load_requirements(kb_path)
    for version in ("0.5.4", "0.5.17", "9.9.9"):
        want = (whole is not None, whole.get(version) if whole is not None else None)
        assert per_release.load_requirement(kb_path, version) == want  # cold: parsed
        with monkeypatch.context() as m:
            def refuse(_: object) -> None:
                raise AssertionError("parsed the table again")

            m.setattr(files, "loads_json", refuse)
            assert per_release.load_requirement(kb_path, version) == want  # warm: the memo
    assert (whole is None) == (edit is not None)  # control: each edit damages the table


def test_kbview_of_one_release_answers_as_the_whole_index(kb_path: Path) -> None:
    from moonpin.preflight.installed.image_facts import KBView

    whole = KBView(str(kb_path))
    for installed in ("0.5.17", "9.9.9"):
        one = KBView(str(kb_path), installed)
        assert one.ok and one._only == installed  # the one entry, not the index
        for v in (installed, "0.5.4", "0.5.17"):  # another release: the whole index
            a, b = one.requirement(v), whole.requirement(v)
            assert (vars(a) if a else None) == (vars(b) if b else None), v
            assert one.feature_imports(v, "hicache") == whole.feature_imports(v, "hicache")
    assert whole.requirement("0.5.17") is not None  # control


def test_one_release_follows_the_table_and_the_kb(kb_path: Path) -> None:
    """A table rewritten (its stamp changes) is read again; a KB changed under an
    unchanged table makes the table another KB's."""
    import os

    ok, entry = per_release.load_requirement(kb_path, "0.5.17")
    assert ok and entry is not None
    table = reading.resolved_path(kb_path) / "_sglang.json"
    st = table.stat()
    _retyped(table, lambda d: d["sglang"]["0.5.17"].update(names=["only_this"]))
    os.utime(table, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    ok, entry = per_release.load_requirement(kb_path, "0.5.17")
    assert ok and entry is not None and entry["names"] == ["only_this"]
    with open(kb_path, "a") as f:
        f.write(" ")  # still the same KB to a JSON reader, another sha256
    assert per_release.load_requirement(kb_path, "0.5.17") == (False, None)
    assert per_release.load_requirements(kb_path) is None  # as the whole table says


@pytest.mark.parametrize("edit", [
    lambda d: d["launch"].update(flags=[5]),
    lambda d: d["launch"]["flags"][0].update(name=5),
    lambda d: d["launch"]["rules"][0].update(writes=[None]),
    lambda d: d["launch"].update(constants={"a": 1}),
    lambda d: d.update(sglang="0.5.4"),  # another release's table under this name
])
def test_a_damaged_launch_table_is_ignored(kb_path: Path, edit: object) -> None:
    from moonpin.resolver.args.rules import rules_from_json

    path = reading.resolved_path(kb_path) / "_launch-0.5.17.json"
    record = per_release.load_launch(kb_path, "0.5.17")
    assert record is not None and record["rules"]
    _retyped(path, edit)
    assert per_release.load_launch(kb_path, "0.5.17") is None
    damaged = json.loads(path.read_text())["launch"]
    if damaged != record:
        with pytest.raises(TypeError, match="malformed launch-rules record"):
            rules_from_json(damaged)


def test_rules_from_json_refuses_json_texts_that_are_not_json(kb_path: Path) -> None:
    from moonpin.resolver.args.rules import rules_from_json

    record = per_release.load_launch(kb_path, "0.5.17")
    assert record is not None
    record["flags"][0]["default"] = "{not json"
    with pytest.raises(TypeError, match="malformed"):
        rules_from_json(record)


@pytest.mark.parametrize("version", ["1.0+" + "a" * 300, "1.0+a/b", ".hidden", "0.5.18"])
def test_table_names_are_valid_file_names_whatever_the_version(tmp_path: Path,
                                                               version: str) -> None:
    for prefix in ("", "_launch-"):
        name = reading.table_name(prefix, version)
        assert len(name.encode()) <= 255 and "/" not in name and not name.startswith(".")
        (tmp_path / name).write_text("{}")  # the file system takes it
    assert reading.table_name("", "0.5.18") == "0.5.18.json"  # a plain one is unchanged


def test_summary_document(kb_path: Path) -> None:
    """``_summary.json`` says what the facts say (counts, names, the scrape); damaged,
    stale or of another shape it is ignored, and the facts answer instead."""
    from moonpin.cli.spelling import _Pools
    from moonpin.kb.facts import summary_of, to_json

    facts = documents.load_facts(kb_path)
    assert facts is not None
    found = documents.load_summary(kb_path)
    assert found == summary_of(facts) and "0.5.17" in documents.release_names(found)["index"]
    doc = reading.resolved_path(kb_path) / documents.SUMMARY_NAME
    good = to_json(found)
    root = good["root"]  # schema_version, scrape, sglang, mooncake, ...
    for bad in ({**good, "root": [*root[:4], "many", *root[5:]]}, {**good, "extra": []}, [],
                {**good, "root": [root[0], 5, *root[2:]]}, {**good, "pool": {}}):
        _restamp(doc, bad, kb_path)
        assert documents.load_summary(kb_path) is None
        assert documents.summary(kb_path) == found  # from the facts
        assert _Pools(kb_path).sglang("v0.5.17", "--sglang ") == "0.5.17"
    doc.write_bytes(b"\xff" * 10)
    assert documents.load_summary(kb_path) is None


def test_names_document(kb_path: Path) -> None:
    """``_names.json`` (what users' input is read against, and the scrape's time, without
    the facts module) says what the summary says, and every torch release the KB lists
    (which the summary only counts); damaged, crafted with a version that is not PEP 440,
    or of another shape, it is ignored and the summary answers (without the torch
    releases: a graph then reads them from the facts)."""
    from moonpin.cli.spelling import _Pools

    summary = documents.load_summary(kb_path)
    facts = documents.load_facts(kb_path)
    assert summary is not None and facts is not None
    found = documents.names(kb_path)
    said = documents.names_of(summary)
    assert found == {**said, "torch": list(facts.torch_versions),
                     "sglang": [s.version for s in facts.sglang]} and "0.5.17" in found["index"]
    assert found["scraped_at"] == summary.scrape.scraped_at.isoformat() and found["torch"]
    doc = reading.resolved_path(kb_path) / documents.NAMES_NAME
    for bad in ({**found, "index": ["banana"]}, {**found, "every": ["9" * 5000]},
                {**found, "native": []}, {**found, "scraped_at": 5}, [], {},
                {**found, "torch": ["2.x"]}, {**found, "torch": "2.13.0"},
                {**found, "sglang": ["0.5.x"]}, {**found, "sglang": 5}):
        _restamp(doc, bad, kb_path)
        assert documents.names(kb_path) == said  # from the summary
        assert _Pools(kb_path).sglang("v0.5.17", "--sglang ") == "0.5.17"
        lazy = CompatGraph.from_path(kb_path)
        assert lazy.torch_releases() == CompatGraph(facts).torch_versions  # from the facts
        lazy = CompatGraph.from_path(kb_path)
        assert sorted(lazy.sglang_versions()) == sorted(CompatGraph(facts).sglang)
        assert not lazy.loaded  # from the summary
    _restamp(doc, {**found, "index": ["0.5.99"]}, kb_path)  # believed when well formed
    assert documents.names(kb_path)["index"] == ["0.5.99"]
    doc.write_bytes(b"\xff" * 10)
    assert documents.names(kb_path) == said


def test_crafted_documents_with_bad_versions_or_naive_times(kb_path: Path) -> None:
    """Found by hand: a facts or summary document written on purpose (it hashes right)
    whose release version is not PEP 440 crashed every query (InvalidVersion), and a
    scrape time without a zone crashed ``kb info``. Such a version makes the document
    ignored (as moonpin.kb.store refuses it in a KB); a time without a zone is UTC, in a KB too."""
    import datetime as dt

    from moonpin.kb.facts import summary_of, to_json

    facts = documents.load_facts(kb_path)
    assert facts is not None
    folder = reading.resolved_path(kb_path)
    for bad in ("banana", "9" * 5000, ""):
        crafted = facts._replace(sglang=(facts.sglang[0]._replace(version=bad),
                                         *facts.sglang[1:]))
        _restamp(folder / documents.FACTS_NAME, to_json(crafted), kb_path)
        _restamp(folder / documents.SUMMARY_NAME, to_json(summary_of(crafted)), kb_path)
        assert documents.load_facts(kb_path) is None
        assert documents.load_summary(kb_path) is None
    naive = facts.scrape._replace(scraped_at=dt.datetime(2026, 1, 1))
    _restamp(folder / documents.SUMMARY_NAME, to_json(summary_of(facts._replace(
        scrape=naive))), kb_path)
    found = documents.load_summary(kb_path)
    assert found is not None and found.scrape.scraped_at.tzinfo is not None
    out = subprocess.run([sys.executable, "-m", "moonpin", "--kb", str(kb_path), "kb",
                          "info"], capture_output=True, text=True, cwd=ROOT, check=False)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    doc = json.loads(kb_path.read_text())
    doc["scrape"]["scraped_at"] = "2026-01-01T00:00:00"  # a KB edited by hand
    kb_path.write_text(json.dumps(doc))
    assert store.load(kb_path).scrape.scraped_at.tzinfo is not None


@pytest.mark.parametrize("python", [None, "3.12", "3.9"])
@pytest.mark.parametrize("arch", [None, "x86_64", "aarch64"])
def test_explain_from_tables_as_from_the_resolver(kb_path: Path, python: str | None,
                                                  arch: str | None) -> None:
    """Each release's explain table answers ``explain`` exactly as the full resolver, for
    every mooncake release and torch it holds; what it does not hold goes to the facts."""
    g = CompatGraph(store.load(kb_path))
    answered = 0
    for version in ("0.5.4", "0.5.17"):
        table = per_release.load_explain(kb_path, version)
        assert table is not None and table.torch
        for d, v in sorted(g.mooncake):
            for torch in (None, *table.torch, "2.13.0+cu126"):
                fast = CompatGraph.from_path(kb_path)
                kw = {"torch": torch, "python": python, "arch": arch}
                got = query.explain(fast, version, f"{d}=={v}", **kw).to_json()
                assert got == query.explain(g, version, f"{d}=={v}", **kw).to_json()
                answered += not fast.loaded
    if python != "3.9" and arch != "aarch64":  # the fixture's wheels have neither
        assert answered


@pytest.mark.parametrize("edit", [
    lambda d: d.update(combos=[[0, "2.13.0"]]),
    lambda d: d.update(strings=[1, 2]),
    lambda d: d["combos"][0].__setitem__(5, [10**6]),  # a check index out of range
    lambda d: d["checks"][0].__setitem__(1, 1),  # ok must be true, false or null
    lambda d: d.update(releases=[]),
    lambda d: d.update(sglang="0.5.4"),  # another release's table under this name
    lambda d: d.update(tags=[["cp312"]]),
])
def test_a_damaged_explain_table_is_ignored(kb_path: Path, edit: object) -> None:
    table = reading.resolved_path(kb_path) / "_explain-0.5.17.json"
    assert per_release.load_explain(kb_path, "0.5.17") is not None
    want = query.explain(CompatGraph(store.load(kb_path)), "0.5.17",
                         "mooncake-transfer-engine==0.3.13").to_json()
    _retyped(table, edit)
    assert per_release.load_explain(kb_path, "0.5.17") is None
    fast = CompatGraph.from_path(kb_path)
    assert query.explain(fast, "0.5.17", "mooncake-transfer-engine==0.3.13").to_json() == want
    assert fast.loaded  # the facts answered


def test_a_stale_explain_table_is_ignored(kb_path: Path) -> None:
    assert per_release.load_explain(kb_path, "0.5.17") is not None
    kb_path.write_bytes(kb_path.read_bytes() + b" ")
    assert per_release.load_explain(kb_path, "0.5.17") is None


@pytest.mark.parametrize("said", [("w.whl", "cp312", "x86_64"), (None, "cp3", "a"),
                                  ("cp312", "cp312", "cp312")])
def test_explain_table_marks_come_back_whole(said: tuple[str | None, str, str]) -> None:
    """What the table writes in place of the wheel, python and platform reads back as the
    text it was (the writer keeps a text only when it does)."""
    text = "x86_64 cp312 w.whl: cp312 on x86_64 \\u0000 cp3a"
    marked = text
    for value, mark in zip(said, per_release.MARKS, strict=True):
        if value:
            marked = marked.replace(value, mark)
    assert per_release.expand(marked, said) == text


def test_torch_document_answers_show_torch_without_the_facts(
        kb_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``_torch.json`` holds the KB's torch facts (each release's wheel per platform, the
    torch specifiers of each SGLang release, each extension build's torch): ``show
    torch==V`` answers from it without reading the facts, exactly as from the facts; a
    missing, damaged, misshapen or stale one is ignored (the facts answer)."""
    from moonpin.cli.main import main
    from moonpin.resolver.graph import CompatGraph

    facts = documents.load_facts(kb_path)
    table = documents.load_torch(kb_path)
    assert facts is not None and table is not None and facts.torch
    assert [(t["version"], [tuple(v) for v in t["variants"]]) for t in table["torch"]] == [
        (t.version, [(v.arch, v.cuda_major, v.evidence, v.artifact.filename)
                     for v in t.variants]) for t in facts.torch]
    g = CompatGraph(facts)
    assert table["sglang"] == [[str(v), s.artifact.filename, list(s.torch_requirements),
                                list(s.torch_specifiers)] for v, s in sorted(g.sglang.items())]
    asked = [f"torch=={facts.torch[-1].version}", f"torch=={facts.torch[0].version}+cu126",
             "torch==9.9.9"]

    def shown() -> list[tuple[int, str, str]]:
        out = []
        for release in asked:
            for extra in ([], ["--json"]):
                try:
                    rc = main(["--kb", str(kb_path), "show", release, *extra])
                except SystemExit as e:
                    rc = int(e.code or 0)
                got = capsys.readouterr()
                out.append((rc, got.out, got.err))
        return out

    def unread(path: object) -> None:
        raise AssertionError("the facts were read")

    with monkeypatch.context() as m:
        m.setattr(documents, "load_facts", unread)
        m.setattr(store, "load", unread)
        fast = shown()
    full = shown()
    assert fast == full and "admitted by the torch requirement of sglang" in fast[0][1]
    doc = reading.resolved_path(kb_path) / documents.TORCH_NAME
    good = doc.read_bytes()
    for bad in ({**table, "torch": [{"version": "2.13.0", "variants": [["x86_64"]]}]},
                {**table, "sglang": 5}, {**table, "builds": []}, []):
        _restamp(doc, bad, kb_path)
        assert documents.load_torch(kb_path) is None
        assert shown() == full
    doc.write_bytes(reading.stamped(table, "0" * 64))  # another KB's
    assert documents.load_torch(kb_path) is None and shown() == full
    doc.unlink()
    assert documents.load_torch(kb_path) is None and shown() == full
    doc.write_bytes(good)
    assert documents.load_torch(kb_path) == table


@pytest.mark.parametrize("python", [None, "cp312", "cp39"])
@pytest.mark.parametrize("arch", [None, "x86_64", "aarch64"])
def test_which_sglang_from_the_transposed_tables(kb_path: Path, python: str | None,
                                                 arch: str | None) -> None:
    """Each mooncake release's transposed table (``_fits-<dist>-<version>.json``) answers
    ``which sglang --mooncake`` exactly as the full resolver, without the facts, for every
    release of the KB; a python or platform it does not hold, a torch, and a missing,
    damaged or stale table go to the facts, with the same answer."""
    facts = CompatGraph(store.load(kb_path))  # no KB path: every question resolved here
    releases = sorted(f"{d}=={v}" for d, v in facts.mooncake)
    assert releases
    held = 0
    for release in releases:
        full = query.which_sglang(facts, release, python=python, arch=arch).to_json()
        fast = CompatGraph.from_path(kb_path)
        assert query.which_sglang(fast, release, python=python, arch=arch).to_json() == full
        held += not fast.loaded
    # the tables answered (cp39 and aarch64 are on no wheel of the fixture: the facts did)
    assert held or python == "cp39" or arch == "aarch64"
    release = releases[-1]
    dist, version = release.split("==")
    doc = reading.resolved_path(kb_path) / per_release.fits_name(dist, version)
    full = query.which_sglang(facts, release, python=python, arch=arch).to_json()
    good = json.loads(doc.read_bytes())
    for bad in ({**good, "kb_sha256": "0" * 64}, {**good, "mooncake": [dist, "9.9"]},
                {**good, "sglang": [["0.5.17", "mooncake.pg", [["2.9.1"]]]]}, None):
        if bad is None:
            doc.unlink()
        else:
            doc.write_text(json.dumps(bad))
        assert per_release.load_fits(kb_path, dist, version) is None
        fast = CompatGraph.from_path(kb_path)
        assert query.which_sglang(fast, release, python=python, arch=arch).to_json() == full


def test_default_matrix_from_its_table(kb_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``_matrix.json`` holds every cell and extension column of the default matrix: its
    Markdown and CSV (stdout, ``-o``, the docs page) come from it without the facts, byte for
    byte as judged from the facts; a filter, JSON and HTML judge from the facts; a missing,
    damaged or stale table is ignored (the facts answer, the same)."""
    from moonpin.cli.main import main
    from moonpin.resolver.matrix import table as M
    from moonpin.resolver.matrix import tabled

    out = kb_path.parent / "m.csv"

    def run(*argv: str) -> tuple[int, str]:
        out.unlink(missing_ok=True)
        rc = main(["--kb", str(kb_path), "matrix", *argv])
        said = capsys.readouterr().out
        return rc, said + (out.read_text() if "-o" in argv else "")

    asked = [("--format", "md"), (), ("--format", "csv"), ("-o", str(out))]

    def unread(path: object) -> None:
        raise AssertionError("the facts were read")

    with monkeypatch.context() as m:
        m.setattr(documents, "load_facts", unread)
        m.setattr(store, "load", unread)
        fast = [run(*a) for a in asked]
    full = M.build_matrix(CompatGraph(store.load(kb_path)), kb_path=kb_path)
    assert fast[0][1] == M.render(full, "md", docs=True) and "✅" in fast[0][1]
    assert fast[2][1] == M.to_csv(full) and fast[3][1] == M.to_csv(full)
    m2 = tabled.load(kb_path)
    assert m2 is not None and m2.counts() == full.counts() and m2.cells == [
        c._replace(reasons=(), checks=()) for c in full.cells]
    assert list(m2.extensions()) == list(full.extensions())
    doc = reading.resolved_path(kb_path) / tabled.MATRIX_NAME
    good = json.loads(doc.read_bytes())
    for bad in ({**good, "kb_sha256": "0" * 64}, {**good, "grid": good["grid"][1:]},
                {**good, "cells": [[9, 0, [], None]]}, {**good, "ext": [10**6]}, None):
        if bad is None:
            doc.unlink()
        else:
            doc.write_text(json.dumps(bad))
        assert tabled.load(kb_path) is None
        assert [run(*a) for a in asked] == fast


@pytest.mark.parametrize("python", [None, "cp312", "cp39"])
@pytest.mark.parametrize("arch", [None, "x86_64", "aarch64"])
def test_which_torch_from_the_tables(kb_path: Path, python: str | None,
                                     arch: str | None) -> None:
    """``which torch --sglang S --mooncake M`` answers from M's transposed table and the
    torch facts' table (SGLang's torch requirement lines) exactly as the full resolver,
    without the facts, for every SGLang and mooncake release of the KB; a broken or stale
    torch table, or a torch given, go to the facts, with the same answer."""
    facts = CompatGraph(store.load(kb_path))
    pairs = [(str(s.version), f"{d}=={v}") for s in facts.sglang.values()
             if s.pg.module is not None for d, v in facts.mooncake]
    assert pairs
    held = 0
    for sglang, release in pairs:
        full = query.which_torch(facts, sglang, release, python=python, arch=arch).to_json()
        fast = CompatGraph.from_path(kb_path)
        assert query.which_torch(fast, sglang, release, python=python,
                                 arch=arch).to_json() == full
        held += not fast.loaded
    assert held or python == "cp39" or arch == "aarch64"
    sglang, release = pairs[0]
    full = query.which_torch(facts, sglang, release, python=python, arch=arch).to_json()
    doc = reading.resolved_path(kb_path) / documents.TORCH_NAME
    table = documents.load_torch(kb_path)
    assert table is not None
    for bad in ({**table, "sglang": [[sglang, "w", ["torch==1"]]]}, None):
        if bad is None:
            doc.unlink()
        else:
            _restamp(doc, bad, kb_path)
        fast = CompatGraph.from_path(kb_path)
        assert query.which_torch(fast, sglang, release, python=python,
                                 arch=arch).to_json() == full


def test_a_matrix_row_at_no_torch_is_unknown_from_the_table_as_from_the_facts(
        kb_path: Path) -> None:
    """Found by the hostile scrape surface: an SGLang release whose torch requirement no
    torch of the KB meets is a matrix row at torch '?'. Its cells and extension columns were
    judged at torch '?' (a usage error: `moonpin matrix` exited 2 on such a KB, and ``kb
    resolve`` failed building the matrix's table, after the scrape had written the KB);
    they are unknown ("no torch"), from the table as from the facts."""
    from moonpin.resolver.matrix import table as M
    from moonpin.resolver.matrix import tabled
    from moonpin.resolver.tables.writer import write

    kb = store.load(kb_path)
    odd = kb.sglang[-1].model_copy(update={"torch_requirements": ("torch==9.9.9",)})
    store.save(kb.model_copy(update={"sglang": (*kb.sglang[:-1], odd)}), kb_path)
    write(kb_path)  # raised UsageError before
    m = tabled.load(kb_path)
    full = M.build_matrix(CompatGraph(store.load(kb_path)), kb_path=kb_path)
    assert m is not None and M.to_csv(m) == M.to_csv(full)
    row = next(r for r in full.rows if r.sglang == odd.version)
    assert row.torch == "?" and {c.state for c in full.cells if c.sglang == odd.version} == {
        "unknown"}
    out = subprocess.run([sys.executable, "-m", "moonpin", "--kb", str(kb_path), "matrix",
                          "--format", "md"], capture_output=True, text=True, cwd=ROOT,
                         check=False)
    assert out.returncode in (0, 1) and out.stdout == M.render(full, "md", docs=True), (
        out.stderr)


def test_a_label_of_thousands_of_digits_says_nothing_of_cuda() -> None:
    """An image's ``torch.__version__`` of ``2.13.0+cu`` and 5,000 digits raised ValueError
    (int() of over 4,300 digits) in every reader of a label; it names no CUDA release."""
    from moonpin.resolver.tables.torch_labels import label_class, label_cuda, torch_label

    label = "cu" + "1" * 5000
    assert label_cuda(label) is None and label_class(label, [12, 13]) is None
    assert torch_label(f"2.13.0+{label}") is None  # a label the tables do not resolve
    assert label_cuda("cu126") == (12, "local label +cu126")
