"""Each module's ``__all__`` names only what it defines, and everything public it defines
(the httpx habit), so `from module import *` and the docs agree with the code."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import moonpin

#: Modules whose interface is not Python: the CLI's is its command line.
NOT_A_LIBRARY = {"moonpin.cli.main"}

MODULES = sorted(m.name for m in pkgutil.walk_packages(moonpin.__path__, "moonpin.")
                 if not m.name.endswith("__main__"))


@pytest.mark.parametrize("name", MODULES)
def test_all_is_complete_and_real(name: str) -> None:
    mod = importlib.import_module(name)
    exported = getattr(mod, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert len(exported) == len(set(exported)), f"{name}.__all__ repeats a name"
    missing = [n for n in exported if not hasattr(mod, n)]
    assert not missing, f"{name}.__all__ names what it does not define: {missing}"
    if name in NOT_A_LIBRARY:
        return
    public = {n for n, v in vars(mod).items()
              if not n.startswith("_") and (inspect.isfunction(v) or inspect.isclass(v))
              and getattr(v, "__module__", None) == name}
    assert public <= set(exported), f"{name} defines but does not export {public - set(exported)}"
