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
#: values) and ``prefetch`` (a child computing ahead) are used everywhere; the environment
#: and its access layer; the importer and loader models; what is installed; the judgements
#: every project shares (torch, SGLang, libraries, fix lines); the extensions' rules, each
#: project's judgement behind the seam (mooncake's own lines); the probe; the walk of the
#: other extensions alone; the report written for its target; the walk, the warm start.
LAYERS = ("result", "prefetch", "env", "pyimport", "loader", "installed", "judge",
          "extensions", "probe", "extensions_only", "written", "run", "verdict", "__main__")
#: Rooms that hold values, not steps of the walk: making a :class:`CheckResult` or a
#: :class:`Report` is not entering a room (each room says its lines with them).
VALUES = {"result"}

#: Calls that go up today, each (caller room, callee room): why, and what would end it.
KNOWN_UP = {
    # env/ holds both the access layer every room reads through (chroot.py, zipfs.py) and
    # the assembly of a target from an image root (rootfs.py, context.py), which needs the
    # importer model (sitefiles' .pth reading, the Context's one Importer), the loader's
    # search folders and the fix lines' shell form (and, on a path that does not resolve,
    # image_facts.kind_of's words). Splitting the access layer into a room of its own ends
    # these.
    ("env", "pyimport"): "rootfs.target_for reads .pth files; Context builds the Importer",
    ("env", "loader"): "rootfs.target_for asks ldso.ld_path_folders",
}

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
    assert once_in_order(["env", "pyimport", "installed", "judge", "extensions"]) == []
    assert once_in_order(["env", "judge", "env"]) == ["env again", "env after judge"]
    assert once_in_order(["env", "installed", "judge", "installed"]) == [
        "installed again", "installed after judge"]
    assert once_in_order(["judge", "env"]) == ["env after judge"]
    assert once_in_order(["env", "newroom"]) == ["newroom after env"]


def test_the_checker_sees_a_planted_call_up() -> None:
    assert upward({("judge", "loader"), ("run", "judge"), ("extensions", "judge")}) == set()
    assert upward({("loader", "judge")}) == {("loader", "judge")}
    assert upward({("judge", "extensions")}) == {("judge", "extensions")}
    assert upward({("loader", "newroom")}) == {("loader", "newroom")}


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
    assert entered == ["env", "pyimport", "installed", "judge", "extensions", "written"], \
        entered
    assert once_in_order(entered_rootfs) == [], entered_rootfs
    # no mooncake backend asked: the other extensions alone, the same way up
    alone, _, entered_alone = traced(lambda: check_image(
        elastic_ep_backend=None, launch_args=launch, kb_path=kb, rootfs=str(root),
        config=ImageConfig(env=["PATH=/usr/local/bin:/usr/bin:/bin"])))
    assert any(c.name == "nixl_ep" and c.status == "pass" for c in alone.checks), \
        alone.lines()
    assert entered_alone == ["env", "judge", "extensions_only", "written"], entered_alone
