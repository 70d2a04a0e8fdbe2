"""Cross-check the scraped launch rules against an installed SGLang's own argument handling.

``moonpin args --authoritative --python PY`` runs, in a child interpreter ``PY`` (a CI
virtualenv with SGLang installed; this is the user's own installation, not a scraped
artifact), the release's own parser (``ServerArgs.add_cli_args`` + ``parse_args``) and then
its resolution steps one by one: up to 0.5.18 the ``self._handle_*()`` calls of
``_run_resolution_pipeline`` (or ``__post_init__``), on an object built from the parsed
arguments without ``__post_init__``; from 0.5.19 the ``run_hook(handler, server_args)``
calls of ``sglang.srt.arg_groups.pipeline.run_resolution_pipeline`` (the code between them,
which reads the model's config, is not run); in their order, plus ``check_server_args``.
An unset ``device`` is set to ``cuda``, as SGLang resolves it on the GPU worker the line is
for. Each step runs in ``try``: an ``AssertionError``/``ValueError`` is SGLang rejecting
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

from moonpin.resolver.args.rules import Verdict

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
def record(name, fn, *a):
    rec = {"step": name}
    try:
        result = fn(*a)
        rec["status"] = "ok"
        return result
    except (AssertionError, ValueError) as e:
        rec["status"] = "rejected"
        rec["type"] = type(e).__name__
        rec["message"] = str(e)
        rec["path"], rec["line"] = where(e.__traceback__)
    except BaseException as e:
        rec["status"] = "error"
        rec["message"] = f"{type(e).__name__}: {e}"[:300]
        rec["path"], rec["line"] = where(e.__traceback__)
    finally:
        out["steps"].append(rec)
def assume_cuda(obj):
    # As on the GPU worker the line is for (and as moonpin's evaluator assumes): SGLang
    # resolves an unset device from the machine, which here has no accelerator.
    if getattr(obj, "device", "x") is None:
        try:
            object.__setattr__(obj, "device", "cuda")
        except BaseException:
            try:
                setattr(obj, "device", "cuda")
            except BaseException:
                return
        out["assumed"] = ["device=cuda (SGLang resolves an unset --device from the machine)"]
try:  # 0.5.19+: hooks run through arg_groups.pipeline's run_hook, in its order
    from sglang.srt.arg_groups import pipeline as _pipeline
    hooked = hasattr(_pipeline, "run_resolution_pipeline") and hasattr(_pipeline, "run_hook")
except BaseException:
    hooked = False
if hooked:
    # Each run_hook(handler, server_args) of run_resolution_pipeline, in source order, on
    # a record built without resolving; the code between them (model config reads) is not
    # run, so one step that needs the model does not stop the others.
    import importlib
    _run_hook = _pipeline.run_hook
    obj = record("construct", ServerArgs.from_cli_args, ns) if hasattr(
        ServerArgs, "from_cli_args") else None
    if obj is None:
        done(); sys.exit(0)
    out["steps"] = [st for st in out["steps"] if st["step"] != "construct"]
    assume_cuda(obj)
    for attr, value in (("_resolved_overrides", list(getattr(obj, "_resolved_overrides", ()))),
                        ("_raw_input", {})):
        try:
            setattr(obj, attr, value)
        except BaseException:
            pass
    try:
        fields = _pipeline.record_fields(type(obj))
        obj._raw_input = {f.name: getattr(obj, f.name) for f in fields}
    except BaseException:
        pass
    tree = ast.parse(textwrap.dedent(inspect.getsource(_pipeline.run_resolution_pipeline)))
    names = dict(vars(_pipeline))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            try:
                mod = importlib.import_module(node.module)
            except BaseException:
                continue
            for alias in node.names:
                if hasattr(mod, alias.name):
                    names[alias.asname or alias.name] = getattr(mod, alias.name)
    calls = sorted((n.lineno, n.args[0].id) for n in ast.walk(tree)
                   if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                   and n.func.id == "run_hook" and n.args and isinstance(n.args[0], ast.Name))
    for _, name in calls:
        if name in names:
            record(name, _run_hook, names[name], obj)
        else:
            out["steps"].append({"step": name, "status": "skipped",
                                 "why": "not found in the pipeline's imports"})
    if hasattr(obj, "check_server_args"):
        record("check_server_args", obj.check_server_args)
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
assume_cuda(obj)
if "_resolved_overrides" not in vars(obj):
    object.__setattr__(obj, "_resolved_overrides", [])
for _, name, nargs in sorted(steps):
    if name in ("_run_resolution_pipeline", "__post_init__"):
        continue
    if nargs:
        out["steps"].append({"step": name, "status": "skipped",
                             "why": "takes arguments the pipeline computes"})
        continue
    record(name, getattr(obj, name))
done()
""".replace("MARK", repr(MARK))


@dataclass
class Outcome:
    version: str | None = None
    error: str | None = None  # the child could not run at all
    parser: str | None = None  # the release's parser refused the line (its message)
    steps: list[dict[str, Any]] = field(default_factory=list)
    assumed: list[str] = field(default_factory=list)  # what was set as on the GPU worker


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
                   parser=" ".join(parser) if parser else None, steps=doc.get("steps") or [],
                   assumed=list(doc.get("assumed") or []))


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
