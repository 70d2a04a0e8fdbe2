"""One recipe per project of native extensions: which distributions, which members hold the
loader rule, which are its builds, and which readers of ``moonpin.readers.native.rules``
make its rule. Adding a project is one module here and its name in :data:`MODULES`."""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from moonpin.kb.models import RuleStep

__all__ = ["MODULES", "Recipe", "RuleInput", "recipes"]


@dataclass(frozen=True)
class RuleInput:
    """One member to read a rule from: its tree, the package it belongs to, the dotted
    names of the wheel's builds and of the packages the recipe's distributions install."""

    member: str
    package: str
    tree: ast.Module
    modules: frozenset[str]
    dists: tuple[str, ...]


@dataclass(frozen=True)
class Recipe:
    project: str
    dists: tuple[str, ...]
    #: members read for the loader rule; group "package" names the package they belong to
    rule_members: re.Pattern[str]
    #: the compiled builds whose bytes are read (others in the wheel are not looked at)
    builds: re.Pattern[str]
    #: the loader-rule reader: steps of one member
    read: Callable[[RuleInput], list[RuleStep]]
    #: top-level packages the recipe's distributions install that rules may import
    packages: tuple[str, ...] = ()


#: The project modules, in the order the KB lists them.
MODULES = ("nixl", "sglang_kernel", "deep_ep", "flashinfer")


def recipes() -> tuple[Recipe, ...]:
    return tuple(importlib.import_module(f"{__name__}.{m}").RECIPE for m in MODULES)
