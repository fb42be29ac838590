"""The structures `runner status --json` (docs/status-json.md) and `runner list --json`
(docs/list-json.md) print, and the web dashboard reads: their types, version and keys,
in one place. status.py decides what goes in them; this module only names them (it
imports nothing of the views, so that the fold, the model and the renderers can all
name these types without an import circle).
"""

from __future__ import annotations

from typing import TypedDict

STATUS_VERSION = 1
"""`version` of `runner status --json` (docs/status-json.md): raised when a key changes
meaning or goes away; keys are only ever added within a version."""

CONTAINMENT_KEYS = ("mode", "cgroup", "subreaper")
"""`containment`'s keys (Containment), as the engine journaled them (the `containment` event)."""


class Failure(TypedDict):
    """Why an item failed: the command that decided it and how it ended."""

    phase: str  # "session", "repair" or "verify"
    outcome: str  # events.Outcome: "failed" or "timeout"
    index: int | None  # which verify command ([[verify]] entry), None for a session
    command: list[str] | None  # its argv (item substituted); None when the spec is unreadable
    rc: int | None  # its exit code; None when it was killed on a timeout
    killed_by: str | None  # the signal that killed it by name, "oom" for the OOM killer; None
    oom_kills: int | None  # processes of the call the OOM killer killed (its memory cgroup's count rose); None


class ItemRow(TypedDict):
    """One item, as `runner status --json`, the summary table and the dashboard show it."""

    item: str
    status: str  # pending, running, paused (held at a PAUSE, before its next phase), done, failed, stopped
    attempts: int  # provider calls: the session and each repair session
    repairs: int
    duration: float | None  # seconds in the item's phases, over every attempt; None: never started
    reason: str | None  # one line, for a failed item
    failure: Failure | None


class ChildStatus(TypedDict):
    """One live call of a run, as `runner status` shows it."""

    pid: int
    pgid: int
    name: object  # the call's recorded name, as its identity file holds it (None if unreadable)
    runtime: float | None  # seconds since it started


class PendingStop(TypedDict):
    """A stop request the engine has not taken yet, or the STOP file."""

    mode: str  # hard or graceful
    origin: str  # events.Origin
    age: float | None  # seconds since it was lodged; None for the STOP file alone
    unreadable: bool
    stop_file: bool


class StopRecord(TypedDict):
    """The attempt's run-stop record, as journaled: who asked and how."""

    origin: str | None  # events.Origin, as journaled
    mode: str | None  # hard or graceful
    forced: bool  # a stopper recorded it (the engine was killed, not asked)
    fallback: bool  # the hard stop's fallback: the engine did not end within the grace
    kind: str | None  # the StopKind (hard, now, graceful) of the command that asked, when one did
    kind_known: bool  # the record says it (kind, or null: no command's request): since issue 42


class Control(TypedDict):
    """One control of a run (a dashboard button, a command): whether it is offered in
    the run's state (`shown`), whether it may be used now (`enabled`), and, when it is
    offered but not now, why (views/controls.py)."""

    shown: bool
    enabled: bool
    why: str | None


class Containment(TypedDict):
    """The containment the engine set up, as it journaled it (CONTAINMENT_KEYS)."""

    mode: object  # "cgroup" or "group", as journaled
    cgroup: object
    subreaper: object


class RunStatus(TypedDict):
    """What status.status_of() returns: `runner status --json` prints it as it is. Every
    key is documented in docs/status-json.md; the web dashboard reads the same."""

    version: int
    run_id: str | None
    run_dir: str
    live: bool | None
    engine_pid: int | None
    status: str
    recorded_status: str | None
    resumable: bool
    stopping: bool
    stopping_kind: str | None  # the stop under way: graceful, hard or now (words.STOP_STRENGTH)
    words: str  # the status as a sentence for people (views/words.py)
    actions: list[str]  # the controls that apply now (views/controls.py)
    attempt: int | None
    current_item: str | None
    phase: str | None
    stopped: bool
    stop_origin: str | None
    stop: StopRecord | None
    items: list[ItemRow]
    done: int
    failed: int
    provider_calls: int
    children: list[ChildStatus]
    damaged: list[str]
    started: float | None
    elapsed: float | None
    phase_started: float | None
    phase_elapsed: float | None
    pending_stop: PendingStop | None
    paused: bool
    pause_held: bool
    paused_since: float | None  # when the engine began to hold at the PAUSE (epoch seconds)
    waiting_before: str | None  # the item the engine goes on with once the PAUSE is gone
    containment: Containment | None
    copy: str | None
    cause: str | None
    journal_skipped: int


class RunRow(TypedDict):
    """One run of `runner list --json`: read cheaply (its state, its lock, its run-id; no
    process and no journal). Every key is documented in docs/list-json.md."""

    run_id: str
    run_dir: str
    status: str  # as status.run_status decides, or "vanished"
    resumable: bool
    live: bool | None  # None: the lock file is damaged
    attempt: int | None
    items: int | None
    done: int | None
    failed: int | None
    created: float | None  # when the run directory got its spec (epoch seconds)
    updated: float | None  # the state's last save
    damaged: list[str]
    copy_of: str | None  # a copy of a run: the run's own directory, "" when not found; else None
    orphaned_cgroup: str | None  # the run's cgroup, left while no engine of it is live
    pause: str | None  # a live run's PAUSE: "held" (the engine holds there), "asked" (not yet); else None
