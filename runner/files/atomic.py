"""Atomic file writes: a reader (or a SIGKILL at any moment) sees the old file or the
new one, never a torn mix.

The temp file lives in the target's own directory, because os.replace is atomic only
within one filesystem. The directory is fsynced after the replace so the rename itself
survives a power loss, not only the bytes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

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


def temp_file(directory: str, prefix: str) -> tuple[int, str]:
    """A new file of our own in `directory`, named `<prefix><random>.tmp`: tempfile's
    mkstemp, without the import of tempfile, random and hashlib that every stopper
    would pay at start-up. O_EXCL|O_NOFOLLOW: never an existing file, never a link."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        name = os.path.join(directory, f"{prefix}{os.urandom(6).hex()}.tmp")
        try:
            return os.open(name, flags, 0o600), name
        except FileExistsError:
            continue
    raise FileExistsError(f"{directory}: no free temporary name for {prefix!r}")


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = temp_file(directory, "." + os.path.basename(path) + ".")  # ablate: atomic-write
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if _before_replace is not None:
            _before_replace(tmp, path)
        os.replace(tmp, path)
    except BaseException:
        # A failed or interrupted write leaves no temp litter behind; the old file stays.
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(directory)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: object) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")
