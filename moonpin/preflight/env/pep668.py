"""Whether the image's pip refuses to install into its interpreter (PEP 668), so that the
check's fix lines carry ``--break-system-packages`` and work when pasted.

A distribution's own Python (Debian's and Ubuntu's ``/usr/bin/python3``, as in SGLang's
Docker image) ships ``EXTERNALLY-MANAGED`` in its standard library folder; pip then stops
every ``install`` and ``uninstall`` outside a virtualenv with ``error:
externally-managed-environment`` unless told otherwise: ``--break-system-packages``, the
``PIP_BREAK_SYSTEM_PACKAGES`` environment variable, or ``break-system-packages`` in a pip
configuration file (pip's ``check_externally_managed`` and its configuration loader).
Read only when a fix line is written; only ``os`` at import.
"""

from __future__ import annotations

import os

from moonpin.preflight.access.confined import NOWHERE, Confined

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from moonpin.preflight.result import Report

__all__ = ["FLAG", "config_files", "externally_managed", "for_target", "with_flag"]

FLAG = "--break-system-packages"
_TRUE = ("1", "true", "yes", "on", "y")


def config_files(home: str | None, prefix: str | None, env: Mapping[str, str]) -> list[str]:
    """pip's configuration files on Linux, as paths of the environment they belong to:
    ``$PIP_CONFIG_FILE``, the XDG and ``/etc`` site files, the user's, the environment's."""
    files: list[str] = []
    if env.get("PIP_CONFIG_FILE") and env["PIP_CONFIG_FILE"] != os.devnull:
        files.append(env["PIP_CONFIG_FILE"])
    for d in (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":"):
        if d:
            files.append(os.path.join(d, "pip", "pip.conf"))
    files.append("/etc/pip.conf")
    if home:
        files += [os.path.join(home, ".pip", "pip.conf"),
                  os.path.join(home, ".config", "pip", "pip.conf")]
    if prefix:
        files.append(os.path.join(prefix, "pip.conf"))
    return files


def _says_break(text: str) -> bool:
    """Whether an ini-style pip configuration sets ``break-system-packages`` true in a
    section pip reads for ``install``/``uninstall`` (``global``, ``install``,
    ``uninstall``); the last setting wins, as in pip."""
    section = ""
    value: bool | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip().lower()
            continue
        key, sep, v = line.partition("=")
        if not sep:
            key, sep, v = line.partition(":")
        if sep and section in ("global", "install", "uninstall") and key.strip().lower() in (
                "break-system-packages", "break_system_packages"):
            value = v.strip().lower() in _TRUE
    return bool(value)


def externally_managed(stdlib: str | None, in_venv: bool, env: Mapping[str, str],
                       configs: Sequence[str], read: object = None,
                       marker: str | None = None, within: Confined = NOWHERE) -> bool:
    """Whether pip refuses to install for this interpreter: its standard library folder
    (a host path) holds ``EXTERNALLY-MANAGED``, it is not a virtualenv, and neither the
    environment nor a configuration file (host paths; ``read(path) -> str | None`` reads
    one) overrides it. ``marker``: the host path of that file when it is not simply under
    ``stdlib`` (an image's, its symbolic links resolved inside the image's root); ``within``:
    the image root the configuration files are read confined to."""
    if in_venv or not stdlib:
        return False
    if not os.path.isfile(marker or os.path.join(stdlib, "EXTERNALLY-MANAGED")):
        return False
    if env.get("PIP_BREAK_SYSTEM_PACKAGES", "").strip().lower() in _TRUE:
        return False
    for path in configs:
        text = read(path) if callable(read) else _read(path, within)
        if isinstance(text, str) and _says_break(text):
            return False
    return True


def _read(path: str, within: Confined) -> str | None:
    try:
        return within.read(path, cap=1 << 20, what="pip configuration").decode(
            "utf-8", "replace")
    except OSError:
        return None


def with_flag(fix: str) -> str:
    """``fix`` with ``--break-system-packages`` on each pip ``install``/``uninstall``."""
    import re

    return re.sub(r"\bpip (install|uninstall) (?!--break-system-packages)",
                  lambda m: f"pip {m[1]} {FLAG} ", fix)


def for_target(report: Report, managed_pip: Callable[[], bool] | None) -> Report:
    """``report`` with ``--break-system-packages`` on its pip fix lines when the target's
    pip refuses to install into its interpreter otherwise (``managed_pip``, the target's
    :attr:`~moonpin.preflight.env.target.Target.managed`; None: not known, taken as no): advice
    that works when pasted. Asked only when a fix line runs pip."""
    if managed_pip is None or not any(c.fix and "pip " in c.fix for c in report.checks):
        return report
    try:
        managed = managed_pip()
    except OSError:
        return report
    if not managed:
        return report
    from moonpin.preflight.result import CheckResult
    from moonpin.preflight.result import Report as _Report

    checks = [CheckResult(c.name, c.status, c.message,
                          with_flag(c.fix) if c.fix and "pip " in c.fix else c.fix, c.evidence)
              for c in report.checks]
    out = _Report(checks, report.usable, report.exit_code)
    out.found = report.found
    return out
