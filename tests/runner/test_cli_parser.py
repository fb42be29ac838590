"""The command line's parser as `main` builds it: only the command the command line
starts with (runner/cli.py, `_parser(only)`), a start-up saving for every `runner stop`.
Proves that this parser answers every argument vector exactly as the full parser does:
the same namespace, the same one-line error, the same --help text."""

import contextlib
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner import cli
from runner.errors import BadInput

COMMANDS = [name for name, _, _ in cli._COMMANDS]
WORDS = st.sampled_from(
    [
        *COMMANDS,
        "--run-dir",
        "--run-dir=d",
        "--runs-dir",
        "--now",
        "--no",
        "--graceful",
        "--wait",
        "--all",
        "--detach",
        "--json",
        "--follow",
        "-f",
        "--lock-fd",
        "3",
        "-1",
        "x",
        "",
        "-",
        "--",
        "-h",
        "--help",
        "--bogus",
    ]
)


def answer(parser, argv):
    """What a parser makes of argv: the namespace, the error line, or the help printed."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            return ("args", vars(parser.parse_args(argv)))
    except BadInput as exc:
        return ("error", str(exc))
    except SystemExit as exc:
        return ("exit", exc.code, out.getvalue())


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_parser_prints_the_same_help_alone(command):
    """`runner COMMAND --help` from the one-command parser is the full parser's."""
    argv = [command, "--help"]
    alone = answer(cli._parser(cli._command_named(argv)), argv)
    assert alone[0] == "exit" and "usage: runner " + command in alone[2]
    assert alone == answer(cli._parser(), argv)


def test_a_command_line_not_starting_with_a_command_gets_the_full_parser():
    """`runner -h`, `runner --now stop`, `runner`: every command is listed as before."""
    for argv in (["-h"], ["--now", "stop"], [], ["stopp"]):
        assert cli._command_named(argv) is None
    assert "stop" in answer(cli._parser(None), ["-h"])[2]


@settings(max_examples=400, deadline=None)
@given(argv=st.lists(WORDS, max_size=6))
def test_the_one_command_parser_answers_like_the_full_one(argv):
    """Property: for any vector, `main`'s parser gives the same namespace, error line or
    help text as the parser of every command."""
    assert answer(cli._parser(cli._command_named(argv)), argv) == answer(cli._parser(), argv)
