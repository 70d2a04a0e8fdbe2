"""What the installed SGLang release needs, checked against the image: its process-group
requirement (its sources, else the knowledge base), the torch it pins, and the elastic-EP
rules on the worker's launch arguments."""

from __future__ import annotations

import os

from moonpin.preflight.installed.image_facts import (
    Dist,
    KBView,
    analyze_sglang,
    canon,
    locate,
    read_bytes,
    record_paths,
    sglang_sources,
)
from moonpin.preflight.installed.image_facts import Requirement as _Requirement
from moonpin.preflight.installed.where import editable_dist
from moonpin.preflight.pyimport.importer import Sources
from moonpin.preflight.result import CheckResult

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    from moonpin.preflight.access.confined import Confined
    from moonpin.preflight.env.context import Context
    from moonpin.preflight.judge.fixes import Fixer

__all__ = ["check_launch", "check_sglang_torch",
           "kb_launch", "sglang_requirement"]


def sglang_requirement(ctx: Context, sglang: Dist | None, kb: KBView,
                        add: Callable[[CheckResult], None],
                        source_cache: bool = True, pkg: Sources | None = None,
                        ahead: Callable[[], Any] | None = None, *,
                        modules: Sequence[str]) -> _Requirement | None:
    """What the installed SGLang needs of the project whose rule says its own lines: which
    of its ``modules`` it imports (``mooncake.pg``, else ``mooncake.ep``), the names and
    backends it uses (its sources, else the KB's record). ``pkg``: the files ``import
    sglang.<x>`` loads (:func:`moonpin.preflight.installed.image_facts.sglang_sources`; None:
    looked up here).
    ``ahead``: work begun in a child on a second core while the sources are read (the walk's
    other long piece, :mod:`moonpin.preflight.prefetch`), its answer left on ``ctx.run``."""
    if ahead is not None:
        from moonpin.preflight import prefetch

        child = prefetch.start(ahead)
        if child is not None:
            ctx.run.pending.append(child)
    version = sglang.version if sglang else None
    project = modules[0].partition(".")[0]
    either = " or ".join(modules)
    kb_req = kb.requirement(version)
    if pkg is None:
        pkg = sglang_sources(ctx)
    found = pkg.found if pkg is not None else locate(ctx, "sglang")
    editable = (found is not None and found.editable) or bool(
        pkg is not None and any(h.startswith("editable") for h in pkg.via)) \
        or editable_dist(sglang, ctx.confined)
    src: _Requirement | None = None
    why = "the sglang package folder was not found"
    if found is not None and found.module:
        why = f"{found.folder} is a module, not the sglang package"
    if pkg is not None:
        try:
            src = analyze_sglang(pkg, source_cache)
        except OSError as e:
            why = f"its sources cannot be read ({type(e).__name__}: {e.filename}: {e.strerror})"
    label = f"sglang {version}" if version else "sglang (no distribution metadata)"
    if pkg is not None:  # where the importer finds it
        label += f" from {_where_label(pkg, editable)}"
    if src is not None:
        what = _describe(src, project)
        if kb_req is not None and (kb_req.module, set(kb_req.names)) != (src.module,
                                                                         set(src.names)):
            add(CheckResult("sglang", "warn",
                            f"{label}: the installed sources need {what}, the KB records "
                            f"{_describe(kb_req, project)}; using the sources",
                            "refresh the KB (`moonpin scrape`) if this is a release build",
                            src.evidence))
        else:
            note = "" if kb_req is not None or not kb.ok else " (not in the KB: sources only)"
            add(CheckResult("sglang", "pass", f"{label} needs {what}{note}",
                            evidence=src.evidence))
        return src
    if found is None and sglang is not None:
        lost = _unimportable(sglang, ctx)
        if lost is not None:  # the worker's `import sglang` raises ModuleNotFoundError
            add(CheckResult("sglang", "fail", f"{label}: `import sglang` finds no sglang "
                            f"package, though the distribution installed {lost[0]}",
                            lost[1], lost[2]))
            return None
    if kb_req is not None:
        add(CheckResult("sglang", "warn", f"{label}: {why}; using the KB record: "
                        f"{_describe(kb_req, project)}"))
        return kb_req
    if sglang is None and pkg is None:
        add(CheckResult("sglang", "warn", "sglang is not installed here; accepting either "
                        + either))
    else:
        add(CheckResult("sglang", "warn", f"{label}: {why} and the KB has no record of it; "
                        f"accepting either {either}"))
    return None


def _where_label(pkg: Sources, editable: bool) -> str:
    """Where SGLang's modules come from, in words: the package's folder, or, when ``import
    sglang`` finds a namespace package whose modules an editable finder supplies (a
    checkout's root found from the working folder), both."""
    found = pkg.found
    finders = sorted((n, how) for how, n in pkg.via.items() if how != found.how
                     and how.startswith("editable "))
    if found.how != "namespace" or not finders:
        return found.folder + (" (editable)" if editable else "")
    kind, _, file = finders[-1][1].partition(" finder ")
    main = pkg.roots[0] if pkg.roots else found.folder
    return (f"{main} (editable; `import sglang` finds the namespace portion "
            f"{', '.join(found.portions)}, its modules come through the "
            f"{kind.removeprefix('editable ')} editable finder {file})")


def _dist_folders(dist: Dist) -> list[str]:
    """``dist``'s ``.dist-info`` (and ``.egg-info``) folders in its site folder."""
    try:
        return sorted(e.path for e in os.scandir(dist.root)
                      if e.name.endswith((".dist-info", ".egg-info"))
                      and canon(e.name.rpartition(".")[0].split("-", 1)[0]) == dist.name)
    except OSError:
        return []


#: The largest RECORD read (SGLang's lists ~4,000 files in ~0.5 MB), and the most of its
#: entries looked at (a hostile one: 16 MiB of newlines would be 16 M strings at once).
_CAP_RECORD = 16 << 20
_MAX_RECORDED = 100_000


def _unimportable(dist: Dist, ctx: Context
                  ) -> tuple[str, str, tuple[str, ...]] | None:
    """When the importer finds no ``sglang`` but ``dist`` installed files for it (its
    RECORD lists files outside its metadata folder: the package, or an editable install's
    ``.pth`` and finder): what it installed (in words), the fix line and the evidence.
    None for a distribution of metadata alone (nothing to import was installed)."""
    from moonpin.preflight.pyimport.sitefiles import finder_facts, finder_kind, pth

    for folder in _dist_folders(dist):
        try:
            listed = record_paths(folder, _CAP_RECORD, within=ctx.confined)
        except OSError:
            continue
        meta = os.path.basename(folder) + "/"
        files = []
        for f in listed:
            if f and not f.startswith((meta, "../", "/")) and not f.endswith(".pyc"):
                files.append(f)
                if len(files) >= _MAX_RECORDED:
                    break
        if not files:
            continue
        named: list[str] = []  # the folders and files its editable redirects name
        hatch = any(f.endswith(".py") and finder_kind(f[:-3]) == "hatch" for f in files) \
            and locate(ctx, "editables") is None  # its redirect's import fails
        for f in files:
            path = os.path.join(dist.root, f)
            if f.endswith(".pth") and "/" not in f:
                named += [os.path.normpath(os.path.join(dist.root, d))
                          for d in pth(path, ctx.confined)[0]]
            elif f.endswith(".py") and "/" not in f and finder_kind(f[:-3]) is not None:
                facts = finder_facts(path, ctx.confined)
                named += [v for k, v in facts.get("mapping", {}).items() if k == "sglang"]
                named += [t for k, t in facts.get("redirects", ()) if k == "sglang"]
        missing = [d for d in dict.fromkeys(named) if not os.path.exists(d)]
        editable = editable_dist(dist, ctx.confined) or bool(named)
        what = (f"an editable install ({', '.join(files[:2])})" if editable
                else f"{len(files)} files ({', '.join(files[:2])}, ...)")
        if missing:
            what += f" that names {', '.join(missing)}, which does not exist"
        if hatch:
            what += ((" and" if missing else "") + " whose redirect cannot be imported "
                     "(hatchling's imports the `editables` package)")
        elif not missing:
            what += (" whose import hook finds nothing (a module it imports is missing?)"
                     if editable else "; they are gone")
        url = _direct_url(folder, ctx.confined) if editable else None
        if url is None:
            fix = f"pip install --force-reinstall --no-deps 'sglang=={dist.version}'"
        elif os.path.isdir(url):
            fix = f"reinstall it from its checkout: pip install -e {url}"
        else:
            fix = (f"put its checkout back at {url}, or install SGLang again (`pip install -e "
                   "<checkout>/python`, or a release)")
        if hatch:
            fix = "pip install editables" + (f"; {fix}" if missing else "")
        return what, fix, (folder,)
    return None


def _direct_url(folder: str, within: Confined) -> str | None:
    """The local folder an editable install was made from (``direct_url.json``'s
    ``file://`` URL)."""
    import json

    try:
        doc = json.loads(read_bytes(os.path.join(folder, "direct_url.json"),
                                    what="direct_url.json", within=within))
    except (OSError, ValueError, RecursionError):
        return None
    url = doc.get("url") if isinstance(doc, dict) else None
    if not isinstance(url, str) or not url.startswith("file://"):
        return None
    from urllib.parse import unquote

    return unquote(url[len("file://"):]) or None


def _describe(r: _Requirement, project: str) -> str:
    if r.module is None:
        return f"no {project} process-group module"
    names = ", ".join(r.names) or "no names"
    backends = ", ".join(r.backends) or "no backend literals"
    return f"{r.module} ({names}; backends {backends})"


_VERSION_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.+")


def _exact_pin(spec: str) -> str | None:
    """The version of ``torch==X`` (also ``torch (==X)``, spaces allowed), else None."""
    rest = spec.strip()
    if not rest.startswith("torch"):
        return None
    rest = rest[5:].strip()
    if rest.startswith("(") and rest.endswith(")"):
        rest = rest[1:-1].strip()
    if not rest.startswith("=="):
        return None
    version = rest[2:].strip()
    if not version or not version[0].isdigit() or not set(version) <= _VERSION_CHARS:
        return None
    return version


def _requirement_name(line: str) -> str:
    """The project name a ``Requires-Dist`` line starts with."""
    text = line.strip()
    for i, c in enumerate(text):
        if c.isspace() or c in ";<>=!~[(":
            return text[:i]
    return text


def check_sglang_torch(sglang: Dist, torch_version: str, fixer: Fixer,
                        add: Callable[[CheckResult], None], markers: Mapping[str, str]) -> None:
    """SGLang pins the torch it is built for (``torch==2.14.1``): another one passes the
    extensions' checks and still breaks SGLang's own kernels. A warning (``--strict`` fails).
    ``markers``: the target's marker environment (:attr:`Context.markers`), in which a pin's
    marker is evaluated."""
    lines = [ln for ln in sglang.requires  # ~130 lines: only those starting "torch" parsed
             if ln.lstrip()[:5].lower() == "torch" and canon(_requirement_name(ln)) == "torch"]
    unmet: list[str] = []
    for line in lines:
        spec, _, marker = line.partition(";")
        spec = spec.strip()
        if "extra" in marker:
            continue  # an optional extra's pin does not bind the base install
        pinned = _exact_pin(spec)
        if pinned and not marker.strip():  # the usual case, without loading packaging
            if torch_version.split("+")[0] != pinned.split("+")[0]:
                unmet.append(spec)
            continue
        from packaging.requirements import InvalidRequirement, Requirement

        try:
            r = Requirement(line[:4096])
            if r.marker is not None and not r.marker.evaluate({**markers, "extra": ""}):
                continue
            if not r.specifier.contains(torch_version.split("+")[0], prereleases=True):
                unmet.append(spec)
        except (InvalidRequirement, ValueError, TypeError, LookupError):
            # an invalid line or marker (UndefinedComparison is a ValueError, an undefined
            # environment name a LookupError) says nothing about the pin
            continue
    if unmet:
        add(CheckResult("torch requirement", "warn",
                        f"sglang {sglang.version} requires {', '.join(unmet)}; torch "
                        f"{torch_version} is installed (its own kernels are built for that "
                        "torch)", fixer.torch_fix(_exact_pin(unmet[0]), unmet[0]),
                        (os.path.join(sglang.root,
                                      f"sglang-{sglang.version}.dist-info", "METADATA"),)))


def kb_launch(kb: KBView, version: str) -> Any:
    """The KB's launch-rules record of SGLang ``version`` (its resolved table, else the
    KB file's own record), or None."""
    if not kb.ok:
        return None
    from moonpin.resolver.tables.per_release import load_launch

    record = load_launch(kb.path, version)
    if record is None:
        rec = next((r for r in (kb.doc() or {}).get("sglang") or ()
                    if isinstance(r, dict) and r.get("version") == version), None)
        record = rec.get("launch") if isinstance(rec, dict) else None
    return record


def check_launch(argv: list[str], version: str | None, kb: KBView,
                  add: Callable[[CheckResult], None], own: dict[str, Any] | None = None
                  ) -> None:
    """The elastic-EP argument rules of the installed SGLang release on the worker's launch
    arguments: what ``moonpin args`` does, at worker start. ``own``: the rules read from
    the installed sources (:mod:`moonpin.preflight.installed.launch_src`: an editable checkout,
    or a release the KB does not know), which then decide; else the KB's record."""
    if version is None and own is None:
        add(CheckResult("launch args", "skip", "SGLang is not installed: no rules to check"))
        return
    record = own
    if own is not None:
        version = f"{version or '(no distribution metadata)'} (its installed sources)"
    elif version is not None:
        record = kb_launch(kb, version)
    if not isinstance(record, dict) or record.get("error"):
        why = (record or {}).get("error") if isinstance(record, dict) else None
        add(CheckResult("launch args", "skip", f"the knowledge base holds no elastic-EP launch "
                        f"rules for sglang {version}" + (f" ({why})" if why else "")))
        return
    from moonpin.resolver.args import rules as la

    accepted = record.get("option_names") or None
    try:
        flags, rules, constants = la.rules_from_json(record)
        parsed = la.parse_launch(flags, argv, accepted)
        verdicts = la.check(rules, flags, argv, constants=constants, parsed=parsed)
        strange = parsed[la.UNRECOGNIZED]
    except (KeyError, TypeError) as e:
        add(CheckResult("launch args", "warn", f"the KB's launch rules for sglang {version} "
                        f"are unreadable ({type(e).__name__}: {e})",
                        "run `moonpin scrape --full` to rebuild the KB"))
        return
    except ValueError as e:  # SGLang's own parser rejects this line too
        add(CheckResult("launch args", "fail", f"sglang {version} rejects the launch "
                        f"arguments: {e}", "fix the launch arguments"))
        return
    if isinstance(strange, list) and strange:
        add(CheckResult("launch args", "warn", f"sglang {version} has no option "
                        f"{', '.join(strange)}{la.meant(strange, accepted)}: launched by "
                        "SGLang itself the worker stops with 'unrecognized arguments' (a "
                        "wrapper such as Dynamo's may own them)",
                        "drop or rename them as this release spells its options"))
    bad = [v for v in verdicts if v.status == "violated"]
    unchecked = sum(v.status == "not checked" for v in verdicts)
    for v in bad:
        add(CheckResult("launch args", "fail", v.message,
                        "change " + ", ".join(v.flags) + " as the message says", (v.evidence,)))
    if not bad:
        add(CheckResult("launch args", "pass", f"{len(verdicts)} elastic-EP argument rules of "
                        f"sglang {version} hold ({unchecked} not checkable offline)"))
