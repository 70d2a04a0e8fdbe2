"""The imports SGLang runs under a test on a launch argument's value (readers/launch/guarded):
each shape real releases use, the ones it must call unread, and hostile sources."""

from __future__ import annotations

import time

import pytest

from moonpin.readers.launch.guarded import default_of, for_choice, read_file

DEST = "elastic_ep_backend"
CHOICES = ("mooncake", "nixl", "other")


def _imports(src: str, default: str | None = None) -> dict[str, list[tuple[str, int]]]:
    """choice -> [(module, line)] it imports; unread imports as ("?module", line)."""
    r = read_file(src.encode(), "m.py", DEST)
    assert r.error is None, r.error
    out = {}
    for c in CHOICES:
        got, unread = for_choice([r], c, default)
        out[c] = [(i.module, i.line) for i in got] + [("?" + u.module, u.line)
                                                      for u in unread]
    return out


MOONCAKE_ONLY = {"mooncake": [("mc", 3)], "nixl": [], "other": []}
EVERY = {"mooncake": [("mc", 3)], "nixl": [("mc", 3)], "other": [("mc", 3)]}


@pytest.mark.parametrize(("src", "want"), [
    # 0.5.23's mooncake_transfer_engine.py / bootstrap.py
    ("def f():\n    if get_exec().moe.elastic_ep_backend == 'mooncake':\n"
     "        from mc import a\n", MOONCAKE_ONLY),
    # up to 0.5.18: the server args object
    ("def f(self):\n    if self.server_args.elastic_ep_backend == 'mooncake':\n"
     "        import mc\n", MOONCAKE_ONLY),
    ("def f():\n    if get_global_server_args().elastic_ep_backend == 'mooncake':\n"
     "        import mc\n", MOONCAKE_ONLY),
    # the literal on the left; is; in a tuple / list / set
    ("def f(a):\n    if 'mooncake' == a.elastic_ep_backend:\n        import mc\n", MOONCAKE_ONLY),
    ("def f(a):\n    if a.elastic_ep_backend is 'mooncake':\n        import mc\n", MOONCAKE_ONLY),
    ("def f(a):\n    if a.elastic_ep_backend in ('mooncake',):\n        import mc\n",
     MOONCAKE_ONLY),
    ("def f(a):\n    if a.elastic_ep_backend in ['mooncake', 'nixl']:\n        import mc\n",
     {"mooncake": [("mc", 3)], "nixl": [("mc", 3)], "other": []}),
    # not in: None (the default) passes it too, so no choice makes it likelier
    ("def f(a):\n    if a.elastic_ep_backend not in {'mooncake'}:\n        import mc\n",
     {"mooncake": [], "nixl": [], "other": []}),
    ("def f(a):\n    if a.elastic_ep_backend and a.elastic_ep_backend not in {'mooncake'}:\n"
     "        import mc\n", {"mooncake": [], "nixl": [("mc", 3)], "other": [("mc", 3)]}),
    # != ... else
    ("def f(a):\n    if a.elastic_ep_backend != 'mooncake':\n        pass\n    else:\n"
     "        import mc\n", {"mooncake": [("mc", 5)], "nixl": [], "other": []}),
    # a parameter passed by its own name (0.5.23's dist_barrier_after_load)
    ("def f(*, elastic_ep_backend):\n    if elastic_ep_backend == 'mooncake':\n"
     "        import mc\n", MOONCAKE_ONLY),
    # a local bound from it
    ("def f(a):\n    b = a.elastic_ep_backend\n    if b == 'mooncake':\n        import mc\n",
     {"mooncake": [("mc", 4)], "nixl": [], "other": []}),
    # a local bound to a condition (0.5.23's use_mooncake_te)
    ("def f(a):\n    use = a.x or a.elastic_ep_backend == 'mooncake'\n    if use:\n"
     "        import mc\n", {"mooncake": [("mc", 4)], "nixl": [], "other": []}),
    # an early-return guard, and assert
    ("def f(a):\n    if a.elastic_ep_backend != 'mooncake':\n        return\n    import mc\n",
     {"mooncake": [("mc", 4)], "nixl": [], "other": []}),
    ("def f(a):\n    if a.elastic_ep_backend is None:\n        raise ValueError\n    import mc\n",
     {"mooncake": [("mc", 4)], "nixl": [("mc", 4)], "other": [("mc", 4)]}),
    ("def f(a):\n    assert a.elastic_ep_backend == 'mooncake'\n    import mc\n",
     MOONCAKE_ONLY),
    # its own truth; is not None: every choice
    ("def f(a):\n    if a.elastic_ep_backend:\n        import mc\n", EVERY),
    ("def f(a):\n    if a.elastic_ep_backend is not None:\n        import mc\n", EVERY),
    # combined: another condition unknown
    ("def f(a):\n    if a.x and a.elastic_ep_backend == 'mooncake':\n        import mc\n",
     MOONCAKE_ONLY),
    ("def f(a):\n    if a.x or a.elastic_ep_backend == 'mooncake':\n        import mc\n",
     MOONCAKE_ONLY),
    ("def f(a):\n    if not (a.elastic_ep_backend != 'mooncake'):\n        import mc\n",
     MOONCAKE_ONLY),
    # a def under the test carries it; nested ifs
    ("if cfg.elastic_ep_backend == 'mooncake':\n    def g():\n        import mc\n",
     MOONCAKE_ONLY),
    ("def f(a):\n    if a.elastic_ep_backend == 'mooncake':\n        if a.y:\n"
     "            import mc\n", {"mooncake": [("mc", 4)], "nixl": [], "other": []}),
    # inside try/with/for under the test
    ("def f(a):\n    if a.elastic_ep_backend == 'mooncake':\n        try:\n"
     "            import mc\n        except ImportError:\n            raise\n",
     {"mooncake": [("mc", 4)], "nixl": [], "other": []}),
    # a test the choice fails beside one it passes: not run
    ("def f(a):\n    if a.elastic_ep_backend == 'nixl':\n        if a.elastic_ep_backend"
     " == 'mooncake':\n            import mc\n", {"mooncake": [], "nixl": [], "other": []}),
    # SGLang's own and the standard library's imports are not kept; nor relative ones
    ("def f(a):\n    if a.elastic_ep_backend == 'mooncake':\n        import os\n"
     "        from sglang.srt import x\n        from . import y\n",
     {"mooncake": [], "nixl": [], "other": []}),
    # an import under no test on the argument is not one of its choice's
    ("import mc\nif a.y == 'mooncake':\n    import mc2\n",
     {"mooncake": [], "nixl": [], "other": []}),
])
def test_each_shape(src: str, want: dict[str, list[tuple[str, int]]]) -> None:
    assert _imports(src) == want


def test_the_default_is_the_baseline() -> None:
    """``--moe-a2a-backend``'s default is "none": ``!= "none"`` counts for every choice,
    while with a None default it would count for none."""
    src = "class C:\n    elastic_ep_backend: str = 'none'\n\n" \
          "def f(a):\n    if a.elastic_ep_backend != 'none':\n        import x\n"
    r = read_file(src.encode(), "m.py", DEST)
    assert default_of([r]) == "none"
    assert [i.module for i in for_choice([r], "nixl", "none")[0]] == ["x"]
    assert for_choice([r], "nixl", None)[0] == []  # None != "none" too: no change


@pytest.mark.parametrize("test", [
    "a.elastic_ep_backend.startswith('moon')",
    "a.elastic_ep_backend == b.c",
    "a.elastic_ep_backend in 'mooncake'",
    "is_mooncake(a.elastic_ep_backend)",
    "get_elastic_ep_backend().is_mooncake()",
    "a.elastic_ep_backend < 'n'",
    "'x' < a.elastic_ep_backend < 'z'",
])
def test_shapes_not_understood_are_unread_not_guessed(test: str) -> None:
    src = f"def f(a):\n    if {test}:\n        import mc\n"
    got = _imports(src)
    assert got == {"mooncake": [("?mc", 2)], "nixl": [("?mc", 2)], "other": [("?mc", 2)]}
    r = read_file(src.encode(), "m.py", DEST)
    assert r.unread[0].text == test


@pytest.mark.parametrize("literal", ["0x" + "f" * 5000, "0o" + "7" * 6000, "0b" + "1" * 20_000])
def test_a_huge_int_literal_python_reads_is_read(literal: str) -> None:
    """Python's int-string limit (4,300 digits) bounds decimal only: a 5,000-digit hex
    literal parses, and a test comparing the option with it is unread like any other
    comparison with a non-string (the whole file was an error: ast.unparse writes ints in
    decimal). Its text is spelled in hex."""
    src = f"def f(a):\n    if a.elastic_ep_backend == {literal}:\n        import mc\n"
    compile(src, "m.py", "exec")  # Python reads it
    r = read_file(src.encode(), "m.py", DEST)
    assert r.error is None, r.error
    assert _imports(src) == {"mooncake": [("?mc", 2)], "nixl": [("?mc", 2)],
                             "other": [("?mc", 2)]}
    assert r.unread[0].text.startswith("a.elastic_ep_backend == 0xfff")


def test_a_huge_decimal_literal_is_what_python_says_of_it() -> None:
    """Past the limit in decimal, Python itself refuses the source: said, as Python says it."""
    src = "def f(a):\n    if a.elastic_ep_backend == " + "9" * 5000 + ":\n        import mc\n"
    with pytest.raises(SyntaxError, match="integer string conversion"):
        compile(src, "m.py", "exec")
    r = read_file(src.encode(), "m.py", DEST)
    assert r.error is not None and "SyntaxError" in r.error and "4300" in r.error


def test_an_unread_test_beside_one_the_choice_fails_rules_it_out() -> None:
    src = ("def f(a):\n    if a.elastic_ep_backend == 'mooncake':\n"
           "        if a.elastic_ep_backend.startswith('m'):\n            import mc\n")
    assert _imports(src) == {"mooncake": [("?mc", 3)], "nixl": [], "other": []}


@pytest.mark.parametrize(("src", "said"), [
    ("if cfg.elastic_ep_backend == 'x':\n    import x(\n", "SyntaxError"),
    ("elastic_ep_backend = " + "(" * 300 + ")" * 300 + "\n", "SyntaxError"),
    ("elastic_ep_backend = " + "-" * 100_000 + "1\n", "nested too deeply"),
    ("elastic_ep_backend = 1\n\0\n", "null bytes"),
])
def test_hostile_sources_are_said(src: str, said: str) -> None:
    r = read_file(src.encode(), "m.py", DEST)
    assert r.error is not None and said in r.error and r.error.startswith("m.py: ")
    assert r.imports == ()


def test_deep_nesting_of_tests_and_locals() -> None:
    """Tests nested as deep as the parser allows, and a chain of locals each bound from the
    last: read, or unread past the reader's own bound, never a crash."""
    body = "if a.elastic_ep_backend:\n" + "".join(
        "    " * (i + 1) + f"if a.elastic_ep_backend != 'n{i}':\n" for i in range(89))
    src = "def f(a):\n" + "\n".join("    " + ln for ln in body.splitlines()) + "\n" + \
        "    " * 91 + "import mc\n"
    r = read_file(src.encode(), "m.py", DEST)
    assert r.error is None and [i.module for i in for_choice([r], "mooncake", None)[0]] == ["mc"]
    chain = "def f(a):\n    b0 = a.elastic_ep_backend == 'mooncake'\n" + "".join(
        f"    b{i + 1} = b{i} and a.y\n" for i in range(200)) + "    if b200:\n        import mc\n"
    r = read_file(chain.encode(), "m.py", DEST)
    assert r.error is None
    assert [i.module for i in for_choice([r], "mooncake", None)[0]] == ["mc"]
    assert for_choice([r], "nixl", None) == ([], [])


def test_a_huge_source_not_naming_the_option_is_not_parsed() -> None:
    big = b"x = 1\n" * 3_000_000  # 18 MB
    t = time.perf_counter()
    assert read_file(big, "big.py", DEST).imports == ()
    assert time.perf_counter() - t < 1.0


def test_a_large_source_naming_it_is_read() -> None:
    one = "if cfg.elastic_ep_backend == 'mooncake':\n    import mc\n"
    r = read_file((one * 20_000).encode(), "big.py", DEST)
    assert r.error is None and len(r.imports) == 20_000


def test_a_test_is_read_with_the_locals_where_it_is_made() -> None:
    src = ("def f(a):\n    b = a.elastic_ep_backend\n    if b == 'mooncake':\n"
           "        b = a.other\n        import mc\n")
    assert _imports(src) == {"mooncake": [("mc", 5)], "nixl": [], "other": []}


def test_a_literal_only_a_binding_names_is_still_a_choice() -> None:
    src = ("def f(a):\n    b = a.elastic_ep_backend\n    x = 1\n"
           "    use = b == 'mooncake'\n    if use:\n        import mc\n")
    assert _imports(src) == {"mooncake": [("mc", 6)], "nixl": [], "other": []}
