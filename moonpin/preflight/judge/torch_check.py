"""torch as ``import torch`` finds it, for the check: its version is the label the import
binds (``torch.__version__``, :func:`moonpin.preflight.pyimport.pychain.attribute`), the label
a loader maps onto a build (the fix lines' project's, mooncake's), not the distribution
metadata pip reads; an import that certainly fails first (an empty namespace package, a link
of the label's chain missing or not compiling) is torch's failure, with a line that reinstalls
it. Only ``os`` at import."""

from __future__ import annotations

import os

from moonpin.preflight.result import CheckResult

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from moonpin.preflight.env.context import Context
    from moonpin.preflight.installed.image_facts import Dist, Torch
    from moonpin.preflight.judge.fixes import Fixer

__all__ = ["import_failure", "imported", "same_release", "torch_of"]


def torch_of(torch_d: Dist | None, fixer: Fixer, add: Callable[[CheckResult], None],
             ctx: Context, pkg: str | None = None, imports: bool = True) -> Torch | None:
    """torch as ``import torch`` finds it: its version is the label ``torch/version.py``
    holds (``torch.__version__``, what a loader maps onto a build), not the
    distribution metadata pip reads; None when it is missing or unreadable. ``pkg`` is the
    torch folder the importer of ``ctx`` finds (None: the distribution's own). Its line
    passes only when the modelled ``import torch`` does (:func:`imported`); ``imports``
    False: the caller asks that later (a walk that starts a child first), and the line
    says the files only until then."""
    from moonpin.preflight.installed.image_facts import (
        torch_info,
        torch_label,
        torch_version_py,
        unlistable,
    )

    own = fixer.project.name  # the project whose loader reads torch's label (mooncake)
    folder = pkg or (os.path.join(torch_d.root, "torch") if torch_d is not None else None)
    if folder is None:
        add(CheckResult("torch", "fail", f"torch is not installed ({own}'s loaders import it)",
                        "install the torch your SGLang release requires, then "
                        + fixer.generic()))
        return None
    bad = unlistable(folder)
    if bad is not None:
        add(CheckResult("torch", "fail", f"{bad}: `import torch` fails", "make it readable "
                        "by the worker's user (chmod -R a+rX on the folder)"))
        return None
    broken, label = _torch_unimportable(folder, ctx)
    if broken is not None:  # `import torch` fails before any version is read
        add(CheckResult("torch", "fail", f"`import torch` fails ({own}'s loader imports "
                        f"it): {broken}", _reinstall_torch(torch_d, fixer), (folder,)))
        return None
    torch = torch_info(torch_d, ctx.markers, pkg, label, ctx.confined)
    if torch is None:
        add(CheckResult("torch", "fail", f"{folder} holds no readable torch/version.py and no "
                        "distribution metadata names its version: what `torch.__version__` "
                        f"says, and so the build {own}'s loader picks, is unknown",
                        "reinstall torch (pip install --force-reinstall 'torch==<the version "
                        "you want>')", (folder,)))
        return None
    if torch_d is None:
        fixer.torch = torch.version
    if label is None and torch_label(torch_version_py(folder, ctx.confined)) is None and \
            torch_d is not None:
        add(CheckResult("torch label", "warn", "torch.__version__ is computed when torch is "
                        f"imported (not a literal this check can follow): the label {own}'s "
                        f"loader maps onto a build is not known here; judged as {torch.version}, "
                        "its distribution's version", "run with --deep to import it",
                        (folder,)))
    fixer.torch_cpu = not torch.cuda  # a CUDA runtime the build needs is then torch's
    cuda = (f"CUDA {torch.cuda}" if torch.cuda else "no CUDA"
            if torch.cuda_evidence.startswith("torch/version.py") else "no CUDA (CPU build?)")
    line = CheckResult("torch", "pass", f"torch {torch.version}, {cuda} ({torch.cuda_evidence})",
                       evidence=(torch_d.root if torch_d is not None else folder,))
    add(imported(ctx, line, fixer) if imports else line)
    if torch_d is None:
        add(CheckResult("torch metadata", "warn", f"{folder} has no distribution metadata "
                        f"(no torch-*.dist-info): `import torch` works and reports "
                        f"{torch.version}, but pip sees no torch and may install another "
                        "over it", "install torch with pip: " + fixer.pip(
                            [f"torch=={torch.version.partition('+')[0]}"]), (folder,)))
    elif not same_release(torch.metadata, torch.version):
        fixer.torch_label = torch.version
        add(CheckResult("torch metadata", "warn",
                        f"torch/version.py says {torch.version} (what `torch.__version__` and "
                        f"{own}'s loader read), its distribution metadata {torch.metadata} "
                        "(what pip reads): the files were rebuilt or replaced in place; judged "
                        f"as {torch.version}", "reinstall torch so both agree: "
                        + str(fixer.torch_reinstall()),
                        (os.path.join(folder, "version.py"),)))
    return torch


def imported(ctx: Context, line: CheckResult, fixer: Fixer | None = None) -> CheckResult:
    """The torch line ``line`` (a pass, from its files) as the modelled ``import torch``
    has it (:func:`import_failure`): a failure with its mend when the import fails; "not
    judged" when the walk of the code it runs at import stopped at its bounds
    (:class:`moonpin.preflight.pyimport.atimport.Bounds`: what it did not read may fail the
    import, so no pass rests on it), as an extension's line says it."""
    if line.name != "torch" or line.status != "pass":
        return line
    failed = import_failure(ctx, fixer)
    if failed is None:
        from moonpin.preflight.judge.libraries import torch_import

        note = torch_import(ctx).note
        if note is None:
            return line
        return CheckResult("torch", "skip", f"{line.message}; not judged: {note}", None,
                           line.evidence)
    return CheckResult("torch", "fail", f"{line.message}: {failed[0]}", failed[1],
                       line.evidence)


def import_failure(ctx: Context, fixer: Fixer | None = None
                   ) -> tuple[str, str | None] | None:
    """(why ``import torch`` fails in the modelled interpreter (:func:`moonpin.preflight.
    judge.libraries.torch_import`), the line that mends it or None), or None when it
    imports. A system library nobody put back
    or a preload that stops the interpreter gets the line the image's own records give
    (:mod:`moonpin.preflight.judge.owners`); any other failure in torch's own import code
    what an extension's import chain gets for it (:func:`moonpin.preflight.judge.libraries.
    chain_mend`: torch's files put back, a library older than torch needs said so)."""
    from moonpin.preflight.judge.libraries import chain_mend, load_problem, torch_import

    res = torch_import(ctx)
    problem = load_problem(res)
    if problem is None:
        return None
    from moonpin.preflight.judge.owners import load_mend

    mend = load_mend(res, ctx)
    if mend is not None:
        return f"{problem} ({mend.said})", mend.fix
    if res.chain_error is not None:
        note, fix = chain_mend(res, ctx.paths, fixer, "torch", ctx)
        return problem + note, fix
    return problem, None


def _torch_unimportable(folder: str, ctx: Context
                        ) -> tuple[str | None, str | None]:
    """(why ``import torch`` certainly fails before a loader reads
    ``torch.__version__``, or None; that label as the import sets it, or None when it is not
    a value followed here). A torch folder without ``__init__`` is an empty namespace package
    (no ``torch.__version__``); the label is followed through the imports that bind it
    (:func:`moonpin.preflight.pyimport.pychain.attribute`), each of which must be there and
    compile."""
    from moonpin.preflight.installed.image_facts import torch_label
    from moonpin.preflight.pyimport.pychain import attribute_memoised

    inits = [f"__init__{s}" for s in (*ctx.ext_suffixes, ".py", ".pyc")]
    if not any(os.path.isfile(os.path.join(folder, i)) for i in inits):
        return (f"{folder} has no __init__.py, so it imports as an empty namespace package, "
                "with no torch.__version__"), None
    def evaluate(file: str, module: str, attr: str, env: dict[str, str | None]
                 ) -> str | None:  # a label computed some way the reading does not follow
        from moonpin.preflight.pyimport.labeleval import value as computed

        return computed(file, module, attr, ctx.paths, ctx.ext_suffixes, ctx.version, env)

    value, problem = attribute_memoised(ctx.paths, "torch", "__version__", ctx.version,
                                        ctx.ext_suffixes, ctx.root, ctx.sites,
                                        evaluate=None if ctx.root is not None else evaluate)
    # the label as torch/version.py's own is taken (printable, at most 256 characters): a
    # megabyte of it, or control characters, is nothing a version is compared with
    return problem, torch_label({"__version__": value}) if value is not None else None


def _reinstall_torch(dist: Dist | None, fixer: Fixer) -> str:
    if dist is not None:  # the fixer knows it as the installed torch (run._distributions)
        return fixer.torch_files()
    return ("reinstall torch: pip install --force-reinstall --no-deps 'torch==<the version "
            "you want>'")


def same_release(a: str, b: str) -> bool:
    """Whether two torch versions name the same release (``2.13.0`` and ``2.13.0+cu130``:
    the index's wheel says the first in its metadata, the second in torch/version.py)."""
    pa, pb = a.partition("+")[0], b.partition("+")[0]
    if pa == pb:
        return True
    from packaging.version import Version

    try:
        return Version(pa) == Version(pb)
    except ValueError:  # InvalidVersion, or a number past int()'s 4,300 digits
        return False
