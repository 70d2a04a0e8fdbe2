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

Mooncake's judgement says more than one line (its package, the module, the loader, the build,
its names, backends, CUDA major, libraries, toolchain, and the modules its other features
import: :mod:`.mooncake_pg`), so this rule is ``OWN_LINES``: the one-line verdict of
:mod:`..verdict` leaves it to that judgement (:func:`own_lines`, begun ahead by :func:`ahead`),
which asks this rule which module and which build (:func:`module`, :func:`build_module`);
:func:`pick` answers the seam's question from the same two.
"""

from __future__ import annotations

import os

# mooncake's judgement, imported with its rule: a load begun ahead (:func:`ahead`, in a forked
# child) then finds it imported, as the walk's own judgement does
from moonpin.preflight.extensions.rules.mooncake_pg import (
    BACKENDS,
    MODULES,
    build_module,
    check_feature,
    check_pg,
    package,
    scheme_of,
)
from moonpin.preflight.extensions.rules.mooncake_pg import choose_module as module
from moonpin.preflight.extensions.seam import Choice, Pick

TYPE_CHECKING = False
if TYPE_CHECKING:
    from moonpin.preflight.extensions.seam import Facts, Job, Probe
    from moonpin.preflight.pyimport.importer import Found

__all__ = ["BACKENDS", "CHOICES", "DISTRIBUTIONS", "IMAGE_READS", "IMPLICIT", "IMPORT",
           "MODULES", "OWN_LINES", "PREBUILD", "ahead", "own_lines", "pick", "repair"]

IMPORT = "mooncake"
#: every launch feature whose ``mooncake`` backend imports mooncake (SGLang's flags:
#: :data:`moonpin.preflight.run._FLAGS`)
CHOICES = {"elastic-ep": ("mooncake",), "moe-a2a": ("mooncake",),
           "pd-disaggregation": ("mooncake",), "hicache": ("mooncake",)}
IMPLICIT = False
#: the distribution prefix every mooncake wheel's name starts with (``…-cuda13`` too)
DISTRIBUTIONS = ("mooncake-transfer-engine",)
#: judged in its own lines (:func:`own_lines`, :mod:`.mooncake_pg`), not by :mod:`..verdict`
OWN_LINES = True
#: what its judgement reads of an image file (kept by the layers' reader): every file of the
#: package and of its wheels' ``.libs`` (each hashed against its RECORD, strings searched in
#: its builds), and for 0.3.14's compiling ``pg.py`` the tools it runs (torch's
#: ``cpp_extension``: ninja, nvcc) and the adapter it compiled (``_mooncake_pg_jit_<cuda|
#: musa>*.so`` in ``<cache>/<key>/``, :mod:`.mooncake_jit`)
IMAGE_READS = {"packages": ("mooncake",), "libs": ("mooncake_transfer_engine",),
               "tools": ("ninja", "nvcc"), "objects": ("_mooncake_pg_jit",)}
#: the process-group modules, SGLang's current one first (``MODULES``), and the
#: torch.distributed backend names mooncake registers (``BACKENDS``): what the installed files
#: are read for, held by its judgement (:mod:`.mooncake_pg`)
#: How a release that compiles at first import is compiled once, at image build: the note of
#: the fix lines (:class:`moonpin.preflight.judge.fixes.Project`) and of the toolchain lines.
PREBUILD = ("compile it once at image build: `TORCH_CUDA_ARCH_LIST=<your GPUs' archs, e.g. "
            "9.0> python -c 'import mooncake.pg'` in the Dockerfile (needs ninja and nvcc there)")


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
    """Mooncake's fix lines are the resolved tables' (:class:`moonpin.preflight.judge.fixes.
    Fixer`, handed this rule's ``IMPORT``, ``DISTRIBUTIONS`` and ``PREBUILD``), said by its
    own judgement: none here."""
    return None


def own_lines(job: Job) -> Probe | None:
    """Mooncake's lines (the seam's ``OWN_LINES`` hook): the installed package, then for
    elastic EP its process-group module and build, for each other feature the modules SGLang
    imports for it; what the deep probe imports, or None when no mooncake package is there."""
    from moonpin.preflight.extensions.seam import Probe

    try:
        pkg = package(job.ctx, job.dists, job.fixer, job.add)
        if pkg is None:
            return None
        if "elastic-ep" in job.wanted:
            check_pg(pkg, job.ctx, job.req, job.torch, job.kb, job.fixer, job.add)
        version = job.sglang.version if job.sglang else None
        for f in sorted(set(job.wanted) - {"elastic-ep"}):
            check_feature(f, job.ctx, pkg, version, job.kb, job.add, job.sglang_src,
                          job.source_cache)
    finally:
        # a load begun ahead (:func:`ahead`) that no check took: not beside the probe, and
        # nothing computed ahead is wanted after this judgement
        job.ctx.run.close()
    req = job.req
    probed = req.module if req is not None and req.module else next(
        (m for m in MODULES if os.path.isfile(os.path.join(pkg, f"{m.split('.')[1]}.py"))),
        None)
    return Probe(probed, req.names if req is not None else (),
                 "no process-group module to import", BACKENDS)


def ahead(job: Job) -> None:
    """The elastic-EP module's load (the judgement's long piece), for a child computing it
    ahead (the seam's ``ahead`` hook): said nothing."""
    if "elastic-ep" not in job.wanted:
        return
    pkg = package(job.ctx, job.dists, job.fixer, job.add)
    if pkg is not None:
        check_pg(pkg, job.ctx, job.req, job.torch, job.kb, job.fixer, job.add)
