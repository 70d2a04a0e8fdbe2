"""The deep probe: import torch and the process-group module in a child interpreter, with
a timeout, and read what it did (the names on the module, the backends torch registered).
A crash or a hang is a finding; a host without the NVIDIA driver or a GPU is not."""

from __future__ import annotations

import os

from resolver.build_facts import _UNREADABLE_SCHEME
from resolver.check_libraries import _provider_hint
from resolver.check_result import CheckResult
from resolver.image_facts import BACKENDS, _list

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    StrPath = str | os.PathLike[str]

__all__: list[str] = []


def _downgrade_light_libraries(checks: list[CheckResult]) -> list[CheckResult]:
    """What the deep probe saw is not overruled by a light guess: when the import worked
    and both backends registered, a light library failure is a warning that names the
    disagreement."""
    by = {c.name: c.status for c in checks}
    if by.get("deep import") != "pass" or by.get("deep backends") != "pass":
        return checks
    return [CheckResult(c.name, "warn", f"{c.message} (but the deep import loaded it here, "
                        "so the light reading of the libraries disagrees with the loader: "
                        "please report it)", c.fix, c.evidence)
            if c.status == "fail" and (c.name == "libraries" or (
                c.name == "loader" and _UNREADABLE_SCHEME in c.message)) else c
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
                         for k, v in cap.items() if k in ("mooncake", "mooncake-cpu")}
except Exception as e:  # torch internals moved: reported as unreadable, not a failure
    out["capability_error"] = f"{type(e).__name__}: {e}"
done()
"""


def _tail(f: Any, cap: int = 1 << 20) -> bytes:
    """The last ``cap`` bytes a child wrote to ``f``."""
    size = f.seek(0, os.SEEK_END)
    f.seek(max(0, size - cap))
    return bytes(f.read())


def _wait_probe(proc: Any, module: str, timeout: float) -> CheckResult | None:
    """Wait for the probe; at the timeout, the failure naming what was running. The
    child's process group is ended either way."""
    if not _wait_unreaped(proc.pid, timeout):
        running = _group_commands(proc.pid)
        _kill_group(proc)
        compiling = [c for c in running if c in ("ninja", "cc1plus", "nvcc", "c++", "g++",
                                                  "cicc", "ptxas", "ld")]
        what = (f"gave no answer in {timeout:g}s: it was still compiling its adapter "
                f"({', '.join(compiling)} running), which a worker pays at start unless it is "
                "compiled at image build" if compiling else
                f"hung: no answer in {timeout:g}s (a worker would stall at start)")
        return CheckResult("deep probe", "fail", f"importing {module} {what}"
                           + (f" (processes: {', '.join(running[:8])})" if running else ""),
                           "run `python -c 'import " + module + "'` in the image to see where")
    _kill_group(proc)  # whatever the child left running
    return None


def _wait_unreaped(pid: int, timeout: float) -> bool:
    """Wait for the child to exit without reaping it (``WNOWAIT``): while it is a zombie its
    pid, and so its process group's id, cannot be given to another process, so the group
    can be killed safely afterwards. False at the timeout."""
    import time

    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None:
                return True
        except ChildProcessError:
            return True  # already reaped
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _group_commands(pgid: int) -> list[str]:
    """The command names of the processes in group ``pgid`` (from /proc; empty where it
    cannot be read)."""
    out = []
    for pid in _list("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read(4096).decode("utf-8", "replace")
        except OSError:
            continue
        name, _, rest = stat.partition(" (")[2].rpartition(") ")
        fields = rest.split()
        if len(fields) > 2 and fields[2] == str(pgid):
            out.append(name)
    return sorted(set(out))


def _kill_group(proc: Any) -> None:
    """End the child's process group, then reap the child (still unreaped here: see
    :func:`_wait_unreaped`)."""
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass  # already gone
    try:
        proc.wait(timeout=10)
    except Exception:  # a child that cannot be reaped must not crash the check
        pass


def _deep_probe(module: str, names: Sequence[str], site_packages: Sequence[StrPath] | None,
                timeout: float, python: str) -> list[CheckResult]:
    """Import ``module`` in a child interpreter (``python``) and read what it did."""
    import json
    import signal

    ran = _run_probe(module, names, site_packages, timeout, python)
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
                            "the build does not match this torch/python: reinstall the mooncake "
                            "release `moonpin which mooncake` names")]
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
        return [_import_failure(module, out["stage"], str(out.get("error") or ""))]
    return _probe_answer(module, out)


def _run_probe(module: str, names: Sequence[str], site_packages: Sequence[StrPath] | None,
               timeout: float, python: str) -> tuple[int, str, str] | CheckResult:
    """The probe's exit status and the tails of its stdout and stderr, or the failure (it
    could not start, it hung)."""
    import json
    import subprocess
    import tempfile

    env = dict(os.environ)
    if site_packages is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            [*(os.fspath(p) for p in site_packages), *filter(None, [env.get("PYTHONPATH")])])
    cmd = [python, "-c", _PROBE, json.dumps({"module": module, "names": list(names)})]
    # Output goes to files, not pipes: a child the import leaves running keeps a pipe open
    # and would make us wait for it. Its own session: at the end the whole group goes (a
    # compiling loader's ninja and cc1plus too), and at a timeout what ran is named.
    with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:
        try:
            proc = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, env=env,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            return CheckResult("deep probe", "fail", f"cannot run {python}: "
                               f"{e.strerror or e}", "pass the image's interpreter with "
                               "--python")
        result = _wait_probe(proc, module, timeout)
        if result is not None:
            return result
        stdout_b, stderr_b = _tail(out_f), _tail(err_f)
    return (proc.returncode, stdout_b.decode("utf-8", "replace"),
            stderr_b.decode("utf-8", "replace"))


def _import_failure(module: str, stage: str, error: str) -> CheckResult:
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
                       _provider_hint(error) or "see the light checks above for the cause")


def _probe_answer(module: str, out: dict[str, Any]) -> list[CheckResult]:
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
        lacking = [b for b in BACKENDS if b not in cap]
        if lacking:
            results.append(CheckResult("deep backends", "fail",
                                       f"after import, torch has no {' / '.join(lacking)} backend "
                                       f"registered (registered: {', '.join(cap) or 'none'})"))
        else:
            results.append(CheckResult("deep backends", "pass", "registered: " + ", ".join(
                f"{k} {tuple(v) if isinstance(v, list) else v}" for k, v in cap.items())))
    return results
