"""Tests for moonpin.readers.elf.analysis (prefix-tolerant ELF reading) and tests.lib.elfbuild."""

from __future__ import annotations

import random
import re
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest

from moonpin.readers.elf.analysis import (
    DT_NEEDED,
    DT_STRSZ,
    DT_STRTAB,
    PF_R,
    PF_X,
    PT_DYNAMIC,
    PT_LOAD,
    ElfError,
    ElfTruncatedError,
    analyze,
    is_elf,
    parse_layout,
    required_prefix,
)
from tests.lib.elfbuild import build_so

WANTED = {
    "MooncakeBackendOptions",
    "set_transfer_engine",
    "get_peer_state",
    "recover_ranks",
    "join_group",
    "mooncake",
    "mooncake-cpu",
}
TORCH_RE = re.compile(rb"requires torch==[0-9][0-9A-Za-z.+]*")

# Offsets inside an ELF64 header / program header (gABI "ELF Header", "Program Header").
E_PHOFF, E_PHENTSIZE, E_PHNUM = 32, 54, 56
PHDR0 = 64
P_FLAGS, P_OFFSET, P_VADDR, P_FILESZ = 4, 8, 16, 32


def patch(data: bytes, offset: int, fmt: str, *values: int) -> bytes:
    """Return ``data`` with ``values`` packed at ``offset``."""
    buf = bytearray(data)
    struct.pack_into(fmt, buf, offset, *values)
    return bytes(buf)


def phdr_index(data: bytes, p_type: int) -> int:
    layout = parse_layout(data)
    return next(i for i, s in enumerate(layout.segments) if s.type == p_type)


# --- builder round trip --------------------------------------------------------------


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
@pytest.mark.parametrize("bits,little", [(64, True), (64, False), (32, True), (32, False)])
@pytest.mark.parametrize("dynstr_in_rw", [False, True])
def test_round_trip(machine: str, bits: int, little: bool, dynstr_in_rw: bool) -> None:
    data = build_so(
        needed=["libcudart.so.13", "libtorch.so", "engine-ef9847bb.so"],
        runpath="$ORIGIN/../x.libs:$ORIGIN",
        strings=["mooncake", "mooncake-cpu", "set_transfer_engine"],
        machine=machine,
        bits=bits,
        little=little,
        dynstr_in_rw=dynstr_in_rw,
        soname="pg.so",
    )
    facts = analyze(data, len(data), WANTED)
    assert facts.machine == machine
    assert facts.layout is not None
    assert (facts.layout.bits, facts.layout.little, facts.layout.elf_type) == (bits, little, 3)
    assert facts.needed_method == "dt_needed"
    assert facts.needed == ("libcudart.so.13", "libtorch.so", "engine-ef9847bb.so")
    assert facts.runpath == ("$ORIGIN/../x.libs", "$ORIGIN")
    assert facts.runpath_tag == "DT_RUNPATH"
    assert facts.soname == "pg.so"
    assert facts.strings == {"mooncake", "mooncake-cpu", "set_transfer_engine"}
    assert facts.complete
    assert facts.warnings == ()


def test_layout_segments_and_mapping() -> None:
    data = build_so(dynstr_in_rw=True, padding_before_dynamic=100)
    layout = parse_layout(data, len(data))
    assert [s.type for s in layout.segments] == [PT_LOAD, PT_LOAD, PT_DYNAMIC]
    ro, rw, dyn = layout.segments
    assert ro.is_readonly_data and not rw.is_readonly_data
    assert rw.vaddr - rw.offset == 0x1000  # vaddr != offset: exercises DT_STRTAB mapping
    assert dyn.offset == rw.offset and dyn.end <= rw.end
    assert layout.header_bytes_needed == 64 + 3 * 56


@pytest.mark.skipif(shutil.which("readelf") is None, reason="readelf not installed")
@pytest.mark.parametrize(
    "kwargs,machine_text",
    [
        ({}, "X86-64"),
        ({"machine": "aarch64", "dynstr_in_rw": True, "padding_before_dynamic": 3000}, "AArch64"),
        ({"bits": 32, "little": False, "machine": "ppc64"}, "PowerPC64"),
    ],
)
def test_builder_output_is_real_elf(
    tmp_path: Path, kwargs: dict[str, object], machine_text: str
) -> None:
    data = build_so(
        needed=["libcudart.so.13", "libtorch.so"],
        runpath="$ORIGIN",
        rpath="/opt/old",
        soname="libpg.so",
        **kwargs,  # type: ignore[arg-type]
    )
    path = tmp_path / "x.so"
    path.write_bytes(data)
    proc = subprocess.run(
        ["readelf", "-h", "-d", "-l", "-W", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    out = proc.stdout
    assert proc.stderr == ""
    assert "DYN (Shared object file)" in out
    assert machine_text in out
    assert "Shared library: [libcudart.so.13]" in out
    assert "Shared library: [libtorch.so]" in out
    assert "Library runpath: [$ORIGIN]" in out
    assert "Library rpath: [/opt/old]" in out
    assert "Library soname: [libpg.so]" in out
    assert re.search(r"^\s*LOAD\s.*\sR\s+0x1000$", out, re.M)
    assert re.search(r"^\s*DYNAMIC\s.*\sRW\s+0x8$", out, re.M)


# --- dynamic section --------------------------------------------------------------------


def test_rpath_only_and_runpath_precedence() -> None:
    only = build_so(runpath=None, rpath="/a:/b::/c")
    facts = analyze(only, len(only), ())
    assert facts.runpath == ("/a", "/b", "/c")
    assert facts.runpath_tag == "DT_RPATH"

    both = build_so(runpath="$ORIGIN", rpath="/a")
    facts = analyze(both, len(both), ())
    # gABI: DT_RPATH is ignored when DT_RUNPATH is present.
    assert (facts.runpath, facts.runpath_tag) == (("$ORIGIN",), "DT_RUNPATH")

    neither = build_so(runpath=None)
    facts = analyze(neither, len(neither), ())
    assert (facts.runpath, facts.runpath_tag, facts.soname) == ((), None, None)


def test_no_needed_entries() -> None:
    data = build_so(needed=[])
    facts = analyze(data, len(data), ())
    assert facts.needed_method == "dt_needed"
    assert facts.needed == ()


# --- strings ----------------------------------------------------------------------------


def test_strings_exact_match_only() -> None:
    data = build_so(
        strings=[
            "N8mooncake15MooncakeBackend22MooncakeBackendOptionsE",
            "xjoin_group",
            "join_group_v2",
            "get_peer_state",
            "mooncake-cpu",
        ]
    )
    facts = analyze(data, len(data), WANTED)
    # "mooncake" and "MooncakeBackendOptions" only occur inside longer strings.
    assert facts.strings == {"get_peer_state", "mooncake-cpu"}


def test_strings_only_searched_in_readonly_data() -> None:
    # .dynstr inside the read-only segment is read-only data ...
    ro = build_so(needed=["libtorch.so"], strings=[])
    assert analyze(ro, len(ro), {"libtorch.so"}).strings == {"libtorch.so"}
    # ... but a .dynstr moved into the writable segment is not searched.
    rw = build_so(needed=["libtorch.so"], strings=[], dynstr_in_rw=True)
    assert analyze(rw, len(rw), {"libtorch.so"}).strings == frozenset()


def test_string_cut_by_prefix_end_is_not_a_match() -> None:
    data = build_so(strings=["mooncake-cpu"], padding_before_dynamic=4096)
    pos = data.index(b"\0mooncake-cpu\0") + 1
    # Prefix ends right after "mooncake": the string may continue, so no match.
    cut = data[: pos + len("mooncake")]
    assert analyze(cut, len(data), WANTED).strings == frozenset()
    cut = data[: pos + len("mooncake-cpu")]  # terminator not yet seen
    assert analyze(cut, len(data), WANTED).strings == frozenset()
    cut = data[: pos + len("mooncake-cpu") + 1]
    assert analyze(cut, len(data), WANTED).strings == {"mooncake-cpu"}


def test_wanted_edge_cases() -> None:
    data = build_so(strings=["a", "mooncake"])
    facts = analyze(data, len(data), ["", "moon\0cake", "mooncake", "not-there"])
    assert facts.strings == {"mooncake"}


def test_patterns() -> None:
    data = build_so(
        strings=[
            "Mooncake Backend requires torch==2.8.0",
            "EP requires torch==2.8.0",
            "other requires torch==2.9.1+cu130",
            "requires torch==",
        ]
    )
    facts = analyze(data, len(data), (), [TORCH_RE])
    assert facts.matches == ("requires torch==2.8.0", "requires torch==2.9.1+cu130")
    # Empty matches (a pattern that can match nothing) are not reported.
    optional = re.compile(rb"(?:torch==2\.8\.0)?")
    assert analyze(data, len(data), (), [optional]).matches == ("torch==2.8.0",)


def test_pattern_result_is_bounded() -> None:
    data = build_so(strings=[f"s{i}" for i in range(3000)])
    facts = analyze(data, len(data), (), [re.compile(rb"s[0-9]+"), re.compile(rb"x*")])
    assert len(facts.matches) == 1024
    assert any("too many pattern matches" in w for w in facts.warnings)


def test_large_rodata_is_fast() -> None:
    big = b"x" * (16 * 1024 * 1024) + b"\0"
    data = build_so(strings=[big, "join_group", "Backend requires torch==2.8.0"])
    start = time.perf_counter()
    facts = analyze(data, len(data), WANTED, [TORCH_RE])
    elapsed = time.perf_counter() - start
    assert facts.strings == {"join_group"}
    assert facts.matches == ("requires torch==2.8.0",)
    # A per-byte Python loop over 16 MiB would take seconds.
    assert elapsed < 1.0


def test_text_and_rodata_in_one_rx_segment() -> None:
    # Links without -z separate-code put .rodata in the R+X segment.
    data = build_so(strings=["join_group"])
    data = patch(data, PHDR0 + P_FLAGS, "<I", PF_R | PF_X)
    facts = analyze(data, len(data), WANTED)
    assert facts.strings == {"join_group"}


# --- prefixes and required_prefix ---------------------------------------------------------


def test_required_prefix_and_completeness() -> None:
    data = build_so(padding_before_dynamic=10_000)
    layout = parse_layout(data[:4096], len(data))
    need = required_prefix(layout)
    dyn = layout.segments[2]
    assert need == dyn.end
    assert required_prefix(layout, data) == need  # .dynstr is before .dynamic here
    assert analyze(data[:need], len(data), ()).complete
    assert not analyze(data[: need - 1], len(data), ()).complete


def test_required_prefix_grows_to_moved_dynstr() -> None:
    data = build_so(dynstr_in_rw=True, padding_before_dynamic=10_000)
    layout = parse_layout(data[:4096], len(data))
    first = required_prefix(layout)
    assert first == layout.segments[2].end
    second = required_prefix(layout, data[:first])
    assert second == len(data)  # .dynstr sits at the very end
    facts = analyze(data[:first], len(data), ())
    assert not facts.complete
    assert facts.needed_method == "none"
    assert any("dynamic string table" in w for w in facts.warnings)
    assert analyze(data[:second], len(data), ()).needed_method == "dt_needed"


def test_required_prefix_clamped_to_file_size() -> None:
    data = build_so()
    i = phdr_index(data, PT_DYNAMIC)
    hostile = patch(data, PHDR0 + 56 * i + P_FILESZ, "<Q", 1 << 60)
    # the loader reads the array where its PT_LOAD maps it: no further than that image
    assert required_prefix(parse_layout(hostile)) < 1 << 20
    dyn = parse_layout(data).segments[i]
    load = next(j for j, s in enumerate(parse_layout(data).segments)
                if s.type == 1 and s.vaddr <= dyn.vaddr < s.vaddr + s.filesz)
    hostile = patch(hostile, PHDR0 + 56 * load + P_FILESZ, "<QQ", 1 << 60, 1 << 60)
    assert required_prefix(parse_layout(hostile, len(hostile))) == len(hostile)
    assert required_prefix(parse_layout(hostile)) > 1 << 59  # unknown size: caller caps


def test_short_prefix_uses_heuristic() -> None:
    needed = ["libcudart.so.13", "libtorch.so", "ld-linux-x86-64.so.2", "engine-ef9847bb.so"]
    data = build_so(needed=needed, strings=["join_group"], padding_before_dynamic=65536)
    layout = parse_layout(data, len(data))
    prefix = data[: layout.segments[0].end]  # the read-only segment, not PT_DYNAMIC
    assert len(prefix) < required_prefix(layout)
    facts = analyze(prefix, len(data), WANTED)
    assert facts.needed_method == "dynstr-heuristic"
    # Names not shaped like lib*.so* / ld-linux*.so* are invisible to the heuristic.
    assert facts.needed == ("libcudart.so.13", "libtorch.so", "ld-linux-x86-64.so.2")
    assert facts.runpath == () and facts.soname is None
    assert facts.strings == {"join_group"}
    assert not facts.complete
    assert any("PT_DYNAMIC" in w and "beyond" in w for w in facts.warnings)


def test_heuristic_ignores_string_tails_and_non_sonames() -> None:
    data = build_so(
        needed=["libtorch.so"],
        strings=["foo_libbar.so", "libnot_a_soname", "libz.so.1", "libz.so.1"],
        padding_before_dynamic=8192,
    )
    layout = parse_layout(data, len(data))
    facts = analyze(data[: layout.segments[0].end], len(data), ())
    assert facts.needed == ("libtorch.so", "libz.so.1")


def test_short_prefix_with_moved_dynstr_gives_none() -> None:
    data = build_so(dynstr_in_rw=True, padding_before_dynamic=65536)
    layout = parse_layout(data, len(data))
    facts = analyze(data[: layout.segments[0].end], len(data), ())
    assert facts.needed_method == "none"
    assert facts.needed == ()


def test_prefix_of_only_the_headers() -> None:
    data = build_so(strings=["join_group"])
    layout = parse_layout(data)
    facts = analyze(data[: layout.header_bytes_needed], len(data), WANTED)
    assert facts.machine == "x86_64"
    assert facts.strings == frozenset()
    assert not facts.complete


# --- malformed input ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "cut,need,what", [(10, 16, "ELF identification"), (40, 64, "ELF header"),
                      (100, 232, "program header table")],
)  # fmt: skip
def test_truncated_header(cut: int, need: int, what: str) -> None:
    data = build_so()
    with pytest.raises(ElfTruncatedError) as exc:
        analyze(data[:cut], len(data), ())
    assert exc.value.needed == need
    assert exc.value.have == cut
    assert str(exc.value) == f"truncated {what}: need {need} bytes, have {cut}"


@pytest.mark.parametrize("blob", [b"PK\x03\x04" + bytes(100), b"\x7fELx" + bytes(60), b"MZ"])
def test_not_elf(blob: bytes) -> None:
    assert not is_elf(blob)
    with pytest.raises(ElfError, match="not an ELF"):
        analyze(blob, len(blob), ())


def test_empty_input() -> None:
    assert not is_elf(b"")
    with pytest.raises(ElfError, match="not an ELF"):
        analyze(b"", 0, ())
    with pytest.raises(ElfTruncatedError):
        analyze(b"", 1000, ())  # nothing read yet: ask for more


def test_prefix_longer_than_file() -> None:
    data = build_so()
    with pytest.raises(ElfError, match="longer than total_size"):
        analyze(data, len(data) - 1, ())


@pytest.mark.parametrize(
    "offset,fmt,value,message",
    [
        (4, "B", 3, "ELF class"),
        (5, "B", 0, "data encoding"),
        (6, "B", 2, "ELF version"),
        (E_PHNUM, "<H", 0xFFFF, "PN_XNUM"),
        (E_PHNUM, "<H", 5000, "too large"),
        (E_PHENTSIZE, "<H", 64, "e_phentsize"),
        (E_PHOFF, "<Q", 1 << 40, "beyond end of file"),
        (E_PHOFF, "<Q", (1 << 64) - 1, "beyond end of file"),
    ],
)
def test_hostile_header_fields(offset: int, fmt: str, value: int, message: str) -> None:
    data = patch(build_so(), offset, fmt, value)
    with pytest.raises(ElfError, match=message):
        analyze(data, len(data), WANTED)


def test_no_program_headers() -> None:
    data = patch(build_so(strings=["join_group"]), E_PHNUM, "<H", 0)
    facts = analyze(data, len(data), WANTED)
    assert facts.layout is not None and facts.layout.segments == ()
    assert facts.needed_method == "none"
    assert facts.strings == frozenset()
    assert facts.complete


def test_segment_offsets_beyond_file() -> None:
    data = build_so(strings=["join_group"])
    for i in range(3):
        data = patch(data, PHDR0 + 56 * i + P_OFFSET, "<Q", (1 << 64) - 16)
    facts = analyze(data, len(data), WANTED, [TORCH_RE])
    assert facts.strings == frozenset()
    assert facts.needed_method == "none"
    assert facts.complete  # nothing more exists in the file to read


def test_dtstrtab_unmapped_falls_back() -> None:
    data = build_so(needed=["libtorch.so"], dyn_overrides={DT_STRTAB: 0xDEAD0000})
    facts = analyze(data, len(data), ())
    assert facts.needed_method == "dynstr-heuristic"
    assert facts.needed == ("libtorch.so",)
    assert any("DT_STRTAB 0xdead0000" in w for w in facts.warnings)


@pytest.mark.parametrize("strsz", [1 << 62, (1 << 64) - 1])
def test_huge_strsz_is_clamped(strsz: int) -> None:
    data = build_so(needed=["libtorch.so", "libc10.so"], dyn_overrides={DT_STRSZ: strsz})
    facts = analyze(data, len(data), ())
    assert facts.needed_method == "dt_needed"
    assert facts.needed == ("libtorch.so", "libc10.so")


def test_needed_offset_out_of_range_is_skipped() -> None:
    data = build_so(needed=["libtorch.so", "libc10.so"], runpath=None)
    layout = parse_layout(data)
    dyn = layout.segments[2]
    # First dynamic entry is DT_NEEDED; point it past DT_STRSZ.
    assert struct.unpack_from("<q", data, dyn.offset)[0] == DT_NEEDED
    data = patch(data, dyn.offset + 8, "<Q", 1 << 40)
    facts = analyze(data, len(data), ())
    assert facts.needed == ("libc10.so",)
    assert any("outside DT_STRTAB" in w for w in facts.warnings)


def test_unterminated_dynamic_string_is_skipped() -> None:
    # DT_STRSZ ends inside the last name, so it has no terminator in the table.
    data = build_so(needed=["libtorch.so", "libc10.so"], runpath=None)
    full = analyze(data, len(data), ())
    assert full.needed == ("libtorch.so", "libc10.so")
    strsz = 1 + len("libtorch.so") + 1 + 3
    data = build_so(needed=["libtorch.so", "libc10.so"], runpath=None,
                    dyn_overrides={DT_STRSZ: strsz})  # fmt: skip
    facts = analyze(data, len(data), ())
    assert facts.needed_method == "dt_needed"
    assert facts.needed == ("libtorch.so",)
    assert any("unterminated" in w for w in facts.warnings)


def test_dynamic_without_dt_null() -> None:
    data = build_so(needed=["libtorch.so"], runpath=None)
    dyn = parse_layout(data).segments[2]
    # Shrink PT_DYNAMIC so the DT_NULL entry is outside it.
    data = patch(data, PHDR0 + 56 * 2 + P_FILESZ, "<Q", dyn.filesz - 16)
    facts = analyze(data, len(data), ())
    assert facts.needed == ("libtorch.so",)
    assert any("DT_NULL" in w for w in facts.warnings)


def test_fuzzed_inputs_only_raise_elf_error() -> None:
    rng = random.Random(1234)
    seeds = [
        build_so(),
        build_so(dynstr_in_rw=True, padding_before_dynamic=300, soname="x.so"),
        build_so(bits=32, little=False, rpath="/r"),
    ]
    for n in range(1500):
        buf = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 8)):
            pos = rng.randrange(len(buf))
            if rng.random() < 0.5:
                buf[pos] = rng.randrange(256)
            else:  # plant an extreme 8-byte value where offsets and sizes live
                value = rng.choice([0, 1, 0xFF, 1 << 31, (1 << 64) - 1, len(buf)])
                end = min(len(buf), pos + 8)
                buf[pos:end] = value.to_bytes(8, "little")[: end - pos]
        data = bytes(buf)
        cut = data[: rng.randint(0, len(data))] if n % 3 == 0 else data
        try:
            layout = parse_layout(cut, len(data))
            required_prefix(layout, cut)
            analyze(cut, len(data), WANTED, [TORCH_RE])
        except ElfError:
            pass


# --- symbol version needs: the CUDA runtime when .dynamic lies beyond the prefix ----------

from moonpin.readers.elf import analysis as _elf  # noqa: E402
from tests.lib.elfbuild import build_so_versioned, verneed_table  # noqa: E402


@pytest.mark.parametrize(("name", "value"), [
    (b"", 0), (b"GLIBC_2.2.5", 0x09691A75), (b"GLIBC_2.14", 0x06969194),
    (b"libcudart.so.12", 0x0FF3DB22),  # as read from mooncake 0.3.7's ep build
])
def test_elf_hash(name: bytes, value: int) -> None:
    assert _elf.elf_hash(name) == value


@pytest.mark.parametrize("little", [True, False])
def test_cuda_runtime_found_in_version_needs_when_dynamic_is_beyond_the_prefix(
        little: bool) -> None:
    data, at = build_so_versioned(little=little)
    prefix = data[:65536]
    facts = _elf.analyze(prefix, len(data), [])
    assert facts.needed_method == "none" and not facts.complete  # .dynamic not in the prefix
    found = _elf.versioned_libraries(facts.version_needs, ["libcudart.so.12", "libcudart.so.13"])
    assert [(n, v.offset) for n, v in found] == [("libcudart.so.12", at + 16)]
    # the whole file agrees through its dynamic section
    full = _elf.analyze(data, len(data), [])
    assert full.needed_method == "dt_needed" and "libcudart.so.12" in full.needed
    assert full.version_needs == ()  # only looked for when DT_NEEDED was not read


def test_version_named_otherwise_is_not_a_library() -> None:
    """libcudart's hash under another library (vna_name != vn_file) proves nothing."""
    data, _ = build_so_versioned(needed=("libfoo.so.1", "libc.so.6"),
                                 versions={"libfoo.so.1": ["libcudart.so.12"],
                                           "libc.so.6": ["GLIBC_2.2.5"]})
    facts = _elf.analyze(data[:65536], len(data), [])
    assert len(facts.version_needs) == 2
    assert _elf.versioned_libraries(facts.version_needs, ["libcudart.so.12"]) == []


def test_version_needs_need_a_well_formed_chain() -> None:
    good = verneed_table([(1, [("libcudart.so.12", 1)]), (20, [("GLIBC_2.2.5", 40)])])
    lone = verneed_table([(1, [("libcudart.so.12", 1)])])  # one entry: too weak to trust
    broken = bytearray(good)
    broken[16 + 12:16 + 16] = struct.pack("<I", 7)  # vna_next neither 0 nor 16
    for table, want in ((good, 2), (lone, 0), (bytes(broken), 0), (b"\x01\x00" * 64, 0)):
        data = build_so(needed=["libx.so"], strings=[b"\xee" * 256], dynstr_in_rw=True,
                        padding_before_dynamic=1 << 20)
        slot = data.find(b"\xee" * 8)
        at = slot + (-slot % 4)
        cooked = data[:at] + table + data[at + len(table):]
        facts = _elf.analyze(cooked[:65536], len(cooked), [])
        assert len(facts.version_needs) == want, table


def test_search_path_keeps_empty_entries_as_the_loader_does() -> None:
    # glibc fillin_rpath: an empty entry is the working folder; decompose_rpath ignores a
    # string empty as a whole (its tag still hides DT_RPATH).
    only = build_so(runpath=None, rpath=":/a::/b:")
    facts = analyze(only, len(only), ())
    assert facts.search_path == ("", "/a", "", "/b", "")
    assert facts.runpath == ("/a", "/b")
    empty = build_so(runpath="", rpath="/a")
    facts = analyze(empty, len(empty), ())
    assert (facts.search_path, facts.runpath_tag) == ((), "DT_RUNPATH")
