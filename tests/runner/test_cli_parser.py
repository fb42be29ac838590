"""The command line as `main` reads it, two start-up savings for every `runner stop`
(runner/cli.py): the parser of only the command the command line starts with
(`_parser(only)`), and `runner stop`'s everyday command lines read without argparse
(`_stop_args`). Proves that the first answers every argument vector exactly as the full
parser does (the same namespace, one-line error, --help text), and that the second
gives argparse's namespace wherever it gives one."""

import contextlib
import io

import pytest
from hypothesis import example, given, settings
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


def full(argv):
    """The reference: every command, and the engine's internal one where the line names
    it (main builds it only then, so that `runner -h` never lists it)."""
    return cli._parser(internal=bool(argv) and argv[0] == "_engine")


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
    assert alone == answer(full(argv), argv)


def test_a_command_line_not_starting_with_a_command_gets_the_full_parser():
    """`runner -h`, `runner --now stop`, `runner`: every command is listed as before."""
    for argv in (["-h"], ["--now", "stop"], [], ["stopp"]):
        assert cli._command_named(argv) is None
    listing = answer(cli._parser(None), ["-h"])[2]
    assert "stop" in listing and "_engine" not in listing and "SUPPRESS" not in listing


@settings(max_examples=400, deadline=None)
@given(argv=st.lists(WORDS, max_size=6))
def test_the_one_command_parser_answers_like_the_full_one(argv):
    """Property: for any vector, `main`'s parser gives the same namespace, error line or
    help text as the parser of every command."""
    assert answer(cli._parser(cli._command_named(argv)), argv) == answer(full(argv), argv)


STOP_WORDS = st.sampled_from(
    [
        "--run-dir",
        "--runs-dir",
        "--run-dir=d",
        "--runs-dir=",
        "--run-dir=-x",
        "--now",
        "--now=1",
        "--no",
        "--graceful",
        "--wait",
        "--all",
        "--al",
        "d",
        "",
        "-1",
        "-x",
        "-",
        "--",
        "a=b",
        "stop",
        "-h",
        "--help",
        "--json",
    ]
)


@settings(max_examples=1000, deadline=None)
@example(first="stop", rest=["--now", "--graceful"])  # argparse's error: not allowed with
@example(first="stop", rest=["--run-dir", "--now"])  # argparse's error: expected one argument
@example(first="stop", rest=["--run-dir", "-1"])  # argparse: a negative number is a value
@example(first="stop", rest=["--wait", "--now=1"])  # argparse's error: ignored explicit argument
@given(rest=st.lists(STOP_WORDS, max_size=7), first=st.sampled_from(["stop", "stop", "stop", "status", "--now"]))
def test_a_stop_command_line_read_without_argparse_is_argparse_s_namespace(first, rest):
    """Property: where `_stop_args` reads a command line, argparse parses it without an
    error into the same namespace; where argparse would refuse it, `_stop_args` leaves
    it to argparse (returns None)."""
    argv = [first, *rest]
    fast = cli._stop_args(argv)
    if fast is not None:
        assert answer(full(argv), argv) == ("args", vars(fast))


@pytest.mark.parametrize(
    "argv",
    [
        ["stop"],
        ["stop", "--now", "--run-dir", "d"],
        ["stop", "--run-dir=", "--graceful", "--wait"],
        ["stop", "--all", "--now", "--runs-dir", "r"],
        ["stop", "--run-dir", ""],
    ],
)
def test_the_everyday_stop_command_lines_are_read_without_argparse(argv):
    """The lines a stopper types (and the benchmark runs) take the fast path."""
    fast = cli._stop_args(argv)
    assert fast is not None and answer(full(argv), argv) == ("args", vars(fast))
