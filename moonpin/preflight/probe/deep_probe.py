"""The deep probe: import torch and the process-group module in a child interpreter, with
a timeout, and read what it did (the names on the module, the backends torch registered).
A crash or a hang is a finding; a host without the NVIDIA driver or a GPU is not."""

from __future__ import annotations

import os

from moonpin.preflight.installed.build_facts import UNREADABLE_SCHEME
from moonpin.preflight.judge.libraries import provider_hint
from moonpin.preflight.result import CheckResult

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    StrPath = str | os.PathLike[str]

__all__ = ["deep_probe", "downgrade_light_libraries"]


def downgrade_light_libraries(checks: list[CheckResult]) -> list[CheckResult]:
    """What the deep probe saw is not overruled by a light guess: when the import worked
    and both backends registered, a light library failure is a warning that names the
    disagreement."""
    by = {c.name: c.status for c in checks}
    if by.get("deep import") != "pass" or by.get("deep backends") != "pass":
        return checks
    return [CheckResult(c.name, "warn", f"{c.message} (but the deep import loaded it here, "
                        "so the light reading of the libraries disagrees with the loader: "
                        "please report it)", c.fix, c.evidence)
            if c.status == "fail" and (c.name in ("libraries", "import chain") or (
                c.name == "loader" and UNREADABLE_SCHEME in c.message)) else c
            for c in checks]


#: Runs in a child interpreter: imports only, then one JSON line on stdout.
_PROBE = r"""
import importlib, json, sys
args = json.loads(sys.argv[1])
out = {"stage": "torch"}
def done():
    sys.stdout.write(chr(10) + "MOONPIN-PROBE " + json.dumps(out) + chr(10))
    sys.stdout.flush()
try:
    import torch
    out["torch"] = str(getattr(torch, "__version__", "?"))
except BaseException as e:  # the answer is the exception, whatever it is
    out["error"] = f"{type(e).__name__}: {e}"
    done(); sys.exit(0)
out["stage"] = "import"
try:
    mod = importlib.import_module(args["module"])
except BaseException as e:  # the answer is the exception, whatever it is
    out["error"] = f"{type(e).__name__}: {e}"
    done(); sys.exit(0)
out["stage"] = "done"
out["missing"] = [n for n in args["names"] if not hasattr(mod, n)]
try:
    import torch.distributed as dist
    cap = dist.Backend.backend_capability
    out["capability"] = {k: list(v) if isinstance(v, (list, tuple)) else repr(v)
                         for k, v in cap.items() if k in args["backends"]}
except Exception as e:  # torch internals moved: reported as unreadable, not a failure
    out["capability_error"] = f"{type(e).__name__}: {e}"
done()
"""


def _tail(f: Any, cap: int = 1 << 20) -> bytes:
    """The last ``cap`` bytes a child wrote to ``f``."""
    size = f.seek(0, os.SEEK_END)
    f.seek(max(0, size - cap))
    return bytes(f.read())


def _hang(module: str, timeout: float, running: list[str]) -> CheckResult:
    """The failure at the timeout, naming what was running (a compiling loader's tools)."""
    compiling = [c for c in running if c in ("ninja", "cc1plus", "nvcc", "c++", "g++",
                                              "cicc", "ptxas", "ld")]
    what = (f"gave no answer in {timeout:g}s: it was still compiling its adapter "
            f"({', '.join(compiling)} running), which a worker pays at start unless it is "
            "compiled at image build" if compiling else
            f"hung: no answer in {timeout:g}s (a worker would stall at start)")
    return CheckResult("deep probe", "fail", f"importing {module} {what}"
                       + (f" (processes: {', '.join(running[:8])})" if running else ""),
                       "run `python -c 'import " + module + "'` in the image to see where")


def deep_probe(module: str, names: Sequence[str], site_packages: Sequence[StrPath] | None,
                timeout: float, python: str, backends: Sequence[str] = ()) -> list[CheckResult]:
    """Import ``module`` in a child interpreter (``python``) and read what it did: the
    ``names`` it lacks, and whether torch then registered ``backends`` (the project's, from
    its rule: :class:`moonpin.preflight.extensions.seam.Probe`)."""
    import json
    import signal

    ran = _run_probe(module, names, site_packages, timeout, python, backends)
    project = module.partition(".")[0]
    if isinstance(ran, CheckResult):
        return [ran]
    returncode, stdout, stderr = ran
    if returncode < 0:
        try:
            sig = signal.Signals(-returncode).name
        except ValueError:
            sig = f"signal {-returncode}"
        return [CheckResult("deep probe", "fail",
                            f"importing {module} crashed the interpreter ({sig})",
                            "the build does not match this torch/python: reinstall the "
                            f"{project} release `moonpin which {project}` names")]
    line = next((ln for ln in reversed(stdout.splitlines())
                 if ln.startswith("MOONPIN-PROBE ")), None)
    out: Any = None
    if line is not None:
        try:
            out = json.loads(line.removeprefix("MOONPIN-PROBE "))
        except ValueError:
            out = None
    if not isinstance(out, dict) or out.get("stage") not in ("torch", "import", "done") \
            or not isinstance(out.get("error", ""), (str, type(None))):
        tail = (stderr.strip().splitlines() or ["no output"])[-1][:300]
        return [CheckResult("deep probe", "fail",
                            f"the probe exited {returncode} without a readable answer: "
                            f"{tail}")]
    if out["stage"] != "done":
        return [_import_failure(module, out["stage"], str(out.get("error") or ""),
                                str(out.get("torch") or ""))]
    return _probe_answer(module, out, backends)


def _run_probe(module: str, names: Sequence[str], site_packages: Sequence[StrPath] | None,
               timeout: float, python: str, backends: Sequence[str] = (),
               ) -> tuple[int, str, str] | CheckResult:
    """The probe's exit status and the tails of its stdout and stderr, or the failure (it
    could not start, it hung)."""
    import json
    import tempfile

    from moonpin.preflight.probe.probe_reaper import run_reaped

    env = dict(os.environ)
    if site_packages is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            [*(os.fspath(p) for p in site_packages), *filter(None, [env.get("PYTHONPATH")])])
    cmd = [python, "-c", _PROBE, json.dumps({"module": module, "names": list(names),
                                             "backends": list(backends)})]
    # Output goes to files, not pipes: a child the import leaves running may keep them
    # open and would make us wait for it. The probe runs under a reaper of moonpin's own
    # (moonpin/preflight/probe/probe_reaper.py): at the end, every process it left goes, in
    # its group or
    # not (a compiling loader's ninja and cc1plus, a daemon that called setsid()), and at a
    # timeout what ran is named.
    with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:
        try:
            rep = run_reaped(cmd, env, timeout, out_f, err_f)
        except OSError as e:
            rep = {"error": e.strerror or str(e)}
        if "error" in rep:
            return CheckResult("deep probe", "fail", f"cannot run {python}: "
                               f"{str(rep['error'])[:300]}", "pass the image's interpreter "
                               "with --python")
        if rep.get("timeout") or not isinstance(rep.get("rc"), int):
            running = rep.get("running")
            return _hang(module, timeout, [str(c) for c in running]
                         if isinstance(running, list) else [])
        stdout_b, stderr_b = _tail(out_f), _tail(err_f)
    return (rep["rc"], stdout_b.decode("utf-8", "replace"),
            stderr_b.decode("utf-8", "replace"))


def _import_fix(module: str, error: str, torch: str) -> str:
    """What to do about the error the import raised, from its own words: the library that
    provides a missing one, a CUDA torch for a compiling loader that found no CUDA_HOME over
    a CPU torch, the tool it asked for; else how to see the whole traceback."""
    hint = provider_hint(error)
    if hint:
        return hint
    if ("nvcc" in error or "CUDA_HOME" in error or "CUDA toolkit" in error):
        if "+cpu" in torch:
            from moonpin.preflight.judge.fixes import torch_req

            return (f"torch {torch} is a CPU build, for which torch.utils.cpp_extension has "
                    "no CUDA_HOME: pip uninstall -y torch && pip install "
                    f"'{torch_req(torch.partition('+')[0])}'")
        return ("install a CUDA toolkit with nvcc in the image (CUDA_HOME), or compile the "
                "adapter once at image build")
    if "ninja" in error.lower():
        return "pip install ninja in the image, or compile the adapter once at image build"
    return (f"the error above is what `import {module}` raised; run `python -c 'import "
            f"{module}'` in the image for its whole traceback")


def _import_failure(module: str, stage: str, error: str, torch: str = "") -> CheckResult:
    """torch or the module did not import: a finding, or (no driver, no GPU) a limit of
    this host that the light checks decide."""
    if stage == "torch":
        return CheckResult("deep probe", "fail",
                           f"torch is installed but fails to load: {error}",
                           "reinstall torch (its shared libraries or its CUDA packages are "
                           "broken or missing)")
    if "visible CUDA device" in error:
        return CheckResult("deep probe", "skip",
                           f"could not import {module} here: it compiles at first import "
                           f"and this host shows no GPU ({error[:300]}); not an "
                           "incompatibility, the light checks decide")
    if "libcuda.so" in error:
        return CheckResult("deep probe", "skip",
                           f"could not import {module} here: no NVIDIA driver on this host "
                           f"({error}); not an incompatibility, the light checks decide")
    return CheckResult("deep probe", "fail", f"import {module} fails: {error}",
                       _import_fix(module, error, torch))


def _probe_answer(module: str, out: dict[str, Any], backends: Sequence[str] = (),
                  ) -> list[CheckResult]:
    """The module imported: the names it lacks, and the backends torch then registered."""
    results = []
    missing = out.get("missing") or []
    if missing:
        results.append(CheckResult("deep names", "fail",
                                   f"{module} imports but lacks {', '.join(missing)}"))
    else:
        results.append(CheckResult("deep import", "pass",
                                   f"import {module} works with torch {out.get('torch')}"))
    if "capability_error" in out:
        results.append(CheckResult("deep backends", "warn",
                                   "cannot read torch.distributed.Backend.backend_capability "
                                   f"({out['capability_error']}): torch internals moved"))
    else:
        cap = out.get("capability") or {}
        lacking = [b for b in backends if b not in cap]
        if lacking:
            results.append(CheckResult("deep backends", "fail",
                                       f"after import, torch has no {' / '.join(lacking)} backend "
                                       f"registered (registered: {', '.join(cap) or 'none'})"))
        else:
            results.append(CheckResult("deep backends", "pass", "registered: " + ", ".join(
                f"{k} {tuple(v) if isinstance(v, list) else v}" for k, v in cap.items())))
    return results
