"""Text for the terminal: tables, durations, the status view and the end-of-run summary.
Pure functions of data already read (the status model, views/status.py): nothing here reads
a file or a clock, so what a command prints is tested from what it was given.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from runner.views.words import clean, seconds

__all__ = ["clean", "seconds"]  # said in words.py, used through here by every renderer

if TYPE_CHECKING:
    from runner.views.schema import Containment, ItemRow, PendingStop, RunRow, RunStatus


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """Left-aligned columns, two spaces apart; the last column is not padded."""
    cells = [[clean(c) for c in headers]] + [[clean(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    out = []
    for r in cells:
        line = "  ".join(c.ljust(widths[i]) if i < len(r) - 1 else c for i, c in enumerate(r))
        out.append(line.rstrip())
    return out


def item_table(rows: Sequence[ItemRow], *, outcome: str = "status") -> list[str]:
    """item, status (or outcome), attempts, duration, reason."""
    return table(
        ["item", outcome, "attempts", "duration", "reason"],
        [[r["item"], r["status"], r["attempts"], _duration(r["duration"]), r["reason"] or ""] for r in rows],
    )


def _duration(value: float | None) -> str:
    return "-" if value is None else seconds(value)  # an item never started has no duration


def summary(run_id: str | None, status: str, code: int, rows: Sequence[ItemRow], cause: str | None = None) -> list[str]:
    """The end of a foreground run: one row per item, then the run's own line (with the
    cause, when the engine ended the run itself: a crash, a disk fault)."""
    failed = sum(1 for r in rows if r["status"] == "failed")
    tail = f"run {clean(run_id)}: {clean(status)}"
    if failed:
        tail += f", {failed} of {len(rows)} item{'s' if len(rows) != 1 else ''} failed"
    if cause:
        tail += f": {clean(cause, 400)}"
    return [*item_table(rows, outcome="outcome"), tail + f" (exit {code})"]


def status_view(info: RunStatus) -> list[str]:
    """`runner status` without --json: the status as a sentence (words.py), what the
    engine does now (or, held at a PAUSE, since when and before which item), the
    controls that apply (controls.py), then the items."""
    from runner.views import controls

    engine = f"engine pid {info['engine_pid']}" if info["live"] else "engine not running"
    status = clean(info["words"], 400)
    if info["copy"] is not None:
        engine = "read-only"
    if info["cause"]:
        status += f": {clean(info['cause'], 400)}"
    lines = [
        f"run {clean(info['run_id'])}: {status} (attempt {info['attempt'] or '-'}, {engine})",
        f"  dir: {clean(info['run_dir'], 1000)}",
        "  containment: " + containment(info["containment"]),
    ]
    if info["copy"] is not None:
        lines.append(f"  COPY: {clean(info['copy'], 1000)}")
    if info["journal_skipped"]:
        lines.append(
            f"  journal: its first {info['journal_skipped']:,} bytes not read (only the phase times they held)"
        )
    if info["live"] and info["pause_held"]:
        lines.append("  now: no phase runs while the PAUSE holds (remove the PAUSE file to go on)")
    elif info["live"] and info["current_item"] is not None:
        names = [r["item"] for r in info["items"]]
        where = f" ({names.index(info['current_item']) + 1}/{len(names)})" if info["current_item"] in names else ""
        phase = f"phase {clean(info['phase'])}"
        if info["phase_elapsed"] is not None:
            phase += f" for {seconds(info['phase_elapsed'])}"
        lines.append(f"  now: item {clean(info['current_item'])}{where}, {phase}")
    for child in info["children"]:
        lines.append(f"  child pid {child['pid']} ({clean(child['name'])}), running {seconds(child['runtime'])}")
    stop = info["pending_stop"]
    if stop is not None:
        lines.append("  " + pending_stop(stop))
    if info["paused"] and not info["pause_held"]:
        lines.append("  PAUSE file present: takes effect between phases (remove it to go on)")
    if info["actions"]:
        lines.append("  actions: " + ", ".join(f"`{controls.COMMANDS[a]}`" for a in info["actions"]))
    if info["items"]:
        lines.append("")
        lines.extend(item_table(info["items"]))
    return lines


def containment(value: Containment | None) -> str:
    if not value:
        return "unknown (not journaled yet)"
    if value["mode"] == "cgroup":
        return f"cgroup {clean(value['cgroup'], 1000)}"
    return "process groups and the run's tag (no cgroup)"


def pending_stop(stop: PendingStop) -> str:
    """The pending stop as `runner status` says it."""
    if stop["age"] is None and stop["stop_file"]:
        return "STOP file present: a graceful stop"
    text = f"stop requested: {clean(stop['mode'])}, origin {clean(stop['origin'])}"
    if stop["age"] is not None:
        text += f", {seconds(stop['age'])} ago"
    if stop["unreadable"]:
        text += " (request file unreadable: read as graceful)"
    if stop["stop_file"]:
        text += "; STOP file present"
    return text + " (not yet taken by the engine)"


def pending_stop_phrase(stop: PendingStop) -> str:
    """The pending stop in a few words, for the dashboard: "hard (dashboard)"."""
    return f"{stop['mode']} ({'unreadable' if stop['unreadable'] else stop['origin']})"


def run_list(rows: Sequence[RunRow], now: float) -> list[str]:
    """`runner list`: one row per run; a damaged run's row names what is damaged."""
    from runner.views.run_list import age

    # The directory's name beside the id where one differs (a run made with --run-dir
    # under the base), as the dashboard shows runs by their directory.
    dirs = any(os.path.basename(r["run_dir"]) != r["run_id"] for r in rows)
    body = []
    for r in rows:
        items = (
            "-"
            if r["items"] is None
            else f"{r['done']}/{r['items']} done" + (f", {r['failed']} failed" if r["failed"] else "")
        )
        live = {True: "live", False: "", None: "?"}[r["live"]]
        note = "damaged: " + "; ".join(r["damaged"]) if r["damaged"] else ""
        if r["copy_of"] is not None:
            note = "copy" + (f" of {r['copy_of']}" if r["copy_of"] else "") + (f"; {note}" if note else "")
        if r["orphaned_cgroup"]:
            note += ("; " if note else "") + f"cgroup left: {r['orphaned_cgroup']} (`runner stop` or resume removes it)"
        status = {"held": "paused", "asked": "pause asked"}.get(r.get("pause") or "", r["status"])
        line = [r["run_id"], status, live, r["attempt"] or "-", items, seconds(age(r, now)) + " ago", note]
        body.append([r["run_id"], clean(os.path.basename(r["run_dir"]), 60), *line[1:]] if dirs else line)
    head = ["run", "status", "engine", "attempt", "items", "age", ""]
    return table(["run", "directory", *head[1:]] if dirs else head, body)
