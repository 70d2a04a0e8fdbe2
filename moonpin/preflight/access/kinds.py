"""What a path that is not a regular file is, in words ("a FIFO", "a dangling symbolic link
(to '/x')"), as a finding names it. Only ``os`` at import."""

from __future__ import annotations

import os

__all__ = ["kind_of"]


def kind_of(path: str) -> str:
    """What a path that is not a regular file is, in words."""
    import stat

    try:
        st = os.lstat(path)
    except OSError as e:
        return f"unreadable ({e.strerror})"
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.stat(path)
        except OSError:
            return f"a dangling symbolic link (to {os.readlink(path)!r})"
        return f"a symbolic link to {_mode_word(target.st_mode)} ({os.path.realpath(path)})"
    return _mode_word(st.st_mode)


def _mode_word(mode: int) -> str:
    import stat

    for test, word in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a regular file")):
        if test(mode):
            return word
    return f"a file of mode {oct(mode)}"
