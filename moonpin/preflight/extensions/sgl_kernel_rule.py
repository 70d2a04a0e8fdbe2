"""sgl_kernel's loader rule (:mod:`moonpin.preflight.extensions.seam`), read from its own files.

``import sgl_kernel`` (distributions ``sglang-kernel``, formerly ``sgl-kernel``) loads
``common_ops`` by path: the function that globs ``<subdir>/common_ops.*`` picks the
sub-folder from the GPU's compute capability (``major * 10 + minor``; None without a
usable GPU) through an ``if``/``elif`` chain on it, takes the first compiled match
(``.so`` names first), and on a failure falls back to ``common_ops.*`` beside it, then to
``import common_ops``; none loading raises ``ImportError``. The chain is read here with
``ast`` (``== 90`` -> ``"sm90"``, ``is not None`` -> any GPU, ``else``, or an f-string of
the capability such as ``f"sm{cc}"``), and so is each glob; nothing is assumed about which
folders a release ships.

The capability is the one fact the files cannot give: the check's ``--gpu-capability``
sets it; without it, every branch the chain can take is judged and the line says so.
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

__all__ = ["CHOICES", "DISTRIBUTIONS", "IMPLICIT", "IMPORT", "pick", "repair"]

IMPORT = "sgl_kernel"
CHOICES: dict[str, tuple[str, ...]] = {}
IMPLICIT = True
DISTRIBUTIONS = ("sglang-kernel", "sgl-kernel")
_STEM = "common_ops"


def _branch_value(body: list[ast.stmt], var: str, cc: str) -> Any:
    """What a branch assigns to ``var``: a string, ("f", head) for ``f"{head}{cc}"``."""
    import ast

    for node in body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == var):
            v = node.value
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                return v.value
            for head, names, joined in astread.fstring_heads(v):
                if joined is v and names == [cc]:
                    return ["f", head]
    return None


def _chain(fn: ast.FunctionDef, var: str) -> tuple[str, list[Any]] | None:
    """The ``if``/``elif`` chain assigning ``var``: (the capability's name, branches as
    (test, value)): test ``["eq", N]``, ``["gpu"]`` (``is not None``), ``["else"]``."""
    import ast

    for node in ast.walk(fn):
        if not isinstance(node, ast.If):
            continue
        branches: list[Any] | None = []
        cc: str | None = None
        cur = node
        while branches is not None:
            t = cur.test
            if not (isinstance(t, ast.Compare) and isinstance(t.left, ast.Name)
                    and len(t.ops) == 1 and isinstance(t.comparators[0], ast.Constant)
                    and t.left.id == (cc or t.left.id)):
                branches = None
                break
            cc = t.left.id
            c = t.comparators[0].value
            if isinstance(t.ops[0], ast.Eq) and isinstance(c, int):
                test: list[Any] = ["eq", c]
            elif isinstance(t.ops[0], ast.IsNot) and c is None:
                test = ["gpu"]
            else:
                branches = None
                break
            branches.append([test, _branch_value(cur.body, var, cc)])
            if len(cur.orelse) == 1 and isinstance(cur.orelse[0], ast.If):
                cur = cur.orelse[0]
                continue
            if cur.orelse:
                branches.append([["else"], _branch_value(cur.orelse, var, cc)])
            break
        if branches and cc is not None and all(b[1] is not None for b in branches):
            return cc, branches
    return None


def _read(path: str, within: Confined) -> dict[str, Any] | None:
    """The loader function's reading: the capability chain of the sub-folder, and the
    globs it tries (``[sub-folder variable or None, pattern]`` in order)."""
    import ast

    tree = astread.parse(path, within)
    if tree is None:
        return None
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        consts = [n.value for n in ast.walk(fn) if isinstance(n, ast.Constant)
                  and isinstance(n.value, str) and n.value.startswith(_STEM + ".")]
        if not consts:
            continue
        var = None  # the sub-folder variable: a Name joined before the pattern
        for node in ast.walk(fn):
            if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
                    and isinstance(node.right, ast.Constant) and node.right.value in consts
                    and isinstance(node.left, ast.BinOp)
                    and isinstance(node.left.right, ast.Name)):
                var = node.left.right.id
        chain = _chain(fn, var) if var else None
        if chain is None:
            continue
        return {"cc": chain[0], "branches": chain[1], "patterns": consts,
                "import_fallback": any(isinstance(n, ast.Import) and any(
                    a.name == _STEM for a in n.names) for n in ast.walk(fn))}
    return {}


def _files(folder: str, pattern: str) -> list[str]:
    """``glob(folder/pattern)`` (a ``stem.*`` pattern), compiled files first as the loader
    orders them (any name holding ``.so``)."""
    stem = pattern.rstrip("*")
    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith(stem))
    except OSError:
        return []
    files = [os.path.join(folder, n) for n in names]
    return [f for f in files if ".so" in f] + [f for f in files if ".so" not in f]


def _sub(value: Any, cc: int | None) -> str:
    return value if isinstance(value, str) else f"{value[1]}{cc}"


def _test(t: list[Any]) -> str:
    if t[0] == "eq":
        return f"capability {t[1] // 10}.{t[1] % 10}"
    return "any GPU" if t[0] == "gpu" else "no GPU"


def _branch(branches: list[Any], cc: int | None) -> Any:
    for test, value in branches:
        if (test[0] == "eq" and cc == test[1]) or (test[0] == "gpu" and cc is not None) \
                or test[0] == "else":
            return value
    return None


def pick(facts: Facts, found: Found) -> Pick:
    reading: dict[str, Any] | None = None
    where = ""
    for name in ("load_utils.py", "__init__.py"):  # where releases keep the rule
        path = os.path.join(found.folder, name)
        if os.path.exists(path):  # a FIFO too: the import opens it
            got = astread.reading(
                "sgl-kernel", path, lambda p=path: _read(p, facts.within),  # type: ignore[misc]
                facts.within)
            if got:
                reading, where = got, path
                break
    if reading is None:
        return Pick(unread=f"{found.folder}: no common_ops loader this check reads "
                    "(load_utils.py / __init__.py)")
    branches = reading["branches"]
    if facts.gpu is not None or not facts.gpu_present:
        ccs: list[int | None] = [facts.gpu if facts.gpu_present else None]
    else:  # every branch a GPU of unknown capability can take
        ccs = [t[1] for t, _ in branches if t[0] == "eq"]
        other = next((c for c in range(10, 200) if c not in ccs), None)
        ccs.append(other)
    choices = []
    said: dict[str, list[str]] = {}
    for cc in ccs:
        value = _branch(branches, cc)
        if value is None:
            continue
        sub = _sub(value, cc)
        files: list[str] = []
        for pattern in reading["patterns"]:
            files += [f for f in _files(os.path.join(found.folder, sub), pattern)
                      if f not in files]
        for pattern in reading["patterns"]:
            files += [f for f in _files(found.folder, pattern) if f not in files]
        when = (f"GPU capability {cc // 10}.{cc % 10}" if cc is not None and (
            facts.gpu is not None or any(t == ["eq", cc] for t, _ in branches))
            else "another GPU capability" if cc is not None else "no usable GPU")
        label = f"{sub}/" if files and os.path.dirname(files[0]).endswith(sub) else "./"
        said.setdefault(label, []).append(when)
        choices.append(Choice(files, when=when, raises=None if files else (
            f"ImportError: [sgl_kernel] CRITICAL: Could not load any {_STEM} library (no "
            f"{sub}/{_STEM}.* nor {_STEM}.* in {found.folder})")))
    if facts.gpu is None and facts.gpu_present:
        tests = "; ".join(f"{_test(t)} -> {v if isinstance(v, str) else v[1] + '<NN>'}"
                          for t, v in branches)
        note = (f"GPU capability not known here ({facts.gpu_said}): every choice of "
                f"{os.path.basename(where)} judged ({tests}); --gpu-capability picks one")
    else:
        note = f"judged for {facts.gpu_said}"
    return Pick(choices, notes=[note])


def repair(facts: Facts, pick: Pick, choice: Choice) -> str | None:
    """The torch the installed kernel pins (its METADATA), with SGLang's pin of the kernel
    when it is another release."""
    dist = next((d for d in DISTRIBUTIONS if d in facts.dists), None)
    if dist is None:
        return None
    own = facts.pin(dist, "torch")
    sglang_kernel = facts.pin("sglang", dist)
    sglang_torch = facts.pin("sglang", "torch")
    if sglang_kernel and sglang_kernel != facts.dists[dist].version and sglang_torch:
        return (f"pip install '{dist}=={sglang_kernel}' 'torch=={sglang_torch}' (the "
                "installed SGLang's pins)")
    if own and own != facts.torch_release():
        return (f"pip install 'torch=={own}' ({dist} {facts.dists[dist].version} pins it: "
                "its build binds that torch's C++ symbols)")
    if sglang_kernel and sglang_torch:
        return (f"pip install --force-reinstall '{dist}=={sglang_kernel}' "
                f"'torch=={sglang_torch}' (the installed SGLang's pins)")
    return None
