"""Who owns a shared library the loader cannot find, and what to do about a preload that
stops the interpreter: the fix lines of a load that fails on the image's own files, built
from the records the judged image keeps (its distributions' RECORDs and METADATA, its dpkg
database, its ``LD_PRELOAD`` and ``/etc/ld.so.preload``), never from names known here.

Read only when a load has failed (the worker-start path pays nothing when it loads). Only
``os`` at import."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from moonpin.preflight.env.context import Context
    from moonpin.preflight.installed.image_facts import Dist
    from moonpin.preflight.loader.loadchain import Report

__all__ = ["Mend", "load_mend", "missing_mend", "preload_mend"]

#: dpkg's per-package file lists (dpkg(1): ``/var/lib/dpkg/info/<package>.list``, one
#: absolute path a line, ``<package>`` with ``:<arch>`` for a Multi-Arch: same package)
DPKG_INFO = "var/lib/dpkg/info"
#: a list is a few KiB (libc6's ~40 KiB); one past this is not a package list
_LIST_CAP = 4 << 20
#: how many lists are opened at most (a Debian image holds a few hundred to ~2,000)
_LISTS_MAX = 20_000
#: Debian's name of the machines ``os.uname().machine`` says (dpkg-architecture(1))
_DEB_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64el", "s390x": "s390x"}
#: ld.so's own message for a preloaded object's need that cannot be found
#: (:meth:`moonpin.preflight.loader.ldproc.Process.start`)
_PRELOADED = ", preloaded)"


class Mend:
    """What the check found about a failed load: ``said`` (who owns the missing file, or
    which preload stops the interpreter, in words, for the line's message) and ``fix``
    (the line that mends it, or words that say what is needed when no record here names
    a command: never a command that would not mend it); ``certain``: the records name the
    owner (a command), not only what is missing."""

    __slots__ = ("certain", "fix", "said")

    def __init__(self, said: str, fix: str, certain: bool) -> None:
        self.said = said
        self.fix = fix
        self.certain = certain


def load_mend(res: Report, ctx: Context) -> Mend | None:
    """The mend of a failed load ``res`` when what stops it is a shared library nobody put
    there or a preload (None: another failure, such as a symbol, whose fix is the
    caller's). A preload first: ld.so stops before the interpreter runs."""
    if res.chain_error is not None:
        _, cls, message, _ = res.chain_error
        if cls == "an ld.so error" and message.endswith(_PRELOADED):
            return preload_mend(message, ctx)
        failed = [why for *_, err, _, _, why in res.loads if err is not None]
        if failed and failed[-1][0] == "missing":
            _, name, needer = failed[-1]
            return missing_mend(name, needer, ctx)
        return None
    if res.missing and not res.bad:
        name, needer = next(iter(res.missing.items()))  # the first ld.so meets
        return missing_mend(name, needer, ctx)
    return None


def missing_mend(name: str, needer: str, ctx: Context) -> Mend:
    """What puts back ``name`` (a soname ld.so cannot find) that ``needer`` (a path under
    the root, or the file name the loader's findings keep of it) needs: the installed
    distribution whose RECORD lists a file of that name that is gone; else the package of
    the image's dpkg database that lists it; else the requirements the needer's own
    distribution declares and that are not installed; else an honest line that no record
    here names an owner."""
    dists = _dists(ctx)
    shown = _shown(ctx, needer)
    owner = None
    for dist in dists:
        for path in _recorded(dist, ctx):
            if path == needer or ("/" not in needer and os.path.basename(path) == needer):
                owner = owner or dist
            elif os.path.basename(path) == name and not os.path.lexists(path):
                return Mend(f"{_shown(ctx, path)} is gone, which {dist.name} {dist.version}'s "
                            "RECORD lists", "pip install --force-reinstall --no-deps "
                            f"'{dist.name}=={dist.version}'", True)
    system = "the image's" if ctx.root is not None else "this system's"
    package, listed = _dpkg_owner(name, ctx)
    if package is not None and listed is not None:
        said = f"{listed} is gone, which {system} dpkg database lists as package {package}'s"
        return _dpkg_mend(name, package, listed, said, ctx)
    nobody = f"no installed distribution's RECORD lists {name}" + (
        f"; {system} dpkg database lists it as package {package}'s, and it is there"
        if package is not None else f", nor {system} dpkg database" if _has_dpkg(ctx)
        else f", and {system.removesuffix(chr(39) + 's')} has no dpkg database")
    if owner is not None:
        unmet = _unmet(owner, dists, ctx)
        if unmet:
            reqs = " ".join(f"'{r}'" for r in unmet)
            return Mend(f"{nobody}; {shown} is {owner.name} {owner.version}'s, which requires "
                        f"{', '.join(unmet)}, not installed", f"pip install {reqs} "
                        f"({owner.name}'s own requirement{'s' * (len(unmet) > 1)}, "
                        "not installed; `pip check` names it too)", True)
    return Mend(f"{nobody}: no owner found", f"install what provides {name} "
                + ("in the image " if ctx.root is not None else "") + f"({shown} needs it; "
                "no record here names the package that ships it)", False)


def preload_mend(message: str, ctx: Context) -> Mend:
    """What to do about a preloaded object whose need ld.so cannot find (``message``: the
    interpreter's start error, naming the need and the object): the entry that brings it
    and where it comes from (the worker's ``LD_PRELOAD``, line N of ``/etc/ld.so.preload``),
    to remove. Never the library to add instead: the tool that would add it starts with the
    same preloads and stops too."""
    head = message.split("error while loading shared libraries: ", 1)[-1]
    obj = head.rsplit("(needed by ", 1)[-1][:-len(_PRELOADED)]
    entries = _preload_entries(ctx)
    mine = [e for e in entries if e[1] is not None and _same(e[1], obj)]
    if mine:
        said = "preloaded by " + " and ".join(e[2] for e in mine)
        removes = " and ".join(f"remove {e[0]} from {e[2]}" for e in mine)
    else:  # a need of a preloaded object's own needs: which entry brings it is not said
        said = "the preloads: " + ("; ".join(f"{e[0]} ({e[2]})" for e in entries)
                                   or "none found")
        removes = f"remove the preload that brings {_shown(ctx, obj)}"
    # no line that adds the library instead: every program the image runs (its pip, apt,
    # dpkg, a Dockerfile's RUN) starts with the same preloads and stops the same way
    # (carried out on hunt-D-root-nonvshmem: its pip exits 127 too)
    return Mend(f"exit 127 before the interpreter runs; {said}", removes, bool(mine))


def _preload_entries(ctx: Context) -> list[tuple[str, str | None, str]]:
    """Each preload entry as (how it is written, the file it names here or None, where it
    comes from): ``LD_PRELOAD``'s, then ``/etc/ld.so.preload``'s with its line, as the
    loader's model reads them (:func:`moonpin.preflight.loader.ldso.preload_file`)."""
    from moonpin.preflight.access.chroot import image_path
    from moonpin.preflight.loader import ldso

    root = ctx.root
    out: list[tuple[str, str | None, str]] = []
    if ctx.preload is not None:  # an image's (its Env, --image-env): already host paths
        where = "LD_PRELOAD in the image's environment (its Env or --image-env)"
        out += [(image_path(root, e) if root else e, e if "/" in e else None, where)
                for e in ctx.preload]
    else:
        out += [(e, e if "/" in e else None, "LD_PRELOAD in the worker's environment")
                for e in ldso.env_preload(ctx.python)]
    exe = image_path(root, ctx.python) if root is not None and ctx.python else ctx.python
    out += [(p.written, p.path if "/" in p.path else None, f"{ldso.PRELOAD_FILE} line {p.line}")
            for p in ldso.preload_file(root, exe, reader=ctx.user)]
    return out


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.normpath(a) == os.path.normpath(b)


def _shown(ctx: Context, path: str) -> str:
    """``path`` as the image names it (the report's own rewriting does the rest)."""
    if ctx.root is None:
        return path
    from moonpin.preflight.access.chroot import image_path

    return image_path(ctx.root, path)


def _dists(ctx: Context) -> list[Dist]:
    """Every distribution installed on the target's ``sys.path``, first found first."""
    from moonpin.preflight.installed.image_facts import read_dists

    seen: set[str] = set()
    out = []
    for d in read_dists(list(dict.fromkeys([*ctx.paths, *(ctx.sites or ())])), ctx.confined,
                        ("",)):
        if d.name not in seen:
            seen.add(d.name)
            out.append(d)
    return out


def _recorded(dist: Dist, ctx: Context) -> list[str]:
    """The files ``dist``'s RECORD lists, as paths here (relative ones under its folder)."""
    from moonpin.preflight.installed.image_facts import record_path, record_paths

    if not dist.meta:
        return []
    try:
        lines = list(record_paths(dist.meta, whole=True, within=ctx.confined))
    except OSError:
        return []
    out = []
    for line in lines:
        rel = record_path(line)
        if rel and "\0" not in rel:
            path = os.path.normpath(os.path.join(dist.root, rel))
            if ctx.root is not None and os.path.isabs(rel):  # the image's own path
                path = os.path.normpath(os.path.join(ctx.root, rel.lstrip("/")))
            out.append(path)
    return out


def _has_dpkg(ctx: Context) -> bool:
    return os.path.isdir(os.path.join(ctx.root or "/", DPKG_INFO))


def _dpkg_owner(name: str, ctx: Context) -> tuple[str | None, str | None]:
    """(the dpkg package whose file list names a file ``name``, that file as the image
    names it when it is gone, else None): the image's ``/var/lib/dpkg/info/*.list``, read
    on this failing path only; a package of the image's own architecture named without
    its ``:<arch>``. Debug-symbol copies (``/usr/lib/debug``) are not the library."""
    from moonpin.kb.files import read_regular

    folder = os.path.join(ctx.root or "/", DPKG_INFO)
    try:
        lists = sorted(n for n in os.listdir(folder) if n.endswith(".list"))[:_LISTS_MAX]
    except OSError:
        return None, None
    tail = ("/" + name).encode()
    arch = _DEB_ARCH.get(ctx.machine or os.uname().machine, "")
    found: tuple[str, str] | None = None
    for entry in lists:
        try:
            data = read_regular(os.path.join(folder, entry), cap=_LIST_CAP,
                                what="dpkg file list", within=ctx.root)
        except OSError:
            continue
        if tail + b"\n" not in data + b"\n":
            continue
        for line in data.decode("utf-8", "surrogateescape").split("\n"):
            if not line.endswith("/" + name) or line.startswith("/usr/lib/debug/"):
                continue
            package = entry[:-len(".list")]
            if arch and package.endswith(":" + arch):
                package = package[:-len(arch) - 1]
            here = os.path.join(ctx.root or "/", line.lstrip("/"))
            if not os.path.lexists(here):
                return package, line
            found = found or (package, line)
    if found is not None:  # listed, and there: ld.so does not find it where it is
        return found[0], None
    return None, None


#: what ``apt-get install`` runs here (apt-get, its download methods: apt's
#: ``/usr/lib/apt/methods/<scheme>``), then what ``dpkg -i`` runs (dpkg, and dpkg-deb to
#: unpack the archive)
_APT = ("usr/bin/apt-get", "usr/lib/apt/methods/http", "usr/lib/apt/methods/https")
_DPKG = ("usr/bin/dpkg", "usr/bin/dpkg-deb")


def _dpkg_mend(name: str, package: str, listed: str, said: str, ctx: Context) -> Mend:
    """Put back dpkg ``package``'s files with the first tool of the image that runs without
    ``name``: ``apt-get install --reinstall``; dpkg with the archive fetched elsewhere when
    apt needs it (libffi: apt's http method, through gnutls and p11-kit); the library
    (``listed``: its path in the image) copied in from the archive when dpkg needs it too
    (libz, libbz2: dpkg-deb)."""
    apt = _needs(name, _APT + _DPKG, ctx)
    if apt is None:
        return Mend(said, f"apt-get update && apt-get install -y --reinstall {package}", True)
    version = _dpkg_version(package, ctx)
    if version is None:  # no version recorded: what to fetch is not known here
        return Mend(f"{said}; apt cannot run in the image ({apt} needs {name} too)",
                    f"install {package} again from outside the image ({apt} needs {name}, "
                    "so apt in it cannot)", False)
    ver, arch = version
    name_only = package.partition(":")[0]
    deb = f"{name_only}_{ver.replace(':', '%3a')}_{arch}.deb"
    fetch = f"apt-get download {name_only}={ver}"
    dpkg = _needs(name, _DPKG, ctx)
    if dpkg is None:
        return Mend(f"{said}; apt cannot download in the image ({apt} needs {name} too)",
                    f"dpkg -i {deb} (fetch it where apt works, from the same release: "
                    f"{fetch})", True)
    folder = os.path.dirname(listed)
    return Mend(f"{said}; neither apt nor dpkg runs in the image ({dpkg} needs {name} too)",
                f"copy the library in from {package}'s archive, unpacked where dpkg works "
                f"({fetch} && dpkg-deb -x {deb} out): out{folder}/{name}* into {folder}/ "
                "(a Dockerfile's COPY)", True)


def _needs(name: str, tools: Sequence[str], ctx: Context) -> str | None:
    """The first of ``tools`` (paths in the image) whose ``DT_NEEDED`` closure names
    ``name``, as its image path, or None: its needs looked up as the image's loader cache
    lists them, or in its default folders (a walk of names, not a load: what the tool runs
    is not modelled)."""
    from moonpin.preflight.access.chroot import host_path
    from moonpin.preflight.loader import ldso

    root = ctx.root or "/"
    machine = ctx.machine or os.uname().machine
    cache = ldso.ld_cache_paths(ldso.ld_cache_file(ctx.root), ctx.confined)
    folders = ldso.system_lib_dirs(ctx.root, machine)
    for tool in tools:
        todo, seen = [os.path.join(root, tool)], set[str]()
        while todo and len(seen) < 256:
            path = todo.pop()
            if path in seen:
                continue
            seen.add(path)
            try:
                needed = ldso.read_dynamic(path, machine, within=ctx.confined)[0]
            except OSError:
                continue
            if name in needed:
                return "/" + tool
            for n in needed:
                at = cache.get(n)
                if at is not None and ctx.root is not None:
                    at = host_path(ctx.root, at)
                at = at or next((os.path.join(f, n) for f in folders
                                 if os.path.isfile(os.path.join(f, n))), None)
                if at is not None:
                    todo.append(at)
    return None


def _dpkg_version(package: str, ctx: Context) -> tuple[str, str] | None:
    """(version, architecture) of ``package`` (``name`` or ``name:arch``) as the image's
    dpkg ``status`` file records it installed, or None."""
    from moonpin.kb.files import read_regular

    try:
        data = read_regular(os.path.join(ctx.root or "/", "var/lib/dpkg/status"),
                            cap=64 << 20, what="dpkg status", within=ctx.root)
    except OSError:
        return None
    name, _, arch = package.partition(":")
    for stanza in data.decode("utf-8", "surrogateescape").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.split("\n")
                      if ": " in line and not line.startswith(" "))
        if fields.get("Package") == name and (not arch or fields.get("Architecture") == arch) \
                and fields.get("Version"):
            return fields["Version"], fields.get("Architecture", arch or "all")
    return None


def _unmet(dist: Dist, dists: Sequence[Dist], ctx: Context) -> list[str]:
    """``dist``'s requirements (its METADATA's Requires-Dist, markers evaluated in the
    target's environment, :attr:`Context.markers`; extras left out) whose distribution is not
    installed, each as pip takes it (name, extras, specifier; no marker)."""
    try:
        from packaging.requirements import Requirement
        from packaging.utils import canonicalize_name
    except ImportError:  # packaging absent (moonpin put on PYTHONPATH by hand)
        return []
    env = ctx.markers
    have = {canonicalize_name(d.name) for d in dists}
    out = []
    for text in dist.requires:
        try:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate(env):
                continue
        except (ValueError, LookupError, TypeError):
            # an invalid line or marker, an undefined name or comparison (UndefinedComparison:
            # `python_version ~= "abc"`) says nothing about what is missing
            continue
        if canonicalize_name(req.name) not in have:
            extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
            out.append(f"{req.name}{extras}{req.specifier}")
    return out
