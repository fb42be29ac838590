"""journal.jsonl: one JSON object a line, each with "event" and "t" (wall-clock epoch).

Each record is one os.write on an O_APPEND descriptor: the kernel appends it whole, so
the engine, its watchdog thread and a stopper process can append at once without
interleaving. A SIGKILL or a crash can at worst leave a torn last line; readers skip it,
and the next writer starts on a fresh line so the torn fragment never swallows a record.

Never appended through a link a backup shares (`cp -al`): before each record, under the
flock, the writer looks at the file it holds; shared, it is copied to a new inode that
takes the name, and `link-broken` is the first record there (links.py). A writer whose
name now names another file (someone broke the link first) opens it again.
"""

from __future__ import annotations

import _thread
import errno
import fcntl
import json
import os
import time

from runner import defaults
from runner.errors import Damaged
from runner.events import Event
from runner.files import links, untrusted

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any, Self

    from runner.files.reserve import Reserve


class Journal:
    def __init__(self, path: str | os.PathLike[str], spare: Reserve | None = None) -> None:
        self.path = os.fspath(path)
        self.spare = spare  # given up when an append finds the disk full (reserve.py)
        self._fd: int | None = None
        self._lock = _thread.allocate_lock()  # threading.Lock, without importing threading

    def append(self, event: str, **fields: object) -> dict[str, object]:
        if "t" in fields:
            raise TypeError("journal records carry their own 't'")
        record = {"event": event, "t": time.time(), **fields}
        # json.dumps escapes newlines inside strings, so a record is always one line.
        line = (json.dumps(record, default=str) + "\n").encode("utf-8")
        with self._lock:
            fd = self._locked()
            from runner.files import reserve  # a writer's (a stopper that only reads never loads it)

            try:
                broken = links.shared(fd)
                if broken:
                    # A backup shares the file: the run moves on to a copy of its own
                    # (locked before anyone can see it), and says so there first.
                    old, fd = (
                        fd,
                        reserve.retrying(lambda: links.break_link(self.path, fd, lock=True), self.spare, self.path),
                    )
                    self._fd = fd
                    os.close(old)  # its flock goes with it: a waiter there opens the name again
                    said = {"event": Event.LINK_BROKEN, "t": time.time(), "file": self.path, "links": broken}
                    line = (json.dumps(said) + "\n").encode("utf-8") + line
                if _ends_torn(fd):
                    line = b"\n" + line
                _write_all(fd, line, self.spare, self.path)
                reserve.retrying(lambda: os.fsync(fd), self.spare, self.path)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        return record

    def _locked(self) -> int:
        """The journal's descriptor, flocked. Writers of other processes (a stopper)
        append too: the torn-tail check must not see another writer's record half-copied
        into the page cache (a reader can), so checks and writes are serialised by an
        flock. Once it is held, the name must still name the file held: else another
        writer broke a shared link (the old inode is the backup's now), and the name is
        opened again (a few times at most: each break is of a new file, kept)."""
        for _ in range(3):
            if self._fd is None:
                self._fd = _open_append(self.path)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            if not links.moved_on(self.path, self._fd):
                break
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
        else:
            self._fd = _open_append(self.path)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self._fd

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _write_all(fd: int, data: bytes, spare: Reserve | None = None, path: str = "") -> None:
    # A regular file takes the whole buffer in one write; the loop guards the short
    # write (a disk that fills mid-record) so that no record is silently cut: once the
    # reserve is given up, the rest of the record is written after what was.
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except OSError as exc:
            if exc.errno == errno.ENOSPC and spare is not None and spare.give_up(path, exc.strerror or ""):
                continue
            from runner.files import reserve

            raise reserve.named(exc, path) from None
        view = view[n:]


def _open_append(path: str) -> int:
    """The journal for appending: created if missing, but never through a symlink and
    never a FIFO or a device (the run directory is untrusted; see untrusted.py)."""
    try:
        return untrusted.open_regular(path, flags=os.O_RDWR | os.O_APPEND | os.O_CREAT, shared=True)
    except FileNotFoundError:
        raise Damaged(path, "a parent directory is missing") from None


def _ends_torn(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def read(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every record, in order. A torn line (a crash mid-append) is skipped, not fatal;
    so is a line nested deeper than any record the runner writes. A journal that is not
    a regular file under its cap raises Damaged."""
    try:
        data = untrusted.read_bytes(path, untrusted.JOURNAL_CAP)
    except FileNotFoundError:
        return []
    return [r for r in (parse_line(raw, path) for raw in data.split(b"\n")) if r is not None]


ATTEMPT_STARTS = (Event.RUN_START, Event.RESUME)
"""The records that open an attempt (`resume` is journaled by `runner resume` before its
engine's `run-start`)."""

_TAIL_CHUNK = 64 * 1024


def read_attempt(path: str | os.PathLike[str], budget: int | None = None) -> list[dict[str, Any]]:
    """The records of the current attempt, in order: from the last `run-start` or
    `resume` (included) to the end. Read from the end of the file backwards, so that a
    stopper's cost does not grow with the run's history (a long run's journal holds
    hundreds of thousands of records; `read` would parse them all at every stop); with
    `budget`, never more than that many bytes from the end (the attempt's last records).
    The same tolerance as `read`: a torn or too-deep line is skipped."""
    found: list[dict[str, Any]] = []
    for record in _backwards(path, budget):
        found.append(record)
        if record["event"] in ATTEMPT_STARTS:
            break
    return found[::-1]


def stop_recorded(path: str | os.PathLike[str], budget: int = defaults.STOP_JOURNAL_TAIL_BYTES) -> bool:
    """Whether the current attempt's `run-stop` is journaled: read back from the end, to
    the attempt's opening record, and never more than `budget` bytes, so that a stopper
    reads the same at a 1 GB journal as at a fresh one and a journal past its cap never
    hides a recorded stop. The run-stop is the engine's last record (just after `stopped`
    in the state), so only what a stopper appends after it can push it out of the budget;
    beyond the budget, not found: a stopper then records the stop again rather than miss it."""
    for record in _backwards(path, budget):
        if record["event"] == Event.RUN_STOP:
            return True
        if record["event"] in ATTEMPT_STARTS:
            return False
    return False


def attempt_stop(path: str | os.PathLike[str], budget: int) -> dict[str, Any] | None:
    """The current attempt's `run-stop` record, read back from the journal's end (at
    most `budget` bytes), or None: what the dashboard says a finished run's stop was
    without folding its journal (its last record, most often)."""
    for record in _backwards(path, budget):
        if record["event"] == Event.RUN_STOP:
            return record
        if record["event"] in ATTEMPT_STARTS:
            return None
    return None


def pause_held(path: str | os.PathLike[str], budget: int) -> bool:
    """Whether the engine holds at a PAUSE now: its last `paused` comes after any
    `unpaused` of the current attempt, read back from the journal's end (at most `budget`
    bytes; a held engine appends nothing after its `paused`, so it is the last record)."""
    for record in _backwards(path, budget):
        if record["event"] == Event.PAUSED:
            return True
        if record["event"] == Event.UNPAUSED or record["event"] in ATTEMPT_STARTS:
            return False
    return False


def _backwards(path: str | os.PathLike[str], budget: int | None) -> Iterator[dict[str, Any]]:
    """The records from the end of the journal backwards; at most `budget` bytes read
    from its end (None: all of it, under its cap)."""
    try:
        fd = untrusted.open_regular(path)
    except FileNotFoundError:
        return
    try:
        pos = os.fstat(fd).st_size
        if budget is None and pos > untrusted.JOURNAL_CAP:
            raise Damaged(path, f"larger than its cap of {untrusted.JOURNAL_CAP} bytes")
        floor = 0 if budget is None else max(0, pos - budget)  # ablate: journal-tail-bound
        head = b""  # the first, maybe partial, line of what was read so far
        while pos > floor:
            n = min(_TAIL_CHUNK, pos - floor)
            pos -= n
            try:
                lines = (os.pread(fd, n, pos) + head).split(b"\n")
            except OSError as exc:
                raise Damaged(path, f"cannot read ({exc.strerror or exc})") from None
            head = lines.pop(0) if pos > 0 else b""
            for raw in reversed(lines):
                record = parse_line(raw, path)
                if record is not None:
                    yield record
    finally:
        os.close(fd)


def parse_line(raw: bytes, path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """One journal line as its record, or None: blank, torn by a crash mid-append, nested
    too deep, or not a record (an object with a string `event`). Every reader of the
    journal (read, the backwards tail, follow.JournalTail, the dashboard) parses lines here."""
    if not raw.strip():
        return None
    try:
        record = untrusted.parse_json(raw, path)
    except Damaged:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("event"), str) else None


def events(path: str | os.PathLike[str], name: str) -> list[dict[str, Any]]:
    return [r for r in read(path) if r["event"] == name]
