"""Run directories pinned by a directory descriptor: every file the runner opens in a
run directory is opened relative to that descriptor, never through the path again.

A command (run, resume, stop) or the engine pins the run directory it acts on once,
when it resolves it (`pin`). From then on a path under it (`rd.state`, `rd.output / x`)
is only a name: `parent` opens each component below the pinned directory with
O_NOFOLLOW|O_DIRECTORY, relative to the descriptor, and the callers open the last
component with O_NOFOLLOW (and O_CREAT|O_EXCL for a file that must be new). So:

- no write follows a link, at any depth below the run directory: a planted
  `output -> /root` or `output/1-0001-0-session.log -> /root/precious` is damage, named
  on one line, and nothing outside the directory is touched;
- a run directory moved with `mv` keeps working in the engine that pinned it (the
  descriptor follows the directory; the old path is only a spelling);
- a removed run directory is seen (`gone`: its link count is 0), not written around;
  so is a half-removed one (its `spec.toml` gone while the directory stays: an `rm -rf`
  whose last rmdir failed, "Directory not empty", because a file was made in it while
  it emptied the directory). An engine that saw its directory go `seal`s the pin: from
  then on it makes no file there (a file made while `rm -rf` empties a directory makes
  the rm fail), as in a removed directory, where no file can be made.

A new file is owned by the directory's owner even when root creates it (`own`): a stop by
an administrator must leave the owner a directory they can keep using.

Paths under no pin (a test's own files, a directory not yet created) are opened as
they are, the last component still without following a link.
"""

from __future__ import annotations

import errno
import os

from runner.errors import Damaged

_pins: dict[str, int] = {}
"""The absolute path a run directory was named by, when pinned -> its descriptor."""
_sealed: set[int] = set()
"""Pinned descriptors of directories that went away (`seal`): opened below as removed."""

SPEC_NAME = "spec.toml"
"""The file that makes a directory a run (RunDir.exists, run_entries): written once, by
`runner run`, and never removed by the runner; a directory that lost it holds no run."""

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def pin(path: str | os.PathLike[str]) -> int:
    """Pin the run directory at `path` (the user named it: a link to it is followed,
    once). Idempotent. FileNotFoundError propagates."""
    key = os.path.abspath(path)
    fd = _pins.get(key)
    if fd is not None:
        # A long-lived process (the dashboard, a test) may meet a new directory under a
        # name it pinned before: the pin follows the path's directory of today. A path
        # that names nothing now keeps its pin (the engine's moved or removed directory).
        try:
            now, held = os.stat(key), os.fstat(fd)
        except OSError:
            return fd
        if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            return fd
        unpin(key)
    fd = _pins[key] = os.open(key, DIR_FLAGS)
    return fd


def unpin(path: str | os.PathLike[str]) -> None:
    fd = _pins.pop(os.path.abspath(path), None)
    if fd is not None:
        _sealed.discard(fd)
        os.close(fd)


def pinned(path: str | os.PathLike[str]) -> int | None:
    return _pins.get(os.path.abspath(path))


def gone(path: str | os.PathLike[str]) -> bool:
    """The pinned run directory went away: removed (its link count fell to 0), or half
    removed (it no longer holds its `spec.toml`: an `rm -rf` that emptied it and whose
    last rmdir failed because a file was made meanwhile; nothing names the run there any
    more, and no command finds it by its directory). False when it is not pinned, or was
    only moved."""
    fd = pinned(path)
    if fd is None:
        return False
    if fd in _sealed:
        return True
    try:
        if os.fstat(fd).st_nlink == 0:
            return True
    except OSError:
        return True
    try:
        os.stat(SPEC_NAME, dir_fd=fd, follow_symlinks=False)  # ablate: half-removed-dir-is-gone
    except FileNotFoundError:
        return True
    except OSError:
        return False  # not said: what cannot be looked at is not called gone
    return False


def seal(path: str | os.PathLike[str]) -> None:
    """The pinned run directory went away (`gone`): from now on this process opens and
    makes nothing below it (FileNotFoundError, as in a removed directory). A half-removed
    directory may be one `rm -rf` is still emptying: a file made there now (a record, a
    lock) would make its last rmdir fail and leave the directory behind."""
    fd = pinned(path)
    if fd is not None:
        _sealed.add(fd)


def _anchor(path: str) -> tuple[int, list[str]] | None:
    """The pinned directory `path` lies under, and the components below it."""
    if not _pins:
        return None  # a reading command pins nothing: no walk up the path (list, status)
    rest: list[str] = []
    head = path
    while True:
        fd = _pins.get(head)
        if fd is not None:
            return fd, rest[::-1]
        head, tail = os.path.split(head)
        if not tail:
            return None
        rest.append(tail)


def _open_sub(dir_fd: int, name: str, path: str | os.PathLike[str], create: bool) -> int:
    if create:
        try:
            os.mkdir(name, 0o700, dir_fd=dir_fd)
            _own_new(dir_fd, name)
        except FileExistsError:
            pass
    try:
        return os.open(name, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Damaged(path, f"{name}/ is not a directory (or is a symlink, never followed)") from None
        raise


def parent(path: str | os.PathLike[str], *, create: bool = False) -> tuple[int, str]:
    """(a new descriptor of the directory holding `path`, its last component). Below a
    pinned run directory no component is a link (Damaged if one is); `create` makes the
    missing subdirectories (0700). Elsewhere the parent is opened by path. The caller
    closes the descriptor."""
    full = os.path.abspath(path)
    found = _anchor(full)
    if found is None:
        head, name = os.path.split(full)
        if create:
            os.makedirs(head, 0o700, exist_ok=True)
        return os.open(head, DIR_FLAGS), name
    fd, parts = found
    if fd in _sealed:
        raise FileNotFoundError(errno.ENOENT, "the run directory went away (removed or emptied)", full)
    if not parts:
        raise Damaged(full, "is the run directory itself")
    cur = os.dup(fd)
    try:
        for part in parts[:-1]:
            nxt = _open_sub(cur, part, full, create)
            os.close(cur)
            cur = nxt
    except BaseException:
        os.close(cur)
        raise
    return cur, parts[-1]


def mkdir(path: str | os.PathLike[str]) -> None:
    """Make a subdirectory of a run directory (0700, owned by the directory's owner);
    an existing real directory is fine, a link there is Damaged."""
    dfd, name = parent(path, create=True)
    try:
        os.close(_open_sub(dfd, name, path, True))
    finally:
        os.close(dfd)


def create_new(path: str | os.PathLike[str], mode: int = 0o600) -> int:
    """A new file at `path`, for writing: O_CREAT|O_EXCL|O_NOFOLLOW relative to its
    directory, owned by the run directory's owner. Anything already there (a link, a
    file someone put in the runner's way) is Damaged."""
    dfd, name = parent(path, create=True)
    try:
        try:
            fd = os.open(name, _NEW_FILE, mode, dir_fd=dfd)  # ablate: nofollow-writes
        except FileExistsError:
            raise Damaged(path, "already exists (the runner writes only new files here)") from None
        _own_fd(dfd, fd)
        return fd
    finally:
        os.close(dfd)


def own(dir_fd: int, fd: int) -> None:
    """Give a file this process just created to the owner of its directory, when that is
    another user and this process may (root): an administrator's stop leaves nothing
    the owner cannot read, replace or remove."""
    _own_fd(dir_fd, fd)


def _own_fd(dir_fd: int, fd: int) -> None:
    if os.geteuid() != 0:
        return
    st = os.fstat(dir_fd)
    if st.st_uid != 0:
        os.fchown(fd, st.st_uid, st.st_gid)


def _own_new(dir_fd: int, name: str) -> None:
    if os.geteuid() != 0:
        return
    st = os.fstat(dir_fd)
    if st.st_uid != 0:
        os.chown(name, st.st_uid, st.st_gid, dir_fd=dir_fd, follow_symlinks=False)


def stat_at(path: str | os.PathLike[str]) -> os.stat_result | None:
    """What `path` names now (lstat: no link followed); None when it names nothing. A
    file directly in a pinned run directory is looked up through the pin itself (no
    descriptor opened: a journal append asks this)."""
    full = os.path.abspath(path)
    head, name = os.path.split(full)
    fd = _pins.get(head)
    if fd is not None and fd in _sealed:
        return None
    try:
        if fd is not None:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        else:
            dfd, name = parent(full)
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            finally:
                os.close(dfd)
    except (FileNotFoundError, NotADirectoryError, Damaged):
        return None
    return st


def identity_at(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """(device, inode) of what `path` names now (stat_at), None when nothing."""
    st = stat_at(path)
    return None if st is None else (st.st_dev, st.st_ino)


def lexists(path: str | os.PathLike[str]) -> bool:
    """os.path.lexists, relative to the pinned run directory (a moved directory's files
    are still found; a link counts as there, never followed)."""
    try:
        dfd, name = parent(path)
    except (OSError, Damaged):
        return False
    try:
        os.stat(name, dir_fd=dfd, follow_symlinks=False)
        return True
    except OSError:
        return False
    finally:
        os.close(dfd)
