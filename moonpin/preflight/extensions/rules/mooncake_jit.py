"""What a loader that compiles its extension at first import will do in this image, read
from the loader's own source and the files on disk (nothing is imported).

Such a loader (mooncake-transfer-engine-cuda13 0.3.14's ``mooncake/pg.py``) keeps the
compiled adapter in a cache folder it names in its source: an environment variable
(``os.environ.get("..._JIT_DIR")``) or a folder under the home (``Path.home() / ...``). An
adapter it compiled for this image links the image's own ``mooncake/`` folder through its
``DT_RUNPATH`` (the loader passes ``-Wl,-rpath,<mooncake folder>``), which is how a light
check tells an adapter of this image from one of another; and the loader looks only in the
key folder its ``_cache_key`` names (a hash of torch's version, CUDA, git revision and C++
ABI, the backend, the core library's path and bytes, the interpreter's cache tag and the
adapter's sources), computed here the same way from the files (:func:`cache_key`), so an
adapter left by another torch is not taken. The folder is the judged
worker's, not this process's: an image's configured ``Env`` and its user's home under its
root, with the adapter's ``DT_RUNPATH`` read as a path of the image. The toolchain it
needs depends on torch's flavour: the MUSA and MACA tools only for a MUSA or MACA torch.
"""

from __future__ import annotations

import os

from moonpin.preflight.access import chroot as rootfs
from moonpin.preflight.access.confined import NOWHERE, Confined

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

__all__ = ["cache_key", "cache_roots", "compiled_adapters", "home_of", "tools_for"]

#: Subfolders of a cache root looked at, at most (one per compiled key).
_MAX_KEYS = 256
#: The most bytes of the core library hashed for the key (a real one is about 10 MB).
_CORE_CAP = 512 << 20


def cache_roots(scheme: dict[str, list[str]], env: Mapping[str, str], home: str,
                cwd: str | None = None) -> list[str]:
    """The cache folder the loader would use in the judged environment, as a path of it:
    the first of its variables set in ``env`` (the worker's environment: an image's
    configured ``Env``, this process's for this machine), else its folder under ``home``
    (``Path.home()``: ``HOME``, else the user's passwd entry; :func:`home_of`). A relative
    value is a folder of the worker's working directory (``Path`` resolves it against the
    process's at import): under ``cwd``, none when that is not known."""
    for name in scheme.get("env") or ():
        value = env.get(name)
        if value:
            if value == "~" or value.startswith("~/"):  # Path.expanduser
                value = home.rstrip("/") + value[1:]
            if not value.startswith("/"):
                if cwd is None or not cwd.startswith("/"):
                    return []
                value = os.path.join(cwd, value)
            return [os.path.normpath(value)]
    parts = scheme.get("home") or []
    if parts:
        return [os.path.join(home, *parts)]
    return []


def home_of(env: Mapping[str, str], uid: int, root: str | None) -> str:
    """``Path.home()`` of the worker: its ``HOME``; else, in an image (``root``), the one
    its runtime sets from the image's ``/etc/passwd``
    (:func:`moonpin.preflight.env.rootfs.user_home`); else this process's user's."""
    if env.get("HOME"):
        return env["HOME"]
    if root is None:  # this process is the worker: its user's passwd entry
        return os.path.expanduser("~")
    from moonpin.preflight.env.rootfs import user_home

    return user_home(root, uid)


def compiled_adapters(roots: Sequence[str], mooncake_pkg: str,
                      within: Confined = NOWHERE) -> list[str]:
    """Compiled adapters under ``roots`` (paths of the judged environment: under
    ``within``'s image root, resolved there) built for the environment whose ``mooncake/``
    folder is ``mooncake_pkg`` (a host path): shared objects whose DT_RUNPATH (or
    DT_RPATH) names that folder, as a path of the same environment. Returns host paths.
    Every folder and file is reached through the image's own links, never out of its
    root."""
    from moonpin.preflight.loader.ldso import read_dynamic

    top = within.root

    def here(path: str) -> str | None:  # a path of the environment, as a host path
        if top is None:
            return os.path.realpath(path)
        try:
            return rootfs.resolve(top, path)
        except OSError:  # a link loop: the loader cannot reach it either
            return None

    # the package's host path, found through the image's links already: only the root's
    # own prefix is made canonical (Confined holds the root as its real path)
    want = here(rootfs.image_path(top, os.path.realpath(mooncake_pkg)) if top is not None
                else mooncake_pkg)
    out: list[str] = []
    for root in roots:
        folder = here(root)
        if folder is None:
            continue
        try:
            keys = sorted(e.name for e in os.scandir(folder))[:_MAX_KEYS]
        except OSError:
            continue
        for name in keys:
            key = here(os.path.join(root, name))
            try:
                if key is None or not os.path.isdir(key):
                    continue
                files = sorted(e.name for e in os.scandir(key) if e.name.endswith(".so"))
            except OSError:
                continue
            for so in files:
                path = here(os.path.join(root, name, so))
                if path is None or not os.path.isfile(path):
                    continue
                try:
                    _, runpath, rpath, problem = read_dynamic(path, within=within)
                except OSError:
                    continue
                if problem is None and want is not None and any(
                        here(d) == want for d in (*runpath, *rpath)
                        if d.startswith("/") and "$" not in d and "\0" not in d):
                    out.append(path)
    return out


#: Each ``digest.update(...)`` argument of mooncake's ``_cache_key`` (its source, unparsed,
#: the parameters named ``SRC``, ``CORE``, ``BACKEND``) -> the input :func:`cache_key` hashes
_KEY_PARTS = {
    "torch.__version__.encode()": "label",
    "str(torch.version.cuda).encode()": "cuda",
    "str(getattr(torch.version, 'musa', None)).encode()": "musa",
    "str(torch._C._GLIBCXX_USE_CXX11_ABI).encode()": "abi",
    "str(torch.version.git_version).encode()": "git",
    "BACKEND.encode()": "backend",
    "str(CORE.resolve()).encode()": "core_path",
    "str(sys.implementation.cache_tag).encode()": "cache_tag",
    "CORE.read_bytes()": "core_bytes",
}


def _key_recipe(tree: Any) -> tuple[list[Any], int, list[str]] | None:
    """mooncake's ``_cache_key`` read from its loader's module: the inputs in the order it
    hashes them (a :data:`_KEY_PARTS` name, or ``("sources", names)``), the hex digits it
    keeps, and the ``with_name`` constants its module names beside ``__file__`` (the core
    library, the source folder). None: a shape this reading does not know."""
    import ast

    from moonpin.readers.pyast.astname import unparse

    consts: dict[str, tuple[str, ...]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                node.targets[0], ast.Name) and isinstance(node.value, ast.Tuple) and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.value.elts):
            consts[node.targets[0].id] = tuple(getattr(e, "value", "") for e in node.value.elts)
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef)
               and n.name == "_cache_key"), None)
    if fn is None or len(fn.args.args) != 3:
        return None
    rename = dict(zip((a.arg for a in fn.args.args), ("SRC", "CORE", "BACKEND"), strict=True))

    def text(node: Any) -> str:
        node = ast.parse(unparse(node), mode="eval").body
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id in rename:
                n.id = rename[n.id]
        return unparse(node)

    def update(stmt: Any, digest: str) -> str | None:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "update" and isinstance(call.func.value, ast.Name)
                and call.func.value.id == digest and len(call.args) == 1 and not call.keywords):
            return text(call.args[0])
        return None

    body = fn.body[1:] if fn.body and isinstance(fn.body[0], ast.Expr) and isinstance(
        fn.body[0].value, ast.Constant) else fn.body
    if not body or not (isinstance(body[0], ast.Assign) and len(body[0].targets) == 1
                        and isinstance(body[0].targets[0], ast.Name)
                        and text(body[0].value) == "hashlib.sha256()"):
        return None
    digest = body[0].targets[0].id
    parts: list[Any] = []
    for stmt in body[1:-1]:
        got = update(stmt, digest)
        if got is not None and got in _KEY_PARTS:
            parts.append(_KEY_PARTS[got])
            continue
        if not (isinstance(stmt, ast.For) and isinstance(stmt.target, ast.Name)
                and isinstance(stmt.iter, ast.Tuple) and len(stmt.body) == 2
                and not stmt.orelse):
            return None
        names: list[str] = []
        for e in stmt.iter.elts:
            if isinstance(e, ast.Starred) and isinstance(e.value, ast.Name) \
                    and e.value.id in consts:
                names += consts[e.value.id]
            else:
                return None
        var = stmt.target.id
        if [update(b, digest) for b in stmt.body] != [
                f"{var}.encode()", f"_source_path(SRC, {var}).read_bytes()"]:
            return None
        parts.append(("sources", names))
    last = body[-1]
    ret = last.value if isinstance(last, ast.Return) else None
    if not (isinstance(ret, ast.Subscript) and isinstance(ret.slice, ast.Slice)
            and ret.slice.lower is None and ret.slice.step is None
            and isinstance(ret.slice.upper, ast.Constant) and type(ret.slice.upper.value) is int
            and text(ret.value) == f"{digest}.hexdigest()"):
        return None
    beside = [n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call)
              and isinstance(n.func, ast.Attribute) and n.func.attr == "with_name"
              and len(n.args) == 1 and isinstance(n.args[0], ast.Constant)
              and isinstance(n.args[0].value, str)]
    return parts, ret.slice.upper.value, beside


def _cxx11_abi(torch_pkg: str, within: Confined) -> bool | None:
    """``torch._C._GLIBCXX_USE_CXX11_ABI`` as torch's files say it: its
    ``compiled_with_cxx11_abi()`` returning a constant (torch 2.7 on); None otherwise."""
    import ast

    try:
        data = within.read(os.path.join(torch_pkg, "__init__.py"), cap=16 << 20,
                           what="torch/__init__.py")
    except OSError:
        return None
    at = data.find(b"\ndef compiled_with_cxx11_abi(")
    if at < 0:
        return None
    lines = data[at + 1:at + 1 + (64 << 10)].split(b"\n")
    n = 1  # the def line, then its indented body (a module-level function)
    while n < len(lines) and (not lines[n].strip() or lines[n][:1] in (b" ", b"\t")):
        n += 1
    try:
        fn = ast.parse(b"\n".join(lines[:n]).decode("utf-8")).body[0]
    except (SyntaxError, ValueError, UnicodeDecodeError, RecursionError, IndexError):
        return None
    rets = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
    if len(rets) == 1 and isinstance(rets[0].value, ast.Constant) \
            and type(rets[0].value.value) is bool:
        return rets[0].value.value
    return None


def cache_key(loader: str, pkg: str, torch_pkg: str, consts: Mapping[str, Any] | None,
              env: Mapping[str, str], version: tuple[int, int],
              within: Confined = NOWHERE) -> str | None:
    """The key folder mooncake's compiling loader (``loader``, a host path; ``pkg`` its
    ``mooncake/`` folder) caches its adapter under in the judged environment, computed as
    its own ``_cache_key`` computes it, that function read from the loader's source with
    ``ast`` (each hashed input recognised, or no key): torch's ``version.py`` constants
    (``consts``), its C++ ABI (:func:`_cxx11_abi`), the backend (MUSA or MACA by
    ``MOONCAKE_EP_USE_*`` in ``env`` else torch's own, CUDA otherwise), the core library's
    real path as the worker sees it and its bytes, CPython's cache tag for ``version``,
    and each named source's bytes. None: not computed (another shape, a file unreadable):
    the caller takes any key folder, and says so."""
    import ast
    import hashlib

    if not consts or "__version__" not in consts:
        return None
    try:
        tree = ast.parse(within.read(loader, cap=1 << 20, what="mooncake's JIT loader"))
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    recipe = _key_recipe(tree)
    if recipe is None:
        return None
    parts, digits, beside = recipe
    cores = sorted({b for b in beside if b.endswith(".so")})
    srcs = sorted({b for b in beside if "." not in b})
    if len(cores) != 1 or len(srcs) != 1:
        return None

    def flag(name: str, torch_has: str) -> bool:
        configured = env.get(f"MOONCAKE_EP_USE_{name}")
        if configured is not None:  # its _env_enabled
            return configured.upper() in {"1", "ON", "TRUE", "YES"}
        return bool(consts.get(torch_has))

    backend = (f"musa:{env.get('MTGPU_TARGET', 'mp_31')}" if flag("MUSA", "musa")
               else "maca" if flag("MACA", "maca") else "cuda")
    core = os.path.join(pkg, cores[0])
    top = within.root
    real = os.path.realpath(core)  # the root's links resolved inside it (Confined)
    if top is not None:
        try:
            real = rootfs.image_path(top, rootfs.resolve(top, rootfs.image_path(top, core)))
        except OSError:
            return None
    digest = hashlib.sha256()
    try:
        for part in parts:
            if part == "label":
                digest.update(str(consts["__version__"]).encode())
            elif part in ("cuda", "musa", "git"):
                digest.update(str(consts.get({"git": "git_version"}.get(part, part))).encode())
            elif part == "abi":
                abi = _cxx11_abi(torch_pkg, within)
                if abi is None:
                    return None
                digest.update(str(abi).encode())
            elif part == "backend":
                digest.update(backend.encode())
            elif part == "core_path":
                digest.update(real.encode())
            elif part == "cache_tag":
                digest.update(f"cpython-{version[0]}{version[1]}".encode())
            elif part == "core_bytes":
                digest.update(within.read(core, cap=_CORE_CAP, what="mooncake's core library"))
            else:
                for name in part[1]:
                    digest.update(name.encode())
                    digest.update(within.read(os.path.join(pkg, srcs[0], name), cap=16 << 20,
                                              what="a mooncake adapter source"))
    except OSError:
        return None
    return digest.hexdigest()[:digits]


def tools_for(toolchain: Sequence[str], consts: dict[str, object] | None) -> list[str]:
    """The tools of ``toolchain`` (the scraped labels) this torch needs: those of MUSA or
    MACA only for a torch whose ``torch/version.py`` says it is one."""
    consts = consts or {}
    flavours = {f for f in ("MUSA", "MACA") if consts.get(f.lower())}
    return [t for t in toolchain
            if not any(f in t for f in ("MUSA", "MACA")) or any(f in t for f in flavours)]
