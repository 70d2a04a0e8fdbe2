"""Where SGLang keeps what a choice of its other backend options imports: the options whose
choices are not a module of one folder (:data:`moonpin.readers.launch.backends.BACKEND_FLAGS`)
but a package per choice, or a registry that maps each choice to a module
(:data:`CHOICE_MODULES`). Read from the release's own files: a folder's listing and the
registry's calls with ``ast``; nothing is assumed about a choice. Only the standard library
(``ast`` where a registry is read): the runtime check reads these at worker start
(:mod:`moonpin.preflight.extensions.wanted`), nothing else at import."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["CHOICE_MODULES", "Where", "member_of", "package_members", "registered"]


class Where:
    """Where one option keeps what each choice imports: ``path`` (relative to the
    site-packages folder or wheel) is a folder holding a package per choice
    (``sglang/srt/disaggregation/`` -> ``nixl/__init__.py``, ``nixl/conn.py``) when
    ``registry`` is empty, else the module whose top level registers each choice with a call
    of that name: ``register_backend("nixl", "sglang.srt.mem_cache.storage.nixl.
    hicache_nixl", "HiCacheNixl")`` (the module ``importlib.import_module`` loads for it)."""

    __slots__ = ("path", "registry")

    def __init__(self, path: str, registry: str = "") -> None:
        self.path = path
        self.registry = registry


#: The options whose choice names a backend SGLang imports a package for, kept in a package
#: per choice or named in a registry (read in the wheels of 0.4.4, 0.4.6, 0.4.9, 0.5.1, 0.5.3,
#: 0.5.10, 0.5.16, 0.5.21, 0.5.22 and 0.5.23): ``--disaggregation-transfer-backend nixl`` ->
#: ``srt/disaggregation/nixl/`` from 0.4.6 (none in 0.4.4; its ``conn.py`` imports
#: ``nixl._api`` when the KV manager is made), and ``--hicache-storage-backend nixl`` -> the
#: module ``srt/mem_cache/storage/backend_factory.py`` registers for it from 0.5.3
#: (``storage/nixl/hicache_nixl.py``: ``from nixl._api import nixl_agent`` at its top level;
#: 0.5.1 imports that module under a test in ``managers/cache_controller.py`` and has no
#: registry: the rules' own ``CHOICES`` stand in there).
CHOICE_MODULES: dict[str, Where] = {
    "--disaggregation-transfer-backend": Where("sglang/srt/disaggregation/"),
    "--hicache-storage-backend": Where("sglang/srt/mem_cache/storage/backend_factory.py",
                                       "register_backend"),
}


def _plain_choice(choice: str) -> bool:
    return bool(choice) and choice not in ("none",) and "/" not in choice \
        and not choice.startswith(".")


def package_members(names: Iterable[str], choice: str, folder: str) -> list[str]:
    """The modules of the package ``<folder><choice>/`` among ``names`` (paths relative to
    the site-packages folder or wheel; not its sub-packages'), in order: what the choice's
    package may run. Empty: no backend, or a release without that package."""
    if not _plain_choice(choice):
        return []
    head = folder + choice + "/"
    got = sorted(n for n in names if n.startswith(head) and n.endswith(".py")
                 and "/" not in n[len(head):])
    return got if head + "__init__.py" in got else []


def registered(source: bytes, call: str, filename: str = "<registry>"
               ) -> dict[str, str] | None:
    """choice -> the dotted module a registry module maps it to: every call named ``call``
    (``X.register_backend(...)`` or ``register_backend(...)``) whose first two arguments are
    string literals (the choice, the module), at the module's top level (what runs when it is
    imported); a choice registered twice keeps the last, as SGLang's registry overwrites it.
    None: the module does not parse (importing it raises; what it registers is not known,
    which is not the same as registering nothing)."""
    import ast

    try:
        tree = ast.parse(source, filename)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    out: dict[str, str] = {}
    for stmt in tree.body:
        node = stmt.value if isinstance(stmt, ast.Expr) else None
        if not isinstance(node, ast.Call) or len(node.args) < 2:
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) \
            else None
        a, b = node.args[0], node.args[1]
        if name == call and isinstance(a, ast.Constant) and isinstance(a.value, str) \
                and isinstance(b, ast.Constant) and isinstance(b.value, str):
            out[a.value] = b.value
    return out


def member_of(module: str) -> tuple[str, str]:
    """The members a dotted module is read from, in the importer's order: the package's
    ``__init__.py``, then the module (``a.b.c`` -> ``a/b/c/__init__.py``, ``a/b/c.py``)."""
    path = module.replace(".", "/")
    return path + "/__init__.py", path + ".py"
