"""Reading files of the run directory, which is untrusted input.

Anything with write access to a run directory can put a FIFO, a directory, a symlink
loop, a link to /dev/zero, binary bytes or JSON nested 100,000 deep where the runner
expects one of its own files. Every read of a run-directory file goes through here:

- opened with O_NOFOLLOW (a symlink is refused, never followed) and O_NONBLOCK (a FIFO
  is refused at once instead of hanging the reader);
- it must be a regular file, no larger than its cap;
- text must be UTF-8; JSON is parsed only after a depth check (the C parser would
  raise RecursionError, or worse, deep inside).

A failure is `Damaged`: one line naming the file and what is wrong with it. Callers
that stop a run treat it as "this file says nothing" and stop the run anyway.
"""

from __future__ import annotations

import errno
import json
import os
import stat

from runner.errors import DISK_ERRNOS, Damaged, Unwritable
from runner.files import dirfd

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

SMALL_CAP = 64 * 1024
"""Identity files, run-id, cgroup, stop requests: a few hundred bytes when sound."""
STATE_CAP = 64 * 1024 * 1024
"""state.json: grows with the number of items (a full state, and at most about as much
again of transitions appended after it: state.py)."""
JOURNAL_CAP = 256 * 1024 * 1024
"""journal.jsonl: grows with the run; the cap of a whole read (journal.read, read_attempt:
tests and tools). The runner's own commands read a bounded tail of it and have no cap:
a stopper its end for the run-stop, a status its last MiB (journal.stop_recorded,
overview.fold_journal)."""
MAX_DEPTH = 32
"""The runner's own JSON nests at most 3 deep; 32 leaves room and refuses bombs."""


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symlink"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(
    path: str | os.PathLike[str],
    *,
    dir_fd: int | None = None,
    flags: int = os.O_RDONLY,
    follow: bool = False,
    shared: bool = False,
    shown: str | os.PathLike[str] | None = None,
) -> int:
    """A descriptor on `path` if it is a regular file (no link followed, never blocks).
    FileNotFoundError propagates: a missing file is the caller's call, not damage.
    `shown`: what a message calls a file opened relative to `dir_fd` (its full path).

    Below a pinned run directory (dirfd.py) the file is opened relative to its
    descriptor, no component followed if it is a link. A file opened for writing must
    have one link only (a hard link planted to another file is damage) and, created by
    root in another user's directory, is given to that user (dirfd.own). `shared`: the
    caller takes a file with other links as it is (never given to anyone), and breaks
    the link before it writes (links.py) or only locks it."""
    return _open_stat(path, dir_fd, flags, follow, shared, shown)[0]


def _open_stat(
    path: str | os.PathLike[str],
    dir_fd: int | None,
    flags: int,
    follow: bool,
    shared: bool,
    shown: str | os.PathLike[str] | None,
) -> tuple[int, os.stat_result]:
    """open_regular's descriptor, with what fstat said of it (a reader needs its size)."""
    if dir_fd is not None or follow:
        return _open_regular(path, dir_fd, flags, follow, shown, shared=shared)
    try:
        parent, name = dirfd.parent(path, create=bool(flags & os.O_CREAT))
    except (FileNotFoundError, Damaged):
        raise
    except OSError as exc:
        if exc.errno in DISK_ERRNOS:  # an I/O error: the file system's, not the directory's
            raise Unwritable.of(path, exc, "open its directory") from None
        raise Damaged(path, f"cannot open its directory ({exc.strerror or exc})") from None
    try:
        fd, st = _open_regular(name, parent, flags, follow, shown=path, shared=shared)
        if flags & (os.O_WRONLY | os.O_RDWR) and st.st_nlink <= 1:
            dirfd.own(parent, fd)
        return fd, st
    finally:
        os.close(parent)


def _open_regular(
    path: str | os.PathLike[str],
    dir_fd: int | None,
    flags: int,
    follow: bool,
    shown: str | os.PathLike[str] | None = None,
    *,
    shared: bool = False,
) -> tuple[int, os.stat_result]:
    shown = path if shown is None else shown
    try:
        nofollow = 0 if follow else os.O_NOFOLLOW
        fd = os.open(path, flags | nofollow | os.O_NONBLOCK | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Damaged(shown, "a symlink (never followed)") from None
        if exc.errno in (errno.ENXIO, errno.EISDIR):
            raise Damaged(shown, "not a regular file") from None
        if exc.errno == errno.ENOTDIR:
            raise Damaged(shown, "a parent is not a directory") from None
        if exc.errno in DISK_ERRNOS:  # the file system refused a write, or failed (EIO): not damage
            raise Unwritable.of(shown, exc, "open") from None  # ablate: io-error-is-not-damage
        raise Damaged(shown, f"cannot open ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        if exc.errno in DISK_ERRNOS:
            raise Unwritable.of(shown, exc, "stat") from None
        raise Damaged(shown, f"cannot stat ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Damaged(shown, _kind(st.st_mode))
    if flags & (os.O_WRONLY | os.O_RDWR) and st.st_nlink > 1 and not shared:
        os.close(fd)
        raise Damaged(shown, f"has {st.st_nlink} hard links (never written through)")
    return fd, st


def read_bytes(
    path: str | os.PathLike[str],
    cap: int = SMALL_CAP,
    *,
    dir_fd: int | None = None,
    follow: bool = False,
    shown: str | os.PathLike[str] | None = None,
) -> bytes:
    """`follow`: a path the user named (the spec to run) may be a link; a run-directory
    file never is. `shown`: what a message calls a file read relative to `dir_fd`."""
    shown = path if shown is None else shown
    fd, st = _open_stat(path, dir_fd, os.O_RDONLY, follow, False, shown)
    try:
        size = st.st_size
        if size > cap:
            raise Damaged(shown, f"larger than its cap of {cap} bytes")
        # The first read asks for the size fstat gave and a byte more: a file that did not
        # grow is read whole in one call, and its end is seen in it (all fstat saw, and
        # less than asked). Reads of a fixed MiB each allocated and freed a MiB twice per
        # state.json, a tenth of a 500-run `list`.
        want = size + 1
        chunks, total = [], 0
        while True:
            try:
                chunk = os.read(fd, min(want, cap + 1 - total))
            except OSError as exc:
                if exc.errno in DISK_ERRNOS:
                    raise Unwritable.of(shown, exc, "read") from None
                raise Damaged(shown, f"cannot read ({exc.strerror or exc})") from None
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:  # grew while we read it
                raise Damaged(shown, f"larger than its cap of {cap} bytes")
            if total == size and len(chunk) < want:
                break
            want = _GROWN_CHUNK
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    finally:
        os.close(fd)


_GROWN_CHUNK = 64 * 1024
"""What each read after the first asks for: its end, or what the file grew by meanwhile."""


def read_text(
    path: str | os.PathLike[str],
    cap: int = SMALL_CAP,
    *,
    dir_fd: int | None = None,
    shown: str | os.PathLike[str] | None = None,
) -> str:
    raw = read_bytes(path, cap, dir_fd=dir_fd, shown=shown)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Damaged(path if shown is None else shown, f"not UTF-8 text (byte {exc.start})") from None


_decoders: dict[Any, json.JSONDecoder] = {}
"""A decoder per object hook, made once (json.loads makes one at every call)."""
_KEEP = b'"[]{}'
_DROP = bytes(b for b in range(256) if b not in _KEEP)
_DEPTH_WINDOW = 256 * 1024


def depth(raw: bytes) -> int:
    """How deep the brackets of a JSON text nest (strings skipped). A window at a time,
    each reduced in C to its quotes and brackets (escaped backslashes and quotes taken
    out first), so that a 6 MB state of 50,000 items costs a few milliseconds and a few
    hundred KB, not the 80 MB a whole-text regex substitution held."""
    level = deepest = 0
    inside = False
    start, size = 0, len(raw)
    while start < size:
        end = min(size, start + _DEPTH_WINDOW)
        while end < size and raw[end - 1] == 0x5C:
            end += 1  # never cut an escape in two: a window ends on a byte that is not a backslash
        part = raw[start:end].replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _DROP)
        for i, piece in enumerate(part.split(b'"')):
            if i:
                inside = not inside
            if inside:
                continue
            for byte in piece:
                if byte in (0x5B, 0x7B):
                    level += 1
                    deepest = max(deepest, level)
                else:
                    level -= 1
        start = end
    return deepest


def parse_json(
    raw: bytes,
    source: str | os.PathLike[str],
    max_depth: int = MAX_DEPTH,
    object_hook: Callable[[dict[str, Any]], Any] | None = None,
) -> Any:
    """JSON from bytes read off disk: depth-checked, strict UTF-8, one-line errors.
    `object_hook`: json.loads's, each object as the parser completes it."""
    # No text nests deeper than it has opening brackets: counting them (in C) spares
    # the regex for every journal line a status folds, where it was most of the cost.
    if raw.count(b"[") + raw.count(b"{") > max_depth and depth(raw) > max_depth:
        raise Damaged(source, f"JSON nested deeper than {max_depth} levels")
    try:
        text = raw.decode("utf-8")
        if object_hook is None:
            return json.loads(text)
        decoder = _decoders.get(object_hook)
        if decoder is None:
            decoder = _decoders[object_hook] = json.JSONDecoder(object_hook=object_hook)
        return decoder.decode(text)
    except UnicodeDecodeError as exc:
        raise Damaged(source, f"not UTF-8 text (byte {exc.start})") from None
    except (ValueError, RecursionError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise Damaged(source, f"not valid JSON ({first[:120]})") from None


def read_json(
    path: str | os.PathLike[str], cap: int = SMALL_CAP, *, dir_fd: int | None = None, max_depth: int = MAX_DEPTH
) -> Any:
    return parse_json(read_bytes(path, cap, dir_fd=dir_fd), path, max_depth)


def list_dir(path: str | os.PathLike[str]) -> list[str]:
    """Names in a run-directory subdirectory (children/), which must be a real
    directory, not a link to one. Missing: an empty list."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return []
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            raise Damaged(path, "not a directory (or a symlink, never followed)") from None
        if exc.errno in DISK_ERRNOS:
            raise Unwritable.of(path, exc, "open") from None
        raise Damaged(path, f"cannot open ({exc.strerror or exc})") from None
    try:
        return sorted(os.listdir(fd))
    finally:
        os.close(fd)
