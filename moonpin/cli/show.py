"""``moonpin show``: one release's record in the KB, as text or JSON.

The record comes from the release's stamped ``resolved/_show-<name>-<version>.json`` when
that belongs to the KB (see :mod:`moonpin.resolver.tables`), else from the KB itself through
pydantic. The text is printed from the JSON form, whose shape is checked first: a record
of another shape (a hand-edited KB) is never printed half, it makes the caller read the KB.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["fits", "lines", "record"]

# A shape: a type (or a tuple of types) the value must have exactly, ``[shape]`` a list of
# that shape, ``{key: shape}`` an object with at least those keys. Only what the text
# prints is checked; ``--json`` prints the record as the KB holds it.
_STRS = [str]
_OPT_STR = (str, type(None))
_SGLANG: dict[str, Any] = {
    "version": str, "artifact": {"filename": str, "sha256": str},
    "torch_requirements": _STRS, "files_analyzed": int,
    "pg": {"module": _OPT_STR, "alternatives": _STRS, "optional": bool, "names": _STRS,
           "optional_names": _STRS, "backends": _STRS, "evidence": _STRS},
    "imports": [{"member": str, "line": int, "function": _OPT_STR, "names": _STRS,
                 "module": str, "feature": str, "optional": bool}],
    "calls": [{"name": str, "positional": int, "keywords": _STRS, "member": str,
               "line": int}],
    "parse_failures": [{"member": str, "error": str}],
}
_LAUNCH: dict[str, Any] = {"member": str, "rules": [dict], "flags": [dict]}
_MOONCAKE: dict[str, Any] = {
    "dist": str, "version": str,
    "wheels": [{
        "artifact": {"filename": str, "sha256": str},
        "loaders": [{"module": str, "kind": str, "imports": [{"template": str}],
                     "toolchain": _STRS, "source_names": _STRS}],
        "builds": [{"member": str, "read_error": _OPT_STR, "torch": _OPT_STR,
                    "torch_from": _OPT_STR, "cuda_major": (int, type(None)),
                    "backends": _STRS, "names": _STRS, "needed": _STRS,
                    "needed_method": str, "bytes_from": _OPT_STR}],
    }],
}
_NATIVE: dict[str, Any] = {
    "project": str, "dist": str, "version": str, "sdist_only": bool,
    "uninstallable": [{"requirement": str, "reason": str}],
    "wheels": [{
        "artifact": {"filename": str, "sha256": str},
        "requires_dist": _STRS, "torch_requirements": _STRS, "packages": _STRS,
        "rules": [{"package": str, "errors": _STRS,
                   "steps": [{"kind": str, "target": str, "key": _OPT_STR,
                              "condition": _OPT_STR, "effect": _OPT_STR, "member": str,
                              "line": int}]}],
        "builds": [{"member": str, "module": str, "read_error": _OPT_STR, "torch": _OPT_STR,
                    "torch_from": _OPT_STR, "cuda_major": (int, type(None)),
                    "needed": _STRS, "needed_method": str, "bytes_from": _OPT_STR,
                    "torch_undefined": (int, type(None)), "complete": bool}],
    }],
}
_SHAPES = {"sglang": _SGLANG, "mooncake": _MOONCAKE, "native": _NATIVE}


def fits(value: Any, shape: Any) -> bool:
    """Whether ``value`` (JSON) has ``shape`` (see the module's comment)."""
    if isinstance(shape, dict):
        return type(value) is dict and all(k in value and fits(value[k], s)
                                           for k, s in shape.items())
    if isinstance(shape, list):
        return type(value) is list and all(fits(v, shape[0]) for v in value)
    kinds = shape if isinstance(shape, tuple) else (shape,)
    return type(value) in kinds


def record(kb_path: str | os.PathLike[str], kind: str, name: str, version: str,
           ) -> dict[str, Any] | None:
    """The release's record as JSON (``model_dump(mode="json")`` of its KB model) from its
    stamped document, the SGLang launch rules put back; None when that document does not
    belong to the KB or has another shape (then read the KB). ``kind``: ``sglang``,
    ``mooncake`` or ``native`` (an extension the worker loads beside them)."""
    from moonpin.resolver.tables import documents, per_release

    doc = documents.load_show(kb_path, name, version)
    if doc is None:
        return None
    rec = doc.get("record")
    if not isinstance(rec, dict) or not fits(rec, _SHAPES[kind]):
        return None
    if name == "sglang":
        launch = per_release.load_launch(kb_path, version) if doc.get("launch") else None
        if doc.get("launch") is not False and launch is None:
            return None  # its launch rules are recorded, but their table is not there
        rec = dict(rec, launch=launch)
    return rec


def lines(kind: str, rec: dict[str, Any]) -> list[str]:
    """The text ``show`` prints for a record of ``kind``; ``rec`` has the checked shape."""
    return {"sglang": _sglang_lines, "mooncake": _mooncake_lines,
            "native": _native_lines}[kind](rec)


def _sglang_lines(r: dict[str, Any]) -> list[str]:
    out = [f"sglang {r['version']}  ({r['artifact']['filename']}, "
           f"sha256 {r['artifact']['sha256'][:12]}…)",
           f"  torch requirement: {', '.join(r['torch_requirements']) or 'none declared'}"]
    pg = r["pg"]
    if pg["module"] is None:
        out.append("  process-group module: none (imports no mooncake.pg / mooncake.ep)")
    else:
        alt = f" (falls back to {', '.join(pg['alternatives'])})" if pg["alternatives"] else ""
        out.append(f"  process-group module: {pg['module']}{alt}"
                   f"{' [optional]' if pg['optional'] else ''}")
        out.append(f"  names: {', '.join(pg['names']) or '-'}"
                   + (f" (optional: {', '.join(pg['optional_names'])})"
                      if pg["optional_names"] else ""))
        out.append(f"  backends: {', '.join(pg['backends']) or '-'}")
        out.append(f"  evidence: {', '.join(pg['evidence'])}")
    out.append(f"  {r['files_analyzed']} source files analysed, {len(r['imports'])} "
               "mooncake imports:")
    for i in r["imports"]:
        where = f"{i['member']}:{i['line']}" + (f" in {i['function']}" if i["function"] else "")
        names = f" ({', '.join(i['names'])})" if i["names"] else ""
        out.append(f"    {i['module']}{names} [{i['feature']}"
                   f"{', optional' if i['optional'] else ''}] {where}")
    for c in r["calls"]:
        out.append(f"    call {c['name']}(…{c['positional']} positional, "
                   f"{len(c['keywords'])} keyword) {c['member']}:{c['line']}")
    for f in r["parse_failures"]:
        out.append(f"    unparsed {f['member']}: {f['error']}")
    launch: Any = r.get("launch")
    if fits(launch, _LAUNCH):
        out.append(f"  launch rules: {len(launch['rules'])} from {launch['member']} "
                   f"({len(launch['flags'])} options they read); `moonpin args --sglang "
                   f"{r['version']} -- …` checks a launch line")
    return out


def _mooncake_lines(r: dict[str, Any]) -> list[str]:
    out = [f"{r['dist']} {r['version']}: {len(r['wheels'])} wheels"]
    for w in r["wheels"]:
        out.append(f"  {w['artifact']['filename']}  sha256 {w['artifact']['sha256'][:12]}…")
        for ld in w["loaders"]:
            imps = ", ".join(i["template"] for i in ld["imports"])
            extra = f" toolchain: {', '.join(ld['toolchain'])}" if ld["toolchain"] else ""
            out.append(f"    loader {ld['module']}: {ld['kind']} {imps}{extra}")
            if ld["source_names"]:
                out.append(f"      names in shipped sources: {', '.join(ld['source_names'])}")
            if ld.get("requires"):
                from moonpin.readers.pyast.loader import JIT_REQUIRES

                out.append("      checks before compiling: " + "; ".join(
                    JIT_REQUIRES.get(c, c) for c in ld["requires"]))
        for b in w["builds"]:
            if b["read_error"]:
                out.append(f"    build {b['member']}: torch {b['torch'] or '?'} "
                           f"({b['read_error']})")
                continue
            out.append(f"    build {b['member']}: torch {b['torch'] or '?'}"
                       f"{' (from bytes)' if b['torch_from'] == 'bytes' else ''}, "
                       f"CUDA {b['cuda_major'] or '-'}, backends "
                       f"{', '.join(b['backends']) or '-'}")
            out.append(f"      names: {', '.join(b['names']) or '-'}")
            out.append(f"      needs: {', '.join(b['needed']) or '-'} [{b['needed_method']}]"
                       + (f" (read from {b['bytes_from']})" if b["bytes_from"] else ""))
    return out


def _native_lines(r: dict[str, Any]) -> list[str]:
    n = len(r["wheels"])
    out = [f"{r['dist']} {r['version']} ({r['project']}): {n} wheel{'' if n == 1 else 's'}"
           + (", source distribution only" if r["sdist_only"] else "")]
    for u in r["uninstallable"]:
        out.append(f"  cannot be installed: {u['requirement']} ({u['reason']})")
    for w in r["wheels"]:
        out.append(f"  {w['artifact']['filename']}  sha256 {w['artifact']['sha256'][:12]}…")
        out.append(f"    installs: {', '.join(w['packages']) or '-'}; torch requirement: "
                   f"{', '.join(w['torch_requirements']) or 'none declared'}")
        others = [d for d in w["requires_dist"] if d not in w["torch_requirements"]]
        if others:
            out.append(f"    requires: {', '.join(others)}")
        for rule in w["rules"]:
            out.append(f"    loader {rule['package']}:")
            for st in rule["steps"]:
                what = " ".join(x for x in (st["kind"], st["target"]) if x)
                key = f" by {st['key']}" if st["key"] else ""
                cond = f" if {st['condition']}" if st["condition"] else ""
                eff = f" ({st['effect']})" if st["effect"] else ""
                out.append(f"      {what}{key}{cond}{eff}  {st['member']}:{st['line']}")
            for e in rule["errors"]:
                out.append(f"      unread: {e}")
        for b in w["builds"]:
            if b["read_error"]:
                out.append(f"    build {b['member']}: ({b['read_error']})")
                continue
            torch = b["torch"] or "any"
            src = f" (from {b['torch_from']})" if b["torch_from"] else ""
            syms = ("" if b["torch_undefined"] is None
                    else f", {b['torch_undefined']} torch symbols it needs")
            out.append(f"    build {b['member']}: torch {torch}{src}, CUDA "
                       f"{b['cuda_major'] or '-'}{syms}"
                       + ("" if b["complete"] else " (symbols not read)"))
            out.append(f"      needs: {', '.join(b['needed']) or '-'} [{b['needed_method']}]"
                       + (f" (read from {b['bytes_from']})" if b["bytes_from"] else ""))
    return out
