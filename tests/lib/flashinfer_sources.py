"""flashinfer-python's ``flashinfer/jit/env.py`` as its releases ship it, cut to the parts an
import runs for its companions (flashinfer-cubin's and flashinfer-jit-cache's version
checks): quoted once for the tests of either companion. Read on the index's wheels:
0.6.12's, and 0.7.2's (0.7.4's file is the same bytes)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["ENV_06", "ENV_07", "flashinfer_image"]

#: flashinfer-python 0.6.12: both checks raise (the cubin's on any other version, the
#: jit-cache's on a version not starting with flashinfer's own)
ENV_06 = '''import os
import pathlib

from ..version import __version__ as flashinfer_version


def has_flashinfer_jit_cache() -> bool:
    import importlib.util

    return importlib.util.find_spec("flashinfer_jit_cache") is not None


def has_flashinfer_cubin() -> bool:
    import importlib.util

    return importlib.util.find_spec("flashinfer_cubin") is not None


def _get_cubin_dir():
    if has_flashinfer_cubin():
        import flashinfer_cubin

        flashinfer_cubin_version = flashinfer_cubin.__version__
        if (
            not os.getenv("FLASHINFER_DISABLE_VERSION_CHECK")
            and flashinfer_version != "0.0.0+unknown"
            and flashinfer_version != flashinfer_cubin_version
        ):
            raise RuntimeError(
                f"flashinfer-cubin version ({flashinfer_cubin_version}) does not match "
                f"flashinfer version ({flashinfer_version}). "
            )

        return pathlib.Path(flashinfer_cubin.get_cubin_dir())

    env_dir = os.getenv("FLASHINFER_CUBIN_DIR")
    if env_dir:
        return pathlib.Path(env_dir)
    return pathlib.Path("/cache")


FLASHINFER_CUBIN_DIR: pathlib.Path = _get_cubin_dir()


def _get_aot_dir():
    if has_flashinfer_jit_cache():
        import flashinfer_jit_cache

        flashinfer_jit_cache_version = flashinfer_jit_cache.__version__
        if (
            not os.getenv("FLASHINFER_DISABLE_VERSION_CHECK")
            and flashinfer_version != "0.0.0+unknown"
            and not flashinfer_jit_cache_version.startswith(flashinfer_version)
        ):
            raise RuntimeError("flashinfer-jit-cache version does not match")

        return pathlib.Path(flashinfer_jit_cache.get_jit_cache_dir())
    return pathlib.Path("/aot")


FLASHINFER_AOT_DIR: pathlib.Path = _get_aot_dir()
'''

#: flashinfer-python 0.7.2 (and 0.7.4): a checker function called inside a ``try`` that logs
#: and goes on, for each companion; ``FLASHINFER_CUBIN_DIR`` set returns before the cubin
#: package is read; the jit-cache only "<flashinfer's version>+…"
ENV_07 = '''import logging
import os
import pathlib

from ..version import __version__ as flashinfer_version

logger = logging.getLogger(__name__)


def has_flashinfer_jit_cache() -> bool:
    import importlib.util

    return importlib.util.find_spec("flashinfer_jit_cache") is not None


def has_flashinfer_cubin() -> bool:
    import importlib.util

    return importlib.util.find_spec("flashinfer_cubin") is not None


def _check_cubin_version(package_version: str) -> None:
    if (
        not os.getenv("FLASHINFER_DISABLE_VERSION_CHECK")
        and flashinfer_version != "0.0.0+unknown"
        and package_version != flashinfer_version
    ):
        raise RuntimeError(
            f"flashinfer-cubin version ({package_version}) does not match "
            f"flashinfer version ({flashinfer_version})."
        )


def _get_cubin_dir():
    env_dir = os.getenv("FLASHINFER_CUBIN_DIR")
    if env_dir:
        return pathlib.Path(env_dir)

    if has_flashinfer_cubin():
        import flashinfer_cubin

        try:
            _check_cubin_version(flashinfer_cubin.__version__)
        except RuntimeError as error:
            logger.warning("Ignoring incompatible flashinfer-cubin package: %s", error)
        else:
            return pathlib.Path(flashinfer_cubin.get_cubin_dir())

    return pathlib.Path("/cache")


FLASHINFER_CUBIN_DIR: pathlib.Path = _get_cubin_dir()


def _check_jit_cache_version(distribution: str, package_version: str) -> None:
    if (
        not os.getenv("FLASHINFER_DISABLE_VERSION_CHECK")
        and flashinfer_version != "0.0.0+unknown"
        and package_version != flashinfer_version
        and not package_version.startswith(f"{flashinfer_version}+")
    ):
        raise RuntimeError(f"{distribution} version does not match")


def _get_aot_providers():
    if not has_flashinfer_jit_cache():
        return ()
    import flashinfer_jit_cache

    try:
        _check_jit_cache_version("flashinfer-jit-cache", flashinfer_jit_cache.__version__)
    except RuntimeError as error:
        logger.warning("Ignoring incompatible flashinfer-jit-cache package: %s", error)
        return ()
    return ()


FLASHINFER_AOT_PROVIDERS = _get_aot_providers()
'''


def flashinfer_image(site: Path, env_py: str, version: str, requirement: str,
                     companion: str, companion_version: str, body: str = "") -> Path:
    """torch, an SGLang requiring ``requirement``, flashinfer-python ``version`` whose
    ``jit/env.py`` is ``env_py`` (its ``__init__`` imports it) and the ``companion``
    distribution at ``companion_version`` (its module's ``__init__``: the version, then
    ``body``); ``site``."""
    from tests.lib.extimages import torch_image
    from tests.lib.images import add_dist

    torch_image(site, sglang_requires=[requirement])
    pkg = site / "flashinfer"
    (pkg / "jit").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .jit import env\n")
    (pkg / "version.py").write_text(f'__version__ = "{version}"\n')
    (pkg / "jit" / "__init__.py").write_text("")
    (pkg / "jit" / "env.py").write_text(env_py)
    add_dist(site, "flashinfer-python", version, requires=["torch"])
    module = site / companion.replace("-", "_")
    module.mkdir()
    (module / "__init__.py").write_text(f'__version__ = "{companion_version}"\n{body}')
    add_dist(site, companion, companion_version)
    return site
