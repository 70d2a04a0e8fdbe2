"""The warm start's stamps file (:mod:`moonpin.preflight.installed.stamps`): the SGLang source set
the importer walk found is trusted while nothing it was made from changed, and every change
of the classes the walk depends on is seen on the next start, as a start without the cache
(``--no-cache``) sees it: a source or folder added or removed, a ``.pth`` or editable
finder added, removed or rewritten (its ``MAPPING``), an ``__init__.py`` that starts to
``extend_path``, a ``sys.path`` folder that appears, and a change made in a folder in the
same timestamp tick as the walk listed it (a racy folder)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from moonpin.kb import cache as kb_cache
from moonpin.preflight.env.context import Context
from moonpin.preflight.installed import image_facts, stamps
from moonpin.preflight.pyimport.importer import Sources
from tests.lib.checkrun import run, small_kb
from tests.lib.editable_templates import SETUPTOOLS_FINDER
from tests.lib.images import add_mooncake, add_torch
from tests.preflight.test_importer import editable_dist, skbc_editable, write_sglang_sources

_OLD_NS = 1_600_000_000 * 10**9


def _settle(top: Path) -> None:
    """Date every folder and file under ``top`` back, each to its own old time (an image
    built earlier)."""
    for i, (folder, _, files) in enumerate(os.walk(top)):
        for j, name in enumerate(files):
            t = _OLD_NS + i * 10**9 + j * 1000
            os.utime(os.path.join(folder, name), ns=(t, t))
        t = _OLD_NS + i * 10**9 + 999_000
        os.utime(folder, ns=(t, t))


@contextlib.contextmanager
def _keep_stamp(path: Path) -> Iterator[None]:
    """Put ``path``'s mtime back after a change: what a change within the same timestamp
    tick leaves."""
    st = path.stat()
    yield
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _setuptools(site: Path, checkout: Path, namespaces: dict[str, list[str]] | None = None
                ) -> Path:
    """``pip install -e`` of SGLang with setuptools' finder; its file."""
    mod = "__editable___sglang_0_5_23_finder"
    finder = site / f"{mod}.py"
    finder.write_text(SETUPTOOLS_FINDER.format(mapping={"sglang": str(checkout)},
                                               namespaces=namespaces or {},
                                               name="__editable__.sglang-0.5.23.finder"))
    (site / "__editable__.sglang-0.5.23.pth").write_text(f"import {mod}; {mod}.install()")
    editable_dist(site, "0.5.23", str(checkout.parent))
    return finder


class Image:
    """A site folder with an editable SGLang (checkout ``co1``, a second one ``co2``), a
    working folder first on ``sys.path`` holding a checkout's root (SGLang's Docker image:
    ``sglang`` is then that namespace portion, its modules from the finder's ``MAPPING``;
    ``workdir=False``: none, ``sglang`` is the mapped package), a missing ``sys.path``
    folder, and ``sglang.pkg`` in the site folder naming a folder of more modules (what
    ``extend_path`` would add)."""

    def __init__(self, tmp_path: Path, workdir: bool = True) -> None:
        self.top = tmp_path
        self.site = tmp_path / "site-packages"
        self.site.mkdir(parents=True)
        add_torch(self.site)
        add_mooncake(self.site)
        self.work = tmp_path / "work"
        self.work.mkdir()
        if workdir:
            (self.work / "sglang" / "test").mkdir(parents=True)
            (self.work / "sglang" / "test" / "junk.py").write_text("")
        (tmp_path / "extra").mkdir()
        (tmp_path / "extra" / "extra_mod.py").write_text("")
        (self.site / "sglang.pkg").write_text(f"{tmp_path / 'extra'}\n")
        self.pkg = tmp_path / "co1" / "sglang"
        write_sglang_sources(self.pkg, "0.5.23")
        write_sglang_sources(tmp_path / "co2" / "sglang", "0.5.23", extra_name="Other")
        self.finder = _setuptools(self.site, self.pkg)
        self.missing = tmp_path / "later"
        self.paths = [str(self.work), str(self.missing), str(self.site)]
        _settle(tmp_path)


@pytest.fixture(params=[True, False], ids=["workdir", "mapped"])
def img(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
        ) -> Image:
    monkeypatch.setenv("MOONPIN_CACHE_DIR", str(tmp_path / "cache"))
    image = Image(tmp_path / "img", request.param)
    return image


def _view(src: Sources | None) -> Any:
    if src is None:
        return None
    f = src.found
    return (f.folder, f.how, f.portions, f.search, f.module, src.files, src.roots, src.via,
            src.broken, src.key)


class Looks:
    """Counts the walks of the importer model."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.walks = 0
        real = image_facts.package_sources

        def counted(*a: Any) -> Sources | None:
            self.walks += 1
            return real(*a)

        monkeypatch.setattr(image_facts, "package_sources", counted)

    def look(self, img: Image, cache: bool = True, root: str | None = None) -> Sources | None:
        # a new start: nothing of the last one's model
        return image_facts.sglang_sources(Context(img.paths, sites=(str(img.site),), root=root),
                                          cache)

    def warm_agrees(self, img: Image) -> bool:
        """Whether the next start with the cache finds what a start without finds; and
        whether it walked to do so."""
        before = self.walks
        got = _view(self.look(img))
        walked = self.walks > before
        assert got == _view(self.look(img, cache=False))
        return walked


@pytest.fixture
def looks(monkeypatch: pytest.MonkeyPatch) -> Looks:
    return Looks(monkeypatch)


def test_an_unchanged_image_is_not_walked(img: Image, looks: Looks) -> None:
    cold = looks.look(img)
    assert cold is not None and looks.walks == 1
    assert list(cold.via) == [f"editable setuptools finder {img.finder}"]
    assert set(cold.files.values()) >= {str(img.pkg / "srt" / "server_args.py")}
    assert not looks.warm_agrees(img)  # trusted by its stamps
    assert not looks.warm_agrees(img)


def _add_source(img: Image) -> None:
    (img.pkg / "srt" / "brand_new.py").write_text("")


def _add_package(img: Image) -> None:
    (img.pkg / "srt" / "new_pkg" / "deeper").mkdir(parents=True)
    (img.pkg / "srt" / "new_pkg" / "deeper" / "mod.py").write_text("")


def _remove_source(img: Image) -> None:
    (img.pkg / "srt" / "server_args.py").unlink()


def _add_redirect(img: Image) -> None:
    """A scikit-build-core finder (asked before PathFinder) for another checkout."""
    skbc_editable(img.site, img.top / "proj")
    write_sglang_sources(img.top / "proj" / "src" / "sglang", "0.5.23")


def _remove_pth(img: Image) -> None:
    (img.site / "__editable__.sglang-0.5.23.pth").unlink()  # the working folder's portion


def _remove_finder(img: Image) -> None:
    img.finder.unlink()  # the .pth line's import fails: no finder


def _change_mapping(img: Image) -> None:
    with _keep_stamp(img.site):  # rewritten in place: the folder need not change
        img.finder.write_text(img.finder.read_text().replace("/co1/", "/co2/"))


def _extend_path(img: Image) -> None:
    """The mapped ``__init__.py`` starts to ``extend_path``: the folder ``sglang.pkg``
    names joins its ``__path__`` (when it is the package ``import sglang`` runs)."""
    init = img.pkg / "__init__.py"
    with _keep_stamp(img.pkg):
        init.write_text("from pkgutil import extend_path\n"
                        "__path__ = extend_path(__path__, __name__)\n")


def _path_folder_appears(img: Image) -> None:
    write_sglang_sources(img.missing / "sglang", "0.5.23")  # ahead of the finder


def _change_pkg_file(img: Image) -> None:
    (img.top / "more").mkdir()
    (img.top / "more" / "more_mod.py").write_text("")
    with _keep_stamp(img.site):
        (img.site / "sglang.pkg").write_text(f"{img.top / 'more'}\n")


@pytest.mark.parametrize("change", [
    _add_source, _add_package, _remove_source, _add_redirect, _remove_pth, _remove_finder,
    _change_mapping, _extend_path, _change_pkg_file, _path_folder_appears])
def test_each_change_is_seen_on_the_next_start(img: Image, looks: Looks, change: Any) -> None:
    if change is _change_pkg_file:
        _extend_path(img)
        _settle(img.top)
    before = _view(looks.look(img))
    assert not looks.warm_agrees(img)
    change(img)
    walked = looks.warm_agrees(img)  # as a start without the cache finds it
    after = looks.look(img, cache=False)
    # extend_path and .pkg files change nothing where sglang is the working folder's portion
    # (its __init__.py never runs): the stamps of what the walk did not read stay trusted
    inert = img.work.joinpath("sglang").exists() and change in (_extend_path,
                                                                _change_pkg_file)
    assert (_view(after) == before) == inert and walked != inert
    if after is not None:  # no SGLang to find: nothing kept
        assert not looks.warm_agrees(img)  # the new stamps are trusted


def test_a_racy_folder_is_listed_again(img: Image, looks: Looks) -> None:
    """The site folder changed as the walk listed it: a ``.pth`` file added later in the
    same tick keeps its stamp; the listing kept beside it tells."""
    now = time.time_ns() + 30 * 10**9  # "just now" for the length of the test
    os.utime(img.site, ns=(now, now))
    looks.look(img)
    assert not looks.warm_agrees(img)  # listed, not walked
    with _keep_stamp(img.site):
        _remove_pth(img)
    assert looks.warm_agrees(img)


def test_a_change_of_the_model_walks_again(img: Image, looks: Looks,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    looks.look(img)
    monkeypatch.setattr(stamps, "_model", lambda: [1, 2])
    assert looks.warm_agrees(img)
    assert not looks.warm_agrees(img)


@pytest.mark.parametrize("damage", ["garbage", "found", "groups", "read", "relist"])
def test_a_damaged_stamps_file_is_a_change(img: Image, looks: Looks, damage: str) -> None:
    looks.look(img)
    (sfile,) = Path(os.environ["MOONPIN_CACHE_DIR"]).glob("check-stamps-*.marshal")
    doc = kb_cache.load(sfile)
    assert isinstance(doc, dict)
    if damage == "garbage":
        sfile.write_bytes(b"\0" * 40)
    else:
        doc[damage] = [[None, 3]] if damage != "found" else ["x"]
        assert kb_cache.store(sfile, doc) is None
    assert looks.warm_agrees(img)
    assert not looks.warm_agrees(img)  # rewritten


def test_nothing_kept_under_an_image_root_or_without_the_cache(img: Image, looks: Looks
                                                               ) -> None:
    looks.look(img, cache=False)
    # the paths resolved under an image's root
    assert looks.look(img, root="/") is not None and looks.walks == 2
    assert not list(Path(os.environ["MOONPIN_CACHE_DIR"]).glob("check-stamps-*"))


@pytest.mark.parametrize("change", ["mapping", "source edited in place"])
def test_the_check_sees_a_change_on_its_next_start(tmp_path: Path, change: str) -> None:
    """End to end: a worker's start after the editable install is pointed at another
    checkout, or after a source is edited in place (its folder's stamp unchanged), to import
    a name no mooncake has, fails as ``--no-cache`` does."""
    img = Image(tmp_path / "img", workdir=False)
    kb = small_kb(tmp_path)
    env = {"MOONPIN_CACHE_DIR": str(tmp_path / "cache")}
    first = run(img.site, kb=kb, env=env)
    assert first.rc == 0 and first.status("sglang") == "pass", first.out
    assert run(img.site, kb=kb, env=env).out == first.out  # warm
    if change == "mapping":
        _change_mapping(img)
    else:
        source = img.pkg / "srt" / "distributed" / "parallel_state.py"
        with _keep_stamp(source.parent), open(source, "a") as f:
            f.write("\nfrom mooncake.pg import Other\n")
    warm = run(img.site, kb=kb, env=env)
    fresh = run(img.site, "--no-cache", kb=kb, env=env)
    assert warm.rc == fresh.rc == 1 and warm.status("names") == "fail", warm.out
    assert warm.out == fresh.out
