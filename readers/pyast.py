"""Static (``ast``-only) extraction of ``mooncake`` usage from Python sources.

moonpin records, for every SGLang release, which ``mooncake`` modules the
SGLang sources import, which names they call, and where the torch
process-group backend literals ``"mooncake"`` / ``"mooncake-cpu"`` appear.
Analysed code is never imported or executed: everything here works on the
syntax tree only, and every entry point is a pure function of its arguments.

Decisions (the contract callers rely on)
----------------------------------------

Import forms -> :class:`ImportFact`

* ``import mooncake.pg`` / ``import mooncake.pg as x``: module
  ``"mooncake.pg"``, ``names=()``, ``alias`` = ``"x"`` or ``None``.
* ``from mooncake.pg import a, b as c``: one fact, module ``"mooncake.pg"``,
  ``names=("a", "b")`` (original names, never the aliases).  ``alias`` is the
  ``as`` name only when exactly one name is imported, else ``None``.
* ``from mooncake import pg, engine as e, BufferPool``: one fact *per
  submodule* (``"mooncake.pg"`` and ``"mooncake.engine"``, ``names=()``,
  alias ``None`` / ``"e"``) plus one fact for module ``"mooncake"`` with the
  remaining names (``("BufferPool",)``).  A name counts as a submodule when it
  is a known module of the mooncake wheel (:data:`MOONCAKE_SUBMODULES`) or
  starts with ``mooncake_`` / ``pg_`` (the wheel's naming scheme for
  modules); anything else is a name of the ``mooncake`` package.
* Only absolute imports of ``mooncake`` or ``mooncake.*`` count; relative
  imports and look-alikes such as ``sglang...mooncake_store`` do not.
* ``importlib.import_module("mooncake.pg")``, ``import_module(...)``,
  ``__import__("mooncake.pg")`` with a literal string: ``dynamic=True``.
  ``importlib.util.find_spec("mooncake.engine")`` (an availability check
  that does not import the module) is recorded with ``dynamic=True``,
  ``probe=True`` and ``optional=True``.

Optional vs hard (``ImportFact.optional``)

An import is *optional* when SGLang keeps working if it fails:

* it sits in the ``body`` of a ``try`` (in the same function, or around the
  ``class`` statement / module code executing it) with a handler that catches
  the failure - bare ``except:``, ``ImportError``, ``ModuleNotFoundError``,
  ``Exception`` or ``BaseException`` (alone or in a tuple) - *and that
  handler does not always leave by raising*.  Falling back, ``pass``,
  ``return``, setting a flag, logging, ``continue`` all count as surviving;
* or it sits inside ``if TYPE_CHECKING:`` (never executed at runtime;
  additionally flagged ``type_checking=True``);
* or it is a ``find_spec`` probe.

A handler that always raises (``raise``, ``raise ImportError("install
mooncake ...") from e``, ``raise RuntimeError``, ``sys.exit(...)``, or an
``if``/``else`` whose branches all do so) only rewords the failure, so the
import stays *hard*; ``guarded=True`` still records that some ``try``
catching ``ImportError`` encloses it.  A ``try`` around a ``def`` does not
guard the function body (it runs later), so the search for enclosing
``try`` statements stops at ``def``/``lambda`` boundaries.  Imports inside
``except``/``else``/``finally`` blocks are not guarded by that ``try``.

Alternatives (``ImportFact.alternatives``)

For a ``try`` whose handlers catch import failures, imports in the ``body``
and imports in those handlers are alternatives of one another: each body
import lists the mooncake modules imported in the handlers and vice versa
(sorted, own module excluded).  Imports side by side in the same ``body``
are co-requirements, not alternatives.  Nested ``try`` statements
accumulate.

``function``

Qualified name of the innermost enclosing ``def`` or ``class``
(``"Cls.meth"``, ``"outer.inner"``; ``<locals>`` is left out); a class body
yields the class name; ``None`` at module level.

Calls -> :class:`CallFact`

Calls whose callee resolves, through lexical scoping of import bindings,
to something imported from mooncake: ``Opts(...)`` after ``from mooncake.pg
import MooncakeBackendOptions as Opts`` gives ``name="MooncakeBackendOptions"``;
``Buffer.get_hint(...)`` gives ``name="Buffer.get_hint"``; ``pg.f(...)`` after
``from mooncake import pg`` or ``mooncake.pg.f(...)`` after
``import mooncake.pg`` gives module ``"mooncake.pg"``, name ``"f"``.  Names
are resolved per scope (function scopes see enclosing functions and the
module, not class bodies, as Python does), flow-insensitively; a name that a
scope binds by other means (parameter, assignment, other import, ...) and not
by a mooncake import shadows outer bindings.  Values passed around as data
(``helper(mooncake_ep)``) are not followed.  ``positional`` counts plain
positional arguments (``*args`` items are not counted), ``keywords`` the
explicit keyword names in call order, ``starred`` is True when ``*x`` or
``**x`` appears.

Backend literals -> :class:`BackendLiteral`

Only exact string constants ``"mooncake"`` and ``"mooncake-cpu"``, and only
where they plausibly name a torch process-group backend.  ``context`` is:

* ``"pg-call"``: positional argument or ``backend=`` keyword of a call to a
  torch.distributed group API (:data:`PG_FUNCTIONS`, matched on the last
  component of the callee, e.g. ``torch.distributed.new_group``);
* ``"backend="``: ``backend=`` keyword of any other call (weaker: SGLang
  also passes ``backend="mooncake"`` to metrics and storage helpers);
* ``"compare"``: operand of ``==``/``!=``/``in``/``not in`` (directly or as
  an element of a tuple/list/set operand) whose other side is a name or
  attribute containing ``backend``;
* ``"assign"``: value assigned to a name or attribute containing
  ``backend``.

``register_backend`` counts as a pg call only as ``Backend.register_backend``
(SGLang's storage factories have their own ``register_backend("mooncake")``).
Outside ``pg-call``, literals at locations classified ``pd-disaggregation``
or ``hicache`` are dropped: there ``"mooncake"`` names the transfer/storage
backend.  For ``compare``/``assign`` names that clearly denote another kind of backend
(containing ``transfer``, ``storage``, ``store``, ``cache``, ``linker``,
``a2a``, ``attention``, ``dataset``, ``allocator``, ``sampling``,
``grammar``, ``lora``, ``load``) are skipped.  ``subject`` holds the dotted
callee / compared / assigned name so that callers can filter further;
``feature`` is :func:`classify_feature` of the location.

Errors

:func:`analyze_source` never raises for bad input: undecodable bytes, an
unknown coding cookie, syntax errors (including Python 2 only syntax), null
bytes and nesting too deep for the parser or the walker are reported in
``FileAnalysis.error`` (``"SyntaxError: invalid syntax (line 12)"``) with no
facts.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from readers.astname import dotted

__all__ = [
    "FEATURES",
    "MOONCAKE_SUBMODULES",
    "PG_FUNCTIONS",
    "PG_MODULES",
    "BackendLiteral",
    "CallFact",
    "FileAnalysis",
    "ImportFact",
    "PGNeeds",
    "analyze_source",
    "classify_feature",
    "dotted",
    "mentions_mooncake",
    "mentions_pg_module",
    "pg_needs",
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

_ROOT = "mooncake"
_BACKEND_VALUES = frozenset({"mooncake", "mooncake-cpu"})
_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})
_NON_PG_BACKEND_MARKERS = (
    "transfer",
    "storage",
    "store",
    "cache",
    "linker",
    "a2a",
    "attention",
    "dataset",
    "allocator",
    "sampling",
    "grammar",
    "lora",
    "load",
)
_NON_PG_FEATURES = frozenset({"pd-disaggregation", "hicache"})
_EXIT_CALLS = frozenset({"sys.exit", "exit", "quit", "os._exit", "os.abort"})
_IMPORT_MODULE_CALLS = frozenset(
    {"importlib.import_module", "import_module", "__import__", "importlib.__import__"}
)
# ast.TryStar (except*) only exists from Python 3.11 on; the project supports 3.10.
_TRY_TYPES: tuple[type[ast.stmt], ...] = tuple(
    t for t in (getattr(ast, "Try", None), getattr(ast, "TryStar", None)) if t is not None
)
_FIND_SPEC_CALLS = frozenset({"importlib.util.find_spec", "util.find_spec", "find_spec"})


@dataclass(frozen=True)
class ImportFact:
    """One import of a mooncake module (see the module docstring for rules)."""

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


def mentions_mooncake(data: bytes) -> bool:
    """Cheap prefilter: True when the raw bytes contain ``b"mooncake"``.

    Files for which this is False are skipped without parsing; the check is
    case-sensitive because Python module names are.
    """
    return b"mooncake" in data


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


def _is_mooncake(module: str | None) -> bool:
    return module is not None and (module == _ROOT or module.startswith(_ROOT + "."))


def _is_submodule_name(name: str) -> bool:
    return name in MOONCAKE_SUBMODULES or name.startswith("mooncake_") or name.startswith("pg_")


def _str_const(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _dynamic_target(call: ast.Call) -> tuple[str, tuple[str, ...], bool] | None:
    """(module, fromlist names, is_probe) for a literal dynamic mooncake import."""
    callee = dotted(call.func)
    if callee is None or not call.args:
        return None
    is_probe = callee in _FIND_SPEC_CALLS
    if not (is_probe or callee in _IMPORT_MODULE_CALLS):
        return None
    target = _str_const(call.args[0])
    if target is None:
        return None
    if target.startswith(".") and callee.endswith("import_module"):
        # import_module(".pg", "mooncake"): resolve against the package.
        package = _str_const(call.args[1]) if len(call.args) > 1 else None
        for kw in call.keywords:
            if kw.arg == "package":
                package = _str_const(kw.value)
        if package is None:
            return None
        target = package + target if target != "." else package
    if not _is_mooncake(target):
        return None
    names: tuple[str, ...] = ()
    if callee.endswith("__import__"):
        fromlist = call.args[3] if len(call.args) > 3 else None
        for kw in call.keywords:
            if kw.arg == "fromlist":
                fromlist = kw.value
        if isinstance(fromlist, (ast.List, ast.Tuple)):
            names = tuple(s for s in (_str_const(e) for e in fromlist.elts) if s is not None)
    return target, names, is_probe


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types: Sequence[ast.expr] = (
        handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    )
    for t in types:
        name = dotted(t)
        if name is not None and name.rsplit(".", 1)[-1] in _IMPORT_ERRORS:
            return True
    return False


def _always_leaves(stmts: Sequence[ast.stmt]) -> bool:
    """True when every path through *stmts* ends in raise / process exit."""
    for stmt in stmts:
        if isinstance(stmt, ast.Raise):
            return True
        if (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Call)
            and dotted(stmt.value.func) in _EXIT_CALLS
        ):
            return True
        if (
            isinstance(stmt, ast.If)
            and stmt.orelse
            and _always_leaves(stmt.body)
            and _always_leaves(stmt.orelse)
        ):
            return True
    return False


def _is_type_checking_test(test: ast.expr) -> bool:
    name = dotted(test)
    return name is not None and name.rsplit(".", 1)[-1] == "TYPE_CHECKING"


def _backend_subject_ok(subject: str | None) -> bool:
    if subject is None:
        return False
    last = subject.rsplit(".", 1)[-1].lower()
    if "backend" not in last:
        return False
    return not any(m in last for m in _NON_PG_BACKEND_MARKERS)


def _subject(node: ast.expr) -> str | None:
    """Readable name of a compared operand: ``a.b`` or ``get_exec().moe.x_backend``."""
    name = dotted(node)
    if name is not None or not isinstance(node, ast.Attribute):
        return name
    # SGLang reads config through accessors (get_exec().moe.elastic_ep_backend).
    return ast.unparse(node)


def _is_pg_function(callee: str | None) -> bool:
    if callee is None:
        return False
    parts = callee.split(".")
    if parts[-1] not in PG_FUNCTIONS:
        return False
    # Storage/embedding factories in SGLang also have register_backend("mooncake");
    # only torch's Backend.register_backend names a process-group backend.
    return parts[-1] != "register_backend" or (len(parts) > 1 and parts[-2] == "Backend")


def _target_names(target: ast.expr) -> Iterator[str]:
    """Plain names bound by an assignment target (for shadowing)."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _target_names(elt)
    elif isinstance(target, ast.Starred):
        yield from _target_names(target.value)


# --------------------------------------------------------------------------
# The walk


@dataclass
class _Scope:
    kind: str  # "module" | "class" | "function"
    qualname: str | None
    parent: _Scope | None
    # local name -> (module, object path or None for a module binding)
    mooncake: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    other: set[str] = field(default_factory=set)

    def lookup(self, name: str) -> tuple[str, str | None] | None:
        scope: _Scope | None = self
        first = True
        while scope is not None:
            # Class bodies are invisible to the functions nested in them.
            if first or scope.kind != "class":
                if name in scope.mooncake:
                    return scope.mooncake[name]
                if name in scope.other:
                    return None
            first = False
            scope = scope.parent
        return None


@dataclass
class _Guard:
    """One enclosing construct relevant for optionality / alternatives."""

    try_id: int
    in_body: bool  # False: inside an import-catching handler
    falls_back: bool  # some import-catching handler survives


@dataclass
class _RawImport:
    module: str
    names: tuple[str, ...]
    alias: str | None
    line: int
    scope: _Scope
    guards: tuple[_Guard, ...]
    type_checking: bool
    dynamic: bool
    probe: bool


class _Walker:
    def __init__(self, path: str) -> None:
        self.path = path
        self.imports: list[_RawImport] = []
        self.calls: list[tuple[ast.Call, _Scope]] = []
        self.backends: list[BackendLiteral] = []

    # -- generic traversal -------------------------------------------------

    def walk(self, tree: ast.Module) -> None:
        module_scope = _Scope("module", None, None)
        self._body(tree.body, module_scope, (), False)

    def _body(
        self,
        stmts: Iterable[ast.stmt],
        scope: _Scope,
        guards: tuple[_Guard, ...],
        tc: bool,
    ) -> None:
        for stmt in stmts:
            self._stmt(stmt, scope, guards, tc)

    def _stmt(self, stmt: ast.stmt, scope: _Scope, guards: tuple[_Guard, ...], tc: bool) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            scope.other.add(stmt.name)
            # Decorators and defaults run where the def statement runs.
            for expr in [*stmt.decorator_list, *stmt.args.defaults]:
                self._expr(expr, scope, guards)
            for d in stmt.args.kw_defaults:
                if d is not None:
                    self._expr(d, scope, guards)
            inner = _Scope("function", self._qual(scope, stmt.name), scope)
            args = stmt.args
            for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                inner.other.add(a.arg)
            for va in (args.vararg, args.kwarg):
                if va is not None:
                    inner.other.add(va.arg)
            # A try around a def does not guard its body: it runs later.
            self._body(stmt.body, inner, (), tc)
            return
        if isinstance(stmt, ast.ClassDef):
            scope.other.add(stmt.name)
            for expr in [*stmt.decorator_list, *stmt.bases]:
                self._expr(expr, scope, guards)
            for kw in stmt.keywords:
                self._expr(kw.value, scope, guards)
            inner = _Scope("class", self._qual(scope, stmt.name), scope)
            # The class body runs right away, so enclosing guards still apply.
            self._body(stmt.body, inner, guards, tc)
            return
        if isinstance(stmt, ast.Import):
            self._import(stmt, scope, guards, tc)
            return
        if isinstance(stmt, ast.ImportFrom):
            self._import_from(stmt, scope, guards, tc)
            return
        if isinstance(stmt, _TRY_TYPES):
            # ast.TryStar (3.11+) has exactly the fields of ast.Try.
            self._try(cast(ast.Try, stmt), scope, guards, tc)
            return
        if isinstance(stmt, ast.If) and _is_type_checking_test(stmt.test):
            self._expr(stmt.test, scope)
            self._body(stmt.body, scope, guards, True)
            self._body(stmt.orelse, scope, guards, tc)
            return
        self._bindings(stmt, scope)
        self._assign_literals(stmt, scope)
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Call)
        ):
            # `pg = importlib.import_module("mooncake.pg")` binds a module.
            found = _dynamic_target(stmt.value)
            if found is not None and not found[2]:
                scope.mooncake[stmt.targets[0].id] = (found[0], None)
        # Generic statement: visit expressions, recurse into nested blocks.
        for name, value in ast.iter_fields(stmt):
            if isinstance(value, list):
                if value and all(isinstance(v, ast.stmt) for v in value):
                    self._body(value, scope, guards, tc)
                    continue
                for v in value:
                    self._node(v, scope, guards, tc)
            elif name != "ctx":
                self._node(value, scope, guards, tc)

    def _node(self, value: object, scope: _Scope, guards: tuple[_Guard, ...], tc: bool) -> None:
        if isinstance(value, ast.stmt):
            self._stmt(value, scope, guards, tc)
        elif isinstance(value, ast.expr):
            self._expr(value, scope, guards)
        elif isinstance(value, ast.AST):
            # withitem, match_case, comprehension, keyword, ...
            for _, sub in ast.iter_fields(value):
                if isinstance(sub, list):
                    if sub and all(isinstance(v, ast.stmt) for v in sub):
                        self._body(sub, scope, guards, tc)
                    else:
                        for v in sub:
                            self._node(v, scope, guards, tc)
                else:
                    self._node(sub, scope, guards, tc)
            if isinstance(value, ast.withitem) and value.optional_vars is not None:
                scope.other.update(_target_names(value.optional_vars))
            if isinstance(value, ast.ExceptHandler) and value.name:
                scope.other.add(value.name)

    def _expr(self, expr: ast.expr, scope: _Scope, guards: tuple[_Guard, ...] = ()) -> None:
        # Iterative so that long flat chains (a + b + ... ) cost no recursion;
        # lambdas and comprehensions share the enclosing scope, which is
        # good enough for name resolution here.
        stack: list[ast.AST] = [expr]
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Call):
                self.calls.append((node, scope))
                self._dynamic_import(node, scope, guards)
                self._call_literals(node, scope)
            elif isinstance(node, ast.Compare):
                self._compare_literals(node, scope)
            elif isinstance(node, ast.NamedExpr):
                scope.other.update(_target_names(node.target))
            stack.extend(ast.iter_child_nodes(node))

    @staticmethod
    def _qual(scope: _Scope, name: str) -> str:
        return name if scope.qualname is None else f"{scope.qualname}.{name}"

    def _bindings(self, stmt: ast.stmt, scope: _Scope) -> None:
        targets: list[ast.expr] = []
        if isinstance(stmt, ast.Assign):
            targets = list(stmt.targets)
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
            targets = [stmt.target]
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            targets = [stmt.target]
        elif isinstance(stmt, (ast.Global, ast.Nonlocal)):
            return
        for t in targets:
            scope.other.update(_target_names(t))

    # -- try / imports -----------------------------------------------------

    def _try(
        self,
        stmt: ast.Try,
        scope: _Scope,
        guards: tuple[_Guard, ...],
        tc: bool,
    ) -> None:
        catching = [h for h in stmt.handlers if _catches_import_error(h)]
        if catching:
            falls_back = any(not _always_leaves(h.body) for h in catching)
            body_guard = _Guard(id(stmt), True, falls_back)
            handler_guard = _Guard(id(stmt), False, False)
            self._body(stmt.body, scope, (*guards, body_guard), tc)
        else:
            handler_guard = None
            self._body(stmt.body, scope, guards, tc)
        for h in stmt.handlers:
            if h.name:
                scope.other.add(h.name)
            if h.type is not None:
                self._expr(h.type, scope, guards)
            if handler_guard is not None and h in catching:
                self._body(h.body, scope, (*guards, handler_guard), tc)
            else:
                self._body(h.body, scope, guards, tc)
        self._body(stmt.orelse, scope, guards, tc)
        self._body(stmt.finalbody, scope, guards, tc)

    def _record(
        self,
        module: str,
        names: tuple[str, ...],
        alias: str | None,
        line: int,
        scope: _Scope,
        guards: tuple[_Guard, ...],
        tc: bool,
        *,
        dynamic: bool = False,
        probe: bool = False,
    ) -> None:
        self.imports.append(
            _RawImport(module, names, alias, line, scope, guards, tc, dynamic, probe)
        )

    def _import(
        self, stmt: ast.Import, scope: _Scope, guards: tuple[_Guard, ...], tc: bool
    ) -> None:
        for a in stmt.names:
            if not _is_mooncake(a.name):
                scope.other.add(a.asname or a.name.split(".", 1)[0])
                continue
            self._record(a.name, (), a.asname, stmt.lineno, scope, guards, tc)
            if a.asname:
                scope.mooncake[a.asname] = (a.name, None)
            else:
                # `import mooncake.pg` binds the top-level package name.
                scope.mooncake[_ROOT] = (_ROOT, None)

    def _import_from(
        self,
        stmt: ast.ImportFrom,
        scope: _Scope,
        guards: tuple[_Guard, ...],
        tc: bool,
    ) -> None:
        module = stmt.module
        if stmt.level or not _is_mooncake(module):
            for a in stmt.names:
                if a.name != "*":
                    scope.other.add(a.asname or a.name)
            return
        assert module is not None  # _is_mooncake(None) is False
        plain: list[ast.alias] = []
        for a in stmt.names:
            if module == _ROOT and _is_submodule_name(a.name):
                sub = f"{_ROOT}.{a.name}"
                self._record(sub, (), a.asname, stmt.lineno, scope, guards, tc)
                scope.mooncake[a.asname or a.name] = (sub, None)
            else:
                plain.append(a)
        if not plain:
            return
        names = tuple(a.name for a in plain)
        alias = plain[0].asname if len(plain) == 1 else None
        self._record(module, names, alias, stmt.lineno, scope, guards, tc)
        for a in plain:
            if a.name != "*":
                scope.mooncake[a.asname or a.name] = (module, a.name)

    def _dynamic_import(self, call: ast.Call, scope: _Scope, guards: tuple[_Guard, ...]) -> None:
        found = _dynamic_target(call)
        if found is None:
            return
        module, names, probe = found
        self._record(
            module,
            names,
            None,
            call.lineno,
            scope,
            guards,
            False,
            dynamic=True,
            probe=probe,
        )

    # -- backend literals --------------------------------------------------

    def _add_backend(
        self, value: str, line: int, scope: _Scope, context: str, subject: str | None
    ) -> None:
        feature = classify_feature(self.path, scope.qualname)
        if context != "pg-call" and feature in _NON_PG_FEATURES:
            # There "mooncake" names the KV transfer / storage backend, not a
            # torch process-group backend (checked against SGLang releases).
            return
        self.backends.append(
            BackendLiteral(
                value=value,
                path=self.path,
                line=line,
                function=scope.qualname,
                context=context,
                subject=subject,
                feature=feature,
            )
        )

    def _call_literals(self, call: ast.Call, scope: _Scope) -> None:
        callee = dotted(call.func)
        is_pg = _is_pg_function(callee)
        if is_pg:
            for arg in call.args:
                s = _str_const(arg)
                if s in _BACKEND_VALUES:
                    assert s is not None
                    self._add_backend(s, arg.lineno, scope, "pg-call", callee)
        for kw in call.keywords:
            if kw.arg != "backend":
                continue
            s = _str_const(kw.value)
            if s in _BACKEND_VALUES:
                assert s is not None
                context = "pg-call" if is_pg else "backend="
                self._add_backend(s, kw.value.lineno, scope, context, callee)

    def _compare_literals(self, node: ast.Compare, scope: _Scope) -> None:
        operands = [node.left, *node.comparators]
        for i, op in enumerate(node.ops):
            if not isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
                continue
            pair = (operands[i], operands[i + 1])
            for lit_side, other in (pair, pair[::-1]):
                subject = _subject(other)
                if not _backend_subject_ok(subject):
                    continue
                for lit in self._literals_in(lit_side):
                    self._add_backend(lit[0], lit[1], scope, "compare", subject)

    @staticmethod
    def _literals_in(node: ast.expr) -> list[tuple[str, int]]:
        elts: Sequence[ast.expr] = (
            node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        )
        found: list[tuple[str, int]] = []
        for e in elts:
            s = _str_const(e)
            if s in _BACKEND_VALUES:
                assert s is not None
                found.append((s, e.lineno))
        return found

    def _assign_literals(self, stmt: ast.stmt, scope: _Scope) -> None:
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        else:
            return
        s = _str_const(value)
        if s not in _BACKEND_VALUES:
            return
        assert s is not None
        for t in targets:
            subject = dotted(t)
            if _backend_subject_ok(subject):
                self._add_backend(s, value.lineno, scope, "assign", subject)

    # -- resolution --------------------------------------------------------

    def resolve_calls(self, known_modules: set[str]) -> list[CallFact]:
        facts: list[CallFact] = []
        for call, scope in self.calls:
            callee = dotted(call.func)
            if callee is None:
                continue
            root, *attrs = callee.split(".")
            binding = scope.lookup(root)
            if binding is None:
                continue
            module, obj = binding
            if obj is not None:
                name = ".".join([obj, *attrs])
            else:
                # Walk down submodules as far as they are known modules.
                while len(attrs) > 1 and f"{module}.{attrs[0]}" in known_modules:
                    module = f"{module}.{attrs.pop(0)}"
                if not attrs:
                    continue  # calling a module object: not meaningful
                name = ".".join(attrs)
            facts.append(
                CallFact(
                    module=module,
                    name=name,
                    path=self.path,
                    line=call.lineno,
                    function=scope.qualname,
                    positional=sum(1 for a in call.args if not isinstance(a, ast.Starred)),
                    keywords=tuple(k.arg for k in call.keywords if k.arg is not None),
                    starred=any(isinstance(a, ast.Starred) for a in call.args)
                    or any(k.arg is None for k in call.keywords),
                )
            )
        return facts

    def import_facts(self) -> list[ImportFact]:
        # Per try statement: modules imported in its body and in its handlers.
        body_mods: dict[int, set[str]] = {}
        handler_mods: dict[int, set[str]] = {}
        for raw in self.imports:
            for g in raw.guards:
                target = body_mods if g.in_body else handler_mods
                target.setdefault(g.try_id, set()).add(raw.module)
        facts: list[ImportFact] = []
        for raw in self.imports:
            alts: set[str] = set()
            for g in raw.guards:
                other = handler_mods if g.in_body else body_mods
                alts |= other.get(g.try_id, set())
            alts.discard(raw.module)
            guarded = any(g.in_body for g in raw.guards)
            falls_back = any(g.in_body and g.falls_back for g in raw.guards)
            function = raw.scope.qualname
            facts.append(
                ImportFact(
                    module=raw.module,
                    names=raw.names,
                    alias=raw.alias,
                    path=self.path,
                    line=raw.line,
                    function=function,
                    optional=falls_back or raw.type_checking or raw.probe,
                    alternatives=tuple(sorted(alts)),
                    feature=classify_feature(self.path, function, raw.module),
                    dynamic=raw.dynamic,
                    type_checking=raw.type_checking,
                    guarded=guarded,
                    probe=raw.probe,
                )
            )
        return facts


def _decode(data: bytes) -> str:
    """Decode per PEP 263 (BOM, coding cookie, default UTF-8)."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        where = f" (line {exc.lineno})" if exc.lineno is not None else ""
        return f"{type(exc).__name__}: {exc.msg}{where}"
    detail = str(exc)
    if not detail and isinstance(exc, (RecursionError, MemoryError)):
        # CPython's parser signals stack exhaustion with a bare MemoryError.
        detail = "source nested too deeply"
    return f"{type(exc).__name__}: {detail}"


def analyze_source(data: bytes | str, path: str) -> FileAnalysis:
    """Extract mooncake imports, calls and pg-backend literals from one file.

    *data* is the raw file content (decoded per PEP 263: BOM, coding cookie,
    else UTF-8) or already decoded text; *path* is only copied into the
    facts and used for feature classification.  Never raises for bad input:
    decoding, parsing or walking failures are returned in ``error`` with no
    facts.  Facts are ordered by source position.
    """

    def failed(exc: BaseException) -> FileAnalysis:
        return FileAnalysis(path, (), (), (), _describe(exc))

    try:
        text = _decode(data) if isinstance(data, bytes) else data
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
        return failed(exc)
    try:
        tree = ast.parse(text, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return failed(exc)
    walker = _Walker(path)
    try:
        walker.walk(tree)
        imports = walker.import_facts()
        known = {f.module for f in imports}
        known |= {f"{_ROOT}.{m}" for m in MOONCAKE_SUBMODULES}
        calls = walker.resolve_calls(known)
    except RecursionError as exc:
        return failed(exc)

    def pos(f: ImportFact | CallFact | BackendLiteral) -> int:
        return f.line

    return FileAnalysis(
        path=path,
        imports=tuple(sorted(imports, key=pos)),
        calls=tuple(sorted(calls, key=pos)),
        backends=tuple(sorted(walker.backends, key=pos)),
        error=None,
    )


# --------------------------------------------------------------------------- the requirement

#: The two names of mooncake's torch ProcessGroup extension (renamed ep -> pg).
PG_MODULES = ("mooncake.pg", "mooncake.ep")
_PG_BACKENDS = ("mooncake", "mooncake-cpu")


@dataclass(frozen=True)
class PGNeeds:
    """What one SGLang source tree needs of the process-group extension."""

    module: str | None  # None: no mooncake.pg / mooncake.ep import at all
    alternatives: tuple[str, ...] = ()
    names: tuple[str, ...] = ()  # required: imported or called unconditionally
    optional_names: tuple[str, ...] = ()  # reached only through an optional import
    backends: tuple[str, ...] = ()
    optional: bool = False
    evidence: tuple[str, ...] = ()  # "file:line" of the imports it was derived from


def _where(fact: Any) -> str:
    # ImportFact/CallFact carry ``path``; the KB's models call the same thing ``member``.
    return str(getattr(fact, "member", None) or fact.path)


def _pg_module_of(module: str, names: Iterable[str]) -> str | None:
    if module in PG_MODULES:
        return module
    if module == "mooncake":
        for n in names:
            if f"mooncake.{n}" in PG_MODULES:
                return f"mooncake.{n}"
    return None


_PG_MENTION = re.compile(
    rb"mooncake\.(?:pg|ep)\b|from\s+mooncake\s+import\s[^\n]*\b(?:pg|ep)\b")


def mentions_pg_module(data: bytes) -> bool:
    """Cheap prefilter for the runtime check: could this file import ``mooncake.pg`` or
    ``mooncake.ep`` in any form :func:`analyze_source` records (``import mooncake.pg``,
    ``from mooncake import ep``, ``import_module("mooncake.pg")``)? A file that cannot
    need not be parsed to learn the process-group requirement."""
    return b"mooncake" in data and _PG_MENTION.search(data) is not None


def pg_needs(imports: Iterable[Any], calls: Iterable[Any] = (),
             backends: Iterable[Any] = ()) -> PGNeeds:
    """Derive the process-group requirement from import, call and backend facts
    (:class:`ImportFact`/:class:`CallFact`/:class:`BackendLiteral`, or the KB's models).

    The module is the one the elastic-EP code imports (``mooncake.pg`` or the older
    ``mooncake.ep``); when imports of both exist, the one reached by elastic EP wins,
    then the one imported unconditionally, then the newer name; the other becomes an
    alternative. A name is required when an unconditional import brings it or, for a
    call through a module alias (``mooncake_ep.set_host_ip(ip)``), when the module was
    imported unconditionally in that function (or an enclosing one) or at module level
    of that file; a name reached only through an optional import is optional.
    """
    imports = list(imports)
    values = sorted({b.value for b in backends if b.value in _PG_BACKENDS})
    pg = [(m, i) for i in imports if (m := _pg_module_of(i.module, i.names))]
    if not pg:
        return PGNeeds(module=None, backends=tuple(values))

    def rank(mi: tuple[str, Any]) -> tuple[int, int, int]:
        m, i = mi
        return (0 if i.feature == "elastic-ep" else 1, 1 if i.optional else 0,
                PG_MODULES.index(m))

    module = min(pg, key=rank)[0]
    chosen = [i for m, i in pg if m == module]
    hard_scopes = {(_where(i), i.function) for i in chosen if not i.optional}
    hard_files = {_where(i) for i in chosen if not i.optional and i.function is None}
    required: set[str] = set()
    optional: set[str] = set()
    for i in chosen:
        if i.module == module:
            (optional if i.optional else required).update(i.names)
    for c in calls:
        if c.module != module:
            continue
        name = c.name.split(".")[0]
        where, fn = _where(c), c.function
        if where in hard_files or any(
                m == where and f is not None and fn is not None
                and (fn == f or fn.startswith(f + "."))  # nested defs share the import
                for m, f in hard_scopes):
            required.add(name)
        else:
            optional.add(name)
    # Only a real fallback (the other module imported in the same try or its
    # ``except ImportError`` handler) is an alternative; importing both elsewhere is not.
    alternatives = sorted({a for i in chosen for a in i.alternatives if a in PG_MODULES})
    return PGNeeds(
        module=module,
        alternatives=tuple(a for a in alternatives if a != module),
        names=tuple(sorted(required)),
        optional_names=tuple(sorted(optional - required)),
        backends=tuple(values),
        optional=all(i.optional for i in chosen),
        evidence=tuple(sorted({f"{_where(i)}:{i.line}" for i in chosen})),
    )
