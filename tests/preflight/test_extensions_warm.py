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
_WALK = ("moonpin.preflight.extensions.wanted", "moonpin.preflight.extensions.rules.nixl_rule",
         "moonpin.preflight.extensions.rules.sgl_kernel_rule")
NIXL = ("--", "--moe-a2a-backend", "nixl")


class Start:
    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.rc, self.out = proc.returncode, proc.stdout
        loaded = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                  if line.startswith("import time:")]
        self.walked = any(m in loaded for m in _WALK)
        assert "moonpin.preflight.run" in loaded, "the check itself did not run"


def start(site: Path, *args: str, kb: Path, env: dict[str, str] | None = None,
          cwd: Path = ROOT) -> Start:
    """A worker start whose verdict is recomputed (``MOONPIN_CHECK_MEMO=0``), of the
    moonpin in ``cwd`` (``-m`` puts it first on ``sys.path``)."""
    cmd = [sys.executable, "-X", "importtime", "-m", "moonpin.preflight", "--site-packages",
           str(site), "--no-deep", "--kb", str(kb), *args]
    full = {k: v for k, v in os.environ.items() if k != "MOONPIN_KB"}
    full["MOONPIN_CHECK_SYSTEM_LIBS"] = str(site / "_no_system_libs")
    full["MOONPIN_CHECK_MEMO"] = "0"
    full.update(env or {})
    return Start(subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=full,
                                timeout=120))


def warm(site: Path, *args: str, kb: Path, env: dict[str, str] | None = None,
         cwd: Path = ROOT) -> Start:
    """Start until the walk is remembered; the first start that did not walk."""
    for _ in range(3):
        got = start(site, *args, kb=kb, env=env, cwd=cwd)
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


def copied_moonpin(to: Path) -> Path:
    """A copy of this moonpin's package in ``to`` (a tree whose modules a test may edit),
    checked to be the one ``python -m`` run there imports."""
    shutil.copytree(ROOT / "moonpin", to / "moonpin",
                    ignore=shutil.ignore_patterns("__pycache__"))
    got = subprocess.run([sys.executable, "-c", "import moonpin; print(moonpin.__file__)"],
                         cwd=to, capture_output=True, text=True, check=True).stdout
    assert got.strip() == str(to / "moonpin" / "__init__.py"), got
    return to


def _comment(rule: Path) -> None:
    """An edit that changes no answer: the memo cannot know that."""
    with open(rule, "a") as f:
        f.write("# edited\n")


def _reworded(rule: Path) -> None:
    """An edit the answer shows: the rule's note reworded."""
    text = rule.read_text()
    assert text.count('{name} picks {') == 1
    rule.write_text(text.replace('{name} picks {', '{name} now picks {'))


@pytest.mark.parametrize(("module", "edit"), [("extensions/rules/nixl_rule.py", _comment),
                                              ("extensions/rules/nixl_rule.py", _reworded),
                                              ("pyimport/pyeval.py", _comment)])
def test_an_edited_rule_or_model_is_judged_again(tmp_path: Path, module: str,
                                                 edit: object) -> None:
    """The walk's answer is its modules' (the loader rule, the importer model): one edited
    alone is walked again, though the walk module itself is unchanged."""
    tree = copied_moonpin(tmp_path / "tree")
    site = torch_image(tmp_path / "site")
    add_nixl(site)
    kb = small_kb(tmp_path)
    time.sleep(0.05)
    before = warm(site, *NIXL, kb=kb, cwd=tree)
    assert "pass  nixl_ep:" in before.out and " picks " in before.out, before.out
    edit(tree / "moonpin" / "preflight" / module)  # type: ignore[operator]
    after = start(site, *NIXL, kb=kb, cwd=tree)
    fresh = start(site, *NIXL, "--no-cache", kb=kb, cwd=tree)
    assert after.walked
    assert (after.rc, after.out) == (fresh.rc, fresh.out)
    if edit is _reworded:
        assert " now picks " in after.out and after.out != before.out
    assert not warm(site, *NIXL, kb=kb, cwd=tree).walked  # and remembered again
