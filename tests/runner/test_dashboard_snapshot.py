"""runner/dashboard/snapshot.py in-process, over real finished runs: a row as `runner
list` reads a finished run, with its sentence; an open card's details from the status
model (items with attempts and reasons, containment) and the journal tail (torn and
hostile lines); a run whose read raises; the cache that spares finished runs any read
at a poll; the files a poll opens, counted per run; and the body kept per ETag, so that
polling allocates nothing per poll."""

import json
import os
import tracemalloc

import pytest

from runner import defaults
from runner.dashboard import snapshot
from runner.dashboard.actions import Actions
from runner.dashboard.runs import Base
from runner.views import run_list, status


@pytest.fixture
def done(runs):
    rd = runs.start(runs.spec(name="done.toml", items=["a", "b"], provider=["true"]), name="done")
    runs.wait_engine_exit(rd)
    return rd


def rows(base, opened=()):
    snap = snapshot.Snapshots(Base(base), Actions())
    data = json.loads(snap.json(opened))
    return snap, {r["name"]: r for r in data["runs"]}, data["details"]


def test_a_finished_runs_row_is_its_list_row_with_its_sentence(done, tmp_path):
    """Path: Snapshots._row for a run with no live engine: run_list.row (what `runner
    list` reads) and words.status: its status, sentence, counts and age; no engine pid,
    no buttons; no details unless its card is open."""
    _, now, details = rows(tmp_path)
    row = now["done"]
    assert (row["status"], row["words"], row["live"], row["engine_pid"]) == (
        "completed",
        "completed: 2 items done",
        False,
        None,
    )
    assert (row["done"], row["failed"], row["total"], row["buttons"]) == (2, 0, 2, {})
    assert isinstance(row["created"], float) and details == {}
    assert "items" not in row and "journal" not in row  # a card's, when open


def test_an_open_cards_details_are_the_status_model_made_safe(done, tmp_path, monkeypatch):
    """Path: Snapshots._detail -> status.status_of for a card the page has open (?open=):
    items in queue order with attempts and reason; the containment's mode; the damage."""
    _, _, details = rows(tmp_path, ("done",))
    assert [(i["item"], i["status"], i["attempts"]) for i in details["done"]["items"]] == [
        ("a", "done", 1),
        ("b", "done", 1),
    ]
    real = status.status_of

    def richer(rd, folds=None):
        info = real(rd)
        info["items"][1].update(status="failed", attempts=2, reason="verify `x` exited 1")
        info["containment"] = {"mode": "cgroup", "cgroup": "/sys/fs/cgroup/runner/x", "subreaper": True}
        info["damaged"] = ["state.json: \x1b[31mboom"]
        return info

    monkeypatch.setattr(status, "status_of", richer)
    _, _, details = rows(tmp_path, ("done",))
    card = details["done"]
    assert card["items"][1]["reason"] == "verify `x` exited 1" and card["items"][1]["attempts"] == 2
    assert card["containment"] == "cgroup"
    assert card["damaged"] and "\x1b" not in card["damaged"][0]


def test_journal_tail_skips_torn_lines_and_escapes_control_characters(done, tmp_path):
    """Path: _journal_tail reads only the last JOURNAL_TAIL_BYTES through untrusted.py;
    a torn last line is skipped, a record's control characters never reach the page raw."""
    with open(done.journal, "ab") as f:
        f.write(json.dumps({"event": "item-failed", "t": 1.0, "item": "a\x1b[31m\nx", "reason": "r"}).encode() + b"\n")
        f.write(b'{"event": "torn", "t": 2')
    _, _, details = rows(tmp_path, ("done",))
    tail = details["done"]["journal"]
    assert len(tail) <= defaults.DASHBOARD_JOURNAL_TAIL_RECORDS
    assert "item-failed" in tail[-1] and "\x1b" not in tail[-1] and "\n" not in tail[-1]
    assert not any("torn" in line for line in tail)
    with open(done.journal, "ab") as f:
        f.write(b"\n" + b"x" * (defaults.DASHBOARD_JOURNAL_TAIL_BYTES * 3) + b"\n")
    _, _, details = rows(tmp_path, ("done",))
    assert details["done"]["journal"] == []  # the window holds only the junk line: nothing to show


def test_a_run_whose_read_raises_is_an_error_row(done, tmp_path, monkeypatch):
    """Path: Snapshots._row turns anything a run's read raises into that run's error row,
    with no buttons."""

    def broken(rd):
        raise RuntimeError("boom")

    monkeypatch.setattr(run_list, "row", broken)
    _, now, _ = rows(tmp_path)
    assert now["done"]["error"] == "cannot be read: RuntimeError: boom"
    assert now["done"]["status"] == "error" and now["done"]["buttons"] == {}


def test_a_dead_runs_row_is_read_again_only_when_its_files_change(done, tmp_path, monkeypatch):
    """Path: Snapshots' cache: a run dead before and after its read is not read again
    while its files are unchanged; a new journal line reads it again."""
    calls = []
    real = run_list.row
    monkeypatch.setattr(run_list, "row", lambda rd: calls.append(rd) or real(rd))
    monkeypatch.setattr(defaults, "DASHBOARD_MIN_AGE", 0.0)
    snap, _, _ = rows(tmp_path)
    for _ in range(3):
        snap.json()
    assert len(calls) == 1
    with open(done.journal, "ab") as f:
        f.write(json.dumps({"event": "resume", "t": 3.0, "attempt": 2}).encode() + b"\n")
    opened = json.loads(snap.json(("done",)))
    assert "resume attempt=2" in opened["details"]["done"]["journal"][-1]
    assert len(calls) == 2


def test_a_poll_reads_each_finished_run_a_fixed_number_of_times(runs, tmp_path, monkeypatch):
    """Path: the first answer reads each finished run as `runner list` does (a fixed
    number of files opened per run, whatever the number of runs; no status model, so no
    spec and no journal fold); an answer that finds nothing changed opens no file of
    any run. Costs flat in the number of runs (issue 32: a first poll of 500 runs took
    3.4 s)."""
    models = []
    real_status, real_open = status.status_of, os.open
    per_run = {}
    for n in (4, 12):
        base = runs.finished(f"base-{n}", n)
        opened = []
        with monkeypatch.context() as mp:
            mp.setattr(defaults, "DASHBOARD_MIN_AGE", 0.0)
            mp.setattr(status, "status_of", lambda rd, folds=None: models.append(rd) or real_status(rd, folds))
            mp.setattr(os, "open", lambda path, *a, _seen=opened, **k: _seen.append(path) or real_open(path, *a, **k))
            snap = snapshot.Snapshots(Base(base), Actions())
            snap.json()
            per_run[n] = len(opened) / n
            opened.clear()
            snap.json()
            assert opened == [], opened  # nothing changed: no file opened
    assert per_run[4] == per_run[12], per_run
    assert models == []  # no status model for a finished run whose card is closed


def test_polling_keeps_one_body_per_etag(done, tmp_path, monkeypatch):
    """Path: Snapshots.answer keeps the body it built for an ETag: polls that find nothing
    changed, even without If-None-Match, are answered with that very body (no bytes
    built per poll), and the memory traced over 300 such polls does not grow. Ablation
    dashboard-body-kept (a body built at every poll) turns it red."""
    monkeypatch.setattr(defaults, "DASHBOARD_MIN_AGE", 0.0)
    snap = snapshot.Snapshots(Base(tmp_path), Actions())
    first = snap.json()
    assert snap.json() is first
    for _ in range(20):
        snap.json(("done",))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(300):
            body = snap.json(("done",))
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert body is snap.json(("done",))
    assert grown < 16 * 1024, grown


def test_open_names_are_run_names_only():
    """Path: snapshot.opened_names: ?open= names a run id's shape or nothing (no path,
    no leading dot), at most OPEN_MAX."""
    assert snapshot.opened_names("open=a,b%2Cc,..,x%2Fy,.h") == ("a", "b", "c")
    assert snapshot.opened_names("other=1") == ()
    many = ",".join(f"r{i}" for i in range(snapshot.OPEN_MAX + 5))
    assert len(snapshot.opened_names(f"open={many}")) == snapshot.OPEN_MAX
