"""Which Python environment ``moonpin check`` reads: the image the worker really runs.

* ``--python PATH``: that interpreter is asked, once, for its ``sys.path``, version and
  extension-module suffixes (as pipdeptree and pip-audit do); the deep probe runs it.
* ``--site-packages DIR``: that folder; the Python version comes from its path
  (``lib/python3.11/site-packages``) and the interpreter beside it (``bin/python``) runs the
  deep probe when there is one.
* neither: an active virtualenv (``$VIRTUAL_ENV``) other than the one moonpin itself runs
  from (pipx, ``uv tool``), else this interpreter.
* ``--rootfs DIR`` / ``--image PATH``: an image's root filesystem, read from outside
  (:mod:`moonpin.preflight.env.rootfs`); ``root`` is then set, and every absolute path the check
  reads from a file of the image is resolved under it
  (:func:`moonpin.preflight.access.chroot.resolve`).

Only ``os`` and ``sys`` at import: this runs at worker start.
"""

from __future__ import annotations

import os
import sys
from importlib import machinery

from moonpin.preflight.access.identity import Identity

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable, Sequence

__all__ = ["Target", "TargetError", "default", "from_python", "from_site_packages",
           "site_path", "this_python"]

#: Asked of a target interpreter (``-E -S -c``, ``-s`` too when ``PYTHONNOUSERSITE`` is set,
#: which ``-E`` would ignore): what the importer there uses. ``-c``'s working folder is taken
#: off first, and ``site`` is run by hand (``site.main()``, what ``import site`` at start
#: does: ``.pth`` lines, the user's site folder, ``sitecustomize``, ``usercustomize``) to learn
#: how many entries it put before the interpreter's own search path (``front``): the worker's
#: ``PYTHONPATH``, which ``-E`` leaves out, goes after them.
_ASK = ("import sys\nif sys.path and not sys.path[0]: del sys.path[0]\n"
        "base = list(sys.path); import site; site.main(); "
        "import importlib.machinery as m, json, os, platform, sysconfig\n"
        "def ok(p): return p and (os.path.isdir(p) or any(os.path.isfile(q) for q in "
        "(p, os.path.dirname(p), os.path.dirname(os.path.dirname(p)))))\n"
        "at = next((i for i, p in enumerate(sys.path) if p in base), len(sys.path))\n"
        "user = site.getusersitepackages()\n"
        "print(json.dumps({"
        "'path': [p for p in sys.path if ok(p)], "
        "'front': len([p for p in sys.path[:at] if ok(p)]), "
        "'version': "
        "list(sys.version_info[:2]), 'ext': m.EXTENSION_SUFFIXES, 'machine': "
        "platform.machine(), 'executable': sys.executable, 'prefix': sys.prefix, 'sites': "
        "site.getsitepackages() + ([user] if site.ENABLE_USER_SITE and user in sys.path "
        "else []), 'stdlib': sysconfig.get_path('stdlib'), "
        "'venv': sys.prefix != sys.base_prefix, 'user_site': bool(site.ENABLE_USER_SITE)}))")


class TargetError(Exception):
    """The target environment cannot be read (the message says which and why; ``tip``,
    when given, what fixes it)."""

    def __init__(self, message: str, tip: str | None = None) -> None:
        super().__init__(message)
        self.tip = tip


class Target:
    """An environment: its interpreter (None: none known), version, the folders its
    importer searches, its extension-module suffixes, and how it was chosen."""

    __slots__ = ("customize", "cwd", "ext_suffixes", "guessed", "how", "ld_path", "machine",
                 "managed",
                 "paths", "pip", "preload", "python", "root", "sites", "user", "version",
                 "working_dir")

    def __init__(self, python: str | None, version: tuple[int, int], paths: list[str],
                 ext_suffixes: Sequence[str], how: str,
                 sites: Sequence[str] | None = None) -> None:
        self.python = python
        self.version = version
        self.paths = paths
        self.ext_suffixes = tuple(ext_suffixes)
        self.how = how
        #: the folders whose ``.pth`` files ``site`` processed (None: the site-packages
        #: and dist-packages folders of ``paths``), :mod:`moonpin.preflight.pyimport.importer`
        self.sites = None if sites is None else tuple(sites)
        #: an image's root folder (None: this machine's own file system is the image's)
        self.root: str | None = None
        #: the image's ``LD_LIBRARY_PATH`` as host folders (None: this process's)
        self.ld_path: tuple[str, ...] | None = None
        #: the image's ``LD_PRELOAD`` entries (names, or host paths under its root) as ld.so
        #: there maps them at the interpreter's start (None: this process's)
        self.preload: tuple[str, ...] | None = None
        #: the image's machine (``x86_64``; None: this one's)
        self.machine: str | None = None
        #: who the image's worker runs as (its config's ``User``; None: this process's user)
        self.user: Identity | None = None
        #: how a fix line runs pip for this interpreter (``pip``, ``/opt/venv/bin/python -m pip``)
        self.pip = "pip"
        #: whether its pip refuses to install there (PEP 668, :mod:`moonpin.preflight.env.pep668`)
        #: unless told ``--break-system-packages``: a callable that says so, asked only when a
        #: fix line is written (None: not known, taken as no)
        self.managed: Callable[[], bool] | None = None
        #: the working folder ``python -m sglang.launch_server`` puts first on ``sys.path``
        #: (None: none, as for ``--site-packages`` folders taken as given)
        self.cwd: str | None = None
        #: an image's worker's working folder, as a path of the image (its config's
        #: ``WorkingDir``, else ``/``); None: this process's (the check runs as the worker)
        self.working_dir: str | None = None
        #: the modules ``site`` imports by name at the interpreter's start: ``sitecustomize``,
        #: and ``usercustomize`` when it enables the user's site folder (``ENABLE_USER_SITE``;
        #: not known for ``--site-packages`` folders: ``sitecustomize`` alone)
        self.customize: tuple[str, ...] = ("sitecustomize",)
        #: for an image root judged without its configuration (a `docker export` tree):
        #: why the interpreter taken may not be the worker's, and what to pass (None: the
        #: image's own Env and entry point chose it, or the user did)
        self.guessed: tuple[str, str] | None = None

    @property
    def tag(self) -> str:
        return f"cp{self.version[0]}{self.version[1]}"

    def describe(self) -> str:
        py = self.python or "no interpreter found (the deep probe uses this one)"
        where = ", ".join(self.paths[:3]) + (f" (+{len(self.paths) - 3})"
                                            if len(self.paths) > 3 else "")
        return (f"python {self.version[0]}.{self.version[1]} {py}; reading {where or 'nothing'}"
                f" ({self.how})")


def _working_folder() -> str | None:
    """What ``python -m sglang.launch_server`` puts first on ``sys.path``: the working
    folder, unless ``-P``/``PYTHONSAFEPATH`` (3.11) or ``-I`` say not to."""
    if getattr(sys.flags, "safe_path", False) or sys.flags.isolated:
        return None
    try:
        return os.getcwd()
    except OSError:  # the working folder was removed
        return None


def this_python(how: str = "this interpreter") -> Target:
    """This interpreter's environment, as a worker it starts with ``python -m`` sees it:
    the working folder first (where the check itself may have its script's folder)."""
    site = sys.modules.get("site")  # None under -S: no .pth file was processed
    sites: list[str] = []
    if site is not None:
        sites = [*site.getsitepackages(), *([site.getusersitepackages()]
                                           if site.ENABLE_USER_SITE else [])]
    cwd = _working_folder()
    rest = sys.path[1:] if cwd is not None and sys.path else sys.path
    paths = [p for p in dict.fromkeys([*([cwd] if cwd else []), *rest])
             if p and (os.path.isdir(p) or _in_archive(p))]
    t = Target(sys.executable, (sys.version_info[0], sys.version_info[1]), paths,
               machinery.EXTENSION_SUFFIXES, how, sites)
    t.cwd = cwd
    if site is not None and site.ENABLE_USER_SITE:
        t.customize = ("sitecustomize", "usercustomize")

    def managed() -> bool:
        import sysconfig

        return _managed_here(sysconfig.get_path("stdlib"), sys.prefix != sys.base_prefix,
                             sys.prefix)

    t.managed = managed
    return t


def _managed_here(stdlib: str | None, venv: bool, prefix: str | None) -> bool:
    """PEP 668 for an interpreter of this machine, with this process's environment (the
    worker's own, when the check runs in it)."""
    from moonpin.preflight.env import pep668

    env = dict(os.environ)
    return pep668.externally_managed(stdlib, venv, env, pep668.config_files(
        os.path.expanduser("~"), prefix, env))


def _suffixes_for(version: tuple[int, int]) -> list[str]:
    """The extension suffixes CPython ``version`` on this machine accepts (PEP 3149 tag,
    the stable ABI, plain ``.so``), with this interpreter's multiarch triplet."""
    ours = machinery.EXTENSION_SUFFIXES[0]  # .cpython-311-x86_64-linux-gnu.so
    parts = ours.split("-", 2)
    triplet = parts[2] if len(parts) == 3 else "linux-gnu.so"
    return [f".cpython-{version[0]}{version[1]}-{triplet}", ".abi3.so", ".so"]


def _version_of(folder: str) -> tuple[int, int] | None:
    for part in reversed(os.path.normpath(folder).split(os.sep)):
        if part.startswith("python") and "." in part:
            major, _, minor = part[6:].partition(".")
            if major.isdigit() and minor.isdigit():
                return int(major), int(minor)
    return None


def site_path(sites: Sequence[str], initial: Sequence[str] = (), root: str | None = None
              ) -> list[str]:
    """``sys.path`` as ``site`` leaves it (before ``python -m`` or a script puts its first
    entry there): ``initial``, the interpreter's own search path (``PYTHONPATH``'s folders,
    then the standard library's), each folder of ``sites`` appended with the folders its
    ``.pth`` path lines add (``site.addsitedir``, folder by folder), and the ``sys.path`` edits
    of the ``.pth`` ``import`` lines, in the order ``site`` runs them, then of the
    ``sitecustomize.py`` ``import sitecustomize`` finds first (read, never run:
    :mod:`moonpin.preflight.pyimport.sitefiles`): an insert goes before everything there,
    ``PYTHONPATH`` included, an append after. ``root``: an image's root; ``sites`` and
    ``initial`` are host folders under it, and the folders the edits name are the image's,
    resolved there."""
    from moonpin.preflight.access.chroot import host_path
    from moonpin.preflight.access.confined import NOWHERE, Confined
    from moonpin.preflight.pyimport.importer import pth_paths
    from moonpin.preflight.pyimport.sitefiles import custom_edits, path_edits

    within = NOWHERE if root is None else Confined(root)
    out = list(dict.fromkeys(initial))
    front: list[str] = []
    back: list[str] = []

    def edit(edits: Sequence[tuple[str, str]]) -> None:
        for how, d in edits:
            got = host_path(root, d)
            if got is None:
                continue
            if how == "front":
                front.insert(0, got)
            else:
                back.append(got)

    for f in sites:  # each folder, then its .pth lines, as addsitedir does folder by folder
        out.extend(p for p in [f, *pth_paths(f, root, [*sites, *out], within)]
                   if p not in out)
        edit(path_edits(f, [*sites, *out], within))
    custom = next((d for d in [*front, *out, *back]
                   if os.path.isfile(os.path.join(d, "sitecustomize.py"))), None)
    if custom is not None:
        edit(custom_edits(custom, within))
    if not front and not back:
        return out
    return [p for p in dict.fromkeys([*front, *out, *back])
            if os.path.isdir(p) or _in_archive(p)]


def _in_archive(path: str) -> bool:
    """Whether a ``sys.path`` entry that is no folder is a zip archive or a folder in one
    (``zipimport`` searches it)."""
    if os.path.isdir(path):
        return False
    from moonpin.preflight.access import zipfs

    return zipfs.archive_of(path) is not None


def from_site_packages(folders: Sequence[str]) -> Target:
    """The environment of ``--site-packages`` folders (the first decides the version),
    with what their ``.pth`` files add; ``PYTHONPATH`` is not added (the folders are the
    environment as given, whatever the shell that runs moonpin has set)."""
    version = _version_of(folders[0]) if folders else None
    python = None
    if folders:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(folders[0]))))
        for name in ("python", "python3"):
            cand = os.path.join(root, "bin", name)
            if os.path.isfile(cand) and os.access(cand, os.X_OK):
                python = cand
                break
    ours = (sys.version_info[0], sys.version_info[1])
    if version is None:
        return Target(python or sys.executable, ours, site_path(folders),
                      machinery.EXTENSION_SUFFIXES,
                      "--site-packages; its Python version is not in its path: "
                      f"assuming {ours[0]}.{ours[1]}, this interpreter's", folders)
    suffixes = machinery.EXTENSION_SUFFIXES if version == ours else _suffixes_for(version)
    if python is None and version == ours:
        python = sys.executable
    return Target(python, version, site_path(folders), suffixes, "--site-packages", folders)


def from_python(python: str, timeout: float = 30.0) -> Target:
    """Ask ``python`` what its importer searches (one child process)."""
    import json

    try:
        proc = _ask(python, timeout)
    except OSError as e:
        raise TargetError(f"cannot run --python {python!r}: {e}") from e
    try:
        doc = json.loads(proc.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
        version = (int(doc["version"][0]), int(doc["version"][1]))
        paths = [str(p) for p in doc["path"]]
        ext = [str(s) for s in doc["ext"]]
        sites = [str(s) for s in doc.get("sites") or ()]
    except (ValueError, IndexError, KeyError, TypeError) as e:
        tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise TargetError(f"--python {python!r} is not a Python that answers "
                          f"(exit {proc.returncode}: {tail[0][:200]})") from e
    # the ask has no working folder and no PYTHONPATH: add back what a worker started here
    # (`python -m sglang.launch_server`) sees
    extra = _pythonpath()
    cwd = None if os.environ.get("PYTHONSAFEPATH") else _working_folder()
    first = [cwd] if cwd is not None and os.path.isdir(cwd) else []
    front = doc.get("front")
    n = front if isinstance(front, int) and 0 <= front <= len(paths) else 0
    t = Target(python, version, list(dict.fromkeys([*first, *paths[:n], *extra, *paths[n:]])),
               ext, "--python", sites)
    t.cwd = cwd
    if doc.get("user_site") is True:  # site.main() ran usercustomize too
        t.customize = ("sitecustomize", "usercustomize")
    stdlib, venv, prefix = doc.get("stdlib"), doc.get("venv"), doc.get("prefix")
    if isinstance(stdlib, str) and isinstance(venv, bool):
        t.managed = lambda: _managed_here(stdlib, venv, prefix if isinstance(prefix, str)
                                          else None)
    return t


def _pythonpath() -> list[str]:
    """``PYTHONPATH``'s folders as the interpreter puts them on ``sys.path``: absolute,
    an empty entry the working folder (``site`` makes every entry absolute)."""
    value = os.environ.get("PYTHONPATH")
    if not value:
        return []
    try:
        return [os.path.abspath(p) if p else os.getcwd() for p in value.split(os.pathsep)]
    except OSError:  # no working folder: the relative entries find nothing
        return [p for p in value.split(os.pathsep) if p.startswith("/")]


def _ask(python: str, timeout: float) -> subprocess.CompletedProcess[bytes]:
    """``python -E -S -c _ASK`` run in a session of its own, as a ``CompletedProcess``. Its
    answer is read until it exits; whatever it left running then (a ``.pth`` line's
    daemon, which keeps the output pipes open: waiting for their end would take the whole
    timeout) is killed, as is everything of it at the timeout (``OSError`` then)."""
    import signal
    import subprocess
    import time

    flags = ["-E", "-S", *(["-s"] if os.environ.get("PYTHONNOUSERSITE") else [])]
    proc = subprocess.Popen([python, *flags, "-c", _ASK], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + timeout
    late = False
    try:
        while True:
            try:
                out, err = proc.communicate(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                late = time.monotonic() > deadline
                if proc.poll() is None and not late:
                    continue
                try:  # its session: what it left holds the pipes, their end comes now
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass  # the session ended by itself since the child was seen gone
                out, err = proc.communicate()
                break
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass  # nothing of it is left
        proc.wait()
    if late:
        raise OSError(f"no answer in {timeout:.0f} s")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def default() -> Target:
    """An active virtualenv moonpin does not itself run from, else this interpreter."""
    venv = os.environ.get("VIRTUAL_ENV")
    if venv and os.path.realpath(venv) != os.path.realpath(sys.prefix):
        python = os.path.join(venv, "bin", "python")
        if os.path.isfile(python):
            try:
                t = from_python(python)
            except TargetError:
                pass
            else:
                t.how = "the active virtualenv $VIRTUAL_ENV"
                return t
    return this_python()
