"""Tests for moonpin.readers.pyast.usage: static extraction of mooncake usage."""

from __future__ import annotations

import textwrap

import pytest

from moonpin.readers.pyast.usage import (
    FEATURES,
    BackendLiteral,
    CallFact,
    FileAnalysis,
    ImportFact,
    analyze_source,
    classify_feature,
    mentions_mooncake,
)

PS = "sglang/srt/distributed/parallel_state.py"


def run(src: str, path: str = "sglang/srt/x.py") -> FileAnalysis:
    result = analyze_source(textwrap.dedent(src), path)
    assert result.error is None, result.error
    return result


def imports(src: str, path: str = "sglang/srt/x.py") -> tuple[ImportFact, ...]:
    return run(src, path).imports


def only_import(src: str, path: str = "sglang/srt/x.py") -> ImportFact:
    found = imports(src, path)
    assert len(found) == 1, found
    return found[0]


def calls(src: str, path: str = "sglang/srt/x.py") -> list[tuple[str, str]]:
    return [(c.module, c.name) for c in run(src, path).calls]


# --------------------------------------------------------------------------
# Prefilter


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"from mooncake.pg import X\n", True),
        (b"x = 'mooncake'\n", True),
        (b"import torch\n", False),
        (b"MOONCAKE = 1\n", False),  # case-sensitive on purpose
        (b"", False),
    ],
)
def test_mentions_mooncake(data: bytes, expected: bool) -> None:
    assert mentions_mooncake(data) is expected


# --------------------------------------------------------------------------
# Import forms


@pytest.mark.parametrize(
    ("src", "expected"),
    [
        ("import mooncake.pg\n", [("mooncake.pg", (), None)]),
        ("import mooncake.pg as mpg\n", [("mooncake.pg", (), "mpg")]),
        ("import mooncake\n", [("mooncake", (), None)]),
        ("import os, mooncake.engine\n", [("mooncake.engine", (), None)]),
        ("from mooncake.pg import a, b\n", [("mooncake.pg", ("a", "b"), None)]),
        # the original name is recorded, the alias separately
        ("from mooncake.pg import a as b\n", [("mooncake.pg", ("a",), "b")]),
        # several names: alias only meaningful for a single name
        ("from mooncake.pg import a as b, c\n", [("mooncake.pg", ("a", "c"), None)]),
        ("from mooncake import pg\n", [("mooncake.pg", (), None)]),
        ("from mooncake import ep as mooncake_ep\n", [("mooncake.ep", (), "mooncake_ep")]),
        (
            "from mooncake import engine, store as st\n",
            [("mooncake.engine", (), None), ("mooncake.store", (), "st")],
        ),
        (
            "from mooncake import pg, BufferPool\n",
            [("mooncake.pg", (), None), ("mooncake", ("BufferPool",), None)],
        ),
        # the wheel's module naming scheme counts as a submodule
        (
            "from mooncake import mooncake_future_mod\n",
            [("mooncake.mooncake_future_mod", (), None)],
        ),
        ("from mooncake import set_host_ip\n", [("mooncake", ("set_host_ip",), None)]),
        ("from mooncake.store import *\n", [("mooncake.store", ("*",), None)]),
        (
            "from mooncake.reshard.weight import planner\n",
            [("mooncake.reshard.weight", ("planner",), None)],
        ),
        # look-alikes that are not the mooncake package
        (
            "from sglang.srt.mem_cache.storage.mooncake_store.mooncake_store"
            " import MooncakeStore\n",
            [],
        ),
        ("from mooncake_store import MooncakeStore\n", []),
        ("import mooncakex\nimport mooncake_store\n", []),
        ("from . import mooncake\nfrom .mooncake import conn\n", []),
        ("from ..mooncake.pg import X\n", []),
        ("from sglang.srt.disaggregation.mooncake import MooncakeKVManager\n", []),
    ],
)
def test_import_forms(src: str, expected: list[tuple[str, tuple[str, ...], str | None]]) -> None:
    got = [(f.module, f.names, f.alias) for f in imports(src)]
    assert got == expected
    assert all(not f.dynamic for f in imports(src))


@pytest.mark.parametrize(
    ("src", "module", "names", "alias"),
    [
        ("import importlib\nimportlib.import_module('mooncake.pg')\n", "mooncake.pg", (), None),
        (
            "from importlib import import_module\nimport_module('mooncake.ep')\n",
            "mooncake.ep",
            (),
            None,
        ),
        ("__import__('mooncake.engine')\n", "mooncake.engine", (), None),
        ("__import__('mooncake', fromlist=['pg'])\n", "mooncake", ("pg",), None),
        ("import importlib\nimportlib.import_module('.pg', 'mooncake')\n", "mooncake.pg", (), None),
        (
            "import importlib\nimportlib.import_module('.store', package='mooncake')\n",
            "mooncake.store",
            (),
            None,
        ),
        # implicit string concatenation is folded by the parser
        ("import importlib\nimportlib.import_module('mooncake' '.pg')\n", "mooncake.pg", (), None),
    ],
)
def test_dynamic_imports(src: str, module: str, names: tuple[str, ...], alias: str | None) -> None:
    fact = only_import(src)
    assert (fact.module, fact.names, fact.alias) == (module, names, alias)
    assert fact.dynamic is True
    assert fact.probe is False


@pytest.mark.parametrize(
    "src",
    [
        "import importlib\nimportlib.import_module(name)\n",
        "import importlib\nimportlib.import_module('torch.distributed')\n",
        "import importlib\nimportlib.import_module('.pg', 'sglang')\n",
        "import importlib\nimportlib.import_module(f'mooncake.{x}')\n",
        "load_module('mooncake.pg')\n",
    ],
)
def test_non_literal_or_foreign_dynamic_imports_ignored(src: str) -> None:
    assert imports(src) == ()


def test_find_spec_is_a_probe() -> None:
    # Shape of ServerArgs.validate_transfer_engine (sglang >= 0.5.10).
    fact = only_import(
        """
        import importlib.util

        class ServerArgs:
            def validate_transfer_engine(self):
                try:
                    ok = importlib.util.find_spec("mooncake.engine") is not None
                except (ModuleNotFoundError, ValueError):
                    ok = False
                return ok
        """
    )
    assert fact.module == "mooncake.engine"
    assert (fact.dynamic, fact.probe, fact.optional) == (True, True, True)
    assert fact.function == "ServerArgs.validate_transfer_engine"


# --------------------------------------------------------------------------
# Enclosing function


def test_function_qualnames_and_lines() -> None:
    found = imports(
        """
        import mooncake.store

        class MooncakeEPBuffer:
            from mooncake import ep

            def __init__(self):
                from mooncake.mooncake_ep_buffer import Buffer

        def init_process_group():
            def inner():
                from mooncake.pg import join_group
            async def ainner():
                import mooncake.engine
        """
    )
    assert [(f.module, f.function, f.line) for f in found] == [
        ("mooncake.store", None, 2),
        ("mooncake.ep", "MooncakeEPBuffer", 5),
        ("mooncake.mooncake_ep_buffer", "MooncakeEPBuffer.__init__", 8),
        ("mooncake.pg", "init_process_group.inner", 12),
        ("mooncake.engine", "init_process_group.ainner", 14),
    ]
    assert all(f.path == "sglang/srt/x.py" for f in found)


# --------------------------------------------------------------------------
# Optional vs hard


@pytest.mark.parametrize(
    ("src", "optional", "guarded"),
    [
        ("from mooncake.pg import X\n", False, False),
        # module-level flag, as token_dispatcher/mooncake.py in 0.5.4
        (
            """
            try:
                from mooncake.mooncake_ep_buffer import Buffer
                use_mooncake_ep = True
            except ImportError:
                use_mooncake_ep = False
            """,
            True,
            True,
        ),
        ("try:\n    import mooncake.pg\nexcept ModuleNotFoundError:\n    pass\n", True, True),
        (
            "def f():\n    try:\n        import mooncake.pg\n"
            "    except Exception:\n        return None\n",
            True,
            True,
        ),
        # bare except: pass, as ModelRunner.init_torch_distributed in 0.5.4
        ("try:\n    from mooncake import ep\nexcept:\n    pass\n", True, True),
        ("try:\n    import mooncake.pg\nexcept BaseException:\n    x = 1\n", True, True),
        (
            "try:\n    import mooncake.pg\nexcept (ValueError, ImportError):\n    x = 1\n",
            True,
            True,
        ),
        ("try:\n    import mooncake.pg\nexcept builtins.ImportError:\n    x = 1\n", True, True),
        # warn and return, as RemoteInstanceWeightTransporter.init_engine
        (
            """
            def init_engine(self):
                try:
                    from mooncake.engine import TransferEngine
                except ImportError:
                    logger.warning("pip install mooncake-transfer-engine")
                    return
            """,
            True,
            True,
        ),
        # re-raise with a friendlier message: still required -> hard
        (
            """
            def init_distributed_environment(backend):
                if "mooncake" in backend:
                    try:
                        from mooncake import ep as mooncake_ep
                    except ImportError as e:
                        raise ImportError("Please install mooncake") from e
            """,
            False,
            True,
        ),
        ("try:\n    import mooncake.pg\nexcept ImportError:\n    raise\n", False, True),
        (
            "try:\n    import mooncake.pg\nexcept ImportError:\n"
            "    log()\n    raise RuntimeError('x')\n",
            False,
            True,
        ),
        (
            "import sys\ntry:\n    import mooncake.pg\nexcept ImportError:\n    sys.exit(1)\n",
            False,
            True,
        ),
        (
            "try:\n    import mooncake.pg\nexcept ImportError:\n"
            "    if a:\n        raise A()\n    else:\n        raise B()\n",
            False,
            True,
        ),
        # a conditional raise may fall through -> survives
        (
            "try:\n    import mooncake.pg\nexcept ImportError:\n    if strict:\n        raise\n",
            True,
            True,
        ),
        # one surviving handler is enough
        (
            "try:\n    import mooncake.pg\nexcept ModuleNotFoundError:\n    raise\n"
            "except ImportError:\n    pg = None\n",
            True,
            True,
        ),
        # handlers that do not catch import failures do not guard
        ("try:\n    import mooncake.pg\nexcept ValueError:\n    pass\n", False, False),
        ("try:\n    import mooncake.pg\nfinally:\n    cleanup()\n", False, False),
        # only the try body is guarded
        (
            "try:\n    x = 1\nexcept ImportError:\n    pass\nelse:\n    import mooncake.pg\n",
            False,
            False,
        ),
        (
            "try:\n    x = 1\nexcept ImportError:\n    pass\nfinally:\n    import mooncake.pg\n",
            False,
            False,
        ),
        # a try around a def does not guard the body, which runs later
        (
            "try:\n    def f():\n        import mooncake.pg\nexcept ImportError:\n    pass\n",
            False,
            False,
        ),
        # ... but a class body runs immediately
        (
            "try:\n    class A:\n        import mooncake.pg\nexcept ImportError:\n    pass\n",
            True,
            True,
        ),
        # inner handler re-raises, outer one falls back
        (
            "try:\n    try:\n        import mooncake.pg\n    except ImportError:\n        raise\n"
            "except ImportError:\n    pg = None\n",
            True,
            True,
        ),
        # try* (Python 3.11)
        ("try:\n    import mooncake.pg\nexcept* ImportError:\n    pass\n", True, True),
    ],
)
def test_optional_vs_hard(src: str, optional: bool, guarded: bool) -> None:
    fact = only_import(src)
    assert fact.optional is optional
    assert fact.guarded is guarded
    assert fact.type_checking is False


@pytest.mark.parametrize(
    "src",
    [
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mooncake.pg import X\n",
        "import typing\nif typing.TYPE_CHECKING:\n    import mooncake.store\n",
        "def f():\n    if TYPE_CHECKING:\n        from mooncake.pg import X\n",
    ],
)
def test_type_checking_imports_are_optional(src: str) -> None:
    fact = only_import(src)
    assert fact.type_checking is True
    assert fact.optional is True


def test_type_checking_else_branch_is_runtime() -> None:
    fact = only_import("if TYPE_CHECKING:\n    pass\nelse:\n    from mooncake.pg import X\n")
    assert (fact.type_checking, fact.optional) == (False, False)


def test_conditional_lazy_import_is_hard() -> None:
    # GroupCoordinator.__init__ in 0.5.18+: guarded by an `if`, not a try.
    fact = only_import(
        """
        class GroupCoordinator:
            def __init__(self, torch_distributed_backend):
                if "mooncake" in torch_distributed_backend:
                    from mooncake.pg import MooncakeBackendOptions
        """,
        PS,
    )
    assert fact.optional is False
    assert fact.function == "GroupCoordinator.__init__"
    assert fact.feature == "elastic-ep"


# --------------------------------------------------------------------------
# Alternatives


def test_pg_ep_fallback_alternatives() -> None:
    found = imports(
        """
        try:
            from mooncake.pg import MooncakeBackendOptions
        except ImportError:
            from mooncake.ep import MooncakeBackendOptions
        """
    )
    by_module = {f.module: f for f in found}
    assert by_module["mooncake.pg"].alternatives == ("mooncake.ep",)
    assert by_module["mooncake.ep"].alternatives == ("mooncake.pg",)
    assert by_module["mooncake.pg"].optional is True
    # the fallback itself is not guarded: if it fails too, the error escapes
    assert by_module["mooncake.ep"].optional is False


def test_nested_fallback_chain() -> None:
    found = imports(
        """
        try:
            from mooncake.pg import join_group
        except ImportError:
            try:
                from mooncake.ep import join_group
            except ImportError:
                from mooncake import _ep
                join_group = None
        """
    )
    by_module = {f.module: f for f in found}
    assert by_module["mooncake.pg"].alternatives == ("mooncake._ep", "mooncake.ep")
    assert by_module["mooncake.ep"].alternatives == ("mooncake._ep", "mooncake.pg")
    assert by_module["mooncake._ep"].alternatives == ("mooncake.ep", "mooncake.pg")
    assert by_module["mooncake.ep"].optional is True
    assert by_module["mooncake._ep"].optional is False


def test_side_by_side_imports_are_not_alternatives() -> None:
    found = imports(
        """
        try:
            from mooncake.engine import TransferEngine
            from mooncake.store import MooncakeDistributedStore
        except ImportError:
            pass
        """
    )
    assert [f.alternatives for f in found] == [(), ()]
    assert all(f.optional for f in found)


def test_same_module_in_fallback_is_no_alternative() -> None:
    found = imports(
        "try:\n    from mooncake.pg import A\nexcept ImportError:\n    from mooncake.pg import B\n"
    )
    assert [f.alternatives for f in found] == [(), ()]


def test_handler_that_does_not_catch_imports_gives_no_alternatives() -> None:
    found = imports(
        "try:\n    from mooncake.pg import A\nexcept ValueError:\n    from mooncake.ep import A\n"
    )
    assert [f.alternatives for f in found] == [(), ()]


# --------------------------------------------------------------------------
# Feature classification


@pytest.mark.parametrize(
    ("path", "function", "module", "expected"),
    [
        ("sglang/srt/elastic_ep/elastic_ep.py", "try_recover_ranks", None, "elastic-ep"),
        ("sglang/srt/elastic_ep/expert_backup_manager.py", None, None, "elastic-ep"),
        (PS, "GroupCoordinator.__init__", "mooncake.pg", "elastic-ep"),
        ("sglang/srt/distributed/bootstrap.py", "_resolve_backend", None, "elastic-ep"),
        (
            "sglang/srt/layers/moe/token_dispatcher/mooncake.py",
            "EPBuffer.get_ep_buffer",
            None,
            "moe-a2a",
        ),
        ("sglang/srt/layers/moe/utils.py", None, None, "moe-a2a"),
        (
            "sglang/srt/disaggregation/mooncake/conn.py",
            "MooncakeKVManager.__init__",
            None,
            "pd-disaggregation",
        ),
        (
            "sglang/srt/disaggregation/mooncake/transfer_engine.py",
            None,
            "mooncake.engine",
            "pd-disaggregation",
        ),
        ("sglang/srt/disaggregation/encoder/runtime.py", None, None, "pd-disaggregation"),
        (
            "sglang/multimodal_gen/runtime/disaggregation/transport/engine.py",
            None,
            None,
            "pd-disaggregation",
        ),
        (
            "sglang/srt/mem_cache/storage/mooncake_store/mooncake_store.py",
            None,
            "mooncake.store",
            "hicache",
        ),
        ("sglang/srt/managers/cache_controller.py", None, None, "hicache"),
        # NVLink allocator lived in mem_cache/memory_pool.py "for disagg with nvlink"
        (
            "sglang/srt/mem_cache/memory_pool.py",
            "MHATokenToKVPool.__init__",
            "mooncake.allocator",
            "pd-disaggregation",
        ),
        ("sglang/srt/mem_cache/memory_pool.py", "MHATokenToKVPool.__init__", None, "hicache"),
        (
            "sglang/srt/model_executor/model_runner_components/remote_instance_weight_transporter.py",
            "RemoteInstanceWeightTransporter.init_engine",
            "mooncake.engine",
            "weight-transfer",
        ),
        ("sglang/srt/checkpoint_engine/update.py", None, None, "weight-transfer"),
        # model_runner.py hosts several features: the function decides
        (
            "sglang/srt/model_executor/model_runner.py",
            "ModelRunner.init_torch_distributed",
            "mooncake.ep",
            "elastic-ep",
        ),
        (
            "sglang/srt/model_executor/model_runner.py",
            "ModelRunner.remote_instance_init_transfer_engine",
            "mooncake.engine",
            "weight-transfer",
        ),
        (
            "sglang/srt/model_executor/model_runner.py",
            "ModelRunner.update_weights_from_distributed",
            None,
            "weight-transfer",
        ),
        ("sglang/srt/foo.py", "MooncakeEPBuffer.__init__", None, "moe-a2a"),
        ("sglang/srt/foo.py", "init_process_group", None, "elastic-ep"),
        # the module decides when path and function are silent
        ("sglang/srt/foo.py", "helper", "mooncake.pg", "elastic-ep"),
        ("sglang/srt/foo.py", "helper", "mooncake.ep", "elastic-ep"),
        ("sglang/srt/foo.py", None, "mooncake.mooncake_ep_buffer", "moe-a2a"),
        ("sglang/srt/foo.py", None, "mooncake.store", "hicache"),
        ("sglang/srt/foo.py", None, "mooncake.engine", "pd-disaggregation"),
        ("sglang/srt/foo.py", None, None, "other"),
        ("sglang/bench_serving.py", "main", "mooncake", "other"),
        ("sglang\\srt\\elastic_ep\\elastic_ep.py", None, None, "elastic-ep"),
    ],
)
def test_classify_feature(
    path: str, function: str | None, module: str | None, expected: str
) -> None:
    assert classify_feature(path, function, module) == expected
    assert expected in FEATURES


def test_feature_recorded_on_import_facts() -> None:
    src = "def f():\n    from mooncake.store import MooncakeDistributedStore\n"
    assert (
        only_import(src, "sglang/srt/mem_cache/storage/mooncake_store/mooncake_store.py").feature
        == "hicache"
    )
    assert only_import(src, "sglang/srt/misc.py").feature == "hicache"  # from the module
    assert (
        only_import(src, "sglang/srt/disaggregation/mooncake/conn.py").feature
        == "pd-disaggregation"
    )


# --------------------------------------------------------------------------
# Calls


def test_backend_options_call_arity_pg() -> None:
    # Shape of init_distributed_environment in 0.5.18+.
    result = run(
        """
        def init_distributed_environment(backend, world_size, max_world_size, recovered_rank):
            if backend == "mooncake":
                from mooncake.pg import MooncakeBackendOptions

                if max_world_size:
                    opts = MooncakeBackendOptions(active_ranks, recovered_rank, max_world_size)
                else:
                    opts = MooncakeBackendOptions(active_ranks, recovered_rank)
            torch.distributed.init_process_group(backend=backend, pg_options=opts)
        """,
        PS,
    )
    assert [(c.module, c.name, c.positional, c.function) for c in result.calls] == [
        ("mooncake.pg", "MooncakeBackendOptions", 3, "init_distributed_environment"),
        ("mooncake.pg", "MooncakeBackendOptions", 2, "init_distributed_environment"),
    ]
    assert result.calls[0].line == 7


def test_backend_options_call_arity_ep_old() -> None:
    # Shape of GroupCoordinator.__init__ in 0.5.10 (mooncake.ep, one argument).
    result = run(
        """
        class GroupCoordinator:
            def __init__(self, group_ranks, torch_distributed_backend):
                for ranks in group_ranks:
                    if "mooncake" in torch_distributed_backend:
                        from mooncake.ep import MooncakeBackendOptions

                        device_group = torch.distributed.new_group(
                            ranks, backend="mooncake",
                            pg_options=MooncakeBackendOptions(active_ranks),
                        )
        """,
        PS,
    )
    (call,) = result.calls
    assert (call.module, call.name, call.positional, call.keywords) == (
        "mooncake.ep",
        "MooncakeBackendOptions",
        1,
        (),
    )
    assert call.function == "GroupCoordinator.__init__"


def test_call_arguments_keywords_and_starred() -> None:
    result = run(
        """
        from mooncake.pg import MooncakeBackendOptions as Opts
        a = Opts(x, y, timeout=3, retries=2)
        b = Opts(*args)
        c = Opts(x, **kw)
        d = Opts()
        """
    )
    got = [(c.name, c.positional, c.keywords, c.starred) for c in result.calls]
    assert got == [
        ("MooncakeBackendOptions", 2, ("timeout", "retries"), False),
        ("MooncakeBackendOptions", 0, (), True),
        ("MooncakeBackendOptions", 1, (), True),
        ("MooncakeBackendOptions", 0, (), False),
    ]


@pytest.mark.parametrize(
    ("src", "expected"),
    [
        # module alias attribute, as parallel_state/model_runner up to 0.5.14
        (
            "def f():\n    from mooncake import ep as mooncake_ep\n"
            "    mooncake_ep.set_host_ip(ip)\n",
            [("mooncake.ep", "set_host_ip")],
        ),
        (
            "import mooncake.pg as mooncake_pg\nmooncake_pg.set_transfer_engine(e)\n",
            [("mooncake.pg", "set_transfer_engine")],
        ),
        (
            "from mooncake import pg\npg.MooncakeBackendOptions(r)\n",
            [("mooncake.pg", "MooncakeBackendOptions")],
        ),
        # `import mooncake.pg` binds `mooncake`; the submodule is recovered
        ("import mooncake.pg\nmooncake.pg.join_group(b)\n", [("mooncake.pg", "join_group")]),
        (
            "import mooncake\nmooncake.store.MooncakeDistributedStore()\n",
            [("mooncake.store", "MooncakeDistributedStore")],
        ),
        # class attribute of an imported name
        (
            "from mooncake.mooncake_ep_buffer import Buffer\n"
            "Buffer.get_ep_buffer_size_hint(a, b, c, d)\n",
            [("mooncake.mooncake_ep_buffer", "Buffer.get_ep_buffer_size_hint")],
        ),
        ("from mooncake import BufferPool\nBufferPool(1)\n", [("mooncake", "BufferPool")]),
        # dynamic import bound to a name
        (
            "import importlib\npg = importlib.import_module('mooncake.pg')\n"
            "pg.recover_ranks(b, r)\n",
            [("mooncake.pg", "recover_ranks")],
        ),
        # nested function sees the enclosing function's import
        (
            "def outer():\n    from mooncake.pg import join_group\n"
            "    def inner(b):\n        join_group(b)\n    inner(1)\n",
            [("mooncake.pg", "join_group")],
        ),
        # unrelated calls
        ("import torch\ntorch.distributed.new_group([0])\nprint('mooncake')\n", []),
        (
            "from sglang.srt.mem_cache.storage.mooncake_store import MooncakeStore\n"
            "MooncakeStore()\n",
            [],
        ),
        # import in another function is not visible
        (
            "def a():\n    from mooncake.pg import join_group\n\ndef b():\n    join_group(x)\n",
            [],
        ),
        # a parameter shadows the module-level import
        (
            "from mooncake import ep as mooncake_ep\n\n"
            "def wait(mooncake_ep):\n    mooncake_ep.get_peer_state(b, r)\n",
            [],
        ),
        # a local assignment shadows it too
        (
            "from mooncake.pg import join_group\n\ndef f():\n"
            "    join_group = other\n    join_group(x)\n",
            [],
        ),
        # class bodies are invisible to their methods
        (
            "class A:\n    from mooncake.pg import join_group\n"
            "    def m(self):\n        join_group(x)\n",
            [],
        ),
        # calling the module object itself is not a call of a mooncake name
        ("import mooncake.pg as p\np()\n", []),
    ],
)
def test_call_resolution(src: str, expected: list[tuple[str, str]]) -> None:
    assert calls(src) == expected


def test_calls_in_elastic_ep_shape() -> None:
    result = run(
        """
        def _try_recover_world(world_backend, global_ranks):
            from mooncake.pg import get_peer_state, recover_ranks

            if not all(get_peer_state(world_backend, global_ranks)):
                return False
            recover_ranks(world_backend, global_ranks)
            return True
        """,
        "sglang/srt/elastic_ep/elastic_ep.py",
    )
    assert result.calls == (
        CallFact(
            "mooncake.pg", "get_peer_state", result.path, 5, "_try_recover_world", 2, (), False
        ),
        CallFact(
            "mooncake.pg", "recover_ranks", result.path, 7, "_try_recover_world", 2, (), False
        ),
    )
    (imp,) = result.imports
    assert imp.names == ("get_peer_state", "recover_ranks")
    assert (imp.optional, imp.feature) == (False, "elastic-ep")


# --------------------------------------------------------------------------
# Backend literals


def backends(src: str, path: str = PS) -> list[tuple[str, str, str | None]]:
    return [(b.value, b.context, b.subject) for b in run(src, path).backends]


@pytest.mark.parametrize(
    ("src", "expected"),
    [
        (
            "torch.distributed.new_group(ranks, backend='mooncake', pg_options=o)\n",
            [("mooncake", "pg-call", "torch.distributed.new_group")],
        ),
        (
            "dist.new_group(ranks, backend='mooncake-cpu')\n",
            [("mooncake-cpu", "pg-call", "dist.new_group")],
        ),
        (
            "init_process_group('mooncake', rank=0)\n",
            [("mooncake", "pg-call", "init_process_group")],
        ),
        (
            "dist.Backend.register_backend('mooncake', create, devices=['cuda'])\n",
            [("mooncake", "pg-call", "dist.Backend.register_backend")],
        ),
        # SGLang's storage factory has its own register_backend
        ("StorageBackendFactory.register_backend('mooncake', 'm', 'C')\n", []),
        ("metrics.observe(t, backend='mooncake')\n", [("mooncake", "backend=", "metrics.observe")]),
        ("if backend == 'mooncake':\n    pass\n", [("mooncake", "compare", "backend")]),
        ("ok = backend != 'mooncake-cpu'\n", [("mooncake-cpu", "compare", "backend")]),
        (
            "if 'mooncake' in torch_distributed_backend:\n    pass\n",
            [("mooncake", "compare", "torch_distributed_backend")],
        ),
        (
            "x = cfg.elastic_ep_backend in ('mooncake', 'nixl', 'mooncake-cpu')\n",
            [
                ("mooncake", "compare", "cfg.elastic_ep_backend"),
                ("mooncake-cpu", "compare", "cfg.elastic_ep_backend"),
            ],
        ),
        (
            "if get_exec().moe.elastic_ep_backend == 'mooncake':\n    pass\n",
            [("mooncake", "compare", "get_exec().moe.elastic_ep_backend")],
        ),
        ("backend = 'mooncake'\n", [("mooncake", "assign", "backend")]),
        (
            "self.pg_backend: str = 'mooncake-cpu'\n",
            [("mooncake-cpu", "assign", "self.pg_backend")],
        ),
        # other kinds of backends, or not a backend at all
        ("if server_args.hicache_storage_backend == 'mooncake':\n    pass\n", []),
        ("if self.disaggregation_transfer_backend == 'mooncake':\n    pass\n", []),
        ("if moe_a2a_backend == 'mooncake':\n    pass\n", []),
        ("if args.dataset_name == 'mooncake':\n    pass\n", []),
        ("MOONCAKE = 'mooncake'\nname = 'mooncake'\n", []),
        ("d = {'backend': 'mooncake'}\n", []),
        ("print('mooncake')\nf('mooncake')\n", []),
        ("if backend == 'nccl':\n    pass\nif backend == 'Mooncake':\n    pass\n", []),
        ("new_group(ranks, backend=f'mooncake')\n", []),
    ],
)
def test_backend_literals(src: str, expected: list[tuple[str, str, str | None]]) -> None:
    assert backends(src) == expected


def test_backend_literal_location_and_feature() -> None:
    result = run(
        """
        class ModelRunner:
            def init_torch_distributed(self):
                if self.server_args.elastic_ep_backend == "mooncake":
                    backend = "mooncake"
        """,
        "sglang/srt/model_executor/model_runner.py",
    )
    assert result.backends == (
        BackendLiteral(
            "mooncake",
            result.path,
            4,
            "ModelRunner.init_torch_distributed",
            "compare",
            "self.server_args.elastic_ep_backend",
            "elastic-ep",
        ),
        BackendLiteral(
            "mooncake",
            result.path,
            5,
            "ModelRunner.init_torch_distributed",
            "assign",
            "backend",
            "elastic-ep",
        ),
    )


def test_transfer_and_storage_locations_drop_weak_literals() -> None:
    src = (
        "if backend == 'mooncake':\n    observe(t, backend='mooncake')\n"
        "dist.new_group(r, backend='mooncake')\n"
    )
    for path in (
        "sglang/srt/disaggregation/encoder/runtime.py",
        "sglang/srt/mem_cache/storage/backend_factory.py",
    ):
        # only the genuine process-group call survives there
        assert backends(src, path) == [("mooncake", "pg-call", "dist.new_group")]
    assert [c for _, c, _ in backends(src, "sglang/srt/misc.py")] == [
        "compare",
        "backend=",
        "pg-call",
    ]


# --------------------------------------------------------------------------
# Errors and decoding


@pytest.mark.parametrize(
    ("data", "error_start"),
    [
        (b"import mooncake.pg\ndef f(:\n    pass\n", "SyntaxError: "),
        (b"import mooncake.pg\nprint 'hello'\n", "SyntaxError: "),
        (b"import mooncake.pg\nexec 'x = 1'\n", "SyntaxError: "),
        (b"import mooncake.pg\nx = 1\x00\n", ""),
        (b"# -*- coding: no-such-codec -*-\nimport mooncake.pg\n", "SyntaxError: "),
        # undecodable UTF-8 after the first two lines: caught by decoding
        (b"import mooncake.pg\nx = 1\ny = '\xff\xfe caf\xe9'\n", "UnicodeDecodeError: "),
        # ... within them: tokenize.detect_encoding already refuses
        (b"x = '\xff caf\xe9'\nimport mooncake.pg\n", "SyntaxError: "),
        (b"# coding: ascii\nimport mooncake.pg\nx = '\xc3\xa9'\n", "UnicodeDecodeError: "),
        (b"import mooncake.pg\nx = " + b"(" * 300 + b"1" + b")" * 300 + b"\n", ""),
        (b"import mooncake.pg\nx = " + b"-" * 100_000 + b"1\n", ""),
    ],
)
def test_errors_are_recorded_not_raised(data: bytes, error_start: str) -> None:
    result = analyze_source(data, "bad.py")
    assert result.error is not None
    assert result.error.startswith(error_start)
    assert ": " in result.error
    assert (result.imports, result.calls, result.backends) == ((), (), ())
    assert result.path == "bad.py"


def test_deep_unary_nesting_is_described() -> None:
    result = analyze_source(b"x = " + b"-" * 100_000 + b"1\n", "deep.py")
    assert result.error in (
        "MemoryError: source nested too deeply",
        "RecursionError: source nested too deeply",
    ) or (result.error or "").startswith("RecursionError: maximum recursion depth")


def test_deep_but_legal_block_nesting_still_walks() -> None:
    depth = 99  # the tokenizer refuses 100 levels of indentation
    src = (
        "".join(" " * i + "if x:\n" for i in range(depth))
        + " " * depth
        + "from mooncake.pg import X\n"
    )
    assert [f.module for f in run(src).imports] == ["mooncake.pg"]


def test_syntax_error_message_has_line() -> None:
    result = analyze_source(b"import mooncake.pg\n\n\nx = = 1\n", "bad.py")
    assert result.error is not None
    assert result.error.startswith("SyntaxError: invalid syntax")
    assert result.error.endswith("(line 4)")


def test_null_bytes_error_names_the_problem() -> None:
    result = analyze_source(b"import mooncake.pg\x00\n", "nul.py")
    assert result.error is not None
    assert "null bytes" in result.error


@pytest.mark.parametrize(
    "data",
    [
        "# -*- coding: latin-1 -*-\nimport mooncake.pg\nx = 'café'\n".encode("latin-1"),
        b"\xef\xbb\xbfimport mooncake.pg\n",
        "import mooncake.pg\nx = 'café'\n".encode(),
        b"import mooncake.pg\r\nx = 1\r\n",
    ],
)
def test_encodings_that_decode(data: bytes) -> None:
    result = analyze_source(data, "ok.py")
    assert result.error is None
    assert [f.module for f in result.imports] == ["mooncake.pg"]


def test_str_input_is_accepted() -> None:
    result = analyze_source("from mooncake import pg\n", "s.py")
    assert result.error is None
    assert result.imports[0].module == "mooncake.pg"


def test_source_is_never_executed() -> None:
    src = b"import sys\nsys.exit(3)\nraise SystemExit\nimport mooncake.pg\n"
    result = analyze_source(src, "exits.py")
    assert result.error is None
    assert [f.module for f in result.imports] == ["mooncake.pg"]


def test_facts_sorted_by_line() -> None:
    result = run(
        """
        def late():
            from mooncake.pg import b
            b()

        from mooncake.ep import a
        a()
        """
    )
    assert [f.line for f in result.imports] == [3, 6]
    assert [c.line for c in result.calls] == [4, 7]


@pytest.mark.parametrize(
    ("src", "expected"),
    [
        (b"import mooncake.pg as pg\n", True),
        (b"from mooncake.ep import MooncakeBackendOptions\n", True),
        (b"from mooncake import ep as mooncake_ep\n", True),
        (b"from mooncake import engine, pg\n", True),
        (b'm = importlib.import_module("mooncake.pg")\n', True),
        (b"from mooncake.engine import TransferEngine\n", False),
        (b"from mooncake.mooncake_ep_buffer import Buffer\n", False),
        (b'backend = "mooncake"\n', False),
    ],
)
def test_mentions_pg_module(src: bytes, expected: bool) -> None:
    from moonpin.readers.pyast.usage import analyze_source, mentions_pg_module, pg_needs

    assert mentions_pg_module(src) is expected
    # the prefilter never hides a file the full analysis would take a module from
    needs = pg_needs(analyze_source(src, "x.py").imports)
    assert (needs.module is not None) <= mentions_pg_module(src)
