"""The report as its target takes it: fix lines for the target's shell and pip, image paths.

The last room of the walk (:mod:`moonpin.preflight.run`): every line is said by then, and each
pip fix line is rewritten for where it will be pasted — with ``--break-system-packages``
when the target's pip refuses to install otherwise (PEP 668,
:func:`moonpin.preflight.env.pep668.for_target`), run by the ``--python`` interpreter's own
pip (:func:`moonpin.preflight.judge.fixes.shell_line`), or, for an image judged from its
files, with image paths and written for a Dockerfile
(:func:`moonpin.preflight.env.rootfs.for_image`).

Only what :mod:`moonpin.preflight.result` loads at import: this runs at worker start.
"""

from __future__ import annotations

from moonpin.preflight.result import CheckResult, Report

TYPE_CHECKING = False
if TYPE_CHECKING:
    from moonpin.preflight.env.target import Target

__all__ = ["for_pip", "for_target"]


def for_pip(report: Report, target: Target | None) -> Report:
    """``report`` with ``--break-system-packages`` on its pip fix lines when ``target``'s pip
    refuses to install into its interpreter otherwise (asked only when a fix line runs
    pip: no fix line, no look at the target)."""
    if target is None or not any(c.fix and "pip " in c.fix for c in report.checks):
        return report
    from moonpin.preflight.env.pep668 import for_target as pep668

    return pep668(report, target.managed)


def for_target(report: Report, target: Target | None, python: str | None) -> Report:
    """``report`` written for its target: for an image root (``target.root``), image paths
    instead of the host folder it is in and pip lines for a Dockerfile; else each pip fix
    line to paste into a shell, run by the ``python`` interpreter's own pip (``PY -m pip``)
    when one is given, a note as a shell comment."""
    if target is not None and target.root is not None:
        from moonpin.preflight.judge.dockerfile import for_image

        return for_image(report, target)
    if not any(c.fix and c.fix.startswith("pip ") for c in report.checks):
        return report
    import shlex

    from moonpin.preflight.judge.fixes import shell_line

    pip = f"{shlex.quote(python)} -m pip" if python is not None else "pip"
    checks = [CheckResult(c.name, c.status, c.message,
                          shell_line(c.fix, pip) if c.fix else c.fix, c.evidence)
              for c in report.checks]
    out = Report(checks, report.usable, report.exit_code)
    out.found = report.found
    return out
