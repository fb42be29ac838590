"""Pid namespaces: a run started inside one (a container, `unshare --pid`) records pids
that mean nothing, or another process, outside it.

The engine writes its pid namespace (`readlink /proc/self/ns/pid`, e.g. "pid:[4026532]")
beside its identity. A stopper in another namespace translates each recorded identity
to the pid it sees: the process whose innermost pid (the last field of NSpid in
/proc/PID/status) is the recorded one, in that very namespace, with the same start
ticks (the kernel's start time does not depend on the namespace). Where it cannot see
the run's processes at all (the run lives in a namespace beside or above its own), the
stopper says so in one line (exit OTHER_PID_NAMESPACE) and signals nothing.
"""

from __future__ import annotations

import os


def of(pid: int | str = "self") -> str | None:
    """The pid namespace of `pid` ("pid:[inode]"), or None when it cannot be read."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def innermost_pid(pid: int) -> int | None:
    """`pid` as the innermost namespace it lives in sees it (NSpid's last field)."""
    try:
        with open(f"/proc/{int(pid)}/status", "rb") as f:
            for line in f:
                if line.startswith(b"NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def foreign(recorded: object) -> str | None:
    """The recorded namespace when it is a namespace other than this process's own."""
    if not isinstance(recorded, str) or not recorded.startswith("pid:["):
        return None
    mine = of()
    return recorded if mine is not None and recorded != mine else None


def seen_here(local_pid: int, namespace: str, candidates: list[int]) -> int | None:
    """The pid, among `candidates` (pids as this process sees them), of the process
    that `namespace` calls `local_pid`."""
    for pid in candidates:
        if innermost_pid(pid) == local_pid and of(pid) == namespace:  # ablate: pidns-translate
            return pid
    return None
