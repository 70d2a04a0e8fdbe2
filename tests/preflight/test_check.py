"""``python -m moonpin.preflight`` against throwaway site-packages trees, run as a worker
would.

Every failing verdict has a negative control: the same tree with that one fault repaired
passes, so a check that always fails (or always passes) is caught.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from moonpin.kb.schema import SCHEMA_VERSION
from moonpin.preflight.run import check_image, requested_features
from tests.lib.checkrun import assert_healthy, run, small_kb
from tests.lib.elfbuild import build_so
from tests.lib.images import (
    PG_NAMES,
    add_dist,
    add_mooncake,
    add_sglang,
    add_torch,
    ext_suffix,
    healthy_image,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def kb(tmp_path: Path) -> Path:
    """A small KB that knows SGLang 0.5.23 (module mooncake.pg, its five names)."""
    return small_kb(tmp_path)


# --------------------------------------------------------------------------- healthy


@pytest.mark.parametrize("kind", ["so", "py"])
def test_healthy_image_passes(tmp_path: Path, kb: Path, kind: str) -> None:
    site = healthy_image(tmp_path / "site", kind=kind)
    r = run(site, kb=kb)
    assert_healthy(r)
    build = r.line("build")
    assert "pg_2_13_0" in build
    assert r.status("names") == "pass"
    assert r.status("backends") == "pass"
    assert r.status("cuda") == ("pass" if kind == "so" else "skip")


def test_json_has_the_same_content(tmp_path: Path, kb: Path) -> None:
    site = healthy_image(tmp_path / "site")
    text = run(site, kb=kb)
    js = run(site, "--json", kb=kb)
    doc = json.loads(js.out)
    assert doc["usable"] is True and doc["exit_code"] == 0 == js.rc
    assert [(c["status"], c["name"]) for c in doc["checks"]] == [
        (line.split()[0], line.split(None, 1)[1].split(":")[0]) for line in text.lines[:-1]]
    assert text.lines[-1] == "usable (deep probe not run: --no-deep)"


# --------------------------------------------------------------------------- not requested


def test_backend_not_requested_checks_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run(empty, ep=False)
    assert r.rc == 0
    assert len(r.lines) == 2 and r.lines[0].startswith("skip  mooncake:")
    assert r.lines[1] == "usable (deep probe not run: mooncake not requested)"


@pytest.mark.parametrize(("launch", "module"), [
    (["--", "--moe-a2a-backend", "nixl"], "nixl_ep"),
    (["--", "--moe-a2a-backend=deepep"], "deep_ep")])
def test_another_backend_is_judged_by_what_it_imports(tmp_path: Path, launch: list[str],
                                                      module: str) -> None:
    """Issue 39: a backend other than mooncake is no longer "nothing to check": the
    module it imports is judged, and in an empty folder it is not installed."""
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run(empty, *launch, ep=False)
    assert r.rc == 1, r.out
    assert r.line(module).startswith(f"fail  {module}: not installed"), r.out
    assert "nothing to check" not in r.out


SHIPPED_KB = ROOT / "data" / "kb.json"


@pytest.mark.parametrize(("value", "tip"), [
    ("mooncak", "did you mean --elastic-ep-backend mooncake (not 'mooncak')?"),
    ("nccl", "pass one of none, mooncake, nixl"),
])
@pytest.mark.parametrize("installed", [True, False])
def test_backend_sglang_refuses_is_bad_input(tmp_path: Path, value: str, tip: str,
                                             installed: bool) -> None:
    # `moonpin check --elastic-ep-backend mooncak` used to be "not requested", exit 0
    site = healthy_image(tmp_path / "site") if installed else tmp_path / "empty"
    site.mkdir(exist_ok=True)
    where = "sglang 0.5.23" if installed else "any sglang release the knowledge base knows"
    r = run(site, "--elastic-ep-backend", value, ep=False, kb=SHIPPED_KB)
    assert r.rc == 2, r.out
    assert r.err.splitlines() == [
        f"moonpin check: error: launch: --elastic-ep-backend: invalid choice {value!r} "
        f"(choose from none, mooncake, nixl; {where})", f"tip: {tip}"]
    # nothing was judged: not "not usable" (the issue-40 user read it as a verdict)
    assert r.lines == ["could not check: launch (the error above says why; deep probe not run)"]
    js = run(site, "--elastic-ep-backend", value, "--json", ep=False, kb=SHIPPED_KB)
    doc = json.loads(js.out)
    assert js.rc == 2 and doc["exit_code"] == 2 and doc["usable"] is False
    assert [(c["name"], c["status"], c["fix"]) for c in doc["checks"]] == [
        ("launch", "fail", tip)]


def test_backend_typo_in_launch_args_too(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run(empty, "--", "--moe-a2a-backend", "deeep", ep=False, kb=SHIPPED_KB)
    assert r.rc == 2 and "tip: did you mean --moe-a2a-backend deepep" in r.err, r.err
    ok = run(empty, "--elastic-ep-backend", "nixl", ep=False, kb=SHIPPED_KB)
    # accepted (not refused as a typo); no SGLang sources to read, and the rules' own
    # choices (the fallback) say --elastic-ep-backend nixl imports nothing of nixl
    assert "nixl_ep" not in ok.out and "invalid choice" not in ok.err, ok.out
    assert "skip  extensions: --elastic-ep-backend nixl: no module" in ok.out, ok.out


def test_verdict_line_says_whether_the_deep_probe_ran(tmp_path: Path, kb: Path) -> None:
    site = healthy_image(tmp_path / "site")
    light = run(site, kb=kb)
    assert light.lines[-1] == "usable (deep probe not run: --no-deep)"
    assert sum(line.startswith(("usable", "not usable")) for line in light.lines) == 1
    shutil.rmtree(site / "torch")
    broken = run(site, kb=kb)
    failed = sum(line.startswith("fail ") for line in broken.lines)
    assert broken.rc == 1 and failed >= 1
    assert broken.lines[-1] == (f"not usable: {failed} failure{'s' * (failed != 1)} "
                                "(deep probe not run: --no-deep)")


def test_requested_through_launch_args(tmp_path: Path, kb: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    # control for the skip test: the same empty image *is* checked once mooncake is asked for
    for launch in (["--elastic-ep-backend=mooncake"], ["--elastic-ep-backend", "mooncake"]):
        r = run(empty, "--", "--model", "x", *launch, ep=False, kb=kb)
        assert r.rc == 1 and r.status("mooncake installed") == "fail"


def test_requested_features() -> None:
    assert requested_features(["--moe-a2a-backend", "mooncake",
                               "--disaggregation-transfer-backend=mooncake"]) == {
        "moe-a2a": "mooncake", "pd-disaggregation": "mooncake"}
    assert requested_features([], "mooncake") == {"elastic-ep": "mooncake"}
    assert requested_features(["--elastic-ep-backend"]) == {"elastic-ep": ""}


# --------------------------------------------------------------------------- verdicts


def test_not_installed(tmp_path: Path, kb: Path) -> None:
    site = tmp_path / "site"
    add_torch(site)
    add_sglang(site)
    r = run(site, kb=kb)
    assert r.rc == 1
    assert r.status("mooncake installed") == "fail"
    assert "none installed" in r.line("mooncake installed")
    assert r.fixes()
    add_mooncake(site)
    assert_healthy(run(site, kb=kb))


def test_two_distributions_over_one_folder(tmp_path: Path, kb: Path) -> None:
    site = healthy_image(tmp_path / "site")
    add_dist(site, "mooncake-transfer-engine", "0.3.13", files=["mooncake/pg.py"])
    r = run(site, kb=kb)
    assert r.rc == 1
    line = r.line("mooncake installed")
    assert line.startswith("fail") and "mooncake-transfer-engine 0.3.13" in line
    assert "mooncake-transfer-engine-cuda13 0.3.13.post1" in line
    assert any("pip uninstall -y" in f for f in r.fixes())
    # control: the other distribution removed
    for d in site.glob("mooncake_transfer_engine-0.3.13.dist-info"):
        for f in d.iterdir():
            f.unlink()
        d.rmdir()
    assert_healthy(run(site, kb=kb))


@pytest.mark.parametrize(("engine", "ships"), [("pg", "ep"), ("ep", "pg")])
def test_wrong_half_of_the_rename(tmp_path: Path, kb: Path, engine: str, ships: str) -> None:
    site = tmp_path / "site"
    add_torch(site)
    add_sglang(site, version="0.5.99", module=engine)  # not in the KB: sources decide
    add_mooncake(site, loaders=(ships,))
    r = run(site, kb=kb)
    assert r.rc == 1
    line = r.line("pg module")
    assert line.startswith("fail")
    assert f"imports mooncake.{engine}" in line and f"ships mooncake.{ships}" in line
    add_mooncake(site, loaders=(engine,))  # control: the half the engine imports
    assert_healthy(run(site, kb=kb))


def test_no_build_for_this_torch(tmp_path: Path, kb: Path) -> None:
    site = tmp_path / "site"
    add_torch(site, "2.14.0")
    add_sglang(site)
    add_mooncake(site)
    r = run(site, kb=kb)
    assert r.rc == 1
    line = r.line("build")
    assert line.startswith("fail") and "mooncake.pg_2_14_0" in line
    assert "pg_2_12_0" in line and "pg_2_13_0" in line  # the builds shipped
    assert r.fixes()
    add_mooncake(site, torch_builds=("2.14.0",))  # control
    assert_healthy(run(site, kb=kb))


def test_build_for_another_python_is_named(tmp_path: Path, kb: Path) -> None:
    site = healthy_image(tmp_path / "site")
    for p in (site / "mooncake").glob("pg_2_13_0.*.so"):
        p.rename(p.with_name("pg_2_13_0.cpython-39-x86_64-linux-gnu.so"))
    r = run(site, kb=kb)
    assert r.rc == 1 and "only pg_2_13_0.cpython-39" in r.line("build")


def test_cuda_suffix_of_torch_is_dropped(tmp_path: Path, kb: Path) -> None:
    site = tmp_path / "site"
    add_torch(site, "2.13.0+cu130")
    add_sglang(site)
    add_mooncake(site)
    r = run(site, kb=kb)
    assert_healthy(r)
    assert "pg_2_13_0" in r.line("build")


@pytest.mark.parametrize("kind", ["so", "py"])
def test_required_name_missing(tmp_path: Path, kb: Path, kind: str) -> None:
    site = tmp_path / "site"
    add_torch(site)
    add_sglang(site)
    add_mooncake(site, names=[n for n in PG_NAMES if n != "join_group"], kind=kind)
    r = run(site, kb=kb)
    assert r.rc == 1
    line = r.line("names")
    assert line.startswith("fail") and "join_group" in line
    assert "first in mooncake-transfer-engine 0.3.9" in line
    assert "recover_ranks" not in line
    add_mooncake(site, kind=kind)  # control
    assert_healthy(run(site, kb=kb))


@pytest.mark.parametrize(("kind", "registered", "missing"),
                         [("so", "mooncake", "mooncake-cpu"), ("py", "mooncake-cpu", "mooncake")])
def test_partial_backend_registration(tmp_path: Path, kb: Path, kind: str, registered: str,
                                      missing: str) -> None:
    site = tmp_path / "site"
    add_torch(site)
    add_sglang(site)
    add_mooncake(site, backends=(registered,), kind=kind)
    r = run(site, kb=kb)
    assert r.rc == 1
    line = r.line("backends")
    assert line.startswith("fail") and f"does not register {missing} (registers {registered})" \
        in line
    add_mooncake(site, kind=kind)  # control
    assert_healthy(run(site, kb=kb))


def test_cuda_major_mismatch(tmp_path: Path, kb: Path) -> None:
    site = tmp_path / "site"
    add_torch(site, cuda=13)
    add_sglang(site)
    add_mooncake(site, dist="mooncake-transfer-engine", cuda=12)
    r = run(site, kb=kb)
    assert r.rc == 1
    line = r.line("cuda")
    assert line.startswith("fail") and "libcudart.so.12" in line and "CUDA 13" in line
    add_mooncake(site, dist="mooncake-transfer-engine", cuda=13)  # control
    assert_healthy(run(site, kb=kb))


def test_cuda12_torch_from_runtime_package(tmp_path: Path, kb: Path) -> None:
    site = tmp_path / "site"
    add_torch(site, cuda=12)
    add_sglang(site)
    add_mooncake(site, dist="mooncake-transfer-engine", cuda=12)
    assert_healthy(run(site, kb=kb))


@pytest.mark.parametrize("version_py", [True, False])
def test_torch_cuda_major_from_version_py_or_metadata(tmp_path: Path, kb: Path,
                                                      version_py: bool) -> None:
    site = tmp_path / "site"
    add_torch(site, cuda=13, version_py=version_py)
    add_sglang(site)
    add_mooncake(site)
    r = run(site, kb=kb)
    assert_healthy(r)
    source = "torch/version.py: cuda = '13.0'" if version_py else "Requires-Dist"
    assert source in r.line("torch")


def test_torch_version_py_outranks_the_metadata(tmp_path: Path, kb: Path) -> None:
    """What the binary was built with (torch.version.cuda) decides, not a requirement line."""
    site = healthy_image(tmp_path / "site")  # a CUDA 13 build of mooncake
    label = "__version__ = '2.13.0'\n"
    (site / "torch" / "version.py").write_text(label + "cuda = '12.8'\nhip = None\n")
    r = run(site, kb=kb)
    assert r.rc == 1 and r.line("cuda").startswith("fail")
    assert "cuda = '12.8'" in r.line("torch")
    (site / "torch" / "version.py").write_text(label + "cuda = None\nhip = None\n")
    assert "a CPU build" in run(site, kb=kb).line("torch")
    (site / "torch" / "version.py").write_text(label + "cuda = '13.0'\n")  # control
    assert_healthy(run(site, kb=kb))


def test_torchs_own_libraries_outrank_its_version_py(tmp_path: Path, kb: Path) -> None:
    """The CUDA runtime torch loads is the one its libraries link (ld.so's answer), whatever
    the label in version.py says (a rebuilt or relabelled torch)."""
    site = healthy_image(tmp_path / "site")  # a CUDA 13 build of mooncake
    lib = site / "torch" / "lib" / "libc10_cuda.so"
    lib.write_bytes(build_so(needed=["libcudart.so.13"], strings=[]))
    version_py = site / "torch" / "version.py"
    version_py.write_text(version_py.read_text().replace("'13.0'", "'12.8'"))
    r = run(site, kb=kb)
    assert_healthy(r)
    assert "torch/lib/libc10_cuda.so links libcudart.so.13" in r.line("torch")
    assert "version.py says cuda = '12.8'" in r.line("torch")
    lib.write_bytes(build_so(needed=["libcudart.so.12"], strings=[]))  # control
    r = run(site, kb=kb)
    assert r.rc == 1 and r.line("cuda").startswith("fail"), r.out
    assert "torch 2.13.0 is CUDA 12" in r.line("cuda")


def test_torch_not_installed(tmp_path: Path, kb: Path) -> None:
    site = tmp_path / "site"
    add_sglang(site)
    add_mooncake(site)
    r = run(site, kb=kb)
    assert r.rc == 1
    assert r.line("torch").startswith("fail") and "not installed" in r.line("torch")
    add_torch(site)  # control
    assert_healthy(run(site, kb=kb))



def _relabel(site: Path, label: str) -> None:
    """torch/version.py's ``__version__`` set to ``label``: what ``torch.__version__`` says."""
    path = site / "torch" / "version.py"
    text = path.read_text()
    head, _, rest = text.partition("__version__ = ")
    path.write_text(head + f"__version__ = {label!r}\n" + rest.partition("\n")[2])


def test_the_loader_reads_torch_version_py_not_the_metadata(tmp_path: Path, kb: Path) -> None:
    """mooncake's loader maps ``torch.__version__`` (torch/version.py) onto a build; the
    dist-info is pip's view. A torch whose files say another release than its metadata
    loads that release's build, or none."""
    site = tmp_path / "site"
    add_torch(site)  # metadata 2.13.0
    add_sglang(site)
    add_mooncake(site, torch_builds=("2.13.0",))
    _relabel(site, "2.12.0+cu130")
    r = run(site, kb=kb)
    assert r.rc == 1, r.out
    assert r.line("build").startswith("fail") and "pg_2_12_0" in r.line("build")
    assert "torch 2.12.0+cu130" in r.line("torch")
    meta = r.line("torch metadata")
    assert meta.startswith("warn") and "2.12.0+cu130" in meta and "2.13.0" in meta
    assert any("pip install --force-reinstall --no-deps 'torch==2.13.0,!=2.13.0+cpu'" in f
               for f in r.fixes()), r.out
    shutil.rmtree(site / "mooncake")
    add_mooncake(site, torch_builds=("2.12.0", "2.13.0"))  # the build the label names
    r = run(site, kb=kb)
    assert "loader finds pg_2_12_0" in r.line("build"), r.out
    _relabel(site, "2.13.0+cu130")  # control: files and metadata agree
    r = run(site, kb=kb)
    assert_healthy(r)
    assert "pg_2_13_0" in r.line("build") and "torch metadata" not in r.out


def test_torch_without_metadata_is_what_import_torch_finds(tmp_path: Path, kb: Path) -> None:
    """A torch folder with no dist-info (copied in, or built in place) still imports: it is
    judged by its version.py, with a warning that pip does not see it."""
    site = healthy_image(tmp_path / "site")
    for d in site.glob("torch-*.dist-info"):
        shutil.rmtree(d)
    r = run(site, kb=kb)
    assert r.rc == 0, r.out
    assert r.line("torch").startswith("pass") and "torch 2.13.0" in r.line("torch")
    assert r.line("torch metadata").startswith("warn") and "no distribution metadata" in (
        r.line("torch metadata"))
    assert "loader finds pg_2_13_0" in r.line("build")
    (site / "torch" / "version.py").unlink()  # torch_version.py imports it: import fails
    r = run(site, kb=kb)
    assert r.rc == 1 and r.line("torch").startswith("fail"), r.out
    assert "no module 'torch.version'" in r.line("torch")
    assert "torch_version.py" in r.line("torch")

def _jit_image(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    add_torch(site)
    add_sglang(site)
    add_mooncake(site, version="0.3.14", jit=True)
    return site


def test_jit_loader_without_toolchain_fails(tmp_path: Path, kb: Path) -> None:
    site = _jit_image(tmp_path)
    bare = tmp_path / "bin"
    bare.mkdir()
    env = {"PATH": str(bare), "MOONPIN_CHECK_CUDA_FALLBACK": str(tmp_path / "nocuda"),
           "CUDA_HOME": "", "CUDA_PATH": ""}
    r = run(site, kb=kb, env=env)
    assert r.rc == 1
    line = r.line("toolchain")
    assert line.startswith("fail") and "ninja" in line and "nvcc" in line
    # control: the toolchain on PATH
    for tool in ("ninja", "nvcc"):
        exe = bare / tool
        exe.write_text("#!/bin/sh\nexit 0\n")
        exe.chmod(0o755)
    r = run(site, kb=kb, env={**env, "TORCH_CUDA_ARCH_LIST": "9.0"})
    assert r.rc == 0, r.out
    line = r.line("toolchain")
    assert line.startswith("pass") and "compiles for minutes" in line
    # a host with no visible GPU cannot compile: a limit of the host, not a failure
    if not any(n.startswith("nvidia") for n in os.listdir("/dev")):
        r = run(site, kb=kb, env={**env, "TORCH_CUDA_ARCH_LIST": ""})
        assert r.rc == 0 and r.status("toolchain") == "warn", r.out
        assert "shows no GPU" in r.line("toolchain")


def test_jit_loader_missing_only_nvcc(tmp_path: Path, kb: Path) -> None:
    site = _jit_image(tmp_path)
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "ninja").write_text("#!/bin/sh\n")
    (bare / "ninja").chmod(0o755)
    env = {"PATH": str(bare), "MOONPIN_CHECK_CUDA_FALLBACK": str(tmp_path / "nocuda"),
           "CUDA_HOME": "", "CUDA_PATH": ""}
    line = run(site, kb=kb, env=env).line("toolchain")
    assert line.startswith("fail") and "nvcc" in line and "needs ninja" not in line


def test_vendor_torch_warns(tmp_path: Path, kb: Path) -> None:
    site = tmp_path / "site"
    add_torch(site, "2.9.0a0+145a3a7bda.nv25.10")
    add_sglang(site)
    add_mooncake(site, torch_builds=("2.9.0",))
    r = run(site, kb=kb)
    assert r.rc == 0
    line = r.line("torch build")
    assert line.startswith("warn") and "pg_2_9_0" in line and "pre-release" in line
    assert run(site, "--strict", kb=kb).rc == 1
    # control: the upstream release the build was made for
    site2 = tmp_path / "site2"
    add_torch(site2, "2.9.0")
    add_sglang(site2)
    add_mooncake(site2, torch_builds=("2.9.0",))
    assert_healthy(run(site2, kb=kb))


def test_missing_and_corrupt_kb(tmp_path: Path, kb: Path) -> None:
    site = healthy_image(tmp_path / "site")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for path in (tmp_path / "absent.json", bad):
        r = run(site, kb=path)
        assert r.rc == 0
        assert r.status("kb") == "warn" and r.status("build") == "pass"  # image still read
        assert run(site, "--strict", kb=path).rc == 1
    assert run(site, "--strict", kb=kb).rc == 0  # control


def _break_sources(site: Path) -> None:
    (site / "sglang" / "srt" / "broken.py").symlink_to(site / "nowhere.py")


def test_unreadable_sources_fall_back_to_kb(tmp_path: Path, kb: Path) -> None:
    site = healthy_image(tmp_path / "site")
    _break_sources(site)
    r = run(site, kb=kb)
    assert r.rc == 0
    line = r.line("sglang")
    assert line.startswith("warn") and "cannot be read" in line and "KB record" in line
    assert r.status("names") == "pass"
    # the KB still decides: a build lacking a KB name fails
    add_mooncake(site, names=PG_NAMES[1:])
    assert run(site, kb=kb).status("names") == "fail"


def test_unreadable_sources_and_no_kb_accepts_either(tmp_path: Path) -> None:
    site = tmp_path / "site"
    add_torch(site)
    add_sglang(site)
    add_mooncake(site, loaders=("ep",))
    _break_sources(site)
    r = run(site, kb=tmp_path / "absent.json")
    assert "accepting either" in r.line("sglang")
    assert r.status("pg module") == "pass" and r.rc == 0
    assert r.status("names") == "skip"


def test_kb_disagreement_is_reported(tmp_path: Path, kb: Path) -> None:
    site = healthy_image(tmp_path / "site")
    (site / "sglang" / "srt" / "elastic_ep" / "elastic_ep.py").write_text("")
    r = run(site, kb=kb)
    line = r.line("sglang")
    assert line.startswith("warn") and "the KB records" in line
    assert r.rc == 0 and run(site, "--strict", kb=kb).rc == 1


def test_could_not_check(tmp_path: Path, kb: Path) -> None:
    r = run(tmp_path / "nope", kb=kb)
    # exit 2 is said as every command says bad input: the error and a tip on stderr
    assert r.rc == 2 and r.err.splitlines() == [
        f"moonpin check: error: site-packages: not a folder: {tmp_path / 'nope'}",
        "tip: check the command line (--site-packages, --python, --kb)"]
    assert r.lines == ["could not check: site-packages (the error above says why; deep probe "
                       "not run)"]
    js = run(tmp_path / "nope", "--json", kb=kb)
    assert js.rc == 2 and json.loads(js.out)["checks"][0]["name"] == "site-packages"
    assert run(tmp_path, "--no-such-flag", kb=kb).rc == 2


# --------------------------------------------------------------------------- API, imports


def test_fix_line_comes_from_the_provider(tmp_path: Path, kb: Path) -> None:
    site = tmp_path / "site"
    add_torch(site)
    add_sglang(site)
    add_mooncake(site, dist="mooncake-transfer-engine", cuda=12)
    calls: list[tuple[str, ...]] = []

    def provider(sglang: str, torch: str, python: str, arch: str) -> list[str]:
        calls.append((sglang, torch, python, arch))
        return ["mooncake-transfer-engine-cuda13==0.3.13.post1", "x==1"]

    rep = check_image(elastic_ep_backend="mooncake", site_packages=[site], kb_path=kb,
                      fix_provider=provider)
    assert rep.exit_code == 1 and not rep.usable
    cuda = next(c for c in rep.checks if c.name == "cuda")
    assert cuda.status == "fail"
    # switching distribution: the installed one goes first (both share mooncake/)
    assert cuda.fix == ("pip uninstall -y mooncake-transfer-engine && "
                        "pip install 'mooncake-transfer-engine-cuda13==0.3.13.post1'")
    assert calls and calls[0][:2] == ("0.5.23", "2.13.0")
    assert calls[0][2] == f"cp{sys.version_info.major}{sys.version_info.minor}"

    def empty(*_: str) -> list[str]:
        return []

    rep = check_image(elastic_ep_backend="mooncake", site_packages=[site], kb_path=kb,
                      fix_provider=empty)
    fix = next(c for c in rep.checks if c.name == "cuda").fix or ""
    assert "moonpin which mooncake --sglang 0.5.23 --torch 2.13.0" in fix


def test_light_path_imports(tmp_path: Path, kb: Path) -> None:
    site = healthy_image(tmp_path / "site")
    add_mooncake(site, cuda=12)  # a failing image exercises the fix path too
    code = (
        "import sys, json\n"
        "from pathlib import Path\n"
        "from moonpin.preflight.run import main\n"
        f"rc = main(['--site-packages', {str(site)!r}, '--kb', {str(kb)!r},"
        " '--elastic-ep-backend', 'mooncake'])\n"
        "print(json.dumps({'rc': rc, 'mods': sorted(sys.modules)}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    doc: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    assert doc["rc"] == 1
    mods = set(doc["mods"])
    # the check did run
    assert "moonpin.readers.pyast.usage" in mods and "moonpin.readers.elf.analysis" in mods
    for banned in ("httpx", "networkx", "torch", "moonpin.resolver.query", "moonpin.resolver.graph",
                   "moonpin.scrapers.fetch", "moonpin.scrapers.refresh", "sglang", "mooncake",
                   "pydantic",
                   "moonpin.kb.models", "importlib.metadata"):
        assert banned not in mods, banned


#: What a warm worker start must not load: each pulls in ``re`` and ``enum`` (~8 ms together,
#: as much as the interpreter's own start), or is the analyzer a warm start skips.
_HEAVY = ("re", "enum", "json", "typing", "pathlib", "dataclasses", "ast", "inspect",
          "threading", "argparse", "hashlib", "moonpin.readers.pyast.usage",
          "moonpin.readers.pyast.facts", "moonpin.readers.pyast.walk",
          "moonpin.readers.elf.analysis", "moonpin.readers.elf.layout",
          "moonpin.readers.pyast.loader", "moonpin.resolver.args.rules",
          "moonpin.readers.elf.symbols", "ctypes")


def _modules_after_main(argv: list[str]) -> tuple[int, set[str]]:
    code = (
        "import sys\n"
        "from moonpin.preflight.run import main\n"
        f"rc = main({argv!r})\n"
        "mods = sorted(sys.modules)\n"
        "import json\n"
        "print(json.dumps({'rc': rc, 'mods': mods}))\n"
    )
    env = {**os.environ, "MOONPIN_CHECK_SYSTEM_LIBS": ""}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=env)
    doc: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return doc["rc"], set(doc["mods"])


def test_a_warm_start_loads_nothing_heavy(tmp_path: Path) -> None:
    """On the shipped KB, whose resolved tables the check reads instead of the whole file."""
    site = healthy_image(tmp_path / "site")
    argv = ["--site-packages", str(site), "--kb", str(ROOT / "data" / "kb.json"),
            "--elastic-ep-backend", "mooncake", "--no-deep"]
    rc, cold = _modules_after_main(argv)  # the image's first check reads and remembers
    # control
    assert rc == 0 and {"moonpin.readers.pyast.usage", "moonpin.readers.pyast.loader",
                        "json"} <= cold
    rc, warm = _modules_after_main(argv)
    assert rc == 0
    assert not warm & set(_HEAVY), sorted(warm & set(_HEAVY))
    rc, again = _modules_after_main([*argv, "--no-cache"])  # control: nothing remembered
    assert rc == 0 and "moonpin.readers.pyast.usage" in again


def test_a_feature_check_reads_the_table_not_the_whole_kb(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PD disaggregation on the shipped KB: the release's imports for it come from the
    resolved table, so the 5 MB knowledge base is not parsed at worker start."""
    from moonpin.preflight.installed import image_facts

    site = healthy_image(tmp_path / "site")
    launch = ["--disaggregation-transfer-backend", "mooncake"]
    kb_file = ROOT / "data" / "kb.json"
    lacking = check_image(elastic_ep_backend=None, launch_args=launch, site_packages=[site],
                          kb_path=kb_file, deep=False)
    assert not lacking.usable  # control: this image has no mooncake.engine yet
    assert "mooncake.engine is not installed" in next(
        c for c in lacking.checks if c.name == "pd-disaggregation").message
    (site / "mooncake" / "engine.py").write_text("class TransferEngine:\n    pass\n")

    def whole_kb(path: str) -> tuple[None, str]:
        raise AssertionError(f"parsed the whole KB {path}")

    monkeypatch.setattr(image_facts, "_load_kb", whole_kb)
    rep = check_image(elastic_ep_backend=None, launch_args=launch, site_packages=[site],
                      kb_path=kb_file, deep=False)
    pd = next(c for c in rep.checks if c.name == "pd-disaggregation")
    assert (pd.status, rep.usable) == ("pass", True), pd
    assert "TransferEngine" in pd.message and pd.evidence


def _bump(path: Path) -> None:
    """A later modification time, as a rebuilt image layer has."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))


def test_the_file_facts_memo_follows_the_image(tmp_path: Path, kb: Path) -> None:
    """Each remembered fact is read again once its file changed: a build that lost a name,
    a loader that now needs another build, a torch/version.py of another CUDA."""
    site = healthy_image(tmp_path / "site")
    memo = Path(os.environ["MOONPIN_CACHE_DIR"]) / "check-facts.marshal"
    first = run(site, kb=kb)
    assert_healthy(first)
    assert memo.is_file()
    assert run(site, kb=kb).out == first.out  # warm: the same answer
    build = next((site / "mooncake").glob("pg_2_13_0*"))
    data = build.read_bytes()
    build.write_bytes(data.replace(b"join_group", b"join_grouq"))  # same size
    _bump(build)
    lost = run(site, kb=kb)
    assert lost.rc == 1 and "join_group" in lost.line("names")
    build.write_bytes(data)
    _bump(build)
    assert run(site, kb=kb).out == first.out  # control: the old bytes pass again
    loader = site / "mooncake" / "pg.py"
    loader.write_text(loader.read_text().replace('"mooncake.pg"', '"mooncake.pgx"'))
    moved = run(site, kb=kb)
    assert moved.rc == 1 and "pgx_2_13_0" in moved.line("build")
    add_mooncake(site)  # the loader as shipped again
    version_py = site / "torch" / "version.py"
    version_py.write_text(version_py.read_text().replace("'13.0'", "'12.8'"))
    cuda = run(site, kb=kb)
    assert "CUDA 12" in cuda.line("torch") and cuda.status("cuda") == "fail"


def test_a_damaged_file_facts_memo_is_rebuilt(tmp_path: Path, kb: Path) -> None:
    site = healthy_image(tmp_path / "site")
    memo = Path(os.environ["MOONPIN_CACHE_DIR"]) / "check-facts.marshal"
    no_verdict = {"MOONPIN_CHECK_MEMO": "0"}  # a remembered verdict would not read this memo
    first = run(site, kb=kb, env=no_verdict)
    for damage in (b"", b"\xff" * 40, memo.read_bytes()[:50]):
        memo.write_bytes(damage)
        again = run(site, kb=kb, env=no_verdict)
        assert again.out == first.out and again.rc == 0
        assert memo.read_bytes() != damage  # rewritten whole


def test_egg_info_distribution_is_read(tmp_path: Path, kb: Path) -> None:
    site = healthy_image(tmp_path / "site")
    egg = site / "mooncake_transfer_engine-0.3.12.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: mooncake-transfer-engine\n"
                                  "Version: 0.3.12\n")
    (egg / "installed-files.txt").write_text("../mooncake/pg.py\nPKG-INFO\n")
    r = run(site, kb=kb)
    assert r.rc == 1 and "mooncake-transfer-engine 0.3.12" in r.line("mooncake installed")


# --------------------------------------------------------------------------- deep probe


def deep_image(tmp_path: Path, **mooncake: object) -> Path:
    """A healthy image whose builds are importable .py stand-ins (a real .so needs CUDA)."""
    site = tmp_path / "site"
    healthy_image(site, kind="py", **mooncake)
    return site


def test_deep_probe_healthy_reads_registered_backends(tmp_path: Path) -> None:
    r = run(deep_image(tmp_path), deep=True)
    assert r.rc == 0, r.out
    assert r.status("deep import") == "pass"
    assert "mooncake ('cuda',)" in r.line("deep backends")
    assert "mooncake-cpu" in r.line("deep backends")


def test_deep_probe_on_by_default_for_elastic_ep(tmp_path: Path) -> None:
    site = deep_image(tmp_path)
    cmd = [sys.executable, "-m", "moonpin.preflight", "--site-packages", str(site),
           "--elastic-ep-backend", "mooncake"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "deep import:" in proc.stdout
    off = subprocess.run([*cmd, "--no-deep"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert "deep import:" not in off.stdout and "--no-deep" in off.stdout


def test_deep_probe_partial_registration(tmp_path: Path) -> None:
    site = deep_image(tmp_path, backends=("mooncake",))
    r = run(site, deep=True)
    assert r.rc == 1
    assert r.status("deep backends") == "fail"
    assert "mooncake-cpu" in r.line("deep backends")


def test_deep_probe_torch_fails_to_load(tmp_path: Path) -> None:
    site = deep_image(tmp_path)
    (site / "torch" / "__init__.py").write_text(
        'raise ImportError("libtorch_cuda.so: cannot open shared object file")\n')
    r = run(site, deep=True)
    assert r.rc == 1
    assert r.status("deep probe") == "fail"
    assert "torch is installed but fails to load" in r.line("deep probe")
    assert "libtorch_cuda.so" in r.line("deep probe")  # the loader's own words


def test_deep_probe_no_driver_is_not_an_incompatibility(tmp_path: Path) -> None:
    site = deep_image(tmp_path)
    builds = list((site / "mooncake").glob("pg_2_13_0*.py"))
    original = {p: p.read_text() for p in builds}
    for p in builds:  # what a real build does on a host without the driver
        p.write_text('raise ImportError("libcuda.so.1: cannot open shared object file: '
                     'No such file or directory")\n' + original[p])
    r = run(site, deep=True)
    assert r.status("deep probe") == "skip"
    assert "no NVIDIA driver" in r.line("deep probe")
    assert r.rc == 0, r.out  # the light checks decide
    # negative control: any other import error is a failure
    for p in builds:
        p.write_text('raise ImportError("undefined symbol: _ZN3c106detail14torchCheckFail")\n'
                     + original[p])
    r2 = run(site, deep=True)
    assert r2.rc == 1 and r2.status("deep probe") == "fail"
    assert "undefined symbol" in r2.line("deep probe")


def test_deep_probe_crash_and_hang(tmp_path: Path) -> None:
    site = deep_image(tmp_path)
    builds = list((site / "mooncake").glob("pg_2_13_0*.py"))
    for p in builds:
        p.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    r = run(site, deep=True)
    assert r.rc == 1 and "SIGSEGV" in r.line("deep probe")
    for p in builds:
        p.write_text("import time\ntime.sleep(30)\n")
    r = run(site, "--deep-timeout", "2", deep=True)
    assert r.rc == 1 and "hung" in r.line("deep probe")


def test_deep_probe_unreadable_backend_registry_is_a_warning(tmp_path: Path) -> None:
    site = deep_image(tmp_path)
    dist_init = site / "torch" / "distributed" / "__init__.py"
    dist_init.write_text(dist_init.read_text().replace("backend_capability", "_caps"))
    # the stand-ins register through register_backend, which now fills _caps
    r = run(site, deep=True)
    assert r.status("deep backends") == "warn"
    assert r.rc == 0
    assert run(site, "--strict", deep=True).rc == 1


# --------------------------------------------------------------------------- shared libraries


def test_a_missing_library_no_record_names_is_said_honestly(tmp_path: Path) -> None:
    """No RECORD lists it and no dpkg list names it gone: the line says so, and its fix is
    what is needed in words, never a package name written here."""
    site = healthy_image(tmp_path / "site", needed=("libibverbs.so.1",))
    r = run(site)
    assert r.rc == 1
    assert r.status("libraries") == "fail"
    line = r.line("libraries")
    assert "libibverbs.so.1 (needed by pg_2_13_0" in line, line
    assert "no installed distribution's RECORD lists libibverbs.so.1" in line, line
    assert r.fixes() == ["fix: install what provides libibverbs.so.1 (pg_2_13_0"
                         f"{ext_suffix()} needs it; no record here names the package that "
                         "ships it)"], r.out
    # negative control: the system has it
    system = tmp_path / "system"
    system.mkdir()
    # a shared object of this machine (ld.so fails on a file it cannot map, even the
    # host's: a stand-in of four bytes is "file too short" to it)
    (system / "libibverbs.so.1").write_bytes(build_so(needed=(), runpath=None,
                                                      machine=os.uname().machine))
    ok = run(site, env={"MOONPIN_CHECK_SYSTEM_LIBS": str(system)})
    assert ok.status("libraries") == "pass"
    assert ok.rc == 0, ok.out


def test_missing_driver_is_a_warning_not_a_failure(tmp_path: Path) -> None:
    site = healthy_image(tmp_path / "site", needed=("libcuda.so.1",))
    r = run(site)
    assert r.status("driver") == "warn" and "NVIDIA driver" in r.line("driver")
    assert r.status("libraries") == "pass"
    assert r.rc == 0, r.out
    assert run(site, "--strict").rc == 1
    system = tmp_path / "system"
    system.mkdir()
    (system / "libcuda.so.1").write_bytes(b"\x7fELF")
    assert "driver:" not in run(site, env={"MOONPIN_CHECK_SYSTEM_LIBS": str(system)}).out


def test_cpu_torch_lacks_torch_cuda_libraries(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    add_torch(site, cuda=None)
    add_sglang(site)
    add_mooncake(site, needed=("libc10_cuda.so",))
    r = run(site)
    assert r.rc == 1
    assert "libc10_cuda.so" in r.line("libraries") and "CPU-only" in r.line("libraries")


def test_libraries_shipped_by_mooncake_are_followed(tmp_path: Path) -> None:
    site = healthy_image(tmp_path / "site", needed=("libmooncake_pg.so",))
    shipped = site / "mooncake" / "libmooncake_pg.so"
    shipped.write_bytes(build_so(needed=["libnuma.so.1"], strings=[]))
    r = run(site)
    assert r.rc == 1
    assert "libnuma.so.1 (needed by libmooncake_pg.so)" in r.line("libraries")


# --------------------------------------------------------------------------- other features


def feature_kb(tmp_path: Path) -> Path:
    doc = {
        "schema_version": SCHEMA_VERSION,
        "sglang": [{"version": "0.5.23", "pg": {"module": "mooncake.pg", "names": list(PG_NAMES),
                                                "backends": ["mooncake", "mooncake-cpu"]},
                    "imports": [
                        {"module": "mooncake.mooncake_ep_buffer", "names": ["Buffer"],
                         "feature": "moe-a2a", "optional": False,
                         "member": "sglang/srt/layers/moe/token_dispatcher/mooncake.py",
                         "line": 101},
                        {"module": "mooncake.engine", "names": ["TransferEngine"],
                         "feature": "pd-disaggregation", "optional": False,
                         "member": "sglang/srt/disaggregation/mooncake/conn.py", "line": 12},
                        {"module": "mooncake.store", "names": ["MooncakeDistributedStore"],
                         "feature": "hicache", "optional": False,
                         "member": "sglang/srt/mem_cache/storage/mooncake_store/"
                                   "mooncake_store.py", "line": 40},
                        {"module": "mooncake.store", "names": ["ReplicateConfig"],
                         "feature": "hicache", "optional": True,
                         "member": "sglang/srt/mem_cache/storage/mooncake_store/"
                                   "mooncake_store.py", "line": 44}]}],
        "mooncake": [],
    }
    path = tmp_path / "kb.json"
    path.write_text(json.dumps(doc))
    return path


def test_moe_a2a_and_disaggregation_need_their_modules(tmp_path: Path) -> None:
    site = healthy_image(tmp_path / "site")
    kb_path = feature_kb(tmp_path)
    r = run(site, "--", "--moe-a2a-backend", "mooncake", kb=kb_path, ep=False)
    assert r.status("moe-a2a") == "fail" and "mooncake.mooncake_ep_buffer is not installed" in \
        r.line("moe-a2a")
    assert r.rc == 1
    # negative control: the module with the name
    (site / "mooncake" / "mooncake_ep_buffer.py").write_text("class Buffer:\n    pass\n")
    assert run(site, "--", "--moe-a2a-backend", "mooncake", kb=kb_path, ep=False).rc == 0
    # an extension module whose name the linker merged into a longer string still counts
    (site / "mooncake" / f"engine{ext_suffix()}").write_bytes(
        build_so(needed=[], strings=["InnerTransferEngine"]))
    r = run(site, "--", "--disaggregation-transfer-backend", "mooncake", kb=kb_path, ep=False)
    assert r.status("pd-disaggregation") == "pass", r.out
    (site / "mooncake" / f"engine{ext_suffix()}").write_bytes(
        build_so(needed=[], strings=["SomethingElse"]))
    r = run(site, "--", "--disaggregation-transfer-backend", "mooncake", kb=kb_path, ep=False)
    assert r.status("pd-disaggregation") == "fail" and "lacks TransferEngine" in r.out


def test_hicache_storage_backend_mooncake_needs_the_store(tmp_path: Path) -> None:
    site = healthy_image(tmp_path / "site")
    kb_path = feature_kb(tmp_path)
    flag = ("--", "--hicache-storage-backend", "mooncake")
    r = run(site, *flag, kb=kb_path, ep=False)
    assert r.rc == 1 and r.status("hicache") == "fail"
    assert "mooncake.store is not installed" in r.line("hicache")
    (site / "mooncake" / f"store{ext_suffix()}").write_bytes(
        build_so(needed=[], strings=["ReplicateConfig"]))  # only the optional name
    r = run(site, *flag, kb=kb_path, ep=False)
    assert r.rc == 1 and "lacks MooncakeDistributedStore" in r.line("hicache")
    (site / "mooncake" / f"store{ext_suffix()}").write_bytes(  # control
        build_so(needed=[], strings=["MooncakeDistributedStore"]))
    r = run(site, *flag, kb=kb_path, ep=False)
    assert r.rc == 0 and r.status("hicache") == "pass"
    # another storage backend needs nothing of mooncake
    r = run(site, "--", "--hicache-storage-backend", "file", kb=kb_path, ep=False)
    assert r.rc == 0 and "nothing to check" in r.out


def test_features_of_a_release_the_kb_does_not_know_come_from_its_sources(
        tmp_path: Path) -> None:
    site = healthy_image(tmp_path / "site")
    (site / "sglang-0.5.23.dist-info").rename(site / "sglang-0.9.0.dist-info")
    meta = site / "sglang-0.9.0.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("0.5.23", "0.9.0"))
    store = site / "sglang" / "srt" / "mem_cache" / "storage" / "mooncake_store"
    store.mkdir(parents=True)
    (store / "mooncake_store.py").write_text(
        "from mooncake.store import MooncakeDistributedStore\n")
    kb_path = feature_kb(tmp_path)  # knows 0.5.23 only
    flag = ("--", "--hicache-storage-backend", "mooncake")
    r = run(site, *flag, kb=kb_path, ep=False)
    assert r.rc == 1 and "mooncake.store is not installed" in r.line("hicache")
    assert "from the installed sources" in r.line("hicache")
    (site / "mooncake" / "store.py").write_text("class MooncakeDistributedStore:\n    pass\n")
    r = run(site, *flag, kb=kb_path, ep=False)  # control
    assert r.rc == 0 and r.status("hicache") == "pass"


# --------------------------------------------------------------------------- source cache


def test_second_start_reads_the_cache_and_says_the_same(tmp_path: Path, kb: Path) -> None:
    site = healthy_image(tmp_path / "site")
    cache = Path(os.environ["MOONPIN_CACHE_DIR"])
    assert run(site, "--no-cache", kb=kb).rc == 0
    assert not cache.exists() or not list(cache.iterdir())  # --no-cache writes nothing
    first = run(site, kb=kb)
    assert list(cache.glob("check-sources-*.marshal")) and (cache / "check-facts.marshal").is_file()
    second = run(site, kb=kb)
    assert_healthy(second)
    assert second.out == first.out
    # An image changed after its first check is read again: the engine now needs a name
    # this mooncake lacks.
    ela = site / "sglang" / "srt" / "elastic_ep" / "elastic_ep.py"
    ela.write_text(ela.read_text().replace("join_group", "join_group_v2") + "\n")
    third = run(site, kb=kb)
    assert third.rc == 1 and "join_group_v2" in third.line("names")


# --------------------------------------------------------------------------- launch args

LAUNCH_SRC = b"""
class ServerArgs:
    pp_size: A[int, "PP"] = 1
    node_rank: A[int, "rank"] = 0
    elastic_ep_backend: A[Optional[str], Arg(help="b", choices=["mooncake", "nixl"])] = None

    def _handle_elastic_ep(self):
        if self.elastic_ep_backend is not None:
            assert self.pp_size == 1, f"elastic EP needs --pp-size 1 (got {self.pp_size})"
            assert self.node_rank >= 0, "node rank"
"""


def _with_launch_rules(kb: Path) -> Path:
    from moonpin.readers.launch.server_args import launch_record

    rec = launch_record(LAUNCH_SRC, None)
    assert rec is not None
    doc = json.loads(kb.read_text())
    doc["sglang"][0]["launch"] = rec.model_dump(mode="json")
    out = kb.with_name("kb-launch.json")
    out.write_text(json.dumps(doc))
    return out


def test_launch_args_are_checked_against_the_installed_release(tmp_path: Path,
                                                               kb: Path) -> None:
    site = healthy_image(tmp_path / "site")
    rules = _with_launch_rules(kb)
    bad = run(site, "--", "--elastic-ep-backend", "mooncake", "--pp-size", "2", kb=rules)
    assert bad.rc == 1
    line = bad.line("launch args")
    assert line.startswith("fail") and "elastic EP needs --pp-size 1 (got 2)" in line
    assert "--pp-size" in bad.fixes()[0]
    doc = json.loads(run(site, "--json", "--", "--elastic-ep-backend", "mooncake",
                         "--pp-size", "2", kb=rules).out)
    (c,) = [c for c in doc["checks"] if c["name"] == "launch args"]
    assert c["evidence"][0].startswith("sglang/srt/server_args.py:")
    good = run(site, "--", "--elastic-ep-backend", "mooncake", "--pp-size", "1", kb=rules)
    assert_healthy(good)
    assert "2 elastic-EP argument rules of sglang 0.5.23 hold" in good.line("launch args")
    # a value SGLang's parser would refuse is a failure too
    refused = run(site, "--", "--elastic-ep-backend", "mooncake", "--pp-size", "two", kb=rules)
    assert refused.rc == 1 and "rejects the launch arguments" in refused.line("launch args")
    # a release without recorded rules: said, not failed
    plain = run(site, "--", "--elastic-ep-backend", "mooncake", "--pp-size", "2", kb=kb)
    assert plain.rc == 0 and plain.line("launch args").startswith("skip")


def test_a_worker_without_a_home_folder_is_still_checked(
        tmp_path: Path, kb: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A container running as a UID without a passwd entry and no $HOME (OpenShift)."""
    site = healthy_image(tmp_path / "site")
    for var in ("MOONPIN_CACHE_DIR", "XDG_CACHE_HOME", "HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MOONPIN_CHECK_SYSTEM_LIBS", str(site / "_no_system_libs"))

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    report = check_image(elastic_ep_backend="mooncake", site_packages=[site], kb_path=kb,
                         deep=False)
    assert report.exit_code == 0, report.lines()
    assert not any(c.status in ("fail", "warn") for c in report.checks)


@pytest.mark.parametrize("argv", [
    [],
    ["--elastic-ep-backend", "mooncake"],
    ["--elastic-ep-backend=mooncake", "--no-deep", "--json", "--strict"],
    ["--site-packages", "/a", "--site-packages=/b", "--kb", "k.json", "--deep",
     "--deep-timeout", "30", "--no-cache", "--enable-dp-attention"],
])
def test_fast_option_parsing_agrees_with_argparse(argv: list[str]) -> None:
    from moonpin.preflight.run import _fast_parse, _parser

    fast = _fast_parse(argv)
    assert fast is not None
    assert vars(fast) == vars(_parser().parse_args(argv))


@pytest.mark.parametrize("argv", [["-h"], ["--help"], ["--elastic"], ["--deep-timeout", "x"],
                                  ["--kb"], ["--json=1"], ["stray"]])
def test_unusual_options_are_left_to_argparse(argv: list[str]) -> None:
    from moonpin.preflight.run import _fast_parse

    assert _fast_parse(argv) is None


def _sglang_requires(site: Path, *lines: str) -> None:
    meta = site / "sglang-0.5.23.dist-info" / "METADATA"
    text = meta.read_text().rstrip("\n")
    meta.write_text(text + "".join(f"\nRequires-Dist: {ln}" for ln in lines) + "\n")


def test_the_torch_sglang_pins_is_checked(tmp_path: Path, kb: Path) -> None:
    site = healthy_image(tmp_path / "site")  # torch 2.13.0
    _sglang_requires(site, "torch==2.14.1", 'torch==9.9.9; extra == "other"')
    r = run(site, kb=kb)
    assert r.rc == 0 and r.status("torch requirement") == "warn"
    assert "requires torch==2.14.1; torch 2.13.0 is installed" in r.line("torch requirement")
    assert any("pip install 'torch==2.14.1,!=2.14.1+cpu'" in f for f in r.fixes())
    assert run(site, "--strict", kb=kb).rc == 1


@pytest.mark.parametrize("lines", [
    ("torch==2.13.0",),  # the usual exact pin, met
    ("torch>=2.12,<2.14; platform_system == 'Linux'",),  # a range with a marker, met
    ('torch==9.9.9; extra == "other"',),  # an extra's pin does not bind
])
def test_a_met_torch_pin_says_nothing(tmp_path: Path, kb: Path, lines: tuple[str, ...]) -> None:
    site = healthy_image(tmp_path / "site")
    _sglang_requires(site, *lines)
    r = run(site, kb=kb)
    assert_healthy(r)
    assert "torch requirement" not in r.out


def test_launch_options_the_installed_release_has_not(tmp_path: Path, kb: Path) -> None:
    site = healthy_image(tmp_path / "site")
    rules = _with_launch_rules(kb)
    r = run(site, "--", "--elastic-ep-backend", "mooncake", "--attn-dp-size", "8", kb=rules)
    warn = [ln for ln in r.lines if ln.startswith("warn  launch args")]
    assert r.rc == 0 and warn and "has no option --attn-dp-size" in warn[0]
    assert run(site, "--strict", "--", "--elastic-ep-backend", "mooncake", "--attn-dp-size",
               "8", kb=rules).rc == 1
    ok = run(site, "--", "--elastic-ep-backend", "mooncake", "--node-rank", "0", kb=rules)
    assert_healthy(ok)  # control: an option the release has


def _editable(site: Path) -> None:
    """The installed sglang marked editable, as pip writes it (PEP 610 direct_url.json)."""
    (info,) = site.glob("sglang-*.dist-info")
    (info / "direct_url.json").write_text(
        '{"url": "file:///sgl-workspace/sglang/python", "dir_info": {"editable": true}}')


def test_launch_rules_of_a_release_the_kb_does_not_record_are_read_from_its_sources(
        tmp_path: Path, kb: Path) -> None:
    site = healthy_image(tmp_path / "site")
    (site / "sglang" / "srt" / "server_args.py").write_bytes(LAUNCH_SRC)
    bad = run(site, "--", "--elastic-ep-backend", "mooncake", "--pp-size", "2", kb=kb)
    assert bad.rc == 1, bad.out
    assert "elastic EP needs --pp-size 1 (got 2)" in bad.line("launch args")
    good = run(site, "--", "--elastic-ep-backend", "mooncake", "--pp-size", "1", kb=kb)
    assert_healthy(good)
    assert "its installed sources" in good.line("launch args")
    # the installed parser's own choices judge a backend value
    typo = run(site, "--elastic-ep-backend", "nixI", kb=kb)
    assert typo.rc == 2 and "did you mean --elastic-ep-backend nixl" in typo.err


def test_an_editable_checkouts_rules_outrank_the_release_it_names(tmp_path: Path,
                                                                  kb: Path) -> None:
    """pip install -e of a checkout ahead of its release: the checkout's hooks run, not the
    ones the release of that version shipped."""
    site = healthy_image(tmp_path / "site")
    rules = _with_launch_rules(kb)  # the release: --pp-size must be 1
    relaxed = LAUNCH_SRC.replace(b"assert self.pp_size == 1", b"assert self.pp_size <= 2")
    (site / "sglang" / "srt" / "server_args.py").write_bytes(relaxed)
    argv = ["--", "--elastic-ep-backend", "mooncake", "--pp-size", "2"]
    assert run(site, *argv, kb=rules).rc == 1  # control: a wheel install is the release
    _editable(site)
    r = run(site, *argv, kb=rules)
    assert_healthy(r)
    assert "its installed sources" in r.line("launch args")
