"""``moonpin scrape``, ``kb info``, ``kb resolve`` and ``show``: the commands about the
knowledge base itself."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse
    from pathlib import Path


from moonpin.cli.common import Busy, count, emit_json, fatal, load, mb
from moonpin.cli.common import kb_path as _kb_path
from moonpin.cli.common import summary as _summary

__all__ = ["cmd_kb_info", "cmd_kb_resolve", "cmd_scrape", "cmd_show"]


# ---------------------------------------------------------------------- scrape


def cmd_scrape(args: argparse.Namespace) -> int:
    from moonpin.kb import store
    from moonpin.kb.errors import KBError
    from moonpin.scrapers.fetch import Fetcher
    from moonpin.scrapers.pypi import index_url_from_env, named_index_url, public_url
    from moonpin.scrapers.refresh import KINDS, changes, scrape
    from moonpin.scrapers.report import StderrReporter

    kb_path, seed = _scrape_target(args)
    only = [args.only] if args.only else list(KINDS)
    reporter = StderrReporter()
    named = index_url = None
    if not (args.from_path or args.from_url):
        named = named_index_url(args.index_url)
        index_url = index_url_from_env(args.index_url)  # the default: pip's, asked now
    fetcher = Fetcher(warn=reporter.warn)
    if index_url is None:
        try:
            return _scrape_path(fetcher, kb_path, seed, args)
        finally:
            fetcher.close()
    with store.kb_lock(kb_path):
        old = None
        if seed.exists():
            try:
                old = store.load(seed)
            except KBError as e:
                if not args.full:
                    raise
                reporter.warn(f"ignoring the old KB ({e}); rebuilding")
        try:
            kb, summary = scrape(old, fetcher, index_url, only=only, full=args.full,
                                 reporter=reporter, workers=args.jobs,
                                 index_named=named is not None)
        finally:
            fetcher.close()
        unchanged = old is not None and all(
            getattr(kb, f) == getattr(old, f)
            for f in ("sglang", "mooncake", "torch", "torch_versions", "unread", "native")
        ) and kb.scrape.extractors == old.scrape.extractors \
            and seed.read_bytes() == store.dumps(old)
        # (extractors: else the next refresh re-reads; the bytes: an older schema or
        # layout is rewritten as this moonpin writes it even when no fact changed)
        if not unchanged:
            store.save(kb, kb_path)
            _write_resolved(kb_path)
    if unchanged:
        kb_path = seed  # nothing written: the KB read is current
    diff = changes(old, kb)
    report = {
        "kb": str(kb_path),
        "changed": not unchanged,
        "index_url": public_url(index_url) if named else None,  # None: the package index
        "read": summary.read,
        "kept_unchanged": summary.kept,
        "releases": {k: {"new": d["new"], "changed": d["changed"], "gone": d["gone"],
                         "unchanged": len(d["unchanged"])} for k, d in diff.items()},
        "unread": [u.model_dump() for u in summary.unread],
        "bytes_fetched": summary.bytes_fetched,
        "lower_bound_bytes": summary.lower_bound,
        "artifact_bytes_whole": summary.artifact_bytes,
        "seconds": round(summary.seconds, 2),
        "requests": fetcher.stats.requests,
        "retries": fetcher.stats.retries,
    }
    if args.json:
        emit_json(report)
    else:
        _print_scrape(kb_path, unchanged, summary, fetcher.stats.requests, diff)
    return 1 if summary.unread else 0


def _listed(names: list[str], keep: int = 4) -> str:
    return ", ".join(names[:keep]) + (f" (+{len(names) - keep})" if len(names) > keep else "")


def _print_scrape(kb_path: Path, unchanged: bool, summary: Any, requests: int,
                  diff: dict[str, dict[str, list[str]]] | None = None) -> None:
    from moonpin.scrapers.refresh import KINDS

    ratio = (f" ({100 * summary.bytes_fetched / summary.artifact_bytes:.2f}% of the "
             f"{mb(summary.artifact_bytes)} those artifacts weigh whole)"
             if summary.artifact_bytes else "")
    print(f"{'KB unchanged (nothing new on the index): ' if unchanged else 'wrote '}"
          f"{kb_path}")
    for k in KINDS:
        if diff is None:
            print(f"  {k:9} {summary.read[k]:4} read, {summary.kept[k]:4} unchanged")
            continue
        d = diff[k]
        said = [f"{len(d['new'])} new" + (f" ({_listed(d['new'])})" if d["new"] else ""),
                f"{len(d['changed'])} changed" + (f" ({_listed(d['changed'])})"
                                                 if d["changed"] else ""),
                f"{len(d['unchanged'])} unchanged"]
        if d["gone"]:
            said.append(f"{len(d['gone'])} gone ({_listed(d['gone'])})")
        again = summary.read[k] - len(d["new"]) - len(d["changed"])
        print(f"  {k:9} " + ", ".join(said) + (f"; {summary.read[k]} read" + (
            f", {again} of them again with the same facts" if again > 0 else "")
            if summary.read[k] else ""))
    print(f"  fetched {mb(summary.bytes_fetched)} in {requests} requests"
          f"{ratio}, {summary.seconds:.1f}s")
    if summary.lower_bound:
        print(f"  lower bound (directories + bytes the extractors consumed): "
              f"{mb(summary.lower_bound)}")
    for u in summary.unread:
        print(f"  unread: {u.kind} {u.name} {u.version}"
              f"{' ' + u.artifact if u.artifact else ''}: {u.reason}")


def _scrape_target(args: argparse.Namespace) -> tuple[Path, Path]:
    """(the KB a scrape writes, the KB it starts from). Without ``--kb``, on an installed
    moonpin the user KB is written, starting from whichever KB commands read now (the
    shipped one until the user KB is newer), so nothing lands in site-packages."""
    from pathlib import Path

    from moonpin.kb import paths, store

    if args.kb:
        return Path(args.kb), Path(args.kb)
    target = store.scrape_kb_path()
    if str(target) == paths.user_kb_file():
        return target, Path(paths.default_kb_file())
    return target, target


def _scrape_path(fetcher: Any, kb_path: Path, seed: Path, args: argparse.Namespace) -> int:
    from pathlib import Path

    from moonpin.kb import store
    from moonpin.scrapers.local import scrape_archive, scrape_path
    from moonpin.scrapers.report import StderrReporter

    progress = StderrReporter(summary=False)  # a line on a terminal, else nothing
    if args.from_url:
        rel = scrape_archive(fetcher, args.from_url, version=args.version, reporter=progress)
    else:
        rel = scrape_path(Path(args.from_path), version=args.version, reporter=progress)
    with store.kb_lock(kb_path):
        if not seed.exists():
            fatal(f"no knowledge base at {str(seed)!r} to add this release to",
                   "run `moonpin scrape` first, or pass --kb")
        old = store.load(seed)
        kept = tuple(r for r in old.sglang
                     if not (r.version == rel.version and r.source == rel.source))
        store.save(old.model_copy(update={"sglang": (*kept, rel)}), kb_path)
        _write_resolved(kb_path)
    if args.json:
        emit_json(rel.model_dump(mode="json"))
        return 0
    where = args.from_url or args.from_path
    print(f"recorded sglang {rel.version} from {where} ({rel.files_analyzed} files) in {kb_path}")
    pg = rel.pg
    print(f"  needs: {pg.module or 'no mooncake process-group module'}"
          + (f" with {', '.join(pg.names)}" if pg.names else "")
          + (f"; backends {', '.join(pg.backends)}" if pg.backends else ""))
    for pin in rel.mooncake_pins:
        print(f"  builds/tests with {pin.dist}{pin.spec} ({pin.member}:{pin.line})")
    for f in rel.parse_failures:
        print(f"  unparsed {f.member}: {f.error}")
    return 0


def _write_resolved(kb_path: Path) -> None:
    """Re-derive resolved.json from the KB just written (the fast query path)."""
    from moonpin.resolver.tables import writer

    with Busy(f"resolving the answers of {kb_path} into its resolved/ folder"):
        writer.write(kb_path)


def cmd_kb_resolve(args: argparse.Namespace) -> int:
    from pathlib import Path

    from moonpin.kb import store
    from moonpin.resolver.tables import writer

    kb_path = Path(args.kb) if args.kb else store.default_kb_path()
    with store.kb_lock(kb_path), Busy(f"resolving the answers of {kb_path}"):
        out = writer.write(kb_path)  # kb_lock refuses the KB inside an installed package
    if getattr(args, "json", False):
        emit_json({"kb": str(kb_path), "wrote": str(out)})
    else:
        print(f"wrote {out}")
    return 0


def cmd_kb_info(args: argparse.Namespace) -> int:
    from pathlib import Path

    from packaging.version import Version

    from moonpin.kb import paths

    kb = _summary(args)  # a few kilobytes: no pydantic, no facts
    choice = (paths.KBChoice(args.kb, "--kb") if args.kb else paths.kb_choice())
    path = Path(choice.path)
    # One release per version: a local record (`scrape --from-path`) of a version the
    # index also has is the same release, and the index's record is the one queries use.
    by_version: dict[Any, Any] = {}
    for r in kb.sglang:
        v = Version(r.version)
        if v not in by_version or (r.source == "index" and by_version[v].source != "index"):
            by_version[v] = r
    sglang = [by_version[v] for v in sorted(by_version)]
    local = sorted({r.version for r in kb.sglang if r.source != "index"}, key=Version)
    wheels = sum(r.wheels for r in kb.mooncake)
    builds = sum(r.builds for r in kb.mooncake)
    dists = sorted({r.dist for r in kb.mooncake})
    info = {
        "kb": str(path),
        "kb_source": choice.source,
        "other_kb": ({"kb": choice.other, "scraped_at": paths.scraped_at(choice.other)}
                     if choice.other else None),
        "schema_version": kb.schema_version,
        "scraped_at": kb.scrape.scraped_at.isoformat(),
        "index_url": kb.scrape.index_url,
        "sglang_releases": len(sglang),
        "sglang_range": [sglang[0].version, sglang[-1].version] if sglang else [],
        "sglang_recorded_locally": local,
        "sglang_by_module": count(r.module or "none" for r in sglang),
        "mooncake_releases": len(kb.mooncake),
        "mooncake_distributions": {d: len([r for r in kb.mooncake if r.dist == d])
                                   for d in dists},
        "mooncake_wheels": wheels,
        "mooncake_builds": builds,
        "sglang_with_launch_rules": sum(1 for r in kb.sglang if r.launch_rules),
        "native_releases": len(kb.native),
        "native_distributions": {d: {"project": next(r.project for r in kb.native
                                                     if r.dist == d),
                                     "releases": sum(1 for r in kb.native if r.dist == d),
                                     "uninstallable": sum(1 for r in kb.native
                                                          if r.dist == d and r.uninstallable)}
                                 for d in sorted({r.dist for r in kb.native})},
        "native_wheels": sum(r.wheels for r in kb.native),
        "native_builds": sum(r.builds for r in kb.native),
        "torch_releases_listed": kb.torch_listed,
        "torch_releases_with_cuda_facts": kb.torch_with_facts,
        "unread": len(kb.unread),
        **_refresh_info(kb.scrape),
    }
    if args.json:
        emit_json(info)
        return 0
    why = {"--kb": "named by --kb", "MOONPIN_KB": "named by $MOONPIN_KB",
           "user": "the user KB `moonpin scrape` writes",
           "shipped": "the KB installed with moonpin"}[choice.source]
    print(f"knowledge base {info['kb']} (schema {kb.schema_version}; {why})")
    print(f"  scraped {info['scraped_at']} ({_age(info['age_seconds'])}) from "
          f"{kb.scrape.index_url or 'the package index'} by moonpin {kb.scrape.moonpin_version}")
    if choice.other:
        other = info["other_kb"]["scraped_at"] or "an unreadable time"
        user = choice.source == "user"
        print(f"  not read: the {'shipped' if user else 'user'} KB {choice.other} (scraped "
              f"{other}); this one is {'as new or newer' if user else 'newer'}")
    for line in _refresh_lines(info["last_refresh"]):
        print(f"  {line}")
    ages = info["kinds_age_seconds"]
    if ages and set(ages.values()) != {info["age_seconds"]}:
        print("  facts asked of the index: " + "; ".join(
            f"{k} {info['kinds_scraped_at'][k]} ({_age(a)})" for k, a in ages.items()))
    rng = info["sglang_range"]
    print(f"  sglang   {len(sglang)} releases"
          f"{f' ({rng[0]} .. {rng[1]})' if rng else ''}; by process-group module: "
          + ", ".join(f"{k} {v}" for k, v in info["sglang_by_module"].items()))
    if local:
        print(f"           recorded from local sources: {', '.join(local)}")
    print(f"           launch-argument rules recorded for {info['sglang_with_launch_rules']} "
          "releases")
    print(f"  mooncake {len(kb.mooncake)} releases, {wheels} wheels, {builds} builds")
    for d, n in info["mooncake_distributions"].items():
        print(f"    {d}: {n}")
    if kb.native:
        print(f"  native   {info['native_releases']} releases, {info['native_wheels']} wheels, "
              f"{info['native_builds']} builds (the extensions a worker loads beside mooncake)")
        for d, n in info["native_distributions"].items():
            bad = (f" ({n['uninstallable']} cannot be installed)" if n["uninstallable"]
                   else "")
            print(f"    {d}: {n['releases']}{bad}")
    print(f"  torch    {kb.torch_listed} releases listed, {kb.torch_with_facts} with CUDA facts")
    if kb.unread:
        print(f"  unread   {len(kb.unread)} (see `moonpin kb info --json`)")
    return 0


def _refresh_info(scrape: Any) -> dict[str, Any]:
    """The KB's age and what the refresh that wrote it read (``kb info``)."""
    from datetime import datetime, timezone

    age = (datetime.now(timezone.utc) - scrape.scraped_at).total_seconds()
    return {
        "age_seconds": round(age),
        "last_refresh": {
            "index": scrape.index_url or "the package index",
            "kinds": list(scrape.refreshed),
            "read": {k: list(v) for k, v in scrape.read.items()},
            "kept": dict(scrape.kept),
            "bytes_fetched": scrape.bytes_fetched,
            "artifact_bytes_whole": scrape.artifact_bytes,
            "requests": scrape.requests,
            "seconds": scrape.seconds,
            "extractors": dict(scrape.extractors),
        },
        "kinds_scraped_at": {k: t.isoformat() for k, t in scrape.kinds_scraped_at.items()},
        "kinds_age_seconds": {k: round((datetime.now(timezone.utc) - t).total_seconds())
                              for k, t in scrape.kinds_scraped_at.items()},
    }


def _age(seconds: float) -> str:
    if seconds < 0:
        return f"{_span(-seconds)} in the future: check this machine's clock"
    return f"{_span(seconds)} old"


def _span(s: float) -> str:
    for unit, n in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if s >= n:
            k = int(s // n)
            return f"{k} {unit}{'s' if k != 1 else ''}"
    return f"{int(s)} seconds"


def _refresh_lines(r: dict[str, Any]) -> list[str]:
    """``kb info``: what the refresh that last wrote the KB read."""
    share = (f" ({100 * r['bytes_fetched'] / r['artifact_bytes_whole']:.2f}% of the "
             f"{mb(r['artifact_bytes_whole'])} the artifacts read weigh whole)"
             if r["artifact_bytes_whole"] else "")
    cost = f"fetched {mb(r['bytes_fetched'])}" + (
        f" in {r['requests']} requests" if r["requests"] else "") + share + (
        f", {r['seconds']:.1f}s" if r["seconds"] else "")
    if not r["kinds"]:  # written by a moonpin that did not record it
        return [f"last refresh: {cost}; which releases it read is not recorded "
                "(run `moonpin scrape` to record it)"]
    out = [f"last refresh: {', '.join(r['kinds'])}; {cost}"]
    for kind in r["kinds"]:
        read = r["read"].get(kind, [])
        shown = ", ".join(read[:4]) + (f", ... (+{len(read) - 4})" if len(read) > 4 else "")
        out.append(f"  {kind:9} {len(read):4} read{': ' + shown if read else ''}; "
                   f"{r['kept'].get(kind, 0)} kept unchanged")
    return out


def cmd_show(args: argparse.Namespace) -> int:
    from moonpin.cli import show
    from moonpin.resolver import spelling

    name, version = spelling.split_release(args.release)
    if name == "torch":
        return _show_torch(args, version)
    kb = _summary(args)  # it says whether the release is there
    if name == "sglang":
        kind, pool = "sglang", [r.version for r in kb.sglang]
    elif any(r.dist == name for r in kb.mooncake):
        kind, pool = "mooncake", [r.version for r in kb.mooncake if r.dist == name]
    elif any(r.dist == name for r in kb.native):
        kind, pool = "native", [r.version for r in kb.native if r.dist == name]
    else:
        known = sorted({r.dist for r in kb.mooncake} | {r.dist for r in kb.native}
                       | {"sglang", "torch"})
        fatal(f"unknown release name {name!r}", "known: " + ", ".join(known))
    hits = [v for v in pool if _same_version(v, version)]
    if not hits:
        from moonpin.resolver.graph import canonical_name

        unread = [u for u in kb.unread if canonical_name(u.name) == name
                  and u.version == version]
        if unread:
            fatal(f"{name}=={version} could not be read in the last scrape: "
                   f"{unread[0].reason}", "run `moonpin scrape` again", code=1)
        near = _nearest(version, pool)
        fatal(f"{name}=={version} is not in the knowledge base",
               f"nearest known: {', '.join(near)}; run `moonpin scrape` to refresh")
    shown = hits[-1]  # a local record of a version the index has comes after it
    rec = show.record(_kb_path(args), kind, name, shown)
    if rec is None:  # no document for it that belongs to this KB: the KB's own record
        model = load(args)
        records = {"sglang": model.sglang, "mooncake": model.mooncake,
                   "native": model.native}[kind]
        found = [r for r in records
                 if r.version == shown and (kind == "sglang" or r.dist == name)]
        rec = found[-1].model_dump(mode="json")
    if args.json:
        emit_json(rec)
        return 0
    for line in show.lines(kind, rec):
        print(line)
    return 0


def _same_version(a: str, b: str) -> bool:
    from packaging.version import InvalidVersion, Version

    if a == b:
        return True
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return False


def _nearest(version: str, pool: list[str]) -> list[str]:
    from packaging.version import InvalidVersion, Version

    try:
        v = Version(version)
    except InvalidVersion:
        return pool[-3:]
    ordered = sorted(pool, key=Version)
    below = [p for p in ordered if Version(p) < v][-2:]
    above = [p for p in ordered if Version(p) > v][:2]
    return below + above


def _show_torch(args: argparse.Namespace, version: str) -> int:
    """``moonpin show torch==2.13.0``: the KB's facts of that torch (the CUDA major of the
    index's wheel per architecture, with the evidence) and the SGLang releases whose torch
    requirement admits it; PEP 440 equality (``2.13`` is 2.13.0)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import Version

    from moonpin.cli.common import graph
    from moonpin.cli.common import shown as _shown
    from moonpin.resolver.query import torch_release
    from moonpin.resolver.tables.documents import load_torch

    g = graph(args)
    want = torch_release(g, version)
    # a local build (``2.13.0+cu126``) is shown as its label says, beside the index's builds
    # of its release (the KB holds those only)
    local = Version(want).local
    table = load_torch(g.kb_path) if g.kb_path is not None else None
    if table is not None:  # the torch facts resolved at `kb resolve`
        records = [(t["version"], [{"arch": a, "cuda_major": c, "evidence": e, "wheel": w}
                                   for a, c, e, w in t["variants"]]) for t in table["torch"]]
        heads = [(sv, specs) for sv, _, _, specs in table["sglang"]]
    else:
        records = [(t.version, [{"arch": v.arch, "cuda_major": v.cuda_major,
                                 "evidence": v.evidence, "wheel": v.artifact.filename}
                                for v in t.variants]) for t in g.kb.torch]
        heads = [(str(sv), list(g.sglang[sv].torch_specifiers)) for sv in sorted(g.sglang)]
    rec = next((t for t in records if Version(t[0]) == Version(Version(want).public)), None)
    if rec is None:
        listed = Version(want) in set(g.torch_releases())
        near = _nearest(want, [t[0] for t in records])
        said = ("listed by the index, but the KB read none of its wheels" if listed
                else "not in the knowledge base")
        fatal(f"torch=={want} is {said}",
               f"the KB reads the torch releases SGLang pins or mooncake builds target; "
               f"nearest with facts: {', '.join(near)}")
    admits = []
    for sv, all_specs in heads:
        specs = [x for x in all_specs if x]
        try:
            if specs and all(SpecifierSet(x).contains(want, True) for x in specs[:1]):
                admits.append(sv)
        except InvalidSpecifier:
            continue
    variants = rec[1]
    doc: dict[str, object] = {"name": "torch", "version": want if local else rec[0],
                              "variants": variants, "sglang_admitting": admits}
    if local:
        from moonpin.resolver.query import resolve_torch

        t = resolve_torch(g, want, "x86_64")
        doc["local_build"] = {"label": local, "cuda_major": t.cuda, "evidence": t.cuda_why,
                              "variants_are": f"the index's builds of {rec[0]}"}
    if args.json:
        emit_json(doc)
        return 0
    if local:
        cuda = f"CUDA {t.cuda}" if t.cuda is not None else "no CUDA"
        print(f"torch {want}: a local build, {cuda} by its label +{local} (the knowledge "
              f"base holds the index's builds of {rec[0]}, below)")
    print(f"torch {rec[0]}")
    for v in variants:
        cuda = f"CUDA {v['cuda_major']}" if v["cuda_major"] is not None else "CPU build"
        print(f"  {v['arch']:8} {cuda:10} {v['wheel']}  ({_shown(v['evidence'], 160)})")
    print(f"  admitted by the torch requirement of sglang {_listed_short(admits)}"
          if admits else "  no SGLang release of the KB requires it")
    return 0


def _listed_short(values: list[str], keep: int = 6) -> str:
    return ", ".join(values) if len(values) <= keep else (
        ", ".join(values[:keep]) + f" (+{len(values) - keep})")
