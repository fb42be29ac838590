"""Cleanup that never leaks: the per-test kill and the session sweep of ownerless victims."""

from __future__ import annotations

import signal

from . import _procs, _records, _token

SETTLE = 1.0  # a process the test SIGKILLed may still be exiting: how long it gets before it counts as a leak
ROUNDS = 3  # a respawner may fork between our scan and our kill


def describe(pid: int) -> dict:
    return {"pid": pid, "cmdline": _procs.cmdline(pid), "state": _procs.state(pid) or "gone"}


def format_procs(procs: list[dict]) -> str:
    return "\n".join(f"  pid {p['pid']} [{p['state']}] {p['cmdline']}" for p in procs)


def kill_lineage(tokens, extras=()) -> tuple[list[dict], list[dict]]:
    """Kill what the test left alive; return (leaked, survivors).

    A leak is a process the test left ALIVE, not one it already killed: after a
    group SIGKILL the members may still be exiting when we first look (a forker's
    children were, in about 3 runs in 4). So the first scan only decides whether
    there is anything to look at; every member then gets the settle window to die
    on its own (event-driven, pidfd), and only what outlives it is a leak, which we
    SIGKILL and re-check, round after round (a respawner may fork in between).
    Returns what was still alive after the settle window (leaked, empty = no leak)
    and what outlived our kills as well (survivors: a process we could not kill).
    """
    tokens, extras = list(tokens), list(extras)
    living = _procs.lineage(tokens, extras)
    if not living:
        return [], []
    # Exiting members no longer show their token: keep them watched by (pid, ticks).
    extras = sorted(set(extras) | set(living))
    living = _procs.wait_gone(tokens, extras, timeout=SETTLE)
    found = [describe(pid) for pid, _ in living]
    for _ in range(ROUNDS):
        if not living:
            break
        for pid, ticks in living:
            if not _procs.is_alive(pid, ticks):
                continue  # died since the scan
            _procs.signal_identified(pid, ticks, signal.SIGKILL)  # stoplatency: per-test cleanup SIGKILL
        extras = sorted(set(extras) | set(living))
        living = _procs.wait_gone(tokens, extras, timeout=SETTLE)
    return found, [describe(pid) for pid, _ in living]


def sweep_ownerless() -> int:
    """Kill every victim whose owner (pid + start ticks) is gone; return how many.

    A live owner's victims are never touched: several sessions may run at once.
    """
    killed = 0
    for _ in range(ROUNDS):
        orphans = []
        for pid, tok in _procs.scan_tokens().items():
            t = _token.parse(tok)
            if t is None or t.owner.alive():
                continue
            ticks = _procs.start_ticks(pid)
            if ticks is not None:
                orphans.append((pid, ticks))
        for owner, d in _records.owner_dirs():
            if owner.alive():
                continue
            orphans.extend(e for e in _records.recorded_extras(d) if _procs.is_alive(*e))
        if not orphans:
            break
        for pid, ticks in orphans:
            if _procs.signal_identified(pid, ticks, signal.SIGKILL):  # stoplatency: sweep SIGKILL
                killed += 1
        _procs.wait_gone([], orphans, timeout=SETTLE)
    for owner, d in _records.owner_dirs():
        if not owner.alive():
            _records.remove(d)
    return killed


def drop_own_records() -> None:
    """At a clean session end: our record directory is no longer needed once its extras are dead."""
    me = _token.me()
    for owner, d in _records.owner_dirs():
        if owner == me and not any(_procs.is_alive(*e) for e in _records.recorded_extras(d)):
            _records.remove(d)
