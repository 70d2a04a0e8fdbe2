"""The image's facts as the check reads them from the file system, without importing
anything of it: the installed torch, SGLang and extension distributions (their METADATA, and
the RECORD of those a loader rule asks for), torch's version and CUDA major
(``torch/version.py``, else its requirements), the SGLang release's process-group requirement
(from its sources, :mod:`moonpin.preflight.installed.sources`, or the knowledge base), and
where ``import <package>.<module>`` would find a module. It names no project: which
distributions are read is handed in from the loader rules
(:data:`moonpin.preflight.extensions.seam.DISTRIBUTIONS`).

Only ``os`` at import: this is on the worker-start path (see :mod:`moonpin.preflight.run`).
"""

from __future__ import annotations

import os
from importlib import machinery

from moonpin.kb.cache import facts_memo
from moonpin.kb.schema import READABLE_SCHEMAS
from moonpin.preflight.access.confined import NOWHERE, Confined
from moonpin.preflight.access.kinds import kind_of
from moonpin.preflight.pyimport.importer import (
    Found,
    Importer,
    Sources,
    found_in,
    package_sources,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence
    from typing import Any

    from moonpin.preflight.env.context import Context

__all__ = [
    "CAP_BUILD",
    "CUDART",
    "Dist",
    "KBView",
    "Requirement",
    "Torch",
    "analyze_sglang",
    "by_name",
    "canon",
    "file_name",
    "file_suffix",
    "find_package",
    "kind_of",
    "leading_int",
    "linked_cudart",
    "list_folder",
    "locate",
    "module_file",
    "not_files",
    "package_dirs",
    "read_bytes",
    "read_dists",
    "record_hashes",
    "record_path",
    "record_paths",
    "sglang_sources",
    "shipped_like",
    "torch_info",
    "torch_label",
    "torch_version_py",
    "unlistable",
    "vendor_reason",
    "which",
]


CUDART = "libcudart.so."


class Dist:
    def __init__(self, name: str, version: str, root: str, requires: tuple[str, ...],
                 files: tuple[str, ...] | None,
                 hashes: dict[str, tuple[str, int]] | None = None, meta: str = "") -> None:
        self.name = name  # canonical
        self.version = version
        self.root = root  # the site-packages folder it is installed in
        self.requires = requires
        self.files = files  # RECORD entries; read for the distributions asked for only
        #: RECORD's ``sha256=`` digest (urlsafe base64, as written) and size per path
        self.hashes = hashes or {}
        self.meta = meta  # its .dist-info / .egg-info folder (its RECORD is read from there)


def record_path(line: str) -> str:
    """The path of a RECORD line, its first CSV field as :mod:`csv` reads it (pip writes RECORD
    with ``csv.writer``): a path holding a comma, a quote or a line break is quoted, its quotes
    doubled (``"a,b.py"``, ``"q""uote.py"``). ``csv`` itself is not imported: it loads ``re``
    at worker start."""
    if not line.startswith('"'):
        return line.split(",", 1)[0]
    out = []
    at = 1
    while True:
        end = line.find('"', at)
        if end < 0:  # no closing quote: csv (not strict) takes the rest
            out.append(line[at:])
            return "".join(out)
        out.append(line[at:end])
        if line.startswith('"', end + 1):  # a doubled quote is one quote
            out.append('"')
            at = end + 2
            continue
        # what follows the closing quote up to the comma is the field's too, as csv reads it
        out.append(line[end + 1:].split(",", 1)[0])
        return "".join(out)


def record_hashes(lines: list[str]) -> dict[str, tuple[str, int]]:
    """``path -> (sha256 digest as RECORD writes it, size)`` of RECORD lines (PEP 376 /
    the wheel spec: CSV ``path,sha256=<urlsafe b64, no padding>,size``; a path with a comma
    is quoted). Lines without both are left out, and so is a size no file has (past 19
    ASCII digits: a 5,000-digit one would stop ``int()``; ``²`` is a digit to ``isdigit``)."""
    out: dict[str, tuple[str, int]] = {}
    for line in lines:
        parts = line.rsplit(",", 2)
        if (len(parts) != 3 or not parts[1].startswith("sha256=") or not parts[2].isascii()
                or not parts[2].isdigit() or len(parts[2]) > 19):
            continue
        out[record_path(line)] = (parts[1][len("sha256="):], int(parts[2]))
    return out


def which(name: str) -> str | None:
    import shutil  # here: off the common path

    return shutil.which(name)


def canon(name: str) -> str:
    """PEP 503: runs of ``-``, ``_`` and ``.`` become one ``-``; lower case."""
    out = name.replace("_", "-").replace(".", "-").lower()
    while "--" in out:
        out = out.replace("--", "-")
    return out


def _headers(text: str) -> dict[str, list[str]]:
    """Core-metadata headers (RFC 822 style, as ``importlib.metadata`` reads them, without
    loading the ``email`` package)."""
    out: dict[str, list[str]] = {}
    last: str | None = None
    # the headers end at the first empty line: the description after it (~30 KB for torch
    # and SGLang) is not split into lines
    ends = [i for i in (text.find("\n\n"), text.find("\r\n\r\n"), text.find("\r\r")) if i >= 0]
    for line in (text[:min(ends) + 1] if ends else text).splitlines():
        if not line:
            break
        if line[0] in " \t" and last is not None:
            out[last][-1] += "\n" + line.strip()
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        last = key.strip().lower()
        out.setdefault(last, []).append(value.strip())
    return out


def _wanted(name: str, read: tuple[str, ...]) -> bool:
    return name in ("torch", "sglang") or name.startswith(read)


#: Size caps per kind of file the check reads (a real extension build is ~30 MB).
_CAP_SMALL = 16 << 20  # METADATA, a loader, torch/version.py
_CAP_RECORD = 64 << 20
CAP_BUILD = 512 << 20
_CAP_KB = 256 << 20


def read_bytes(path: str, cap: int = _CAP_SMALL, what: str = "file",
               within: Confined = NOWHERE) -> bytes:
    """A regular file's bytes (:func:`moonpin.kb.files.read_regular`: no FIFO blocks, no device is
    read, nothing past ``cap``; none its links take out of the image root ``within``); raises
    OSError (``ReadRefused``) naming what it is."""
    return within.read(path, cap=cap, what=what)


def _read_text(path: str, cap: int = _CAP_SMALL, what: str = "file",
               within: Confined = NOWHERE) -> str:
    return read_bytes(path, cap, what, within).decode("utf-8", "replace")


def record_paths(folder: str, cap: int = _CAP_RECORD, whole: bool = False,
                 within: Confined = NOWHERE) -> Iterator[str]:
    """The path (first field) of each line of the file list of the distribution whose
    metadata folder is ``folder``: its ``RECORD`` (PEP 376), or ``installed-files.txt`` for
    an ``.egg-info`` folder; one at a time (a hostile list of 64 MiB of newlines is not made
    into millions of strings at once). The one reader of these lists: the installed
    distributions, what an unimportable SGLang installed, which distribution ships a
    package, whether torch ships a library. Raises OSError when it cannot be read (or is
    larger than ``cap`` bytes). ``whole``: each whole line instead (what
    :func:`record_hashes` reads the digests from)."""
    name = "installed-files.txt" if folder.endswith(".egg-info") else "RECORD"
    text = _read_text(os.path.join(folder, name), cap, "distribution RECORD", within)
    return _lines(text, whole)


def _lines(text: str, whole: bool) -> Iterator[str]:
    start, end = 0, len(text)
    while start < end:
        stop = text.find("\n", start)
        if stop < 0:
            stop = end
        line = text[start:stop]
        line = line.rstrip("\r")
        yield line if whole else record_path(line)
        start = stop + 1


def by_name(paths: Sequence[str], within: Confined = NOWHERE, read: Sequence[str] = (),
            own: str | None = None) -> tuple[dict[str, Dist], list[Dist]]:
    """The installed distributions by name (the first on the path wins, as the importer takes
    it), and every one whose name starts with ``own`` (the project that says its own lines),
    with its RECORD (:func:`read_dists`). ``read``: the name prefixes of the extensions'
    distributions read besides torch and sglang (the seam's ``DISTRIBUTIONS``)."""
    dists: dict[str, Dist] = {}
    owned: list[Dist] = []
    prefixes = (own,) if own else ()
    for d in read_dists(paths, within, (*read, *prefixes), prefixes):
        dists.setdefault(d.name, d)
        if prefixes and d.name.startswith(prefixes):
            owned.append(d)
    return dists, owned


def read_dists(paths: Sequence[str], within: Confined = NOWHERE, read: Sequence[str] = (),
               files: Sequence[str] = ()) -> list[Dist]:
    """The installed torch and sglang distributions and those whose canonical name starts
    with one of ``read``, in path order, as ``importlib.metadata.distributions(path=)`` finds
    them (``*.dist-info/METADATA``, ``*.egg-info/PKG-INFO``); the file list of those whose
    name starts with one of ``files``. A ``.dist-info`` folder is named ``{name}-{version}``:
    only those of the wanted names are opened (an image holds ~100 others)."""
    read, listed = tuple(read), tuple(files)
    out = []
    for root in paths:
        try:
            entries = sorted(os.scandir(root), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            if e.name.endswith(".dist-info"):
                if not _wanted(canon(e.name[:-len(".dist-info")].split("-", 1)[0]), read):
                    continue
                meta = "METADATA"
            elif e.name.endswith(".egg-info"):
                meta = "PKG-INFO"
            else:
                continue
            folder = e.path
            try:
                head = _headers(_read_text(os.path.join(folder, meta), what="METADATA",
                                           within=within))
            except OSError:
                continue
            name = (head.get("name") or [""])[0]
            if not name:
                continue
            recorded: tuple[str, ...] | None = None
            hashes: dict[str, tuple[str, int]] = {}
            if listed and canon(name).startswith(listed):  # the only file lists used
                try:
                    lines = [line for line in record_paths(folder, whole=True, within=within)
                             if line]
                    recorded = tuple(p for p in map(record_path, lines) if p)
                    hashes = record_hashes(lines)
                except OSError:
                    pass
            out.append(Dist(canon(name), (head.get("version") or [""])[0], root,
                             tuple(head.get("requires-dist") or ()), recorded, hashes, folder))
    return out


def locate(ctx: Context, name: str) -> Found | None:
    """Where ``import name`` finds the top-level package in the environment of ``ctx``
    (:func:`moonpin.preflight.pyimport.importer.find`, with its shared model)."""
    return found_in(ctx.importer, name)


def find_package(ctx: Context, name: str) -> str | None:
    """The folder of package ``name`` (None: not found, or a module file shadows it)."""
    found = locate(ctx, name)
    return found.folder if found is not None and not found.module else None


def sglang_sources(ctx: Context, cache: bool = True) -> Sources | None:
    """The source files ``import sglang.<x>`` loads (None: sglang is no package here).

    ``cache``: from the stamps file when nothing the walk read changed
    (:func:`moonpin.preflight.installed.stamps.memoised`; not under an image's root, whose paths
    resolve through the image's own links)."""
    if not cache or ctx.root is not None:
        return package_sources(ctx.importer, "sglang")
    from moonpin.preflight.installed import stamps

    def build() -> tuple[Importer | None, Sources | None]:
        return ctx.importer, package_sources(ctx.importer, "sglang")

    return stamps.memoised(stamps.key("sglang", list(ctx.paths), ctx.sites, ctx.ext_suffixes),
                           build)


class Torch:
    """The torch the importer finds. ``version`` is what ``torch.__version__`` reads
    (``torch/version.py``), the label mooncake's loader maps onto a build; ``metadata`` is
    the version its distribution metadata says (pip's view; None without one)."""

    def __init__(self, version: str, cuda: int | None, cuda_evidence: str,
                 metadata: str | None = None) -> None:
        self.version = version
        self.cuda = cuda
        self.cuda_evidence = cuda_evidence
        self.metadata = metadata if metadata is not None else version


def torch_version_py(pkg: str, within: Confined = NOWHERE) -> dict[str, Any] | None:
    """The constants of ``torch/version.py`` (``__version__``, ``cuda``, ``hip``): what
    ``torch.version`` reports, read with ``ast`` (once per version of the file: the
    file-facts memo); None when missing or unreadable."""
    path = os.path.join(pkg, "version.py")
    try:
        got = facts_memo().get("torch-version", path, lambda: _parse_version_py(path, within),
                               within=within.root)
        if got is not None and not isinstance(got, dict):  # a damaged memo entry
            got = _parse_version_py(path, within)
    except OSError:
        return None
    return got


def _parse_version_py(path: str, within: Confined) -> dict[str, Any] | None:
    import ast

    try:
        tree = ast.parse(read_bytes(path, what="torch/version.py", within=within))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # whether `import torch` then fails is the import chain's to say
    out: dict[str, Any] = {}
    for node in tree.body:
        target = (node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1
                  else node.target if isinstance(node, ast.AnnAssign) else None)
        value = getattr(node, "value", None)
        if (isinstance(target, ast.Name) and isinstance(value, ast.Constant)
                and isinstance(value.value, (str, int, float, bool, type(None)))):
            out[target.id] = value.value
    return out


def leading_int(text: str) -> int | None:
    """The number ``text`` starts with (``"13.0"`` -> 13), None when it starts otherwise."""
    digits = len(text) - len(text.lstrip("0123456789"))
    return int(text[:digits]) if 0 < digits <= 6 else None


def torch_label(consts: dict[str, Any] | None) -> str | None:
    """``__version__`` of ``torch/version.py``'s constants: what ``torch.__version__`` is
    (``torch/torch_version.py`` wraps it, unchanged), or None when it is not a string."""
    label = consts.get("__version__") if consts else None
    if isinstance(label, str) and label.strip() and len(label) <= 256 and label.isprintable():
        return label.strip()
    return None


def torch_info(dist: Dist | None, markers: Mapping[str, str], pkg: str | None = None,
               label: str | None = None, within: Confined = NOWHERE) -> Torch | None:
    """``pkg``: the torch folder the importer finds (None: the distribution's own). The
    version is ``label`` (``torch.__version__`` as the import sets it, when it was followed),
    else the label ``torch/version.py`` holds; the distribution's version only when neither
    says; ``markers``: the target's marker environment, for torch's requirements. None:
    nothing says."""
    folder = pkg or (os.path.join(dist.root, "torch") if dist is not None else None)
    consts = torch_version_py(folder, within) if folder is not None else None
    meta = dist.version if dist is not None else None
    version = label or torch_label(consts) or meta
    if version is None:
        return None
    linked = linked_cudart(folder, within) if folder is not None else None
    if linked is not None:  # what ld.so loads decides, whatever version.py says
        runtime, lib = linked
        said = consts.get("cuda") if consts is not None else None
        head = said.partition(".")[0] if isinstance(said, str) else ""
        other = ("" if consts is None or "cuda" not in consts or head == str(runtime)
                 else f"; torch/version.py says cuda = {said!r}")
        return Torch(version, runtime, f"torch/lib/{lib} links {CUDART}{runtime}{other}", meta)
    if consts is not None and "cuda" in consts:
        cuda = consts["cuda"]
        head = cuda.partition(".")[0] if isinstance(cuda, str) else ""
        if head.isdigit() and head.isascii() and len(head) <= 6:
            return Torch(version, int(head), f"torch/version.py: cuda = {cuda!r}", meta)
        if cuda is None:
            hip = consts.get("hip")
            what = f"a ROCm build, hip = {hip!r}" if hip else "a CPU build"
            return Torch(version, None, f"torch/version.py: cuda = None ({what})", meta)
    if dist is None:
        return Torch(version, None, "torch/version.py names no CUDA", meta)
    # No readable torch/version.py: the wheel's requirements decide (needs ``packaging``).
    from moonpin.readers.cuda import cuda_major

    try:
        major, line = cuda_major(dist.requires, markers)
    except Exception:  # torch's own metadata, unreadable markers: no CUDA facts from it
        major, line = None, ""
    if major is not None:
        return Torch(version, major, f"Requires-Dist {line!r}", meta)
    local = version.partition("+")[2]
    if (local.startswith("cu") and 3 < len(local) <= 8 and local[2:].isdigit()
            and local.isascii()):
        return Torch(version, int(local[2:-1]), f"local label +{local}", meta)
    return Torch(version, None, "no CUDA runtime requirement nor +cuXYZ label", meta)


def linked_cudart(folder: str, within: Confined = NOWHERE) -> tuple[int, str] | None:
    """The CUDA runtime torch's own CUDA libraries link (``DT_NEEDED libcudart.so.N`` of
    ``torch/lib/libc10_cuda.so``, else ``libtorch_cuda.so``): (N, the library), or None when
    neither is there or names one (a CPU build; a runtime linked statically)."""
    from moonpin.preflight.loader import ldso

    for lib in ("libc10_cuda.so", "libtorch_cuda.so"):
        path = os.path.join(folder, "lib", lib)
        if not os.path.isfile(path):
            continue
        try:
            needed = ldso.read_dynamic(path, within=within)[0]
        except OSError:
            continue
        for name in needed:
            if name.startswith(CUDART):
                major = leading_int(name[len(CUDART):])
                if major is not None:
                    return major, lib
    return None


def _index_local(label: str) -> bool:
    """A local label the package index's own torch builds carry: cuXYZ, cpu, rocmX.Y, xpu."""
    if label in ("cpu", "xpu"):
        return True
    if label.startswith("cu"):
        return label[2:].isdigit() and label.isascii()
    if label.startswith("rocm"):
        return all(c in "0123456789." for c in label[4:])
    return False


def _plain_release(version: str) -> bool:
    """``2.13.0`` or ``2.9.1+cu128``: an upstream release; no need to load ``packaging``."""
    public, plus, local = version.partition("+")
    if plus and not _index_local(local):
        return False
    return public.isascii() and all(p.isdigit() for p in public.split("."))


def vendor_reason(version: str) -> str | None:
    if _plain_release(version):
        return None
    from packaging.version import Version

    try:
        v = Version(version)
    except ValueError:  # InvalidVersion, or a number past int()'s 4,300 digits
        return f"torch {version} is not a PEP 440 version"
    why = []
    if v.is_prerelease or v.is_devrelease:
        why.append("a pre-release")
    if v.local and not _index_local(v.local):
        why.append(f"a vendor build (+{v.local})")
    return f"torch {version} is {' and '.join(why)}" if why else None


class Requirement:
    def __init__(self, module: str | None, names: tuple[str, ...], backends: tuple[str, ...],
                 evidence: tuple[str, ...] = (), optional_names: tuple[str, ...] = (),
                 alternatives: tuple[str, ...] = ()) -> None:
        self.module = module  # None: no process-group module imported / unknown
        self.names = names
        self.backends = backends
        self.evidence = evidence
        self.optional_names = optional_names
        self.alternatives = alternatives  # modules SGLang falls back to on ImportError


def analyze_sglang(pkg: str | Sources, cache: bool = True) -> Requirement:
    """The process-group requirement of SGLang's sources (the files ``import sglang.<x>``
    loads, or a package folder's). Raises OSError when a source cannot be read."""
    from moonpin.preflight.installed import sources

    d = sources.scan(pkg, use_cache=cache).derived
    return Requirement(d["module"], tuple(d["names"]), tuple(d["backends"]),
                        tuple(d["evidence"]), tuple(d["optional_names"]),
                        tuple(d.get("alternatives") or ()))


class KBView:
    """The knowledge base as the check needs it: each SGLang release's requirement from the
    small resolved index when it is fresh; the whole file only on a failure path."""

    def __init__(self, path: str, version: str | None = None) -> None:
        """``version``: the installed SGLang release, the one entry of the resolved index a
        worker start needs (:func:`moonpin.resolver.tables.per_release.load_requirement`); another
        release asked for later loads the whole index."""
        self.path = path
        self._doc: dict[str, Any] | None = None
        self._requirements: dict[str, dict[str, Any]] | None = None
        self._only: str | None = None  # the one release _requirements holds (None: all)
        from moonpin.resolver.tables import per_release

        if version is not None:
            ok, entry = per_release.load_requirement(path, version)
            if ok:
                self._requirements = {version: entry} if entry is not None else {}
                self._only = version
        else:
            self._requirements = per_release.load_requirements(path)
        if self._requirements is not None:
            self.ok, self.msg = True, f"knowledge base {path}"
        else:
            self._doc, self.msg = _load_kb(path)
            self.ok = self._doc is not None

    def doc(self) -> dict[str, Any] | None:
        if self._doc is None and self.ok:
            self._doc, _ = _load_kb(self.path)
        return self._doc

    def feature_imports(self, version: str | None, feature: str) -> list[dict[str, Any]] | None:
        """The release's unconditional mooncake imports for ``feature`` (KB import records),
        from the resolved table when it holds them, else from the whole KB; None when the
        KB does not know the release."""
        entry = self._entry(version or "")
        if isinstance(entry, dict) and isinstance(entry.get("features"), dict):
            return list(entry["features"].get(feature) or ())
        rec = next((r for r in (self.doc() or {}).get("sglang") or ()
                    if isinstance(r, dict) and r.get("version") == version), None)
        if rec is None:
            return None
        return [i for i in rec.get("imports") or ()
                if i.get("feature") == feature and not i.get("optional")]

    def _entry(self, version: str) -> dict[str, Any] | None:
        """``version``'s entry of the resolved index (None: not there, or no index)."""
        if not version:
            return None
        if self._only is not None and version != self._only:
            from moonpin.resolver.tables.per_release import load_requirements

            self._requirements, self._only = load_requirements(self.path) or {}, None
        return self._requirements.get(version) if self._requirements else None

    def requirement(self, version: str | None) -> Requirement | None:
        if not self.ok or version is None:
            return None
        if self._requirements is not None:
            pg = self._entry(version)
        else:
            doc = self._doc or {}
            pg = next((rec.get("pg") or {} for rec in doc.get("sglang") or ()
                       if isinstance(rec, dict) and rec.get("version") == version), None)
        if pg is None:
            return None
        return Requirement(pg.get("module"), tuple(pg.get("names") or ()),
                            tuple(pg.get("backends") or ()),
                            optional_names=tuple(pg.get("optional_names") or ()),
                            alternatives=tuple(pg.get("alternatives") or ()))


def _load_kb(path: str) -> tuple[dict[str, Any] | None, str]:
    from moonpin.kb.files import loads_json

    try:
        doc = loads_json(read_bytes(path, _CAP_KB, "knowledge base"))
    except OSError as e:
        if e.errno == 2:  # ENOENT
            return None, f"knowledge base not found: {path}"
        return None, f"cannot read knowledge base {path}: {e.strerror or e}"
    except ValueError as e:
        return None, f"knowledge base {path} is not valid JSON: {e}"
    if not isinstance(doc, dict) or not isinstance(doc.get("sglang"), list):
        return None, f"knowledge base {path} is corrupt (no 'sglang' list)"
    version = doc.get("schema_version")
    if not isinstance(version, int) or version not in READABLE_SCHEMAS:
        return None, (f"knowledge base {path} has schema_version "
                      f"{doc.get('schema_version')!r}; this moonpin reads "
                      f"{', '.join(str(v) for v in sorted(READABLE_SCHEMAS))}")
    bad = _misshapen(doc, _KB_SHAPE, "")
    if bad is not None:
        return None, f"knowledge base {path} is corrupt ({bad})"
    return doc, f"knowledge base {path}"


def _launch_or_none(value: Any) -> bool:
    from moonpin.resolver.tables.per_release import valid_launch

    return value is None or valid_launch(value)


_STRS = [str]
_NONE = type(None)
#: The shape of what the check reads from the KB file (``moonpin.kb.models``, as JSON): a type or
#: tuple of types is a leaf, ``{key: shape}`` a mapping whose present keys have those
#: shapes, ``[shape]`` a list of them, a function a test of the value. A KB that differs
#: anywhere here is refused whole ("corrupt"), as pydantic would refuse it, rather than
#: being half-believed by code that takes it for its models' shape.
_KB_SHAPE: dict[str, Any] = {
    "sglang": [{
        "version": str,
        "pg": {"module": (str, _NONE), "names": _STRS, "backends": _STRS,
               "optional_names": _STRS, "alternatives": _STRS},
        "imports": [{"module": str, "names": _STRS, "feature": str, "optional": bool,
                     "member": str, "line": int}],
        "launch": _launch_or_none,
    }],
    "mooncake": [{"dist": str, "version": str, "wheels": [{"builds": [{"names": _STRS}]}]}],
}


def _misshapen(value: Any, shape: Any, where: str) -> str | None:
    """Where ``value`` first differs from ``shape`` (see :data:`_KB_SHAPE`), said as the
    path to the node and what it is; None when it fits."""
    if isinstance(shape, dict):
        if type(value) is not dict:
            return f"{where or 'the document'} is {_kind(value)}, not a mapping"
        for key, sub in shape.items():
            if key in value:
                bad = _misshapen(value[key], sub, f"{where}.{key}" if where else key)
                if bad is not None:
                    return bad
        return None
    if isinstance(shape, list):
        if type(value) is not list:
            return f"{where} is {_kind(value)}, not a list"
        for i, item in enumerate(value):
            bad = _misshapen(item, shape[0], f"{where}[{i}]")
            if bad is not None:
                return bad
        return None
    if isinstance(shape, (type, tuple)):
        kinds = shape if isinstance(shape, tuple) else (shape,)
        if type(value) in kinds:  # exact: a bool is not an int here, as in JSON
            return None
        return (f"{where} is {_kind(value)}, not "
                + " or ".join("null" if k is _NONE else k.__name__ for k in kinds))
    return None if shape(value) else f"{where} is not a record of the expected shape"


def _kind(value: Any) -> str:
    name = type(value).__name__
    return "null" if value is None else f"a{'n' * (name[0] in 'aeiou')} {name} ({repr(value)[:40]})"


def file_name(path: str) -> str:
    return os.path.basename(path)


def file_suffix(path: str) -> str:
    """What ``PurePath.suffix`` says: the last ``.ext`` of the file name."""
    return os.path.splitext(os.path.basename(path))[1]


def _shared(ctx: Context, top: str, pkg: str) -> Importer | None:
    """The shared importer when ``pkg`` is the folder it finds package ``top`` in."""
    found = found_in(ctx.importer, top)
    return ctx.importer if found is not None and found.folder == pkg else None


def package_dirs(ctx: Context, top: str, pkg: str) -> tuple[str, ...]:
    """The folders ``import <top>.<x>`` searches: the package's ``__path__`` once its
    ``__init__`` ran (``extend_path`` adds every ``<top>/`` folder of ``sys.path``), else
    ``pkg`` alone."""
    imp = _shared(ctx, top, pkg)
    got = imp.package_path(top) if imp is not None else None
    return tuple(d for d in got if d not in imp.hooks) if got and imp is not None else (pkg,)


def module_file(ctx: Context, top: str, pkg: str, short: str) -> str | None:
    """What ``import <top>.<short>`` would load, in FileFinder's order (``__init__`` then
    module files, extensions before ``.py`` before ``.pyc``) over the package's ``__path__``,
    then the editable finders; None: nothing (or only a namespace folder). ``pkg``: the
    folder the importer finds ``top`` in."""
    imp = _shared(ctx, top, pkg)
    if imp is not None:
        spec = imp.find(f"{top}.{short}")
    else:
        spec = Importer([], [], ctx.root, ctx.ext_suffixes).path_find(f"{top}.{short}", [pkg])
    return spec.origin if spec is not None else None


def shipped_like(ctx: Context, top: str, pkg: str, head: str) -> list[str]:
    """The module files of package ``top``'s folders whose stem starts with ``head`` (but is
    not it): the builds shipped for other versions."""
    out = []
    for folder in package_dirs(ctx, top, pkg):
        for name in sorted(list_folder(folder)):
            stem = name.split(".", 1)[0]
            if stem.startswith(head) and stem != head and file_suffix(name) in (
                    ".so", ".py", ".pyd") and os.path.isfile(os.path.join(folder, name)) \
                    and name not in out:
                out.append(name)
    return out


def list_folder(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def not_files(ctx: Context, top: str, pkg: str, short: str) -> list[str]:
    """What ``import <top>.<short>`` would see in the package's folders but skip, since
    only regular files are modules (FileFinder): each named with what it is."""
    out = []
    for folder in package_dirs(ctx, top, pkg):
        for suffix in (*ctx.ext_suffixes, *machinery.SOURCE_SUFFIXES):
            cand = os.path.join(folder, f"{short}{suffix}")
            if os.path.lexists(cand) and not os.path.isfile(cand):
                out.append(f"{short}{suffix} is {kind_of(cand)}, not a file")
    return out


def unlistable(folder: str) -> str | None:
    """Why Python's importer cannot list ``folder`` as this user (it then finds no module
    in it), or None."""
    try:
        os.listdir(folder)
    except NotADirectoryError:  # a folder in a zip archive on sys.path is listed by zipimport
        from moonpin.preflight.access import zipfs

        if zipfs.archive_of(folder) is None:
            return f"{folder} cannot be listed (Not a directory)"
    except PermissionError:
        try:
            mode = f"mode {oct(os.stat(folder).st_mode & 0o7777)}, "
        except OSError:
            mode = ""
        return (f"{folder} cannot be listed by this user (uid {os.getuid()}, {mode}"
                "permission denied)")
    except OSError as e:
        return f"{folder} cannot be listed ({e.strerror})"
    return None
