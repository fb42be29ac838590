"""`runner`: the command line. Every error is one line and a documented exit code
(docs/exit-codes.md); argparse's own exit 2 and its usage dumps are not used."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from . import lifecycle, stop_command
from .errors import BadInput, RunnerError, printable
from .exitcodes import Exit
from .rundir import default_base, resolve

RUN_DIR_HELP = (
    "the run directory; may be left off when exactly one run is live (runs live under .runner/runs/<run-id> by default)"
)
DETACH_HELP = "return once the engine is up and print the run directory"
RUNS_DIR_HELP = "the directory whose runs the dashboard shows (default .runner/runs)"
HOST_HELP = "the address to listen on (default 127.0.0.1; anything but loopback prints a warning)"
PORT_HELP = "the port to listen on (default 0: any free port; the first line printed names it)"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise BadInput(f"{self.prog}: {message}")


def _parser() -> _Parser:
    p = _Parser(prog="runner", description="Run a queue of items through a provider command; stop it fast.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    run = sub.add_parser("run", help="start a run from a TOML spec")
    run.add_argument("spec", help="the TOML spec")
    run.add_argument("--run-dir", help="where the run lives (default .runner/runs/<run-id>)")
    run.add_argument("--detach", action="store_true", help=DETACH_HELP)

    resume = sub.add_parser("resume", help="continue a stopped or crashed run (a new attempt)")
    resume.add_argument("--run-dir", help=RUN_DIR_HELP)
    resume.add_argument("--detach", action="store_true", help=DETACH_HELP)

    stop = sub.add_parser("stop", help="stop a run: hard by default, bounded, the whole tree")
    stop.add_argument("--run-dir", help=RUN_DIR_HELP)
    mode = stop.add_mutually_exclusive_group()
    mode.add_argument("--now", action="store_true", help="kill every process of the run at once")
    mode.add_argument("--graceful", action="store_true", help="finish the phase in flight, then stop")
    stop.add_argument("--wait", action="store_true", help="with --graceful: wait for the run to end")

    status = sub.add_parser("status", help="show a run")
    status.add_argument("--run-dir", help=RUN_DIR_HELP)
    status.add_argument("--json", action="store_true")

    wait = sub.add_parser("wait", help="block until a detached run ends; exit with its code")
    wait.add_argument("--run-dir", help=RUN_DIR_HELP)

    dash = sub.add_parser("dashboard", help="serve a web page of every run, with the stop buttons")
    dash.add_argument("--runs-dir", help=RUNS_DIR_HELP)
    dash.add_argument("--host", default="127.0.0.1", help=HOST_HELP)
    dash.add_argument("--port", type=int, default=0, help=PORT_HELP)

    engine = sub.add_parser("_engine", help=argparse.SUPPRESS)
    engine.add_argument("run_dir")
    engine.add_argument("--lock-fd", type=int, default=None)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    # Warnings of the process layer (a stale identity refused, a pid that survived its
    # SIGKILL) reach the operator on stderr, each on its own line; the engine's go to
    # its engine.log.
    logging.basicConfig(level=logging.WARNING, format="runner: warning: %(message)s")
    try:
        args = _parser().parse_args(argv)
        return int(_dispatch(args))
    except RunnerError as exc:
        print(f"runner: {printable(exc, None)}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("runner: interrupted", file=sys.stderr)
        return int(Exit.STOPPED)
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

        return engine_main(args.run_dir, lock_fd=args.lock_fd)
    if args.command == "run":
        return _run(args)
    if args.command == "resume":
        return _resume(args)
    if args.command == "stop":
        return _stop(args)
    if args.command == "status":
        return _status(args)
    if args.command == "wait":
        rd = resolve(args.run_dir)
        return stop_command.wait_run(rd)
    if args.command == "dashboard":
        from .dashboard import serve

        runs_dir = args.runs_dir if args.runs_dir is not None else str(default_base())
        return serve(runs_dir, args.host, args.port, explicit_dir=args.runs_dir is not None)
    raise BadInput(f"runner: unknown command {args.command}")


def _say(line: str) -> None:
    print(f"runner: {printable(line, None)}", file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    code, rd = lifecycle.run(args.spec, args.run_dir, detach=args.detach, say=_say)
    if args.detach and code == Exit.OK:
        print(rd.path)
    return code


def _resume(args: argparse.Namespace) -> int:
    code, rd = lifecycle.resume(args.run_dir, detach=args.detach, say=_say)
    if args.detach and code == Exit.OK:
        print(rd.path)
    return code


# -- stop, status, wait ----------------------------------------------------------------


def _stop(args: argparse.Namespace) -> Exit:
    if args.wait and not args.graceful:
        raise BadInput("runner stop: --wait: expected together with --graceful")
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


def _status(args: argparse.Namespace) -> Exit:
    rd = resolve(args.run_dir, want=lambda r: True, what="known") if args.run_dir is None else resolve(args.run_dir)
    info = lifecycle.status_of(rd)
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
    else:
        print(
            f"run {info['run_id']}: {info['status']} (attempt {info['attempt']}, "
            f"engine {'live, pid ' + str(info['engine_pid']) if info['live'] else 'not running'})"
        )
        if info["current_item"]:
            print(f"  item {info['current_item']!r}, phase {info['phase']}")
        for child in info["children"]:
            print(f"  child pid {child['pid']} ({child.get('name', '?')})")
        if info["damaged"]:
            print("runner: damaged run directory: " + "; ".join(info["damaged"]), file=sys.stderr)
    return Exit.DAMAGED if info["damaged"] else Exit.OK


if __name__ == "__main__":
    sys.exit(main())
