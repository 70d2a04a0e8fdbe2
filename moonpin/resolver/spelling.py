"""Releases and names as users type them: ``latest``, a ``v`` prefix, "did you mean".

Pure and light (standard library and :mod:`packaging` only): every function takes the
pool of versions or names it may answer from as an argument, so a caller feeds it from
whatever it has loaded (the KB, a derived table, an index).

- :func:`release` turns what a user typed where one release is expected (``--sglang``,
  ``DIST==V``) into the pool's own spelling: ``latest`` is the newest final release,
  ``v0.5.18`` / ``V0.5.18`` is ``0.5.18``; a version that is not PEP 440, or not in the
  pool, is a :class:`~moonpin.kb.errors.UsageError` whose hint says what was probably meant.
- :func:`version` only reads the text (no pool needed to accept it), with the same hints.
- :func:`name` does the same for a distribution name (``…-cuda31`` → ``…-cuda13``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from moonpin.kb.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:  # packaging is imported when a version is read: `strip_v` stays light
    import argparse

    from packaging.version import Version

__all__ = ["LATEST", "argparse_hint", "close_names", "close_versions", "is_latest", "name",
           "newest", "not_known", "parse_release", "release", "split_release", "strip_v",
           "version"]

#: The words that mean "the newest release in the knowledge base".
LATEST = ("latest", "newest")

# Characters users type for a digit or a dot ("0.5.l8", "0,5,18", "O.5.18").
_TYPOS = str.maketrans({"l": "1", "I": "1", "i": "1", "O": "0", "o": "0", ",": ".",
                        "_": ".", " ": ""})


def is_latest(text: str) -> bool:
    return text.strip().lower() in LATEST


def strip_v(text: str) -> str:
    """``v0.5.18`` / ``V0.5.18`` -> ``0.5.18`` (a tag as Git and Docker images write it);
    any other text comes back stripped of surrounding blanks."""
    t = text.strip()
    if t[:1] in ("v", "V") and t[1:2].isdigit():
        return t[1:]
    return t


def _parse(text: str) -> Version | None:
    from packaging.version import InvalidVersion, Version

    if len(text) > 100:  # no release is that long; packaging's int() fails past 4,300 digits
        return None
    try:
        return Version(text)
    except (InvalidVersion, ValueError):
        return None


def newest(pool: Iterable[str]) -> str | None:
    """The newest final release of ``pool`` (the newest pre-release when it has only those)."""
    parsed = [(v, p) for p in pool if (v := _parse(p)) is not None]
    final = [x for x in parsed if not x[0].is_prerelease and not x[0].is_devrelease]
    best = max(final or parsed, default=None, key=lambda x: x[0])
    return best[1] if best else None


def close_versions(text: str, pool: Sequence[str], n: int = 2) -> list[str]:
    """The releases of ``pool`` ``text`` most likely meant: its typo-fixed reading when that
    is in the pool, else the ``n`` nearest by order below and above for a version, else
    the ``n`` closest spellings."""
    fixed = strip_v(text)
    if _parse(fixed) is None:
        fixed = fixed.translate(_TYPOS)
    want = _parse(fixed)
    parsed = sorted(((v, p) for p in pool if (v := _parse(p)) is not None), key=lambda x: x[0])
    if want is not None:
        same = [p for v, p in parsed if v == want]
        if same:
            return same[-1:]
        if fixed == strip_v(text) or not parsed:  # a real version: its neighbours
            below = [p for v, p in parsed if v < want][-n:]
            above = [p for v, p in parsed if v > want][:n]
            return below + above
    import difflib

    return difflib.get_close_matches(strip_v(text), list(pool), n=n, cutoff=0.6)


def close_names(text: str, pool: Iterable[str], n: int = 2) -> list[str]:
    """The names of ``pool`` closest to ``text`` (PEP 503 spellings compared)."""
    import difflib

    names = sorted(set(pool))
    canon = _canonical(text)
    tail = [x for x in names if x.endswith("-" + canon)]  # `cuda13` for `…-cuda13`
    return tail[:n] or difflib.get_close_matches(canon, names, n=n, cutoff=0.6)


def _canonical(text: str) -> str:
    from moonpin.resolver.inputs import canonical_name

    return canonical_name(text)


def _mean(options: list[str], flag: str, given: str) -> str:
    return ("did you mean " + " or ".join(f"{flag}{o}" for o in options)
            + f" (not {given!r})?")


def version(text: str, *, what: str = "sglang", flag: str = "--sglang ",
            pool: Sequence[str] = ()) -> str:
    """``text`` read as a PEP 440 version, a ``v`` prefix dropped; else a UsageError
    naming ``what`` and the input, its hint the closest release of ``pool``."""
    t = strip_v(text)
    if _parse(t) is None:
        shown = t if len(t) <= 60 else t[:60] + f"... ({len(t)} characters)"
        near = close_versions(t, pool) if len(t) <= 100 else []
        example = ("2.13.0" if what == "torch" else "0.3.13.post1"
                   if what.startswith("mooncake") else "0.5.18")
        hint = (_mean(near, flag, shown) if near
                else f"a version is e.g. {flag}{example} (not {shown!r})")
        raise UsageError(f"{what} version {shown!r} is not a PEP 440 version", hint=hint)
    return t


def release(text: str, pool: Sequence[str], *, what: str = "sglang",
            flag: str = "--sglang ") -> str:
    """The release of ``pool`` that ``text`` names, in the pool's spelling.

    ``latest``/``newest`` is :func:`newest`; a version is matched by PEP 440 equality
    (``0.5.18.0`` is ``0.5.18``); one not in the pool raises, naming the nearest known.
    ``flag`` is how the input was given (``--sglang ``, ``sglang==``), for the hint.
    """
    if is_latest(text):
        best = newest(pool)
        if best is None:
            raise UsageError(f"{flag}{text.strip()}: the knowledge base holds no {what} release",
                             hint="run `moonpin scrape` to fill it")
        return best
    t = version(text, what=what, flag=flag, pool=pool)
    v = _parse(t)
    same = [p for p in pool if _parse(p) == v]
    if same:
        return same[-1]
    raise not_known(t, pool, what=what, flag=flag)


def not_known(text: str, pool: Sequence[str], *, what: str = "sglang",
              flag: str = "--sglang ") -> UsageError:
    """The error for a version ``pool`` does not hold, naming the nearest it does."""
    near = close_versions(text, pool)
    known = f" (nearest known: {', '.join(near)})" if near else " (it holds none)"
    mean = close_versions(text, pool, n=1)
    return UsageError(f"{what} {text} is not in the knowledge base{known}",
                      hint=(_mean(mean, flag, text) + " " if mean else f"{flag}{text}: ")
                      + "`moonpin scrape` refreshes the knowledge base")


def name(text: str, pool: Iterable[str], *, what: str = "mooncake distribution") -> str:
    """``text`` as the canonical name of one of ``pool``; else a UsageError with the
    closest names (and every known one)."""
    names = sorted(set(pool))
    canon = _canonical(text.strip())
    if canon in names:
        return canon
    near = close_names(canon, names)
    hint = (_mean(near, "", text.strip()) + " known: " if near
            else f"not {text.strip()!r}; known: ") + ", ".join(names)
    raise UsageError(f"unknown {what} {text.strip()!r}", hint=hint)


def split_release(text: str) -> tuple[str, str]:
    """``NAME==VERSION`` -> (canonical name, version text as typed, stripped); no check of
    the version (``latest`` passes)."""
    name_, sep, ver = text.partition("==")
    ver = ver.removeprefix("=")  # NAME===VERSION, PEP 440's arbitrary equality
    if not sep or not name_.strip() or not ver.strip():
        raise UsageError(f"{text!r} does not name one release",
                         hint="use NAME==VERSION, e.g. mooncake-transfer-engine==0.3.13.post1")
    return _canonical(name_.strip()), ver.strip()


def parse_release(text: str) -> tuple[str, str]:
    """``NAME==VERSION`` (any PEP 503 spelling of the name, a ``v`` prefix on the version)
    -> (canonical name, version)."""
    name, ver = split_release(text)
    if is_latest(ver):
        raise UsageError(f"{text!r}: {name}=={ver} needs the knowledge base's releases",
                         hint=f"name the version (`moonpin which` and `moonpin kb info` list "
                              f"them), not {ver!r}")
    return name, version(ver, what=name, flag=f"{name}==")


def argparse_hint(parser: argparse.ArgumentParser, message: str) -> str | None:
    """A tip naming the nearest command or option of ``parser``'s own tables for what
    argparse refused (``whcih`` -> ``which``, ``--jsn`` -> ``--json``), or None."""
    import argparse
    import difflib
    import re

    m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if m:
        word, pool = m.group(1), re.findall(r"'([^']*)'", m.group(2)) or m.group(2).split(", ")
    else:
        m = re.match(r"unrecognized arguments: (\S+)", message)
        if m is None or not m.group(1).startswith("-"):
            return None
        word = m.group(1).split("=")[0]
        pool = [o for a in parser._actions for o in a.option_strings
                if a.help != argparse.SUPPRESS]
    near = difflib.get_close_matches(word, pool, n=1, cutoff=0.6)
    if not near and parser.prog.endswith(" args") and not m.group(0).startswith("invalid"):
        # an SGLang option given to moonpin: the launch line goes after `--`
        return (f"the launch arguments go after `--`: {parser.prog} --sglang VERSION -- "
                f"{word} ... (`{parser.prog} --help` says what it takes)")
    if not near:
        return None
    return f"did you mean {near[0]!r}? (`{parser.prog} --help` says what it takes)"
