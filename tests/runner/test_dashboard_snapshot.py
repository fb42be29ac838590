"""runner/dashboard/snapshot.py in-process, over real finished runs: what a row shows of
the status model (`status.status_of`) (items with attempts and reasons, pending stop, PAUSE,
containment), the journal tail (torn and hostile lines), a run whose read raises, and
the cache that spares fifty dead runs a process scan at every poll."""

import json

import pytest

from runner import defaults
from runner.dashboard import snapshot
from runner.dashboard.actions import Actions
from runner.dashboard.runs import Base
from runner.views import status


@pytest.fixture
def done(runs):
    rd = runs.start(runs.spec(name="done.toml", items=["a", "b"], provider=["true"]), name="done")
    runs.wait_engine_exit(rd)
    return rd


def rows(base):
    snap = snapshot.Snapshots(Base(base), Actions())
    return snap, {r["name"]: r for r in json.loads(snap.json())["runs"]}


def test_a_row_is_the_status_model_made_safe_for_the_page(done, tmp_path, monkeypatch):
    """Path: _run_row reads the status model typed (status.status_of, as `runner status
    --json` prints it): items in queue order with attempts, duration and reason; the
    per-run done and failed counts; the pending stop as a phrase; paused, pause_held,
    stopping; the containment's mode."""
    _, now = rows(tmp_path)
    assert [(i["item"], i["status"], i["attempts"]) for i in now["done"]["items"]] == [
        ("a", "done", 1),
        ("b", "done", 1),
    ]
    assert (now["done"]["stopping"], now["done"]["pause_held"], now["done"]["failed"]) == (False, False, 0)
    real = status.status_of

    def richer(rd):
        info = real(rd)
        info["items"] = [
            {
                "item": "a",
                "status": "done",
                "attempts": 1,
                "repairs": 0,
                "duration": 0.5,
                "reason": None,
                "failure": None,
            },
            {
                "item": "b",
                "status": "failed",
                "attempts": 2,
                "repairs": 1,
                "duration": 1.5,
                "reason": "verify `x` exited 1",
                "failure": None,
            },
        ]
        info["done"], info["failed"] = 1, 1
        info["pending_stop"] = {
            "mode": "graceful",
            "origin": "dashboard",
            "age": 1.0,
            "unreadable": False,
            "stop_file": False,
        }
        info["paused"] = True
        info["containment"] = {"mode": "cgroup", "cgroup": "/sys/fs/cgroup/runner/x", "subreaper": True}
        return info

    monkeypatch.setattr(status, "status_of", richer)
    _, now = rows(tmp_path)
    row = now["done"]
    assert (row["done"], row["failed"], row["total"]) == (1, 1, 2)
    assert row["items"][1]["reason"] == "verify `x` exited 1" and row["items"][1]["attempts"] == 2
    assert row["pending_stop"] == "graceful (dashboard)" and row["paused"] is True
    assert row["containment"] == "cgroup"


def test_journal_tail_skips_torn_lines_and_escapes_control_characters(done, tmp_path):
    """Path: _journal_tail reads only the last JOURNAL_TAIL_BYTES through untrusted.py;
    a torn last line is skipped, a record's control characters never reach the page raw."""
    with open(done.journal, "ab") as f:
        f.write(json.dumps({"event": "item-failed", "t": 1.0, "item": "a\x1b[31m\nx", "reason": "r"}).encode() + b"\n")
        f.write(b'{"event": "torn", "t": 2')
    _, now = rows(tmp_path)
    tail = now["done"]["journal"]
    assert len(tail) <= defaults.DASHBOARD_JOURNAL_TAIL_RECORDS
    assert "item-failed" in tail[-1] and "\x1b" not in tail[-1] and "\n" not in tail[-1]
    assert not any("torn" in line for line in tail)
    with open(done.journal, "ab") as f:
        f.write(b"\n" + b"x" * (defaults.DASHBOARD_JOURNAL_TAIL_BYTES * 3) + b"\n")
    _, now = rows(tmp_path)
    assert now["done"]["journal"] == []  # the window holds only the junk line: nothing to show


def test_a_run_whose_read_raises_is_an_error_row(done, tmp_path, monkeypatch):
    """Path: Snapshots._row turns anything a run's read raises into that run's error row."""

    def broken(rd):
        raise RuntimeError("boom")

    monkeypatch.setattr(status, "status_of", broken)
    _, now = rows(tmp_path)
    assert now["done"]["error"] == "cannot be read: RuntimeError: boom"
    assert not any(now["done"]["buttons"].values())


def test_a_dead_runs_row_is_read_again_only_when_its_files_change(done, tmp_path, monkeypatch):
    """Path: Snapshots' cache: a run dead before and after its read is not read again
    while its files are unchanged; a new journal line reads it again."""
    calls = []
    real = status.status_of
    monkeypatch.setattr(status, "status_of", lambda rd: calls.append(rd) or real(rd))
    monkeypatch.setattr(defaults, "DASHBOARD_MIN_AGE", 0.0)
    snap, _ = rows(tmp_path)
    for _ in range(3):
        snap.json()
    assert len(calls) == 1
    with open(done.journal, "ab") as f:
        f.write(json.dumps({"event": "resume", "t": 3.0, "attempt": 2}).encode() + b"\n")
    assert "resume attempt=2" in json.loads(snap.json())["runs"][0]["journal"][-1]
    assert len(calls) == 2
