"""What the page shows of every run, looked at for each poll (at most every
defaults.DASHBOARD_MIN_AGE) and read again only where something changed.

Two levels, so that the cost of a poll stays flat in the number of runs and the size of
each (issue 32: the first poll of 500 runs took 3.4 s when every run was read whole):

- a **row** per run, what the compact table shows (status and its sentence, items done
  of all, the current item and phase, age, the buttons). A finished run's row is read
  cheaply, the way `runner list` reads it (views/run_list.row: its state, its lock, its
  run-id; no process, no spec, no fold of its journal), plus its journal's last record
  for how it was stopped; a live run's from the status model (`status.status_of`, what
  `runner status --json` prints), with a fold cache so only new journal records are read;
- the **details** of the runs whose card is open on the page (`?open=` names them): the
  item rows, the children, the containment, the damage and the journal's tail, from the
  status model, read only while the card is open.

Reading one run never fails the page: whatever it raises becomes that run's error row,
and a run that disappears while shown stays on the page as a `gone` row. A row whose
files have not changed is not read again (a live one at least every
defaults.DASHBOARD_LIVE_MAX_AGE). Each answer carries an ETag over what it shows, so a
poll that finds nothing changed is answered 304; and an answer's body is built once per
ETag and kept, so that polling allocates nothing per poll (the server's memory rose
with every poll at 500 runs).

What changed is all that a page is sent (issue 42: a whole answer at 500 runs is some
240 KB, and with runs live every poll was one): each row, each open card's details and
the list of names carry the sequence number of their last change (a change of what the
digest covers, never a ticking clock), and an answer carries a cursor, this server's
epoch and the last sequence number given. A poll that sends its cursor back
(`?since=`) is answered with the rows and details changed after it, and the names only
when they changed (a run came or went); a cursor of another server, or none, gets the
whole answer (`"full": true`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import secrets
import threading
import time
from typing import Any
from urllib.parse import unquote

from runner import defaults
from runner.dashboard.actions import Actions
from runner.dashboard.runs import Base, Entry
from runner.errors import printable
from runner.files import journal, untrusted
from runner.files.rundir import RUN_ID_SHAPE, RunDir
from runner.files.state import StateStore
from runner.views import controls, overview, render, run_list, status, words
from runner.views.schema import ChildStatus, ItemRow, RunStatus

_DEAD_WATCHED = ("", "state.json", "journal.jsonl", "lock")
"""What changes when a finished run changes: the directory itself (a file created,
removed or replaced by rename: a resume's, a stop request, PAUSE, STOP), its state and
journal (written in place) and its lock (an engine that starts writes its pid there)."""
_WATCHED = (
    *("engine.json", "children", "run-id", "cgroup", "spec.toml"),
    *("stop-request.json", "PAUSE", "STOP", "dir-identity"),
)
"""And what a live run's row also shows."""
OPEN_MAX = 100
"""At most this many runs' details in one answer (the cards a page has open)."""
COMPACT_AFTER = 6
"""The page shows one compact row per run (cards opened on demand) past this many runs."""


class Snapshots:
    """The page's data, computed only where something changed: each run's row is kept
    with the fingerprint of its files and read again only when it changes (a live run
    also when its engine's lock changes hands, and at least every
    defaults.DASHBOARD_LIVE_MAX_AGE); each answer carries an ETag over the rows' digests,
    so that a poll that finds nothing changed is answered 304 without building or sending
    the body. A live run's clocks (the phase's, a child's runtime, the running item's
    duration) tick on the page between reads (from the row's `at` and the answer's
    X-Runner-Now header): the digest leaves them out."""

    def __init__(self, base: Base, actions: Actions) -> None:
        self.base, self.actions = base, actions
        self._lock = threading.Lock()
        self._cache: dict[str, _Cached] = {}
        self._details: dict[str, tuple[int, bytes, bytes]] = {}  # name -> (row version, digest, JSON)
        self._fragments: dict[str, tuple[tuple[Any, ...], bytes]] = {}
        self._folds = overview.FoldCache()
        self._seen: set[str] = set()
        self._gone: dict[str, float] = {}  # name -> when it was first missed
        # (when, the rows with their actions, base exists, their digest, rows by name)
        self._rows: tuple[float, list[tuple[_Cached, Any]], bool, Any, dict[str, _Cached], bool] | None = None
        self._body: tuple[str, bytes] | None = None  # the last answer's ETag and body
        # What changed when: the sequence number of the last change of each row (of what
        # its digest covers, and its action), of each open card's details and of the
        # list of names; a cursor names this server (its epoch) and a sequence number.
        self.epoch = secrets.token_hex(4)
        self._seq = 0
        self._row_seq: dict[str, tuple[bytes, str, int]] = {}  # name -> (digest, action key, seq)
        self._detail_seq: dict[str, tuple[bytes, int]] = {}  # name -> (digest, seq)
        self._names: tuple[tuple[str, ...], int] = ((), 0)  # the names shown and their seq

    def json(self, opened: tuple[str, ...] = ()) -> bytes:
        """The page's data as JSON bytes (what a poll without If-None-Match gets)."""
        body = self.answer(None, opened)[1]
        assert body is not None
        return body

    def answer(
        self,
        if_none_match: str | None,
        opened: tuple[str, ...] = (),
        since: str | None = None,
        new: tuple[str, ...] = (),
    ) -> tuple[str, bytes | None]:
        """(ETag, body) for a page that has the cards of `opened` open; the body is None
        when `if_none_match` is the current ETag. `since`: the cursor of the page's last
        answer, which then gets only what changed after it (and the details of the cards
        in `new`, opened since); a cursor that is not this server's gets the whole answer."""
        with self._lock:
            now = time.monotonic()
            if self._rows is None or now - self._rows[0] >= defaults.DASHBOARD_MIN_AGE:
                rows, exists = self._compute()
                # The rows and their actions, and their digest, once per look (not per poll:
                # a poll then costs what its open cards cost, whatever the number of runs).
                shown = [(c, self.actions.last(c.name)) for c in rows]
                rows_digest = hashlib.blake2b(str(exists).encode(), digest_size=12)
                live = False
                for cached, action in shown:
                    key = _action_key(action)
                    rows_digest.update(cached.digest)
                    rows_digest.update(key.encode())
                    self._mark_row(cached.name, cached.digest, key)
                    live = live or cached.live is not False or (action is not None and action.get("state") == "running")
                names = tuple(c.name for c in rows)
                if names != self._names[0]:
                    self._names = (names, self._next())
                    for name in set(self._row_seq) - set(names):
                        del self._row_seq[name]
                        self._detail_seq.pop(name, None)
                self._rows = (now, shown, exists, rows_digest, {c.name: c for c in rows}, live)
            _, shown, exists, rows_digest, by_name, live = self._rows
            want = [n for n in dict.fromkeys(opened) if n in by_name][:OPEN_MAX]
            digest = rows_digest.copy()
            details = [(name, self._detail(by_name[name])) for name in want]
            for name, (detail_digest, _) in details:
                digest.update(name.encode() + b"\0" + detail_digest)
            etag = f'"{digest.hexdigest()}"'
            if if_none_match is not None and if_none_match == etag:  # ablate: dashboard-304
                return etag, None
            after = self._cursor_seq(since)
            # Once a second while nothing is live: nothing but a user's own command can
            # change then (issue 42: at most once a second).
            poll = defaults.DASHBOARD_POLL
            poll = poll if live else defaults.DASHBOARD_IDLE_POLL  # ablate: dashboard-idle-poll
            head: dict[str, Any] = {
                "full": after is None,
                "cursor": f"{self.epoch}.{self._seq}",
                "base_exists": exists,
                "poll_ms": round(poll * 1000),
            }
            if after is not None:  # ablate: dashboard-delta
                fresh = set(new)
                runs = b",".join(self._fragment(c, a) for c, a in shown if self._row_seq[c.name][2] > after)
                sent = [(n, body) for n, (_, body) in details if n in fresh or self._detail_seq[n][1] > after]
                if self._names[1] > after:
                    head["names"] = list(self._names[0])
                return etag, _document(head, runs, sent)
            if self._body is not None and self._body[0] == etag:
                return etag, self._body[1]
            head.update(
                base=str(self.base.path),
                compact_after=COMPACT_AFTER,
                escalations=controls.ESCALATIONS,
                labels=controls.LABELS,
            )
            runs = b",".join(self._fragment(c, action) for c, action in shown)
            body = _document(head, runs, [(n, body) for n, (_, body) in details])
            self._body = (etag, body)  # ablate: dashboard-body-kept
            return etag, body

    def _next(self) -> int:
        self._seq += 1
        return self._seq

    def _mark_row(self, name: str, digest: bytes, action_key: str) -> None:
        """A row's sequence number moves on when what it shows changes (not its clocks)."""
        kept = self._row_seq.get(name)
        if kept is None or kept[0] != digest or kept[1] != action_key:
            self._row_seq[name] = (digest, action_key, self._next())

    def _cursor_seq(self, since: str | None) -> int | None:
        """The sequence number of a cursor this server gave; None for any other."""
        if since is None:
            return None
        epoch, _, seq = since.partition(".")
        if epoch != self.epoch or not seq.isdigit() or len(seq) > 18:
            return None
        value = int(seq)
        return value if value <= self._seq else None

    def _fragment(self, cached: _Cached, action: dict[str, Any] | None) -> bytes:
        """The row's JSON with its action, and the stop and buttons the dashboard's own
        action in flight adds; kept while neither changed."""
        key = (cached.version, _action_key(action))
        kept = self._fragments.get(cached.name)
        if kept is not None and kept[0] == key:
            return kept[1]
        out = dict(cached.row, action=action)
        if not cached.row.get("error"):
            kind = _stopping_kind(cached.row, action)
            out["stopping"], out["stopping_kind"] = kind is not None, kind
            if kind is not None and cached.row.get("status") == "running":
                out["words"] = words.stopping(kind)
            out["buttons"] = _buttons(
                controls.controls(
                    live=cached.row["live"],
                    copy=cached.row["copy"],
                    paused=cached.row["paused"],
                    resumable=cached.row["resumable"],
                    stopping_kind=kind,
                )
            )
        fragment = _compact(out).encode()
        self._fragments[cached.name] = (key, fragment)
        return fragment

    def _detail(self, cached: _Cached) -> tuple[bytes, bytes]:
        """(digest, JSON) of an open card's details, read again only when its row was."""
        kept = self._details.get(cached.name)
        if kept is not None and kept[0] == cached.version:
            return kept[1], kept[2]
        if cached.rd is None:
            detail: dict[str, Any] = {"items": [], "journal": [], "children": [], "damaged": []}
        else:
            try:
                # A finished run's card is read whole once (no fold kept for it).
                info = cached.info if cached.info is not None else status.status_of(cached.rd)
                detail = _details(cached.rd, info)
            except Exception as exc:  # one unreadable run is one message, never a broken page
                detail = {"items": [], "journal": [], "children": [], "damaged": [_exc_line(exc)]}
        digest = hashlib.blake2b(_sorted(_without_clocks(detail)).encode(), digest_size=12).digest()
        body = _compact(detail).encode()
        self._details[cached.name] = (cached.version, digest, body)
        seen = self._detail_seq.get(cached.name)
        if seen is None or seen[0] != digest:
            self._detail_seq[cached.name] = (digest, self._next())
        return digest, body

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
                    kept = self._cache[name] = _Cached(name, None, ("gone",), None, _gone_row(name))
                rows.append(kept)
            else:
                self._forget(name)
                del self._gone[name]
        for name in names:
            self._gone.pop(name, None)
        self._seen |= names
        return rows, self.base.path.is_dir()

    def _forget(self, name: str) -> None:
        self._folds.forget(RunDir(self.base.path / name))
        self._seen.discard(name)
        self._cache.pop(name, None)
        self._fragments.pop(name, None)
        self._details.pop(name, None)

    def _row(self, entry: Entry) -> _Cached:
        kept = self._cache.get(entry.name)
        if entry.rd is None:
            stamp: tuple[Any, ...] = ("error", entry.error)
            if kept is None or kept.stamp != stamp:
                kept = self._cache[entry.name] = _Cached(
                    entry.name, None, stamp, None, _error_row(entry.name, entry.error or "not a run")
                )
            return kept
        rd = entry.rd
        try:
            # A dead run's stamp is what changes when it changes (_DEAD_WATCHED), taken
            # before its read; a live run's also what its row shows besides, taken before
            # the status model reads it (not for every dead run: ten lstats each).
            stamp = _fingerprint(rd.path, _DEAD_WATCHED)
            if kept is not None and kept.live is False and kept.stamp[: len(stamp)] == stamp:
                if kept.row.get("status") != "stopping":  # a stopper at work ends without a write if killed
                    return kept  # a dead run whose files are unchanged: nothing to read
            if kept is not None and kept.live is not False:
                stamp += _fingerprint(rd.path, _WATCHED)
                if kept.stamp == stamp and time.monotonic() - kept.read_at < defaults.DASHBOARD_LIVE_MAX_AGE:
                    if _is_live(rd) == kept.live:
                        return kept
            cheap = run_list.row(rd)
            if cheap["live"] is False:  # ablate: dashboard-cheap-rows
                self._folds.forget(rd)  # a fold is kept for live runs only
                row, info = _finished_row(entry.name, rd, cheap), None
            else:
                if len(stamp) == len(_DEAD_WATCHED):
                    stamp += _fingerprint(rd.path, _WATCHED)
                info = status.status_of(rd, self._folds)
                row = _live_row(entry.name, info)
            kept = self._cache[entry.name] = _Cached(entry.name, rd, stamp, row["live"], row, info)
            return kept
        except Exception as exc:  # one unreadable run is one error row, never a broken page
            self._cache.pop(entry.name, None)
            self._folds.forget(rd)
            return _Cached(entry.name, rd, ("raised",), None, _error_row(entry.name, _exc_line(exc)))


def opened_names(query: str, key: str = "open") -> tuple[str, ...]:
    """The run names of `?open=a,b` (or of `key`: `new`; each of a run id's shape; at
    most OPEN_MAX)."""
    names: list[str] = []
    for part in query.split("&"):
        name, _, value = part.partition("=")
        if name == key:
            names += [n for n in unquote(value).split(",") if RUN_ID_SHAPE.fullmatch(n)]
    return tuple(names[:OPEN_MAX])


def cursor_of(query: str) -> str | None:
    """The cursor of `?since=` (at most 64 characters), or None."""
    for part in query.split("&"):
        name, _, value = part.partition("=")
        if name == "since" and 0 < len(value) <= 64:
            return unquote(value)
    return None


def _document(head: dict[str, Any], runs: bytes, details: list[tuple[str, bytes]]) -> bytes:
    """An answer's JSON: the head's keys, the rows' and the details' kept fragments."""
    opened_json = b",".join(json.dumps(name).encode() + b":" + body for name, body in details)
    return (
        json.dumps(head, separators=(",", ":")).encode()[:-1]
        + b',"runs":['
        + runs
        + b'],"details":{'
        + opened_json
        + b"}}"
    )


_versions = itertools.count()
_compact = json.JSONEncoder(default=str, separators=(",", ":")).encode
"""A row's or a card's JSON as sent. The encoders are made once: json.dumps with any
option makes one per call, and a first answer encodes two documents per run."""
_sorted = json.JSONEncoder(sort_keys=True, default=str).encode
"""What a digest is taken over (the same data, the same text, whatever its key order)."""


class _Cached:
    """A row as read, with what it was read from and its digest (without its clocks);
    for a live run, the status model it came from (its details, should its card open)."""

    __slots__ = ("name", "rd", "stamp", "live", "row", "info", "read_at", "version", "digest")

    def __init__(
        self,
        name: str,
        rd: RunDir | None,
        stamp: tuple[Any, ...],
        live: bool | None,
        row: dict[str, Any],
        info: RunStatus | None = None,
    ) -> None:
        self.name, self.rd, self.stamp, self.live, self.row, self.info = name, rd, stamp, live, row, info
        self.read_at = time.monotonic()
        self.version = next(_versions)
        if row.get("live"):
            row["at"] = round(time.time(), 3)
        self.digest = hashlib.blake2b(_sorted(_without_clocks(row)).encode(), digest_size=12).digest()


def _action_key(action: dict[str, Any] | None) -> str:
    if action is None:  # most runs': no encoder made for each of them at every look
        return "null"
    return _sorted(action)


def _exc_line(exc: Exception) -> str:
    return f"cannot be read: {type(exc).__name__}: {exc}"


def _without_clocks(row: dict[str, Any]) -> dict[str, Any]:
    """The row without its ticking clocks (a child's runtime, the running item's
    duration, the time it was read): equal for two reads of a run in which nothing but
    time has passed. Whatever else ends or starts a clock (a phase, an item, a child)
    changes the row."""
    out = dict(row)
    out.pop("at", None)
    if "children" in row:
        out["children"] = [dict(c, runtime=None) for c in row.get("children") or [] if isinstance(c, dict)]
    if "items" in row:
        out["items"] = [dict(i, duration=None) if i.get("status") == "running" else i for i in row.get("items") or []]
    return out


def _is_live(rd: RunDir) -> bool | None:
    try:
        return rd.is_live()
    except Exception:
        return None


_STOPS = {"stop": "hard", "stop-now": "now", "stop-graceful": "graceful"}


def _stopping_kind(row: dict[str, Any], action: dict[str, Any] | None) -> str | None:
    """The stop under way, the strongest of the run's own (a request or the STOP file
    waiting, the engine's say) and the dashboard's stop still at work; None once the
    run is no longer running."""
    if row.get("live") is False or row.get("status") != "running":
        return None
    kinds = [row.get("stopping_kind")]
    if action is not None and action.get("state") == "running":
        kinds.append(_STOPS.get(str(action.get("action"))))
    known = [k for k in kinds if k in words.STOP_STRENGTH]
    return max(known, key=words.STOP_STRENGTH.__getitem__) if known else None


def _buttons(of: dict[str, Any]) -> dict[str, Any]:
    """The buttons the page shows (controls.py), each with whether it may be used now and
    why not: only those offered in the run's state (a finished run's row stays short)."""
    return {action: {"enabled": c["enabled"], "why": c["why"]} for action, c in of.items() if c["shown"]}


def _gone_row(name: str) -> dict[str, Any]:
    row = _error_row(name, "the run directory is gone (removed while shown)")
    row["status"], row["words"] = "gone", words.status("gone")
    return row


def _error_row(name: str, error: str) -> dict[str, Any]:
    return {
        "name": name,
        "error": printable(error, defaults.DASHBOARD_LINE_CHARS),
        "status": "error",
        "words": printable(error, defaults.DASHBOARD_LINE_CHARS),
        "live": None,
        "buttons": {},
    }


def _fingerprint(path: os.PathLike[str] | str, names: tuple[str, ...]) -> tuple[Any, ...]:
    """What changes when anything a run shows changes, but time and its engine's lock:
    each watched file's (inode, size, mtime, mode); the journal and state.json only
    grow, so their size is the offset reached."""
    marks: list[Any] = []
    prefix = f"{os.fspath(path)}/"
    for name in names:
        try:
            st = os.lstat(prefix + name)
            marks.append((st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode))  # ablate: dashboard-fingerprint
        except OSError:
            marks.append(None)
    return tuple(marks)


def _finished_row(name: str, rd: RunDir, cheap: Any) -> dict[str, Any]:
    """The row of a run with no live engine, read as `runner list` reads it, and the
    journal's last record for how it was stopped: no process, spec or fold."""
    stop = None
    if cheap["status"] == "stopped":
        try:
            record = journal.attempt_stop(rd.journal, defaults.DASHBOARD_JOURNAL_TAIL_BYTES)
        except Exception:
            record = None
        stop = overview.stop_record(record) if record is not None else None
    origin = None
    if stop is None and cheap["status"] == "stopped":
        try:
            origin = StateStore(rd.state).load().stop_origin
        except Exception:
            origin = None
    copy = cheap["copy_of"] is not None
    recorded = None
    if copy:  # what the copied state says, as `runner status` says it of a copy
        try:
            copied = StateStore(rd.state).load_or_none()
            recorded = copied.status if copied is not None else None
        except Exception:
            recorded = None
    said = words.status(
        cheap["status"],
        stop=stop,
        stop_origin=origin,
        done=cheap["done"],
        failed=cheap["failed"],
        total=cheap["items"],
        recorded=recorded,
    )
    return {
        "name": name,
        "error": None,
        "run_id": printable(cheap["run_id"], defaults.DASHBOARD_FIELD_CHARS),
        "status": cheap["status"],
        "words": printable(said, defaults.DASHBOARD_LINE_CHARS),
        "live": cheap["live"],
        "engine_pid": None,
        "attempt": cheap["attempt"],
        "done": cheap["done"] or 0,
        "failed": cheap["failed"] or 0,
        "total": cheap["items"] or 0,
        "current_item": None,
        "phase": None,
        "phase_started": None,
        "paused": False,
        "pause_held": False,
        "paused_since": None,
        "waiting_before": None,
        "stopping_kind": None,
        "pending_stop": None,
        "created": cheap["created"],
        "copy": copy,
        "resumable": cheap["resumable"],
        "damaged": len(cheap["damaged"]),
    }


def _live_row(name: str, info: RunStatus) -> dict[str, Any]:
    """The row of a live run (or one whose lock is damaged), from the status model."""
    live = info["live"]
    pending = info["pending_stop"]
    return {
        "name": name,
        "error": None,
        "run_id": _text(info["run_id"]),
        "status": info["status"],
        "words": printable(info["words"], defaults.DASHBOARD_LINE_CHARS),
        "live": live,
        "engine_pid": info["engine_pid"] if live else None,
        "attempt": info["attempt"],
        "done": info["done"],
        "failed": info["failed"],
        "total": len(info["items"]),
        "current_item": printable(info["current_item"], defaults.DASHBOARD_ITEM_CHARS)
        if info["current_item"] and live
        else None,
        "phase": _text(info["phase"]) if info["phase"] and live and not info["pause_held"] else None,
        "phase_started": info["phase_started"],
        "paused": info["paused"],
        "pause_held": info["pause_held"],
        "paused_since": info["paused_since"],
        "waiting_before": printable(info["waiting_before"], defaults.DASHBOARD_ITEM_CHARS)
        if info["waiting_before"]
        else None,
        "stopping_kind": info["stopping_kind"],
        "pending_stop": _text(render.pending_stop_phrase(pending)) if pending else None,
        "created": info["started"],
        "copy": info["copy"] is not None,
        "resumable": info["resumable"],
        "damaged": len(info["damaged"]),
    }


def _details(rd: RunDir, info: RunStatus) -> dict[str, Any]:
    """An open card: the status model's items, children, containment and damage, made
    safe for the page, and the journal's tail."""
    copy = info["copy"]
    return {
        "items": [_item(i) for i in info["items"]],
        "children": [_child(c) for c in info["children"]],
        "containment": _text(info["containment"]["mode"]) if info["containment"] else None,
        "damaged": [printable(d, defaults.DASHBOARD_LINE_CHARS) for d in info["damaged"]],
        "copy": printable(copy, defaults.DASHBOARD_LINE_CHARS) if copy is not None else None,
        "cause": printable(info["cause"], defaults.DASHBOARD_LINE_CHARS) if info["cause"] else None,
        "journal": [_record_line(r) for r in _journal_tail(rd.journal)],
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
    when = words.clock(t) if isinstance(t, (int, float)) else "--:--:--"
    fields = " ".join(
        f"{k}={_text(v)}" for k, v in record.items() if k not in ("event", "t") and v not in (None, [], {})
    )
    return printable(f"{when} {record['event']} {fields}".rstrip(), defaults.DASHBOARD_LINE_CHARS)
