"""What the check learns from an extension build or a loader file, kept per version of the
file in the file-facts memo (:func:`moonpin.kb.cache.facts_memo`): a build's names, backends,
``libcudart`` and ``DT_NEEDED`` (from its ELF bytes, :mod:`moonpin.readers.elf.analysis`, or a
``.py`` stand-in's ``ast``), the loader's scheme (:func:`moonpin.readers.pyast.loader.read_loader`),
the torch a loader-less build says it requires, and where the compile tools are. It names no
project: the backend names a build registers and what a loader is called are handed in by the
project's judgement (mooncake's: :mod:`moonpin.preflight.extensions.rules.mooncake_pg`).

Every memo entry is checked for its shape and recomputed when damaged. Only ``os`` at import.
"""

from __future__ import annotations

import os

from moonpin.kb.cache import facts_memo
from moonpin.preflight.access.confined import NOWHERE, Confined
from moonpin.preflight.installed.image_facts import (
    CAP_BUILD,
    CUDART,
    file_name,
    file_suffix,
    leading_int,
    list_folder,
    read_bytes,
    which,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from moonpin.preflight.env.context import Context

__all__ = [
    "UNREADABLE_SCHEME",
    "BuildFacts",
    "built_for",
    "find_ninja",
    "find_nvcc",
    "on_path",
    "read_build",
    "read_cache_scheme",
    "read_scheme",
    "scheme_shape",
    "str_or_none",
]


class BuildFacts:
    def __init__(self, path: str, names: set[str] | None = None,
                 backends: set[str] | None = None, cuda: int | None = None,
                 needed: tuple[str, ...] = (), error: str | None = None) -> None:
        self.path = path
        self.names: set[str] = set(names or ())
        self.backends: set[str] = set(backends or ())
        self.cuda = cuda
        self.needed = needed
        self.error = error


def read_build(path: str, wanted: Iterable[str], within: Confined = NOWHERE,
               backends: Iterable[str] = ()) -> BuildFacts:
    """What a build provides, from its bytes; kept in the file-facts memo per build and
    set of names asked for (a 30 MB extension is scanned once per version of the file).
    ``backends``: the torch.distributed backend names the project registers, told apart
    from its other names (:attr:`BuildFacts.backends`)."""
    asked = tuple(sorted(set(wanted)))
    known = tuple(sorted(set(backends)))

    def scan() -> tuple[Any, ...]:
        f = _scan_build(path, asked, within, known)
        return (sorted(f.names), sorted(f.backends), f.cuda, f.needed, f.error)

    try:
        names, found, cuda, needed, error = facts_memo().get(
            "build-v3\0" + "\0".join(asked) + "\0\0" + "\0".join(known), path, scan,
            _build_shape, within=within.root)
    except OSError as e:
        return BuildFacts(path, error=f"cannot read {path}: {e.strerror}")
    return BuildFacts(path, set(names), set(found), cuda, tuple(needed), error)


def _strs(value: object) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)


def _build_shape(value: object) -> bool:
    """The shape of a remembered build reading (a damaged memo entry fails it)."""
    return (isinstance(value, (list, tuple)) and len(value) == 5 and _strs(value[0])
            and _strs(value[1]) and (value[2] is None or type(value[2]) is int)
            and _strs(value[3]) and str_or_none(value[4]))


def _scan_build(path: str, wanted: Iterable[str], within: Confined,
                backends: tuple[str, ...]) -> BuildFacts:
    facts = BuildFacts(path)
    try:
        data = read_bytes(path, CAP_BUILD, "extension build", within)
    except OSError as e:
        facts.error = f"cannot read {path}: {e.strerror or e}"
        return facts
    if file_suffix(path) == ".py":
        _read_standin(data, facts, backends)
        return facts
    from moonpin.readers.elf import analysis as elf

    if not elf.is_elf(data):
        facts.error = f"{file_name(path)} is not an ELF object"
        return facts
    try:
        ef = elf.analyze(data, len(data), set(wanted) | set(backends))
    except elf.ElfError as e:
        facts.error = f"{file_name(path)}: {e}"
        return facts
    from moonpin.preflight.loader.ldso import elf_problem

    problem = elf_problem(data, ef)
    if problem is not None:
        facts.error = f"{file_name(path)} cannot be loaded: {problem}"
        return facts
    facts.backends = {b for b in backends if b in ef.strings}
    facts.names = set(ef.strings) - facts.backends
    facts.needed = tuple(ef.needed)
    for n in ef.needed:
        if n.startswith(CUDART):
            major = leading_int(n[len(CUDART):])
            if major is not None:
                facts.cuda = major
    return facts


def _read_standin(data: bytes, facts: BuildFacts, backends: tuple[str, ...]) -> None:
    import ast

    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        facts.error = f"{file_name(facts.path)} does not parse: {type(e).__name__}: {str(e)[:200]}"
        return
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            facts.names.add(stmt.name)
        elif isinstance(stmt, ast.Assign):
            facts.names |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            facts.names.add(stmt.target.id)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        f = node.func
        fname = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        arg = node.args[0]
        if fname == "register_backend" and isinstance(arg, ast.Constant) and \
                arg.value in backends:
            facts.backends.add(str(arg.value))


def str_or_none(value: object) -> bool:
    """The shape of a remembered suffix or torch target (a damaged memo entry fails it)."""
    return value is None or isinstance(value, str)


def scheme_shape(value: object) -> bool:
    """The shape of a remembered loader scheme (:func:`read_scheme`)."""
    if not isinstance(value, dict):
        return False
    imports, toolchain = value.get("imports"), value.get("toolchain")
    return (isinstance(value.get("kind"), str) and isinstance(value.get("placeholder"), str)
            and isinstance(imports, list) and all(isinstance(i, str) for i in imports)
            and isinstance(toolchain, list) and all(isinstance(t, str) for t in toolchain)
            and all(str_or_none(value.get(k)) for k in ("problem", "note", "version_regex",
                                                          "separator")))


def _loader_problem(data: bytes) -> str | None:
    """Why Python cannot import this loader module, or None."""
    import ast

    if not data.strip():
        return "it is empty: the module imports but defines none of the names"
    nul = data.find(b"\0")
    if nul >= 0:  # 3.12 refuses it; older parsers stop reading at the NUL
        return (f"it holds a NUL byte (at offset {nul}): Python refuses it or stops reading "
                "there")
    try:
        ast.parse(data)
    except SyntaxError as e:
        return f"Python cannot compile it: {e.msg} (line {e.lineno})"
    except (ValueError, RecursionError, MemoryError) as e:
        return f"Python cannot compile it: {type(e).__name__}: {str(e)[:200]}"
    return None


def read_scheme(loader_path: str, module: str, within: Confined = NOWHERE,
                what: str = "loader") -> dict[str, Any]:
    """The loader's scheme (:func:`moonpin.readers.pyast.loader.read_loader`) as plain data for the
    file-facts memo; ``what``: the loader as a refused read names it."""
    from moonpin.preflight.access.zipfs import read_source
    from moonpin.readers.pyast.loader import TORCH, read_loader

    data = read_source(loader_path, 16 << 20, what=what,  # as read_bytes
                       within=within)
    problem = _loader_problem(data)
    if problem is not None:
        return {"kind": "unknown", "note": problem, "problem": problem, "toolchain": [],
                "imports": [], "version_regex": None, "separator": None, "placeholder": TORCH}
    folder = os.path.dirname(loader_path)
    # what the package ships one folder down (0.3.14's _pg_jit/): the C++ sources a
    # compiling loader names are found among them, as the scraper finds them in the wheel
    shipped = [os.path.join(folder, sub, n) for sub in list_folder(folder)
               if os.path.isdir(os.path.join(folder, sub))
               for n in list_folder(os.path.join(folder, sub))
               if n.endswith((".cpp", ".cc", ".cu"))]
    try:
        r = read_loader(data, loader_path, module, shipped)
    except (RecursionError, MemoryError) as e:  # a loader nested past what ast can hold
        problem = f"Python cannot compile it: {type(e).__name__}"
        return {"kind": "unknown", "note": problem, "problem": problem, "toolchain": [],
                "imports": [], "version_regex": None, "separator": None, "placeholder": TORCH}
    cache = None
    source_names: set[str] = set()
    if r.kind == "jit-compile":
        from moonpin.readers.pyast.loader import cpp_string_names

        cache = read_cache_scheme(data)
        for src in r.sources:  # the names its C++ sources bind (pybind11 m.def("..."))
            try:
                source_names |= cpp_string_names(read_bytes(src, CAP_BUILD, "C++ source",
                                                            within))
            except OSError:
                continue
    return {"kind": r.kind, "note": r.note, "toolchain": list(r.toolchain),
            "imports": [i.template for i in r.imports], "version_regex": r.version_regex,
            "separator": r.separator, "placeholder": TORCH, "problem": None, "cache": cache,
            "sources": list(r.sources), "source_names": sorted(source_names),
            "requires": list(r.requires)}


def on_path(ctx: Context, name: str) -> str | None:
    """The program ``name`` as the target's shell finds it on its ``PATH``: for an image, in
    the folders of the image's own ``PATH``, under its root (the image's name of it is
    returned); for this machine, :func:`shutil.which`'s answer."""
    if ctx.root is None:
        return which(name)
    import posixpath

    from moonpin.preflight.access.chroot import host_path
    from moonpin.preflight.env.rootfs import DEFAULT_PATH

    for folder in ctx.env.get("PATH", DEFAULT_PATH).split(":"):  # a runtime's default
        if not folder.startswith("/"):
            continue
        cand = posixpath.join(folder, name)
        host = host_path(ctx.root, cand)
        if host is not None and os.path.isfile(host) and os.access(host, os.X_OK):
            return cand
    return None


def _in_target(ctx: Context, path: str) -> bool:
    """Whether the target holds a regular file at ``path`` (an image's path under its root)."""
    if ctx.root is None:
        return os.path.isfile(path)
    from moonpin.preflight.access.chroot import host_path

    host = host_path(ctx.root, path)
    return host is not None and os.path.isfile(host)


def find_nvcc(ctx: Context) -> str | None:
    """nvcc as torch's ``cpp_extension`` finds it in the target: ``$CUDA_HOME/bin/nvcc``
    (or ``CUDA_PATH``), else on ``PATH``, else under ``/usr/local/cuda``; an image's own
    variables and files, never this host's."""
    for env in ("CUDA_HOME", "CUDA_PATH"):
        home = ctx.env.get(env)
        if home:
            nvcc = os.path.join(home, "bin", "nvcc")
            return nvcc if _in_target(ctx, nvcc) else None
    found = on_path(ctx, "nvcc")
    if found:
        return found
    fallback = os.environ.get("MOONPIN_CHECK_CUDA_FALLBACK", "/usr/local/cuda")
    nvcc = os.path.join(fallback, "bin", "nvcc")
    return nvcc if _in_target(ctx, nvcc) else None


def find_ninja(ctx: Context) -> str | None:
    """ninja on the target's ``PATH``, else the binary the ``ninja`` wheel ships inside its
    package on the target's ``sys.path``."""
    found = on_path(ctx, "ninja")
    if found:
        return found
    for p in ctx.paths:  # the `ninja` wheel ships its binary inside the package
        cand = os.path.join(p, "ninja", "data", "bin", "ninja")
        if os.path.isfile(cand):
            return cand
    return None


#: The end of the words of a loader the light check cannot read (the project's judgement says
#: whose releases' schemes it is none of); a deep import that works settles it.
UNREADABLE_SCHEME = "so what it loads cannot be read without importing it"
#: What a loader-less build says it was built for (as moonpin/scrapers/mooncake.py reads it:
#: 0.3.7's ``ep.so`` holds "Mooncake Backend requires torch==2.8.0").
_REQUIRES_TORCH = b"requires torch=="


def built_for(path: str, within: Confined = NOWHERE) -> str | None:
    """The torch release a build's bytes say it requires, or None."""
    data = read_bytes(path, CAP_BUILD, "extension build", within)
    at = data.find(_REQUIRES_TORCH)
    if at < 0:
        return None
    start = at + len(_REQUIRES_TORCH)
    end = start
    while end < len(data) and end - start < 64 and (
            chr(data[end]).isalnum() or data[end] in b".+"):
        end += 1
    text = data[start:end].decode("ascii", "replace").rstrip(".")
    return text if text[:1].isdigit() else None


def read_cache_scheme(data: bytes) -> dict[str, list[str]]:
    """``{"env": [...], "home": [...]}``: the environment variables a loader reads its
    cache folder from, and the path under the home it falls back to (parts), from its
    source with ``ast``."""
    import ast

    from moonpin.readers.pyast.astname import dotted

    env: list[str] = []
    home: list[str] = []
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {"env": env, "home": home}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            f = node.func
            name = dotted(f)
            arg = node.args[0].value
            if name in ("os.environ.get", "os.getenv") and isinstance(arg, str) \
                    and arg.endswith("_JIT_DIR") and arg not in env:
                env.append(arg)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and not home:
            parts: list[str] = []
            left: ast.expr = node
            while isinstance(left, ast.BinOp) and isinstance(left.op, ast.Div):
                if not (isinstance(left.right, ast.Constant) and isinstance(left.right.value,
                                                                              str)):
                    break
                parts.insert(0, left.right.value)
                left = left.left
            if (isinstance(left, ast.Call) and isinstance(left.func, ast.Attribute)
                    and left.func.attr == "home" and parts):
                home = parts
    return {"env": env, "home": home}
