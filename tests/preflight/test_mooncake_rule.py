"""Mooncake's loader rule behind the extensions' seam (moonpin/preflight/extensions/rules/
mooncake_rule.py): the module and build it picks are the ones the process-group judgement
(moonpin/preflight/extensions/rules/mooncake_pg.py, its own lines) names, because that judgement
asks it."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

from moonpin.preflight.env import target as tg
from moonpin.preflight.env.context import Context
from moonpin.preflight.extensions import seam
from moonpin.preflight.extensions.rules import mooncake_rule
from moonpin.preflight.installed.image_facts import locate, read_bytes
from tests.lib.checkrun import run, small_kb
from tests.lib.images import add_torch, healthy_image


def _pick(site: Path, torch: str) -> seam.Pick:
    ctx = Context.of(tg.from_site_packages([str(site)]))
    found = locate(ctx, "mooncake")
    assert found is not None
    facts = seam.Facts(torch=torch, cuda=13, env={}, gpu=None, gpu_present=False,
                       gpu_said="", dists={}, suffixes=ctx.ext_suffixes,
                       find=lambda n: locate(ctx, n), read=read_bytes)
    return mooncake_rule.pick(facts, found)


def test_the_rule_picks_the_build_the_judgement_names(tmp_path: Path) -> None:
    site = healthy_image(tmp_path / "site")
    got = _pick(site, "2.13.0+cu130")
    assert got.unread is None and len(got.choices) == 1, got.notes
    (build,) = got.choices[0].files
    assert os.path.basename(build).startswith("pg_2_13_0.") and got.choices[0].raises is None
    r = run(site, kb=small_kb(tmp_path))
    assert r.rc == 0 and f"loader finds {os.path.basename(build)}" in r.line("build"), r.out


def test_no_build_for_torch_is_what_the_import_raises(tmp_path: Path) -> None:
    site = healthy_image(tmp_path / "site")
    add_torch(site, version="2.15.0")
    (choice,) = _pick(site, "2.15.0").choices
    assert choice.raises == "ModuleNotFoundError: No module named 'mooncake.pg_2_15_0'"
    r = run(site, kb=small_kb(tmp_path))
    assert r.rc == 1 and "imports mooncake.pg_2_15_0 for torch 2.15.0" in r.line("build")


def test_the_fallback_module_before_the_rename(tmp_path: Path) -> None:
    site = healthy_image(tmp_path / "site", loaders=("ep",))
    (choice,) = _pick(site, "2.13.0").choices
    assert os.path.basename(choice.files[0]).startswith("ep_2_13_0.")


@pytest.mark.parametrize("name", sorted(seam.RULES))
def test_own_lines_is_said_by_the_rule_and_the_seam_alike(name: str) -> None:
    rule = importlib.import_module(f"{seam.RULES_PACKAGE}.{seam.RULES[name]}")
    assert rule.IMPORT == name
    assert bool(getattr(rule, "OWN_LINES", False)) == (name in seam.OWN_LINES)


def test_a_launch_line_naming_mooncake_is_not_judged_twice(tmp_path: Path) -> None:
    """mooncake is judged in its own lines, never also as a one-line extension."""
    site = healthy_image(tmp_path / "site")
    r = run(site, "--", "--moe-a2a-backend", "mooncake", kb=small_kb(tmp_path))
    assert r.rc == 0, r.out
    assert not [line for line in r.lines if line.split(None, 1)[-1].startswith("mooncake:")]
