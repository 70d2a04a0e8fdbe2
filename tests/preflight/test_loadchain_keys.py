"""The two keys of :func:`moonpin.preflight.loader.loadchain.native_load`: the process a check
keeps for an import (``base``, handed to the computation) and the memo key of the whole load
are read from one set of inputs: whatever changes the import changes both, what only the
builds' loads depend on changes the memo key alone, and two different loads never share
a memo key."""

from __future__ import annotations

import inspect

import pytest

from moonpin.preflight.loader import loadchain


class _Memo:
    def __init__(self, keys: list[str]) -> None:
        self.keys = keys

    def get_traced(self, key: str, path: str, compute: object, valid: object,
                   within: object = None) -> object:
        self.keys.append(key)
        return compute()[0]  # type: ignore[operator]


@pytest.fixture
def keys_of(monkeypatch: pytest.MonkeyPatch) -> object:
    """Call ``native_load`` with keyword changes over a fixed request; answer its two keys
    (the memo's, the kept import's) without loading anything."""
    memo: list[str] = []
    bases: list[str] = []
    monkeypatch.setattr(loadchain, "facts_memo", lambda: _Memo(memo))

    params = list(inspect.signature(loadchain._compute).parameters)

    def compute(*args: object, **kw: object) -> object:
        given = {**dict(zip(params, args, strict=False)), **kw}
        bases.append(str(given["base"]))  # the kept import's key
        return loadchain.Report().dump(), set(), {}

    monkeypatch.setattr(loadchain, "_compute", compute)
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.delenv("MOONPIN_CHECK_SYSTEM_LIBS", raising=False)

    def call(**change: object) -> tuple[str, str]:
        asked: dict[str, object] = {
            "builds": ["/site/pkg/b.so"], "paths": ["/site"], "module": None,
            "python": "/usr/bin/python3", "machine": "x86_64", "ld_path": [],
            "suffixes": (".so",), "first": ("torch",)}
        asked.update(change)
        loadchain.native_load(**asked)  # type: ignore[arg-type]
        return memo[-1], bases[-1]
    return call


IMPORT_INPUTS = [
    {"machine": "aarch64"}, {"python": "/usr/bin/python3.12"}, {"first": ()},
    {"ld_path": ["/opt/lib"]}, {"root": "/img"}, {"suffixes": (".abi3.so",)},
    {"paths": ["/site", "/more"]}, {"complete": False}, {"preload": ["/opt/libx.so"]}]


@pytest.mark.parametrize("change", IMPORT_INPUTS, ids=lambda c: next(iter(c)))
def test_an_import_input_changes_both_keys(keys_of: object, change: dict[str, object]) -> None:
    key, base = keys_of()  # type: ignore[operator]
    key2, base2 = keys_of(**change)  # type: ignore[operator]
    assert key2 != key and base2 != base


@pytest.mark.parametrize("var", ["LD_PRELOAD", "MOONPIN_CHECK_SYSTEM_LIBS"])
def test_the_environment_changes_both_keys(keys_of: object, var: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    key, base = keys_of()  # type: ignore[operator]
    monkeypatch.setenv(var, "/x.so")
    key2, base2 = keys_of()  # type: ignore[operator]
    assert key2 != key and base2 != base


@pytest.mark.parametrize("change", [
    {"builds": ["/site/pkg/c.so"]}, {"module": "pkg.m"}, {"after": ("pkg.n",)},
    {"mode": 0x102}], ids=lambda c: next(iter(c)))
def test_a_load_input_changes_the_memo_key_only(keys_of: object,
                                                 change: dict[str, object]) -> None:
    key, base = keys_of()  # type: ignore[operator]
    key2, base2 = keys_of(**change)  # type: ignore[operator]
    assert key2 != key and base2 == base


def test_two_loads_never_share_a_memo_key(keys_of: object) -> None:
    # the fields once joined by NUL: a list's end could be read as the next field's start
    one = keys_of(builds=["/b1", "/b2"], ld_path=["/L"], root=None, suffixes=(""),  # type: ignore[operator]
                  paths=["/p"])
    two = keys_of(builds=["/b1"], ld_path=["/b2"], root="/L", suffixes=(),  # type: ignore[operator]
                  paths=["", "/p"])
    assert one[0] != two[0]
