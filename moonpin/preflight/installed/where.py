"""Where the check found SGLang, mooncake and torch, for ``check --json`` (``"found"``):
the folder the importer takes, how it reached it, and the distribution's metadata folder.

``how`` is one of

* ``site-packages`` / ``dist-packages``: a ``sys.path`` folder of that name (Debian's and
  Ubuntu's pythons install into ``dist-packages``);
* ``.pth``: a folder a ``.pth`` path line added (``file`` names the ``.pth`` file: a
  hatchling editable, setuptools' lenient editable, a hand-written one);
* ``PYTHONPATH``: a folder from ``PYTHONPATH`` (not for ``--site-packages``, which does not
  add it);
* ``working folder``: ``sys.path[0]`` of ``python -m sglang.launch_server`` (the working
  folder of the check, or the image's ``WorkingDir`` for ``--rootfs``/``--image``);
* ``sys.path``: any other ``sys.path`` entry (the script's folder, a zip, an entry added by
  ``sitecustomize``);
* ``namespace``: a PEP 420 namespace package (``portions``, each with its own ``how``);
* ``editable finder``: setuptools' PEP 660 finder or hatch's ``editables`` redirect, asked
  after ``sys.path`` (``file`` names the finder module);
* ``editable redirect``: scikit-build-core's redirect or meson-python's loader, asked
  ahead of ``sys.path``.

``path`` lists the package's ``__path__`` when its ``__init__`` extends it
(``pkgutil.extend_path``: mooncake's does), each folder with its ``how``. For sglang,
``submodules`` names each editable finder that supplies modules the package's own
``how`` does not (a checkout's root found as a namespace portion from the working folder,
its modules from ``python/sglang`` through setuptools' finder), with how many of the
analysed sources it supplies, and ``sources`` says how many files were analysed and the
folders whose trees named them.

``editable`` is true when the importer reaches it (or its submodules) through an editable
finder or redirect, or when the distribution's ``direct_url.json`` (PEP 610) says so. Read
only on the paths that already listed these folders: no file is read that the check did
not read."""

from __future__ import annotations

import os

from moonpin.preflight.access.confined import NOWHERE, Confined
from moonpin.preflight.pyimport.importer import pth as _pth
from moonpin.preflight.pyimport.importer import pth_files, site_dirs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from moonpin.preflight.installed.image_facts import Dist
    from moonpin.preflight.pyimport.importer import Found, Sources

__all__ = ["editable_dist", "where"]


def _pth_origins(sites: Sequence[str], within: Confined) -> dict[str, str]:
    """The folder each ``.pth`` path line of ``sites`` adds -> the ``.pth`` file (the first
    that adds it, as ``site`` keeps the first)."""
    out: dict[str, str] = {}
    for site in sites:
        for f in pth_files(site, within):
            for line in _pth(f, within)[0]:
                out.setdefault(os.path.normpath(os.path.join(site, line)), f)
    return out


def _entry_how(entry: str, pth: dict[str, str], pythonpath: Sequence[str],
               cwd: str | None = None) -> tuple[str, str | None]:
    norm = os.path.normpath(entry)
    if cwd is not None and norm == os.path.normpath(cwd):
        return "working folder", None
    if norm in pythonpath:
        return "PYTHONPATH", None
    if norm in pth:
        return ".pth", pth[norm]
    base = os.path.basename(norm)
    if base in ("site-packages", "dist-packages"):
        return base, None
    return "sys.path", None


def _dist_info(dist: Dist) -> str | None:
    """``dist``'s ``.dist-info`` (or ``.egg-info``) folder in its site folder: the one of its
    name and version, else the first of its name."""
    from moonpin.preflight.installed.image_facts import canon

    try:
        names = sorted(os.listdir(dist.root))
    except OSError:
        return None
    first = None
    for n in names:
        stem, dot, ext = n.rpartition(".")
        if not dot or ext not in ("dist-info", "egg-info"):
            continue
        name, _, version = stem.partition("-")
        if canon(name) != dist.name:
            continue
        if version.partition("-")[0] == dist.version.replace("-", "_"):
            return os.path.join(dist.root, n)
        first = first or os.path.join(dist.root, n)
    return first


def _finder_how(how: str) -> dict[str, Any]:
    kind, _, f = how.partition(" finder ")
    tool = kind.removeprefix("editable ")
    return {"how": "editable redirect" if tool in ("scikit-build-core", "meson-python")
            else "editable finder",
            "file": f or None, "tool": tool}


def where(found: Found | None, paths: Sequence[str], sites: Sequence[str] | None,
          pythonpath: Sequence[str], dist: Dist | None, editable_dist: bool = False,
          cwd: str | None = None, sources: Sources | None = None,
          within: Confined = NOWHERE) -> dict[str, Any]:
    """What ``--json`` says of one package: ``folder`` (None: not found), ``how``,
    ``file``, ``portions`` (for a namespace package: each ``{"folder", "how", "file"}``),
    ``path`` (an extended ``__path__``), ``submodules`` and ``sources`` (see the module),
    ``editable``, ``distribution`` (``name``, ``version``, ``dist_info``; None when no
    distribution is installed). ``cwd``: the working folder ``sys.path`` starts with;
    ``within``: the image root its reads are confined to."""
    out: dict[str, Any] = {"folder": None, "how": None, "file": None, "editable": False}
    if found is not None:
        pth = _pth_origins(site_dirs(paths) if sites is None else sites, within)
        pp = [os.path.normpath(p) for p in pythonpath]
        out["folder"] = found.folder
        if found.how.startswith("editable "):
            out.update(_finder_how(found.how))
        elif found.how == "namespace" or len(found.portions) > 1:
            out["how"] = "namespace"
        else:
            out["how"], out["file"] = _entry_how(os.path.dirname(found.folder), pth, pp, cwd)
        if out["how"] == "namespace" or len(found.portions) > 1:
            out["portions"] = []
            for p in found.portions:
                how, origin = _entry_how(os.path.dirname(p), pth, pp, cwd)
                out["portions"].append({"folder": p, "how": how, "file": origin})
        if found.search != found.portions:
            out["path"] = []
            for p in found.search:
                how, origin = _entry_how(os.path.dirname(p), pth, pp, cwd)
                out["path"].append({"folder": p, "how": how, "file": origin})
        if found.module:
            out["module"] = True  # a module file, not a package: `import NAME.x` fails
        out["editable"] = found.editable or editable_dist
        if sources is not None:
            subs = [{**_finder_how(how), "modules": n} for how, n in sorted(sources.via.items())
                    if how != found.how and how.startswith("editable ")]
            if subs:
                out["submodules"] = subs
                out["editable"] = True
            out["sources"] = {"files": len(sources.files), "roots": list(sources.roots)}
    else:
        out["editable"] = editable_dist
    out["distribution"] = None if dist is None else {
        "name": dist.name, "version": dist.version, "dist_info": _dist_info(dist)}
    return out


def editable_dist(dist: Dist | None, within: Confined = NOWHERE) -> bool:
    """Whether ``dist``'s ``direct_url.json`` (PEP 610) says an editable install."""
    from moonpin.kb.cache import facts_memo
    from moonpin.preflight.installed.image_facts import canon

    if dist is None:
        return False
    try:
        entries = [e.path for e in os.scandir(dist.root) if e.name.endswith(".dist-info")
                   and canon(e.name[:-len(".dist-info")].split("-", 1)[0]) == dist.name]
    except OSError:
        return False
    for folder in entries:
        path = os.path.join(folder, "direct_url.json")
        def says(p: str = path) -> bool:
            return _says_editable(p, within)

        try:  # json only when the file changed: the file-facts memo
            if facts_memo().get("direct-url-editable", path, says, _is_bool,
                                within=within.root):
                return True
        except OSError:
            continue
    return False


def _is_bool(value: object) -> bool:
    return isinstance(value, bool)


def _says_editable(path: str, within: Confined) -> bool:
    import json

    from moonpin.preflight.installed.image_facts import read_bytes

    try:
        doc = json.loads(read_bytes(path, what="direct_url.json", within=within))
    except (ValueError, RecursionError):
        return False
    info = doc.get("dir_info") if isinstance(doc, dict) else None
    return isinstance(info, dict) and info.get("editable") is True
