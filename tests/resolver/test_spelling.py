"""Releases, names, pythons and platforms as users type them (moonpin/resolver/spelling.py,
inputs.py)."""

from __future__ import annotations

import pytest

from moonpin.kb.errors import UsageError
from moonpin.resolver import spelling
from moonpin.resolver.inputs import normalize_arch, normalize_python

POOL = ["0.4.0", "0.5.4", "0.5.4.post3", "0.5.5", "0.5.10rc0", "0.5.17", "0.5.18", "0.5.23"]
DISTS = ["mooncake-transfer-engine", "mooncake-transfer-engine-cuda13",
         "mooncake-transfer-engine-rocm"]


@pytest.mark.parametrize(("typed", "meant"), [
    ("0.5.18", "0.5.18"), ("v0.5.18", "0.5.18"), ("V0.5.18", "0.5.18"), (" 0.5.18 ", "0.5.18"),
    ("0.5.18.0", "0.5.18"), ("latest", "0.5.23"), ("LATEST", "0.5.23"), ("newest", "0.5.23"),
    ("0.5.4-post3", "0.5.4.post3"),
])
def test_release_reads_what_users_type(typed: str, meant: str) -> None:
    assert spelling.release(typed, POOL) == meant


def test_latest_skips_prereleases_unless_there_are_only_those() -> None:
    assert spelling.newest(["0.5.9", "0.5.10rc0"]) == "0.5.9"
    assert spelling.newest(["0.5.10rc0", "0.5.10rc1"]) == "0.5.10rc1"
    with pytest.raises(UsageError, match="holds no sglang release"):
        spelling.release("latest", [])


@pytest.mark.parametrize(("typed", "message", "tip"), [
    ("0.5.l8", "'0.5.l8' is not a PEP 440 version", "did you mean --sglang 0.5.18 (not '0.5.l8')?"),
    ("O.5.17", "is not a PEP 440", "did you mean --sglang 0.5.17"),
    ("0,5,23", "is not a PEP 440", "did you mean --sglang 0.5.23"),
    ("abc", "'abc' is not a PEP 440", "a version is e.g. --sglang 0.5.18 (not 'abc')"),
    ("0.5.99", "0.5.99 is not in the knowledge base (nearest known: 0.5.18, 0.5.23)",
     "did you mean --sglang 0.5.23 (not '0.5.99')?"),
    ("0.5.6", "nearest known: 0.5.4.post3, 0.5.5, 0.5.10rc0, 0.5.17",
     "did you mean --sglang 0.5.5 or --sglang 0.5.10rc0 (not '0.5.6')?"),
    ("0.1", "nearest known: 0.4.0, 0.5.4", "did you mean --sglang 0.4.0 (not '0.1')?"),
])
def test_a_release_not_known_says_what_was_meant(typed: str, message: str, tip: str) -> None:
    with pytest.raises(UsageError) as e:
        spelling.release(typed, POOL)
    assert message in str(e.value)
    assert e.value.hint is not None and tip in e.value.hint


def test_the_example_fits_the_kind_of_release() -> None:
    with pytest.raises(UsageError) as e:
        spelling.version("latest", what="torch", flag="torch==")
    assert e.value.hint == "a version is e.g. torch==2.13.0 (not 'latest')"
    with pytest.raises(UsageError) as e:
        spelling.version("x", what="mooncake-transfer-engine", flag="mooncake-transfer-engine==")
    assert e.value.hint is not None
    assert "e.g. mooncake-transfer-engine==0.3.13.post1" in e.value.hint


def test_a_huge_version_is_refused_without_parsing() -> None:
    with pytest.raises(UsageError, match="not a PEP 440") as e:
        spelling.version("1" * 5000)
    assert "5000 characters" in str(e.value)


@pytest.mark.parametrize(("typed", "meant"), [
    ("mooncake-transfer-engine-cuda13", "mooncake-transfer-engine-cuda13"),
    ("Mooncake_Transfer_Engine.CUDA13", "mooncake-transfer-engine-cuda13"),
])
def test_names_in_any_pep503_spelling(typed: str, meant: str) -> None:
    assert spelling.name(typed, DISTS) == meant


@pytest.mark.parametrize(("typed", "meant"), [
    ("mooncake-transfer-engine-cuda31", "mooncake-transfer-engine-cuda13"),
    ("cuda13", "mooncake-transfer-engine-cuda13"),
    ("mooncake-transfer-engin", "mooncake-transfer-engine"),
])
def test_a_name_not_known_says_what_was_meant(typed: str, meant: str) -> None:
    with pytest.raises(UsageError, match=f"unknown mooncake distribution '{typed}'") as e:
        spelling.name(typed, DISTS)
    assert e.value.hint is not None
    assert e.value.hint.startswith(f"did you mean {meant}") and f"(not '{typed}')" in e.value.hint
    assert "known: " + ", ".join(DISTS) in e.value.hint


def test_split_release() -> None:
    assert spelling.split_release("Mooncake_Transfer_Engine==v0.3.13") == (
        "mooncake-transfer-engine", "v0.3.13")
    assert spelling.split_release("sglang===0.5.18") == ("sglang", "0.5.18")
    for bad in ("sglang", "sglang==", "==0.5.18", "sglang>=0.5"):
        with pytest.raises(UsageError, match="does not name one release"):
            spelling.split_release(bad)


@pytest.mark.parametrize(("typed", "tag"), [
    ("3.12", "cp312"), ("cp312", "cp312"), ("312", "cp312"), ("py311", "cp311"),
    (" CP310 ", "cp310"), ("3.16", "cp316"), (None, None),
])
def test_python_spellings(typed: str | None, tag: str | None) -> None:
    assert normalize_python(typed) == tag


@pytest.mark.parametrize("typed", ["3.99", "cp399", "399", "3.17"])
def test_a_python_no_cpython_has_is_refused(typed: str) -> None:
    with pytest.raises(UsageError, match=r"no CPython 3\.\d+ exists") as e:
        normalize_python(typed)
    assert e.value.hint == f"use e.g. --python 3.12 (not {typed!r})"


def test_a_python_the_kb_has_wheels_for_is_accepted() -> None:
    assert normalize_python("3.99", known=["cp399"]) == "cp399"


@pytest.mark.parametrize("typed", ["2.7", "python3", "3.x", ""])
def test_an_unreadable_python_is_refused(typed: str) -> None:
    with pytest.raises(UsageError, match="cannot read python"):
        normalize_python(typed)


@pytest.mark.parametrize(("typed", "arch"), [
    ("x86_64", "x86_64"), ("AMD64", "x86_64"), ("x64", "x86_64"), ("x86-64", "x86_64"),
    ("arm64", "aarch64"), ("aarch64", "aarch64"),
])
def test_arch_spellings(typed: str, arch: str) -> None:
    assert normalize_arch(typed) == arch


def test_an_unknown_arch_says_what_was_meant() -> None:
    with pytest.raises(UsageError, match="unknown platform --arch 'x86'") as e:
        normalize_arch("x86")
    assert e.value.hint is not None and e.value.hint.startswith("did you mean --arch x86_64?")
    with pytest.raises(UsageError) as e:
        normalize_arch("ppc64le")
    assert e.value.hint == "use --arch x86_64 or aarch64 (not 'ppc64le')"
