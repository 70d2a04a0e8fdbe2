"""What this machine's dynamic loader makes of its CPU: ``$PLATFORM``, and the hwcap
subfolders it searches in every search folder (:mod:`moonpin.preflight.loader.ldso`).
Read from ``/proc/cpuinfo`` once, and only when a search path or folder asks.

Only ``os`` at import: this runs at worker start.
"""

from __future__ import annotations

import os

__all__ = ["HWCAP_TOPS", "glibc_version", "hwcap_subdirs", "platform_token"]


def _cpu() -> tuple[str, frozenset[str]]:
    """This machine's CPU vendor and feature flags (``/proc/cpuinfo``), read once."""
    if _CPU:
        return _CPU[0]
    vendor, flags = "", ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            head = f.read(1 << 16)
    except OSError:
        head = ""
    for line in head.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "vendor_id" and not vendor:
            vendor = value.strip()
        elif key == "flags":
            flags = value
            break
    _CPU.append((vendor, frozenset(flags.split())))
    return _CPU[0]


_CPU: list[tuple[str, frozenset[str]]] = []


def platform_token() -> str:
    """What ``$PLATFORM`` is to ld.so here (``AT_PLATFORM``, which glibc on an Intel x86-64
    replaces with ``haswell`` or ``xeon_phi`` by the CPU's features: sysdeps/x86/
    cpu-features.c)."""
    machine = os.uname().machine
    if machine != "x86_64":
        return machine
    vendor, have = _cpu()
    if vendor != "GenuineIntel":
        return machine
    if {"avx512cd", "avx512er", "avx512pf"} <= have:
        return "xeon_phi"
    if {"avx2", "fma", "bmi1", "bmi2", "abm", "movbe", "popcnt"} <= have:
        return "haswell"
    return machine


_V2 = {"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"}
_V3 = _V2 | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}
_V4 = _V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
#: First components of the subfolders :func:`hwcap_subdirs` may name (a search folder
#: holding none of them is searched alone, without reading the CPU's features)
HWCAP_TOPS = frozenset({"glibc-hwcaps", "tls", "haswell", "xeon_phi", "avx512_1", "x86_64"})


def hwcap_subdirs(version: tuple[int, ...]) -> list[str]:
    """The subfolders ld.so searches in each search folder before the folder itself, in
    its order, for a C library of ``version`` on this CPU (glibc elf/dl-hwcaps.c
    ``_dl_important_hwcaps``): ``glibc-hwcaps/<level>`` for each x86-64 ISA level the CPU
    supports (glibc 2.33 and later), then, before glibc 2.37, the legacy ones: every
    combination of ``tls``, the platform (``haswell``, ``xeon_phi``) and the hwcap names
    (``avx512_1``, ``x86_64``). ``ld.so --help`` lists them. Other machines: none (not
    modelled)."""
    out: list[str] = []
    if os.uname().machine != "x86_64":
        return out
    vendor, have = _cpu()
    if version >= (2, 33):
        out += [f"glibc-hwcaps/x86-64-v{n}" for n, need in ((4, _V4), (3, _V3), (2, _V2))
                if need <= have]
    if version < (2, 37):
        parts = ["tls"]
        platform = platform_token()
        if platform in ("haswell", "xeon_phi"):
            parts.append(platform)
        if (vendor == "GenuineIntel" and "avx512cd" in have and "avx512er" not in have
                and {"avx512bw", "avx512dq", "avx512vl"} <= have):
            parts.append("avx512_1")
        parts.append("x86_64")
        n = len(parts)
        for mask in range((1 << n) - 1, 0, -1):
            out.append("/".join(p for i, p in enumerate(parts) if mask >> (n - 1 - i) & 1))
    return out


def glibc_version(libcs: list[str] | None) -> tuple[int, ...]:
    """The C library's version: this process's (``libcs`` None), else read from the first
    of the ``libc.so.6`` files given that says it (its ``release version 2.NN`` banner);
    (2, 37) when it cannot be told."""
    text = ""
    if libcs is None:
        try:
            text = (os.confstr("CS_GNU_LIBC_VERSION") or "").rpartition(" ")[2]
        except (ValueError, OSError):
            text = ""
    else:
        import re

        for path in libcs:
            try:
                with open(path, "rb") as f:
                    data = f.read(8 << 20)
            except OSError:
                continue
            m = re.search(rb"release version (2\.\d+)", data)
            if m:
                text = m.group(1).decode()
                break
    try:
        return tuple(int(x) for x in text.split(".")[:2])
    except ValueError:
        return (2, 37)
