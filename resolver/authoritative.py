"""Cross-check the scraped launch rules against an installed SGLang's own argument handling.

``moonpin args --authoritative --python PY`` runs, in a child interpreter ``PY`` (a CI
virtualenv with SGLang installed; this is the user's own installation, not a scraped
artifact), the release's own parser (``ServerArgs.add_cli_args`` + ``parse_args``) and then
its resolution steps one by one: the ``self._handle_*()`` calls of
``_run_resolution_pipeline`` (or ``__post_init__``) in their order, plus
``check_server_args``. Steps run on an object built from the parsed arguments without
``__post_init__``, each in ``try``: an ``AssertionError``/``ValueError`` is SGLang rejecting
the line (message, file, line); any other exception is the step not running here (no GPU, no
model files; ``HF_HUB_OFFLINE=1`` keeps it off the network) and later steps still run, on
what earlier steps resolved. A step that needs arguments is skipped.

:func:`compare` then sets each rejection against the rule recorded at that file and line,
and each rule moonpin found violated against the step it sits in: agreements, disagreements
(SGLang rejects where moonpin said ok / not checked, or accepts where moonpin said violated,
or rejects by a rule the KB does not record) and what stays unconfirmed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from resolver.launch_args import Verdict

__all__ = ["Comparison", "Outcome", "compare", "run"]

MARK = "MOONPIN-AUTHORITATIVE "

#: The child: imports the user's SGLang, prints one JSON line after MARK.
_CHILD = r"""
import argparse, ast, contextlib, dataclasses, inspect, io, json, sys, textwrap, traceback
argv = json.loads(sys.argv[1])
out = {"version": None, "parser": None, "steps": []}
def done():
    sys.stdout.write("\n" + MARK + json.dumps(out) + "\n")
    sys.stdout.flush()
def where(tb):
    frames = [f for f in traceback.extract_tb(tb) if "/sglang/" in f.filename.replace("\\", "/")]
    if not frames:
        return None, None
    f = frames[-1]
    name = f.filename.replace("\\", "/")
    return name[name.rindex("/sglang/") + 1:], f.lineno
try:
    from importlib.metadata import version
    out["version"] = version("sglang")
    from sglang.srt.server_args import ServerArgs
except BaseException as e:
    out["error"] = f"cannot import sglang.srt.server_args: {type(e).__name__}: {e}"
    done(); sys.exit(0)
parser = argparse.ArgumentParser(prog="sglang")
ServerArgs.add_cli_args(parser)
err = io.StringIO()
try:
    with contextlib.redirect_stderr(err):
        ns = parser.parse_args(argv)
except SystemExit:
    out["parser"] = err.getvalue().strip().splitlines()[-1:] or ["rejected"]
    done(); sys.exit(0)
obj = object.__new__(ServerArgs)
for f in dataclasses.fields(ServerArgs):
    if hasattr(ns, f.name):
        value = getattr(ns, f.name)
    elif f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        continue
    object.__setattr__(obj, f.name, value)
for k, v in vars(ns).items():
    if not hasattr(obj, k):
        object.__setattr__(obj, k, v)
steps = []
for entry in ("_run_resolution_pipeline", "__post_init__"):
    fn = getattr(ServerArgs, entry, None)
    if fn is None:
        continue
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        continue
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"):
            steps.append((node.lineno, node.func.attr, len(node.args) + len(node.keywords)))
    if steps:
        break
if hasattr(ServerArgs, "check_server_args"):
    steps.append((10**9, "check_server_args", 0))
if "_resolved_overrides" not in vars(obj):
    object.__setattr__(obj, "_resolved_overrides", [])
for _, name, nargs in sorted(steps):
    rec = {"step": name}
    if name in ("_run_resolution_pipeline", "__post_init__"):
        continue
    if nargs:
        rec["status"] = "skipped"
        rec["why"] = "takes arguments the pipeline computes"
        out["steps"].append(rec); continue
    try:
        getattr(obj, name)()
        rec["status"] = "ok"
    except (AssertionError, ValueError) as e:
        rec["status"] = "rejected"
        rec["type"] = type(e).__name__
        rec["message"] = str(e)
        rec["path"], rec["line"] = where(e.__traceback__)
    except BaseException as e:
        rec["status"] = "error"
        rec["message"] = f"{type(e).__name__}: {e}"[:300]
        rec["path"], rec["line"] = where(e.__traceback__)
    out["steps"].append(rec)
done()
""".replace("MARK", repr(MARK))


@dataclass
class Outcome:
    version: str | None = None
    error: str | None = None  # the child could not run at all
    parser: str | None = None  # the release's parser refused the line (its message)
    steps: list[dict[str, Any]] = field(default_factory=list)


def run(python: str, argv: Sequence[str], *, timeout: float = 300.0) -> Outcome:
    """Run the installed SGLang's own argument handling in ``python`` (never raises for
    what happens in the child)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        proc = subprocess.run([python, "-c", _CHILD, json.dumps(list(argv))], env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        return Outcome(error=f"no interpreter at {python}")
    except subprocess.TimeoutExpired:
        return Outcome(error=f"SGLang's argument handling did not finish in {timeout:.0f} s")
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(MARK)), None)
    if line is None:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        return Outcome(error=f"the child interpreter died ({how}): {tail}")
    doc = json.loads(line[len(MARK):])
    parser = doc.get("parser")
    return Outcome(version=doc.get("version"), error=doc.get("error"),
                   parser=" ".join(parser) if parser else None, steps=doc.get("steps") or [])


@dataclass
class Comparison:
    agree: list[str] = field(default_factory=list)
    disagree: list[str] = field(default_factory=list)
    unconfirmed: list[str] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)  # steps that could not run here

    @property
    def sglang_rejects(self) -> bool:
        return any(s.startswith("SGLang rejects") for s in self.agree + self.disagree)


#: A traceback names the line being executed: for ``assert (\n cond\n), msg`` that can be a
#: few lines below the statement's first line, which is the line a rule records.
_SPAN = 6


def _says(template: str, message: str) -> bool:
    """Whether ``message`` is what the rule's message template (``{...}`` placeholders for
    the f-string parts) renders to."""
    parts = re.split(r"\{[^{}]*\}", template)
    return re.fullmatch(".*".join(re.escape(p) for p in parts), message, re.S) is not None


def _rule_at(verdicts: Sequence[Verdict], path: Any, line: Any,
             message: str) -> Verdict | None:
    """The rule whose statement raised: a rule of that file starting at or a few lines above
    the raising line whose message matches, else one starting exactly there."""
    if not isinstance(path, str) or not isinstance(line, int):
        return None
    near = [v for v in verdicts
            if v.rule.path == path and 0 <= line - v.rule.line <= _SPAN]
    saying = [v for v in near if _says(v.rule.message, message)]
    if saying:
        return max(saying, key=lambda v: v.rule.line)
    return next((v for v in near if v.rule.line == line), None)


def compare(verdicts: Sequence[Verdict], outcome: Outcome) -> Comparison:
    out = Comparison()
    if outcome.error or outcome.parser:
        return out
    step_of = {s["step"]: s for s in outcome.steps}
    matched: set[tuple[str, int]] = set()
    for s in outcome.steps:
        if s["status"] == "error":
            out.not_run.append(f"{s['step']}: {s['message']}")
        if s["status"] != "rejected":
            continue
        at = f"{s.get('path')}:{s.get('line')}"
        v = _rule_at(verdicts, s.get("path"), s.get("line"), str(s.get("message") or ""))
        if v is None:
            out.disagree.append(f"SGLang rejects in {s['step']} ({at}): {s['message']}; "
                                "the KB records no rule there")
            continue
        matched.add((v.rule.path, v.rule.line))
        if v.status == "violated":
            out.agree.append(f"SGLang rejects ({at}): {s['message']}")
        else:
            said = "held" if v.status == "ok" else f"could not be checked ({v.why})"
            out.disagree.append(f"SGLang rejects ({at}): {s['message']}; moonpin said the rule "
                                f"{said}")
    for v in verdicts:
        if v.status != "violated" or (v.rule.path, v.rule.line) in matched:
            continue
        step = step_of.get(v.rule.function or "")
        if step is None:
            out.unconfirmed.append(f"{v.message} ({v.evidence}): {v.rule.function} is not a "
                                   "step SGLang's resolution runs on its own")
        elif step["status"] == "ok":
            out.disagree.append(f"SGLang accepts {v.rule.function}, moonpin says violated: "
                                f"{v.message} ({v.evidence})")
        elif step["status"] == "rejected":
            out.unconfirmed.append(f"{v.message} ({v.evidence}): {v.rule.function} stopped "
                                   f"earlier, at {step.get('path')}:{step.get('line')}")
        else:
            out.unconfirmed.append(f"{v.message} ({v.evidence}): {v.rule.function} could not "
                                   f"run here ({step.get('message') or step.get('why')})")
    return out
