"""The native-extension scrape against a loopback index serving wheels built here: a nixl
backend with one build per torch minor, a meta release whose backends the index lacks,
an sgl_kernel with its sm<NN> search and an exact torch pin, and hostile members."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from moonpin.kb.models import KnowledgeBase
from moonpin.scrapers.fetch import Fetcher
from moonpin.scrapers.projects import recipes
from moonpin.scrapers.refresh import scrape
from tests.lib.elfbuild import build_so
from tests.lib.server import FakeIndex
from tests.lib.wheels import build_wheel
from tests.readers.test_native import NIXL_BACKEND, NIXL_META, SGL_LOADER

TAG = "cp312-cp312-manylinux_2_28_x86_64"


def _empty(idx: FakeIndex, names: list[str]) -> None:
    for d in names:
        idx.add_json(f"/pypi/{d}/json", {"info": {"name": d}, "releases": {}})


@pytest.fixture
def index() -> Iterator[FakeIndex]:
    with FakeIndex() as idx:
        so13 = build_so(needed=["libtorch.so", "libcudart.so.13"], strings=["x"])
        idx.add_project("nixl-cu13", {"1.5.1": dict([build_wheel("nixl-cu13", "1.5.1", {
            "nixl_ep_cu13/__init__.py": NIXL_BACKEND,
            "nixl_ep_cu13/nixl_ep_cpp_torch213.cpython-312-x86_64-linux-gnu.so": so13,
            "nixl_ep_cu13/nixl_ep_cpp_torch214.cpython-312-x86_64-linux-gnu.so": so13 + b"\0",
        }, tag=TAG, requires_dist=["torch", "numpy"])])})
        idx.add_project("nixl", {
            "1.5.1": dict([build_wheel("nixl", "1.5.1", {"nixl_ep/__init__.py": NIXL_META},
                                       requires_dist=["nixl-cu13==1.5.1"])]),
            "1.5.2": dict([build_wheel("nixl", "1.5.2", {"nixl_ep/__init__.py": NIXL_META},
                                       requires_dist=["nixl-cu13==1.5.2",
                                                      'nixl-cu13==1.5.2; extra == "cu13"'])]),
        })
        so_sgl = build_so(needed=["libtorch.so", "libcudart.so.12"], strings=["x"])
        idx.add_project("sglang-kernel", {"0.4.10": dict([build_wheel(
            "sglang-kernel", "0.4.10", {
                "sgl_kernel/__init__.py": "from sgl_kernel.load_utils import x\n",
                "sgl_kernel/load_utils.py": SGL_LOADER,
                "sgl_kernel/sm90/common_ops.abi3.so": so_sgl,
                "sgl_kernel/sm100/common_ops.abi3.so": b"not an ELF object",  # hostile
            }, tag="cp310-abi3-manylinux2014_x86_64", requires_dist=["torch==2.14.1"])])})
        idx.add_project("sgl-deep-ep", {"0.1.2": dict([build_wheel(
            "sgl-deep-ep", "0.1.2", {"deep_ep/__init__.py": "def (:\n",  # unparsable
                                     "deep_ep/_C.cpython-312-x86_64-linux-gnu.so": so13},
            tag=TAG, requires_dist=["torch==2.14.1"])])})
        no_meta = build_wheel("flashinfer-python", "0.7.2", {"flashinfer/__init__.py": ""},
                              metadata_extra=())
        idx.add_project("flashinfer-python", {"0.7.2": {no_meta[0]: _drop_metadata(no_meta[1])}})
        # flashinfer-cubin and flashinfer-jit-cache: absent (404); the rest listed empty
        _empty(idx, ["nixl-cu12", "sgl-kernel"])
        idx.add_json("/pypi/torch/json", {"info": {"name": "torch"}, "releases": {}})
        yield idx


def _drop_metadata(data: bytes) -> bytes:
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            if not info.filename.endswith("/METADATA"):
                zout.writestr(info, zin.read(info))
    return out.getvalue()


def _old() -> KnowledgeBase:
    from datetime import datetime, timezone

    from moonpin.kb.models import ScrapeInfo

    return KnowledgeBase(scrape=ScrapeInfo(scraped_at=datetime.now(timezone.utc),
                                           moonpin_version="t"),
                         torch_versions=("2.13.0", "2.13.1", "2.14.0", "2.14.1", "2.15.0"))


def run(index: FakeIndex, old: KnowledgeBase) -> tuple[KnowledgeBase, object]:
    f = Fetcher(retries=1, backoff=0.01, sleep=lambda s: None)
    return scrape(old, f, index.url + "/", only=("native",), workers=2)


def test_native_scrape_records_rules_builds_and_unmet_requirements(index: FakeIndex) -> None:
    kb, summary = run(index, _old())
    rel = {(r.dist, r.version): r for r in kb.native}
    (w,) = rel[("nixl-cu13", "1.5.1")].wheels
    assert w.torch_requirements == ("torch",)
    (rule,) = w.rules
    assert [s.kind for s in rule.steps] == ["env", "dispatch"]
    b213, b214 = w.builds
    assert (b213.torch, b213.torch_from, b213.torch_key) == ("==2.13.*", "filename", "213")
    assert (b214.torch, b214.cuda_major, b214.abi) == ("==2.14.*", 13,
                                                        "cpython-312-x86_64-linux-gnu")
    assert w.artifact.sha256 and w.artifact.path.endswith(w.artifact.filename)
    assert "://" not in w.artifact.path and w.artifact.url is None

    assert rel[("nixl", "1.5.1")].uninstallable == ()
    (unmet,) = rel[("nixl", "1.5.2")].uninstallable  # the extra line is not counted
    assert unmet.requirement == "nixl-cu13==1.5.2" and "newest: 1.5.1" in unmet.reason

    (sk,) = rel[("sglang-kernel", "0.4.10")].wheels
    by = {b.member: b for b in sk.builds}
    good = by["sgl_kernel/sm90/common_ops.abi3.so"]
    assert (good.torch, good.torch_from, good.cuda_major) == ("==2.14.1", "requires-dist", 12)
    bad = by["sgl_kernel/sm100/common_ops.abi3.so"]
    assert bad.read_error and "ELF" in bad.read_error and bad.cuda_major is None
    assert next(s.target for s in sk.rules[0].steps if s.kind == "glob") == \
        "sgl_kernel/sm90/common_ops.*"

    (de,) = rel[("sgl-deep-ep", "0.1.2")].wheels
    assert de.rules[0].errors and "does not parse" in de.rules[0].errors[0]
    assert de.builds[0].torch == "==2.14.1"

    unread = {u.name: u.reason for u in kb.unread}
    assert "no flashinfer_python-0.7.2.dist-info/METADATA" in unread["flashinfer-python"]
    assert "flashinfer-cubin" not in unread  # not on the index: nothing to read
    assert all("127.0.0.1" not in u.reason for u in kb.unread)
    assert summary.read["native"] == 5  # type: ignore[attr-defined]


def test_unchanged_releases_cost_no_artifact_bytes(index: FakeIndex) -> None:
    kb, _ = run(index, _old())
    index.clear_requests()
    kb2, summary = run(index, kb)
    assert [r.path for r in index.requests if r.path.startswith("/packages/")] == [
        r.path for r in index.requests if r.path.startswith("/packages/")
        and "flashinfer" in r.path]  # the unread release is asked again, nothing else
    assert summary.kept["native"] == 5  # type: ignore[attr-defined]
    assert kb2.native == kb.native


def test_every_recipe_names_its_distributions_once() -> None:
    dists = [d for r in recipes() for d in r.dists]
    assert len(dists) == len(set(dists))
    assert {r.project for r in recipes()} == {"nixl", "sglang-kernel", "deep-ep", "flashinfer"}


def _in_order(monkeypatch: pytest.MonkeyPatch, reverse: bool) -> None:
    """The scrape's thread pool replaced by one that reads its jobs one by one, in the
    order given or reversed (results kept in job order, as ``ex.map`` returns them)."""
    from moonpin.scrapers import refresh

    def pool(fn, items, workers):  # type: ignore[no-untyped-def]
        items = list(items)
        got = {i: fn(items[i]) for i in (reversed(range(len(items))) if reverse
                                         else range(len(items)))}
        return [got[i] for i in range(len(items))]

    monkeypatch.setattr(refresh, "_pool", pool)


def _shared_index(idx: FakeIndex, releases: tuple[str, ...]) -> None:
    """nixl-cu13 releases re-shipping the same build bytes (as a ``.post`` does), two
    Python ABIs each; deep-ep holding the same bytes under another module name."""
    so = build_so(needed=["libtorch.so", "libcudart.so.13"], strings=["x"])
    idx.add_project("nixl-cu13", {v: dict(
        build_wheel("nixl-cu13", v, {
            "nixl_ep_cu13/__init__.py": NIXL_BACKEND,
            f"nixl_ep_cu13/nixl_ep_cpp_torch214.cpython-{py}-x86_64-linux-gnu.so": so},
            tag=f"cp{py}-cp{py}-manylinux_2_28_x86_64", requires_dist=["torch"])
        for py in ("311", "312")) for v in releases})
    idx.add_project("sgl-deep-ep", {"0.1.2": dict([build_wheel(
        "sgl-deep-ep", "0.1.2", {"deep_ep/__init__.py": "",
                                 "deep_ep/_C.cpython-312-x86_64-linux-gnu.so": so},
        tag=TAG, requires_dist=["torch==2.14.1"])])})
    _empty(idx, ["nixl", "nixl-cu12", "sgl-kernel", "sglang-kernel", "flashinfer-python"])
    idx.add_json("/pypi/torch/json", {"info": {"name": "torch"}, "releases": {}})


@pytest.mark.parametrize("reverse", [False, True])
def test_bytes_from_does_not_depend_on_the_read_order(monkeypatch: pytest.MonkeyPatch,
                                                      reverse: bool) -> None:
    """Which build names the reading it shares does not depend on the order the releases
    are read in (issue 39's leftover: a ``.post`` re-shipping its predecessor's bytes
    pointed at whichever release a thread read first), nor on a refresh having kept the
    release that read the bytes: a reading is shared within its release only, whose wheels
    are read in a fixed order."""
    both = ("1.5.1", "1.5.1.post1")
    with FakeIndex() as idx:
        _shared_index(idx, both)
        _in_order(monkeypatch, reverse=False)
        forward, _ = run(idx, _old())
        _in_order(monkeypatch, reverse=reverse)
        other, _ = run(idx, _old())
    with FakeIndex() as idx:  # a refresh: 1.5.1 kept from the last KB, the .post read anew
        _shared_index(idx, both[:1])
        first, _ = run(idx, _old())
    with FakeIndex() as idx:
        _shared_index(idx, both)
        refreshed, summary = run(idx, first)
    assert summary.kept["native"] == 2  # type: ignore[attr-defined]
    assert other.native == forward.native == refreshed.native
    ptr = {f"{b.member} in {w.artifact.filename}": b.bytes_from
           for r in forward.native for w in r.wheels for b in w.builds}
    base = ("nixl_ep_cu13/nixl_ep_cpp_torch214.cpython-312-x86_64-linux-gnu.so in "
            "nixl_cu13-1.5.1-cp312-cp312-manylinux_2_28_x86_64.whl")
    post = base.replace("1.5.1-", "1.5.1.post1-")
    assert ptr[base] is None and ptr[post] is None  # each release reads its own
    assert [k for k, v in ptr.items() if v == base] == [base.replace("312", "311")]
    assert [k for k, v in ptr.items() if v == post] == [post.replace("312", "311")]
    # the same bytes as deep-ep's own module are read for it: its PyInit_ is another name
    (de,) = (b for r in forward.native if r.dist == "sgl-deep-ep" for w in r.wheels
             for b in w.builds)
    assert de.bytes_from is None
