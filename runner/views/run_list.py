"""`runner list`: every run under the base directory, one row each: its id, status,
attempt, items done of all, age. Each run is read on its own and cheaply (its state, its
lock, its run-id; no process is looked at): a damaged run is a row that says what is
damaged, never the end of the list.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TypedDict

from runner.errors import Damaged
from runner.files.rundir import RunDir, copy_origin, list_runs
from runner.files.state import StateStore
from runner.proc import vanished


class RunRow(TypedDict):
    run_id: str
    run_dir: str
    status: str  # running, completed, failed, stopped, crashed, starting, "damaged", or "vanished"
    live: bool | None  # None: the lock file is damaged
    attempt: int | None
    items: int | None
    done: int | None
    failed: int | None
    created: float | None  # when the run directory got its spec (epoch seconds)
    updated: float | None  # the state's last save
    damaged: list[str]
    copy_of: str | None  # a copy of a run: the run's own directory, "" when not found; else None


def row(rd: RunDir) -> RunRow:
    damaged: list[str] = []

    def note(exc: Damaged) -> None:
        damaged.append(" ".join(str(exc).split()))

    try:
        run_id = rd.run_id
    except Damaged as exc:
        note(exc)
        run_id = rd.path.name
    copy_of = copy_origin(rd)
    live: bool | None
    try:
        live = rd.is_live() and copy_of is None  # a `cp -al` copy shares the run's lock file
    except (Damaged, OSError) as exc:
        damaged.append(f"{rd.lock}: {exc}" if not isinstance(exc, Damaged) else " ".join(str(exc).split()))
        live = None
    try:
        state = StateStore(rd.state).load_or_none()
    except Damaged as exc:
        note(exc)
        state = None
    try:
        created: float | None = os.lstat(rd.spec).st_mtime
    except OSError:
        created = None
    if state is not None:
        status = state.status
        if status == "running" and live is False and copy_of is None:
            status = "crashed"  # no engine, and it never wrote how the run ended
        if copy_of is not None:
            status = "copy"  # read-only: never stopped or resumed; `status` shows its records
    else:
        status = "damaged" if damaged else ("starting" if live else "unknown")
    items = list(state.items.values()) if state is not None else None
    return {
        "run_id": run_id,
        "run_dir": str(rd.path),
        "status": status,
        "live": live,
        "attempt": state.attempt if state is not None else None,
        "items": len(items) if items is not None else None,
        "done": sum(1 for i in items if i.status == "done") if items is not None else None,
        "failed": sum(1 for i in items if i.status == "failed") if items is not None else None,
        "created": created,
        "updated": state.updated if state is not None and state.updated else None,
        "damaged": damaged,
        "copy_of": copy_of,
    }


def rows(base: str | os.PathLike[str]) -> list[RunRow]:
    """Every run under `base`, oldest first (run ids sort by their start time), then the
    live runs whose directory under `base` is gone (vanished.py: the kernel's word, no
    file is left to read), as status "vanished"."""
    out = [row(rd) for rd in list_runs(Path(base))]
    for v in vanished.engines(base):
        out.append(
            {
                "run_id": v.run_id,
                "run_dir": v.run_dir,
                "status": "vanished",
                "live": True,
                "attempt": None,
                "items": None,
                "done": None,
                "failed": None,
                "created": None,
                "updated": None,
                "damaged": [
                    f"{v.run_dir}: removed while engine pid {v.engine.pid} runs (`runner stop --all` stops it)"
                ],
                "copy_of": None,
            }
        )
    return out


def age(row: RunRow, now: float | None = None) -> float | None:
    """Seconds since the run was created."""
    if row["created"] is None:
        return None
    return max(0.0, (time.time() if now is None else now) - row["created"])
