"""meson-python's editable install (``pip install --no-build-isolation -e``, meson-python
0.22 on the real image): ``sglang-editable.pth`` imports ``_sglang_editable_loader`` and
calls its ``init()``, which inserts a ``MesonpyMetaFinder`` at ``sys.meta_path[0]``; the
finder maps its top-level names through the build folder's
``meson-info/intro-install_plan.json``. The check used to find no sglang there and accept
anything (exit 0) while the worker imported the checkout's sources.

The loader is written in its generated shape (the finder's class stands in; ``init()`` as
meson-python writes it), the plan as meson wrote it for ``install_subdir('sglang')``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.lib.checkrun import run, small_kb
from tests.lib.images import add_sglang
from tests.preflight.test_importer import image

DEV = "0.5.99.dev0"


def _meson_editable(site: Path, checkout: Path, old: bool = False,
                    exclude_dirs: tuple[str, ...] = ()) -> Path:
    build = checkout / "build" / "cp311"
    (build / "meson-info").mkdir(parents=True)
    plan = {"targets": {}, "install_subdirs": {str(checkout / "sglang"): {
        "destination": "{py_purelib}/sglang", "tag": None, "subproject": None,
        "exclude_dirs": list(exclude_dirs), "exclude_files": []}}}
    (build / "meson-info" / "intro-install_plan.json").write_text(json.dumps(plan))
    head = "import sys\n\nclass MesonpyMetaFinder:\n    def __init__(self, *a): pass\n\n"
    if old:  # meson-python before 0.16: a module-level install() call
        tail = (f"def install(names, path, cmd, verbose):\n    pass\n\n"
                f"install(\n    {{'sglang'}},\n    '{build}',\n    ['/usr/bin/ninja'],\n"
                "    False,\n)\n")
    else:
        tail = (f"def init():\n    finder = MesonpyMetaFinder(\n        'sglang',\n"
                f"        {{'sglang'}},\n        '{build}',\n        ['/usr/bin/ninja'],\n"
                "        False,\n    )\n    sys.meta_path.insert(0, finder)\n"
                "    sys.path_hooks.insert(0, finder._path_hook)\n")
    (site / "_sglang_editable_loader.py").write_text(head + tail)
    (site / "sglang-editable.pth").write_text(
        "import _sglang_editable_loader" + ("" if old else
                                           "; _sglang_editable_loader.init()"))
    folder = site / f"sglang-{DEV}.dist-info"
    folder.mkdir()
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {DEV}\n")
    (folder / "RECORD").write_text(
        f"_sglang_editable_loader.py,,\nsglang-editable.pth,,\n{folder.name}/METADATA,,\n"
        f"{folder.name}/RECORD,,\n")
    return checkout / "sglang"


_image = image  # torch and mooncake in a site folder of this Python's layout


@pytest.mark.parametrize("old", [False, True])
def test_the_checkout_is_judged_by_its_sources(tmp_path: Path, old: bool) -> None:
    site = _image(tmp_path)
    checkout = tmp_path / "co" / "python"
    pkg = _meson_editable(site, checkout, old)
    add_sglang(checkout, DEV, module="ep")  # a checkout whose SGLang imports mooncake.ep
    r = run(site, kb=small_kb(tmp_path))
    line = r.line("sglang:")
    assert f"sglang {DEV} from {pkg} (editable) needs mooncake.ep" in line, r.out
    r2 = run(site, "--json", kb=small_kb(tmp_path))
    found = json.loads(r2.out)["found"]["sglang"]
    assert found["how"] == "editable redirect" and found["tool"] == "meson-python"
    assert found["file"] == str(site / "_sglang_editable_loader.py")


@pytest.mark.parametrize("exclude", [(), ("srt/distributed",)])
def test_a_folder_the_plan_excludes_is_not_imported(tmp_path: Path,
                                                    exclude: tuple[str, ...]) -> None:
    site = _image(tmp_path)
    checkout = tmp_path / "co" / "python"
    _meson_editable(site, checkout, exclude_dirs=exclude)
    add_sglang(checkout, DEV, module="ep")
    r = run(site, "--json", kb=small_kb(tmp_path))
    files = json.loads(r.out)["found"]["sglang"]["sources"]["files"]
    # add_sglang writes 7 files; srt/distributed holds 2 of them
    assert files == (5 if exclude else 7), r.out


def test_a_build_folder_that_is_gone_finds_nothing(tmp_path: Path) -> None:
    import shutil

    site = _image(tmp_path)
    checkout = tmp_path / "co" / "python"
    _meson_editable(site, checkout)
    add_sglang(checkout, DEV)
    shutil.rmtree(checkout / "build")
    r = run(site, kb=small_kb(tmp_path))
    assert r.rc == 1 and r.status("sglang") == "fail", r.out
    assert "`import sglang` finds no sglang package" in r.line("sglang:")


@pytest.mark.parametrize("plan", ["fifo", "dev-zero", "huge", "nested", "not-json"])
def test_a_hostile_install_plan_finds_nothing_at_once(tmp_path: Path, plan: str) -> None:
    """The import's rebuild would fail on such a plan: no sglang through the finder, said
    without hanging on a FIFO, reading a device or building gigabytes of objects."""
    import os
    import time

    site = _image(tmp_path)
    checkout = tmp_path / "co" / "python"
    _meson_editable(site, checkout)
    add_sglang(checkout, DEV)
    path = checkout / "build" / "cp311" / "meson-info" / "intro-install_plan.json"
    path.unlink()
    if plan == "fifo":
        os.mkfifo(path)
    elif plan == "dev-zero":
        path.symlink_to("/dev/zero")
    elif plan == "huge":
        path.write_text("[" + "{}," * (2 << 20) + "{}]")  # 6 MiB of empty objects
    elif plan == "nested":
        path.write_text("[" * 100_000 + "]" * 100_000)
    else:
        path.write_bytes(b"\xff\xfe{not json")
    t = time.monotonic()
    r = run(site, kb=small_kb(tmp_path))
    assert time.monotonic() - t < 30
    assert r.rc == 1 and r.status("sglang") == "fail", r.out
    assert "`import sglang` finds no sglang package" in r.line("sglang:")
