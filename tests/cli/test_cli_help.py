"""Every command's -h documents every option and ends with its exit codes."""

from __future__ import annotations

import argparse

import pytest

from moonpin.cli.main import build_parser, main
from moonpin.preflight.run import _parser as check_parser
from moonpin.resolver.matrix import table as matrix


def _commands() -> dict[str, argparse.ArgumentParser]:
    top = build_parser(with_matrix=matrix.add_parser)
    out = {"moonpin": top}
    (sub,) = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    for name, p in sub.choices.items():
        if name == "check":  # a stand-in: `moonpin check` has its own parser
            p = check_parser()
        out[name] = p
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                out.update({f"{name} {n}": sp for n, sp in a.choices.items()})
    return out


COMMANDS = _commands()


def test_every_command_is_walked() -> None:
    assert {"scrape", "kb info", "kb resolve", "show", "which", "explain", "check", "matrix",
            "pins", "renovate", "constraints", "args", "triples", "help"} <= set(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_has_help_text(name: str) -> None:
    missing = [a.option_strings[0] if a.option_strings else a.dest
               for a in COMMANDS[name]._actions
               if a.help is not argparse.SUPPRESS and not (a.help or "").strip()
               and not isinstance(a, argparse._SubParsersAction)]
    assert not missing, f"`moonpin {name} -h` leaves undocumented: {', '.join(missing)}"


@pytest.mark.parametrize("name", sorted(set(COMMANDS) - {"moonpin"}))
def test_every_command_help_ends_with_its_exit_codes(name: str) -> None:
    text = COMMANDS[name].format_help().rstrip()
    last = " ".join(text.split("\n\n")[-1].split())
    assert last.startswith("exit codes: 0 "), f"`moonpin {name} -h` ends with {last!r}"
    assert "; 2 " in last or name == "help"


def test_which_help_documents_its_positional_and_options(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["which", "-h"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    for needle in ("what to find: mooncake needs --sglang", "--sglang VERSION      the SGLang",
                   "--mooncake DIST==VERSION\n", "--json                print the answer",
                   "latest", "exit codes: 0 at least one compatible result"):
        assert needle in out


def test_kb_resolve_help_says_it_writes_a_folder(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["kb", "resolve", "-h"])
    out = capsys.readouterr().out
    assert "resolved/ folder" in out and "resolved.json" not in out


def test_help_command_prints_the_commands_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["help", "kb"])
    assert e.value.code == 0 and "exit codes:" in capsys.readouterr().out
