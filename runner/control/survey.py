"""What a stopper (or `status`, or `resume`) can learn of a run, trusting no one file.

Each file of the run directory is read on its own through untrusted.py; a damaged one
is named in `damaged` and the rest still count. Where a file says nothing, the kernel
is asked instead: the holder of the run's lock (the process whose fdinfo shows it) is
its engine, the run's cgroup is at the one path the runner creates for the run's id,
and every process of the run carries its tag. Nothing learnt here is a licence to signal: the reaper still
proves each process a member of the run (membership.py) before it signals it.
"""

from __future__ import annotations

import os
import stat
import time

from runner import defaults
from runner.errors import CopyOfRun, Damaged, NoLiveRun, OtherPidNamespace, RunnerError, disk_fault
from runner.exitcodes import Exit
from runner.files import dirfd, identity_file, state, untrusted
from runner.files.rundir import RUN_ID_SHAPE, RunDir, copy_line
from runner.ident import Identity
from runner.proc import identity, membership, pidns, sweep
from runner.proc.cgroup import RunCgroup, run_cgroup_path
from runner.proc.membership import Membership
from runner.values import Value

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from runner.files.spec import Spec


# Plain classes, not dataclasses: see values.py for what dataclasses cost every stop command.


class StopSettings(Value):
    """The [stop] values a stopper needs; the code's defaults when the spec is damaged."""

    __slots__ = ("grace", "kill_grace", "channel")

    def __init__(
        self,
        grace: float = defaults.STOP_GRACE,
        kill_grace: float = defaults.KILL_GRACE,
        channel: str = defaults.STOP_CHANNEL,
    ) -> None:
        self.grace = grace
        self.kill_grace = kill_grace
        self.channel = channel


class Survey(Value):
    __slots__ = (
        "rd",
        "run_id",
        "key",
        "copy",
        "engine",
        "children",
        "child_names",
        "cgroup",
        "live",
        "stop",
        "engine_stop",
        "damaged",
        "unwritten",
        "pidns",
        "elsewhere",
    )

    def __init__(
        self,
        rd: RunDir,
        run_id: str | None = None,
        key: str | None = None,
        copy: str | None = None,
        engine: Identity | None = None,
        children: list[Identity] | None = None,
        child_names: dict[int, str | None] | None = None,
        cgroup: RunCgroup | None = None,
        live: bool | None = None,
        stop: StopSettings | None = None,
        engine_stop: Any = None,
        damaged: list[str] | None = None,
        unwritten: list[str] | None = None,
    ) -> None:
        self.rd = rd
        self.run_id = run_id
        self.key = key  # the membership key (RunDir.key): the tag value and cgroup name
        self.copy = copy  # the line saying this directory is a copy of a run, or None
        self.engine = engine
        self.children: list[Identity] = [] if children is None else children
        self.child_names: dict[int, str | None] = {} if child_names is None else child_names  # pid -> the call's name
        self.cgroup = cgroup
        self.live = live  # None: the lock itself is damaged
        self.stop = StopSettings() if stop is None else stop
        self.engine_stop = engine_stop  # the [stop] values engine.json carries, unchecked
        self.damaged: list[str] = [] if damaged is None else damaged
        self.unwritten: list[str] = [] if unwritten is None else unwritten
        """What the file system refused to write (full, read-only): not damage."""
        self.pidns: str | None = None
        """The engine's pid namespace when it is not this process's (pidns.py): every
        recorded pid is translated, or the run is `elsewhere`."""
        self.elsewhere: str | None = None
        """Why the run's processes cannot be seen from here (another pid namespace)."""

    @property
    def ok_code(self) -> Exit:
        """OK, or DAMAGED when a file of the run directory was damaged (the command did
        its work all the same and names the files)."""
        return Exit.DAMAGED if self.damaged else Exit.OK

    def note(self, exc: Exception) -> None:
        line = " ".join(str(exc).split())
        found = self.unwritten if disk_fault(exc) else self.damaged  # ablate: unwritable-is-not-damage
        if line not in found:
            found.append(line)


def lock_holders(rd: RunDir, candidates: Iterable[int] | None = None) -> list[int]:
    """Pids holding the engine lock on the run's `lock` file, asked of the kernel: a
    process with a descriptor on that very inode whose fdinfo shows the FLOCK WRITE lock.
    (/proc/locks names the process that took the lock, which is `runner run` or
    `resume`; they hand the locked descriptor to the engine.) `candidates`: the pids to
    look at (the run's tagged processes); None looks at every process."""
    try:
        st = os.stat(rd.lock, follow_symlinks=False)
    except OSError:
        return []
    if not stat.S_ISREG(st.st_mode):
        return []
    pids = identity.all_pids() if candidates is None else list(candidates)
    return [pid for pid in pids if _holds_flock(pid, st.st_dev, st.st_ino)]


def _holds_flock(pid: int, dev: int, ino: int) -> bool:
    for fd, target in identity.descriptors(pid):
        if (target.st_dev, target.st_ino) != (dev, ino):
            continue
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}", "rb") as f:
                info = f.read(64 * 1024)
        except OSError:
            continue
        # "lock:\t1: FLOCK  ADVISORY  WRITE 4550 fe:00:2146417 0 EOF"
        if any(b"FLOCK" in line and b"WRITE" in line for line in info.splitlines() if line.startswith(b"lock:")):
            return True
    return False


def _environ_run_id(pid: int, here: str | None) -> str | None:
    """The run id in the tag of a holder of the run's lock, if the tag is this
    directory's (the key ends with the identity measured here): a hard link to another
    run's lock file never lends this directory that run's id."""
    value = membership.tag_of(pid)
    if value is None:
        return None
    run_id, dot, tail = value.rpartition(".")
    ok = dot and here is not None and tail == here and RUN_ID_SHAPE.fullmatch(run_id)
    return run_id if ok else None


def _run_id(view: Survey) -> str | None:
    """run-id, else state.json's run_id, else the lock holder's tag."""
    rd = view.rd
    try:
        return rd.run_id
    except Damaged as exc:
        view.note(exc)
    try:
        data = state.parse(untrusted.read_bytes(rd.state, untrusted.STATE_CAP), rd.state)
        value = data.get("run_id") if isinstance(data, dict) else None
        if isinstance(value, str) and RUN_ID_SHAPE.fullmatch(value):
            return value
    except (FileNotFoundError, Damaged):
        pass
    here = rd.measured_identity()
    for pid in lock_holders(rd):  # every process: slow, and only when both files are damaged
        found = _environ_run_id(pid, here)
        if found:
            return found
    return None


def _engine(view: Survey, wait: bool) -> None:
    rd = view.rd
    deadline = time.monotonic() + (defaults.IDENTITY_WAIT if wait else 0.0)
    holders: list[int] | None = None  # looked up only when engine.json is not the holder

    def tagged_holders() -> list[int]:
        # Only a holder carrying the run's tag is an engine: a stopper recording a stop
        # takes the lock too, once the engine is dead. (A scan of every tagged process:
        # paid only when engine.json does not name the holder itself.)
        nonlocal holders
        if holders is None:
            holders = lock_holders(rd, [i.pid for i in sweep.tagged(view.key)]) if view.key else []
        return holders

    while True:
        try:
            recorded, extra = identity_file.read_record(rd.engine_identity)
            view.pidns = pidns.foreign(extra.get("pidns"))
            if view.pidns is not None:
                return _engine_elsewhere(view, recorded, extra, tagged_holders())
            if lock_holders(rd, [recorded.pid]) or not tagged_holders() or recorded.pid in tagged_holders():
                view.engine = recorded
                view.engine_stop = extra.get("stop")
                return
            # The kernel says another process holds the run's lock: engine.json is stale
            # or forged. The lock holder is the engine (still proven by its tag before
            # any signal); the named pid is never signalled on this file's word.
            view.note(
                Damaged(
                    rd.engine_identity,
                    f"names pid {recorded.pid}, which does not hold the run's lock (pid {tagged_holders()[0]} does)",
                )
            )
            break
        except FileNotFoundError:
            if view.live and time.monotonic() < deadline:
                time.sleep(0.01)
                continue
        except Damaged as exc:
            view.note(exc)
        break
    # engine.json says nothing: the kernel knows who holds the run's lock.
    for pid in tagged_holders():
        ident = identity.current(pid)
        if ident is not None:
            view.engine = ident
            return


def _engine_elsewhere(view: Survey, recorded: Identity, extra: dict[str, Any], holders: list[int]) -> None:
    """engine.json was written in another pid namespace: its pid is that namespace's.
    The engine is the holder of the run's lock that the namespace calls by that pid,
    with the recorded start ticks; not seen from here, the run is elsewhere."""
    assert view.pidns is not None
    pid = pidns.seen_here(recorded.pid, view.pidns, holders)
    ident = identity.current(pid) if pid is not None else None
    if ident is not None and ident.start_ticks == recorded.start_ticks:
        view.engine = ident
        view.engine_stop = extra.get("stop")
        return
    if view.live is not False:
        view.elsewhere = (
            f"run {view.run_id} lives in another pid namespace ({view.pidns}; this command is in "
            f"{pidns.of()}): its engine (pid {recorded.pid} there) cannot be seen from here; "
            f"stop it from that namespace or from one that contains it"
        )


def _children(view: Survey) -> None:
    """Identities of the live calls. The engine removes a call's file when the call
    ends, so a file may vanish between the listing and the read: it is skipped."""
    rd = view.rd
    try:
        names = untrusted.list_dir(rd.children)
    except Damaged as exc:
        view.note(exc)
        return
    candidates: list[int] | None = None
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            ident, extra = identity_file.read_record(rd.children / name)
        except FileNotFoundError:
            continue
        except Damaged as exc:
            view.note(exc)
            continue
        if view.pidns is not None:
            if candidates is None:  # one scan for every call (paid only across namespaces)
                candidates = [i.pid for i in sweep.tagged(view.run_id)] if view.run_id else []
            here = _seen_here(view, ident, candidates)
            if here is None:
                continue  # not among the namespace's living processes: the call is over
            ident = here
        view.children.append(ident)
        view.child_names[ident.pid] = extra["name"] if isinstance(extra.get("name"), str) else None


def _seen_here(view: Survey, recorded: Identity, candidates: list[int]) -> Identity | None:
    """A call's identity, recorded in the engine's pid namespace, as this process sees
    it: among the run's tagged processes, the one that namespace calls by that pid."""
    assert view.pidns is not None
    pid = pidns.seen_here(recorded.pid, view.pidns, candidates)
    ident = identity.current(pid) if pid is not None else None
    return ident if ident is not None and ident.start_ticks == recorded.start_ticks else None


def _cgroup(view: Survey) -> None:
    """The run's cgroup: only ever the path the runner creates for this run's id. The
    `cgroup` file must name that path; anything else is refused and never touched."""
    rd = view.rd
    expected = run_cgroup_path(view.key) if view.key else None
    try:
        named = untrusted.read_text(rd.cgroup_file).strip()
    except FileNotFoundError:
        named = None
    except Damaged as exc:
        view.note(exc)
        named = None
    if named is not None and (expected is None or os.path.normpath(named) != str(expected)):
        view.note(
            Damaged(
                rd.cgroup_file,
                f"names {named[:200]!r}, not this run's cgroup ({expected}); it is never signalled or removed",
            )
        )
    if expected is not None:
        try:
            view.cgroup = RunCgroup.open(expected)  # ablate: cgroup-path-check
        except (FileNotFoundError, NotADirectoryError):
            view.cgroup = None


def _duration(value: object) -> float | None:
    """A [stop] duration as the spec loader accepts it, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    # inf and nan fail the range check as they are (nan compares false), without
    # loading math (a shared library) at every stop command's start-up.
    return float(value) if 0 < value <= defaults.MAX_DURATION else None


def _stop_settings(view: Survey) -> None:
    """The [stop] values: from engine.json when it is the engine's and they hold (the
    engine copies them there from the spec it loaded), else from the spec itself. The
    spec parser is imported only then: most stops never pay for it."""
    given = view.engine_stop
    if isinstance(given, dict):
        grace, kill_grace, channel = (
            _duration(given.get("grace")),
            _duration(given.get("kill_grace")),
            given.get("channel"),
        )
        if grace is not None and kill_grace is not None and channel in defaults.STOP_CHANNELS:
            view.stop = StopSettings(grace=grace, kill_grace=kill_grace, channel=str(channel))
            return
    from runner.files.spec import load_frozen

    try:
        s = load_frozen(view.rd.spec).stop
    except RunnerError as exc:
        view.note(exc)
        return
    except FileNotFoundError:
        if not dirfd.gone(view.rd.path):  # else the run directory went away meanwhile (rm -rf)
            view.note(Damaged(view.rd.spec, "missing"))
        return
    view.stop = StopSettings(grace=s.grace, kill_grace=s.kill_grace, channel=s.channel)


def spec_of(view: Survey) -> Spec | None:
    """The run's frozen spec for a reader that needs all of it (status), or None with
    the damage noted. Stoppers never call this: they take their [stop] values from
    engine.json (see _stop_settings)."""
    from runner.files.spec import load_frozen

    try:
        return load_frozen(view.rd.spec)
    except FileNotFoundError:
        if not dirfd.gone(view.rd.path):  # else the run directory went away meanwhile (rm -rf)
            view.note(Damaged(view.rd.spec, "missing"))
        return None
    except RunnerError as exc:
        view.note(exc)
        return None


def _dir_identity(v: Survey) -> None:
    """Whether `rd` is the directory its run was created in. A copy (`cp -r`, `cp -al`, a
    restored backup, a planted directory holding another run's record) is noted in
    `copy`; a missing or damaged record is damage (nothing is signalled on its word: the
    key is the measured identity, whatever the record says)."""
    rd = v.rd
    try:
        recorded = rd.recorded_identity()
    except Damaged as exc:
        v.note(exc)
        return
    if recorded is None:
        v.note(
            Damaged(
                rd.dir_identity_file,
                "missing: the run's directory identity was never recorded (a run made before it was; "
                f"if this is the run's own directory and not a copy: stat -c %d-%i {rd.path} > {rd.dir_identity_file})",
            )
        )
    elif recorded != rd.measured_identity() and not rd.recorded_elsewhere():
        v.copy = copy_line(rd)  # reads the record again, for a copy only: says where the run lives


def of(rd: RunDir, *, wait_for_engine: bool = True) -> Survey:
    """Everything a stopper can learn of `rd`; never raises for a damaged file. For a
    copy of a run (`copy` set), only its id: nothing in a copy is live, and its engine
    and child files name another directory's processes."""
    v = Survey(rd)
    _dir_identity(v)
    if v.copy is not None:
        try:
            v.run_id = rd.run_id
        except Damaged as exc:
            v.note(exc)
        v.live = False
        return v
    try:
        v.live = rd.is_live()
    except Damaged as exc:
        v.note(exc)
        v.live = None
    v.run_id = _run_id(v)
    v.key = rd.key(v.run_id)
    _engine(v, wait_for_engine)
    _stop_settings(v)
    if (
        v.live is not True
        and v.engine is not None
        and v.key
        and identity.is_running(v.engine)
        and membership.has_tag(v.engine.pid, v.key)
    ):
        # A run-tagged engine runs, yet nobody holds `lock`: the file was replaced (the
        # engine's flock is on the old inode). The run is live all the same.
        if v.live is False:
            v.note(Damaged(rd.lock, f"not held by the run's engine (pid {v.engine.pid}): replaced?"))
        v.live = True
    _children(v)
    _cgroup(v)
    return v


def require_engine(v: Survey) -> Identity:
    if v.engine is None:
        raise NoLiveRun(
            f"{v.rd.engine_identity}: no engine identity and no holder of the run's lock "
            f"(the engine never started, or is gone)"
        )
    return v.engine


def not_a_copy(view: Survey) -> Survey:
    """The view, unless its directory is a copy of a run: then CopyOfRun, before anything
    is signalled or written (the copy's files name another directory's processes)."""
    if view.copy is not None:
        raise CopyOfRun(view.copy)
    return view


def acting_on(view: Survey) -> Survey:
    """The view a signalling stop acts on: not a copy's, and not of a run in a pid
    namespace this process cannot see into (OtherPidNamespace, nothing signalled)."""
    view = not_a_copy(view)
    if view.elsewhere is not None:
        raise OtherPidNamespace(view.elsewhere)
    return view


def members(view: Survey) -> Membership:
    """What proves a process this run's: its tag (the run's key) or its cgroup."""
    return Membership(view.key, view.cgroup.relative if view.cgroup else None)
