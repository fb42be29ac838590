"""Finding the run's processes that left its groups: the RUNNER_RUN_ID tag sweep,
descendant snapshots, and orphan reaping for a child subreaper. This module finds;
reaper.py signals (it imports this module, never the other way round)."""

from __future__ import annotations

import os

from runner import ident
from runner import log as _log
from runner.ident import Identity
from runner.proc import identity, membership, signals

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost, see log.py)
if TYPE_CHECKING:
    from collections.abc import Collection

log = _log.get("runner.proc.sweep")

PR_SET_CHILD_SUBREAPER = 36


def tagged(
    run_id: str | None,
    scan: identity.Scan | None = None,
    skip: Collection[int] = (),
    untagged: set[tuple[int, int]] | None = None,
    protected: Collection[int] | None = None,
) -> list[Identity]:
    """Every living process whose environment holds RUNNER_RUN_ID=run_id, minus this
    process and its ancestors (a `runner stop` run from a hook carries the tag too).
    `scan`: the round's pass over /proc, when the caller has one. `skip`: pids the
    caller already watches, whose environment need not be read again (at a thousand
    processes, those reads are most of a round). `untagged`: (pid, start ticks) of the
    processes an earlier round of the same stop read without the tag; they are not read
    again (a running process's environment does not change), and this round adds to it.
    `protected`: signals.protected_pids(), when the caller already has it."""
    if not run_id:
        return []
    if protected is None:
        protected = signals.protected_pids()
    # Start ticks first (the scan), the tag second: the reaper re-checks the ticks after
    # it opens a pidfd, so a tag read in between belongs to the very process it signals.
    stats = (scan or identity.Scan()).stats
    boot = ident.boot_id()
    out: list[Identity] = []
    for pid, st in stats.items():
        # A kernel thread has no environment to read (half the processes of a quiet
        # machine: 65 of 112 here, each an empty read and a stat read again).
        if pid in protected or pid in skip or st.zombie or st.kernel:  # ablate: sweep-skips-kernel-threads
            continue
        if untagged is not None and (pid, st.start_ticks) in untagged:
            continue
        if membership.has_tag(pid, run_id):
            out.append(identity.from_stat(st, boot))
        elif untagged is not None:
            untagged.add((pid, st.start_ticks))
    return out


def descendants(pid: int) -> list[Identity]:
    """Snapshot of a process's living descendants (by parent links, so a child that
    called setsid is still found while its parent lives): lineage of one root."""
    return lineage((int(pid),))


def lineage(roots: Collection[int], scan: identity.Scan | None = None) -> list[Identity]:
    """The living descendants of `roots` by parent links, read in one pass over /proc:
    a child that called setsid, or dropped its environment, is found while its parent
    lives, and a subreaper's adopted grandchildren are its children. The caller has
    proven the roots the run's; a stopper takes this before its first signal, as the
    engine snapshots a call before it kills it (a killed parent's children lose the link)."""
    children: dict[int, list[identity.Stat]] = {}
    for st in (scan or identity.Scan()).stats.values():
        children.setdefault(st.ppid, []).append(st)
    boot = ident.boot_id()
    out: list[Identity] = []
    stack, seen = list(roots), set(roots)
    while stack:
        for st in children.get(stack.pop(), ()):
            if st.pid in seen:
                continue
            seen.add(st.pid)
            stack.append(st.pid)
            if not st.zombie:
                out.append(identity.from_stat(st, boot))
    return out


def living_children(pid: int) -> list[identity.Stat]:
    """`pid`'s living (not zombie) children, from each of its threads' children list
    (no pass over /proc)."""
    out: list[identity.Stat] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids = f.read().split()
        except OSError:
            continue
        for kid in kids:
            st = identity.stat(int(kid))
            if st is not None and st.ppid == pid and not st.zombie:
                out.append(st)
    return out


def comm(pid: int) -> str:
    """The process's name (/proc/PID/comm), for a line that names it; '?' if gone."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def make_subreaper() -> bool:
    """Become a child subreaper: double-forked daemons of our children are re-parented
    to us instead of init, so the tag and descendant sweeps find and reap them at once."""
    import ctypes  # here, not at the top: only the engine becomes a subreaper

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        rc: int = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        return rc == 0
    except (OSError, AttributeError):
        return False


def _zombie_children() -> list[int]:
    me = os.getpid()
    out: list[int] = []
    for pid in identity.all_pids():
        st = identity.stat(pid)
        if st is not None and st.ppid == me and st.zombie:
            out.append(pid)
    return out


def reap_orphans(exclude: set[int]) -> list[int]:
    """Reap zombie children that are not in `exclude` (the Popen children: their exit
    status belongs to Popen.wait; stealing it makes subprocess report a killed command
    as returncode 0). Never waitpid(-1): a peek with WNOWAIT first, then each zombie by
    its own pid."""
    try:
        peek = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return []
    if peek is None:
        return []
    reaped: list[int] = []
    for pid in _zombie_children():
        if pid in exclude:
            continue
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG) is not None:
                reaped.append(pid)
        except ChildProcessError:
            pass
    return reaped
