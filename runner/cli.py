"""`runner`: the command line. Every error is one line and a documented exit code
(docs/exit-codes.md); argparse's own exit 2 and its usage dumps are not used."""

import argparse
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time

from . import control, identity, run_view, rundir as rundirmod, signals, stopper, untrusted
from .errors import BadInput, Damaged, IdentityError, RunLocked, RunnerError
from .exitcodes import Exit
from .membership import Membership
from .spec import load_bytes as load_spec_bytes, load_frozen
from .state import StateStore

ENGINE_START_TIMEOUT = 30.0
"""How long `runner run` waits for a new engine to write its identity."""


RUN_DIR_HELP = ("the run directory; may be left off when exactly one run is live "
                "(runs live under .runner/runs/<run-id> by default)")
DETACH_HELP = "return once the engine is up and print the run directory"


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise BadInput(f"{self.prog}: {message}")


def _parser():
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

    engine = sub.add_parser("_engine", help=argparse.SUPPRESS)
    engine.add_argument("run_dir")
    return p


def main(argv=None):
    # Warnings of the process layer (a stale identity refused, a pid that survived its
    # SIGKILL) reach the operator on stderr, each on its own line; the engine's go to
    # its engine.log.
    logging.basicConfig(level=logging.WARNING, format="runner: warning: %(message)s")
    try:
        args = _parser().parse_args(argv)
        return int(_dispatch(args))
    except RunnerError as exc:
        print(f"runner: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("runner: interrupted", file=sys.stderr)
        return int(Exit.STOPPED)
    except Exception as exc:  # a bug: still one line and a documented code, never exit 1
        where = _save_traceback()
        print(f"runner: internal error: {type(exc).__name__}: {exc} (traceback: {where})", file=sys.stderr)
        return int(Exit.INTERNAL)


def _save_traceback():
    """Keep the traceback of an internal error for the bug report, off the one line."""
    import tempfile
    import traceback
    fd, path = tempfile.mkstemp(prefix="runner-internal-error-", suffix=".log")
    with os.fdopen(fd, "w") as f:
        traceback.print_exc(file=f)
    return path


def _dispatch(args):
    if args.command == "_engine":
        from .daemon import main as engine_main
        return engine_main(args.run_dir)
    if args.command == "run":
        return _run(args)
    if args.command == "resume":
        return _resume(args)
    if args.command == "stop":
        return _stop(args)
    if args.command == "status":
        return _status(args)
    if args.command == "wait":
        rd = rundirmod.resolve(args.run_dir)
        return stopper.wait_run(rd)
    raise BadInput(f"runner: unknown command {args.command}")


# -- run and resume -----------------------------------------------------------------

def _run(args):
    spec, raw = load_spec_bytes(args.spec)  # validated completely before anything starts
    if args.run_dir is not None:
        rd = rundirmod.RunDir(args.run_dir)
        if rd.exists() and rd.is_live():
            raise RunLocked(f"{rd.path}: a live engine holds this run directory")
    else:
        rd = rundirmod.RunDir(rundirmod.default_base() / rundirmod.new_run_id())
    rd = rundirmod.RunDir.create(rd.path, args.spec, data=raw)
    return _start_engine(rd, spec, args.detach)


def _resume(args):
    rd = rundirmod.resolve(args.run_dir, want=_resumable, what="resumable")
    if rd.is_live():
        raise RunLocked(f"{rd.path}: an engine of this run is alive; stop it first")
    spec = load_frozen(rd.spec)
    store = StateStore(rd.state)
    state = store.load()
    if state.status in ("completed", "failed") and not state.stopped:
        raise BadInput(f"{rd.state}: status: expected a stopped or crashed run, got {state.status!r}")
    from .journal import Journal
    journal = Journal(rd.journal)
    for name in control.archive_pending(rd):
        journal.append("control-file-archived", file=name, reason="resume")
    left, view = stopper.kill_leftovers(rd, spec.stop.kill_grace)
    if left.died_at_term or left.needed_kill or left.unkillable:
        journal.append("leftovers-killed", died_at_term=left.died_at_term,
                       needed_kill=left.needed_kill, unkillable=left.unkillable)
    if left.refused:
        journal.append("signal-refused", by="resume", refused=left.refused)
        print("runner: refused to signal (not proven the run's): " + "; ".join(left.refused), file=sys.stderr)
    # engine.json and the files in children/ are the dead attempt's: resume removes them
    # below, so their damage does not hold it up (nothing was signalled on their word).
    stale_idents = (f"{rd.engine_identity}:", f"{rd.children}/")
    blocking = [d for d in view.damaged if not d.startswith(stale_idents)]
    if blocking:
        raise Damaged(rd.path, "; ".join(blocking) + " (leftovers were killed; repair or remove "
                      "these files, then resume again)")
    # The previous attempt's identities name dead processes (or, later, someone else's):
    # a stopper must only ever find the new engine's, once it has written it. Removed by
    # name inside children/ (never through a link), whatever each one is.
    for stale in [rd.engine_identity, *(rd.children / n for n in untrusted.list_dir(rd.children))]:
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale)
        elif os.path.lexists(stale):
            stale.unlink()
    store.save(store.new_attempt(state))
    journal.append("resume", attempt=state.attempt + 1)
    journal.close()
    return _start_engine(rd, spec, args.detach)


def _resumable(rd):
    """A run with no live engine whose last attempt was stopped or never finished."""
    if rd.is_live():
        return False
    state = StateStore(rd.state).load_or_none()
    return state is not None and (state.stopped or state.status in ("stopped", "crashed", "running"))


def _start_engine(rd, spec, detach):
    env = dict(os.environ, RUNNER_RUN_ID=rd.run_id)
    with open(rd.engine_log, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "runner", "_engine", str(rd.path)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                start_new_session=True)
    engine = _await_engine(rd, proc)
    if engine is None:
        code = proc.wait()
        print(f"runner: engine exited with {code} before it was up: {_log_tail(rd)}", file=sys.stderr)
        return code if code > 0 else Exit.INTERNAL
    if detach:
        print(rd.path)
        return Exit.OK
    return _foreground(rd, spec, proc, engine)


def _await_engine(rd, proc):
    deadline = time.monotonic() + ENGINE_START_TIMEOUT
    while time.monotonic() < deadline:
        if rd.engine_identity.exists():
            try:
                ident = identity.read(rd.engine_identity)
            except (IdentityError, FileNotFoundError):
                ident = None
            if ident is not None and ident.pid == proc.pid:
                return ident
        if proc.poll() is not None:
            return None
        time.sleep(0.005)
    proc.kill()
    return None


def _log_tail(rd):
    try:
        lines = rd.engine_log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no engine.log)"
    return lines[-1] if lines else "(engine.log is empty)"


def _foreground(rd, spec, proc, engine):
    """Wait for the engine, forwarding the terminal's signals: the engine has its own
    session and never sees them. Ctrl-C is a hard stop (lodged first, then SIGINT);
    a second Ctrl-C is `--now`. SIGHUP and SIGTERM are forwarded as they are."""
    received = []
    tagged = Membership(run_id=rd.run_id)  # the engine carries the run's tag from its first instruction
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, lambda s, f: received.append(s))
    interrupts = 0
    while True:
        try:
            code = proc.wait(timeout=0.05)
            break
        except subprocess.TimeoutExpired:
            pass
        while received:
            signum = received.pop(0)
            if signum == signal.SIGINT:
                interrupts += 1
                if interrupts == 1:
                    print("runner: stopping (Ctrl-C again to kill now)", file=sys.stderr)
                    control.lodge(rd, control.Mode.HARD, "ctrl-c")
                    signals.signal_process(engine, signal.SIGINT, tagged)
                else:
                    result = stopper.force(rd, spec.stop.kill_grace, fallback=False)
                    for line in result.lines():
                        print(f"runner: {line}", file=sys.stderr)
            else:
                control.lodge(rd, control.Mode.HARD, "signal")
                signals.signal_process(engine, signum, tagged)
    if code < 0:  # killed by a signal: the state says what the run was
        state = StateStore(rd.state).load()
        if state.exit_code is not None:
            return state.exit_code
        return Exit.STOPPED if state.stopped else Exit.INTERNAL
    return code


# -- stop, status -------------------------------------------------------------------

def _stop(args):
    if args.wait and not args.graceful:
        raise BadInput("runner stop: --wait: expected together with --graceful")
    rd = rundirmod.resolve(args.run_dir)
    if args.now:
        result = stopper.force(rd, fallback=False)
    elif args.graceful:
        result = stopper.stop_graceful(rd)
        print(f"runner: {result.message}")
        return stopper.wait_run(rd) if args.wait else result.code
    else:
        result = stopper.stop_hard(rd)
    stream = sys.stdout if result.code == Exit.OK else sys.stderr
    for line in result.lines():
        print(f"runner: {line}", file=stream)
    return result.code


def _status(args):
    rd = rundirmod.resolve(args.run_dir, want=lambda r: True, what="known") if args.run_dir is None \
        else rundirmod.resolve(args.run_dir)
    info = status_of(rd)
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
    else:
        print(f"run {info['run_id']}: {info['status']} (attempt {info['attempt']}, "
              f"engine {'live, pid ' + str(info['engine_pid']) if info['live'] else 'not running'})")
        if info["current_item"]:
            print(f"  item {info['current_item']!r}, phase {info['phase']}")
        for child in info["children"]:
            print(f"  child pid {child['pid']} ({child.get('name', '?')})")
        if info["damaged"]:
            print("runner: damaged run directory: " + "; ".join(info["damaged"]), file=sys.stderr)
    return Exit.DAMAGED if info["damaged"] else Exit.OK


def status_of(rd):
    """What `runner status` shows. Each file is read on its own (run_view.py): a damaged
    one is listed under "damaged" and the others are still shown."""
    view = run_view.view(rd, wait_for_engine=False)
    try:
        state = StateStore(rd.state).load_or_none()
    except Damaged as exc:
        view.note(exc)
        state = None
    children = []
    for ident in view.children:
        if identity.is_running(ident):
            try:
                name = identity.read_extra(rd.children / f"{ident.pid}.json").get("name")
            except (Damaged, FileNotFoundError):
                name = None
            children.append({"pid": ident.pid, "pgid": ident.pgid, "name": name})
    live = view.live
    return {
        "run_id": view.run_id, "run_dir": str(rd.path), "live": live,
        "engine_pid": view.engine.pid if view.engine else None,
        "status": state.status if state else ("unknown" if view.damaged else "starting"),
        "attempt": state.attempt if state else None,
        "current_item": state.current_item if state else None, "phase": state.phase if state else None,
        "stopped": state.stopped if state else False, "stop_origin": state.stop_origin if state else None,
        "items": {k: v.status for k, v in state.items.items()} if state else {},
        "provider_calls": state.provider_calls if state else 0, "children": children,
        "damaged": list(view.damaged),
    }


if __name__ == "__main__":
    sys.exit(main())
