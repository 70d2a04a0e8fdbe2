"""Parsing launch arguments and checking them against scraped SGLang rules."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from moonpin.kb.launch import Flag, Rule
from moonpin.readers.launch.server_args import elastic_rules, extract
from moonpin.resolver.args.rules import Unevaluable, Verdict, check, evaluate, parse_launch
from tests.lib.sglang_src import real_args

# ---------------------------------------------------------------------------
# evaluator
# ---------------------------------------------------------------------------


def test_evaluate_supported_forms() -> None:
    v = {"pp_size": 2, "backend": None, "mode": "scale", "Backend.DISABLED": "disabled"}
    assert evaluate("self.pp_size != 1", v)
    assert evaluate("self.backend is None and self.mode in ['scale', 'recover']", v)
    assert not evaluate("not (self.mode == 'scale')", v)
    assert evaluate("1 < self.pp_size <= 2", v)
    assert evaluate("self.mode != Backend.DISABLED", v)
    # short-circuit: the unevaluable right side is never read
    assert not evaluate("self.backend is not None and self._resolved().x", v)


@pytest.mark.parametrize(
    "cond",
    [
        "len(self.mode) > 1",
        "self._resolved().enable_dp_attention",
        "self.pp_size + 1 > 2",
        "self.mode[0] == 's'",
        "other == 1",
        "self.missing == 1",
        "self.backend < 1",
        "__import__('os').system('true')",
    ],
)
def test_evaluate_rejects_everything_else(cond: str) -> None:
    with pytest.raises(Unevaluable):
        evaluate(cond, {"pp_size": 2, "backend": None, "mode": "scale"})


# ---------------------------------------------------------------------------
# parsing
# ---------------------------------------------------------------------------

FLAGS = (
    Flag("--tp-size", "tp_size", 1, None, "int", None, 1, aliases=("--tensor-parallel-size",)),
    Flag("--elastic-ep-backend", "elastic_ep_backend", None, ("none", "mooncake", "nixl"),
         "str", None, 2),
    Flag("--enable-eplb", "enable_eplb", False, None, None, "store_true", 3),
    Flag("--cuda-graph-backend-decode", "cuda_graph_backend_decode", None, None, "str", None, 4),
    Flag("--cuda-graph-backend-prefill", "cuda_graph_backend_prefill", None, None, "str", None, 5),
    Flag("--disable-cuda-graph", "disable_cuda_graph", False, None, None,
         "DeprecatedStoreTrueAction", 6,
         deprecated_for=("--cuda-graph-backend-decode=disabled",
                         "--cuda-graph-backend-prefill=disabled")),
    Flag("--disable-piecewise-cuda-graph", "cuda_graph_backend_prefill", None, None, None,
         "DeprecatedStoreConstAction", 7,
         deprecated_for=("--cuda-graph-backend-prefill=disabled",), const="disabled"),
    Flag("--cuda-graph-bs", "cuda_graph_bs", None, None, "int", None, 8, nargs="+"),
)  # fmt: skip


def test_parse_defaults_forms_and_unknown() -> None:
    v = parse_launch(
        FLAGS,
        ["--tensor-parallel-size=8", "--elastic-ep-backend", "mooncake", "--enable-eplb",
         "--cuda-graph-bs", "1", "2", "--bogus", "x", "--tp", "4"],
    )  # fmt: skip
    assert v["tp_size"] == 4  # unique prefix (argparse allow_abbrev), last wins
    assert v["elastic_ep_backend"] == "mooncake"
    assert v["enable_eplb"] is True
    assert v["cuda_graph_bs"] == [1, 2]
    assert v["cuda_graph_backend_decode"] is None
    assert v["__unknown__"] == ["--bogus", "x"]


def test_bad_choice_names_flag_and_allowed_values() -> None:
    with pytest.raises(ValueError, match=r"--elastic-ep-backend.*'ucx'.*none, mooncake, nixl"):
        parse_launch(FLAGS, ["--elastic-ep-backend", "ucx"])
    with pytest.raises(ValueError, match="--tp-size"):
        parse_launch(FLAGS, ["--tp-size", "eight"])


def test_deprecated_precedence() -> None:
    v = parse_launch(FLAGS, ["--disable-cuda-graph"])
    assert (v["cuda_graph_backend_decode"], v["cuda_graph_backend_prefill"]) == (
        "disabled",
        "disabled",
    )
    assert v["disable_cuda_graph"] is True
    notes = v["__deprecated__"]
    assert isinstance(notes, list)
    assert "--disable-cuda-graph -> --cuda-graph-backend-decode=disabled" in notes
    # an explicit new flag wins over the own-dest deprecated alias, before or after it
    for argv in (
        ["--disable-cuda-graph", "--cuda-graph-backend-prefill", "breakable"],
        ["--cuda-graph-backend-prefill", "breakable", "--disable-cuda-graph"],
    ):
        v = parse_launch(FLAGS, argv)
        assert v["cuda_graph_backend_prefill"] == "breakable"
        assert v["cuda_graph_backend_decode"] == "disabled"
    # a shared-dest alias is plain argparse: last one wins
    v = parse_launch(
        FLAGS, ["--cuda-graph-backend-prefill", "full", "--disable-piecewise-cuda-graph"]
    )
    assert v["cuda_graph_backend_prefill"] == "disabled"


# ---------------------------------------------------------------------------
# crafted rules
# ---------------------------------------------------------------------------

CRAFTED = """
class ServerArgs:
    pp_size: A[int, "PP"] = 1
    elastic_ep_backend: A[Optional[str], Arg(help="b", choices=["mooncake", "nixl"])] = None
    enable_eplb: A[bool, "eplb"] = False
    eplb_algorithm: A[str, "alg"] = "auto"

    def _handle_elastic_ep(self):
        if self.elastic_ep_backend is not None:
            if self.enable_eplb:
                if self.eplb_algorithm == "auto":
                    self.eplb_algorithm = "elasticity_aware"
                assert self.eplb_algorithm in ["elasticity_aware"], "alg"
            assert self.pp_size == 1, f"PP size must be 1 (got {self.pp_size}, {self._x()})"
            assert self._resolved().ep_size > 1, "resolved"
"""


def _by_msg(verdicts: list[Verdict]) -> dict[str, Verdict]:
    return {v.rule.message.split(" ")[0]: v for v in verdicts}


def test_check_on_crafted_source() -> None:
    flags, rules, _ = extract(CRAFTED, path="crafted/server_args.py")
    argv = ["--elastic-ep-backend", "mooncake", "--pp-size", "2", "--enable-eplb"]
    v = _by_msg(check(rules, flags, argv))
    pp = v["PP"]
    assert pp.status == "violated"
    assert pp.message == "PP size must be 1 (got 2, {self._x()})"
    assert pp.flags == ("--pp-size", "--elastic-ep-backend")
    assert pp.evidence.startswith("crafted/server_args.py:")
    # the in-method rewrite auto -> elasticity_aware is applied before the assert
    assert v["alg"].status == "ok"
    bad = check(rules, flags, [*argv, "--eplb-algorithm", "deepseek"])
    assert _by_msg(bad)["alg"].status == "violated"
    # reads the resolved view: reported, never guessed
    assert v["resolved"].status == "not checked"
    assert "computed value" in v["resolved"].why
    # guard false -> ok
    off = _by_msg(check(rules, flags, ["--pp-size", "2"]))
    assert off["PP"].status == "ok" and off["PP"].why == "guard is false"


def test_check_bad_choice_is_an_error() -> None:
    flags, rules, _ = extract(CRAFTED)
    with pytest.raises(ValueError, match="--elastic-ep-backend"):
        check(rules, flags, ["--elastic-ep-backend", "ucx"])


# ---------------------------------------------------------------------------
# seed cases on real releases: 0.5.18 has the scale-up rules, 0.5.14 does not
# ---------------------------------------------------------------------------


def _release(version: str) -> tuple[tuple[Flag, ...], tuple[Rule, ...]]:
    """The release's flags and elastic-EP rules (a ``wheels`` test: real wheels)."""
    flags, rules = real_args(version)
    return flags, elastic_rules(rules, flags)


SCALE_UP = (
    "--model-path m --elastic-ep-backend mooncake --max-ep-size 16 --tp-size 8 --dp-size 8 "
    "--enable-dp-attention --enable-dp-lm-head --moe-a2a-backend nixl "
    "--load-balance-method round_robin"
).split()
CUDA_OFF = "--cuda-graph-backend-decode disabled --cuda-graph-backend-prefill disabled".split()
JOINER = "--elastic-ep-join-mode scale --elastic-ep-join-rank-offset 8 --elastic-ep-initial-size 8"


def _violations(version: str, argv: list[str]) -> list[Verdict]:
    flags, rules = _release(version)
    return [v for v in check(rules, flags, argv) if v.status == "violated"]


@pytest.mark.wheels
def test_seed_scale_up_missing_both_cuda_graph_flags() -> None:
    bad = _violations("0.5.18", SCALE_UP)
    assert [v.message for v in bad] == [
        "Elastic EP runtime scale-up requires decode and prefill CUDA graphs to be disabled."
    ]
    assert bad[0].evidence.startswith("sglang/srt/server_args.py:")
    assert {"--cuda-graph-backend-decode", "--cuda-graph-backend-prefill"} <= set(bad[0].flags)
    assert _violations("0.5.18", SCALE_UP + CUDA_OFF) == []
    assert _violations("0.5.14", SCALE_UP) == []  # no such rule in 0.5.14


@pytest.mark.wheels
def test_seed_only_disable_cuda_graph() -> None:
    # the deprecated flag alone disables both phases ...
    assert _violations("0.5.18", [*SCALE_UP, "--disable-cuda-graph"]) == []
    # ... but a later tuning flag silently undoes it for one phase
    undone = [*SCALE_UP, "--disable-cuda-graph", "--cuda-graph-backend-prefill", "breakable"]
    assert [v.message for v in _violations("0.5.18", undone)] == [
        "Elastic EP runtime scale-up requires decode and prefill CUDA graphs to be disabled."
    ]
    assert _violations("0.5.14", undone) == []


@pytest.mark.wheels
def test_seed_joiner_without_node_rank() -> None:
    argv = SCALE_UP + CUDA_OFF + JOINER.split()
    bad = _violations("0.5.18", argv)
    assert [v.message for v in bad] == [
        "Elastic EP scale-up requires one joining TP group at --node-rank 1 (got 0)."
    ]
    assert bad[0].flags == ("--node-rank", "--elastic-ep-join-mode")
    assert _violations("0.5.18", [*argv, "--node-rank", "1"]) == []
    # 0.5.14 has no join mode at all: the flags are unknown there and nothing fires
    flags, _ = _release("0.5.14")
    unknown = parse_launch(flags, argv)["__unknown__"]
    assert isinstance(unknown, list) and "--elastic-ep-join-mode" in unknown
    assert _violations("0.5.14", argv) == []


@pytest.mark.wheels
def test_real_resolved_view_rules_are_not_checked() -> None:
    flags, rules = _release("0.5.18")
    verdicts = check(rules, flags, SCALE_UP + CUDA_OFF)
    dp = [v for v in verdicts if "--enable-dp-attention;" in v.rule.message]
    assert len(dp) == 1 and dp[0].status == "not checked"
    assert "_resolved()" in dp[0].why


def test_cuda_graph_default_is_the_release_constant_when_it_declares_one() -> None:
    src = """
class ServerArgs:
    cuda_graph_backend_decode: A[Optional[str], "decode"] = None
    cuda_graph_backend_prefill: A[Optional[str], "prefill"] = None
    elastic_ep_backend: A[Optional[str], "b"] = None

    def _handle_elastic_ep(self):
        if self.elastic_ep_backend is not None:
            assert self.cuda_graph_config.decode.backend in (Backend.FULL, Backend.DISABLED), "D"
            assert self.cuda_graph_config.prefill.backend == Backend.DISABLED, "P"
"""
    flags, rules, _ = extract(src)
    argv = ["--elastic-ep-backend", "mooncake"]
    declared = {"CudaGraphConfig.decode.backend": "full"}
    v = _by_msg(check(rules, flags, argv, constants=declared))
    assert v["D"].status == "ok"  # decode defaults to full, which the rule allows
    assert v["P"].status == "violated"  # prefill's default is computed, never "disabled"
    # without the declared default the decode default is unknown and not "full"
    assert _by_msg(check(rules, flags, argv))["D"].status == "violated"
    fixed = [*argv, "--cuda-graph-backend-prefill", "disabled"]
    assert all(x.status == "ok" for x in check(rules, flags, fixed, constants=declared))


def test_deprecated_alias_that_copies_another_options_value() -> None:
    """0.5.20+: ``--enable-dp-attention`` stands for ``--attn-dp-size <dp-size>``."""
    flags = (
        Flag("--dp-size", "dp_size", 1, None, "int", None, 1),
        Flag("--attn-dp-size", "attn_dp_size", 1, None, "int", None, 2),
        Flag("--enable-dp-attention", "enable_dp_attention", False, None, None,
             "DeprecatedStoreTrueAction", 3, deprecated_for=("--attn-dp-size <dp-size>",)),
    )
    v = parse_launch(flags, ["--dp-size", "8", "--enable-dp-attention"])
    assert v["attn_dp_size"] == 8
    assert v["__deprecated__"] == ["--enable-dp-attention -> --attn-dp-size <dp-size>"]
    assert parse_launch(flags, ["--dp-size", "8"])["attn_dp_size"] == 1  # control
    explicit = parse_launch(flags, ["--dp-size", "8", "--enable-dp-attention",
                                    "--attn-dp-size", "2"])
    assert explicit["attn_dp_size"] == 2  # the explicit new flag wins


def test_options_the_release_does_not_accept_and_abbreviations() -> None:
    """With every option string the release accepts (the KB records them), an option it
    does not know is told apart from one the KB simply does not keep, and abbreviations
    resolve as argparse's would."""
    from moonpin.resolver.args.rules import UNRECOGNIZED

    flags = (Flag("--dp-size", "dp_size", 1, None, "int", None, 1),)
    accepted = {"-h", "--help", "--dp-size", "--dp-lm-head", "--model-path", "--tp-size"}
    v = parse_launch(flags, ["--model-path", "m", "--attn-dp-size", "8", "--tp", "2"],
                     accepted)
    assert v[UNRECOGNIZED] == ["--attn-dp-size"]  # --model-path: known, only not kept
    assert v["dp_size"] == 1
    assert parse_launch(flags, ["--dp-s", "4"], accepted)["dp_size"] == 4  # unique prefix
    with pytest.raises(ValueError, match="ambiguous option: --dp could match --dp-lm-head, "
                                         "--dp-size"):
        parse_launch(flags, ["--dp", "4"], accepted)
    # control: without the accepted list nothing can be called unrecognized
    assert parse_launch(flags, ["--attn-dp-size", "8"])[UNRECOGNIZED] == []


def test_messages_keep_the_repr_conversions_sglang_uses() -> None:
    src = """
class ServerArgs:
    decode: A[str, "d"] = "full"

    def _handle_elastic_ep(self):
        assert self.decode in ("full", "disabled"), f"decode backend (got {self.decode!r})"
"""
    flags, rules, _ = extract(src)
    assert rules[0].message == "decode backend (got {self.decode!r})"
    (v,) = check(rules, flags, ["--decode", "breakable"])
    assert v.status == "violated" and v.message == "decode backend (got 'breakable')"


def test_an_int_past_the_decimal_limit_is_said_in_hex() -> None:
    """A hex literal of 5,000 digits in a release's source parses; its decimal repr raises
    ValueError: the comparison it cannot make and the message holding it say it in hex."""
    big = "0x" + "f" * 5000
    said = "0xffffffffffffffff… (an int of 20000 bits)"
    with pytest.raises(Unevaluable, match=re.escape(f"and {said}: ")):
        evaluate(f"self.mode < {big}", {"mode": "scale"})
    src = f"""
class ServerArgs:
    decode: A[str, "d"] = "full"

    def _handle_elastic_ep(self):
        assert self.decode in ("full", "disabled"), f"decode backend (limit {{{big}}})"
"""
    flags, rules, _ = extract(src)
    (v,) = check(rules, flags, ["--decode", "breakable"])
    assert v.status == "violated" and v.message == f"decode backend (limit {said})"


# ------------------------------------------------------------ the `args` command's library


def test_launch_check_gathers_judges_and_reports(tmp_path: Path) -> None:
    """``moonpin args`` as a library call (moonpin.resolver.args.lines): no CLI, same report."""
    from moonpin.kb import store
    from moonpin.kb.errors import UsageError
    from moonpin.resolver.args import lines as launch_check
    from moonpin.resolver.graph import CompatGraph

    g = CompatGraph(store.load(Path(__file__).resolve().parents[2] / "data" / "kb.json"))
    script = tmp_path / "serve.sh"
    script.write_text("#!/bin/sh\npython -m sglang.launch_server --model-path m "
                      "--elastic-ep-backend mooncake --pp-size 2\n", encoding="utf-8")
    launches, findings = launch_check.gather([str(script)], "auto", ["--", "--tp", "2"])
    assert [la.where.split(":")[0] for la in launches] == [str(script), "command line"]
    report = launch_check.check_launches(g, launches, findings, sglang="0.5.18",
                                         many=True)
    doc = report.to_json()
    assert list(doc) == ["sglang", "violations", "not_checked", "rules", "findings",
                         "unrecognized", "launches"]
    assert doc["sglang"] == "0.5.18" and len(doc["launches"]) == 2
    assert {v["where"].split(":")[0] for v in doc["violations"]} == {str(script)}
    assert any("--pp-size" in v["flags"] for v in doc["violations"])
    assert report.exit_code() == 1
    text = report.lines()
    assert text[0].startswith(f"{script}:2  (") and any("violated:" in t for t in text)
    ok = launch_check.check_launches(g, launches[1:], sglang="0.5.18")
    assert ok.exit_code() == 0 and not ok.lines()[0].startswith("command line  (")
    with pytest.raises(UsageError, match="which SGLang release runs this launch"):
        launch_check.check_launches(g, launches)  # no --sglang, no image to tell
    with pytest.raises(UsageError, match="no SGLang launch line"):
        empty = tmp_path / "empty.sh"
        empty.write_text("#!/bin/sh\necho hi\n", encoding="utf-8")
        launch_check.gather([str(empty)], "auto", [])


def test_launch_check_from_a_kb_file_reads_the_graph_only_when_needed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Given the KB file, a release whose launch table holds its rules is judged from
    that table alone; a version the table does not spell (``v0.5.18``) is read through the
    graph, and judged the same."""
    from moonpin.resolver.args import lines as launch_check
    from moonpin.resolver.graph import CompatGraph

    kb_file = Path(__file__).resolve().parents[2] / "data" / "kb.json"
    launches, _ = launch_check.gather([], "auto", ["--", "--elastic-ep-backend", "mooncake",
                                                   "--pp-size", "2"])
    made: list[object] = []
    real = CompatGraph.from_path

    def counting(path: object = None) -> CompatGraph:
        made.append(path)
        return real(path)  # type: ignore[arg-type]

    monkeypatch.setattr(CompatGraph, "from_path", staticmethod(counting))
    table = launch_check.check_launches(kb_file, launches, sglang="0.5.18").to_json()
    assert made == []
    spelled = launch_check.check_launches(kb_file, launches, sglang="v0.5.18").to_json()
    assert made == [str(kb_file)]
    assert table == spelled and table["sglang"] == "0.5.18" and table["violations"]


def test_a_file_of_many_launches_reads_the_rules_once(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by the args-files fuzz: a shell script of 5,000 launch lines read and validated
    the release's launch table for each line (~9 ms a line: no answer in 60 s). The rules
    are read once per release, the conditions parsed once; the verdicts are the same."""
    from moonpin.resolver.args import lines as launch_check

    kb_file = Path(__file__).resolve().parents[2] / "data" / "kb.json"
    line = ("python -m sglang.launch_server --model-path m --tp-size 2 "
            "--elastic-ep-backend mooncake --enable-eplb\n")
    one, many = tmp_path / "one.sh", tmp_path / "many.sh"
    one.write_text(line)
    many.write_text(line * 200)
    calls: list[str] = []
    real = launch_check._release_rules

    def counting(graph: object, kb_path: object, version: str) -> object:
        calls.append(version)
        return real(graph, kb_path, version)  # type: ignore[arg-type]

    monkeypatch.setattr(launch_check, "_release_rules", counting)
    report = launch_check.check_launches(kb_file, launch_check.gather([str(many)], "auto",
                                                                      ())[0], sglang="0.5.18")
    assert calls == ["0.5.18"] and len(report.results) == 200
    single = launch_check.check_launches(kb_file, launch_check.gather([str(one)], "auto",
                                                                      ())[0], sglang="0.5.18")
    assert {r.verdicts for r in report.results} == {single.results[0].verdicts}
