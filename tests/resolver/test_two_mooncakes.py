"""Issue 38 (4): two mooncake distributions over one ``mooncake/`` folder, installed by the
real pip in both orders (and one of them uninstalled after): the verdict rests on the files
on disk, each matched to the distribution whose RECORD hash it has. When every file of one
of them is the one it installed (the later install), the import loads it: a warning with
the clean-up line; when files are missing (an uninstall took the shared ones) or are
another build's, a failure."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lib.checkrun import run, small_kb
from tests.lib.images import add_mooncake, add_sglang, add_torch
from tests.lib.wheels import build_wheel

CU12 = ("mooncake-transfer-engine", "0.3.13", 12)
CU13 = ("mooncake-transfer-engine-cuda13", "0.3.13.post1", 13)
PIP_ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("PIP_")},
           "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def _wheel(tmp: Path, dist: str, version: str, cuda: int) -> Path:
    """A wheel of the mooncake package as tests.lib.images lays it out (builds linking
    libcudart.so.<cuda>), with RECORD hashes as pip checks and writes them."""
    stage = tmp / f"stage-{cuda}"
    rels = add_mooncake(stage, dist=dist, version=version, cuda=cuda, loaders=("pg",))
    name, data = build_wheel(dist, version, {r: (stage / r).read_bytes() for r in rels},
                             tag="py3-none-any")
    out = tmp / name
    out.write_bytes(data)
    return out


def _pip(venv: Path, *args: str) -> None:
    """The real pip, run for the image's own interpreter (``pip --python``)."""
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                        *args], capture_output=True, text=True, timeout=300, env=PIP_ENV)
    assert r.returncode == 0 and "Skipping" not in r.stderr, r.stdout + r.stderr


def _image(tmp: Path, order: list[tuple[str, str, int]]) -> tuple[Path, Path]:
    venv = tmp / "venv"
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    py = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = venv / "lib" / py / "site-packages"
    add_torch(site)
    add_sglang(site)
    for dist, version, cuda in order:
        _pip(venv, "install", "--no-deps", "--no-index", str(_wheel(tmp, dist, version, cuda)))
    return venv, site


@pytest.mark.parametrize(("order", "owner"), [([CU12, CU13], CU13), ([CU13, CU12], CU12)],
                         ids=["cuda13 over cuda12", "cuda12 over cuda13"])
def test_both_install_orders(tmp_path: Path, order: list, owner: tuple) -> None:
    kb = small_kb(tmp_path)
    _, site = _image(tmp_path, order)
    r = run(site, kb=kb)
    line = r.line("mooncake installed")
    assert line.startswith("warn"), r.out
    assert f"every file of {owner[0]} {owner[1]}" in line
    fix = next(f for f in r.fixes() if "clean up" in f)
    assert f"pip uninstall -y {CU12[0]} {CU13[0]} && pip install" in fix, fix
    assert f"'{owner[0]}=={owner[1]}'" in fix
    # the files loaded are the owner's build: a CUDA 12 one beside torch's CUDA 13 fails
    assert (r.status("cuda") == "pass") == (owner is CU13), r.out
    assert (r.rc == 0) == (owner is CU13), r.out


def test_an_uninstall_of_one_leaves_files_missing(tmp_path: Path) -> None:
    kb = small_kb(tmp_path)
    venv, site = _image(tmp_path, [CU12, CU13])
    _pip(venv, "uninstall", "-y", CU12[0])  # takes the shared files with it
    assert not (site / "mooncake" / "pg.py").exists()
    r = run(site, kb=kb)
    if r.status("mooncake installed") == "warn":  # pip kept them: then they are cuda13's
        pytest.fail(r.out)
    assert r.rc == 1, r.out


def test_a_mix_of_both_stays_a_failure(tmp_path: Path) -> None:
    """A file of the earlier build over the later one's (neither is whole): a failure
    naming the file."""
    kb = small_kb(tmp_path)
    _, site = _image(tmp_path, [CU12, CU13])
    build = next((tmp_path / "stage-12" / "mooncake").glob("pg_2_13_0*"))
    shutil.copyfile(build, site / "mooncake" / build.name)
    r = run(site, kb=kb)
    line = r.line("mooncake installed")
    assert r.rc == 1 and line.startswith("fail") and "a mix of both" in line, r.out
    assert f"mooncake/{build.name} is another build's" in line
