"""A stop, and a status, read a bounded tail of the journal whatever its size (issue 20):
bytes read counted, and a journal past its cap never hides that the run stopped."""

import json
import os
import types

import pytest

from runner import defaults
from runner.exitcodes import Exit
from runner.files import journal, untrusted
from runner.files.follow import CHUNK
from runner.files.journal import Journal
from runner.views import overview

PAD = json.dumps({"event": "hook-result", "t": 1.0, "hook": "post_session", "index": 0, "outcome": "passed"}) + "\n"


@pytest.fixture
def counted_reads(monkeypatch):
    """Bytes returned by os.pread (how journal.py and follow.py read a journal)."""
    box = {"bytes": 0}
    real = os.pread

    def pread(fd, n, offset):
        data = real(fd, n, offset)
        box["bytes"] += len(data)
        return data

    monkeypatch.setattr(os, "pread", pread)
    return box


def _long_attempt(path, mib):
    """An attempt of `mib` MiB of records, without a run-stop."""
    with Journal(path) as j:
        j.append("run-start", attempt=1)
    block = (PAD * ((1 << 20) // len(PAD))).encode()
    with open(path, "ab") as f:
        for _ in range(mib):
            f.write(block)


def test_stop_recorded_reads_a_bounded_tail(tmp_path, counted_reads):
    """Path: journal.stop_recorded, the stopper's read of the attempt's run-stop: at most
    STOP_JOURNAL_TAIL_BYTES from the end, even when the run-stop is not there (32 MiB of records).
    Ablation `journal-tail-bound` (read back to the attempt's start): 32 MiB read: red."""
    path = tmp_path / "journal.jsonl"
    _long_attempt(path, 32)
    assert journal.stop_recorded(path) is False
    assert counted_reads["bytes"] <= defaults.STOP_JOURNAL_TAIL_BYTES
    with Journal(path) as j:
        j.append("run-stop", origin="signal")
        j.append("stop-requested", by="stop")  # a stopper's record after it
    counted_reads["bytes"] = 0
    assert journal.stop_recorded(path) is True
    assert counted_reads["bytes"] <= 64 * 1024


def test_stop_recorded_never_counts_the_previous_attempts_run_stop(tmp_path):
    """Path: stop_recorded stops at the attempt's opening record (run-start or resume)."""
    path = tmp_path / "journal.jsonl"
    with Journal(path) as j:
        j.append("run-start", attempt=1)
        j.append("run-stop", origin="signal")
        j.append("resume", attempt=2)
    assert journal.stop_recorded(path) is False
    with Journal(path) as j:
        j.append("run-start", attempt=2)
        j.append("run-stop", origin="file")
    assert journal.stop_recorded(path) is True


def test_status_folds_a_bounded_tail(tmp_path, counted_reads):
    """Path: overview.fold_journal folds the journal's last STATUS_JOURNAL_TAIL_BYTES, from the first
    whole record there, and says how many it skipped; what is at the end is folded.
    Ablation `status-tail` (fold from the start): 32 MiB read: red."""
    path = tmp_path / "journal.jsonl"
    _long_attempt(path, 32)
    with Journal(path) as j:
        j.append("phase-start", phase="session", item="a")
        j.append("item-done", item="a")
        j.append("run-stop", origin="signal")
    damaged: list[str] = []
    fold = overview.fold_journal(types.SimpleNamespace(journal=path), None, damaged)
    assert counted_reads["bytes"] <= defaults.STATUS_JOURNAL_TAIL_BYTES + CHUNK
    assert fold.skipped == path.stat().st_size - defaults.STATUS_JOURNAL_TAIL_BYTES > 0
    assert (fold.outcomes, fold.ended, damaged) == ({"a": "done"}, "stopped", [])


def test_status_fold_of_a_short_journal_is_whole(tmp_path):
    """Path: under its budget the fold starts at byte 0 (no record skipped, skipped=0)."""
    path = tmp_path / "journal.jsonl"
    with Journal(path) as j:
        j.append("run-start", attempt=1, items=["a"])
        j.append("item-done", item="a")
    fold = overview.fold_journal(types.SimpleNamespace(journal=path), None, [])
    assert (fold.skipped, fold.attempt, fold.outcomes) == (0, 1, {"a": "done"})


def test_stop_and_status_on_a_journal_past_its_cap(runs):
    """Path: `runner stop` on a live run whose journal is past JOURNAL_CAP (a sparse hole:
    no disk written) stops it and says so, exit 0 (before: exit DAMAGED, "larger than its
    cap", though the run had stopped); `runner status` then shows it stopped, not damaged,
    with the bytes it did not read. Ablation `journal-tail-bound`: the stopper reads the
    hole (only time, no verdict change): stays green, it is the counting tests that kill."""
    rd = runs.start(runs.spec(provider=["sleep", "60"]))
    runs.wait_event(rd, "phase-start", phase="session")
    with open(rd.journal, "r+b") as f:
        f.truncate(untrusted.JOURNAL_CAP + (8 << 20))
        f.seek(0, os.SEEK_END)
        f.write(b"\n")
    proc = runs.runner("stop", "--run-dir", rd.path)
    assert proc.returncode == Exit.OK, (proc.stdout, proc.stderr)
    assert "cap" not in proc.stdout + proc.stderr
    status = runs.runner("status", "--json", "--run-dir", rd.path)
    assert status.returncode == Exit.OK, status.stderr
    info = json.loads(status.stdout)
    assert (info["status"], info["stopped"], info["damaged"]) == ("stopped", True, [])
    assert info["journal_skipped"] > untrusted.JOURNAL_CAP
    again = runs.runner("stop", "--run-dir", rd.path)
    assert "cap" not in again.stdout + again.stderr


def test_the_dashboards_fold_cache_starts_at_the_same_tail(tmp_path, counted_reads):
    """Path: overview.FoldCache (the dashboard's status) begins a run's fold where
    fold_journal does, at the journal's last STATUS_JOURNAL_TAIL_BYTES, then reads only
    what is appended."""
    path = tmp_path / "journal.jsonl"
    _long_attempt(path, 32)
    rd = types.SimpleNamespace(journal=path, path=tmp_path)
    cache = overview.FoldCache()
    fold = cache.fold(rd, None, [])
    assert counted_reads["bytes"] <= defaults.STATUS_JOURNAL_TAIL_BYTES + CHUNK
    assert fold.skipped > 0
    with Journal(path) as j:
        j.append("item-done", item="a")
    counted_reads["bytes"] = 0
    assert cache.fold(rd, None, []).outcomes == {"a": "done"}
    assert counted_reads["bytes"] < 4096
