"""Proof that a process belongs to a run, asked before every signal.

A pid, a group id or a file in the run directory names a number; the kernel hands
numbers out again, and the run directory is anybody's to write. So no signal is sent on
their word alone. A process is the run's only when, read live from /proc after its
pidfd was opened and its start time checked:

- TAG: its environment holds RUNNER_RUN_ID=<run key> (RunDir.key: the run id and the
  identity of the run's directory; the engine starts with it, and every process the
  run starts inherits it), or
- CGROUP: it sits in the run's cgroup (validated: inside the runner's subtree, named
  for this run), which also holds what scrubbed its environment, or
- KNOWN: the caller itself saw it become the run's: the engine's own children and the
  descendants its snapshots followed by parent links, kept in memory, never read back
  from disk.

A process group is the run's only when its leader is alive (or our unreaped zombie) with
the recorded start time and proven, or, with the leader gone, every living member is
proven. A lookup of the group's current members proves nothing by itself.
"""

from __future__ import annotations

import enum
import os
import time

from runner.proc import identity
from runner.values import FrozenValue

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

_CGROUP_V2 = "0::/"
TAG = "RUNNER_RUN_ID"
"""The environment variable every process of a run carries: its value is the run's key
(RunDir.key). The engine starts with it; the engine's commands inherit it."""


class Proof(enum.Enum):
    TAG = "tag"
    CGROUP = "cgroup"
    KNOWN = "known"


def cgroup_of(pid: int) -> str | None:
    """The cgroup v2 path of a process, relative to the hierarchy's root ("/runner/ID/work")."""
    try:
        with open(f"/proc/{int(pid)}/cgroup", "rb") as f:
            raw = f.read(64 * 1024)
    except OSError:
        return None
    for line in raw.decode("utf-8", "replace").splitlines():
        # What fullmatch(r"0::(/.*)") matched (splitlines leaves no newline for `.` to
        # miss), without compiling a regex at every command's start-up.
        if line.startswith(_CGROUP_V2):
            return line[3:]
    return None


class Membership(FrozenValue):
    """What makes a process this run's. `run_id` for the tag; `cgroup`, the run's cgroup
    path relative to the cgroup2 root (only ever a validated one); `known`, the
    (pid, start ticks) pairs the caller vouches for itself. Treated as immutable; a plain
    class, not a dataclass (see values.py)."""

    __slots__ = ("run_id", "cgroup", "known")

    def __init__(
        self, run_id: str | None = None, cgroup: str | None = None, known: frozenset[tuple[int, int]] = frozenset()
    ) -> None:
        self.run_id: Final = run_id
        self.cgroup: Final = cgroup
        self.known: Final = known

    def proof(self, pid: int, start_ticks: int) -> Proof | None:
        """How `pid` (whose start ticks the caller has just verified) is the run's, or None."""
        if (pid, start_ticks) in self.known:
            return Proof.KNOWN
        if self.run_id and has_tag(pid, self.run_id):
            return Proof.TAG
        if self.cgroup:
            where = cgroup_of(pid)
            if where is not None and (where == self.cgroup or where.startswith(self.cgroup + "/")):
                return Proof.CGROUP
        return None

    def foreign(self, pid: int, start_ticks: int) -> bool:
        """Not proven the run's, and not on its way out: a process the run must never act
        on or call its own. One that is exiting cannot prove its tag (the kernel has
        already detached the memory that holds its environment) and is no threat: it
        runs no more code. Waiting for it to be gone is safe; signalling it is not needed."""
        if self.proof(pid, start_ticks) is not None:
            return False
        return not identity.exiting(pid)  # ablate: exiting-not-foreign

    def why_not(self, pid: int) -> str:
        parts = []
        if self.run_id:
            parts.append(f"no {TAG}={self.run_id} tag")
        if self.cgroup:
            parts.append(f"not in cgroup {self.cgroup}")
        return f"pid {pid}: " + (" and ".join(parts) if parts else "no run id or cgroup to prove it by")


EMPTY_ENVIRON_WINDOW = 2.0
"""Seconds after its start during which an empty environment is read again (mid-exec)."""


def has_tag(pid: int, run_id: str | None) -> bool:
    """Whether /proc/PID/environ holds exactly RUNNER_RUN_ID=run_id."""
    if not run_id:
        return False
    return f"{TAG}={run_id}".encode() in _environ(pid).split(b"\0")


def tag_of(pid: int) -> str | None:
    """The value of the RUNNER_RUN_ID tag in /proc/PID/environ (a run's key), if any."""
    prefix = TAG.encode() + b"="
    for entry in _environ(pid).split(b"\0"):
        if entry.startswith(prefix):
            return os.fsdecode(entry[len(prefix) :]) or None
    return None


def _environ(pid: int) -> bytes:
    """/proc/PID/environ (a live thread's, if its leader exited). Empty for a kernel
    thread, and also for a user process caught mid-exec: a vfork parent (subprocess)
    resumes before the kernel has laid out the new image's environment. So an empty read
    is retried briefly for user processes."""
    where = f"/proc/{int(pid)}"
    for attempt in range(5):
        try:
            with open(f"{where}/environ", "rb") as f:
                env = f.read()
        except ProcessLookupError:  # ESRCH: gone, or a leader that exited (below)
            env = None
        except OSError:
            return b""
        if env:
            return env
        st = identity.stat(pid)
        if st is None or st.exiting or st.ppid == 2 or st.pid == 2:  # gone, dying, or a kernel thread
            return b""
        if st.tid != st.pid and where != identity.proc_dir(st):
            # Its leader exited while another thread runs (identity.stat): the leader's
            # environ reads ESRCH, that thread's holds the process's environment.
            where = identity.proc_dir(st)
            continue
        if env is None:
            return b""
        # Only a process that has just started can be mid-exec. One that started long
        # ago with an empty environment (`env -i`) keeps it: retrying would cost every
        # sweep 7.5 ms per such process on the machine.
        if identity.age(st.start_ticks) > EMPTY_ENVIRON_WINDOW:
            return b""
        time.sleep(0.0005 * (attempt + 1))
    return b""
