"""The check when no mooncake backend is requested: the worker's other native extensions
alone (:mod:`moonpin.preflight.extensions`), after the target and torch.

:mod:`moonpin.preflight.run` walks the rooms for a check that judges mooncake; a launch line
that asks for no mooncake backend (``--moe-a2a-backend nixl``, or nothing: what a CUDA worker
imports at start) is judged here: what is installed, torch (whose failure is said only when an
extension would import it), each extension, and the deep probe's skip. Only ``os`` at import:
this runs at worker start.
"""

from __future__ import annotations

from moonpin.preflight.result import CheckResult

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from moonpin.preflight.env.context import Context

__all__ = ["judge_alone"]


def judge_alone(ctx: Context, features: Mapping[str, str], flags: Mapping[str, str],
                env: Mapping[str, str], gpu: str | None,
                kb_file: str | None) -> list[CheckResult]:
    """The lines after the target's for the environment of ``ctx`` (``features``: feature ->
    backend, none of them mooncake; ``flags``: each feature's command-line flag; ``env``:
    the worker's environment; ``gpu``: ``--gpu-capability``; ``kb_file``: ``--kb``); empty
    when there is no extension to judge."""
    from moonpin.kb.paths import default_kb_file
    from moonpin.preflight.extensions.seam import DISTRIBUTIONS, own_rule
    from moonpin.preflight.extensions.verdict import judge_extensions
    from moonpin.preflight.installed.image_facts import by_name, find_package
    from moonpin.preflight.judge.fixes import Fixer, Project
    from moonpin.preflight.judge.torch_check import torch_of

    own = own_rule()  # its fix lines name the OWN_LINES project as its rule says it
    fixer = Fixer(None, None, Project(own.IMPORT, own.DISTRIBUTIONS[0], own.PREBUILD))
    dists, owned = by_name(ctx.paths, ctx.confined, DISTRIBUTIONS, own.DISTRIBUTIONS[0])
    fixer.installed(dists, owned)
    said: list[CheckResult] = []
    torch = torch_of(dists.get("torch"), fixer, said.append, ctx, find_package(ctx, "torch"))
    kb = kb_file or default_kb_file()
    lines: list[CheckResult] = []
    judge_extensions(ctx, features, flags, torch, dists, lines.append, env=env, gpu=gpu,
                     kb_file=kb)
    if not lines:
        return []
    deep = CheckResult("deep probe", "skip", f"{own.IMPORT} not requested (the probe imports "
                       "its process-group module); light checks only")
    # the extensions import torch: its failure is said before them, its pass with them
    return [*said, *lines, deep]
