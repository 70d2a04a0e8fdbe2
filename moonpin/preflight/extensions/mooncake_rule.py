"""Mooncake's loader rule (:mod:`moonpin.preflight.extensions.seam`), read from its own files.

SGLang imports mooncake's process-group module: ``mooncake.pg``, or before the ep/pg rename
``mooncake.ep``, the module it falls back to on ``ImportError``
(:func:`moonpin.resolver.rule.choose_module`). That module is a *loader* (``mooncake/pg.py``)
that imports a build named after torch's version, ``re.match(<its pattern>,
torch.__version__).group()`` with ``.`` replaced by its separator (``pg_2_13_0…``), or that
compiles one at first import (0.3.14's ``_pg_jit/``), or it is the build itself (0.3.7's
``ep.so``). The loader is read with ``ast`` as ordered steps
(:func:`moonpin.readers.loader.read_loader`, kept in the file-facts memo under its stamp);
the suffix rule is the one the KB query applies (:func:`moonpin.resolver.rule.loader_suffix`).

Mooncake's judgement says more than one line (the module, the loader, the build, its names,
backends, CUDA major, libraries, toolchain: :mod:`moonpin.preflight.judge.pg`), so this rule is
``OWN_LINES``: the one-line verdict of :mod:`.verdict` leaves it to that judgement, which asks
this rule which module and which build (:func:`module`, :func:`build_module`); :func:`pick`
answers the seam's question from the same two.
"""

from __future__ import annotations

import os

from moonpin.preflight.access.confined import NOWHERE, Confined
from moonpin.preflight.extensions.seam import Choice, Pick
from moonpin.preflight.installed.image_facts import BACKENDS, PG_MODULES

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Collection
    from typing import Any

    from moonpin.preflight.extensions.seam import Facts
    from moonpin.preflight.pyimport.importer import Found

__all__ = ["BACKENDS", "CHOICES", "DISTRIBUTIONS", "IMPLICIT", "IMPORT", "MODULES",
           "OWN_LINES", "build_module", "memo", "module", "pick", "repair", "scheme_of"]

IMPORT = "mooncake"
#: every launch feature whose ``mooncake`` backend imports mooncake (SGLang's flags:
#: :data:`moonpin.preflight.run._FLAGS`)
CHOICES = {"elastic-ep": ("mooncake",), "moe-a2a": ("mooncake",),
           "pd-disaggregation": ("mooncake",), "hicache": ("mooncake",)}
IMPLICIT = False
#: the distribution prefix every mooncake wheel's name starts with (``…-cuda13`` too)
DISTRIBUTIONS = ("mooncake-transfer-engine",)
#: judged by :mod:`moonpin.preflight.judge` in its own lines, not by :mod:`.verdict`
OWN_LINES = True
#: the process-group modules, SGLang's current one first (``MODULES``), and the
#: torch.distributed backend names mooncake registers (``BACKENDS``): what the installed
#: files are read for (:mod:`moonpin.preflight.installed.image_facts`)
MODULES = PG_MODULES


def module(req: Any, shipped: Collection[str]) -> str | None:
    """Which process-group module ``import`` ends up with for SGLang's requirement ``req``
    (:class:`moonpin.resolver.rule.Requirement`) when the package ships ``shipped``."""
    from moonpin.resolver import rule

    return rule.choose_module(req, shipped)


def memo(kind: str, path: str, compute: Callable[[], Any],
         valid: Callable[[Any], bool], within: Confined = NOWHERE) -> Any:
    """``facts_memo().get`` (:meth:`moonpin.kb.cache.FileMemo.get`); a loader in a zip archive
    on ``sys.path`` (no file of its own to stamp) is computed afresh each time."""
    from moonpin.kb.cache import facts_memo

    try:
        return facts_memo().get(kind, path, compute, valid, within=within.root)
    except OSError:
        from moonpin.preflight.access import zipfs

        if zipfs.size(path) is None:
            raise
    return compute()


def scheme_of(loader_path: str, module: str, within: Confined = NOWHERE) -> dict[str, Any]:
    """The loader's scheme (:func:`moonpin.preflight.installed.build_facts.read_scheme`), kept
    in the file-facts memo under the loader's stamp (:func:`memo`); raises OSError when the
    loader cannot be read."""
    from moonpin.preflight.installed.build_facts import read_scheme, scheme_shape

    scheme: dict[str, Any] = memo("loader-v6\0" + module, loader_path,
                                  lambda: read_scheme(loader_path, module, within),
                                  scheme_shape, within)
    if not isinstance(scheme, dict) or "problem" not in scheme:  # a damaged memo entry
        scheme = read_scheme(loader_path, module, within)
    return scheme


def build_module(scheme: dict[str, Any], template: str, module: str, loader_path: str,
                 torch: str, within: Confined = NOWHERE) -> str | None:
    """The module one of the loader's imports (``template``: ``mooncake.pg_{torch}``) names
    for torch ``torch`` (``mooncake.pg_2_13_0``); None when the loader's pattern does not
    match torch's version (its ``re.match(...).group()`` raises at import)."""
    placeholder = scheme["placeholder"]
    if placeholder not in template:
        return template
    from moonpin.preflight.installed.build_facts import str_or_none
    from moonpin.resolver import rule

    rscheme = rule.Scheme(scheme["kind"], scheme["imports"], scheme["version_regex"],
                          scheme["separator"], loader_path, scheme["note"])
    suffix = memo(f"suffix-v3\0{module}\0{torch}", loader_path,
                  lambda: rule.loader_suffix(rscheme, torch), str_or_none, within)
    return template.replace(placeholder, suffix) if isinstance(suffix, str) else None


def pick(facts: Facts, found: Found) -> Pick:
    """The seam's question for the process-group module SGLang's current release imports
    (``mooncake.pg``, else its fallback ``mooncake.ep``): the builds its loader imports for
    torch's version, or what the import raises."""
    from moonpin.resolver import rule

    files = {m: facts.module_file(found.folder, m.split(".")[1]) for m in MODULES}
    req = rule.Requirement(MODULES[0], backends=BACKENDS, alternatives=MODULES[1:],
                           release="this SGLang")
    chosen = module(req, [m for m, f in files.items() if f is not None])
    if chosen is None:
        return Pick([Choice(raises=f"ModuleNotFoundError: No module named '{MODULES[0]}'")],
                    notes=["the installed mooncake ships neither " + " nor ".join(MODULES)])
    loader = files[chosen]
    assert loader is not None
    if not loader.endswith(".py"):  # the module is the build itself
        return Pick([Choice([loader])], notes=[f"{chosen} is a build"])
    try:
        scheme = scheme_of(loader, chosen, facts.within)
    except OSError as e:
        return Pick(unread=f"{loader}: {e.strerror or e}")
    if scheme["problem"] or scheme["kind"] == "unknown":
        return Pick(unread=f"{loader}: {scheme['note']}")
    if scheme["kind"] == "jit-compile":
        return Pick([Choice()], notes=[f"{os.path.basename(loader)} compiles at first import"])
    if facts.torch is None:
        return Pick(unread="no torch: the build the loader picks is unknown")
    out: list[str] = []
    for template in scheme["imports"]:
        name = build_module(scheme, template, chosen, loader, facts.torch, facts.within)
        if name is None:
            return Pick([Choice(raises=f"AttributeError: 'NoneType' object has no attribute "
                                       f"'group' (its pattern {scheme['version_regex']!r} and "
                                       f"torch {facts.torch!r})")])
        path = facts.module_file(found.folder, name.split(".", 1)[1])
        if path is None:
            return Pick([Choice(raises=f"ModuleNotFoundError: No module named '{name}'")],
                        notes=[f"{os.path.basename(loader)} imports {name} for torch "
                               f"{facts.torch}"])
        out.append(path)
    return Pick([Choice(out)], notes=[f"{chosen} picks "
                                      + ", ".join(os.path.basename(p) for p in out)])


def repair(facts: Facts, pick: Pick, choice: Choice) -> str | None:
    """Mooncake's fix lines are the knowledge base's (:class:`moonpin.preflight.judge.fixes.
    Fixer`), said by its own judgement: none here."""
    return None
