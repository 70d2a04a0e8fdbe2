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

IMPORT = "deep_ep"
CHOICES = {"moe-a2a": ("deepep",)}
IMPLICIT = False
DISTRIBUTIONS = ("sgl-deep-ep", "deep-ep")


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
    return {"imports": imports, "expected_cuda": expected, "needs_gpu": needs_gpu,
            "cuda_home": _cuda_home(tree)}


def _cuda_home(tree: ast.Module) -> dict[str, Any] | None:
    """The function of ``__init__`` the module's own top-level calls reach (through its
    other functions) that asserts a name it took from environment variables, a command's
    answer or a fixed folder is not None (module doc): the variables, the command and
    program (``["which", "nvcc"]``), the folders, the assertion's line. None: no such
    function is reached."""
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

    todo, seen = called(tree.body), set()
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        fn = defs[name]
        todo += called(fn.body)
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


def pick(facts: Facts, found: Found) -> Pick:
    got = astread.reading("deep-ep-v2", os.path.join(found.folder, "__init__.py"),
                          lambda: _read(found.folder, facts.within), facts.within)
    if got is None:
        return Pick(unread=f"{found.folder}/__init__.py cannot be read")
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
