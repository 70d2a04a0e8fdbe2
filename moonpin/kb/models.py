"""Pydantic models of everything the knowledge base records.

Every fact carries its evidence: the artifact it was read from (filename and
the sha256 the index publishes) at release or wheel level, and the member path
and line inside it at fact level. Models are strict and immutable; they are
validated where data enters (the KB file, an HTTP response), nowhere else.

Version strings are stored as the index spells them; code compares them through
``packaging.version.Version``.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from moonpin.kb.schema import READABLE_SCHEMAS, SCHEMA_VERSION

__all__ = [
    "READABLE_SCHEMAS",
    "SCHEMA_VERSION",
    "Artifact",
    "BackendImport",
    "BackendUse",
    "Build",
    "CallArity",
    "ChoiceImport",
    "DistPin",
    "KnowledgeBase",
    "LaunchBackend",
    "LaunchFlag",
    "LaunchRule",
    "LaunchRules",
    "LaunchWrite",
    "LoaderImport",
    "LoaderRule",
    "LoaderScheme",
    "Model",
    "MooncakeImport",
    "MooncakePin",
    "MooncakeRelease",
    "MooncakeWheel",
    "NativeBuild",
    "NativeRelease",
    "NativeWheel",
    "PGRequirement",
    "ParseFailure",
    "RuleStep",
    "ScrapeInfo",
    "SglangRelease",
    "TorchRelease",
    "TorchVariant",
    "UnmetRequirement",
    "Unread",
    "files_path",
]


Feature = Literal[
    "elastic-ep", "moe-a2a", "pd-disaggregation", "hicache", "weight-transfer", "other"
]


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


def files_path(url: str, index_url: str | None = None) -> str:
    """The path of a file's absolute ``url`` relative to the index's files.

    An index serves its files under ``<index>/packages/`` (the JSON API's own relative
    links, ``../../packages/...``, point there) or links them on a separate file host,
    whose root then is the files' root. Either way the result carries no host name, and
    ``urljoin(<index>/packages/, path)`` fetches the file again from an index laid out
    like the package index.
    """
    if index_url:
        root = index_url.rstrip("/") + "/packages/"
        if url.startswith(root):
            return url[len(root):]
    return urlsplit(url).path.lstrip("/")


class Artifact(Model):
    """One file as the index publishes it; the sha256 is its identity, not the version.

    ``path`` is where the index's files hold it (see :func:`files_path`), never a host;
    ``url`` is set only for an artifact the user named (a source archive, a local tree).
    """

    filename: str
    path: str = ""
    url: str | None = None
    sha256: str
    size: int = Field(ge=0)
    yanked: bool = False

    @model_validator(mode="after")
    def _located(self) -> Artifact:
        if not self.path and self.url is None:
            raise ValueError(f"artifact {self.filename!r} has neither a path nor a url")
        return self


# --------------------------------------------------------------------------- sglang


class MooncakeImport(Model):
    """One import of a ``mooncake`` module found in an SGLang source file."""

    module: str
    names: tuple[str, ...] = ()
    alias: str | None = None
    member: str
    line: int
    function: str | None = None
    optional: bool = False
    alternatives: tuple[str, ...] = ()
    feature: Feature = "other"
    dynamic: bool = False


class CallArity(Model):
    """How a name imported from mooncake is called (its constructor grew over releases)."""

    module: str
    name: str
    member: str
    line: int
    function: str | None = None
    positional: int
    keywords: tuple[str, ...] = ()
    starred: bool = False


class BackendUse(Model):
    """A ``"mooncake"`` / ``"mooncake-cpu"`` literal used as a process-group backend."""

    value: str
    member: str
    line: int
    function: str | None = None
    context: str


class ParseFailure(Model):
    """A source file that could not be analysed: recorded, never skipped silently."""

    member: str
    error: str


class PGRequirement(Model):
    """What one SGLang release needs of mooncake's torch ProcessGroup extension.

    ``module`` is None when the release imports no process-group module at all
    (then it is compatible with any mooncake, or none installed).
    """

    module: str | None
    alternatives: tuple[str, ...] = ()
    names: tuple[str, ...] = ()  # required: imported or called unconditionally
    optional_names: tuple[str, ...] = ()  # reached only through optional imports
    backends: tuple[str, ...] = ()
    optional: bool = False
    evidence: tuple[str, ...] = ()  # "member:line" of the imports it was derived from


class MooncakePin(Model):
    """A mooncake version a source tree builds or tests with (Dockerfile, CI scripts)."""

    dist: str
    spec: str
    member: str
    line: int


class LaunchFlag(Model):
    """One server option as the release declares it (``default``/``const`` as JSON text)."""

    name: str
    dest: str
    default: str = "null"
    choices: tuple[str, ...] | None = None
    type: str | None = None
    action: str | None = None
    line: int = 0
    deprecated_for: tuple[str, ...] = ()
    nargs: str | None = None
    const: str = "null"
    aliases: tuple[str, ...] = ()
    path: str | None = None  # the member declaring it, when the rules span several members


class LaunchWrite(Model):
    attr: str
    value: str
    guard: str | None = None
    line: int = 0


class LaunchRule(Model):
    """An ``assert``/``raise`` of the release's argument handling, with where it sits."""

    kind: Literal["assert", "raise"]
    condition: str
    message: str
    reads: tuple[str, ...] = ()
    guard: str | None = None
    function: str
    line: int
    path: str
    writes: tuple[LaunchWrite, ...] = ()


class LaunchRules(Model):
    """The elastic-EP launch rules of one release and the options they are read from."""

    member: str
    flags: tuple[LaunchFlag, ...] = ()
    rules: tuple[LaunchRule, ...] = ()
    constants: dict[str, str] = Field(default_factory=dict)  # JSON text values
    error: str | None = None
    #: every option string the release's parser accepts (long forms and aliases), so a
    #: launch line's option the release does not know is told from one not recorded above
    option_names: tuple[str, ...] = ()


class BackendImport(Model):
    """One import in the module a backend choice makes SGLang use: ``module`` as written,
    the ``names`` of a ``from`` import, and its line in that module."""

    module: str
    names: tuple[str, ...] = ()
    line: int


class ChoiceImport(Model):
    """An import an SGLang release runs under a test on a launch argument's value that the
    choice passes (:mod:`moonpin.readers.launch.guarded`): ``module`` as written, the
    ``names`` of a ``from`` import, the ``member`` and ``line`` holding it, and the line of
    the ``test`` (``if get_exec().moe.elastic_ep_backend == "mooncake":``)."""

    member: str
    module: str
    names: tuple[str, ...] = ()
    line: int
    test: int


class LaunchBackend(Model):
    """What one choice of a backend option makes an SGLang release import, read from the
    release's own sources. Where the option keeps a module per choice
    (:data:`moonpin.readers.launch.backends.BACKEND_FLAGS`: ``--moe-a2a-backend``'s token
    dispatchers; :func:`moonpin.readers.launch.backends.backend_member`): that module
    (``member``; None: the release has none, or the option keeps none) and its imports of
    packages outside SGLang and the standard library
    (:func:`moonpin.readers.launch.server_args.backend_imports`). For every option: the
    imports the release runs under a test on the option's value that this choice passes
    (``guarded``, schema 6), and the tests above an import whose shape was not understood
    (``unread``: ``member:line: test``; such an import is neither counted nor ruled out)."""

    flag: str  # "--moe-a2a-backend", "--elastic-ep-backend"
    choice: str  # "nixl"
    member: str | None = None
    imports: tuple[BackendImport, ...] = ()
    error: str | None = None  # the module could not be read or parsed
    guarded: tuple[ChoiceImport, ...] = ()
    unread: tuple[str, ...] = ()


class DistPin(Model):
    """A Requires-Dist line of an SGLang release naming a distribution of the native
    extensions (``sglang-kernel==0.4.7``, ``flashinfer_python[cu13]==0.7.2``), verbatim
    (extras and markers kept), with its line in the METADATA member."""

    dist: str  # canonical name
    requirement: str
    member: str
    line: int


class SglangRelease(Model):
    version: str
    source: Literal["index", "path", "archive"] = "index"
    artifact: Artifact
    requires_python: str | None = None
    #: the CPython interpreters its files on the index install on (``cp311``, …; from
    #: their names, refreshed each scrape); None: any (an sdist, a pure wheel) or not known
    wheel_pythons: tuple[str, ...] | None = None
    torch_requirements: tuple[str, ...] = ()  # Requires-Dist lines naming torch, verbatim
    files_analyzed: int = 0
    imports: tuple[MooncakeImport, ...] = ()
    calls: tuple[CallArity, ...] = ()
    backends: tuple[BackendUse, ...] = ()
    parse_failures: tuple[ParseFailure, ...] = ()
    pg: PGRequirement
    mooncake_pins: tuple[MooncakePin, ...] = ()
    launch: LaunchRules | None = None
    #: what each choice of the backend options imports (schema 5; older KBs: not read)
    launch_backends: tuple[LaunchBackend, ...] = ()
    #: Requires-Dist lines naming a native-extension distribution (schema 5)
    extension_pins: tuple[DistPin, ...] = ()


# --------------------------------------------------------------------------- mooncake


class LoaderImport(Model):
    """One extension module a loader (``mooncake/pg.py``) imports.

    ``template`` is the module name with ``{torch}`` where the loader appends
    the suffix derived from ``torch.__version__`` (e.g. ``mooncake.pg_{torch}``).
    """

    template: str
    line: int
    on_missing: str | None = None  # the message the loader raises when it is absent


class LoaderScheme(Model):
    """How a loader module finds its compiled build, read from the loader's text."""

    module: str  # "mooncake.pg" or "mooncake.ep"
    member: str
    kind: Literal["prebuilt", "jit-compile", "unknown"]
    imports: tuple[LoaderImport, ...] = ()
    version_regex: str | None = None  # the regex applied to torch.__version__
    separator: str | None = None  # what replaces "." in the suffix
    toolchain: tuple[str, ...] = ()  # jit-compile: what the image must have
    sources: tuple[str, ...] = ()  # jit-compile: shipped C++/CUDA members compiled at import
    source_names: tuple[str, ...] = ()  # jit-compile: Python names the sources define
    source_backends: tuple[str, ...] = ()
    note: str | None = None
    #: jit-compile: what the loader checks before compiling, read from it with ``ast``
    #: (``moonpin.readers.pyast.loader.JIT_REQUIRES``: cuda-torch, nvcc, ninja, gpu-or-arch-list)
    requires: tuple[str, ...] = ()


class Build(Model):
    """One compiled extension module inside a mooncake wheel."""

    member: str
    family: str  # "pg", "ep", "_ep" (torch-independent), or the unversioned "ep" of 0.3.7
    torch: str | None = None  # the torch release it was built for
    torch_from: Literal["filename", "bytes"] | None = None
    abi: str | None = None  # e.g. "cpython-312-x86_64-linux-gnu"
    size: int = 0
    compressed_size: int = 0
    names: tuple[str, ...] = ()  # names of interest present as C strings in its bytes
    names_checked: tuple[str, ...] = ()  # every name that was looked for
    backends: tuple[str, ...] = ()  # torch backends it registers
    needed: tuple[str, ...] = ()
    #: "dt_needed" (.dynamic + .dynstr), "dynstr-heuristic", "verneed-hash" (only the CUDA
    #: runtime, recognised in .gnu.version_r; see needed_evidence) or "none"
    needed_method: str = "none"
    needed_evidence: str | None = None  # where in the file ``needed`` was read
    runpath: tuple[str, ...] = ()
    cuda_major: int | None = None
    complete: bool = True  # False when only a prefix of the member could be read
    strings_complete: bool = True  # the prefix read covered the read-only data (names)
    read_error: str | None = None
    bytes_from: str | None = None  # when the facts were read from an identical member elsewhere


class MooncakeWheel(Model):
    artifact: Artifact
    python_tags: tuple[str, ...]
    abi_tags: tuple[str, ...]
    platform_tags: tuple[str, ...]
    loaders: tuple[LoaderScheme, ...] = ()
    builds: tuple[Build, ...] = ()
    libraries: tuple[Build, ...] = ()  # shipped helper libraries (libmooncake_pg.so, ...)
    requires_dist: tuple[str, ...] = ()


class MooncakeRelease(Model):
    dist: str
    version: str
    wheels: tuple[MooncakeWheel, ...] = ()


# --------------------------------------------------------------------------- native


class RuleStep(Model):
    """One step of a package's loader rule, read with ``ast`` from the package's own file.

    ``kind``:
      * ``"import"``: the module named ``target`` is imported (``from . import x``,
        ``import deep_ep._C``, ``importlib.import_module("...")``); ``target`` is absolute.
      * ``"dispatch"``: a module whose name is computed at import time is imported;
        ``target`` is its name with ``{key}`` where the computed part goes
        (``nixl_ep_cu13.nixl_ep_cpp_torch{key}``) and ``key`` the Python expression it is
        computed from, as the file spells it (``"".join(torch.__version__.split(".")[:2])``).
      * ``"glob"``: a file is searched for with ``glob`` (``target``, relative to the
        site-packages folder: ``sgl_kernel/sm90/common_ops.*``) and loaded from its path.
      * ``"preload"``: a shared library is loaded with ``ctypes.CDLL`` (``target``: its path
        or ``{key}`` template) before the build, ``effect`` its mode (``RTLD_GLOBAL``).
      * ``"env"``: environment variable ``target`` changes the load; ``effect`` says how
        (``RTLD_DEEPBIND``: the build is opened with that ``dlopen`` flag).
      * ``"require"``: a condition the package's import checks and raises on (``condition``),
        e.g. ``torch.version.cuda major == 13``.
      * ``"lock"``: a version check against distribution ``target``: ``condition`` is the
        comparison (``exact`` or ``exact-or-local``: the version, or it followed by
        ``+<label>``), ``effect`` ``raise`` (the import fails) or ``ignore`` (the
        distribution is ignored with a warning), ``key`` the variable that disables it.

    ``condition``: the guard the step runs under, as the file spells it (``None``: always);
    ``order``: its place among the steps (alternatives are tried in this order).
    """

    kind: Literal["import", "dispatch", "glob", "preload", "env", "require", "lock"]
    target: str
    key: str | None = None
    condition: str | None = None
    effect: str | None = None
    member: str
    line: int
    function: str | None = None
    order: int = 0


class LoaderRule(Model):
    """How one importable package of a wheel reaches its compiled builds."""

    package: str  # the importable package, e.g. "nixl_ep_cu13", "sgl_kernel"
    members: tuple[str, ...]  # the members its steps were read from
    steps: tuple[RuleStep, ...] = ()
    #: members that could not be read or parsed (``member: why``): the rule is incomplete
    errors: tuple[str, ...] = ()


class NativeBuild(Model):
    """One compiled extension module (``.so`` member) of a wheel.

    ``torch`` is the torch the build targets as a specifier (``==2.14.*`` from its file name
    through the loader's own rule, ``==2.14.1`` from the wheel's exact torch pin), with
    ``torch_from`` saying which; ``torch_key`` is the part of the name the rule computes
    from ``torch.__version__`` (``"214"``). ``torch_undefined`` counts the torch C++/Python
    symbols (``_ZN2at``, ``_ZN3c10``, ``_ZN5torch``, ``THP``... prefixes) the build leaves
    undefined, ``torch_undefined_digest`` is the sha256 (16 hex) of those names sorted and
    NUL-joined: two builds with the same digest need the same torch symbols. ``init`` is the
    ``PyInit_<name>`` the build defines (the module name it must be imported under).
    """

    member: str
    module: str  # the dotted module name the file defines, e.g. "nixl_ep_cu13.nixl_ep_cpp_torch214"
    abi: str | None = None  # "cpython-312-x86_64-linux-gnu", "abi3", or None for a bare .so
    torch: str | None = None
    torch_from: Literal["filename", "requires-dist"] | None = None
    torch_key: str | None = None
    size: int = 0
    compressed_size: int = 0
    needed: tuple[str, ...] = ()
    needed_method: str = "none"  # as Build.needed_method
    cuda_major: int | None = None
    torch_undefined: int | None = None
    torch_undefined_digest: str | None = None
    undefined: int | None = None  # every undefined dynamic symbol, counted
    init: str | None = None
    complete: bool = True  # False: only a prefix was read (symbols unknown)
    read_error: str | None = None
    bytes_from: str | None = None  # "<member> in <wheel>" when read from identical-by-rule bytes


class NativeWheel(Model):
    artifact: Artifact
    python_tags: tuple[str, ...]
    abi_tags: tuple[str, ...]
    platform_tags: tuple[str, ...]
    requires_python: str | None = None
    requires_dist: tuple[str, ...] = ()  # verbatim
    torch_requirements: tuple[str, ...] = ()  # the Requires-Dist lines naming torch
    rules: tuple[LoaderRule, ...] = ()
    builds: tuple[NativeBuild, ...] = ()
    packages: tuple[str, ...] = ()  # top-level importable names the wheel installs


class UnmetRequirement(Model):
    """A Requires-Dist line (no extra, markers true somewhere) no release on the index meets."""

    requirement: str
    reason: str


class NativeRelease(Model):
    project: str  # the recipe, e.g. "nixl", "sglang-kernel"
    dist: str
    version: str
    wheels: tuple[NativeWheel, ...] = ()
    sdist_only: bool = False  # the index has files for it but no wheel
    uninstallable: tuple[UnmetRequirement, ...] = ()


# --------------------------------------------------------------------------- torch


class TorchVariant(Model):
    """The wheel the index publishes for one torch release on one platform."""

    platform: str  # a wheel platform tag, e.g. "manylinux_2_28_x86_64"
    arch: str
    cuda_major: int | None  # None: no CUDA runtime requirement (CPU build)
    evidence: str  # the requirement line or filename that decided cuda_major
    artifact: Artifact


class TorchRelease(Model):
    version: str
    variants: tuple[TorchVariant, ...] = ()


# --------------------------------------------------------------------------- the file


class Unread(Model):
    """A release or artifact that could not be read; it never turns into a verdict."""

    kind: Literal["sglang", "mooncake", "torch", "native"]
    name: str
    version: str
    artifact: str | None = None
    reason: str


def _utc(t: datetime) -> datetime:
    """A timestamp without a zone is UTC (as moonpin writes them, and as ``moonpin.kb.paths``
    reads them): a hand-edited KB can then be compared with the time now."""
    return t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)


#: A timestamp, in UTC when it names no zone.
Timestamp = Annotated[datetime, AfterValidator(_utc)]


class ScrapeInfo(Model):
    """What the last refresh was and what it read."""

    scraped_at: Timestamp
    #: the mirror ``--index-url``/``MOONPIN_INDEX_URL`` named; None: the default index
    #: (pip's configuration, else pip's own default), whose host is never written down
    index_url: str | None = None
    moonpin_version: str
    bytes_fetched: int = 0
    artifact_bytes: int = 0  # what the same artifacts weigh whole
    requests: int = 0
    seconds: float = 0.0
    #: the kinds this refresh asked the index about (``--only``), in order
    refreshed: tuple[str, ...] = ()
    #: kind -> versions (mooncake: ``dist==version``) read from their artifacts this time
    read: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    #: kind -> how many releases were kept as they were (artifact sha256 unchanged)
    kept: dict[str, int] = Field(default_factory=dict)
    #: kind -> when the index was last asked about it (``--only`` refreshes one kind)
    kinds_scraped_at: dict[str, Timestamp] = Field(default_factory=dict)
    #: kind (sglang, mooncake, torch) -> fingerprint of the extractor code that read its
    #: releases; a refresh by different code re-reads that kind (see moonpin.scrapers.refresh)
    extractors: dict[str, str] = {}


def _as_path(art: Artifact, index_url: str | None) -> Artifact:
    if art.url is None or art.path:
        return art
    return art.model_copy(update={"path": files_path(art.url, index_url), "url": None})


class KnowledgeBase(Model):
    schema_version: int = SCHEMA_VERSION
    scrape: ScrapeInfo
    sglang: tuple[SglangRelease, ...] = ()
    mooncake: tuple[MooncakeRelease, ...] = ()
    torch: tuple[TorchRelease, ...] = ()
    torch_versions: tuple[str, ...] = ()  # every torch release on the index
    unread: tuple[Unread, ...] = ()
    native: tuple[NativeRelease, ...] = ()

    @model_validator(mode="after")
    def _from_older_schema(self) -> KnowledgeBase:
        """Read a schema 1/2 file: the index's artifacts' absolute URLs become paths.

        (The loader relabels such a file as current before validating it, so the
        artifacts themselves say whether they need converting. A user's source tree or
        archive keeps its ``url``.)"""
        iu = self.scrape.index_url
        if not any(a.url is not None and not a.path for a in self._index_artifacts()):
            return self
        # Frozen models: set the converted fields in place (an after-validator must return
        # ``self``); nothing else holds this instance yet.
        object.__setattr__(self, "sglang", tuple(
            r if r.source != "index" else
            r.model_copy(update={"artifact": _as_path(r.artifact, iu)}) for r in self.sglang))
        object.__setattr__(self, "mooncake", tuple(r.model_copy(update={"wheels": tuple(
            w.model_copy(update={"artifact": _as_path(w.artifact, iu)})
            for w in r.wheels)}) for r in self.mooncake))
        object.__setattr__(self, "torch", tuple(r.model_copy(update={"variants": tuple(
            v.model_copy(update={"artifact": _as_path(v.artifact, iu)})
            for v in r.variants)}) for r in self.torch))
        return self

    def _index_artifacts(self) -> list[Artifact]:
        return [*(r.artifact for r in self.sglang if r.source == "index"),
                *(w.artifact for r in self.mooncake for w in r.wheels),
                *(v.artifact for r in self.torch for v in r.variants),
                *(w.artifact for r in self.native for w in r.wheels)]
