"""Open a container image file without running it: an OCI image layout folder, an OCI
archive (a tar of such a folder), or a ``docker save`` / ``podman save`` tarball
(including the OCI layout plus nested index that Docker's containerd image store writes).

Only bytes are read: JSON documents are size-capped and checked for their shape, every
blob named by a digest is verified against it, and each layer is reachable on its own as a
stream (:meth:`Image.open_layer`) so that :func:`moonpin.readers.image.layers.unpack` can read the
layers newest first. Every failure is an :class:`ImageError` naming the file or blob.

Formats: the OCI image spec (``image-layout.md``, ``image-index.md``, ``manifest.md``,
``config.md``); Docker's ``docker save`` format (moby ``image/tarexport``: a top-level
``manifest.json`` listing ``Config`` and ``Layers`` paths inside the tar).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tarfile
from dataclasses import dataclass
from typing import IO, Any

__all__ = ["Image", "ImageConfig", "ImageError", "Layer", "open_image"]

_INDEX_TYPES = {"application/vnd.oci.image.index.v1+json",
                "application/vnd.docker.distribution.manifest.list.v2+json"}
_MANIFEST_TYPES = {"application/vnd.oci.image.manifest.v1+json",
                   "application/vnd.docker.distribution.manifest.v2+json"}
#: Caps on the small documents (an index, a manifest, a config) and on the outer archive.
_MAX_DOC = 16 << 20
_MAX_ARCHIVE_MEMBERS = 200_000
_MAX_NESTING = 4


class ImageError(Exception):
    """Every failure of reading an image; the message names the file or blob and why."""


@dataclass(frozen=True)
class ImageConfig:
    """The runtime part of an image's config (OCI ``config.md``: ``config`` and the
    platform fields at the top level)."""

    env: tuple[str, ...]
    entrypoint: tuple[str, ...] | None
    cmd: tuple[str, ...] | None
    working_dir: str | None
    os: str
    architecture: str
    variant: str | None
    user: str | None = None  # config.User: "name", "uid", "name:group", "uid:gid"...


@dataclass(frozen=True)
class Layer:
    """One layer blob: where it lives in the image and what it must hash to."""

    name: str               # the blob's path in the layout / archive, for messages
    digest: str | None      # "sha256:<hex>" of the stored bytes, when the format names one
    diff_id: str | None     # "sha256:<hex>" of the uncompressed tar (the config's rootfs)
    size: int | None        # the descriptor's size, when the format gives one


def _fail(msg: str) -> ImageError:
    return ImageError(msg)


def _loads(data: bytes, what: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:
        raise _fail(f"{what} is not valid JSON ({e})") from e


def _digest_hex(digest: object, what: str) -> str:
    if not isinstance(digest, str) or ":" not in digest:
        raise _fail(f"{what}: digest {digest!r} is not '<algorithm>:<hex>'")
    alg, hexpart = digest.split(":", 1)
    if alg != "sha256":
        raise _fail(f"{what}: digest algorithm {alg!r} is not supported (only sha256)")
    if len(hexpart) != 64 or any(c not in "0123456789abcdef" for c in hexpart):
        raise _fail(f"{what}: digest {digest!r} is not 64 lowercase hex digits")
    return hexpart


def _verify(data: bytes, digest: str, what: str) -> None:
    got = "sha256:" + hashlib.sha256(data).hexdigest()
    if got != digest:
        raise _fail(f"{what}: its sha256 is {got}, not the digest {digest} that names it "
                    "(the file is corrupt or was altered)")


class _Store:
    """Where the blobs live: a folder or a tar archive holding the same paths."""

    label: str

    def exists(self, rel: str) -> bool:
        raise NotImplementedError

    def open(self, rel: str) -> tuple[IO[bytes], int]:
        """A binary stream positioned at the file's first byte, and its size."""
        raise NotImplementedError

    def read(self, rel: str, cap: int = _MAX_DOC) -> bytes:
        f, size = self.open(rel)
        try:
            if size > cap:
                raise _fail(f"{self.label}: {rel} is {size} bytes, over the {cap >> 20} MiB "
                            "a document of an image may have")
            data = f.read(size)
        finally:
            f.close()
        if len(data) != size:
            raise _fail(f"{self.label}: {rel} is truncated ({len(data)} of {size} bytes)")
        return data


class _DirStore(_Store):
    def __init__(self, root: str) -> None:
        self.root = root
        self.label = root

    def _path(self, rel: str) -> str:
        return os.path.join(self.root, *rel.split("/"))

    def exists(self, rel: str) -> bool:
        return os.path.lexists(self._path(rel))

    def open(self, rel: str) -> tuple[IO[bytes], int]:
        path = self._path(rel)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
                         | getattr(os, "O_NOFOLLOW", 0))
        except OSError as e:
            raise _fail(f"{self.label}: {rel} cannot be opened ({e.strerror}); the layout "
                        "names a blob it does not hold") from e
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise _fail(f"{self.label}: {rel} is not a regular file")
        return os.fdopen(fd, "rb", buffering=0), st.st_size


class _Window:
    """A read-only view of ``size`` bytes of a file from ``start`` (one archive member)."""

    def __init__(self, f: IO[bytes], start: int, size: int) -> None:
        self._f, self._left = f, size
        f.seek(start)

    def read(self, n: int = -1) -> bytes:
        if n < 0 or n > self._left:
            n = self._left
        data = self._f.read(n)
        self._left -= len(data)
        return data

    def close(self) -> None:
        self._f.close()


class _TarStore(_Store):
    """An uncompressed tar archive (``docker save``, ``skopeo copy … oci-archive:``):
    its member table is read once, each member then opened by seeking."""

    def __init__(self, path: str, fd: int) -> None:
        self.path, self.label = path, path
        self.members: dict[str, tuple[int, int]] = {}
        with os.fdopen(os.dup(fd), "rb") as f:
            try:
                with tarfile.open(fileobj=f, mode="r:") as tf:
                    for n, m in enumerate(tf):
                        if n >= _MAX_ARCHIVE_MEMBERS:
                            raise _fail(f"{path}: more than {_MAX_ARCHIVE_MEMBERS} members; "
                                        "not an image archive")
                        if m.isreg():
                            name = m.name[2:] if m.name.startswith("./") else m.name
                            self.members[name] = (m.offset_data, m.size)
            except (tarfile.TarError, EOFError, OSError) as e:
                raise _fail(f"{path} is not a readable tar archive ({e})") from e

    def exists(self, rel: str) -> bool:
        return rel in self.members

    def open(self, rel: str) -> tuple[IO[bytes], int]:
        if rel not in self.members:
            raise _fail(f"{self.label}: the archive has no member {rel!r}; the image names a "
                        "blob it does not hold")
        start, size = self.members[rel]
        f = open(self.path, "rb", buffering=0)
        return _Window(f, start, size), size  # type: ignore[return-value]


def _host_platform() -> str:
    m = os.uname().machine.lower()
    return "linux/" + {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64",
                       "arm64": "arm64"}.get(m, m)


def _norm_platform(p: str) -> str:
    parts = p.strip().lower().split("/")
    if len(parts) == 3 and parts[1] == "arm64" and parts[2] == "v8":
        parts = parts[:2]
    return "/".join(parts)


def _platform_of(desc: dict[str, Any]) -> str | None:
    plat = desc.get("platform")
    if not isinstance(plat, dict):
        return None
    o, a, v = plat.get("os"), plat.get("architecture"), plat.get("variant")
    if not isinstance(o, str) or not isinstance(a, str):
        return None
    if o == "unknown" or a == "unknown":  # buildx attestation manifests
        return "unknown"
    return _norm_platform("/".join([o, a] + ([v] if isinstance(v, str) and v else [])))


def _descriptors(doc: Any, what: str) -> list[dict[str, Any]]:
    if not isinstance(doc, dict) or not isinstance(doc.get("manifests"), list):
        raise _fail(f"{what} is not an image index (no 'manifests' list)")
    out = []
    for i, d in enumerate(doc["manifests"]):
        if not isinstance(d, dict) or not isinstance(d.get("digest"), str):
            raise _fail(f"{what}: manifests[{i}] is not a descriptor with a digest")
        out.append(d)
    return out


class Image:
    """An opened image: its config and its layers (oldest first), each readable alone."""

    def __init__(self, store: _Store, kind: str, config: ImageConfig,
                 layers: tuple[Layer, ...]) -> None:
        self._store, self.kind, self.config, self.layers = store, kind, config, layers
        self.notes: list[str] = []  # what unpack had to do twice (re-read layers)

    @property
    def platform(self) -> str:
        c = self.config
        return "/".join([c.os, c.architecture] + ([c.variant] if c.variant else []))

    def describe(self) -> str:
        s = (f"{self.kind} {os.path.basename(self._store.label.rstrip('/'))}, "
             f"{self.platform}, {len(self.layers)} layer{'s' if len(self.layers) != 1 else ''}")
        return s + "".join(f"; {n}" for n in self.notes)

    def open_layer(self, layer: Layer) -> tuple[IO[bytes], int]:
        """The stored bytes of ``layer`` (compressed or not) and their size."""
        return self._store.open(layer.name)


def _blob_path(digest: str, what: str) -> str:
    return "blobs/sha256/" + _digest_hex(digest, what)


def _read_blob(store: _Store, desc: dict[str, Any], what: str) -> Any:
    digest = desc["digest"]
    rel = _blob_path(digest, what)
    if not store.exists(rel):
        raise _fail(f"{store.label}: {what} names blob {digest}, which is not in the image")
    data = store.read(rel)
    _verify(data, digest, f"{store.label}: {rel}")
    return _loads(data, f"{store.label}: {rel} ({what})")


def _parse_config(doc: Any, what: str) -> tuple[ImageConfig, list[str] | None]:
    if not isinstance(doc, dict):
        raise _fail(f"{what} is not an image config (a JSON object)")
    cfg = doc.get("config") or {}
    if not isinstance(cfg, dict):
        raise _fail(f"{what}: 'config' is not an object")

    def strs(key: str) -> tuple[str, ...] | None:
        v = cfg.get(key)
        if v is None:
            return None
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise _fail(f"{what}: config.{key} is not a list of strings")
        return tuple(v)

    wd = cfg.get("WorkingDir")
    if wd is not None and not isinstance(wd, str):
        raise _fail(f"{what}: config.WorkingDir is not a string")
    o, a, v = doc.get("os"), doc.get("architecture"), doc.get("variant")
    if not isinstance(o, str) or not isinstance(a, str):
        raise _fail(f"{what}: 'os' and 'architecture' are not both strings")
    if v is not None and not isinstance(v, str):
        raise _fail(f"{what}: 'variant' is not a string")
    diff_ids: list[str] | None = None
    rootfs = doc.get("rootfs")
    if isinstance(rootfs, dict) and isinstance(rootfs.get("diff_ids"), list):
        diff_ids = [d for d in rootfs["diff_ids"] if isinstance(d, str)]
    user = cfg.get("User")
    if user is not None and not isinstance(user, str):
        raise _fail(f"{what}: config.User is not a string")
    conf = ImageConfig(env=strs("Env") or (), entrypoint=strs("Entrypoint"), cmd=strs("Cmd"),
                       working_dir=wd or None, os=o, architecture=a, variant=v or None,
                       user=user or None)
    return conf, diff_ids


def _pick(cands: list[tuple[str, dict[str, Any]]], platform: str | None,
          what: str) -> dict[str, Any]:
    if not cands:
        raise _fail(f"{what} lists no image manifest")
    plats = sorted({p for p, _ in cands})
    if platform is not None:
        want = _norm_platform(platform)
        hits = [d for p, d in cands if p == want]
        if not hits:
            raise _fail(f"{what} holds no image for {platform} (it holds: {', '.join(plats)}); "
                        "pick one of those with --platform")
    elif len({d["digest"] for _, d in cands}) == 1:
        hits = [cands[0][1]]
    else:
        host = _host_platform()
        hits = [d for p, d in cands if p == host]
        if not hits:
            raise _fail(f"{what} holds images for {', '.join(plats)}, none for this host "
                        f"({host}); pick one with --platform")
    if len({d["digest"] for d in hits}) > 1:
        raise _fail(f"{what} holds {len(hits)} different images for the same platform; save "
                    "one image per file (docker save IMAGE:TAG)")
    return hits[0]


def _oci_manifest(store: _Store, platform: str | None) -> dict[str, Any]:
    """Walk index.json (and nested indexes) to the one image manifest for ``platform``."""
    label = store.label
    top = _loads(store.read("index.json"), f"{label}: index.json")
    cands: list[tuple[str, dict[str, Any]]] = []
    seen: set[str] = set()

    def walk(doc: Any, what: str, depth: int, inherited: str | None) -> None:
        for d in _descriptors(doc, what):
            mt, p = d.get("mediaType"), _platform_of(d) or inherited
            if p == "unknown":
                continue
            if mt in _INDEX_TYPES:
                if d["digest"] in seen or depth >= _MAX_NESTING:
                    raise _fail(f"{label}: the image index nests in a loop or deeper than "
                                f"{_MAX_NESTING} levels (at {d['digest']})")
                seen.add(d["digest"])
                walk(_read_blob(store, d, "an image index"), f"{label}: index {d['digest']}",
                     depth + 1, p)
            elif mt is None or mt in _MANIFEST_TYPES:
                cands.append((p or "", d))

    walk(top, f"{label}: index.json", 0, None)
    if any(not p for p, _ in cands) and (platform is not None or len(cands) > 1):
        # a descriptor without a platform: the platform is the config's
        cands = [(p or _config_platform(store, d), d) for p, d in cands]
    return _pick(cands, platform, f"{label}: index.json")


def _config_platform(store: _Store, desc: dict[str, Any]) -> str:
    m = _read_blob(store, desc, "an image manifest")
    if not isinstance(m, dict) or not isinstance(m.get("config"), dict) \
            or not isinstance(m["config"].get("digest"), str):
        raise _fail(f"{store.label}: manifest {desc['digest']} has no config descriptor")
    c = _parse_config(_read_blob(store, m["config"], "an image config"),
                      f"{store.label}: config {m['config']['digest']}")[0]
    return _norm_platform("/".join([c.os, c.architecture] + ([c.variant] if c.variant else [])))


def _open_oci(store: _Store, kind: str, platform: str | None) -> Image:
    label = store.label
    desc = _oci_manifest(store, platform)
    man = _read_blob(store, desc, "an image manifest")
    what = f"{label}: manifest {desc['digest']}"
    if not isinstance(man, dict) or not isinstance(man.get("config"), dict) \
            or not isinstance(man.get("layers"), list):
        raise _fail(f"{what} is not an image manifest (no 'config' and 'layers')")
    if not isinstance(man["config"].get("digest"), str):
        raise _fail(f"{what}: 'config' has no digest")
    config, diff_ids = _parse_config(_read_blob(store, man["config"], "an image config"),
                                     f"{label}: config {man['config']['digest']}")
    layers = []
    for i, ld in enumerate(man["layers"]):
        if not isinstance(ld, dict) or not isinstance(ld.get("digest"), str):
            raise _fail(f"{what}: layers[{i}] is not a descriptor with a digest")
        rel = _blob_path(ld["digest"], f"{what}: layers[{i}]")
        if not store.exists(rel):
            raise _fail(f"{label}: the manifest names layer {ld['digest']}, which is not in "
                        "the image")
        size = ld.get("size")
        layers.append(Layer(name=rel, digest=ld["digest"],
                            diff_id=diff_ids[i] if diff_ids and i < len(diff_ids) else None,
                            size=size if isinstance(size, int) and size >= 0 else None))
    _check_platform(config, platform, label)
    return Image(store, kind, config, tuple(layers))


def _check_platform(config: ImageConfig, platform: str | None, label: str) -> None:
    if platform is None:
        return
    have = _norm_platform("/".join([config.os, config.architecture]
                                   + ([config.variant] if config.variant else [])))
    if have != _norm_platform(platform):
        raise _fail(f"{label}: the image is for {have}, not {platform}")


def _open_docker(store: _Store, platform: str | None) -> Image:
    label = store.label
    doc = _loads(store.read("manifest.json"), f"{label}: manifest.json")
    if not isinstance(doc, list) or not doc or not all(isinstance(e, dict) for e in doc):
        raise _fail(f"{label}: manifest.json is not a list of images")
    if len(doc) > 1:
        tags = [t for e in doc for t in (e.get("RepoTags") or []) if isinstance(t, str)]
        raise _fail(f"{label} holds {len(doc)} images ({', '.join(tags) or 'untagged'}); save "
                    "one image per file (docker save IMAGE:TAG)")
    entry = doc[0]
    cfg_name, layer_names = entry.get("Config"), entry.get("Layers")
    if not isinstance(cfg_name, str) or not isinstance(layer_names, list) \
            or not all(isinstance(n, str) for n in layer_names):
        raise _fail(f"{label}: manifest.json has no 'Config' string and 'Layers' list")
    cfg_bytes = store.read(cfg_name)
    hexname = _hex_of_name(cfg_name)
    if hexname:
        _verify(cfg_bytes, "sha256:" + hexname, f"{label}: {cfg_name}")
    config, diff_ids = _parse_config(_loads(cfg_bytes, f"{label}: {cfg_name}"),
                                     f"{label}: {cfg_name}")
    layers = []
    for i, n in enumerate(layer_names):
        if not store.exists(n):
            raise _fail(f"{label}: manifest.json names layer {n!r}, which is not in the archive")
        h = _hex_of_name(n)
        layers.append(Layer(name=n, digest="sha256:" + h if h else None,
                            diff_id=diff_ids[i] if diff_ids and i < len(diff_ids) else None,
                            size=None))
    _check_platform(config, platform, label)
    return Image(store, "docker-archive", config, tuple(layers))


def _hex_of_name(name: str) -> str | None:
    """The digest a docker-archive member name carries (``<hex>.tar``, ``<hex>.json``,
    ``blobs/sha256/<hex>``); legacy ``<id>/layer.tar`` names carry none."""
    base = name.rsplit("/", 1)[-1]
    for suffix in (".tar", ".json"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    if len(base) == 64 and all(c in "0123456789abcdef" for c in base):
        return base
    return None


def open_image(path: str, platform: str | None = None) -> Image:
    """Open the image at ``path``: an OCI image layout folder, an OCI archive, or a
    ``docker save`` / ``podman save`` tarball.

    ``platform`` ("linux/amd64", "linux/arm64", "linux/arm64/v8") picks from a
    multi-platform index; None takes the only image, else the host's, else raises
    :class:`ImageError` listing the platforms present. Only the index, manifest and
    config are read here; layers are read by :func:`moonpin.readers.image.layers.unpack`.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise _fail(f"{path}: cannot be opened ({e.strerror})") from e
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            store: _Store = _DirStore(path)
            if not store.exists("index.json"):
                raise _fail(f"{path} is a folder without index.json, not an OCI image layout "
                            "(give the folder skopeo/umoci wrote, or a docker save tarball)")
            return _open_oci(store, "oci", platform)
        if not stat.S_ISREG(st.st_mode):
            raise _fail(f"{path} is not a regular file or a folder (a pipe or device); save "
                        "the image to a file first (docker save -o image.tar IMAGE)")
        head = os.pread(fd, 512, 0)
        if head[:2] == b"\x1f\x8b" or head[:4] == b"\x28\xb5\x2f\xfd":
            raise _fail(f"{path} is a compressed file; decompress it first (an image archive "
                        "is a plain tar: docker save -o image.tar IMAGE)")
        if len(head) < 512 or head[257:262] != b"ustar":
            raise _fail(f"{path} is not a tar archive, an OCI layout folder or a docker save "
                        "tarball")
        tstore = _TarStore(path, fd)
        if tstore.exists("index.json"):
            return _open_oci(tstore, "oci-archive", platform)
        if tstore.exists("manifest.json"):
            return _open_docker(tstore, platform)
        raise _fail(f"{path} holds neither index.json nor manifest.json: not an image archive")
    finally:
        os.close(fd)

