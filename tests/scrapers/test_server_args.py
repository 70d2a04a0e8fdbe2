"""Scraping flags and rules from SGLang ``server_args.py`` (crafted and real sources)."""

from __future__ import annotations

import pytest

from scrapers.server_args import Flag, Rule, elastic_rules, extract
from tests.lib.sglang_src import real_args

CRAFTED = """
import argparse
from sglang.srt.arg_groups.arg_utils import A, Arg

CHOICES = ["mooncake", "nixl"]
MORE = ["none"] + CHOICES


class ServerArgs:
    node_rank: A[int, "The node rank."] = 0
    pp_size: A[int, Arg(help="PP.", aliases=["--pipeline-parallel-size"])] = 1
    elastic_ep_backend: A[Optional[Literal["mooncake", "nixl"]], "Backend."] = None
    ep_join_mode: A[
        Optional[Literal["scale", "recover"]],
        Arg(help="Join mode.", cli_name="--elastic-ep-join-mode"),
    ] = None
    enable_eplb: A[bool, "EPLB."] = False
    cuda_graph_bs: A[Optional[List[int]], "bs"] = None
    elastic_ep_rejoin: A[bool, "[Deprecated] Alias for --elastic-ep-join-mode recover."] = False
    disable_cuda_graph: A[bool, Arg(no_cli=True)] = False
    internal: int = 3
    load_balance_method: str = "auto"

    def _handle_elastic_ep(self):
        if self.elastic_ep_backend is not None:
            assert self.pp_size == 1, "PP size should be 1"
            if self.ep_join_mode == "scale":
                assert self.node_rank == 1, f"needs --node-rank 1 (got {self.node_rank})"
            else:
                if self.enable_eplb:
                    raise ValueError("eplb unsupported for " + "recover")
        active = self.elastic_ep_backend is not None and self.pp_size > 0
        if active:
            assert not self.enable_eplb, "no eplb"
        if self.load_balance_method == "auto":
            self.load_balance_method = "round_robin"
        assert self.load_balance_method in ("round_robin",), "lb"

    def _other(self):
        if self.internal > 2:
            raise ValueError(f"bad internal {self.internal}")
        try:
            pass
        except Exception:
            raise

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser):
        parser.add_argument(
            "--load-balance-method",
            type=str,
            default=ServerArgs.load_balance_method,
            choices=MORE,
        )
        parser.add_argument(
            "--disable-cuda-graph",
            action=DeprecatedStoreTrueAction,
            new_flag="--cuda-graph-backend-{decode,prefill}=disabled",
            help="Deprecated.",
        )
        parser.add_argument(
            "--disable-piecewise-cuda-graph",
            action=DeprecatedStoreConstAction,
            dest="cuda_graph_backend_prefill",
            const_value=Backend.DISABLED,
            new_flag="--cuda-graph-backend-prefill=disabled",
        )
"""


def _flags(flags: tuple[Flag, ...]) -> dict[str, Flag]:
    return {f.name: f for f in flags}


def _rule(rules: tuple[Rule, ...], message_start: str) -> Rule:
    hits = [r for r in rules if r.message.startswith(message_start)]
    assert len(hits) == 1, (message_start, [r.message for r in rules])
    return hits[0]


def test_parse_error_is_reported() -> None:
    flags, rules, err = extract("def (:\n", path="x/server_args.py")
    assert flags == () and rules == ()
    assert err is not None and err.startswith("x/server_args.py: SyntaxError")


def test_annotated_fields_become_flags() -> None:
    flags, _, err = extract(CRAFTED)
    assert err is None
    f = _flags(flags)
    assert f["--node-rank"] == Flag("--node-rank", "node_rank", 0, None, "int", None, 10)
    assert f["--pp-size"].aliases == ("--pipeline-parallel-size",)
    assert f["--elastic-ep-backend"].choices == ("mooncake", "nixl")
    assert f["--elastic-ep-backend"].default is None
    join = f["--elastic-ep-join-mode"]
    assert (join.dest, join.choices, join.type) == ("ep_join_mode", ("scale", "recover"), "str")
    assert f["--enable-eplb"].action == "store_true" and f["--enable-eplb"].default is False
    assert (f["--cuda-graph-bs"].nargs, f["--cuda-graph-bs"].type) == ("+", "int")
    # no_cli fields and plain annotations are not flags
    assert "--internal" not in f
    assert [x.dest for x in flags].count("disable_cuda_graph") == 1  # only add_argument


def test_deprecated_aliases_from_help_and_new_flag() -> None:
    flags, _, _ = extract(CRAFTED, constants={"Backend.DISABLED": "disabled"})
    f = _flags(flags)
    assert f["--elastic-ep-rejoin"].deprecated_for == ("--elastic-ep-join-mode=recover",)
    assert f["--disable-cuda-graph"].deprecated_for == (
        "--cuda-graph-backend-decode=disabled",
        "--cuda-graph-backend-prefill=disabled",
    )
    pw = f["--disable-piecewise-cuda-graph"]
    assert (pw.dest, pw.const, pw.action) == (
        "cuda_graph_backend_prefill",
        "disabled",
        "DeprecatedStoreConstAction",
    )
    lb = f["--load-balance-method"]
    assert lb.default == "auto" and lb.choices == ("none", "mooncake", "nixl")
    # without the constants the const is not a literal
    assert _flags(extract(CRAFTED)[0])["--disable-piecewise-cuda-graph"].const == "<expr>"


def test_assert_and_guards() -> None:
    _, rules, _ = extract(CRAFTED)
    pp = _rule(rules, "PP size")
    assert pp.kind == "assert" and pp.condition == "self.pp_size != 1"
    assert pp.guard == "self.elastic_ep_backend is not None"
    assert pp.reads == ("pp_size", "elastic_ep_backend")
    assert pp.function == "_handle_elastic_ep"
    nr = _rule(rules, "needs --node-rank")
    assert nr.condition == "self.node_rank != 1"
    assert nr.guard == "self.elastic_ep_backend is not None and self.ep_join_mode == 'scale'"
    assert nr.message == "needs --node-rank 1 (got {self.node_rank})"


def test_raise_in_else_branch_and_concatenated_message() -> None:
    _, rules, _ = extract(CRAFTED)
    r = _rule(rules, "eplb unsupported")
    assert r.kind == "raise" and r.condition == "self.enable_eplb"
    assert r.guard == "self.elastic_ep_backend is not None and self.ep_join_mode != 'scale'"
    assert r.message == "eplb unsupported for recover"
    other = _rule(rules, "bad internal")
    assert other.condition == "self.internal > 2" and other.guard is None
    assert other.message == "bad internal {self.internal}"
    # bare re-raise is not a rule
    assert all(r.function != "_other" or r.message for r in rules)


def test_locals_inlined_and_writes_recorded() -> None:
    _, rules, _ = extract(CRAFTED)
    r = _rule(rules, "no eplb")
    assert r.guard == "self.elastic_ep_backend is not None and self.pp_size > 0"
    assert "elastic_ep_backend" in r.reads
    lb = _rule(rules, "lb")
    assert [(w.attr, w.value, w.guard) for w in lb.writes] == [
        ("load_balance_method", "'round_robin'", "self.load_balance_method == 'auto'")
    ]


def test_elastic_selection() -> None:
    flags, rules, _ = extract(CRAFTED)
    chosen = {r.message for r in elastic_rules(rules, flags)}
    assert "bad internal {self.internal}" not in chosen
    assert {"PP size should be 1", "no eplb", "lb"} <= chosen


# ---------------------------------------------------------------------------
# real releases
# ---------------------------------------------------------------------------


_real = real_args


def _need(version: str) -> tuple[tuple[Flag, ...], tuple[Rule, ...]]:
    got = _real(version)
    if got is None:
        pytest.skip(f"sglang {version} wheel not in /tmp/sgl")
    return got


def test_real_0_5_18_elastic_rules() -> None:
    flags, rules = _need("0.5.18")
    el = elastic_rules(rules, flags)
    print(f"0.5.18: {len(flags)} flags, {len(rules)} rules, {len(el)} elastic")
    assert len(el) >= 40
    by = {(r.function, r.condition) for r in el}
    assert ("_handle_elastic_ep", "self.pp_size != 1") in by
    nr = next(r for r in el if r.condition == "self.node_rank != 1")
    assert nr.guard == "self.ep_join_mode is not None and self.ep_join_mode == 'scale'"
    assert nr.message.endswith("--node-rank 1 (got {self.node_rank}).")
    cg = next(r for r in el if "graphs to be disabled" in r.message)
    assert "cuda_graph_config.decode.backend == Backend.DISABLED" in cg.condition
    assert "self.max_ep_size > self.tp_size" in (cg.guard or "")
    f = _flags(flags)
    assert f["--elastic-ep-backend"].choices == ("none", "mooncake", "nixl")
    assert f["--elastic-ep-join-mode"].dest == "ep_join_mode"
    assert f["--disable-piecewise-cuda-graph"].const == "disabled"
    assert f["--disable-cuda-graph"].deprecated_for == (
        "--cuda-graph-backend-decode=disabled",
        "--cuda-graph-backend-prefill=disabled",
    )


def test_real_0_5_14_has_fewer_elastic_rules() -> None:
    flags, rules = _need("0.5.14")
    el = elastic_rules(rules, flags)
    print(f"0.5.14: {len(flags)} flags, {len(rules)} rules, {len(el)} elastic")
    assert 10 <= len(el) < 40
    pp = [
        r for r in el if r.function == "_handle_elastic_ep" and r.condition == "self.pp_size != 1"
    ]
    assert [r.guard for r in pp] == ["self.elastic_ep_backend is not None"]
    assert not any(r.condition == "self.node_rank != 1" for r in el)
    assert "--elastic-ep-join-mode" not in _flags(flags)
    assert "--elastic-ep-rejoin" in _flags(flags)
