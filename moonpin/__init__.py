"""moonpin: which SGLang, torch and compiled extension releases work together; will a worker start.

Which releases work together is read out of the real release artifacts; whether a worker's
environment will start, out of its files.

The public face (loaded on first use, PEP 562: ``import moonpin`` imports nothing else,
prints nothing and never exits): :func:`check` and :class:`Target`, :func:`which`,
:func:`explain`, :func:`judge_pins` (:mod:`moonpin.api`), the values they return
(:class:`Report`, :class:`CheckResult`) and the one error they raise,
:class:`MoonpinError`.

The package: ``moonpin.kb`` (the knowledge base), ``moonpin.scrapers`` and ``moonpin.readers``
(fetching and reading artifacts), ``moonpin.resolver`` (the rule, the graph, queries, pins,
launch arguments, the matrix), ``moonpin.preflight`` (the check a worker runs at start) and
``moonpin.cli`` (the ``moonpin`` command); ARCHITECTURE.md is their map."""

TYPE_CHECKING = False
if TYPE_CHECKING:
    from moonpin.api import Target, check, explain, judge_pins, which
    from moonpin.kb.errors import MoonpinError
    from moonpin.preflight.result import CheckResult, Report

__all__ = ["CheckResult", "MoonpinError", "Report", "Target", "check", "explain", "judge_pins",
           "which"]

#: public name -> the module that defines it
_WHERE = {"Target": "moonpin.api", "check": "moonpin.api", "explain": "moonpin.api",
          "judge_pins": "moonpin.api", "which": "moonpin.api",
          "CheckResult": "moonpin.preflight.result", "Report": "moonpin.preflight.result",
          "MoonpinError": "moonpin.kb.errors"}


def __getattr__(name: str) -> object:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'moonpin' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(where), name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
