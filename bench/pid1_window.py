"""How long a container's PID 1 is deaf to SIGTERM (`make bench`, part `pid1`; issue 31).

The kernel drops a signal that a pid namespace's init neither handles nor blocks
(pid_namespaces(7)). From the exec of PID 1 until its first `sigprocmask` (or handler),
a SIGTERM sent to it is lost. Measured for each PID 1 a container may have:

- `runner`, started as PID 1 without an init: its interpreter's start-up, until the
  runner's first instruction blocks the stop signals (cli.early_signals);
- `tini-static` and `tini`, the image's init and its dynamically linked twin: their C
  start-up until tini's first `sigprocmask`.

A sample: `unshare --pid --fork --mount-proc PID1 ...` started with nothing blocked (as
a container runtime starts it), its PID 1 read through /proc as fast as this process
can (its `Name`, `SigBlk`, `SigCgt`, and its children: tini forks its child only once its
mask is set, and while it then waits in sigtimedwait the kernel shows the waited-for
signals as unblocked). The window lies between the exec and the first sample in which
SIGTERM is held:

- `at_most`: from the last moment PID 1 had not exec'd yet (a sample showing it still as
  unshare, or not there at all) to the first sample showing SIGTERM held: an upper bound,
  wide when this reader is itself kept off the CPU;
- `at_least`: from the first to the last sample showing PID 1 exec'd with SIGTERM neither
  blocked nor caught: a window seen open that long (0 when no sample fell in it).

Quiet, and beside two CPU hogs (a busy CI runner). Exact figures belong here and in the
generated docs/stop-latency.md, never in a test's assert.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_stoplatency.kit import stats
from reliability import faults

SAMPLES = 20
SIGTERM_BIT = 1 << (signal.SIGTERM - 1)


def _pid1_argv(which: str, work: Path) -> list[str] | None:
    """What PID 1 runs. `runner resume` of an empty directory: a command that starts
    a run (its stop signals blocked from its first instruction) and then ends at once,
    starting nothing."""
    if which == "runner":
        return [sys.executable, "-m", "runner", "resume", "--run-dir", str(work / "no-run-here")]
    exe = shutil.which(which)
    return [exe, "-s", "--", "/bin/sleep", "30"] if exe else None


def _read(pid: int) -> tuple[str, int, int] | None:
    """(Name, SigBlk, SigCgt) of `pid`, None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        return None
    return fields["Name"].strip(), int(fields["SigBlk"], 16), int(fields["SigCgt"], 16)


def sample(which: str, work: Path) -> dict[str, Any]:
    """One start of `which` as PID 1, watched until SIGTERM is held (or it is gone)."""
    argv = _pid1_argv(which, work)
    assert argv is not None
    proc = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", "--", *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    out: dict[str, Any] = {}
    pid1 = None
    try:
        before = time.perf_counter()  # PID 1 has not exec'd (or does not exist) yet
        deadline = time.monotonic() + 30
        while pid1 is None and time.monotonic() < deadline:
            kids = faults.children(proc.pid)
            if kids:
                pid1 = kids[0]
            else:
                before = time.perf_counter()
        if pid1 is None:
            return {"error": "unshare started no PID 1"}
        first_open = last_open = None
        while time.monotonic() < deadline:
            now = time.perf_counter()
            seen = _read(pid1)
            if seen is None:
                return {"error": f"PID 1 ({which}) ended before SIGTERM was seen held"}
            name, blocked, caught = seen
            if name == "unshare":
                before = now
                continue
            if (blocked | caught) & SIGTERM_BIT or (which != "runner" and faults.children(pid1)):
                out["at_most_s"] = now - before
                out["at_least_s"] = (last_open - first_open) if first_open is not None else 0.0
                return out
            if first_open is None:
                first_open = now
            last_open = now
        return {"error": "SIGTERM never seen held"}
    finally:
        if pid1 is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid1, signal.SIGKILL)  # the namespace goes with its init
        proc.wait()


def run(n: int = SAMPLES) -> dict[str, Any]:
    """Every PID 1 that can run here, quiet and beside two CPU hogs; `n` samples each."""
    rows: list[dict[str, Any]] = []
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return {"rows": rows, "n": n, "skipped": "needs root and unshare (a pid namespace)"}
    work = Path(tempfile.mkdtemp(prefix="pid1-window-"))
    try:
        for which in ("runner", "tini-static", "tini"):
            if _pid1_argv(which, work) is None:
                rows.append({"pid1": which, "skipped": f"{which} not installed (apt-get install tini)"})
                continue
            for hogs in (0, 2):
                samples = []
                with faults.hogs(hogs):
                    for _ in range(n):
                        samples.append(sample(which, work))
                good = [s for s in samples if "error" not in s]
                rows.append(
                    {
                        "pid1": which,
                        "cpu_hogs": hogs,
                        "at_most": stats.summary([s["at_most_s"] for s in good]),
                        "at_least": stats.summary([s["at_least_s"] for s in good]),
                        "errors": [s["error"] for s in samples if "error" in s],
                        "samples": samples,
                    }
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"rows": rows, "n": n}


def table(part: dict[str, Any]) -> str:
    if part.get("skipped"):
        return f"not measured: {part['skipped']}"
    lines = ["PID 1         hogs  n   open at least: median / max   at most: median / p95 / max"]
    for r in part["rows"]:
        if r.get("skipped"):
            lines.append(f"{r['pid1']:<13} {r['skipped']}")
            continue
        lo, hi = r["at_least"], r["at_most"]
        lines.append(
            f"{r['pid1']:<13} {r['cpu_hogs']:<5} {hi['n']:<3} "
            f"{stats.seconds(lo['median_s'])} / {stats.seconds(lo['max_s'])}   "
            f"{stats.seconds(hi['median_s'])} / {stats.seconds(hi['p95_s'])} / {stats.seconds(hi['max_s'])}"
            + (f"  ({len(r['errors'])} failed)" if r["errors"] else "")
        )
    return "\n".join(lines)
