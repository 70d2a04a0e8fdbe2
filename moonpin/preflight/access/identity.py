"""Who the worker's process runs as, and what that user may read and list: the kernel's
permission check (``fs/namei.c``) asked of the target's files, as a value every room hands
down (the loader's reading of ``/etc/ld.so.preload``, the importer's listing of a folder).
Only ``os``: this runs at worker start."""

from __future__ import annotations

import os
from collections.abc import Sequence

__all__ = ["Identity"]


class Identity:
    """Who the worker's process runs as: its user id, its group ids (the primary one first,
    then the supplementary ones) and how that was learned (``said``, for the report). A
    live check's is this process's own (the worker runs the check); an image's comes from
    its config's ``User`` (:func:`moonpin.preflight.env.rootfs.worker_identity`)."""

    __slots__ = ("gids", "said", "uid")

    def __init__(self, uid: int, gids: Sequence[int], said: str) -> None:
        self.uid = uid
        self.gids = tuple(dict.fromkeys(gids))
        self.said = said

    @classmethod
    def current(cls) -> Identity:
        """This process's effective user and groups."""
        uid = os.geteuid()
        return cls(uid, (os.getegid(), *os.getgroups()), f"this process's user (uid {uid})")

    def _allows(self, st: os.stat_result, bit: int) -> bool:
        # the kernel's generic_permission (fs/namei.c, acl_permission_check): the owner's
        # bits when the uid owns the file, else the group's when one of its groups does,
        # else the others'; root (CAP_DAC_OVERRIDE) reads and searches everything. POSIX
        # ACLs are not read.
        if self.uid == 0:
            return True
        if st.st_uid == self.uid:
            return bool(st.st_mode & (bit << 6))
        if st.st_gid in self.gids:
            return bool(st.st_mode & (bit << 3))
        return bool(st.st_mode & bit)

    def may_read(self, path: str, root: str | None = None) -> bool:
        """Whether this user can open the file at ``path`` (a host path) for reading: every
        folder on the way below ``root`` (an image's root folder, whose own mode is the
        host's; None: ``/``) searchable (``x``), and the file readable (``r``). A path that
        cannot be stat-ed: True (its own check says what is wrong with it)."""
        if self.uid == 0:
            return True
        top = os.path.realpath(root) if root else "/"
        full = os.path.realpath(path) if root is None else os.path.abspath(path)
        try:
            folder = top
            rel = os.path.relpath(os.path.dirname(full), top)
            for part in ([] if rel == "." else rel.split(os.sep)):
                folder = os.path.join(folder, part)
                if not self._allows(os.stat(folder), 1):
                    return False
            return self._allows(os.stat(full), 4)
        except OSError:
            return True

    def may_list(self, folder: str, root: str | None = None) -> bool:
        """Whether this user can list ``folder`` as the importer does: every folder on the
        way searchable (``x``) and the folder itself readable (``r``) and searchable. CPython's
        ``FileFinder._fill_cache`` lists a path entry with ``os.listdir`` and takes a
        ``PermissionError`` as an empty folder, so an import finds nothing in it
        (ModuleNotFoundError), and finding a module there needs ``stat`` of it (``x``).
        Root may; a folder that cannot be stat-ed: True (as :meth:`may_read`)."""
        if self.uid == 0:
            return True
        try:
            st = os.stat(folder)
        except OSError:
            return True
        return (self.may_read(os.path.join(folder, "."), root) and self._allows(st, 4)
                and self._allows(st, 1))

    def __repr__(self) -> str:
        return f"uid {self.uid}, gids {', '.join(map(str, self.gids))}"
