"""Atomic file writes: a reader (or a SIGKILL at any moment) sees the old file or the
new one, never a torn mix.

The temp file lives in the target's own directory, because os.replace is atomic only
within one filesystem. The directory is fsynced after the replace so the rename itself
survives a power loss, not only the bytes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable

from runner.files import dirfd

_before_replace: Callable[[str, str], object] | None = None
"""Test seam: if set, called as `_before_replace(tmp_path, final_path)` after the temp
file is written and fsynced, just before os.replace. A test raises from it to inject a
crash deterministically between the two steps."""


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make a rename or a new name in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_file(directory: str, prefix: str, *, dir_fd: int | None = None) -> tuple[int, str]:
    """A new file of our own in `directory` (or in `dir_fd`, `directory` then unused),
    named `<prefix><random>.tmp`: tempfile's mkstemp, without the import of tempfile,
    random and hashlib that every stopper would pay at start-up. O_EXCL|O_NOFOLLOW: never
    an existing file, never a link. Returns the name joined to `directory`, or the bare
    name when `dir_fd` is given."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        base = f"{prefix}{os.urandom(6).hex()}.tmp"
        name = base if dir_fd is not None else os.path.join(directory, base)
        try:
            return os.open(name, flags, 0o600, dir_fd=dir_fd), name
        except FileExistsError:
            continue
    raise FileExistsError(f"{directory}: no free temporary name for {prefix!r}")


def write_synced(dfd: int, fd: int, data: bytes | Iterable[bytes], *, sync: bool = True) -> int:
    """`data` (bytes, or chunks of them) into the new file `fd` (made in the directory
    `dfd`), given to the directory's owner, flushed and fsync'ed (unless not `sync`);
    closes `fd`. What every durable write of the runner does before it publishes the file
    (a rename, a link). Returns the bytes written."""
    dirfd.own(dfd, fd)
    written = 0
    with os.fdopen(fd, "wb") as f:
        for chunk in (data,) if isinstance(data, bytes) else data:
            written += f.write(chunk)
        f.flush()
        if sync:
            os.fsync(f.fileno())
    return written


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, durable: bool = True) -> None:
    """Temp file, fsync, replace, fsync the directory: all relative to one descriptor of
    the target's directory (dirfd.parent: below a pinned run directory no component is
    followed if it is a link), so the temp file and the rename never leave it. Not
    `durable`: the same, atomic (whole or absent to every reader), without the two fsyncs
    (for a file that lives only as long as the processes that read it: a crash of the
    machine ends them too)."""
    atomic_write_chunks(path, (data,), durable=durable)


def atomic_write_chunks(path: str | os.PathLike[str], data: Iterable[bytes], *, durable: bool = True) -> int:
    """atomic_write_bytes of the chunks' concatenation, written as they come (a large
    file is never held whole in memory). Returns its size."""
    path = os.fspath(path)
    dfd, name = dirfd.parent(path, create=True)
    where = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = temp_file(where, "." + name + ".", dir_fd=dfd)  # ablate: atomic-write
        try:
            size = write_synced(dfd, fd, data, sync=durable)
            if _before_replace is not None:
                _before_replace(os.path.join(os.path.dirname(path), tmp), path)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            # A failed or interrupted write leaves no temp litter behind; the old file stays.
            try:
                os.unlink(tmp, dir_fd=dfd)
            except FileNotFoundError:
                pass
            raise
        if durable:
            os.fsync(dfd)
    finally:
        os.close(dfd)
    return size


def atomic_write_text(path: str | os.PathLike[str], text: str, *, durable: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), durable=durable)


def atomic_write_json(path: str | os.PathLike[str], obj: object, *, durable: bool = True) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n", durable=durable)
