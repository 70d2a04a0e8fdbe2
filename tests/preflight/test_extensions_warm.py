"""The extensions' walk remembered (moonpin/preflight/extensions/verdict.py): a start whose
verdict is recomputed (no kept verdict to replay, as every start with the deep probe) says
the extensions' lines without walking them, and any file or variable the walk read that
changes is judged afresh, with the answer a --no-cache run gives."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.lib.checkrun import ROOT, small_kb
from tests.lib.extimages import add_nixl, add_sgl_kernel, torch_image
from tests.lib.images import add_mooncake

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

#: the modules only the walk loads: a start that loads none of them read no loader or build
_WALK = ("moonpin.preflight.extensions.wanted", "moonpin.preflight.extensions.nixl_rule",
         "moonpin.preflight.extensions.sgl_kernel_rule")
NIXL = ("--", "--moe-a2a-backend", "nixl")


class Start:
    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.rc, self.out = proc.returncode, proc.stdout
        loaded = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                  if line.startswith("import time:")]
        self.walked = any(m in loaded for m in _WALK)
        assert "moonpin.preflight.run" in loaded, "the check itself did not run"


def start(site: Path, *args: str, kb: Path, env: dict[str, str] | None = None) -> Start:
    """A worker start whose verdict is recomputed (``MOONPIN_CHECK_MEMO=0``)."""
    cmd = [sys.executable, "-X", "importtime", "-m", "moonpin.preflight", "--site-packages",
           str(site), "--no-deep", "--kb", str(kb), *args]
    full = {k: v for k, v in os.environ.items() if k != "MOONPIN_KB"}
    full["MOONPIN_CHECK_SYSTEM_LIBS"] = str(site / "_no_system_libs")
    full["MOONPIN_CHECK_MEMO"] = "0"
    full.update(env or {})
    return Start(subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=full,
                                timeout=120))


def warm(site: Path, *args: str, kb: Path, env: dict[str, str] | None = None) -> Start:
    """Start until the walk is remembered; the first start that did not walk."""
    for _ in range(3):
        got = start(site, *args, kb=kb, env=env)
        if not got.walked:
            return got
    raise AssertionError(f"walked every time:\n{got.out}")


@pytest.fixture(params=["extensions only", "with mooncake"])
def image(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, Path, tuple[str, ...]]:
    site = torch_image(tmp_path / "site")
    add_nixl(site)
    add_sgl_kernel(site)
    args: tuple[str, ...] = NIXL
    if request.param == "with mooncake":
        add_mooncake(site, torch_builds=("2.14.1",))
        args = ("--elastic-ep-backend", "mooncake", *NIXL)
    time.sleep(0.05)
    return site, small_kb(tmp_path), args


def test_a_warm_start_walks_no_extension(image: tuple[Path, Path, tuple[str, ...]]) -> None:
    site, kb, args = image
    fresh = start(site, *args, "--no-cache", kb=kb)
    assert fresh.walked and "pass  nixl_ep:" in fresh.out and "sgl_kernel:" in fresh.out
    again = warm(site, *args, kb=kb)
    assert (again.rc, again.out) == (fresh.rc, fresh.out)


def _drop_the_build(site: Path) -> None:
    for f in (site / "nixl_ep_cu13").glob("nixl_ep_cpp_torch214*"):
        f.unlink()


def _loader_picks_another(site: Path) -> None:
    """The backend's loader edited in place (same folder listing)."""
    init = site / "nixl_ep_cu13" / "__init__.py"
    init.write_text(init.read_text().replace("nixl_ep_cpp_torch", "nixl_ep_cpp_torchX"))


def _build_replaced(site: Path) -> None:
    """The build rewritten in place: it now needs a library nobody has."""
    build = next((site / "nixl_ep_cu13").glob("nixl_ep_cpp_torch214*"))
    data = build.read_bytes().replace(b"libc10.so", b"libc1X.so")
    build.write_bytes(data)


def _dispatcher_imports_deep_ep(site: Path) -> None:
    nixl = site / "sglang" / "srt" / "layers" / "moe" / "token_dispatcher" / "nixl.py"
    nixl.write_text(nixl.read_text() + "\nimport deep_ep\n")


@pytest.mark.parametrize("change", [_drop_the_build, _loader_picks_another, _build_replaced,
                                    _dispatcher_imports_deep_ep])
def test_a_changed_loader_or_build_is_seen(image: tuple[Path, Path, tuple[str, ...]],
                                           change: object) -> None:
    site, kb, args = image
    before = warm(site, *args, kb=kb)
    time.sleep(0.02)
    change(site)  # type: ignore[operator]
    after = start(site, *args, kb=kb)
    fresh = start(site, *args, "--no-cache", kb=kb)
    assert after.walked
    assert (after.rc, after.out) == (fresh.rc, fresh.out)
    assert after.out != before.out and after.rc == 1, after.out


def test_a_variable_the_walk_read(tmp_path: Path) -> None:
    """nixl's loader reads NIXL_UCX_DEEPBIND: another value is another load."""
    site = torch_image(tmp_path / "site")
    add_nixl(site)
    kb = small_kb(tmp_path)
    before = warm(site, *NIXL, kb=kb)
    assert not warm(site, *NIXL, kb=kb, env={"UNREAD_BY_THE_WALK": "1"}).walked
    after = start(site, *NIXL, kb=kb, env={"NIXL_UCX_DEEPBIND": "1"})
    assert after.walked and "RTLD_DEEPBIND" in after.out and after.out != before.out
