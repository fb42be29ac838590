"""How a call died, in words: a signal by its name, and a kill by the kernel's
out-of-memory killer as such. The kernel counts OOM kills: in a cgroup's
`memory.events` (`oom_kill`: every process of that cgroup, and below, the OOM killer
killed) where the memory controller runs, and for the whole machine in /proc/vmstat
(`oom_kill`). A call whose leader died of SIGKILL while the count rose was killed for
memory: "out of memory", never a bare "rc -9" (a SIGKILL of the stop is the stop's,
classified before this is asked)."""

from __future__ import annotations

import signal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

OOM = "oom"
"""What `killed_by` says for a kill by the OOM killer."""


def _counter(path: str, key: bytes) -> int | None:
    try:
        with open(path, "rb") as f:
            data = f.read(64 * 1024)
    except OSError:
        return None
    for line in data.splitlines():
        name, _, value = line.partition(b" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return None


def kills(cgroup: Path | None = None) -> int | None:
    """The OOM killer's count: the cgroup's (memory.events) where it has one, else the
    machine's (/proc/vmstat); None when the kernel says neither."""
    if cgroup is not None:
        found = _counter(f"{cgroup}/memory.events", b"oom_kill")
        if found is not None:
            return found
    return _counter("/proc/vmstat", b"oom_kill")


def call_kills(cgroup: Path | None = None) -> int | None:
    """The OOM kills the kernel counts for the memory cgroup a call's processes are in,
    any of them, not only its leader: the run's cgroup (`cgroup`: its `memory.events`,
    which counts every process below it) where the memory controller runs there; else
    the memory cgroup this engine is in, which its calls inherit (a container's memory
    limit): v2 `memory.events`, or v1 `memory.oom_control`. None when the kernel shows
    neither (the machine's /proc/vmstat names no process of the call: never used here)."""
    if cgroup is not None:
        found = _counter(f"{cgroup}/memory.events", b"oom_kill")
        if found is not None:
            return found
    own = _own_memory_file()
    return _counter(own[0], own[1]) if own is not None else None


_OWN: list[tuple[str, bytes] | None] = []


def _own_memory_file() -> tuple[str, bytes] | None:
    """The file and key of this process's own memory cgroup's OOM-kill count (read once:
    the engine never moves between memory cgroups)."""
    if not _OWN:
        _OWN.append(_find_own_memory_file())
    return _OWN[0]


def _find_own_memory_file() -> tuple[str, bytes] | None:
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
        with open("/proc/self/mounts") as f:
            mounts = [line.split() for line in f.read().splitlines()]
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):  # v1: the memory hierarchy's mount
            for m in mounts:
                if len(m) > 3 and m[2] == "cgroup" and "memory" in m[3].split(","):
                    return f"{m[1]}{path.rstrip('/')}/memory.oom_control", b"oom_kill"
        if controllers == "":  # v2: the memory controller, if it runs in our cgroup
            for m in mounts:
                if len(m) > 2 and m[2] == "cgroup2":
                    events = f"{m[1]}{path.rstrip('/')}/memory.events"
                    if _counter(events, b"oom_kill") is not None:
                        return events, b"oom_kill"
    return None


def rose(before: int | None, after: int | None) -> int:
    """How many processes the OOM killer killed between two call_kills (0: none shown)."""
    if before is None or after is None or after <= before:
        return 0
    return after - before  # ablate: oom-from-memory-events


def out_of_memory(n: int) -> str:
    """The words for `n` OOM kills during a call."""
    return f"out of memory (the kernel killed {n} process{'es' if n != 1 else ''})"


def killed_by(returncode: int | None, before: int | None, after: int | None) -> str | None:
    """How a call that died of a signal died: OOM when it was a SIGKILL while the OOM
    killer's count rose (`before`, `after`: kills() around the call), else the signal's
    name; None for a call that exited."""
    if returncode is None or returncode >= 0:
        return None
    if -returncode == signal.SIGKILL and before is not None and after is not None and after > before:
        return OOM  # ablate: oom-named
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def describe(killed: str) -> str:
    """The words for `killed_by`'s answer."""
    if killed == OOM:
        return "killed by the kernel's OOM killer (out of memory)"
    return f"killed by {killed}"
