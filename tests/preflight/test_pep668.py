"""Fix lines that work when pasted into an image whose pip refuses to install into its
interpreter (PEP 668: Debian's and Ubuntu's system Python, as SGLang's own image has it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from moonpin.preflight.env import pep668
from moonpin.preflight.env.rootfs import ImageConfig
from moonpin.preflight.run import check_image
from tests.lib.checkrun import small_kb
from tests.lib.images import healthy_image
from tests.preflight.test_check_rootfs import PY, debian_root, venv_root


@pytest.mark.parametrize(("fix", "want"), [
    ("pip install --force-reinstall --no-deps 'torch==2.13.0'",
     "pip install --break-system-packages --force-reinstall --no-deps 'torch==2.13.0'"),
    ("pip uninstall -y a b && pip install 'a==1' (note: pip install later)",
     "pip uninstall --break-system-packages -y a b && pip install --break-system-packages "
     "'a==1' (note: pip install --break-system-packages later)"),
    ("/opt/x/bin/python -m pip install 'a==1'",
     "/opt/x/bin/python -m pip install --break-system-packages 'a==1'"),
    ("pip install --break-system-packages 'a==1'", "pip install --break-system-packages 'a==1'"),
    ("install what provides each one in the image", "install what provides each one in the image"),
])
def test_with_flag(fix: str, want: str) -> None:
    assert pep668.with_flag(fix) == want


@pytest.mark.parametrize(("conf", "breaks"), [
    ("[global]\nbreak-system-packages = true\n", True),
    ("[install]\nbreak-system-packages=1\n", True),
    ("[global]\nbreak-system-packages = true\n[install]\nbreak-system-packages = false\n", False),
    ("[freeze]\nbreak-system-packages = true\n", False),   # not a section install reads
    ("[global]\n# break-system-packages = true\n", False),
    ("[global]\nindex-url = x\n", False),
])
def test_pip_configuration(tmp_path: Path, conf: str, breaks: bool) -> None:
    std = tmp_path / "lib" / "python3.12"
    std.mkdir(parents=True)
    (std / "EXTERNALLY-MANAGED").write_text("[externally-managed]\n")
    (tmp_path / "pip.conf").write_text(conf)
    managed = pep668.externally_managed(str(std), False, {}, [str(tmp_path / "pip.conf")])
    assert managed is not breaks
    # controls: a virtualenv is never managed; the environment variable overrides
    assert not pep668.externally_managed(str(std), True, {}, [])
    assert not pep668.externally_managed(str(std), False, {"PIP_BREAK_SYSTEM_PACKAGES": "1"}, [])
    (std / "EXTERNALLY-MANAGED").unlink()
    assert not pep668.externally_managed(str(std), False, {}, [])


def _fixes(root: Path, tmp_path: Path, env: list[str]) -> list[str]:
    rep = check_image(elastic_ep_backend="mooncake", rootfs=root,
                      config=ImageConfig(env=env, entrypoint=["python3", "-m", "x"]),
                      kb_path=small_kb(tmp_path))
    assert rep.exit_code == 1
    return [c.fix for c in rep.checks if c.status == "fail" and c.fix]


def test_a_system_python_gets_fix_lines_its_pip_runs(tmp_path: Path) -> None:
    root = tmp_path / "root"
    site = debian_root(root)
    healthy_image(site, torch_builds=("2.12.0",))  # no build for the installed torch 2.13.0
    (root / f"usr/lib/python{PY}/EXTERNALLY-MANAGED").write_text("[externally-managed]\n")
    env = ["PATH=/usr/local/bin:/usr/bin"]
    fixes = _fixes(root, tmp_path, env)
    assert fixes and all("pip install --break-system-packages " in f for f in fixes
                         if "pip install" in f), fixes
    # controls: the image's own override, by environment or pip configuration
    assert not any("--break-system-packages" in f
                   for f in _fixes(root, tmp_path, [*env, "PIP_BREAK_SYSTEM_PACKAGES=1"]))
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/pip.conf").write_text("[global]\nbreak-system-packages = true\n")
    assert not any("--break-system-packages" in f for f in _fixes(root, tmp_path, env))


def test_a_venv_over_a_managed_python_is_not_managed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    site = venv_root(root)
    healthy_image(site, torch_builds=("2.12.0",))
    (root / f"usr/lib/python{PY}/EXTERNALLY-MANAGED").write_text("[externally-managed]\n")
    fixes = _fixes(root, tmp_path, ["PATH=/opt/venv/bin:/usr/bin"])
    assert fixes and not any("--break-system-packages" in f for f in fixes)
