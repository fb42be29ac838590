"""`runner stop --all`: every live run under a base directory stopped at once from one
process, and the runs whose directory vanished under a live engine."""

from __future__ import annotations

import os

from runner import defaults
from runner.control.stop import stop, stop_vanished
from runner.errors import Damaged, NoLiveRun
from runner.events import StopKind
from runner.exitcodes import Exit
from runner.files.rundir import RunDir, copy_line

TYPE_CHECKING = False

if TYPE_CHECKING:
    from runner.control.stop_result import StopResult
    from runner.proc.vanished import Vanished


_WORST_FIRST = (
    Exit.INTERNAL,
    Exit.UNKILLABLE,
    Exit.LEFT_RUNNING,
    Exit.OTHER_PID_NAMESPACE,
    Exit.NOT_RECORDED,
    Exit.STOP_FORCED,
    Exit.DAMAGED,
    Exit.NO_LIVE_RUN,
    Exit.BAD_INPUT,
)
"""Which code `stop --all` exits with when runs disagree: the first of these that any run
gave (a run left alive outranks a damaged file, which outranks a run already gone)."""


def _left_behind(dead: list[RunDir]) -> list[RunDir]:
    """Runs whose engine is dead while processes of theirs live (the engine crashed, or a
    stopper was killed mid-stop). A plain `runner stop` of each ends them
    (a stop of a dead engine, control/stop.py), so `--all` stops them too: it never ends while a process of
    a run under its base lives. One pass over /proc reads every tag; a run's cgroup
    answers for what scrubbed its environment."""
    from runner.proc import vanished
    from runner.proc.cgroup import RunCgroup, run_cgroup_path

    if not dead:
        return []
    tags = vanished.live_tags()
    out: list[RunDir] = []
    for rd in dead:
        try:
            key = rd.key(rd.run_id)
        except Damaged:
            continue  # no key to prove anything by: `runner stop --run-dir` says so for it
        if key is None:
            continue
        where = run_cgroup_path(key)
        if key in tags or (where is not None and RunCgroup(where).populated()):  # ablate: stop-all-left-behind
            out.append(rd)
    return out


def stop_every(base: str | os.PathLike[str], kind: StopKind) -> tuple[Exit, list[str]]:
    """`runner stop --all`: every live run under `base`, from this one process, all at
    once: each run gets the very stop its own `runner stop` would (control/stop.py's
    pipeline, with `kind`) in a thread of its own, so that 50 runs cost one kill grace,
    not 50, and one interpreter start, not 50. A run whose lock cannot be read counts as
    live. Returns the exit code and the lines to print."""
    from concurrent.futures import ThreadPoolExecutor

    from runner.errors import RunnerError
    from runner.files.rundir import list_runs
    from runner.proc import vanished

    def live(rd: RunDir) -> bool:
        if copy_line(rd) is not None:
            return False  # a copy is not a run: never stopped (`list` shows it)
        try:
            return rd.is_live()
        except Damaged:
            return True

    listed = list_runs(base)
    runs = [rd for rd in listed if live(rd)]
    left = _left_behind([rd for rd in listed if rd not in runs and copy_line(rd) is None])
    runs += left
    gone = vanished.engines(base)
    if not runs and not gone:
        raise NoLiveRun(f"no live run under {base}")

    def one(rd: RunDir) -> tuple[Exit, list[str]]:
        try:
            # No engine is left to honor a graceful stop: what a dead engine left is ended
            # as a plain `runner stop` ends it.
            result = stop(rd, StopKind.HARD if rd in left else kind)
        except RunnerError as exc:  # gone meanwhile, or damaged past reading: its line, the rest go on
            return exc.exit_code, [f"{rd.path}: {exc}"]
        return result.code, result.lines()

    def lost(v: Vanished) -> tuple[Exit, list[str]]:
        result: StopResult = stop_vanished(v)
        return result.code, result.lines()

    with ThreadPoolExecutor(max_workers=min(defaults.MAX_STOPPERS, len(runs) + len(gone))) as pool:
        vanished_runs = pool.map(lost, gone)
        outcomes = list(pool.map(one, runs))  # ablate: stop-all-at-once
        outcomes += list(vanished_runs)
    codes = {code for code, _ in outcomes}
    code = next((c for c in _WORST_FIRST if c in codes), Exit.OK)
    return code, [line for _, lines in outcomes for line in lines]
