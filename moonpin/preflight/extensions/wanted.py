"""Which extensions this worker imports: from its launch line, read in the installed
SGLang's own sources, and the ones a CUDA worker imports at start (sgl_kernel, flashinfer:
:data:`~moonpin.preflight.extensions.seam` rules marked ``IMPLICIT``).

A backend option that keeps a module per choice
(:data:`moonpin.readers.launch.backends.BACKEND_FLAGS`): that module's imports
(``--moe-a2a-backend nixl`` -> ``srt/layers/moe/token_dispatcher/nixl.py``, which imports
``nixl_ep``). One that keeps none (``--elastic-ep-backend``): the imports SGLang runs under
a test on the option's value that the choice passes (:mod:`moonpin.readers.launch.guarded`:
``--elastic-ep-backend mooncake`` -> ``from mooncake.pg import set_transfer_engine`` under
``if ... elastic_ep_backend == "mooncake"``; ``nixl`` -> nothing, up to 0.5.23). One that
keeps a package per choice, or a registry of modules
(:data:`moonpin.readers.launch.choice_modules.CHOICE_MODULES`): the imports of that package's
modules, or of the module registered for the choice (``--disaggregation-transfer-backend
nixl`` -> ``srt/disaggregation/nixl/conn.py``; ``--hicache-storage-backend nixl`` ->
``storage/nixl/hicache_nixl.py``, both importing ``nixl._api``). The rules'
own ``CHOICES`` stand in only when the sources cannot be read. Only ``os`` at import."""

from __future__ import annotations

import os

from moonpin.kb.cache import facts_memo
from moonpin.preflight.extensions import seam

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, TypeVar

    from moonpin.preflight.access.confined import Confined
    from moonpin.preflight.extensions.seam import Facts

    T = TypeVar("T")

__all__ = ["UnreadSource", "Wanted", "extensions"]

#: launch features whose backend names a package the worker imports
_FEATURES = ("elastic-ep", "moe-a2a", "pd-disaggregation", "hicache")
#: "no backend"; a backend an ``OWN_LINES`` rule claims (mooncake's) is judged in its own lines
_NONE = ("none", "")


class Wanted:
    """An extension to judge: its import name, why (said on its line), whether the
    worker certainly imports it (a requested backend, or the installed SGLang requires its
    distribution): absent, it is a failure; else absent is not said at all; and whether a
    loader rule here reads it (else only whether it is installed is judged), with the flag
    that chose it."""

    __slots__ = ("flag", "name", "required", "ruled", "why")

    def __init__(self, name: str, why: str, required: bool, ruled: bool = True,
                 flag: str = "") -> None:
        self.name = name
        self.why = why
        self.required = required
        self.ruled = ruled
        self.flag = flag


def _norm(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


def _own_package(top: str, backend: str) -> bool:
    """Whether ``top`` is the package a backend is named after: SGLang names its backends
    after the package they drive (``deepep`` -> ``deep_ep``, ``nixl`` -> ``nixl_ep``,
    ``mori`` -> ``mori``), while the other packages a dispatcher may import are helpers on
    some code paths only (``aiter`` beside ``mori``)."""
    t, b = _norm(top), _norm(backend)
    return bool(t and b) and (t.startswith(b) or b.startswith(t))


#: an SGLang source read to say what a launch choice imports (the largest module of
#: 0.5.23 is under 300 KB; ``conn.py`` of its nixl transfer backend 148 KB): its ``ast``
#: takes about 130 times a file's bytes (a 2 MiB file of calls: 250-290 MB resident), so
#: a bigger one is refused, named, rather than parsed
_CAP_SOURCE = 1 << 20


class UnreadSource(Exception):
    """A source a choice's reading needs that cannot be read or parsed: ``said`` names
    the file (relative to the SGLang package's parent folder) and what is wrong with it."""

    def __init__(self, said: str) -> None:
        super().__init__(said)
        self.said = said


def _unread(path: str, why: str) -> UnreadSource:
    """:class:`UnreadSource` for the file at ``path`` (its ``sglang/...`` name)."""
    at = path.find(os.sep + "sglang" + os.sep)
    return UnreadSource(f"{path[at + 1:] if at >= 0 else path} {why}")


def _why(e: OSError) -> str:
    """What is wrong with a file, as :class:`moonpin.kb.errors.ReadRefused` says it."""
    import errno

    from moonpin.preflight.access.kinds import kind_of

    reason = getattr(e, "reason", None)
    if reason:
        return str(reason)
    if e.errno == errno.ELOOP:
        return "is a symbolic link loop"
    return f"cannot be read ({kind_of(e.filename)})" if e.filename else f"cannot be read ({e})"


def _read_source(path: str, within: Confined) -> bytes:
    """An SGLang source for a choice's reading, confined and capped; raises
    :class:`UnreadSource` naming it."""
    from moonpin.preflight.installed.image_facts import read_bytes

    try:
        return read_bytes(path, _CAP_SOURCE, "SGLang source", within)
    except OSError as e:
        raise _unread(path, _why(e)) from None


def _kept(kind: str, path: str, compute: Callable[[], T], valid: Callable[[Any], bool],
          within: Confined) -> T:
    """``compute()`` kept in the file-facts memo under the stamp of ``path``; raises
    :class:`UnreadSource` naming ``path`` when it cannot be stamped or read."""
    try:
        return facts_memo().get(kind, path, compute, valid, within=within.root)
    except OSError as e:  # no stamp: a link loop, gone, unreadable
        raise _unread(path, _why(e)) from None


def _imports(path: str, within: Confined) -> list[tuple[str, int]]:
    """Every import the dispatcher module may run, as the scrape reads it for the KB
    (:func:`moonpin.readers.launch.server_args.
    backend_imports`), kept in the file-facts memo. Raises :class:`UnreadSource` when the file
    cannot be read, or does not parse (what it imports is then not known: the import
    raises)."""
    def read() -> list[list[object]] | str:
        from moonpin.readers.launch.server_args import backend_imports

        data = _read_source(path, within)
        got = backend_imports(data, path)
        if not got:  # none, or none read: the parser's word (the one reading of why)
            from moonpin.readers.pyast.imports import read_module

            error = read_module(data, path, check_compile=False)[1]
            if error is not None and not error.startswith("raises "):
                return error
        return [[m, n] for m, _, n in got]

    got = _kept("ext-dispatcher-v3", path, read, lambda v: isinstance(v, (list, str)), within)
    if isinstance(got, str):
        raise _unread(path, f"does not parse ({got}): what it imports is not known")
    return [(str(m), int(n)) for m, n in got]  # type: ignore[call-overload]


def _dispatcher(sglang: str, backend: str, where: str, within: Confined) -> str | None:
    """The module of ``backend`` in the folder ``where`` (``srt/layers/moe/
    token_dispatcher/``) of the SGLang package at ``sglang``, chosen as the scrape chooses
    it for the KB (:func:`moonpin.readers.launch.backends.backend_member`:
    ``<backend>.py``, else the first whose name starts with it: ``mori`` -> ``moriep.py``);
    kept in the file-facts memo under the folder's stamp."""
    folder = os.path.join(sglang, *where.strip("/").split("/"))
    prefix = "sglang/" + where

    def find() -> str:
        from moonpin.readers.launch import backends as sa

        got = sa.backend_member([prefix + n for n in within.listdir(folder)], backend,
                                prefix)
        return "" if got is None else got[len(prefix):]

    try:
        name = facts_memo().get(f"ext-backend-v2\0{backend}", folder, find,
                                lambda v: isinstance(v, str) and "/" not in v,
                                within=within.root)
    except OSError:
        return None
    return os.path.join(folder, name) if name else None


def _choice_files(sglang: str, flag: str, backend: str, within: Confined) -> list[str]:
    """The files of the SGLang package at ``sglang`` that ``backend`` of ``flag`` (an option
    of :data:`moonpin.readers.launch.choice_modules.CHOICE_MODULES`) makes the worker run:
    the modules of its package (``srt/disaggregation/<backend>/``), or the module its
    registry maps it to (``register_backend("<backend>", "sglang.srt.…")``), as the importer
    finds it (a package, then a module). Empty: the installed SGLang keeps none for that
    choice. Raises :class:`UnreadSource` naming the folder, registry or module that cannot be
    read (not a folder or regular file, out of the image root, over the size read, not
    parsing). Each reading is kept in the file-facts memo under its folder's or file's
    stamp."""
    from moonpin.readers.launch import choice_modules as cm

    where = cm.CHOICE_MODULES[flag]
    top = os.path.dirname(sglang)
    if not where.registry:
        if backend in _NONE or "/" in backend or backend.startswith("."):
            return []
        folder = os.path.join(top, *where.path.strip("/").split("/"), backend)
        if not os.path.lexists(folder):
            return []
        prefix = where.path + backend + "/"

        def listed() -> list[str]:
            return [m[len(prefix):] for m in
                    cm.package_members([prefix + n for n in within.listdir(folder)], backend,
                                       where.path)]

        names = _kept("ext-package-v1", folder, listed, lambda v: isinstance(v, list) and all(
            isinstance(n, str) and "/" not in n for n in v), within)
        return [os.path.join(folder, n) for n in names]
    registry = os.path.join(top, *where.path.split("/"))
    if not os.path.lexists(registry):
        return []

    def read() -> dict[str, str] | None:
        return cm.registered(_read_source(registry, within), where.registry, registry)

    mapping = _kept(f"ext-registry-v2\0{where.registry}", registry, read,
                    lambda v: v is None or (isinstance(v, dict) and all(
                        isinstance(k, str) and isinstance(m, str) for k, m in v.items())),
                    within)
    if mapping is None:
        raise _unread(registry, "does not parse: the choices it registers are not known")
    module = mapping.get(backend)
    if module is None or module.split(".")[0] != os.path.basename(sglang):
        return []  # a module outside the installed SGLang: not its own to read
    members = [os.path.join(top, *m.split("/")) for m in cm.member_of(module)]
    for path in members:
        if within.outside(path):  # as read_regular refuses it: not the image's file
            raise _unread(path, f"lies outside the image root {within.root} (a symbolic "
                          "link points out of it)")
        if os.path.isfile(path):
            return [path]
    there = next((p for p in members if os.path.lexists(p)), None)
    # not a regular file (the importer passes over it): read, it says what it is
    return [there] if there is not None else []


def _found(files: list[str], sglang: str, within: Confined, broken: list[str]
           ) -> list[tuple[str, int, str]]:
    """The imports of ``files`` (each as ``(module, line, file relative to the SGLang
    package's parent folder)``); each file that cannot be read said in ``broken``."""
    out: list[tuple[str, int, str]] = []
    for f in files:
        try:
            got = _imports(f, within)
        except UnreadSource as e:
            broken.append(e.said)
            continue
        out += [(m, line, os.path.relpath(f, os.path.dirname(sglang))) for m, line in got]
    return out


def _said_all(broken: list[str]) -> str:
    return broken[0] + (f", and {len(broken) - 1} more file{'s' * (len(broken) > 2)} "
                        "not read" if len(broken) > 1 else "")


def _folder(flag: str) -> str | None:
    """Where SGLang keeps a module per choice of ``flag`` (a path inside the ``sglang``
    package folder), or None: it keeps none (a flag not known here: the token dispatchers,
    as before)."""
    from moonpin.readers.launch import backends as sa

    folder = sa.BACKEND_FLAGS.get(flag, sa.DISPATCHERS)
    return None if folder is None else folder[len("sglang/"):]


def _choice_modules() -> Mapping[str, object]:
    """The options kept as a package per choice or in a registry
    (:data:`moonpin.readers.launch.choice_modules.CHOICE_MODULES`)."""
    from moonpin.readers.launch.choice_modules import CHOICE_MODULES

    return CHOICE_MODULES


#: what one reading of a source looks like in the memo (plain lists: marshal)
_Readings = list[list[object]]


def _valid_readings(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(r, list) and len(r) == 5 for r in v)


def _readings(sglang: str, dest: str, within: Confined) -> _Readings | None:
    """Every source of the SGLang package at ``sglang`` that names ``dest``, read for the
    imports under tests on it (:func:`moonpin.readers.launch.guarded.read_file`, the
    scrape's own reading), as ``[rel, imports, unread, defaults, error]``; kept in the
    file-facts memo with the stamps of every source and folder walked (a source added,
    changed or removed reads them again). A source that cannot be read is one with an
    error; the walk does not follow links to folders (``os.walk``'s default), and each
    read is confined to the image root. None: the folder cannot be read."""
    def compute() -> tuple[_Readings, set[str], dict[str, str | None]]:
        from moonpin.preflight.installed.image_facts import read_bytes
        from moonpin.readers.launch import guarded as gd

        seen: set[str] = set()
        out: _Readings = []
        top = os.path.dirname(sglang)
        for folder, dirs, files in os.walk(sglang):
            dirs.sort()
            seen.add(folder)
            for f in sorted(files):
                if not f.endswith(".py"):
                    continue
                path = os.path.join(folder, f)
                seen.add(path)
                rel = os.path.relpath(path, top)
                try:
                    data = read_bytes(path, 16 << 20, "SGLang source", within)
                except OSError as exc:
                    out.append([rel, [], [], [], f"{rel}: unreadable: {exc}"])
                    continue
                if not gd.mentions(data, dest):
                    continue
                r = gd.read_file(data, rel, dest)
                out.append([rel, [[i.module, list(i.names), i.line, i.test,
                                   [[k, t] for k, t in i.truth]] for i in r.imports],
                            [[u.line, u.text, u.module] for u in r.unread],
                            list(r.defaults), r.error])
        return out, seen, {}

    try:
        return facts_memo().get_traced(f"ext-guarded-v1\0{dest}", sglang, compute,
                                       _valid_readings, within=within.root)
    except OSError:
        return None


def _under_tests(sglang: str, flag: str, choice: str, within: Confined
                 ) -> tuple[list[tuple[str, int, str]] | None, list[str]]:
    """What ``choice`` of ``flag`` makes the installed SGLang import, read where its sources
    test the option's value: ``(module, line, file)`` of each import (the file relative to
    the package's parent folder; None: the sources cannot be read), and what could not be
    read (``file:line: test``)."""
    from moonpin.readers.launch import backends as sa
    from moonpin.readers.launch import guarded as gd

    got_readings = _readings(sglang, sa.backend_dest(flag), within)
    if got_readings is None:
        return None, []
    readings = []
    for rel, imports, unread, defaults, error in got_readings:
        readings.append(gd.Reading(
            tuple(gd.GuardedImport(str(rel), str(m), tuple(names), int(line), int(test),
                                   tuple((str(k), int(t)) for k, t in truth))
                  for m, names, line, test, truth in imports),  # type: ignore[attr-defined]
            tuple(gd.Unread(str(rel), int(line), str(text), str(m))
                  for line, text, m in unread),  # type: ignore[attr-defined]
            tuple(defaults), None if error is None else str(error)))  # type: ignore[arg-type]
    got, unread_tests = gd.for_choice(readings, choice, gd.default_of(readings))
    broken = [r.error for r in readings if r.error is not None]
    return ([(i.module, i.line, i.member) for i in got],
            [*broken, *(f"{u.member}:{u.line}: {u.text}" for u in unread_tests)])


def extensions(features: Mapping[str, str], sglang: str | None, facts: Facts,
               flags: Mapping[str, str]) -> tuple[list[Wanted], list[str]]:
    """The extensions to judge (in order, each once) and, said as a line each, the
    requested backends with nothing here to judge (no loader rule for their module, an
    unread test on the choice, or no package imported for it). ``features``: feature -> backend
    (:func:`moonpin.preflight.run.requested_features`); ``sglang``: the installed SGLang's
    package folder (None: not found: the rules' own ``CHOICES`` stand in); ``flags``:
    feature -> its command-line flag."""
    out: dict[str, Wanted] = {}
    unjudged: list[str] = []
    flag_of = {f: k for k, f in flags.items()}
    for feature in _FEATURES:
        backend = features.get(feature, "")
        if backend in _NONE or any(backend in seam.rule_for(name).CHOICES.get(feature, ())
                                   for name in seam.OWN_LINES):
            continue
        flag = flag_of.get(feature, feature)
        said = f"{flag} {backend}"
        folder = _folder(flag)
        found: list[tuple[str, int, str]] | None = None
        unread: list[str] = []
        broken: list[str] = []  # a file the choice's reading needs and cannot read
        if sglang is not None and flag in _choice_modules():
            try:
                files = _choice_files(sglang, flag, backend, facts.within)
            except UnreadSource as e:
                files, broken = [], [e.said]
            found = _found(files, sglang, facts.within, broken) if files else None
        elif sglang is not None and folder is not None:
            module = _dispatcher(sglang, backend, folder, facts.within)
            if module is not None:
                found = _found([module], sglang, facts.within, broken)
        elif sglang is not None and os.path.isdir(sglang):
            found, unread = _under_tests(sglang, flag, backend, facts.within)
        names: list[tuple[str, str]] = []
        unruled: list[tuple[str, str]] = []
        if found is not None:
            for m, line, rel in found:
                top = m.split(".")[0]
                if (top in seam.RULES and top not in seam.OWN_LINES
                        and top not in [n for n, _ in names]):
                    names.append((top, f"{said}: {rel}:{line} imports {m}"))
                elif (top not in seam.RULES and _own_package(top, backend)
                      and top not in [n for n, _ in unruled]):
                    unruled.append((top, f"{said}: {rel}:{line} imports {m}"))
            if folder is None and not names and not unruled:
                # nothing of a package is imported for it: said why
                said = (f"{said}: a test on its value in the installed SGLang's sources is "
                        f"unread ({unread[0]}" + (f", and {len(unread) - 1} more"
                                                  if len(unread) > 1 else "")
                        + "); not judged" if unread else
                        f"{said}: no test on its value in the installed SGLang's sources "
                        "imports a package for it; nothing to judge")
                unjudged.append(said)
                continue
        if found is None or broken:
            # the rules' own CHOICES: no sources, none keeps a module of the choice where
            # this check reads (SGLang 0.5.1 imports HiCache's nixl module under a test in
            # cache_controller.py, before storage/backend_factory.py registered it), or a
            # file of its reading cannot be read (a FIFO, a link out of the image root, a
            # source that does not parse: what it imports is not known, never taken as
            # nothing)
            no = ("no SGLang sources" if sglang is None else
                  _said_all(broken) if broken else
                  "the installed SGLang keeps no module of it where this check reads")
            for name in seam.RULES:
                if name in seam.OWN_LINES or name in [n for n, _ in names]:
                    continue
                rule = seam.rule_for(name)
                if backend in rule.CHOICES.get(feature, ()):
                    names.append((name, f"{said} (this check's reading: {no})"))
            if broken:  # said, whatever the packages named are judged to be
                unjudged.append(f"{said}: {no}; " + (
                    f"judged as importing {', '.join(n for n, _ in names)} (this check's "
                    "own reading of the choice)" if names or unruled else "not judged"))
                if not names and not unruled:
                    continue
        if not names and not unruled and flag not in _choice_modules():
            # (a storage or transfer choice built into SGLang, `file`, `fake`, imports no
            # package of its own: nothing to say, as before these options were read)
            unjudged.append(f"{said}: no module of it this check has a loader rule for; "
                            "not judged")
        for name, why in names:
            out.setdefault(name, Wanted(name, why, True))
        if not names:  # no rule reads this backend's package: whether it is there, at least
            for name, why in unruled:
                out.setdefault(name, Wanted(name, why, True, ruled=False,
                                            flag=flag_of.get(feature, feature)))
    if facts.cuda is not None:  # what a CUDA worker imports at start
        for name in seam.RULES:
            if name in seam.OWN_LINES:
                continue
            rule = seam.rule_for(name)
            if not rule.IMPLICIT or name in out:
                continue
            pinned = next((d for d in rule.DISTRIBUTIONS if facts.pin("sglang", d)), None)
            out[name] = Wanted(name, f"SGLang requires {pinned} on CUDA" if pinned else
                               "a CUDA worker imports it at start", pinned is not None)
    return list(out.values()), unjudged
