"""What a mooncake loader module (``mooncake/pg.py``, ``mooncake/ep.py``) needs, read from its text.

The loaders changed across releases (``ep_<torch>`` only; ``ep_<torch>`` plus
``pg_<torch>``; a torch-independent ``_ep`` plus ``pg_<torch>``; compiling C++
sources at first import). Nothing here assumes a scheme: each
``importlib.import_module`` argument is evaluated symbolically, and a loader
whose shape is not recognised is recorded as ``unknown``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from moonpin.readers.pyast.astname import unparse

if TYPE_CHECKING:
    from moonpin.kb.models import LoaderScheme

__all__ = ["JIT_REQUIRES", "TORCH", "LoaderRead", "LoaderStep", "analyze_loader",
           "cpp_string_names", "jit_requires", "read_loader"]

#: Placeholder for the suffix derived from ``torch.__version__`` in a template.
TORCH = "{torch}"


def _const_str(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


class _Env:
    """Symbolic values of the loader's module-level assignments."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}  # name -> template text
        self.version_regex: str | None = None
        self.separator: str | None = None

    def eval(self, node: ast.AST) -> str | None:
        s = _const_str(node)
        if s is not None:
            return s
        if isinstance(node, ast.Name):
            return self.values.get(node.id)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            a, b = self.eval(node.left), self.eval(node.right)
            return a + b if a is not None and b is not None else None
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                if isinstance(v, ast.FormattedValue):
                    got = self.eval(v.value)
                else:
                    got = self.eval(v)
                if got is None:
                    return None
                parts.append(got)
            return "".join(parts)
        # <torch version>.replace(".", SEP)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "replace" and len(node.args) == 2):
            base = self.eval(node.func.value)
            old, new = _const_str(node.args[0]), _const_str(node.args[1])
            if base == "{version}" and old == "." and new is not None:
                self.separator = new
                return TORCH
        # re.match(REGEX, torch.__version__).group()
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "group" and isinstance(node.func.value, ast.Call)):
            inner = node.func.value
            if (isinstance(inner.func, ast.Attribute) and inner.func.attr in ("match", "search")
                    and len(inner.args) == 2 and _is_torch_version(inner.args[1])):
                regex = _const_str(inner.args[0])
                if regex is not None:
                    self.version_regex = regex
                    return "{version}"
        if _is_torch_version(node):
            self.version_regex = None
            return "{version}"
        return None


def _is_torch_version(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "__version__"
            and isinstance(node.value, ast.Name) and node.value.id == "torch")


def _raise_message(handler: ast.ExceptHandler) -> str | None:
    for stmt in ast.walk(handler):
        if isinstance(stmt, ast.Raise) and isinstance(stmt.exc, ast.Call) and stmt.exc.args:
            arg = stmt.exc.args[0]
            if isinstance(arg, ast.JoinedStr):
                return "".join(
                    v.value if isinstance(v, ast.Constant) and isinstance(v.value, str)
                    else "{" + unparse(v.value) + "}" if isinstance(v, ast.FormattedValue)
                    else "" for v in arg.values)
            s = _const_str(arg)
            if s is not None:
                return s
    return None


_JIT_MARKERS = ("torch.utils.cpp_extension", "cpp_extension")
_TOOLCHAIN = {
    "ninja": "ninja",
    "nvcc": "nvcc (a CUDA toolkit; CUDA_HOME)",
    "CUDA_HOME": "nvcc (a CUDA toolkit; CUDA_HOME)",
    "mcc": "mcc (MUSA toolkit, for MUSA torch)",
    "torchada": "torchada (for MUSA torch)",
    "mxcc": "mxcc (MACA toolkit, for MACA torch)",
}


#: What a compiling loader checks before it compiles (raising ImportError when it does
#: not hold), as read from its source by :func:`jit_requires`; the codes are KB facts.
JIT_REQUIRES = {
    "cuda-torch": "a CUDA build of torch (torch.utils.cpp_extension.CUDA_HOME, None for a "
                  "CPU torch; the adapter links c10_cuda and torch_cuda)",
    "nvcc": "nvcc under CUDA_HOME",
    "ninja": "ninja on PATH",
    "gpu-or-arch-list": "a visible GPU or TORCH_CUDA_ARCH_LIST",
}


def _raises(node: ast.If) -> bool:
    return any(isinstance(n, ast.Raise) for n in node.body)


def jit_requires(tree: ast.AST) -> tuple[str, ...]:
    """The preconditions (codes of :data:`JIT_REQUIRES`) a compiling loader checks with an
    ``if …: raise`` before it compiles, read from its syntax tree (mooncake 0.3.14's
    ``pg.py``): ``from torch.utils.cpp_extension import CUDA_HOME`` tested, or the
    ``-lc10_cuda``/``-ltorch_cuda`` it links (a CUDA torch); ``"nvcc"`` in that test;
    ``shutil.which("ninja")``; ``TORCH_CUDA_ARCH_LIST`` with ``torch.cuda.is_available()``."""
    found: set[str] = set()
    cuda_home = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                 and n.module == "torch.utils.cpp_extension" for a in n.names
                 if a.name == "CUDA_HOME"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in ("-lc10_cuda", "-ltorch_cuda"):
            found.add("cuda-torch")
        if not (isinstance(node, ast.If) and _raises(node)):
            continue
        test = list(ast.walk(node.test))
        consts = {n.value for n in test if isinstance(n, ast.Constant)}
        names = {n.id for n in test if isinstance(n, ast.Name)}
        attrs = {n.attr for n in test if isinstance(n, ast.Attribute)}
        if names & cuda_home:
            found.add("cuda-torch")
            if "nvcc" in consts:
                found.add("nvcc")
        if "ninja" in consts and "which" in attrs | names:
            found.add("ninja")
        if "TORCH_CUDA_ARCH_LIST" in consts and "is_available" in attrs:
            found.add("gpu-or-arch-list")
    return tuple(k for k in JIT_REQUIRES if k in found)


@dataclass(frozen=True)
class LoaderStep:
    """One ``importlib.import_module`` of a loader: its target and what it raises if absent."""

    template: str
    line: int
    on_missing: str | None = None


@dataclass(frozen=True)
class LoaderRead:
    """A loader's scheme as plain data (the runtime check reads it without pydantic)."""

    module: str
    member: str
    kind: Literal["prebuilt", "jit-compile", "unknown"]
    imports: tuple[LoaderStep, ...] = ()
    version_regex: str | None = None
    separator: str | None = None
    toolchain: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    note: str | None = None
    #: jit-compile: what it checks before compiling (codes of :data:`JIT_REQUIRES`)
    requires: tuple[str, ...] = ()


def analyze_loader(text: bytes | str, member: str, module: str,
                   shipped: Iterable[str] = ()) -> LoaderScheme:
    """:func:`read_loader`, as the KB model."""
    from moonpin.kb.models import LoaderImport, LoaderScheme

    r = read_loader(text, member, module, shipped)
    return LoaderScheme(
        module=r.module, member=r.member, kind=r.kind,
        imports=tuple(LoaderImport(template=i.template, line=i.line, on_missing=i.on_missing)
                      for i in r.imports),
        version_regex=r.version_regex, separator=r.separator, toolchain=r.toolchain,
        sources=r.sources, note=r.note, requires=r.requires,
    )


def read_loader(text: bytes | str, member: str = "mooncake/pg.py", module: str = "mooncake.pg",
                shipped: Iterable[str] = ()) -> LoaderRead:
    """Read one loader's scheme. ``shipped`` lists the wheel's member names (to find
    the C++ sources a compiling loader builds)."""
    try:
        tree = ast.parse(text, filename=member)
    except (SyntaxError, ValueError) as e:
        return LoaderRead(module=module, member=member, kind="unknown",
                          note=f"loader does not parse: {e}")
    env = _Env()
    imports: list[LoaderStep] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and \
                isinstance(stmt.targets[0], ast.Name):
            got = env.eval(stmt.value)
            if got is not None:
                env.values[stmt.targets[0].id] = got
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        f = node.func
        is_import = (isinstance(f, ast.Attribute) and f.attr == "import_module"
                     and isinstance(f.value, ast.Name) and f.value.id == "importlib")
        if not is_import:
            continue
        template = env.eval(node.args[0])
        if template is None:
            imports.append(LoaderStep(template="?" + unparse(node.args[0]),
                                      line=node.lineno))
            continue
        imports.append(LoaderStep(template=template, line=node.lineno))
    # Attach the message each import's except handler raises (the user-visible error).
    for node in ast.walk(tree):
        if isinstance(node, ast.Try):
            lines = {n.lineno for n in ast.walk(ast.Module(body=node.body, type_ignores=[]))
                     if hasattr(n, "lineno")}
            msg = next((m for h in node.handlers if (m := _raise_message(h))), None)
            if msg:
                imports = [replace(i, on_missing=msg) if i.line in lines else i
                           for i in imports]
    source = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    if any(m in source for m in _JIT_MARKERS) and re.search(r"\bload\(", source):
        toolchain = sorted({label for key, label in _TOOLCHAIN.items()
                            if re.search(rf"\b{re.escape(key)}\b", source)})
        srcs = _jit_sources(tree, member, shipped)
        return LoaderRead(module=module, member=member, kind="jit-compile",
                          imports=tuple(imports), toolchain=tuple(toolchain),
                          sources=tuple(srcs), requires=jit_requires(tree),
                          note="compiles C++ sources against the installed torch at first "
                               "import (torch.utils.cpp_extension.load)")
    if not imports or any(i.template.startswith("?") for i in imports):
        return LoaderRead(module=module, member=member, kind="unknown", imports=tuple(imports),
                          note="no recognisable importlib.import_module target")
    if any(TORCH in i.template for i in imports) and env.separator is None:
        return LoaderRead(module=module, member=member, kind="unknown", imports=tuple(imports),
                          note="torch suffix derivation not recognised")
    return LoaderRead(module=module, member=member, kind="prebuilt", imports=tuple(imports),
                      version_regex=env.version_regex, separator=env.separator)


def _jit_sources(tree: ast.Module, member: str, shipped: Iterable[str]) -> list[str]:
    """The shipped C++/CUDA members next to the loader (``_pg_jit/`` in 0.3.14)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple):
            for elt in node.value.elts:
                s = _const_str(elt)
                if s and s.endswith((".cpp", ".cu", ".cc")):
                    names.add(s)
    folder = member.rsplit("/", 1)[0] + "/"
    out = [m for m in shipped if m.startswith(folder) and m.rsplit("/", 1)[-1] in names]
    return sorted(out)


_CPP_STRING = re.compile(rb'"([A-Za-z_][A-Za-z0-9_\-]*)"')


def cpp_string_names(source: bytes) -> set[str]:
    """Identifier-like string literals of a C++ source (pybind11 names live there)."""
    return {m.group(1).decode() for m in _CPP_STRING.finditer(source)}
