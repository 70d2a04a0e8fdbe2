"""``moonpin check``: is this image's mooncake usable by this SGLang + torch? (light mode)

Run at worker start, before any model I/O. Everything is read from the file system:
installed distributions (``importlib.metadata``), the installed SGLang's own sources (with
the scrapers' ``ast`` analyzer), the mooncake loaders (``mooncake/pg.py``/``ep.py``) and the
builds they would import, found the way the import system would find them (any suffix in
``importlib.machinery.all_suffixes()``: a real extension module and a ``.py`` stand-in are
read alike). Nothing of torch, mooncake or SGLang is imported, and neither httpx nor
networkx nor the resolver's graph is loaded on this path.

Exit codes: 0 usable (or mooncake not requested), 1 not usable, 2 could not check.

The deep probe (on by default for elastic EP; ``--no-deep`` turns it off) imports torch
and the process-group module in a child interpreter with a timeout, checks each required
name on the imported module, and reads ``torch.distributed.Backend.backend_capability``
for ``mooncake`` and ``mooncake-cpu``. A crash (signal) or a hang is a finding; a host
without the NVIDIA driver (``libcuda.so.1`` missing) "could not import here", which is not
an incompatibility: the light checks decide.

Test hook: ``MOONPIN_CHECK_CUDA_FALLBACK`` replaces ``/usr/local/cuda``, the CUDA root
torch's ``cpp_extension`` falls back to when neither ``CUDA_HOME``/``CUDA_PATH`` nor an
``nvcc`` on ``PATH`` names one (so a test can model a host without a toolkit).
"""

from __future__ import annotations

import os
import sys
from importlib import machinery

from kb.cache import facts_memo
from kb.files import read_regular

# A worker runs this at every start, so its modules load nothing past ``os``: ``re``,
# ``json``, ``ast``, ``pathlib``, ``typing`` and ``dataclasses`` each pull in ``re`` and
# ``enum`` (~8 ms, as much as the interpreter's own start). What needs them is imported
# where it is used, and what they would compute from a file is kept in the file-facts memo
# (:func:`kb.cache.facts_memo`), validated by the file's size and mtime.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import Any, Literal

    Status = Literal["pass", "fail", "warn", "skip"]
    FixProvider = Callable[[str, str, str, str], list[str]]
    StrPath = str | os.PathLike[str]

    from resolver.fixes import Fixer
else:
    from _collections_abc import Callable as _Callable  # what collections.abc re-exports

    FixProvider = _Callable[[str, str, str, str], list[str]]

__all__ = ["CheckResult", "FixProvider", "Report", "check_image", "main", "requested_features"]

PG_MODULES = ("mooncake.pg", "mooncake.ep")
BACKENDS = ("mooncake", "mooncake-cpu")
MOONCAKE_PREFIX = "mooncake-transfer-engine"
_FLAGS = {
    "--elastic-ep-backend": "elastic-ep",
    "--moe-a2a-backend": "moe-a2a",
    "--disaggregation-transfer-backend": "pd-disaggregation",
    "--hicache-storage-backend": "hicache",
}
_CUDART = "libcudart.so."
#: The target interpreter's extension-module suffixes (:mod:`resolver.target`).
_EXT_SUFFIXES: tuple[str, ...] = tuple(machinery.EXTENSION_SUFFIXES)
#: ``kb.models.SCHEMA_VERSION`` and ``READABLE_SCHEMAS``, repeated so that pydantic stays
#: off this path (a test asserts they agree).
KB_SCHEMA = 3
KB_READABLE = frozenset({1, 2, 3})


class CheckResult:
    """One check: its name, pass/fail/warn/skip, what was found, the fix, the evidence."""

    __slots__ = ("evidence", "fix", "message", "name", "status")

    def __init__(self, name: str, status: Status, message: str, fix: str | None = None,
                 evidence: tuple[str, ...] = ()) -> None:
        self.name = name
        self.status: Status = status
        self.message = message
        self.fix = fix
        self.evidence = tuple(evidence)

    def _key(self) -> tuple[Any, ...]:
        return (self.name, self.status, self.message, self.fix, self.evidence)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CheckResult) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return "CheckResult(" + ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items()) + ")"

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "message": self.message,
                "fix": self.fix, "evidence": self.evidence}


class Report:
    """Every check, whether the image is usable, and the exit code that says so."""

    __slots__ = ("checks", "exit_code", "usable")

    def __init__(self, checks: list[CheckResult], usable: bool, exit_code: int) -> None:
        self.checks = checks
        self.usable = usable
        self.exit_code = exit_code

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Report) and (self.checks, self.usable, self.exit_code) == (
            other.checks, other.usable, other.exit_code)

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it was

    def __repr__(self) -> str:
        return (f"Report(checks={self.checks!r}, usable={self.usable!r}, "
                f"exit_code={self.exit_code!r})")

    def to_json(self) -> str:
        import json

        return json.dumps({"usable": self.usable, "exit_code": self.exit_code,
                           "checks": [c.as_dict() for c in self.checks]}, indent=1)

    def quiet_lines(self) -> list[str]:
        """One line when usable; the failing checks (with their fixes) otherwise."""
        if self.usable:
            warned = sum(c.status == "warn" for c in self.checks)
            return ["moonpin check: usable" + (f" ({warned} warning{'s' * (warned != 1)}; "
                                               "run without -q to see them)" if warned else "")]
        return Report([c for c in self.checks if c.status == "fail"], self.usable,
                      self.exit_code).lines()

    def lines(self) -> list[str]:
        out = []
        for c in self.checks:
            out.append(f"{c.status:<5} {c.name}: {c.message}")
            if c.fix:
                out.append(f"  fix: {c.fix}")
        return out


# ------------------------------------------------------------------ launch arguments


def requested_features(launch_args: Sequence[str],
                       elastic_ep_backend: str | None = None) -> dict[str, str]:
    """feature -> backend, for the mooncake-relevant flags in the worker's arguments."""
    out: dict[str, str] = {}
    if elastic_ep_backend:
        out["elastic-ep"] = elastic_ep_backend
    args = list(launch_args)
    for i, a in enumerate(args):
        flag, eq, value = a.partition("=")
        if flag not in _FLAGS:
            continue
        if not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
        out.setdefault(_FLAGS[flag], value)
    return out


# ------------------------------------------------------------------ the image


class _Dist:
    def __init__(self, name: str, version: str, root: str, requires: tuple[str, ...],
                 files: tuple[str, ...] | None) -> None:
        self.name = name  # canonical
        self.version = version
        self.root = root  # the site-packages folder it is installed in
        self.requires = requires
        self.files = files  # RECORD entries; read for mooncake distributions only


def _which(name: str) -> str | None:
    import shutil  # here: off the common path

    return shutil.which(name)


def _canon(name: str) -> str:
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
    for line in text.splitlines():
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


def _wanted(name: str) -> bool:
    return name in ("torch", "sglang") or name.startswith(MOONCAKE_PREFIX)


#: Size caps per kind of file the check reads (a real extension build is ~30 MB).
_CAP_SMALL = 16 << 20  # METADATA, a loader, torch/version.py
_CAP_RECORD = 64 << 20
_CAP_BUILD = 512 << 20
_CAP_KB = 256 << 20


def _read_bytes(path: str, cap: int = _CAP_SMALL, what: str = "file") -> bytes:
    """A regular file's bytes (:func:`kb.files.read_regular`: no FIFO blocks, no device is
    read, nothing past ``cap``); raises OSError (``ReadRefused``) naming what it is."""
    return read_regular(path, cap=cap, what=what)


def _read_text(path: str, cap: int = _CAP_SMALL, what: str = "file") -> str:
    return _read_bytes(path, cap, what).decode("utf-8", "replace")


def _read_dists(paths: Sequence[str]) -> list[_Dist]:
    """The installed torch, sglang and mooncake-family distributions, in path order, as
    ``importlib.metadata.distributions(path=)`` finds them (``*.dist-info/METADATA``,
    ``*.egg-info/PKG-INFO``). A ``.dist-info`` folder is named ``{name}-{version}``: only
    those of the wanted names are opened (an image holds ~100 others)."""
    out = []
    for root in paths:
        try:
            entries = sorted(os.scandir(root), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            if e.name.endswith(".dist-info"):
                if not _wanted(_canon(e.name[:-len(".dist-info")].split("-", 1)[0])):
                    continue
                meta, record = "METADATA", "RECORD"
            elif e.name.endswith(".egg-info"):
                meta, record = "PKG-INFO", "installed-files.txt"
            else:
                continue
            folder = e.path
            try:
                head = _headers(_read_text(os.path.join(folder, meta), what="METADATA"))
            except OSError:
                continue
            name = (head.get("name") or [""])[0]
            if not name:
                continue
            files: tuple[str, ...] | None = None
            if _canon(name).startswith(MOONCAKE_PREFIX):  # the only file lists used
                try:
                    files = tuple(
                        line.split(",", 1)[0] for line in
                        _read_text(os.path.join(folder, record), _CAP_RECORD,
                                   "distribution RECORD").splitlines() if line)
                except OSError:
                    pass
            out.append(_Dist(_canon(name), (head.get("version") or [""])[0], root,
                             tuple(head.get("requires-dist") or ()), files))
    return out


def _find_package(paths: Sequence[str], name: str) -> str | None:
    for p in paths:
        cand = os.path.join(p, name)
        if os.path.isdir(cand):
            return cand
    return None


class _Torch:
    def __init__(self, version: str, cuda: int | None, cuda_evidence: str) -> None:
        self.version = version
        self.cuda = cuda
        self.cuda_evidence = cuda_evidence


def _torch_version_py(pkg: str) -> dict[str, Any] | None:
    """The constants of ``torch/version.py`` (``__version__``, ``cuda``, ``hip``): what
    ``torch.version`` reports, read with ``ast`` (once per version of the file: the
    file-facts memo); None when missing or unreadable."""
    path = os.path.join(pkg, "version.py")
    try:
        got = facts_memo().get("torch-version", path, lambda: _parse_version_py(path))
        if got is not None and not isinstance(got, dict):  # a damaged memo entry
            got = _parse_version_py(path)
    except OSError:
        return None
    return got


def _parse_version_py(path: str) -> dict[str, Any] | None:
    import ast

    try:
        tree = ast.parse(_read_bytes(path, what="torch/version.py"))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    out: dict[str, Any] = {}
    for node in tree.body:
        target = (node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1
                  else node.target if isinstance(node, ast.AnnAssign) else None)
        value = getattr(node, "value", None)
        if (isinstance(target, ast.Name) and isinstance(value, ast.Constant)
                and isinstance(value.value, (str, int, float, bool, type(None)))):
            out[target.id] = value.value
    return out


def _leading_int(text: str) -> int | None:
    """The number ``text`` starts with (``"13.0"`` -> 13), None when it starts otherwise."""
    digits = len(text) - len(text.lstrip("0123456789"))
    return int(text[:digits]) if 0 < digits <= 6 else None


def _torch_info(dist: _Dist, arch: str) -> _Torch:
    consts = _torch_version_py(os.path.join(dist.root, "torch"))
    if consts is not None and "cuda" in consts:
        cuda = consts["cuda"]
        head = cuda.partition(".")[0] if isinstance(cuda, str) else ""
        if head.isdigit() and head.isascii() and len(head) <= 6:
            return _Torch(dist.version, int(head), f"torch/version.py: cuda = {cuda!r}")
        if cuda is None:
            hip = consts.get("hip")
            what = f"a ROCm build, hip = {hip!r}" if hip else "a CPU build"
            return _Torch(dist.version, None, f"torch/version.py: cuda = None ({what})")
    # No readable torch/version.py: the wheel's requirements decide (needs ``packaging``).
    from scrapers.cuda import cuda_major

    try:
        major, line = cuda_major(dist.requires, arch)
    except Exception:  # torch's own metadata, unreadable markers: no CUDA facts from it
        major, line = None, ""
    if major is not None:
        return _Torch(dist.version, major, f"Requires-Dist {line!r}")
    local = dist.version.partition("+")[2]
    if (local.startswith("cu") and 3 < len(local) <= 8 and local[2:].isdigit()
            and local.isascii()):
        return _Torch(dist.version, int(local[2:-1]), f"local label +{local}")
    return _Torch(dist.version, None, "no CUDA runtime requirement nor +cuXYZ label")


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


def _vendor_reason(version: str) -> str | None:
    if _plain_release(version):
        return None
    from packaging.version import InvalidVersion, Version

    try:
        v = Version(version)
    except InvalidVersion:
        return f"torch {version} is not a PEP 440 version"
    why = []
    if v.is_prerelease or v.is_devrelease:
        why.append("a pre-release")
    if v.local and not _index_local(v.local):
        why.append(f"a vendor build (+{v.local})")
    return f"torch {version} is {' and '.join(why)}" if why else None


# ------------------------------------------------------------------ SGLang requirement


class _Requirement:
    def __init__(self, module: str | None, names: tuple[str, ...], backends: tuple[str, ...],
                 evidence: tuple[str, ...] = (), optional_names: tuple[str, ...] = (),
                 alternatives: tuple[str, ...] = ()) -> None:
        self.module = module  # None: no process-group module imported / unknown
        self.names = names
        self.backends = backends
        self.evidence = evidence
        self.optional_names = optional_names
        self.alternatives = alternatives  # modules SGLang falls back to on ImportError


def _analyze_sglang(pkg: str, cache: bool = True) -> _Requirement:
    """Raises OSError when a source cannot be read."""
    from resolver import sources

    d = sources.scan(pkg, use_cache=cache).derived
    return _Requirement(d["module"], tuple(d["names"]), tuple(d["backends"]),
                        tuple(d["evidence"]), tuple(d["optional_names"]),
                        tuple(d.get("alternatives") or ()))


class _KB:
    """The knowledge base as the check needs it: each SGLang release's requirement from the
    small resolved index when it is fresh; the whole file only on a failure path."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._doc: dict[str, Any] | None = None
        self._requirements: dict[str, dict[str, Any]] | None = None
        from resolver.resolved import load_requirements

        self._requirements = load_requirements(path)
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
        entry = self._requirements.get(version or "") if self._requirements else None
        if isinstance(entry, dict) and isinstance(entry.get("features"), dict):
            return list(entry["features"].get(feature) or ())
        rec = next((r for r in (self.doc() or {}).get("sglang") or ()
                    if isinstance(r, dict) and r.get("version") == version), None)
        if rec is None:
            return None
        return [i for i in rec.get("imports") or ()
                if i.get("feature") == feature and not i.get("optional")]

    def requirement(self, version: str | None) -> _Requirement | None:
        if not self.ok or version is None:
            return None
        if self._requirements is not None:
            pg = self._requirements.get(version)
        else:
            doc = self._doc or {}
            pg = next((rec.get("pg") or {} for rec in doc.get("sglang") or ()
                       if isinstance(rec, dict) and rec.get("version") == version), None)
        if pg is None:
            return None
        return _Requirement(pg.get("module"), tuple(pg.get("names") or ()),
                            tuple(pg.get("backends") or ()),
                            optional_names=tuple(pg.get("optional_names") or ()),
                            alternatives=tuple(pg.get("alternatives") or ()))


def _load_kb(path: str) -> tuple[dict[str, Any] | None, str]:
    from kb.files import loads_json

    try:
        doc = loads_json(_read_bytes(path, _CAP_KB, "knowledge base"))
    except OSError as e:
        if e.errno == 2:  # ENOENT
            return None, f"knowledge base not found: {path}"
        return None, f"cannot read knowledge base {path}: {e.strerror or e}"
    except ValueError as e:
        return None, f"knowledge base {path} is not valid JSON: {e}"
    if not isinstance(doc, dict) or not isinstance(doc.get("sglang"), list):
        return None, f"knowledge base {path} is corrupt (no 'sglang' list)"
    version = doc.get("schema_version")
    if not isinstance(version, int) or version not in KB_READABLE:
        return None, (f"knowledge base {path} has schema_version "
                      f"{doc.get('schema_version')!r}; this moonpin reads "
                      f"{', '.join(str(v) for v in sorted(KB_READABLE))}")
    return doc, f"knowledge base {path}"


def _first_providing(kbv: _KB, name: str) -> str | None:
    """The first mooncake release (in KB order) with a build naming ``name``."""
    kb = kbv.doc()
    if kb is None:
        return None
    from packaging.version import InvalidVersion, Version

    found: list[tuple[Version, str]] = []
    for rel in kb.get("mooncake") or ():
        try:
            if any(name in (b.get("names") or ()) for w in rel.get("wheels") or ()
                   for b in w.get("builds") or ()):
                found.append((Version(rel["version"]), f"{rel['dist']} {rel['version']}"))
        except (InvalidVersion, KeyError, TypeError, AttributeError):
            continue
    return min(found)[1] if found else None


# ------------------------------------------------------------------ mooncake on disk


def _name(path: str) -> str:
    return os.path.basename(path)


def _suffix(path: str) -> str:
    """What ``PurePath.suffix`` says: the last ``.ext`` of the file name."""
    return os.path.splitext(os.path.basename(path))[1]


def _module_file(pkg: str, short: str) -> str | None:
    """What ``import mooncake.<short>`` would find in ``pkg``, in FileFinder's order."""
    init = os.path.join(pkg, short, "__init__.py")
    if os.path.isfile(init):
        return init
    for suffix in (*_EXT_SUFFIXES, *machinery.SOURCE_SUFFIXES,
                   *machinery.BYTECODE_SUFFIXES):
        cand = os.path.join(pkg, f"{short}{suffix}")
        if os.path.isfile(cand):
            return cand
    return None


def _shipped_like(pkg: str, head: str) -> list[str]:
    out = []
    for name in sorted(_list(pkg)):
        stem = name.split(".", 1)[0]
        if stem.startswith(head) and stem != head and _suffix(name) in (".so", ".py", ".pyd") \
                and os.path.isfile(os.path.join(pkg, name)):
            out.append(name)
    return out


def _list(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _kind_of(path: str) -> str:
    """What a path that is not a regular file is, in words."""
    import stat

    try:
        st = os.lstat(path)
    except OSError as e:
        return f"unreadable ({e.strerror})"
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.stat(path)
        except OSError:
            return f"a dangling symbolic link (to {os.readlink(path)!r})"
        return f"a symbolic link to {_mode_word(target.st_mode)} ({os.path.realpath(path)})"
    return _mode_word(st.st_mode)


def _mode_word(mode: int) -> str:
    import stat

    for test, word in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a regular file")):
        if test(mode):
            return word
    return f"a file of mode {oct(mode)}"


def _not_files(pkg: str, short: str) -> list[str]:
    """What ``import mooncake.<short>`` would see in ``pkg`` but skip, since only regular
    files are modules (FileFinder): each named with what it is."""
    out = []
    for suffix in (*_EXT_SUFFIXES, *machinery.SOURCE_SUFFIXES):
        cand = os.path.join(pkg, f"{short}{suffix}")
        if os.path.lexists(cand) and not os.path.isfile(cand):
            out.append(f"{short}{suffix} is {_kind_of(cand)}, not a file")
    return out


def _unlistable(folder: str) -> str | None:
    """Why Python's importer cannot list ``folder`` as this user (it then finds no module
    in it), or None."""
    try:
        os.listdir(folder)
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


class _BuildFacts:
    def __init__(self, path: str, names: set[str] | None = None,
                 backends: set[str] | None = None, cuda: int | None = None,
                 needed: tuple[str, ...] = (), error: str | None = None) -> None:
        self.path = path
        self.names: set[str] = set(names or ())
        self.backends: set[str] = set(backends or ())
        self.cuda = cuda
        self.needed = needed
        self.error = error


def _read_build(path: str, wanted: Iterable[str]) -> _BuildFacts:
    """What a build provides, from its bytes; kept in the file-facts memo per build and
    set of names asked for (a 30 MB extension is scanned once per version of the file)."""
    asked = tuple(sorted(set(wanted)))

    def scan() -> tuple[Any, ...]:
        f = _scan_build(path, asked)
        return (sorted(f.names), sorted(f.backends), f.cuda, f.needed, f.error)

    try:
        names, backends, cuda, needed, error = facts_memo().get(
            "build-v2\0" + "\0".join(asked), path, scan, _build_shape)
    except OSError as e:
        return _BuildFacts(path, error=f"cannot read {path}: {e.strerror}")
    return _BuildFacts(path, set(names), set(backends), cuda, tuple(needed), error)


def _strs(value: object) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)


def _build_shape(value: object) -> bool:
    """The shape of a remembered build reading (a damaged memo entry fails it)."""
    return (isinstance(value, (list, tuple)) and len(value) == 5 and _strs(value[0])
            and _strs(value[1]) and (value[2] is None or type(value[2]) is int)
            and _strs(value[3]) and _str_or_none(value[4]))


def _scan_build(path: str, wanted: Iterable[str]) -> _BuildFacts:
    facts = _BuildFacts(path)
    try:
        data = _read_bytes(path, _CAP_BUILD, "extension build")
    except OSError as e:
        facts.error = f"cannot read {path}: {e.strerror or e}"
        return facts
    if _suffix(path) == ".py":
        _read_standin(data, facts)
        return facts
    from scrapers import elf

    if not elf.is_elf(data):
        facts.error = f"{_name(path)} is not an ELF object"
        return facts
    try:
        ef = elf.analyze(data, len(data), set(wanted) | set(BACKENDS))
    except elf.ElfError as e:
        facts.error = f"{_name(path)}: {e}"
        return facts
    from resolver.ldso import elf_problem

    problem = elf_problem(data, ef)
    if problem is not None:
        facts.error = f"{_name(path)} cannot be loaded: {problem}"
        return facts
    facts.backends = {b for b in BACKENDS if b in ef.strings}
    facts.names = set(ef.strings) - facts.backends
    facts.needed = tuple(ef.needed)
    for n in ef.needed:
        if n.startswith(_CUDART):
            major = _leading_int(n[len(_CUDART):])
            if major is not None:
                facts.cuda = major
    return facts


def _read_standin(data: bytes, facts: _BuildFacts) -> None:
    import ast

    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        facts.error = f"{_name(facts.path)} does not parse: {type(e).__name__}: {str(e)[:200]}"
        return
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            facts.names.add(stmt.name)
        elif isinstance(stmt, ast.Assign):
            facts.names |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            facts.names.add(stmt.target.id)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        f = node.func
        fname = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        arg = node.args[0]
        if fname == "register_backend" and isinstance(arg, ast.Constant) and \
                arg.value in BACKENDS:
            facts.backends.add(str(arg.value))


def _str_or_none(value: object) -> bool:
    """The shape of a remembered suffix or torch target (a damaged memo entry fails it)."""
    return value is None or isinstance(value, str)


def _scheme_shape(value: object) -> bool:
    """The shape of a remembered loader scheme (:func:`_read_scheme`)."""
    if not isinstance(value, dict):
        return False
    imports, toolchain = value.get("imports"), value.get("toolchain")
    return (isinstance(value.get("kind"), str) and isinstance(value.get("placeholder"), str)
            and isinstance(imports, list) and all(isinstance(i, str) for i in imports)
            and isinstance(toolchain, list) and all(isinstance(t, str) for t in toolchain)
            and all(_str_or_none(value.get(k)) for k in ("problem", "note", "version_regex",
                                                          "separator")))


def _loader_problem(data: bytes) -> str | None:
    """Why Python cannot import this loader module, or None."""
    import ast

    if not data.strip():
        return "it is empty: the module imports but defines none of the names"
    nul = data.find(b"\0")
    if nul >= 0:  # 3.12 refuses it; older parsers stop reading at the NUL
        return (f"it holds a NUL byte (at offset {nul}): Python refuses it or stops reading "
                "there")
    try:
        ast.parse(data)
    except SyntaxError as e:
        return f"Python cannot compile it: {e.msg} (line {e.lineno})"
    except (ValueError, RecursionError, MemoryError) as e:
        return f"Python cannot compile it: {type(e).__name__}: {str(e)[:200]}"
    return None


def _read_scheme(loader_path: str, module: str) -> dict[str, Any]:
    """The loader's scheme (:func:`scrapers.loader.read_loader`) as plain data for the
    file-facts memo."""
    from scrapers.loader import TORCH, read_loader

    data = _read_bytes(loader_path, what="mooncake loader")
    problem = _loader_problem(data)
    if problem is not None:
        return {"kind": "unknown", "note": problem, "problem": problem, "toolchain": [],
                "imports": [], "version_regex": None, "separator": None, "placeholder": TORCH}
    folder = os.path.dirname(loader_path)
    # what the package ships one folder down (0.3.14's _pg_jit/): the C++ sources a
    # compiling loader names are found among them, as the scraper finds them in the wheel
    shipped = [os.path.join(folder, sub, n) for sub in _list(folder)
               if os.path.isdir(os.path.join(folder, sub))
               for n in _list(os.path.join(folder, sub)) if n.endswith((".cpp", ".cc", ".cu"))]
    try:
        r = read_loader(data, loader_path, module, shipped)
    except (RecursionError, MemoryError) as e:  # a loader nested past what ast can hold
        problem = f"Python cannot compile it: {type(e).__name__}"
        return {"kind": "unknown", "note": problem, "problem": problem, "toolchain": [],
                "imports": [], "version_regex": None, "separator": None, "placeholder": TORCH}
    cache = None
    source_names: set[str] = set()
    if r.kind == "jit-compile":
        from resolver.jit import read_cache_scheme
        from scrapers.loader import cpp_string_names

        cache = read_cache_scheme(data)
        for src in r.sources:  # the names its C++ sources bind (pybind11 m.def("..."))
            try:
                source_names |= cpp_string_names(_read_bytes(src, _CAP_BUILD, "C++ source"))
            except OSError:
                continue
    return {"kind": r.kind, "note": r.note, "toolchain": list(r.toolchain),
            "imports": [i.template for i in r.imports], "version_regex": r.version_regex,
            "separator": r.separator, "placeholder": TORCH, "problem": None, "cache": cache,
            "sources": list(r.sources), "source_names": sorted(source_names)}


def _find_nvcc() -> str | None:
    for env in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(env)
        if home:
            nvcc = os.path.join(home, "bin", "nvcc")
            return nvcc if os.path.isfile(nvcc) else None
    found = _which("nvcc")
    if found:
        return found
    fallback = os.environ.get("MOONPIN_CHECK_CUDA_FALLBACK", "/usr/local/cuda")
    nvcc = os.path.join(fallback, "bin", "nvcc")
    return nvcc if os.path.isfile(nvcc) else None


def _find_ninja(paths: Sequence[str]) -> str | None:
    found = _which("ninja")
    if found:
        return found
    for p in paths:  # the `ninja` wheel ships its binary inside the package
        cand = os.path.join(p, "ninja", "data", "bin", "ninja")
        if os.path.isfile(cand):
            return cand
    return None


# ------------------------------------------------------------------ the check


#: The words of a loader the light check cannot read; a deep import that works settles it.
_UNREADABLE_SCHEME = ("its loading scheme is none a mooncake release uses, so what it loads "
                      "cannot be read without importing it")


def _downgrade_light_libraries(checks: list[CheckResult]) -> list[CheckResult]:
    """What the deep probe saw is not overruled by a light guess: when the import worked
    and both backends registered, a light library failure is a warning that names the
    disagreement."""
    by = {c.name: c.status for c in checks}
    if by.get("deep import") != "pass" or by.get("deep backends") != "pass":
        return checks
    return [CheckResult(c.name, "warn", f"{c.message} (but the deep import loaded it here, "
                        "so the light reading of the libraries disagrees with the loader: "
                        "please report it)", c.fix, c.evidence)
            if c.status == "fail" and (c.name == "libraries" or (
                c.name == "loader" and _UNREADABLE_SCHEME in c.message)) else c
            for c in checks]


def _report(checks: list[CheckResult], strict: bool, could_not_check: bool = False) -> Report:
    if strict:
        checks = [CheckResult(c.name, "fail", c.message + " (--strict)", c.fix, c.evidence)
                  if c.status == "warn" else c for c in checks]
    usable = not could_not_check and all(c.status != "fail" for c in checks)
    return Report(checks, usable, 2 if could_not_check else 0 if usable else 1)


def check_image(*, elastic_ep_backend: str | None, launch_args: Sequence[str] = (),
                site_packages: Sequence[StrPath] | None = None, kb_path: StrPath | None = None,
                strict: bool = False, fix_provider: FixProvider | None = None,
                deep: bool | None = None, deep_timeout: float = 120.0,
                source_cache: bool = True, python: str | None = None) -> Report:
    """Read the image and decide whether the requested mooncake features can work.

    The image is ``python``'s environment (its ``sys.path``, Python version and extension
    suffixes; it runs the deep probe), else the ``site_packages`` folders, else an active
    virtualenv moonpin does not run from, else this interpreter (:mod:`resolver.target`).

    ``source_cache=False`` reads every SGLang source instead of trusting the analysis of
    unchanged files (see :mod:`resolver.sources`), and every build, loader and table instead
    of trusting the file-facts memo (:func:`kb.cache.facts_memo`)."""
    memo = facts_memo()
    memo.enabled = source_cache
    try:
        return _check_image(elastic_ep_backend=elastic_ep_backend, launch_args=launch_args,
                            site_packages=site_packages, kb_path=kb_path, strict=strict,
                            fix_provider=fix_provider, deep=deep, deep_timeout=deep_timeout,
                            source_cache=source_cache, python=python)
    finally:
        memo.enabled = True
        memo.flush()  # what was learned; a cache that cannot be written costs only time


def _check_image(*, elastic_ep_backend: str | None, launch_args: Sequence[str],
                 site_packages: Sequence[StrPath] | None, kb_path: StrPath | None,
                 strict: bool, fix_provider: FixProvider | None, deep: bool | None,
                 deep_timeout: float, source_cache: bool, python: str | None) -> Report:
    features = requested_features(launch_args, elastic_ep_backend)
    wanted = {f: b for f, b in features.items() if b == "mooncake"}
    if not wanted:
        asked = ", ".join(f"{f}={b}" for f, b in features.items()) or "no mooncake flag"
        return _report([CheckResult("mooncake", "skip",
                                    f"mooncake backend not requested ({asked}); nothing to check")],
                       strict=False)
    checks: list[CheckResult] = []
    add = checks.append
    from resolver import target as tg

    if site_packages is not None:
        missing = [os.fspath(p) for p in site_packages if not os.path.isdir(p)]
        if missing:
            add(CheckResult("site-packages", "fail", f"not a folder: {', '.join(missing)}"))
            return _report(checks, strict, could_not_check=True)
    try:
        if python is not None:
            target = tg.from_python(python)
            if site_packages is not None:
                target.paths = [os.fspath(p) for p in site_packages]
        elif site_packages is not None:
            target = tg.from_site_packages([os.fspath(p) for p in site_packages])
        else:
            target = tg.default()
    except tg.TargetError as e:
        add(CheckResult("target", "fail", str(e), "pass the image's interpreter, e.g. "
                        "--python /opt/venv/bin/python"))
        return _report(checks, strict, could_not_check=True)
    paths = target.paths
    global _EXT_SUFFIXES
    _EXT_SUFFIXES = target.ext_suffixes
    add(CheckResult("target", "pass", target.describe()))
    unlisted = [u for u in map(_unlistable, paths) if u] if site_packages is not None else []
    if unlisted:  # the importer finds nothing there: no "not installed" diagnosis
        add(CheckResult("site-packages", "fail", "; ".join(unlisted) + ": nothing installed "
                        "there can be imported", "make it readable by the worker's user "
                        "(chmod a+rX on the folder)"))
        return _report(checks, strict)
    arch = os.uname().machine
    sglang_pkg = _find_package(paths, "sglang")
    kb_file = os.fspath(kb_path) if kb_path is not None else None
    from resolver.fixes import Fixer

    fixer = Fixer(fix_provider, kb_file)
    fixer.python = target.tag
    add(CheckResult("launch", "pass", "mooncake requested for " + ", ".join(sorted(wanted))))

    # --- knowledge base
    from kb.paths import default_kb_file

    kb = _KB(kb_file or default_kb_file())
    if not kb.ok:
        add(CheckResult("kb", "warn", kb.msg + "; the image is still read",
                        "run `moonpin scrape --full` to rebuild it, or pass --kb PATH"))
    else:
        add(CheckResult("kb", "pass", f"read {kb.msg}"))

    # --- distributions
    dists: dict[str, _Dist] = {}
    mooncakes: list[_Dist] = []
    for d in _read_dists(paths):
        dists.setdefault(d.name, d)
        if d.name.startswith(MOONCAKE_PREFIX):
            mooncakes.append(d)
    sglang = dists.get("sglang")
    torch_d = dists.get("torch")
    fixer.sglang = sglang.version if sglang else None
    fixer.torch = torch_d.version if torch_d else None
    fixer.mooncakes = [(d.name, d.version) for d in mooncakes]

    # --- torch
    torch: _Torch | None = None
    if torch_d is None:
        add(CheckResult("torch", "fail", "torch is not installed (mooncake's loaders import it)",
                        "install the torch your SGLang release requires, then "
                        + fixer.generic()))
    elif (bad := _unlistable(os.path.join(torch_d.root, "torch"))) is not None:
        add(CheckResult("torch", "fail", f"{bad}: `import torch` fails", "make it readable "
                        "by the worker's user (chmod -R a+rX on the folder)"))
    else:
        torch = _torch_info(torch_d, arch)
        cuda = (f"CUDA {torch.cuda}" if torch.cuda else "no CUDA"
                if torch.cuda_evidence.startswith("torch/version.py") else "no CUDA (CPU build?)")
        add(CheckResult("torch", "pass", f"torch {torch.version}, {cuda} ({torch.cuda_evidence})",
                        evidence=(torch_d.root,)))

    # --- the torch the installed SGLang release itself pins
    if sglang is not None and torch_d is not None:
        _check_sglang_torch(sglang, torch_d.version, fixer, add)

    # --- SGLang requirement
    req = _sglang_requirement(paths, sglang, kb, add, source_cache, sglang_pkg)

    # --- the worker's own launch arguments against this release's rules
    if launch_args:
        _check_launch(list(launch_args), sglang.version if sglang else None, kb, add)

    # --- mooncake installed
    if not mooncakes:
        add(CheckResult("mooncake installed", "fail",
                        "no mooncake distribution installed (none installed)", fixer.line()))
        return _report(checks, strict)
    listing = ", ".join(f"{d.name} {d.version}" for d in mooncakes)
    by_root: dict[str, list[_Dist]] = {}
    for d in mooncakes:
        if d.files is None or any(f.lstrip("./").startswith("mooncake/") for f in d.files):
            by_root.setdefault(d.root, []).append(d)
    clash = next((ds for ds in by_root.values() if len(ds) > 1), None)
    if clash:
        add(CheckResult("mooncake installed", "fail",
                        f"{len(clash)} mooncake distributions installed over one mooncake/ "
                        f"folder ({', '.join(f'{d.name} {d.version}' for d in clash)}): "
                        "its files are a mix of both",
                        fixer.line() if fixer.line().startswith("pip ") else
                        f"pip uninstall -y {' '.join(d.name for d in clash)}; then "
                        f"{fixer.line()}",
                        (clash[0].root,)))
    else:
        add(CheckResult("mooncake installed", "pass", listing))
    pkg = _find_package(paths, "mooncake")
    if pkg is None:
        add(CheckResult("mooncake package", "fail",
                        f"{listing} is installed but no mooncake/ package folder was found",
                        fixer.reinstall()))
        return _report(checks, strict)

    if "elastic-ep" in wanted:
        _check_pg(pkg, paths, req, torch, kb, fixer, add)
    for f in sorted(set(wanted) - {"elastic-ep"}):
        _check_feature(f, pkg, sglang.version if sglang else None, kb, add,
                       sglang_pkg, source_cache)
    if deep is None:
        deep = "elastic-ep" in wanted
    if not deep:
        add(CheckResult("deep probe", "skip", "not requested (--no-deep); light checks only"))
    elif torch_d is None:
        add(CheckResult("deep probe", "skip", "torch is not installed: nothing to import"))
    else:
        module = req.module if req is not None and req.module else next(
            (m for m in PG_MODULES if os.path.isfile(os.path.join(pkg, f"{m.split('.')[1]}.py"))),
            None)
        if module is None:
            add(CheckResult("deep probe", "skip", "no process-group module to import"))
        else:
            for r in _deep_probe(module, req.names if req is not None else (),
                                 site_packages if python is None else None, deep_timeout,
                                 target.python or sys.executable):
                # the light check's install line, where it has one, fixes what the deep
                # probe then sees: say that line rather than the library hint
                pip_fix = next((c.fix for c in checks if c.status == "fail" and c.fix
                                and c.fix.startswith("pip ")), None)
                if r.status == "fail" and pip_fix and r.name == "deep probe":
                    r = CheckResult(r.name, r.status, r.message, pip_fix, r.evidence)
                add(r)
            checks = _downgrade_light_libraries(checks)
    return _report(checks, strict)


#: Runs in a child interpreter: imports only, then one JSON line on stdout.
_PROBE = r"""
import importlib, json, sys
args = json.loads(sys.argv[1])
out = {"stage": "torch"}
def done():
    sys.stdout.write(chr(10) + "MOONPIN-PROBE " + json.dumps(out) + chr(10))
    sys.stdout.flush()
try:
    import torch
    out["torch"] = str(getattr(torch, "__version__", "?"))
except BaseException as e:  # the answer is the exception, whatever it is
    out["error"] = f"{type(e).__name__}: {e}"
    done(); sys.exit(0)
out["stage"] = "import"
try:
    mod = importlib.import_module(args["module"])
except BaseException as e:  # the answer is the exception, whatever it is
    out["error"] = f"{type(e).__name__}: {e}"
    done(); sys.exit(0)
out["stage"] = "done"
out["missing"] = [n for n in args["names"] if not hasattr(mod, n)]
try:
    import torch.distributed as dist
    cap = dist.Backend.backend_capability
    out["capability"] = {k: list(v) if isinstance(v, (list, tuple)) else repr(v)
                         for k, v in cap.items() if k in ("mooncake", "mooncake-cpu")}
except Exception as e:  # torch internals moved: reported as unreadable, not a failure
    out["capability_error"] = f"{type(e).__name__}: {e}"
done()
"""


def _tail(f: Any, cap: int = 1 << 20) -> bytes:
    """The last ``cap`` bytes a child wrote to ``f``."""
    size = f.seek(0, os.SEEK_END)
    f.seek(max(0, size - cap))
    return bytes(f.read())


def _wait_probe(proc: Any, module: str, timeout: float) -> CheckResult | None:
    """Wait for the probe; at the timeout, the failure naming what was running. The
    child's process group is ended either way."""
    if not _wait_unreaped(proc.pid, timeout):
        running = _group_commands(proc.pid)
        _kill_group(proc)
        compiling = [c for c in running if c in ("ninja", "cc1plus", "nvcc", "c++", "g++",
                                                  "cicc", "ptxas", "ld")]
        what = (f"gave no answer in {timeout:g}s: it was still compiling its adapter "
                f"({', '.join(compiling)} running), which a worker pays at start unless it is "
                "compiled at image build" if compiling else
                f"hung: no answer in {timeout:g}s (a worker would stall at start)")
        return CheckResult("deep probe", "fail", f"importing {module} {what}"
                           + (f" (processes: {', '.join(running[:8])})" if running else ""),
                           "run `python -c 'import " + module + "'` in the image to see where")
    _kill_group(proc)  # whatever the child left running
    return None


def _wait_unreaped(pid: int, timeout: float) -> bool:
    """Wait for the child to exit without reaping it (``WNOWAIT``): while it is a zombie its
    pid, and so its process group's id, cannot be given to another process, so the group
    can be killed safely afterwards. False at the timeout."""
    import time

    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None:
                return True
        except ChildProcessError:
            return True  # already reaped
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _group_commands(pgid: int) -> list[str]:
    """The command names of the processes in group ``pgid`` (from /proc; empty where it
    cannot be read)."""
    out = []
    for pid in _list("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read(4096).decode("utf-8", "replace")
        except OSError:
            continue
        name, _, rest = stat.partition(" (")[2].rpartition(") ")
        fields = rest.split()
        if len(fields) > 2 and fields[2] == str(pgid):
            out.append(name)
    return sorted(set(out))


def _kill_group(proc: Any) -> None:
    """End the child's process group, then reap the child (still unreaped here: see
    :func:`_wait_unreaped`)."""
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass  # already gone
    try:
        proc.wait(timeout=10)
    except Exception:  # a child that cannot be reaped must not crash the check
        pass


#: What provides a shared library a mooncake build needs, for the fix line.
_LIB_HINTS: tuple[tuple[str, str], ...] = (
    (r"libcudart\.so\.(\d+)", "the CUDA {0} runtime: this mooncake build is for CUDA {0}; "
     "install the mooncake distribution that matches torch's CUDA (`moonpin which mooncake`)"),
    (r"libc10_cuda\.so|libtorch_cuda\.so", "a CUDA build of torch: this torch is CPU-only"),
    (r"libibverbs\.so|libmlx5\.so", "the RDMA user-space libraries (Debian/Ubuntu: "
     "`apt-get install libibverbs1 ibverbs-providers`; RHEL: `dnf install rdma-core`)"),
    (r"libnuma\.so", "libnuma (Debian/Ubuntu: `apt-get install libnuma1`)"),
    (r"libcurl\.so", "libcurl (Debian/Ubuntu: `apt-get install libcurl4`)"),
)


def _provider_hint(error: str) -> str | None:
    import re

    m = re.search(r"(lib[\w.+-]+\.so[\w.]*): cannot open shared object file", error)
    if not m:
        return None
    for pattern, hint in _LIB_HINTS:
        found = re.match(pattern, m.group(1))
        if found:
            return f"{m.group(1)} is missing; it comes from " + hint.format(*found.groups())
    return f"{m.group(1)} is missing: install what provides it in the image"


def _deep_probe(module: str, names: Sequence[str], site_packages: Sequence[StrPath] | None,
                timeout: float, python: str) -> list[CheckResult]:
    """Import ``module`` in a child interpreter (``sys.executable``) and read what it did."""
    import json
    import signal
    import subprocess

    env = dict(os.environ)
    if site_packages is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            [*(os.fspath(p) for p in site_packages), *filter(None, [env.get("PYTHONPATH")])])
    cmd = [python, "-c", _PROBE, json.dumps({"module": module, "names": list(names)})]
    import tempfile

    # Output goes to files, not pipes: a child the import leaves running keeps a pipe open
    # and would make us wait for it. Its own session: at the end the whole group goes (a
    # compiling loader's ninja and cc1plus too), and at a timeout what ran is named.
    with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:
        try:
            proc = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, env=env,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            return [CheckResult("deep probe", "fail", f"cannot run {python}: "
                                f"{e.strerror or e}", "pass the image's interpreter with "
                                "--python")]
        result = _wait_probe(proc, module, timeout)
        if result is not None:
            return [result]
        stdout_b, stderr_b = _tail(out_f), _tail(err_f)
    stdout = stdout_b.decode("utf-8", "replace")
    stderr = stderr_b.decode("utf-8", "replace")
    if proc.returncode < 0:
        try:
            sig = signal.Signals(-proc.returncode).name
        except ValueError:
            sig = f"signal {-proc.returncode}"
        return [CheckResult("deep probe", "fail",
                            f"importing {module} crashed the interpreter ({sig})",
                            "the build does not match this torch/python: reinstall the mooncake "
                            "release `moonpin which mooncake` names")]
    line = next((ln for ln in reversed(stdout.splitlines())
                 if ln.startswith("MOONPIN-PROBE ")), None)
    out: Any = None
    if line is not None:
        try:
            out = json.loads(line.removeprefix("MOONPIN-PROBE "))
        except ValueError:
            out = None
    if not isinstance(out, dict) or out.get("stage") not in ("torch", "import", "done") \
            or not isinstance(out.get("error", ""), (str, type(None))):
        tail = (stderr.strip().splitlines() or ["no output"])[-1][:300]
        return [CheckResult("deep probe", "fail",
                            f"the probe exited {proc.returncode} without a readable answer: "
                            f"{tail}")]
    error = str(out.get("error") or "")
    if out["stage"] == "torch":
        return [CheckResult("deep probe", "fail",
                            f"torch is installed but fails to load: {error}",
                            "reinstall torch (its shared libraries or its CUDA packages are "
                            "broken or missing)")]
    if out["stage"] == "import":
        if "visible CUDA device" in error:
            return [CheckResult("deep probe", "skip",
                                f"could not import {module} here: it compiles at first import "
                                f"and this host shows no GPU ({error[:300]}); not an "
                                "incompatibility, the light checks decide")]
        if "libcuda.so" in error:
            return [CheckResult("deep probe", "skip",
                                f"could not import {module} here: no NVIDIA driver on this host "
                                f"({error}); not an incompatibility, the light checks decide")]
        return [CheckResult("deep probe", "fail", f"import {module} fails: {error}",
                            _provider_hint(error) or "see the light checks above for the cause")]
    results = []
    missing = out.get("missing") or []
    if missing:
        results.append(CheckResult("deep names", "fail",
                                   f"{module} imports but lacks {', '.join(missing)}"))
    else:
        results.append(CheckResult("deep import", "pass",
                                   f"import {module} works with torch {out.get('torch')}"))
    if "capability_error" in out:
        results.append(CheckResult("deep backends", "warn",
                                   "cannot read torch.distributed.Backend.backend_capability "
                                   f"({out['capability_error']}): torch internals moved"))
    else:
        cap = out.get("capability") or {}
        lacking = [b for b in BACKENDS if b not in cap]
        if lacking:
            results.append(CheckResult("deep backends", "fail",
                                       f"after import, torch has no {' / '.join(lacking)} backend "
                                       f"registered (registered: {', '.join(cap) or 'none'})"))
        else:
            results.append(CheckResult("deep backends", "pass", "registered: " + ", ".join(
                f"{k} {tuple(v) if isinstance(v, list) else v}" for k, v in cap.items())))
    return results


def _sglang_requirement(paths: Sequence[str], sglang: _Dist | None, kb: _KB,
                        add: Callable[[CheckResult], None],
                        source_cache: bool = True, pkg: str | None = None,
                        ) -> _Requirement | None:
    version = sglang.version if sglang else None
    kb_req = kb.requirement(version)
    if pkg is None:
        pkg = _find_package(paths, "sglang")
    src: _Requirement | None = None
    why = "the sglang package folder was not found"
    if pkg is not None:
        try:
            src = _analyze_sglang(pkg, source_cache)
        except OSError as e:
            why = f"its sources cannot be read ({type(e).__name__}: {e.filename}: {e.strerror})"
    label = f"sglang {version}" if version else "sglang (no distribution metadata)"
    if src is not None:
        what = _describe(src)
        if kb_req is not None and (kb_req.module, set(kb_req.names)) != (src.module,
                                                                         set(src.names)):
            add(CheckResult("sglang", "warn",
                            f"{label}: the installed sources need {what}, the KB records "
                            f"{_describe(kb_req)}; using the sources",
                            "refresh the KB (`moonpin scrape`) if this is a release build",
                            src.evidence))
        else:
            note = "" if kb_req is not None or not kb.ok else " (not in the KB: sources only)"
            add(CheckResult("sglang", "pass", f"{label} needs {what}{note}",
                            evidence=src.evidence))
        return src
    if kb_req is not None:
        add(CheckResult("sglang", "warn", f"{label}: {why}; using the KB record: "
                        f"{_describe(kb_req)}"))
        return kb_req
    if sglang is None and pkg is None:
        add(CheckResult("sglang", "warn", "sglang is not installed here; accepting either "
                        "mooncake.pg or mooncake.ep"))
    else:
        add(CheckResult("sglang", "warn", f"{label}: {why} and the KB has no record of it; "
                        "accepting either mooncake.pg or mooncake.ep"))
    return None


#: What a loader-less build says it was built for (as scrapers/mooncake.py reads it:
#: 0.3.7's ``ep.so`` holds "Mooncake Backend requires torch==2.8.0").
_REQUIRES_TORCH = b"requires torch=="


def _built_for(path: str) -> str | None:
    """The torch release a build's bytes say it requires, or None."""
    data = _read_bytes(path, _CAP_BUILD, "extension build")
    at = data.find(_REQUIRES_TORCH)
    if at < 0:
        return None
    start = at + len(_REQUIRES_TORCH)
    end = start
    while end < len(data) and end - start < 64 and (
            chr(data[end]).isalnum() or data[end] in b".+"):
        end += 1
    text = data[start:end].decode("ascii", "replace").rstrip(".")
    return text if text[:1].isdigit() else None


def _check_direct_build(path: str, req: Any, torch: _Torch | None, paths: Sequence[str],
                        kb: _KB, fixer: Fixer, add: Callable[[CheckResult], None]) -> None:
    """A module that is an extension itself, with no Python loader: the torch it was built
    for (from its bytes), then its names, backends, CUDA and libraries, as for a build."""
    from resolver import rule

    if torch is None:
        add(CheckResult("build", "skip", "no torch: whether the build fits is unknown"))
        return
    b = _read_build(path, (*req.names, *req.optional_names, *req.backends))
    if b.error:
        add(CheckResult("build facts", "fail", b.error, fixer.reinstall()))
        return
    try:
        built_for = facts_memo().get("built-for", path, lambda: _built_for(path),
                                     _str_or_none)
    except OSError as e:
        add(CheckResult("build", "fail", f"cannot read {path}: {e.strerror or e}",
                        fixer.reinstall()))
        return
    d = rule.direct_build(_name(path), built_for if isinstance(built_for, str) else None,
                          "bytes", torch.version)
    add(CheckResult("build", "pass" if d.ok else "skip" if d.ok is None else "fail",
                    d.detail, None if d.ok is not False else fixer.line(), (path,)))
    if d.ok is False:
        return
    _judge_builds(req, [rule.BuildFacts(path, b.names, b.backends, b.cuda)], torch,
                  req.module, kb, fixer, add)
    if _suffix(path) == ".so":
        _check_libraries([path], paths, add, fixer)


def _rule_requirement(req: _Requirement | None) -> Any:
    """The image's SGLang requirement as :class:`resolver.rule.Requirement`: unknown (no
    sources, no KB record) means either half of the rename, and the names unchecked."""
    from resolver import rule

    if req is None or req.module is None:
        return rule.Requirement("mooncake.pg", backends=BACKENDS, alternatives=("mooncake.ep",),
                                release="this SGLang")
    return rule.Requirement(req.module, req.names, req.backends, req.optional_names,
                            req.alternatives, release="this SGLang")


def _judge_builds(req: Any, facts: list[Any], torch: _Torch, module: str, kb: _KB,
                  fixer: Fixer, add: Callable[[CheckResult], None], jit: bool = False) -> None:
    """Names, backends and CUDA major, decided by :mod:`resolver.rule` as the KB query
    decides them, in its words; the image adds where a missing name first appears and
    the install line."""
    from resolver import rule

    have: set[str] = set().union(*(f.names for f in facts))
    missing = [n for n in req.names if n not in have]
    if req.names:
        d = rule.names(req, facts)
        if d.ok is False:
            firsts = "; ".join(f"{n} first in {_first_providing(kb, n) or 'no KB release'}"
                               for n in missing)
            add(CheckResult("names", "fail", f"{d.detail} ({firsts}; the import succeeds, the "
                            "engine fails later)", fixer.line()))
        else:
            add(CheckResult("names", "pass" if d.ok else "skip", d.detail))
    else:
        add(CheckResult("names", "skip", "no required names known (sources and KB unavailable)"))
    absent = rule.optional_missing(req, facts)
    if absent and not missing:
        add(CheckResult("optional names", "pass",
                        f"{module} lacks {', '.join(absent)}, which this SGLang uses only behind "
                        "an optional import (it runs without)"))
    d = rule.backends(req, facts)
    add(CheckResult("backends", "pass" if d.ok else "fail", d.detail,
                    None if d.ok else fixer.line()))
    t = rule.TorchFacts(torch.version, torch.cuda, True, torch.cuda_evidence)
    d = rule.cuda_major(facts, t, jit=jit)
    if d.ok is None:
        add(CheckResult("cuda", "skip", d.detail))
    elif d.ok:
        add(CheckResult("cuda", "pass", d.detail))
    elif torch.cuda is None:
        add(CheckResult("cuda", "fail", d.detail, fixer.cuda_torch()))
    else:
        bad = sorted({f.cuda for f in facts if f.cuda not in (None, torch.cuda)})
        add(CheckResult("cuda", "fail", f"{d.detail}: the build needs libcudart.so.{bad[0]} "
                        "(wrong mooncake distribution)", fixer.line()))


def _describe(r: _Requirement) -> str:
    if r.module is None:
        return "no mooncake process-group module"
    names = ", ".join(r.names) or "no names"
    backends = ", ".join(r.backends) or "no backend literals"
    return f"{r.module} ({names}; backends {backends})"


def _check_pg(pkg: str, paths: Sequence[str], req: _Requirement | None, torch: _Torch | None,
              kb: _KB, fixer: Fixer,
              add: Callable[[CheckResult], None]) -> None:
    if req is not None and req.module is None:
        add(CheckResult("pg module", "pass", "this SGLang imports no mooncake process-group "
                        "module"))
        return
    unlisted = _unlistable(pkg)
    if unlisted is not None:  # the importer finds nothing in it: no package diagnosis
        add(CheckResult("pg module", "fail", f"{unlisted}: `import mooncake.pg` / "
                        "`mooncake.ep` fails whatever is installed", "make it readable by the "
                        f"worker's user (chmod -R a+rX {pkg})", (pkg,)))
        return
    from resolver import rule

    rreq = _rule_requirement(req)
    shipped = [m for m in PG_MODULES if _module_file(pkg, m.split(".")[1])]
    accepted = [m for m in (rreq.module, *rreq.alternatives) if m]
    module = rule.choose_module(rreq, shipped)
    odd = [w for m in accepted for w in _not_files(pkg, m.split(".")[1])]
    if module is None and odd:
        add(CheckResult("pg module", "fail", f"{'; '.join(odd)}: the importer skips it, so "
                        f"`import {accepted[0]}` fails", fixer.reinstall(), (pkg,)))
        return
    if module is None:
        ships = " and ".join(shipped) or "neither mooncake.pg nor mooncake.ep"
        add(CheckResult("pg module", "fail",
                        f"the engine imports {' or '.join(accepted)}; the installed mooncake "
                        f"ships {ships} (the other half of the ep/pg rename)", fixer.line(),
                        (pkg,)))
        return
    short = module.split(".")[1]
    loader_path = _module_file(pkg, short)
    assert loader_path is not None
    lname = _name(loader_path)
    add(CheckResult("pg module", "pass", f"{module} found: {lname}",
                    evidence=(loader_path,)))
    if _suffix(loader_path) != ".py":  # the module is the build itself (0.3.7's ep.so)
        _check_direct_build(loader_path, rreq.replace(module=module), torch, paths, kb,
                            fixer, add)
        return
    try:
        scheme = facts_memo().get("loader-v6\0" + module, loader_path,
                                  lambda: _read_scheme(loader_path, module), _scheme_shape)
    except OSError as e:
        add(CheckResult("loader", "fail", f"cannot read {loader_path}: {e.strerror}"))
        return
    required_names = tuple(req.names) if req is not None else ()
    optional_names = tuple(req.optional_names) if req is not None else ()
    if not isinstance(scheme, dict) or "problem" not in scheme:  # a damaged memo entry
        scheme = _read_scheme(loader_path, module)
    if scheme["problem"]:
        add(CheckResult("loader", "fail", f"{loader_path}: {scheme['problem']}; "
                        f"`import {module}` fails", fixer.reinstall(), (loader_path,)))
        return
    if scheme["kind"] == "unknown":
        # No mooncake release ships such a loader (every one in the KB is prebuilt or
        # compiles at import): a changed or damaged file, whose loading cannot be read.
        add(CheckResult("loader", "fail", f"{lname}: {scheme['note']}; {_UNREADABLE_SCHEME}",
                        "restore it (" + fixer.reinstall() + "), or run with --deep to "
                        "import it", (loader_path,)))
        return
    if scheme["kind"] == "jit-compile":
        if scheme.get("sources") and torch is not None:  # what the compiled module binds
            names = set(scheme.get("source_names") or ())
            _judge_builds(rreq.replace(module=module),
                          [rule.BuildFacts(loader_path, names - set(BACKENDS),
                                           names & set(BACKENDS))],
                          torch, module, kb, fixer, add, jit=True)
        torch_pkg = _find_package(paths, "torch")
        consts = _torch_version_py(torch_pkg) if torch_pkg else None
        _check_jit(scheme, paths, loader_path, pkg, consts, add)
        return
    if torch is None:
        add(CheckResult("build", "skip", "no torch: the build the loader picks is unknown"))
        return
    if module != rreq.module:
        add(CheckResult("fallback", "pass", f"this mooncake has no {rreq.module}; SGLang falls "
                        f"back to {module} on ImportError, which it has"))
    rreq = rreq.replace(module=module)
    builds: list[_BuildFacts] = []
    placeholder = scheme["placeholder"]
    # the loader's own suffix rule, as the KB query applies it (resolver.rule)
    rscheme = rule.Scheme(scheme["kind"], scheme["imports"], scheme["version_regex"],
                          scheme["separator"], loader_path, scheme["note"])
    for template in scheme["imports"]:
        name = template
        if placeholder in name:
            suffix = facts_memo().get(
                f"suffix-v3\0{module}\0{torch.version}", loader_path,
                lambda: rule.loader_suffix(rscheme, torch.version), _str_or_none)
            if not isinstance(suffix, str):
                add(CheckResult("loader", "fail",
                                f"{lname}: its pattern {scheme['version_regex']!r} does not "
                                f"match torch's version {torch.version!r}; `import {module}` "
                                "fails", fixer.reinstall(), (loader_path,)))
                return
            name = name.replace(placeholder, suffix)
        bshort = name.removeprefix("mooncake.")
        found = _module_file(pkg, bshort)
        odd = _not_files(pkg, bshort) if found is None else []
        if odd:
            add(CheckResult("build", "fail", f"{lname} imports {name} for torch "
                            f"{torch.version}; {'; '.join(odd)}: the importer skips it, so the "
                            "import fails", fixer.reinstall(), (pkg,)))
            return
        if found is None:
            head = template.removeprefix("mooncake.").partition(placeholder)[0]
            others = _shipped_like(pkg, head) if placeholder in template else []
            same = [o for o in others if o.split(".", 1)[0] == bshort]
            msg = (f"{lname} imports {name} for torch {torch.version}; no such "
                   "build is installed")
            if same:
                msg += f" for this Python (only {', '.join(same)})"
            msg += f"; builds shipped: {', '.join(others) or 'none'}"
            add(CheckResult("build", "fail", msg, fixer.line(), (pkg,)))
            return
        builds.append(_read_build(found, (*required_names, *optional_names, *rreq.backends)))
    add(CheckResult("build", "pass", "loader finds " + ", ".join(_name(b.path) for b in builds),
                    evidence=tuple(b.path for b in builds)))
    errors = [b.error for b in builds if b.error]
    if errors:
        add(CheckResult("build facts", "fail", "; ".join(errors), fixer.reinstall()))
        return
    reason = _vendor_reason(torch.version)
    pg_build = next((b for b in builds
                     if placeholder in scheme["imports"][builds.index(b)]), None)
    if reason and pg_build is not None:
        add(CheckResult("torch build", "warn",
                        f"{reason}: the loader maps it onto {_name(pg_build.path).split('.')[0]}, "
                        "a build for the upstream release; it loads but is not proven "
                        "ABI-compatible with this torch", "use an upstream torch release, or "
                        "build mooncake from source against this torch"))
    facts = [rule.BuildFacts(b.path, b.names, b.backends, b.cuda) for b in builds]
    _judge_builds(rreq, facts, torch, module, kb, fixer, add)
    so_builds = [b.path for b in builds if _suffix(b.path) == ".so" and b.error is None]
    if so_builds:
        _check_libraries(so_builds, paths, add, fixer)


# ------------------------------------------------------------------ shared libraries


def _follow(paths: Sequence[str]) -> Callable[[str], bool]:
    """Whether a library found is one the image's mooncake ships (its own folder, or a
    ``*.libs`` folder a repaired wheel vendors): read and judged in turn."""
    roots = [os.path.join(sp, "mooncake") for sp in paths]

    def follow(where: str) -> bool:
        return (os.path.basename(os.path.dirname(where)).endswith(".libs")
                or any(_within(where, r) for r in roots))

    return follow


def _within(path: str, folder: str) -> bool:
    """``PurePath(path).is_relative_to(folder)``: lexical, as pathlib has it."""
    path, folder = os.path.normpath(path), os.path.normpath(folder)
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _check_libraries(builds: Sequence[str], paths: Sequence[str],
                     add: Callable[[CheckResult], None], fixer: Fixer | None = None) -> None:
    """Every shared library the build needs, and the ones it ships need, found and mapped
    as the dynamic loader would (:mod:`resolver.ldso`)."""
    from resolver import ldso

    cache = set() if "MOONPIN_CHECK_SYSTEM_LIBS" in os.environ else ldso.ld_cache_names()
    res = ldso.resolve(builds, ldso.image_lib_dirs(paths), cache, _follow(paths))
    for path, problem in sorted(res.bad.items()):
        add(CheckResult("libraries", "fail",
                        f"{path} cannot be loaded: {problem}",
                        "reinstall the mooncake distribution that ships it (see the install "
                        "line above), or restore the file", (path,)))
    driver = {n: o for n, o in res.missing.items() if n.startswith("libcuda.so")}
    others = {n: o for n, o in res.missing.items() if n not in driver}
    if others:
        detail = "; ".join(f"{n} (needed by {o}): " + (_provider_hint(
            f"{n}: cannot open shared object file") or "").split("; it comes from ", 1)[-1]
            for n, o in sorted(others.items()))
        fix = "install what provides each one in the image"
        if fixer is not None and all(n.startswith(("libc10_cuda.so", "libtorch_cuda.so"))
                                     for n in others):
            fix = fixer.cuda_torch()  # a CPU torch: the same release's CUDA build
        elif fixer is not None and all(n.startswith(_CUDART) for n in others):
            fix = fixer.line()  # the build is for another CUDA: the distribution that fits
        add(CheckResult("libraries", "fail", f"{len(others)} shared librar"
                        f"{'y' if len(others) == 1 else 'ies'} the build needs cannot be "
                        f"found: {detail}", fix))
    elif not res.bad:
        add(CheckResult("libraries", "pass",
                        f"{res.count} shared-library needs of {res.objects} objects resolve"
                        + (" (but for the NVIDIA driver)" if driver else "")))
    if driver:
        add(CheckResult("driver", "warn",
                        f"{', '.join(sorted(driver))} (the NVIDIA driver) is not visible here; "
                        "a worker needs it (the NVIDIA container runtime mounts it), a build or "
                        "CI host without a GPU does not have it"))


def _check_feature(feature: str, pkg: str, version: str | None, kb: _KB,
                   add: Callable[[CheckResult], None], sglang_pkg: str | None = None,
                   source_cache: bool = True) -> None:
    """A mooncake feature other than elastic EP: the modules and names this SGLang release
    imports for it unconditionally must be installed. What it imports comes from the KB's
    import records, or, for a release the KB does not know, from the installed sources."""
    known = kb.feature_imports(version, feature) if kb.ok else None
    records: list[dict[str, Any]] = known or []
    origin = ""
    if known is None:
        scanned = None
        if sglang_pkg is not None:
            from resolver import sources

            try:
                scanned = sources.scan(sglang_pkg, use_cache=source_cache, every_import=True)
            except OSError:
                scanned = None
        if scanned is None:
            add(CheckResult(feature, "skip", "what this SGLang imports for it is neither in the "
                            "knowledge base nor readable from its sources; only the "
                            "installation is checked"))
            return
        records = [{"module": i.module, "names": list(i.names), "feature": i.feature,
                    "optional": i.optional, "member": i.path, "line": i.line}
                   for i in scanned.feature_imports]
        origin = " (from the installed sources; the KB does not know this release)"
    needs: dict[str, set[str]] = {}
    for imp in records:
        if imp.get("feature") == feature and not imp.get("optional"):
            needs.setdefault(imp["module"], set()).update(imp.get("names") or ())
    if not needs:
        add(CheckResult(feature, "pass", f"sglang {version} imports no mooncake module for it "
                        "unconditionally" + origin))
        return
    problems = []
    for module, names in sorted(needs.items()):
        short = module.removeprefix("mooncake.")
        path = (_module_file(pkg, short) if short != module
                else os.path.join(pkg, "__init__.py"))
        if path is None or not os.path.isfile(path):
            problems.append(f"{module} is not installed")
            continue
        facts = _read_build(path, names)
        if facts.error:
            problems.append(facts.error)
            continue
        absent = sorted(names - facts.names) if _suffix(path) in (".py", ".so") else []
        if absent and _suffix(path) == ".so":
            # The linker merges a string into the tail of a longer one ("TransferEngine" into
            # "InnerTransferEngine"): a NUL-terminated tail is the same C string.
            data = _read_bytes(path, _CAP_BUILD, "extension build")
            absent = [n for n in absent if n.encode() + b"\0" not in data]
        if absent:
            problems.append(f"{module} lacks {', '.join(absent)}")
    evidence = tuple(f"{i['member']}:{i['line']}" for i in records
                     if i.get("feature") == feature and not i.get("optional"))
    if problems:
        add(CheckResult(feature, "fail", f"sglang {version} needs for {feature}: "
                        + "; ".join(problems) + origin, "install the mooncake release this "
                        "SGLang release is built and tested with", evidence))
    else:
        add(CheckResult(feature, "pass", "provides " + ", ".join(
            f"{m} ({', '.join(sorted(n)) or 'module'})" for m, n in sorted(needs.items()))
            + origin, evidence=evidence))


_VERSION_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.+")


def _exact_pin(spec: str) -> str | None:
    """The version of ``torch==X`` (also ``torch (==X)``, spaces allowed), else None."""
    rest = spec.strip()
    if not rest.startswith("torch"):
        return None
    rest = rest[5:].strip()
    if rest.startswith("(") and rest.endswith(")"):
        rest = rest[1:-1].strip()
    if not rest.startswith("=="):
        return None
    version = rest[2:].strip()
    if not version or not version[0].isdigit() or not set(version) <= _VERSION_CHARS:
        return None
    return version


def _requirement_name(line: str) -> str:
    """The project name a ``Requires-Dist`` line starts with."""
    text = line.strip()
    for i, c in enumerate(text):
        if c.isspace() or c in ";<>=!~[(":
            return text[:i]
    return text


def _check_sglang_torch(sglang: _Dist, torch_version: str, fixer: Fixer,
                        add: Callable[[CheckResult], None]) -> None:
    """SGLang pins the torch it is built for (``torch==2.14.1``): another one passes the
    mooncake checks and still breaks SGLang's own kernels. A warning (``--strict`` fails)."""
    lines = [ln for ln in sglang.requires if _canon(_requirement_name(ln)) == "torch"]
    unmet: list[str] = []
    for line in lines:
        spec, _, marker = line.partition(";")
        spec = spec.strip()
        if "extra" in marker:
            continue  # an optional extra's pin does not bind the base install
        pinned = _exact_pin(spec)
        if pinned and not marker.strip():  # the usual case, without loading packaging
            if torch_version.split("+")[0] != pinned.split("+")[0]:
                unmet.append(spec)
            continue
        from packaging.requirements import InvalidRequirement, Requirement

        try:
            r = Requirement(line[:4096])
            if r.marker is not None and not r.marker.evaluate({"extra": ""}):
                continue
            if not r.specifier.contains(torch_version.split("+")[0], prereleases=True):
                unmet.append(spec)
        except (InvalidRequirement, ValueError, TypeError, LookupError):
            # an invalid line or marker (UndefinedComparison is a ValueError, an undefined
            # environment name a LookupError) says nothing about the pin
            continue
    if unmet:
        add(CheckResult("torch requirement", "warn",
                        f"sglang {sglang.version} requires {', '.join(unmet)}; torch "
                        f"{torch_version} is installed (its own kernels are built for that "
                        "torch)", fixer.torch_fix(_exact_pin(unmet[0]), unmet[0]),
                        (os.path.join(sglang.root,
                                      f"sglang-{sglang.version}.dist-info", "METADATA"),)))


def _check_launch(argv: list[str], version: str | None, kb: _KB,
                  add: Callable[[CheckResult], None]) -> None:
    """The elastic-EP argument rules of the installed SGLang release (from the KB) on the
    worker's launch arguments: what ``moonpin args`` does, at worker start."""
    if version is None:
        add(CheckResult("launch args", "skip", "SGLang is not installed: no rules to check"))
        return
    record = None
    if kb.ok:
        from resolver.resolved import load_launch

        record = load_launch(kb.path, version)
        if record is None:
            rec = next((r for r in (kb.doc() or {}).get("sglang") or ()
                        if isinstance(r, dict) and r.get("version") == version), None)
            record = rec.get("launch") if isinstance(rec, dict) else None
    if not isinstance(record, dict) or record.get("error"):
        why = (record or {}).get("error") if isinstance(record, dict) else None
        add(CheckResult("launch args", "skip", f"the knowledge base holds no elastic-EP launch "
                        f"rules for sglang {version}" + (f" ({why})" if why else "")))
        return
    from resolver import launch_args as la

    accepted = record.get("option_names") or None
    try:
        flags, rules, constants = la.rules_from_json(record)
        parsed = la.parse_launch(flags, argv, accepted)
        verdicts = la.check(rules, flags, argv, constants=constants, parsed=parsed)
        strange = parsed[la.UNRECOGNIZED]
    except (KeyError, TypeError) as e:
        add(CheckResult("launch args", "warn", f"the KB's launch rules for sglang {version} "
                        f"are unreadable ({type(e).__name__}: {e})",
                        "run `moonpin scrape --full` to rebuild the KB"))
        return
    except ValueError as e:  # SGLang's own parser rejects this line too
        add(CheckResult("launch args", "fail", f"sglang {version} rejects the launch "
                        f"arguments: {e}", "fix the launch arguments"))
        return
    if isinstance(strange, list) and strange:
        add(CheckResult("launch args", "warn", f"sglang {version} has no option "
                        f"{', '.join(strange)}: launched by SGLang itself the worker stops with "
                        "'unrecognized arguments' (a wrapper such as Dynamo's may own them)",
                        "drop or rename them as this release spells its options"))
    bad = [v for v in verdicts if v.status == "violated"]
    unchecked = sum(v.status == "not checked" for v in verdicts)
    for v in bad:
        add(CheckResult("launch args", "fail", v.message,
                        "change " + ", ".join(v.flags) + " as the message says", (v.evidence,)))
    if not bad:
        add(CheckResult("launch args", "pass", f"{len(verdicts)} elastic-EP argument rules of "
                        f"sglang {version} hold ({unchecked} not checkable offline)"))


def _visible_gpu() -> bool:
    """An NVIDIA device node (what the container runtime mounts for a GPU) or an explicit
    TORCH_CUDA_ARCH_LIST: what the compiling loader needs to pick architectures."""
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return True
    return any(n.startswith("nvidia") and n[6:].isdigit() for n in _list("/dev"))


def _check_jit(scheme: dict[str, Any], paths: Sequence[str], loader: str, pkg: str,
               torch_consts: dict[str, Any] | None, add: Callable[[CheckResult], None]) -> None:
    """A loader that compiles at first import: an adapter it compiled for this image is
    reused; otherwise the tools this torch needs must be there, and a host with no visible
    GPU cannot compile (a limit of the host, like a missing driver, not of the image)."""
    from resolver import jit
    from resolver.fixes import PREBUILD

    roots = jit.cache_roots(scheme.get("cache") or {})
    adapters = jit.compiled_adapters(roots, pkg)
    if adapters:
        add(CheckResult("adapter", "pass",
                        f"{_name(loader)} compiles at first import; an adapter compiled for "
                        f"this image is in {os.path.dirname(adapters[0])}, which it reuses "
                        "while torch and its sources are unchanged (the deep probe confirms)",
                        evidence=(adapters[0],)))
        _check_libraries(adapters[:1], paths, add)
        return
    found: list[str] = []
    missing: list[str] = []
    for tool in jit.tools_for(scheme["toolchain"], torch_consts):
        if tool.startswith("ninja"):
            got = _find_ninja(paths)
        elif tool.startswith("nvcc"):
            got = _find_nvcc()
        else:
            got = _which(tool.split()[0])
        (found if got else missing).append(f"{tool} at {got}" if got else tool)
    where = f" (looked in {roots[0]})" if roots else ""
    if missing:
        add(CheckResult("toolchain", "fail",
                        f"{_name(loader)} compiles at first import, no adapter is compiled "
                        f"for this image{where}, and it needs {', '.join(missing)}, not found",
                        "install " + ", ".join(missing) + f" in the image, or {PREBUILD}",
                        (loader,)))
        return
    if not _visible_gpu():
        add(CheckResult("toolchain", "warn",
                        f"{_name(loader)} compiles at first import and no adapter is compiled "
                        f"for this image{where}; this host shows no GPU and "
                        "TORCH_CUDA_ARCH_LIST is unset, so it cannot compile here (not a "
                        "fault of the image: a worker with a GPU compiles for minutes at "
                        "first import)", PREBUILD, (loader,)))
        return
    add(CheckResult("toolchain", "pass",
                    f"{_name(loader)} compiles at first import with {', '.join(found) or 'no '}"
                    "; note: the first import compiles for minutes (about 2.5 min on 2 cores); "
                    + PREBUILD, evidence=(loader,)))


# ------------------------------------------------------------------ command line


def _seconds(text: str) -> float:
    """A finite positive number of seconds (argparse's type for --deep-timeout)."""
    import argparse

    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value < 1e9):  # also refuses nan and inf
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} is not a number of seconds above 0 (e.g. --deep-timeout 300)")
    return value


def _parser() -> Any:
    import argparse

    p = argparse.ArgumentParser(prog="moonpin check",
                                description="check this image's mooncake before worker start",
                                epilog="exit codes: 0 usable; 1 not usable (or, with --strict, "
                                       "a warning); 2 could not check")
    p.add_argument("--elastic-ep-backend", default=None, metavar="BACKEND",
                   help="the worker's --elastic-ep-backend (mooncake: check what it needs)")
    p.add_argument("--enable-dp-attention", action="store_true",
                   help="accepted; does not change the light checks")
    p.add_argument("--site-packages", action="append", default=None,
                   metavar="PATH", help="read this folder instead of sys.path (repeatable); "
                   "its Python version comes from its path (lib/python3.X/site-packages)")
    p.add_argument("--python", default=None, metavar="PATH",
                   help="check this interpreter's environment (its sys.path, Python version "
                   "and extension suffixes; the deep probe runs it). Default: an active "
                   "virtualenv other than moonpin's own, else this interpreter")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="one line when usable; only the failing checks otherwise")
    p.add_argument("--kb", default=None, help="knowledge-base file (default: the one "
                   "commands read)")
    p.add_argument("--strict", action="store_true", help="warnings fail")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--deep", action=argparse.BooleanOptionalAction, default=None,
                   help="import the module in a child interpreter (default: on for elastic EP)")
    p.add_argument("--deep-timeout", type=_seconds, default=120.0, metavar="SECONDS",
                   help="how long the deep probe may take (default 120)")
    p.add_argument("--no-cache", dest="cache", action="store_false",
                   help="read every SGLang source; neither use nor write the analysis cache "
                        "($MOONPIN_CACHE_DIR, default ~/.cache/moonpin)")
    return p


class _Args:
    """What :func:`_parser` would return, for the common command lines."""

    def __init__(self) -> None:
        self.elastic_ep_backend: str | None = None
        self.enable_dp_attention = False
        self.site_packages: list[str] | None = None
        self.python: str | None = None
        self.quiet = False
        self.kb: str | None = None
        self.strict = False
        self.json = False
        self.deep: bool | None = None
        self.deep_timeout = 120.0
        self.cache = True


_FLAGS_ONLY = {"--enable-dp-attention": ("enable_dp_attention", True),
               "--strict": ("strict", True), "--json": ("json", True),
               "--deep": ("deep", True), "--no-deep": ("deep", False),
               "--no-cache": ("cache", False), "-q": ("quiet", True),
               "--quiet": ("quiet", True)}
_VALUED = {"--elastic-ep-backend", "--site-packages", "--kb", "--deep-timeout", "--python"}


def _fast_parse(argv: Sequence[str]) -> _Args | None:
    """Parse the options of :func:`_parser` without loading argparse (a worker start pays
    for every import); None for anything unusual (help, abbreviations, errors), which
    argparse then handles with its own messages."""
    ns = _Args()
    i = 0
    while i < len(argv):
        opt, eq, value = argv[i].partition("=")
        i += 1
        if opt in _FLAGS_ONLY and not eq:
            attr, val = _FLAGS_ONLY[opt]
            setattr(ns, attr, val)
            continue
        if opt not in _VALUED:
            return None
        if not eq:
            if i >= len(argv) or argv[i].startswith("-"):
                return None
            value = argv[i]
            i += 1
        if opt == "--elastic-ep-backend":
            ns.elastic_ep_backend = value
        elif opt == "--site-packages":
            ns.site_packages = [*(ns.site_packages or []), value]
        elif opt == "--kb":
            ns.kb = value
        elif opt == "--python":
            ns.python = value
        else:
            try:
                ns.deep_timeout = float(value)
            except ValueError:
                return None
            if not (0 < ns.deep_timeout < 1e9):
                return None  # argparse says why
    return ns


def main(argv: list[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    launch: list[str] = []
    if "--" in args_in:
        i = args_in.index("--")
        args_in, launch = args_in[:i], args_in[i + 1:]
    ns = _fast_parse(args_in)
    if ns is None:  # help, or something to complain about: argparse says it properly
        try:
            ns = _parser().parse_args(args_in)
        except SystemExit as e:  # argparse: bad arguments are "could not check"
            return 2 if e.code else 0
    report = check_image(elastic_ep_backend=ns.elastic_ep_backend, launch_args=launch,
                         site_packages=ns.site_packages, kb_path=ns.kb, strict=ns.strict,
                         deep=ns.deep, deep_timeout=ns.deep_timeout, source_cache=ns.cache,
                         python=ns.python)
    if ns.json:
        print(report.to_json())
    elif ns.quiet:
        print("\n".join(report.quiet_lines()))
    else:
        print("\n".join(report.lines()))
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
