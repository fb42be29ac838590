"""The engine's reserve: a preallocated file in the run directory that the engine gives
up when a write fails for want of space (ENOSPC), so that it can still record how the
run ended on a full disk: its final state, `run-stop`, the cause. Databases keep such a
reserve for the same reason.

Created O_EXCL|O_NOFOLLOW (never an existing file, never through a link), of
`defaults.RESERVE_BYTES`, and removed by the engine at its exit. An engine killed
(SIGKILL) leaves its reserve behind: the stopper that records the stop for it
(`Reserve.leftover`) gives that one up in turn, once the engine is proven dead.

Giving up frees the blocks at once (ftruncate, then unlink), whatever else still has the
file open. A write is retried once after a give-up (`retrying`); a second failure is
the caller's, with the file it was writing named.
"""

from __future__ import annotations

import errno
import os
import stat

from runner import defaults
from runner.errors import Damaged
from runner.files import dirfd, links

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    T = TypeVar("T")

NAME = "reserve"


class Reserve:
    """Space held for the last records. `on_give_up(file, error)` is told once, after
    the space is freed (the engine stops the run: the disk is full)."""

    __slots__ = ("path", "_fd", "given_up", "on_give_up")

    def __init__(self, path: str | os.PathLike[str], fd: int | None = None) -> None:
        self.path = os.fspath(path)
        self._fd = fd
        self.given_up: tuple[str, str] | None = None
        self.on_give_up: Callable[[str, str], object] | None = None

    @classmethod
    def create(cls, directory: str | os.PathLike[str], size: int = defaults.RESERVE_BYTES) -> Reserve:
        """A new reserve of `size` bytes in `directory`. One left by a killed engine of
        this run is replaced (unlinked by name: a link there is removed, never followed).
        OSError (ENOSPC: the disk is already full) is the caller's."""
        path = os.path.join(directory, NAME)
        # Relative to the run directory's descriptor, as every write of the runner's
        # (dirfd.py): a moved or replaced path is never followed.
        dfd, name = dirfd.parent(path)
        try:
            try:
                os.unlink(name, dir_fd=dfd)
            except FileNotFoundError:
                pass
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(name, flags, 0o600, dir_fd=dfd)
            try:
                dirfd.own(dfd, fd)
                try:
                    os.posix_fallocate(fd, 0, size)
                except OSError as exc:
                    if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                        raise
                    _fill(fd, size)  # a file system without fallocate: real blocks all the same
                os.fsync(fd)
            except BaseException:
                os.close(fd)
                os.unlink(name, dir_fd=dfd)
                raise
        finally:
            os.close(dfd)
        return cls(path, fd)

    @classmethod
    def leftover(cls, directory: str | os.PathLike[str]) -> Reserve:
        """The reserve a dead engine left in `directory` (if any): for the stopper that
        records the stop in its place."""
        return cls(os.path.join(directory, NAME))

    def give_up(self, writing: str = "", error: str = "") -> bool:
        """Free the reserved space; True when this call freed some (a retry may then
        succeed), False when there was none left to free."""
        if self.given_up is not None:
            return False
        freed = False
        if self._fd is not None:
            try:
                # Never truncated where a backup shares it (`cp -al` of the live run): its
                # copy keeps its bytes, and the space is the backup's to free (links.py).
                if not links.shared(self._fd):
                    os.ftruncate(self._fd, 0)
                    freed = True
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None
        try:
            dfd, name = dirfd.parent(self.path)
            try:
                st = os.lstat(name, dir_fd=dfd)
                if stat.S_ISREG(st.st_mode):  # a dead engine's: only a regular file is ours to free
                    freed = freed or st.st_size > 0
                    os.unlink(name, dir_fd=dfd)
            finally:
                os.close(dfd)
        except (OSError, Damaged):
            pass
        self.given_up = (writing, error)
        if freed and self.on_give_up is not None:
            self.on_give_up(writing, error)
        return freed

    def close(self) -> None:
        """The engine's exit: the reserve is no longer needed (nothing freed is said)."""
        self.on_give_up = None
        self.give_up()


def _fill(fd: int, size: int) -> None:
    block = b"\0" * 65536
    left = size
    while left > 0:
        left -= os.write(fd, block[: min(left, len(block))])


def named(exc: OSError, path: str | os.PathLike[str]) -> OSError:
    """`exc`, naming the file that was being written when it has no file name of its own
    (a failed write(2) or fsync(2) names none)."""
    if exc.filename is None:
        return type(exc)(exc.errno, exc.strerror, os.fspath(path))
    return exc


def retrying(write: Callable[[], T], spare: Reserve | None, path: str | os.PathLike[str]) -> T:
    """`write()`; if it fails for want of space and `spare` frees some, once more. An
    OSError that escapes names `path`."""
    try:
        return write()
    except OSError as exc:
        freed = exc.errno == errno.ENOSPC and spare is not None and spare.give_up(os.fspath(path), exc.strerror or "")
        if not freed:
            raise named(exc, path) from None
    try:
        return write()
    except OSError as exc:
        raise named(exc, path) from None
