"""``check --json`` says where it found sglang, mooncake and torch
(:mod:`moonpin.preflight.installed.where`): the folder, how the importer reached it, and the
distribution's metadata folder, on plain and editable fake images."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.lib.checkrun import ROOT, run, small_kb
from tests.lib.images import add_dist, add_mooncake, add_torch, healthy_image
from tests.preflight.test_importer import (
    DEV,
    hatch_editable,
    setuptools_editable,
    skbc_editable,
    write_sglang_sources,
)


def _site(tmp_path: Path, kind: str = "site-packages") -> Path:
    site = tmp_path / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / kind
    site.mkdir(parents=True)
    return site


def found(site: Path, tmp_path: Path, *args: str) -> dict[str, Any]:
    r = run(site, "--json", *args, kb=small_kb(tmp_path))
    doc = json.loads(r.out)
    assert set(doc["found"]) == {"sglang", "mooncake", "torch"}, doc
    return dict(doc["found"])


def test_plain_image_everything_from_site_packages(tmp_path: Path) -> None:
    site = healthy_image(_site(tmp_path))
    got = found(site, tmp_path)
    for name, dist, version in (("sglang", "sglang", "0.5.23"),
                                ("mooncake", "mooncake-transfer-engine-cuda13", "0.3.13.post1"),
                                ("torch", "torch", "2.13.0")):
        assert got[name]["folder"] == str(site / name)
        assert got[name]["how"] == "site-packages" and got[name]["file"] is None
        assert got[name]["editable"] is False
        assert got[name]["distribution"]["name"] == dist
        assert got[name]["distribution"]["version"] == version
        info = Path(got[name]["distribution"]["dist_info"])
        assert info.parent == site and info.name.endswith(".dist-info")
        assert (info / "METADATA").is_file()


def test_dist_packages_is_said(tmp_path: Path) -> None:
    site = healthy_image(_site(tmp_path, "dist-packages"))
    got = found(site, tmp_path)
    assert {got[n]["how"] for n in got} == {"dist-packages"}


def test_nothing_installed_is_null(tmp_path: Path) -> None:
    site = _site(tmp_path)
    add_torch(site)
    got = found(site, tmp_path)
    assert got["sglang"] == {"folder": None, "how": None, "file": None, "editable": False,
                             "distribution": None}
    assert got["mooncake"]["folder"] is None and got["torch"]["how"] == "site-packages"


def test_setuptools_editable_names_its_finder(tmp_path: Path) -> None:
    site = _site(tmp_path)
    add_torch(site)
    add_mooncake(site)
    pkg = setuptools_editable(site, tmp_path / "sgl-workspace" / "sglang")
    write_sglang_sources(pkg)
    got = found(site, tmp_path)["sglang"]
    tag = DEV.replace(".", "_")
    assert got["folder"] == str(pkg) and got["how"] == "editable finder"
    assert got["file"] == str(site / f"__editable___sglang_{tag}_finder.py")
    assert got["tool"] == "setuptools" and got["editable"] is True
    assert got["distribution"]["version"] == DEV
    assert got["distribution"]["dist_info"] == str(site / f"sglang-{DEV}.dist-info")


def test_hatch_path_line_is_a_pth_and_editable_by_its_direct_url(tmp_path: Path) -> None:
    site = _site(tmp_path)
    add_torch(site)
    add_mooncake(site)
    pkg = hatch_editable(site, tmp_path / "proj")
    write_sglang_sources(pkg)
    got = found(site, tmp_path)["sglang"]
    assert got["folder"] == str(pkg) and got["how"] == ".pth"
    assert got["file"] == str(site / "_editable_impl_sglang.pth")
    assert got["editable"] is True  # direct_url.json says so; the importer sees a path
    # negative control: the same .pth without the editable direct_url.json
    (site / f"sglang-{DEV}.dist-info" / "direct_url.json").unlink()
    again = found(site, tmp_path)["sglang"]
    assert again["how"] == ".pth" and again["editable"] is False


def test_scikit_build_core_redirect(tmp_path: Path) -> None:
    site = _site(tmp_path)
    add_torch(site)
    add_mooncake(site)
    pkg = skbc_editable(site, tmp_path / "proj")
    write_sglang_sources(site / "sglang", "0.5.23")  # shadowed by the redirect
    write_sglang_sources(pkg)
    got = found(site, tmp_path)["sglang"]
    assert got["folder"] == str(pkg) and got["how"] == "editable redirect"
    assert got["file"] == str(site / "_editable_skbc_sglang.py")
    assert got["tool"] == "scikit-build-core"


def test_namespace_portions_each_with_their_origin(tmp_path: Path) -> None:
    site = healthy_image(_site(tmp_path))
    (site / "mooncake" / "__init__.py").unlink()
    extra = tmp_path / "extra"
    (extra / "mooncake").mkdir(parents=True)
    (site / "more.pth").write_text(f"{extra}\n")
    got = found(site, tmp_path)["mooncake"]
    assert got["how"] == "namespace" and got["folder"] == str(site / "mooncake")
    assert got["portions"] == [
        {"folder": str(site / "mooncake"), "how": "site-packages", "file": None},
        {"folder": str(extra / "mooncake"), "how": ".pth", "file": str(site / "more.pth")}]


def test_pythonpath_for_python_but_not_for_site_packages(tmp_path: Path) -> None:
    """``--python``: a PYTHONPATH folder comes first and is said; ``--site-packages`` does
    not add PYTHONPATH, so there the image's own copy is found."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    healthy_image(site)
    elsewhere = tmp_path / "pp"
    write_sglang_sources(elsewhere / "sglang", "0.5.23")
    add_dist(elsewhere, "sglang", "0.5.23")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "MOONPIN_KB")}
    env.update(PYTHONPATH=str(elsewhere), MOONPIN_CHECK_SYSTEM_LIBS=str(site / "_none"))
    proc = subprocess.run([sys.executable, "-m", "moonpin.preflight", "--python",
                           str(venv / "bin" / "python"), "--elastic-ep-backend", "mooncake",
                           "--no-deep", "--json", "--kb", str(small_kb(tmp_path))],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    got = json.loads(proc.stdout)["found"]
    assert got["sglang"]["folder"] == str(elsewhere / "sglang")
    assert got["sglang"]["how"] == "PYTHONPATH"
    assert got["sglang"]["distribution"]["dist_info"] == str(elsewhere /
                                                             "sglang-0.5.23.dist-info")
    assert got["torch"]["how"] == "site-packages"
    r = run(site, "--json", kb=small_kb(tmp_path), env={"PYTHONPATH": str(elsewhere)})
    assert json.loads(r.out)["found"]["sglang"]["folder"] == str(site / "sglang")


def test_text_output_has_no_found_block(tmp_path: Path) -> None:
    site = healthy_image(_site(tmp_path))
    r = run(site, kb=small_kb(tmp_path))
    assert r.rc == 0 and "dist_info" not in r.out and "site-packages\"" not in r.out
