"""The facts of one compiled build from its bytes (a whole member, or a prefix of it).

From the whole file: ``DT_NEEDED`` (``moonpin.readers.elf.analysis``), the CUDA runtime major of the
``libcudart.so.N`` it needs, and its dynamic symbols (``moonpin.readers.elf.symbols``): how many
it leaves undefined, how many of those are torch's (:data:`TORCH_PREFIXES`) with a digest
of their names, and the ``PyInit_<name>`` it defines. From a prefix (a build too big to
fetch whole: its ``.dynamic`` lies at the end of the file) only what the first read-only
segment shows: the sonames its ``.dynstr`` names and the CUDA runtime its version needs
name (``needed_method`` says which); the symbol fields stay None.

Why a count and a digest, not the names: one nixl_ep build needs 35 torch symbols,
a sglang-kernel ``common_ops`` 93, each up to ~200 characters; a few hundred builds would
add megabytes to the KB. The count and digest tell builds apart (same digest: same torch
symbols needed); the names themselves are read from the build in the image by the check.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from moonpin.readers.elf import analysis as elf
from moonpin.readers.elf.symbols import SymbolError, SymbolTable, elf_hash, gnu_hash

__all__ = ["TORCH_PREFIXES", "BuildBytes", "cuda_major", "read_build"]

#: Mangled-name prefixes of torch's C++ namespaces (at::, c10::, torch::, caffe2::, their
#: const members) and its C API for Python objects (THP*): a build leaving any undefined
#: binds to the torch it was built for.
TORCH_PREFIXES = ("_ZN2at", "_ZNK2at", "_ZN3c10", "_ZNK3c10", "_ZN5torch", "_ZNK5torch",
                  "_ZN6caffe2", "_ZNK6caffe2", "_Z14THP", "THP")
_CUDART = re.compile(r"^libcudart\.so\.(\d+)")
_CUDART_SONAMES = tuple(f"libcudart.so.{m}{minor}" for m in range(9, 21) for minor in ("", ".0"))


@dataclass(frozen=True)
class BuildBytes:
    """What :func:`read_build` found (the fields of ``moonpin.kb.models.NativeBuild``)."""

    needed: tuple[str, ...] = ()
    needed_method: str = "none"
    cuda_major: int | None = None
    undefined: int | None = None
    torch_undefined: int | None = None
    torch_undefined_digest: str | None = None
    init: str | None = None
    complete: bool = False
    read_error: str | None = None


def cuda_major(needed: tuple[str, ...]) -> int | None:
    """The major of the one ``libcudart.so.N`` in ``needed`` (None: none, or several)."""
    majors = {int(m.group(1)) for n in needed if (m := _CUDART.match(n))}
    return majors.pop() if len(majors) == 1 else None


def read_build(data: bytes, total_size: int, init_name: str) -> BuildBytes:
    """Facts of a build of ``total_size`` bytes whose first ``len(data)`` bytes are given;
    ``init_name`` is the module's last name (``PyInit_<init_name>`` is looked up)."""
    try:
        facts = elf.analyze(data, total_size, ())
    except elf.ElfError as e:
        return BuildBytes(read_error=f"not a readable ELF object: {e}")
    needed, method = facts.needed, facts.needed_method
    major = cuda_major(needed)
    if major is None and method != "dt_needed":
        found = elf.versioned_libraries(facts.version_needs, _CUDART_SONAMES)
        majors = {int(m.group(1)) for n, _ in found if (m := _CUDART.match(n))}
        if len(majors) == 1:
            major = majors.pop()
            needed = tuple(dict.fromkeys((*needed, *(n for n, _ in found))))
            method = "verneed-hash"
    whole = len(data) >= total_size
    if not whole:
        return BuildBytes(needed=needed, needed_method=method, cuda_major=major, complete=False)
    try:
        table = SymbolTable(data)
        names = [u.name for u in table.undefined()]
        init = f"PyInit_{init_name}".encode()
        defines = table.defines(init, gnu_hash(init), elf_hash(init), None)
    except SymbolError as e:
        return BuildBytes(needed=needed, needed_method=method, cuda_major=major,
                          complete=True, read_error=f"dynamic symbols not readable: {e}")
    prefixes = tuple(p.encode() for p in TORCH_PREFIXES)
    torch = sorted({n for n in names if n.startswith(prefixes)})
    digest = hashlib.sha256(b"\0".join(torch)).hexdigest()[:16] if torch else None
    return BuildBytes(needed=needed, needed_method=method, cuda_major=major,
                      undefined=len(names), torch_undefined=len(torch),
                      torch_undefined_digest=digest,
                      init=f"PyInit_{init_name}" if defines else None, complete=True)
