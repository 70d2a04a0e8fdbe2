"""The facts :mod:`moonpin.readers.pyast.usage` records about SGLang sources, and the constants
they are judged by: which mooncake modules and torch.distributed callables matter, the fact types
(:class:`ImportFact`, :class:`CallFact`, :class:`BackendLiteral`, :class:`FileAnalysis`)
and the feature a fact belongs to (:func:`classify_feature`, from the file's path, the
enclosing function and the module imported).

Plain data and pure functions, no ``ast``: the walker (:mod:`moonpin.readers.pyast.walk`) and
:func:`moonpin.readers.pyast.usage.analyze_source` build on them;
:mod:`moonpin.readers.pyast.usage` re-exports the public names. The rules the facts follow are
in :mod:`moonpin.readers.pyast.usage`'s docstring.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "FEATURES",
    "MOONCAKE_ROOT",
    "MOONCAKE_SUBMODULES",
    "PG_FUNCTIONS",
    "BackendLiteral",
    "CallFact",
    "FileAnalysis",
    "ImportFact",
    "classify_feature",
]


#: Every value :func:`classify_feature` can return.
FEATURES: tuple[str, ...] = (
    "elastic-ep",
    "moe-a2a",
    "pd-disaggregation",
    "hicache",
    "weight-transfer",
    "other",
)

#: Top-level modules/packages of the ``mooncake`` distribution (taken from the
#: mooncake-transfer-engine wheels), used to tell ``from mooncake import pg``
#: (a submodule) from ``from mooncake import BufferPool`` (a package name).
MOONCAKE_SUBMODULES: frozenset[str] = frozenset(
    {
        "_ep",
        "_fast_copy",
        "allocator",
        "async_store",
        "buffer_pool",
        "cli",
        "cli_bench",
        "cli_client",
        "dataproto_catalog",
        "engine",
        "ep",
        "fabric_allocator_utils",
        "http_metadata_server",
        "mooncake_config",
        "mooncake_connector_v1",
        "mooncake_elastic_buffer",
        "mooncake_ep_buffer",
        "mooncake_store_service",
        "mooncake_vllm_adaptor",
        "nvlink_allocator",
        "pg",
        "reshard",
        "shared_segment",
        "spdk_tgt_create",
        "store",
        "structured_object_store",
        "transfer_engine",
        "transfer_engine_topology_dump",
        "vllm_v1_proxy_server",
    }
)

#: Last components of torch.distributed callables whose string arguments name
#: a process-group backend.
PG_FUNCTIONS: frozenset[str] = frozenset(
    {
        "Backend",
        "DeviceMesh",
        "ProcessGroup",
        "_new_process_group_helper",
        "init_device_mesh",
        "init_process_group",
        "is_backend_available",
        "new_group",
        "new_subgroups",
        "new_subgroups_by_enumeration",
        "register_backend",
    }
)

#: The package whose imports are recorded.
MOONCAKE_ROOT = "mooncake"


@dataclass(frozen=True)
class ImportFact:
    """One import of a mooncake module (see :mod:`moonpin.readers.pyast.usage` for the rules)."""

    module: str
    names: tuple[str, ...]
    alias: str | None
    path: str
    line: int
    function: str | None
    optional: bool
    alternatives: tuple[str, ...]
    feature: str
    dynamic: bool = False
    type_checking: bool = False
    guarded: bool = False
    probe: bool = False


@dataclass(frozen=True)
class CallFact:
    """A call of something imported from a mooncake module."""

    module: str
    name: str
    path: str
    line: int
    function: str | None
    positional: int
    keywords: tuple[str, ...]
    starred: bool


@dataclass(frozen=True)
class BackendLiteral:
    """A ``"mooncake"``/``"mooncake-cpu"`` literal naming a torch pg backend."""

    value: str
    path: str
    line: int
    function: str | None
    context: str
    subject: str | None = None
    feature: str = "other"


@dataclass(frozen=True)
class FileAnalysis:
    """Everything extracted from one source file."""

    path: str
    imports: tuple[ImportFact, ...]
    calls: tuple[CallFact, ...]
    backends: tuple[BackendLiteral, ...]
    error: str | None


# --------------------------------------------------------------------------
# Feature classification

# Ordered: the first rule that matches wins.  Path rules come first because
# SGLang's directory layout is the most reliable signal.
_PATH_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "weight-transfer",
        (
            "weight_sync",
            "weights_sync",
            "weight_transfer",
            "weight_transporter",
            "update_weight",
            "checkpoint_engine",
            "remote_instance",
            "/rl/",
        ),
    ),
    ("elastic-ep", ("elastic_ep", "/eplb/", "fault_toleran")),
    (
        "moe-a2a",
        ("token_dispatcher", "/moe/", "ep_buffer", "a2a", "moe_runner"),
    ),
    ("pd-disaggregation", ("disaggregation", "/disagg/", "kv_transfer")),
    ("hicache", ("mem_cache/", "hicache", "cache_controller", "mooncake_store")),
    # The torch process-group plumbing: only Mooncake's pg backend reaches it.
    ("elastic-ep", ("distributed/parallel_state", "distributed/bootstrap")),
)

# Matched against the lower-cased qualified function name with underscores
# removed, so "MooncakeEPBuffer.__init__" and "init_ep_buffer" both contain
# "epbuffer".
_FUNCTION_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "weight-transfer",
        (
            "updateweight",
            "weightsfrom",
            "remoteinstance",
            "weightsync",
            "weighttransfer",
            "checkpointengine",
            "sendweight",
            "recvweight",
        ),
    ),
    (
        "elastic-ep",
        (
            "elastic",
            "fault",
            "recoverrank",
            "joinprocessgroup",
            "joingroup",
            "peerstate",
            "inittorchdistributed",
            "initdistributedenvironment",
            "initprocessgroup",
            "processgroup",
        ),
    ),
    ("moe-a2a", ("epbuffer", "dispatcher", "a2a", "alltoall")),
    ("hicache", ("hicache", "storagebackend", "hoststorage")),
    ("pd-disaggregation", ("disagg", "kvsender", "kvreceiver", "kvmanager")),
)

# Modules that only PD disaggregation uses, wherever the import sits: SGLang
# imported the NVLink allocator from mem_cache/memory_pool.py ("for disagg
# with nvlink") before moving it to disaggregation/mooncake/utils.py.
_DISAGG_ONLY_MODULES = ("mooncake.allocator", "mooncake.nvlink_allocator")

# What a mooncake module is for, used when path and function are silent.
_MODULE_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("elastic-ep", ("mooncake.pg", "mooncake.ep", "mooncake._ep")),
    ("moe-a2a", ("mooncake.mooncake_ep_buffer", "mooncake.mooncake_elastic_buffer")),
    (
        "hicache",
        (
            "mooncake.store",
            "mooncake.async_store",
            "mooncake.mooncake_store_service",
            "mooncake.structured_object_store",
        ),
    ),
    ("weight-transfer", ("mooncake.reshard",)),
    (
        "pd-disaggregation",
        (
            "mooncake.engine",
            "mooncake.allocator",
            "mooncake.nvlink_allocator",
            "mooncake.transfer_engine",
        ),
    ),
)


def _module_matches(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def classify_feature(path: str, function: str | None, module: str | None = None) -> str:
    """Name the SGLang feature that reaches a location (one of :data:`FEATURES`).

    Rules, first match wins: ``mooncake.allocator`` (the NVLink/Barex
    custom memory pool) is always pd-disaggregation; SGLang path markers (``elastic_ep/``,
    ``layers/moe/token_dispatcher``, ``disaggregation/``, ``mem_cache/``,
    weight-sync / remote-instance paths, ``distributed/parallel_state``);
    then markers in the qualified *function* name (``init_torch_distributed``,
    ``remote_instance_*``, ``*EPBuffer*`` ...); then, when given, what the
    imported mooncake *module* is for (``mooncake.pg``/``mooncake.ep`` ->
    elastic-ep, ``mooncake.store`` -> hicache, ``mooncake.engine`` /
    ``mooncake.allocator`` -> pd-disaggregation, ...); otherwise ``"other"``.
    """
    if module and _module_matches(module, _DISAGG_ONLY_MODULES):
        return "pd-disaggregation"
    norm = "/" + path.replace("\\", "/").lower()
    for feature, markers in _PATH_RULES:
        if any(m in norm for m in markers):
            return feature
    if function:
        fnorm = function.lower().replace("_", "")
        for feature, markers in _FUNCTION_RULES:
            if any(m in fnorm for m in markers):
                return feature
    if module:
        for feature, prefixes in _MODULE_RULES:
            if _module_matches(module, prefixes):
                return feature
    return "other"


# --------------------------------------------------------------------------
# Helpers on syntax
