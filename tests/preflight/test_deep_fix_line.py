"""The deep probe imports mooncake's process-group module: a failure it sees takes the
install line of mooncake's own failing lines, never another extension's (before, the first
failing line's, so sgl_kernel's `pip install 'sglang-kernel==…'` was said as the fix of
`import mooncake.pg` failing, seen on the real mooncake image)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from moonpin.preflight import run
from moonpin.preflight.probe import deep_probe as dp
from moonpin.preflight.result import CheckResult

KERNEL = CheckResult("sgl_kernel", "fail", "not installed", "pip install 'sglang-kernel==0.4.7'")
BUILD = CheckResult("build", "fail", "no build for torch 2.13.0",
                    "pip install 'mooncake-transfer-engine-cuda13==0.3.13.post1'")


@pytest.mark.parametrize(("lines", "fix"), [
    ([KERNEL], "check the build"),
    ([KERNEL, BUILD], BUILD.fix),
    ([BUILD, KERNEL], BUILD.fix),
])
def test_the_deep_probe_takes_only_mooncakes_install_line(
        monkeypatch: pytest.MonkeyPatch, lines: list[CheckResult], fix: str) -> None:
    seen = CheckResult("deep probe", "fail", "import mooncake.pg fails: ImportError",
                       "check the build")
    monkeypatch.setattr(dp, "deep_probe", lambda *a, **k: [seen])
    monkeypatch.setattr(dp, "downgrade_light_libraries", lambda checks: checks)
    checks = list(lines)
    probe = SimpleNamespace(module="mooncake.pg", names=(), backends=(), why="")
    run._deep(checks, probe, None, 10.0, "python3")  # type: ignore[arg-type]
    assert checks[-1].name == "deep probe" and checks[-1].fix == fix
