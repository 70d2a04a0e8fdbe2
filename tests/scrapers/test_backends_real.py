"""On a real SGLang wheel (``-m wheels``, see :mod:`tests.lib.sglang_src`): what each backend
choice imports and SGLang's pins of the native extensions, read from the wheel as the scrape
reads it, are what the shipped KB records, and what the runtime check reads from the same
files installed."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from moonpin.kb.models import BackendImport
from moonpin.readers.launch import server_args as sa
from moonpin.scrapers import sglang as sg
from moonpin.scrapers.pypi import metadata_member, parse_metadata
from tests.lib.sglang_src import real_wheel

pytestmark = pytest.mark.wheels

SHIPPED = Path(__file__).resolve().parents[2] / "data" / "kb.json"


def test_a_real_wheel_reads_as_the_kb_and_the_check_read_it(tmp_path: Path) -> None:
    from moonpin.kb import store
    from moonpin.preflight.access.confined import NOWHERE
    from moonpin.preflight.extensions import wanted

    wheel = real_wheel("0.5.23")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        rec = sa.launch_record_from({n: z.read(n) for n in sa.launch_members(names)})
        imports = {n: tuple(BackendImport(module=m, names=k, line=li)
                            for m, k, li in sa.backend_imports(z.read(n), n))
                   for n in sa.backend_modules(names)}
        readings = sg.guarded_readings((n, z.read(n)) for n in names
                                       if n.startswith("sglang/") and n.endswith(".py"))
        got = sg.launch_backends(rec, names, dict(imports), {}, readings)
        member = metadata_member(names, wheel.name)
        text = z.read(member).decode()
        pins = sg.extension_pins(parse_metadata(text), text, member)
        z.extractall(tmp_path, [n for n in names if n.startswith("sglang/")
                                and n.endswith(".py")])
    nixl = {b.flag: b for b in got if b.choice == "nixl"}
    assert nixl["--moe-a2a-backend"].member == sa.DISPATCHERS + "nixl.py"
    assert ("nixl_ep", ("Buffer",)) in [(i.module, i.names) for i in
                                        nixl["--moe-a2a-backend"].imports]
    assert "sglang-kernel==0.4.10" in [p.requirement for p in pins]
    shipped = next(s for s in store.load(SHIPPED).sglang if s.version == "0.5.23")
    assert shipped.launch_backends == got
    assert shipped.extension_pins == pins
    elastic = {b.choice: b for b in got if b.flag == "--elastic-ep-backend"}
    assert elastic["nixl"].member is None and elastic["nixl"].guarded == ()  # issue 39
    assert [(i.module, i.names) for i in elastic["mooncake"].guarded] == [
        ("mooncake.pg", ("set_transfer_engine",))]
    sglang = str(tmp_path / "sglang")
    for b in got:
        folder = sa.BACKEND_FLAGS[b.flag]
        path = (wanted._dispatcher(sglang, b.choice, folder[len("sglang/"):], NOWHERE)
                if folder else None)
        assert path == (None if b.member is None else str(tmp_path / b.member)), b.choice
        if path is not None:
            assert wanted._imports(path, NOWHERE) == [(i.module, i.line) for i in b.imports]
        under, unread = wanted._under_tests(sglang, b.flag, b.choice, NOWHERE)
        assert under == [(i.module, i.line, i.member) for i in b.guarded], b.choice
        assert tuple(unread) == b.unread, b.choice
