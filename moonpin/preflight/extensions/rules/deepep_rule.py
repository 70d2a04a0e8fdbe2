"""DeepEP's loader rule (:mod:`moonpin.preflight.extensions.seam`), read from its own files.

``import deep_ep`` (``sgl-deep-ep``, or DeepEP built from source) imports its compiled
module plainly: the first import in ``deep_ep/__init__.py`` that names a compiled file
(``deep_ep._C`` in sgl-deep-ep, a top-level ``deep_ep_cpp`` in DeepEP's own builds) is the
build. Before it, sgl-deep-ep's ``__init__`` checks the CUDA major its ``_build_info``
records against ``torch.version.cuda`` and, in its ``prerequisites`` module, that a CUDA
device is usable (``torch.cuda.is_available()``): each raises ``ImportError``. Both are read
here with ``ast`` when the files have them. After the build is loaded, sgl-deep-ep 0.1.2's
``__init__`` runs ``init_jit()``, whose ``find_cuda_home()`` takes ``CUDA_HOME`` or
``CUDA_PATH``, else the folder above ``which nvcc``'s answer, else ``/usr/local/cuda`` when
it exists, and asserts one was found: in an image with no CUDA toolkit and neither variable
set, ``import deep_ep`` raises ``AssertionError``. That function is read the same way (the
variables, the command, the fallback folder, the assertion) when the module-level calls of
``__init__`` reach it.

Before that, the same ``__init__`` runs ``check_nccl_so()``: unless ``EP_SUPPRESS_NCCL_CHECK``
is set to a non-zero number, it asserts that every ``libnccl`` the process has mapped
(``/proc/self/maps``) is one file, and that it has the bytes of the first
``<find_nccl_root()>/lib/libnccl.so*``; ``find_nccl_root`` (``utils/find_pkgs.py``) takes
``EP_NCCL_ROOT_DIR`` or ``NCCL_DIR`` when set, else the folder of the ``libnccl.so`` an
installed ``nvidia-nccl…`` distribution lists, and asserts one is found. Read the same way
(the function that reads ``/proc/self/maps``, the glob's pattern and root function, that
function's variables, distribution names and library name). What the process has mapped
by then: torch's own ``__init__`` loads ``nvidia/nccl/lib/libnccl.so.*`` of its ``sys.path``
by path (its ``_preload_cuda_deps``), which is the file that distribution lists, and ld.so
maps each ``LD_PRELOAD`` entry, then each of ``/etc/ld.so.preload`` (the image's), before
anything, and the code ``site`` runs at every start (a ``.pth`` line's module) may load one
with ``ctypes``: a ``libnccl`` loaded from elsewhere is a
second NCCL (``AssertionError``), as an ``NCCL_DIR`` naming other bytes is. The texts of
that search are read through the spellings that say the same (an f-string, ``+``,
``os.path.join``, a name assigned once, a helper function's ``return``, a tuple or a list,
``os.environ.get``); a function reading ``/proc/self/maps`` whose search is spelled any
other way leaves the import "not judged", never passing.
"""

from __future__ import annotations

import os

from moonpin.preflight.extensions import astread
from moonpin.preflight.extensions.seam import Choice, Pick

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ast
    from typing import Any

    from moonpin.preflight.access.confined import Confined
    from moonpin.preflight.extensions.seam import Facts
    from moonpin.preflight.pyimport.importer import Found

__all__ = ["CHOICES", "DISTRIBUTIONS", "IMAGE_READS", "IMPLICIT", "IMPORT", "pick", "repair"]

IMPORT = "deep_ep"
CHOICES = {"moe-a2a": ("deepep",)}
IMPLICIT = False
DISTRIBUTIONS = ("sgl-deep-ep", "deep-ep")
#: what it reads of an image file beyond the site folders: ``nvcc`` on the PATH (its
#: ``get_cuda_home`` falls back to ``which nvcc``'s folder)
IMAGE_READS = {"tools": ("nvcc",)}


def _read(folder: str, within: Confined) -> dict[str, Any] | None:
    import ast

    init = os.path.join(folder, "__init__.py")
    tree = astread.parse(init, within)
    if tree is None:
        return None
    imports: list[list[Any]] = []  # [absolute module name or "." + relative, line]
    cuda_name = None
    prereq = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imports += [[a.name, node.lineno] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            name = ("." * node.level) + node.module
            imports.append([name, node.lineno])
            for a in node.names:
                if "CUDA_MAJOR" in a.name and node.level:
                    cuda_name = [node.module, a.name]
                elif "prerequisite" in a.name and node.level:
                    prereq = node.module
    imports.sort(key=lambda i: i[1])
    expected = None
    if cuda_name is not None:
        info = astread.parse(os.path.join(folder, cuda_name[0] + ".py"), within)
        for node in getattr(info, "body", []):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id == cuda_name[1]
                    and isinstance(node.value, ast.Constant)):
                expected = node.value.value if isinstance(node.value.value, int) else None
    needs_gpu = False
    if prereq is not None:
        pre = astread.parse(os.path.join(folder, prereq + ".py"), within)
        needs_gpu = pre is not None and any(
            isinstance(n, ast.Call) and astread.attr_path(n.func) == "torch.cuda.is_available"
            for n in ast.walk(pre))
    nccl = _nccl_check(tree, folder, within)
    also = [os.path.join(folder, cuda_name[0] + ".py")] if cuda_name is not None else []
    also += [os.path.join(folder, prereq + ".py")] if prereq is not None else []
    also += [nccl["module"]] if nccl and nccl.get("module") else []
    return {"imports": imports, "expected_cuda": expected, "needs_gpu": needs_gpu,
            "cuda_home": _cuda_home(tree), "nccl": nccl,
            "also": {p: _stamp(p) for p in also}}


def _stamp(path: str) -> list[int] | None:
    """What tells a file read beside ``__init__.py`` changed (the reading is remembered
    under ``__init__.py``'s stamp alone); None: not there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns]


def _reached(tree: ast.Module) -> list[ast.FunctionDef]:
    """The functions of the module its top-level calls reach (through its other
    functions), in the order they are first called."""
    import ast

    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}

    def called(nodes: list[ast.stmt]) -> list[str]:
        out = []
        for stmt in nodes:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            for n in ast.walk(stmt):
                if (isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                        and n.func.id in defs):
                    out.append(n.func.id)
        return out

    todo, seen, out = called(tree.body), set(), []
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        out.append(defs[name])
        todo += called(defs[name].body)
    return out


#: how deep a chain of the finder module's helper functions is followed for one text
_DEPTH = 6


class _Scope:
    """What a text of a function is read in (:func:`_text`): the module's functions (a
    helper's single ``return`` is read through), the names bound to texts (parameters,
    names assigned once), and the names of calls that stand for themselves (the root
    function a glob's pattern starts with: its name between two NULs)."""

    __slots__ = ("defs", "marks", "names")

    def __init__(self, defs: dict[str, Any], names: dict[str, Any],
                 marks: frozenset[str] = frozenset()) -> None:
        self.defs = defs
        self.names = names
        self.marks = marks


def _text(node: ast.AST, scope: _Scope, depth: int = 0) -> Any:
    """The text ``node`` makes (a ``str``, or a ``list`` of them for a tuple or list), from
    constants, f-strings, ``+``, ``os.path.join``, ``.upper()``/``.lower()``, names of
    ``scope`` and its helper functions' returns; None: something else."""
    import ast

    if depth > _DEPTH:
        return None
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.Name):
        return scope.names.get(node.id)
    if isinstance(node, ast.JoinedStr):
        out = ""
        for part in node.values:
            got = (_text(part.value, scope, depth + 1) if isinstance(part, ast.FormattedValue)
                   and part.format_spec is None and part.conversion in (-1, 115)
                   else _text(part, scope, depth + 1))
            if not isinstance(got, str):
                return None
            out += got
        return out
    if isinstance(node, (ast.Tuple, ast.List)):
        elts = [_text(e, scope, depth + 1) for e in node.elts]
        return elts if all(isinstance(e, str) for e in elts) else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _text(node.left, scope, depth + 1), _text(node.right, scope, depth + 1)
        return a + b if a is not None and type(a) is type(b) else None
    if not isinstance(node, ast.Call):
        return None
    func = astread.attr_path(node.func)
    if func in scope.marks:
        return f"\0{func}\0"
    if node.keywords and func in ("os.path.join", "path.join"):
        return None
    args = [_text(a, scope, depth + 1) for a in node.args]
    if func in ("os.path.join", "path.join"):
        return os.path.join(*args) if args and all(isinstance(a, str) for a in args) else None
    if (isinstance(node.func, ast.Attribute) and node.func.attr in ("upper", "lower")
            and not node.args):
        base = _text(node.func.value, scope, depth + 1)
        return getattr(base, node.func.attr)() if isinstance(base, str) else None
    fn = scope.defs.get(func or "")
    if fn is None:
        return None
    bound = _bind(fn, node, scope, depth)
    rets = [n.value for n in ast.walk(fn) if isinstance(n, ast.Return)]
    if bound is None or len(rets) != 1 or rets[0] is None:
        return None
    return _text(rets[0], _Scope(scope.defs, {**bound, **_assigned(
        fn, scope.defs, bound, scope.marks, depth + 1)}, scope.marks), depth + 1)


def _bind(fn: ast.FunctionDef, call: ast.Call, scope: _Scope, depth: int
          ) -> dict[str, Any] | None:
    """``fn``'s parameters bound to the texts ``call`` hands it (its defaults for the rest;
    a value that is no text is left unbound); None: a ``*args`` or ``**kwargs`` call."""
    import ast

    params = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]
    out: dict[str, Any] = {}
    defaults = fn.args.defaults
    for name, default in zip(params[len(params) - len(defaults):], defaults, strict=True):
        out[name] = _text(default, scope, depth + 1)
    for a, value in zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True):
        out[a.arg] = _text(value, scope, depth + 1) if value is not None else None
    if any(isinstance(a, ast.Starred) for a in call.args) or len(call.args) > len(params):
        return None
    for name, arg in zip(params, call.args, strict=False):
        out[name] = _text(arg, scope, depth + 1)
    for k in call.keywords:
        if k.arg is None:
            return None
        out[k.arg] = _text(k.value, scope, depth + 1)
    return {k: v for k, v in out.items() if v is not None}


def _assigned(fn: ast.FunctionDef, defs: dict[str, Any], names: dict[str, Any],
              marks: frozenset[str] = frozenset(), depth: int = 0) -> dict[str, Any]:
    """The names ``fn`` assigns once (``upper = name.upper()``, ``root = find_root()``),
    as texts read in order over ``names`` (``depth``: of the helpers' chain so far)."""
    import ast

    counts: dict[str, int] = {}
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            counts[n.id] = counts.get(n.id, 0) + 1
    out: dict[str, Any] = {}
    for n in ast.walk(fn):
        if (isinstance(n, ast.Assign) and len(n.targets) == 1
                and isinstance(n.targets[0], ast.Name) and counts[n.targets[0].id] == 1
                and n.targets[0].id not in names):
            got = _text(n.value, _Scope(defs, {**names, **out}, marks), depth)
            if got is not None:
                out[n.targets[0].id] = got
    return out


def _module_of(tree: ast.Module, pkg_dir: str, name: str) -> str | None:
    """The file of the package's module ``name`` comes from, as ``tree`` (a module whose
    relative imports are taken from ``pkg_dir``) imports it: ``from .utils.find_pkgs
    import name``, or ``from .utils import find_pkgs`` for ``find_pkgs.name``."""
    import ast

    head, _, tail = name.rpartition(".")
    for n in tree.body:
        if not (isinstance(n, ast.ImportFrom) and n.level):
            continue
        base = pkg_dir
        for _ in range(n.level - 1):
            base = os.path.dirname(base)
        parts = (n.module or "").split(".") if n.module else []
        for a in n.names:
            bound = a.asname or a.name
            if not head and bound == tail:
                return os.path.join(base, *parts) + ".py"
            if head == bound and "." not in head:
                return os.path.join(base, *parts, a.name) + ".py"
    return None


def _nccl_check(tree: ast.Module, folder: str, within: Confined) -> dict[str, Any] | None:
    """The NCCL check ``__init__``'s top-level calls reach (module doc): ``function``,
    ``line``, ``suppress`` (its variables), ``pattern`` (the glob's tail after the root,
    ``/lib/libnccl.so*``), ``root_fn``, and from the finder's module ``env`` (the variables
    naming the root, in order), ``dists`` (the distribution-name parts it matches) and
    ``lib`` (the library name it looks for in their file lists). None: no such check (no
    reached function reads ``/proc/self/maps``); ``{"unread": why}``: one does, spelled
    in a way this reading does not follow (never read as passing)."""
    import ast

    reached = _reached(tree)
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    for fn in reached:
        if not any(isinstance(n, ast.Constant) and n.value == "/proc/self/maps"
                   for n in ast.walk(fn)):
            continue
        where = f"{fn.name}() (__init__.py:{fn.lineno})"
        called = {f for n in ast.walk(tree) if isinstance(n, ast.Call)
                  and (f := astread.attr_path(n.func)) and f not in defs}
        roots = frozenset(f for f in called if _module_of(tree, folder, f) is not None)
        why = f"{where} reads /proc/self/maps, and its library glob is not one this check reads"
        # the glob of the check itself first, then of the functions it calls
        for body in [fn, *(d for d in reached if d is not fn)]:
            names = _assigned(body, defs, {}, roots)
            for call in ast.walk(body):
                if not (isinstance(call, ast.Call) and (astread.attr_path(call.func) or ""
                                                         ).endswith("glob") and call.args):
                    continue
                got = _text(call.args[0], _Scope(defs, names, roots))
                if not (isinstance(got, str) and got.startswith("\0")
                        and got.count("\0") == 2):
                    continue
                root_fn, _, pattern = got[1:].partition("\0")
                found = _finder(tree, folder, root_fn, within)
                if isinstance(found, str):
                    return {"unread": f"{where}: {found}"}
                return {"function": fn.name, "line": fn.lineno, "root_fn": root_fn,
                        "suppress": sorted(astread.env_defaults(fn)),
                        "pattern": pattern if pattern.startswith("/") else "/" + pattern,
                        **found}
        return {"unread": why}
    return None


def _finder(tree: ast.Module, folder: str, name: str, within: Confined
            ) -> dict[str, Any] | str:
    """What ``name`` (imported by ``__init__`` from a module of the package, or a function
    of its own) searches: ``def name(): return find(<package>, lib_name=<library>)`` and,
    in ``find``, the variables named from the package's name (a ``for`` over them tested
    ``in os.environ``, or each read with ``os.environ.get``/``os.getenv``) and the
    distribution-name parts (tested ``in`` a name); the helper functions, ``+`` and
    ``os.path.join`` they are spelled with are read through (:func:`_text`). A ``str``:
    why it is not read."""
    import ast

    path = _module_of(tree, folder, name)
    mod = astread.parse(path, within) if path is not None else tree
    if mod is None:
        return astread.unread(path, within) if path is not None else "no module to read"
    defs = {n.name: n for n in getattr(mod, "body", []) if isinstance(n, ast.FunctionDef)}
    fn = defs.get(name.rpartition(".")[2])
    if fn is None:
        return f"{name}() is not a function this check finds"
    rets = [n.value for n in ast.walk(fn) if isinstance(n, ast.Return)]
    ret = rets[0] if len(rets) == 1 else None
    scope = _Scope(defs, {})
    if (isinstance(ret, ast.Call) and isinstance(ret.func, ast.Name)
            and ret.func.id in defs):  # a wrapper: find(<package>, lib_name=<library>)
        find = defs[ret.func.id]
        values = _bind(find, ret, scope, 0) or {}
        params = [a.arg for a in [*find.args.posonlyargs, *find.args.args]]
        package = values.get(params[0]) if params else None
    else:
        find, values, package = fn, {}, None
    values.update(_assigned(find, defs, values))
    scope = _Scope(defs, values)
    loops: dict[str, list[str]] = {}  # for NAME in <texts> / comprehensions over them
    for n in ast.walk(find):
        target = iter_ = None
        if isinstance(n, (ast.For, ast.comprehension)):
            target, iter_ = n.target, n.iter
        if isinstance(target, ast.Name) and iter_ is not None:
            got = _text(iter_, scope)
            if isinstance(got, list):
                loops[target.id] = got

    def texts(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Name) and node.id in loops:
            return loops[node.id]
        got = _text(node, scope)
        return [got] if isinstance(got, str) else []

    env: list[str] = []
    present = True
    dists: list[str] = []
    libs: list[str] = []
    for n in sorted((n for n in ast.walk(find) if hasattr(n, "lineno")),
                    key=lambda n: (n.lineno, getattr(n, "col_offset", 0))):
        if (isinstance(n, ast.Compare) and len(n.ops) == 1
                and isinstance(n.ops[0], (ast.In, ast.NotIn))):
            if astread.attr_path(n.comparators[0]) in ("os.environ", "environ"):
                env += texts(n.left)
            else:
                for t in texts(n.left):
                    (libs if ".so" in t else dists).append(t)
        elif isinstance(n, ast.Call) and n.args and astread.attr_path(n.func) in (
                "os.environ.get", "os.getenv", "environ.get", "getenv"):
            env += texts(n.args[0])
            present = False
        elif (isinstance(n, ast.Subscript)
              and astread.attr_path(n.value) in ("os.environ", "environ")
              and isinstance(n.ctx, ast.Load)):
            env += texts(n.slice)
    reads_env = any(isinstance(n, (ast.Attribute, ast.Name)) and (astread.attr_path(n) or "")
                    .endswith(("environ", "getenv")) for n in ast.walk(find))
    lib = values.get("lib_name") if isinstance(values.get("lib_name"), str) else None
    lib = lib or (libs[0] if libs else None)
    if not lib or not dists:
        return (f"{name}()'s search for the installed NCCL distribution is not one this "
                "check reads")
    if reads_env and not env:
        return f"{name}() reads the environment in a way this check does not follow"
    if package is None:
        package = dists[0].rpartition("-")[2]
    return {"env": list(dict.fromkeys(env)), "present": present, "dists": dists,
            "lib": lib, "package": package, "module": path}


def _cuda_home(tree: ast.Module) -> dict[str, Any] | None:
    """The function of ``__init__`` the module's own top-level calls reach (through its
    other functions) that asserts a name it took from environment variables, a command's
    answer or a fixed folder is not None (module doc): the variables, the command and
    program (``["which", "nvcc"]``), the folders, the assertion's line. None: no such
    function is reached."""
    import ast

    for fn in _reached(tree):
        name = fn.name
        asserted = [n for n in ast.walk(fn) if isinstance(n, ast.Assert)
                    and isinstance(n.test, ast.Compare) and isinstance(n.test.left, ast.Name)
                    and len(n.test.ops) == 1 and isinstance(n.test.ops[0], ast.IsNot)
                    and isinstance(n.test.comparators[0], ast.Constant)
                    and n.test.comparators[0].value is None]
        env = list(astread.env_defaults(fn))
        if not asserted or not env:
            continue
        which = next(([e.value for e in n.elts  # type: ignore[attr-defined]
                       ] for n in ast.walk(fn)
                      if isinstance(n, ast.List) and len(n.elts) == 2
                      and all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                              for e in n.elts)), None)
        folders = [n.value for n in ast.walk(fn) if isinstance(n, ast.Constant)
                   and isinstance(n.value, str) and n.value.startswith("/")]
        return {"env": env, "which": which, "folders": folders, "function": name,
                "line": asserted[0].lineno}
    return None


def _on_path(facts: Facts, program: str) -> str | None:
    """Where ``program`` is on the worker's ``PATH`` (a path of the image), as ``execvp``
    finds it; None: not there."""
    from moonpin.preflight.access.chroot import host_path

    path = facts.env.get("PATH") or os.defpath
    for folder in path.split(os.pathsep):
        if not folder.startswith("/"):
            continue
        cand = os.path.join(folder, program)
        host = host_path(facts.within.root, cand)
        if host is not None and os.path.isfile(host) and os.access(host, os.X_OK):
            return cand
    return None


def _no_cuda_home(facts: Facts, home: dict[str, Any]) -> str | None:
    """What ``find_cuda_home`` raises in this worker (None: it finds a CUDA home)."""
    from moonpin.preflight.access.chroot import host_path

    if any(facts.env.get(v) for v in home["env"]):
        return None
    which = home["which"]
    if which and _on_path(facts, which[0]) and _on_path(facts, which[1]):
        return None
    for folder in home["folders"]:
        host = host_path(facts.within.root, folder)
        if host is not None and os.path.exists(host):
            return None
    said = " nor ".join(home["env"])
    return (f"AssertionError (deep_ep's {home['function']}() finds no CUDA home: neither "
            f"{said} is set" + (f", `{' '.join(which)}` finds none" if which else "")
            + (f" and {', '.join(home['folders'])} is not there" if home["folders"] else "")
            + f"; __init__.py:{home['line']})")


def _nccl_files(facts: Facts, nccl: dict[str, Any], site: str
                ) -> tuple[str | None, str | None]:
    """(the root ``find_nccl_root`` names, as the worker sees it; the folder of the library
    an installed ``nvidia-nccl…`` distribution lists, a host path): the first from a
    variable when one is set (presence, as ``in os.environ`` tests), else the second. The
    distributions are looked for, as ``importlib.metadata.distributions()`` lists them, in
    the site folders of the installed ones (``site``: deep_ep's first): their names are
    not among those the check reads metadata of."""
    from moonpin.preflight.installed.image_facts import record_paths

    listed = None
    wanted = [d.replace("-", "_").lower() for d in nccl["dists"]]
    for root in dict.fromkeys([site, *(d.root for d in facts.dists.values())]):
        try:
            metas = sorted(n for n in os.listdir(root) if n.endswith(".dist-info")
                           and any(n.lower().replace("-", "_").startswith(w)
                                   for w in wanted))
        except OSError:
            continue
        for meta in metas:
            try:
                rel = next((p.strip('"') for p in record_paths(os.path.join(root, meta),
                                                               within=facts.within)
                            if nccl["lib"] in p), None)
            except OSError:
                continue
            if rel is not None:
                lib = os.path.dirname(os.path.normpath(os.path.join(root, rel)))
                listed = os.path.dirname(lib) if os.path.basename(lib) == "lib" else lib
        if listed is not None:
            break
    for var in nccl["env"]:
        if _set(facts, nccl, var):
            return facts.env[var], listed
    return listed, listed


def _set(facts: Facts, nccl: dict[str, Any], var: str) -> bool:
    """Whether the finder takes ``var``: set (``in os.environ``), or set and not empty
    (read with ``os.environ.get``)."""
    return var in facts.env if nccl.get("present", True) else bool(facts.env.get(var))


def _same_bytes(a: str, b: str) -> bool:
    """``filecmp.cmp(a, b, shallow=False)``: the same file, or the same size and bytes."""
    try:
        sa, sb = os.stat(a), os.stat(b)
        if (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino):
            return True
        if sa.st_size != sb.st_size:
            return False
        with open(a, "rb") as fa, open(b, "rb") as fb:
            while True:
                x, y = fa.read(1 << 20), fb.read(1 << 20)
                if x != y:
                    return False
                if not x:
                    return True
    except OSError:
        return False


def _nccl_raises(facts: Facts, nccl: dict[str, Any], site: str) -> tuple[str, str] | None:
    """What deep_ep's NCCL check raises in this worker, with the fix (None: it passes)."""
    from moonpin.preflight.access.chroot import host_path

    where = f"deep_ep's {nccl['function']}(), __init__.py:{nccl['line']}"
    for var in nccl["suppress"]:
        value = facts.env.get(var)
        if value is None:
            continue
        try:  # int(os.environ.get(var, 0)), as the check reads it
            if int(value):
                return None
        except ValueError:
            return (f"ValueError: invalid literal for int() with base 10: {value!r} ({where}: "
                    f"{var} is set to it)", f"set {var} to 1 or 0, or unset it")
    off = f", or set {nccl['suppress'][0]}=1 to skip that check" if nccl["suppress"] else ""
    root, listed = _nccl_files(facts, nccl, site)
    if root is None:
        return (f"AssertionError: Cannot find package: {nccl['package']} ({where}: "
                f"{nccl['root_fn']}() finds no installed nvidia-{nccl['package']} "
                f"distribution listing {nccl['lib']})",
                f"install the nvidia-{nccl['package']} distribution the installed torch "
                f"requires (its METADATA names it){off}")
    tail = nccl["pattern"].lstrip("/")
    folder, _, stem = tail.rpartition("/")
    stem = stem.rstrip("*")
    host = host_path(facts.within.root, root) if root != listed else root
    lib_dir = os.path.join(host, folder) if host is not None else None
    try:
        names = sorted(n for n in os.listdir(lib_dir) if n.startswith(stem)) \
            if lib_dir is not None else []
    except OSError:
        names = []
    set_by = next((v for v in nccl["env"] if _set(facts, nccl, v)), None)
    if not names:
        return (f"AssertionError: No {stem} found in {root}/{folder}/ ({where}"
                + (f": {set_by} is set" if set_by else "") + ")",
                (f"unset {set_by} in the worker's environment, or point it at the NCCL "
                 f"torch loads{off}" if set_by else
                 f"reinstall the nvidia-{nccl['package']} distribution{off}"))
    assert lib_dir is not None
    linked = os.path.join(lib_dir, names[0])
    for entry, mapped, by, undo in _preloads(facts):
        if mapped is None or not os.path.isfile(mapped):
            continue  # ld.so ignores an entry it cannot load
        if not os.path.basename(os.path.realpath(mapped)).startswith(stem):
            continue  # /proc/self/maps names the file itself
        if os.path.realpath(mapped) != os.path.realpath(linked):
            return (f"AssertionError: Duplicate NCCL runtime, or Invalid NCCL versions "
                    f"({where}: {by} maps {entry} before torch loads its own "
                    f"{nccl['lib']}, and {root}/{folder}/{names[0]} is the one "
                    f"{nccl['root_fn']}() names)", f"remove {entry} from {undo}{off}")
    if set_by and listed is not None:
        torch_lib = os.path.join(listed, folder)
        try:
            own = sorted(n for n in os.listdir(torch_lib) if n.startswith(stem))
        except OSError:
            own = []
        if own and not _same_bytes(os.path.join(torch_lib, own[0]), linked):
            return (f"AssertionError: Invalid NCCL versions ({where}: {set_by}={root} "
                    f"names {names[0]} of other bytes than the {own[0]} torch loads from "
                    f"{torch_lib})",
                    f"unset {set_by} in the worker's environment, or point it at the NCCL "
                    f"torch loads{off}")
    return None


def _preloads(facts: Facts) -> list[tuple[str, str | None, str, str]]:
    """What ld.so maps before the interpreter's own needs, in its order: ``LD_PRELOAD``'s
    entries in the worker's environment, then ``/etc/ld.so.preload``'s (the image's under
    its root), each read by :func:`moonpin.preflight.loader.ldso.preload_entries` (the one
    reading of both: separators, tokens, image paths), then what the code ``site`` runs at
    every start loads with ``ctypes`` (:attr:`~moonpin.preflight.extensions.seam.Facts.
    started`): as (the entry as the worker wrote it, the file it names here or None for a
    name ld.so searches, who maps it, where the fix removes it from)."""
    from moonpin.preflight.access.chroot import host_paths, image_path
    from moonpin.preflight.loader import ldso

    root = facts.within.root
    exe = None  # $ORIGIN's executable: the interpreter's real path (the image's)
    if facts.python is not None:
        got = host_paths(root, [facts.python]) if root is not None \
            else [os.path.realpath(facts.python)]
        exe = (image_path(root, got[0]) if root is not None else got[0]) if got else None
    out: list[tuple[str, str | None, str, str]] = [
        (p.written, p.path if "/" in p.path else None, "LD_PRELOAD",
         "LD_PRELOAD in the worker's environment")
        for p in ldso.preload_entries(facts.env.get("LD_PRELOAD") or "", exe, root)]
    listed = f"{ldso.PRELOAD_FILE} in the image" if root is not None else ldso.PRELOAD_FILE
    out += [(p.written, p.path if "/" in p.path else None, ldso.PRELOAD_FILE, listed)
            for p in ldso.preload_file(root, exe, reader=facts.user)]
    if facts.started is not None:  # then the code site runs at start, before any import
        from moonpin.preflight.access.chroot import host_path

        out += [(path, host_path(root, path),
                 f"{module} (imported at every start by {pth or 'sitecustomize'})",
                 f"what {module} loads at start (take `import {module}` out of {pth})" if pth
                 else f"what sitecustomize loads at start ({module})")
                for path, module, pth in facts.started()]
    return out


def pick(facts: Facts, found: Found) -> Pick:
    got = astread.reading("deep-ep-v4", os.path.join(found.folder, "__init__.py"),
                          lambda: _read(found.folder, facts.within), facts.within)
    if got is not None and any(_stamp(p) != was for p, was in got.get("also", {}).items()):
        got = _read(found.folder, facts.within)  # a module it read changed: read afresh
    if got is None:
        return Pick(unread=astread.unread(os.path.join(found.folder, "__init__.py"),
                                          facts.within))
    notes: list[str] = []
    expected = got["expected_cuda"]
    if expected is not None:
        notes.append(f"built for CUDA {expected} (its _build_info)")
        if facts.cuda is None:
            return Pick([Choice(raises="ImportError: The installed PyTorch build does not "
                                "provide CUDA")], notes=notes)
        if facts.cuda != expected:
            return Pick([Choice(raises=f"ImportError: This wheel requires CUDA {expected}, "
                                f"but PyTorch uses CUDA {facts.cuda}")], notes=notes)
    if got["needs_gpu"]:
        if not facts.gpu_present:
            return Pick([Choice(raises="ImportError: The NVIDIA driver does not expose a "
                                "usable CUDA device")], notes=[*notes, facts.gpu_said],
                        fix="its import needs a usable GPU: run the check where the worker "
                        "runs, or say the GPU with --gpu-capability (e.g. 9.0)")
        notes.append(f"its import needs a usable GPU: assumed ({facts.gpu_said})")
    for name, _line in got["imports"]:
        if name.startswith("."):
            path = facts.module_file(found.folder, name.lstrip(".").replace(".", "/"))
        elif name.startswith(IMPORT + "."):
            path = facts.module_file(found.folder, name[len(IMPORT) + 1:].replace(".", "/"))
        else:
            top = facts.find(name.split(".")[0]) if name.split(".")[0] != "torch" else None
            path = top.folder if top is not None and top.module else None
        if path is not None and any(path.endswith(s) for s in facts.suffixes
                                    if s not in (".py", ".pyc")):
            notes.append(f"imports {os.path.basename(path)}")
            nccl = got.get("nccl")
            if nccl and "unread" in nccl:
                return Pick(unread=f"deep_ep's NCCL check, {nccl['unread']}: what it "
                            "asserts in this worker is not known", notes=notes)
            wrong = _nccl_raises(facts, nccl, os.path.dirname(found.folder)) \
                if nccl else None
            if wrong is not None:
                return Pick([Choice(raises=wrong[0])], notes=notes, fix=wrong[1])
            home = got.get("cuda_home")
            raised = _no_cuda_home(facts, home) if home else None
            if raised is not None and home is not None:
                return Pick([Choice(raises=raised)], notes=notes,
                            fix=f"set {home['env'][0]} to the image's CUDA toolkit folder "
                            f"in the worker's environment (a Dockerfile's `ENV "
                            f"{home['env'][0]}=/usr/local/cuda` with a toolkit there), or "
                            f"put {(home['which'] or ['', 'nvcc'])[1]} on its PATH: "
                            f"deep_ep's {home['function']}() asserts one at import and its "
                            "JIT compiles kernels with it")
            return Pick([Choice([path])], notes=notes)
    return Pick(unread=f"{found.folder}/__init__.py imports no compiled module this check "
                "finds", notes=notes)


def repair(facts: Facts, pick: Pick, choice: Choice) -> str | None:
    dist = next((d for d in DISTRIBUTIONS if d in facts.dists), None)
    own = facts.pin(dist, "torch") if dist else None
    if dist and own and own != facts.torch_release():
        return (f"pip install 'torch=={own}' ({dist} {facts.dists[dist].version} pins it: "
                "its build binds that torch's C++ symbols)")
    pin = facts.pin("sglang", dist) if dist else None
    if dist and pin:
        return f"pip install --force-reinstall '{dist}=={pin}' (the installed SGLang's pin)"
    return None
