"""Live children of a run; kills them all on stop and remembers which it killed.

The record "killed because the run is stopping" is what lets the engine classify a
command's death as stopped rather than failed; a return code cannot tell the two apart.
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

from runner import log as _log
from runner.files import dirfd, identity_file, reserve
from runner.ident import Identity
from runner.proc import identity, reaper, sweep
from runner.proc.reaper import ReapReport

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable

    from runner.files.reserve import Reserve
    from runner.proc.cgroup import RunCgroup

log = _log.get("runner.engine.registry")


class Entry:
    """One live child of the engine. Equal only to itself (a set member by identity)."""

    __slots__ = ("name", "ident", "popen", "path", "snapshots")

    def __init__(self, name: str, ident: Identity, popen: subprocess.Popen[bytes], path: Path) -> None:
        self.name = name
        self.ident = ident
        self.popen = popen
        self.path = path
        self.snapshots: dict[int, Identity] = {}  # pid -> Identity of descendants seen

    def __repr__(self) -> str:
        return f"Entry(name={self.name!r}, ident={self.ident!r}, path={self.path!r})"

    @property
    def pid(self) -> int:
        return self.ident.pid

    @property
    def pgid(self) -> int:
        return self.ident.pgid

    def members(self) -> list[Identity]:
        return [self.ident, *self.snapshots.values()]


class Registry:
    def __init__(
        self,
        children_dir: str | os.PathLike[str],
        *,
        run_id: str,
        kill_grace: float,
        cgroup: RunCgroup | None = None,
    ) -> None:
        self.children_dir = Path(children_dir)
        dirfd.mkdir(self.children_dir)
        self.run_id = run_id
        self.kill_grace = kill_grace
        self.cgroup = cgroup
        self.stopping = False
        self.origin: str | None = None
        self.spare: Reserve | None = None  # the engine's reserve (reserve.py)
        self.spawn_lock = threading.RLock()
        """Held from Popen until register returns, and by reap_orphans: an unregistered
        child must never be reaped by the orphan reaper (its status belongs to Popen)."""
        self._lock = threading.Lock()
        self._entries: dict[int, Entry] = {}
        self._killed: set[int] = set()  # id(entry) of entries the stop killed
        self._stop_done = threading.Event()
        self._stop_report: ReapReport | None = None
        self.claims: Callable[[], bool] | None = None
        """The stop controller's answer to "is a hard stop already asked for?": it starts
        that stop when one is (StopController.claims), so that a call killed by it is
        the stop's (claim_stop)."""
        self.untagged: set[tuple[int, int]] = set()
        """(pid, start ticks) the stop's tag sweep read without the run's tag: the
        engine's clean-up sweep after it does not read their environments again."""

    def register(self, popen: subprocess.Popen[bytes], name: str) -> Entry:
        ident = identity.current_or_zombie(popen.pid)
        if ident is None:  # cannot happen for our unreaped child; keep the record honest anyway
            raise RuntimeError(f"child {popen.pid} vanished before it was registered")
        path = self.children_dir / f"{ident.pid}.json"
        entry = Entry(name=name, ident=ident, popen=popen, path=path)
        argv = list(map(str, popen.args)) if isinstance(popen.args, (list, tuple)) else str(popen.args)
        # A record of the engine like its state and journal: on a full disk, the reserve.
        reserve.retrying(lambda: identity_file.write(path, ident, name=name, argv=argv), self.spare, path)
        with self._lock:
            self._entries[id(entry)] = entry
            late = self.stopping
            if late:
                self._killed.add(id(entry))
        if late:
            # A spawn that raced the stop is killed at once, so it cannot escape it.
            log.info("child %s (pid %d) registered while stopping: killed at once", name, ident.pid)
            self._kill_entries([entry])
        return entry

    def unregister(self, entry: Entry) -> None:
        with self._lock:
            self._entries.pop(id(entry), None)
        try:
            entry.path.unlink()
        except FileNotFoundError:
            pass

    def snapshot(self, entry: Entry) -> None:
        """Remember the entry's current descendants, so that those that later leave its
        group (setsid) or lose their parent (double fork) are still reached."""
        for ident in sweep.descendants(entry.pid):
            entry.snapshots.setdefault(ident.pid, ident)

    def live(self) -> list[Entry]:
        with self._lock:
            return list(self._entries.values())

    def adopted(self) -> list[Identity]:
        """The engine's own children that are not its calls, and what descends from
        them, read live. The engine is a child subreaper: the kernel re-parents to it only
        what descended from it (a double fork's daemon, a leader's children when it
        exits), and it starts nothing but calls, so each is the run's by the kernel's
        word, whatever its environment or cgroup (membership.Proof.KNOWN: the engine's own
        children). Usually none: then no pass over /proc."""
        calls = {e.pid for e in self.live()}
        kids = [st for st in sweep.living_children(os.getpid()) if st.pid not in calls]  # ablate: adopted-are-known
        if not kids:
            return []
        return [identity.from_stat(st) for st in kids] + sweep.lineage([st.pid for st in kids])

    def killed_by_stop(self, entry: Entry) -> bool:
        with self._lock:
            return id(entry) in self._killed

    def claim_stop(self) -> bool:
        """A call died on its own: if a hard stop is already asked for, it starts now and
        marks every live call (that one included) killed by the stop. True if it did."""
        if self.claims is None or not self.claims():
            return False
        # A stop another thread began (the watchdog's request, woken by the request's
        # rename or the stop signal) has marked the run stopping before its kill marks
        # the calls: this call, dead meanwhile, waits for that marking (or makes it),
        # never judged on its own (a session a `--now` killed recorded failed).
        self.stop_all(self.origin)  # ablate: claimed-call-waits-for-the-marking
        return True

    def stop_all(self, origin: str | None) -> ReapReport:
        """Mark stopping, kill every registered tree. Thread-safe and idempotent: a
        second call waits for the first and returns its report, or, if the first one
        failed (it raised), kills again what is still registered."""
        with self._lock:
            first = not self.stopping
            if first:
                self.stopping = True
                self.origin = origin
        if not first:
            self._stop_done.wait()
            if self._stop_report is not None:
                return self._stop_report
        try:
            if first and self.cgroup is not None:
                # The engine's way out of its cgroup (an RCU grace period of waiting, which
                # its exit would otherwise wait for) runs beside the kill, in the thread the
                # engine made ready at start-up. The kill's scope is work/, which the engine
                # is not in: nothing of the stop needs it there.
                self.cgroup.leave_in_background()  # ablate: stop-leaves-cgroup-early
            self._stop_report = self._kill_entries(self._mark_killed())
        finally:
            # Set however the first call ends: a second one (the watchdog's retry, the main
            # thread's clean-up) never waits for a kill that raised before it began.
            self._stop_done.set()
        return self._stop_report

    def _mark_killed(self) -> list[Entry]:
        with self._lock:
            entries = list(self._entries.values())
            # Recorded before any signal: the child's runner may wake the instant
            # its leader dies and must already see that the stop did it.
            self._killed.update(id(e) for e in entries)
        return entries

    def stop_report(self) -> ReapReport:
        """The stop's report, once its kill is done (a call whose tree the stop killed
        waits for it instead of scanning for its own leftovers: the stop reached them)."""
        return self.stop_all(self.origin)

    def _kill_entries(self, entries: list[Entry]) -> ReapReport:
        # Kill first, look later. Contained, the cgroup holds every descendant of every
        # entry, whatever group or session it moved to: the cgroup route reaches them
        # with no pass over /proc before the first signal. Without a cgroup, the
        # descendants are snapshotted before the signal: a killed leader's children are
        # re-parented, and the parent links that find them are lost.
        if self.cgroup is None:  # ablate: contained-stop-skips-snapshot
            for entry in entries:
                try:
                    self.snapshot(entry)
                except OSError:
                    pass
        # The engine saw each of these become the run's (it spawned the leaders, its
        # snapshots followed their parent links, it adopted the rest): `known` proves them
        # even after one scrubbed its environment, where no cgroup holds it.
        adopted = self.adopted()
        return reaper.kill_everything(
            groups=[(e.pgid, e.members()) for e in entries],
            pids=[i for e in entries for i in e.snapshots.values()] + adopted,
            run_id=self.run_id,
            kill_grace=self.kill_grace,
            cgroup=self.cgroup,
            cgroup_scope="work",
            known=[i for e in entries for i in e.members()] + adopted,
            untagged=self.untagged,
            # The engine itself, never signalled (it is protected), is the root of every
            # kill round's lineage: its calls, what it adopts as they die, theirs.
            roots=self._itself(),
        )

    @staticmethod
    def _itself() -> list[Identity]:
        me = identity.current(os.getpid())
        return [] if me is None else [me]

    def reap_orphans(self) -> list[int]:
        """Reap re-parented zombies (when the engine is a subreaper), never a registered
        or in-flight child."""
        with self.spawn_lock:
            exclude = {e.pid for e in self.live()}
            return sweep.reap_orphans(exclude)
