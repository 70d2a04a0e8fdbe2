"""A small evaluator of the Python an import runs at module level, read with ``ast`` and
never executed: enough of it to follow what loads native code (imports of extension
modules, ``ctypes.CDLL``) through the module's own functions, ``if``/``try``/``for``
and the values they test (constants, ``os.path`` arithmetic, ``glob``, ``sys.path``,
``platform.system()``, ``/proc/self/maps``).

Every value is either a plain Python value computed from the file's own constants, or
:data:`UNKNOWN`. Nothing of the image runs: a call is followed into a function the module
defines, or answered by a model of a few standard-library functions (:class:`Host`
supplies them with what they need: the environment, the file system, the loader);
anything else is UNKNOWN. Where a condition is UNKNOWN both branches are walked
*speculatively*: their loads happen when they can and their failures, ``raise`` and
``return`` are ignored. An iteration over an UNKNOWN value is not walked. A budget of steps
bounds all of it (:class:`Budget`).

Only ``os`` at import (``ast`` when a file is read): this runs at worker start.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["UNKNOWN", "Budget", "Builtin", "Died", "Evaluator", "ExcClass", "ExcValue", "Function",
           "Host", "Lazy", "ModuleValue", "Raised", "exc_matches"]


class _Unknown:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()

#: The standard exception classes the walk can raise or catch, each with its parent.
_EXC_PARENT = {
    "BaseException": None, "Exception": "BaseException", "ImportError": "Exception",
    "ModuleNotFoundError": "ImportError", "OSError": "Exception", "EnvironmentError": "OSError",
    "IOError": "OSError", "FileNotFoundError": "OSError", "PermissionError": "OSError",
    "ValueError": "Exception",
    "AttributeError": "Exception", "TypeError": "Exception", "RuntimeError": "Exception",
    "NotImplementedError": "RuntimeError", "LookupError": "Exception",
    "KeyError": "LookupError", "IndexError": "LookupError", "AssertionError": "Exception",
    "NameError": "Exception", "SystemError": "Exception", "UnicodeError": "ValueError",
}
_MAX_STEPS = 400_000
_MAX_DEPTH = 24
_MAX_ITEMS = 4096


class Budget(Exception):
    """The walk took more steps, or calls nested deeper, than it may."""


class ExcClass:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


class ExcValue:
    """An exception the walk raised: its class's name, its message, and what it is about
    (``module``: the module whose code raised it; ``path``: the file a failed load named)."""

    __slots__ = ("cls", "context", "message", "module", "path")

    def __init__(self, cls: str, message: Any, module: str = "", path: str = "") -> None:
        self.cls = cls
        self.message = message
        self.module = module
        self.path = path
        #: the exception being handled when this one was raised (``__context__``)
        self.context: ExcValue | None = None


def exc_matches(cls: str, handler: str) -> bool:
    """Whether ``except handler`` catches an exception of class ``cls``."""
    seen = 0
    c: str | None = cls
    while c is not None and seen < 16:
        if c == handler:
            return True
        c = _EXC_PARENT.get(c, "Exception" if c not in _EXC_PARENT else None)
        seen += 1
    return False


class Died(Exception):
    """The process died (ld.so aborted it): no ``except`` clause runs."""


class Raised(Exception):
    """A modelled exception propagating through the walk."""

    def __init__(self, exc: ExcValue) -> None:
        super().__init__(exc.cls)
        self.exc = exc


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class ModuleValue:
    """A module as the walk sees it. ``kind``: ``py`` (its code walked), ``lazy`` (a Python
    module not walked: its top-level constants are read when asked), ``ext`` (an extension
    module), ``ns`` (a namespace package), ``std`` (the standard library's, modelled)."""

    __slots__ = ("file", "globals", "kind", "name", "path", "tier")

    def __init__(self, name: str, kind: str, file: str | None = None,
                 path: list[str] | None = None, tier: int = 9) -> None:
        self.name = name
        self.kind = kind
        self.file = file
        self.path = path  # __path__ (a package's folders), None: not a package
        self.globals: dict[str, Any] = {"__name__": name, "__file__": file}
        if path is not None:
            self.globals["__path__"] = list(path)
        self.tier = tier


class Function:
    __slots__ = ("defaults", "kw_defaults", "module", "node")

    def __init__(self, node: Any, module: ModuleValue, defaults: list[Any],
                 kw_defaults: list[Any]) -> None:
        self.node = node
        self.module = module
        self.defaults = defaults
        self.kw_defaults = kw_defaults


class Lazy:
    """A name imported from a module that is not walked: its value is read (the module's
    top-level constant) only when the name is used."""

    __slots__ = ("module", "name")

    def __init__(self, module: ModuleValue, name: str) -> None:
        self.module = module
        self.name = name


class Builtin:
    """A modelled callable: ``fn(args, kwargs)``."""

    __slots__ = ("fn", "name")

    def __init__(self, name: str, fn: Callable[[list[Any], dict[str, Any]], Any]) -> None:
        self.name = name
        self.fn = fn


class Host:
    """What the walk asks of the world (:mod:`moonpin.preflight.pyimport.pyrun` implements it)."""

    def import_module(self, name: str, importer: ModuleValue) -> ModuleValue:
        raise NotImplementedError

    def import_from(self, module: ModuleValue, name: str, importer: ModuleValue) -> Any:
        raise NotImplementedError

    def module_attr(self, module: ModuleValue, name: str) -> Any:
        raise NotImplementedError

    def builtin(self, name: str) -> Any:
        raise NotImplementedError


class _Frame:
    __slots__ = ("declared_global", "locals", "module", "speculative")

    def __init__(self, module: ModuleValue, local: dict[str, Any] | None) -> None:
        self.module = module
        self.locals = local  # None: module level (names are the module's globals)
        self.declared_global: set[str] = set()
        self.speculative = False


def _truth(v: Any) -> bool | None:
    if v is UNKNOWN:
        return None
    if isinstance(v, (str, bytes, int, float, bool, list, tuple, dict)) or v is None:
        return bool(v)
    return True  # a module, function, exception, handle: an object


def _known(*values: Any) -> bool:
    return all(isinstance(v, (str, bytes, int, float, bool, tuple, list)) or v is None
               for v in values)


_STR_METHODS = frozenset(("split", "rsplit", "startswith", "endswith", "replace", "strip",
                          "lstrip", "rstrip", "lower", "upper", "join", "partition",
                          "rpartition", "find", "rfind", "removeprefix", "removesuffix",
                          "isdigit", "count", "splitlines"))
#: The largest string or list a step may make (a hostile module doubling a string in a
#: loop gets UNKNOWN, not the machine's memory).
_MAX_VALUE = 1 << 20


def _size(v: Any) -> int:
    return len(v) if isinstance(v, (str, bytes, list, tuple)) else 0


def _wide_format(fmt: str) -> bool:
    """Whether a %-format asks for a width or precision of five digits or more."""
    run = 0
    for c in fmt:
        run = run + 1 if c.isdigit() else 0
        if run >= 5:
            return True
    return False


class Evaluator:
    """Walks a module's statements (:meth:`run_module`) against a :class:`Host`."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.steps = 0
        self.depth = 0
        #: the modules whose code runs, innermost last (who a failed load is blamed on)
        self.running: list[ModuleValue] = []
        #: the exceptions being handled (``sys.exc_info()``), innermost last
        self.handling: list[ExcValue] = []

    def _step(self) -> None:
        self.steps += 1
        if self.steps > _MAX_STEPS:
            raise Budget(f"more than {_MAX_STEPS:,} steps")

    # ------------------------------------------------------------------ statements
    def run_module(self, tree: Any, module: ModuleValue) -> None:
        """Run a module's top-level statements; raises :class:`Raised` when the import
        fails."""
        self.running.append(module)
        try:
            self._block(tree.body, _Frame(module, None))
        finally:
            self.running.pop()

    def _block(self, body: list[Any], frame: _Frame) -> None:
        for stmt in body:
            self._stmt(stmt, frame)

    def _stmt(self, node: Any, frame: _Frame) -> None:
        import ast

        self._step()
        if isinstance(node, ast.Expr):
            self.eval(node.value, frame)
        elif isinstance(node, ast.Assign):
            value = self.eval(node.value, frame)
            for t in node.targets:
                self._assign(t, value, frame)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self._assign(node.target, self.eval(node.value, frame), frame)
        elif isinstance(node, ast.AugAssign):
            if isinstance(node.target, ast.Name):
                old = self._name(node.target.id, frame)
                self._assign(node.target, self._binop(node.op, old,
                                                      self.eval(node.value, frame)), frame)
            else:
                self.eval(node.value, frame)
        elif isinstance(node, ast.If):
            self._branch(self.eval(node.test, frame), node.body, node.orelse, frame)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            self._import(node, frame)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            self._set(node.name, Function(
                node, frame.module, [self.eval(d, frame) for d in args.defaults],
                [self.eval(d, frame) if d is not None else UNKNOWN
                 for d in args.kw_defaults]), frame)
        elif isinstance(node, ast.ClassDef):
            self._set(node.name, UNKNOWN, frame)  # its body defines, it loads nothing
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            self._try(node, frame)
        elif isinstance(node, ast.For):
            self._for(node, frame)
        elif isinstance(node, ast.With):
            for item in node.items:
                value = self.eval(item.context_expr, frame)
                if item.optional_vars is not None:
                    self._assign(item.optional_vars, value, frame)
            self._block(node.body, frame)
        elif isinstance(node, ast.Return):
            value = self.eval(node.value, frame) if node.value is not None else None
            if not frame.speculative and frame.locals is not None:
                raise _Return(value)
        elif isinstance(node, ast.Raise):
            self._raise(node, frame)
        elif isinstance(node, ast.Break):
            if not frame.speculative:
                raise _Break
        elif isinstance(node, ast.Continue):
            if not frame.speculative:
                raise _Continue
        elif isinstance(node, ast.Global):
            frame.declared_global.update(node.names)
        # While, Match, Delete, Assert, Pass, Nonlocal: nothing a load depends on

    def _branch(self, test: Any, body: list[Any], orelse: list[Any], frame: _Frame) -> None:
        truth = _truth(test)
        if truth is True:
            self._block(body, frame)
        elif truth is False:
            self._block(orelse, frame)
        else:
            was = frame.speculative
            frame.speculative = True
            try:
                for part in (body, orelse):
                    try:
                        self._block(part, frame)
                    except (Raised, _Return, _Break, _Continue):
                        pass  # a path that may not be taken decides nothing
            finally:
                frame.speculative = was

    def _raise(self, node: Any, frame: _Frame) -> None:
        handling = self.handling[-1] if self.handling else None
        if node.exc is None:
            exc = handling
        else:
            value = self.eval(node.exc, frame)
            if isinstance(value, ExcClass):
                value = ExcValue(value.name, "", frame.module.name)
            exc = value if isinstance(value, ExcValue) else ExcValue(
                "Exception", UNKNOWN, frame.module.name)
            if not exc.module:
                exc.module = frame.module.name
            if not exc.path:
                exc.path = f"{frame.module.file or frame.module.name} line {node.lineno}"
            if handling is not None and handling is not exc and exc.context is None:
                exc.context = handling
        if exc is not None and not frame.speculative:
            raise Raised(exc)

    def _try(self, node: Any, frame: _Frame) -> None:
        try:
            try:
                self._block(node.body, frame)
            except Raised as r:
                for h in node.handlers:
                    if self._catches(h.type, r.exc, frame):
                        if h.name:
                            self._set(h.name, r.exc, frame)
                        self.handling.append(r.exc)
                        try:
                            self._block(h.body, frame)
                        finally:
                            self.handling.pop()
                        break
                else:
                    raise
            else:
                self._block(node.orelse, frame)
        finally:
            self._block(node.finalbody, frame)

    def _catches(self, type_node: Any, exc: ExcValue, frame: _Frame) -> bool:
        if type_node is None:
            return True
        value = self.eval(type_node, frame)
        kinds = value if isinstance(value, tuple) else (value,)
        return any(isinstance(k, ExcClass) and exc_matches(exc.cls, k.name) for k in kinds)

    def _for(self, node: Any, frame: _Frame) -> None:
        items = self.eval(node.iter, frame)
        if isinstance(items, dict):
            items = list(items)
        if not isinstance(items, (list, tuple, str)):
            return  # not known: not walked
        for item in list(items)[:_MAX_ITEMS]:
            self._assign(node.target, item, frame)
            try:
                self._block(node.body, frame)
            except _Break:
                return
            except _Continue:
                continue
        self._block(node.orelse, frame)

    # ------------------------------------------------------------------ names, imports
    def _set(self, name: str, value: Any, frame: _Frame) -> None:
        if frame.locals is not None and name not in frame.declared_global:
            frame.locals[name] = value
        else:
            frame.module.globals[name] = value

    def _assign(self, target: Any, value: Any, frame: _Frame) -> None:
        import ast

        if isinstance(target, ast.Name):
            self._set(target.id, value, frame)
        elif isinstance(target, (ast.Tuple, ast.List)):
            seq = list(value) if isinstance(value, (list, tuple)) else None
            if seq is not None and len(seq) != len(target.elts):
                seq = None
            for i, t in enumerate(target.elts):
                self._assign(t, seq[i] if seq is not None else UNKNOWN, frame)
        elif isinstance(target, ast.Starred):
            self._assign(target.value, UNKNOWN, frame)
        # attributes and subscripts: the walk keeps no objects

    def _name(self, name: str, frame: _Frame) -> Any:
        if frame.locals is not None and name in frame.locals:
            scope = frame.locals
        elif name in frame.module.globals:
            scope = frame.module.globals
        else:
            return self.host.builtin(name)
        value = scope[name]
        if isinstance(value, Lazy):
            value = scope[name] = self.host.module_attr(value.module, value.name)
        return value

    def _import(self, node: Any, frame: _Frame) -> None:
        import ast

        module = frame.module
        if isinstance(node, ast.Import):
            for alias in node.names:
                got = self.host.import_module(alias.name, module)
                if alias.asname:
                    self._set(alias.asname, got, frame)
                else:
                    top = alias.name.partition(".")[0]
                    self._set(top, self.host.import_module(top, module), frame)
            return
        base = node.module or ""
        if node.level:
            pkg = module.name if module.path is not None else module.name.rpartition(".")[0]
            for _ in range(node.level - 1):
                pkg = pkg.rpartition(".")[0]
            base = f"{pkg}.{base}" if base else pkg
        source = self.host.import_module(base, module)
        for alias in node.names:
            if alias.name == "*":
                if source.kind == "py":
                    names = source.globals.get("__all__")
                    keys = (names if isinstance(names, (list, tuple)) else
                            [k for k in source.globals if not k.startswith("_")])
                    for k in keys:
                        if isinstance(k, str):
                            self._set(k, source.globals.get(k, UNKNOWN), frame)
                continue
            self._set(alias.asname or alias.name,
                      self.host.import_from(source, alias.name, module), frame)

    # ------------------------------------------------------------------ expressions
    def eval(self, node: Any, frame: _Frame) -> Any:
        import ast

        self._step()
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self._name(node.id, frame)
        if isinstance(node, ast.Attribute):
            return self.attr(self.eval(node.value, frame), node.attr)
        if isinstance(node, ast.Call):
            func = self.eval(node.func, frame)
            args: list[Any] = []
            for a in node.args:
                if isinstance(a, ast.Starred):
                    v = self.eval(a.value, frame)
                    if not isinstance(v, (list, tuple)):
                        return UNKNOWN
                    args += list(v)
                else:
                    args.append(self.eval(a, frame))
            kwargs: dict[str, Any] = {}
            for k in node.keywords:
                v = self.eval(k.value, frame)
                if k.arg is None:
                    return UNKNOWN
                kwargs[k.arg] = v
            return self.call(func, args, kwargs)
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                got = self.eval(v.value if isinstance(v, ast.FormattedValue) else v, frame)
                if not _known(got) or (isinstance(v, ast.FormattedValue) and v.format_spec):
                    return UNKNOWN
                parts.append(str(got))
            return "".join(parts)
        if isinstance(node, ast.BinOp):
            return self._binop(node.op, self.eval(node.left, frame),
                               self.eval(node.right, frame))
        if isinstance(node, ast.BoolOp):
            last: Any = UNKNOWN
            for v in node.values:
                last = self.eval(v, frame)
                t = _truth(last)
                if t is None:
                    return UNKNOWN
                if t is isinstance(node.op, ast.Or):
                    return last
            return last
        if isinstance(node, ast.UnaryOp):
            v = self.eval(node.operand, frame)
            if isinstance(node.op, ast.Not):
                t = _truth(v)
                return UNKNOWN if t is None else not t
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return -v if isinstance(node.op, ast.USub) else v
            return UNKNOWN
        if isinstance(node, ast.Compare):
            return self._compare(node, frame)
        if isinstance(node, ast.IfExp):
            t = _truth(self.eval(node.test, frame))
            if t is None:
                return UNKNOWN
            return self.eval(node.body if t else node.orelse, frame)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items: list[Any] = []
            for e in node.elts:
                if isinstance(e, ast.Starred):
                    v = self.eval(e.value, frame)
                    if not isinstance(v, (list, tuple)):
                        return UNKNOWN
                    items += list(v)
                else:
                    items.append(self.eval(e, frame))
            return items if isinstance(node, ast.List) else tuple(items)
        if isinstance(node, ast.Dict):
            out = {}
            for kn, vn in zip(node.keys, node.values, strict=True):
                key = self.eval(kn, frame) if kn is not None else UNKNOWN
                value = self.eval(vn, frame)
                if not isinstance(key, (str, int, bool)) and key is not None:
                    return UNKNOWN
                out[key] = value
            return out
        if isinstance(node, ast.Subscript):
            return self._subscript(self.eval(node.value, frame), node.slice, frame)
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            return self._comprehension(node, frame)
        if isinstance(node, ast.NamedExpr):
            value = self.eval(node.value, frame)
            self._assign(node.target, value, frame)
            return value
        return UNKNOWN  # lambdas, awaits, dict comprehensions

    def _binop(self, op: Any, a: Any, b: Any) -> Any:
        import ast

        if not _known(a, b) or _size(a) + _size(b) > _MAX_VALUE:
            return UNKNOWN
        try:
            if isinstance(op, ast.Add):
                if isinstance(a, list) and isinstance(b, (list, tuple)):
                    return [*a, *b]
                return a + b
            if isinstance(op, ast.Mod) and isinstance(a, str) and not _wide_format(a):
                got = a % b
                return got if len(got) <= _MAX_VALUE else UNKNOWN
            if isinstance(op, ast.Mult) and isinstance(a, (int, float)) and isinstance(
                    b, (int, float)):
                return a * b
            if isinstance(op, ast.Sub) and isinstance(a, int) and isinstance(b, int):
                return a - b
            if isinstance(op, ast.BitOr) and isinstance(a, int) and isinstance(b, int):
                return a | b
            if isinstance(op, ast.BitAnd) and isinstance(a, int) and isinstance(b, int):
                return a & b
            if isinstance(op, (ast.Pow, ast.LShift)) and type(a) is type(b) is int and \
                    0 <= b <= 256 and abs(a) < 1 << 64:  # 2**32, 1 << 31: bounded
                return a ** b if isinstance(op, ast.Pow) else a << b
        except (TypeError, ValueError, OverflowError):
            return UNKNOWN
        return UNKNOWN

    def _compare(self, node: Any, frame: _Frame) -> Any:
        import ast

        left = self.eval(node.left, frame)
        result: Any = True
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = self.eval(right_node, frame)
            if isinstance(op, (ast.Is, ast.IsNot)):
                if left is UNKNOWN or right is UNKNOWN:
                    return UNKNOWN
                same = left is right or (left is None and right is None)
                got: Any = same if isinstance(op, ast.Is) else not same
            elif not _known(left, right) and not (
                    isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, dict)
                    and _known(left)):
                return UNKNOWN
            else:
                got = _compare_values(type(op).__name__, left, right)
                if got is UNKNOWN:
                    return UNKNOWN
            if not got:
                return False
            result = got
            left = right
        return result

    def _subscript(self, value: Any, index_node: Any, frame: _Frame) -> Any:
        import ast

        if isinstance(index_node, ast.Slice):
            parts = [self.eval(p, frame) if p is not None else None
                     for p in (index_node.lower, index_node.upper, index_node.step)]
            if not isinstance(value, (list, tuple, str)) or not all(
                    p is None or isinstance(p, int) for p in parts):
                return UNKNOWN
            return value[slice(*parts)]
        index = self.eval(index_node, frame)
        try:
            if isinstance(value, (list, tuple, str)) and isinstance(index, int):
                return value[index]
            if isinstance(value, dict) and isinstance(index, (str, int)):
                return value.get(index, UNKNOWN)
        except IndexError:
            return UNKNOWN
        return UNKNOWN

    def _comprehension(self, node: Any, frame: _Frame) -> Any:
        scope = _Frame(frame.module, dict(frame.locals or {}))
        scope.declared_global = frame.declared_global
        out: list[Any] = []

        def walk(i: int) -> bool:
            if i == len(node.generators):
                out.append(self.eval(node.elt, scope))
                return len(out) < _MAX_ITEMS
            gen = node.generators[i]
            items = self.eval(gen.iter, scope)
            if not isinstance(items, (list, tuple, str)):
                raise _Continue  # not known
            for item in items:
                self._assign(gen.target, item, scope)
                ok = True
                for cond in gen.ifs:
                    t = _truth(self.eval(cond, scope))
                    if t is None:
                        raise _Continue
                    ok = ok and t
                if ok and not walk(i + 1):
                    return False
            return True

        try:
            walk(0)
        except _Continue:
            return UNKNOWN
        return out

    # ------------------------------------------------------------------ objects, calls
    def attr(self, obj: Any, name: str) -> Any:
        if isinstance(obj, ModuleValue):
            return self.host.module_attr(obj, name)
        if isinstance(obj, str) and name in _STR_METHODS:
            return Builtin(f"str.{name}", lambda a, k: self._method(obj, name, a, k))
        if isinstance(obj, list) and name in ("append", "extend", "insert"):
            return Builtin(f"list.{name}", lambda a, k: self._list(obj, name, a))
        if isinstance(obj, dict) and name in ("get", "keys", "values", "items"):
            return Builtin(f"dict.{name}", lambda a, k: self._dict(obj, name, a))
        if isinstance(obj, ExcValue) and name == "args":
            return (obj.message,)
        if hasattr(obj, "attrs"):  # a modelled object (a file, a ctypes namespace)
            return obj.attrs.get(name, UNKNOWN)
        return UNKNOWN

    @staticmethod
    def _method(obj: str, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if not _known(*args, *kwargs.values()):
            return UNKNOWN
        sizes = _size(obj) + sum(map(_size, args)) + sum(
            _size(x) for a in args if isinstance(a, (list, tuple)) for x in a)
        if sizes > _MAX_VALUE or (name == "replace" and len(args) > 1
                                  and _size(obj) * _size(args[1]) > _MAX_VALUE):
            return UNKNOWN
        try:
            got = getattr(obj, name)(*args, **kwargs)
        except (TypeError, ValueError, IndexError, KeyError, AttributeError):
            return UNKNOWN
        return got if _known(got) else UNKNOWN

    @staticmethod
    def _list(obj: list[Any], name: str, args: list[Any]) -> Any:
        if len(obj) > _MAX_ITEMS or sum(map(_size, args)) > _MAX_ITEMS:
            return None
        if name == "append" and len(args) == 1:
            obj.append(args[0])
        elif name == "extend" and len(args) == 1 and isinstance(args[0], (list, tuple)):
            obj.extend(args[0])
        elif name == "insert" and len(args) == 2 and isinstance(args[0], int):
            obj.insert(args[0], args[1])
        return None

    @staticmethod
    def _dict(obj: dict[Any, Any], name: str, args: list[Any]) -> Any:
        if name == "get" and args and isinstance(args[0], (str, int)):
            return obj.get(args[0], args[1] if len(args) > 1 else None)
        if name in ("keys", "values", "items") and not args:
            return list(getattr(obj, name)())
        return UNKNOWN

    def call(self, func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if isinstance(func, Builtin):
            return func.fn(args, kwargs)
        if isinstance(func, ExcClass):
            return ExcValue(func.name, args[0] if args else "")
        if isinstance(func, Function):
            return self._call_function(func, args, kwargs)
        return UNKNOWN

    def _call_function(self, func: Function, args: list[Any], kwargs: dict[str, Any]) -> Any:
        node = func.node
        if self.depth >= _MAX_DEPTH:
            raise Budget(f"calls nested more than {_MAX_DEPTH} deep")
        spec = node.args
        params = [*spec.posonlyargs, *spec.args]
        local: dict[str, Any] = {}
        for i, p in enumerate(params):
            if i < len(args):
                local[p.arg] = args[i]
            elif p.arg in kwargs:
                local[p.arg] = kwargs[p.arg]
            else:
                d = i - (len(params) - len(func.defaults))
                local[p.arg] = func.defaults[d] if d >= 0 else UNKNOWN
        for p, d in zip(spec.kwonlyargs, func.kw_defaults, strict=False):
            local[p.arg] = kwargs.get(p.arg, d)
        if spec.vararg is not None:
            local[spec.vararg.arg] = tuple(args[len(params):])
        if spec.kwarg is not None:
            local[spec.kwarg.arg] = {k: v for k, v in kwargs.items()
                                     if k not in {p.arg for p in params}}
        frame = _Frame(func.module, local)
        for stmt in node.body:
            if type(stmt).__name__ == "Global":
                frame.declared_global.update(stmt.names)
        self.depth += 1
        self.running.append(func.module)
        try:
            self._block(node.body, frame)
        except _Return as r:
            return r.value
        except (_Break, _Continue):
            return UNKNOWN
        finally:
            self.depth -= 1
            self.running.pop()
        return None


def _compare_values(op: str, a: Any, b: Any) -> Any:
    try:
        if op == "Eq":
            return a == b
        if op == "NotEq":
            return a != b
        if op == "Lt":
            return a < b
        if op == "LtE":
            return a <= b
        if op == "Gt":
            return a > b
        if op == "GtE":
            return a >= b
        if op == "In":
            return a in b
        if op == "NotIn":
            return a not in b
    except TypeError:
        return UNKNOWN
    return UNKNOWN


