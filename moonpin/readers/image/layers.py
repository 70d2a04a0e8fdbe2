"""Materialise the part of an image's final filesystem that the light check reads.

Layers are applied the way the runtime applies them (OCI ``layer.md`` "Whiteouts";
containerd ``archive/tar.go``; anchore stereoscope ``filetree``), but read **newest first**:
an entry is kept only if no newer layer already decided its path or hid it. A newer layer
hides what is below it with ``.wh.NAME`` (NAME and everything under it), ``.wh..wh..opq``
(everything under that folder) and by putting a non-folder where a folder was (its
children). Within one layer a later entry overrides an earlier one. A folder symlink from a
lower layer (``/lib -> usr/lib``) that newer layers wrote through is resolved when it is
met: what they wrote under the literal path moves under the link's target.

What is kept is decided per path (:func:`check_wants`), plus the shared libraries the kept
ELF objects need (``DT_NEEDED``, grown as objects are kept) found in the library folders;
a library found needed only after its layer was passed is taken by re-reading just that
layer at the end. Nothing is written outside ``dest``: member names are checked, symlinks
are recreated relative and resolved inside the root (chroot semantics), and a final pass
checks every link it made.

A big shared library (torch's, the NVIDIA wheels', an extension's) is kept as what the
loader model reads of it, nothing more (:class:`_Skeleton`): its ELF and program headers,
its notes, ``PT_DYNAMIC`` and the tables the dynamic section names (``DT_STRTAB``,
``DT_SYMTAB``, the hash tables, the symbol versions), at their offsets in a sparse file of
the object's size; the code, data and CUDA fat binaries around them are never written (a
full-stack image holds about 7 GiB of them). Files whose bytes the check searches
(mooncake's and SGLang's builds) are kept whole.
"""

from __future__ import annotations

import os
import shutil
import tarfile
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from moonpin.readers.elf.layout import (
    ElfError,
    dynamic_range,
    is_elf,
    parse_layout,
    vaddr_to_offset,
)
from moonpin.readers.image.layerstream import Caps, LayerReader
from moonpin.readers.image.manifest import Image, ImageError, Layer

__all__ = ["NO_READS", "READ_KINDS", "Reads", "check_wants", "unpack"]

DEFAULT_MAX_BYTES = 32 << 30
DEFAULT_MAX_READ = 512 << 30
DEFAULT_MAX_MEMBERS = 1_000_000
DEFAULT_MAX_RATIO = 250
_COPY = 1 << 20
_NO_SYMLINKS_UNDER = ("usr/share/", "usr/include/", "usr/src/", "var/", "proc/", "sys/", "dev/",
                      "tmp/", "run/")
_LIB_DIRS = {"lib", "lib32", "lib64", "libx32", "usr/lib", "usr/lib32", "usr/lib64",
             "usr/libx32", "usr/local/lib", "usr/local/lib64"}
_META = {"METADATA", "PKG-INFO", "RECORD", "top_level.txt", "direct_url.json",
         "entry_points.txt", "INSTALLER", "WHEEL", "REQUESTED"}
_KEEP_DIRS = {"site-packages", "dist-packages", "lib-dynload"}
#: ELF objects of at least this size are kept as their skeleton (module doc)
SKELETON_MIN = 1 << 20
#: bytes before ``PT_DYNAMIC`` held in memory while its tables are not yet known (at the
#: file's start, and in the segment holding ``PT_DYNAMIC``); libtriton's .dynstr is 14 MB
_RETAIN = 32 << 20
#: folders whose objects the check reads whole (strings searched in SGLang's builds)
_WHOLE_UNDER = ("sglang",)
#: what a loader rule may declare it reads of an image (:class:`Reads`)
READ_KINDS = ("tools", "objects", "packages", "libs")


class Reads:
    """What the loader rules read of an image beyond what every check reads, as data: each
    rule's ``IMAGE_READS`` (:mod:`moonpin.preflight.extensions.seam`), merged; this reader
    names no project. ``tools``: executables its loader runs, kept in any ``bin/`` folder;
    ``objects``: name prefixes of the shared objects it loads wherever they lie (a cache
    folder the image's Env or home names); ``packages``: package folders every file of which
    it reads, wherever they lie, its objects whole (hashed against a RECORD, strings
    searched); ``libs``: name prefixes of auditwheel ``<name>.libs`` folders read the same
    way. An unknown kind is a ``ValueError`` (a rule's typo keeps nothing silently)."""

    __slots__ = READ_KINDS

    def __init__(self, *declared: Mapping[str, Iterable[str]]) -> None:
        got: dict[str, set[str]] = {k: set() for k in READ_KINDS}
        for d in declared:
            for kind, names in d.items():
                if kind not in got:
                    raise ValueError(f"{kind!r} is no kind of image read ({READ_KINDS})")
                got[kind].update(names)
        self.tools: frozenset[str] = frozenset(got["tools"])
        self.objects: tuple[str, ...] = tuple(sorted(got["objects"]))
        self.packages: frozenset[str] = frozenset(got["packages"])
        self.libs: tuple[str, ...] = tuple(sorted(got["libs"]))

    def __repr__(self) -> str:
        return (f"Reads(tools={sorted(self.tools)}, objects={list(self.objects)}, "
                f"packages={sorted(self.packages)}, libs={list(self.libs)})")

    def lib_folder(self, seg: str) -> bool:
        """Whether ``seg`` is the ``.libs`` folder of a declared name."""
        return seg.endswith(".libs") and seg.startswith(self.libs) if self.libs else False


#: no rule's reads
NO_READS = Reads()


def _env_int(name: str, default: int) -> int:
    v = os.environ.get(name, "")
    return int(v) if v.isdigit() and len(v) < 20 else default


def _is_lib_name(base: str) -> bool:
    return ".so" in base and (base.endswith(".so") or ".so." in base)


def _so_file(base: str) -> bool:
    return base.endswith(".so") or ".so." in base


def check_wants(path: str, reads: Reads = NO_READS) -> bool:
    """Whether the light check reads the file at absolute image path ``path``, the loader
    rules reading what ``reads`` says.

    Interpreters (``*/bin/python*``, ``libpython3*``, ``pyvenv.cfg``, the ``os.py``
    landmark and the PEP 668 ``EXTERNALLY-MANAGED`` marker of each ``lib/python3.X``, pip's
    configuration files), every ``.pth``, editable finder and ``*.egg-link``,
    the metadata files of every ``.dist-info`` / ``.egg-info``, every ``.py`` and ``.so``
    file in a site folder (what an import the check follows may run or load: torch's,
    each native extension's loader and builds, the NVIDIA wheels' libraries), the ``.py``
    and ``.so`` files of SGLang wherever they are, auditwheel's ``*.libs`` libraries, the
    loader's configuration (``/etc/ld.so.*``) and the user and group files (``/etc/passwd``,
    ``/etc/group``), and what the rules declare (:class:`Reads`: a compiling loader's tools
    and the adapters it compiled, in whatever cache folder; every file of a package and its
    ``.libs``, whose RECORD hashes tell two distributions apart). The shared libraries in
    library folders are not named here: :func:`unpack` keeps those the kept objects need.
    """
    p = path.lstrip("/")
    parts = p.split("/")
    base = parts[-1]
    parent = parts[-2] if len(parts) > 1 else ""
    if parent == "bin" and base.startswith("python"):
        return True
    if base == "pyvenv.cfg" or (base.startswith("libpython3") and _so_file(base)):
        return True
    if base in ("os.py", "EXTERNALLY-MANAGED") and parent.startswith("python3") \
            and len(parts) > 2 and parts[-3] in ("lib", "lib64"):
        return True
    if base == "pip.conf" and (parent == "pip" or p == "etc/pip.conf"):  # PEP 668 overrides
        return True
    if base.endswith((".pth", ".egg-link")) or base.startswith("__editable__") \
            or (base.endswith(".py") and "_editable" in base):
        return True
    if parent.endswith((".dist-info", ".egg-info")):
        return base in _META
    if base.endswith(".egg-info"):  # a distutils egg-info file
        return True
    if p in ("etc/ld.so.cache", "etc/ld.so.conf") or p.startswith("etc/ld.so.conf.d/"):
        return True
    if p in ("etc/passwd", "etc/group"):  # who the config's User is
        return True
    # a loader that compiles at first import: the tools it runs and the adapter it compiled
    # into its cache folder, wherever the image's Env or home puts that folder
    if parent == "bin" and base in reads.tools:
        return True
    if reads.objects and base.startswith(reads.objects) and _so_file(base):
        return True
    if (base.endswith(".py") or _so_file(base)) and any(
            seg in ("site-packages", "dist-packages") for seg in parts[:-1]):
        return True
    for i, seg in enumerate(parts[:-1]):
        if seg == "torch" and base.endswith(".py"):  # what `import torch` runs
            return True
        if seg == "sglang" or seg in reads.packages:
            if base.endswith(".py") or _so_file(base):
                return True
            # every file of a declared package: two distributions over one folder are told
            # apart by the RECORD hash of each of their files (its sources, its binaries)
            if seg in reads.packages and "__pycache__" not in parts:
                return True
        elif seg.endswith(".libs") and i == len(parts) - 2:
            if reads.lib_folder(seg) or _so_file(base):
                return True
        elif reads.lib_folder(seg):
            return True
    if parent == "torch":
        return base in ("version.py", "__init__.py") or (base.startswith("_C") and
                                                         _so_file(base))
    if parent == "lib" and len(parts) > 2 and parts[-3] == "torch":
        return _so_file(base)
    if parent == "lib" and len(parts) > 3 and parts[-4] == "nvidia":
        return _so_file(base)
    return False


def _want_dir(path: str) -> bool:
    parts = path.split("/")
    base = parts[-1]
    return base in _KEEP_DIRS or (base.startswith("python3") and len(parts) > 1
                                  and parts[-2] in ("lib", "lib64"))


def _norm(name: str, what: str) -> str:
    """A member name as a root-relative path without ``.`` parts; hostile names refused."""
    if name.startswith("/"):
        raise ImageError(f"{what}: member {name!r} has an absolute name; a layer's names "
                         "are relative to the image root (a hostile or broken layer)")
    parts = [s for s in name.split("/") if s not in ("", ".")]
    if ".." in parts:
        raise ImageError(f"{what}: member {name!r} has '..' in its name, which would "
                         "reach out of the image root (a hostile or broken layer)")
    return "/".join(parts)


def _lexical(parent: str, target: str) -> str | None:
    """``target`` of a link in folder ``parent``, as a root-relative path; None when a
    relative target climbs above the root."""
    if target.startswith("/"):
        parts: list[str] = []
        for s in target.split("/"):
            if s == "..":
                if parts:
                    parts.pop()
            elif s not in ("", "."):
                parts.append(s)
        return "/".join(parts)
    parts = parent.split("/") if parent else []
    for s in target.split("/"):
        if s == "..":
            if not parts:
                return None
            parts.pop()
        elif s not in ("", "."):
            parts.append(s)
    return "/".join(parts)


def _dirname(p: str) -> str:
    i = p.rfind("/")
    return p[:i] if i >= 0 else ""


class _Unpacker:
    def __init__(self, image: Image, dest: str, want: Callable[[str], bool] | None,
                 max_bytes: int, progress: Callable[[str], None] | None,
                 reads: Reads = NO_READS) -> None:
        self.image, self.dest = image, os.path.realpath(dest)
        self.reads = reads
        self.want = want or (lambda path: check_wants(path, reads))
        self.default = want is None
        self.max_bytes, self.kept = max_bytes, 0
        self.progress = progress or (lambda _s: None)
        self.caps = Caps(_env_int("MOONPIN_IMAGE_MAX_READ", DEFAULT_MAX_READ),
                         _env_int("MOONPIN_IMAGE_MAX_MEMBERS", DEFAULT_MAX_MEMBERS),
                         _env_int("MOONPIN_IMAGE_MAX_RATIO", DEFAULT_MAX_RATIO))
        self.decided: dict[str, int] = {}        # path -> the layer that decided it
        self.isdir: set[str] = set()             # decided paths that are folders
        self.parents: set[str] = set()           # folders above decided paths
        self.hidden_self: set[str] = set()       # a newer layer's .wh.NAME: NAME and below
        self.hidden_under: set[str] = set()      # opaque folders, non-folders over folders
        self.links: dict[str, tuple[str, int]] = {}  # symlink path -> (raw target, layer)
        self.made: set[str] = set()              # paths written into dest
        self.made_links: list[str] = []
        self.sonames: set[str] = set()           # DT_NEEDED of the kept objects
        self.lib_dirs: set[str] = set(_LIB_DIRS)
        self.wanted_paths: set[str] = set()      # link targets to keep
        self.cands: dict[str, list[str]] = {}    # lib-like basename -> unkept final paths
        self.rereading = False
        self.lib_links: dict[str, list[str]] = {}  # lib-like basename -> links made
        self.hardlinks: dict[tuple[int, str], list[str]] = {}  # (layer, target) -> links
        self.whole: set[str] = set()             # big objects to keep whole after all
        for e in image.config.env:
            if e.startswith("LD_LIBRARY_PATH="):
                for d in e.split("=", 1)[1].split(":"):
                    if d.startswith("/"):
                        self.lib_dirs.add(_lexical("", d) or "")

    # --- paths -----------------------------------------------------------------------

    def _hidden(self, p: str) -> bool:
        """Whether a newer layer hid ``p``: a whiteout of it or of a folder above it, an
        opaque folder above it, or a non-folder where a folder above it was."""
        hs, hu, decided, isdir = self.hidden_self, self.hidden_under, self.decided, self.isdir
        i = p.find("/")
        while i >= 0:
            pre = p[:i]
            if pre in hs or pre in hu or (pre in decided and pre not in isdir):
                return True
            i = p.find("/", i + 1)
        return p in hs

    def _canon(self, p: str, layer: int) -> str:
        """``p`` with its folders resolved through the symlinks a layer at or below
        ``layer`` put there (those of newer layers hide, they do not redirect)."""
        if not self.links:
            return p
        for _ in range(40):
            i = p.find("/")
            while i >= 0:
                pre = p[:i]
                link = self.links.get(pre)
                if link is not None and link[1] <= layer:
                    tgt = _lexical(_dirname(pre), link[0])
                    if tgt is None:
                        raise ImageError(f"layer {layer}: symlink /{pre} -> {link[0]} points "
                                         "out of the image root")
                    p = (tgt + p[i:]).lstrip("/")
                    break
                i = p.find("/", i + 1)
            else:
                return p
        raise ImageError(f"symlinks loop while resolving /{p}")

    def _resolve(self, p: str) -> str:
        """``p`` through every symlink of the final view, the last part too (for link
        targets to keep)."""
        for _ in range(40):
            q = self._canon(p, 1 << 30)
            link = self.links.get(q)
            if link is None:
                return q
            t = _lexical(_dirname(q), link[0])
            if t is None:
                return q
            p = t
        return p

    def _decide(self, p: str, idx: int) -> None:
        self.decided[p] = idx
        self._note_parents(p)

    def _note_parents(self, p: str) -> None:
        d = _dirname(p)
        while d and d not in self.parents:  # every folder above a decided path, once
            self.parents.add(d)
            d = _dirname(d)

    def _dpath(self, p: str) -> str:
        return os.path.join(self.dest, *p.split("/"))

    def _is_lib_dir(self, d: str) -> bool:
        if d in self.lib_dirs:
            return True
        parent = _dirname(d)
        return parent in _LIB_DIRS and "-linux-" in d.rsplit("/", 1)[-1]

    # --- writing ---------------------------------------------------------------------

    def _prepare(self, p: str) -> str:
        dp = self._dpath(p)
        parent = os.path.dirname(dp)
        os.makedirs(parent, exist_ok=True)
        real = os.path.realpath(parent)
        if real != self.dest and not real.startswith(self.dest + os.sep):
            raise ImageError(f"/{p}: its folder resolves outside the unpack folder")
        if os.path.lexists(dp):
            if os.path.isdir(dp) and not os.path.islink(dp):
                shutil.rmtree(dp)
            else:
                os.unlink(dp)
        return dp

    def _write(self, p: str, src: Any, size: int, mode: int, what: str,
               owner: tuple[int, int] | None = None) -> None:
        dp = self._prepare(p)
        fd = os.open(dp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0), 0o600)
        head = src.read(min(_COPY, size)) if size else b""
        if len(head) != min(_COPY, size):
            os.close(fd)
            raise ImageError(f"{what}: /{p} is truncated in the layer")
        skeleton = None
        if self.default and size >= SKELETON_MIN and is_elf(head) \
                and p not in self.whole and not _reads_whole(p, self.reads):
            skeleton = _Skeleton.plan(head, size)
        with os.fdopen(fd, "wb") as out:
            if skeleton is not None:
                written = skeleton.write(out.fileno(), head, src, f"{what}: /{p}")
                if written is None:  # a table before PT_DYNAMIC past what was held
                    self.whole.add(p)
                    self.wanted_paths.add(p)
                    out.close()
                    os.unlink(dp)
                    return
                self._count(written, what)
            else:
                self._count(size, what)
                out.write(head)
                left = size - len(head)
                while left > 0:
                    chunk = src.read(min(_COPY, left))
                    if not chunk:
                        raise ImageError(f"{what}: /{p} is truncated in the layer")
                    out.write(chunk)
                    left -= len(chunk)
        os.chmod(dp, mode & 0o777 | 0o600)
        if owner is not None and os.geteuid() == 0:  # who may read it is the check's question
            os.chown(dp, *owner)
        self.made.add(p)
        if is_elf(head) or p.startswith("etc/ld.so.conf"):
            self._learn(p, dp)

    def _count(self, n: int, what: str) -> None:
        self.kept += n
        if self.kept > self.max_bytes:
            raise ImageError(f"{what}: the files kept from the image pass "
                             f"{self.max_bytes >> 20} MiB, the cap (max_bytes; set "
                             "MOONPIN_IMAGE_MAX_KEPT=<bytes> to raise it)")

    def _learn(self, p: str, dp: str) -> None:
        """What a kept file adds to the wanted set: an ELF object's DT_NEEDED and
        RUNPATH folders, an ld.so.conf file's folders."""
        if p.startswith("etc/ld.so.conf"):
            try:
                with open(dp, "rb") as f:
                    text = f.read(1 << 20).decode("utf-8", "replace")
            except OSError:
                return
            for line in text.splitlines():
                line = line.split("#", 1)[0].strip()
                if line.startswith("/"):
                    self.lib_dirs.add(_lexical("", line) or "")
            return
        if not self.default:
            return
        needed, paths = _elf_needs(dp)
        for n in needed:
            name = n.rsplit("/", 1)[-1]
            if name not in self.sonames:
                self.sonames.add(name)
                for q in self.lib_links.get(name, ()):
                    t = _lexical(_dirname(q), self.links[q][0]) if q in self.links else None
                    if t:
                        self._want_path(self._resolve(t))
        for d in paths:
            d = d.replace("${ORIGIN}", "$ORIGIN")
            if d.startswith("$ORIGIN"):
                d = "/" + _dirname(p) + d[len("$ORIGIN"):]
            if d.startswith("/"):
                self.lib_dirs.add(_lexical("", d) or "")

    def _symlink(self, p: str, target: str, what: str) -> None:
        t = _lexical(_dirname(p), target)
        if t is None:
            raise ImageError(f"{what}: symlink /{p} -> {target} points out of the image root "
                             "(a hostile or broken layer)")
        dp = self._prepare(p)
        rel = os.path.relpath(t or ".", _dirname(p) or ".")
        os.symlink(rel, dp)
        self.made.add(p)
        self.made_links.append(p)
        base = p.rsplit("/", 1)[-1]
        if _is_lib_name(base):
            self.lib_links.setdefault(base, []).append(p)

    # --- one layer -------------------------------------------------------------------

    def _open(self, idx: int, layer: Layer) -> LayerReader:
        f, size = self.image.open_layer(layer)
        if layer.size is not None and layer.size != size:
            f.close()
            raise ImageError(f"layer {layer.name} is {size} bytes, not the {layer.size} its "
                             "manifest says (truncated or altered)")
        return LayerReader(f, size, layer.name, layer.digest, layer.diff_id, self.caps,
                           self.image.kind)

    def _members(self, reader: LayerReader, what: str) -> Any:
        caps = self.caps
        try:
            # "r" mode on a forward-only seekable stream: tarfile passes a member's data by
            # seeking (one read of the decompressed bytes, no copy); its member list is
            # dropped as it goes so memory does not grow with the member count
            tf = tarfile.TarFile(fileobj=reader, mode="r",  # type: ignore[arg-type]
                                 tarinfo=_BoundedTarInfo)
            last: tarfile.TarInfo | None = None
            while True:
                try:
                    m = tf.next()
                except tarfile.ReadError:
                    # the stream ends right after the last member's data, without the
                    # padding and end-of-archive blocks (umoci 0.4.7 `insert` writes such
                    # layers): nothing of any member is missing, and the digest is checked
                    if last is not None and reader.at_end() \
                            and reader.tell() == last.offset_data + (last.size if last.isreg()
                                                                     else 0):
                        self.image.notes.append(f"{what} lacks its end-of-archive blocks")
                        return
                    raise
                if m is None:
                    return
                last = m
                tf.members.clear()  # type: ignore[attr-defined]
                caps.members += 1
                if caps.members > caps.max_members:
                    raise ImageError(f"{what}: more than {caps.max_members} members in the "
                                     "image, the cap (set MOONPIN_IMAGE_MAX_MEMBERS=<n> to "
                                     "raise it)")
                yield tf, m
        except ImageError:
            raise
        except (tarfile.TarError, EOFError, OSError, ValueError, UnicodeError) as e:
            raise ImageError(f"{what} is not a readable tar stream ({e}): truncated or "
                             "corrupt") from e

    def pass_layer(self, idx: int, layer: Layer, only: set[str] | None = None) -> None:
        what = f"layer {idx + 1} ({layer.name})"
        reader = self._open(idx, layer)
        self.layer = idx
        new_self: set[str] = set()
        new_under: set[str] = set()
        try:
            for tf, m in self._members(reader, what):
                name = _norm(m.name, what)
                if not name:
                    continue
                base = name.rsplit("/", 1)[-1]
                if base.startswith(".wh."):
                    if only is None:
                        parent = _dirname(name)
                        self._note_parents(name)
                        if base == ".wh..wh..opq":
                            new_under.add(self._canon(parent, idx) if parent else "")
                        elif not base.startswith(".wh..wh."):
                            new_self.add(self._canon(name[: len(name) - len(base)] + base[4:],
                                                     idx))
                    continue
                p = self._canon(name, idx)
                if only is not None:
                    if (idx, p) in self.hardlinks or (p in only and self.decided.get(p) == idx):
                        self._apply(tf, m, p, what, idx)
                    continue
                if self._hidden(p) or "" in self.hidden_under:
                    continue
                d = self.decided.get(p)
                if d is not None and d != idx:
                    continue
                self._decide(p, idx)
                if m.isdir():
                    self.isdir.add(p)
                    if p in self.made:  # a folder after a file of the same name
                        os.unlink(self._dpath(p))
                        self.made.discard(p)
                    if _want_dir(p):
                        os.makedirs(self._dpath(p), exist_ok=True)
                    continue
                self.isdir.discard(p)  # a non-folder drops what lower layers had under it
                self._apply(tf, m, p, what, idx)
            reader.finish()
        except (tarfile.TarError, EOFError, ValueError, UnicodeError) as e:
            raise ImageError(f"{what} is not a readable tar stream ({e}): truncated or "
                             "corrupt") from e
        finally:
            reader.close()
        if only is None:
            self.hidden_self |= new_self
            self.hidden_under |= new_under

    def _keep(self, p: str) -> bool:
        if p in self.wanted_paths or self.want("/" + p):
            return True
        if self.default:
            base = p.rsplit("/", 1)[-1]
            return base in self.sonames and self._is_lib_dir(_dirname(p))
        return False

    def _apply(self, tf: tarfile.TarFile, m: tarfile.TarInfo, p: str, what: str,
               idx: int) -> None:
        base = p.rsplit("/", 1)[-1]
        if m.issym():
            link = m.linkname
            self.links[p] = (link, idx)
            self._merge_dir_under_link(p, idx, what)
            if self._keep(p) or (not p.startswith(_NO_SYMLINKS_UNDER)
                                 and "/" not in p.rstrip("/")) or self._link_useful(p):
                self._symlink(p, link, what)
                if self._keep(p):
                    t = _lexical(_dirname(p), link)
                    if t:
                        self._want_path(self._resolve(t))
            elif self.default and _is_lib_name(base):
                self.cands.setdefault(base, []).append(p)
            return
        if m.islnk():
            target = self._canon(_norm(m.linkname, what), idx)
            if not self._keep(p):
                if self.default and _is_lib_name(base):
                    self.cands.setdefault(base, []).append(p)
                return
            if target in self.made and self.decided.get(target) == idx \
                    and os.path.isfile(self._dpath(target)):
                dp = self._prepare(p)
                os.link(self._dpath(target), dp)
                self.made.add(p)
                return
            # the data is in an earlier member not kept: taken when the layer is re-read
            self.hardlinks.setdefault((idx, target), []).append(p)
            return
        if m.isreg():
            links = self.hardlinks.pop((idx, p), None) if self.rereading else None
            if links:
                src = tf.extractfile(m)
                self._write(links[0], src, m.size, m.mode, what, (m.uid, m.gid))
                for q in links[1:]:
                    os.link(self._dpath(links[0]), self._prepare(q))
                    self.made.add(q)
                if not self._keep(p):
                    return
                src = tf.extractfile(m)
                self._write(p, src, m.size, m.mode, what, (m.uid, m.gid))
                return
            if self._keep(p):
                src = tf.extractfile(m)
                self._write(p, src, m.size, m.mode, what, (m.uid, m.gid))
            elif self.default and _is_lib_name(base):
                self.cands.setdefault(base, []).append(p)
            return
        if self._keep(p):
            kind = ("a character device" if m.ischr() else "a block device" if m.isblk()
                    else "a FIFO" if m.isfifo() else f"of tar type {m.type!r}")
            raise ImageError(f"{what}: /{p} is {kind}, not a file; moonpin creates no device "
                             "files or FIFOs (a hostile or broken layer)")

    def _link_useful(self, p: str) -> bool:
        """Symlinks the check may walk through: in bin and library folders, python's
        prefix, ``/etc/alternatives``."""
        if p.startswith(_NO_SYMLINKS_UNDER):
            return False
        d = _dirname(p)
        return (d.endswith(("bin", "sbin")) or self._is_lib_dir(d) or "python" in p
                or d == "etc/alternatives" or p.rsplit("/", 1)[-1] in ("lib64", "lib", "bin"))

    def _want_path(self, t: str) -> None:
        if t in self.made or t in self.wanted_paths:
            return
        self.wanted_paths.add(t)

    def _merge_dir_under_link(self, p: str, idx: int, what: str) -> None:
        """A symlink at ``p`` from this (older) layer: what newer layers wrote through it
        literally (under a real ``p`` folder) belongs under its target."""
        if p not in self.parents:
            return
        dp = self._dpath(p)
        t = _lexical(_dirname(p), self.links[p][0])
        if t is None:
            raise ImageError(f"{what}: symlink /{p} -> {self.links[p][0]} points out of the "
                             "image root (a hostile or broken layer)")
        t = self._canon(t, idx)
        if t == p or t.startswith(p + "/"):
            return
        pre = p + "/"
        moved = [q for q in self.decided if q.startswith(pre)]
        for q in sorted(moved):
            nq = t + q[len(p):]
            layer_q = self.decided.pop(q)
            if self.decided.get(nq, -1) > layer_q:
                continue
            self._decide(nq, layer_q)
            if q in self.isdir:
                self.isdir.discard(q)
                self.isdir.add(nq)
            if q in self.links:
                self.links[nq] = self.links.pop(q)
            if q in self.made:
                self.made.discard(q)
                src = self._dpath(q)
                if os.path.islink(src):
                    self._symlink(nq, self.links[nq][0], what)
                elif os.path.isfile(src):
                    dst = self._prepare(nq)
                    os.rename(src, dst)
                    self.made.add(nq)
        for s in (self.hidden_self, self.hidden_under):
            for h in [h for h in s if h.startswith(pre)]:
                s.discard(h)
                s.add(t + h[len(p):])
        if os.path.isdir(dp) and not os.path.islink(dp):
            shutil.rmtree(dp)

    # --- the whole image -------------------------------------------------------------

    def run(self) -> None:
        layers = self.image.layers
        for idx in range(len(layers) - 1, -1, -1):
            self.progress(f"reading layer {idx + 1}/{len(layers)} ({layers[idx].name})")
            self.pass_layer(idx, layers[idx])
        for _round in range(4):
            need = self._pending()
            if not need and not self.hardlinks:
                break
            by_layer: dict[int, set[str]] = {}
            for p in need:
                by_layer.setdefault(self.decided[p], set()).add(p)
            for idx, _t in self.hardlinks:
                by_layer.setdefault(idx, set())
            for idx in sorted(by_layer, reverse=True):
                n = len(by_layer[idx])
                note = f"re-read layer {idx + 1} for {n} librar{'y' if n == 1 else 'ies'}"
                self.progress(note)
                self.image.notes.append(note)
                self.wanted_paths |= by_layer[idx]
                self.rereading = True
                self.pass_layer(idx, layers[idx], only=by_layer[idx])
                self.rereading = False
            for (idx, t), links in self.hardlinks.items():
                raise ImageError(f"layer {idx + 1}: hard link /{links[0]} -> /{t} names a file "
                                 "the layer does not hold before it (a hostile or broken layer)")
        self._verify_links()

    def _pending(self) -> set[str]:
        need = {p for p in self.wanted_paths if p not in self.made and p in self.decided
                and p not in self.isdir}
        for name in self.sonames:
            for p in self.cands.get(name, ()):
                if p not in self.made and self._is_lib_dir(_dirname(p)):
                    need.add(p)
        return need

    def _verify_links(self) -> None:
        root = self.dest + os.sep
        for p in self.made_links:
            dp = self._dpath(p)
            if not os.path.islink(dp):
                continue
            real = os.path.realpath(dp)
            if real != self.dest and not real.startswith(root):
                raise ImageError(f"symlink /{p} resolves outside the unpack folder")


def _reads_whole(p: str, reads: Reads) -> bool:
    """Whether the check reads every byte of the object at root-relative ``p``: it
    searches strings in SGLang's builds, and a rule reads its declared packages and their
    auditwheel ``.libs`` whole (each file hashed against its RECORD, strings searched)."""
    return any(seg in _WHOLE_UNDER or seg in reads.packages or reads.lib_folder(seg)
               for seg in p.split("/")[:-1])


#: program headers kept as they are (gABI: PT_INTERP, PT_NOTE; PT_GNU_PROPERTY)
_KEEP_PT = (3, 4, 0x6474E553)
#: dynamic tags whose value is an address (gABI "Dynamic Section"; GNU extensions):
#: each starts a table, so none of the tables below runs past the next one
_ADDR_TAGS = (3, 4, 5, 6, 7, 12, 13, 17, 23, 25, 26, 32, 36, 0x6FFFFEF5, 0x6FFFFEF9,
              0x6FFFFFF0, 0x6FFFFFFC, 0x6FFFFFFE)
#: the tables the loader model reads: DT_HASH, DT_STRTAB, DT_SYMTAB, DT_GNU_HASH,
#: DT_VERSYM, DT_VERDEF, DT_VERNEED (moonpin.readers.elfsym, moonpin.readers.elf)
_TABLE_TAGS = (4, 5, 6, 0x6FFFFEF5, 0x6FFFFFF0, 0x6FFFFFFC, 0x6FFFFFFE)
_DT_STRTAB, _DT_STRSZ = 5, 10


class _Skeleton:
    """The bytes of one big ELF object the loader model reads, picked as the object streams
    by: its headers and notes, ``PT_DYNAMIC``, and the tables the dynamic section names.
    The tables usually lie before ``PT_DYNAMIC`` (in the first segment): the first
    :data:`_RETAIN` bytes are held until the dynamic section says where they are; after
    it (patchelf moves ``.dynstr`` and ``.gnu.hash`` into a segment at the end) they are
    kept when the stream reaches them. Some put them in a segment before the one holding
    ``PT_DYNAMIC``, or in it (cusparseLt): that segment's bytes before ``PT_DYNAMIC`` are
    held too. A table is taken up to the next address any dynamic tag names or its
    segment's end (``DT_STRSZ`` for the string table)."""

    def __init__(self, layout: Any, size: int, dyn: tuple[int, int]) -> None:
        self.layout, self.size, self.dyn = layout, size, dyn
        self.keep = [(0, layout.header_bytes_needed), dyn]
        self.keep += [(sg.offset, min(sg.end, size)) for sg in layout.segments
                      if sg.type in _KEEP_PT and sg.filesz > 0 and sg.offset < size]
        self.holds: list[tuple[int, int, bytearray]] = [(0, min(dyn[0], _RETAIN), bytearray())]
        home = next((sg for sg in layout.segments if sg.type == 1
                     and sg.offset <= dyn[0] < sg.end), None)
        if home is not None and home.offset >= _RETAIN and dyn[0] - home.offset <= _RETAIN:
            self.holds.append((home.offset, dyn[0], bytearray()))
        self.dynamic = bytearray()
        self.pending = True  # the tables are not known yet

    @classmethod
    def plan(cls, head: bytes, size: int) -> _Skeleton | None:
        """A skeleton for the object whose first bytes are ``head``; None when its
        headers are not all in ``head`` or it has no sound ``PT_DYNAMIC`` (kept whole)."""
        try:
            layout = parse_layout(head, size)
        except ElfError:
            return None
        where = dynamic_range(layout)  # where the loader reads it (p_vaddr's bytes)
        if where is None or where[1] <= where[0] or where[1] > size or (
                where[1] - where[0] > (1 << 20)):
            return None
        return cls(layout, size, where)

    def write(self, fd: int, head: bytes, src: Any, what: str) -> int | None:
        """Write the skeleton into ``fd`` (sized as the object, holes elsewhere) from
        ``head`` and the rest of the member in ``src``; the bytes written, or None when a
        table lies where nothing was held (the object is then wanted whole)."""
        os.ftruncate(fd, self.size)
        self.written = 0
        pos = 0
        data = head
        while True:
            if not self._feed(fd, pos, data):
                return None
            pos += len(data)
            if pos >= self.size:
                return self.written
            nxt, until = self._next(pos)
            if nxt >= self.size:
                return self.written
            if nxt > pos:
                src.seek(nxt)  # forward: the layer's bytes are passed, not copied
                pos = nxt
            data = src.read(min(_COPY, until - pos))
            if not data:
                raise ImageError(f"{what} is truncated in the layer")

    def _next(self, pos: int) -> tuple[int, int]:
        """The first offset from ``pos`` that is needed, and where that need ends."""
        spans = list(self.keep)
        if self.pending:
            spans += [(lo, hi) for lo, hi, _b in self.holds] + [self.dyn]
        nxt, until = self.size, self.size
        for lo, hi in spans:
            if hi > pos:
                start = max(lo, pos)
                if start < nxt:
                    nxt, until = start, hi
                elif start == nxt:
                    until = max(until, hi)
        return nxt, min(until, self.size)

    def _feed(self, fd: int, pos: int, data: bytes) -> bool:
        if self.pending and pos < self.dyn[1] < pos + len(data):  # split at the table news
            cut = self.dyn[1] - pos
            return self._feed(fd, pos, data[:cut]) and self._feed(fd, self.dyn[1], data[cut:])
        end = pos + len(data)
        if self.pending:
            for start, stop, buf in self.holds:
                lo, hi = max(pos, start), min(end, stop)
                if lo < hi and lo == start + len(buf):
                    buf += data[lo - pos: hi - pos]
            lo, hi = max(pos, self.dyn[0]), min(end, self.dyn[1])
            if lo < hi:
                self.dynamic += data[lo - pos: hi - pos]
        for lo, hi in self.keep:
            lo, hi = max(lo, pos), min(hi, end)
            if lo < hi:
                self.written += os.pwrite(fd, data[lo - pos: hi - pos], lo)
        if self.pending and end >= self.dyn[1]:
            self.pending = False
            return self._tables(fd, end)
        return True

    def _tables(self, fd: int, here: int) -> bool:
        """The dynamic section is read: keep the tables it names (those already passed
        from what was held; None of them may lie where nothing was)."""
        from moonpin.readers.elf.dynamic import decode

        layout = self.layout
        dyn = decode(layout, bytes(self.dynamic), self.dyn[0])
        tags = dyn.info() if dyn is not None else {}  # the loader's: a tag's last entry
        bounds = {self.dyn[0], self.size}
        for sg in layout.segments:
            if sg.type == 1:
                bounds |= {sg.offset, sg.end}
        where: dict[int, tuple[int, int]] = {}
        for tag in _ADDR_TAGS:
            if tag in tags:
                got = vaddr_to_offset(layout, tags[tag])
                if got is not None:
                    bounds.add(got[0])
                    if tag in _TABLE_TAGS:
                        where[tag] = got
        ordered = sorted(bounds)
        holds, self.holds = self.holds, []
        for tag, (off, seg_end) in where.items():
            if tag == _DT_STRTAB and _DT_STRSZ in tags:
                end = off + tags[_DT_STRSZ]
            else:
                end = next((b for b in ordered if b > off), self.size)
            end = min(end, seg_end, self.size)
            if end <= off:
                continue
            if off >= here:
                self.keep.append((off, end))
                continue
            hold = next((b for lo, _hi, b in holds if lo <= off and end <= lo + len(b)), None)
            if hold is None:
                return False
            lo = next(lo for lo, _hi, b in holds if b is hold)
            self.written += os.pwrite(fd, hold[off - lo:end - lo], off)
        return True


def _elf_needs(path: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """DT_NEEDED and RUNPATH/RPATH of the ELF object at ``path`` (a file this unpack wrote),
    read through a map of it; nothing for a file that is not a valid ELF object."""
    import mmap

    from moonpin.readers.elf import analysis as elf

    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 64:
            return (), ()
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            try:
                facts = elf.analyze(m, size, ())  # type: ignore[arg-type]
            except elf.ElfError:
                return (), ()
            return tuple(facts.needed), tuple(facts.runpath)


class _BoundedTarInfo(tarfile.TarInfo):
    """Refuses extended headers (pax, GNU long names) over 1 MiB before tarfile reads
    them whole into memory."""

    def _proc_member(self, tarfile: tarfile.TarFile) -> tarfile.TarInfo:  # type: ignore[override]
        if self.type in (b"L", b"K", b"x", b"g", b"X") and self.size > (1 << 20):
            raise ImageError(f"member {self.name!r}: an extended header of {self.size} bytes "
                             "(a tar bomb?)")
        if self.type == b"S":
            raise ImageError(f"member {self.name!r}: GNU sparse members are not supported")
        return super()._proc_member(tarfile)  # type: ignore[misc,no-any-return]


def _clear(dest: str) -> None:
    for name in os.listdir(dest):
        p = os.path.join(dest, name)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            try:
                os.unlink(p)
            except OSError:
                pass


def unpack(image: Image, dest: str, want: Callable[[str], bool] | None = None, *,
           max_bytes: int = DEFAULT_MAX_BYTES,
           progress: Callable[[str], None] | None = None,
           reads: Iterable[Mapping[str, Iterable[str]]] = ()) -> None:
    """Write into ``dest`` (an empty folder the caller made) the files of the image's
    final filesystem that ``want`` (absolute image path -> keep; None: :func:`check_wants`
    with what the loader rules declare they read, ``reads``, each rule's ``IMAGE_READS``,
    plus the libraries the kept ELF objects need) selects, as if ``dest`` were ``/``.

    Symlinks are recreated relative and resolved inside ``dest``; hard links become hard
    links inside ``dest``; regular files keep their permission bits (never setuid) and, when
    unpacked by root, their owner and group; no
    device file or FIFO is created. ``max_bytes`` caps the bytes kept (default 32 GiB,
    ``MOONPIN_IMAGE_MAX_KEPT``); ``MOONPIN_IMAGE_MAX_READ``, ``_MAX_MEMBERS`` and
    ``_MAX_RATIO`` cap the tar bytes read, the members and the expansion of a layer.
    On :class:`ImageError` ``dest`` is emptied again.
    """
    if not os.path.isdir(dest):
        raise ImageError(f"{dest}: the unpack folder does not exist")
    if max_bytes == DEFAULT_MAX_BYTES:
        max_bytes = _env_int("MOONPIN_IMAGE_MAX_KEPT", max_bytes)
    u = _Unpacker(image, dest, want, max_bytes, progress, Reads(*reads))
    try:
        u.run()
    except ImageError:
        _clear(dest)
        raise
    except OSError as e:
        _clear(dest)
        raise ImageError(f"unpacking {image.describe()} into {dest} failed: {e}") from e
    except BaseException:
        _clear(dest)
        raise

