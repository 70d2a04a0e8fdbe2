"""Where the knowledge base lives; standard library only, so light callers stay light.

Two KBs may exist: the *shipped* one (installed inside the ``kb`` package by a wheel, or
``data/kb.json`` of a source checkout) and the *user* one that ``moonpin scrape`` writes on
an installed moonpin (``$XDG_DATA_HOME/moonpin/kb.json``, by default
``~/.local/share/moonpin/kb.json``), so that nothing is ever written into site-packages.
A command reads the newer of the two by the KB's own scrape time, unless ``--kb`` or
``MOONPIN_KB`` names one.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["KBChoice", "default_kb_file", "default_kb_path", "kb_choice", "scrape_kb_file",
           "scraped_at", "shipped_is_writable", "shipped_kb_file", "user_kb_file"]

#: How far into a KB file its scrape time is looked for before the whole file is parsed
#: (moonpin writes ``scrape.scraped_at`` within its first hundred bytes).
_HEAD = 8192


def shipped_kb_file() -> str:
    """The KB installed with moonpin: inside the ``kb`` package (a wheel install), else
    ``data/kb.json`` of the source checkout (an editable install)."""
    here = os.path.dirname(os.path.realpath(__file__))
    packaged = os.path.join(here, "data", "kb.json")  # importlib.resources.files("kb")
    if os.path.isfile(packaged):
        return packaged
    return os.path.join(os.path.dirname(os.path.dirname(here)), "data", "kb.json")


def user_kb_file() -> str:
    """``$XDG_DATA_HOME/moonpin/kb.json`` (the XDG base-directory spec: a relative
    ``XDG_DATA_HOME`` is ignored), else ``~/.local/share/moonpin/kb.json``."""
    xdg = os.environ.get("XDG_DATA_HOME", "")
    base = xdg if os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".local",
                                                       "share")
    return os.path.join(base, "moonpin", "kb.json")


def shipped_is_writable() -> bool:
    """Whether ``moonpin scrape`` may write the shipped KB: only a source checkout's
    ``data/kb.json`` in a folder this user can write (never a copy inside an installed
    package, wherever that is)."""
    path = shipped_kb_file()
    here = os.path.dirname(os.path.realpath(__file__))
    if os.path.dirname(os.path.dirname(path)) == here:  # <site-packages>/kb/data/kb.json
        return False
    return os.access(os.path.dirname(path), os.W_OK)


def scraped_at(path: str) -> str | None:
    """The KB's own ``scrape.scraped_at`` (ISO 8601), read from its first bytes when it
    is there (as moonpin writes it), else from the whole file; None when unreadable."""
    import stat

    from moonpin.kb.files import loads_json, read_regular

    try:  # never blocks: a FIFO or device at the path is not read
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        head = os.read(fd, _HEAD)
    except OSError:
        return None
    finally:
        os.close(fd)
    key = head.find(b'"scraped_at"')
    if key >= 0:
        rest = head[key + len(b'"scraped_at"'):].lstrip(b" \t\r\n")
        if rest[:1] == b":":
            value = rest[1:].lstrip(b" \t\r\n")
            end = value.find(b'"', 1)
            if value[:1] == b'"' and end > 0:
                return value[1:end].decode("ascii", "replace")
    try:
        doc = loads_json(read_regular(path, cap=256 << 20, what="knowledge base"))
        when = doc["scrape"]["scraped_at"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return when if isinstance(when, str) else None


def _when(text: str | None) -> float | None:
    if not text:
        return None
    from datetime import datetime, timezone

    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).timestamp()


class KBChoice:
    """Which KB a command reads and why: ``source`` is ``MOONPIN_KB``, ``user`` or
    ``shipped``; ``other`` the KB not chosen (None when there is only one)."""

    __slots__ = ("other", "path", "source")

    def __init__(self, path: str, source: str, other: str | None = None) -> None:
        self.path, self.source, self.other = path, source, other


def kb_choice() -> KBChoice:
    """``MOONPIN_KB`` when set; else the newer (by scrape time) of the user KB and the
    shipped one. The user KB wins a tie (a ``scrape --from-path`` keeps the scrape time
    of the KB it added to) and when its scrape time cannot be read, so that the error
    the command then prints names it."""
    env = os.environ.get("MOONPIN_KB")
    if env:
        return KBChoice(env, "MOONPIN_KB")
    shipped = shipped_kb_file()
    user = user_kb_file()
    if not os.path.exists(user):
        return KBChoice(shipped, "shipped")
    mine, theirs = _when(scraped_at(user)), _when(scraped_at(shipped))
    if mine is None or theirs is None or mine >= theirs:
        return KBChoice(user, "user", shipped)
    return KBChoice(shipped, "shipped", user)


def default_kb_file() -> str:
    """The KB this process reads when none is named (:func:`kb_choice`).

    A string, so the runtime check need not load :mod:`pathlib`.
    """
    env = os.environ.get("MOONPIN_KB")
    if env:
        return env
    if not os.path.exists(user_kb_file()):  # the usual case: no file read to decide
        return shipped_kb_file()
    return kb_choice().path


def scrape_kb_file() -> str:
    """The KB ``moonpin scrape`` writes when none is named: ``MOONPIN_KB``; the shipped
    one in a source checkout (:func:`shipped_is_writable`); else the user KB."""
    env = os.environ.get("MOONPIN_KB")
    if env:
        return env
    return shipped_kb_file() if shipped_is_writable() else user_kb_file()


def default_kb_path() -> Path:
    """:func:`default_kb_file` as a :class:`~pathlib.Path`."""
    from pathlib import Path

    return Path(default_kb_file())
