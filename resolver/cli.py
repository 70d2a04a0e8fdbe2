"""The ``moonpin`` command: thin glue over scrapers/, kb/ and resolver/.

Exit codes: 0 success; 1 the command ran but found a problem (e.g. a scrape
with unread releases); 2 bad input or an unusable KB; 130 interrupted.
Domain errors are caught here only, and each is printed with a tip.
Heavy imports happen inside the subcommand that needs them.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:  # argparse loads only when a parser is built: `moonpin check` skips it
    import argparse

from kb.errors import MoonpinError

__all__ = ["main"]


def _fatal(msg: str, hint: str | None = None, code: int = 2) -> NoReturn:
    # the last guard on echoed input (a 4,000-character path or argument, quoted with its
    # escapes): whatever a message quotes, it stays a few lines
    print(f"moonpin: error: {_shown(msg, 1000)}", file=sys.stderr)
    if hint:
        print(f"tip: {_shown(hint, 600)}", file=sys.stderr)
    raise SystemExit(code)


def _emit_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


# ---------------------------------------------------------------------- scrape


def cmd_scrape(args: argparse.Namespace) -> int:
    from kb import store
    from kb.errors import KBError
    from scrapers.fetch import Fetcher
    from scrapers.pypi import index_url_from_env, named_index_url, public_url
    from scrapers.refresh import KINDS, scrape
    from scrapers.report import StderrReporter

    kb_path = Path(args.kb) if args.kb else store.default_kb_path()
    only = [args.only] if args.only else list(KINDS)
    reporter = StderrReporter()
    named = index_url = None
    if not (args.from_path or args.from_url):
        named = named_index_url(args.index_url)
        index_url = index_url_from_env(args.index_url)  # the default: pip's, asked now
    fetcher = Fetcher(warn=reporter.warn)
    if index_url is None:
        try:
            return _scrape_path(fetcher, kb_path, args)
        finally:
            fetcher.close()
    with store.kb_lock(kb_path):
        old = None
        if kb_path.exists():
            try:
                old = store.load(kb_path)
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
            for f in ("sglang", "mooncake", "torch", "torch_versions", "unread")
        ) and kb.scrape.extractors == old.scrape.extractors \
            and kb_path.read_bytes() == store.dumps(old)
        # (extractors: else the next refresh re-reads; the bytes: an older schema or
        # layout is rewritten as this moonpin writes it even when no fact changed)
        if not unchanged:
            store.save(kb, kb_path)
            _write_resolved(kb_path)
    report = {
        "kb": str(kb_path),
        "changed": not unchanged,
        "index_url": public_url(index_url) if named else None,  # None: the package index
        "read": summary.read,
        "kept_unchanged": summary.kept,
        "unread": [u.model_dump() for u in summary.unread],
        "bytes_fetched": summary.bytes_fetched,
        "lower_bound_bytes": summary.lower_bound,
        "artifact_bytes_whole": summary.artifact_bytes,
        "seconds": round(summary.seconds, 2),
        "requests": fetcher.stats.requests,
        "retries": fetcher.stats.retries,
    }
    if args.json:
        _emit_json(report)
    else:
        ratio = (f" ({100 * summary.bytes_fetched / summary.artifact_bytes:.2f}% of the "
                 f"{_mb(summary.artifact_bytes)} those artifacts weigh whole)"
                 if summary.artifact_bytes else "")
        print(f"{'KB unchanged (nothing new on the index): ' if unchanged else 'wrote '}"
              f"{kb_path}")
        for k in KINDS:
            print(f"  {k:9} {summary.read[k]:4} read, {summary.kept[k]:4} unchanged")
        print(f"  fetched {_mb(summary.bytes_fetched)} in {fetcher.stats.requests} requests"
              f"{ratio}, {summary.seconds:.1f}s")
        if summary.lower_bound:
            print(f"  lower bound (directories + bytes the extractors consumed): "
                  f"{_mb(summary.lower_bound)}")
        for u in summary.unread:
            print(f"  unread: {u.kind} {u.name} {u.version}"
                  f"{' ' + u.artifact if u.artifact else ''}: {u.reason}")
    return 1 if summary.unread else 0


def _scrape_path(fetcher: Any, kb_path: Path, args: argparse.Namespace) -> int:
    from kb import store
    from scrapers.local import scrape_archive, scrape_path

    if args.from_url:
        rel = scrape_archive(fetcher, args.from_url, version=args.version)
    else:
        rel = scrape_path(Path(args.from_path), version=args.version)
    with store.kb_lock(kb_path):
        if not kb_path.exists():
            _fatal(f"no knowledge base at {str(kb_path)!r} to add this release to",
                   "run `moonpin scrape` first, or pass --kb")
        old = store.load(kb_path)
        kept = tuple(r for r in old.sglang
                     if not (r.version == rel.version and r.source == rel.source))
        store.save(old.model_copy(update={"sglang": (*kept, rel)}), kb_path)
        _write_resolved(kb_path)
    if args.json:
        _emit_json(rel.model_dump(mode="json"))
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
    from resolver import resolved

    resolved.write(kb_path)


def cmd_kb_resolve(args: argparse.Namespace) -> int:
    from kb import store
    from resolver import resolved

    kb_path = Path(args.kb) if args.kb else store.default_kb_path()
    with store.kb_lock(kb_path):
        out = resolved.write(kb_path)
    print(f"wrote {out}")
    return 0


# ---------------------------------------------------------------------- kb info / show


def _load(args: argparse.Namespace) -> Any:
    from kb import store

    return store.load(Path(args.kb) if args.kb else None)


def _kb_path(args: argparse.Namespace) -> Path:
    from kb.paths import default_kb_path

    return Path(args.kb) if args.kb else default_kb_path()


def cmd_kb_info(args: argparse.Namespace) -> int:
    from kb import store

    kb = _load(args)
    path = Path(args.kb) if args.kb else store.default_kb_path()
    wheels = sum(len(r.wheels) for r in kb.mooncake)
    builds = sum(len(w.builds) for r in kb.mooncake for w in r.wheels)
    dists = sorted({r.dist for r in kb.mooncake})
    info = {
        "kb": str(path),
        "schema_version": kb.schema_version,
        "scraped_at": kb.scrape.scraped_at.isoformat(),
        "index_url": kb.scrape.index_url,
        "sglang_releases": len(kb.sglang),
        "sglang_range": [kb.sglang[0].version, kb.sglang[-1].version] if kb.sglang else [],
        "sglang_by_module": _count(r.pg.module or "none" for r in kb.sglang),
        "mooncake_releases": len(kb.mooncake),
        "mooncake_distributions": {d: len([r for r in kb.mooncake if r.dist == d])
                                   for d in dists},
        "mooncake_wheels": wheels,
        "mooncake_builds": builds,
        "sglang_with_launch_rules": sum(1 for r in kb.sglang if r.launch and r.launch.rules),
        "torch_releases_listed": len(kb.torch_versions),
        "torch_releases_with_cuda_facts": len(kb.torch),
        "unread": len(kb.unread),
        **_refresh_info(kb.scrape),
    }
    if args.json:
        _emit_json(info)
        return 0
    print(f"knowledge base {info['kb']} (schema {kb.schema_version})")
    print(f"  scraped {info['scraped_at']} ({_age(info['age_seconds'])}) from "
          f"{kb.scrape.index_url or 'the package index'} by moonpin {kb.scrape.moonpin_version}")
    for line in _refresh_lines(info["last_refresh"]):
        print(f"  {line}")
    ages = info["kinds_age_seconds"]
    if ages and set(ages.values()) != {info["age_seconds"]}:
        print("  facts asked of the index: " + "; ".join(
            f"{k} {info['kinds_scraped_at'][k]} ({_age(a)})" for k, a in ages.items()))
    rng = info["sglang_range"]
    print(f"  sglang   {len(kb.sglang)} releases"
          f"{f' ({rng[0]} .. {rng[1]})' if rng else ''}; by process-group module: "
          + ", ".join(f"{k} {v}" for k, v in info["sglang_by_module"].items()))
    print(f"           launch-argument rules recorded for {info['sglang_with_launch_rules']} "
          "releases")
    print(f"  mooncake {len(kb.mooncake)} releases, {wheels} wheels, {builds} builds")
    for d, n in info["mooncake_distributions"].items():
        print(f"    {d}: {n}")
    print(f"  torch    {len(kb.torch_versions)} releases listed, {len(kb.torch)} with CUDA facts")
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
             f"{_mb(r['artifact_bytes_whole'])} the artifacts read weigh whole)"
             if r["artifact_bytes_whole"] else "")
    cost = f"fetched {_mb(r['bytes_fetched'])}" + (
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


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return out


def cmd_show(args: argparse.Namespace) -> int:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version

    kb = _load(args)
    try:
        req = Requirement(args.release)
    except InvalidRequirement as e:
        _fatal(f"cannot parse {args.release!r}: {e}",
               "name one release as NAME==VERSION, e.g. sglang==0.5.18")
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator not in ("==", "==="):
        _fatal(f"{args.release!r} does not name one release",
               "use NAME==VERSION, e.g. mooncake-transfer-engine==0.3.13.post1")
    version = specs[0].version
    try:  # `==0.5.*` and `===anything` parse as requirements, not as one release
        Version(version)
    except InvalidVersion:
        _fatal(f"{version!r} in {args.release!r} is not a PEP 440 version",
               "name one release as NAME==VERSION, e.g. sglang==0.5.18")
    name = canonicalize_name(req.name)
    if name == "sglang":
        hits = [r for r in kb.sglang if Version(r.version) == Version(version)]
        pool = [r.version for r in kb.sglang]
    else:
        hits = [r for r in kb.mooncake if r.dist == name and Version(r.version) == Version(version)]
        pool = [r.version for r in kb.mooncake if r.dist == name]
        if not pool:
            known = sorted({r.dist for r in kb.mooncake} | {"sglang"})
            _fatal(f"unknown release name {req.name!r}", "known: " + ", ".join(known))
    if not hits:
        unread = [u for u in kb.unread if canonicalize_name(u.name) == name
                  and u.version == version]
        if unread:
            _fatal(f"{name}=={version} could not be read in the last scrape: "
                   f"{unread[0].reason}", "run `moonpin scrape` again", code=1)
        near = _nearest(version, pool)
        _fatal(f"{name}=={version} is not in the knowledge base",
               f"nearest known: {', '.join(near)}; run `moonpin scrape` to refresh")
    rel = hits[-1]
    if args.json:
        _emit_json(rel.model_dump(mode="json"))
        return 0
    if name == "sglang":
        _print_sglang(rel)
    else:
        _print_mooncake(rel)
    return 0


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


def _print_sglang(r: Any) -> None:
    print(f"sglang {r.version}  ({r.artifact.filename}, sha256 {r.artifact.sha256[:12]}…)")
    print(f"  torch requirement: {', '.join(r.torch_requirements) or 'none declared'}")
    pg = r.pg
    if pg.module is None:
        print("  process-group module: none (imports no mooncake.pg / mooncake.ep)")
    else:
        alt = f" (falls back to {', '.join(pg.alternatives)})" if pg.alternatives else ""
        print(f"  process-group module: {pg.module}{alt}{' [optional]' if pg.optional else ''}")
        print(f"  names: {', '.join(pg.names) or '-'}"
              + (f" (optional: {', '.join(pg.optional_names)})" if pg.optional_names else ""))
        print(f"  backends: {', '.join(pg.backends) or '-'}")
        print(f"  evidence: {', '.join(pg.evidence)}")
    print(f"  {r.files_analyzed} source files analysed, {len(r.imports)} mooncake imports:")
    for i in r.imports:
        where = f"{i.member}:{i.line}" + (f" in {i.function}" if i.function else "")
        names = f" ({', '.join(i.names)})" if i.names else ""
        print(f"    {i.module}{names} [{i.feature}{', optional' if i.optional else ''}] "
              f"{where}")
    for c in r.calls:
        print(f"    call {c.name}(…{c.positional} positional, "
              f"{len(c.keywords)} keyword) {c.member}:{c.line}")
    for f in r.parse_failures:
        print(f"    unparsed {f.member}: {f.error}")
    if r.launch is not None:
        print(f"  launch rules: {len(r.launch.rules)} from {r.launch.member} "
              f"({len(r.launch.flags)} options they read); `moonpin args --sglang {r.version} "
              "-- …` checks a launch line")


def _print_mooncake(r: Any) -> None:
    print(f"{r.dist} {r.version}: {len(r.wheels)} wheels")
    for w in r.wheels:
        print(f"  {w.artifact.filename}  sha256 {w.artifact.sha256[:12]}…")
        for ld in w.loaders:
            imps = ", ".join(i.template for i in ld.imports)
            extra = f" toolchain: {', '.join(ld.toolchain)}" if ld.toolchain else ""
            print(f"    loader {ld.module}: {ld.kind} {imps}{extra}")
            if ld.source_names:
                print(f"      names in shipped sources: {', '.join(ld.source_names)}")
        for b in w.builds:
            if b.read_error:
                print(f"    build {b.member}: torch {b.torch or '?'} ({b.read_error})")
                continue
            print(f"    build {b.member}: torch {b.torch or '?'}"
                  f"{' (from bytes)' if b.torch_from == 'bytes' else ''}, "
                  f"CUDA {b.cuda_major or '-'}, backends {', '.join(b.backends) or '-'}")
            print(f"      names: {', '.join(b.names) or '-'}")
            print(f"      needs: {', '.join(b.needed) or '-'} [{b.needed_method}]"
                  f"{' (read from ' + b.bytes_from + ')' if b.bytes_from else ''}")


# ---------------------------------------------------------------------- queries


def _graph(args: argparse.Namespace) -> Any:
    from resolver.graph import CompatGraph

    return CompatGraph(_load(args))


def _listed(values: list[str], keep: int = 4) -> str:
    """``a/b/c`` for a short list, ``a/b/c/d (+N)`` past ``keep`` items."""
    if len(values) <= keep:
        return "/".join(values) or "-"
    return "/".join(values[:keep]) + f" (+{len(values) - keep})"


#: Compatible releases printed before the rest are counted (``--json`` lists every one).
_SHOWN = 15


def _print_which(res: dict[str, Any], what: str, why: bool) -> None:
    q = res["query"]
    compatible = list(res["compatible"])

    def compiles(c: dict[str, Any]) -> bool:
        return any("compiles" in n for n in c.get("notes", []))

    if what == "mooncake":  # prebuilt before a release that compiles at first import
        compatible.sort(key=compiles)
    if compatible and what == "mooncake" and not q.get("module"):
        print(f"recommended: none needed (sglang {q.get('sglang')} imports no mooncake "
              "process-group module)")
    elif compatible:
        best = compatible[0]
        how = ("prebuilt, the newest that fits" if not compiles(best) else
               "the newest that fits; it compiles at first import (nothing prebuilt fits)")
        print(f"recommended: {best['requirement']} ({how})")
    scope = ", ".join(f"{k} {_listed(v) if isinstance(v, list) else v}"
                      for k, v in q.items() if k not in ("names", "backends") and v is not None)
    print(f"# {what} compatible with {scope}")
    if q.get("module"):
        print(f"# needs {q['module']}: names {', '.join(q.get('names') or []) or '-'}; "
              f"backends {', '.join(q.get('backends') or []) or '-'}")
    for note in res.get("notes", []):
        print(f"# note: {note}")
    if not compatible:
        print(f"none compatible ({len(res['excluded'])} excluded, {len(res['unknown'])} unknown)")
    for c in compatible[:_SHOWN]:
        wheels = c.get("wheels", [])
        pys = sorted({w["python"] for w in wheels})
        arches = sorted({w["arch"] for w in wheels})
        torches = sorted({w["torch"] for w in wheels})
        print(f"{c['requirement']:50} python {_listed(pys)}  {','.join(arches)}"
              f"  torch {','.join(torches)}")
        for note in c.get("notes", []):
            if note not in res.get("notes", []):  # said once above
                print(f"    note: {note}")
    if len(compatible) > _SHOWN:
        print(f"… and {len(compatible) - _SHOWN} more compatible (--json lists all)")
    excluded = res["excluded"]
    if why or not compatible:
        # one line per reason, the releases it excludes named together
        by_reason: dict[str, dict[str, list[str]]] = {}
        for c in excluded:
            by_reason.setdefault(c["reason"], {}).setdefault(
                c.get("dist", what), []).append(c["version"])
        for reason, dists in by_reason.items():
            if len(dists) == 1:
                ((name, versions),) = dists.items()
                print(f"  excluded {name} {_listed(versions, 6)}: {reason}")
            else:
                n = sum(map(len, dists.values()))
                print(f"  excluded {n} releases of {_listed(sorted(dists), 3)}: {reason}")
    elif excluded:
        # counted per distribution, by the check that excludes them
        per: dict[str, dict[str, int]] = {}
        for c in excluded:
            check = c["reason"].split(":", 1)[0] if ":" in c["reason"][:40] else "other"
            counts = per.setdefault(c.get("dist", what), {})
            counts[check] = counts.get(check, 0) + 1
        for name, counts in per.items():
            total = sum(counts.values())
            parts = ", ".join(f"{k} ×{n}" for k, n in sorted(counts.items(), key=lambda x: -x[1]))
            print(f"  excluded {name}: {total} release{'s' * (total != 1)} ({parts}; --why "
                  "says why each)")
    for c in res["unknown"]:
        print(f"  unknown  {c.get('dist', what)} {c['version']}: {c['reason']}")


def cmd_which(args: argparse.Namespace) -> int:
    if args.what == "mooncake":
        if not args.sglang:
            _fatal("`which mooncake` needs --sglang VERSION", "e.g. moonpin which mooncake "
                   "--sglang 0.5.18")
        fast = _which_mooncake_fast(args)
        if fast is not None:
            return _finish_which(fast, args)
    from resolver import query

    g = _graph(args)
    if args.what == "mooncake":
        res = query.which_mooncake(g, args.sglang, torch=args.torch, python=args.python,
                                   arch=args.arch, dist=args.dist)
    elif args.what == "sglang":
        if not args.mooncake:
            _fatal("`which sglang` needs --mooncake DIST==VERSION",
                   "e.g. moonpin which sglang --mooncake mooncake-transfer-engine==0.3.13")
        res = query.which_sglang(g, args.mooncake, torch=args.torch, python=args.python,
                                 arch=args.arch)
    else:
        if not (args.sglang and args.mooncake):
            _fatal("`which torch` needs --sglang VERSION and --mooncake DIST==VERSION",
                   "e.g. moonpin which torch --sglang 0.5.18 "
                   "--mooncake mooncake-transfer-engine==0.3.13")
        res = query.which_torch(g, args.sglang, args.mooncake, python=args.python,
                                arch=args.arch)
    return _finish_which(res, args)


def _finish_which(res: dict[str, Any], args: argparse.Namespace) -> int:
    if args.json:
        _emit_json(res)
    else:
        _print_which(res, args.what, args.why)
    return 0 if res["compatible"] else 1


def _which_mooncake_fast(args: argparse.Namespace) -> dict[str, Any] | None:
    """Answer from resolved.json when it holds the question (no pydantic, no networkx)."""
    if args.torch is not None:
        return None
    from resolver import resolved

    table = resolved.load(_kb_path(args), args.sglang)
    if table is None or not table.has(args.sglang):
        return None
    from resolver.inputs import normalize_arch, normalize_python

    dist = None
    if args.dist:
        from packaging.utils import canonicalize_name

        dist = str(canonicalize_name(args.dist))
        if dist not in {d for d, _ in table.releases}:
            return None  # let the full path say what is wrong with it
    return table.which_mooncake(args.sglang, python=normalize_python(args.python),
                                arch=normalize_arch(args.arch), dist=dist)


def cmd_explain(args: argparse.Namespace) -> int:
    from resolver import query

    sglang = mooncake = None
    torch = args.torch
    for item in args.releases:
        name, version = query.parse_release(item)
        if name == "sglang":
            sglang = version
        elif name == "torch":
            torch = version
        else:
            mooncake = f"{name}=={version}"
    if sglang is None or mooncake is None:
        _fatal("explain needs sglang==V and a mooncake DIST==V (and optionally torch==T)",
               "e.g. moonpin explain sglang==0.5.18 mooncake-transfer-engine-cuda13==0.3.13")
    res = query.explain(_graph(args), sglang, mooncake, torch=torch, python=args.python,
                        arch=args.arch)
    if args.json:
        _emit_json(res)
    else:
        ev = res["evaluated"]
        print(f"sglang {sglang} + {mooncake} + torch {ev['torch'] or 'as required'} on "
              f"{ev['python'] or 'any python'} {ev['arch'] or 'any platform'}: "
              f"{res['verdict'].upper()}")
        if not res["checks"]:
            for r in res["reasons"]:
                print(f"  {r}")
        marks = {True: "ok  ", False: "FAIL", None: "??  "}
        for c in res["checks"]:
            print(f"  [{marks[c['ok']]}] {c['name']}: {c['detail']}")
            for e in c["evidence"]:
                print(f"         evidence: {e}")
        for n in res["notes"]:
            print(f"  note: {n}")
        others = [c for c in res["combinations"] if (c["torch"], c["python"], c["arch"])
                  != (ev["torch"], ev["python"], ev["arch"])]
        if others:
            verdicts = _count(c["verdict"] for c in others)
            print("  other combinations: " + ", ".join(f"{v} {k}" for k, v in verdicts.items())
                  + " (see --json, or pass --python/--arch/torch==)")
    return {"compatible": 0, "incompatible": 1}.get(res["verdict"], 1)


def cmd_pins(args: argparse.Namespace) -> int:
    from resolver import pins

    if len(args.match or []) != len(args.dep or []):
        _fatal("each --match needs a --dep (the package its currentValue is a version of)",
               "e.g. --match 'sglang_ref: v(?P<currentValue>\\S+)' --dep sglang")
    found, _ = _read_pin_files(args.files,
                               list(zip(args.match or [], args.dep or [], strict=True)))
    if not found:
        _fatal(f"no pin of sglang, torch or a mooncake distribution in "
               f"{_shown(', '.join(args.files))}; nothing was judged",
               "give the requirements/constraints files, pyproject.toml or Dockerfile that "
               "pin sglang (or --match/--dep for another kind of file)")
    pinned = pins.pinned_set(found)
    _check_pinned_versions(pinned)
    verdict = pins.judge(_graph(args), pinned, python=args.python, arch=args.arch,
                         strategy=args.strategy, keep=args.keep)
    result = {
        "pins": [{"name": p.name, "spec": p.spec, "version": p.version, "file": p.path,
                  "line": p.line, "kind": p.kind, "note": p.note} for p in found],
        "conflicts": [[f"{a.path}:{a.line} {a.name}=={a.version}",
                       f"{b.path}:{b.line} {b.name}=={b.version}"] for a, b in pinned.conflicts],
        **{k: v for k, v in verdict.items() if k != "explain"},
    }
    if args.json:
        _emit_json(result)
    else:
        for p in found:
            what = f"=={p.version}" if p.version else (p.spec or "(unpinned)")
            note = f"  [{p.note}]" if p.note else ""
            print(f"{p.path}:{p.line}: {p.name}{what}  ({p.kind}){note}")
        for a, b in result["conflicts"]:
            print(f"conflict: {a} vs {b}")
        print(f"verdict: {verdict['verdict']} ({verdict['platform']})")
        for r in verdict["reasons"]:
            print(f"  {r}")
        for n in verdict.get("notes", []):
            print(f"  note: {n}")
        for u in verdict["updates"]:
            name = u["newName"] if u["newName"] != u["depName"] else u["depName"]
            was = (f"=={u['currentVersion']}" if u.get("currentVersion") is not None
                   else u["currentValue"] or " (no version)")
            print(f"update ({u['groupName']}): {u['packageFile']}:{u['line']} "
                  f"{u['depName']}{was} -> {name}=={u['newVersion']}  # {u['reason']}")
    if (args.diff or args.write) and verdict["updates"]:
        _rewrite_pins(found, verdict["updates"], write=args.write)
    ok = verdict["verdict"] == "compatible" and not verdict["updates"] and not pinned.conflicts
    return 0 if ok or args.exit_zero else 1


def _rewrite_pins(found: Any, updates: list[dict[str, Any]], *, write: bool) -> None:
    """Print the unified diff of the updates; with ``write``, apply it (atomically, per file,
    line endings, mode and symlinks kept)."""
    import difflib
    import os

    from resolver import pins

    paths = sorted({u["packageFile"] for u in updates})
    texts: dict[str, str] = {}
    for p in paths:
        try:
            texts[p] = pins.read_for_rewrite(p)
        except (OSError, UnicodeDecodeError) as e:
            _fatal(f"cannot read {_shown(p)} again to rewrite it: "
                   f"{getattr(e, 'reason', None) or e}; it is unchanged",
                   "run again once the file is a readable regular file")
    new, problems = pins.apply_updates(found, updates, texts)
    out = sys.stderr if write else sys.stdout
    for p in paths:
        out.writelines(difflib.unified_diff(texts[p].splitlines(keepends=True),
                                            new[p].splitlines(keepends=True),
                                            fromfile=p, tofile=p))
    for problem in problems:
        print(f"not written: {_shown(problem)}", file=sys.stderr)
    if write:
        for p in paths:
            if new[p] != texts[p]:
                try:
                    written = pins.write_keeping(p, new[p])
                except OSError as e:
                    _fatal(f"cannot write {_shown(p)}: {e.strerror or e}; it is unchanged",
                           "free space or fix permissions (or the symlink), then run again")
                print(f"wrote {p}" + (f" (through the symlink, to {written})"
                                      if written != os.path.abspath(p) else ""),
                      file=sys.stderr)


def cmd_renovate(args: argparse.Namespace) -> int:
    from resolver import pins

    sglang = args.sglang
    torch = dist = current = None
    if args.files:
        found, _ = _read_pin_files(args.files)
        pinned = pins.pinned_set(found)
        _check_pinned_versions(pinned)
        if sglang is None:
            if pinned.sglang is None:
                _fatal(f"no exact sglang pin in {_shown(', '.join(args.files))}",
                       "pin sglang==VERSION there, or pass --sglang VERSION")
            sglang = pinned.sglang.version
        torch = pinned.torch.version if pinned.torch else None
        moon = pinned.mooncake or next((p for p in pinned.loose
                                        if p.name in pins.MOONCAKE_FAMILY), None)
        if moon is not None:
            dist, current = moon.name, moon.version
    elif sglang is None:
        _fatal("`renovate` needs --sglang VERSION or the files that pin it",
               "e.g. moonpin renovate --sglang 0.5.18, or moonpin renovate requirements.txt")
    _version_arg(sglang, "--sglang" if args.sglang else "the sglang pin")
    plan = pins.plan_stack(_graph(args), sglang, torch=torch, dist=dist,
                           current_mooncake=current, python=args.python, arch=args.arch,
                           allow_jit=args.allow_jit)
    for r in plan.reasons:
        print(f"moonpin: {r}", file=sys.stderr)
    _emit_json(pins.renovate_fragment(plan))
    return 0 if plan.mooncake else 1


def _version_arg(text: str, what: str) -> str:
    """A ``--sglang``-style version, checked before anything parses it (a 5,000-digit
    number passes Python's ``int()`` limit)."""
    from packaging.version import InvalidVersion, Version

    try:
        if len(text) > 100:
            raise InvalidVersion(text)
        Version(text)
    except (InvalidVersion, ValueError):
        _fatal(f"{what} {_shown(text, 60)!r} is not a PEP 440 version"
               + (f" ({len(text)} characters)" if len(text) > 100 else ""),
               f"e.g. {what} 0.5.18")
    return text


def _check_pinned_versions(pinned: Any) -> None:
    """Exit 2 naming FILE:LINE when an exact pin of the three is not a PEP 440 version
    (``sglang===${V}``): nothing can be judged against it."""
    from packaging.version import InvalidVersion, Version

    for p in (pinned.sglang, pinned.torch, pinned.mooncake):
        if p is None:
            continue
        try:
            Version(p.version)
        except (InvalidVersion, ValueError):
            _fatal(f"{_shown(p.path)}:{p.line}: {p.name} is pinned to "
                   f"{_shown(p.version, 60)!r}, not a PEP 440 version; nothing was judged",
                   f"pin {p.name}==VERSION there (e.g. a release `moonpin show` knows)")


def _shown(text: str, limit: int = 300) -> str:
    """An echoed input cut to ``limit`` characters, saying how many were left out."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more characters)"


def _read_pin_files(files: list[str], patterns: list[tuple[str, str]] | None = None,
                    ) -> tuple[Any, Any]:
    """``pins.read_pins`` for the CLI: every unreadable line printed as FILE:LINE, then exit 2."""
    from resolver import pins

    try:
        found, errors = pins.read_pins([Path(p) for p in files], patterns=patterns or [])
    except ValueError as ex:
        _fatal(_shown(str(ex)), "a --match pattern needs a (?P<currentValue>...) group")
    if errors:
        for err in errors:
            print(f"{_shown(err.path)}:{err.line}: {_shown(err.message)}", file=sys.stderr)
        _fatal(f"{len(errors)} line(s) could not be read; nothing was judged",
               "fix or remove those lines")
    return found, errors


def cmd_constraints(args: argparse.Namespace) -> int:
    from resolver import pins, pins_constraints

    _version_arg(args.sglang, "--sglang")
    plan = pins.plan_stack(_graph_cached(args), args.sglang, python=args.python,
                           arch=args.arch, allow_jit=args.allow_jit)
    if not plan.mooncake:
        _fatal(f"no mooncake release in the knowledge base fits sglang {_shown(args.sglang)}",
               f"`moonpin which mooncake --sglang {_shown(args.sglang)} --why` says why",
               code=1)
    where = ("judged for " + ", ".join(
        x for x in (f"python {args.python}" if args.python else "every python",
                    args.arch or "x86_64 and aarch64") if x))
    sys.stdout.write(pins_constraints.render(_graph_cached(args), plan, args.format,
                                             where=where))
    return 0


def _graph_cached(args: argparse.Namespace) -> Any:
    g = getattr(args, "_graph", None)
    if g is None:
        g = args._graph = _graph(args)
    return g


def cmd_args(args: argparse.Namespace) -> int:
    from resolver import launch_args, manifests, query
    from resolver.graph import CompatGraph
    from scrapers.server_args import from_record

    launches: list[manifests.Launch] = []
    findings: list[manifests.Finding] = []
    for path in args.file or ():
        try:
            found = manifests.read_file(Path(path), args.format)
        except OSError as e:  # kb.errors.ReadRefused (a FIFO, a device, too large) has a hint
            missing = isinstance(e, FileNotFoundError) or e.errno == 2  # ENOENT
            _fatal(f"cannot read {path}: {e.strerror}",
                   "check the path" if missing else getattr(e, "hint", None) or "check the path")
        except ValueError as e:
            _fatal(str(e), "fix the file, or pass --format shell if it is a script")
        if not found.launches and not found.findings:
            _fatal(f"no SGLang launch line in {path}",
                   "moonpin looks for `python -m sglang.launch_server`, `sglang serve`, "
                   "`python -m dynamo.sglang` and containers whose args carry SGLang flags")
        launches += found.launches
        findings += found.findings
    argv = list(args.launch or [])
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if argv or not args.file:
        launches.append(manifests.Launch(tuple(argv), "command line", "-"))
    g = CompatGraph(_load(args))
    results = []
    refused: list[tuple[Any, str, list[str]]] = []  # options the release's parser refuses
    crosses: list[tuple[Any, Any]] = []
    for la in launches:
        outcome = None
        if args.authoritative:
            from resolver import authoritative

            outcome = authoritative.run(args.python or sys.executable, la.argv,
                                        timeout=args.timeout)
            if outcome.error and outcome.version is None:
                _fatal(f"--authoritative: {outcome.error}",
                       "pass --python PATH of an interpreter with SGLang installed")
        version = args.sglang or manifests.sglang_version_of_image(la.image) or (
            outcome.version if outcome is not None else None)
        if outcome is not None and outcome.version and version and outcome.version != version:
            _fatal(f"--authoritative: the SGLang at {args.python or sys.executable} is "
                   f"{outcome.version}, not {version}", "check it against its own release "
                   "(drop --sglang) or point --python at an installation of that release")
        if version is None:
            _fatal(f"{la.where}: which SGLang release runs this launch? "
                   f"(image {la.image or 'not named'})", "pass --sglang VERSION")
        release = query.get_sglang(g, version)
        if release.launch is None:
            _fatal(f"the knowledge base holds no elastic-EP launch rules for sglang "
                   f"{release.version}", "releases before elastic EP have none")
        if release.launch.error:
            _fatal(f"sglang {release.version}: {release.launch.member} could not be read: "
                   f"{release.launch.error}", "run `moonpin scrape --only sglang --full`")
        flags, rules, constants = from_record(release.launch)
        accepted = release.launch.option_names or None
        try:
            parsed = launch_args.parse_launch(flags, la.argv, accepted)
            verdicts = launch_args.check(rules, flags, la.argv, constants=constants,
                                         parsed=parsed)
        except ValueError as e:
            _fatal(f"{la.where}: {e}", "fix the launch arguments")
        strange = parsed[launch_args.UNRECOGNIZED]
        if isinstance(strange, list) and strange:
            if "dynamo" in la.launcher:  # Dynamo's worker adds options of its own
                note = (f"not sglang {release.version} options (Dynamo's own, or mistakes): "
                        + ", ".join(strange))
                la = manifests.Launch(la.argv, la.where, la.launcher, la.image,
                                      (*la.notes, note))
            else:
                refused.append((la, release.version, strange))
        used = parsed[launch_args.DEPRECATED]
        deprecated = [f"deprecated in sglang {release.version}: {d}"
                      for d in (used if isinstance(used, list) else [])]
        if deprecated:
            la = manifests.Launch(la.argv, la.where, la.launcher, la.image,
                                  la.notes + tuple(deprecated))
        results.append((la, release.version, verdicts))
        if outcome is not None:
            from resolver import authoritative

            crosses.append((outcome, authoritative.compare(verdicts, outcome)))
        else:
            crosses.append((None, None))
    bad = [(la, v) for la, _, vs in results for v in vs if v.status == "violated"]
    if args.json:
        def verdict(la: manifests.Launch, v: launch_args.Verdict) -> dict[str, Any]:
            return {"message": v.message, "flags": list(v.flags), "evidence": v.evidence,
                    "condition": v.rule.condition, "where": la.where}

        _emit_json({
            "sglang": results[0][1] if len({r[1] for r in results}) == 1 else None,
            "violations": [verdict(la, v) for la, v in bad],
            "not_checked": [{"evidence": v.evidence, "why": v.why, "where": la.where}
                            for la, _, vs in results for v in vs if v.status == "not checked"],
            "rules": sum(len(vs) for _, _, vs in results),
            "findings": [{"where": f.where, "message": f.message, "fix": f.fix}
                         for f in findings],
            "unrecognized": [{"where": la.where, "sglang": ver, "options": opts}
                             for la, ver, opts in refused],
            "launches": [{"where": la.where, "launcher": la.launcher, "image": la.image,
                          "sglang": ver, "argv": list(la.argv), "notes": list(la.notes),
                          "violated": sum(v.status == "violated" for v in vs),
                          **({"authoritative": {
                              "python": args.python or sys.executable,
                              "error": oc.error, "parser": oc.parser, "steps": oc.steps,
                              "assumed": oc.assumed,
                              "agree": cmp.agree, "disagree": cmp.disagree,
                              "unconfirmed": cmp.unconfirmed, "not_run": cmp.not_run}}
                             if oc is not None else {})}
                         for (la, ver, vs), (oc, cmp) in zip(results, crosses, strict=True)],
        })
    else:
        many = len(results) > 1 or bool(args.file)
        for f in findings:
            print(f"problem: {f.where}: {f.message}")
            print(f"  fix: {f.fix}")
        for la, ver, vs in results:
            if many:
                print(f"{la.where}  ({la.launcher}; sglang {ver})")
            for note in la.notes:
                print(f"note: {note}")
            for rla, rver, opts in refused:
                if rla.where == la.where:
                    print(f"refused: sglang {rver} has no option {', '.join(opts)}; its parser "
                          "stops with 'unrecognized arguments'")
            for v in vs:
                if v.status == "violated":
                    print(f"violated: {v.message}")
                    print(f"  flags: {', '.join(v.flags) or '-'}   ({v.evidence})")
            # Rules left unchecked by this launch's own unknown values are this launch's
            # business; the others (values SGLang computes at start-up) are the same for
            # every launch: counted, and listed with --verbose.
            unchecked = [v for v in vs if v.status == "not checked"]
            own = [v for v in unchecked if "not known offline" in v.why]
            for v in unchecked if args.verbose else own:
                print(f"not checked: {v.evidence}: {v.why}")
            nbad = sum(v.status == "violated" for v in vs)
            hidden = "" if args.verbose or len(unchecked) == len(own) else (
                f" ({len(unchecked) - len(own)} read what SGLang computes at start-up; "
                "--verbose lists them)")
            print(f"sglang {ver}: {len(vs)} elastic-EP rules, {nbad} violated, "
                  f"{len(unchecked)} not checked{hidden}")
        for (la, _ver, _), (oc, cmp) in zip(results, crosses, strict=True):
            if oc is None:
                continue
            print(f"authoritative ({'' if not many else la.where + ', '}SGLang {oc.version} "
                  f"at {args.python or sys.executable}):")
            if oc.error:
                print(f"  could not run: {oc.error}")
            if oc.parser:
                print(f"  SGLang's parser refuses the line: {oc.parser}")
            for item in oc.assumed:
                print(f"  assumed, as on a GPU worker: {item}")
            for label, items in (("agree", cmp.agree), ("DISAGREE", cmp.disagree),
                                 ("unconfirmed", cmp.unconfirmed),
                                 ("step did not run here", cmp.not_run)):
                for item in items:
                    print(f"  {label}: {item}")
            ran = sum(st["status"] in ("ok", "rejected") for st in oc.steps)
            print(f"  {ran} of {len(oc.steps)} resolution steps ran; {len(cmp.agree)} agree, "
                  f"{len(cmp.disagree)} disagree, {len(cmp.unconfirmed)} unconfirmed")
    rejected = any(oc is not None and (oc.parser or cmp.sglang_rejects) for oc, cmp in crosses)
    return 1 if bad or findings or rejected or refused else 0


def cmd_triples(args: argparse.Namespace) -> int:
    from resolver import query

    rows = query.triples(_graph(args), sglang=args.sglang, torch=args.torch,
                         mooncake=args.mooncake, dist=args.dist, python=args.python,
                         arch=args.arch)
    cols = ["sglang", "torch", "dist", "mooncake", "python", "arch"]
    fmt = "json" if args.json else args.format
    if fmt == "json":
        _emit_json(rows)
    elif fmt == "csv":
        import csv

        w = csv.DictWriter(sys.stdout, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    else:
        widths = {c: max([len(c), *(len(r[c]) for r in rows)]) for c in cols}
        print("  ".join(c.ljust(widths[c]) for c in cols))
        for r in rows:
            print("  ".join(r[c].ljust(widths[c]) for c in cols))
        print(f"# {len(rows)} compatible combinations")
    return 0 if rows else 1


# ---------------------------------------------------------------------- parser


DESCRIPTION = ("moonpin: which SGLang, torch and mooncake releases work together, read out of "
               "the real release artifacts (works offline on the knowledge base it ships).")
EPILOG = """examples:
  moonpin which mooncake --sglang 0.5.18          the mooncake releases to install
  moonpin explain sglang==0.5.18 mooncake-transfer-engine-cuda13==0.3.13.post1
  moonpin pins requirements.txt                   judge a project's pins, propose updates
  moonpin check --elastic-ep-backend mooncake     check this image before a worker starts

exit codes: 0 success; 1 the command ran and found a problem; 2 bad input or an unusable
knowledge base (the message says which, with a tip); 130 interrupted.
`moonpin help COMMAND` (or `moonpin COMMAND -h`) documents each command's options."""


def _version_line(kb: str | None) -> str:
    """moonpin's version and the KB's scrape date (read with the standard library only)."""
    from importlib import metadata

    from kb.paths import default_kb_file

    try:
        mine = metadata.version("moonpin")
    except metadata.PackageNotFoundError:
        mine = "(not installed)"
    path = kb or default_kb_file()
    try:
        from kb.files import loads_json, read_regular

        doc = loads_json(read_regular(path, cap=256 << 20, what="knowledge base"))
        when = doc["scrape"]["scraped_at"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        when = f"unreadable: {str(e)[:120]}"
    return f"moonpin {mine}; knowledge base {path}, scraped {when}"


def build_parser(with_matrix: Any = None) -> argparse.ArgumentParser:
    import argparse

    class Parser(argparse.ArgumentParser):
        """argparse's own errors as moonpin's: the echoed input cut short, and a tip (every
        subcommand's parser is of this class too)."""

        def error(self, message: str) -> NoReturn:
            self.print_usage(sys.stderr)
            if len(message) > 400:
                message = message[:400] + f"... ({len(message):,} characters)"
            print(f"{self.prog}: error: {message}", file=sys.stderr)
            print(f"tip: `{self.prog} --help` says what it takes", file=sys.stderr)
            raise SystemExit(2)

    p = Parser(
        prog="moonpin", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kb", help="knowledge-base file (default: the shipped one, or $MOONPIN_KB)")
    p.add_argument("--version", action="store_true",
                   help="print moonpin's version and when its knowledge base was scraped")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("help", help="this help, or a command's: moonpin help which")

    s = sub.add_parser("scrape", help="read releases from the index into the KB")
    s.add_argument("--only", choices=["sglang", "mooncake", "torch"])
    s.add_argument("--full", action="store_true", help="re-read everything")
    s.add_argument("--from-path", metavar="PATH",
                   help="record an SGLang source tree or site-packages instead of the index")
    s.add_argument("--from-url", metavar="URL",
                   help="record an SGLang tagged source archive (.tar.gz/.zip) by URL")
    s.add_argument("--version", help="with --from-path/--from-url: the version to record "
                   "it as (default: read from the sources)")
    s.add_argument("--index-url", help="package index base URL, serving /pypi/<name>/json "
                   "(default $MOONPIN_INDEX_URL, else pip's index: $PIP_INDEX_URL, pip config, "
                   "pip's default)")
    s.add_argument("--jobs", type=int, default=8, help="concurrent requests (default 8)")
    s.add_argument("--json", action="store_true")
    s.add_argument("--kb", dest="kb_sub", help=argparse.SUPPRESS)
    s.set_defaults(func=cmd_scrape)

    k = sub.add_parser("kb", help="about the knowledge base")
    ksub = k.add_subparsers(dest="kb_command", required=True)
    ki = ksub.add_parser("info", help="counts, coverage and dates")
    ki.add_argument("--json", action="store_true")
    ki.add_argument("--kb", dest="kb_sub", help=argparse.SUPPRESS)
    ki.set_defaults(func=cmd_kb_info)
    kr = ksub.add_parser("resolve", help="re-derive resolved.json (the fast answers) from the KB")
    kr.add_argument("--kb", dest="kb_sub", help=argparse.SUPPRESS)
    kr.set_defaults(func=cmd_kb_resolve)

    sh = sub.add_parser("show", help="what the KB holds for one release")
    sh.add_argument("release", help="e.g. sglang==0.5.18 or "
                    "mooncake-transfer-engine-cuda13==0.3.13.post1")
    sh.add_argument("--json", action="store_true")
    sh.add_argument("--kb", dest="kb_sub", help=argparse.SUPPRESS)
    sh.set_defaults(func=cmd_show)
    def scope(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--python", help="3.12 or cp312 (default: every python the wheels "
                        "cover)")
        sp.add_argument("--arch", help="x86_64 or aarch64 (default: both)")
        sp.add_argument("--json", action="store_true")
        sp.add_argument("--kb", dest="kb_sub", help=argparse.SUPPRESS)

    w = sub.add_parser("which", help="which mooncake / sglang / torch works with the rest")
    w.add_argument("what", choices=["mooncake", "sglang", "torch"])
    w.add_argument("--sglang", metavar="VERSION")
    w.add_argument("--mooncake", metavar="DIST==VERSION")
    w.add_argument("--torch", metavar="VERSION", help="e.g. 2.13.0 or 2.13.0+cu126 "
                   "(default: what the SGLang release requires)")
    w.add_argument("--dist", help="only this mooncake distribution")
    w.add_argument("--why", action="store_true", help="also list every excluded candidate")
    scope(w)
    w.set_defaults(func=cmd_which)

    e = sub.add_parser("explain", help="every check for sglang==V DIST==V [torch==T]")
    e.add_argument("releases", nargs="+", metavar="NAME==VERSION")
    e.add_argument("--torch", metavar="VERSION", help="the torch, as torch==T or this option")
    scope(e)
    e.set_defaults(func=cmd_explain)

    sub.add_parser("check", add_help=False,
                   help="verify this image at worker start (see `moonpin check --help`)")
    if with_matrix is not None:
        with_matrix(sub)
    else:
        sub.add_parser("matrix", add_help=False,
                       help="the compatibility matrix: HTML, Markdown, CSV or JSON "
                            "(see `moonpin matrix --help`)")

    pn = sub.add_parser("pins", help="read a project's pins of sglang, torch and mooncake; "
                        "judge the set and propose updates")
    pn.add_argument("files", nargs="+", metavar="FILE",
                    help="requirements/constraints files, pyproject.toml, Dockerfiles, scripts")
    pn.add_argument("--match", action="append", metavar="REGEX",
                    help="a Renovate-style regex with a (?P<currentValue>...) group")
    pn.add_argument("--dep", action="append", metavar="NAME", help="the package of each --match")
    pn.add_argument("--exit-zero", action="store_true", help="advisory: exit 0 even when "
                    "the set is incompatible or updates exist")
    pn.add_argument("--strategy", choices=["minimal", "latest"], default="minimal",
                    help="minimal: keep sglang, move mooncake (and torch if it must); latest: "
                    "move the stack to the newest compatible set")
    pn.add_argument("--keep", choices=["sglang", "torch", "mooncake"],
                    help="the package that must not move")
    pn.add_argument("--diff", action="store_true", help="print the updates as a unified diff")
    pn.add_argument("--write", action="store_true",
                    help="apply the updates in place (atomically; layout and comments kept)")
    scope(pn)
    pn.set_defaults(func=cmd_pins)

    rv = sub.add_parser("renovate", help="a Renovate config fragment that keeps torch and "
                        "mooncake bumps compatible with the pinned sglang")
    rv.add_argument("files", nargs="*", metavar="FILE", help="files pinning sglang")
    rv.add_argument("--sglang", metavar="VERSION")
    rv.add_argument("--allow-jit", action="store_true", help="also allow mooncake releases "
                    "that compile their process-group extension at first import")
    scope(rv)
    rv.set_defaults(func=cmd_renovate)

    cn = sub.add_parser("constraints", help="a pip/uv constraints file (or [tool.uv] "
                        "constraint-dependencies) holding torch and mooncake to what an SGLang "
                        "release loads")
    cn.add_argument("--sglang", metavar="VERSION", required=True)
    cn.add_argument("--format", choices=["txt", "uv"], default="txt",
                    help="txt: a constraints file for pip -c / uv pip compile -c; uv: the "
                    "[tool.uv] constraint-dependencies table")
    cn.add_argument("--allow-jit", action="store_true", help="also allow mooncake releases "
                    "that compile their process-group extension at first import")
    cn.add_argument("--python", help="3.12 or cp312 (default: every python the wheels cover)")
    cn.add_argument("--arch", help="x86_64 or aarch64 (default: both)")
    cn.add_argument("--kb", dest="kb_sub", help=argparse.SUPPRESS)
    cn.set_defaults(func=cmd_constraints)

    ar = sub.add_parser("args", help="check a launch line against that SGLang release's own "
                        "elastic-EP argument rules, offline")
    ar.add_argument("--sglang", metavar="VERSION",
                    help="the SGLang release (default: a manifest's lmsysorg/sglang image tag)")
    ar.add_argument("--file", action="append", metavar="PATH",
                    help="a Kubernetes manifest, Dynamo graph deployment (YAML) or shell script "
                         "whose SGLang launch lines to check (repeatable)")
    ar.add_argument("--authoritative", action="store_true",
                    help="also run the installed SGLang's own argument handling (in a child "
                         "interpreter) and report where it disagrees with the scraped rules")
    ar.add_argument("--python", metavar="PATH",
                    help="interpreter with SGLang installed, for --authoritative "
                         "(default: this one)")
    ar.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                    help="how long --authoritative may take per launch (default 300)")
    ar.add_argument("--format", choices=["auto", "yaml", "shell"], default="auto",
                    help="how to read --file (default: by suffix and content)")
    ar.add_argument("--json", action="store_true")
    ar.add_argument("--verbose", "-v", action="store_true",
                    help="list every rule that could not be checked offline")
    ar.add_argument("--kb", dest="kb_sub", help=argparse.SUPPRESS)
    ar.add_argument("launch", nargs=argparse.REMAINDER, help="-- then the launch arguments")
    ar.set_defaults(func=cmd_args)

    t = sub.add_parser("triples", help="every compatible (sglang, torch, mooncake) set")
    t.add_argument("--sglang", metavar="SPEC")
    t.add_argument("--torch", metavar="SPEC")
    t.add_argument("--mooncake", metavar="SPEC")
    t.add_argument("--dist")
    t.add_argument("--format", choices=["table", "json", "csv"], default="table")
    scope(t)
    t.set_defaults(func=cmd_triples)
    return p


#: No version, specifier, name or path moonpin is given needs more: a longer argument is
#: refused before anything parses it (Python's int() stops at 4,300 digits with a
#: ValueError deep inside packaging, and a 10,000-character value would be echoed whole).
_MAX_ARG = 4096
_MAX_DIGITS = 64


def _refuse_oversized(argv: list[str]) -> None:
    for arg in argv[:argv.index("--")] if "--" in argv else argv:  # not a launch line
        run = longest = 0
        for ch in arg[:_MAX_ARG + 1]:
            run = run + 1 if ch.isdigit() else 0
            longest = max(longest, run)
        if len(arg) > _MAX_ARG or longest > _MAX_DIGITS:
            what = (f"{len(arg):,} characters" if len(arg) > _MAX_ARG
                    else f"a number of {longest:,} digits")
            _fatal(f"argument {_shown(arg, 80)!r} is too long to be a release, version or "
                   f"path ({what})", "check the command line (a version is e.g. 0.5.18)")


def main(argv: list[str] | None = None) -> int:
    if hasattr(signal, "SIGPIPE") and argv is None:
        # Behave like other Unix tools when the reader goes away (`moonpin show … | head`).
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args_in = sys.argv[1:] if argv is None else list(argv)
    if args_in[:1] and args_in[0].startswith("--kb="):  # --kb=X is --kb X everywhere
        args_in = ["--kb", args_in[0][len("--kb="):], *args_in[1:]]
    # `moonpin check` runs at every worker start: hand it over before building the rest.
    lead = args_in[:2] if args_in[:1] == ["--kb"] else []
    if args_in[len(lead):len(lead) + 1] == ["check"]:
        from resolver.check import main as check_main

        return check_main([*lead, *args_in[len(lead) + 1:]])
    _refuse_oversized(args_in)
    parser = build_parser()
    if args_in[len(lead):len(lead) + 1] == ["matrix"]:
        # The matrix command pulls in the whole resolver; register it only when asked.
        from resolver import matrix

        parser = build_parser(with_matrix=matrix.add_parser)
    rest = args_in[len(lead):]
    if not rest or rest[0] == "help":
        if len(rest) > 1:  # moonpin help CMD: that command's own help
            if rest[1] == "matrix":
                from resolver import matrix

                parser = build_parser(with_matrix=matrix.add_parser)
            if rest[1] == "check":
                from resolver.check import main as check_main

                return check_main(["--help"])
            parser.parse_args([rest[1], "--help"])
        parser.print_help()
        return 0
    args = parser.parse_args(args_in)
    if args.version:
        print(_version_line(args.kb))
        return 0
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 0
    if getattr(args, "kb_sub", None):
        args.kb = args.kb_sub
    try:
        code: int = args.func(args)
    except MoonpinError as e:  # bad input: exit 2, and a tip even where none was given
        _fatal(str(e), e.hint or f"`moonpin {args.command} --help` says what it takes")
    except KeyboardInterrupt:
        print("moonpin: interrupted; the KB file was not changed", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    raise SystemExit(main())
