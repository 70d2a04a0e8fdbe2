"""A report as an image's: the image's paths instead of the host folder its root is unpacked
in, and each pip fix line written for a Dockerfile (``RUN pip install ...``, the note after it
a shell comment). Nothing imported at import time."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from moonpin.preflight.env.target import Target
    from moonpin.preflight.result import Report

__all__ = ["dockerfile_fix", "for_image"]


def dockerfile_fix(fix: str, pip: str) -> str:
    """A fix line that runs pip, written for a Dockerfile (``RUN pip install ...``, the
    note after it as a shell comment), or apt-get (``RUN apt-get ...``); any other fix as
    it is."""
    from moonpin.preflight.judge.fixes import shell_line

    if fix.startswith("apt-get "):  # the image's own package manager, as it is
        return "RUN " + fix
    if not fix.startswith("pip "):
        return fix
    return "RUN " + shell_line(fix, pip)


def for_image(report: Report, target: Target) -> Report:
    """``report`` with image paths instead of the host folder the root is in, and its pip
    fix lines written for a Dockerfile."""
    from moonpin.preflight.result import CheckResult
    from moonpin.preflight.result import Report as _Report

    root = target.root or ""
    base = root.rstrip("/")

    def image(text: str) -> str:
        return text.replace(base + "/", "/").replace(base, "/") if base else text

    checks = [CheckResult(c.name, c.status, image(c.message),
                          None if c.fix is None else dockerfile_fix(image(c.fix), target.pip),
                          tuple(image(e) for e in c.evidence)) for c in report.checks]
    out = _Report(checks, report.usable, report.exit_code)

    def paths(value: Any) -> Any:
        if isinstance(value, str):
            return image(value)
        if isinstance(value, dict):
            return {k: paths(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [paths(v) for v in value]
        return value

    out.found = paths(report.found)
    return out
