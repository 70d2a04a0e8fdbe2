"""nixl's loader rule (:mod:`moonpin.preflight.extensions.seam`), read from its own files.

``import nixl_ep`` runs the meta package's ``nixl_ep/__init__.py`` (distribution ``nixl``):
it imports the backend package ``f"nixl_ep_cu{cuda_major}"`` for torch's CUDA major
(``nixl_meta_utils.detect_cuda_major``: ``torch.version.cuda``), raising ``ImportError``
("detected CUDA N but nixl-cuN is not installed") when it is missing; with no CUDA it tries
each name of its fallback tuple. The backend's ``__init__.py`` (``nixl-cuNN``) imports
``f".nixl_ep_cpp_torch{mm}"`` with ``mm = "".join(torch.__version__.split(".")[:2])``,
under ``RTLD_DEEPBIND`` when ``NIXL_UCX_DEEPBIND`` is set to anything but its "off"
words. Each of these is read here with ``ast``: the f-string heads, the join-split, the
variable, its default and its off words; none is assumed. Releases before 1.3.1 ship one
build and import it plainly (``from . import nixl_ep_cpp``: in ``nixl_ep_cu13/`` from 1.3.0,
in ``nixl_ep/`` itself, shipped by ``nixl-cuNN``, before): that build is judged whatever
torch is there, as the import loads it (nixl-cu13 1.3.0's binds
``c10::impl::cow::materialize_cow_storage``, which torch 2.14 no longer exports).
"""

from __future__ import annotations

import os

from moonpin.preflight.extensions import astread
from moonpin.preflight.extensions.seam import Choice, Pick

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ast
    from typing import Any

    from moonpin.preflight.access.confined import Confined
    from moonpin.preflight.extensions.seam import Facts
    from moonpin.preflight.pyimport.importer import Found

__all__ = ["CHOICES", "DISTRIBUTIONS", "IMPLICIT", "IMPORT", "meta_backend", "pick", "read_meta",
           "repair"]

IMPORT = "nixl_ep"
#: only ``--moe-a2a-backend nixl`` imports nixl_ep: no SGLang release up to 0.5.23 tests
#: ``--elastic-ep-backend`` against "nixl" (read with :mod:`moonpin.readers.launch.guarded`)
CHOICES = {"moe-a2a": ("nixl",)}
IMPLICIT = False
DISTRIBUTIONS = ("nixl",)


def read_meta(path: str, within: Confined, name: str = IMPORT) -> dict[str, Any] | None:
    """A meta package's ``__init__`` of the top-level ``name`` (``nixl_ep``, ``nixl``): the
    backend name head (``f"{name}_cu{cuda_major}"``), the pip name head (``f"nixl-cu{…}"``),
    the fallback order (a ``for`` over a tuple of the backends' names, ``nixl_rocm`` among
    them), and ``subs``: the submodules it imports from the backend it picked (a ``for``
    over a list of names bound at its top level whose body formats the name into an
    import: ``f"{_pkg.__name__}.{sub_name}"``), in order."""
    import ast

    tree = astread.parse(path, within)
    if tree is None:
        return None
    backend = pip = None
    for head, _names, _node in astread.fstring_heads(tree):
        if head.startswith(name + "_") and backend is None:
            backend = head
        elif head.endswith("-cu") and pip is None:
            pip = head
    fallback: list[str] = []
    subs: list[str] = []
    if backend is not None:
        lists = {t.id: [e.value for e in node.value.elts if isinstance(e, ast.Constant)
                        and isinstance(e.value, str)]
                 for node in tree.body if isinstance(node, ast.Assign)
                 and isinstance(node.value, (ast.List, ast.Tuple))
                 for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.For):
                continue
            if isinstance(node.iter, ast.Tuple):
                names = [e.value for e in node.iter.elts if isinstance(e, ast.Constant)
                         and isinstance(e.value, str)]
                if names and all(n.startswith(name + "_") for n in names):
                    fallback = names
            elif (isinstance(node.iter, ast.Name) and node.iter.id in lists and not subs
                  and isinstance(node.target, ast.Name)
                  and any(isinstance(v, ast.FormattedValue) and isinstance(v.value, ast.Name)
                          and v.value.id == node.target.id
                          for j in ast.walk(ast.Module(body=node.body, type_ignores=[]))
                          if isinstance(j, ast.JoinedStr) for v in j.values)):
                subs = lists[node.iter.id]
    return {"backend": backend, "pip": pip, "fallback": fallback, "subs": subs}


def meta_backend(facts: Facts, found: Found, top: str = IMPORT
                 ) -> Pick | tuple[Found, str, list[str], dict[str, Any]]:
    """The backend package ``import top`` loads through the meta package at ``found``
    (:func:`read_meta`): the one for torch's CUDA major (with no CUDA, the first of its
    fallback order that is there), as ``(its finding, its name, notes, the meta's
    reading)``; ``found`` itself when it is no meta package. A :class:`Pick` when the meta
    cannot be read or raises (its backend is not installed: with the fix line that installs
    the one the installed meta requires)."""
    meta_init = os.path.join(found.folder, "__init__.py")
    meta = astread.reading(f"nixl-meta2-{top}", meta_init,
                           lambda: read_meta(meta_init, facts.within, top), facts.within)
    if meta is None:
        return Pick(unread=astread.unread(meta_init, facts.within))
    notes: list[str] = []
    if meta["backend"] is None:
        return found, top, notes, meta
    if facts.cuda is not None:
        order = [f"{meta['backend']}{facts.cuda}"]
        notes.append(f"{top} picks {order[0]} for torch's CUDA {facts.cuda}")
    else:
        order = list(meta["fallback"])
    for n in order:
        backend_pkg = facts.find(n)
        if backend_pkg is not None:
            return backend_pkg, n, notes, meta
    pip = f"{meta['pip']}{facts.cuda}" if meta["pip"] and facts.cuda else None
    said = (f"ImportError: detected CUDA {facts.cuda} but {pip} is not installed"
            if pip else f"ImportError: no usable {top} CUDA backend found "
            f"(tried {', '.join(order) or 'none'})")
    return Pick([Choice(raises=said)], notes=notes,
                fix=_install_backend(facts, pip, order[0] if order else top))


def _read_backend(path: str, within: Confined) -> dict[str, Any] | None:
    """The backend ``__init__``: the build's name head and the join-split of torch's
    version it formats, the DEEPBIND variable with its default and off words."""
    tree = astread.parse(path, within)
    if tree is None:
        return None
    build = None
    for head, names, _node in astread.fstring_heads(tree):
        if head.lstrip(".").startswith(IMPORT) and len(names) == 1:
            build = (head, names[0])
            break
    split = None
    if build is not None:
        import ast

        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id == build[1]):
                split = astread.join_split(node.value)
    deep = None
    text_mentions = "RTLD_DEEPBIND" in astread.mentions(tree)
    if text_mentions:
        for var, default in astread.env_defaults(tree).items():
            if "DEEPBIND" in var:
                offs = next((s for s in astread.str_sets(tree) if "0" in s), [])
                deep = (var, default, offs)
    return {"head": build[0] if build else None, "split": list(split) if split else None,
            "deep": list(deep) if deep else None,
            "plain": None if build else _plain_build(tree)}


def _plain_build(tree: ast.Module) -> str | None:
    """The first module of the package itself a backend ``__init__`` imports by name and
    whose name starts with :data:`IMPORT` (``from . import nixl_ep_cpp``, ``from
    .nixl_ep_cpp import Config``): a release's one build, not chosen by torch's version."""
    import ast

    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module is None:
                found += [(node.lineno, a.name) for a in node.names
                          if a.name.startswith(IMPORT)]
            elif node.module.split(".")[0].startswith(IMPORT):
                found.append((node.lineno, node.module.split(".")[0]))
    return min(found)[1] if found else None


def _builds(folder: str, head: str) -> list[str]:
    """The torch minors the backend folder holds builds for (``212`` -> ``2.12``)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    out = []
    for n in names:
        if n.startswith(head):
            digits = n[len(head):].split(".", 1)[0]
            if digits.isdigit() and len(digits) >= 2:
                out.append(f"{digits[0]}.{digits[1:]}")
    return sorted(set(out), key=lambda v: tuple(int(x) for x in v.split(".")))


def pick(facts: Facts, found: Found) -> Pick:
    got = meta_backend(facts, found)
    if isinstance(got, Pick):
        return got
    backend_pkg, name, notes, _meta = got
    init = os.path.join(backend_pkg.folder, "__init__.py")
    back = astread.reading("nixl-backend-v2", init,
                           lambda: _read_backend(init, facts.within), facts.within)
    if back is not None and back["head"] is None and back.get("plain"):
        return _plain(facts, backend_pkg, name, back, notes)
    if back is None or back["head"] is None or back["split"] is None:
        return Pick(unread=f"{init}: its build-name rule is not one this check reads "
                    "(f\"nixl_ep_cpp_torch{...}\" of torch.__version__)", notes=notes)
    if facts.torch is None:
        return Pick(unread="no torch: the build nixl_ep picks is unknown", notes=notes)
    sep, _src, by, n = back["split"]
    mm = sep.join(facts.torch.split(by)[:n])
    stem = back["head"].lstrip(".") + mm
    mode = _deep_mode(facts, back, notes)
    build = facts.module_file(backend_pkg.folder, stem)
    if build is None:
        have = _builds(backend_pkg.folder, back["head"].lstrip("."))
        said = (f"ModuleNotFoundError: No module named '{name}.{stem}' ({name} has builds "
                f"for torch {', '.join(have) or 'none'}; torch.__version__ is "
                f"{facts.torch})")
        return Pick([Choice(raises=said)], notes=notes,
                    fix=_torch_for(facts, have, name))
    notes.append(f"{name} picks {os.path.basename(build)} for torch {facts.torch}")
    return Pick([Choice([build], mode=mode)], notes=notes)


def _deep_mode(facts: Facts, back: dict[str, Any], notes: list[str]) -> int | None:
    """The ``dlopen`` flags the backend's DEEPBIND variable asks for (None: the default)."""
    if back["deep"] is None:
        return None
    var, default, offs = back["deep"]
    value = facts.env.get(var, default if default is not None else "")
    if value.strip().lower() in offs or not value.strip():
        return None
    from moonpin.preflight.loader.ldproc import RTLD_DEEPBIND, RTLD_NOW

    notes.append(f"{var}={value}: loaded with RTLD_DEEPBIND (its own definitions first)")
    return RTLD_NOW | RTLD_DEEPBIND


def _plain(facts: Facts, backend_pkg: Found, name: str, back: dict[str, Any],
           notes: list[str]) -> Pick:
    """A backend that imports its one build by name (module doc): that build, whatever
    torch is there."""
    stem = back["plain"]
    mode = _deep_mode(facts, back, notes)
    build = facts.module_file(backend_pkg.folder, stem)
    if build is None:
        return Pick([Choice(raises=f"ModuleNotFoundError: No module named '{name}.{stem}'")],
                    notes=notes, fix=_release_for(facts, own=name == IMPORT))
    notes.append(f"{name} imports its one build {os.path.basename(build)} (not chosen by "
                 "torch's version)")
    return Pick([Choice([build], mode=mode)], notes=notes)


def _release_for(facts: Facts, own: bool = False) -> str | None:
    """The install line of the newest nixl release the knowledge base's resolved tables say
    fits the torch SGLang pins (else the installed one) with torch's CUDA on this python and
    platform (:meth:`Facts.kb_fits`), newer than the installed ``nixl-cuNN``, through the
    release that provides ``import nixl_ep`` at that version (the meta ``nixl``, which pins
    its ``nixl-cuNN``; before 1.3.0 the ``nixl-cuNN`` itself); None when the tables name
    none. ``own``: ``nixl_ep/`` itself belongs to the installed ``nixl-cuNN`` (before 1.3.0),
    whose upgrade removes the ``__init__.py`` the meta package wrote there when the meta is
    already at that version (pip then leaves it): a second step writes it again."""
    from packaging.version import Version

    want = facts.pin("sglang", "torch") or facts.torch_release()
    if not want or facts.cuda is None:
        return None
    fits = facts.kb_fits(DISTRIBUTIONS, want)
    have = [Version(d.version) for n, d in facts.dists.items() if n.startswith("nixl-cu")]
    for version in dict.fromkeys(v for _, v, _, _ in fits):  # newest first
        if have and Version(version) <= max(have):  # not newer: its build is this one's
            break
        at = [(d, packages, pins) for d, v, packages, pins in fits if v == version]
        for dist, packages, pins in at:
            if IMPORT not in packages:
                continue
            # the build is its own, or that of the release it pins exactly that fits too
            built = next((d for d, _, _ in at if d != dist and pins.get(d) == version), dist)
            again = (f" && pip install --force-reinstall --no-deps '{dist}=={version}'"
                     if own and built != dist else "")
            return (f"pip install '{dist}=={version}'{again} ({built} {version} has a build "
                    f"for torch {want} and CUDA {facts.cuda}" + (
                        f"; again without its dependencies: upgrading the installed "
                        f"{IMPORT}/ removes its __init__.py" if again else "") + ")")
    return None


def _install_backend(facts: Facts, pip: str | None, backend: str) -> str | None:
    """The backend distribution at the version the installed meta package requires, when
    the knowledge base does not say that release lacks a build for the installed torch
    (then what :func:`_torch_for` makes of its builds: installing it alone would leave
    ``import nixl_ep`` failing on the missing build)."""
    if pip is None:
        return None
    version = facts.pin("nixl", pip)
    if version is None:
        return (f"pip install '{pip}' (no installed file says which release: check that "
                f"`import {IMPORT}` works after, or `moonpin which nixl`)")
    line = f"pip install '{pip}=={version}'"
    torch = facts.torch_release()
    specs = facts.build_torches(pip, version, f"{backend}.") if torch else None
    if not specs or torch is None or _fits(torch, specs):
        return line
    have = [s.removeprefix("==").removesuffix(".*") for s in specs]
    alt = _torch_for(facts, have, backend)
    if alt is not None and alt.startswith("pip install 'torch"):  # the two together
        return f"{line} {alt.removeprefix('pip install ')}"
    said = (f"{pip} {version} (the release the installed nixl requires) has no build for "
            f"torch {torch}: installed alone, `import {IMPORT}` would still fail")
    return f"{said}; {alt}" if alt else said


def _fits(torch: str, specs: list[str]) -> bool:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        return any(Version(torch) in SpecifierSet(s) for s in specs)
    except (InvalidSpecifier, InvalidVersion):
        return True  # not read: not a reason to withhold the line


def _same_cuda(facts: Facts, spec: str) -> bool:
    """Whether ``pip install 'torch<spec>'`` keeps torch's CUDA major as the knowledge base
    records the index's builds (the meta package picks its backend by that major: another
    one makes it import another ``nixl_ep_cuNN``); True when it does not record them."""
    got = facts.index_torch_cudas(spec)
    return facts.cuda is None or got is None or facts.cuda in got


def _torch_for(facts: Facts, have: list[str], backend: str) -> str | None:
    """What makes ``backend`` load: the installed SGLang's torch pin when the installed
    backend has a build for it (its other extensions are built for it too); else a nixl
    release whose backend has a build for that torch (the knowledge base's scraped builds),
    the torch staying as SGLang wants it (the resolved tables' answer, :meth:`Facts.kb_fits`);
    else a torch the backend has builds for. A torch whose index builds link another CUDA
    major than torch's is never named (:func:`_same_cuda`)."""
    from moonpin.kb.distributions import torch_requirement as torch_req

    pin = facts.pin("sglang", "torch")
    if pin is not None and ".".join(pin.split(".")[:2]) in have \
            and _same_cuda(facts, f"=={pin}"):
        return (f"pip install '{torch_req(pin)}' (SGLang's own pin; {backend} has a build "
                "for it)")
    want = pin or facts.torch_release()
    fits = [(d, v) for d, v, packages, _ in (facts.kb_fits(DISTRIBUTIONS, want) if want
                                              else ()) if backend in packages]
    if fits:
        dist, version = fits[0]
        meta = "nixl" if "nixl" in facts.dists else dist
        why = "SGLang's pin" if pin else "the installed torch"
        return (f"pip install '{meta}=={version}' ({dist} {version} has a build for torch "
                f"{want}, {why})")
    other = (f"a nixl release with a build for torch {facts.torch_release()}: `moonpin which "
             f"nixl --torch {facts.torch_release()} --why`")
    usable = [m for m in have if _same_cuda(facts, f"=={m}.*")]
    if usable:
        return (f"pip install 'torch=={usable[-1]}.*' ({backend} has builds for torch "
                f"{', '.join(have)}; or {other})")
    if have:
        cudas = sorted({c for m in have for c in facts.index_torch_cudas(f"=={m}.*") or ()
                        if c is not None})
        return (f"no torch for it on the index: {backend} has builds for torch "
                f"{', '.join(have)}, whose builds there link CUDA "
                f"{', '.join(map(str, cudas)) or 'none'}, not torch's CUDA {facts.cuda} (the "
                f"meta package would then import another backend); {other}")
    return None


def repair(facts: Facts, pick: Pick, choice: Choice) -> str | None:
    from moonpin.kb.distributions import torch_requirement as torch_req

    pin = facts.pin("sglang", "torch")
    if pin is not None and facts.torch_release() != pin:
        return f"pip install '{torch_req(pin)}' (the torch the installed SGLang pins)"
    own = bool(choice.files) and os.path.basename(os.path.dirname(choice.files[0])) == IMPORT
    return _release_for(facts, own=own)
