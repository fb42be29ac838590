"""state.json: the run's state, written atomically, with the `stopped` guard.

The single-writer rule: while the engine lives only the engine records `stopped`; a
stopper records it only after proving the engine dead. Whoever writes, a recorded stop
belongs to its attempt and no later save of that attempt may take it back (the engine
keeps an in-memory State that may predate the stop; saving it must not clobber the stop).
`runner resume` starts a new attempt, which is the only way back to stopped=False.

State and ItemState are plain classes (values.py) with their fields listed once (FIELDS):
a stopper loads and saves state.json.

The file is JSON lines, so that a state transition costs the same at 20,000 items as at
ten (rewriting the whole state at every save made a run slow down with the square of its
length). The first line is a full state (what `State.to_dict` gives); each later line is
a transition: every run field, and only the items that changed, which replace theirs.
The state is the first line with every later complete line applied in order:

- a full save (`save(state)`: the engine's first, a stopper's, a resume's) writes one
  line through atomic.py (temp, fsync, replace), as before;
- the engine's saves name the items they may have changed (`touched`) and append one
  line through the journal's append primitives (one O_APPEND write, then fsync); when
  the lines appended since the full one outweigh it, the next save is a full one again
  (compaction), so the file stays within about twice one full state and the bytes
  written per transition do not grow with the number of items.

Never torn: a SIGKILL mid-append leaves at worst a torn last line, which is not JSON (a
prefix of an object never is) and is skipped: the state is then the one before that
transition, as after a SIGKILL before an atomic replace. The next append starts on a
fresh line (as in the journal).

Chosen over sqlite3, whose import would add little to a stopper's start-up (about 3 ms
measured on top of its own imports: datetime, _sqlite3 and libsqlite3), because its files
(the database, -wal, -shm) are opened by the library itself: not through the run
directory's write helpers (atomic.py, the journal's append: no link followed, the disk
reserve), and a planted link or a hostile database in an untrusted directory would be
the library's to survive, not untrusted.py's.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator

from runner.errors import Damaged
from runner.files import dirfd, links, untrusted
from runner.files.atomic import atomic_write_chunks
from runner.files.journal import _ends_torn, _open_append, _write_all
from runner.values import Value

TYPE_CHECKING = False
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
            if isinstance(raw, ItemState):  # made and checked by parse's hook (_item_hook)
                items[name] = raw
                continue
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


COMPACT_SLACK = 64 * 1024
"""Bytes of transitions appended after a full state before the next save writes a full
one again, at least (and at least the full state's own size: amortised, a transition
writes a bounded number of bytes whatever the number of items)."""


def _line(obj: object) -> bytes:
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode("utf-8")


FULL_CHUNK_ITEMS = 4096
"""Items per chunk of a full state's line as it is written (full_chunks)."""


def full_chunks(state: State) -> Iterator[bytes]:
    """The full state's line, byte for byte `_line(state.to_dict())`, in chunks of
    FULL_CHUNK_ITEMS items: a full save of 50,000 items never holds the state a second
    time as dicts and text (that copy was most of the engine's peak memory, 78 MB of it).
    Each distinct item value is serialised once."""
    dumps = json.dumps
    values = ItemState._values
    seen: dict[tuple[object, ...], str] = {}
    fields: list[str] = []
    for name in State.FIELDS:
        if name == "items":
            yield ("{" + ",".join(fields) + ',"items":{').encode() if fields else b'{"items":{'
            fields = []
            batch: list[str] = []
            sep = b""
            for item_name, item in state.items.items():
                key = values(item)
                text = seen.get(key)
                if text is None:
                    text = seen[key] = dumps(item.to_dict(), separators=(",", ":"))
                batch.append(f"{dumps(item_name)}:{text}")
                if len(batch) >= FULL_CHUNK_ITEMS:  # ablate: state-full-chunks
                    yield sep + ",".join(batch).encode()
                    batch, sep = [], b","
            yield (sep + ",".join(batch).encode() if batch else b"") + b"}"
        else:
            fields.append(f"{dumps(name)}:{dumps(getattr(state, name), separators=(',', ':'))}")
    yield ("," + ",".join(fields) if fields else "").encode() + b"}\n"


def full_size(state: State) -> int:
    """The bytes of a full save of `state` (its line), counted chunk by chunk."""
    return sum(map(len, full_chunks(state)))


_STATUS_WORDS = {word: word for word in ITEM_STATUSES}


_ITEM_EXACT: dict[str, type] = {key: types[0] for key, types in _ITEM_TYPES.items()}
"""Each item field's one JSON type (`type(v) is t`: a `true` counter is not an int)."""


def _item_hook(obj: dict[str, Any]) -> Any:
    """An item's object made its ItemState the moment the parser completes it, its status
    word shared: parsed into dicts first, the state of 50,000 items peaked at 96 MB. What
    from_dict would refuse (or anything that is not an item) is left as it is, for
    from_dict to name."""
    if not obj:
        return obj
    for key, value in obj.items():
        if _ITEM_EXACT.get(key) is not type(value):
            return obj
    status = _STATUS_WORDS.get(obj.get("status", "pending"))
    if status is None:
        return obj
    obj["status"] = status
    return ItemState(**obj)


def parse(data: bytes, source: str | os.PathLike[str]) -> Any:
    """The state as one dict: the first line (a full state), then each later complete
    line applied. A line that is not JSON is a transition torn by a crash: skipped. An
    indented state.json (one JSON document over many lines, as written before the file
    was JSON lines) is read whole."""
    if data.startswith(b"{\n"):
        return untrusted.parse_json(data, source, object_hook=_item_hook)
    lines = data.split(b"\n")
    state = untrusted.parse_json(lines[0], source, object_hook=_item_hook)
    for raw in lines[1:]:
        if not raw.strip():
            continue
        try:
            step = untrusted.parse_json(raw, source, object_hook=_item_hook)
        except Damaged:
            continue  # torn: the transition never happened
        if not isinstance(state, dict) or not isinstance(step, dict):
            raise Damaged(source, "malformed state: a line is not a JSON object")
        items, known = step.pop("items", {}), state.setdefault("items", {})
        if not isinstance(items, dict) or not isinstance(known, dict):
            raise Damaged(source, "malformed state: items: expected an object")
        state.update(step)
        known.update(items)  # in place: a load costs the file's size, not lines x items
    return state


def from_bytes(data: bytes, source: str | os.PathLike[str]) -> State:
    """The state state.json's bytes hold (parse, then State.from_dict); Damaged, one line."""
    parsed = parse(data, source)
    try:
        return State.from_dict(parsed, source)
    except TypeError as e:  # a field of the right type but a shape from_dict cannot take
        raise Damaged(source, f"malformed state: {' '.join(str(e).split())}") from None


class StateStore:
    def __init__(self, path: str | os.PathLike[str], spare: Reserve | None = None) -> None:
        self.path = path
        self.spare = spare  # given up when a save finds the disk full (reserve.py)
        self._saved_stop: tuple[int, str | None] | None = None  # (attempt, origin) of a stop this store itself saved
        # What this store last wrote, to append the next transition to it: the file's
        # (inode, size) after the write, the size of its full first line, and each
        # item's fields as written. None: the next save writes a full state.
        self._written: tuple[int, int] | None = None
        self._full_size = 0
        self._items: dict[str, tuple[object, ...]] = {}
        self._last_item: str | None = None

    def load(self) -> State:
        # The run directory is untrusted: no link followed, no FIFO waited on, a size
        # and depth cap (untrusted.py); every failure is Damaged, one line.
        try:
            data = untrusted.read_bytes(self.path, untrusted.STATE_CAP)
        except FileNotFoundError:
            raise Damaged(self.path, "no state file") from None
        return from_bytes(data, self.path)

    def load_or_none(self) -> State | None:
        """None when no state has been written yet (an engine that has only just started)."""
        if not dirfd.lexists(self.path):
            return None
        return self.load()

    def _open_mine(self) -> int | None:
        """A descriptor to append to state.json, if it is still what this store last wrote
        (its inode and size): checked on the descriptor itself, so that an append never
        lands in a file that another writer put in its place, nor in one a backup shares
        (`cp -al`: the full save replaces it, and the backup keeps its inode; links.py)."""
        if self._written is None:
            return None
        try:
            fd = _open_append(os.fspath(self.path))
        except (Damaged, OSError):
            return None  # a link, a FIFO, a missing directory: the full save says why
        try:
            st = os.fstat(fd)
        except OSError:
            st = None
        if st is not None and (st.st_ino, st.st_size) == self._written and not links.shared(fd):
            return fd
        os.close(fd)
        return None

    def _recorded_stop(self, attempt: int, mine: bool = False) -> tuple[str | None] | None:
        """(origin,) if a stop is recorded for `attempt`, on disk or by this store's last save.
        `mine`: the disk holds what this store last wrote, so its memory says it all."""
        disk = None
        if not mine:
            try:
                disk = self.load()
            except Damaged:
                disk = None  # unreadable on disk: this store's own memory still guards
        if disk is not None and disk.attempt == attempt and disk.stopped:
            return (disk.stop_origin,)
        if self._saved_stop is not None and self._saved_stop[0] == attempt:
            return (self._saved_stop[1],)
        return None

    def save(self, state: State, touched: Iterable[str | None] | None = None) -> None:
        """Write `state`. Updates `state` in place (updated time, and the guard).

        `touched`: the items this transition may have changed (the engine's current item);
        the save then appends one line with the run fields and those of them that changed
        since this store's last save. None: a full save (atomic replace).

        The read-then-write below is not atomic against another writer; it does not need to
        be, because of the single-writer rule (a stopper writes only once the engine is dead).
        """
        from runner.files import reserve  # a writer's (a stopper that only reads never loads it)

        fd = self._open_mine() if touched is not None else None
        try:
            # The stopped guard: a save never un-stops an attempt.
            _keep_recorded_stop(state, self._recorded_stop(state.attempt, fd is not None))  # ablate: stopped-guard
            state.updated = time.time()
            if touched is None or fd is None or not self._append(fd, state, touched):  # ablate: state-append
                reserve.retrying(lambda: self._save_full(state), self.spare, self.path)
        finally:
            if fd is not None:
                os.close(fd)
        self._last_item = state.current_item
        if state.stopped:
            self._saved_stop = (state.attempt, state.stop_origin)

    def _save_full(self, state: State) -> None:
        self._full_size = atomic_write_chunks(self.path, full_chunks(state))
        # Nothing kept per item: an item this store has no record of is written whole by
        # the next append that names it (a few bytes), which keeps the engine's memory
        # from holding every item's fields a second time.
        self._items = {}  # ablate: state-items-bounded
        self._written = self._stat()

    def _append(self, fd: int, state: State, touched: Iterable[str | None]) -> bool:
        """Append one transition; False when a full save is due instead (compaction)."""
        if self._written is None:  # _open_mine said it was not; never here
            return False
        touched = tuple(touched)
        if state.status in ("completed", "failed"):
            # The queue has run to its end: its state is written as one full line, so that
            # every later reader (`list`, the dashboard: hundreds of finished runs) parses
            # one line, not the run's transitions. Not a stop's record (stopped, crashed):
            # a stop's own writes stay one append, off the path of its latency.
            return False
        values = ItemState._values
        changed: dict[str, ItemState] = {}
        for name in (*touched, self._last_item):
            item = state.items.get(name) if name is not None else None
            if name is not None and item is not None and self._items.get(name) != values(item):
                changed[name] = item
        step = {name: getattr(state, name) for name in State.FIELDS}
        step["items"] = {name: item.to_dict() for name, item in changed.items()}
        data = _line(step)
        if self._written[1] + len(data) > 2 * self._full_size + COMPACT_SLACK:  # ablate: state-compaction
            return False
        if _ends_torn(fd):
            data = b"\n" + data
        # A disk that fills mid-line gives up the reserve and writes the rest (journal.py).
        _write_all(fd, data, self.spare, os.fspath(self.path))
        from runner.files import reserve

        reserve.retrying(lambda: os.fsync(fd), self.spare, self.path)
        st = os.fstat(fd)
        # Only the items this save named are remembered (see _save_full): bounded,
        # whatever the number of items.
        self._items = {name: values(state.items[name]) for name in (*touched, self._last_item) if name in state.items}
        self._written = (st.st_ino, st.st_size)
        return True

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = os.lstat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_size)

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
