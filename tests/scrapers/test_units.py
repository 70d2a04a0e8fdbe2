"""Pure pieces of the scrapers: index JSON, wheel/build names, torch CUDA, derived requirement."""

from __future__ import annotations

import pytest

from moonpin.kb.errors import FetchError
from moonpin.kb.models import BackendUse, MooncakeImport
from moonpin.readers.markers import environment
from moonpin.scrapers.mooncake import parse_build_name, torch_from_suffix
from moonpin.scrapers.pypi import parse_metadata, parse_project
from moonpin.scrapers.sglang import derive_pg
from moonpin.scrapers.torch_index import cuda_major


def test_parse_project_resolves_relative_urls_and_skips_bad_versions() -> None:
    doc = {
        "info": {"name": "sglang"},
        "releases": {
            "0.5.18": [{"filename": "sglang-0.5.18-py3-none-any.whl", "size": 5,
                        "url": "../../packages/ab/sglang-0.5.18-py3-none-any.whl",
                        "digests": {"sha256": "00" * 32}, "yanked": True,
                        "core-metadata": {"sha256": "11"}}],
            "not-a-version": [],
            "0.5.19": [{"filename": "x.whl", "size": "nope", "url": "x",
                        "digests": {"sha256": "0"}}],
        },
    }
    p = parse_project(doc, "https://idx.example/pypi/sglang/json")
    (f,) = p.releases["0.5.18"]
    assert f.url == "https://idx.example/packages/ab/sglang-0.5.18-py3-none-any.whl"
    assert f.yanked and f.has_metadata
    # a release whose listing is not what the API describes is unreadable, not empty
    assert "0.5.19" not in p.releases and p.unreadable == ("0.5.19",)
    assert p.listed() == ["0.5.18", "0.5.19"]
    assert ("not-a-version", "not a PEP 440 version") in p.skipped
    assert any(v == "0.5.19" and "x.whl: sha256 '0' is not 64 hex digits" in why
               for v, why in p.skipped)


def test_parse_project_rejects_non_index_documents() -> None:
    with pytest.raises(FetchError, match="not a package index JSON"):
        parse_project({"hello": 1}, "https://idx/pypi/x/json")


def test_parse_metadata() -> None:
    m = parse_metadata("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.18\n"
                       "Requires-Python: >=3.10\nRequires-Dist: torch==2.13.0\n"
                       "Requires-Dist: numpy; extra == 'srt'\n\nlong description\n")
    assert m.requires_dist == ("torch==2.13.0", "numpy; extra == 'srt'")
    assert (m.name, m.version, m.requires_python) == ("sglang", "0.5.18", ">=3.10")


@pytest.mark.parametrize(
    ("member", "module", "abi"),
    [
        ("mooncake/pg_2_13_0.cpython-312-x86_64-linux-gnu.so", "pg_2_13_0",
         "cpython-312-x86_64-linux-gnu"),
        ("mooncake/_ep.cpython-310-aarch64-linux-gnu.so", "_ep", "cpython-310-aarch64-linux-gnu"),
        ("mooncake/ep.cpython-311-x86_64-linux-gnu.so", "ep", "cpython-311-x86_64-linux-gnu"),
        ("mooncake/libmooncake_pg.so", None, None),
        ("mooncake/sub/pg_2_13_0.cpython-312-x86_64-linux-gnu.so", None, None),
        ("mooncake/engine.so", None, None),
    ],
)
def test_parse_build_name(member: str, module: str | None, abi: str | None) -> None:
    got = parse_build_name(member)
    assert (got.module if got else None, got.abi if got else None) == (module, abi)


@pytest.mark.parametrize(
    ("module", "template", "sep", "torch"),
    [
        ("pg_2_13_0", "mooncake.pg_{torch}", "_", "2.13.0"),
        ("ep_2_9_1", "mooncake.ep_{torch}", "_", "2.9.1"),
        ("pg_2_13_0", "mooncake.ep_{torch}", "_", None),
        ("_ep", "mooncake._ep", "_", None),
        ("pg_x_y", "mooncake.pg_{torch}", "_", None),
        ("pg_2130", "mooncake.pg_{torch}", "", "2130"),
    ],
)
def test_torch_from_suffix(module: str, template: str, sep: str, torch: str | None) -> None:
    assert torch_from_suffix(module, template, sep) == torch


@pytest.mark.parametrize(
    ("reqs", "arch", "major"),
    [
        (['nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux" and '
          'platform_machine == "x86_64"'], "x86_64", 12),
        # torch 2.9.1 for aarch64 on the index declares its cu12 packages for x86_64 only
        (['nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux" and '
          'platform_machine == "x86_64"'], "aarch64", None),
        (['cuda-toolkit[cublas,cudart,nvrtc]==13.0.3; platform_system == "Linux"'], "aarch64", 13),
        (['cuda-toolkit[cublas]==13.0.3; platform_system == "Linux"'], "x86_64", None),
        (["filelock", "sympy>=1.13"], "x86_64", None),
        (['nvidia-cuda-runtime-cu12==12.1; platform_system == "Windows"'], "x86_64", None),
    ],
)
def test_cuda_major(reqs: list[str], arch: str, major: int | None) -> None:
    got, line = cuda_major(tuple(reqs), environment((3, 12), arch))
    assert got == major
    assert (line != "") == (major is not None)


def imp(module: str, names: tuple[str, ...] = (), **kw: object) -> MooncakeImport:
    return MooncakeImport(module=module, names=names, member=kw.pop("member", "a.py"),  # type: ignore[arg-type]
                          line=kw.pop("line", 1), **kw)  # type: ignore[arg-type]


def test_derive_pg_union_of_names_and_backends() -> None:
    pg = derive_pg(
        [imp("mooncake.pg", ("MooncakeBackendOptions",), feature="elastic-ep", line=3),
         imp("mooncake.pg", ("join_group",), feature="elastic-ep", line=9),
         imp("mooncake.engine", ("TransferEngine",), feature="pd-disaggregation")],
        [BackendUse(value="mooncake", member="a.py", line=4, context="pg-call"),
         BackendUse(value="mooncake-cpu", member="a.py", line=5, context="pg-call")])
    assert pg.module == "mooncake.pg"
    assert pg.names == ("MooncakeBackendOptions", "join_group")
    assert pg.backends == ("mooncake", "mooncake-cpu")
    assert pg.evidence == ("a.py:3", "a.py:9")
    assert not pg.optional


def test_derive_pg_submodule_form_and_none() -> None:
    pg = derive_pg([imp("mooncake", ("ep",), feature="elastic-ep", optional=True)], [])
    assert (pg.module, pg.optional) == ("mooncake.ep", True)
    none = derive_pg([imp("mooncake.store", ("MooncakeDistributedStore",))], [])
    assert none.module is None and none.names == ()


def test_derive_pg_optional_names_and_calls_through_alias() -> None:
    from moonpin.kb.models import CallArity

    def call(name: str, function: str | None, member: str = "a.py") -> CallArity:
        return CallArity(module="mooncake.ep", name=name, member=member, line=9,
                         function=function, positional=1)

    pg = derive_pg(
        [imp("mooncake", ("ep",), feature="elastic-ep", function="init", member="a.py"),
         imp("mooncake", ("ep",), feature="elastic-ep", optional=True, function="probe",
             member="b.py"),
         imp("mooncake.ep", ("MooncakeBackendOptions",), feature="elastic-ep")],
        [],
        [call("set_host_ip", "init"), call("join_group", "init.inner"),
         call("set_device_filter", "probe", member="b.py"),
         call("Thing.method", "init")])
    assert pg.names == ("MooncakeBackendOptions", "Thing", "join_group", "set_host_ip")
    assert pg.optional_names == ("set_device_filter",)
    assert not pg.optional


def test_derive_pg_prefers_elastic_ep_and_records_alternative() -> None:
    pg = derive_pg([imp("mooncake.ep", ("Buffer",), feature="moe-a2a"),
                    imp("mooncake.pg", ("join_group",), feature="elastic-ep",
                        alternatives=("mooncake.ep",))], [])
    assert pg.module == "mooncake.pg"
    assert pg.alternatives == ("mooncake.ep",)


@pytest.mark.parametrize(
    ("names", "error"),
    [
        (["sglang/__init__.py", "sglang-0.5.18.dist-info/METADATA"], None),
        (["sglang/__init__.py"], "found 0"),
        (["sglang-0.5.18.dist-info/METADATA", "other-1.0.dist-info/METADATA"], "found 2"),
        (["vllm-0.5.18.dist-info/METADATA"], "names another project"),
        (["sglang-0.5.19.dist-info/METADATA"], "is for version 0.5.19"),
        (["sglang-0.5.18.dist-info/RECORD"], "no sglang-0.5.18.dist-info/METADATA"),
    ],
)
def test_metadata_member(names: list[str], error: str | None) -> None:
    from moonpin.kb.errors import ArchiveError
    from moonpin.scrapers.pypi import metadata_member

    filename = "sglang-0.5.18-py3-none-any.whl"
    if error is None:
        assert metadata_member(names, filename) == "sglang-0.5.18.dist-info/METADATA"
    else:
        with pytest.raises(ArchiveError, match=error) as e:
            metadata_member(names, filename)
        assert filename in str(e.value)
