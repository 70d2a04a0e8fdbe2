"""Scraping flags and rules from SGLang ``server_args.py`` (crafted and real sources)."""

from __future__ import annotations

from typing import Any

import pytest

from moonpin.kb.launch import Flag, Rule
from moonpin.readers.launch.server_args import class_constants, elastic_rules, extract
from tests.lib.sglang_src import real_args, real_wheel

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


def _need(version: str) -> tuple[tuple[Flag, ...], tuple[Rule, ...]]:
    return real_args(version)


@pytest.mark.wheels
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


@pytest.mark.wheels
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


# ---------------------------------------------------------------------------
# the arg_groups layout (0.5.19 and later), crafted after 0.5.23
# ---------------------------------------------------------------------------

AG_CHOICES = """
LB_CHOICES = ["auto", "round_robin", "total_requests"]
SAMPLING_BACKEND_CHOICES = set(["flashinfer"])
"""

AG_FIELDS_EXEC = """
import argparse
from typing import List, Literal, Optional

import msgspec

from sglang.srt.arg_groups.arg_utils import A, Arg, Derived
from sglang.srt.model_executor.cuda_graph_config import Backend


class ExecMoe(msgspec.Struct):
    _NS_PATH = "exec.moe"

    enable_eplb: A[bool, "Enable EPLB algorithm"] = False
    eplb_algorithm: A[str, "Chosen EPLB algorithm"] = "auto"
    elastic_ep_backend: A[
        Literal[None, "mooncake", "nixl"],
        Arg(help="Elastic EP backend.", choices=["none", "mooncake", "nixl"]),
    ] = None
    ep_join_mode: A[
        Optional[Literal["scale", "recover"]],
        Arg(help="Join mode.", cli_name="--elastic-ep-join-mode", choices=["scale", "recover"]),
    ] = None
    elastic_ep_rejoin: A[bool, "[Deprecated] Alias for --elastic-ep-join-mode recover."] = False
    grpc_mode: A[bool, "Replaces the deprecated --old-grpc."] = False


class ExecGraph(msgspec.Struct):
    _NS_PATH = "exec.graph"

    cuda_graph_backend_decode: A[
        Optional[Literal["full", "breakable", "disabled"]],
        Arg(help="Decode backend.", choices=Backend.ALL, type_parser=parse_backend),
    ] = None
    cuda_graph_backend_prefill: A[
        Optional[Literal["full", "breakable", "disabled"]],
        Arg(help="Prefill backend.", choices=Backend.ALL, type_parser=parse_backend),
    ] = None
    disable_cuda_graph: A[bool, Arg(no_cli=True)] = False
    cuda_graph_bs_decode: A[Optional[List[int]], "Decode batch sizes."] = msgspec.field(
        default_factory=list
    )
    sampling_backend: A[Optional[str], Arg(no_cli=True)] = "flashinfer"
"""

AG_FIELDS_PARALLEL = """
import argparse
from typing import Optional

import msgspec

from sglang.srt.arg_groups.arg_utils import A, Arg, Derived
from sglang.srt.arg_groups.choices import LB_CHOICES


class Parallel(msgspec.Struct):
    _NS_PATH = "parallel"

    node_rank: A[int, "The node rank."] = 0
    tp_size: A[int, Arg(help="TP.", aliases=["--tensor-parallel-size"])] = 1
    pp_size: A[int, Arg(help="PP.", aliases=["--pipeline-parallel-size"])] = 1
    max_ep_size: A[Optional[int], "Max EP size."] = None
    ep_join_rank_offset: A[
        int, Arg(help="Join offset.", cli_name="--elastic-ep-join-rank-offset")
    ] = 0
    load_balance_method: A[str, Arg(help="LB.", choices=LB_CHOICES)] = "auto"
    dcp_replicate_q_proj: A[
        Optional[bool], Arg(help="Replicate Q.", action=argparse.BooleanOptionalAction)
    ] = None
    internal: int = 3
    attn_tp_size = Derived(fn="sglang.srt.runtime_context.attn_tp_size_of")
"""

AG_SERVER_ARGS = """
import argparse

from sglang.srt.arg_groups.arg_utils import add_cli_args_from_dataclass
from sglang.srt.arg_groups.choices import SAMPLING_BACKEND_CHOICES


class ServerArgs:
    def resolve_once(self) -> None:
        if resolving_view(self).ep_join_mode == "recover":
            raise ValueError("method rule on the recover path")

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser):
        add_cli_args_from_dataclass(parser, ServerArgs)
        parser.add_argument(
            "--sampling-backend",
            type=str,
            choices=SAMPLING_BACKEND_CHOICES,
            default=_declared_default("sampling_backend"),
        )
        parser.add_argument(
            "--disable-cuda-graph",
            action=DeprecatedStoreTrueAction,
            new_flag="--cuda-graph-backend-{decode,prefill}=disabled",
            help="Deprecated. Use --cuda-graph-backend-{decode,prefill}=disabled instead.",
        )
        parser.add_argument(
            "--enable-dp-attention",
            action=DeprecatedStoreTrueAction,
            new_flag="--attn-dp-size <dp-size>",
        )
"""

AG_PARALLEL_HOOK = """
from typing import Any

from sglang.srt.arg_groups.overrides import declare_resolution, resolved_view, resolving_view
from sglang.srt.model_executor.cuda_graph_config import Backend


def handle_elastic_ep(server_args: Any):
    cfg = resolving_view(server_args)
    if cfg.elastic_ep_backend is not None:
        if cfg.enable_eplb:
            if cfg.eplb_algorithm == "auto":
                declare_resolution(
                    server_args, "_handle_elastic_ep", eplb_algorithm="elasticity_aware"
                )
            assert cfg.eplb_algorithm in ["elasticity_aware"], "Elastic EP requires eplb"
        assert cfg.pp_size == 1, "PP size should be set to 1 under elastic EP"
    if cfg.ep_join_mode is not None:
        if cfg.ep_join_mode == "scale":
            assert cfg.node_rank == 1, (
                "Elastic EP scale-up requires --node-rank 1 " f"(got {cfg.node_rank})."
            )
            assert cfg.ep_join_rank_offset > 0, "scale joiners need a join rank offset"
    scaling_active = cfg.elastic_ep_backend is not None and cfg.max_ep_size is not None
    if scaling_active:
        resolved = resolved_view(server_args)
        try:
            if cfg.tp_size <= 0:
                raise ValueError("Invalid attention topology")
        except ValueError as exc:
            raise AssertionError(str(exc)) from exc
        assert resolved.ep_size == cfg.tp_size, "ep_size == tp_size"
        assert server_args.cuda_graph_config.prefill.backend == Backend.DISABLED, (
            "prefill CUDA graph must be disabled"
        )


def handle_other(server_args: Any):
    cfg = resolving_view(server_args)
    if cfg.internal > 2:
        raise ValueError("bad internal")


def validate_graphs(server_args: Any):
    cfg = resolving_view(server_args)
    assert cfg.pp_size >= 1, "pp before the early return"
    if cfg.cuda_graph_config is None:
        return
    assert cfg.cuda_graph_config.decode.backend != "x", "decode graph after the early return"


def _helper(cfg, model_type: str):
    if cfg.pp_size > 1:
        raise ValueError("helper without a server_args parameter")
"""

AG = "sglang/srt/arg_groups/"
AG_MEMBERS: dict[str, str] = {
    "sglang/srt/server_args.py": AG_SERVER_ARGS,
    AG + "choices.py": AG_CHOICES,
    AG + "fields/exec_.py": AG_FIELDS_EXEC,
    AG + "fields/parallel.py": AG_FIELDS_PARALLEL,
    AG + "parallel_hook.py": AG_PARALLEL_HOOK,
}
AG_CONSTANTS = {"Backend.ALL": ("full", "breakable", "disabled"), "Backend.DISABLED": "disabled"}


def _ag() -> tuple[dict[str, Flag], tuple[Rule, ...]]:
    from moonpin.readers.launch.server_args import extract_arg_groups

    flags, rules, err = extract_arg_groups(AG_MEMBERS, AG_CONSTANTS)
    assert err is None
    return _flags(flags), rules


def test_arg_groups_fields_become_flags_with_their_file() -> None:
    f, _ = _ag()
    nr = f["--node-rank"]
    assert (nr.dest, nr.default, nr.type) == ("node_rank", 0, "int")
    assert nr.path == AG + "fields/parallel.py"
    assert f["--pp-size"].aliases == ("--pipeline-parallel-size",)
    off = f["--elastic-ep-join-rank-offset"]
    assert (off.dest, off.default) == ("ep_join_rank_offset", 0)
    join = f["--elastic-ep-join-mode"]
    assert (join.dest, join.choices, join.path) == (
        "ep_join_mode", ("scale", "recover"), AG + "fields/exec_.py")
    assert f["--elastic-ep-backend"].choices == ("none", "mooncake", "nixl")
    # choices named from choices.py and from the Backend class constants
    assert f["--load-balance-method"].choices == ("auto", "round_robin", "total_requests")
    assert f["--cuda-graph-backend-decode"].choices == ("full", "breakable", "disabled")
    assert f["--cuda-graph-bs-decode"].default == () and f["--cuda-graph-bs-decode"].nargs == "+"
    assert f["--enable-eplb"].action == "store_true"
    # negative controls: no_cli fields, plain annotations and Derived values are no flags
    dests = {x.dest for x in f.values()}
    assert "internal" not in dests and "attn_tp_size" not in dests
    no_cli = [x.name for x in f.values() if x.dest == "disable_cuda_graph"]
    assert no_cli == ["--disable-cuda-graph"]  # the deprecated add_argument only


def test_arg_groups_boolean_optional_action_is_two_options() -> None:
    f, _ = _ag()
    yes, no = f["--dcp-replicate-q-proj"], f["--no-dcp-replicate-q-proj"]
    assert (yes.dest, yes.action, yes.default) == ("dcp_replicate_q_proj", "store_true", None)
    assert (no.dest, no.action, no.default) == ("dcp_replicate_q_proj", "store_false", None)
    # a plain bool stays one option
    assert "--no-enable-eplb" not in f


def test_arg_groups_deprecated_and_declared_defaults() -> None:
    f, _ = _ag()
    assert f["--elastic-ep-rejoin"].deprecated_for == ("--elastic-ep-join-mode=recover",)
    dis = f["--disable-cuda-graph"]
    assert dis.deprecated_for == (
        "--cuda-graph-backend-decode=disabled",
        "--cuda-graph-backend-prefill=disabled",
    )
    assert dis.path == "sglang/srt/server_args.py"
    assert f["--enable-dp-attention"].deprecated_for == ("--attn-dp-size <dp-size>",)
    sb = f["--sampling-backend"]
    assert sb.default == "flashinfer"  # _declared_default("sampling_backend")
    assert sb.choices is None  # set(...) is not a literal
    # negative control: help that only mentions a deprecated flag is no alias
    assert f["--grpc-mode"].deprecated_for == ()


def test_arg_groups_hook_rules_read_as_self() -> None:
    _, rules = _ag()
    nr = _rule(rules, "Elastic EP scale-up requires --node-rank 1")
    assert (nr.kind, nr.condition) == ("assert", "self.node_rank != 1")
    assert nr.guard == "self.ep_join_mode is not None and self.ep_join_mode == 'scale'"
    assert nr.message == "Elastic EP scale-up requires --node-rank 1 (got {self.node_rank})."
    assert (nr.function, nr.path) == ("handle_elastic_ep", AG + "parallel_hook.py")
    assert nr.line == AG_PARALLEL_HOOK.splitlines().index(
        "            assert cfg.node_rank == 1, (") + 1
    assert nr.reads == ("node_rank", "ep_join_mode")
    off = _rule(rules, "scale joiners need")
    assert off.condition == "self.ep_join_rank_offset <= 0"
    ep = _rule(rules, "ep_size == tp_size")
    assert ep.condition == "resolved_view(self).ep_size != self.tp_size"  # the resolved view
    assert set(ep.reads) >= {"ep_size", "tp_size", "elastic_ep_backend", "max_ep_size"}
    cg = _rule(rules, "prefill CUDA graph")
    assert cg.condition == "self.cuda_graph_config.prefill.backend != Backend.DISABLED"
    assert cg.guard == "self.elastic_ep_backend is not None and self.max_ep_size is not None"
    # ServerArgs methods are walked the same way (resolving_view(self) -> self)
    assert _rule(rules, "method rule").condition == "self.ep_join_mode == 'recover'"
    # negative control: a helper without a server_args parameter has no rules
    assert not [r for r in rules if r.message.startswith("helper")]


def test_arg_groups_declare_resolution_is_a_write() -> None:
    _, rules = _ag()
    r = _rule(rules, "Elastic EP requires eplb")
    assert [(w.attr, w.value, w.guard) for w in r.writes] == [(
        "eplb_algorithm",
        "'elasticity_aware'",
        "self.elastic_ep_backend is not None and self.enable_eplb and "
        "self.eplb_algorithm == 'auto'",
    )]
    # negative control: a rule that does not read eplb_algorithm carries no write
    assert _rule(rules, "PP size should").writes == ()


def test_arg_groups_except_handlers_and_early_returns() -> None:
    _, rules = _ag()
    topo = _rule(rules, "Invalid attention topology")
    assert (topo.kind, topo.condition) == ("raise", "self.tp_size <= 0")
    # the re-raise in the except handler is no rule of its own
    assert not [r for r in rules if r.message == "str(exc)"]
    after = _rule(rules, "decode graph after")
    assert after.guard == "self.cuda_graph_config is not None"
    # negative control: a rule before the early return is not guarded by it
    assert _rule(rules, "pp before").guard is None


def test_arg_groups_elastic_selection() -> None:
    from moonpin.readers.launch.server_args import extract_arg_groups

    flags, rules, _ = extract_arg_groups(AG_MEMBERS, AG_CONSTANTS)
    chosen = {r.message for r in elastic_rules(rules, flags)}
    assert "bad internal" not in chosen
    assert {"PP size should be set to 1 under elastic EP", "ep_size == tp_size"} <= chosen


def test_launch_members_per_layout() -> None:
    from moonpin.readers.launch.server_args import launch_members

    old = ["sglang/srt/server_args.py", "sglang/srt/model_executor/cuda_graph_config.py",
           AG + "arg_utils.py", AG + "speculative_hook.py", "sglang/x.py"]
    assert launch_members(old) == old[:2]
    new = [*old, AG + "parallel_hook.py", AG + "moe_hook.py", AG + "choices.py",
           AG + "fields/__init__.py", AG + "fields/parallel.py", AG + "fields/exec_.py",
           AG + "fields/README.md", AG + "model_overrides/qwen3_moe.py", AG + "lora_hook.py"]
    assert launch_members(new) == [
        "sglang/srt/server_args.py", "sglang/srt/model_executor/cuda_graph_config.py",
        AG + "parallel_hook.py", AG + "moe_hook.py", AG + "choices.py",
        AG + "fields/exec_.py", AG + "fields/parallel.py",
    ]
    assert launch_members([]) == []


def test_launch_record_from_reads_both_layouts() -> None:
    from moonpin.readers.launch.server_args import from_record, launch_record, launch_record_from
    from moonpin.resolver.args.rules import check

    old = launch_record_from({"sglang/srt/server_args.py": CRAFTED.encode()})
    assert old == launch_record(CRAFTED.encode(), None)
    assert old is not None and all(f.path is None for f in old.flags)
    cg = b"class Backend:\n    FULL = 'full'\n    DISABLED = 'disabled'\n"
    members = {k: v.encode() for k, v in AG_MEMBERS.items()}
    rec = launch_record_from({**members, "sglang/srt/model_executor/cuda_graph_config.py": cg})
    assert rec is not None and rec.error is None
    assert rec.member == AG + "parallel_hook.py"
    by = {f.name: f for f in rec.flags}
    assert by["--node-rank"].path == AG + "fields/parallel.py"
    assert by["--disable-cuda-graph"].path == "sglang/srt/server_args.py"
    # not read by any elastic rule, nor standing for an option that is
    assert "--dcp-replicate-q-proj" not in by and "--enable-dp-attention" not in by
    flags, rules, consts = from_record(rec)
    argv = ["--elastic-ep-backend", "mooncake", "--elastic-ep-join-mode", "scale", "--tp", "8"]
    bad = [v for v in check(rules, flags, argv, constants=consts) if v.status == "violated"]
    lines = AG_PARALLEL_HOOK.splitlines()
    node = lines.index("            assert cfg.node_rank == 1, (") + 1
    offset = lines.index('            assert cfg.ep_join_rank_offset > 0, "scale joiners need a '
                         'join rank offset"') + 1
    assert [(v.evidence, v.message) for v in bad] == [
        (f"{AG}parallel_hook.py:{node}", "Elastic EP scale-up requires --node-rank 1 (got 0)."),
        (f"{AG}parallel_hook.py:{offset}", "scale joiners need a join rank offset"),
    ]
    ok = ["--elastic-ep-backend", "mooncake", "--elastic-ep-join-mode", "scale", "--node-rank",
          "1", "--elastic-ep-join-rank-offset", "8"]
    assert not [v for v in check(rules, flags, ok, constants=consts) if v.status == "violated"]


def test_launch_record_from_reports_the_member_that_does_not_parse() -> None:
    from moonpin.readers.launch.server_args import launch_record_from

    members = {k: v.encode() for k, v in AG_MEMBERS.items()}
    members[AG + "fields/parallel.py"] = b"class (:\n"
    rec = launch_record_from(members)
    assert rec.member == AG + "fields/parallel.py"
    assert rec.error.startswith(AG + "fields/parallel.py: SyntaxError")
    assert rec.rules == ()


def test_from_record_reads_flags_without_path() -> None:
    from types import SimpleNamespace

    from moonpin.readers.launch.server_args import from_record

    f = SimpleNamespace(name="--pp-size", dest="pp_size", default="1", choices=None, type="int",
                        action=None, line=3, deprecated_for=(), nargs=None, const="null",
                        aliases=())
    flags, _, _ = from_record(SimpleNamespace(flags=[f], rules=[], constants={}))
    assert flags[0].path is None and flags[0].default == 1


# ---------------------------------------------------------------------------
# real releases of the arg_groups layout
# ---------------------------------------------------------------------------


def _real_record(version: str) -> object:
    import zipfile

    from moonpin.readers.launch.server_args import launch_members, launch_record_from

    with zipfile.ZipFile(real_wheel(version)) as z:
        members = {n: z.read(n) for n in launch_members(z.namelist())}
    rec = launch_record_from(members)
    assert rec is not None and rec.error is None
    return rec


@pytest.mark.wheels
def test_real_0_5_23_elastic_rules_from_arg_groups() -> None:
    rec: Any = _real_record("0.5.23")
    hook = "sglang/srt/arg_groups/parallel_hook.py"
    el = [r for r in rec.rules if r.function == "handle_elastic_ep"]
    print(f"0.5.23: {len(rec.flags)} flags, {len(rec.rules)} rules, {len(el)} in handle_elastic_ep")
    assert rec.member == hook and len(el) >= 40 and all(r.path == hook for r in el)
    by = {r.condition: r for r in el}
    scale = "self.ep_join_mode is not None and self.ep_join_mode == 'scale'"
    assert by["self.node_rank != 1"].guard == scale
    assert by["self.ep_join_rank_offset <= 0"].guard == scale
    pp = [r.guard for r in el if r.condition == "self.pp_size != 1"]
    assert pp[0] == "self.elastic_ep_backend is not None"  # and again for scale-up
    assert "self.max_ep_size > self.tp_size" in (pp[1] or "")
    # 0.5.21+: decode graphs may stay on (full) for scale-up, prefill graphs must be off
    decode = by["self.cuda_graph_config.decode.backend not in (Backend.DISABLED, Backend.FULL)"]
    prefill = by["self.cuda_graph_config.prefill.backend != Backend.DISABLED"]
    assert "self.max_ep_size > self.tp_size" in (decode.guard or "")
    assert prefill.guard == decode.guard
    assert any(r.function == "handle_eplb_and_dispatch" for r in rec.rules)
    f = {x.name: x for x in rec.flags}
    assert f["--node-rank"].path == "sglang/srt/arg_groups/fields/parallel.py"
    assert f["--elastic-ep-join-mode"].dest == "ep_join_mode"
    assert f["--elastic-ep-backend"].choices == ("none", "mooncake", "nixl")
    assert f["--disable-cuda-graph"].path == "sglang/srt/server_args.py"
    assert "--elastic-ep-rejoin" not in f  # removed in 0.5.21


@pytest.mark.wheels
def test_real_0_5_19_fields_in_server_args_rules_in_hooks() -> None:
    rec: Any = _real_record("0.5.19")
    f = {x.name: x for x in rec.flags}
    assert f["--node-rank"].path == "sglang/srt/server_args.py"
    assert f["--elastic-ep-rejoin"].deprecated_for == ("--elastic-ep-join-mode=recover",)
    cg = next(r for r in rec.rules if "graphs to be disabled" in r.message)
    assert cg.path == "sglang/srt/arg_groups/parallel_hook.py"
    assert "cuda_graph_config.decode.backend == Backend.DISABLED" in cg.condition


def test_class_constants_read_phase_defaults_of_dataclass_factories() -> None:
    src = """
class Backend:
    FULL = "full"
    DISABLED = "disabled"

class CudaGraphConfig:
    decode: PhaseConfig = field(default_factory=lambda: PhaseConfig(backend=Backend.FULL))
    prefill: PhaseConfig = field(
        default_factory=lambda: PhaseConfig(backend=default_prefill_backend()))
    other: int = 3
"""
    got = class_constants(src)
    assert got["CudaGraphConfig.decode.backend"] == "full"
    assert "CudaGraphConfig.prefill.backend" not in got  # computed: not a constant
    assert got["Backend.DISABLED"] == "disabled"


def test_early_return_guards_later_rules_and_except_handlers_are_not_rules() -> None:
    src = """
class ServerArgs:
    dwdp_size: A[int, "dwdp"] = 1
    pp_size: A[int, "pp"] = 1

    def _handle_dwdp(self):
        if self.dwdp_size <= 1:
            return
        assert self.pp_size == 1, "DWDP requires pp_size == 1"

    def _handle_other(self):
        try:
            import thing
        except ImportError:
            raise ValueError("thing missing")
        assert self.pp_size < 4, "pp below 4"
"""
    _, rules, err = extract(src)
    assert err is None
    by = {r.message: r for r in rules}
    assert by["DWDP requires pp_size == 1"].guard == "self.dwdp_size > 1"
    assert "thing missing" not in by
    assert by["pp below 4"].guard is None  # control: an ordinary rule is kept as it was


def test_option_names_cover_aliases_no_forms_and_help() -> None:
    from moonpin.readers.launch.server_args import option_names

    flags = (
        Flag("--tp-size", "tp_size", 1, None, "int", None, 1, aliases=("--tp",)),
        Flag("--lora-strict-loading", "lora_strict_loading", True, None, None,
             "argparse.BooleanOptionalAction", 2),
    )
    assert option_names(flags) == ("--help", "--lora-strict-loading", "--no-lora-strict-loading",
                                   "--tp", "--tp-size", "-h")


@pytest.mark.wheels
@pytest.mark.parametrize("version", ["0.5.18", "0.5.23"])
def test_option_names_of_real_releases(version: str) -> None:
    """Every option the real parser accepts (recorded from `ServerArgs.add_cli_args` of
    the installed release: 508 for 0.5.18, 561 for 0.5.23) is among the names read."""
    import zipfile

    from moonpin.readers.launch import server_args as sa

    z = zipfile.ZipFile(real_wheel(version))
    names = z.namelist()
    rec = sa.launch_record_from({n: z.read(n) for n in sa.launch_members(names) if n in names})
    got = set(rec.option_names)
    assert len(got) == {"0.5.18": 508, "0.5.23": 561}[version]
    assert {"--tp-size", "--elastic-ep-backend", "--help"} <= got
    assert ("--attn-dp-size" in got) == (version == "0.5.23")


def test_default_resolutions_join_the_rules_that_read_them() -> None:
    """0.5.18's _handle_load_balance_method settles "auto" before _handle_elastic_ep
    requires round_robin: the rule carries that write (a write without such a guard
    does not travel)."""
    from moonpin.readers.launch.server_args import default_resolutions, launch_record

    src = """
class ServerArgs:
    load_balance_method: A[str, "lb"] = "auto"
    disaggregation_mode: A[str, "pd"] = "null"
    elastic_ep_backend: A[Optional[str], "b"] = None
    tp_size: A[int, "tp"] = 1

    def _handle_load_balance_method(self):
        if self.load_balance_method == "auto":
            self.load_balance_method = (
                "follow_bootstrap_room" if self.disaggregation_mode == "prefill"
                else "round_robin")
            return
        self.tp_size = 8

    def _handle_elastic_ep(self):
        if self.elastic_ep_backend is not None:
            assert self.load_balance_method == "round_robin", "needs round_robin"
"""
    writes = default_resolutions(src, "s.py")
    assert [(w.attr, w.guard) for w in writes] == [
        ("load_balance_method", "self.load_balance_method == 'auto'")]
    rec = launch_record(src.encode(), None)
    (rule,) = rec.rules
    assert [w.attr for w in rule.writes] == ["load_balance_method"]


DISPATCH = "sglang/srt/layers/moe/token_dispatcher/"


@pytest.mark.parametrize(("backend", "member"), [
    ("nixl", DISPATCH + "nixl.py"),
    ("mori", DISPATCH + "moriep.py"),  # no mori.py: the first starting with it
    ("deepep", DISPATCH + "deepep.py"),  # exact before deepep_v2.py
    ("flashinfer", DISPATCH + "flashinfer.py"),  # exact before flashinfer_utils.py
    ("pplx", None),  # only in a sub-folder
    ("none", None), ("", None), ("../x", None), (".hidden", None),
])
def test_backend_member(backend: str, member: str | None) -> None:
    from moonpin.readers.launch.server_args import backend_member

    names = [DISPATCH + n for n in ("nixl.py", "moriep.py", "deepep.py", "deepep_v2.py",
                                    "flashinfer_utils.py", "flashinfer.py", "base.pyc")]
    names += [DISPATCH + "sub/pplx.py", "sglang/srt/other/pplx.py"]
    assert backend_member(names, backend) == member


def test_backend_imports_leave_out_sglang_and_the_standard_library() -> None:
    from moonpin.readers.launch.server_args import backend_imports

    src = (b"import os, json\nfrom sglang.srt import x\nimport torch.distributed as d\n"
           b"def f():\n    from nixl_ep import Buffer, topk_idx_t\n"
           b"    importlib.import_module('deep_ep')\n")
    assert backend_imports(src, "m.py") == [
        ("torch.distributed", (), 3), ("nixl_ep", ("Buffer", "topk_idx_t"), 5),
        ("deep_ep", (), 6)]
    assert backend_imports(b"def broken(:\n", "m.py") == []


def test_a_huge_hex_literal_in_a_rule_is_read_as_python_reads_it() -> None:
    """A 5,000-digit hex literal parses (Python's int-string limit is on decimal only): the
    rule's text spells it in hex; extract raised ValueError (ast.unparse writes decimal)."""
    big = "0x" + "f" * 5000
    src = ("class ServerArgs:\n    elastic_ep_backend: str = None\n"
           "    def __post_init__(self):\n"
           f"        assert self.tp_size != {big}, 'no'\n")
    compile(src, "server_args.py", "exec")  # Python reads it
    _, rules, error = extract(src, "server_args.py")
    assert error is None and len(rules) == 1
    assert rules[0].condition.startswith("self.tp_size == 0xfff"), rules[0].condition
