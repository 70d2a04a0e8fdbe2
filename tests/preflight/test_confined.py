"""The image root a check confines its reads to is a value (issue 37): a
:class:`~moonpin.preflight.access.confined.Confined` made once for the check's
:class:`~moonpin.preflight.env.context.Context` and handed to every read, never a module's
state set and lifted around a run. A path under the root whose links lead out of it is
refused as missing; two checks in one process, of two roots, each keep their own."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from moonpin.kb.errors import ReadRefused
from moonpin.preflight.access.confined import NOWHERE, Confined
from moonpin.preflight.env.context import Context
from moonpin.preflight.env.rootfs import target_for
from moonpin.preflight.installed.image_facts import read_dists, torch_version_py
from moonpin.preflight.run import check_image
from tests.lib.checkrun import small_kb
from tests.lib.images import healthy_image
from tests.preflight.test_check_rootfs import debian_root


def test_outside_is_a_link_from_under_the_root_to_elsewhere(tmp_path: Path) -> None:
    root, host = tmp_path / "root", tmp_path / "host.txt"
    (root / "etc").mkdir(parents=True)
    host.write_text("the host's\n")
    (root / "etc" / "mine.txt").write_text("the image's\n")
    (root / "etc" / "out").symlink_to(host)  # absolute: out of the root on this host
    (root / "etc" / "in").symlink_to("mine.txt")
    (root / "etc" / "up").symlink_to("../../host.txt")  # relative, and out all the same
    c = Confined(root)
    assert c.outside(root / "etc" / "out") and c.outside(root / "etc" / "up")
    assert not c.outside(root / "etc" / "in") and not c.outside(root / "etc" / "mine.txt")
    assert not c.outside(host)  # not under the root: moonpin's own files, say
    assert not NOWHERE.outside(root / "etc" / "out")  # a check of this machine
    assert c.read(root / "etc" / "in", cap=100) == b"the image's\n"
    with pytest.raises(ReadRefused) as got:
        c.read(root / "etc" / "out", cap=100, what="test file")
    assert got.value.errno == errno.ENOENT and "outside the image root" in str(got.value)
    assert NOWHERE.read(root / "etc" / "out", cap=100) == b"the host's\n"


def test_a_confined_is_a_frozen_value(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to("real")
    c = Confined(tmp_path / "alias")
    assert c == Confined(tmp_path / "real") and c.root == os.path.realpath(tmp_path / "real")
    assert hash(c) == hash(Confined(str(tmp_path / "real") + "/"))
    with pytest.raises(AttributeError):
        c.root = "/"  # type: ignore[misc]
    assert Confined(None) == NOWHERE and NOWHERE.root is None


def _two_roots(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """Roots A and B, each a healthy image but for B's torch, whose version.py and METADATA
    say 2.14.1; A's torch/version.py and its torch METADATA are absolute links (out of A,
    on this host) to B's."""
    a, b = tmp_path / "a", tmp_path / "b"
    site_a = healthy_image(debian_root(a))
    site_b = healthy_image(debian_root(b))
    for f in (site_b / "torch" / "version.py", *site_b.glob("torch-*.dist-info/METADATA")):
        f.write_text(f.read_text().replace("2.13.0", "2.14.1"))
    (site_a / "torch" / "version.py").unlink()
    (site_a / "torch" / "version.py").symlink_to(site_b / "torch" / "version.py")
    meta_a = next(site_a.glob("torch-*.dist-info")) / "METADATA"
    meta_a.unlink()
    meta_a.symlink_to(next(site_b.glob("torch-*.dist-info")) / "METADATA")
    return a, site_a, b, site_b


def test_two_contexts_in_one_process_keep_their_own_root(tmp_path: Path) -> None:
    a, site_a, b, site_b = _two_roots(tmp_path)
    ctx_a = Context.of(target_for(str(a)))
    ctx_b = Context.of(target_for(str(b)))
    assert ctx_a.confined == Confined(a) and ctx_b.confined == Confined(b)
    assert ctx_a.importer.within is ctx_a.confined  # the one importer model reads the same way
    # interleaved: B reads its own file (and the memo keeps it), A refuses its link into B,
    # B again, A again: neither sees the other's root
    for _ in range(2):
        got_b = torch_version_py(str(site_b / "torch"), ctx_b.confined)
        assert got_b is not None and got_b["__version__"] == "2.14.1", got_b
        assert torch_version_py(str(site_a / "torch"), ctx_a.confined) is None
    # the control: not confined (a check of this machine), the link is followed into B
    got = torch_version_py(str(site_a / "torch"), NOWHERE)
    assert got is not None and got["__version__"] == "2.14.1"
    # the installed distributions: A's torch METADATA linked into B is not A's
    names_a = {d.name: d.version for d in read_dists(ctx_a.paths, ctx_a.confined)}
    names_b = {d.name: d.version for d in read_dists(ctx_b.paths, ctx_b.confined)}
    assert "torch" not in names_a and names_b["torch"] == "2.14.1", (names_a, names_b)


def test_checks_of_two_roots_in_one_process(tmp_path: Path) -> None:
    # A, B, then A again in one process: A's link into B is refused each time, whatever was
    # checked before it (a module's root set and lifted around a run would let a check that
    # runs within another, or after a failed lift, read through it)
    a, _, b, _ = _two_roots(tmp_path)
    kb = str(small_kb(tmp_path))
    lines = {}
    for name, root in (("a", a), ("b", b), ("a again", a)):
        report = check_image(elastic_ep_backend="mooncake", kb_path=kb, rootfs=str(root))
        lines[name] = "\n".join(report.lines())
    assert "2.14.1" in lines["b"], lines["b"]
    assert "2.14.1" not in lines["a"], lines["a"]
    assert lines["a again"] == lines["a"]
