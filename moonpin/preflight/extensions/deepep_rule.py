"""DeepEP's loader rule (:mod:`moonpin.preflight.extensions.seam`), read from its own files.

``import deep_ep`` (``sgl-deep-ep``, or DeepEP built from source) imports its compiled
module plainly: the first import in ``deep_ep/__init__.py`` that names a compiled file
(``deep_ep._C`` in sgl-deep-ep, a top-level ``deep_ep_cpp`` in DeepEP's own builds) is the
build. Before it, sgl-deep-ep's ``__init__`` checks the CUDA major its ``_build_info``
records against ``torch.version.cuda`` and, in its ``prerequisites`` module, that a CUDA
device is usable (``torch.cuda.is_available()``): each raises ``ImportError``. Both are read
here with ``ast`` when the files have them.
"""

from __future__ import annotations

import os

from moonpin.preflight.extensions import astread
from moonpin.preflight.extensions.seam import Choice, Pick

TYPE_CHECKING = False
if TYPE_CHECKING:
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
    return {"imports": imports, "expected_cuda": expected, "needs_gpu": needs_gpu}


def pick(facts: Facts, found: Found) -> Pick:
    got = astread.reading("deep-ep", os.path.join(found.folder, "__init__.py"),
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
