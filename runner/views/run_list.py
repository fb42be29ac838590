"""`runner list`: every run under the base directory, one row each: its id, status,
attempt, items done of all, age. Each run is read on its own and cheaply (its state, its
lock, its run-id, whether its cgroup is left; no process is looked at), through one
descriptor of its directory: a damaged run is a row that says what is damaged, never
the end of the list.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from runner import defaults
from runner.errors import Damaged
from runner.files import journal
from runner.files.opened import OpenedRun
from runner.files.rundir import RunDir, run_entries
from runner.proc import cgroup, vanished
from runner.views import status as model
from runner.views.schema import RunRow

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection


def row(rd: RunDir, cgroups: Collection[str] | None = None) -> RunRow:
    """`cgroups`: the names of the run cgroups there are (cgroup.leftovers, looked at once
    for the whole list), among which a run whose engine is dead may have left its own;
    None looks for this run's alone. The directory is opened once and each file read
    relative to it (opened.py)."""
    try:
        run = OpenedRun(rd)
    except OSError as exc:  # gone since it was listed, or not ours to read
        return _row_without_files(
            rd.path.name, str(rd.path), "unknown", None, f"{rd.path}: cannot open it ({exc.strerror or exc})"
        )
    with run:
        return _row(run, cgroups)


def _row(run: OpenedRun, cgroups: Collection[str] | None) -> RunRow:
    damaged: list[str] = []

    def note(exc: Damaged) -> None:
        damaged.append(" ".join(str(exc).split()))

    try:
        run_id = run.run_id()
    except Damaged as exc:
        note(exc)
        run_id = run.rd.path.name
    copy_of = run.copy_origin()
    live: bool | None
    try:
        live = run.is_live() and copy_of is None  # a `cp -al` copy shares the run's lock file
    except (Damaged, OSError) as exc:
        damaged.append(f"{run.path('lock')}: {exc}" if not isinstance(exc, Damaged) else " ".join(str(exc).split()))
        live = None
    state_unreadable = False
    try:
        state = run.state()
    except Damaged as exc:
        note(exc)
        state, state_unreadable = None, True
    try:
        created: float | None = run.lstat("spec.toml").st_mtime
    except OSError:
        created = None
    copy = copy_of is not None
    at_work = not copy and model.stopper_at_work(run.rd, state, live)
    status = model.run_status(state, live, copy=copy, state_unreadable=state_unreadable, at_work=at_work)
    pause = _pause(run) if status == "running" and live else None
    items = list(state.items.values()) if state is not None else None
    return {
        "run_id": run_id,
        "run_dir": str(run.rd.path),
        "status": status,
        "resumable": model.resumable(state, live, copy=copy, at_work=at_work),
        "live": live,
        "attempt": state.attempt if state is not None else None,
        "items": len(items) if items is not None else None,
        "done": sum(1 for i in items if i.status == "done") if items is not None else None,
        "failed": sum(1 for i in items if i.status == "failed") if items is not None else None,
        "created": created,
        "updated": state.updated if state is not None and state.updated else None,
        "damaged": damaged,
        "copy_of": copy_of,
        "orphaned_cgroup": _orphaned_cgroup(run, run_id, live, copy, cgroups),
        "pause": pause,
    }


def _pause(run: OpenedRun) -> str | None:
    """A live run's PAUSE: "held" once its engine journaled that it holds there, "asked"
    while the file waits for the engine's next check point; None without the file. The
    journal is read only then, and only its tail (a held engine's last record)."""
    try:
        run.lstat("PAUSE")
    except FileNotFoundError:
        return None
    except OSError:
        return "asked"  # there, but not ours to look at: the engine decides
    try:
        held = journal.pause_held(run.path("journal.jsonl"), defaults.STOP_JOURNAL_TAIL_BYTES)
    except (Damaged, OSError):
        held = False
    return "held" if held else "asked"  # ablate: list-shows-pause


def _orphaned_cgroup(
    run: OpenedRun, run_id: str, live: bool | None, copy: bool, cgroups: Collection[str] | None
) -> str | None:
    """The run's cgroup, when it exists while no engine of the run is live (its engine
    was killed before it could remove it: a SIGKILLed container's PID 1). A copy has
    none of its own; a live run's is in use."""
    if live is not False or copy:
        return None
    key = run.key(run_id)
    if key is None:
        return None
    if cgroups is None:
        path = cgroup.leftover(key)
        return str(path) if path is not None else None
    return str(cgroup.run_cgroup_path(key)) if key in cgroups else None


def rows(base: str | os.PathLike[str]) -> list[RunRow]:
    """Every run under `base`, oldest first (run ids sort by their start time), then the
    live runs whose directory under `base` is gone, removed or unreachable (vanished.py:
    the kernel's word, no file is left to read), as status "vanished"."""
    cgroups = cgroup.leftovers()
    out = [
        row(e.rd, cgroups) if e.rd is not None else _refused(Path(base), e.name, e.error)
        for e in run_entries(Path(base))
    ]
    for v in vanished.engines(base):
        how = {
            vanished.REMOVED: "removed",
            vanished.EMPTIED: "half removed (its spec.toml gone)",
        }.get(v.why, "unreachable (its file system unmounted, or mounted over)")
        damaged = f"{v.run_dir}: {how} while engine pid {v.engine.pid} runs (`runner stop --all` stops it)"
        out.append(_row_without_files(v.run_id, v.run_dir, "vanished", True, damaged))
    return out


def _refused(base: Path, name: str, error: str | None) -> RunRow:
    """An entry named like a run that no command acts on (rundir.run_entries: a symlink
    is never followed), as a row that says why."""
    return _row_without_files(name, str(base / name), "unknown", None, f"{base / name}: {error}")


def _row_without_files(run_id: str, run_dir: str, status: str, live: bool | None, damaged: str) -> RunRow:
    """A row for which no file of the run is read (gone, or not to be followed)."""
    return {
        "run_id": run_id,
        "run_dir": run_dir,
        "status": status,
        "resumable": False,
        "live": live,
        "attempt": None,
        "items": None,
        "done": None,
        "failed": None,
        "created": None,
        "updated": None,
        "damaged": [damaged],
        "copy_of": None,
        "orphaned_cgroup": None,
        "pause": None,
    }


def age(row: RunRow, now: float | None = None) -> float | None:
    """Seconds since the run was created."""
    if row["created"] is None:
        return None
    return max(0.0, (time.time() if now is None else now) - row["created"])
