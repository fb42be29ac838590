"""What the page shows of every run, recomputed for each poll (at most every DASHBOARD_MIN_AGE).

Each run is read with `lifecycle.status_of`, the code `runner status` uses, plus the tail
of its journal and its PAUSE file. Reading one run never fails the page: whatever it
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
from runner.control import lifecycle
from runner.dashboard.actions import Actions
from runner.dashboard.runs import Base, Entry
from runner.errors import printable
from runner.events import Event
from runner.files import journal, stop_request, untrusted
from runner.files.rundir import RunDir
from runner.proc import identity

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
        """The page's data as JSON bytes, shared by polls less than DASHBOARD_MIN_AGE apart."""
        with self._lock:
            now = time.monotonic()
            if self._last is not None and now - self._last[0] < defaults.DASHBOARD_MIN_AGE:
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
            if now - self._gone.setdefault(name, now) < defaults.DASHBOARD_GONE_SHOWN:
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
    return {
        "name": name,
        "error": printable(error, defaults.DASHBOARD_LINE_CHARS),
        "buttons": dict.fromkeys(_BUTTONS, False),
    }


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
    rd = entry.rd
    assert rd is not None
    info: dict[str, Any] = dict(lifecycle.status_of(rd))
    tail = _journal_tail(rd.journal)
    stops = [r for r in tail if r["event"] == Event.RUN_STOP]
    live = info.get("live")
    status = str(info.get("status"))
    copy = info.get("copy")
    if live is False and status == "running":
        status = "crashed"  # the engine died without recording an end; resume continues it
    if copy is not None:
        status = "copy"  # read-only: no button acts on it (the CLI's own code refuses it too)
    items = _items(info.get("items"))
    paused = bool(info["paused"]) if "paused" in info else stop_request.pause_file(rd)
    pending = info["pending_stop"] if "pending_stop" in info else _pending_stop(rd)
    resumable = live is False and copy is None and (bool(info.get("stopped")) or status in ("stopped", "crashed"))
    return {
        "name": entry.name,
        "error": None,
        "run_id": info.get("run_id"),
        "status": status,
        "attempt": info.get("attempt"),
        "live": live,
        "engine_pid": info.get("engine_pid"),
        "current_item": info.get("current_item"),
        "phase": info.get("phase"),
        # The journal's run-stop names who asked (a stopper's own record says `forced`
        # in state.json, and `dashboard` in the journal when the dashboard asked).
        "stop_origin": _text(stops[-1].get("origin")) if stops else info.get("stop_origin"),
        "children": [_child(c) for c in info.get("children") or []],
        "items": items,
        "done": sum(1 for i in items if i.get("status") == "done"),
        "failed": sum(1 for i in items if i.get("status") == "failed"),
        "total": len(items),
        "paused": paused,
        "pending_stop": _summary(pending) if pending else None,
        "containment": _summary(info["containment"]) if info.get("containment") else None,
        "damaged": [printable(d, defaults.DASHBOARD_LINE_CHARS) for d in info.get("damaged") or []],
        "copy": printable(copy, defaults.DASHBOARD_LINE_CHARS) if copy is not None else None,
        "journal": [_record_line(r) for r in tail],
        "buttons": {
            "stop": live is not False,  # a run whose lock is damaged is still stoppable
            "pause": live is True and not paused,
            "unpause": live is True and paused,
            "resume": resumable,
        },
    }


def _items(raw: object) -> list[dict[str, Any]]:
    """Today's {item: status}, or a list of {item, status, attempts, duration, reason}."""
    if isinstance(raw, dict):
        return [{"item": str(k), "status": str(v)} for k, v in raw.items()]
    if isinstance(raw, list):
        return [{k: _text(v) if isinstance(v, str) else v for k, v in i.items()} for i in raw if isinstance(i, dict)]
    return []


def _child(child: Any) -> dict[str, Any]:
    if not isinstance(child, dict):
        return {"pid": None, "name": _text(child)}
    out = {"pid": child.get("pid"), "name": _text(child.get("name")) if child.get("name") is not None else None}
    runtime = child.get("runtime")
    if isinstance(runtime, (int, float)) and not isinstance(runtime, bool):
        out["runtime"] = float(runtime)
    elif isinstance(child.get("pid"), int):
        out["runtime"] = _runtime(child["pid"])
    return out


def _runtime(pid: int) -> float | None:
    """Seconds since the process started (identity.age); None once it is gone."""
    ticks = identity.start_ticks(pid)
    return None if ticks is None else identity.age(ticks)


def _pending_stop(rd: RunDir) -> str | None:
    request = stop_request.peek(rd)
    if request is None:
        return None
    return f"{request.mode.label} ({'unreadable' if request.unreadable else request.origin.value})"


def _summary(value: object) -> str:
    """A pending stop or a containment as one phrase: "hard (dashboard)", "cgroup"."""
    if isinstance(value, dict) and "mode" in value:
        origin = value.get("origin")
        return _text(f"{value['mode']} ({origin})" if origin else str(value["mode"]))
    return _text(value)


def _text(value: object) -> str:
    return printable(
        value if isinstance(value, str) else json.dumps(value, default=str), defaults.DASHBOARD_FIELD_CHARS
    )


def _journal_tail(path: os.PathLike[str] | str) -> list[dict[str, Any]]:
    """The last records of the journal. Only the file's last
    DASHBOARD_JOURNAL_TAIL_BYTES are read (a journal grows with the run), through untrusted.py."""
    try:
        fd = untrusted.open_regular(path)
    except FileNotFoundError:
        return []
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - defaults.DASHBOARD_JOURNAL_TAIL_BYTES)
        data = os.pread(fd, size - start, start)
    finally:
        os.close(fd)
    lines = data.split(b"\n")
    if start > 0:
        lines = lines[1:]  # cut by the window
    records = [r for r in (journal.parse_line(raw, path) for raw in lines) if r is not None]
    return records[-defaults.DASHBOARD_JOURNAL_TAIL_RECORDS :]


def _record_line(record: dict[str, Any]) -> str:
    t = record.get("t")
    try:
        when = time.strftime("%H:%M:%S", time.localtime(t)) if isinstance(t, (int, float)) else "--:--:--"
    except (OverflowError, OSError, ValueError):
        when = "--:--:--"
    fields = " ".join(
        f"{k}={_text(v)}" for k, v in record.items() if k not in ("event", "t") and v not in (None, [], {})
    )
    return printable(f"{when} {record['event']} {fields}".rstrip(), defaults.DASHBOARD_LINE_CHARS)
