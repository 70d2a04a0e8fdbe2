from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import pytest

from moonpin.kb.errors import ArchiveError, UsageError
from moonpin.scrapers import local
from moonpin.scrapers.fetch import Fetcher
from moonpin.scrapers.local import find_pins, scrape_archive, scrape_path
from tests.lib.server import FakeIndex

PS = '''
def init_distributed_environment(backend):
    if backend == "mooncake":
        from mooncake.pg import MooncakeBackendOptions
        return MooncakeBackendOptions([0])
'''


def make_tree(root: Path) -> Path:
    (root / "python/sglang/srt/distributed").mkdir(parents=True)
    (root / "python/sglang/__init__.py").write_text("")
    (root / "python/sglang/version.py").write_text('__version__ = "0.5.99"\n')
    (root / "python/sglang/srt/distributed/parallel_state.py").write_text(PS)
    (root / "python/sglang/bad.py").write_text("def (:\n")
    (root / "python/pyproject.toml").write_text(
        '[project]\nname = "sglang"\ndependencies = ["numpy"]\n'
        '[project.optional-dependencies]\nsrt = ["torch==2.13.0", "flashinfer"]\n')
    (root / "docker").mkdir()
    (root / "docker/Dockerfile").write_text(
        "FROM x\nARG MOONCAKE_VERSION=0.3.13.post1\n"
        "RUN pip install mooncake-transfer-engine-cuda13==0.3.13.post1\n")
    (root / "scripts/ci").mkdir(parents=True)
    (root / "scripts/ci/install.sh").write_text("pip install 'mooncake_transfer_engine>=0.3.12'\n")
    return root


def test_source_tree(tmp_path: Path) -> None:
    rel = scrape_path(make_tree(tmp_path))
    assert rel.version == "0.5.99"
    assert rel.source == "path"
    assert rel.pg.module == "mooncake.pg"
    assert rel.pg.names == ("MooncakeBackendOptions",)
    assert rel.torch_requirements == ("torch==2.13.0",)
    assert [(f.member, "SyntaxError" in f.error) for f in rel.parse_failures] == [
        ("sglang/bad.py", True)]
    pins = {(p.dist, p.spec, p.member, p.line) for p in rel.mooncake_pins}
    assert pins == {
        ("mooncake-transfer-engine", "==0.3.13.post1", "docker/Dockerfile", 2),
        ("mooncake-transfer-engine-cuda13", "==0.3.13.post1", "docker/Dockerfile", 3),
        ("mooncake-transfer-engine", ">=0.3.12", "scripts/ci/install.sh", 1),
    }
    assert len(rel.artifact.sha256) == 64


def test_unreadable_source_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_tree(tmp_path)
    target = root / "python/sglang/srt/distributed/parallel_state.py"
    real = local.read_regular

    def deny(path: str, **kw: Any) -> bytes:
        if Path(path) == target:
            raise PermissionError(13, "Permission denied")
        return real(path, **kw)

    monkeypatch.setattr(local, "read_regular", deny)
    rel = scrape_path(root)
    failures = {f.member: f.error for f in rel.parse_failures}
    assert "Permission denied" in failures["sglang/srt/distributed/parallel_state.py"]
    assert rel.pg.module is None  # what could not be read is not guessed


def test_no_sglang_and_no_version(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no sglang package"):
        scrape_path(tmp_path)
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang/__init__.py").write_text("")
    with pytest.raises(UsageError, match="cannot tell which SGLang version") as e:
        scrape_path(tmp_path)
    assert e.value.hint and "--version" in e.value.hint
    assert scrape_path(tmp_path, version="1.0.dev0").version == "1.0.dev0"


def test_archive_by_url(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "sglang-0.5.99")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        tf.add(tree, arcname="sglang-0.5.99")
    with FakeIndex() as idx:
        url = idx.add("/archive/refs/tags/v0.5.99.tar.gz", buf.getvalue())
        rel = scrape_archive(Fetcher(retries=0), url)
        assert (rel.version, rel.source, rel.pg.module) == ("0.5.99", "archive", "mooncake.pg")
        assert any(p.member == "docker/Dockerfile" for p in rel.mooncake_pins)
        bad = idx.add("/archive/bad.tar.gz", b"not a tarball at all")
        with pytest.raises(ArchiveError, match="not a readable source archive"):
            scrape_archive(Fetcher(retries=0), bad)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("RUN pip install mooncake-transfer-engine==0.3.7",
         ("mooncake-transfer-engine", "==0.3.7")),
        ("ARG MOONCAKE_VERSION=v0.3.9", ("mooncake-transfer-engine", "==0.3.9")),
        ("  MOONCAKE_VERSION: '0.3.10'", ("mooncake-transfer-engine", "==0.3.10")),
        ("pip install sglang==0.5.18", None),
    ],
)
def test_find_pins(line: str, expected: tuple[str, str] | None) -> None:
    got = [(p.dist, p.spec) for p in find_pins("f", line)]
    assert got == ([expected] if expected else [])


def test_source_tree_records_its_launch_rules(tmp_path: Path) -> None:
    from tests.scrapers.test_scrape_e2e import SERVER_ARGS

    root = make_tree(tmp_path)
    assert scrape_path(root).launch is None  # control: no server_args.py, no rules
    (root / "python" / "sglang" / "srt" / "server_args.py").write_text(SERVER_ARGS)
    launch = scrape_path(root).launch
    assert launch is not None and launch.member == "sglang/srt/server_args.py"
    assert [r.message for r in launch.rules] == [
        "elastic EP needs --pp-size 1 (got {self.pp_size})"]


# ------------------------------------------- hostile trees and archives (issue 19)


def _sglang_zip(members: dict[str, bytes]) -> bytes:
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, body in {"s/sglang/__init__.py": b"",
                           "s/sglang/version.py": b'__version__ = "0.5.99"\n',
                           **members}.items():
            zf.writestr(name, body)
    return buf.getvalue()


def test_a_fifo_or_device_in_a_tree_is_named_not_opened(tmp_path: Path) -> None:
    import os

    root = make_tree(tmp_path)
    os.mkfifo(root / "python/sglang/fifo.py")
    rel = scrape_path(root)  # returns: the FIFO was never opened for reading
    failures = {f.member: f.error for f in rel.parse_failures}
    assert "FIFO" in failures["sglang/fifo.py"]


def test_a_non_utf8_file_name_is_printed_safely(tmp_path: Path) -> None:
    import os

    root = make_tree(tmp_path)
    with open(os.path.join(os.fsencode(root / "python/sglang"), b"\xff\x1b.py"), "wb") as f:
        f.write(b"def (:\n")
    rel = scrape_path(root)
    bad = [f.member for f in rel.parse_failures if "xff" in f.member]
    assert bad == ["sglang/\\xff\\x1b.py"]
    rel.model_dump_json()  # and it can be written into the KB


@pytest.mark.parametrize(("offset", "value"), [(6, b"\x01\x00"), (8, b"\x63\x00"),
                                                (4, b"\x88\x00")])
def test_every_error_of_a_damaged_zip_is_an_unreadable_archive(offset: int,
                                                                value: bytes) -> None:
    from moonpin.kb.errors import ArchiveError

    data = bytearray(_sglang_zip({"s/sglang/a.py": b"x = 1\n" * 100}))
    cd = data.rfind(b"PK\x01\x02")  # the last central-directory entry: the one read last
    data[cd + offset + 2:cd + offset + 2 + len(value)] = value
    with pytest.raises(ArchiveError, match="not a readable source archive") as e:
        list(local._archive_members(bytes(data), "d.zip"))
    assert e.value.hint


def test_total_bytes_are_capped_as_well_as_each_member(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    from moonpin.kb.errors import ArchiveError

    monkeypatch.setattr(local, "MAX_TOTAL", 100_000)
    members = {f"s/sglang/m{i}.py": b"\0" * 40_000 for i in range(5)}  # each under the cap
    with pytest.raises(ArchiveError, match="more than"):
        list(local._archive_members(_sglang_zip(members), "bomb.zip"))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tf.addfile(info, io.BytesIO(body))
    with pytest.raises(ArchiveError, match="decompresses to more than"):
        list(local._archive_members(buf.getvalue(), "bomb.tar.gz"))


def test_a_pax_size_too_large_is_an_unreadable_archive() -> None:
    from moonpin.kb.errors import ArchiveError

    info = tarfile.TarInfo("s/sglang/a.py")
    info.pax_headers = {"comment": "x" * 20}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        tf.addfile(info, io.BytesIO(b""))
    data = buf.getvalue().replace(b"32 comment=xxxxxxxxxxxxxxxxxxxx\n",
                                  b"32 size=99999999999999999999999\n")
    with pytest.raises(ArchiveError, match=r"pax\.tar: ") as e:
        list(local._archive_members(data, "pax.tar"))
    assert e.value.hint


def test_a_source_tree_records_its_extension_pins_and_backend_imports(tmp_path: Path) -> None:
    """The facts a wheel's scrape records (issue 39), from a checkout: its pyproject's pins
    of the native extensions, and what each backend choice imports."""
    from tests.readers.launch.test_server_args import AG_MEMBERS

    root = make_tree(tmp_path)
    (root / "python/pyproject.toml").write_text(
        '[project]\nname = "sglang"\ndependencies = [\n  "numpy",\n'
        '  "sglang-kernel==0.4.10",\n]\n')
    for name, text in {**AG_MEMBERS, "sglang/srt/layers/moe/token_dispatcher/nixl.py":
                       "def f():\n    from nixl_ep import Buffer\n",
                       "sglang/srt/elastic.py": "if cfg.elastic_ep_backend in ('nixl',):\n"
                       "    from nixl_ep import Buffer\n"}.items():
        (root / "python" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "python" / name).write_text(text)
    rel = scrape_path(root)
    assert [(p.dist, p.requirement, p.member, p.line) for p in rel.extension_pins] == [
        ("sglang-kernel", "sglang-kernel==0.4.10", "python/pyproject.toml", 5)]
    nixl = next(b for b in rel.launch_backends if b.choice == "nixl")
    assert nixl.flag == "--elastic-ep-backend" and nixl.member is None  # none per choice
    assert [(i.member, i.module, i.names, i.line, i.test) for i in nixl.guarded] == [
        ("sglang/srt/elastic.py", "nixl_ep", ("Buffer",), 2, 1)]
