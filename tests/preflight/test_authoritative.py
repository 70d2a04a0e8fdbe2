"""`moonpin args --authoritative`: the installed SGLang's own argument handling, run in a
child interpreter, set against the scraped rules."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from moonpin.cli.main import main
from moonpin.resolver.args import authoritative
from tests.lib.images import add_dist
from tests.lib.server import FakeIndex
from tests.scrapers.test_scrape_e2e import SERVER_ARGS, index, scraped_kb  # noqa: F401


@pytest.fixture
def kb_file(index: FakeIndex, tmp_path: Path) -> Path:  # noqa: F811
    return scraped_kb(index, tmp_path / "kb.json")


def install(site: Path, server_args: str, version: str = "0.5.17") -> Path:
    """A CI virtualenv's SGLang, as far as its argument handling goes."""
    for rel, text in {"sglang/__init__.py": "", "sglang/srt/__init__.py": "",
                      "sglang/srt/server_args.py": server_args}.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    add_dist(site, "sglang", version)
    return site


def args(capsys: pytest.CaptureFixture[str], kb: Path, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(["--kb", str(kb), "args", "--authoritative", "--python", sys.executable,
                     *argv])
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


LAUNCH = ("--", "--elastic-ep-backend", "mooncake", "--pp-size", "2")


def test_agreement(kb_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(install(tmp_path / "site", SERVER_ARGS)))
    code, out, _ = args(capsys, kb_file, "--json", *LAUNCH)
    doc = json.loads(out)
    assert code == 1 and doc["sglang"] == "0.5.17"  # the installed release, no --sglang
    auth = doc["launches"][0]["authoritative"]
    assert auth["agree"] == ["SGLang rejects (sglang/srt/server_args.py:15): elastic EP needs "
                             "--pp-size 1 (got 2)"]
    assert auth["disagree"] == [] and auth["error"] is None
    # control: a valid line is accepted by both
    code, out, _ = args(capsys, kb_file, "--", "--elastic-ep-backend", "mooncake")
    assert code == 0 and "0 agree, 0 disagree" in out


def test_disagreements_both_ways(kb_file: Path, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # the installed release relaxed the rule the KB recorded: moonpin's verdict is refuted
    relaxed = SERVER_ARGS.replace("self.pp_size == 1", "self.pp_size <= 2")
    monkeypatch.setenv("PYTHONPATH", str(install(tmp_path / "a", relaxed)))
    code, out, _ = args(capsys, kb_file, *LAUNCH)
    assert "DISAGREE: SGLang accepts _handle_elastic_ep, moonpin says violated" in out
    # ... and one where it enforces a rule the KB does not record
    stricter = SERVER_ARGS.replace(
        'f"elastic EP needs --pp-size 1 (got {self.pp_size})"',
        'f"elastic EP needs --pp-size 1 (got {self.pp_size})"\n'
        '        assert self.node_rank == 0, "new rule"')
    monkeypatch.setenv("PYTHONPATH", str(install(tmp_path / "b", stricter)))
    code, out, _ = args(capsys, kb_file, "--", "--elastic-ep-backend", "mooncake",
                        "--node-rank", "3")
    assert code == 1
    assert "the KB records no rule there" in out and "new rule" in out


def test_steps_that_cannot_run_here_are_said(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = SERVER_ARGS.replace(
        "    def __post_init__(self):\n        self._handle_elastic_ep()",
        "    def __post_init__(self):\n        self._handle_gpu()\n"
        "        self._handle_elastic_ep()\n\n"
        "    def _handle_gpu(self):\n        raise RuntimeError('no CUDA device')")
    monkeypatch.setenv("PYTHONPATH", str(install(tmp_path / "site", gpu)))
    out = authoritative.run(sys.executable, ["--elastic-ep-backend", "mooncake"])
    assert [(s["step"], s["status"]) for s in out.steps] == [("_handle_gpu", "error"),
                                                             ("_handle_elastic_ep", "ok")]
    assert "no CUDA device" in out.steps[0]["message"]


def test_version_mismatch_and_missing_sglang(kb_file: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(install(tmp_path / "site", SERVER_ARGS, "0.5.4")))
    code, _, err = args(capsys, kb_file, "--sglang", "0.5.17", *LAUNCH)
    assert code == 2 and "is 0.5.4, not 0.5.17" in err
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "empty"))
    code, _, err = args(capsys, kb_file, *LAUNCH)
    assert code == 2 and "cannot import sglang" in err and "--python" in err
    code, _, err = args(capsys, kb_file, "--python", str(tmp_path / "no-python"), *LAUNCH)
    assert code == 2 and "no interpreter at" in err


def test_a_child_that_dies_or_hangs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    crash = "import os\nos.kill(os.getpid(), 9)\n"
    monkeypatch.setenv("PYTHONPATH", str(install(tmp_path / "a", crash)))
    out = authoritative.run(sys.executable, [])
    assert out.error is not None and "signal 9" in out.error
    hang = "import time\ntime.sleep(60)\n"
    monkeypatch.setenv("PYTHONPATH", str(install(tmp_path / "b", hang)))
    out = authoritative.run(sys.executable, [], timeout=2)
    assert out.error is not None and "did not finish in 2 s" in out.error


def test_a_multi_line_assert_is_matched_to_its_rule(kb_file: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Python names the condition's line, a few lines below the statement the KB records."""
    split = SERVER_ARGS.replace(
        'assert self.pp_size == 1, f"elastic EP needs --pp-size 1 (got {self.pp_size})"',
        'assert (\n                self.pp_size == 1\n            ), '
        'f"elastic EP needs --pp-size 1 (got {self.pp_size})"')
    assert split != SERVER_ARGS
    monkeypatch.setenv("PYTHONPATH", str(install(tmp_path / "site", split)))
    out = authoritative.run(sys.executable, ["--elastic-ep-backend", "mooncake",
                                             "--pp-size", "2"])
    (rejected,) = [s for s in out.steps if s["status"] == "rejected"]
    assert rejected["line"] == 16  # the KB's rule (from the one-line original) is at 15
    code, text, _ = args(capsys, kb_file, *LAUNCH)
    assert code == 1
    assert "agree: SGLang rejects (sglang/srt/server_args.py:16)" in text
    assert "DISAGREE" not in text


HOOKED = {
    "sglang/srt/server_args.py": '''import dataclasses


@dataclasses.dataclass
class ServerArgs:
    model_path: str = "m"
    elastic_ep_backend: str = None
    pp_size: int = 1
    device: str = None

    def __post_init__(self):
        """Resolution is left to the launcher (resolve_once), as in 0.5.23."""

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", default="m")
        parser.add_argument("--elastic-ep-backend", default=None)
        parser.add_argument("--pp-size", type=int, default=1)
        parser.add_argument("--device", default=None)

    @classmethod
    def from_cli_args(cls, ns):
        return cls(**{f.name: getattr(ns, f.name) for f in dataclasses.fields(cls)})
''',
    "sglang/srt/arg_groups/__init__.py": "",
    "sglang/srt/arg_groups/resolution_hooks.py":
        "def run_hook(hook, server_args):\n    hook(server_args)\n",
    "sglang/srt/arg_groups/pipeline.py": '''import dataclasses

from sglang.srt.arg_groups.resolution_hooks import run_hook


def record_fields(cls):
    return dataclasses.fields(cls)


def run_resolution_pipeline(server_args):
    raise OSError("reads the model config: not run by the cross-check")
    from sglang.srt.arg_groups.parallel_hook import handle_gpu, handle_elastic_ep

    run_hook(handle_gpu, server_args)
    run_hook(handle_elastic_ep, server_args)
''',
    "sglang/srt/arg_groups/parallel_hook.py": '''def handle_gpu(server_args):
    raise RuntimeError("No accelerator (CUDA, XPU, HPU, NPU, MUSA, MPS)")


def handle_elastic_ep(server_args):
    if server_args.elastic_ep_backend is not None:
        assert server_args.pp_size == 1, "PP size should be set to 1 under elastic EP"
        assert server_args.device == "cuda", f"needs CUDA (got {server_args.device!r})"
''',
}


def test_hooks_run_one_by_one_through_the_releases_run_hook(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """0.5.19+: arg_groups/pipeline.py's run_hook calls, in order, without the code between
    them; an unset device is the worker's CUDA."""
    site = install(tmp_path / "site", HOOKED["sglang/srt/server_args.py"], "0.5.23")
    for rel, text in HOOKED.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    monkeypatch.setenv("PYTHONPATH", str(site))
    out = authoritative.run(sys.executable, ["--elastic-ep-backend", "mooncake",
                                             "--pp-size", "2"])
    assert out.error is None, out
    assert [(s["step"], s["status"]) for s in out.steps] == [("handle_gpu", "error"),
                                                             ("handle_elastic_ep", "rejected")]
    rejected = out.steps[1]
    assert rejected["message"] == "PP size should be set to 1 under elastic EP"
    assert (rejected["path"], rejected["line"]) == ("sglang/srt/arg_groups/parallel_hook.py", 7)
    assert out.assumed and "device=cuda" in out.assumed[0]
    fine = authoritative.run(sys.executable, ["--elastic-ep-backend", "mooncake"])  # control
    assert [(s["step"], s["status"]) for s in fine.steps][1] == ("handle_elastic_ep", "ok")
    explicit = authoritative.run(sys.executable, ["--elastic-ep-backend", "mooncake",
                                                  "--device", "cpu"])
    assert explicit.steps[1]["status"] == "rejected" and not explicit.assumed
