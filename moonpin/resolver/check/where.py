"""Where the check found SGLang, mooncake and torch, for ``check --json`` (``"found"``):
the folder the importer takes, how it reached it, and the distribution's metadata folder.

``how`` is one of

* ``site-packages`` / ``dist-packages``: a ``sys.path`` folder of that name (Debian's and
  Ubuntu's pythons install into ``dist-packages``);
* ``.pth``: a folder a ``.pth`` path line added (``file`` names the ``.pth`` file: a
  hatchling editable, setuptools' lenient editable, a hand-written one);
* ``PYTHONPATH``: a folder from ``PYTHONPATH`` (not for ``--site-packages``, which does not
  add it);
* ``sys.path``: any other ``sys.path`` entry (the script's folder, a zip, an entry added by
  ``sitecustomize``);
* ``namespace``: a PEP 420 namespace package (``portions``, each with its own ``how``);
* ``editable finder``: setuptools' PEP 660 finder or hatch's ``editables`` redirect, asked
  after ``sys.path`` (``file`` names the finder module);
* ``editable redirect``: scikit-build-core's redirect, asked ahead of ``sys.path``.

``editable`` is true when the importer reaches it through an editable finder or redirect,
or when the distribution's ``direct_url.json`` (PEP 610) says so. Read only on the paths
that already listed these folders: no file is read that the check did not read."""

from __future__ import annotations

import os

from moonpin.resolver.check.importer import pth as _pth
from moonpin.resolver.check.importer import pth_files, site_dirs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from moonpin.resolver.check.image_facts import Dist
    from moonpin.resolver.check.importer import Found

__all__ = ["where"]


def _pth_origins(sites: Sequence[str]) -> dict[str, str]:
    """The folder each ``.pth`` path line of ``sites`` adds -> the ``.pth`` file (the first
    that adds it, as ``site`` keeps the first)."""
    out: dict[str, str] = {}
    for site in sites:
        for f in pth_files(site):
            for line in _pth(f)[0]:
                out.setdefault(os.path.normpath(os.path.join(site, line)), f)
    return out


def _entry_how(entry: str, pth: dict[str, str], pythonpath: Sequence[str]
               ) -> tuple[str, str | None]:
    norm = os.path.normpath(entry)
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
    from moonpin.resolver.check.image_facts import canon

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


def where(found: Found | None, paths: Sequence[str], sites: Sequence[str] | None,
          pythonpath: Sequence[str], dist: Dist | None, editable_dist: bool = False
          ) -> dict[str, Any]:
    """What ``--json`` says of one package: ``folder`` (None: not found), ``how``,
    ``file``, ``portions`` (for a namespace package: each ``{"folder", "how", "file"}``),
    ``editable``, ``distribution`` (``name``, ``version``, ``dist_info``; None when no
    distribution is installed)."""
    out: dict[str, Any] = {"folder": None, "how": None, "file": None, "editable": False}
    if found is not None:
        pth = _pth_origins(site_dirs(paths) if sites is None else sites)
        pp = [os.path.normpath(p) for p in pythonpath]
        out["folder"] = found.folder
        if found.how.startswith("editable "):
            kind, _, f = found.how.partition(" finder ")
            out["how"] = ("editable redirect" if kind == "editable scikit-build-core"
                          else "editable finder")
            out["file"] = f or None
            out["tool"] = kind.removeprefix("editable ")
        elif found.how == "namespace" or len(found.portions) > 1:
            out["how"] = "namespace"
        else:
            out["how"], out["file"] = _entry_how(os.path.dirname(found.folder), pth, pp)
        if out["how"] == "namespace" or len(found.portions) > 1:
            out["portions"] = []
            for p in found.portions:
                how, origin = _entry_how(os.path.dirname(p), pth, pp)
                out["portions"].append({"folder": p, "how": how, "file": origin})
        out["editable"] = found.editable or editable_dist
    else:
        out["editable"] = editable_dist
    out["distribution"] = None if dist is None else {
        "name": dist.name, "version": dist.version, "dist_info": _dist_info(dist)}
    return out
