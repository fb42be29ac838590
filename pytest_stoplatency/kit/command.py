"""The stopper a command line describes (`--start`, `--stop`): any tool, any language.

``--start 'CMD … {argv} …'`` starts the victim the way the tool starts work (``{argv}``
is the prepared victim's command line, quoted for a shell); without it the kit starts
the victim in a session of its own. ``--stop 'CMD … {pid} …'`` stops it (``{pid}``: the
start command's process, ``{pgid}``: its process group). Both run under ``/bin/sh -c``
in a session of their own, the start command as ``exec CMD`` (so ``{pid}`` is the tool
itself; a compound start command is one ``sh -c '…'`` of its own). The stop is over
when the stop command has exited and the start command's process is gone, or
``kill_grace`` plus a margin after the stop command exited, whichever is first (a tool
that keeps running, a daemon, is not waited for).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from .adapters import STOPPER_WAIT, popen_session, reap
from .stopper import Stopper
from .zoo import Tree

WAIT_MARGIN = 1.0
"""How long past the kill grace the started process is waited for after the stop command."""


class Command(Stopper):
    id = "command"
    label = "--start/--stop"

    def __init__(self, work: Path, kill_grace: float, *, start: str | None, stop: str) -> None:
        super().__init__(work, kill_grace)
        self.start_cmd, self.stop_cmd = start, stop
        self.how = f"start `{start or '{argv}'}`, stop `{stop}`"

    def start(self, tree: Tree) -> subprocess.Popen[bytes]:
        if self.start_cmd is None:
            proc = popen_session(tree.argv)
        else:
            # exec: {pid} is the tool's own process, not a shell waiting for it.
            proc = popen_session(["/bin/sh", "-c", "exec " + self.start_cmd.replace("{argv}", tree.shell)])
        tree.adopt(process=proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes]) -> dict[str, Any]:
        # The group is the start process's own (a session of its own): {pgid} == {pid}.
        command = self.stop_cmd.replace("{pid}", str(proc.pid)).replace("{pgid}", str(proc.pid))
        stopping = subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            output, _ = stopping.communicate(timeout=STOPPER_WAIT)
        finally:
            # A hung stop command, or the kit itself stopped: its whole group goes (its
            # shell's children too). Only while its shell is unreaped: the group's id is
            # then still its own, never a reused one.
            if stopping.returncode is None:
                os.killpg(stopping.pid, signal.SIGKILL)  # ablate: kit-stop-command-group
                stopping.wait()
        try:
            proc.wait(self.kill_grace + WAIT_MARGIN)
        except subprocess.TimeoutExpired:
            pass
        said: dict[str, Any] = {"code": stopping.returncode}
        if stopping.returncode:
            said["output"] = output.strip()[-500:]
        return said

    def cleanup(self, proc: subprocess.Popen[bytes]) -> None:
        reap(proc)
