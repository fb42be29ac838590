"""The words a person reads of a run, each said once: a sentence for every status and
for every stop (who asked it, how), the held pause, and the kind of stop under way.
`runner status`, the foreground's live line and the web dashboard all say these, so
that none of them can word the same run otherwise ("stopped by forced" was the
journal's own word for a stop a stopper recorded).

Pure functions of what was already read (the status model, a row of `runner list`, a
run-stop record): nothing here reads a file or a clock.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from runner.errors import printable

if TYPE_CHECKING:
    from runner.views.schema import StopRecord

STOP_STRENGTH = {"graceful": 1, "hard": 2, "now": 3}
"""The kinds of stop, weakest first: a stop under way can be escalated to a stronger one
(views/controls.py)."""


def seconds(value: float | None) -> str:
    """1.2 s, 42 s, 3 min 05 s, 2 h 03 min."""
    if value is None or not math.isfinite(value):
        return "-"
    if value < 10:
        return f"{value:.1f} s"
    whole = int(value)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60:02d} min"
    return f"{whole // 86400} d {whole % 86400 // 3600:02d} h"


def clean(value: object, limit: int = 200) -> str:
    """One printable line of at most `limit` characters (names and output lines come
    from the run directory and the run's commands: untrusted)."""
    return printable(value, limit)


def stopped(record: StopRecord | None, recorded_origin: str | None = None) -> str:
    """How a stopped run was stopped, from its run-stop record (origin, mode, forced,
    fallback); without one, from the origin state.json recorded."""
    origin: str | None
    mode: str | None
    kind: str | None = None
    known = False  # the record says which command asked, if any (engines since issue 42)
    if record is None:
        origin, mode, forced, fallback = recorded_origin, "hard", recorded_origin == "forced", False
    else:
        origin, mode, forced, fallback = record["origin"], record["mode"], record["forced"], record["fallback"]
        kind = record.get("kind")
        known = record.get("kind_known") is True
    killed = "its engine did not end within the grace and was killed"
    if origin == "dashboard":
        if mode == "graceful":
            return "stopped gracefully from the dashboard (Stop gracefully)"
        if forced and fallback:
            return f"stopped from the dashboard (Stop): {killed}"
        if forced:
            return "stopped from the dashboard (Stop now)"
        return "stopped from the dashboard"
    if origin == "forced":
        if fallback:
            return f"stopped with `runner stop`: {killed}"
        # A stopper recorded it without a fallback: `--now`, or a plain stop that found
        # the engine already dead; the record's kind tells them apart (a record of an
        # older runner has none).
        if kind == "now":
            return "stopped with `runner stop --now`"
        if kind == "hard":
            return "stopped with `runner stop`, after its engine had died"
        return "stopped by `runner stop --now`, or by a `runner stop` after its engine had died"
    command = {"hard": "`runner stop`", "now": "`runner stop --now`"}.get(kind or "")
    if origin == "signal":
        if command is not None:
            return f"stopped with {command}"  # ablate: status-names-the-command
        if known:
            return "stopped by SIGTERM (or SIGHUP) to its engine or to its `runner run`"
        return "stopped by a signal to its engine (`runner stop`, `runner stop --now`, or SIGTERM)"
    if origin == "file":
        if mode == "graceful":
            if kind == "graceful":
                return "stopped gracefully with `runner stop --graceful`"
            if known:
                return "stopped gracefully by the STOP file"
            return "stopped gracefully with `runner stop --graceful` or the STOP file"
        return f"stopped with {command or '`runner stop`'} (through its request file)"
    if origin == "ctrl-c":
        return "stopped with Ctrl-C in the terminal of `runner run`"
    if origin == "vanished":
        return "stopped by its engine: its run directory was removed"
    if origin == "disk":
        return "stopped by its engine: the disk refused a write (full or read-only)"
    if origin is None:
        return "stopped"
    return f"stopped (who asked cannot be read: {printable(origin, 40)})"


def stopping(kind: str | None) -> str:
    """A stop under way, by its kind (STOP_STRENGTH)."""
    if kind == "graceful":
        return "stopping gracefully: the phase in flight completes, then the run stops"
    if kind == "now":
        return "stopping now: every process of the run is being killed"
    return "stopping"


def clock(t: float) -> str:
    """A moment of today as people read it: 14:03:07 (local time)."""
    try:
        return time.strftime("%H:%M:%S", time.localtime(t))
    except (OverflowError, OSError, ValueError):
        return "--:--:--"


def paused(since: float | None, waiting: str | None, position: tuple[int, int] | None, *, within: bool = False) -> str:
    """A held pause: since when, and what the run does next once the PAUSE file is gone
    (`within`: the item it held in, whose next phase comes next). No phase runs (and no
    phase clock counts) while it holds."""
    text = "paused"
    if since is not None:
        text += f" since {clock(since)}"
    if waiting is not None:
        where = f" ({position[0]}/{position[1]})" if position else ""
        before = "the next phase of item" if within else "item"
        text += f", waiting before {before} {clean(waiting, 200)}{where}"
    else:
        text += ", waiting before the end of the run"
    return text


def status(
    word: str,
    *,
    stop: StopRecord | None = None,
    stop_origin: str | None = None,
    done: int | None = None,
    failed: int | None = None,
    total: int | None = None,
    stopping_kind: str | None = None,
    recorded: str | None = None,
) -> str:
    """The run's status as one sentence: `word` (status.run_status's, or "vanished",
    "gone") said for people."""
    if (stopping_kind is not None and word == "running") or word == "stopping":
        return stopping(stopping_kind)
    if word == "stopped":
        return stopped(stop, stop_origin)
    if word == "completed":
        return f"completed: {total} item{'s' if total != 1 else ''} done" if total else "completed"
    if word == "failed":
        if failed is not None and total:
            return f"failed: {failed} of {total} item{'s' if total != 1 else ''} failed"
        return "failed"
    if word == "crashed":
        return "crashed: its engine died without recording an end (`runner resume` continues it)"
    if word == "copy":
        return f"a copy of a run {recorded} when copied (read-only)" if recorded else "a copy of a run (read-only)"
    if word == "starting":
        return "starting: its engine has not written its state yet"
    if word == "unknown":
        return "unknown: its state cannot be read"
    if word == "vanished":
        return "its directory was removed while its engine runs (`runner stop --all` stops it)"
    if word == "gone":
        return "its run directory is gone (removed while shown)"
    return printable(word, 40)
