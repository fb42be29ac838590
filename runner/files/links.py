"""Hard links: the run never writes into a file a backup shares, and a backup never
blocks the run.

`cp -al RUN BACKUP` (rsnapshot's way, and any hard-link backup) gives every file of the
run a second name in the backup: the same inode, the same bytes. The rule, per file:

- a file the runner replaces (temp file and rename: state.json's full save, engine.json,
  children/, stop-request.json, dir-identity; atomic.py) gets a new inode at each write:
  the backup keeps the old one, untouched. Nothing to do.
- a file the runner writes in place (journal.jsonl and engine.log, appended; the
  engine's pid in `lock`; a command's output/ file while it runs) is looked at before
  each write batch (one fstat of the descriptor it holds: `shared`). Shared, it is first
  copied to a new inode of the run's own, which takes the name (`break_link`), and the
  write goes there; the backup's inode is never written. The break is said in the
  journal (`link-broken`: the file, its links). state.json's appended transitions need
  no break: its append path refuses a shared file and saves it whole, by rename.
- a file the runner only locks (stop-request.lock, and `lock` until the engine or a
  recording stopper writes its pid) is locked where it is: a lock writes nothing, and
  the backup is a copy, which no command acts on.

Copies are made only of a file of the run directory's owner: a hard link there to
anyone else's file is damage (named, never written, never copied into the run: its
bytes would be handed to the directory's owner). The engine's reserve, shared, is not
truncated at its release (reserve.py).

A writer that holds a descriptor (the engine's journal) checks, under the journal's
flock, that its name still names the inode it holds (`moved_on`): another writer (a
stopper, `runner resume`) may have broken the link first, and then the old inode is the
backup's alone.
"""

from __future__ import annotations

import fcntl
import os
import stat

from runner.errors import Damaged
from runner.files import dirfd
from runner.files.atomic import temp_file

_CHUNK = 1 << 20


def shared(fd: int) -> int:
    """The link count of the file `fd` holds when other names share it (more than one),
    else 0."""
    links = os.fstat(fd).st_nlink
    return links if links > 1 else 0  # ablate: link-break


def moved_on(path: str | os.PathLike[str], fd: int) -> bool:
    """True when `path` now names another regular file than the one `fd` holds (a writer
    broke a shared link, and the copy took the name): the holder must open `path` again.
    False when it names the same file; or nothing (a removed run directory: its files
    live on in the descriptors that hold them, and the engine keeps writing there); or
    something that is no regular file (a FIFO swapped in: the holder keeps writing where
    it was, and the readers name the damage)."""
    at = dirfd.stat_at(path)
    if at is None or not stat.S_ISREG(at.st_mode):
        return False
    st = os.fstat(fd)
    return (at.st_dev, at.st_ino) != (st.st_dev, st.st_ino)


def break_link(path: str | os.PathLike[str], fd: int, *, lock: bool = False) -> int:
    """A descriptor on a copy of the file `fd` holds (named `path`, below a pinned run
    directory), which now takes the name `path`: every other name keeps the old inode,
    untouched. The copy is 0600, the directory owner's, fsynced before the rename; the
    new descriptor is at its end, O_APPEND when `fd` was; with `lock`, it holds an
    exclusive flock taken before the rename (no one else can have seen it yet). The
    caller closes `fd`. Damaged when the shared file is not the directory owner's."""
    st = os.fstat(fd)
    dfd, name = dirfd.parent(path)
    try:
        owner = os.fstat(dfd).st_uid
        if st.st_uid != owner:
            raise Damaged(
                path,
                f"has {st.st_nlink} hard links and is not the run directory owner's file"
                " (never written through, never copied)",
            )
        new, tmp = temp_file(os.path.dirname(os.fspath(path)), "." + name + ".", dir_fd=dfd)
        # A write-only descriptor (engine.log, the engine's stderr) is read through a new
        # one on the very same file (its /proc/self/fd link), never through the name.
        writeonly = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY
        src = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC) if writeonly else fd
        try:
            dirfd.own(dfd, new)
            at = 0
            while chunk := os.pread(src, _CHUNK, at):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(new, view) :]
                at += len(chunk)
            os.fsync(new)
            if lock:
                fcntl.flock(new, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            os.close(new)
            try:
                os.unlink(tmp, dir_fd=dfd)
            except FileNotFoundError:
                pass
            raise
        finally:
            if src != fd:
                os.close(src)
        os.fsync(dfd)
    finally:
        os.close(dfd)
    if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND:
        fcntl.fcntl(new, fcntl.F_SETFL, fcntl.fcntl(new, fcntl.F_GETFL) | os.O_APPEND)
    return new
