"""One module finder (issue 37): the import chain a build's load walks
(moonpin/preflight/pyimport/pyrun.Chain) finds every module with the importer model it is
handed, the check's one (Context.importer, with the target's extension suffixes), instead of a
FileFinder of its own and an Importer made per lookup with this interpreter's suffixes."""

from __future__ import annotations

from pathlib import Path

import pytest

from moonpin.kb.cache import facts_memo
from moonpin.preflight.env import target as tg
from moonpin.preflight.env.context import Context
from moonpin.preflight.loader.loadchain import native_load
from moonpin.preflight.pyimport import metapath
from tests.lib.images import healthy_image


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """The extension suffixes of every importer model made from now on."""
    got: list[tuple[str, ...]] = []
    real = metapath.Importer.__init__

    def init(self: metapath.Importer, *args: object, **kwargs: object) -> None:
        real(self, *args, **kwargs)  # type: ignore[arg-type]
        got.append(tuple(self.ext))

    monkeypatch.setattr(metapath.Importer, "__init__", init)
    memo = facts_memo()
    monkeypatch.setattr(memo, "enabled", False)  # walked, not remembered
    return got


def _load(site: Path, ctx: Context, handed: bool) -> object:
    build = next((site / "mooncake").glob("pg_2_13_0*"))
    return native_load([str(build)], ctx.paths, "mooncake.pg", python=None,
                       suffixes=ctx.ext_suffixes, sites=ctx.sites, version=ctx.version,
                       first=("torch",), complete=ctx.complete,
                       importer=ctx.importer if handed else None)


def test_the_chain_finds_with_the_checks_one_model(tmp_path: Path,
                                                   made: list[tuple[str, ...]]) -> None:
    site = healthy_image(tmp_path / "site")
    ctx = Context.of(tg.from_site_packages([str(site)]))
    made.clear()
    res = _load(site, ctx, handed=True)
    assert made == []  # no model of its own, none per lookup
    assert res.chain_error is None and res.loads, res.dump()  # type: ignore[attr-defined]
    alone = _load(site, ctx, handed=False)  # none handed: one model, the target's suffixes
    assert made == [ctx.ext_suffixes]
    assert alone.dump() == res.dump()  # type: ignore[attr-defined]
