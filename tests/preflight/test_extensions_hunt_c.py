"""Shapes of the extensions that real images have and the rules did not read, found by
building images of them from the index's wheels (``tests/test_image_hunt_c.py``,
``tests/realimg/stack.sh --hunt-c``): each test fails on the commit before its rule learnt
the shape.

* sgl-deep-ep 0.1.2's ``__init__`` runs ``check_nccl_so()`` before its JIT set-up: unless
  ``EP_SUPPRESS_NCCL_CHECK`` is set it asserts that the process maps one ``libnccl`` and that
  it has the bytes of ``find_nccl_root()/lib/libnccl.so*`` (``EP_NCCL_ROOT_DIR``/``NCCL_DIR``,
  else the installed ``nvidia-nccl…`` distribution's). The check said the import works where
  an ``LD_PRELOAD`` maps another ``libnccl`` (real: ``AssertionError: Duplicate NCCL runtime``)
  and where ``NCCL_DIR`` names a folder without it or other bytes (real: ``AssertionError``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.lib.checkrun import run
from tests.lib.deepep_sources import deep_ep_image
from tests.lib.extimages import gcc_so
from tests.lib.flashinfer_sources import ENV_06, ENV_07, flashinfer_image
from tests.lib.images import add_dist

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

DEEPEP = ("--gpu-capability", "9.0", "--", "--moe-a2a-backend", "deepep")

def _image(tmp_path: Path, *, nccl: bool = True) -> Path:
    """torch with deep_ep whose ``__init__`` runs the NCCL check; ``nccl``: nvidia-nccl-cu13
    installed (its ``nvidia/nccl/lib/libnccl.so.2`` listed in its RECORD)."""
    site = deep_ep_image(tmp_path / "site")
    if nccl:
        gcc_so(site / "nvidia" / "nccl" / "lib" / "libnccl.so.2", defines=["ncclGetVersion"],
               soname="libnccl.so.2")
        add_dist(site, "nvidia-nccl-cu13", "2.30.7",
                 files=["nvidia/nccl/lib/libnccl.so.2", "nvidia/nccl/__init__.py"])
    return site


def _other_nccl(folder: Path) -> Path:
    """A ``libnccl.so.2`` of other bytes (another release)."""
    return gcc_so(folder / "lib" / "libnccl.so.2", defines=["ncclGetVersion", "ncclNew"],
                  soname="libnccl.so.2")


def test_the_installed_nccl_alone_passes(tmp_path: Path) -> None:
    site = _image(tmp_path)
    r = run(site, *DEEPEP, ep=False, env={"CUDA_HOME": "/opt/cuda"})
    assert r.rc == 0 and "loads deep_ep/_C" in r.line("deep_ep"), r.out


def test_no_nccl_distribution(tmp_path: Path) -> None:
    site = _image(tmp_path, nccl=False)
    r = run(site, *DEEPEP, ep=False, env={"CUDA_HOME": "/opt/cuda"})
    assert r.rc == 1 and "AssertionError: Cannot find package: nccl" in r.line("deep_ep"), r.out


@pytest.mark.parametrize("var", ["NCCL_DIR", "EP_NCCL_ROOT_DIR"])
def test_a_root_variable_without_the_library(tmp_path: Path, var: str) -> None:
    site = _image(tmp_path)
    (tmp_path / "empty" / "lib").mkdir(parents=True)
    r = run(site, *DEEPEP, ep=False, env={"CUDA_HOME": "/opt/cuda",
                                          var: str(tmp_path / "empty")})
    line = r.line("deep_ep")
    assert r.rc == 1 and "AssertionError: No libnccl.so found in" in line, r.out
    assert f"{var} is set" in line and r.fixes()[0].startswith(f"fix: unset {var}"), r.out


def test_a_root_variable_naming_other_bytes(tmp_path: Path) -> None:
    site = _image(tmp_path)
    other = tmp_path / "nccl-other"
    _other_nccl(other)
    r = run(site, *DEEPEP, ep=False, env={"CUDA_HOME": "/opt/cuda", "NCCL_DIR": str(other)})
    assert r.rc == 1 and "AssertionError: Invalid NCCL versions" in r.line("deep_ep"), r.out


def test_a_root_variable_naming_the_same_bytes(tmp_path: Path) -> None:
    site = _image(tmp_path)
    same = tmp_path / "nccl-copy" / "lib"
    same.mkdir(parents=True)
    shutil.copy(site / "nvidia" / "nccl" / "lib" / "libnccl.so.2", same / "libnccl.so.2")
    r = run(site, *DEEPEP, ep=False, env={"CUDA_HOME": "/opt/cuda",
                                          "NCCL_DIR": str(same.parent)})
    assert r.rc == 0 and r.line("deep_ep").startswith("pass"), r.out


@pytest.mark.parametrize(("suppress", "same", "fails"), [
    ("", False, True), ("1", False, False), ("0", False, True), ("", True, False)],
    ids=["other", "suppressed", "suppress-0", "the-same-file"])
def test_a_preloaded_nccl(tmp_path: Path, suppress: str, same: bool, fails: bool) -> None:
    site = _image(tmp_path)
    lib = (site / "nvidia" / "nccl" / "lib" / "libnccl.so.2" if same
           else _other_nccl(tmp_path / "nccl-alt"))
    env = {"CUDA_HOME": "/opt/cuda", "LD_PRELOAD": str(lib)}
    if suppress:
        env["EP_SUPPRESS_NCCL_CHECK"] = suppress
    r = run(site, *DEEPEP, ep=False, env=env)
    line = r.line("deep_ep")
    if fails:
        assert r.rc == 1 and "AssertionError: Duplicate NCCL runtime" in line, r.out
        assert r.fixes()[0].startswith(f"fix: remove {lib} from LD_PRELOAD"), r.out
    else:
        assert r.rc == 0 and line.startswith("pass"), r.out


def test_the_kept_verdict_sees_the_preload_change(tmp_path: Path) -> None:
    """The walk's memo is keyed on what it read: LD_PRELOAD set, then unset."""
    site = _image(tmp_path)
    lib = _other_nccl(tmp_path / "nccl-alt")
    env = {"CUDA_HOME": "/opt/cuda", "MOONPIN_CACHE_DIR": str(tmp_path / "cache")}
    assert run(site, *DEEPEP, ep=False, env={**env, "LD_PRELOAD": str(lib)}).rc == 1
    assert run(site, *DEEPEP, ep=False, env={**env, "LD_PRELOAD": str(lib)}).rc == 1
    assert run(site, *DEEPEP, ep=False, env=env).rc == 0


# --- flashinfer-jit-cache beside flashinfer-python ------------------------------------------
# (the index has no flashinfer-jit-cache: hunt-C-fi0612-jc and hunt-C-fi072-jc hold a stand-in
# of it, tests/realimg/jit_cache_wheel.py). 0.6.12 takes any jit-cache whose version starts
# with its own (0.6.12.post1+cu130 imports); 0.7 only "<its version>+…" (and ignores another).
# The check read both as "+"; and its fix line named a jit-cache release pip cannot install.

def _fi_image(tmp_path: Path, env_py: str, version: str, jit_cache: str) -> Path:
    return flashinfer_image(tmp_path / "site", env_py, version, f"flashinfer_python=={version}",
                            "flashinfer-jit-cache", jit_cache,
                            '\ndef get_jit_cache_dir():\n    return "/jc"\n')


def _fi_kb(tmp_path: Path, releases: dict[str, tuple[str, ...]]) -> Path:
    """A knowledge base, with its resolved tables, that knows these FlashInfer releases
    (dist -> versions)."""
    from tests.lib.resolvedkb import flashinfer_kb

    return flashinfer_kb(tmp_path / "kb", releases)


GPU_NONE = {"MOONPIN_GPU_CAPABILITY": "none"}


@pytest.mark.parametrize(("env_py", "version", "jit_cache", "verdict"), [
    (ENV_06, "0.6.12", "0.6.12.post1+cu130", "pass"),   # starts with 0.6.12: taken
    (ENV_06, "0.6.12", "0.6.12+cu130", "pass"),
    (ENV_06, "0.6.12", "0.6.11+cu130", "fail"),          # 0.6 raises
    (ENV_07, "0.7.2", "0.7.2+cu130", "pass"),
    (ENV_07, "0.7.2", "0.7.2.post1+cu130", "warn"),     # not "0.7.2+…": 0.7 ignores it
    (ENV_07, "0.7.2", "0.7.1+cu130", "warn"),
], ids=["06-post", "06-same", "06-other", "07-same", "07-post", "07-other"])
def test_the_jit_caches_version_is_compared_as_its_release_writes_it(
        tmp_path: Path, env_py: str, version: str, jit_cache: str, verdict: str) -> None:
    site = _fi_image(tmp_path, env_py, version, jit_cache)
    r = run(site, ep=False, env=GPU_NONE)
    assert r.line("flashinfer").startswith(verdict), r.out


def test_a_jit_cache_the_index_has_none_of_is_taken_out(tmp_path: Path) -> None:
    """The KB knows FlashInfer's releases and no flashinfer-jit-cache (the index has none):
    the line takes the jit-cache out, and is a shell line (its note a comment)."""
    site = _fi_image(tmp_path, ENV_07, "0.7.2", "0.7.1+cu130")
    kb = _fi_kb(tmp_path, {"flashinfer-python": ("0.7.1", "0.7.2"),
                           "flashinfer-cubin": ("0.6.13",)})
    r = run(site, ep=False, env=GPU_NONE, kb=kb)
    assert r.line("flashinfer").startswith("warn"), r.out
    fix = r.fixes()[0]
    assert fix.startswith("fix: pip uninstall -y 'flashinfer-jit-cache'"), r.out
    assert "  # the index has no flashinfer-jit-cache 0.7.2" in fix, r.out


@pytest.mark.parametrize(("value", "status"), [("1", "pass"), (" 2 ", "pass"), ("0", "fail"),
                                               ("yes", "fail"), ("", "fail")])
def test_the_suppress_variable_is_read_as_int_reads_it(tmp_path: Path, value: str,
                                                       status: str) -> None:
    """``int(os.environ.get('EP_SUPPRESS_NCCL_CHECK', 0))``: a word or an empty value
    raises ValueError at import; 0 leaves the check on (here: a preloaded other NCCL)."""
    site = _image(tmp_path)
    lib = _other_nccl(tmp_path / "nccl-alt")
    r = run(site, *DEEPEP, ep=False, env={"CUDA_HOME": "/opt/cuda", "LD_PRELOAD": str(lib),
                                          "EP_SUPPRESS_NCCL_CHECK": value})
    line = r.line("deep_ep")
    assert line.startswith(status), r.out
    if value in ("yes", ""):
        assert "ValueError: invalid literal for int() with base 10" in line, r.out
