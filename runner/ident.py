"""A process's identity, the value: what makes "pid 4242" mean one particular process.

The pid, its group and session, the kernel's start time in clock ticks (field 22 of
/proc/PID/stat, an integer, never a rounded float) and the boot id. A pid alone is a
number the kernel hands out again; pid plus start ticks plus boot id is not. Read from
/proc by proc/identity.py; written to and read from the run directory by
files/identity_file.py. A plain class, not a dataclass (values.py).
"""

from __future__ import annotations

from runner.errors import IdentityError
from runner.values import FrozenValue

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Final

FIELDS = ("pid", "pgid", "sid", "start_ticks", "boot_id")
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
