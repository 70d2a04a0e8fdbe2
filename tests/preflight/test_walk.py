"""The walk of ``moonpin check --image`` goes one way through the rooms (issue 37): traced
during a real check of an image file (an OCI layout umoci makes of a throwaway root holding
torch, SGLang, mooncake, nixl and sgl_kernel), every call from one room of
``moonpin/preflight`` into another goes down the layers below, where a room only calls the
rooms under it. The few calls that still go up are listed with why; the list fails when one of
them is gone, so it cannot go stale."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import moonpin.preflight

#: The rooms from the bottom up: a room calls only rooms before it. ``result`` (the report's
#: values) and ``prefetch`` (a child computing ahead) are used everywhere; the access layer
#: every read goes through; the importer and loader models; the environment (a target is
#: assembled with those models: ``.pth`` files read as ``site`` reads them, the loader's
#: search folders, the Context's one Importer); what is installed; the judgements every
#: project shares (torch, SGLang, libraries, fix lines); the extensions' rules, each
#: project's judgement behind the seam (mooncake's own lines); the probe; the walk of the
#: other extensions alone; the report written for its target; the walk, the warm start.
LAYERS = ("result", "prefetch", "access", "pyimport", "loader", "env", "installed", "judge",
          "extensions", "probe", "extensions_only", "written", "run", "verdict", "__main__")
#: Rooms that hold values, not steps of the walk: making a :class:`CheckResult` or a
#: :class:`Report` is not entering a room (each room says its lines with them).
VALUES = {"result"}

#: Calls that go up today, each (caller room, callee room): why, and what would end it.
KNOWN_UP: dict[tuple[str, str], str] = {}

_BASE = os.path.dirname(os.path.abspath(moonpin.preflight.__file__)) + os.sep


def _room(filename: str) -> str | None:
    if not filename.startswith(_BASE):
        return None
    rel = filename[len(_BASE):]
    return rel.split(os.sep, 1)[0] if os.sep in rel else rel.removesuffix(".py")


def traced(call: Any) -> tuple[Any, Counter[tuple[str, str]], list[str]]:
    """``call()``'s answer, every (caller room, callee room) of a call between two rooms,
    and the rooms the walk (run.py) enters, in order, each run of one room once (the
    :data:`VALUES` rooms left out)."""
    edges: Counter[tuple[str, str]] = Counter()
    entered: list[str] = []

    def profile(frame: Any, event: str, arg: object) -> None:
        if event != "call" or frame.f_code.co_name == "<module>":
            return  # a module's own code running at its first import is not a call of the walk
        callee = _room(frame.f_code.co_filename)
        if callee is None:
            return
        back = frame.f_back
        while back is not None and _room(back.f_code.co_filename) is None:
            back = back.f_back  # through the standard library and other packages
        caller = _room(back.f_code.co_filename) if back is not None else None
        if caller is not None and caller != callee:
            edges[caller, callee] += 1
            if caller == "run" and callee not in VALUES and (not entered
                                                             or entered[-1] != callee):
                entered.append(callee)

    sys.setprofile(profile)
    try:
        got = call()
    finally:
        sys.setprofile(None)
    return got, edges, entered


def upward(edges: Counter[tuple[str, str]] | set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The calls that go up the layers (or into a room the layers do not name)."""
    rank = {room: i for i, room in enumerate(LAYERS)}
    return {(a, b) for a, b in edges
            if a not in rank or b not in rank or rank[b] >= rank[a]}


def once_in_order(entered: list[str]) -> list[str]:
    """What is wrong with the rooms a walk entered: a room entered again after another, or a
    room entered after one above it (empty: each room once, up the layers)."""
    rank = {room: i for i, room in enumerate(LAYERS)}
    wrong = [f"{room} again" for i, room in enumerate(entered) if room in entered[:i]]
    wrong += [f"{b} after {a}" for a, b in itertools.pairwise(entered)
              if rank.get(b, -1) <= rank.get(a, -1)]
    return wrong


def test_the_checker_sees_a_room_entered_twice_or_out_of_order() -> None:
    assert once_in_order(["env", "installed", "judge", "extensions"]) == []
    assert once_in_order(["env", "judge", "env"]) == ["env again", "env after judge"]
    assert once_in_order(["env", "installed", "judge", "installed"]) == [
        "installed again", "installed after judge"]
    assert once_in_order(["judge", "env"]) == ["env after judge"]
    assert once_in_order(["env", "newroom"]) == ["newroom after env"]
    # the environment assembles with the importer model below it: a walk that enters the
    # importer model after the environment steps down
    assert once_in_order(["env", "pyimport"]) == ["pyimport after env"]


def test_the_checker_sees_a_planted_call_up() -> None:
    assert upward({("judge", "loader"), ("run", "judge"), ("extensions", "judge")}) == set()
    assert upward({("loader", "judge")}) == {("loader", "judge")}
    assert upward({("judge", "extensions")}) == {("judge", "extensions")}
    assert upward({("loader", "newroom")}) == {("loader", "newroom")}


#: Imports that go up the layers outside ``TYPE_CHECKING`` (a module's or a function's), each
#: (importing module, imported room): why. Not calls of the traced walk above, but the same
#: rule read from the sources, so a call up that the throwaway image does not reach is seen
#: too.
KNOWN_IMPORTS_UP = {
    ("pyimport/pyrun.py", "loader"): "the import chain's evaluator loads an extension module "
                                     "through the loader's process model (ldproc)",
    ("pyimport/labeleval.py", "loader"): "evaluates torch's version with pyrun's chain, "
                                         "handing it ldproc's process",
}


def imports_up(base: Path) -> set[tuple[str, str]]:
    """(module, room) of each import of a room above the module's own, or of a room the
    layers do not name, outside ``TYPE_CHECKING`` blocks, in the rooms under ``base``."""
    import ast

    rank = {room: i for i, room in enumerate(LAYERS)}
    out = set()
    for f in sorted(base.rglob("*.py")):
        rel = f.relative_to(base)
        me = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        if me == "__init__":
            continue
        tree = ast.parse(f.read_text(encoding="utf-8"))
        typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                       and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
                       for n in ast.walk(block)}
        for node in ast.walk(tree):
            if id(node) in typing_only or not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif node.level or not node.module:
                continue
            elif node.module == "moonpin.preflight":
                names = [f"{node.module}.{a.name}" for a in node.names]
            else:
                names = [node.module]
            for name in names:
                parts = name.split(".")
                if parts[:2] != ["moonpin", "preflight"] or len(parts) < 3 or parts[2] == me:
                    continue
                if me not in rank or parts[2] not in rank or rank[parts[2]] >= rank[me]:
                    out.add((rel.as_posix(), parts[2]))
    return out


def test_imports_go_down_the_layers() -> None:
    up = imports_up(Path(_BASE))
    assert up - set(KNOWN_IMPORTS_UP) == set(), f"imports up the layers: {sorted(up)}"
    assert set(KNOWN_IMPORTS_UP) - up == set(), \
        f"gone: drop from KNOWN_IMPORTS_UP {set(KNOWN_IMPORTS_UP) - up}"


def test_the_import_checker_sees_a_planted_import_up(tmp_path: Path) -> None:
    (tmp_path / "access").mkdir()
    (tmp_path / "access" / "chroot.py").write_text(
        "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from moonpin.preflight.env import x\n"
        "def f():\n    from moonpin.preflight.judge.fixes import shell_line\n")
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "rootfs.py").write_text(
        "from moonpin.preflight.access import chroot\nimport moonpin.preflight.run\n"
        "from moonpin.preflight import loader, probe\n")
    assert imports_up(tmp_path) == {("access/chroot.py", "judge"), ("env/rootfs.py", "run"),
                                    ("env/rootfs.py", "probe")}


def test_every_room_is_in_the_layers() -> None:
    here = Path(_BASE)
    rooms = {p.name for p in here.iterdir() if (p / "__init__.py").is_file()}
    rooms |= {p.stem for p in here.glob("*.py") if p.stem != "__init__"}
    assert rooms == set(LAYERS)


@pytest.mark.skipif(shutil.which("umoci") is None or shutil.which("gcc") is None,
                    reason="needs umoci and gcc")
def test_the_image_walk_goes_down_the_layers(tmp_path: Path) -> None:
    from moonpin.preflight.env.rootfs import ImageConfig
    from moonpin.preflight.run import check_image, check_image_file
    from tests.lib.checkrun import small_kb
    from tests.lib.extimages import add_nixl, add_sgl_kernel, torch_image
    from tests.lib.images import add_mooncake, add_sglang
    from tests.preflight.test_check_rootfs import debian_root

    root = tmp_path / "bundle" / "rootfs"
    site = torch_image(debian_root(root))
    add_sglang(site)
    add_mooncake(site, torch_builds=("2.14.1",))
    add_nixl(site)
    add_sgl_kernel(site)
    layout = tmp_path / "oci"
    for argv in (["init", "--layout", str(layout)], ["new", "--image", f"{layout}:t"],
                 ["insert", "--image", f"{layout}:t", str(root), "/"]):
        subprocess.run(["umoci", *argv], check=True, timeout=120, capture_output=True)
    kb = str(small_kb(tmp_path))
    launch = ["--moe-a2a-backend", "nixl"]
    report, edges, entered = traced(lambda: check_image_file(
        str(layout), elastic_ep_backend="mooncake", kb_path=kb, launch_args=launch))
    names = [c.name for c in report.checks]
    assert "build" in names, report.lines()  # the whole walk ran
    # --image keeps every .py and .so of the site folders (readers/image/layers.check_wants),
    # so nixl_ep's loader and build are read from the layers as from the same root given
    # as --rootfs
    assert any(c.name == "nixl_ep" and c.status == "pass" for c in report.checks), \
        report.lines()
    rootfs, more, entered_rootfs = traced(lambda: check_image(
        elastic_ep_backend="mooncake", launch_args=launch, kb_path=kb, rootfs=str(root),
        config=ImageConfig(env=["PATH=/usr/local/bin:/usr/bin:/bin"])))
    assert any(c.name == "nixl_ep" and c.status == "pass" for c in rootfs.checks), \
        rootfs.lines()
    edges.update(more)
    up = upward(edges)
    assert up - set(KNOWN_UP) == set(), f"calls up the layers: {sorted(up - set(KNOWN_UP))}"
    assert set(KNOWN_UP) - up == set(), f"gone: drop from KNOWN_UP {set(KNOWN_UP) - up}"
    # issue 37: the walk enters each room once, in one direction (up the layers)
    assert once_in_order(entered) == [], entered
    assert entered == ["env", "installed", "judge", "extensions", "written"], \
        entered
    assert once_in_order(entered_rootfs) == [], entered_rootfs
    # no mooncake backend asked: the other extensions alone, the same way up
    alone, _, entered_alone = traced(lambda: check_image(
        elastic_ep_backend=None, launch_args=launch, kb_path=kb, rootfs=str(root),
        config=ImageConfig(env=["PATH=/usr/local/bin:/usr/bin:/bin"])))
    assert any(c.name == "nixl_ep" and c.status == "pass" for c in alone.checks), \
        alone.lines()
    assert entered_alone == ["env", "judge", "extensions_only", "written"], entered_alone
