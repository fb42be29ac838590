"""`runner`: the command line. Every error is one line and a documented exit code
(docs/exit-codes.md); argparse's own exit 2 and its usage dumps are not used."""

from __future__ import annotations

import argparse
import os
import sys

from .errors import BadInput, RunnerError, printable
from .exitcodes import Exit

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost, see log.py)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, NoReturn

    from . import progress
    from .rundir import RunDir

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
PORT_HELP = "the port to listen on (default 0: any free port; the first line printed names it)"


class _Formatter(argparse.HelpFormatter):
    """argparse's formatter, given its width: argparse makes one for every add_argument,
    and without a width each asks shutil for the terminal's, and the import of shutil
    (with zlib, bz2 and lzma) cost every `runner stop` about 3 ms of its start-up. The
    width is found as shutil finds it: $COLUMNS, else the terminal, else 80."""

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
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise BadInput(f"{self.prog}: {message}")


def _add_run(sub: Any) -> None:
    run = sub.add_parser("run", help="start a run from a TOML spec")
    run.add_argument("spec", help="the TOML spec")
    run.add_argument("--run-dir", help="where the run lives (default .runner/runs/<run-id>)")
    run.add_argument("--detach", action="store_true", help=DETACH_HELP)


def _add_resume(sub: Any) -> None:
    resume = sub.add_parser("resume", help="continue a stopped or crashed run (a new attempt)")
    resume.add_argument("--run-dir", help=RUN_DIR_HELP)
    resume.add_argument("--detach", action="store_true", help=DETACH_HELP)


def _add_stop(sub: Any) -> None:
    stop = sub.add_parser("stop", help="stop a run: hard by default, bounded, the whole tree")
    stop.add_argument("--run-dir", help=RUN_DIR_HELP)
    mode = stop.add_mutually_exclusive_group()
    mode.add_argument("--now", action="store_true", help="kill every process of the run at once")
    mode.add_argument("--graceful", action="store_true", help="finish the phase in flight, then stop")
    stop.add_argument("--wait", action="store_true", help="with --graceful: wait for the run to end")
    stop.add_argument("--all", action="store_true", help=STOP_ALL_HELP)
    stop.add_argument("--runs-dir", help="with --all: where the runs live (default .runner/runs)")


def _add_status(sub: Any) -> None:
    status = sub.add_parser("status", help="show a run: items, phase, child, pending stop, PAUSE, containment")
    status.add_argument("--run-dir", help=RUN_DIR_HELP)
    status.add_argument("--json", action="store_true", help="machine-readable (docs/status-json.md)")


def _add_logs(sub: Any) -> None:
    logs_ = sub.add_parser("logs", help="print the captured output of a run's commands")
    logs_.add_argument("item", nargs="?", help="only this item's commands")
    logs_.add_argument("--run-dir", help=RUN_DIR_HELP)
    logs_.add_argument("--follow", "-f", action="store_true", help="keep printing until the run ends")


def _add_list(sub: Any) -> None:
    list_ = sub.add_parser("list", help="the runs under the base directory, with status and age")
    list_.add_argument("--runs-dir", help=RUNS_DIR_HELP)
    list_.add_argument("--json", action="store_true", help="one JSON object per run, in a list")


def _add_wait(sub: Any) -> None:
    wait = sub.add_parser("wait", help="block until a detached run ends; exit with its code")
    wait.add_argument("--run-dir", help=RUN_DIR_HELP)


def _add_dashboard(sub: Any) -> None:
    dash = sub.add_parser("dashboard", help="serve a web page of every run, with the stop buttons")
    dash.add_argument("--runs-dir", help=DASHBOARD_RUNS_DIR_HELP)
    dash.add_argument("--host", default="127.0.0.1", help=HOST_HELP)
    dash.add_argument("--port", type=int, default=0, help=PORT_HELP)


def _add_engine(sub: Any) -> None:
    engine = sub.add_parser("_engine")
    engine.add_argument("run_dir")
    engine.add_argument("--lock-fd", type=int, default=None)


_COMMANDS = {
    "run": _add_run,
    "resume": _add_resume,
    "stop": _add_stop,
    "status": _add_status,
    "logs": _add_logs,
    "list": _add_list,
    "wait": _add_wait,
    "dashboard": _add_dashboard,
}
"""The public commands, in the order `runner --help` lists them."""


def _parser(argv: Sequence[str]) -> _Parser:
    """The parser for `argv`. A command named first gets only its own sub-parser:
    building every command's costs each `runner stop` milliseconds of its start-up,
    which is part of the stop's latency. Anything else (no command, `--help`, a
    mistyped command) gets them all, so the listing and the error name every command.
    The engine's internal `_engine` is never listed."""
    p = _Parser(prog="runner", description="Run a queue of items through a provider command; stop it fast.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    first = argv[0] if argv else None
    if first == "_engine":
        _add_engine(sub)
    elif first in _COMMANDS:
        _COMMANDS[first](sub)
    else:
        for add in _COMMANDS.values():
            add(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    # Warnings of the process layer (a stale identity refused, a pid that survived its
    # SIGKILL) reach the operator on stderr, each on its own line; the engine's go to
    # its engine.log.
    from . import log

    log.to_stderr()
    try:
        argv = sys.argv[1:] if argv is None else list(argv)
        args = _parser(argv).parse_args(argv)
        return int(_dispatch(args))
    except RunnerError as exc:
        print(f"runner: {printable(exc, None)}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("runner: interrupted", file=sys.stderr)
        return int(Exit.STOPPED)
    except BrokenPipeError:
        # The reader went away (`runner logs | head`): what it wanted was printed. Python's
        # own flush at exit would fail again on the closed pipe; point stdout elsewhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return int(Exit.OK)
    except Exception as exc:  # a bug: still one line and a documented code, never exit 1
        where = _save_traceback()
        print(f"runner: internal error: {type(exc).__name__}: {printable(exc)} (traceback: {where})", file=sys.stderr)
        return int(Exit.INTERNAL)


def _save_traceback() -> str:
    """Keep the traceback of an internal error for the bug report, off the one line."""
    import tempfile
    import traceback

    fd, path = tempfile.mkstemp(prefix="runner-internal-error-", suffix=".log")
    with os.fdopen(fd, "w") as f:
        traceback.print_exc(file=f)
    return path


def _dispatch(args: argparse.Namespace) -> int:
    for flag in ("run_dir", "runs_dir"):
        if getattr(args, flag, None) == "":
            # An empty path would silently make the current directory the run directory.
            raise BadInput(f"runner {args.command}: --{flag.replace('_', '-')}: expected a directory path, got ''")
    if args.command == "_engine":
        from .engine_main import main as engine_main

        code = engine_main(args.run_dir, lock_fd=args.lock_fd)
        # Everything the engine owns is released by now (state and journal fsynced, the
        # lock and the cgroup given back): skip the interpreter's teardown of every
        # module, which a stopper waiting for this pid to exit would otherwise wait out.
        sys.stdout.flush()
        sys.stderr.flush()
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
        from . import stop_command
        from .rundir import resolve

        return stop_command.wait_run(resolve(args.run_dir))
    if args.command == "logs":
        return _logs(args)
    if args.command == "list":
        return _list(args)
    if args.command == "dashboard":
        from .dashboard import serve
        from .rundir import default_base

        runs_dir = args.runs_dir if args.runs_dir is not None else str(default_base())
        return serve(runs_dir, args.host, args.port, explicit_dir=args.runs_dir is not None)
    raise BadInput(f"runner: unknown command {args.command}")


def _say(line: str) -> None:
    print(f"runner: {printable(line, None)}", file=sys.stderr)


def _show(args: argparse.Namespace) -> progress.Show | None:
    from . import progress

    return None if args.detach else progress.Show.terminal()


def _run(args: argparse.Namespace) -> int:
    from . import lifecycle

    code, rd = lifecycle.run(args.spec, args.run_dir, detach=args.detach, say=_say, show=_show(args))
    if args.detach and code == Exit.OK:
        print(rd.path)
    return code


def _resume(args: argparse.Namespace) -> int:
    from . import lifecycle

    code, rd = lifecycle.resume(args.run_dir, detach=args.detach, say=_say, show=_show(args))
    if args.detach and code == Exit.OK:
        print(rd.path)
    return code


# -- stop, status, wait ----------------------------------------------------------------


def _stop(args: argparse.Namespace) -> Exit:
    if args.wait and not args.graceful:
        raise BadInput("runner stop: --wait: expected together with --graceful")
    from . import stop_command
    from .rundir import default_base, resolve

    if args.all:
        if args.run_dir is not None or args.wait:
            raise BadInput("runner stop --all: expected without --run-dir and --wait")
        mode = "now" if args.now else "graceful" if args.graceful else "hard"
        code, lines = stop_command.stop_every(args.runs_dir or default_base(), mode)
        for line in lines:
            print(f"runner: {printable(line, None)}", file=sys.stdout if code == Exit.OK else sys.stderr)
        return code
    if args.runs_dir is not None:
        raise BadInput("runner stop: --runs-dir: expected together with --all")
    rd = resolve(args.run_dir)
    if args.now:
        result = stop_command.stop_now(rd)
    elif args.graceful:
        result = stop_command.stop_graceful(rd)
        print(f"runner: {printable(result.message, None)}")
        return stop_command.wait_run(rd) if args.wait else result.code
    else:
        result = stop_command.stop_hard(rd)
    stream = sys.stdout if result.code == Exit.OK else sys.stderr
    for line in result.lines():
        print(f"runner: {printable(line, None)}", file=stream)
    return result.code


def _known(run_dir: str | None) -> RunDir:
    """The run a reading command shows: --run-dir, or the one run under the base."""
    from .rundir import resolve

    return resolve(run_dir, want=lambda r: True, what="known") if run_dir is None else resolve(run_dir)


def _status(args: argparse.Namespace) -> Exit:
    import json

    from . import lifecycle, render

    rd = _known(args.run_dir)
    info = lifecycle.status_of(rd)
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
    else:
        print("\n".join(render.status_view(info)))
        if info["damaged"]:
            print("runner: damaged run directory: " + "; ".join(info["damaged"]), file=sys.stderr)
    return Exit.DAMAGED if info["damaged"] else Exit.OK


def _logs(args: argparse.Namespace) -> Exit:
    from . import logs

    rd = _known(args.run_dir)
    return logs.show(rd, args.item, follow=args.follow, out=sys.stdout.buffer, err=_say)


def _list(args: argparse.Namespace) -> Exit:
    import json
    import time

    from . import render, run_list
    from .rundir import default_base

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
