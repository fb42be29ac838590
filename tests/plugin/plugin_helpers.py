"""Helpers for the plugin's own tests: signal masks, ready files, polling other processes' state."""

import json
import os
import time


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
