"""A folder ahead of the standard library on ``sys.path`` (``PYTHONPATH``, the current folder
under ``python -m``) that holds a module of the standard library's name moonpin imports
later, e.g. a ``json.py``: Python would import that file instead, and moonpin would fail in
whatever way it fails. Found before anything is imported, and named.

One ``listdir`` per folder ahead of the standard library's, nothing imported: this runs at
every worker start (:mod:`moonpin.preflight.run`)."""

from __future__ import annotations

import os
import sys

__all__ = ["USED", "refused", "shadowing"]

#: The standard library's top-level modules moonpin's own code imports (a test holds the
#: list complete, from moonpin's sources).
USED = frozenset((
    "__future__", "_collections_abc", "_posixsubprocess", "_sha256", "argparse", "ast", "atexit",
    "base64",
    "bisect", "builtins", "bz2",
    "collections", "concurrent", "contextlib", "contextvars", "copy", "csv", "ctypes",
    "dataclasses", "datetime", "difflib", "email", "errno", "fcntl", "functools", "gc", "glob",
    "gzip", "hashlib", "html", "importlib", "io", "itertools", "json", "lzma", "marshal", "mmap",
    "multiprocessing", "opcode", "operator", "os", "pathlib", "posixpath", "random", "re",
    "resource", "select", "shlex", "shutil", "signal", "ssl", "stat", "struct", "subprocess", "sys",
    "sysconfig", "tarfile", "tempfile", "textwrap", "threading", "time", "tokenize", "tomllib",
    "types", "typing", "urllib", "warnings", "zipfile", "zlib",
))
_SUFFIXES = (".py", ".pyc")


def shadowing() -> tuple[str, str] | None:
    """(module, path) of the first file or package on ``sys.path`` ahead of the standard
    library that Python would import instead of a module in :data:`USED` not yet loaded;
    None when there is none."""
    stdlib = os.path.dirname(os.__file__)
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = ""
    for entry in sys.path:
        folder = os.path.abspath(entry or cwd) if (entry or cwd) else ""
        if not folder or folder == stdlib:
            break
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            stem, dot, ext = name.partition(".")
            if stem not in USED or stem in sys.modules:
                continue
            path = os.path.join(folder, name)
            if not dot:
                if os.path.isfile(os.path.join(path, "__init__.py")):
                    return stem, path
            elif "." + ext in _SUFFIXES or (ext.endswith("so") and ext.startswith("cpython")):
                if os.path.isfile(path):
                    return stem, path
    return None


def refused() -> bool:
    """Say so on stderr when :func:`shadowing` finds a file (the caller exits 2)."""
    hit = shadowing()
    if hit is None:
        return False
    mod, path = hit
    print(f"moonpin: error: {path} shadows the standard library's {mod!r}: Python would "
          "import it instead when moonpin needs it\ntip: rename it, or take its folder off "
          "PYTHONPATH (or run moonpin from another folder)", file=sys.stderr)
    return True
