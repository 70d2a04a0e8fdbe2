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

Where the code is

The fact types, constants and feature rules are in :mod:`moonpin.readers.pyast.facts`, the
syntax-tree walk in :mod:`moonpin.readers.pyast.walk`; this module holds the entry points
(:func:`analyze_source`, the process-group requirement :func:`pg_needs`) and re-exports
the public names of both.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from moonpin.readers.pyast.astname import dotted
from moonpin.readers.pyast.facts import (
    FEATURES,
    MOONCAKE_ROOT,
    MOONCAKE_SUBMODULES,
    PG_FUNCTIONS,
    BackendLiteral,
    CallFact,
    FileAnalysis,
    ImportFact,
    classify_feature,
)
from moonpin.readers.pyast.walk import Walker

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


def mentions_mooncake(data: bytes) -> bool:
    """Cheap prefilter: True when the raw bytes contain ``b"mooncake"``.

    Files for which this is False are skipped without parsing; the check is
    case-sensitive because Python module names are.
    """
    return b"mooncake" in data




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
    walker = Walker(path)
    try:
        walker.walk(tree)
        imports = walker.import_facts()
        known = {f.module for f in imports}
        known |= {f"{MOONCAKE_ROOT}.{m}" for m in MOONCAKE_SUBMODULES}
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
