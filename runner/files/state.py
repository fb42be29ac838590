"""state.json: the run's state, written atomically, with the `stopped` guard.

The single-writer rule: while the engine lives only the engine records `stopped`; a
stopper records it only after proving the engine dead. Whoever writes, a recorded stop
belongs to its attempt and no later save of that attempt may take it back (the engine
keeps an in-memory State that may predate the stop; saving it must not clobber the stop).
`runner resume` starts a new attempt, which is the only way back to stopped=False.

State and ItemState are plain classes (values.py) with their fields listed once (FIELDS),
not dataclasses: importing and applying dataclasses cost every stop command 74 M of its
205 M start-up instructions (valgrind), about 20 ms; a stopper loads and saves state.json.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

from runner.errors import Damaged
from runner.files import dirfd, reserve, untrusted
from runner.files.atomic import atomic_write_json
from runner.values import Value

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost, see log.py)
if TYPE_CHECKING:
    from typing import Any, NoReturn

    from runner.files.reserve import Reserve

ITEM_STATUSES = ("pending", "done", "failed", "stopped")
RUN_STATUSES = ("running", "completed", "failed", "stopped", "crashed")


class ItemState(Value):
    FIELDS = ("status", "session_done", "post_session_done", "verify_passed", "repairs", "calls")
    __slots__ = FIELDS

    def __init__(
        self,
        status: str = "pending",
        session_done: bool = False,
        post_session_done: bool = False,
        verify_passed: bool = False,
        repairs: int = 0,
        calls: int = 0,
    ) -> None:
        self.status = status
        self.session_done = session_done
        self.post_session_done = post_session_done
        self.verify_passed = verify_passed
        self.repairs = repairs
        self.calls = calls

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.FIELDS}

    def copy(self) -> ItemState:
        return ItemState(**self.to_dict())


class State(Value):
    FIELDS = (
        "run_id",
        "attempt",
        "status",
        "stopped",
        "stop_origin",
        "current_item",
        "phase",
        "items",
        "provider_calls",
        "exit_code",
        "updated",
    )
    __slots__ = FIELDS

    def __init__(
        self,
        run_id: str,
        attempt: int = 1,
        status: str = "running",
        stopped: bool = False,
        stop_origin: str | None = None,
        current_item: str | None = None,
        phase: str | None = None,
        items: dict[str, ItemState] | None = None,
        provider_calls: int = 0,
        exit_code: int | None = None,
        updated: float = 0.0,
    ) -> None:
        self.run_id = run_id
        self.attempt = attempt
        self.status = status
        self.stopped = stopped
        self.stop_origin = stop_origin
        self.current_item = current_item
        self.phase = phase
        self.items: dict[str, ItemState] = {} if items is None else items
        self.provider_calls = provider_calls
        self.exit_code = exit_code
        self.updated = updated

    @classmethod
    def new(cls, run_id: str, items: Iterable[str]) -> State:
        return cls(run_id=run_id, items={name: ItemState() for name in items})

    def to_dict(self) -> dict[str, Any]:
        """The JSON of state.json: every field in order, the items as objects."""
        out = {name: getattr(self, name) for name in self.FIELDS}
        out["items"] = {name: item.to_dict() for name, item in self.items.items()}
        return out

    def copy(self) -> State:
        """A deep copy: the items are copied too (the fields are otherwise immutable)."""
        out = State(**{name: getattr(self, name) for name in self.FIELDS})
        out.items = {name: item.copy() for name, item in self.items.items()}
        return out

    @classmethod
    def from_dict(cls, data: Any, source: str | os.PathLike[str] = "state") -> State:
        """Strict: a malformed state is refused with one line, never half-read."""

        def bad(what: str) -> NoReturn:
            raise Damaged(source, f"malformed state: {what}")

        if not isinstance(data, dict):
            bad("not a JSON object")
        _check_keys(data, cls, bad, "")
        if not isinstance(data.get("run_id"), str):
            bad("run_id: expected a string")
        _check_types(data, _STATE_TYPES, bad, "")
        if data.get("status", "running") not in RUN_STATUSES:
            bad(f"status: expected one of {', '.join(RUN_STATUSES)}, got {data['status']!r}")
        raw_items = data.get("items", {})
        if not isinstance(raw_items, dict):
            bad("items: expected an object")
        items: dict[str, ItemState] = {}
        for name, raw in raw_items.items():
            if not isinstance(raw, dict):
                bad(f"items.{name}: expected an object")
            _check_keys(raw, ItemState, bad, f"items.{name}.")
            _check_types(raw, _ITEM_TYPES, bad, f"items.{name}.")
            if raw.get("status", "pending") not in ITEM_STATUSES:
                bad(f"items.{name}.status: expected one of {', '.join(ITEM_STATUSES)}, got {raw['status']!r}")
            items[name] = ItemState(**raw)
        return cls(**{**data, "items": items})


_STATE_TYPES: dict[str, tuple[type, ...]] = {
    "attempt": (int,),
    "status": (str,),
    "stopped": (bool,),
    "stop_origin": (str, type(None)),
    "current_item": (str, type(None)),
    "phase": (str, type(None)),
    "provider_calls": (int,),
    "exit_code": (int, type(None)),
    "updated": (int, float),
}
_ITEM_TYPES: dict[str, tuple[type, ...]] = {
    "status": (str,),
    "session_done": (bool,),
    "post_session_done": (bool,),
    "verify_passed": (bool,),
    "repairs": (int,),
    "calls": (int,),
}


def _check_keys(
    data: dict[str, Any], cls: type[State] | type[ItemState], bad: Callable[[str], NoReturn], prefix: str
) -> None:
    known = cls.FIELDS
    for key in data:
        if key not in known:
            bad(f"{prefix}{key}: unknown key")


def _check_types(
    data: dict[str, Any], types: dict[str, tuple[type, ...]], bad: Callable[[str], NoReturn], prefix: str
) -> None:
    for key, allowed in types.items():
        if key not in data:
            continue
        value = data[key]
        # bool is an int in Python; a counter that reads `true` is corruption.
        if (isinstance(value, bool) and bool not in allowed) or not isinstance(value, allowed):
            bad(f"{prefix}{key}: expected {'/'.join(t.__name__ for t in allowed)}, got {value!r}")


def _keep_recorded_stop(state: State, recorded: tuple[str | None] | None) -> None:
    if recorded is not None and not state.stopped:
        state.stopped, state.stop_origin, state.status = True, recorded[0], "stopped"


class StateStore:
    def __init__(self, path: str | os.PathLike[str], spare: Reserve | None = None) -> None:
        self.path = path
        self.spare = spare  # given up when a save finds the disk full (reserve.py)
        self._saved_stop: tuple[int, str | None] | None = None  # (attempt, origin) of a stop this store itself saved

    def load(self) -> State:
        # The run directory is untrusted: no link followed, no FIFO waited on, a size
        # and depth cap (untrusted.py); every failure is Damaged, one line.
        try:
            data = untrusted.read_json(self.path, untrusted.STATE_CAP)
        except FileNotFoundError:
            raise Damaged(self.path, "no state file") from None
        try:
            return State.from_dict(data, self.path)
        except TypeError as e:  # a field of the right type but a shape from_dict cannot take
            raise Damaged(self.path, f"malformed state: {' '.join(str(e).split())}") from None

    def load_or_none(self) -> State | None:
        """None when no state has been written yet (an engine that has only just started)."""
        if not dirfd.lexists(self.path):
            return None
        return self.load()

    def _recorded_stop(self, attempt: int) -> tuple[str | None] | None:
        """(origin,) if a stop is recorded for `attempt`, on disk or by this store's last save."""
        try:
            disk = self.load()
        except Damaged:
            disk = None  # unreadable on disk: this store's own memory still guards
        if disk is not None and disk.attempt == attempt and disk.stopped:
            return (disk.stop_origin,)
        if self._saved_stop is not None and self._saved_stop[0] == attempt:
            return (self._saved_stop[1],)
        return None

    def save(self, state: State) -> None:
        """Write `state` atomically. Updates `state` in place (updated time, and the guard).

        The read-then-write below is not atomic against another writer; it does not need to
        be, because of the single-writer rule (a stopper writes only once the engine is dead).
        """
        # The stopped guard: a save never un-stops an attempt.
        _keep_recorded_stop(state, self._recorded_stop(state.attempt))  # ablate: stopped-guard
        state.updated = time.time()
        data = state.to_dict()
        reserve.retrying(lambda: atomic_write_json(self.path, data), self.spare, self.path)
        if state.stopped:
            self._saved_stop = (state.attempt, state.stop_origin)

    def new_attempt(self, state: State) -> State:
        """For resume: a copy with attempt + 1, not stopped, running. Items the stop cut
        short go back to pending; done and failed items keep their results (and their
        session_done / post_session_done flags, so a completed session is not run again)."""
        nxt = state.copy()
        nxt.attempt = state.attempt + 1
        nxt.stopped, nxt.stop_origin, nxt.status, nxt.exit_code = False, None, "running", None
        for item in nxt.items.values():
            if item.status == "stopped":
                item.status = "pending"
        return nxt
