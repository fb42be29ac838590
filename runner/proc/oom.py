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
