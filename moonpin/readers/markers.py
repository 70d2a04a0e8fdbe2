"""The environment a ``Requires-Dist`` marker (PEP 508) is evaluated in, one for each kind of
thing judged: a target interpreter (:func:`environment`: its version, implementation and
machine as the check read them from the image or asked its interpreter, never this
process's), a wheel judged with no target (:func:`wheel_environment`: the interpreter and
machine its own tags name), and a combination the resolver judges (:func:`tag_environment`:
a Python tag such as ``cp312`` on a machine).

Every key of PEP 508's environment is given: packaging's ``Marker.evaluate`` fills a missing
one from the interpreter it runs in, which is the host's, not the target's. Imports nothing
(it runs at worker start); packaging evaluates the markers with what it returns.
"""

from __future__ import annotations

import os

__all__ = ["environment", "implementation_of", "tag_environment", "wheel_environment"]

#: implementation_name -> platform_python_implementation (what ``platform`` says of each)
_PLATFORM_NAMES = {"cpython": "CPython", "pypy": "PyPy", "graalpy": "GraalVM"}


def environment(version: tuple[int, int], machine: str,
                implementation: str = "cpython") -> dict[str, str]:
    """The marker environment of a Linux interpreter ``implementation`` (``sys.implementation
    .name``) of Python ``version`` on ``machine`` (``x86_64``), installing no extra.

    What the target does not record is assumed, and said here: the patch level (markers see
    ``X.Y.0``: an image's interpreter is known by its ``lib/pythonX.Y`` folder), and the
    kernel (``platform_release``/``platform_version``: the one the worker runs on is not in
    the image; this machine's is taken)."""
    said = f"{version[0]}.{version[1]}"
    kernel = os.uname()
    return {
        "implementation_name": implementation,
        "implementation_version": f"{said}.0",
        "os_name": "posix",
        "platform_machine": machine,
        "platform_python_implementation": _PLATFORM_NAMES.get(implementation,
                                                              implementation),
        "platform_release": kernel.release,
        "platform_system": "Linux",
        "platform_version": kernel.version,
        "python_full_version": f"{said}.0",
        "python_version": said,
        "sys_platform": "linux",
        "extra": "",
    }


def implementation_of(ext_suffixes: tuple[str, ...] | list[str]) -> str:
    """``sys.implementation.name`` of the interpreter whose extension suffixes these are
    (``.cpython-312-x86_64-linux-gnu.so`` -> ``cpython``, ``.pypy310-pp73-…`` -> ``pypy``;
    its ``cache_tag``'s name, PEP 3149); ``cpython`` when none names one."""
    for suffix in ext_suffixes:
        tag = suffix.lstrip(".").split("-", 1)[0].split(".", 1)[0]
        name = tag.rstrip("0123456789")
        if name and name not in ("so", "abi"):
            return name
    return "cpython"


def wheel_environment(filename: str) -> dict[str, str]:
    """The marker environment a wheel ``filename`` is judged in when no target is known: the
    interpreter of its first tag (``cp312`` -> CPython 3.12, ``pp310`` -> PyPy 3.10) on the
    machine of its platform tag (``manylinux_2_28_aarch64`` -> ``aarch64``). ValueError when
    the tags name no interpreter minor (``py3-none-any``) or no Linux machine."""
    from packaging.utils import parse_wheel_filename

    tag = min(parse_wheel_filename(filename)[3], key=str)
    named = _interpreter(tag.interpreter)
    if named is None:
        raise ValueError(f"{filename!r}: its tags name no interpreter version")
    platform = tag.platform
    if not platform.startswith(("manylinux", "musllinux", "linux")):
        raise ValueError(f"{filename!r}: not a Linux wheel")
    machine = platform.split("_", 3)[-1] if platform.startswith(("manylinux_", "musllinux_")) \
        else platform.split("_", 1)[1]
    return environment(named[0], machine, named[1])


def tag_environment(tag: str, machine: str) -> dict[str, str]:
    """The marker environment of the interpreter a Python tag names (``cp312`` -> CPython
    3.12, ``cp313t`` its free-threaded build, ``pp310`` -> PyPy 3.10) on Linux on ``machine``:
    a combination the resolver judges, never this process's interpreter. ValueError when the
    tag names no interpreter minor (``py3``)."""
    named = _interpreter(tag.removesuffix("t"))  # cp313t: the ABI named in the tag (PEP 703)
    if named is None:
        raise ValueError(f"{tag!r} names no interpreter version")
    return environment(named[0], machine, named[1])


def _interpreter(tag: str) -> tuple[tuple[int, int], str] | None:
    """((major, minor), implementation) of a Python tag (PEP 425), None when it names no
    minor."""
    digits = tag[2:]
    kind = {"cp": "cpython", "pp": "pypy"}.get(tag[:2])
    if kind is None or len(digits) < 2 or not digits.isdigit():
        return None
    return (int(digits[0]), int(digits[1:])), kind
