"""What ``import`` runs when it runs bytecode instead of a module's source, and what that
bytecode binds at its top level, read without running it.

CPython's ``SourceFileLoader`` runs the cache ``__pycache__/<name>.<tag>.pyc`` without
compiling the source when the cache is a timestamp one naming the source's very mtime and
size, or a hash-based one that is not to be checked against the source
(``--invalidation-mode unchecked-hash``); a module found only as ``<name>.pyc`` (no source,
``compileall -b``) is that file. Either way what the import binds is the bytecode's, whatever
the source beside it says (an edit that kept the size and mtime, a cache built from another
source).

The bytecode is read only when its magic number is this interpreter's (the same CPython
release: its ``marshal`` format and opcodes); its top-level code is walked instruction by
instruction, nothing run: a name stored right after a constant is loaded is that constant
(``__version__ = '2.13.0'``), after ``IMPORT_FROM`` the name imported, after a one-argument
call of a loaded name that name (torch's ``TorchVersion(internal_version)``); a store a jump
may skip or repeat (between a jump and its target: an ``if`` branch, a loop body, a
handler) is conditional and not followed. Only ``os`` at import.
"""

from __future__ import annotations

import os

from moonpin.preflight.access.confined import NOWHERE, Confined

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["bindings", "runs", "strings", "unloadable"]

_CAP = 16 << 20
#: Names whose use lets a module bind names some way not read here.
_OPAQUE = frozenset(("globals", "exec", "setattr", "vars", "locals", "__getattr__"))


def _magic() -> bytes:
    from importlib.util import MAGIC_NUMBER

    return MAGIC_NUMBER


def _head(path: str) -> bytes | None:
    """The 16-byte header of a regular file (None: none, or not readable as one)."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        head = os.read(fd, 16)
    except OSError:
        return None
    finally:
        os.close(fd)
    return head if len(head) == 16 else None


def runs(path: str, version: tuple[int, int]) -> str | None:
    """The bytecode file ``import`` runs for the module file ``path`` (a ``.py``: its
    cache when CPython takes it without compiling, a ``.pyc``: itself), or None: the source
    runs, or the bytecode is not one this interpreter reads."""
    import sys

    if (sys.version_info[0], sys.version_info[1]) != tuple(version):
        return None
    if path.endswith(".pyc"):
        head = _head(path)
        return path if head is not None and head[:4] == _magic() else None
    if not path.endswith(".py"):
        return None
    folder, base = os.path.split(path)
    pyc = os.path.join(folder, "__pycache__",
                       f"{base[:-3]}.{sys.implementation.cache_tag}.pyc")
    head = _head(pyc)
    if head is None or head[:4] != _magic():
        return None
    flags = int.from_bytes(head[4:8], "little")
    if flags == 1:  # hash-based, unchecked: taken whatever the source says
        return pyc
    if flags != 0:  # checked against the source's hash: the source's own compile
        return None
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    same = (int.from_bytes(head[8:12], "little") == (int(st.st_mtime) & 0xFFFFFFFF)
            and int.from_bytes(head[12:16], "little") == (st.st_size & 0xFFFFFFFF))
    return pyc if same else None


def bindings(pyc: str, within: Confined = NOWHERE
             ) -> tuple[dict[str, tuple[Any, ...]], bool] | None:
    """How the top level of the bytecode in ``pyc`` binds each name (the kinds of
    :func:`moonpin.readers.pyast.imports.binding`), and whether it may bind names some way not
    read here; None when it cannot be read (or cannot be loaded: :func:`unloadable`)."""
    got = _facts(pyc, within)
    return got if isinstance(got, tuple) else None


def unloadable(pyc: str, within: Confined = NOWHERE) -> str | None:
    """Why the import cannot load the bytecode in ``pyc`` (it unmarshals it as this
    interpreter does and fails: bad marshal data, not a code object, lengths that ask for
    more memory than there is), or None (it loads, or it cannot be read here)."""
    got = _facts(pyc, within)
    return got if isinstance(got, str) else None


def _facts(pyc: str, within: Confined) -> tuple[dict[str, tuple[Any, ...]], bool] | str | None:
    """:func:`bindings`'s answer, or :func:`unloadable`'s reason, remembered per version of
    the file."""
    from moonpin.kb.cache import facts_memo

    def ok(v: Any) -> bool:
        return v is None or isinstance(v, str) or (
            isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], dict)
            and isinstance(v[1], bool))

    try:
        st = os.stat(pyc)
        key = (pyc, st.st_size, st.st_mtime_ns, within.root)
        if key not in _READ:  # once per process even when the memo is off (--no-cache)
            _READ[key] = facts_memo().get("pycode-v2", pyc, lambda: _read(pyc, within), ok,
                                          within=within.root)
        return _READ[key]  # type: ignore[no-any-return]
    except OSError:
        return None


#: What :func:`_facts` read in this process, by (path, size, mtime): bindings() and
#: unloadable() of one cache ask it twice, and each read is a child.
_READ: dict[tuple[str, int, int, str | None], Any] = {}


def strings(pyc: str, within: Confined = NOWHERE) -> frozenset[str] | None:
    """Every string constant of the bytecode in ``pyc`` (its functions' too); None when
    it cannot be read here (read in a held child: :func:`_held`)."""
    return _held(lambda: _strings(pyc, within))  # type: ignore[no-any-return]


def _strings(pyc: str, within: Confined) -> frozenset[str] | None:
    code = _code(pyc, within)
    if code is None or isinstance(code, str):
        return None
    out: set[str] = set()
    stack = [code]
    while stack and len(out) < 100_000:
        c = stack.pop()
        for k in c.co_consts:
            if isinstance(k, str):
                out.add(k)
            elif type(k).__name__ == "code":
                stack.append(k)
            elif isinstance(k, (tuple, frozenset)):
                out.update(x for x in k if isinstance(x, str))
    return frozenset(out)


def _code(pyc: str, within: Confined) -> Any:
    """The module code object of the bytecode in ``pyc``; None when it cannot be read here
    (unreadable, over the cap, another interpreter's); a str saying why, when the import's
    own ``marshal.loads`` fails on it (importlib's ``_compile_bytecode``)."""
    import marshal

    try:
        data = within.read(pyc, cap=_CAP, what="bytecode cache")
    except OSError:
        return None
    if data[:4] != _magic():
        return None
    try:
        code = marshal.loads(data[16:])
    except (ValueError, EOFError, TypeError, MemoryError, RecursionError) as e:
        return f"is bad marshal data ({type(e).__name__}: {str(e)[:200]})"
    if type(code).__name__ != "code":
        return f"holds a {type(code).__name__}, not a code object"
    return code


def _read(pyc: str, within: Confined) -> tuple[dict[str, tuple[Any, ...]], bool] | str | None:
    from moonpin.preflight.prefetch import held

    how, got = held(lambda: _read_here(pyc, within))
    if how == "died":  # unmarshalling it ran out of memory or time: so would the import
        return ("declares lengths that take more memory than unmarshalling it may use "
                "(marshal allocates what they declare)")
    return got  # type: ignore[no-any-return]


def _read_here(pyc: str, within: Confined
               ) -> tuple[dict[str, tuple[Any, ...]], bool] | str | None:
    code = _code(pyc, within)
    if code is None or isinstance(code, str):
        return code  # type: ignore[no-any-return]
    try:
        return _walk(code)
    except (ValueError, TypeError, IndexError, KeyError, AttributeError, RecursionError):
        return None  # loaded, but not walkable here: its bindings are not known


def _held(work: Any) -> Any:
    """``work()``, which unmarshals an image's bytecode, in a child held to a memory and
    time budget (:func:`moonpin.preflight.prefetch.isolated`): ``marshal`` trusts the
    lengths the bytes declare (a few bytes ask for gigabytes) and is not meant for data from
    others. None when it could not be read so (no fork here: the source is judged)."""
    from moonpin.preflight.prefetch import isolated

    ok, got = isolated(work)
    return got if ok else None


def _walk(code: Any) -> tuple[dict[str, tuple[Any, ...]], bool]:
    import opcode

    names, consts, raw = code.co_names, code.co_consts, code.co_code
    opname = opcode.opname
    opaque = any(n in _OPAQUE for n in names)
    instructions: list[tuple[int, str, Any, int]] = []  # (offset, name, value, arg)
    ranges: list[tuple[int, int]] = []  # spans a jump may skip or repeat: conditional
    ext = 0
    for i in range(0, len(raw) - 1, 2):
        op, arg = raw[i], raw[i + 1] | ext
        name = opname[op]
        if name == "EXTENDED_ARG":
            ext = arg << 8
            continue
        ext = 0
        if op == 0 or name in ("CACHE", "NOP", "RESUME", "PRECALL", "PUSH_NULL"):
            continue
        target = _target(op, name, arg, i)
        if target is not None:
            ranges.append((min(i, target), max(i, target)))
        value: Any = None
        if name == "LOAD_CONST" and arg < len(consts):
            value = consts[arg]
        elif name in ("STORE_NAME", "IMPORT_NAME", "IMPORT_FROM", "LOAD_NAME") and \
                arg < len(names):
            value = names[arg]
        if name == "IMPORT_STAR":
            opaque = True
        instructions.append((i, name, value, arg))
    bound: dict[str, tuple[Any, ...]] = {}
    recent: list[tuple[str, Any, int]] = []  # the last instructions (name, value, arg)
    importing: tuple[int, str] | None = None  # (level, module) of the last IMPORT_NAME
    for at, name, value, arg in instructions:
        if name == "IMPORT_NAME":
            level = recent[-2][1] if len(recent) > 1 and recent[-2][0] == "LOAD_CONST" else 0
            importing = (level if type(level) is int else 0, str(value))
        if name == "STORE_NAME" and isinstance(value, str):
            certain = not any(lo < at < hi for lo, hi in ranges)
            bound[value] = _bind(recent, importing) if certain else ("other",)
        recent = [*recent[-3:], (name, value, arg)]
    return bound, opaque


def _target(op: int, name: str, arg: int, offset: int) -> int | None:
    """Where a jump instruction at ``offset`` goes (``dis``'s reckoning for this
    interpreter), or None for any other instruction."""
    import opcode
    import sys

    if op in opcode.hasjabs:
        return arg * 2
    if op not in opcode.hasjrel:
        return None
    back = "BACKWARD" in name
    target = offset + 2 + (-arg if back else arg) * 2
    if sys.version_info >= (3, 12):
        caches = getattr(opcode, "_inline_cache_entries", None)
        try:
            n = caches[name] if isinstance(caches, dict) else caches[op]  # type: ignore[index]
        except (KeyError, IndexError, TypeError):
            n = 0
        target += 2 * int(n)
    return target


def _bind(recent: list[tuple[str, Any, int]], importing: tuple[int, str] | None
          ) -> tuple[Any, ...]:
    """What a ``STORE_NAME`` stores, from the instructions just before it."""
    if not recent:
        return ("other",)
    last, value, arg = recent[-1]
    if last == "LOAD_CONST" and type(value) in (str, int, float, bool):
        return ("const", value)
    if last == "LOAD_NAME":
        return ("name", value)
    if last == "IMPORT_FROM" and importing is not None:
        return ("from", importing[0], importing[1], value)
    if last in ("CALL", "CALL_FUNCTION") and arg == 1 and len(recent) >= 3 and \
            recent[-2][0] == "LOAD_NAME" and recent[-3][0] == "LOAD_NAME":
        return ("name", recent[-2][1])  # f(x), one argument: a wrapper of its argument
    return ("other",)
