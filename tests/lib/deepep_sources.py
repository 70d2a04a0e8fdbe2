"""sgl-deep-ep 0.1.2.post1's NCCL check as shipped (``deep_ep/__init__.py``) and its finder
(``deep_ep/utils/find_pkgs.py``), cut to what runs: quoted once for the tests that build
images of it and the ones that read it spelled otherwise."""

from __future__ import annotations

from pathlib import Path

__all__ = ["CHECK", "FIND", "deep_ep_image"]

CHECK = '''
import filecmp
import glob
import os

from .utils.find_pkgs import find_nccl_root


def check_nccl_so():
    if int(os.environ.get('EP_SUPPRESS_NCCL_CHECK', 0)):
        return
    with open('/proc/self/maps', 'r') as f:
        loaded_nccl_so = None
        for so in [line.strip().split(' ')[-1] for line in f if 'libnccl' in line]:
            loaded_nccl_so = so if loaded_nccl_so is None else loaded_nccl_so
            assert so == loaded_nccl_so, f'Duplicate NCCL runtime found: {so}'
    linked_nccl_so_candidates = sorted(glob.glob(f'{find_nccl_root()}/lib/libnccl.so*'))
    assert linked_nccl_so_candidates, f'No libnccl.so found in {find_nccl_root()}/lib/'
    linked_nccl_so = linked_nccl_so_candidates[0]
    assert filecmp.cmp(loaded_nccl_so, linked_nccl_so, shallow=False)


check_nccl_so()
'''
FIND = '''import os
import sys
from importlib.metadata import distributions


def find_pkg_root(name, lib_name=None, optional=False):
    upper = name.upper()
    for env_name in (f'EP_{upper}_ROOT_DIR', f'{upper}_DIR'):
        if env_name in os.environ:
            return os.environ[env_name]
    best = None
    for dist in distributions():
        dist_name = (dist.metadata['Name'] or '').lower()
        if f'nvidia-{name}' not in dist_name and f'nvidia_{name}' not in dist_name:
            continue
        for f in (dist.files or []):
            if lib_name in str(f):
                lib_dir = os.path.dirname(str(f.locate()))
                best = os.path.dirname(lib_dir) if os.path.basename(lib_dir) == 'lib' else lib_dir
    if not optional:
        assert best is not None, f'Cannot find package: {name}'
    return best


def find_nccl_root(optional=False):
    return find_pkg_root('nccl', lib_name='libnccl.so', optional=optional)
'''


def deep_ep_image(site: Path, check: str = CHECK, find: str = FIND) -> Path:
    """torch with deep_ep (:func:`tests.lib.extimages.add_deep_ep`) whose ``__init__`` runs
    ``check`` first, with ``find`` its ``utils/find_pkgs.py``; ``site``."""
    from tests.lib.extimages import add_deep_ep, torch_image

    torch_image(site)
    add_deep_ep(site)
    init = site / "deep_ep" / "__init__.py"
    init.write_text(check + init.read_text())
    (site / "deep_ep" / "utils").mkdir()
    (site / "deep_ep" / "utils" / "__init__.py").write_text("")
    (site / "deep_ep" / "utils" / "find_pkgs.py").write_text(find)
    return site
