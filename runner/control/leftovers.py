"""Resume's first act: kill what a dead engine's attempt left running, so that an
orphaned call never works on an item beside its replay."""

from __future__ import annotations

from runner.control import survey
from runner.files.rundir import RunDir
from runner.proc import reaper

TYPE_CHECKING = False

if TYPE_CHECKING:
    from runner.control.survey import Survey
    from runner.proc.reaper import ReapReport


def kill_leftovers(rd: RunDir, kill_grace: float) -> tuple[ReapReport, Survey]:
    """Kill what a dead engine's attempt left running: its calls (recorded in
    children/), whatever carries the run's tag, and its cgroup's work members. Resume
    runs this first, so an orphaned call never works on an item beside its replay.
    Returns the reaper's report and the run's view (what was damaged)."""
    view = survey.not_a_copy(survey.of(rd, wait_for_engine=False))
    children = view.children
    report = reaper.kill_everything(
        groups=[(child.pgid, [child]) for child in children],
        pids=children,
        run_id=view.key,
        kill_grace=kill_grace,
        cgroup=view.cgroup,
        cgroup_scope="work",
    )
    return report, view
