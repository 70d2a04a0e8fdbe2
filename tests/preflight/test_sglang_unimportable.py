"""An installed SGLang that ``import sglang`` cannot find: the worker's launch raises
``ModuleNotFoundError``, so the check fails (it used to warn "the sglang package folder was
not found" and accept either mooncake module, exit 0).

The layouts are the files pip 23.2 wrote on the real image for an editable install whose
checkout was then moved away (setuptools 84 lenient: ``.pth`` + finder; hatchling
``dev-mode-exact`` without the ``editables`` package; a plain ``.pth`` path line), and a
regular install whose package folder was deleted. A distribution of metadata alone (its
RECORD lists nothing outside its own folder, as the KB-agreement images are written) is
still judged by the KB's record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.lib.checkrun import run, small_kb
from tests.lib.images import add_sglang
from tests.preflight.test_importer import image

DEV = "0.5.99.dev0"
TAG = DEV.replace(".", "_")


_image = image  # torch and mooncake in a site folder of this Python's layout


def _dist(site: Path, version: str, files: list[str], url: str | None) -> Path:
    """A ``.dist-info`` as pip writes it, its RECORD listing ``files`` first."""
    folder = site / f"sglang-{version}.dist-info"
    folder.mkdir()
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    meta = [f"{folder.name}/{n}" for n in ("INSTALLER", "METADATA", "RECORD", "REQUESTED",
                                            "WHEEL", "direct_url.json")]
    (folder / "RECORD").write_text("".join(f"{f},,\n" for f in [*files, *meta]))
    if url is not None:
        (folder / "direct_url.json").write_text(json.dumps(
            {"dir_info": {"editable": True}, "url": f"file://{url}"}))
    return folder


def _setuptools(site: Path, checkout: Path) -> None:
    mod = f"__editable___sglang_{TAG}_finder"
    (site / f"__editable__.sglang-{DEV}.pth").write_text(f"import {mod}; {mod}.install()")
    (site / f"{mod}.py").write_text(
        f"MAPPING: dict[str, str] = {{'sglang': '{checkout}/sglang'}}\n"
        "NAMESPACES: dict[str, list[str]] = {}\n"
        f"PATH_PLACEHOLDER = '__editable__.sglang-{DEV}.finder' + \".__path_hook__\"\n")
    _dist(site, DEV, [f"__editable__.sglang-{DEV}.pth", f"{mod}.py",
                      f"__pycache__/{mod}.cpython-311.pyc"], str(checkout))


def _hatch_exact(site: Path, checkout: Path) -> None:
    (site / "_editable_impl_sglang.pth").write_text("import _editable_impl_sglang")
    (site / "_editable_impl_sglang.py").write_text(
        "from editables.redirector import RedirectingFinder as F\nF.install()\n"
        f"F.map_module('sglang', '{checkout}/sglang/__init__.py')")
    _dist(site, DEV, ["_editable_impl_sglang.pth", "_editable_impl_sglang.py"], str(checkout))


def _path_line(site: Path, checkout: Path) -> None:  # flit, pdm-backend, hatchling
    (site / "sglang.pth").write_text(f"{checkout}\n")
    _dist(site, DEV, ["sglang.pth"], str(checkout))


@pytest.mark.parametrize("style", ["setuptools", "hatch-exact", "path-line"])
def test_an_editable_whose_checkout_is_gone_fails(tmp_path: Path, style: str) -> None:
    site = _image(tmp_path)
    checkout = tmp_path / "moved-away" / "python"  # never made
    {"setuptools": _setuptools, "hatch-exact": _hatch_exact, "path-line": _path_line}[style](
        site, checkout)
    r = run(site, kb=small_kb(tmp_path))
    assert r.rc == 1, r.out
    line = r.line("sglang:")
    assert line.startswith(f"fail  sglang: sglang {DEV}: `import sglang` finds no sglang "
                           "package"), r.out
    assert f"{checkout}" in line and "does not exist" in line
    back = (f"put its checkout back at {checkout}, or install SGLang again (`pip install -e "
            "<checkout>/python`, or a release)")
    if style != "hatch-exact":
        assert r.fixes()[0] == f"fix: {back}"
    else:  # the redirect's own import fails too (no `editables` here)
        assert "`editables`" in line
        assert r.fixes()[0] == f"fix: pip install editables; {back}"


def test_hatch_exact_without_editables_fails_on_that(tmp_path: Path) -> None:
    site = _image(tmp_path)
    checkout = tmp_path / "co" / "python"
    _hatch_exact(site, checkout)
    add_sglang(checkout, DEV)  # the checkout is there; the redirect never runs
    r = run(site, kb=small_kb(tmp_path))
    assert r.rc == 1 and r.status("sglang") == "fail", r.out
    assert "whose redirect cannot be imported (hatchling's imports the `editables` package)" \
        in r.line("sglang:")
    assert r.fixes()[0] == "fix: pip install editables"


def test_the_hatch_redirect_works_once_editables_is_there(tmp_path: Path) -> None:
    site = _image(tmp_path)
    checkout = tmp_path / "co" / "python"
    _hatch_exact(site, checkout)
    add_sglang(checkout, DEV)  # the sources in the checkout (its metadata is not on the path)
    (site / "editables").mkdir()
    (site / "editables" / "__init__.py").write_text("")
    (site / "editables" / "redirector.py").write_text("class RedirectingFinder: pass\n")
    r = run(site, kb=small_kb(tmp_path))
    assert r.status("sglang") == "pass", r.out
    assert f"from {checkout / 'sglang'} (editable)" in r.line("sglang:")


def test_a_regular_install_whose_package_was_deleted_fails(tmp_path: Path) -> None:
    site = _image(tmp_path)
    _dist(site, "0.5.23", ["sglang/__init__.py", "sglang/srt/server_args.py",
                           "../../../bin/sglang"], None)
    r = run(site, kb=small_kb(tmp_path))
    assert r.rc == 1 and r.status("sglang") == "fail", r.out
    assert "2 files (sglang/__init__.py, sglang/srt/server_args.py, ...); they are gone" in \
        r.line("sglang:")
    assert r.fixes()[0] == "fix: pip install --force-reinstall --no-deps 'sglang==0.5.23'"


def test_metadata_alone_is_still_judged_by_the_kb(tmp_path: Path) -> None:
    site = _image(tmp_path)
    _dist(site, "0.5.23", [], None)
    r = run(site, kb=small_kb(tmp_path))
    assert r.status("sglang") == "warn", r.out
    assert "the sglang package folder was not found; using the KB record" in r.line("sglang:")
    assert r.rc == 0


@pytest.mark.parametrize("record", ["newlines", "top-level pth", "fifo"])
def test_a_hostile_record_is_read_within_bounds(tmp_path: Path, record: str) -> None:
    """16 MiB of empty lines, 200,000 ``.pth`` entries, a FIFO: an answer at once, nothing
    hangs or grows without bound."""
    import os
    import time

    site = _image(tmp_path)
    folder = _dist(site, "0.5.23", ["sglang/__init__.py"], None)
    rec = folder / "RECORD"
    rec.unlink()
    if record == "newlines":
        rec.write_text("\n" * (16 << 20) + "sglang/__init__.py,,\n")
    elif record == "top-level pth":
        rec.write_text("".join(f"x{i}.pth,,\n" for i in range(200_000)))
    else:
        os.mkfifo(rec)
    t = time.monotonic()
    r = run(site, kb=small_kb(tmp_path))
    assert time.monotonic() - t < 60
    if record == "top-level pth":
        assert r.rc == 1 and "100000 files" in r.line("sglang:"), r.out
    else:  # past the cap, or no file: unread, judged as metadata alone (the KB's record)
        assert r.rc == 0 and r.status("sglang") == "warn", r.out
        assert "the sglang package folder was not found" in r.line("sglang:")
