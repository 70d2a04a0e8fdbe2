"""flashinfer's version lock in the shapes its releases ship (read on the index's wheels,
``flashinfer/jit/env.py``), each judged as ``import flashinfer`` runs it:

* 0.6.x writes the check inside ``_get_cubin_dir`` on a name assigned
  ``flashinfer_cubin.__version__``, and raises (``hunt-fi-0612cubin``: flashinfer-python
  0.6.12 beside flashinfer-cubin 0.6.13 fails with RuntimeError);
* 0.7.x calls a checker function with ``flashinfer_cubin.__version__`` inside a ``try`` that
  logs and goes on, and returns early when ``FLASHINFER_CUBIN_DIR`` is set, before the cubin
  package is read at all (``hunt-fi-074cubin``).

Fix lines: the companion at flashinfer's version where the index has it, else the
companion out; SGLang's pin of flashinfer-python first when it is another release."""

from __future__ import annotations

from pathlib import Path

from tests.lib.checkrun import run
from tests.lib.flashinfer_sources import ENV_06, ENV_07, flashinfer_image

GPU = {"MOONPIN_GPU_CAPABILITY": "none"}

def _image(tmp_path: Path, env_py: str, version: str, cubin: str,
           sglang_pin: str = "0.7.2") -> Path:
    return flashinfer_image(tmp_path / "site", env_py, version,
                            f"flashinfer_python[cu13]=={sglang_pin}", "flashinfer-cubin", cubin)


def _kb(tmp_path: Path, cubins: tuple[str, ...]) -> Path:
    """A knowledge base, with its resolved tables, that knows these flashinfer-cubin
    releases."""
    from tests.lib.resolvedkb import flashinfer_kb

    return flashinfer_kb(tmp_path / "kb", {"flashinfer-cubin": cubins})


def test_a_check_written_in_the_function_that_reads_the_cubin_raises(tmp_path: Path) -> None:
    site = _image(tmp_path, ENV_06, "0.6.12", "0.6.13", sglang_pin="0.6.12")
    r = run(site, ep=False, env=GPU, kb=_kb(tmp_path, ("0.6.12", "0.6.13")))
    line = r.line("flashinfer")
    assert r.rc == 1 and line.startswith("fail"), r.out
    assert "RuntimeError: flashinfer-cubin version (0.6.13) does not match flashinfer " \
        "version (0.6.12)" in line
    assert r.fixes()[0].startswith("fix: pip install 'flashinfer-cubin==0.6.12'"), r.out
    off = run(site, ep=False, env={**GPU, "FLASHINFER_DISABLE_VERSION_CHECK": "1"})
    assert off.rc == 0 and off.line("flashinfer").startswith("pass"), off.out
    # 0.6's cubin package is read before FLASHINFER_CUBIN_DIR: that variable saves nothing
    env_dir = run(site, ep=False, env={**GPU, "FLASHINFER_CUBIN_DIR": "/x"})
    assert env_dir.rc == 1, env_dir.out
    same = _image(tmp_path / "same", ENV_06, "0.6.13", "0.6.13", sglang_pin="0.6.13")
    assert run(same, ep=False, env=GPU).line("flashinfer").startswith("pass")


def test_no_cubin_release_at_flashinfers_version_takes_the_cubin_out(tmp_path: Path) -> None:
    site = _image(tmp_path, ENV_06, "0.7.2", "0.6.13")
    r = run(site, ep=False, env=GPU, kb=_kb(tmp_path, ("0.6.12", "0.6.13")))
    assert r.rc == 1, r.out
    assert r.fixes()[0].startswith("fix: pip uninstall -y 'flashinfer-cubin'"), r.out


def test_a_0_7_lock_is_skipped_when_its_cubin_dir_variable_is_set(tmp_path: Path) -> None:
    site = _image(tmp_path, ENV_07, "0.7.4", "0.6.13")
    kb = _kb(tmp_path, ("0.6.13",))
    r = run(site, ep=False, env=GPU, kb=kb)
    line = r.line("flashinfer")
    assert r.rc == 0 and line.startswith("warn") and "the import ignores it" in line, r.out
    # SGLang pins 0.7.2, for which the index has no cubin: the cubin out, the pin in
    assert r.fixes()[0].startswith("fix: pip uninstall -y 'flashinfer-cubin' && pip install "
                                   "'flashinfer-python==0.7.2'"), r.out
    r = run(site, ep=False, env={**GPU, "FLASHINFER_CUBIN_DIR": "/x"}, kb=kb)
    line = r.line("flashinfer")
    assert r.rc == 0 and line.startswith("pass"), r.out
    assert "flashinfer-cubin 0.6.13 is not read: FLASHINFER_CUBIN_DIR is set" in line
