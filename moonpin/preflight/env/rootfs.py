"""``moonpin check --rootfs DIR`` and ``--image PATH``: judge an image's root filesystem
from outside it, without running anything in it.

The environment is the one the image's interpreter would have, computed from its files as
CPython computes it (Modules/getpath.py, Lib/site.py), never by running it:

* the interpreter: the one ``Entrypoint``/``Cmd`` runs (``python3 -m sglang.launch_server``,
  ``/opt/venv/bin/python``, a console script's ``#!`` line, a ``sh -c`` line naming one),
  else ``python3``, found through the image's ``PATH`` and its symbolic links inside the
  root (:func:`moonpin.preflight.access.chroot.resolve`);
* its version from its file name (``python3.12``), else ``pyvenv.cfg``, else the
  ``lib/pythonX.Y`` folder of its prefix, else ``libpythonX.Y``;
* ``sys.path``: the folder of ``-m``/``-c`` (``WorkingDir``), ``PYTHONPATH``, the standard
  library and ``lib-dynload`` of the base prefix, then the site folders (a venv's
  ``site-packages``, and the base's when its ``pyvenv.cfg`` says
  ``include-system-site-packages = true``; Debian's and Ubuntu's ``dist-packages`` when the
  interpreter's ``site.py`` is theirs), each followed by what its ``.pth`` files add, and
  the user's site folder (``~/.local/lib/pythonX.Y/site-packages`` of the ``HOME`` the
  worker gets, or ``PYTHONUSERBASE``'s) before the system's when ``site`` enables it;
* the extension suffixes of that version and the image's architecture.

Everything that names a path of the image is then resolved under the root; the report
names image paths (``/opt/venv/...``), and its pip fix lines are written for a Dockerfile
(``RUN pip install ...``; ``RUN /opt/venv/bin/python -m pip install ...`` when the
interpreter is not the ``python3`` of the image's ``PATH``:
:mod:`moonpin.preflight.judge.dockerfile`). No deep probe runs.
"""

from __future__ import annotations

import os

from moonpin.preflight.access import chroot as rootfs
from moonpin.preflight.access.identity import Identity
from moonpin.preflight.env.target import Target, TargetError, site_path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

__all__ = ["DEFAULT_PATH", "ImageConfig", "bundle", "image_env", "target_for", "unpack_to",
           "user_home", "with_overrides", "worker_identity"]

#: The ``PATH`` of an image whose config sets none (the OCI runtimes' default).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Machine names of the OCI ``architecture`` values.
_MACHINES = {"amd64": "x86_64", "x86_64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64",
             "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}
_E_MACHINES = {62: "x86_64", 183: "aarch64", 21: "ppc64le", 22: "s390x", 243: "riscv64"}
_SHELLS = ("sh", "bash", "dash", "ash", "zsh")
_CAP_CFG = 64 << 10


class ImageConfig:
    """An image's runtime configuration, as :mod:`moonpin.readers.image.manifest` reads it from the
    OCI config (``Env`` as ``KEY=VALUE`` strings or a mapping; ``Entrypoint``/``Cmd`` as argv
    lists); every field optional."""

    def __init__(self, env: Any = None, entrypoint: Sequence[str] | None = None,
                 cmd: Sequence[str] | None = None, working_dir: str | None = None,
                 os: str | None = None, architecture: str | None = None,
                 variant: str | None = None, user: str | None = None,
                 groups: Sequence[int] | None = None) -> None:
        self.env = env
        #: the config's ``User`` (``name``, ``uid``, ``name:group``, ``uid:gid``...); a
        #: runtime bundle's ``process.user`` as ``uid:gid``, with ``groups`` its
        #: ``additionalGids``
        self.user = user
        self.groups = groups
        self.entrypoint = entrypoint
        self.cmd = cmd
        self.working_dir = working_dir
        self.os = os
        self.architecture = architecture
        self.variant = variant


def bundle(path: str) -> tuple[str, ImageConfig | None]:
    """The root folder and runtime configuration of what ``--rootfs`` names: a runtime
    bundle (``umoci unpack`` / ``runc spec``: ``config.json`` beside ``rootfs/``) given as
    the bundle or as its ``rootfs/``, its ``process`` (``env``, ``args``, ``cwd``) read from
    ``config.json`` (the OCI runtime spec, config.md); any other folder as it is, with no
    configuration (a ``docker export`` tree). Raises :class:`TargetError` for a
    ``config.json`` that cannot be read."""
    here = os.path.join(path, "config.json")
    up = os.path.join(os.path.dirname(os.path.abspath(path).rstrip("/")), "config.json")
    for cfg, bundle_dir in ((here, path), (up, os.path.dirname(os.path.abspath(path)))):
        if not os.path.isfile(cfg):
            continue
        doc = _runtime_config(cfg)
        rel = doc.get("root", {}).get("path") if isinstance(doc.get("root"), dict) else None
        root = os.path.join(bundle_dir, rel if isinstance(rel, str) and rel else "rootfs")
        if cfg == up and os.path.realpath(root) != os.path.realpath(path):
            continue  # a config.json above some other folder: not this root's
        if not os.path.isdir(root):
            continue
        found = doc.get("process")
        proc: dict[str, Any] = found if isinstance(found, dict) else {}
        env = [e for e in proc.get("env") or () if isinstance(e, str)]
        args = [a for a in proc.get("args") or () if isinstance(a, str)]
        cwd = proc.get("cwd") if isinstance(proc.get("cwd"), str) else None
        # config.md "User": numeric ids, resolved by whoever wrote the bundle
        found_user = proc.get("user")
        u: dict[str, Any] = found_user if isinstance(found_user, dict) else {}
        ids = [u.get("uid", 0), u.get("gid", 0)]
        extra = [g for g in u.get("additionalGids") or () if type(g) is int]
        user = (f"{ids[0]}:{ids[1]}" if all(type(i) is int and i >= 0 for i in ids)
                else None)
        return root, ImageConfig(env=env, entrypoint=args, working_dir=cwd, user=user,
                                 groups=extra)
    return path, None


def _runtime_config(path: str) -> dict[str, Any]:
    import json

    from moonpin.kb.files import read_regular

    try:
        doc = json.loads(read_regular(path, cap=4 << 20, what="config.json"))
    except OSError as e:
        raise TargetError(f"{path} cannot be read: {e}") from e
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise TargetError(f"{path} is not a runtime bundle's config (not JSON: {e})",
                          tip="pass the bundle's rootfs/ with --image-env/--interpreter, "
                          "or unpack the image again") from e
    if not isinstance(doc, dict):
        raise TargetError(f"{path} is not a runtime bundle's config (not a JSON object)")
    return doc


def with_overrides(config: Any, image_env: Sequence[str]) -> ImageConfig | None:
    """``config`` with the ``KEY=VALUE`` settings of ``--image-env`` over its ``Env``
    (what ``docker run -e`` does); ``config`` itself when there are none. Raises
    :class:`TargetError` for a setting without ``=``."""
    if not image_env:
        return config  # type: ignore[no-any-return]
    env = _env(config)
    for item in image_env:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise TargetError(f"--image-env {item!r} is not KEY=VALUE",
                              tip="e.g. --image-env PATH=/opt/venv/bin:/usr/bin:/bin")
        env[key] = value
    return ImageConfig(env=env, entrypoint=getattr(config, "entrypoint", None),
                       cmd=getattr(config, "cmd", None),
                       working_dir=getattr(config, "working_dir", None),
                       os=getattr(config, "os", None),
                       architecture=getattr(config, "architecture", None),
                       variant=getattr(config, "variant", None),
                       user=getattr(config, "user", None), groups=getattr(config, "groups", None))


def _lines(root: str, name: str) -> list[list[str]]:
    """The colon-separated records of the image's ``/etc/<name>`` (none: no such file)."""
    from moonpin.kb.files import read_regular

    try:
        data = read_regular(rootfs.resolve(root, f"/etc/{name}"), cap=16 << 20,
                            what=f"/etc/{name}")
    except OSError:
        return []
    return [ln.split(":") for ln in data.decode("utf-8", "replace").splitlines()
            if ln and not ln.startswith("#")]


def worker_identity(root: str, config: Any) -> Identity:
    """Who the image's worker runs as: its config's ``User`` resolved as runc does
    (libcontainer/user ``GetExecUser``) against the image's ``/etc/passwd`` and
    ``/etc/group``: a name, or a number (which need not be in ``/etc/passwd``), then
    optionally ``:`` and a group name or number. With no group given, the user's own group
    and every group listing its name; with one, that group alone. No ``User``: root. Raises
    :class:`TargetError` for a name the image does not have (its container cannot start)."""
    user = getattr(config, "user", None) or ""
    extra = tuple(getattr(config, "groups", None) or ())
    if not user:
        return Identity(0, (0, *extra), "root (the image config sets no User)")
    name, _, group = user.partition(":")
    passwd = [r for r in _lines(root, "passwd") if len(r) >= 4]
    groups = [r for r in _lines(root, "group") if len(r) >= 3]
    entry = next((r for r in passwd if (r[0] == name if not name.isdigit() else r[2] == name)),
                 None)
    if name.isdigit():
        uid = int(name)
    elif entry is not None and entry[2].isdigit():
        uid = int(entry[2])
    else:
        raise TargetError(f"the image config's User {user!r}: no user {name!r} in the "
                          "image's /etc/passwd, so its container cannot start (runc: "
                          "no matching entries in passwd file)",
                          tip="set USER to a user the image has, or to a number")
    said = f"the image config's User {user!r} (uid {uid}"
    if group:
        if group.isdigit():
            gids: tuple[int, ...] = (int(group),)
        else:
            g = next((r for r in groups if r[0] == group and r[2].isdigit()), None)
            if g is None:
                raise TargetError(f"the image config's User {user!r}: no group {group!r} in "
                                  "the image's /etc/group, so its container cannot start",
                                  tip="set USER to a group the image has, or to a number")
            gids = (int(g[2]),)
    else:
        primary = int(entry[3]) if entry is not None and entry[3].isdigit() else 0
        login = entry[0] if entry is not None else None
        gids = (primary, *(int(r[2]) for r in groups if r[2].isdigit() and login is not None
                           and login in r[3].split(",")))
    gids = (*gids, *extra)
    return Identity(uid, gids, f"{said}, gids {', '.join(map(str, dict.fromkeys(gids)))})")


def user_home(root: str, uid: int) -> str:
    """The home folder the image's worker of user id ``uid`` gets as ``HOME`` when its
    config's ``Env`` sets none: the first ``/etc/passwd`` entry of that uid, else ``/``
    (runc: ``os.Setenv("HOME", execUser.Home)`` when ``HOME`` is unset, its default
    ``ExecUser`` having ``Home: "/"``)."""
    for r in _lines(root, "passwd"):
        if len(r) >= 6 and r[2] == str(uid) and r[5].startswith("/"):
            return r[5]
    return "/"


def _venvs(root: str, limit: int = 4000) -> list[str]:
    """Image paths of the interpreters of the virtual environments in the image (a
    ``pyvenv.cfg`` at most three folders down, ``/proc``-like trees skipped; at most
    ``limit`` folders looked at), for a tip."""
    found: list[str] = []
    todo = [("", 0)]
    seen = 0
    while todo and seen < limit:
        rel, depth = todo.pop(0)
        try:
            entries = list(os.scandir(os.path.join(root, rel) if rel else root))
        except OSError:
            continue
        seen += 1
        names = {e.name for e in entries}
        if "pyvenv.cfg" in names and "bin" in names:
            found.append(f"/{rel}/bin/python")
            continue
        if depth >= 3:
            continue
        for e in sorted(entries, key=lambda e: e.name):
            if e.is_dir(follow_symlinks=False) and e.name not in (
                    "proc", "sys", "dev", "share", "include", "site-packages",
                    "dist-packages", "node_modules", ".git"):
                todo.append((f"{rel}/{e.name}".lstrip("/"), depth + 1))
    return found


def _interpreter_tip(root: str, config: Any) -> str:
    """What to pass when the image's interpreter is not found or not the one meant."""
    venvs = _venvs(root)
    named = (f"--interpreter {venvs[0]}" if venvs else "--interpreter /opt/venv/bin/python")
    where = f" (the image holds {', '.join(venvs[:3])})" if venvs else ""
    if config is None:
        return (f"name the image's interpreter{where}: {named}, or give its PATH: "
                "--image-env PATH=/opt/venv/bin:/usr/bin:/bin; a `umoci unpack` bundle "
                "passed whole (the folder with config.json) gives both")
    return f"name the image's interpreter{where}: {named}, or --image-env PATH=..."


#: The longest string Linux passes to a program, its NUL included (``MAX_ARG_STRLEN``,
#: 32 pages: execve(2) refuses a longer argument or environment string with E2BIG).
MAX_ARG_STRLEN = 32 * 4096


def _startable(config: Any) -> None:
    """Raise :class:`TargetError` when the image's process cannot start: an environment
    or argument string of its config past :data:`MAX_ARG_STRLEN` (what a 16 MiB ``PATH``
    would otherwise cost is a search of millions of folders)."""
    env = getattr(config, "env", None)
    items = ([f"{k}={v}" for k, v in env.items()] if isinstance(env, dict)
             else [str(i) for i in env or ()])
    args = [str(a) for f in ("entrypoint", "cmd")
            for a in ([getattr(config, f, None)] if isinstance(getattr(config, f, None), str)
                      else getattr(config, f, None) or ())]
    for kind, values in (("Env", items), ("Entrypoint/Cmd", args)):
        for v in values:
            size = len(v.encode("utf-8", "surrogateescape")) + 1
            if size > MAX_ARG_STRLEN:
                name = v.partition("=")[0][:40] if kind == "Env" else v[:40]
                raise TargetError(f"the image's config {kind} {name!r} is {size:,} bytes, "
                                  f"over the {MAX_ARG_STRLEN:,} Linux passes to a program "
                                  "(MAX_ARG_STRLEN): its process cannot start (execve: "
                                  "Argument list too long)",
                                  tip=f"rebuild the image with a shorter {kind} value "
                                  "(`docker inspect` shows them under Config)")


def image_env(config: Any) -> dict[str, str]:
    """The image config's ``Env`` as a mapping (what the worker's process starts with)."""
    return _env(config)


def _env(config: Any) -> dict[str, str]:
    raw = getattr(config, "env", None)
    if isinstance(raw, dict):
        return {str(k): str(v) for k, v in raw.items()}
    out: dict[str, str] = {}
    for item in raw or ():
        key, eq, value = str(item).partition("=")
        if eq:
            out[key] = value
    return out


def _argv(config: Any) -> list[str]:
    out: list[str] = []
    for field in ("entrypoint", "cmd"):
        value = getattr(config, field, None)
        if isinstance(value, str):
            import shlex

            try:
                out += shlex.split(value)
            except ValueError:
                out += value.split()
            continue
        out += [str(v) for v in value or ()]
    return out


def _is_python(name: str) -> bool:
    """``python``, ``python3``, ``python3.12`` (a file name, not a path)."""
    if not name.startswith("python"):
        return False
    tail = name[6:]
    return tail == "" or (all(p.isdigit() for p in tail.split(".")) and tail[:1].isdigit())


def _on_path(root: str, name: str, path: Sequence[str],
             why: list[str] | None = None) -> str | None:
    """The image path of ``name`` as the image's ``PATH`` finds it (execvp); ``why``
    collects what each candidate that is there but cannot run is."""
    if "/" in name:
        return name if name.startswith("/") else None
    for d in path:
        if not d.startswith("/"):
            continue
        image = d.rstrip("/") + "/" + name
        try:
            host = rootfs.resolve(root, image)
        except OSError:
            if why is not None:
                why.append(f"{image} is a symbolic link loop")
            continue
        if os.path.isfile(host) and os.access(host, os.X_OK):
            return image
        if why is not None and os.path.lexists(host):
            from moonpin.preflight.access.kinds import kind_of

            kind = kind_of(host) if not os.path.isfile(host) else "not executable"
            why.append(f"{image} is {kind}")
    return None


def _shebang(root: str, image: str) -> list[str]:
    """The ``#!`` line of a script of the image, split (``[]`` when it has none)."""
    try:
        host = rootfs.resolve(root, image)
        if not os.path.isfile(host):
            return []
        with open(host, "rb") as f:
            head = f.read(512)
    except OSError:
        return []
    if not head.startswith(b"#!"):
        return []
    return head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()


def _invocation(root: str, argv: list[str], path: Sequence[str],
                ) -> tuple[str, list[str] | None]:
    """The python the entry point runs (a name or an image path) and its arguments (None:
    the entry point names none, ``python3`` is assumed)."""
    words = list(argv)
    for _ in range(4):  # env, a shell's -c line, a console script: each unwrapped once
        while words and (words[0] in ("env", "/usr/bin/env", "/bin/env", "exec")
                         or ("=" in words[0] and not words[0].startswith("-"))):
            words = words[1:]
        if not words:
            break
        head = os.path.basename(words[0])
        if _is_python(head):
            return words[0], words[1:]
        if head in _SHELLS and "-c" in words:
            import shlex

            line = words[words.index("-c") + 1] if words.index("-c") + 1 < len(words) else ""
            try:
                inner = shlex.split(line.replace("&&", " ; ").replace(";", " ; "))
            except ValueError:
                inner = line.split()
            starts = [i for i, w in enumerate(inner) if _is_python(os.path.basename(w))]
            words = inner[starts[0]:] if starts else []
            continue
        found = _on_path(root, words[0], path)
        bang = _shebang(root, found) if found else []
        if not bang:
            break
        words = [*bang, *words[1:]]
    return "python3", None


def _read_cfg(root: str, image: str) -> dict[str, str] | None:
    """``pyvenv.cfg`` (``key = value`` lines) at ``image``, or None when there is none."""
    from moonpin.kb.files import read_regular

    host = rootfs.resolve(root, image)
    if not os.path.lexists(host):
        return None
    try:
        data = read_regular(host, cap=_CAP_CFG, what="pyvenv.cfg")
    except OSError as e:
        raise TargetError(f"{image} cannot be read: {e}") from e
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TargetError(f"{image} is not text (byte {e.start} is not UTF-8): the venv's "
                          "interpreter would not start with it") from e
    if "\0" in text:
        raise TargetError(f"{image} is not text (it holds NUL bytes)")
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, eq, value = line.partition("=")
        if eq:
            out[key.strip().lower()] = value.strip()
    return out


def _version_from(text: str) -> tuple[int, int] | None:
    parts = text.strip().split(".")
    if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
        return int(parts[0]), int(parts[1])
    return None


def _prefix_of(root: str, bin_dir: str, version: tuple[int, int] | None,
               ) -> tuple[str, tuple[int, int] | None]:
    """The prefix whose ``lib/pythonX.Y/os.py`` (getpath's landmark) is found from the
    interpreter's folder upwards, and the version that folder names."""
    cands = []
    d = bin_dir
    while d not in ("", "/"):
        d = os.path.dirname(d)
        cands.append(d)
    for prefix in [*cands, "/usr/local", "/usr"]:
        lib = rootfs.resolve(root, prefix.rstrip("/") + "/lib")
        names = ([f"python{version[0]}.{version[1]}"] if version else
                 sorted((n for n in _list(lib) if n.startswith("python3.")), reverse=True))
        for n in names:
            if os.path.isfile(os.path.join(lib, n, "os.py")):
                return prefix.rstrip("/") or "/", version or _version_from(n[6:])
    return (os.path.dirname(bin_dir) or "/"), version


def _list(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _libpython_version(root: str, prefix: str) -> tuple[int, int] | None:
    for n in sorted(_list(rootfs.resolve(root, prefix.rstrip("/") + "/lib")), reverse=True):
        if n.startswith("libpython3.") and ".so" in n:
            return _version_from(n[9:].split(".so")[0].rstrip("dmu"))
    return None


def _machine(root: str, config: Any, exe: str) -> str:
    arch = getattr(config, "architecture", None)
    if isinstance(arch, str) and arch in _MACHINES:
        return _MACHINES[arch]
    try:
        with open(exe, "rb") as f:  # the interpreter's ELF header: e_machine at 18
            head = f.read(20)
    except OSError:
        head = b""
    from moonpin.readers.elf.layout import header_machine

    machine = _E_MACHINES.get(header_machine(head) or 0)
    if machine:
        return machine
    return os.uname().machine


def _debian(root: str, stdlib: str, prefix: str, v: tuple[int, int]) -> bool:
    """Whether the interpreter's ``site.py`` is Debian's (it adds ``dist-packages``); when
    the root has no ``site.py`` (an image unpacked to what the check reads), whether a
    ``dist-packages`` folder of Debian's layout is there."""
    from moonpin.kb.files import read_regular

    try:
        return b"dist-packages" in read_regular(rootfs.resolve(root, stdlib + "/site.py"),
                                                cap=1 << 20, what="site.py")
    except OSError:
        pass
    return any(os.path.isdir(rootfs.resolve(root, d)) for d in _sites(root, prefix, v, True))


def _sites(root: str, prefix: str, v: tuple[int, int], debian: bool) -> list[str]:
    """The image paths ``site.getsitepackages()`` gives for ``prefix`` (Lib/site.py;
    Debian's patch: ``/usr/local/lib/python3.X/dist-packages``, ``/usr/lib/python3/
    dist-packages``, ``/usr/lib/python3.X/dist-packages``)."""
    py = f"python{v[0]}.{v[1]}"
    p = prefix.rstrip("/")
    if debian:
        return [f"{p}/local/lib/{py}/dist-packages", f"{p}/lib/python3/dist-packages",
                f"{p}/lib/{py}/dist-packages"]
    return [f"{p}/lib64/{py}/site-packages", f"{p}/lib/{py}/site-packages"]


def _first_path(args: Sequence[str], cwd: str) -> tuple[str | None, bool, bool]:
    """``sys.path[0]`` for the interpreter's arguments (the working folder for ``-m`` and
    ``-c``, the script's folder for a script; none under ``-I``/``-P``), whether
    ``-I``/``-E`` makes it ignore ``PYTHONPATH``, and whether ``-I``/``-s`` keeps the
    user's site folder out."""
    isolated = ignore_env = no_user = False
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("-") or a == "-":
            first = None if a == "-" else (os.path.dirname(a) if a.startswith("/") else
                                           os.path.join(cwd, os.path.dirname(a)))
            return (None if isolated else first or cwd), ignore_env, no_user
        if a.startswith(("-m", "-c")):
            return (None if isolated else cwd), ignore_env, no_user
        flags = a[1:] if not a.startswith("--") else ""
        isolated = isolated or "I" in flags or "P" in flags
        ignore_env = ignore_env or "I" in flags or "E" in flags
        no_user = no_user or "I" in flags or "s" in flags
        i += 2 if a in ("-X", "-W") else 1
    return (None if isolated else cwd), ignore_env, no_user


def _user_site(root: str, env: Mapping[str, str], uid: int, py: str) -> str:
    """The user's site folder ``site`` adds for the image's worker, as a path of the image
    (Lib/site.py ``getuserbase``: ``PYTHONUSERBASE``, else ``~/.local``, ``~`` being
    ``HOME``, else the home the runtime sets from the image's ``/etc/passwd``:
    :func:`user_home`)."""
    base = env.get("PYTHONUSERBASE") or os.path.join(
        env.get("HOME") or user_home(root, uid), ".local")
    return os.path.normpath(f"{base}/lib/{py}/site-packages")


def target_for(root: str, config: Any = None, interpreter: str | None = None) -> Target:
    """The environment the image at ``root`` runs its interpreter in (module doc);
    ``interpreter``: the image's python to judge (an image path, or a name on its
    ``PATH``) instead of the one its entry point runs. Raises :class:`TargetError` naming
    what cannot be read and why."""
    if not os.path.isdir(root):
        raise TargetError(f"--rootfs {root!r} is not a folder (pass the root of an unpacked "
                          "image: what `docker export` or `umoci unpack` leaves)")
    root = os.path.realpath(root)
    _startable(config)
    env = _env(config)
    path = [d for d in env.get("PATH", DEFAULT_PATH).split(":") if d]
    if interpreter is not None and not (interpreter.startswith("/") or "/" not in interpreter):
        raise TargetError(f"--interpreter {interpreter!r} is neither a path in the image "
                          "nor a name on its PATH", tip="e.g. --interpreter /opt/venv/bin/python")
    name, args = ((interpreter, None) if interpreter is not None
                  else _invocation(root, _argv(config), path))
    why: list[str] = []
    image = _on_path(root, name, path, why)
    if image is None:
        raise TargetError((f"the image has no {name!r} on its PATH ({':'.join(path)})"
                           if "/" not in name else f"the image has no interpreter {name}")
                          + (f": {'; '.join(why)}" if why else ""),
                          tip=_interpreter_tip(root, config))
    try:
        exe = rootfs.resolve(root, image)
    except OSError as e:
        raise TargetError(f"{image}: {e.strerror}") from e
    from moonpin.preflight.access.kinds import kind_of

    if not os.path.isfile(exe):
        raise TargetError(f"{image} is {kind_of(exe)}, not an interpreter",
                          tip=_interpreter_tip(root, config))
    real = rootfs.image_path(root, exe)  # symbolic links resolved: python3 -> python3.12
    version = _version_from(os.path.basename(real)[6:]) if _is_python(
        os.path.basename(real)) else None
    bin_dir = os.path.dirname(image)
    cfg_at = next((c for c in (f"{bin_dir}/pyvenv.cfg",
                               f"{os.path.dirname(bin_dir)}/pyvenv.cfg")
                   if _read_cfg(root, c) is not None), None)
    cfg = _read_cfg(root, cfg_at) if cfg_at else None
    if cfg is not None and version is None:
        version = _version_from(cfg.get("version_info") or cfg.get("version") or "")
    base_bin = cfg.get("home", os.path.dirname(real)) if cfg else os.path.dirname(real)
    base, version = _prefix_of(root, base_bin.rstrip("/") or "/", version)
    version = version or _libpython_version(root, base)
    if version is None:
        raise TargetError(f"{image}: its Python version is not in its name, nor in a "
                          f"lib/python3.X folder or libpython of {base}")
    py = f"python{version[0]}.{version[1]}"
    stdlib = f"{base.rstrip('/')}/lib/{py}"
    wd = getattr(config, "working_dir", None) or "/"
    first, isolated, no_user = (None, False, False) if args is None else _first_path(args, wd)
    if not isolated and env.get("PYTHONSAFEPATH"):
        first = None  # -P from the environment: no working or script folder first
    image_paths: list[str] = []
    if not isolated:  # site makes each entry absolute: an empty one is the working folder
        image_paths += [os.path.normpath(os.path.join(wd, p)) for p in
                        env.get("PYTHONPATH", "").split(":")] if env.get("PYTHONPATH") else []
    image_paths += [f"{base.rstrip('/')}/lib/python{version[0]}{version[1]}.zip", stdlib,
                    f"{stdlib}/lib-dynload"]
    debian = _debian(root, stdlib, base, version)
    sites = []
    # the user's site folder: site enables it unless -s/-I, PYTHONNOUSERSITE (not under
    # -E/-I) or a venv without the system's site folders says not; it comes after a venv's
    # own folder and before the system's (Lib/site.py main: venv, addusersitepackages,
    # addsitepackages)
    identity = worker_identity(root, config)
    system = cfg is None or cfg.get("include-system-site-packages",
                                    "false").lower() == "true"
    user_on = system and not no_user and not (env.get("PYTHONNOUSERSITE") and not isolated)
    # -E/-I: PYTHONUSERBASE is not read; HOME still is (os.path.expanduser)
    seen = {k: v for k, v in env.items() if not k.startswith("PYTHON")} if isolated else env
    user = [_user_site(root, seen, identity.uid, py)] if user_on else []
    if cfg is not None:
        venv = os.path.dirname(cfg_at or "")
        sites += [f"{venv}/lib/{py}/site-packages"]
    if system:
        sites += [*user, *_sites(root, base, version, debian)]
    initial: list[str] = []
    for p in image_paths:
        got = rootfs.resolve(root, p)
        if os.path.isdir(got) and got not in initial:
            initial.append(got)
    host_sites: list[str] = []
    for s in sites:
        got = rootfs.resolve(root, s)
        if os.path.isdir(got) and got not in host_sites:
            host_sites.append(got)
    host_paths = site_path(host_sites, initial, root)
    if first and os.path.isdir(rootfs.resolve(root, first)):
        host_paths = list(dict.fromkeys([rootfs.resolve(root, first), *host_paths]))
    machine = _machine(root, config, exe)
    tag = f"{version[0]}{version[1]}"
    t = Target(os.path.join(root, image.lstrip("/")), version, host_paths,
               [f".cpython-{tag}-{machine}-linux-gnu.so", ".abi3.so", ".so"],
               f"the image's {image}" + (f" -> {real}" if real != image else "")
               + (f", a venv ({cfg_at})" if cfg_at else ""), host_sites)
    t.root = root
    t.machine = machine
    t.user = identity
    if user_on:  # site imports usercustomize too
        t.customize = ("sitecustomize", "usercustomize")
    # the worker's working folder: the config's WorkingDir, else the runtime's "/" (runc)
    t.working_dir = getattr(config, "working_dir", None) or "/"
    if first and host_paths and host_paths[0] == rootfs.resolve(root, first):
        t.cwd = host_paths[0]  # sys.path[0]: the working folder (or the script's)
    from moonpin.preflight.loader.ldso import ld_path_folders, preload_entries

    # the image's LD_LIBRARY_PATH: its tokens as ld.so there reads them ($ORIGIN: the
    # python's real folder); an empty entry, the worker's working folder, is not known
    t.ld_path = tuple(ld_path_folders(env.get("LD_LIBRARY_PATH", ""), real, root))
    # and its LD_PRELOAD, whose objects ld.so maps before what the interpreter needs, in
    # the global scope (/etc/ld.so.preload is the loader model's to read: not the Env's)
    t.preload = tuple(p.path for p in preload_entries(env.get("LD_PRELOAD", ""), real, root))
    plain = _on_path(root, "python3", path)
    t.pip = ("pip" if plain is not None and rootfs.resolve(root, plain) == exe
             and os.path.dirname(plain) == os.path.dirname(image) else f"{image} -m pip")
    t.managed = lambda: _managed(root, stdlib, cfg is not None, env, config)
    if config is None and interpreter is None:  # no Env, no entry point: python3 on the
        others = [v for v in _venvs(root) if v != image]  # OCI default PATH, a guess
        if others:
            t.guessed = (f"the image's configuration is not known (a `docker export` tree?), "
                         f"so its interpreter was taken to be {image}, the python3 of the "
                         f"default PATH; the image also holds {', '.join(others[:3])}",
                         _interpreter_tip(root, config))
    return t


def _managed(root: str, stdlib: str, venv: bool, env: dict[str, str], config: Any) -> bool:
    """PEP 668 in the image (:mod:`moonpin.preflight.env.pep668`): its paths resolved under
    its root, its configured ``Env``, the home of its ``User`` (root's by default)."""
    from moonpin.preflight.env import pep668

    user = str(getattr(config, "user", "") or "")
    home = env.get("HOME") or ("/root" if user in ("", "0", "root") or user.startswith("0:")
                               else None)
    configs = []
    for c in pep668.config_files(home, None, env):
        if c.startswith("/"):
            try:
                configs.append(rootfs.resolve(root, c))
            except OSError:  # a symbolic link loop: no file pip reads either
                continue
    try:  # the marker's own links too stay in the image (one to the host's /etc/hostname)
        marker = rootfs.resolve(root, f"{stdlib}/EXTERNALLY-MANAGED")
    except OSError:
        return False  # a loop: not a file, for pip's os.path.isfile either
    from moonpin.preflight.access.confined import Confined

    return pep668.externally_managed(rootfs.resolve(root, stdlib), venv, env, configs,
                                     marker=marker, within=Confined(root))


def unpack_to(path: str, platform: str | None, dest: str,
              reads: Sequence[Mapping[str, Sequence[str]]] = ()) -> Any:
    """The image file at ``path`` unpacked (:func:`moonpin.readers.image.layers.unpack`) into
    the folder ``dest`` (the caller's to remove, also on an error or an interrupt), with what
    the loader rules read of it (``reads``: each rule's ``IMAGE_READS``): its
    config. Raises :class:`moonpin.readers.image.manifest.ImageError`, or
    :class:`ImportError` when this moonpin has no image reader."""
    import importlib

    ri: Any = importlib.import_module("moonpin.readers.image.manifest")
    unpack: Any = getattr(ri, "unpack", None)
    if unpack is None:  # the layers' reader beside it
        unpack = importlib.import_module("moonpin.readers.image.layers").unpack
    img = ri.open_image(path, platform)
    unpack(img, dest, reads=reads)
    config = img.config
    if os.geteuid() != 0 and getattr(config, "user", None):
        # unpacked by another user, its files are that user's: their owners say nothing
        # of the image's, so what the config's User may read is not judged
        import dataclasses

        config = dataclasses.replace(config, user=None)
    return config
