"""What a run is doing and has done, read back from the files its engine writes: the
journal folded into phases (when each started and ended, and how), per-item durations
and failure reasons, the containment in use and whether the engine holds at a PAUSE.

The same fold serves the foreground progress (fed record by record as the journal
grows, progress.py) and the status model (fed the journal's end, status.py). The
engine is never asked anything: a watcher of a run can neither slow it nor its stop.

No phase-end event is journaled: a phase ends where the next one starts, or where its
item is done or failed, or where the run completes, stops or crashes.
"""

from __future__ import annotations

import math
import os
import shlex
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner import defaults
from runner.errors import Damaged
from runner.events import Event, Outcome
from runner.files.follow import JournalTail
from runner.files.spec import substitute
from runner.proc import identity, oom
from runner.views.schema import CONTAINMENT_KEYS, Failure, StopRecord

if TYPE_CHECKING:
    from runner.files.rundir import RunDir
    from runner.files.spec import Spec
    from runner.ident import Identity


@dataclass
class Phase:
    """A phase in flight or just ended (`duration` and `result` once it ended)."""

    phase: str
    item: str | None
    t: float
    duration: float | None = None
    result: str | None = None

    @property
    def ended(self) -> bool:
        return self.duration is not None


@dataclass
class Fold:
    """The journal folded record by record. `add` returns the phases that started or
    ended with that record, in order (the foreground prints them)."""

    spec: Spec | None = None
    items: list[str] = field(default_factory=list)
    attempt: int | None = None
    run_t0: float | None = None
    current: Phase | None = None
    result: str | None = None  # what the phase in flight has shown so far
    durations: dict[str, float] = field(default_factory=dict)
    sessions: dict[str, int] = field(default_factory=dict)
    repair_attempt: dict[str, int] = field(default_factory=dict)
    failures: dict[str, Failure] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)  # done / failed, by the journal
    containment: dict[str, Any] | None = None
    pause_held: bool = False
    paused_since: float | None = None  # when the engine began to hold at the PAUSE
    paused_item: str | None = None  # the item it held in (its current item then)
    graceful_stop: bool = False
    stop: StopRecord | None = None  # the attempt's run-stop: who asked, how
    ended: str | None = None  # completed, failed, stopped, crashed
    cause: str | None = None  # why the engine ended the run itself: a crash, a disk fault
    skipped: int = 0  # bytes of the journal's start not folded (fold_journal's budget)

    def __post_init__(self) -> None:
        if self.spec is not None and not self.items:
            self.items = list(self.spec.items)

    def position(self, item: str | None) -> tuple[int, int] | None:
        """(i, n): the item's place in the queue, from 1."""
        if item is None or item not in self.items:
            return None
        return self.items.index(item) + 1, len(self.items)

    def waiting(self) -> str | None:
        """The item a held run goes on with: the first of the queue the journal has not
        seen done or failed."""
        return next((name for name in self.items if name not in self.outcomes), None)

    def add(self, rec: dict[str, Any]) -> list[Phase]:
        event, t = rec.get("event"), _number(rec.get("t"), time.time())
        item = rec.get("item") if isinstance(rec.get("item"), str) else None
        out: list[Phase] = []
        if event == Event.RUN_START:
            self._close(t, "interrupted", out)  # the attempt before died without a word
            names = rec.get("items")
            if isinstance(names, list) and all(isinstance(n, str) for n in names):
                self.items = list(names)
            attempt = rec.get("attempt")
            self.attempt = attempt if isinstance(attempt, int) else self.attempt
            self.run_t0, self.ended, self.pause_held, self.graceful_stop = t, None, False, False
            self.cause, self.paused_since, self.stop = None, None, None
        elif event == Event.CONTAINMENT:
            self.containment = {k: rec.get(k) for k in CONTAINMENT_KEYS}
        elif event == Event.PHASE_START:
            self._close(t, None, out)
            phase = rec.get("phase")
            self.current = Phase(str(phase), item, t)
            self.result = None
            out.append(self.current)
        elif event == Event.SESSION_START and item is not None:
            self.sessions[item] = self.sessions.get(item, 0) + 1
        elif event == Event.SESSION_END:
            self.result = _outcome_text(rec.get("outcome"), rec.get("rc"), rec.get("killed_by"), rec.get("oom_kills"))
            if item is not None and rec.get("outcome") in (Outcome.FAILED, Outcome.TIMEOUT):
                self.failures[item] = self._failure(str(rec.get("kind")), rec, None, item)
        elif event == Event.HOOK_RESULT:
            if rec.get("outcome") != Outcome.PASSED and self.result is None:
                self.result = f"{rec.get('hook')}[{rec.get('index')}] " + _outcome_text(
                    rec.get("outcome"), rec.get("rc"), rec.get("killed_by"), rec.get("oom_kills")
                )
        elif event == Event.VERIFY_RESULT:
            index = rec.get("index")
            if not isinstance(index, int) or isinstance(index, bool):
                self.result = "passed"
            elif item is not None:
                failure = self._failure("verify", rec, index, item)
                if failure["outcome"] != Outcome.STOPPED:
                    self.failures[item] = failure
                self.result = describe(failure, phase=False)
        elif event == Event.REPAIR_DISPATCH and item is not None:
            attempt = rec.get("attempt")
            self.repair_attempt[item] = attempt if isinstance(attempt, int) else 0
        elif event == Event.ITEM_DONE and item is not None:
            self._close(t, None, out)
            self.outcomes[item] = "done"
            self.reasons.pop(item, None)
        elif event == Event.ITEM_FAILED and item is not None:
            self._close(t, None, out)
            self.outcomes[item] = "failed"
            known = self.failures.get(item)
            self.reasons[item] = describe(known) if known else str(rec.get("reason") or "failed")
        elif event == Event.PAUSED:
            # The engine holds between phases: the phase before it has ended, and no
            # phase clock counts while it holds (the next phase-start starts one).
            self._close(t, None, out)  # ablate: pause-ends-phase
            self.pause_held, self.paused_since, self.paused_item = True, t, item
        elif event == Event.UNPAUSED:
            self.pause_held, self.paused_since = False, None
        elif event == Event.GRACEFUL_STOP:
            self.graceful_stop = True
        elif event == Event.RUN_COMPLETE:
            self._close(t, None, out)
            self.ended = str(rec.get("status"))
        elif event in (Event.TEARDOWN_COMPLETE, Event.RUN_STOP):
            self._close(t, "stopped", out)
            self.ended, self.pause_held, self.paused_since = "stopped", False, None
            if event == Event.RUN_STOP:
                self.stop = stop_record(rec)
        elif event == Event.ENGINE_CRASH:
            self._close(t, "crashed", out)
            self.ended = "crashed"
            self.cause = str(rec.get("cause") or "") or self.cause
        elif event == Event.DISK_FAULT:
            self.cause = f"{rec.get('error') or 'disk fault'} (writing {rec.get('file') or 'a file of the run'})"
        return out

    def _close(self, t: float, forced: str | None, out: list[Phase]) -> None:
        """End the phase in flight at `t`; `forced`: how it ended, whatever it showed."""
        phase = self.current
        if phase is None:
            return
        self.current = None
        spent = t - phase.t
        phase.duration = spent if math.isfinite(spent) and spent > 0 else 0.0
        phase.result = forced or self.result or "done"
        if phase.item is not None:
            self.durations[phase.item] = self.durations.get(phase.item, 0.0) + phase.duration
        out.append(phase)

    def _failure(self, phase: str, rec: dict[str, Any], index: int | None, item: str) -> Failure:
        rc = rec.get("rc")
        killed_by = rec.get("killed_by")
        command: list[str] | None = None
        if index is not None and self.spec is not None and 0 <= index < len(self.spec.verify):
            command = substitute(self.spec.verify[index].command, item=item)
        return {
            "phase": phase,
            "outcome": str(rec.get("outcome")),
            "index": index,
            "command": command,
            "rc": rc if isinstance(rc, int) and not isinstance(rc, bool) else None,
            "killed_by": killed_by if isinstance(killed_by, str) else None,
            "oom_kills": _count(rec.get("oom_kills")),
        }

    def duration(self, item: str, now: float | None = None) -> float:
        """Seconds in the item's phases; with `now`, the phase in flight counts up to it."""
        spent = self.durations.get(item, 0.0)
        if now is not None and self.current is not None and self.current.item == item:
            spent += max(0.0, now - self.current.t)
        return spent if math.isfinite(spent) else 0.0


def stop_record(rec: dict[str, Any]) -> StopRecord:
    """A run-stop record's say on who asked and how (the journal is untrusted: a field
    of another type reads as absent)."""
    origin, mode, kind = rec.get("origin"), rec.get("mode"), rec.get("kind")
    return {
        "origin": origin if isinstance(origin, str) else None,
        "mode": mode if isinstance(mode, str) else None,
        "forced": rec.get("forced") is True,
        "fallback": rec.get("fallback") is True,
        "kind": kind if isinstance(kind, str) else None,
        "kind_known": "kind" in rec,
    }


def describe(failure: Failure, phase: bool = True) -> str:
    """One line: the command and how it ended, e.g. "verify `test -e b` exited 1"
    (without `phase`: "`test -e b` exited 1", for a line that names the phase)."""
    parts = [failure["phase"]] if phase else []
    if failure["command"] is not None:
        parts.append(f"`{shlex.join(failure['command'])}`")
    elif failure["index"] is not None:
        parts.append(f"[{failure['index']}]")
    parts.append(_outcome_text(failure["outcome"], failure["rc"], failure.get("killed_by"), failure.get("oom_kills")))
    return " ".join(parts)


def _count(value: object) -> int | None:
    """A journal's count: a positive int, else None (the journal is untrusted)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _outcome_text(outcome: object, rc: object, killed_by: object = None, oom_kills: object = None) -> str:
    if outcome == Outcome.PASSED:
        return "passed"
    if outcome == Outcome.TIMEOUT:
        return "timed out"
    if outcome == Outcome.STOPPED:
        return "stopped"
    if (n := _count(oom_kills)) is not None:  # any process of the call, its leader or not
        return oom.out_of_memory(min(n, 1 << 20))
    if isinstance(killed_by, str):  # the journal is untrusted: only a string is worded
        return oom.describe(killed_by[:40])
    return f"exited {rc}" if isinstance(rc, int) and not isinstance(rc, bool) and rc >= 0 else f"failed (rc {rc})"


def _number(value: object, default: float) -> float:
    """A journal's time: a finite number, else `default` (the journal is untrusted: a
    NaN or an infinity there must not reach a sum or a printed duration)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an int too large for a float
            return default
        if math.isfinite(number):
            return number
    return default


def fold_journal(
    rd: RunDir, spec: Spec | None, damaged: list[str], budget: int = defaults.STATUS_JOURNAL_TAIL_BYTES
) -> Fold:
    """The journal folded, or its last `budget` bytes when it is longer (from the first
    whole record there; `Fold.skipped`: the bytes left unread), so that a status costs
    what a fresh run's does whatever the journal's size (issue 20: a 250 MB journal took
    26 s and 2.1 GB). A damaged journal is named in `damaged` and folds empty."""
    fold = Fold(spec)
    fold.skipped = max(0, st_size(rd.journal) - budget)  # ablate: status-tail
    tail = JournalTail(rd.journal, start=fold.skipped)
    try:
        while records := tail.poll():
            for rec in records:
                fold.add(rec)
            if tail.offset >= fold.skipped + budget:
                break  # appended since: the next status reads it
    except Damaged as exc:
        damaged.append(" ".join(str(exc).split()))
        return Fold(spec)
    return fold


class FoldCache:
    """Folds kept between calls, for a process that asks for the status of the same runs
    again and again (the web dashboard): each call folds only the records appended since
    the last one. A journal replaced or cut short is folded again from its start, so a
    cached fold always equals a fresh one. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._folds: dict[Path, tuple[tuple[int, int], JournalTail, Fold]] = {}

    def fold(self, rd: RunDir, spec: Spec | None, damaged: list[str]) -> Fold:
        with self._lock:
            try:
                st = os.lstat(rd.journal)
                key = (st.st_dev, st.st_ino)
            except OSError:
                key = (-1, -1)
            kept = self._folds.get(rd.path)
            if kept is None or kept[0] != key or st_size(rd.journal) < kept[1].offset:
                # A first fold reads what `runner status` reads: the journal's end.
                fresh = Fold(spec, skipped=max(0, st_size(rd.journal) - defaults.STATUS_JOURNAL_TAIL_BYTES))
                kept = (key, JournalTail(rd.journal, start=fresh.skipped), fresh)
            _, tail, fold = kept
            try:
                while records := tail.poll():
                    for rec in records:
                        fold.add(rec)
            except Damaged as exc:
                damaged.append(" ".join(str(exc).split()))
                self._folds.pop(rd.path, None)
                return Fold(spec)
            self._folds[rd.path] = kept
            return fold

    def forget(self, rd: RunDir) -> None:
        if not self._folds:  # none kept (no live run): no path hashed for each dead one
            return
        with self._lock:
            self._folds.pop(rd.path, None)


def st_size(path: Path) -> int:
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0


def runtime(ident: Identity) -> float | None:
    """Seconds since the process started (identity.age), to the millisecond."""
    return round(identity.age(ident.start_ticks), 3)
