"""Helpers for the plugin's own tests: signal masks, ready files, polling other processes' state."""

import json
import os
import random
import re
import signal
import time

from pytest_stoplatency import _leaks, _procs


def sig_set(pid: int, field: str) -> set[int]:
    """The signals in /proc/<pid>/status's SigIgn / SigCgt mask."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                mask = int(line.split()[1], 16)
                return {n for n in range(1, 65) if mask >> (n - 1) & 1}
    raise AssertionError(f"no {field} for {pid}")


def ready_info(v) -> dict:
    """The ready file the victim itself wrote."""
    return json.loads(open(v.ready_path).read())


def wait_for(pred, timeout: float = 5.0):
    """Poll a condition about OTHER processes' state (not a latency measurement)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.01)
    return pred()


def group_kill(v, sig):
    os.killpg(v.pgid, sig)


def sleep_marks(*names) -> dict[str, str]:
    """Names -> sleep durations unique to this run (a leak check's processes are `sleep N`)."""
    base = random.randrange(10**6, 10**7)
    return {name: f"{base}{i}" for i, name in enumerate(names, 1)}


def sleepers(marks) -> dict[str, tuple[int, int]]:
    """Living `sleep N` processes of this run, by name: {name: (pid, start_ticks)}."""
    wanted = {f"sleep {n}": name for name, n in marks.items()}
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (name := wanted.get(_procs.cmdline(int(entry)))):
            ticks = _procs.start_ticks(int(entry))
            if ticks is not None and _procs.is_alive(int(entry), ticks):
                out[name] = (int(entry), ticks)
    return out


def all_marked(marks) -> list[tuple[int, int]]:
    """Every living process whose command line names one of this run's marks, however many
    there are of one name (a module fixture set up by two xdist workers) and before or after
    its exec (`setsid -f sleep N`, a subshell): what a test kills at its end."""
    pattern = re.compile(r"(?<!\d)(" + "|".join(map(re.escape, marks.values())) + r")(?!\d)")
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid() and pattern.search(_procs.cmdline(int(entry))):
            ticks = _procs.start_ticks(int(entry))
            if ticks is not None and _procs.is_alive(int(entry), ticks):
                out.append((int(entry), ticks))
    return out


def kill_identified(procs) -> None:
    """SIGKILL each (pid, start ticks) through a pidfd, and wait until they are gone."""
    for pid, ticks in procs:
        _procs.signal_identified(pid, ticks, signal.SIGKILL)
    _leaks.wait_dead(list(procs), 5.0)
