"""What the page shows of every run, recomputed for each poll (at most every MIN_AGE).

Each run is read with the status model (`views/status.py`: `status_of`, the code
`runner status --json` prints), plus the tail of its journal. Reading one run never fails the page: whatever it
raises becomes that run's error row, and a run that disappears while shown stays on the
page as an error row. A finished run whose files have not changed is not read again:
`status_of` of a dead run scans every process for the run's tag, which fifty runs on a
page must not pay four times a second.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from runner import defaults
from runner.dashboard.actions import Actions
from runner.dashboard.runs import Base, Entry
from runner.errors import printable
from runner.files import untrusted
from runner.files.rundir import RunDir
from runner.views import render, status
from runner.views.schema import ChildStatus, ItemRow, RunStatus

MIN_AGE = 0.1
"""Polls closer together than this (several pages open) share one snapshot."""
GONE_SHOWN = 300.0
"""How long a run removed while shown stays on the page as an error row."""
JOURNAL_TAIL_BYTES = 16 * 1024
JOURNAL_TAIL_RECORDS = 8
FIELD_CHARS = 80
LINE_CHARS = 240
_WATCHED = (
    *("state.json", "journal.jsonl", "engine.json", "children", "lock", "run-id", "cgroup", "spec.toml"),
    *("stop-request.json", "PAUSE", "STOP"),
)
_BUTTONS = ("stop", "pause", "unpause", "resume")


class Snapshots:
    def __init__(self, base: Base, actions: Actions) -> None:
        self.base, self.actions = base, actions
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}
        self._seen: set[str] = set()
        self._gone: dict[str, float] = {}  # name -> when it was first missed
        self._last: tuple[float, bytes] | None = None

    def json(self) -> bytes:
        """The page's data as JSON bytes, shared by polls less than MIN_AGE apart."""
        with self._lock:
            now = time.monotonic()
            if self._last is not None and now - self._last[0] < MIN_AGE:
                return self._last[1]
            body = json.dumps(self._compute(), default=str, separators=(",", ":")).encode()
            self._last = (time.monotonic(), body)
            return body

    def _compute(self) -> dict[str, Any]:
        entries = self.base.entries()
        names = {e.name for e in entries}
        rows = [self._row(e) for e in entries]
        # A run removed while shown stays on the page for a while, said to be gone.
        now = time.monotonic()
        for name in sorted(self._seen - names):
            self._cache.pop(name, None)
            if now - self._gone.setdefault(name, now) < GONE_SHOWN:
                rows.append(_error_row(name, "the run directory is gone (removed while shown)"))
            else:
                self._seen.discard(name)
                del self._gone[name]
        for name in names:
            self._gone.pop(name, None)
        self._seen |= names
        for row in rows:
            row["action"] = self.actions.last(row["name"])
        return {
            "base": str(self.base.path),
            "base_exists": self.base.path.is_dir(),
            "poll_ms": round(defaults.DASHBOARD_POLL * 1000),
            "runs": rows,
        }

    def _row(self, entry: Entry) -> dict[str, Any]:
        if entry.rd is None:
            return _error_row(entry.name, entry.error or "not a run")
        try:
            stamp = _fingerprint(entry.rd.path)
            cached = self._cache.get(entry.name)
            if cached is not None and cached[0] == stamp:
                return dict(cached[1])
            row = _run_row(entry)
            # Kept only for a run that was dead before and after the read: an engine
            # that has let go of its lock may still be exiting (status_of then says live).
            if stamp[-1] is False and row["live"] is False:
                self._cache[entry.name] = (stamp, row)
            else:
                self._cache.pop(entry.name, None)
            return dict(row)
        except Exception as exc:  # one unreadable run is one error row, never a broken page
            return _error_row(entry.name, f"cannot be read: {type(exc).__name__}: {exc}")


def _error_row(name: str, error: str) -> dict[str, Any]:
    return {"name": name, "error": printable(error, LINE_CHARS), "buttons": dict.fromkeys(_BUTTONS, False)}


def _fingerprint(path: os.PathLike[str] | str) -> tuple[Any, ...]:
    """What changes when anything a dead run shows changes; the last element is whether
    an engine holds the lock (a live run is read afresh every time)."""
    marks: list[Any] = []
    for name in _WATCHED:
        try:
            st = os.lstat(os.path.join(path, name))
            marks.append((st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode))
        except OSError:
            marks.append(None)
    try:
        live: bool | None = RunDir(path).is_live()
    except Exception:
        live = None
    return (*marks, live)


def _run_row(entry: Entry) -> dict[str, Any]:
    """One run's row: the status model (views/status.py) as `runner status --json` has
    it, its text made safe for the page, and the buttons it offers."""
    rd = entry.rd
    assert rd is not None
    info: RunStatus = status.status_of(rd)
    tail = _journal_tail(rd.journal)
    stops = [r for r in tail if r["event"] == "run-stop"]
    live, copy, pending = info["live"], info["copy"], info["pending_stop"]
    return {
        "name": entry.name,
        "error": None,
        "run_id": info["run_id"],
        "status": info["status"],
        "stopping": info["stopping"],
        "attempt": info["attempt"],
        "live": live,
        "engine_pid": info["engine_pid"],
        "current_item": info["current_item"],
        "phase": info["phase"],
        # The journal's run-stop names who asked (a stopper's own record says `forced`
        # in state.json, and `dashboard` in the journal when the dashboard asked).
        "stop_origin": _text(stops[-1].get("origin")) if stops else info["stop_origin"],
        "children": [_child(c) for c in info["children"]],
        "items": [_item(i) for i in info["items"]],
        "done": info["done"],
        "failed": info["failed"],
        "total": len(info["items"]),
        "paused": info["paused"],
        "pause_held": info["pause_held"],
        "pending_stop": _text(render.pending_stop_phrase(pending)) if pending else None,
        "containment": _text(info["containment"]["mode"]) if info["containment"] else None,
        "damaged": [printable(d, LINE_CHARS) for d in info["damaged"]],
        "copy": printable(copy, LINE_CHARS) if copy is not None else None,
        "journal": [_record_line(r) for r in tail],
        "buttons": {
            "stop": live is not False and copy is None,  # a run whose lock is damaged is still stoppable
            "pause": live is True and not info["paused"],
            "unpause": live is True and info["paused"],
            "resume": info["resumable"],
        },
    }


def _item(row: ItemRow) -> dict[str, Any]:
    out: dict[str, Any] = dict(row)
    out["item"] = _text(row["item"])
    out["reason"] = _text(row["reason"]) if row["reason"] is not None else None
    return out


def _child(child: ChildStatus) -> dict[str, Any]:
    name = child["name"]
    return {"pid": child["pid"], "name": _text(name) if name is not None else None, "runtime": child["runtime"]}


def _text(value: object) -> str:
    return printable(value if isinstance(value, str) else json.dumps(value, default=str), FIELD_CHARS)


def _journal_tail(path: os.PathLike[str] | str) -> list[dict[str, Any]]:
    """The last records of the journal. Only the file's last
    JOURNAL_TAIL_BYTES are read (a journal grows with the run), through untrusted.py."""
    try:
        fd = untrusted.open_regular(path)
    except FileNotFoundError:
        return []
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - JOURNAL_TAIL_BYTES)
        data = os.pread(fd, size - start, start)
    finally:
        os.close(fd)
    lines = data.split(b"\n")
    if start > 0:
        lines = lines[1:]  # cut by the window
    out: list[dict[str, Any]] = []
    for raw in lines:
        if not raw.strip():
            continue
        try:
            record = untrusted.parse_json(raw, path)
        except Exception:
            continue  # a torn line, as journal.read skips it
        if isinstance(record, dict) and isinstance(record.get("event"), str):
            out.append(record)
    return out[-JOURNAL_TAIL_RECORDS:]


def _record_line(record: dict[str, Any]) -> str:
    t = record.get("t")
    try:
        when = time.strftime("%H:%M:%S", time.localtime(t)) if isinstance(t, (int, float)) else "--:--:--"
    except (OverflowError, OSError, ValueError):
        when = "--:--:--"
    fields = " ".join(
        f"{k}={_text(v)}" for k, v in record.items() if k not in ("event", "t") and v not in (None, [], {})
    )
    return printable(f"{when} {record['event']} {fields}".rstrip(), LINE_CHARS)
