"""Stop requests and the operator's STOP / PAUSE files.

stop-request.json carries the strongest pending request: modes are ordered
absent < graceful < hard and a request is never downgraded. An atomic replace alone loses
updates when two stoppers write at once (both read "absent", the graceful one replaces the
hard one), so every read-merge-write, and the engine's consume, runs under an flock on
stop-request.lock. Readers outside the lock (peek) are safe because writes are atomic.

A request that cannot be read (torn, empty, hand-edited) reads as GRACEFUL with
unreadable=True: an operator meant *some* stop, and a spurious hard stop is worse than
a graceful one.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path

from runner import defaults
from runner.errors import DISK_ERRNOS, ControlFileError, Damaged, Unwritable
from runner.events import Mode, Origin
from runner.files import dirfd, untrusted
from runner.files.atomic import atomic_write_json
from runner.values import Value

TYPE_CHECKING = False

if TYPE_CHECKING:
    from runner.files.rundir import RunDir


# The stop vocabularies live with the others (events.py); re-exported here, where the
# request file spells them.


class StopRequest(Value):
    """A pending stop. A plain class, not a dataclass (see values.py)."""

    __slots__ = ("mode", "origin", "t", "unreadable", "archived", "kind")

    def __init__(
        self,
        mode: Mode,
        origin: Origin,
        t: float,
        unreadable: bool = False,
        archived: str | None = None,
        kind: str | None = None,
    ) -> None:
        self.mode = mode
        self.origin = origin
        self.t = t
        self.unreadable = unreadable
        self.archived = archived
        """Where consume() moved the file (archive/...), for the journal."""
        self.kind = kind
        """The StopKind of the command that lodged it (hard, now, graceful): who asked,
        which the engine journals with the stop it honors; None when not said."""

    def to_dict(self) -> dict[str, str | float]:
        out: dict[str, str | float] = {"mode": self.mode.label, "origin": self.origin.value, "t": self.t}
        if self.kind is not None:
            out["kind"] = self.kind
        return out


_after_read: Callable[[StopRequest | None], object] | None = None
"""Test seam: if set, lodge() calls it with the request it read, while holding the lock,
before it writes. A test parks one stopper there to race a second one deterministically."""


class RequestLockHeld(ControlFileError):
    """stop-request.lock held by another process past REQUEST_LOCK_WAIT: contention, not
    damage (nothing in the directory is wrong). A hard stop goes on by its signal and
    says so on a line of its own; its code is its stop's."""


FIRST_RETRY = 0.0005
"""The first pause of a wait for stop-request.lock, doubled up to FILE_POLL. The lock is
held for a read and a rename: the engine, woken by the very rename of a request, finds
its lodger still closing the lock (microseconds) nearly every time; a first pause of
FILE_POLL was 10 ms on every stop that lodges a request (`--now` included), the engine's
stop held behind it."""


class _Locked:
    """`with _Locked(run_dir):` holds the flock on stop-request.lock, waited for
    REQUEST_LOCK_WAIT at most (control/stop.py's lock story): a holder frozen mid-merge
    never holds a stopper or the engine past it (ControlFileError: the request is not
    lodged, or not consumed this time). A class, not a contextlib generator: importing
    contextlib costs every stop command about 2.9 M instructions (valgrind) of its
    start-up."""

    __slots__ = ("_run_dir", "_fd")

    def __init__(self, run_dir: RunDir) -> None:
        self._run_dir = run_dir
        self._fd = -1

    def __enter__(self) -> None:
        path = self._run_dir.stop_request_lock
        try:
            # Only locked, never written: where a backup shares it (`cp -al`), locked as
            # it is (links.py).
            fd = untrusted.open_regular(path, flags=os.O_RDWR | os.O_CREAT, shared=True)
        except FileNotFoundError:
            raise ControlFileError(f"{path}: cannot open (no run directory)") from None
        try:
            deadline = time.monotonic() + defaults.REQUEST_LOCK_WAIT
            pause = FIRST_RETRY  # ablate: request-lock-retries-soon
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:  # ablate: request-lock-bounded
                        raise RequestLockHeld(
                            f"{path}: another stopper holds it (held past REQUEST_LOCK_WAIT, "
                            f"{defaults.REQUEST_LOCK_WAIT}s: frozen while it lodges?): the request is not written"
                        ) from None
                    time.sleep(pause)
                    pause = min(2 * pause, defaults.FILE_POLL)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def __exit__(self, *exc_info: object) -> None:
        os.close(self._fd)  # drops the lock


def _read(path: str | os.PathLike[str]) -> StopRequest | None:
    # Untrusted: a FIFO, a link to /dev/zero or a JSON bomb here reads as unreadable
    # (graceful) at once; it never hangs the watchdog or a stopper.
    try:
        data = untrusted.read_json(path)
    except FileNotFoundError:
        return None
    except Damaged:
        return _unreadable(path)
    try:
        mode = data["mode"]
        if mode not in (Mode.GRACEFUL.label, Mode.HARD.label):
            return _unreadable(path)
    except (TypeError, KeyError, IndexError):
        return _unreadable(path)
    origin = data.get("origin")
    t = data.get("t")
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        t = _mtime(path)
    kind = data.get("kind")
    return StopRequest(Mode.parse(mode), Origin.parse(origin), float(t), kind=kind if kind in KINDS else None)


def _mtime(path: str | os.PathLike[str]) -> float:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return time.time()


def _unreadable(path: str | os.PathLike[str]) -> StopRequest:
    return StopRequest(Mode.GRACEFUL, Origin.UNKNOWN, _mtime(path), unreadable=True)


def _rank(request: StopRequest) -> tuple[Mode, bool]:
    # Stronger mode wins; on a tie a readable request beats an unreadable one, and
    # otherwise the first (older) one stays, keeping its origin and time.
    return (request.mode, not request.unreadable)


KINDS = ("hard", "now", "graceful")
"""What a request's `kind` may say (events.StopKind's names); anything else reads as unsaid."""


def lodge(run_dir: RunDir, mode: Mode | str, origin: Origin | str, kind: str | None = None) -> StopRequest:
    """Record a stop request; returns the request now pending (possibly an older, stronger
    one). `kind`: the StopKind of the command that asks (who asked, for the record)."""
    new = StopRequest(Mode.parse(mode), Origin(origin), time.time(), kind=kind if kind in KINDS else None)
    with _Locked(run_dir):
        old = _read(run_dir.stop_request)
        if _after_read is not None:
            _after_read(old)
        if dirfd.gone(run_dir.path):  # ablate: lodge-refuses-a-gone-dir
            # Removed or half removed while this stopper got here: a request written now
            # would be a new file in a directory `rm -rf` may still be emptying (its last
            # rmdir would fail), for an engine that stops such a run by itself.
            raise ControlFileError(f"{run_dir.path}: the run directory went away: no request is written there")
        # Never downgrade: the stronger of the pending request and the new one wins.
        winner = max(old, new, key=_rank) if old is not None else new  # ablate: no-downgrade
        if winner is not old:
            try:
                # Atomic, not made durable: a request lives only as long as the engine that
                # reads it (a crash of the machine ends both; `resume` archives what is
                # left), and its two fsyncs were a tenth of a `--now` (profiled: 4 ms each).
                atomic_write_json(run_dir.stop_request, winner.to_dict(), durable=False)
            except OSError as e:
                if e.errno in DISK_ERRNOS:  # the file system refused: not the request's fault
                    raise Unwritable.of(run_dir.stop_request, e) from None
                raise ControlFileError(f"{run_dir.stop_request}: cannot write ({e.strerror or e})") from None
    return winner


def peek(run_dir: RunDir) -> StopRequest | None:
    """The pending request, without consuming it; None when there is none."""
    return _read(run_dir.stop_request)


def _archive_name(run_dir: RunDir, name: str) -> Path:
    dirfd.mkdir(run_dir.archive)
    return run_dir.archive / f"{time.time_ns()}-{os.getpid()}-{name}"


def _rename(src: Path, dst: Path) -> None:
    """os.rename, relative to the run directory's descriptor (dirfd.py): a moved run
    directory keeps working, and no directory on the way is a link followed."""
    sfd, sname = dirfd.parent(src)
    try:
        dfd, dname = dirfd.parent(dst)
        try:
            os.rename(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
        finally:
            os.close(dfd)
    finally:
        os.close(sfd)


def taken_since(run_dir: RunDir, t: float) -> bool:
    """A request was consumed (moved into archive/ under its _archive_name, which starts
    with the time it was moved) at or after `t`, epoch seconds: while the engine of an
    attempt started at `t` lives, it has taken a stop and is ending the run."""
    try:
        names = untrusted.list_dir(run_dir.archive)
    except (Damaged, OSError):
        return False
    since = int(t * 1e9)
    for name in names:
        ns, _, rest = name.partition("-")
        if rest.endswith(f"-{run_dir.stop_request.name}") and ns.isdigit() and int(ns) >= since:
            return True
    return False


def consume(run_dir: RunDir) -> StopRequest | None:
    """Take the pending request: one atomic rename into archive/, then read the moved file.

    The engine is the single consumer; the rename makes a request consumed exactly once
    even if consume() ran twice at once, and a lodge() cannot slip in between read and
    removal (it takes the same lock).
    """
    try:
        with _Locked(run_dir):
            dest = _archive_name(run_dir, run_dir.stop_request.name)
            try:
                _rename(run_dir.stop_request, dest)
            except FileNotFoundError:
                return None
    except ControlFileError:
        return None  # the lock held past its bound, or no directory: taken at a later consume
    request = _read(dest) or _unreadable(dest)
    request.archived = str(dest)
    return request


def stop_file(run_dir: RunDir) -> bool:
    return dirfd.lexists(run_dir.stop_file)


def pause_file(run_dir: RunDir) -> bool:
    return dirfd.lexists(run_dir.pause_file)


def pause(run_dir: RunDir) -> bool:
    """Put the operator's PAUSE file in place (what `touch <run-dir>/PAUSE` does): the
    engine holds at its next check point until it is gone. Never through a link.
    Returns False when it was already there."""
    try:
        fd = dirfd.create_new(run_dir.pause_file, 0o644)
    except Damaged:
        return False
    except OSError as e:
        raise ControlFileError(f"{run_dir.pause_file}: cannot create ({e.strerror or e})") from None
    os.close(fd)
    return True


def unpause(run_dir: RunDir) -> bool:
    """Remove the PAUSE file (a link is removed, never followed); the engine goes on
    within PAUSE_POLL. Returns False when there was none."""
    try:
        pfd, name = dirfd.parent(run_dir.pause_file)
        try:
            os.unlink(name, dir_fd=pfd)
        finally:
            os.close(pfd)
    except FileNotFoundError:
        return False
    except OSError as e:  # a directory put there by hand: named, never removed recursively
        raise ControlFileError(f"{run_dir.pause_file}: cannot remove ({e.strerror or e})") from None
    return True


def archive_pending(run_dir: RunDir) -> list[str]:
    """For resume: move a pending stop-request.json, STOP and PAUSE into archive/, so the
    resumed run does not stop at once. Returns the names that were moved."""
    moved: list[str] = []
    with _Locked(run_dir):
        for path in (run_dir.stop_request, run_dir.stop_file, run_dir.pause_file):
            try:
                _rename(path, _archive_name(run_dir, path.name))
            except FileNotFoundError:
                continue
            moved.append(path.name)
    return moved
