"""The root a check confines its reads to, as a value: :class:`Confined`, built once for a
check (:attr:`moonpin.preflight.env.context.Context.confined`) and handed to every read of
the target's files, never kept in a module.

Judging an image's root from outside it, a path under the root whose symbolic links lead
out of it (an absolute link to ``/etc/hostname``, read on this host) names a file the image
does not hold: it is refused as missing (:func:`moonpin.kb.files.read_regular`'s
``within``), left out of the file-facts memo, and never opened by the readers that open
files themselves (the loader's tables, bytecode caches). Two checks in one process, of two
roots or of one root and this machine, each read through their own value. Only ``os`` at
import."""

from __future__ import annotations

import os

__all__ = ["NOWHERE", "Confined"]


class Confined:
    """The reads of one check: confined to ``root`` (an image's root folder, taken as its
    real path once), or to nothing (None: this machine's own files, :data:`NOWHERE`)."""

    __slots__ = ("root",)

    root: str | None

    def __init__(self, root: str | os.PathLike[str] | None) -> None:
        object.__setattr__(self, "root", None if root is None
                           else os.path.realpath(root).rstrip("/"))

    def outside(self, path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` lies under the root (as written) but its links take it out."""
        from moonpin.kb.files import outside

        return outside(path, self.root)

    def read(self, path: str | os.PathLike[str], *, cap: int, what: str = "file",
             hint: str | None = None, stamp: list[int] | None = None) -> bytes:
        """:func:`moonpin.kb.files.read_regular` of ``path``, refused as missing when it
        lies :meth:`outside`."""
        from moonpin.kb.files import read_regular

        return read_regular(path, cap=cap, what=what, hint=hint, stamp=stamp,
                            within=self.root)

    def listdir(self, path: str | os.PathLike[str], what: str = "folder") -> list[str]:
        """The names in the folder at ``path`` (:func:`os.listdir`), refused as missing
        (:class:`moonpin.kb.errors.ReadRefused`, ``errno.ENOENT``) when it lies
        :meth:`outside`: a folder of the image linked to one of this host is not listed.
        Raises OSError naming the folder and what is wrong with it (not a folder, a loop,
        unreadable)."""
        import errno

        from moonpin.kb.errors import ReadRefused

        name = os.fspath(path)
        if self.outside(name):
            raise ReadRefused(name, f"lies outside the image root {self.root} (a symbolic "
                              "link points out of it)", what=what, errno=errno.ENOENT)
        try:
            return os.listdir(name)
        except OSError as e:
            from moonpin.preflight.access.kinds import kind_of

            reason = (f"is {kind_of(name)}, not a folder" if e.errno == errno.ENOTDIR
                      else "does not exist" if e.errno == errno.ENOENT
                      else "is a symbolic link loop" if e.errno == errno.ELOOP
                      else f"cannot be listed: {e.strerror or type(e).__name__}")
            raise ReadRefused(name, reason, what=what, errno=e.errno or 0) from None

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a Confined is frozen: make a new one instead of setting {name}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Confined) and other.root == self.root

    def __hash__(self) -> int:
        return hash(("Confined", self.root))

    def __repr__(self) -> str:
        return f"Confined({self.root!r})"


#: The reads of a check of this machine (or of anything not judged under an image root).
NOWHERE = Confined(None)
