"""What ``moonpin check`` reports: one :class:`CheckResult` per check, and the
:class:`Report` of them all with the exit code it means (0 usable, 1 not, 2 could not check).

Plain classes, not dataclasses: this is on the worker-start path (see
:mod:`moonpin.preflight.run`).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Literal

    Status = Literal["pass", "fail", "warn", "skip"]

__all__ = ["CheckResult", "Report", "report", "shown"]


class CheckResult:
    """One check: its name, pass/fail/warn/skip, what was found, the fix, the evidence."""

    __slots__ = ("evidence", "fix", "message", "name", "status")

    def __init__(self, name: str, status: Status, message: str, fix: str | None = None,
                 evidence: tuple[str, ...] = ()) -> None:
        self.name = name
        self.status: Status = status
        self.message = message
        self.fix = fix
        self.evidence = tuple(evidence)

    def _key(self) -> tuple[Any, ...]:
        return (self.name, self.status, self.message, self.fix, self.evidence)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CheckResult) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return "CheckResult(" + ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items()) + ")"

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "message": self.message,
                "fix": self.fix, "evidence": self.evidence}


class Report:
    """Every check, whether the image is usable, and the exit code that says so."""

    __slots__ = ("checks", "exit_code", "found", "usable")

    def __init__(self, checks: list[CheckResult], usable: bool, exit_code: int) -> None:
        self.checks = checks
        self.usable = usable
        self.exit_code = exit_code
        #: where sglang, mooncake and torch were found (:mod:`moonpin.preflight.installed.where`)
        self.found: dict[str, Any] = {}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Report) and (self.checks, self.usable, self.exit_code) == (
            other.checks, other.usable, other.exit_code)

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it was

    def __repr__(self) -> str:
        return (f"Report(checks={self.checks!r}, usable={self.usable!r}, "
                f"exit_code={self.exit_code!r})")

    def to_json(self) -> str:
        import json

        return json.dumps({"usable": self.usable, "exit_code": self.exit_code,
                           "checks": [c.as_dict() for c in self.checks],
                           "found": self.found}, indent=1)

    def quiet_lines(self) -> list[str]:
        """One line when usable; the failing checks (with their fixes) otherwise."""
        if self.usable:
            warned = sum(c.status == "warn" for c in self.checks)
            return ["moonpin check: usable" + (f" ({warned} warning{'s' * (warned != 1)}; "
                                               "run without -q to see them)" if warned else "")]
        return _check_lines([c for c in self.checks if c.status == "fail"])

    def lines(self) -> list[str]:
        """A line per check (and its fix), then the one verdict line."""
        return [*_check_lines(self.checks), self.verdict()]

    def stopped_lines(self) -> list[str]:
        """The text output of a check that could not run (exit 2): what it did read, and
        the verdict; its failures are said on stderr, as every command says bad input."""
        return [*_check_lines([c for c in self.checks if c.status != "fail"]), self.verdict()]

    def verdict(self) -> str:
        """``usable`` or ``not usable: N failures``, with the warnings counted and whether
        the deep probe ran (if not, why); ``could not check: WHAT`` when nothing was judged
        (exit 2)."""
        failed = sum(c.status == "fail" for c in self.checks)
        warned = sum(c.status == "warn" for c in self.checks)
        notes = [f"{warned} warning{'s' * (warned != 1)}"] if warned else []
        if self.exit_code == 2:  # nothing was judged: not a verdict on the image
            stopped = ", ".join(dict.fromkeys(c.name for c in self.checks
                                              if c.status == "fail")) or "input"
            return (f"could not check: {stopped} (the error above says why; "
                    f"{'; '.join([*notes, 'deep probe not run'])})")
        notes.append(self._deep_state())
        head = ("usable" if self.usable
                else f"not usable: {failed} failure{'s' * (failed != 1)}")
        return f"{head} ({'; '.join(notes)})"

    def _deep_state(self) -> str:
        deep = [c for c in self.checks if c.name.startswith("deep ")]
        if any(c.status != "skip" for c in deep):
            return "deep probe ran"
        skip = next((c.message for c in deep), None)
        if skip is None:
            why = ("mooncake not requested" if any(c.name == "mooncake" for c in self.checks)
                   else "the light checks failed first")
        elif "--no-deep" in skip:
            why = "--no-deep"
        elif "no NVIDIA driver" in skip:
            why = "no NVIDIA driver on this host"
        elif "no GPU" in skip:
            why = "no GPU on this host"
        else:
            why = skip.split(";")[0].split(" (")[0]
        return f"deep probe not run: {why}"


def shown(text: str) -> str:
    """``text`` as a line a terminal shows as it is: each character that is not printable
    (an escape sequence's ESC, a line break, a lone surrogate a file name that is not UTF-8
    decodes to) written as its Python escape. The names, versions and paths a message
    quotes come from the image: they must not move the cursor, retitle the terminal, forge
    a line of the report, or fail the print with a ``UnicodeEncodeError``."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _check_lines(checks: list[CheckResult]) -> list[str]:
    out = []
    for c in checks:
        out.append(shown(f"{c.status:<5} {c.name}: {c.message}"))
        if c.fix:
            out.append(shown(f"  fix: {c.fix}"))
    return out


def report(checks: list[CheckResult], strict: bool, could_not_check: bool = False) -> Report:
    if strict:
        checks = [CheckResult(c.name, "fail", c.message + " (--strict)", c.fix, c.evidence)
                  if c.status == "warn" else c for c in checks]
    usable = not could_not_check and all(c.status != "fail" for c in checks)
    return Report(checks, usable, 2 if could_not_check else 0 if usable else 1)
