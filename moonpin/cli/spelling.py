"""Reading the releases users type on the command line (``latest``, ``v0.5.18``, "did you
mean") into the KB's spellings, before a command runs."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

from moonpin.cli.common import kb_path as _kb_path
from moonpin.kb.errors import MoonpinError

__all__ = ["spell_inputs"]


# ---------------------------------------------------------------------- spelling


#: (SGLang releases of the index, every SGLang version, mooncake's by distribution, the
#: native extensions' by distribution): see :meth:`_Pools.full`
_Names = tuple[list[str], list[str], dict[str, list[str]], dict[str, list[str]]]


class _Pools:
    """The releases the KB holds, for reading what users type (``latest``, ``v0.5.18``,
    "did you mean"): from the KB's summary (``resolved/_summary.json``, a few kilobytes),
    else from its facts, else from its JSON (standard library, no pydantic)."""

    def __init__(self, kb_path: str | os.PathLike[str]) -> None:
        self.kb_path = kb_path
        self._full: _Names | None = None
        self._full_read = False

    def full(self) -> _Names | None:
        """(SGLang releases of the index, every SGLang version the KB names — local
        records and unread ones too —, mooncake releases by distribution, unread ones
        too, the native extensions' releases by distribution); None when the KB cannot be
        read (the command then says why)."""
        if not self._full_read:
            self._full_read = True
            from moonpin.resolver.tables import documents

            names = documents.names(self.kb_path)
            if names is not None:
                self._full = (names["index"], names["every"], names["mooncake"],
                              names["native"])
                return self._full
            self._full = self._from_json()
        return self._full

    def _from_json(self) -> _Names | None:
        from moonpin.kb.files import loads_json, read_regular

        try:  # moonpin.kb.store's cap, without importing pydantic's models
            doc = loads_json(read_regular(self.kb_path, cap=256 << 20, what="knowledge base"))
            index = [r["version"] for r in doc["sglang"] if r.get("source") == "index"]
            every = [r["version"] for r in doc["sglang"]] + [
                u["version"] for u in doc.get("unread", ()) if u.get("kind") == "sglang"]
            mooncake: dict[str, list[str]] = {}
            for r in doc["mooncake"]:
                mooncake.setdefault(r["dist"], []).append(r["version"])
            for u in doc.get("unread", ()):
                if u.get("kind") == "mooncake":
                    mooncake.setdefault(u["name"], []).append(u["version"])
            native: dict[str, list[str]] = {}
            for r in doc.get("native", ()):
                native.setdefault(r["dist"], []).append(r["version"])
            texts = [*index, *every, *mooncake, *native,
                     *(v for pool in (mooncake, native) for vs in pool.values() for v in vs)]
            if not all(isinstance(v, str) for v in texts):
                raise TypeError("a version is not a string")
            return index, every, mooncake, native
        except (MoonpinError, OSError, ValueError, KeyError, TypeError, AttributeError):
            return None  # a KB edited by hand: the command says what is wrong

    def sglang(self, text: str, flag: str) -> str:
        """An SGLang release as typed -> the KB's spelling of it."""
        from moonpin.resolver import spelling

        names = self.full()
        index = names[0] if names is not None else []
        if spelling.strip_v(text) in index:  # as the KB spells it: nothing to parse
            return spelling.strip_v(text)
        if spelling.is_latest(text):
            return spelling.release(text, index, flag=flag)
        version = spelling.version(text, flag=flag, pool=index)
        if version in index or names is None:
            return version  # None: the command says what is wrong with the KB
        every = names[1]
        return _same_or(version, every,
                        lambda: spelling.not_known(version, index or every, flag=flag))

    def mooncake(self, dist: str, text: str, flag: str | None = None, *,
                 what: str = "mooncake distribution") -> tuple[str, str]:
        """A mooncake distribution and release as typed -> the KB's spellings; with
        ``what="release name"`` (``show``) a native extension's distribution too."""
        from moonpin.resolver import spelling

        full = self.full() or ([], [], {}, {})
        pools = full[2] if what == "mooncake distribution" else {**full[3], **full[2]}
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
        from moonpin.resolver import spelling

        pools = (self.full() or ([], [], {}, {}))[2]
        return spelling.name(text, pools) if pools else text


def _extensions(kb_path: str | os.PathLike[str]) -> set[str]:
    """The native extensions' distributions the KB's derived facts hold (none without):
    from its names, else its summary, else its facts."""
    from moonpin.resolver.tables import documents

    found = documents.names(kb_path)
    return set(found["native"]) if found is not None else set()


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


def spell_inputs(args: argparse.Namespace) -> None:
    """Read the releases, distributions, pythons and platforms given the way users type
    them (``latest``, ``v0.5.18``, ``V0.5.18``, ``amd64``) into the KB's own spelling,
    before any command runs: every path (the fast tables too) then sees one version, and a
    typo is refused here, exit 2, with what was probably meant."""
    from moonpin.resolver import spelling
    from moonpin.resolver.inputs import normalize_arch, normalize_python

    cmd = args.command
    if cmd in ("which", "explain", "pins", "renovate", "constraints", "triples"):
        normalize_python(getattr(args, "python", None))  # only checked: outputs quote it
        normalize_arch(getattr(args, "arch", None))
    if cmd not in ("which", "explain", "show", "renovate", "constraints", "args", "triples",
                   "matrix"):
        return
    pools = _Pools(_kb_path(args))
    if cmd == "matrix":  # a specifier; a bare release (`--sglang 0.5.18`, `latest`) is
        text = (args.sglang or "").strip()  # that release, and one the KB lacks is a typo
        if text and (text[0].isdigit() or spelling.is_latest(text)
                     or spelling.strip_v(text) != text):
            args.sglang = "==" + pools.sglang(text, "--sglang ")
        return
    if cmd != "triples" and getattr(args, "sglang", None):
        args.sglang = pools.sglang(args.sglang, "--sglang ")
    if getattr(args, "torch", None) and cmd != "triples":
        args.torch = spelling.version(args.torch, what="torch", flag="--torch ")
    if getattr(args, "dist", None) and (cmd != "which"
                                        or args.what in ("mooncake", "sglang", "torch")):
        args.dist = pools.dist(args.dist)  # an extension's: read by `which` itself
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
        elif name != "torch":  # torch: read by the command (PEP 440 equality with the KB's)
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
                try:
                    name, version = pools.mooncake(name, version)
                except MoonpinError:
                    if name not in _extensions(_kb_path(args)):
                        raise
                    # a native extension's release: read by `explain` itself
            out.append(f"{name}=={version}")
        args.releases = out
