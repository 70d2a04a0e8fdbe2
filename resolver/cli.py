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

    from resolver.answers import Candidate, Which

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


class _Busy:
    """``with _Busy("loading the knowledge base"):`` says so on stderr while the block
    runs, only when stderr is a terminal, and leaves nothing behind."""

    def __init__(self, what: str) -> None:
        self.what = what
        try:
            self.live = sys.stderr.isatty()
        except (AttributeError, ValueError):  # a closed or stand-in stream
            self.live = False

    def __enter__(self) -> None:
        if self.live:
            sys.stderr.write(f"{self.what}…")
            sys.stderr.flush()

    def __exit__(self, *exc: object) -> None:
        if self.live:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


# ---------------------------------------------------------------------- scrape


def cmd_scrape(args: argparse.Namespace) -> int:
    from kb import store
    from kb.errors import KBError
    from scrapers.fetch import Fetcher
    from scrapers.pypi import index_url_from_env, named_index_url, public_url
    from scrapers.refresh import KINDS, scrape
    from scrapers.report import StderrReporter

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
            for f in ("sglang", "mooncake", "torch", "torch_versions", "unread")
        ) and kb.scrape.extractors == old.scrape.extractors \
            and seed.read_bytes() == store.dumps(old)
        # (extractors: else the next refresh re-reads; the bytes: an older schema or
        # layout is rewritten as this moonpin writes it even when no fact changed)
        if not unchanged:
            store.save(kb, kb_path)
            _write_resolved(kb_path)
    if unchanged:
        kb_path = seed  # nothing written: the KB read is current
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


def _scrape_target(args: argparse.Namespace) -> tuple[Path, Path]:
    """(the KB a scrape writes, the KB it starts from). Without ``--kb``, on an installed
    moonpin the user KB is written, starting from whichever KB commands read now (the
    shipped one until the user KB is newer), so nothing lands in site-packages."""
    from kb import paths, store

    if args.kb:
        return Path(args.kb), Path(args.kb)
    target = store.scrape_kb_path()
    if str(target) == paths.user_kb_file():
        return target, Path(paths.default_kb_file())
    return target, target


def _scrape_path(fetcher: Any, kb_path: Path, seed: Path, args: argparse.Namespace) -> int:
    from kb import store
    from scrapers.local import scrape_archive, scrape_path
    from scrapers.report import StderrReporter

    progress = StderrReporter(summary=False)  # a line on a terminal, else nothing
    if args.from_url:
        rel = scrape_archive(fetcher, args.from_url, version=args.version, reporter=progress)
    else:
        rel = scrape_path(Path(args.from_path), version=args.version, reporter=progress)
    with store.kb_lock(kb_path):
        if not seed.exists():
            _fatal(f"no knowledge base at {str(seed)!r} to add this release to",
                   "run `moonpin scrape` first, or pass --kb")
        old = store.load(seed)
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

    with _Busy(f"resolving the answers of {kb_path} into its resolved/ folder"):
        resolved.write(kb_path)


def cmd_kb_resolve(args: argparse.Namespace) -> int:
    from kb import store
    from resolver import resolved

    kb_path = Path(args.kb) if args.kb else store.default_kb_path()
    with store.kb_lock(kb_path), _Busy(f"resolving the answers of {kb_path}"):
        out = resolved.write(kb_path)  # kb_lock refuses the KB inside an installed package
    print(f"wrote {out}")
    return 0


# ---------------------------------------------------------------------- kb info / show


def _load(args: argparse.Namespace) -> Any:
    from kb import store

    with _Busy("loading the knowledge base"):
        return store.load(Path(args.kb) if args.kb else None)


def _kb_path(args: argparse.Namespace) -> Path:
    from kb.paths import default_kb_path

    return Path(args.kb) if args.kb else default_kb_path()


def cmd_kb_info(args: argparse.Namespace) -> int:

    from packaging.version import Version

    from kb import paths

    kb = _graph(args).kb  # the facts: no pydantic
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
    wheels = sum(len(r.wheels) for r in kb.mooncake)
    builds = sum(len(w.builds) for r in kb.mooncake for w in r.wheels)
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
        "sglang_by_module": _count(r.pg.module or "none" for r in sglang),
        "mooncake_releases": len(kb.mooncake),
        "mooncake_distributions": {d: len([r for r in kb.mooncake if r.dist == d])
                                   for d in dists},
        "mooncake_wheels": wheels,
        "mooncake_builds": builds,
        "sglang_with_launch_rules": sum(1 for r in kb.sglang if r.launch_rules),
        "torch_releases_listed": len(kb.torch_versions),
        "torch_releases_with_cuda_facts": len(kb.torch),
        "unread": len(kb.unread),
        **_refresh_info(kb.scrape),
    }
    if args.json:
        _emit_json(info)
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
    from resolver import show, spelling

    g = _graph(args)  # the facts say whether the release is there
    kb = g.kb
    name, version = spelling.split_release(args.release)
    if name == "sglang":
        hits = [r.version for r in kb.sglang if _same_version(r.version, version)]
        pool = [r.version for r in kb.sglang]
    else:
        hits = [r.version for r in kb.mooncake
                if r.dist == name and _same_version(r.version, version)]
        pool = [r.version for r in kb.mooncake if r.dist == name]
        if not pool:
            known = sorted({r.dist for r in kb.mooncake} | {"sglang"})
            _fatal(f"unknown release name {name!r}", "known: " + ", ".join(known))
    if not hits:
        from resolver.graph import canonical_name

        unread = [u for u in kb.unread if canonical_name(u.name) == name
                  and u.version == version]
        if unread:
            _fatal(f"{name}=={version} could not be read in the last scrape: "
                   f"{unread[0].reason}", "run `moonpin scrape` again", code=1)
        near = _nearest(version, pool)
        _fatal(f"{name}=={version} is not in the knowledge base",
               f"nearest known: {', '.join(near)}; run `moonpin scrape` to refresh")
    shown = hits[-1]  # a local record of a version the index has comes after it
    rec = show.record(_kb_path(args), name, shown)
    if rec is None:  # no document for it that belongs to this KB: the KB's own record
        model = _load(args)
        found = [r for r in (model.sglang if name == "sglang" else model.mooncake)
                 if r.version == shown and (name == "sglang" or r.dist == name)]
        rec = found[-1].model_dump(mode="json")
    if args.json:
        _emit_json(rec)
        return 0
    for line in show.lines(name, rec):
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


# ---------------------------------------------------------------------- queries


def _graph(args: argparse.Namespace) -> Any:
    from resolver.graph import CompatGraph

    return CompatGraph.from_path(_kb_path(args))


def _listed(values: list[str], keep: int = 4) -> str:
    """``a/b/c`` for a short list, ``a/b/c/d (+N)`` past ``keep`` items."""
    if len(values) <= keep:
        return "/".join(values) or "-"
    return "/".join(values[:keep]) + f" (+{len(values) - keep})"


#: Compatible releases printed before the rest are counted (``--json`` lists every one).
_SHOWN = 15


def _print_which(res: Which, what: str, why: bool) -> None:
    q = res.query
    compatible = list(res.compatible)
    if what == "mooncake":  # prebuilt before a release that compiles at first import
        compatible.sort(key=lambda c: c.compiles)
    if compatible and what == "mooncake" and not q.get("module"):
        print(f"recommended: none needed (sglang {q.get('sglang')} imports no mooncake "
              "process-group module)")
    elif compatible:
        best = compatible[0]
        how = ("prebuilt, the newest that fits" if not best.compiles else
               "the newest that fits; it compiles at first import (nothing prebuilt fits)")
        print(f"recommended: {best.requirement} ({how})")
    scope = ", ".join(f"{k} {_listed(v) if isinstance(v, list) else v}"
                      for k, v in q.items() if k not in ("names", "backends") and v is not None)
    print(f"# {what} compatible with {scope}")
    if q.get("module"):
        print(f"# needs {q['module']}: names {', '.join(q.get('names') or []) or '-'}; "
              f"backends {', '.join(q.get('backends') or []) or '-'}")
    said = res.notes or ()
    for note in said:
        print(f"# note: {note}")
    if not compatible:
        print(f"none compatible ({len(res.excluded)} excluded, {len(res.unknown)} unknown)")
    for c in compatible[:_SHOWN]:
        wheels = c.wheels or ()
        pys = sorted({w.python for w in wheels})
        arches = sorted({w.arch for w in wheels})
        torches = sorted({w.torch for w in wheels})
        print(f"{c.requirement or c.version:50} python {_listed(pys)}  {','.join(arches)}"
              f"  torch {','.join(torches)}")
        for note in c.notes or ():
            if note not in said:  # said once above
                print(f"    note: {note}")
    if len(compatible) > _SHOWN:
        print(f"… and {len(compatible) - _SHOWN} more compatible (--json lists all)")
    _print_excluded(res.excluded, what, why or not compatible)
    for c in res.unknown:
        print(f"  unknown  {c.dist or what} {c.version}: {c.reason}")


def _print_excluded(excluded: tuple[Candidate, ...], what: str, each: bool) -> None:
    """One line per reason, the releases it excludes named together (``each``); else
    counted per distribution, by the check that excludes them."""
    if each:
        by_reason: dict[str, dict[str, list[str]]] = {}
        for c in excluded:
            by_reason.setdefault(c.reason or "", {}).setdefault(
                c.dist or what, []).append(c.version)
        for reason, dists in by_reason.items():
            if len(dists) == 1:
                ((name, versions),) = dists.items()
                print(f"  excluded {name} {_listed(versions, 6)}: {reason}")
            else:
                n = sum(map(len, dists.values()))
                print(f"  excluded {n} releases of {_listed(sorted(dists), 3)}: {reason}")
        return
    per: dict[str, dict[str, int]] = {}
    for c in excluded:
        reason = c.reason or ""
        check = reason.split(":", 1)[0] if ":" in reason[:40] else "other"
        counts = per.setdefault(c.dist or what, {})
        counts[check] = counts.get(check, 0) + 1
    for name, counts in per.items():
        total = sum(counts.values())
        parts = ", ".join(f"{k} ×{n}" for k, n in sorted(counts.items(), key=lambda x: -x[1]))
        print(f"  excluded {name}: {total} release{'s' * (total != 1)} ({parts}; --why "
              "says why each)")


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


def _finish_which(res: Which, args: argparse.Namespace) -> int:
    if args.json:
        _emit_json(res.to_json())
    else:
        _print_which(res, args.what, args.why)
    return 0 if res.compatible else 1


def _which_mooncake_fast(args: argparse.Namespace) -> Which | None:
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
        from resolver.inputs import canonical_name

        dist = canonical_name(args.dist)
        if dist not in {d for d, _ in table.releases}:
            return None  # let the full path say what is wrong with it
    from resolver.answers import Which

    return Which.from_json(table.which_mooncake(
        args.sglang, python=normalize_python(args.python), arch=normalize_arch(args.arch),
        dist=dist))


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
        _emit_json(res.to_json())
    else:
        ev = res.evaluated
        print(f"sglang {sglang} + {mooncake} + torch {ev['torch'] or 'as required'} on "
              f"{ev['python'] or 'any python'} {ev['arch'] or 'any platform'}: "
              f"{res.verdict.upper()}")
        if not res.checks:
            for r in res.reasons:
                print(f"  {r}")
        marks = {True: "ok  ", False: "FAIL", None: "??  "}
        for c in res.checks:
            print(f"  [{marks[c['ok']]}] {c['name']}: {c['detail']}")
            for e in c["evidence"]:
                print(f"         evidence: {e}")
        for n in res.notes:
            print(f"  note: {n}")
        others = [c for c in res.combinations if (c["torch"], c["python"], c["arch"])
                  != (ev["torch"], ev["python"], ev["arch"])]
        if others:
            verdicts = _count(c["verdict"] for c in others)
            print("  other combinations: " + ", ".join(f"{v} {k}" for k, v in verdicts.items())
                  + " (see --json, or pass --python/--arch/torch==)")
    return {"compatible": 0, "incompatible": 1}.get(res.verdict, 1)


def cmd_pins(args: argparse.Namespace) -> int:
    from resolver import pins, pins_output

    if len(args.match or []) != len(args.dep or []):
        _fatal("each --match needs a --dep (the package its currentValue is a version of)",
               "e.g. --match 'sglang_ref: v(?P<currentValue>\\S+)' --dep sglang")
    found = _read_pin_files(args.files, list(zip(args.match or [], args.dep or [],
                                                  strict=True)))
    if not found:
        raise pins_output.nothing_pinned(args.files)
    pinned = pins.pinned_set(found)
    pins.check_versions(pinned)
    verdict = pins.judge(_graph(args), pinned, python=args.python, arch=args.arch,
                         strategy=args.strategy, keep=args.keep)
    if args.json:
        _emit_json(pins_output.report_json(found, pinned, verdict))
    else:
        print("\n".join(pins_output.report_lines(found, pinned, verdict)))
    if (args.diff or args.write) and verdict.updates:
        _rewrite_pins(found, list(verdict.updates), write=args.write)
    return pins_output.exit_code(pinned, verdict, exit_zero=args.exit_zero)


def _rewrite_pins(found: Any, updates: list[dict[str, Any]], *, write: bool) -> None:
    """Print the unified diff of the updates; with ``write``, apply it (atomically, per file,
    line endings, mode and symlinks kept)."""
    import os

    from resolver import pins_rewrite

    plan = pins_rewrite.plan_rewrite(found, updates)
    (sys.stderr if write else sys.stdout).writelines(plan.diff())
    for problem in plan.problems:
        print(f"not written: {_shown(problem)}", file=sys.stderr)
    if write:
        for p, written in pins_rewrite.write_rewrite(plan):
            print(f"wrote {p}" + (f" (through the symlink, to {written})"
                                  if written != os.path.abspath(p) else ""), file=sys.stderr)


def cmd_renovate(args: argparse.Namespace) -> int:
    from resolver import pins

    if not args.files and args.sglang is None:
        _fatal("`renovate` needs --sglang VERSION or the files that pin it",
               "e.g. moonpin renovate --sglang 0.5.18, or moonpin renovate requirements.txt")
    pinned = pins.pinned_set(_read_pin_files(args.files)) if args.files else None
    stack = pins.stack_of(pinned, args.sglang, shown=_shown(", ".join(args.files or [])))
    _version_arg(stack.sglang, "--sglang" if args.sglang else "the sglang pin")
    plan = pins.plan_stack(_graph(args), stack.sglang, torch=stack.torch, dist=stack.dist,
                           current_mooncake=stack.mooncake, python=args.python,
                           arch=args.arch, allow_jit=args.allow_jit)
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


def _shown(text: str, limit: int = 300) -> str:
    """An echoed input cut to ``limit`` characters, saying how many were left out."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more characters)"


def _read_pin_files(files: list[str], patterns: list[tuple[str, str]] | None = None,
                    ) -> list[Any]:
    """``pins.read_pins`` for the CLI: every unreadable file or line printed, then exit 2."""
    from resolver import pins

    try:
        return pins.read_pins_or_fail(files, patterns or [])
    except pins.PinsUnreadable as e:
        for line in e.details:
            print(line, file=sys.stderr)
        _fatal(str(e), e.hint)


def cmd_constraints(args: argparse.Namespace) -> int:
    from resolver import pins, pins_constraints

    _version_arg(args.sglang, "--sglang")
    g = _graph(args)
    plan = pins.plan_stack(g, args.sglang, python=args.python, arch=args.arch,
                           allow_jit=args.allow_jit)
    if not plan.mooncake:
        _fatal(f"no mooncake release in the knowledge base fits sglang {_shown(args.sglang)}",
               f"`moonpin which mooncake --sglang {_shown(args.sglang)} --why` says why",
               code=1)
    sys.stdout.write(pins_constraints.render(
        g, plan, args.format, where=pins_constraints.judged_for(args.python, args.arch)))
    return 0


def cmd_args(args: argparse.Namespace) -> int:
    from resolver import launch_check

    launches, findings = launch_check.gather(args.file or (), args.format, args.launch or ())
    report = launch_check.check_launches(
        _graph(args), launches, findings, sglang=args.sglang,
        authoritative=args.authoritative, python=args.python, timeout=args.timeout,
        many=bool(args.file))
    if args.json:
        _emit_json(report.to_json())
    else:
        for line in report.lines(verbose=args.verbose):
            print(line)
    return report.exit_code()


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


# ---------------------------------------------------------------------- spelling


class _Pools:
    """The releases the KB holds, for reading what users type (``latest``, ``v0.5.18``,
    "did you mean"): first from the derived tables (a few milliseconds), the whole KB's
    JSON (standard library, no pydantic) only when those do not decide."""

    def __init__(self, kb_path: Path) -> None:
        self.kb_path = kb_path
        self._sglang: list[str] | None = None
        self._mooncake: dict[str, list[str]] | None = None
        self._full: tuple[list[str], list[str], dict[str, list[str]]] | None = None
        self._full_read = False

    def fast_sglang(self) -> list[str]:
        """The SGLang releases of the index, from ``resolved/_sglang.json`` ([] when it
        is missing or stale)."""
        if self._sglang is None:
            from resolver import resolved

            self._sglang = list(resolved.load_requirements(self.kb_path) or {})
        return self._sglang

    def fast_mooncake(self) -> dict[str, list[str]]:
        """The mooncake releases by distribution (unread ones too), from one release's
        table ({} when there is none)."""
        if self._mooncake is None:
            from resolver import resolved

            full = self.full() if resolved.load_facts(self.kb_path) is not None else None
            if full is not None:  # the facts, which the command then answers from
                self._mooncake = full[2]
                return self._mooncake
            self._mooncake = {}
            reqs = resolved.load_requirements(self.kb_path) or {}
            with_module = [v for v, m in reqs.items() if m.get("module")]
            table = resolved.load(self.kb_path, with_module[-1]) if with_module else None
            if table is not None:
                pairs = [(d, v) for d, v in table.releases] + [
                    (u.get("dist"), u.get("version")) for u in table.doc.get("unread", ())
                    if isinstance(u, dict)]
                for d, v in pairs:
                    if isinstance(d, str) and isinstance(v, str):
                        self._mooncake.setdefault(d, []).append(v)
        return self._mooncake

    def full(self) -> tuple[list[str], list[str], dict[str, list[str]]] | None:
        """(SGLang releases of the index, every SGLang version the KB names — local
        records and unread ones too —, mooncake releases by distribution, unread ones
        too); None when the KB cannot be read (the command then says why)."""
        if not self._full_read:
            self._full_read = True
            from resolver.resolved import load_facts

            facts = load_facts(self.kb_path)  # read once: the command answers from them
            if facts is not None:
                mc: dict[str, list[str]] = {}
                for m in facts.mooncake:
                    mc.setdefault(m.dist, []).append(m.version)
                for u in facts.unread:
                    if u.kind == "mooncake":
                        mc.setdefault(u.name, []).append(u.version)
                self._full = ([s.version for s in facts.sglang if s.source == "index"],
                              [s.version for s in facts.sglang]
                              + [u.version for u in facts.unread if u.kind == "sglang"], mc)
                return self._full
            from kb.files import loads_json, read_regular

            try:  # kb.store's cap, without importing pydantic's models
                doc = loads_json(read_regular(self.kb_path, cap=256 << 20,
                                              what="knowledge base"))
                index = [r["version"] for r in doc["sglang"] if r.get("source") == "index"]
                every = [r["version"] for r in doc["sglang"]] + [
                    u["version"] for u in doc.get("unread", ()) if u.get("kind") == "sglang"]
                mooncake: dict[str, list[str]] = {}
                for r in doc["mooncake"]:
                    mooncake.setdefault(r["dist"], []).append(r["version"])
                for u in doc.get("unread", ()):
                    if u.get("kind") == "mooncake":
                        mooncake.setdefault(u["name"], []).append(u["version"])
                texts = [*index, *every, *mooncake, *(v for vs in mooncake.values() for v in vs)]
                if not all(isinstance(v, str) for v in texts):
                    raise TypeError("a version is not a string")
                self._full = (index, every, mooncake)
            except (MoonpinError, OSError, ValueError, KeyError, TypeError, AttributeError):
                self._full = None  # a KB edited by hand: the command says what is wrong
        return self._full

    def sglang(self, text: str, flag: str) -> str:
        """An SGLang release as typed -> the KB's spelling of it."""
        from resolver import spelling

        fast = self.fast_sglang()
        if spelling.strip_v(text) in fast:  # as the KB spells it: nothing to parse
            return spelling.strip_v(text)
        if spelling.is_latest(text):
            full = None if fast else self.full()
            return spelling.release(text, fast or (full[0] if full else []), flag=flag)
        version = spelling.version(text, flag=flag, pool=fast or (self.full() or [[]])[0])
        if version in fast:
            return version
        full = self.full()
        if full is None:
            return version  # the command says what is wrong with the KB
        return _same_or(version, full[1],
                        lambda: spelling.not_known(version, full[0] or full[1], flag=flag))

    def mooncake(self, dist: str, text: str, flag: str | None = None, *,
                 what: str = "mooncake distribution") -> tuple[str, str]:
        """A mooncake distribution and release as typed -> the KB's spellings."""
        from resolver import spelling

        fast = self.fast_mooncake()
        pools = fast or (self.full() or ([], [], {}))[2]
        if not pools:
            return dist, spelling.strip_v(text)
        name = spelling.name(dist, [*pools, *(["sglang"] if what != "mooncake distribution"
                                              else [])], what=what)
        flag = flag or f"{name}=="
        if spelling.is_latest(text):
            return name, spelling.release(text, pools[name], what=name, flag=flag)
        version = spelling.version(text, what=name, flag=flag, pool=pools[name])
        return name, _same_or(version, pools[name],
                              lambda: spelling.not_known(version, pools[name], what=name,
                                                         flag=flag))

    def dist(self, text: str) -> str:
        from resolver import spelling

        fast = self.fast_mooncake()
        pools = fast or (self.full() or ([], [], {}))[2]
        return spelling.name(text, pools) if pools else text


def _same_or(version: str, pool: list[str], error: Any) -> str:
    """``pool``'s spelling of ``version``; raise ``error()`` when it has none."""
    from packaging.version import Version

    v = Version(version)
    for p in pool:
        try:
            if Version(p) == v:
                return p
        except ValueError:  # InvalidVersion is a ValueError
            continue
    raise error()


def _spell_inputs(args: argparse.Namespace) -> None:
    """Read the releases, distributions, pythons and platforms given the way users type
    them (``latest``, ``v0.5.18``, ``V0.5.18``, ``amd64``) into the KB's own spelling,
    before any command runs: every path (the fast tables too) then sees one version, and a
    typo is refused here, exit 2, with what was probably meant."""
    from resolver import spelling
    from resolver.inputs import normalize_arch, normalize_python

    cmd = args.command
    if cmd in ("which", "explain", "pins", "renovate", "constraints", "triples"):
        normalize_python(getattr(args, "python", None))  # only checked: outputs quote it
        normalize_arch(getattr(args, "arch", None))
    if cmd not in ("which", "explain", "show", "renovate", "constraints", "args", "triples"):
        return
    pools = _Pools(_kb_path(args))
    if cmd != "triples" and getattr(args, "sglang", None):
        args.sglang = pools.sglang(args.sglang, "--sglang ")
    if getattr(args, "torch", None) and cmd != "triples":
        args.torch = spelling.version(args.torch, what="torch", flag="--torch ")
    if getattr(args, "dist", None):
        args.dist = pools.dist(args.dist)
    if cmd == "triples":  # specifiers; a bare release as users type it means ==release
        if args.sglang and (spelling.is_latest(args.sglang)
                            or spelling.strip_v(args.sglang) != args.sglang.strip()):
            args.sglang = "==" + pools.sglang(args.sglang, "--sglang ")
        if args.torch and spelling.strip_v(args.torch) != args.torch.strip():
            args.torch = "==" + spelling.version(args.torch, what="torch", flag="--torch ")
    if cmd == "which" and args.mooncake:
        dist, version = spelling.split_release(args.mooncake)
        args.mooncake = "==".join(pools.mooncake(dist, version))
    if cmd == "show":
        name, version = spelling.split_release(args.release)
        if name == "sglang":
            args.release = f"sglang=={pools.sglang(version, 'sglang==')}"
        else:
            args.release = "==".join(pools.mooncake(name, version, what="release name"))
    if cmd == "explain":
        out = []
        for item in args.releases:
            name, version = spelling.split_release(item)
            if name == "sglang":
                version = pools.sglang(version, "sglang==")
            elif name == "torch":
                version = spelling.version(version, what="torch", flag="torch==")
            else:
                name, version = pools.mooncake(name, version)
            out.append(f"{name}=={version}")
        args.releases = out


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
    """moonpin's version and the KB's scrape date (read with the standard library only).
    The version is the one a scrape records (``importlib.metadata`` costs 40 ms; a test
    holds the constant to pyproject's)."""
    from kb.paths import default_kb_file
    from scrapers import __version__ as mine

    path = kb or default_kb_file()
    from resolver.resolved import load_facts

    facts = load_facts(path)  # a fifth of the KB's bytes, when they belong to it
    if facts is not None:
        when = facts.scrape.scraped_at.isoformat()
    else:
        try:
            from kb.files import loads_json, read_regular

            doc = loads_json(read_regular(path, cap=256 << 20, what="knowledge base"))
            when = doc["scrape"]["scraped_at"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            when = f"unreadable: {str(e)[:120]}"
    return f"moonpin {mine}; knowledge base {path}, scraped {when}"


def build_parser(with_matrix: Any = None, only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; ``only``: a command named on it, whose parser alone is
    built (argparse builds each parser and its formatter eagerly: all of them cost a query
    a tenth of its time). ``with_matrix`` adds the matrix command's own options."""
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
    p.add_argument("--kb", help="knowledge-base file (default: $MOONPIN_KB, else the newer of "
                   "the user KB `moonpin scrape` writes and the shipped one)")
    p.add_argument("--version", action="store_true", dest="show_version",  # not scrape's
                   help="print moonpin's version and when its knowledge base was scraped")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("help", help="this help, or a command's: moonpin help which")
    builders: dict[str, Any] = {
        "scrape": _add_scrape, "kb": _add_kb, "show": _add_show, "which": _add_which,
        "explain": _add_explain, "check": _add_check,
        "matrix": lambda sub: _add_matrix(sub, with_matrix), "pins": _add_pins,
        "renovate": _add_renovate, "constraints": _add_constraints, "args": _add_args,
        "triples": _add_triples}
    kb: argparse.ArgumentParser | None = None
    for name, add in builders.items():
        if only is None or only == name or only not in builders:
            made = add(sub)
            kb = made if name == "kb" else kb
    _document(sub, kb)
    return p


def _add_scrape(sub: Any) -> None:
    import argparse

    s = sub.add_parser("scrape", help="read releases from the index into the KB")
    s.add_argument("--only", choices=["sglang", "mooncake", "torch"],
                   help="refresh only this kind of release (default: all three)")
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
    s.add_argument("--json", action="store_true", help="print the summary as JSON")
    s.add_argument("--kb", dest="kb_sub", help=argparse.SUPPRESS)
    s.set_defaults(func=cmd_scrape)


def _add_kb(sub: Any) -> argparse.ArgumentParser:
    import argparse

    k = sub.add_parser("kb", help="about the knowledge base")
    ksub = k.add_subparsers(dest="kb_command", required=True)
    ki = ksub.add_parser("info", help="which KB is read, when it was scraped, counts and "
                         "coverage")
    ki.add_argument("--json", action="store_true", help="print it as JSON")
    ki.add_argument("--kb", dest="kb_sub", help=argparse.SUPPRESS)
    ki.set_defaults(func=cmd_kb_info)
    kr = ksub.add_parser("resolve", help="re-derive the resolved/ folder beside the KB (one "
                         "table of answers per SGLang release, read by the fast paths); "
                         "`moonpin scrape` does it after every write")
    kr.add_argument("--kb", dest="kb_sub", help=argparse.SUPPRESS)
    kr.set_defaults(func=cmd_kb_resolve)
    made: argparse.ArgumentParser = k
    return made


def _add_show(sub: Any) -> None:
    import argparse

    sh = sub.add_parser("show", help="what the KB holds for one release")
    sh.add_argument("release", help="e.g. sglang==0.5.18 or "
                    "mooncake-transfer-engine-cuda13==0.3.13.post1")
    sh.add_argument("--json", action="store_true", help="print the KB's record as JSON")
    sh.add_argument("--kb", dest="kb_sub", help=argparse.SUPPRESS)
    sh.set_defaults(func=cmd_show)


def _scope(sp: argparse.ArgumentParser) -> None:
    """The options every query command shares."""
    import argparse

    sp.add_argument("--python", help="3.12 or cp312 (default: every python the wheels "
                    "cover)")
    sp.add_argument("--arch", help="x86_64 or aarch64 (default: both)")
    sp.add_argument("--json", action="store_true",
                    help="print the answer as JSON (shapes in the README)")
    sp.add_argument("--kb", dest="kb_sub", help=argparse.SUPPRESS)


def _add_which(sub: Any) -> None:

    w = sub.add_parser("which", help="which mooncake / sglang / torch works with the rest")
    w.add_argument("what", choices=["mooncake", "sglang", "torch"],
                   help="what to find: mooncake needs --sglang; sglang needs --mooncake; "
                   "torch needs both")
    w.add_argument("--sglang", metavar="VERSION", help="the SGLang release, e.g. 0.5.18, "
                   "v0.5.18 or latest")
    w.add_argument("--mooncake", metavar="DIST==VERSION", help="the mooncake release, e.g. "
                   "mooncake-transfer-engine-cuda13==0.3.13.post1 (or DIST==latest)")
    w.add_argument("--torch", metavar="VERSION", help="e.g. 2.13.0 or 2.13.0+cu126 "
                   "(default: what the SGLang release requires)")
    w.add_argument("--dist", metavar="NAME", help="only this mooncake distribution")
    w.add_argument("--why", action="store_true", help="also list every excluded candidate")
    _scope(w)
    w.set_defaults(func=cmd_which)


def _add_explain(sub: Any) -> None:

    e = sub.add_parser("explain", help="every check for sglang==V DIST==V [torch==T]")
    e.add_argument("releases", nargs="+", metavar="NAME==VERSION",
                   help="sglang==V and a mooncake DIST==V (and optionally torch==T); V may "
                   "be latest")
    e.add_argument("--torch", metavar="VERSION", help="the torch, as torch==T or this option")
    _scope(e)
    e.set_defaults(func=cmd_explain)


def _add_check(sub: Any) -> None:
    sub.add_parser("check", add_help=False,
                   help="verify this image at worker start (see `moonpin check --help`)")


def _add_matrix(sub: Any, with_matrix: Any) -> None:
    if with_matrix is not None:
        with_matrix(sub)
        return
    sub.add_parser("matrix", add_help=False,
                   help="the compatibility matrix: HTML, Markdown, CSV or JSON "
                        "(see `moonpin matrix --help`)")


def _add_pins(sub: Any) -> None:

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
    _scope(pn)
    pn.set_defaults(func=cmd_pins)


def _add_renovate(sub: Any) -> None:

    rv = sub.add_parser("renovate", help="a Renovate config fragment that keeps torch and "
                        "mooncake bumps compatible with the pinned sglang")
    rv.add_argument("files", nargs="*", metavar="FILE", help="files pinning sglang")
    rv.add_argument("--sglang", metavar="VERSION", help="the SGLang release to keep "
                    "(default: the files' sglang pin)")
    rv.add_argument("--allow-jit", action="store_true", help="also allow mooncake releases "
                    "that compile their process-group extension at first import")
    _scope(rv)
    rv.set_defaults(func=cmd_renovate)


def _add_constraints(sub: Any) -> None:
    import argparse

    cn = sub.add_parser("constraints", help="a pip/uv constraints file (or [tool.uv] "
                        "constraint-dependencies) holding torch and mooncake to what an SGLang "
                        "release loads")
    cn.add_argument("--sglang", metavar="VERSION", required=True,
                    help="the SGLang release, e.g. 0.5.18 or latest")
    cn.add_argument("--format", choices=["txt", "uv"], default="txt",
                    help="txt: a constraints file for pip -c / uv pip compile -c; uv: the "
                    "[tool.uv] constraint-dependencies table")
    cn.add_argument("--allow-jit", action="store_true", help="also allow mooncake releases "
                    "that compile their process-group extension at first import")
    cn.add_argument("--python", help="3.12 or cp312 (default: every python the wheels cover)")
    cn.add_argument("--arch", help="x86_64 or aarch64 (default: both)")
    cn.add_argument("--kb", dest="kb_sub", help=argparse.SUPPRESS)
    cn.set_defaults(func=cmd_constraints)


def _add_args(sub: Any) -> None:
    import argparse

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
    ar.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    ar.add_argument("--verbose", "-v", action="store_true",
                    help="list every rule that could not be checked offline")
    ar.add_argument("--kb", dest="kb_sub", help=argparse.SUPPRESS)
    ar.add_argument("launch", nargs=argparse.REMAINDER, help="-- then the launch arguments")
    ar.set_defaults(func=cmd_args)


def _add_triples(sub: Any) -> None:

    t = sub.add_parser("triples", help="every compatible (sglang, torch, mooncake) set")
    t.add_argument("--sglang", metavar="SPEC", help="only these SGLang releases, e.g. "
                   "'>=0.5.17' (a bare version means ==)")
    t.add_argument("--torch", metavar="SPEC", help="only these torch releases")
    t.add_argument("--mooncake", metavar="SPEC", help="only these mooncake releases")
    t.add_argument("--dist", metavar="NAME", help="only this mooncake distribution")
    t.add_argument("--format", choices=["table", "json", "csv"], default="table",
                   help="table (default), json or csv")
    _scope(t)
    t.set_defaults(func=cmd_triples)


#: Each command's exit codes, printed at the end of its ``-h``.
EXIT_CODES = {
    "help": "0 always",
    "scrape": "0 every release read; 1 some releases could not be read (listed as unread, "
              "left out of the KB); 2 bad input, an index that cannot be reached or an "
              "unusable KB",
    "kb": "0 done; 2 an unusable KB, or a folder that cannot be written",
    "info": "0 done; 2 an unusable KB",
    "resolve": "0 the folder was written; 2 an unusable KB, or a folder that cannot be "
               "written (never the KB installed with moonpin)",
    "show": "0 the release is in the KB; 1 it could not be read in the last scrape; 2 bad "
            "input or a release the KB does not hold",
    "which": "0 at least one compatible result; 1 none (the reasons are printed); 2 bad input",
    "explain": "0 compatible; 1 incompatible or unknown (the failing checks are printed); "
               "2 bad input",
    "matrix": "0 at least one compatible row; 1 none; 2 bad input or an unusable KB",
    "pins": "0 compatible and nothing to do; 1 incompatible or updates proposed (0 with "
            "--exit-zero); 2 a file or line that cannot be read (nothing judged)",
    "renovate": "0 a fragment with a compatible mooncake; 1 none fits (the fragment holds "
                "what can be said); 2 bad input",
    "constraints": "0 written; 1 no mooncake release fits; 2 bad input",
    "args": "0 no rule violated; 1 a violated rule, a problem in a file, or an option the "
            "release refuses; 2 bad input",
    "triples": "0 at least one compatible set; 1 none; 2 bad input",
}


def _document(sub: Any, kb: argparse.ArgumentParser | None) -> None:
    """End every command's ``-h`` with its exit codes (and say what it does on top)."""
    import argparse

    parsers = dict(sub.choices)
    helps = {a.dest: a.help for a in sub._choices_actions}
    if kb is not None:
        kb_sub = next(a for a in kb._actions if isinstance(a, argparse._SubParsersAction))
        parsers.update({f"kb {n}": p for n, p in kb_sub.choices.items()})
        helps.update({f"kb {a.dest}": a.help for a in kb_sub._choices_actions})
    for name, sp in parsers.items():
        codes = EXIT_CODES.get(name.split()[-1])
        if codes is None or not sp.add_help:  # check: its own parser says them
            continue
        if sp.description is None and helps.get(name):
            sp.description = helps[name]
        # one paragraph: argparse's formatter wraps it
        sp.epilog = " ".join(filter(None, [sp.epilog, f"exit codes: {codes}; 130 "
                                                      "interrupted."]))


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


#: Commands that run long, hold network clients and may make cycles: the collector stays on.
_KEEPS_GC = frozenset({"scrape", "kb"})


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
    rest = args_in[len(lead):]
    if rest == ["--version"]:
        print(_version_line(lead[1] if lead else None))
        return 0
    # Only the named command's parser is built (``moonpin -h``, help and an unknown
    # command get them all).
    only = rest[0] if rest and not rest[0].startswith("-") and rest[0] != "help" else None
    parser = build_parser(only=only)
    if only == "matrix":
        # The matrix command pulls in the whole resolver; register it only when asked.
        from resolver import matrix

        parser = build_parser(with_matrix=matrix.add_parser, only=only)
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
    if args.show_version:
        print(_version_line(args.kb))
        return 0
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 0
    if getattr(args, "kb_sub", None):
        args.kb = args.kb_sub
    if args.command not in _KEEPS_GC:
        # A query is a short process whose tens of thousands of objects all live until it
        # exits and form no cycles: the cycle collector's passes over them (40% of the
        # matrix's time) free nothing. Reference counting still frees what is dropped.
        import gc

        gc.disable()
    try:
        _spell_inputs(args)
        code: int = args.func(args)
    except MoonpinError as e:  # bad input: exit 2, and a tip even where none was given
        _fatal(str(e), e.hint or f"`moonpin {args.command} --help` says what it takes")
    except KeyboardInterrupt:
        print("moonpin: interrupted; the KB file was not changed", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    raise SystemExit(main())
