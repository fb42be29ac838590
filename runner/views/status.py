"""One model of a run: what `runner status` (text and --json), `runner list` (text and
--json), the foreground summary, the web dashboard and the choice of a run to resume
all read, so that none of them can say something else of the same run.

It decides, once each:
- the run's status word (run_status): the state's, except a copy ("copy") and a run
  whose engine died without recording an end ("crashed", where state.json still says
  "running"; "stopping" while a stopper that killed it is at work, its record to come),
  and "starting" / "unknown" before or without a readable state;
- whether `runner resume` may continue it (resumable);
- whether it is stopping (a stop asked for or taken, and the run not yet ended), and
  whether the engine holds at a PAUSE (pause_held);
- its item rows, in queue order (the spec's order, whatever the order of state.json);
- its pending stop.

The structures are named in schema.py; the journal's fold is overview.py's.
"""

from __future__ import annotations

import time

from runner.control import survey
from runner.errors import Damaged
from runner.files import stop_request, stoppers
from runner.files.rundir import RunDir, copy_line
from runner.files.state import State, StateStore
from runner.proc import identity
from runner.proc.membership import Membership
from runner.views import controls, words
from runner.views.schema import STATUS_VERSION, ChildStatus, Containment, ItemRow, PendingStop, RunStatus

TYPE_CHECKING = False
if TYPE_CHECKING:
    from runner.views import overview

RESUMABLE_STATUSES = ("stopped", "crashed", "running")
"""Recorded statuses `runner resume` continues (with no live engine, and not a copy):
"running" is an engine that died without recording an end."""


def run_status(
    state: State | None, live: bool | None, *, copy: bool, state_unreadable: bool = False, at_work: bool = False
) -> str:
    """The run's status word. `live`: a live engine holds the lock (None: the lock file is
    damaged, so nothing is concluded from it). `at_work`: a stopper holds its mark on the
    run (files/stoppers.py): an engine it killed has not had its stop recorded yet, and
    the run is "stopping" until the record lands, never "crashed" meanwhile."""
    if copy:
        return "copy"  # read-only: never stopped or resumed; its records are shown as copied
    if state is None:
        return "unknown" if state_unreadable or live is False else "starting"
    if state.status == "running" and live is False:  # ablate: crashed-decision
        return "stopping" if at_work else "crashed"  # no engine, and nothing recorded how the run ended (yet)
    return state.status


def stopper_at_work(rd: RunDir, state: State | None, live: bool | None) -> bool:
    """A stopper is at work on a run whose engine is gone and whose end is not recorded
    (asked only then: one probe of `lock`)."""
    return live is False and state is not None and state.status == "running" and stoppers.at_work(rd)


def resumable(state: State | None, live: bool | None, *, copy: bool, at_work: bool = False) -> bool:
    """`runner resume` continues it: no live engine, not a copy, no stopper at work on it,
    and its last attempt was stopped or never finished."""
    if live is not False or copy or state is None or at_work:
        return False
    return state.stopped or state.status in RESUMABLE_STATUSES


def resumable_run(rd: RunDir) -> bool:
    """resumable() of a run directory, read cheaply (what a plain `runner resume` picks
    among the runs under the base directory with)."""
    try:
        live = rd.is_live()
        copy = copy_line(rd) is not None
        state = StateStore(rd.state).load_or_none()
    except (Damaged, OSError):
        return False
    return resumable(state, live, copy=copy)


def stopping(running: bool, pending: PendingStop | None, fold: overview.Fold, taken: bool) -> bool:
    """A stop is on its way and the run has not ended: a request or the STOP file waits
    for the engine, or the engine took one (`taken`: a request consumed since this
    attempt started; a graceful stop journaled)."""
    return running and (pending is not None or taken or fold.graceful_stop)


def stopping_kind(stopping: bool, pending: PendingStop | None, fold: overview.Fold) -> str | None:
    """The kind of the stop under way (words.STOP_STRENGTH), None when there is none: the
    pending request's mode, else graceful once the engine journaled a graceful stop, else
    hard (a request taken, or the run-stop already journaled)."""
    if not stopping:
        return None
    if pending is not None:
        return pending["mode"] if pending["mode"] in words.STOP_STRENGTH else "hard"
    return "graceful" if fold.graceful_stop else "hard"


def waiting_before(items: list[ItemRow]) -> str | None:
    """The item a held run goes on with: the first, in queue order, not yet ended."""
    return next((r["item"] for r in items if r["status"] in ("paused", "running", "pending")), None)


def item_rows(fold: overview.Fold, state: State | None, live: bool, now: float) -> list[ItemRow]:
    """Every item of the queue, in queue order (the spec's, as the run-start record or
    the frozen spec gives it): its status and attempts from the state (the engine's own
    record), its duration and failure from the journal. An item never started has no
    duration (None), not 0."""
    rank = {name: i for i, name in enumerate(fold.items)}  # ablate: queue-order
    if state is not None:
        names = sorted(state.items, key=lambda n: rank.get(n, len(rank)))
    else:
        names = list(fold.items)
    rows: list[ItemRow] = []
    for name in names:
        st = state.items.get(name) if state is not None else None
        status = st.status if st is not None else fold.outcomes.get(name, "pending")
        if state is not None and state.current_item == name and status == "pending":
            if live and state.status == "running":
                status = "paused" if fold.pause_held else "running"
            elif state.stopped:
                status = "stopped"  # the item the stop cut short (resume runs it again)
        spent = fold.duration(name, now if live else None)
        started = spent > 0 or name in fold.durations or (fold.current is not None and fold.current.item == name)
        rows.append(
            {
                "item": name,
                "status": status,
                "attempts": st.calls if st is not None else fold.sessions.get(name, 0),
                "repairs": st.repairs if st is not None else fold.repair_attempt.get(name, 0),
                "duration": round(spent, 3) if started or status != "pending" else None,
                "reason": fold.reasons.get(name) if status == "failed" else None,
                "failure": fold.failures.get(name) if status == "failed" else None,
            }
        )
    return rows


def pending_stop(rd: RunDir) -> PendingStop | None:
    """The stop request the engine has not yet taken, and the STOP file: None when
    neither is there."""
    request = stop_request.peek(rd)
    stop_file = stop_request.stop_file(rd)
    if request is not None:
        return {
            "mode": request.mode.label,
            "origin": request.origin.value,
            "age": round(max(0.0, time.time() - request.t), 3),
            "unreadable": request.unreadable,
            "stop_file": stop_file,
        }
    if stop_file:
        return {"mode": "graceful", "origin": "file", "age": None, "unreadable": False, "stop_file": True}
    return None


def status_of(rd: RunDir, folds: overview.FoldCache | None = None) -> RunStatus:
    """The model of one run (`runner status --json` prints it as it is). Each file is
    read on its own (survey.py): a damaged one is listed under "damaged" and the others
    are still shown. `folds`: a cache for a caller that asks again and again (only new
    journal records are read)."""
    # The journal's fold (and the spec parser and dataclasses under it) is imported here:
    # `runner list` reads run_status and resumable only, and spares its start-up that.
    from runner.views import overview

    view = survey.of(rd, wait_for_engine=False)
    state_unreadable = False
    try:
        state = StateStore(rd.state).load_or_none()
    except Damaged as exc:
        view.note(exc)
        state, state_unreadable = None, True
    now = time.time()
    spec = survey.spec_of(view)
    if folds is not None:
        fold = folds.fold(rd, spec, view.damaged)
    else:
        fold = overview.fold_journal(rd, spec, view.damaged)
    children: list[ChildStatus] = []
    members = Membership(view.key, view.cgroup.relative if view.cgroup else None)
    engine = view.engine
    if engine is not None and identity.is_running(engine) and members.foreign(engine.pid, engine.start_ticks):
        # engine.json names a live process that is not this directory's run (copied or
        # planted from another run): never shown as this run's engine.
        view.note(Damaged(rd.engine_identity, f"not the run's engine: {members.why_not(engine.pid)}"))
        engine = None
    for ident in view.children:
        if not identity.is_running(ident):
            continue
        if members.proof(ident.pid, ident.start_ticks) is None:  # ablate: status-child-proof
            # A child file naming a process that a stop would refuse to signal (forged,
            # copied from another run, or a call that left the run): never shown as a child.
            view.note(Damaged(rd.children / f"{ident.pid}.json", f"not the run's: {members.why_not(ident.pid)}"))
            continue
        children.append(
            {
                "pid": ident.pid,
                "pgid": ident.pgid,
                "name": view.child_names.get(ident.pid),
                "runtime": overview.runtime(ident),
            }
        )
    live = view.live
    copy = view.copy is not None
    running = bool(live) and not copy and fold.ended is None
    phase = fold.current if running else None
    containment: Containment | None = None
    if fold.containment is not None:
        known = fold.containment  # CONTAINMENT_KEYS, as journaled
        containment = {"mode": known.get("mode"), "cgroup": known.get("cgroup"), "subreaper": known.get("subreaper")}
    elif view.cgroup is not None:
        containment = {"mode": "cgroup", "cgroup": str(view.cgroup.path), "subreaper": None}
    pending = pending_stop(rd)
    # The engine journals the stop before it saves the state: for that instant the
    # journal says stopped while the state (and so the status word) still says running.
    ending = bool(live) and not copy and fold.ended == "stopped" and state is not None and state.status == "running"
    taken = running and fold.run_t0 is not None and stop_request.taken_since(rd, fold.run_t0)  # ablate: stopping-taken
    items = item_rows(fold, state, running, now)
    at_work = not copy and stopper_at_work(rd, state, live)
    word = run_status(state, live, copy=copy, state_unreadable=state_unreadable, at_work=at_work)
    is_stopping = ending or stopping(running, pending, fold, taken) or word == "stopping"
    kind = stopping_kind(is_stopping, pending, fold)
    done = sum(1 for r in items if r["status"] == "done")
    failed = sum(1 for r in items if r["status"] == "failed")
    held = running and fold.pause_held
    paused = stop_request.pause_file(rd)
    resumable_now = resumable(state, live, copy=copy, at_work=at_work)
    said = words.status(
        word,
        stop=fold.stop,
        stop_origin=state.stop_origin if state else None,
        done=done,
        failed=failed,
        total=len(items),
        stopping_kind=kind,
        recorded=state.status if state else None,
    )
    if held and kind is None:
        waiting = waiting_before(items)
        position = fold.position(waiting) if waiting is not None else None
        said = words.paused(fold.paused_since, waiting, position, within=waiting == fold.paused_item)
    can = controls.controls(live=live, copy=copy, paused=paused, resumable=resumable_now, stopping_kind=kind)
    return {
        "version": STATUS_VERSION,
        "run_id": view.run_id,
        "run_dir": str(rd.path),
        "live": live,
        "engine_pid": engine.pid if engine else None,
        "status": word,
        "recorded_status": state.status if state else None,
        "resumable": resumable_now,
        "stopping": is_stopping,
        "stopping_kind": kind,
        "words": said,
        "actions": controls.enabled(can),
        "attempt": state.attempt if state else None,
        "current_item": state.current_item if state else None,
        "phase": state.phase if state else None,
        "stopped": state.stopped if state else False,
        "stop_origin": state.stop_origin if state else None,
        "stop": fold.stop,
        "items": items,
        "done": done,
        "failed": failed,
        "provider_calls": state.provider_calls if state else 0,
        "children": children,
        "damaged": list(view.damaged),
        "started": fold.run_t0,
        "elapsed": round(now - fold.run_t0, 3) if running and fold.run_t0 is not None else None,
        "phase_started": phase.t if phase else None,
        "phase_elapsed": round(max(0.0, now - phase.t), 3) if phase else None,
        "pending_stop": pending,
        "paused": paused,
        "pause_held": held,
        "paused_since": fold.paused_since if held else None,
        "waiting_before": waiting_before(items) if held else None,
        "containment": containment,
        "copy": view.copy,
        "cause": fold.cause,
        "journal_skipped": fold.skipped,
    }
