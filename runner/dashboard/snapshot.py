"""What the page shows of every run, looked at for each poll (at most every defaults.DASHBOARD_MIN_AGE) and
read again only where something changed.

Each run is read with the status model (`views/status.py`: `status_of`, the code
`runner status --json` prints), plus the tail of its journal. Reading one run never fails the page: whatever it
raises becomes that run's error row, and a run that disappears while shown stays on the
page as an error row. A run whose files have not changed is not read again (a live one
at least every defaults.DASHBOARD_LIVE_MAX_AGE): `status_of` of a dead run scans every process for the
run's tag, which fifty runs on a page must not pay four times a second, and a poll that
finds nothing changed is answered 304 (Snapshots.answer).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import threading
import time
from typing import Any

from runner import defaults
from runner.dashboard.actions import Actions
from runner.dashboard.runs import Base, Entry
from runner.errors import printable
from runner.files import journal, untrusted
from runner.files.rundir import RunDir
from runner.views import render, status
from runner.views.schema import ChildStatus, ItemRow, RunStatus

_WATCHED = (
    *("state.json", "journal.jsonl", "engine.json", "children", "lock", "run-id", "cgroup", "spec.toml"),
    *("stop-request.json", "PAUSE", "STOP"),
)
_BUTTONS = ("stop", "pause", "unpause", "resume")


class Snapshots:
    """The page's data, computed only where something changed: each run's row is kept
    with the fingerprint of its files and read again only when it changes (a live run
    also when its engine's lock changes hands, and at least every defaults.DASHBOARD_LIVE_MAX_AGE); each
    answer carries an ETag over the rows' digests, so that a poll that finds nothing
    changed is answered 304 without building or sending the body. A live run's clocks
    (a child's runtime, the running item's duration) tick on the page between reads
    (from the row's `at` and the answer's `now`): the digest leaves them out."""

    def __init__(self, base: Base, actions: Actions) -> None:
        self.base, self.actions = base, actions
        self._lock = threading.Lock()
        self._cache: dict[str, _Cached] = {}
        self._fragments: dict[str, tuple[tuple[Any, ...], bytes]] = {}
        self._seen: set[str] = set()
        self._gone: dict[str, float] = {}  # name -> when it was first missed
        self._last: tuple[float, str, list[tuple[_Cached, Any]], bool] | None = None

    def json(self) -> bytes:
        """The page's data as JSON bytes, shared by polls less than defaults.DASHBOARD_MIN_AGE apart."""
        body = self.answer(None)[1]
        assert body is not None
        return body

    def answer(self, if_none_match: str | None) -> tuple[str, bytes | None]:
        """(ETag, body); the body is None when `if_none_match` is the current ETag."""
        with self._lock:
            if self._last is None or time.monotonic() - self._last[0] >= defaults.DASHBOARD_MIN_AGE:
                rows, exists = self._compute()
                shown = [(c, self.actions.last(c.name)) for c in rows]
                digest = hashlib.blake2b(str(exists).encode(), digest_size=12)
                for cached, action in shown:
                    digest.update(cached.digest)
                    digest.update(json.dumps(action, sort_keys=True, default=str).encode())
                self._last = (time.monotonic(), f'"{digest.hexdigest()}"', shown, exists)
            _, etag, shown, exists = self._last
            if if_none_match is not None and if_none_match == etag:  # ablate: dashboard-304
                return etag, None
            head = {
                "base": str(self.base.path),
                "base_exists": exists,
                "poll_ms": round(defaults.DASHBOARD_POLL * 1000),
                "now": round(time.time(), 3),
            }
            runs = b",".join(self._fragment(c, action) for c, action in shown)
            return etag, json.dumps(head, separators=(",", ":")).encode()[:-1] + b',"runs":[' + runs + b"]}"

    def _fragment(self, cached: _Cached, action: dict[str, Any] | None) -> bytes:
        """The row's JSON with its action and `stopping`, kept while neither changed."""
        key = (cached.version, json.dumps(action, sort_keys=True, default=str))
        kept = self._fragments.get(cached.name)
        if kept is not None and kept[0] == key:
            return kept[1]
        out = dict(cached.row, action=action)
        if not cached.row.get("error"):
            out["stopping"] = _stopping(cached.row, action)
        fragment = json.dumps(out, default=str, separators=(",", ":")).encode()
        self._fragments[cached.name] = (key, fragment)
        return fragment

    def _compute(self) -> tuple[list[_Cached], bool]:
        entries = self.base.entries()
        names = {e.name for e in entries}
        rows = [self._row(e) for e in entries]
        # A run removed while shown stays on the page for a while, said to be gone.
        now = time.monotonic()
        for name in sorted(self._seen - names):
            kept = self._cache.get(name)
            if now - self._gone.setdefault(name, now) < defaults.DASHBOARD_GONE_SHOWN:
                if kept is None or kept.stamp != ("gone",):
                    kept = self._cache[name] = _Cached(name, ("gone",), None, _gone_row(name))
                rows.append(kept)
            else:
                self._seen.discard(name)
                self._cache.pop(name, None)
                self._fragments.pop(name, None)
                del self._gone[name]
        for name in names:
            self._gone.pop(name, None)
        self._seen |= names
        return rows, self.base.path.is_dir()

    def _row(self, entry: Entry) -> _Cached:
        kept = self._cache.get(entry.name)
        if entry.rd is None:
            stamp: tuple[Any, ...] = ("error", entry.error)
            if kept is None or kept.stamp != stamp:
                kept = self._cache[entry.name] = _Cached(
                    entry.name, stamp, None, _error_row(entry.name, entry.error or "not a run")
                )
            return kept
        try:
            stamp = _fingerprint(entry.rd.path)
            if kept is not None and kept.stamp == stamp:
                if kept.live is False and kept.row.get("live") is False:
                    return kept  # a dead run whose files are unchanged: nothing to read
                if (
                    time.monotonic() - kept.read_at < defaults.DASHBOARD_LIVE_MAX_AGE
                    and _is_live(entry.rd) == kept.live
                ):
                    return kept
            live = _is_live(entry.rd)
            kept = self._cache[entry.name] = _Cached(entry.name, stamp, live, _run_row(entry))
            return kept
        except Exception as exc:  # one unreadable run is one error row, never a broken page
            self._cache.pop(entry.name, None)
            error = _error_row(entry.name, f"cannot be read: {type(exc).__name__}: {exc}")
            return _Cached(entry.name, ("raised",), None, error)


_versions = itertools.count()


class _Cached:
    """A row as read, with what it was read from and its digest (without its clocks)."""

    __slots__ = ("name", "stamp", "live", "row", "read_at", "version", "digest")

    def __init__(self, name: str, stamp: tuple[Any, ...], live: bool | None, row: dict[str, Any]) -> None:
        self.name, self.stamp, self.live, self.row = name, stamp, live, row
        self.read_at = time.monotonic()
        self.version = next(_versions)
        if row.get("live"):
            row["at"] = round(time.time(), 3)
        self.digest = hashlib.blake2b(
            json.dumps(_without_clocks(row), sort_keys=True, default=str).encode(), digest_size=12
        ).digest()


def _without_clocks(row: dict[str, Any]) -> dict[str, Any]:
    """The row without its ticking clocks (a child's runtime, the running item's
    duration): equal for two reads of a run in which nothing but time has passed.
    Whatever else ends or starts a clock (a phase, an item, a child) changes the row."""
    if not isinstance(row.get("at"), (int, float)):
        return row
    out = dict(row)
    out.pop("at")
    out["children"] = [dict(c, runtime=None) for c in row.get("children") or [] if isinstance(c, dict)]
    out["items"] = [dict(i, duration=None) if i.get("status") == "running" else i for i in row.get("items") or []]
    return out


def _is_live(rd: RunDir) -> bool | None:
    try:
        return rd.is_live()
    except Exception:
        return None


def _stopping(row: dict[str, Any], action: dict[str, Any] | None) -> bool:
    """A stop was asked for and the run has not stopped yet: the dashboard's own stop
    button still at work, a request or the STOP file waiting, or the engine's own say."""
    if row.get("live") is False or row.get("status") != "running":
        return False
    if action is not None and action.get("state") == "running" and str(action.get("action")).startswith("stop"):
        return True
    return bool(row.get("pending_stop")) or bool(row.get("engine_stopping"))


def _gone_row(name: str) -> dict[str, Any]:
    return _error_row(name, "the run directory is gone (removed while shown)")


def _error_row(name: str, error: str) -> dict[str, Any]:
    return {
        "name": name,
        "error": printable(error, defaults.DASHBOARD_LINE_CHARS),
        "buttons": dict.fromkeys(_BUTTONS, False),
    }


def _fingerprint(path: os.PathLike[str] | str) -> tuple[Any, ...]:
    """What changes when anything a run shows changes, but time and its engine's lock:
    each watched file's (inode, size, mtime, mode); the journal and state.json only
    grow, so their size is the offset reached."""
    marks: list[Any] = []
    prefix = f"{os.fspath(path)}/"
    for name in _WATCHED:
        try:
            st = os.lstat(prefix + name)
            marks.append((st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode))  # ablate: dashboard-fingerprint
        except OSError:
            marks.append(None)
    return tuple(marks)


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
        "current_item": printable(info["current_item"], defaults.DASHBOARD_ITEM_CHARS)
        if info["current_item"]
        else None,
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
        # The status model's own "a stop is under way" (_stopping adds the dashboard's click).
        "engine_stopping": info["stopping"],
        "pending_stop": _text(render.pending_stop_phrase(pending)) if pending else None,
        "containment": _text(info["containment"]["mode"]) if info["containment"] else None,
        "damaged": [printable(d, defaults.DASHBOARD_LINE_CHARS) for d in info["damaged"]],
        "copy": printable(copy, defaults.DASHBOARD_LINE_CHARS) if copy is not None else None,
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
    out["item"] = printable(row["item"], defaults.DASHBOARD_ITEM_CHARS)
    out["reason"] = _text(row["reason"]) if row["reason"] is not None else None
    return out


def _child(child: ChildStatus) -> dict[str, Any]:
    name = child["name"]
    return {"pid": child["pid"], "name": _text(name) if name is not None else None, "runtime": child["runtime"]}


def _text(value: object) -> str:
    return printable(
        value if isinstance(value, str) else json.dumps(value, default=str), defaults.DASHBOARD_FIELD_CHARS
    )


def _journal_tail(path: os.PathLike[str] | str) -> list[dict[str, Any]]:
    """The last records of the journal. Only the file's last
    defaults.DASHBOARD_JOURNAL_TAIL_BYTES are read (a journal grows with the run), through untrusted.py."""
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
