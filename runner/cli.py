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
    from typing import NoReturn

# Each command imports only what it runs (inside its function below): a `runner stop`
# never pays for the spec parser, subprocess or the engine. Start-up is part of the
# stop's latency (docs/stop-latency.md, "Against other stoppers").

RUN_DIR_HELP = (
    "the run directory; may be left off when exactly one run is live (runs live under .runner/runs/<run-id> by default)"
)
DETACH_HELP = "return once the engine is up and print the run directory"
STOP_ALL_HELP = "stop every live run under --runs-dir at once, from this one process"


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
    stop.add_argument("--all", action="store_true", help=STOP_ALL_HELP)
    stop.add_argument("--runs-dir", help="with --all: where the runs live (default .runner/runs)")

    status = sub.add_parser("status", help="show a run")
    status.add_argument("--run-dir", help=RUN_DIR_HELP)
    status.add_argument("--json", action="store_true")

    wait = sub.add_parser("wait", help="block until a detached run ends; exit with its code")
    wait.add_argument("--run-dir", help=RUN_DIR_HELP)

    engine = sub.add_parser("_engine", help=argparse.SUPPRESS)
    engine.add_argument("run_dir")
    engine.add_argument("--lock-fd", type=int, default=None)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    # Warnings of the process layer (a stale identity refused, a pid that survived its
    # SIGKILL) reach the operator on stderr, each on its own line; the engine's go to
    # its engine.log.
    from . import log

    log.to_stderr()
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
    if getattr(args, "run_dir", None) == "":
        # An empty path would silently make the current directory the run directory.
        raise BadInput(f"runner {args.command}: --run-dir: expected a directory path, got ''")
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
    raise BadInput(f"runner: unknown command {args.command}")


def _say(line: str) -> None:
    print(f"runner: {printable(line, None)}", file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    from . import lifecycle

    code, rd = lifecycle.run(args.spec, args.run_dir, detach=args.detach, say=_say)
    if args.detach and code == Exit.OK:
        print(rd.path)
    return code


def _resume(args: argparse.Namespace) -> int:
    from . import lifecycle

    code, rd = lifecycle.resume(args.run_dir, detach=args.detach, say=_say)
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


def _status(args: argparse.Namespace) -> Exit:
    import json

    from . import lifecycle
    from .rundir import resolve

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
