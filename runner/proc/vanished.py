"""Live engines whose run directory is gone (`rm -rf` of a live run).

The engine stops such a run itself (stop_controller: dirfd.gone). Should it not (hung,
or an engine of an older runner), no file says the run exists any more: `runner list`
and `runner stop --all` find it by the kernel's word instead. An engine is a process
running `-m runner _engine DIR`, tagged RUNNER_RUN_ID; its run directory is gone when
the directory descriptor it pinned (dirfd.py) has a link count of 0 (/proc/PID/fd shows
it "(deleted)"). Only engines whose DIR was under the base directory asked about are
returned, and only those this user may inspect (its own, or any as root).
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


class Vanished:
    """A live engine whose run directory is gone: `key` is its tag's value (the run's
    membership key, "<run id>.<dev>-<ino>", which names its cgroup too), `run_id` the
    id people know the run by."""

    __slots__ = ("engine", "key", "run_id", "run_dir")

    def __init__(self, engine: Identity, key: str, run_dir: str) -> None:
        self.engine, self.key, self.run_dir = engine, key, run_dir
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


def _holds_deleted_dir(pid: int) -> bool:
    return any(stat.S_ISDIR(st.st_mode) and st.st_nlink == 0 for _, st in identity.descriptors(pid))


def engines(base: str | os.PathLike[str]) -> list[Vanished]:
    """The live engines of runs that lived under `base` and whose directory is gone."""
    where = os.path.abspath(base)
    boot = ident.boot_id()
    found: list[Vanished] = []
    for pid in identity.all_pids():
        run_dir = _engine_dir(pid)
        if run_dir is None or os.path.dirname(os.path.abspath(run_dir)) != where:
            continue
        if not _holds_deleted_dir(pid):
            continue
        run_id = membership.tag_of(pid)
        st = identity.stat(pid)
        if run_id is None or st is None or st.zombie:
            continue
        found.append(Vanished(identity.from_stat(st, boot), run_id, run_dir))
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
