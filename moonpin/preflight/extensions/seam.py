"""The seam between the check's machinery and one project's loader rule.

An SGLang worker imports several compiled torch extensions besides mooncake's process
group. Each project decides *in its own Python code* which compiled file ``import X``
loads: nixl's meta package picks a backend package by torch's CUDA major, the backend a
build by torch's minor; sgl_kernel picks ``sm<NN>/common_ops…`` by the GPU's capability;
deep_ep imports its ``_C`` after checking torch's CUDA; flashinfer checks its companion
wheels' versions. The machinery (the importer model, the ld.so model, the fix lines) is
the same for all of them; the decision is not. So each project gets one module in
``rules/`` — its *loader rule* — and the machinery asks it one question through this seam,
the way resolvelib's resolver asks a provider and never fetches anything itself.

A loader rule module (``nixl_rule.py``, never named like the package it reads, which it
would shadow in the very environment it reads) defines:

``IMPORT`` (str)
    The top-level name SGLang imports: ``"nixl_ep"``, ``"nixl"``.

``CHOICES`` (dict[str, tuple[str, ...]])
    Which launch choices import it, *only* as a fallback for an SGLang whose sources
    cannot be read (:mod:`.wanted` reads them from the installed SGLang first: a choice's
    token dispatcher, or the imports under a test on the option's value):
    ``{"moe-a2a": ("nixl",)}`` (``--elastic-ep-backend nixl`` imports nothing of nixl);
    ``{"pd-disaggregation": ("nixl",), "hicache": ("nixl",)}`` for ``import nixl``.

``IMPLICIT`` (bool)
    Whether a CUDA worker imports it at start whatever the launch line says (sgl_kernel,
    flashinfer): judged when installed or when the installed SGLang requires its
    distribution.

``DISTRIBUTIONS`` (tuple[str, ...])
    The distributions that may provide it, the one to install first (for the fix line
    of an absent package; the version comes from the installed files, never from here).

``pick(facts: Facts, found: Found) -> Pick``
    Given the target's facts and where the importer finds the package, read the
    package's own loader files (with ``ast``: nothing of the package is imported or run)
    and say which file(s) the import loads, with which ``dlopen`` flags, under which
    assumption — or what the loader itself raises when nothing fits. A rule must not
    guess: a loader whose shape it cannot read is a :class:`Pick` with ``unread`` set
    (said as "not judged"), never a verdict.

``repair(facts: Facts, pick: Pick, choice: Choice) -> str | None``
    The pip line that makes ``choice`` load when its build does not (unbound torch
    symbols, a missing library): typically the torch the project's metadata pins, read
    from its installed METADATA or the installed SGLang's. None: the generic line.

``IMAGE_READS`` (dict[str, tuple[str, ...]], optional)
    What the rule reads of an image file beyond what every check reads, as data the layers'
    reader keeps when it unpacks one for ``check --image``
    (:class:`moonpin.readers.image.layers.Reads`: ``tools`` its loader runs, ``objects`` it
    loads from a cache folder, ``packages`` and auditwheel ``libs`` read whole):
    ``{"tools": ("nvcc",)}``. The reader names no project.

``OWN_LINES`` (bool, optional)
    The project's judgement says more than one line (mooncake's process group: the module,
    its loader, the build, its names, backends, CUDA major, libraries, toolchain), with fix
    lines of its own; listed in :data:`OWN_LINES`. Such a rule also defines, beside
    :func:`pick`:

    ``own_lines(job: Job) -> Probe | None``
        Its judgement, said with ``job.add`` after the one-line verdicts of the other
        extensions, on the facts the walk read and judged before (:class:`Job`); the
        answer is what the deep probe imports (:class:`Probe`), or None when the walk
        stops there (its package is not installed: nothing more to judge or probe).

    ``PREBUILD`` (str)
        How a release that compiles at first import is compiled once at image build: the
        note of its fix lines, which :class:`moonpin.preflight.judge.fixes.Fixer` writes
        for this project (its ``IMPORT``, ``DISTRIBUTIONS[0]`` as the prefix of its
        distributions' names, handed in as a :class:`~moonpin.preflight.judge.fixes.Project`).

    ``ahead(job: Job) -> None``
        The long part of that judgement, run in a child on a second core while SGLang's
        sources are read (:mod:`moonpin.preflight.prefetch`: each load it computes is
        recorded for the walk's own judgement to take), with ``job.req`` the knowledge
        base's guess of what SGLang needs. Said nothing (``job.add`` drops every line).

A package no rule reads (a launch backend's own package: ``--moe-a2a-backend mori``
imports ``mori``; any new project) is not skipped: its plain import is followed
(:func:`moonpin.preflight.extensions.pyread.plain.plain_import`: the compiled modules its
``__init__`` and the package's own modules import, found as the importer finds them) and
each is loaded into the process ``import torch`` built, as a rule's choices are; the line
says that assumption, and "not judged" for what the import loads by a computed name or
path. A rule is needed only where a project's loader decides by facts (torch's version or
CUDA, the GPU, the environment) which file it loads.

A rule's distributions (and the companions it reads the metadata of) must be among those
whose metadata the check reads (:data:`DISTRIBUTIONS`, handed to
:func:`moonpin.preflight.installed.image_facts.by_name`). The rule holds only how to read that
project's loader; every version, file name and pin comes from the files it reads. Adding a
project is one such module plus its entries in :data:`RULES` and :data:`DISTRIBUTIONS`; nothing
in the machinery branches on a project's name.

Only ``os`` at import: this runs at worker start.
"""

from __future__ import annotations

import os

from moonpin.preflight.access.confined import NOWHERE, Confined

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    from moonpin.preflight.access.identity import Identity
    from moonpin.preflight.installed.image_facts import Dist
    from moonpin.preflight.pyimport.importer import Found

__all__ = ["DISTRIBUTIONS", "OWN_LINES", "OWN_RULE", "RULES", "RULES_PACKAGE", "Choice", "Facts",
           "Job", "Pick", "Probe", "own_rule", "rule_for"]

#: the package of the loader rules, one module a project (importing one is not asking it:
#: the walk reads a rule's data, such as ``IMAGE_READS``, before it enters this room)
RULES_PACKAGE = f"{__package__}.rules"
#: import name -> the rule module (in :data:`RULES_PACKAGE`) that reads its project's loader
RULES: dict[str, str] = {
    "nixl_ep": "nixl_rule",
    "nixl": "nixl_bindings_rule",
    "sgl_kernel": "sgl_kernel_rule",
    "deep_ep": "deepep_rule",
    "flashinfer": "flashinfer_rule",
    "mooncake": "mooncake_rule",
}
#: import names whose rule is ``OWN_LINES``: its project's judgement says its own lines (the
#: rule's ``own_lines``; mooncake's is :mod:`.mooncake_pg`); the launch line's extensions
#: (:mod:`.wanted`) and their one-line verdict (:mod:`.verdict`) leave them to it
OWN_LINES = frozenset({"mooncake"})
#: the module of the one rule in :data:`OWN_LINES`: what the walk imports (importing a rule is
#: not asking it: the walk enters the extensions' room once, after the shared judgements)
(_OWN,) = OWN_LINES  # one: the walk says one project's own lines
OWN_RULE = f"{RULES_PACKAGE}.{RULES[_OWN]}"
#: the distributions whose metadata the check reads besides torch's and SGLang's, by canonical
#: name prefix (an image holds hundreds): every rule's ``DISTRIBUTIONS`` and the companions a
#: rule reads (flashinfer's ``-cubin`` and ``-jit-cache``)
DISTRIBUTIONS = ("nixl", "sglang-kernel", "sgl-kernel", "sgl-deep-ep", "deep-ep", "flashinfer",
                 "mooncake-transfer-engine")


class Facts:
    """What a rule is handed about the target (all read by the machinery before).

    ``torch``: the label ``torch.__version__`` reads (None: no torch); ``cuda``: the CUDA
    major torch was built with (None: a CPU build); ``env``: the worker's environment
    variables (the image config's ``Env`` for ``--rootfs``/``--image``); ``gpu``: the GPU
    capability as ``major * 10 + minor`` (what ``torch.cuda.get_device_capability()``
    gives), ``gpu_present``: whether a usable GPU is assumed (``torch.cuda.is_available()``),
    ``gpu_said``: how that was decided, for the report; ``dists``: the installed
    distributions by canonical name; ``suffixes``: the extension-module suffixes the
    target's importer tries; ``find(name)``: the importer's finding of a top-level name;
    ``read(path)``: a file's bytes through the check's one access layer; ``within``: the
    image root every reading of a file is confined to
    (:class:`~moonpin.preflight.access.confined.Confined`, handed to :mod:`.astread`);
    ``python``: the worker's interpreter as the check names it (a host path, under the
    root for an image; None: not known), whose folder is ld.so's ``$ORIGIN``; ``kb_file``:
    the knowledge base the check reads, whose resolved tables answer which release fits and
    which the index has (None: none; the tables are the one reading of its facts, the one
    ``moonpin which`` answers from);
    ``tag`` (``cp312``) and ``machine`` (``x86_64``): the worker's Python and platform as
    the tables name them
    (None: not known); ``user``: who the worker runs as
    (:class:`~moonpin.preflight.access.identity.Identity`; None: this process), for what
    only its user may read (ld.so's ``/etc/ld.so.preload``); ``started``: the libraries the
    code ``site`` runs at every start loads with ``ctypes``, in the process before anything
    is imported, as (path, module, the ``.pth`` file or ``""``), computed when called (None:
    not known)."""

    __slots__ = ("cuda", "dists", "env", "find", "gpu", "gpu_present", "gpu_said", "kb_file",
                 "machine", "python", "read", "started", "suffixes", "tag", "torch", "user",
                 "within")

    def __init__(self, *, torch: str | None, cuda: int | None, env: Mapping[str, str],
                 gpu: int | None, gpu_present: bool, gpu_said: str,
                 dists: Mapping[str, Dist], suffixes: Sequence[str],
                 find: Callable[[str], Found | None], read: Callable[[str], bytes],
                 within: Confined = NOWHERE, python: str | None = None,
                 kb_file: str | None = None, tag: str | None = None,
                 machine: str | None = None, user: Identity | None = None,
                 started: Callable[[], Sequence[tuple[str, str, str]]] | None = None) -> None:
        self.torch = torch
        self.cuda = cuda
        self.env = env
        self.gpu = gpu
        self.gpu_present = gpu_present
        self.gpu_said = gpu_said
        self.dists = dists
        self.suffixes = tuple(suffixes)
        self.find = find
        self.read = read
        #: the image root the rules' readings are confined to (the check's)
        self.within = within
        self.python = python
        self.kb_file = kb_file
        self.tag = tag
        self.machine = machine
        self.user = user
        self.started = started

    def module_file(self, folder: str, stem: str) -> str | None:
        """``stem`` in ``folder`` as the importer's file finder looks for it: a package
        folder, then each extension suffix, then ``.py``, ``.pyc`` (FileFinder's order)."""
        if os.path.isfile(os.path.join(folder, stem, "__init__.py")):
            return os.path.join(folder, stem, "__init__.py")
        for suffix in (*self.suffixes, ".py", ".pyc"):
            path = os.path.join(folder, stem + suffix)
            if os.path.isfile(path):
                return path
        return None

    def pin(self, owner: str, project: str) -> str | None:
        """The exact version ``owner``'s installed METADATA pins ``project`` to
        (``Requires-Dist: torch==2.14.1``), or None (not installed, not pinned, or pinned
        only under a marker or extra)."""
        from moonpin.preflight.installed.image_facts import canon

        dist = self.dists.get(canon(owner))
        if dist is None:
            return None
        want = canon(project)
        for req in dist.requires:
            head, _, marker = req.partition(";")
            if "extra" in marker:
                continue
            name, eq, version = head.replace(" ", "").partition("==")
            name = name.split("[", 1)[0]
            if eq and canon(name) == want and version and "," not in version:
                return version
        return None

    def kb_fits(self, dists: Sequence[str], torch: str
                ) -> list[tuple[str, str, frozenset[str], dict[str, str]]]:
        """(distribution, version, the packages it installs, the exact releases it requires)
        of every release of the project of ``dists`` (a rule's ``DISTRIBUTIONS``) that the
        knowledge base's resolved tables say fits torch release ``torch`` (``2.14.1``) built
        as the installed one is (its label's local part: ``+cu130``) on this python and
        platform, newest first: ``moonpin which`` without SGLang's edges
        (:func:`moonpin.resolver.tables.native.fitting`: a wheel for them with a build for
        that torch and CUDA major, none the index cannot install). Empty when the tables do
        not answer (no KB, no torch, a question they do not hold). Read on a failing path."""
        if not dists or self.kb_file is None or self.torch is None or not self.tag:
            return []
        from packaging.version import InvalidVersion, Version

        from moonpin.resolver.tables.native import fitting, release_packages, release_pins

        local = self.torch.partition("+")[2]
        try:
            got = fitting(self.kb_file, dists[0], sglang=None,
                          torch=f"{torch}+{local}" if local else torch, python=self.tag,
                          arch=self.machine or os.uname().machine)
        except (OSError, ValueError):  # a table that went away or broke since the index read
            return []
        out = []
        for c in got.fits if got is not None else ():
            if c.dist is None:
                continue
            packages = release_packages(self.kb_file, c.dist, c.version)
            pins = release_pins(self.kb_file, c.dist, c.version)
            if packages is not None and pins is not None:
                out.append((c.dist, c.version, packages, pins))
        try:
            return sorted(out, key=lambda r: Version(r[1]), reverse=True)
        except InvalidVersion:
            return out

    def kb_on_index(self, of: str, dist: str, version: str) -> bool | None:
        """Whether the knowledge base's resolved tables record ``dist`` ``version`` as a
        release pip can install from the index, among the releases of ``of``'s project (a
        name ``moonpin which`` takes: a rule's ``IMPORT``):
        :func:`moonpin.resolver.tables.native.on_index` (None: the tables do not hold that
        project). Read on a failing path."""
        if self.kb_file is None:
            return None
        from moonpin.resolver.tables.native import on_index

        return on_index(self.kb_file, of, dist, version)

    def build_torches(self, dist: str, version: str, module_prefix: str) -> list[str] | None:
        """The torch specifiers (``==2.11.*``) of the builds of a module under
        ``module_prefix`` the knowledge base records in ``dist`` ``version``'s wheels, in
        order, once each, from its resolved torch facts
        (:func:`moonpin.resolver.tables.documents.load_torch`); None when it does not record that
        release (no KB, never read) or its tables do not answer (missing or stale)."""
        table = self._torch_table()
        pairs = None if table is None else table["builds"].get(dist, {}).get(version)
        if pairs is None:
            return None
        out: list[str] = []
        for module, spec in pairs:
            if module.startswith(module_prefix) and spec not in out:
                out.append(spec)
        return out

    def index_torch_cudas(self, spec: str) -> frozenset[int | None] | None:
        """The CUDA majors (None: a CPU build) of the torch wheels the index publishes for
        this machine of every release the knowledge base records in ``spec`` (``==2.13.*``),
        as its scrape read them from each wheel's Requires-Dist: what ``pip install
        'torch<spec>'`` brings; None when it records none (no KB, no such release, no wheel
        for this machine) or its resolved torch facts do not answer (missing or stale)."""
        table = self._torch_table()
        if table is None:
            return None
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
        from packaging.version import InvalidVersion, Version

        try:
            want = SpecifierSet(spec)
        except InvalidSpecifier:
            return None
        arch = self.machine or os.uname().machine
        out: set[int | None] = set()
        for rel in table["torch"]:
            try:
                if Version(rel["version"]) not in want:
                    continue
            except InvalidVersion:
                continue
            out.update(major for a, major, _, _ in rel["variants"] if a == arch)
        return frozenset(out) or None

    def _torch_table(self) -> dict[str, Any] | None:
        """The knowledge base's resolved torch facts (None: no KB, or no such table of
        it). Read on a failing path only."""
        if self.kb_file is None:
            return None
        from moonpin.resolver.tables.documents import load_torch

        return load_torch(self.kb_file)

    def kb_release(self, dists: Sequence[str], installed: Sequence[tuple[str, str]] = (),
                   pip_only: bool = False) -> tuple[str, str | None] | None:
        """(the line, the requirement it installs) that installs the release of the project
        of ``dists`` (a rule's ``DISTRIBUTIONS``) the knowledge base's resolved tables say
        fits this environment
        (:func:`moonpin.preflight.judge.fixes.kb_release_line`, with the installed SGLang's
        pin of one of ``dists`` and ``installed``, the project's distributions here); None
        when the tables do not answer (no KB, no torch, a question they do not hold) or
        say one of ``installed`` fits. Read on a failing path only."""
        if not dists or self.kb_file is None or self.torch is None or not self.tag:
            return None
        from moonpin.preflight.judge.fixes import kb_release_line

        sglang = self.dists.get("sglang")
        pin = next(((d, v) for d in dists if (v := self.pin("sglang", d))), None)
        return kb_release_line(self.kb_file, dists[0], sglang=sglang.version if sglang
                               else None, torch=self.torch, python=self.tag,
                               arch=self.machine or os.uname().machine, pin=pin,
                               installed=installed, pip_only=pip_only,
                               present={n: d.version for n, d in self.dists.items()})

    def torch_release(self) -> str | None:
        """torch's label without its local part (``2.14.1+cu130`` -> ``2.14.1``)."""
        return self.torch.partition("+")[0] if self.torch else None


class Choice:
    """One outcome the loader can reach: ``when`` it is reached (``"GPU capability 9.0"``;
    ``""``: always), the ``files`` it tries in order (the first that loads wins; none
    loading is the loader's own failure, ``raises``), the ``dlopen`` flags, and what the
    loader raises itself before any file is loaded (an exception line; None: nothing).
    ``every``: the import loads each of ``files`` in turn, into one process (a package
    whose modules are several builds: nixl's ``_bindings`` and ``_utils``); the first that
    does not load fails it."""

    __slots__ = ("every", "files", "mode", "raises", "when")

    def __init__(self, files: Sequence[str] = (), *, when: str = "", mode: int | None = None,
                 raises: str | None = None, every: bool = False) -> None:
        self.files = tuple(files)
        self.when = when
        self.mode = mode
        self.raises = raises
        self.every = every


class Pick:
    """A rule's answer (module doc): the ``choices`` the loader can reach under the facts
    (several when a fact is not known, such as a GPU's capability: each is judged);
    ``notes``: the assumptions made and what the loader reads (said on the line);
    ``warnings``: what does not fail the import but fails later (a companion wheel the
    loader ignores); ``fix``: the pip line for ``raises`` (None: the rule's
    :func:`repair` or the generic line); ``unread``: why the loader could not be read
    (nothing is judged then)."""

    __slots__ = ("choices", "fix", "notes", "unread", "warnings")

    def __init__(self, choices: Sequence[Choice] = (), *, notes: Sequence[str] = (),
                 warnings: Sequence[str] = (), fix: str | None = None,
                 unread: str | None = None) -> None:
        self.choices = list(choices)
        self.notes = list(notes)
        self.warnings = list(warnings)
        self.fix = fix
        self.unread = unread


class Job:
    """What the walk hands an ``OWN_LINES`` rule's judgement (``own_lines``, ``ahead``), all
    read or judged before: ``ctx`` (the :class:`~moonpin.preflight.env.context.Context`),
    ``wanted`` (feature -> backend: the launch choices that import the project), ``dists``
    (every installed distribution of the project), ``torch`` (the installed torch's facts;
    None: none), ``sglang`` (its distribution; None: none) and ``sglang_src`` (the files
    ``import sglang`` loads), ``req`` (what SGLang needs of the project), ``kb`` (the
    knowledge base as the check reads it), ``fixer`` (the fix lines over what is installed),
    ``add`` (says one line), ``source_cache`` (whether analyses of unchanged files are
    trusted)."""

    __slots__ = ("add", "ctx", "dists", "fixer", "kb", "req", "sglang", "sglang_src",
                 "source_cache", "torch", "wanted")

    def __init__(self, *, ctx: Any, wanted: Mapping[str, str], dists: Sequence[Dist],
                 torch: Any, sglang: Dist | None, sglang_src: Any, req: Any, kb: Any,
                 fixer: Any, add: Callable[[Any], None], source_cache: bool) -> None:
        self.ctx = ctx
        self.wanted = wanted
        self.dists = dists
        self.torch = torch
        self.sglang = sglang
        self.sglang_src = sglang_src
        self.req = req
        self.kb = kb
        self.fixer = fixer
        self.add = add
        self.source_cache = source_cache


class Probe:
    """An ``OWN_LINES`` rule's answer to the walk: the ``module`` the deep probe imports in
    the target's interpreter (None: nothing to import, ``why``), with the ``names`` it
    checks on it and the torch.distributed ``backends`` its import must register (the
    probe names no project: what it looks for is handed in from here)."""

    __slots__ = ("backends", "module", "names", "why")

    def __init__(self, module: str | None, names: Sequence[str] = (), why: str = "",
                 backends: Sequence[str] = ()) -> None:
        self.module = module
        self.names = tuple(names)
        self.why = why
        self.backends = tuple(backends)


def own_rule() -> Any:
    """The rule whose project says its own lines (:data:`OWN_LINES`: one today,
    :data:`OWN_RULE`)."""
    import importlib

    return importlib.import_module(OWN_RULE)


def rule_for(name: str) -> Any:
    """The loader rule module for import ``name`` (None: no rule: not judged)."""
    module = RULES.get(name)
    if module is None:
        return None
    import importlib

    return importlib.import_module(f"{RULES_PACKAGE}.{module}")
