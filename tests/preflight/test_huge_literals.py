"""A huge int literal in a file the check reads with ``ast`` (a judged image's package, its
``.pth`` files, SGLang's sources, mooncake's loaders): CPython's int-string limit
(``sys.set_int_max_str_digits``, 4,300 digits) bounds only the bases that are not a power of
two, so a 5,000-digit hex literal parses, while ``ast.unparse`` writes every int in decimal
and raises ValueError. Each reading that writes a node back as text goes through
:func:`moonpin.readers.pyast.astname.unparse`; before, each case below ended the check with
a traceback instead of a verdict."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from moonpin.readers.native.rules import parse, raise_steps
from moonpin.resolver.args.rules import Unevaluable, evaluate
from tests.lib.checkrun import run, small_kb
from tests.lib.images import KEYED_JIT_LOADER, healthy_image, loader_text

BIG = "0x" + "f" * 5000


def test_a_pth_line_that_exits_with_a_huge_code_stops_the_interpreter(tmp_path: Path) -> None:
    site = healthy_image(tmp_path / "site")
    (site / "zz-start.pth").write_text(f"import sys; raise SystemExit({BIG})\n")
    r = run(site, kb=small_kb(tmp_path))
    line = r.line("interpreter")
    assert r.rc == 1 and line.startswith("fail  interpreter:"), r.out
    assert "raise SystemExit(0xfff" in line, line


def test_mooncakes_loader_raising_a_huge_literal_is_read(tmp_path: Path) -> None:
    """The message its ``except`` raises (an f-string naming the literal) and an import
    target it computes from one: read, judged."""
    site = healthy_image(tmp_path / "site")
    text = loader_text('"mooncake.pg" + version_suffix')
    (site / "mooncake" / "pg.py").write_text(
        text.replace("{torch_version}", "{" + BIG + "}"))
    r = run(site, kb=small_kb(tmp_path))
    assert r.rc == 0 and r.line("build").startswith("pass  build: loader finds pg_2_13_0"), r.out

    (site / "mooncake" / "pg.py").write_text(
        text + f"\nother = importlib.import_module(computed({BIG}))\n")
    r = run(site, kb=small_kb(tmp_path))
    assert r.rc == 1 and r.line("loader").startswith("fail  loader: pg.py"), r.out


def test_sglangs_source_comparing_through_a_huge_literal_is_read(tmp_path: Path) -> None:
    site = healthy_image(tmp_path / "site")
    src = site / "sglang" / "srt" / "distributed" / "parallel_state.py"
    src.write_text(src.read_text() + f"\n\ndef f():\n    if get({BIG}).moe.elastic_ep_backend"
                   " == 'mooncake':\n        pass\n")
    r = run(site, kb=small_kb(tmp_path))
    assert r.rc == 0 and r.out.rstrip().endswith("usable (deep probe not run: --no-deep)"), r.out


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_a_plain_import_by_a_huge_literal_is_said_not_judged(tmp_path: Path) -> None:
    from tests.preflight.test_extensions_plain import MORI, _mori, _site

    site = _site(tmp_path)
    _mori(site, f"import importlib\nimport torch\nimportlib.import_module({BIG})\n")
    r = run(site, *MORI, ep=False)
    line = r.line("mori")
    assert line.startswith("skip  mori:") and "not judged: mori/__init__.py:3 imports a module " \
        "by a computed name (importlib): 0xfff" in line, r.out


def test_mooncakes_cache_key_with_a_huge_literal_is_read(tmp_path: Path) -> None:
    """``_cache_key`` hashing a huge literal, and the cache folder read from an
    environment lookup on one: no key computed (a shape not recognised), the
    toolchain judged."""
    from moonpin.preflight.env.rootfs import ImageConfig
    from moonpin.preflight.run import check_image
    from tests.preflight.test_jit_cache import _keyed_root

    root = tmp_path / "root"
    site = _keyed_root(root)
    loader = site / "mooncake" / "pg.py"
    loader.write_text(KEYED_JIT_LOADER.replace(
        "digest.update(backend.encode())", f"digest.update(backend.encode({BIG}))").replace(
        'os.environ.get("MOONCAKE_PG_JIT_DIR")', f'({BIG}).get("MOONCAKE_PG_JIT_DIR")'))
    rep = check_image(elastic_ep_backend="mooncake", rootfs=root, kb_path=small_kb(tmp_path),
                      config=ImageConfig(env=["PATH=/opt/venv/bin:/usr/bin:/bin"]),
                      deep=False, source_cache=False)
    got = [c for c in rep.checks if c.name in ("adapter", "toolchain")]
    assert len(got) == 1 and got[0].status in ("warn", "fail"), rep.checks


def test_the_scrapers_rule_reader_and_the_launch_evaluator_read_a_huge_literal() -> None:
    """The extractor of a native extension's loader rules (a scraped wheel's module) and
    the launch-rule evaluator (a rule read from SGLang's sources) write it in hex."""
    tree = parse(f"def load():\n    if x == {BIG}:\n        raise ImportError('no')\n"
                 .encode(), "pkg/__init__.py")
    (step,) = raise_steps(tree, "pkg/__init__.py", frozenset({"load"}))
    assert step.condition is not None and step.condition.startswith("x == 0xfff"), step
    with pytest.raises(Unevaluable, match=r"call get\(\.\.\.\)|0xfff"):
        evaluate(f"get({BIG}).x", {})
    with pytest.raises(Unevaluable, match="0xfff"):
        evaluate(f"({BIG}).x == 1", {})
