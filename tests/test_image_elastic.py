"""Opt-in (``-m image``): ``--elastic-ep-backend <choice>`` judged by what SGLang's own
sources import for it (issue 39), on the real ``stack-nonixl`` image (SGLang 0.5.23, torch
2.14.1, every extension of the stack but nixl; built by ``tests/realimg/stack.sh`` under
``MOONPIN_TEST_REALIMG``).

The truth: the image's recorded probe (``import nixl_ep`` fails there), and the image's own
SGLang sources read here without moonpin (a plain search): no source compares
``elastic_ep_backend`` with ``"nixl"`` and no source naming it imports nixl, so
``--elastic-ep-backend nixl`` alone makes the worker import nothing of nixl and is no
failure; ``--moe-a2a-backend nixl`` imports ``nixl_ep`` (its token dispatcher), so with it
the image is not usable. (SGLang's own modules cannot be imported in these images: they
hold the extensions, not SGLang's other requirements, e.g. ``orjson``.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.lib.verdicts import verdicts
from tests.test_image_stack import SITE, _check, stack_root, truth

pytestmark = pytest.mark.image

IMAGE = "stack-nonixl"


@pytest.fixture(scope="module")
def sglang() -> Path:
    root = stack_root()
    if not (root / IMAGE / "bin" / "python").exists():
        pytest.skip(f"{root / IMAGE} not built (tests/realimg/stack.sh)")
    return root / IMAGE / SITE / "sglang"


def test_the_image_s_sglang_imports_nothing_of_nixl_for_the_elastic_ep_choice(
        sglang: Path) -> None:
    """The witness, read without moonpin: which sources name the option, whether any
    compares it with "nixl", and whether any of them imports nixl."""
    naming = [p for p in sglang.rglob("*.py") if b"elastic_ep_backend" in p.read_bytes()]
    assert len(naming) > 5
    compared = re.compile(r"elastic_ep_backend\s*(==|!=|\bin\b|\bnot in\b)[^\n]*nixl")
    assert not [p for p in naming if compared.search(p.read_text())]
    imports_nixl = re.compile(r"^\s*(from|import)\s+nixl", re.M)
    assert not [p for p in naming if imports_nixl.search(p.read_text())]
    assert truth(IMAGE)["nixl_ep"] == "error"  # and nixl is not there


def test_elastic_ep_backend_nixl_alone_is_no_failure(sglang: Path) -> None:
    proc = _check(IMAGE, "--", "--elastic-ep-backend", "nixl")
    assert proc.returncode == 0, proc.stdout
    assert "nixl_ep" not in verdicts(proc.stdout), proc.stdout
    assert ("--elastic-ep-backend nixl: no test on its value in the installed SGLang's "
            "sources imports a package for it; nothing to judge") in proc.stdout


def test_with_moe_a2a_backend_nixl_it_is_not_usable(sglang: Path) -> None:
    proc = _check(IMAGE, "--", "--elastic-ep-backend", "mooncake", "--moe-a2a-backend",
                  "nixl")
    assert proc.returncode == 1, proc.stdout
    assert verdicts(proc.stdout)["nixl_ep"] == truth(IMAGE)["nixl_ep"] == "error"
    assert ("nixl_ep: not installed (--moe-a2a-backend nixl: sglang/srt/layers/moe/"
            "token_dispatcher/nixl.py:41 imports nixl_ep)") in proc.stdout, proc.stdout


def test_the_kb_records_the_same_as_the_check_reads(sglang: Path) -> None:
    """The shipped KB's facts of 0.5.23 (read from its wheel) say what the check reads in
    the image: mooncake's choice imports mooncake.pg under its test, nixl's nothing."""
    from moonpin.kb.store import load

    kb = load(Path(__file__).resolve().parents[1] / "data" / "kb.json")
    rel = next(r for r in kb.sglang if r.version == "0.5.23")
    got = {b.choice: [(i.member, i.module, i.line) for i in b.guarded]
           for b in rel.launch_backends if b.flag == "--elastic-ep-backend"}
    te = "sglang/srt/distributed/device_communicators/mooncake_transfer_engine.py"
    assert got == {"mooncake": [(te, "mooncake.pg", 359)], "nixl": []}
    text = (sglang.parent / te).read_text().splitlines()
    assert text[358].strip() == "from mooncake.pg import set_transfer_engine"
