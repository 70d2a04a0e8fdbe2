"""The marker environments: a target's and a scraped wheel's, each whole."""

from __future__ import annotations

import pytest
from packaging.markers import Marker, default_environment

from moonpin.readers.markers import environment, implementation_of, wheel_environment


def test_every_key_is_given_so_the_host_fills_none() -> None:
    """packaging fills a missing key from the interpreter it runs in (the host's)."""
    env = environment((3, 12), "aarch64")
    assert set(default_environment()) <= set(env)
    assert (env["python_version"], env["platform_machine"], env["sys_platform"]) == (
        "3.12", "aarch64", "linux")
    assert Marker('python_version < "3.12"').evaluate(env) is False
    assert Marker('python_version >= "3.12" and platform_machine == "aarch64"').evaluate(env)


@pytest.mark.parametrize(("suffixes", "name"), [
    ([".cpython-312-x86_64-linux-gnu.so", ".abi3.so", ".so"], "cpython"),
    ([".pypy310-pp73-x86_64-linux-gnu.so", ".abi3.so", ".so"], "pypy"),
    ([".abi3.so", ".so"], "cpython"),
])
def test_the_implementation_is_the_one_the_suffixes_name(suffixes: list[str],
                                                         name: str) -> None:
    assert implementation_of(suffixes) == name
    assert environment((3, 10), "x86_64", name)["implementation_name"] == name


@pytest.mark.parametrize(("filename", "python", "machine"), [
    ("torch-2.9.1-cp312-cp312-manylinux_2_28_aarch64.whl", "3.12", "aarch64"),
    ("torch-2.1.0-cp310-cp310-manylinux2014_x86_64.whl", "3.10", "x86_64"),
    ("x-1-cp313-cp313t-musllinux_1_2_x86_64.whl", "3.13", "x86_64"),
])
def test_a_wheel_is_judged_for_the_interpreter_and_machine_its_tags_name(
        filename: str, python: str, machine: str) -> None:
    env = wheel_environment(filename)
    assert (env["python_version"], env["platform_machine"]) == (python, machine)


@pytest.mark.parametrize("filename", ["x-1-py3-none-any.whl", "x-1-cp312-cp312-win_amd64.whl"])
def test_a_wheel_whose_tags_name_no_target_is_refused(filename: str) -> None:
    with pytest.raises(ValueError, match="x-1"):
        wheel_environment(filename)
