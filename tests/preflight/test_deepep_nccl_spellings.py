"""deep_ep's NCCL check read in the spellings a release may use for the same search
(``preflight/extensions/rules/deepep_rule._nccl_check``): the glob's root through ``os.path.join``,
``+``, a local name, a helper function or a module attribute; the finder's variables in a
list, joined with ``+``, made by a helper or read with ``os.environ.get``; the distribution
names through a comprehension. Each reads as sgl-deep-ep 0.1.2.post1's own does (before,
each read as "no such check": the import passed). A check whose search is spelled in a way
not read says "not judged", never "pass" (and never for a release that has no check)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from moonpin.preflight.access.confined import Confined
from moonpin.preflight.extensions.rules import deepep_rule
from tests.lib.deepep_sources import CHECK, FIND

GLOB = "glob.glob(f'{find_nccl_root()}/lib/libnccl.so*')"
ENVS = "for env_name in (f'EP_{upper}_ROOT_DIR', f'{upper}_DIR'):"
DISTS = "if f'nvidia-{name}' not in dist_name and f'nvidia_{name}' not in dist_name:"

#: (what __init__'s check is changed to, what find_pkgs.py is changed to)
SPELLINGS = {
    "os.path.join": ([(GLOB, "glob.glob(os.path.join(find_nccl_root(), 'lib', 'libnccl.so*'))")],
                     []),
    "concat": ([(GLOB, "glob.glob(find_nccl_root() + '/lib/libnccl.so*')")], []),
    "local-name": ([("    linked_nccl_so_candidates = sorted(" + GLOB + ")",
                     "    root = find_nccl_root()\n    pattern = os.path.join(root, 'lib')\n"
                     "    linked_nccl_so_candidates = sorted(glob.glob(pattern + "
                     "'/libnccl.so*'))")], []),
    "helper-glob": ([("    linked_nccl_so_candidates = sorted(" + GLOB + ")",
                      "    linked_nccl_so_candidates = _candidates()"),
                     ("def check_nccl_so():", "def _candidates():\n    return sorted("
                      + GLOB + ")\n\n\ndef check_nccl_so():")], []),
    "module-attribute": ([("from .utils.find_pkgs import find_nccl_root",
                           "from .utils import find_pkgs"),
                          ("find_nccl_root()", "find_pkgs.find_nccl_root()")], []),
    "env-list": ([], [(ENVS, "for env_name in [f'EP_{upper}_ROOT_DIR', f'{upper}_DIR']:")]),
    "env-concat": ([], [(ENVS, "for env_name in ('EP_' + upper + '_ROOT_DIR', upper + '_DIR'):")]),
    "env-inline-upper": ([], [(ENVS, "for env_name in (f'EP_{name.upper()}_ROOT_DIR', "
                               "name.upper() + '_DIR'):")]),
    "env-helper": ([], [(ENVS, "for env_name in _env_names(upper):"),
                        ("def find_pkg_root(", "def _env_names(stem):\n    return "
                         "(f'EP_{stem}_ROOT_DIR', f'{stem}_DIR')\n\n\ndef find_pkg_root(")]),
    "lib-positional": ([], [("find_pkg_root('nccl', lib_name='libnccl.so', optional=optional)",
                             "find_pkg_root('nccl', 'libnccl.so', optional)")]),
    "dists-comprehension": ([], [(DISTS, "if not any(p in dist_name for p in "
                                  "[f'nvidia-{name}', 'nvidia_' + name]):")]),
}


def _package(tmp_path: Path, check: str = CHECK, find: str = FIND) -> str:
    pkg = tmp_path / "deep_ep"
    (pkg / "utils").mkdir(parents=True)
    (pkg / "__init__.py").write_text(check + "\nimport torch\n\nfrom deep_ep._C import Config\n")
    (pkg / "utils" / "__init__.py").write_text("")
    (pkg / "utils" / "find_pkgs.py").write_text(find)
    return str(pkg)


def _nccl(folder: str) -> object:
    got = deepep_rule._read(folder, Confined(None))
    assert got is not None
    return got["nccl"]


def _spelled(text: str, changes: list[tuple[str, str]]) -> str:
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new)
    return text


def test_the_shipped_spelling(tmp_path: Path) -> None:
    assert _nccl(_package(tmp_path)) == {
        "function": "check_nccl_so", "line": 9, "root_fn": "find_nccl_root",
        "suppress": ["EP_SUPPRESS_NCCL_CHECK"], "pattern": "/lib/libnccl.so*",
        "env": ["EP_NCCL_ROOT_DIR", "NCCL_DIR"], "present": True,
        "dists": ["nvidia-nccl", "nvidia_nccl"], "lib": "libnccl.so", "package": "nccl",
        "module": str(tmp_path / "deep_ep" / "utils" / "find_pkgs.py")}


@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_a_spelling_reads_as_the_shipped_one(tmp_path: Path, name: str) -> None:
    check, find = SPELLINGS[name]
    want = _nccl(_package(tmp_path / "shipped"))
    got = _nccl(_package(tmp_path / "spelled", _spelled(CHECK, check), _spelled(FIND, find)))
    assert isinstance(got, dict) and isinstance(want, dict)
    same = {"line": 0, "root_fn": "", "module": ""}
    assert {**got, **same} == {**want, **same}
    assert got["root_fn"].endswith("find_nccl_root")


def test_the_variables_read_with_get(tmp_path: Path) -> None:
    """``os.environ.get(a) or os.environ.get(b)``: a set but empty variable is passed over."""
    find = _spelled(FIND, [(ENVS + "\n        if env_name in os.environ:\n"
                            "            return os.environ[env_name]",
                            "root = os.environ.get(f'EP_{upper}_ROOT_DIR') or "
                            "os.environ.get(f'{upper}_DIR')\n    if root:\n        return root")])
    got = _nccl(_package(tmp_path, find=find))
    assert isinstance(got, dict)
    assert got["env"] == ["EP_NCCL_ROOT_DIR", "NCCL_DIR"] and got["present"] is False


UNREAD = {
    "glob-of-a-format": [(GLOB, "glob.glob(PATTERN.format(find_nccl_root()))")],
    "glob-of-a-global-root": [(GLOB, "glob.glob(ROOT + '/lib/libnccl.so*')")],
    "no-glob": [(GLOB, "[p for p in os.listdir(find_nccl_root()) if 'libnccl' in p]")],
}
UNREAD_FIND = {
    "env-from-a-global": [(ENVS, "for env_name in ENV_NAMES:")],
    "dists-from-a-global": [(DISTS, "if not any(p in dist_name for p in PREFIXES):")],
}


@pytest.mark.parametrize("name", sorted([*UNREAD, *UNREAD_FIND]))
def test_an_unread_spelling_is_not_judged(tmp_path: Path, name: str) -> None:
    folder = _package(tmp_path, _spelled(CHECK, UNREAD.get(name, [])),
                      _spelled(FIND, UNREAD_FIND.get(name, [])))
    got = _nccl(folder)
    assert isinstance(got, dict) and set(got) == {"unread"}
    assert "check_nccl_so()" in got["unread"] and "__init__.py:" in got["unread"]


def test_no_check_is_no_check(tmp_path: Path) -> None:
    """A release without the check (sgl-deep-ep 0.1.0's ``__init__``) reads as none."""
    assert _nccl(_package(tmp_path, check="import os\n")) is None


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("spelling", ["shipped", "os.path.join", "unread"])
def test_the_check_says_it(tmp_path: Path, spelling: str) -> None:
    """End to end: ``NCCL_DIR`` naming a folder without the library fails the shipped and a
    re-spelled check alike; an unread one is "not judged" (before: "pass")."""
    from tests.lib.checkrun import run
    from tests.lib.deepep_sources import deep_ep_image

    check = (CHECK if spelling == "shipped" else
             _spelled(CHECK, SPELLINGS[spelling][0] if spelling in SPELLINGS
                      else UNREAD["glob-of-a-format"]))
    site = deep_ep_image(tmp_path / "site", check)
    (tmp_path / "empty" / "lib").mkdir(parents=True)
    r = run(site, "--gpu-capability", "9.0", "--", "--moe-a2a-backend", "deepep", ep=False,
            env={"CUDA_HOME": "/opt/cuda", "NCCL_DIR": str(tmp_path / "empty")})
    line = r.line("deep_ep")
    if spelling == "unread":
        assert r.rc != 1 and "not judged" in line and "check_nccl_so()" in line, r.out
    else:
        assert r.rc == 1 and "AssertionError: No libnccl.so found in" in line, r.out


HOSTILE = {
    "recursive-helper": [("def find_pkg_root(", "def _names(x):\n    y = _names(x)\n    return y"
                          "\n\n\ndef find_pkg_root("),
                         (ENVS, "for env_name in _names(upper):")],
    "mutual-helpers": [("def find_pkg_root(", "def _a(x):\n    return _b(x) + '_DIR'\n\n\n"
                        "def _b(x):\n    return _a(x)\n\n\ndef find_pkg_root("),
                       (ENVS, "for env_name in (_a(upper),):")],
    "a-long-sum": [(ENVS, "for env_name in (" + " + ".join(["'A'"] * 50) + ",):")],
    "recursive-root": [("def find_nccl_root(optional=False):\n    return find_pkg_root(",
                        "def find_nccl_root(optional=False):\n    return find_nccl_root(")],
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_finder_is_not_judged(tmp_path: Path, name: str) -> None:
    """Helpers calling themselves, a sum past the reading's depth: read in bounded time as
    "not judged", nothing raised."""
    got = _nccl(_package(tmp_path, find=_spelled(FIND, HOSTILE[name])))
    assert isinstance(got, dict) and set(got) == {"unread"}, got


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_a_changed_finder_module_is_read_again(tmp_path: Path) -> None:
    """The reading is remembered under ``__init__.py``'s stamp: ``utils/find_pkgs.py``
    changed alone (its variables renamed) is read again, not answered from the memo."""
    from tests.lib.checkrun import run
    from tests.lib.deepep_sources import deep_ep_image

    site = deep_ep_image(tmp_path / "site")
    (tmp_path / "empty" / "lib").mkdir(parents=True)
    env = {"CUDA_HOME": "/opt/cuda", "NCCL_DIR": str(tmp_path / "empty"),
           "MOONPIN_CACHE_DIR": str(tmp_path / "cache")}
    args = ("--gpu-capability", "9.0", "--", "--moe-a2a-backend", "deepep")
    first = run(site, *args, ep=False, env=env)
    assert "No libnccl.so found" in first.line("deep_ep"), first.out
    finder = site / "deep_ep" / "utils" / "find_pkgs.py"
    finder.write_text(_spelled(FIND, [(ENVS, "for env_name in ('OTHER_NCCL_DIR',):")]))
    again = run(site, *args, ep=False, env=env)  # NCCL_DIR is no longer read
    assert "Cannot find package: nccl" in again.line("deep_ep"), again.out
