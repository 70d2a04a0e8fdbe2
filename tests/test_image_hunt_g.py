"""Opt-in (``-m image``): packages no loader rule of moonpin reads, judged by following their
plain import (:func:`moonpin.preflight.extensions.astread.plain_import`), against what
``import <package>`` really does in real images built by ``tests/realimg/stack.sh --hunt-g``
under ``MOONPIN_TEST_REALIMG`` (``hunt-G-*``: hard-link copies of ``stack`` with real wheels
of the index installed by their own pip; the truth is ``probe_stack.py``'s ``import@<name>``
on the stub driver, no GPU).

* The recorded truth (``hunt-G-reports/*.json``) still holds: the imports are run again and
  end the same way.
* The check's line for each package agrees with its import: ``pass`` (or ``warn``: a build
  whose failure an ``except`` catches) where it imports, ``fail`` where it raises; ``skip``
  only with "not judged" named (a load by a computed path or name), never a claim.
* The cross-check: each ruled project's package judged with its rule removed agrees with its
  rule's verdict wherever that loader is plain (deep_ep), and says "not judged" where it is
  not (nixl_ep, sgl_kernel: a build chosen by a computed name).

SGLang's launch line reaches a rule-less package through the backend flags the check reads
(``--moe-a2a-backend mori`` imports ``mori``); the packages here (``deep_gemm`` for
``--moe-runner-backend deep_gemm``, ``torch_memory_saver`` for ``--enable-memory-saver``,
``humming`` for ``--moe-runner-backend humming``, xformers) are reached by flags it does not
read yet, so each is handed to the walk as a requested backend's package would be. Nothing
here changes an image.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.image

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "tests" / "realimg" / "probe_stack.py"
REALIMG = os.environ.get("MOONPIN_TEST_REALIMG", "")
#: report -> (image folder, the packages judged without a rule)
IMAGES = {
    "G-ktkernel": ("hunt-G-ktkernel", ("deep_gemm", "kt_kernel", "sgl_kernel")),
    "G-plain": ("hunt-G-plain", ("torch_memory_saver", "xformers", "humming")),
    "G-stack": ("stack", ("deep_ep", "flashinfer", "nixl_ep", "sgl_kernel")),
}
#: the ruled packages' truth for the cross-check (deep_ep past its GPU gate, as its rule is
#: compared in test_image_stack.py)
RULED_TRUTH = {"deep_ep": "deep_ep", "flashinfer": "flashinfer", "nixl_ep": "nixl_ep",
               "sgl_kernel": "sgl_kernel"}
CASES = [(r, p) for r, (_, pkgs) in IMAGES.items() for p in pkgs]


def _root() -> Path:
    if not REALIMG or not (Path(REALIMG) / "stack" / "bin" / "python").exists():
        pytest.skip("set MOONPIN_TEST_REALIMG to the folder tests/realimg/stack.sh built into")
    return Path(REALIMG)


def report(name: str) -> dict[str, Any]:
    path = _root() / "hunt-G-reports" / f"{name}.json"
    if not path.is_file():
        pytest.skip(f"no {path}: run tests/realimg/stack.sh --hunt-g")
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def _image(name: str) -> Path:
    v = _root() / IMAGES[name][0]
    if not (v / "bin" / "python").exists():
        pytest.skip(f"no {v}: run tests/realimg/stack.sh --hunt-g")
    return v


def _truth(name: str, package: str) -> dict[str, Any]:
    probes = report(name)["probes"]
    got = probes.get(f"import@{package}")
    if got is None:
        pytest.skip(f"{name}: import@{package} not probed (stack.sh --hunt-g --probe-only)")
    return got  # type: ignore[no-any-return]


def _env(root: Path) -> dict[str, str]:
    """The environment the probe imported in (the stub driver, no GPU)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(LD_LIBRARY_PATH=str(root / "stack-stubs"), CUDA_VISIBLE_DEVICES="",
               FLASHINFER_WORKSPACE_BASE=str(root / "stack-fi"))
    return env


@pytest.mark.parametrize(("name", "package"), CASES, ids=[f"{r}-{p}" for r, p in CASES])
def test_the_recorded_truth_still_holds(name: str, package: str) -> None:
    truth = _truth(name, package)
    v = _image(name)
    proc = subprocess.run([str(v / "bin" / "python"), str(PROBE), "--child",
                           f"import@{package}"], capture_output=True, text=True, cwd="/",
                          env=_env(_root()), timeout=600)
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["ok"] == truth["ok"], (got, truth)
    assert got.get("error_type") == truth.get("error_type"), (got, truth)


def _plain_line(name: str, package: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The check's line for ``package`` in image ``name``, judged without a rule: handed to
    the walk as a requested backend's own package (``ruled=False``), its rule (if any)
    removed; the check runs in this process, with the probe's environment."""
    from moonpin.preflight.extensions import seam, wanted
    from moonpin.preflight.run import check_image

    root = _root()
    v = _image(name)
    for k, val in _env(root).items():
        monkeypatch.setenv(k, val)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    if package in seam.RULES:
        monkeypatch.delitem(seam.RULES, package)
    real = wanted.extensions

    def extensions(*a: Any, **k: Any) -> Any:
        want, unjudged = real(*a, **k)
        want = [w for w in want if w.name != package]
        want.append(wanted.Wanted(package, "handed to the check", True, ruled=False,
                                  flag="--moe-a2a-backend"))
        return want, unjudged

    monkeypatch.setattr(wanted, "extensions", extensions)
    rep = check_image(elastic_ep_backend=None, python=str(v / "bin" / "python"),
                      deep=False, gpu="none")
    lines = [c for c in rep.checks if c.name == package]
    assert len(lines) == 1, rep.checks
    c = lines[0]
    return f"{c.status}  {c.name}: {c.message}"


@pytest.mark.parametrize(("name", "package"), CASES, ids=[f"{r}-{p}" for r, p in CASES])
def test_the_plain_reading_agrees_with_the_import(name: str, package: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    truth = _truth(name, package)
    line = _plain_line(name, package, monkeypatch)
    status = line.split("  ", 1)[0]
    assert "read as a plain import; its __init__ code beyond imports not run" in line, line
    if status == "skip":  # no claim: what was not judged is named
        assert "not judged: " in line, line
        return
    assert (status in ("pass", "warn")) == bool(truth["ok"]), (line, truth)


@pytest.mark.parametrize("package", sorted(RULED_TRUTH))
def test_a_ruled_package_read_plainly_agrees_with_its_rule(
        package: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule's verdict on ``stack`` (recorded by test_image_stack.py's probes: every one
    imports there) against the plain reading of the same package: agreeing, or "not
    judged" where its loader is not plain."""
    stack = json.loads((_root() / "reports" / "stack.json").read_text()) if (
        _root() / "reports" / "stack.json").is_file() else None
    if stack is None:
        pytest.skip("no reports/stack.json: run tests/realimg/stack.sh")
    truth = stack["probes"][RULED_TRUTH[package]]
    line = _plain_line("G-stack", package, monkeypatch)
    status = line.split("  ", 1)[0]
    if status == "skip":
        assert "not judged: " in line, line
        return
    assert (status in ("pass", "warn")) == bool(truth["ok"]), (line, truth)
