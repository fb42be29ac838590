"""A run directory opened once, for the commands that read many runs (`runner list`, the
dashboard's rows): each of its files is opened relative to that one descriptor, and the
directory's identity is measured on it.

The rules and the messages are RunDir's own (rundir.py, state.py, untrusted.py: no link
followed, no FIFO waited on, caps, one line naming the file); only the cost differs. Read
through paths, a 500-run `list` opened each run's directory five times and stat'ed it
twice, besides its files. The directory itself is opened without following a link (a
run is its directory: run_entries never lists a link, and one put in its place between
the listing and the read is not followed either).
"""

from __future__ import annotations

import os

from runner.errors import Damaged
from runner.files import dirfd, rundir, untrusted
from runner.files import state as state_file
from runner.files.rundir import RunDir
from runner.files.state import State


class OpenedRun:
    """`rd` opened (OSError when it cannot be: gone, not a directory, a link, no
    permission). Close it, or use it as a context manager."""

    __slots__ = ("rd", "fd", "here", "_prefix")

    def __init__(self, rd: RunDir) -> None:
        self.rd = rd
        self._prefix = f"{rd.path}/"
        self.fd = os.open(rd.path, dirfd.DIR_FLAGS | os.O_NOFOLLOW)  # ablate: opened-refuses-links
        try:
            st = os.fstat(self.fd)
        except BaseException:
            os.close(self.fd)
            raise
        self.here = f"{st.st_dev}-{st.st_ino}"
        """The directory's measured identity (RunDir.measured_identity), on what was opened."""

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> OpenedRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def path(self, name: str) -> str:
        """The file's full path, as messages name it."""
        return self._prefix + name

    def read(self, name: str, cap: int = untrusted.SMALL_CAP) -> bytes:
        return untrusted.read_bytes(name, cap, dir_fd=self.fd, shown=self._prefix + name)

    def read_text(self, name: str) -> str:
        return untrusted.read_text(name, dir_fd=self.fd, shown=self._prefix + name)

    def lstat(self, name: str) -> os.stat_result:
        return os.stat(name, dir_fd=self.fd, follow_symlinks=False)

    def run_id(self) -> str:
        """RunDir.run_id."""
        try:
            text = self.read_text("run-id")
        except FileNotFoundError:
            return self.rd.path.name
        return rundir.checked_run_id(text, self._prefix + "run-id")

    def key(self, run_id: str | None) -> str | None:
        """RunDir.key: the membership key, on the identity measured here."""
        return rundir.key_of(run_id, self.here)

    def copy_origin(self) -> str | None:
        """rundir.copy_origin: None when the directory is not a copy of a run."""
        try:
            text = self.read_text("dir-identity")
            record: tuple[str, str | None] | None = rundir.identity_record(text, self._prefix + "dir-identity")
        except FileNotFoundError:
            record = None
        except Damaged:
            return None  # damage, not a copy: the readers name it (rundir._copied)
        return rundir.origin_of_copy(self.rd, rundir.copied(record, self.here))

    def is_live(self) -> bool:
        """RunDir.is_live: a live engine holds the lock (Damaged: `lock` is not a regular file)."""
        try:
            fd = untrusted.open_regular("lock", dir_fd=self.fd, shown=self._prefix + "lock")
        except FileNotFoundError:
            return False
        return rundir.held(fd)

    def state(self) -> State | None:
        """StateStore.load_or_none: None when no state has been written yet."""
        try:
            data = self.read("state.json", untrusted.STATE_CAP)
        except FileNotFoundError:
            return None
        return state_file.from_bytes(data, self._prefix + "state.json")
