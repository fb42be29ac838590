"""The stopper a command line describes (`--start`, `--stop`): any tool, any language.

``--start 'CMD … {argv} …'`` starts the victim the way the tool starts work (``{argv}``
is the prepared victim's command line, quoted for a shell); without it the kit starts
the victim in a session of its own. ``--stop 'CMD … {pid} …'`` stops it (``{pid}``: the
start command's process, ``{pgid}``: its process group, ``{grace}``: the kill grace in
seconds). Both run under ``/bin/sh -c`` in a session of their own, the start command as
``exec CMD`` (so ``{pid}`` is the tool itself; a compound start command is one
``sh -c '…'`` of its own). A start command that exits before the victim's handshake (a
launcher: ``setsid -f {argv}``, ``sh -c '{argv} &'``; or within LAUNCHER_GRACE after it)
is waited for by the handshake, not by its pid: ``{pid}`` and ``{pgid}`` are then the
victim's own. The stop is over when
the stop command has exited and the start command's process is gone, or ``kill_grace``
plus a margin after the stop command exited, whichever is first (a tool that keeps
running, a daemon, is not waited for).

Everything either command starts is held (pytest_stoplatency.hold: a cgroup of the
kit's own, else a subreaper and a tag): the start command's in one scope, the stop
command's in another, each killed when its sample ends. What the stop command left
running (a `cmd &` of its own) fails its sample, named; so does a stop command that
cannot run, exits non-zero or outlives ``--stop-timeout``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_stoplatency import hold as holding

from . import zoo
from .adapters import reap
from .stopper import Stopper
from .zoo import Tree

WAIT_MARGIN = 1.0
"""How long past the kill grace the started process is waited for after the stop command."""
START_TIMEOUT = 10.0
"""How long a --start command has to bring the victim up (its ready handshake)."""
STOP_TIMEOUT_MARGIN = 10.0
"""A --stop command's limit by default: the kill grace plus this."""
LAUNCHER_GRACE = 0.25
"""A start command that exits 0 within this of the victim's handshake is a launcher too."""
PLACEHOLDERS_START = ("{argv}",)
PLACEHOLDERS_STOP = ("{pid}", "{pgid}")


class StartFailed(RuntimeError):
    """The start command brought no victim up: the sample fails, and, where it never brought
    one up before, so does every later sample of this stopper, at once (a start that never
    works costs one wait, not one a sample)."""


@dataclass
class Started:
    proc: subprocess.Popen[bytes]
    scope: holding.Scope
    pid: int  # {pid}: the start command's process, or the victim's where a launcher exited
    pgid: int
    err_dir: Path
    stop_scope: holding.Scope | None = None
    said: dict[str, Any] = field(default_factory=dict)


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:  # gone already: {pgid} names its group as it was, its own
        return pid


def _tail(path: Path, size: int = 4096) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - size))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][-300:] if lines else ""


class Command(Stopper):
    id = "command"
    label = "--start/--stop"

    def __init__(
        self,
        work: Path,
        kill_grace: float,
        *,
        start: str | None,
        stop: str,
        hold: holding.Hold | None = None,
        stop_timeout: float | None = None,
    ) -> None:
        super().__init__(work, kill_grace)
        # Without a hold of the caller's (pytest --stop-conformance), one of its own, closed
        # with it, and never a subreaper: pytest's children are its tests' business.
        self.own_hold = hold is None
        self.hold = holding.Hold.open(subreaper=False) if hold is None else hold
        self.start_cmd, self.stop_cmd = start, stop
        self.stop_timeout = kill_grace + STOP_TIMEOUT_MARGIN if stop_timeout is None else stop_timeout
        self.how = f"start `{start or '{argv}'}`, stop `{stop}`"
        self.broken: str | None = None  # the start never worked: later samples fail at once
        self.started = False

    def _fill(self, text: str) -> str:
        return text.replace("{grace}", f"{self.kill_grace:g}")

    def start(self, tree: Tree) -> Started:
        if self.broken is not None:
            raise StartFailed(f"not started: {self.broken}")
        scope = self.hold.scope("start")
        if self.start_cmd is None:
            argv = tree.argv
        else:
            # exec: {pid} is the tool's own process, not a shell waiting for it.
            argv = ["/bin/sh", "-c", "exec " + self._fill(self.start_cmd).replace("{argv}", tree.shell)]
        # stderr to a file, never a pipe: a child of the command that keeps it open (`cmd &`)
        # must neither block the kit's read nor fill a pipe nobody drains.
        err_path = tree.dir / "start.stderr"
        with open(err_path, "wb") as err:
            proc = subprocess.Popen(
                argv,
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                **scope.popen_kwargs(),
            )
        try:
            pid = self._up(tree, proc, scope, err_path)
        except BaseException as exc:
            scope.kill()
            reap(proc)
            if isinstance(exc, StartFailed) and not self.started:  # never worked: it will not
                self.broken = f"the start command brought no victim up in an earlier sample ({exc})"
            raise
        self.started = True
        return Started(proc, scope, pid, pid if pid == proc.pid else _pgid(pid), tree.dir)

    def _up(self, tree: Tree, proc: subprocess.Popen[bytes], scope: holding.Scope, err_path: Path) -> int:
        """Wait for the victim's handshake; the pid `{pid}` names."""
        deadline = time.monotonic() + START_TIMEOUT
        try:
            tree.adopt(START_TIMEOUT, process=proc)
        except RuntimeError:  # the plugin's VictimNotReady: no handshake, or its process exited
            pass
        else:
            if tree.victim.pid == proc.pid:
                return proc.pid  # the tool execs the victim: one process
            try:
                # A launcher whose victim won the race to the handshake (a busy machine): it
                # exits at once after, and is a launcher all the same.
                exited = proc.wait(LAUNCHER_GRACE)
            except subprocess.TimeoutExpired:
                return proc.pid  # the tool runs on: {pid} is the tool
            return int(tree.victim.pid) if exited == 0 else proc.pid
        code = proc.poll()
        if code is None:
            raise StartFailed(f"no victim handshake within {START_TIMEOUT:g} s of the start command")
        if code == 0:
            return self._launched(tree, scope, deadline)  # ablate: launcher-that-exits
        err = _last_line(_tail(err_path))
        raise StartFailed(f"the start command exited {code} before the victim's handshake" + (f": {err}" * bool(err)))

    def _launched(self, tree: Tree, scope: holding.Scope, deadline: float) -> int:
        """A launcher that exited 0 (setsid -f, `cmd &`): the victim is found by its
        handshake while anything the launcher started lives on (held: an orphan counts)."""
        while True:
            try:
                tree.adopt(0.1)
                return int(tree.victim.pid)
            except RuntimeError:
                pass
            if not scope.members() and tree.prepared.ready_info() is None:
                raise StartFailed("the start command exited 0 and left no process that could become the victim")
            if time.monotonic() > deadline:
                raise StartFailed(f"no victim handshake within {START_TIMEOUT:g} s of the start command")

    def stop(self, handle: Started) -> dict[str, Any]:
        command = self._fill(self.stop_cmd).replace("{pid}", str(handle.pid)).replace("{pgid}", str(handle.pgid))
        handle.stop_scope = scope = self.hold.scope("stop")
        err_path = handle.err_dir / "stop.stderr"
        with open(err_path, "wb") as err_file:
            stopping = subprocess.Popen(
                ["/bin/sh", "-c", command],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err_file,
                start_new_session=True,
                **scope.popen_kwargs(),
            )
        said: dict[str, Any] = {}
        try:
            # Its exit, not its output's end: what it left running may hold its stderr open.
            stopping.wait(timeout=self.stop_timeout)
        except subprocess.TimeoutExpired:
            said["failed"] = f"the stop command was still running after {self.stop_timeout:g} s (--stop-timeout)"
        finally:
            # A hung stop command, or the kit itself stopped: its whole group goes (its
            # shell's children too; the scope below takes what left the group). Only while
            # its shell is unreaped: the group's id is then still its own, never a reused one.
            if stopping.returncode is None:
                os.killpg(stopping.pid, signal.SIGKILL)  # ablate: kit-stop-command-group
                stopping.wait()
        said["code"] = code = stopping.returncode
        last = _last_line(_tail(err_path)) if code else ""
        if last:
            said["stderr"] = last
        if "failed" not in said and code:
            why = f"could not run (exit {code})" if code in (126, 127) else f"exited {code}"
            said["failed"] = f"the stop command {why}" + f": {last}" * bool(last)
        if handle.proc.returncode is None and "failed" not in said:  # a failed stop: its sample fails anyway
            try:
                handle.proc.wait(self.kill_grace + WAIT_MARGIN)
            except subprocess.TimeoutExpired:
                pass
        return said

    def judge(self, handle: Started, tree: Tree, settle: float) -> dict[str, Any]:
        """Not timed, after the sample's count: what the stop command left running of its
        own (never the tree's) fails the sample, named; then it is killed."""
        scope = handle.stop_scope
        if scope is None:
            return {}
        ours = set(tree.members()) | set(handle.scope.members(adopted=False))  # the tree's, the start's
        own = [m for m in scope.members() if m not in ours]
        if own:
            with zoo.Deaths({"own": own}) as deaths:  # dying already (a `kill &` of its own)
                deaths.wait(time.monotonic() + settle)
            own = [m for m in own if zoo.alive(m)]
        names = [holding.describe(m) for m in own]  # ablate: stop-command-leftovers-counted
        scope.kill()
        if not names:
            return {}
        n = len(names)
        return {
            "stopper_left": names,
            "failed": f"the stopper left {n} process{'es' * (n != 1)} of its own: {', '.join(names)}",
        }

    def close(self) -> None:
        if self.own_hold:
            self.hold.close()

    def cleanup(self, handle: Started) -> None:
        reap(handle.proc)
        if handle.stop_scope is not None:
            handle.stop_scope.kill()
        handle.scope.kill()
