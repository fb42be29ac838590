"""`runner`: the command line. Every error is one line and a documented exit code
(docs/exit-codes.md); argparse's own exit 2 and its usage dumps are not used."""

from __future__ import annotations

import os
import signal
import sys

from runner.errors import DISK_ERRNOS, BadInput, NoLiveRun, RunnerError, printable
from runner.events import STOP_SIGNALS
from runner.exitcodes import INTERRUPTED_LINE, Exit

TYPE_CHECKING = False

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence
    from types import SimpleNamespace
    from typing import NoReturn, TypeAlias

    Args: TypeAlias = argparse.Namespace | SimpleNamespace  # argparse's, or _stop_args'

    from runner.control import lifecycle
    from runner.files.rundir import RunDir

# Each command imports only what it runs (inside its function below): a `runner stop`
# never pays for the spec parser, subprocess or the engine. Start-up is part of the
# stop's latency (docs/stop-latency.md, "Against other stoppers").

RUN_DIR_HELP = (
    "the run directory; may be left off when exactly one run is live (runs live under .runner/runs/<run-id> by default)"
)
DETACH_HELP = "return once the engine is up and print the run directory"
RUNS_DIR_HELP = "the base directory the runs live under (default .runner/runs)"
STOP_ALL_HELP = "stop every live run under --runs-dir at once, from this one process"
DASHBOARD_RUNS_DIR_HELP = "the directory whose runs the dashboard shows (default .runner/runs)"
HOST_HELP = "the address to listen on (default 127.0.0.1; anything but loopback prints a warning)"
BOUND_CONTAINER_HELP = (
    "print whole seconds for a container's grace period (terminationGracePeriodSeconds, docker stop -t): "
    "the worst case plus the stopper's start-up margin, rounded up"
)
ALLOW_FOREIGN_HELP = (
    "act on a run directory (or the directory it is created in) that another user owns or"
    " others can write in (also RUNNER_ALLOW_FOREIGN_DIR=1)"
)
PORT_HELP = "the port to listen on (default 0: any free port; the first line printed names it)"
ALLOWED_HOST_HELP = (
    "a host name (or address) the page may be opened by, besides the --host address and loopback: requests "
    "naming any other host in their Host header are refused (repeatable; needed with --host 0.0.0.0)"
)


def _add_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="the TOML spec")
    p.add_argument("--run-dir", help="where the run lives (default .runner/runs/<run-id>)")
    p.add_argument("--detach", action="store_true", help=DETACH_HELP)
    p.add_argument("--allow-foreign-dir", action="store_true", help=ALLOW_FOREIGN_HELP)


def _add_resume(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-dir", help=RUN_DIR_HELP)
    p.add_argument("--detach", action="store_true", help=DETACH_HELP)
    p.add_argument("--allow-foreign-dir", action="store_true", help=ALLOW_FOREIGN_HELP)


def _add_stop(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-dir", help=RUN_DIR_HELP)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--now",
        action="store_true",
        help="SIGTERM to every process of the run at once, then SIGKILL to what is left after the kill grace",
    )
    mode.add_argument("--graceful", action="store_true", help="finish the phase in flight, then stop")
    p.add_argument("--wait", action="store_true", help="with --graceful: wait for the run to end")
    p.add_argument("--all", action="store_true", help=STOP_ALL_HELP)
    p.add_argument("--runs-dir", help="with --all: where the runs live (default .runner/runs)")


def _add_status(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-dir", help=RUN_DIR_HELP)
    p.add_argument("--json", action="store_true", help="machine-readable (docs/status-json.md)")


def _add_logs(p: argparse.ArgumentParser) -> None:
    p.add_argument("item", nargs="?", help="only this item's commands")
    p.add_argument("--run-dir", help=RUN_DIR_HELP)
    p.add_argument("--follow", "-f", action="store_true", help="keep printing until the run ends")


def _add_list(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs-dir", help=RUNS_DIR_HELP)
    p.add_argument("--json", action="store_true", help="one JSON object per run, in a list (docs/list-json.md)")


def _add_wait(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-dir", help=RUN_DIR_HELP)


def _add_dashboard(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs-dir", help=DASHBOARD_RUNS_DIR_HELP)
    p.add_argument("--host", default="127.0.0.1", help=HOST_HELP)
    p.add_argument("--port", type=int, default=0, help=PORT_HELP)
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME", help=ALLOWED_HOST_HELP)


def _add_bound(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="the TOML spec")
    p.add_argument("--container", action="store_true", help=BOUND_CONTAINER_HELP)


def _add_engine(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir")
    p.add_argument("--lock-fd", type=int, default=None)


# name, help in `runner --help` (None: not listed), what adds the command's arguments;
# in the help's order.
_COMMANDS: tuple[tuple[str, str | None, Callable[[argparse.ArgumentParser], None]], ...] = (
    ("run", "start a run from a TOML spec", _add_run),
    ("resume", "continue a stopped or crashed run (a new attempt)", _add_resume),
    ("stop", "stop a run: hard by default, bounded, the whole tree", _add_stop),
    ("status", "show a run: items, phase, child, pending stop, PAUSE, containment", _add_status),
    ("logs", "print the captured output of a run's commands", _add_logs),
    ("list", "the runs under the base directory, with status and age", _add_list),
    ("wait", "block until a detached run ends; exit with its code", _add_wait),
    ("dashboard", "serve a web page of every run, with the stop buttons", _add_dashboard),
    ("bound", "print the hard stop's worst case for a spec, in seconds", _add_bound),
    ("_engine", None, _add_engine),
)


def _parser(only: str | None = None, *, internal: bool = False) -> argparse.ArgumentParser:
    """The command line. With `only` (the command the command line starts with), only
    that command's parser is built: it parses exactly as it does beside the others (the
    top level has no option but -h; tests/runner/test_cli_parser.py), and argparse
    builds each parser and argument with gettext look-ups and a help formatter, which
    for all eight cost every command (the engine's start too) about 7 M instructions
    (valgrind) of its start-up. None builds them all (`runner -h`, a mistyped command)."""
    import argparse

    class _Formatter(argparse.HelpFormatter):
        # argparse makes a formatter for every add_argument; without a width each asks
        # shutil for the terminal's, and importing shutil (zlib, bz2, lzma) cost every
        # command about 3 ms. The width as shutil finds it: $COLUMNS, the terminal, 80.
        def __init__(self, prog: str) -> None:
            try:
                columns = int(os.environ["COLUMNS"])
            except (KeyError, ValueError):
                try:
                    columns = os.get_terminal_size(sys.__stdout__.fileno() if sys.__stdout__ else 1).columns
                except (AttributeError, ValueError, OSError):
                    columns = 80
            super().__init__(prog, width=max(columns, 20) - 2)

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> NoReturn:
            raise BadInput(f"{self.prog}: {message}")  # "runner: ..." or "runner stop: ...": one prefix

    class _Version(argparse.Action):
        # The distribution's version, looked up only when asked (importlib.metadata is
        # not imported by any other command line).
        def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> NoReturn:
            print(f"runner {version()}")
            parser.exit()

    p = _Parser(
        prog="runner",
        description="Run a queue of items through a provider command; stop it fast.",
        formatter_class=_Formatter,
    )
    p.add_argument(
        "--version", action=_Version, nargs=0, default=argparse.SUPPRESS, help="print the version of runner and exit"
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name, help_, add_arguments in _COMMANDS:
        # The engine's internal command is built only when named (or `internal`, for the
        # tests' reference parser): argparse lists a suppressed one as ==SUPPRESS==.
        if name == only or (only is None and (help_ is not None or internal)):
            add_arguments(
                sub.add_parser(name, help=argparse.SUPPRESS if help_ is None else help_, formatter_class=_Formatter)
            )
    return p


def version() -> str:
    """The installed distribution's version (pytest-stoplatency, which ships runner), or
    where it comes from when it is not installed (a checkout on PYTHONPATH)."""
    from importlib import metadata

    try:
        return metadata.version("pytest-stoplatency")
    except metadata.PackageNotFoundError:
        return f"(not installed: {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))})"


def error_line(text: str) -> str:
    """A usage error's one line, with one `runner` prefix: a message that names its
    command already ("runner stop: --wait: ...", argparse's "runner: ...") keeps it."""
    return text if text.startswith(("runner:", "runner ")) else f"runner: {text}"  # ablate: one-usage-prefix


def _command_named(argv: Sequence[str] | None) -> str | None:
    """The command the command line starts with, or None."""
    args = sys.argv[1:] if argv is None else argv
    first = args[0] if len(args) else None
    return first if any(first == name for name, _, _ in _COMMANDS) else None


_STOP_FLAGS = ("--now", "--graceful", "--wait", "--all")
_STOP_VALUES = ("--run-dir", "--runs-dir")


def _stop_args(argv: Sequence[str]) -> SimpleNamespace | None:
    """`runner stop`'s everyday command lines, read without argparse: importing it and
    building the parser cost every stop about 23 M instructions (valgrind) of its
    start-up. Only `stop` followed by its full option names, each at most once, a value
    that cannot be mistaken for an option, and not both --now and --graceful: exactly
    the namespace argparse would give (tests/runner/test_cli_parser.py). Anything else
    (help, an abbreviation, an error to word) returns None, for argparse."""
    if not argv or argv[0] != "stop":
        return None
    from types import SimpleNamespace

    values: dict[str, str | bool | None] = {
        "run_dir": None,
        "now": False,
        "graceful": False,
        "wait": False,
        "all": False,
        "runs_dir": None,
    }
    seen = set()
    i = 1
    while i < len(argv):
        option, equals, value = argv[i].partition("=")
        if option in seen:
            return None
        seen.add(option)
        if option in _STOP_FLAGS and not equals:
            values[option[2:]] = True
        elif option in _STOP_VALUES:
            if not equals:
                i += 1
                if i == len(argv) or argv[i].startswith("-"):
                    return None
                value = argv[i]
            values[option[2:].replace("-", "_")] = value
        else:
            return None
        i += 1
    if values["now"] and values["graceful"]:
        return None
    return SimpleNamespace(command="stop", **values)


def unsupported() -> str | None:
    """Why this machine cannot run the runner, or None. Asked before anything else, so
    that off Linux (or on a kernel older than 5.3) every command says so in one line
    instead of failing on its first `fcntl`, `/proc` or `os.pidfd_open`. `sys.platform`,
    so that a test can fake another platform; one pidfd_open of this very process, so
    that a kernel without it (ENOSYS) is told apart from a Python without it."""
    if not sys.platform.startswith("linux"):
        return f"runner needs Linux >= 5.3 (pidfd, /proc; cgroup v2 for containment): this is {sys.platform}"
    if not hasattr(os, "pidfd_open"):
        return "runner needs Linux >= 5.3: this Python has no os.pidfd_open (Python 3.9+ built on Linux)"
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError as exc:
        release = os.uname().release
        return f"runner needs Linux >= 5.3: pidfd_open failed ({os.strerror(exc.errno or 0)}, kernel {release})"
    return None


_STARTERS = ("run", "resume", "_engine")
"""The commands that start or are a run's engine: their stop signals are blocked from
their first instruction until their handlers are in place (early_signals)."""


def early_signals(argv: Sequence[str]) -> None:
    """Before anything else: a command that starts a run (in the foreground) or is its
    engine blocks SIGINT, SIGTERM and SIGHUP until its handlers are installed
    (lifecycle._foreground, StopController.install_signals), so a signal at any moment
    after this line is held pending and honoured, never lost: as PID 1 of a pid
    namespace the kernel drops a signal whose handler is the default, unless it is
    blocked. The engine started meanwhile inherits the blocked mask, so its first
    instruction is covered too (its interpreter starts with them blocked). Before this
    line come only the interpreter's start-up and the import of this module's two small
    dependencies. Every other command turns SIGTERM and SIGHUP into the
    same interruption as Ctrl-C (Exit.INTERRUPTED), never a silent death."""
    starter = bool(argv) and argv[0] in _STARTERS and "--detach" not in argv
    if starter:
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # ablate: early-signal-mask
        return

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupted)


def main(argv: Sequence[str] | None = None) -> int:
    # Asked first, before any signal set-up: off Linux even the stop signals differ.
    why = unsupported()
    if why is not None:
        print(error_line(why), file=sys.stderr)
        return int(Exit.UNSUPPORTED)
    early_signals(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv)
    finally:
        # Done: the code is decided. A stop signal from here to the exit is held, never
        # turned into a death by signal that would hide the code (the interpreter
        # re-raises an uncaught Ctrl-C as one).
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def _main(argv: Sequence[str] | None) -> int:
    # Warnings of the process layer (a stale identity refused, a pid that survived its
    # SIGKILL) reach the operator on stderr, each on its own line; the engine's go to
    # its engine.log.
    from runner import log

    log.to_stderr()
    try:
        args: Args | None = _stop_args(sys.argv[1:] if argv is None else argv)
        if args is None:
            args = _parser(_command_named(argv)).parse_args(argv)
        return int(_dispatch(args))
    except RunnerError as exc:
        print(error_line(printable(exc, None)), file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # a second one must not cut this line
        # Interrupted (Ctrl-C, SIGTERM, SIGHUP): this command did not finish. A stop it
        # began is completed by the next plain `runner stop` (never "the run stopped").
        print(INTERRUPTED_LINE, file=sys.stderr)
        return int(Exit.INTERRUPTED)
    except BrokenPipeError:
        # The reader went away (`runner logs | head`): what it wanted was printed. Python's
        # own flush at exit would fail again on the closed pipe; point stdout elsewhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return int(Exit.OK)
    except Exception as exc:  # a bug: still one line and a documented code, never exit 1
        if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:  # not a bug: the disk refused
            print(f"runner: cannot write: {printable(exc, None)}", file=sys.stderr)
            return int(Exit.NOT_RECORDED)
        where = _save_traceback()
        print(f"runner: internal error: {type(exc).__name__}: {printable(exc)} (traceback: {where})", file=sys.stderr)
        return int(Exit.INTERNAL)


def _save_traceback() -> str:
    """Keep the traceback of an internal error for the bug report, off the one line."""
    import tempfile
    import traceback

    try:
        fd, path = tempfile.mkstemp(prefix="runner-internal-error-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            traceback.print_exc(file=f)
    except OSError as exc:  # a full or read-only /tmp: the one line still says what failed
        return f"not saved: {exc.strerror or exc}"
    return path


def _dispatch(args: Args) -> int:
    for flag in ("run_dir", "runs_dir"):
        if getattr(args, flag, None) == "":
            # An empty path would silently make the current directory the run directory.
            raise BadInput(f"runner {args.command}: --{flag.replace('_', '-')}: expected a directory path, got ''")
    if args.command == "_engine":
        from runner.engine.main import main as engine_main

        code = engine_main(args.run_dir, lock_fd=args.lock_fd)
        # Everything the engine owns is released by now (state and journal fsynced, the
        # lock and the cgroup given back): skip the interpreter's teardown of every
        # module, which a stopper waiting for this pid to exit would otherwise wait out.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass  # engine.log on a full or read-only disk: the code still tells
        os._exit(int(code))
    if args.command == "run":
        return _run(args)
    if args.command == "resume":
        return _resume(args)
    if args.command == "stop":
        return _stop(args)
    if args.command == "status":
        return _status(args)
    if args.command == "wait":
        from runner.control import waiting
        from runner.files.rundir import resolve

        return waiting.wait_run(resolve(args.run_dir))
    if args.command == "logs":
        return _logs(args)
    if args.command == "list":
        return _list(args)
    if args.command == "dashboard":
        from runner.dashboard import serve
        from runner.files.rundir import default_base

        runs_dir = args.runs_dir if args.runs_dir is not None else str(default_base())
        return serve(
            runs_dir,
            args.host,
            args.port,
            explicit_dir=args.runs_dir is not None,
            allowed_hosts=tuple(args.allowed_host),
        )
    if args.command == "bound":
        return _bound(args)
    raise BadInput(f"runner: unknown command {args.command}")


def _bound(args: Args) -> int:
    """`runner bound SPEC`: the hard stop's worst case (StopSpec.hard_worst_case) derived
    from the spec's [stop] keys and the code's defaults, so that a container's grace
    period is computed, never typed (examples/kubernetes/)."""
    import math

    from runner import defaults
    from runner.files.spec import load

    stop = load(args.spec).stop
    if args.container:
        print(math.ceil(stop.hard_worst_case + defaults.CONTAINER_GRACE_MARGIN))
    else:
        print(f"{stop.hard_worst_case:g}")
    return int(Exit.OK)


def _say(line: str) -> None:
    print(f"runner: {printable(line, None)}", file=sys.stderr)


def _display(args: Args) -> lifecycle.DisplayFactory | None:
    """The foreground's progress (views/progress.py), unless detached."""
    from runner.views import progress

    if args.detach:
        return None
    show = progress.Show.terminal()
    return lambda rd, spec, since: progress.Progress(rd, spec, show, _say, since=since)


def _run(args: Args) -> int:
    from runner.control import lifecycle

    code, rd = lifecycle.run(
        args.spec,
        args.run_dir,
        detach=args.detach,
        say=_say,
        display=_display(args),
        allow_foreign=args.allow_foreign_dir,
    )
    if args.detach and code == Exit.OK:
        print(rd.path)
    return code


def _resume(args: Args) -> int:
    from runner.control import lifecycle
    from runner.views import status

    code, rd = lifecycle.resume(
        args.run_dir,
        detach=args.detach,
        say=_say,
        display=_display(args),
        allow_foreign=args.allow_foreign_dir,
        resumable=status.resumable_run,
    )
    if args.detach and code == Exit.OK:
        print(rd.path)
    return code


# -- stop, status, wait ----------------------------------------------------------------


def _stop(args: Args) -> Exit:
    if args.wait and not args.graceful:
        raise BadInput("runner stop: --wait: expected together with --graceful")
    from runner.events import StopKind

    kind = StopKind.NOW if args.now else StopKind.GRACEFUL if args.graceful else StopKind.HARD
    if args.all:
        from runner.control import stop_all
        from runner.files.rundir import default_base

        if args.run_dir is not None or args.wait:
            raise BadInput("runner stop --all: expected without --run-dir and --wait")
        code, lines = stop_all.stop_every(args.runs_dir or default_base(), kind)
        for line in lines:
            print(f"runner: {printable(line, None)}", file=sys.stdout if code == Exit.OK else sys.stderr)
        return code
    if args.runs_dir is not None:
        raise BadInput("runner stop: --runs-dir: expected together with --all")
    if args.run_dir is not None:
        from runner.files import ownership

        ownership.check_access(args.run_dir)
    from runner.control import stop

    if kind == StopKind.GRACEFUL:
        from runner.control import waiting
        from runner.files.rundir import resolve

        try:
            rd = resolve(args.run_dir)
        except NoLiveRun:
            if not args.wait or args.run_dir is None:
                raise
            # Removed or half removed before the wait: nothing to lodge a request in; the
            # hard stop its engine makes of a vanished run is finished here, as when the
            # directory goes while the waiter waits (waiting.directory_gone).
            raise waiting.directory_gone(stop.stop_path(args.run_dir, kind, wait=True)) from None
        try:
            result = stop.stop(rd, kind)
        except NoLiveRun:
            from runner.files import dirfd

            if not args.wait or not dirfd.gone(rd.path):
                raise
            # It went away while the request was lodged: the waiter finishes the hard stop
            # its engine makes of a vanished run, as when it goes while the waiter waits.
            raise waiting.directory_gone(stop.stop(rd, StopKind.NOW)) from None
        print(f"runner: {printable(result.message, None)}")
        return waiting.wait_run(rd) if args.wait else result.code
    result = stop.stop_path(args.run_dir, kind)
    stream = sys.stdout if result.code == Exit.OK else sys.stderr
    for line in result.lines():
        print(f"runner: {printable(line, None)}", file=stream)
    return result.code


def _known(run_dir: str | None) -> RunDir:
    """The run a reading command shows: --run-dir, or the one run under the base."""
    from runner.files.rundir import resolve

    return resolve(run_dir, want=lambda r: True, what="known") if run_dir is None else resolve(run_dir)


def _status(args: Args) -> Exit:
    import json

    from runner.views import render, status

    rd = _known(args.run_dir)
    info = status.status_of(rd)
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
    else:
        print("\n".join(render.status_view(info)))
        if info["damaged"]:
            print("runner: damaged run directory: " + "; ".join(info["damaged"]), file=sys.stderr)
    return Exit.DAMAGED if info["damaged"] else Exit.OK


def _logs(args: Args) -> Exit:
    from runner.views import logs

    rd = _known(args.run_dir)
    return logs.show(rd, args.item, follow=args.follow, out=sys.stdout.buffer, err=_say)


def _list(args: Args) -> Exit:
    import json
    import time

    from runner.files.rundir import default_base
    from runner.views import render, run_list

    if args.runs_dir == "":
        raise BadInput("runner list: --runs-dir: expected a directory path, got ''")
    base = args.runs_dir if args.runs_dir is not None else default_base()
    rows = run_list.rows(base)
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
    elif not rows:
        print(f"no runs under {printable(base, None)}")
    else:
        print("\n".join(render.run_list(rows, time.time())))
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
