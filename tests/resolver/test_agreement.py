"""The KB query and the image check agree: the same facts, the same verdict.

For every ``explain`` scenario under ``cases/`` (and an ``explain`` of each candidate a
``which_*`` scenario weighs), the combination the query evaluated is written as a fake
worker image (:mod:`tests.lib.scenario_image`) and judged by ``python -m moonpin.preflight``
with the scenario's KB. compatible means the check exits 0 with no failing check among
module/build/names/backends/cuda; incompatible means the check fails, and the KB checks
that failed map onto exactly the image checks that failed. unknown, and facts an image
cannot carry, are skipped with the reason. Known disagreements are strict xfails.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path
from typing import Any

import pytest

from moonpin.kb import store
from moonpin.resolver import query
from moonpin.resolver.graph import CompatGraph
from tests.lib.checkrun import Run, run
from tests.lib.images import PG_NAMES, add_mooncake, add_sglang, add_torch
from tests.lib.scenario_image import Inexpressible, image_for
from tests.resolver.kbslice import build_kb

CASES = Path(__file__).with_name("cases")

#: KB check -> the image check that decides the same fact.
KB_TO_IMAGE = {"module present": "pg module", "build for torch": "build", "names": "names",
               "backends": "backends", "CUDA major": "cuda"}
IMAGE_DECIDING = frozenset(KB_TO_IMAGE.values())

#: Where the two paths disagree today, by scenario id; each is a strict xfail.
KNOWN: dict[str, str] = {}


def _explain_queries(case: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(suffix, explain args) for a scenario: itself, or each candidate a which_* weighs."""
    q = case["query"]
    args = dict(q.get("args", {}))
    if "raises" in case["expect"]:
        return []
    if q["op"] == "explain":
        return [("", args)]
    kb = case["kb"]
    common = {k: args[k] for k in ("python", "arch") if k in args}
    if q["op"] == "which_mooncake":
        return [(f"[{m['dist']}=={m['version']}]",
                 {"sglang": args["sglang"], "mooncake": f"{m['dist']}=={m['version']}",
                  **({"torch": args["torch"]} if "torch" in args else {}), **common})
                for m in kb.get("mooncake", ())
                if "dist" not in args or m["dist"] == args["dist"]]
    if q["op"] == "which_sglang":
        return [(f"[sglang=={s['version']}]",
                 {"sglang": s["version"], "mooncake": args["mooncake"],
                  **({"torch": args["torch"]} if "torch" in args else {}), **common})
                for s in kb.get("sglang", ())]
    if q["op"] == "which_torch":
        return [(f"[torch=={t['version']}]", {**args, "torch": t["version"]})
                for t in kb.get("torch", ())]
    return []  # triples: every row is an explain of a which_* above


#: Extra slices the cases do not hold: the fixed-BACKENDS disagreement, a release that
#: publishes no wheel at all (explain raised AssertionError on it).
EXTRA = {
    "no_wheel_at_all": {
        "kb": {"sglang": [{"version": "0.5.18", "module": "mooncake.pg",
                           "names": ["MooncakeBackendOptions"], "backends": ["mooncake"],
                           "torch": ["torch==2.13.0"]}],
               "mooncake": [{"dist": "mooncake-transfer-engine-musa", "version": "0.0.0.1",
                             "wheels": []}],
               "torch": [{"version": "2.13.0", "cuda": {"x86_64": 13}}]},
        "query": {"op": "explain", "args": {"sglang": "0.5.18",
                                            "mooncake": "mooncake-transfer-engine-musa"
                                                        "==0.0.0.1"}},
        "expect": {},
    },
    "backends_from_release": {
        "kb": {"sglang": [{"version": "0.5.18", "module": "mooncake.pg",
                           "names": ["MooncakeBackendOptions"], "backends": ["mooncake"],
                           "torch": ["torch==2.13.0"]}],
               "mooncake": [{"dist": "mooncake-transfer-engine-cuda13", "version": "0.3.13",
                             "wheels": [{"python": "cp312", "arch": "x86_64",
                                         "loaders": {"mooncake.pg": ["mooncake.pg_{torch}"]},
                                         "builds": [{"module": "pg_2_13_0",
                                                     "names": ["MooncakeBackendOptions"],
                                                     "backends": ["mooncake"],
                                                     "cuda": 13}]}]}],
               "torch": [{"version": "2.13.0", "cuda": {"x86_64": 13}}]},
        "query": {"op": "explain", "args": {"sglang": "0.5.18",
                                            "mooncake": "mooncake-transfer-engine-cuda13"
                                                        "==0.3.13"}},
        "expect": {},
    },
}


def _params() -> list[Any]:
    out = []
    cases = {p.stem: json.loads(p.read_text()) for p in sorted(CASES.glob("*.json"))}
    cases.update(EXTRA)
    for stem, case in cases.items():
        for suffix, args in _explain_queries(case):
            marks = ([pytest.mark.xfail(strict=True, reason=KNOWN[stem])]
                     if stem in KNOWN and not suffix else [])
            out.append(pytest.param(case["kb"], args, marks=marks, id=stem + suffix))
    return out


def _failing(lines: list[str]) -> set[str]:
    out = set()
    for line in lines:
        status, _, rest = line.partition(" ")
        name = rest.strip().partition(":")[0]
        if status == "fail" and name in IMAGE_DECIDING:
            out.add(name)
    return out


@pytest.mark.parametrize(("kb_slice", "args"), _params())
def test_query_and_check_agree(kb_slice: dict[str, Any], args: dict[str, Any],
                               tmp_path: Path) -> None:
    kb = build_kb(kb_slice)
    res = query.explain(CompatGraph(kb), **args).to_json()
    if res["verdict"] == "unknown":
        pytest.skip(f"the KB cannot decide ({res['reasons'][0]}); an image decides it")
    kb_failed = [c["name"] for c in res["checks"] if c["ok"] is False]
    unmapped = [n for n in kb_failed if n not in KB_TO_IMAGE]
    if unmapped:
        pytest.skip(f"the KB fails {', '.join(unmapped)}, a fact no installed image has")
    try:
        img = image_for(kb, res, tmp_path)
    except Inexpressible as e:
        pytest.skip(str(e))
    _agree(res, run(img.site, kb=img.kb))


def _agree(res: dict[str, Any], r: Run) -> None:
    """The query's answer ``res`` and the check's run ``r`` say the same."""
    image_failed = _failing(r.lines)
    if res["verdict"] == "compatible":
        assert r.rc == 0 and not image_failed, (res["checks"], r.out)
    else:
        kb_failed = {KB_TO_IMAGE[c["name"]] for c in res["checks"] if c["ok"] is False}
        assert r.rc == 1, (res["reasons"], r.lines)
        assert image_failed == kb_failed, (res["reasons"], r.out)


# ------------------------------------------------------------ the check's images, via a KB

#: test_check.py's kinds of image that a KB can describe (its .py stand-in builds carry
#: no CUDA runtime, which a KB build always names or leaves unknown: not here).
IMAGE_KINDS: dict[str, dict[str, Any]] = {
    "healthy": {},
    "cuda_suffix_of_torch_is_dropped": {"torch": "2.13.0+cu130"},
    "wrong_half_pg_engine_ep_only": {"mooncake": {"loaders": ("ep",)}},
    "wrong_half_ep_engine_pg_only": {"module": "ep", "mooncake": {"loaders": ("pg",)}},
    "no_build_for_this_torch": {"mooncake": {"torch_builds": ("2.12.0",)}},
    "required_name_missing": {"mooncake": {"names": PG_NAMES[:-1]}},
    "partial_backend_registration": {"mooncake": {"backends": ("mooncake",)}},
    "cuda_major_mismatch": {"mooncake": {"cuda": 12}},
    "cpu_torch": {"torch": "2.13.0+cpu", "cuda": None},
}


def _describe(kind: dict[str, Any]) -> dict[str, Any]:
    """The compact KB slice (:mod:`tests.resolver.kbslice`) of an image as
    :func:`tests.lib.images.add_mooncake` and friends write it."""
    m = {"loaders": ("pg", "ep"), "torch_builds": ("2.12.0", "2.13.0"), "names": PG_NAMES,
         "backends": ("mooncake", "mooncake-cpu"), "cuda": 13, **kind.get("mooncake", {})}
    arch = platform.machine()
    builds = [{"module": f"{ld}_{t.replace('.', '_')}", "names": list(m["names"]),
               "backends": list(m["backends"]), "cuda": m["cuda"]}
              for ld in m["loaders"] for t in m["torch_builds"]]
    return {
        "sglang": [{"version": "0.5.23", "module": f"mooncake.{kind.get('module', 'pg')}",
                    "names": list(PG_NAMES), "backends": ["mooncake", "mooncake-cpu"]}],
        "mooncake": [{"dist": "mooncake-transfer-engine-cuda13", "version": "0.3.13.post1",
                      "wheels": [{"python": f"cp{sys.version_info[0]}{sys.version_info[1]}",
                                  "arch": arch, "builds": builds,
                                  "loaders": {f"mooncake.{ld}": [f"mooncake.{ld}_{{torch}}"]
                                              for ld in m["loaders"]}}]}],
        "torch": [{"version": "2.13.0", "cuda": {arch: kind.get("cuda", 13)}}],
    }


@pytest.mark.parametrize("name", sorted(IMAGE_KINDS))
def test_check_images_through_the_kb(name: str, tmp_path: Path) -> None:
    """test_check.py's builders make the image; the KB describing it must agree."""
    kind = IMAGE_KINDS[name]
    site = tmp_path / "site"
    site.mkdir()
    torch = kind.get("torch", "2.13.0")
    add_torch(site, torch, kind.get("cuda", 13))
    add_sglang(site, "0.5.23", kind.get("module", "pg"))
    add_mooncake(site, **kind.get("mooncake", {}))
    kb = build_kb(_describe(kind))
    kb_path = tmp_path / "kb.json"
    store.save(kb, kb_path)
    res = query.explain(CompatGraph(kb), "0.5.23",
                        "mooncake-transfer-engine-cuda13==0.3.13.post1", torch=torch,
                        python=f"{sys.version_info[0]}.{sys.version_info[1]}",
                        arch=platform.machine()).to_json()
    fits = name in ("healthy", "cuda_suffix_of_torch_is_dropped")
    assert res["verdict"] == ("compatible" if fits else "incompatible"), res["reasons"]
    _agree(res, run(site, kb=kb_path))


@pytest.mark.parametrize("args", [{}, {"python": "3.12"}, {"arch": "aarch64", "torch": "2.13.0"}])
def test_a_release_without_wheels_is_answered(args: dict[str, str]) -> None:
    g = CompatGraph(build_kb(EXTRA["no_wheel_at_all"]["kb"]))  # type: ignore[arg-type]
    res = query.explain(g, "0.5.18", "mooncake-transfer-engine-musa==0.0.0.1", **args).to_json()
    assert res["verdict"] == "incompatible"
    assert [c["name"] for c in res["checks"] if c["ok"] is False] == [
        "wheel for python/platform"]
    python = "cp312" if "python" in args else "any python"
    arch = args.get("arch", "any platform")
    assert res["reasons"] == [f"wheel for python/platform: mooncake-transfer-engine-musa "
                              f"0.0.0.1 has no wheel for {python} on {arch}"]
    assert res["evaluated"]["wheel"] is None


def test_every_explain_case_is_judged() -> None:
    """The harness sees every explain scenario (a new one cannot slip past it)."""
    ids = {p.id for p in _params()}
    for path in CASES.glob("*.json"):
        if json.loads(path.read_text())["query"]["op"] == "explain":
            assert path.stem in ids
    assert len(ids) >= 30
