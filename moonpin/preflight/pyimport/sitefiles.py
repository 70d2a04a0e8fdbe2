"""The files of a site folder that shape a target's importer, read without running any of
them: ``.pth`` files (``site.addpackage``), the editable finders their ``import`` lines
install (setuptools, hatchling's ``editables``, scikit-build-core), and the
``pkgutil.extend_path`` call of a package's ``__init__.py``.

Each is read once per version of the file (the file-facts memo,
:func:`moonpin.kb.cache.facts_memo`); ``ast`` is loaded only when a finder or an
``__init__.py`` naming ``extend_path`` has to be parsed. Only ``os`` at import: this is on
the worker-start path (:mod:`moonpin.preflight.pyimport.metapath` uses it).
"""

from __future__ import annotations

import os

from moonpin.kb.cache import facts_memo
from moonpin.kb.files import endless
from moonpin.preflight.access.chroot import host_path
from moonpin.preflight.access.confined import NOWHERE, Confined

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

__all__ = ["custom_edits", "extends_path", "finder_facts", "finder_kind", "interpreter_stops",
           "line_fails", "path_edits", "pth", "pth_files", "pth_lines", "pth_paths",
           "site_dirs", "startup_imports", "unread_pth"]

_CAP_PTH = 1 << 20
_CAP_FINDER = 16 << 20
_CAP_INIT = 16 << 20


def site_dirs(paths: Sequence[str]) -> list[str]:
    """The folders of ``paths`` whose ``.pth`` files ``site`` processes (site-packages and
    Debian's dist-packages)."""
    return [p for p in paths
            if os.path.basename(os.path.normpath(p)) in ("site-packages", "dist-packages")]


#: ``pth_files`` of each folder as listed at its mtime (a folder's .pth files are asked for
#: by the path lines and by the path edits in one start: listed once)
_PTH_FILES: dict[tuple[str, int, str | None], list[str]] = {}


def pth_files(site: str, within: Confined = NOWHERE) -> list[str]:
    """The ``.pth`` files ``site`` processes in ``site``, in its order (a name with a
    leading dot only for an interpreter released before :func:`_skips_hidden`'s fix)."""
    try:
        key = (site, os.stat(site).st_mtime_ns, within.root)
        got = _PTH_FILES.get(key)
        if got is not None:
            return list(got)
        names = sorted(e.name for e in os.scandir(site) if e.name.endswith(".pth"))
    except (OSError, ValueError):
        return []
    if any(n.startswith(".") for n in names) and _skips_hidden(site, within):
        names = [n for n in names if not n.startswith(".")]
    got = _PTH_FILES[key] = [os.path.join(site, n) for n in names]
    return list(got)


#: The first release of each line whose ``site`` skips ``.pth`` files named with a leading
#: dot (gh-113659, a security fix backported down to 3.8).
_HIDDEN_SKIPPED = {(3, 8): 19, (3, 9): 19, (3, 10): 14, (3, 11): 8, (3, 12): 2}


def _skips_hidden(site: str, within: Confined) -> bool:
    """Whether the interpreter of ``site`` skips hidden ``.pth`` files: its release read
    from the virtualenv's ``pyvenv.cfg`` (``<venv>/lib/pythonX.Y/site-packages``); without
    one, a current release is assumed (it does)."""
    cfg = os.path.normpath(os.path.join(site, "..", "..", "..", "pyvenv.cfg"))
    try:
        text = within.read(cfg, cap=64 << 10, what="pyvenv.cfg").decode("utf-8", "replace")
    except OSError:
        return True
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip().lower() not in ("version", "version_info"):
            continue
        parts = value.strip().split(".")
        try:
            major, minor, micro = int(parts[0]), int(parts[1]), int(parts[2])
        except (ValueError, IndexError):
            return True
        first = _HIDDEN_SKIPPED.get((major, minor))
        return (major, minor) >= (3, 13) or (first is not None and micro >= first)
    return True


def _split_lines(text: str) -> list[str]:
    """The lines ``site`` iterates (a text file's universal newlines: ``\\n``, ``\\r\\n``,
    ``\\r``; not ``str.splitlines``' form feeds and separators)."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _read_pth(path: str, within: Confined) -> tuple[list[str], list[str], list[list[Any]]]:
    """A ``.pth`` file's path lines (as written), the modules its ``import`` lines import,
    and its lines in order as ``["path", line]`` or ``["import", [module, ...],
    [module whose .install() the line calls, ...]]`` (``site.addpackage``: a line starting
    with ``#`` and a blank line are skipped)."""
    text = within.read(path, cap=_CAP_PTH, what=".pth file").decode("utf-8", "replace")
    lines: list[str] = []
    imports: list[str] = []
    order: list[list[Any]] = []
    for line in _split_lines(text):
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith(("import ", "import\t")):
            mods: list[str] = []
            installs: list[str] = []
            for stmt in line.split(";"):
                stmt = stmt.strip()
                if stmt.startswith(("import ", "import\t")):
                    mods.extend(m.strip() for m in stmt[7:].split(",") if m.strip())
                elif stmt.endswith(".install()"):
                    installs.append(stmt[:-len(".install()")].strip())
            imports.extend(mods)
            order.append(["import", mods, installs, _edits(line), *_line_facts(line)])
            continue
        lines.append(line.rstrip())
        order.append(["path", line.rstrip()])
    return lines, imports, order


def _pth_shape(v: Any) -> bool:
    return (isinstance(v, tuple) and len(v) == 3
            and all(isinstance(x, list) and all(isinstance(s, str) for s in x) for x in v[:2])
            and isinstance(v[2], list) and all(isinstance(e, list) and e for e in v[2]))


def pth_lines(path: str, within: Confined = NOWHERE) -> list[list[Any]]:
    """The lines of a ``.pth`` file in order (see :func:`_read_pth`); [] when unreadable."""
    try:
        return list(facts_memo().get("pth-v5", path, lambda: _read_pth(path, within),
                                     _pth_shape, within=within.root)[2])
    except OSError:
        return []


def pth(path: str, within: Confined = NOWHERE) -> tuple[list[str], list[str]]:
    """A ``.pth`` file's path lines and the modules its ``import`` lines import."""
    try:
        got = facts_memo().get("pth-v5", path, lambda: _read_pth(path, within), _pth_shape,
                               within=within.root)
    except OSError:
        return [], []
    return got[0], got[1]


def finder_kind(module: str) -> str | None:
    """The editable installer whose ``.pth`` ``import`` line imports ``module``."""
    if module.startswith("__editable___") and module.endswith("_finder"):
        return "setuptools"
    if module.startswith("_editable_impl_"):
        return "hatch"
    if module.startswith("_editable_skbc_"):
        return "scikit-build-core"
    if module.startswith("_") and module.endswith("_editable_loader"):
        return "meson-python"
    return None


def _line_facts(line: str) -> list[Any]:
    """An ``import`` line's top-level modules it certainly imports, whether it certainly
    raises (:func:`moonpin.readers.pyast.imports.certain_imports`), and what it certainly runs
    that ends the interpreter (:func:`moonpin.preflight.pyimport.startup.line_exit`)."""
    if "import" not in line and "raise" not in line:
        return [[], False, None]
    from moonpin.preflight.pyimport.startup import line_exit
    from moonpin.readers.pyast.imports import certain_imports

    imports, error = certain_imports(line.encode("utf-8", "replace"), "<.pth line>",
                                     check_compile=False)
    tops = sorted({i.module.partition(".")[0] for i in imports
                   if i.level == 0 and i.module and not i.guard})
    return [tops, error is not None, line_exit(line)]


def line_fails(entry: Sequence[Any], site: str, search: Sequence[str] = ()) -> bool:
    """Whether a ``.pth`` ``import`` line certainly raises when ``site`` runs it: a
    ``raise`` it reaches, or a module it imports that is neither the standard library's
    nor in ``site`` or ``search`` (``site`` then ignores the rest of the file)."""
    import sys

    if len(entry) < 6 or not isinstance(entry[4], list):
        return False
    if entry[5] is True:
        return True
    from importlib import machinery

    std = set(getattr(sys, "stdlib_module_names", ())) | set(sys.builtin_module_names)
    suffixes = (".py", ".pyc", *machinery.EXTENSION_SUFFIXES)
    dirs = [site, *search]
    for top in entry[4]:
        if not isinstance(top, str) or top in std:
            continue
        if not any(os.path.isdir(os.path.join(d, top)) or any(
                os.path.isfile(os.path.join(d, top + s)) for s in suffixes) for d in dirs):
            return True
    return False


def pth_paths(site: str, root: str | None = None, search: Sequence[str] = (),
              within: Confined = NOWHERE) -> list[str]:
    """The folders the ``.pth`` path lines of ``site`` add to ``sys.path``, in order
    (``root``: the lines are the image's paths, resolved under it). A file's lines after
    an ``import`` line that certainly raises (a missing module: ``search`` holds the other
    folders it may come from; an editable finder that cannot be imported) are not read
    (``site`` ignores the remainder of a file after a failing line)."""
    out: list[str] = []
    for f in pth_files(site, within):
        for entry in pth_lines(f, within):
            if entry[0] == "import":
                if any(finder_kind(m) is not None and not os.path.isfile(
                        os.path.join(site, m + ".py")) for m in entry[1]) or (
                        root is None and line_fails(entry, site, [*search, *out])):
                    break  # ModuleNotFoundError: "Remainder of file ignored"
                continue
            d = host_path(root, entry[1], site)
            if d is not None and os.path.isdir(d) and d not in out:
                out.append(d)
    return out


def startup_imports(sites: Sequence[str], within: Confined = NOWHERE,
                    customize: Sequence[str] = ("sitecustomize",)) -> list[tuple[str, str]]:
    """What ``site`` imports at every start of the interpreter, in order, as (module, the
    ``.pth`` file whose ``import`` line imports it, or ``""``): each ``.pth`` line's modules
    that are not the standard library's (a file's lines after one that certainly raises are
    not run), then ``customize``: ``sitecustomize``, and ``usercustomize`` when ``site``
    enables the user's site folder (Lib/site.py ``main``: ``execsitecustomize``, then
    ``execusercustomize``; the target says which: ``Target.customize``). Their code runs
    in the worker's process before any program: a library it loads with ``ctypes`` is there when the
    extensions load."""
    import sys

    std = set(getattr(sys, "stdlib_module_names", ())) | set(sys.builtin_module_names)
    out: list[tuple[str, str]] = []
    done: list[str] = []
    for site in sites:
        for f in pth_files(site, within):
            for entry in pth_lines(f, within):
                if entry[0] != "import":
                    continue
                tops = entry[4] if len(entry) > 4 and isinstance(entry[4], list) else \
                    [m.partition(".")[0] for m in entry[1]]
                out.extend((m, f) for m in tops if isinstance(m, str) and m not in std
                           and finder_kind(m) is None and all(m != o for o, _ in out))
                if line_fails(entry, site, done):
                    break
        done.append(os.path.abspath(site))
    return [*out, *((m, "") for m in customize)]


def interpreter_stops(sites: Sequence[str], within: Confined = NOWHERE
                      ) -> tuple[str, str] | None:
    """(why, fix) when ``site``, adding the folders ``sites`` in order, reaches a line that
    ends the interpreter (a file's lines after one that raises an ``Exception`` are not run:
    "Remainder of file ignored") or a ``.pth`` whose read never ends (a FIFO, ``/dev/zero``);
    None otherwise."""
    done: list[str] = []
    for site in sites:
        for f in pth_files(site, within):
            lines = pth_lines(f, within)
            if not lines:  # empty, or not read: site blocks on a FIFO, reads /dev/zero on
                never = endless(f)
                if never is not None:
                    import shlex

                    return (f"{f} is {never}: `site` reads every .pth file at every start, "
                            "so the interpreter never gets to run a program, the worker's "
                            "included", f"rm {shlex.quote(f)}")
            for entry in lines:
                if entry[0] != "import":
                    continue
                stop: Any = entry[6] if len(entry) > 6 else None
                if isinstance(stop, str):
                    return (f"{f} runs `{stop}` while `site` starts the interpreter (every "
                            ".pth import line runs at every start): the interpreter ends "
                            "before any program, the worker's included",
                            f"remove that line from {f}")
                if line_fails(entry, site, done):
                    break
        done.append(os.path.abspath(site))
    return None


def unread_pth(sites: Sequence[str], within: Confined = NOWHERE) -> list[str]:
    """What this check cannot read of the ``.pth`` files ``site`` processes in ``sites``
    (one that ends, so the interpreter starts: :func:`interpreter_stops` says the others),
    a line each naming the file: larger than the size read (a 2 GiB file, 10^5 lines):
    the folders it adds to ``sys.path`` and the code its ``import`` lines run at every
    start are not known here, so what the check finds may not be what the worker imports.
    Only a file that gave no lines is asked again (a stat)."""
    out: list[str] = []
    for site in sites:
        for f in pth_files(site, within):
            if pth_lines(f, within) or endless(f) is not None:
                continue
            try:
                size = os.stat(f).st_size
            except OSError:
                continue
            if size > _CAP_PTH and not within.outside(f):
                out.append(f"{f} is {size:,} bytes, over the {_CAP_PTH >> 20} MiB this check "
                           "reads of a .pth file: the folders it adds to sys.path and the "
                           "code it runs at every start are not known, so what this check "
                           "finds may not be what the worker imports")
    return out


# ------------------------------------------------------------------ sys.path edits


def path_edits(site: str, search: Sequence[str] = (), within: Confined = NOWHERE
               ) -> list[tuple[str, str]]:
    """How the ``.pth`` ``import`` lines ``site`` runs from folder ``site`` edit ``sys.path``,
    in order (``import sys; sys.path.insert(0, '/opt/x')``). Each edit is ``("front",
    folder)`` (an ``insert`` anywhere before the site folders, ``sys.path[:0] = [...]``) or
    ``("back", folder)`` (``append``, ``extend``, ``site.addsitedir``); read with ``ast``,
    never run; only absolute folders written as literals (or ``os.path.join`` of literals) at
    the top level are followed (image paths under a root: the caller resolves them). A line
    after one that raises is not read: ``site`` ignores the rest of its file (``search``: the
    other folders a module it imports may come from)."""
    out: list[tuple[str, str]] = []
    for f in pth_files(site, within):
        for entry in pth_lines(f, within):
            if entry[0] == "import" and len(entry) > 3:
                fails = line_fails(entry, site, search)
                if not fails or (len(entry) > 5 and entry[5] is True):  # up to its raise
                    out += [(str(op), str(d)) for op, d in entry[3]]
                if fails:
                    break
    return out


def custom_edits(folder: str, within: Confined = NOWHERE) -> list[tuple[str, str]]:
    """The ``sys.path`` edits of the ``sitecustomize.py`` in ``folder`` (none there: none),
    as :func:`path_edits` says them; ``import sitecustomize`` runs after every site folder
    was added, and takes the first on ``sys.path``."""
    file = os.path.join(folder, "sitecustomize.py")
    if not os.path.isfile(file):
        return []
    try:
        got = facts_memo().get("sitecustomize-v1", file,
                               lambda: _custom_edits(file, within),
                               lambda v: isinstance(v, list), within=within.root)
    except OSError:
        return []
    return [(str(op), str(d)) for op, d in got if isinstance(d, str)]


def _custom_edits(path: str, within: Confined) -> list[list[str]]:
    text = within.read(path, cap=_CAP_INIT, what="sitecustomize.py")
    return _edits(text.decode("utf-8", "replace"))


def _edits(source: str) -> list[list[str]]:
    """:func:`path_edits` of one source (a ``.pth`` line or a ``sitecustomize.py``)."""
    if "sys" not in source and "addsitedir" not in source:
        return []
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    out: list[list[str]] = []
    for node in tree.body:
        if isinstance(node, ast.Raise):
            break  # what follows never runs
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            t = node.targets[0]
            if (isinstance(t, ast.Subscript) and _is_sys_path(t.value, ast)
                    and isinstance(t.slice, ast.Slice) and t.slice.lower is None
                    and isinstance(t.slice.upper, ast.Constant) and t.slice.upper.value == 0):
                out += [["front", d] for d in reversed(_folders(node.value, ast))]
            continue
        if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
            continue
        call = node.value
        f = call.func
        if not isinstance(f, ast.Attribute) or call.keywords:
            continue
        if _is_sys_path(f.value, ast):
            if f.attr == "insert" and len(call.args) == 2:
                out += [["front", d] for d in _folders(call.args[1], ast)[:1]]
            elif f.attr == "append" and len(call.args) == 1:
                out += [["back", d] for d in _folders(call.args[0], ast)[:1]]
            elif f.attr == "extend" and len(call.args) == 1:
                out += [["back", d] for d in _folders(call.args[0], ast)]
        elif (f.attr == "addsitedir" and isinstance(f.value, ast.Name) and f.value.id == "site"
              and len(call.args) == 1):
            out += [["back", d] for d in _folders(call.args[0], ast)[:1]]
    return out


def _is_sys_path(node: Any, ast: Any) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "path"
            and isinstance(node.value, ast.Name) and node.value.id == "sys")


def _folders(node: Any, ast: Any) -> list[str]:
    """The absolute folders an expression names: a string literal, ``os.path.join`` of
    literals, or a list or tuple of those (anything else: none)."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return [d for e in node.elts for d in _folders(e, ast)[:1]]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        value = node.value
    elif (isinstance(node, ast.Call) and not node.keywords and node.args
          and isinstance(node.func, ast.Attribute) and node.func.attr == "join"
          and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "path"
          and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args)):
        value = os.path.join(*(a.value for a in node.args))
    else:
        return []
    return [os.path.normpath(value)] if value.startswith("/") and "\0" not in value else []


# ------------------------------------------------------------------ editable finders


def _literal(node: Any, ast: Any) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return None


def _str_map(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def _list_map(value: Any) -> dict[str, list[str]]:
    if not isinstance(value, dict):
        return {}
    return {k: [s for s in v if isinstance(s, str)] for k, v in value.items()
            if isinstance(k, str) and isinstance(v, (list, tuple))}


def _strs(value: Any) -> list[str]:
    return [s for s in value if isinstance(s, str)] if isinstance(value, (list, tuple)) else []


def _placeholder(node: Any, ast: Any) -> str | None:
    """setuptools' ``PATH_PLACEHOLDER = 'NAME' + ".__path_hook__"``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _placeholder(node.left, ast), _placeholder(node.right, ast)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


_SKBC = ("known_source_files", "known_wheel_files", "known_directories", "known_packages")


def _call_args(node: Any, names: Sequence[str], ast: Any) -> dict[str, Any]:
    """The literal arguments of a call, by parameter name (positional then keywords)."""
    out: dict[str, Any] = {}
    for name, arg in zip(names, node.args, strict=False):
        out[name] = _literal(arg, ast)
    for kw in node.keywords:
        if kw.arg in names:
            out[kw.arg] = _literal(kw.value, ast)
    return out


def _read_finder(path: str, within: Confined) -> dict[str, Any]:
    """What an editable finder module installs when imported, read with ``ast`` (never
    executed): setuptools' ``MAPPING``, ``NAMESPACES`` and ``PATH_PLACEHOLDER``
    (setuptools/command/editable_wheel.py, ``_FINDER_TEMPLATE``); hatchling's
    ``F.map_module(name, path)`` calls (``editables``' bootstrap file); scikit-build-core's
    module-level ``install(known_source_files, known_wheel_files, known_directories,
    known_packages, ...)`` or ``install_inplace(known_packages, search_paths, ...)``
    (``resources/_editable_redirect.py``, 1.x); meson-python's ``MesonpyMetaFinder``
    (:func:`_mesonpy`). Unparsable: an empty record (the import
    fails, so nothing is installed)."""
    import ast

    out: dict[str, Any] = {"mapping": {}, "namespaces": {}, "placeholder": None,
                           "redirects": [], "skbc": None, "mesonpy": None}
    try:
        tree = ast.parse(within.read(path, cap=_CAP_FINDER, what="editable finder"))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        out["broken"] = True
        return out
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "init":
            for sub in ast.walk(node):  # meson-python: init() inserts MesonpyMetaFinder(...)
                if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and \
                        sub.func.id == "MesonpyMetaFinder":
                    out["mesonpy"] = _mesonpy(sub, ast)
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if not isinstance(target, ast.Name) or node.value is None:
                continue
            if target.id == "MAPPING":
                out["mapping"] = _str_map(_literal(node.value, ast))
            elif target.id == "NAMESPACES":
                out["namespaces"] = _list_map(_literal(node.value, ast))
            elif target.id == "PATH_PLACEHOLDER":
                out["placeholder"] = _placeholder(node.value, ast)
            continue
        call = node.value if isinstance(node, ast.Expr) else None
        if not isinstance(call, ast.Call):
            continue
        func = call.func
        if isinstance(func, ast.Name) and func.id == "install" and call.args and \
                isinstance(call.args[0], ast.Set):
            out["mesonpy"] = _mesonpy(call, ast)  # meson-python before 0.16
        elif isinstance(func, ast.Name) and func.id == "install" and call.args:
            got = _call_args(call, _SKBC, ast)
            out["skbc"] = {"mode": "redirect",
                           "source_files": _str_map(got.get("known_source_files")),
                           "wheel_files": _str_map(got.get("known_wheel_files")),
                           "directories": _list_map(got.get("known_directories")),
                           "packages": _strs(got.get("known_packages")),
                           "search_paths": []}
        elif isinstance(func, ast.Name) and func.id == "install_inplace" and call.args:
            got = _call_args(call, ("known_packages", "search_paths"), ast)
            out["skbc"] = {"mode": "inplace", "source_files": {}, "wheel_files": {},
                           "directories": {}, "packages": _strs(got.get("known_packages")),
                           "search_paths": _strs(got.get("search_paths"))}
        elif (isinstance(func, ast.Attribute) and func.attr == "map_module"
              and len(call.args) == 2 and all(isinstance(a, ast.Constant)
                                              and isinstance(a.value, str) for a in call.args)):
            out["redirects"].append([call.args[0].value,  # type: ignore[attr-defined]
                                     call.args[1].value])  # type: ignore[attr-defined]
    return out


def _mesonpy(call: Any, ast: Any) -> dict[str, Any] | None:
    """meson-python's finder arguments: ``(package, {top-level names}, build folder,
    build command, verbose)`` (``({names}, folder, command, verbose)`` before 0.16): the
    names and the build folder, whose ``meson-info/intro-install_plan.json`` maps them."""
    args = [_literal(a, ast) for a in call.args]
    at = next((i for i, a in enumerate(args) if isinstance(a, (set, frozenset))), None)
    if at is None or at + 1 >= len(args) or not isinstance(args[at + 1], str):
        return None
    return {"names": sorted(n for n in args[at] if isinstance(n, str)),
            "build": args[at + 1]}


def _finder_shape(v: Any) -> bool:
    return (isinstance(v, dict) and isinstance(v.get("mapping"), dict)
            and isinstance(v.get("namespaces"), dict) and isinstance(v.get("redirects"), list)
            and (v.get("placeholder") is None or isinstance(v["placeholder"], str))
            and (v.get("skbc") is None or isinstance(v["skbc"], dict))
            and (v.get("mesonpy") is None or isinstance(v["mesonpy"], dict)))


def finder_facts(path: str, within: Confined = NOWHERE) -> dict[str, Any]:
    """:func:`_read_finder` of ``path``, once per version of the file; unreadable: the
    empty record."""
    try:
        return dict(facts_memo().get("editable-finder-v3", path,
                                     lambda: _read_finder(path, within), _finder_shape,
                                     within=within.root))
    except OSError:
        return {"mapping": {}, "namespaces": {}, "placeholder": None, "redirects": [],
                "skbc": None, "mesonpy": None, "broken": True}


# ------------------------------------------------------------------ pkgutil.extend_path


def _is_extend_path(node: Any, ast: Any) -> bool:
    """``__path__ = extend_path(__path__, __name__)`` (or ``pkgutil.extend_path``)."""
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "__path__"):
        return False
    call = node.value
    if not isinstance(call, ast.Call) or len(call.args) != 2:
        return False
    f = call.func
    named = ((isinstance(f, ast.Name) and f.id == "extend_path")
             or (isinstance(f, ast.Attribute) and f.attr == "extend_path"))
    return named and [getattr(a, "id", None) for a in call.args] == ["__path__", "__name__"]


def _read_extends(path: str, within: Confined) -> bool:
    from moonpin.preflight.access.zipfs import read_source

    data = read_source(path, cap=_CAP_INIT, what="package __init__", within=within)
    if b"extend_path" not in data:
        return False
    import ast

    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False  # it does not import at all; its __path__ is moot
    return any(_is_extend_path(n, ast) for n in tree.body)


def extends_path(init: str, within: Confined = NOWHERE) -> bool:
    """Whether the package ``__init__.py`` at ``init`` sets ``__path__ =
    extend_path(__path__, __name__)`` at its top level (mooncake's does), so that its
    submodules are looked up in every folder of its name on the search path."""
    if not init.endswith(".py"):
        return False  # bytecode or an extension: not read
    try:
        return bool(facts_memo().get("extend-path", init, lambda: _read_extends(init, within),
                                     lambda v: isinstance(v, bool), within=within.root))
    except OSError:
        pass
    from moonpin.preflight.access import zipfs

    if zipfs.archive_of(init) is None:
        return False
    try:  # in a zip archive on sys.path: read from it, not remembered
        return _read_extends(init, within)
    except OSError:
        return False
