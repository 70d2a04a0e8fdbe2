"""moonpin/readers/elfsym.py on hostile bytes: a real object (gcc-built) damaged at random places
raises SymbolError or answers; nothing else, no hang."""

from __future__ import annotations

import random
import shutil
import subprocess

import pytest

from moonpin.readers.elf.symbols import SymbolError, SymbolTable, gnu_hash

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


@pytest.fixture(scope="module")
def real_object(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    d = tmp_path_factory.mktemp("elfsym")
    (d / "v.map").write_text("V_1 { global: foo; bar; local: *; };\n")
    (d / "a.c").write_text("extern int need(void);\nextern int weak_one(void) "
                           "__attribute__((weak));\nint foo(void) { return need(); }\n"
                           "int bar(void) { return weak_one ? 1 : 0; }\n")
    out = d / "liba.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-nostdlib", "-o", str(out), str(d / "a.c"),
                    f"-Wl,--version-script={d / 'v.map'}"], check=True, capture_output=True)
    return out.read_bytes()


def test_the_undamaged_object_reads_right(real_object: bytes) -> None:
    t = SymbolTable(real_object)
    undef = {u.name: u.weak for u in t.undefined()}
    assert undef == {b"need": False, b"weak_one": True}
    assert t.defines(b"foo", gnu_hash(b"foo"), None, None)
    assert not t.defines(b"need", gnu_hash(b"need"), None, None)
    assert [n for _, n in t.definitions().values()][-1] == "V_1"


@pytest.mark.parametrize("seed", range(400))
def test_damaged_bytes_raise_symbol_error_or_answer(real_object: bytes, seed: int) -> None:
    rng = random.Random(seed)
    data = bytearray(real_object)
    for _ in range(rng.randint(1, 8)):
        at = rng.randrange(0, min(len(data), 4096) if rng.random() < 0.7 else len(data))
        data[at:at + 8] = rng.randbytes(8) if rng.random() < 0.5 else (
            b"\xff" * 8 if rng.random() < 0.5 else b"\0" * 8)
    if rng.random() < 0.2:
        data = data[:rng.randrange(0, len(data))]
    try:
        t = SymbolTable(bytes(data))
        for u in t.undefined():
            t.defines(u.name, gnu_hash(u.name), None, u.need)
        t.defines(b"foo", gnu_hash(b"foo"), None, None)
        t.version_names()
    except SymbolError:
        pass
