"""Issue 38 (3): a loader that compiles at first import (mooncake-transfer-engine-cuda13
0.3.14's ``pg.py``) checks, before it compiles, for a CUDA torch (``torch.utils.
cpp_extension.CUDA_HOME``, None for every CPU torch), nvcc under it, ninja, and a GPU or
``TORCH_CUDA_ARCH_LIST``: read from its source with ``ast`` as KB facts, they make such a
release incompatible with a CPU torch in ``which``/``explain`` and in the light check (with
the torch fix line), and a deep-probe failure says the import's own error and a fix."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from moonpin.preflight.probe.deep_probe import _import_failure
from moonpin.readers.pyast.loader import jit_requires, read_loader
from moonpin.resolver import rule
from tests.lib.checkrun import run, small_kb
from tests.lib.images import JIT_LOADER, add_mooncake, add_sglang, add_torch
from tests.lib.shipped import run_moonpin

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "kb.json"

#: The shape of 0.3.14's checks (written here, not copied): each an `if ...: raise`.
CHECKS = '''import os, shutil
from pathlib import Path
import torch
def build():
    from torch.utils.cpp_extension import CUDA_HOME as home, load
    if shutil.which("ninja") is None:
        raise ImportError("needs ninja")
    if not home or not (Path(home) / "bin" / "nvcc").is_file():
        raise ImportError("needs nvcc")
    if not os.environ.get("TORCH_CUDA_ARCH_LIST") and not torch.cuda.is_available():
        raise ImportError("no device")
    return load(name="x", sources=["a.cpp"], extra_ldflags=["-lc10_cuda"])
'''


@pytest.mark.parametrize(("text", "want"), [
    (CHECKS, ("cuda-torch", "nvcc", "ninja", "gpu-or-arch-list")),
    (JIT_LOADER, ("cuda-torch", "ninja")),
    ("from torch.utils.cpp_extension import load\nload(name='x', sources=[])\n", ()),
    # a test that does not raise is no precondition
    ("from torch.utils.cpp_extension import CUDA_HOME\nif not CUDA_HOME:\n    pass\n", ()),
])
def test_the_preconditions_are_read_from_the_loader(text: str, want: tuple[str, ...]) -> None:
    assert jit_requires(ast.parse(text)) == want
    if "load(" in text and want:
        assert read_loader(text).requires == want


def _torch(version: str, cuda: int | None) -> rule.TorchFacts:
    return rule.TorchFacts(version, cuda, True, "test")


def test_the_rule() -> None:
    cpu, cu13 = _torch("2.13.0+cpu", None), _torch("2.13.0", 13)
    d = rule.cuda_major([], cpu, jit=True, cuda_torch=True)
    assert d.ok is False and "'torch==2.13.0,!=2.13.0+cpu'" in d.detail
    assert rule.cuda_major([], cu13, jit=True, cuda_torch=True).ok is True
    assert rule.cuda_major([], cpu, jit=True, cuda_torch=False).ok is True
    assert rule.cuda_major([], rule.TorchFacts("2.13.0", None, False, "?"), jit=True,
                           cuda_torch=True).ok is None
    assert rule.needs_cuda_torch(("cuda-torch",)) and not rule.needs_cuda_torch(("ninja",))
    # a KB read before the preconditions were recorded: the toolchain's CUDA_HOME says it
    assert rule.needs_cuda_torch((), ("ninja", "nvcc (a CUDA toolkit; CUDA_HOME)"))


def test_which_and_explain_refuse_it_over_a_cpu_torch() -> None:
    jit = "mooncake-transfer-engine-cuda13==0.3.14"
    r = run_moonpin("which", "mooncake", "--sglang", "0.5.18", "--torch", "2.13.0+cpu")
    assert "recommended: mooncake-transfer-engine-cuda13==0.3.14" not in r.stdout, r.stdout
    line = next(x for x in r.stdout.splitlines()
                if x.startswith("  excluded mooncake-transfer-engine-cuda13 0.3.14"))
    assert "CUDA major: compiled at first import against a CUDA torch" in line, r.stdout
    assert "'torch==2.13.0,!=2.13.0+cpu'" in r.stdout
    e = run_moonpin("explain", "sglang==0.5.18", jit, "--torch", "2.13.0+cpu", "--python", "3.12",
                    "--arch", "x86_64")
    assert e.returncode == 1 and "INCOMPATIBLE" in e.stdout, e.stdout
    ok = run_moonpin("explain", "sglang==0.5.18", jit, "--torch", "2.13.0", "--python", "3.12",
                     "--arch", "x86_64")
    assert ok.returncode == 0, ok.stdout


def test_the_light_check_over_a_cpu_torch_is_not_usable(tmp_path: Path) -> None:
    kb = small_kb(tmp_path)
    for torch, cuda, usable in (("2.13.0+cpu", None, False), ("2.13.0", 13, True)):
        site = tmp_path / f"site-{cuda}"
        add_torch(site, torch, cuda=cuda)
        add_sglang(site)
        add_mooncake(site, version="0.3.14", jit=True)
        env = {"TORCH_CUDA_ARCH_LIST": "9.0", "PATH": os.environ.get("PATH", "")}
        r = run(site, kb=kb, env=env)
        line = r.line("cuda")
        if usable:
            assert line.startswith("pass"), r.out
            continue
        assert r.rc == 1 and line.startswith("fail") and "CPU build" in line, r.out
        assert any("'torch==2.13.0,!=2.13.0+cpu'" in f for f in r.fixes()), r.out


def test_a_deep_probe_failure_says_its_own_error_and_a_fix() -> None:
    said = ("ImportError: Mooncake PG Torch adapter JIT compilation failed: Mooncake PG Torch "
            "adapter JIT requires a CUDA toolkit with nvcc; install a CUDA toolkit")
    c = _import_failure("mooncake.pg", "import", said, "2.13.0+cpu")
    assert c.status == "fail" and said in c.message
    assert c.fix and "light checks above" not in c.fix
    assert "'torch==2.13.0,!=2.13.0+cpu'" in c.fix
    other = _import_failure("mooncake.pg", "import", "ValueError: boom", "2.13.0")
    assert other.fix and "light checks above" not in other.fix
    assert "import mooncake.pg" in other.fix
