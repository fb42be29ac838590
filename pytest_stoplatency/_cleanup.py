"""Cleanup that never leaks: the per-test kill and the session sweep of ownerless victims."""

from __future__ import annotations

import signal

from . import _cgroup, _leaks, _procs, _records, _session, _token

SETTLE = 1.0  # how long a dying (or just killed) process gets to finish exiting, per round
ROUNDS = 3  # a respawner may fork between our scan and our kill


def describe(pid: int) -> dict:
    return {"pid": pid, "cmdline": _procs.cmdline(pid), "state": _procs.state(pid) or "gone"}


def format_procs(procs: list[dict]) -> str:
    return "\n".join(f"  pid {p['pid']} [{p['state']}] {p['cmdline']}" for p in procs)


def kill_lineage(tokens, extras=()) -> tuple[list[dict], list[dict]]:
    """Kill what the test left alive; return (leaked, survivors).

    A leak is a process the test left ALIVE, not one it already killed: right after a
    group SIGKILL the members are still exiting when we look (a forker's children
    were, in about 3 runs in 4). The kernel says which is which: a process with
    SIGKILL pending (also set for any fatal signal) or already in do_exit is dying,
    and is only waited for (event-driven, up to the settle window). Every other
    member is a leak: reported, and SIGKILLed at once, round after round (a
    respawner may fork between our scan and our kill), waiting for the whole lineage
    after each round. Returns the leaked processes (empty = no leak) and what
    outlived all of it (survivors: a process we could not kill).
    """
    tokens, extras = list(tokens), list(extras)
    living = _procs.lineage(tokens, extras)
    leaked: dict[tuple[int, int], dict] = {}
    for _ in range(ROUNDS):
        if not living:
            break
        for pid, ticks in living:
            # A second look at what seemed alive: between dequeuing SIGKILL and setting
            # PF_EXITING the kernel shows neither, for a few instructions.
            if _procs.dying(pid, ticks) or _procs.dying(pid, ticks):
                continue
            leaked.setdefault((pid, ticks), describe(pid))
            _procs.signal_identified(pid, ticks, signal.SIGKILL)  # ablate: plugin-cleanup-sigkill
        # Exiting members no longer show their token: keep them watched by (pid, ticks).
        extras = sorted(set(extras) | set(living))
        living = _procs.wait_gone(tokens, extras, timeout=SETTLE)
    return list(leaked.values()), [describe(pid) for pid, _ in living]


def sweep_needed() -> bool:
    """Whether some owner's record directory outlived its owner: only then can a dead
    session have left anything for a sweep to end.

    Every pytest process that ever starts a victim, or runs the leak check, has its record
    directory from before its first such process (PreparedVictim, the --process-leaks
    configure) until its clean end (drop_own_records) or, once it is dead, until a sweep
    that left nothing of it alive (sweep_ownerless; its guardian runs one). Without such a
    directory the sweep is skipped, and a session that uses nothing of the plugin reads
    nothing of /proc: only the owners named by the directories here are looked at, never
    the whole process table.
    """
    return any(not owner.alive() for owner, _ in _records.owner_dirs())  # ablate: sweep-dead-owner-records


def sweep_ownerless() -> int:
    """Kill every victim, and every process carrying a --process-leaks tag, whose owner
    (pid + start ticks) is gone; return how many.

    A live owner's processes are never touched: several sessions may run at once.
    """
    killed = 0
    for _ in range(ROUNDS):
        orphans = []
        # Victim tokens, and --process-leaks tags, which name their owner too: a test's
        # process whose pytest died without teardown (pytest-timeout's thread method) is a
        # leak nobody else will end.
        for pid, tok in [*_procs.scan_tokens().items(), *_leaks.scan_tags().items()]:
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
    else:
        # Still something of a dead owner alive after every round (a fast respawner):
        # its records stay, so that the next session sweeps again (sweep_needed).
        return killed + _cgroup.sweep_dead()
    for owner, d in _records.owner_dirs():
        if not owner.alive():
            _records.remove(d)
    for owner, f in _records.scratch_files():  # a dead harness's scratch directories (hold.guard)
        if not owner.alive():
            _records.remove_scratch(f)
    # --process-leaks-cgroup sessions whose pytest died: what they hold is theirs, tag or not.
    return killed + _cgroup.sweep_dead()


def drop_own_records(session: int | None) -> None:
    """At a clean end of pytest session `session`: its record directory is no longer
    needed once its extras are dead. Only its own: an inner session (pytester.runpytest()
    in a test) ends while the outer one goes on using its records. The outermost session
    also drops what this process recorded outside any session."""
    dirs = _records.owner_dirs()
    if not dirs:  # nothing recorded: not even this process's start ticks are read
        return
    me = _token.me()
    mine = {me.session_name(session)}  # ablate: session-owned-records
    if _session.outermost(session):
        mine.add(me.session_name(None))
    for owner, d in dirs:
        if owner == me and d.name in mine and not any(_procs.is_alive(*e) for e in _records.recorded_extras(d)):
            _records.remove(d)
