"""Live engines whose run directory is out of every command's reach: removed (`rm -rf`
of a live run), half removed (an `rm -rf` whose last rmdir failed: the directory is
there, its spec.toml gone, so no command names a run there), or unreachable (the file
system holding it lazily unmounted, `umount -l`; a file system mounted over it or over a
directory above it).

The engine stops a removed run itself (stop_controller: dirfd.gone). Should it not (hung,
or an engine of an older runner), and for an unreachable run, which the engine does not
stop (its directory still holds its records, still written, and is reached again once
mounted again or uncovered: docs/stop-latency.md), no file says the run exists any more:
`runner list` and `runner stop --all` find it by the kernel's word instead. An engine is
a process running `-m runner _engine DIR`, tagged RUNNER_RUN_ID; its run directory is
the directory descriptor it pinned (dirfd.py), the one whose identity its tag names. It
is removed when that directory's link count is 0 (/proc/PID/fd shows it "(deleted)"),
unreachable when the path the kernel gives for it (/proc/PID/fd/N) names another
directory or nothing (a lazily unmounted file system's path is relative to its own root;
a covered one's path leads into what covers it). A moved directory is reached at its new
path: not vanished. Only engines whose DIR was under the base directory asked about are
returned, and only those this user may inspect (its own, or any as root) in this mount
namespace (another namespace's paths mean nothing here).
"""

from __future__ import annotations

import os
import re
import stat

from runner import ident
from runner.ident import Identity
from runner.proc import identity, membership, signals

_ENGINE_ARGV = (b"-m", b"runner", b"_engine")
_IDENTITY = re.compile(r"\d+-\d+")
_SPEC = "spec.toml"  # what makes a directory a run (files/dirfd.SPEC_NAME; proc may not import files)


REMOVED = "removed"
UNREACHABLE = "unreachable"
EMPTIED = "emptied"
"""Half removed: the directory is there and reached, but holds no spec.toml any more (an
`rm -rf` whose last rmdir failed because a file was made in it meanwhile)."""


class Vanished:
    """A live engine whose run directory is gone: `key` is its tag's value (the run's
    membership key, "<run id>.<dev>-<ino>", which names its cgroup too), `run_id` the
    id people know the run by, `why` REMOVED, UNREACHABLE or EMPTIED."""

    __slots__ = ("engine", "key", "run_id", "run_dir", "why")

    def __init__(self, engine: Identity, key: str, run_dir: str, why: str = REMOVED) -> None:
        self.engine, self.key, self.run_dir, self.why = engine, key, run_dir, why
        run_id, dot, identity_part = key.rpartition(".")
        self.run_id = run_id if dot and _IDENTITY.fullmatch(identity_part) else key


def _engine_dir(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return None
    for i in range(len(argv) - 3):
        if tuple(argv[i : i + 3]) == _ENGINE_ARGV:
            return os.fsdecode(argv[i + 3])
    return None


def _same_mount_namespace(pid: int) -> bool:
    try:
        return os.stat(f"/proc/{pid}/ns/mnt").st_ino == os.stat("/proc/self/ns/mnt").st_ino
    except OSError:
        return False


def _reachable(pid: int, fd: str, st: os.stat_result) -> bool:
    """Whether the directory engine `pid` holds open as `fd` (stat'ed as `st`) is the one
    the path the kernel gives for it names. A path this user may not search says nothing
    (reachable, as far as anyone here can tell)."""
    try:
        path = os.readlink(f"/proc/{pid}/fd/{fd}")
        at = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True
    return (at.st_dev, at.st_ino) == (st.st_dev, st.st_ino)


def gone_why(pid: int, key: str | None) -> str | None:
    """REMOVED when the directory engine `pid` pinned, the one its tag `key` names, is
    removed (link count 0); judged by that one alone: an engine stopped (SIGSTOP, a
    hang) while it held a subdirectory open a moment (its children/, its archive/),
    which an `rm -rf` removed, is not a removed run when its own directory is there
    (half removed, say). With no identity in its tag, any removed directory it holds.
    UNREACHABLE when the directory its tag `key` names (its identity, "<dev>-<ino>") is
    out of reach from the path the kernel gives for it; EMPTIED when that directory is
    reached but holds no run any more (half removed: its spec.toml gone); else None."""
    identity_part = key.rpartition(".")[2] if key is not None else ""
    pinned: tuple[str, os.stat_result] | None = None
    removed = False  # some directory it holds is removed
    for fd, st in identity.descriptors(pid):
        if not stat.S_ISDIR(st.st_mode):
            continue
        removed = removed or st.st_nlink == 0
        if f"{st.st_dev}-{st.st_ino}" == identity_part:
            pinned = (fd, st)
    if pinned is None:
        # No identity in its tag (an engine of an older runner): the one directory an
        # engine pins for its life is its run directory.
        return REMOVED if removed else None
    if pinned[1].st_nlink == 0:  # ablate: removed-is-the-pinned-dir
        return REMOVED
    if not _same_mount_namespace(pid):
        return None
    reachable = _reachable(pid, *pinned)  # ablate: unreachable-dir-vanished
    if not reachable:
        return UNREACHABLE
    emptied = _emptied(pid, pinned[0])  # ablate: half-removed-dir-vanished
    return EMPTIED if emptied else None


def _emptied(pid: int, fd: str) -> bool:
    """Whether the directory engine `pid` holds open as `fd` no longer holds a run (no
    spec.toml): looked up in that very directory (its /proc magic link, opened), not
    through a path. What cannot be looked at says nothing (not emptied)."""
    try:
        dfd = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        os.stat(_SPEC, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    finally:
        os.close(dfd)
    return False


def engines(base: str | os.PathLike[str]) -> list[Vanished]:
    """The live engines of runs that lived under `base` and whose directory is gone:
    removed or unreachable."""
    where = os.path.abspath(base)
    boot = ident.boot_id()
    found: list[Vanished] = []
    for pid in identity.all_pids():
        run_dir = _engine_dir(pid)
        if run_dir is None or os.path.dirname(os.path.abspath(run_dir)) != where:
            continue
        key = membership.tag_of(pid)
        why = gone_why(pid, key)
        if why is None:
            continue
        st = identity.stat(pid)
        if key is None or st is None or st.zombie:
            continue
        found.append(Vanished(identity.from_stat(st, boot), key, run_dir, why))
    return found


def live_tags() -> set[str]:
    """The RUNNER_RUN_ID value of every living process this user may read, in one pass
    over /proc: which runs still have processes, whatever their engines and directories
    say. This process and its ancestors are left out (a `runner stop --all` run from a
    hook carries its own run's tag)."""
    protected = signals.protected_pids()
    tags: set[str] = set()
    for pid in identity.all_pids():
        if pid in protected:
            continue
        tag = membership.tag_of(pid)
        if tag is not None:
            tags.add(tag)
    return tags
