"""Hostile image roots for ``moonpin check --rootfs``: symbolic link loops, links to ``/``
and out through ``..``, an interpreter that is a FIFO or a folder, ``.pth`` lines naming
``/dev/zero`` or a folder outside, a garbage ``/etc/ld.so.cache``, a binary
``pyvenv.cfg``. Each has a defined outcome (a verdict, or exit 2 with the reason), never a
traceback or a hang, and nothing outside the root is read: beside every root lies a
marker SGLang (``9.9.9``) that a naive join of the image's paths onto the host would find."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.lib.checkrun import small_kb
from tests.lib.images import add_dist, healthy_image
from tests.preflight.test_check_rootfs import PY, debian_root, run_root, venv_root

MARKER = "9.9.9"


def _marker(outside: Path) -> None:
    """An SGLang the check must never see: outside the root."""
    pkg = outside / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f'__version__ = "{MARKER}"\n')
    add_dist(outside, "sglang", MARKER)
    (outside / "python3").write_bytes(b"\x7fELF marker")
    (outside / "python3").chmod(0o755)


def _site(root: Path) -> Path:
    return root / f"usr/local/lib/python{PY}/dist-packages"


def loop(root: Path, out: Path) -> str:
    (root / "usr/bin/python3").unlink()
    (root / "usr/bin/python3").symlink_to("python3")
    return "exit2:/usr/bin/python3 is a symbolic link loop"


def link_to_slash(root: Path, out: Path) -> str:
    (_site(root) / "sglang-link").symlink_to("/")
    (_site(root) / "x.pth").write_text("sglang-link\n")
    return "verdict"


def link_out_by_dotdot(root: Path, out: Path) -> str:
    rel = os.path.relpath(out, _site(root))  # ../../../../../outside: leaves the root
    (_site(root) / "evil.pth").write_text(f"{rel}\n")
    (_site(root) / f"sglang-{MARKER}.dist-info").symlink_to(
        os.path.join(rel, f"sglang-{MARKER}.dist-info"))
    return "verdict"


def absolute_host_link(root: Path, out: Path) -> str:
    (_site(root) / f"sglang-{MARKER}.dist-info").symlink_to(out / f"sglang-{MARKER}.dist-info")
    (_site(root) / "abs.pth").write_text(f"{out}\n")
    return "verdict"


def interpreter_outside(root: Path, out: Path) -> str:
    (root / "usr/bin/python3").unlink()
    (root / "usr/bin/python3").symlink_to(os.path.relpath(out / "python3", root / "usr/bin"))
    return "exit2:has no 'python3' on its PATH"


def fifo(root: Path, out: Path) -> str:
    (root / "usr/bin/python3").unlink()
    os.mkfifo(root / "usr/bin/python3")
    return "exit2:/usr/bin/python3 is a FIFO"


def folder(root: Path, out: Path) -> str:
    (root / "usr/bin/python3").unlink()
    (root / "usr/bin/python3").mkdir()
    return "exit2:/usr/bin/python3 is a folder"


def dev_zero(root: Path, out: Path) -> str:
    (root / "dev").mkdir()
    (root / "dev/zero").symlink_to("/dev/zero")
    (_site(root) / "zero.pth").write_text("/dev/zero\n/dev\n")
    return "verdict"


def garbage_ld_cache(root: Path, out: Path) -> str:
    (root / "etc").mkdir()
    (root / "etc/ld.so.cache").write_bytes(os.urandom(4096) + b"\0/x.so\0" * 3)
    return "verdict"


def ld_cache_to_host(root: Path, out: Path) -> str:
    (root / "etc").mkdir()
    (root / "etc/ld.so.cache").symlink_to("/etc/ld.so.cache")
    return "verdict"


CASES: dict[str, Callable[[Path, Path], str]] = {
    f.__name__: f for f in (loop, link_to_slash, link_out_by_dotdot, absolute_host_link,
                            interpreter_outside, fifo, folder, dev_zero, garbage_ld_cache,
                            ld_cache_to_host)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_root(tmp_path: Path, name: str) -> None:
    root = tmp_path / "root"
    out = tmp_path / "outside"
    _marker(out)
    healthy_image(debian_root(root))
    expect = CASES[name](root, out)
    r = run_root(root, kb=small_kb(tmp_path))
    assert MARKER not in r.out + r.err, r.out + r.err
    assert str(out) not in r.out
    if expect == "verdict":
        assert r.rc in (0, 1), r.out + r.err
        assert r.lines[-1].startswith(("usable", "not usable")), r.out
        assert "sglang 0.5.23" in r.line("sglang:"), r.out
    else:
        assert r.rc == 2, r.out + r.err
        assert expect.partition(":")[2] in r.err and "tip: " in r.err, r.err


def test_binary_pyvenv_cfg(tmp_path: Path) -> None:
    from moonpin.preflight.env.rootfs import ImageConfig
    from moonpin.preflight.run import check_image

    root = tmp_path / "root"
    healthy_image(venv_root(root))
    (root / "opt/venv/pyvenv.cfg").write_bytes(b"home = /usr/bin\n\xff\xfe\0\0binary")
    rep = check_image(elastic_ep_backend="mooncake", rootfs=root,
                      config=ImageConfig(entrypoint=["/opt/venv/bin/python"]))
    assert rep.exit_code == 2
    assert "/opt/venv/pyvenv.cfg is not text" in rep.checks[0].message, rep.checks
