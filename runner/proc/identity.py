"""Process identity: the one module that writes and reads it.

An identity is what makes "pid 4242" mean one particular process: the pid, its group
and session, the kernel's start time in clock ticks (field 22 of /proc/PID/stat, an
integer, never a rounded float) and the boot id. A pid alone is a number the kernel
hands out again; pid plus start ticks plus boot id is not.

Its classes are plain (values.py), not dataclasses: importing and applying dataclasses cost
every stop command 74 M of its 205 M start-up instructions (valgrind), about 20 ms.
"""

from __future__ import annotations

import os

from runner.errors import Damaged, IdentityError
from runner.files import atomic, untrusted
from runner.values import FrozenValue

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost, see log.py)
if TYPE_CHECKING:
    from typing import Any, Final

FIELDS = ("pid", "pgid", "sid", "start_ticks", "boot_id")
FORMAT = 1
# /proc reports a group or session whose leader lives outside the reader's pid namespace
# as 0 (a container whose init did not setsid, as in CI). That is a true reading, not a
# torn file; signals.refusal() never signals a group id <= 1, so a 0 cannot misfire.
_MINIMUM = {"pid": 1, "pgid": 0, "sid": 0, "start_ticks": 0}
_BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
_boot_id_cache: str | None = None


class Identity(FrozenValue):
    """Treated as immutable (hashable: set members and dict keys). A plain class, not a
    dataclass: see values.py for what dataclasses cost every stop command."""

    __slots__ = FIELDS

    def __init__(self, pid: int, pgid: int, sid: int, start_ticks: int, boot_id: str) -> None:
        self.pid: Final = pid
        self.pgid: Final = pgid
        self.sid: Final = sid
        self.start_ticks: Final = start_ticks
        self.boot_id: Final = boot_id

    def to_json(self) -> dict[str, int | str]:
        return {name: getattr(self, name) for name in FIELDS}

    @classmethod
    def from_json(cls, data: Any, source: str = "<identity>") -> Identity:
        if not isinstance(data, dict):
            raise IdentityError(f"{source}: expected a JSON object, got {type(data).__name__}")
        values: dict[str, Any] = {}
        for name in FIELDS:
            if name not in data:
                raise IdentityError(f"{source}: missing field {name!r}")
            value = data[name]
            if name == "boot_id":
                if not isinstance(value, str) or not value.strip():
                    raise IdentityError(f"{source}: field 'boot_id': expected a non-empty string, got {value!r}")
            # bool is an int subclass; `true` is not a pid.
            elif not isinstance(value, int) or isinstance(value, bool) or value < _MINIMUM[name]:
                kind = "a positive integer" if _MINIMUM[name] else "a non-negative integer"
                raise IdentityError(f"{source}: field {name!r}: expected {kind}, got {value!r}")
            values[name] = value
        return cls(**values)


class Stat(FrozenValue):
    """The few fields of /proc/PID/stat the runner needs. Treated as immutable; slotted,
    since a scan of /proc creates one per process."""

    __slots__ = ("pid", "state", "ppid", "pgid", "sid", "start_ticks", "wait_status", "kernel")

    def __init__(
        self,
        pid: int,
        state: str,
        ppid: int,
        pgid: int,
        sid: int,
        start_ticks: int,
        wait_status: int | None = None,
        kernel: bool = False,
    ) -> None:
        self.pid: Final = pid
        self.state: Final = state
        self.ppid: Final = ppid
        self.pgid: Final = pgid
        self.sid: Final = sid
        self.start_ticks: Final = start_ticks
        self.wait_status: Final = wait_status
        """Field 52 (exit_code): a zombie's wait(2) status, until its parent reaps it."""
        self.kernel: Final = kernel
        """A kernel thread (PF_KTHREAD in field 9, which no process can set on itself): it
        has no environment, so never the run's tag."""

    @property
    def zombie(self) -> bool:
        # X (dead) is only ever seen in the instant before the entry vanishes.
        return self.state in ("Z", "X")


def boot_id() -> str:
    global _boot_id_cache
    if _boot_id_cache is None:
        try:
            with open(_BOOT_ID_PATH) as f:
                _boot_id_cache = f.read().strip()
        except OSError:
            # No /proc boot id (not Linux): identities then only compare within this boot's
            # lifetime of the host process, which is the best that can be said.
            _boot_id_cache = "unknown"
    return _boot_id_cache


_PF_KTHREAD = 0x00200000


def stat(pid: int) -> Stat | None:
    """Parse /proc/PID/stat; None if the process is gone (zombies are returned)."""
    # os.open and one os.read, not open(): a stop's scan reads every process's stat, and
    # the buffered file object costs 40 % more per read (1.39 against 0.87 ms a pass
    # over 116 processes, measured). The file is under a page: one read takes it whole.
    try:
        fd = os.open(f"/proc/{int(pid)}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, ProcessLookupError):
        return None
    try:
        raw = os.read(fd, 4096)
    except ProcessLookupError:  # the process was reaped between the open and the read
        return None
    finally:
        os.close(fd)
    if not raw:
        return None
    # comm (field 2) may hold spaces and parentheses: split after the LAST ')'.
    rest = raw[raw.rindex(b")") + 2 :].split()
    # rest[0] is field 3 (state), so field n is rest[n - 3].
    return Stat(
        pid=int(pid),
        state=rest[0].decode(),
        ppid=int(rest[1]),
        pgid=int(rest[2]),
        sid=int(rest[3]),
        start_ticks=int(rest[19]),
        wait_status=int(rest[49]) if len(rest) >= 50 else None,
        kernel=bool(int(rest[6]) & _PF_KTHREAD),
    )


def killed_by(pid: int) -> int | None:
    """For a zombie not yet reaped: the signal that killed it (from its wait status), or
    None (alive, reaped, exited normally)."""
    st = stat(pid)
    if st is None or not st.zombie or st.wait_status is None:
        return None
    return st.wait_status & 0x7F or None


def all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


class Scan:
    """One pass over /proc: every process's stat, read once. A stop round takes its
    process groups and its tag sweep's candidates from one Scan, instead of one pass
    over every process per group (the cost that grows with the machine, not the run)."""

    def __init__(self) -> None:
        self.stats: dict[int, Stat] = {}
        for pid in all_pids():
            st = stat(pid)
            if st is not None:
                self.stats[pid] = st
        self._groups: dict[int, list[Stat]] | None = None

    def group(self, pgid: int) -> list[Stat]:
        """Every process (zombies included) that was in process group `pgid`."""
        if self._groups is None:
            self._groups = {}
            for st in self.stats.values():
                self._groups.setdefault(st.pgid, []).append(st)
        return list(self._groups.get(pgid, ()))


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def age(st: Stat) -> float:
    """Seconds since the process started (its start ticks against the boot clock)."""
    try:
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return uptime - st.start_ticks / _CLK_TCK


def start_ticks(pid: int) -> int | None:
    st = stat(pid)
    return None if st is None else st.start_ticks


def _from_stat(st: Stat) -> Identity:
    return Identity(pid=st.pid, pgid=st.pgid, sid=st.sid, start_ticks=st.start_ticks, boot_id=boot_id())


def current(pid: int) -> Identity | None:
    """Identity of a living process; None if it is gone or a zombie."""
    st = stat(pid)
    if st is None or st.zombie:
        return None
    return _from_stat(st)


def current_or_zombie(pid: int) -> Identity | None:
    """Identity even of a zombie: an unreaped child still pins its pid, so its identity
    is exactly as good as a living one's (used when registering a child that died fast)."""
    st = stat(pid)
    return None if st is None else _from_stat(st)


def matches(ident: Identity, st: Stat | None) -> bool:
    return st is not None and st.start_ticks == ident.start_ticks and ident.boot_id == boot_id()


def is_running(ident: Identity) -> bool:
    """Same boot, alive, not a zombie, same start ticks."""
    if ident.boot_id != boot_id():
        return False
    st = stat(ident.pid)
    return st is not None and not st.zombie and st.start_ticks == ident.start_ticks


def write(path: str | os.PathLike[str], ident: Identity, **extra: object) -> None:
    clash = set(extra) & (set(FIELDS) | {"format"})
    if clash:
        raise ValueError(f"extra keys shadow identity fields: {sorted(clash)}")
    atomic.atomic_write_json(path, {**extra, **ident.to_json(), "format": FORMAT})


def _load(path: str | os.PathLike[str], dir_fd: int | None = None) -> dict[str, Any]:
    # FileNotFoundError propagates: "no file" is the caller's call. Anything else that is
    # not a small regular file of sound JSON is Damaged (a link, a FIFO, a bomb).
    try:
        data = untrusted.read_json(path, dir_fd=dir_fd)
    except IdentityError:
        raise
    except Damaged as exc:
        raise IdentityError(str(exc)) from None
    if not isinstance(data, dict):
        raise IdentityError(f"{path}: expected a JSON object")
    if data.get("format", FORMAT) != FORMAT:
        raise IdentityError(f"{path}: field 'format': expected {FORMAT}, got {data.get('format')!r}")
    return data


def read(path: str | os.PathLike[str], dir_fd: int | None = None) -> Identity:
    return read_record(path, dir_fd)[0]


def read_extra(path: str | os.PathLike[str], dir_fd: int | None = None) -> dict[str, Any]:
    return read_record(path, dir_fd)[1]


def read_record(path: str | os.PathLike[str], dir_fd: int | None = None) -> tuple[Identity, dict[str, Any]]:
    """The identity and the extra keys written beside it (a child's name), from one read."""
    data = _load(path, dir_fd)
    extra = {k: v for k, v in data.items() if k not in FIELDS and k != "format"}
    return Identity.from_json(data, source=str(path)), extra
