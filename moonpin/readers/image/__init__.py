"""Container image files read without running them: manifest, layers, final filesystem.

``manifest`` (an OCI layout folder or archive, a ``docker save`` tarball: its index, manifest,
config and layers), ``layerstream`` (one layer blob as verified, bounded tar bytes) and
``layers`` (the part of the final filesystem the check reads, materialised newest layer
first)."""

from __future__ import annotations

__all__: list[str] = []
