"""journal.py: one line per record, concurrent appenders never interleave, torn lines skipped."""

import json
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.files import journal


def test_append_and_read(tmp_path):
    """Path: append's record shape; read and events read back what append wrote."""
    p = tmp_path / "journal.jsonl"
    j = journal.Journal(p)
    before = time.time()
    r = j.append("run-start", run_id="x", items=["a", "b"], note="two\nlines")
    j.append("phase-start", phase="session")
    j.append("run-stop", origin="file", fallback=False)
    j.close()
    assert r["event"] == "run-start" and before <= r["t"] <= time.time()
    lines = p.read_text().splitlines()
    assert len(lines) == 3  # the embedded newline stayed escaped
    assert list(json.loads(lines[0]))[:2] == ["event", "t"]
    recs = journal.read(p)
    assert [x["event"] for x in recs] == ["run-start", "phase-start", "run-stop"]
    assert recs[0]["note"] == "two\nlines"
    assert journal.events(p, "run-stop") == [recs[2]]
    with pytest.raises(TypeError):
        journal.Journal(p).append("x", t=1)


def test_read_missing_file_is_empty(tmp_path):
    assert journal.read(tmp_path / "none.jsonl") == []


def test_torn_last_line_is_skipped_and_next_append_starts_fresh(tmp_path):
    """Path: a crash mid-append leaves a torn tail. Ablation: without the leading newline a
    later append is glued to the fragment and that record is lost: red."""
    p = tmp_path / "journal.jsonl"
    with journal.Journal(p) as j:
        j.append("run-start")
        j.append("session-start", item="a")
    full = p.read_bytes()
    p.write_bytes(full[:-7])  # cut the last record mid-way, as a crash would
    assert [r["event"] for r in journal.read(p)] == ["run-start"]
    with journal.Journal(p) as j:
        j.append("run-stop", origin="forced")
    assert [r["event"] for r in journal.read(p)] == ["run-start", "run-stop"]


def test_concurrent_appenders_from_processes_never_interleave(tmp_path):
    """Path: one os.write per record on O_APPEND. Ablation: writing a record in two
    writes (or through a buffered file flushed in pieces) interleaves lines: red."""
    p = tmp_path / "journal.jsonl"
    code = (
        "import sys\nfrom runner.files.journal import Journal\n"
        "j = Journal(sys.argv[1])\n"
        "for i in range(200):\n"
        "    j.append('tick', writer=sys.argv[2], i=i, pad='z' * 3000)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(p), str(w)]) for w in range(3)]
    try:
        for proc in procs:
            assert proc.wait(timeout=60) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    lines = p.read_text().splitlines()
    assert len(lines) == 600
    recs = [json.loads(line) for line in lines]  # every line parses: nothing interleaved
    for w in range(3):
        assert [r["i"] for r in recs if r["writer"] == str(w)] == list(range(200))


def _attempt_by_full_read(path):
    """The reference: every record read, the attempt cut at its last opening record."""
    records = []
    for record in journal.read(path):
        if record["event"] in journal.ATTEMPT_STARTS:
            records = []
        records.append(record)
    return records


_EVENTS = ["run-start", "resume", "phase-start", "run-stop", "session-end"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    entries=st.lists(
        st.tuples(st.sampled_from(_EVENTS), st.integers(min_value=0, max_value=40_000)), min_size=0, max_size=40
    ),
    torn=st.booleans(),
)
def test_read_attempt_equals_the_full_read_cut_at_the_last_attempt(tmp_path_factory, entries, torn):
    """Path: journal.read_attempt (the stopper's read of the current attempt, backwards
    in 64 KiB chunks) gives exactly what a full read cut at the last run-start or
    resume gives, whatever the record sizes (lines across chunk boundaries) and with a
    torn last line. The journal is written by the real writer (Journal.append)."""
    path = tmp_path_factory.mktemp("j") / "journal.jsonl"
    with journal.Journal(path) as j:
        for event, size in entries:
            j.append(event, pad="x" * size)
    if torn:
        with open(path, "ab") as f:
            f.write(b'{"event": "run-st')
    assert journal.read_attempt(path) == _attempt_by_full_read(path)


def test_read_attempt_parses_only_the_current_attempt(tmp_path, monkeypatch):
    """Path: read_attempt stops at the attempt's opening record: after 20,000 records of
    earlier attempts, a stop parses the few of its own, not the run's history."""
    path = tmp_path / "journal.jsonl"
    # The real writer's records, without its 20,000 fsyncs: what they make durable is not
    # what is proved here, and on a busy disk they alone outlasted the test's time-out.
    with monkeypatch.context() as m, journal.Journal(path) as j:
        m.setattr(journal.os, "fsync", lambda fd: None)
        j.append("run-start", attempt=1)
        for i in range(20_000):
            j.append("phase-start", n=i)
    with journal.Journal(path) as j:
        j.append("resume", attempt=2)
        j.append("run-start", attempt=2)
        j.append("run-stop", origin="signal")
    parsed = []
    real = journal.untrusted.parse_json

    def counting(raw, source):
        parsed.append(raw)
        return real(raw, source)

    monkeypatch.setattr(journal.untrusted, "parse_json", counting)
    assert [r["event"] for r in journal.read_attempt(path)] == ["run-start", "run-stop"]
    assert len(parsed) == 2
