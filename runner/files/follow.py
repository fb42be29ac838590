"""Following files of a run that grow while it runs: the journal's new records, a
captured output's new bytes. Each poll reads only what was appended since the last one
(at most `chunk` bytes), so a watcher costs the same at the run's first record as at
its millionth, and never blocks (untrusted.open_regular: no link, no FIFO).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from runner.errors import Damaged
from runner.files import journal, untrusted

CHUNK = 1024 * 1024
"""Most bytes one poll reads; the rest waits for the next poll."""
MAX_RECORD = 64 * 1024 * 1024
"""A journal line longer than this is not a record the runner wrote (the longest, a
run-start of MAX_ITEMS long names, is a few MiB): dropped, not kept growing."""


class Tail:
    """The bytes appended to one file since the last poll."""

    def __init__(self, path: str | os.PathLike[str], chunk: int = CHUNK) -> None:
        self.path = Path(path)
        self.offset = 0
        self.chunk = chunk

    def poll(self) -> bytes:
        """New bytes (b"" when none, or no file yet). Damaged propagates."""
        try:
            fd = untrusted.open_regular(self.path)
        except FileNotFoundError:
            return b""
        try:
            size = os.fstat(fd).st_size
            if size < self.offset:  # replaced by a shorter file: start over
                self.offset = 0
            data = os.pread(fd, min(self.chunk, size - self.offset), self.offset)
        except OSError as exc:
            raise Damaged(self.path, f"cannot read ({exc.strerror or exc})") from None
        finally:
            os.close(fd)
        self.offset += len(data)
        return data


class JournalTail:
    """The journal's records appended since the last poll. A line is taken only once its
    newline is there (the engine appends a record with one write; a reader may see half
    of it); a line that is not a record (torn by a crash) is skipped, as journal.read does."""

    def __init__(self, path: str | os.PathLike[str], chunk: int = CHUNK, start: int = 0) -> None:
        """`start`: the byte to begin at; a line that begins before it is skipped whole."""
        self._tail = Tail(path, chunk)
        self._partial = b""
        self._skip_line = start > 0
        self._tail.offset = max(0, start - 1)  # from the byte before: a line starting at `start` is kept

    @property
    def offset(self) -> int:
        """Bytes of the file read so far."""
        return self._tail.offset

    def poll(self) -> list[dict[str, Any]]:
        data = self._partial + self._tail.poll()
        lines = data.split(b"\n")
        self._partial = lines.pop()
        if self._skip_line and lines:
            self._skip_line = False
            del lines[:1]
        if len(self._partial) > MAX_RECORD:
            self._partial = b""
        return [r for r in (journal.parse_line(raw, self._tail.path) for raw in lines) if r is not None]
