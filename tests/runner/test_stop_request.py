"""stop_request.py: ordered, never-downgraded stop requests under concurrent stoppers; torn
files read graceful; single atomic consume; STOP / PAUSE files; archiving for resume."""

import fcntl
import json
import os
import subprocess
import sys
import threading

import pytest

from runner.errors import ControlFileError
from runner.events import Mode, Origin
from runner.files import stop_request
from runner.files.rundir import RunDir


@pytest.fixture
def rd(tmp_path):
    spec = tmp_path / "in.toml"
    spec.write_text('items = ["a"]\n[provider]\ncommand = ["x"]\n')
    return RunDir.create(tmp_path / "run", spec)


def test_modes_are_ordered():
    assert Mode.ABSENT < Mode.GRACEFUL < Mode.HARD
    assert Mode.parse("hard") is Mode.HARD and Mode.parse(Mode.GRACEFUL) is Mode.GRACEFUL
    with pytest.raises(ValueError):
        Mode.parse("absent")


def test_lodge_writes_the_documented_format(rd):
    assert stop_request.peek(rd) is None
    req = stop_request.lodge(rd, "graceful", "file")
    on_disk = json.loads(rd.stop_request.read_text())
    assert on_disk == {"mode": "graceful", "origin": "file", "t": req.t}
    assert stop_request.peek(rd) == stop_request.StopRequest(Mode.GRACEFUL, "file", req.t)


def test_graceful_never_downgrades_a_pending_hard(rd):
    """Path: lodge's max(old, new). Ablation: delete the NEVER DOWNGRADE line and the
    graceful request replaces the hard one: red."""
    hard = stop_request.lodge(rd, Mode.HARD, "signal")
    got = stop_request.lodge(rd, Mode.GRACEFUL, "file")
    assert got == hard
    assert stop_request.peek(rd).mode is Mode.HARD and stop_request.peek(rd).origin == "signal"
    # ... while a hard request does upgrade a pending graceful one.
    stop_request.consume(rd)
    stop_request.lodge(rd, "graceful", "file")
    assert stop_request.lodge(rd, "hard", "signal").mode is Mode.HARD
    assert stop_request.peek(rd).origin == "signal"


def test_graceful_racing_a_hard_stays_hard_deterministic(rd, monkeypatch):
    """Path: the lock around read-merge-write. The graceful stopper is parked right after
    its read (it saw no request); a hard stopper runs meanwhile. Ablation: drop the flock
    and the hard stopper writes while the graceful one is parked, then the graceful one
    writes over it (an atomic replace alone loses the update): red."""
    parked, release = threading.Event(), threading.Event()

    def park(old):
        if threading.current_thread().name == "graceful":
            parked.set()
            assert release.wait(10)

    monkeypatch.setattr(stop_request, "_after_read", park)
    results = {}
    g = threading.Thread(name="graceful", target=lambda: results.update(g=stop_request.lodge(rd, "graceful", "file")))
    h = threading.Thread(name="hard", target=lambda: results.update(h=stop_request.lodge(rd, "hard", "signal")))
    g.start()
    try:
        assert parked.wait(10)
        h.start()
        h.join(0.3)  # with the lock, the hard stopper is held back behind the parked one
    finally:
        release.set()
        g.join(10)
        if h.ident is not None:
            h.join(10)
    assert stop_request.peek(rd).mode is Mode.HARD
    assert results["h"].mode is Mode.HARD


STOPPER = (
    "import sys\nfrom runner.files.rundir import RunDir\nfrom runner.files import stop_request\n"
    "rd = RunDir(sys.argv[1]); sys.stdin.readline()\n"
    "stop_request.lodge(rd, sys.argv[2], 'signal' if sys.argv[2] == 'hard' else 'file')\n"
)


def test_two_stopper_processes_racing(rd):
    """Path: lodge across processes. Rounds of one hard and several graceful stoppers
    released at once; every round ends hard, and the file always parses."""
    for _ in range(8):
        procs = [
            subprocess.Popen([sys.executable, "-c", STOPPER, str(rd.path), mode], stdin=subprocess.PIPE, text=True)
            for mode in ("graceful", "hard", "graceful", "graceful")
        ]
        try:
            for p in procs:  # they all wait on stdin; release them together
                p.stdin.write("go\n")
                p.stdin.flush()
            for p in procs:
                p.stdin.close()
                assert p.wait(timeout=30) == 0
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        req = stop_request.peek(rd)
        assert (req.mode, req.origin, req.unreadable) == (Mode.HARD, "signal", False)
        assert stop_request.consume(rd).mode is Mode.HARD


@pytest.mark.parametrize(
    "content", [b"", b'{"mode": "ha', b"\x00\xff", b'{"mode": "absent"}', b'["hard"]', b'{"mode": "HARD!"}']
)
def test_torn_or_empty_request_reads_graceful_and_unreadable(rd, content):
    """Path: peek/consume on garbage. Ablation: reading unknown as HARD (or raising) is red."""
    rd.stop_request.write_bytes(content)
    req = stop_request.peek(rd)
    assert (req.mode, req.unreadable) == (Mode.GRACEFUL, True)
    got = stop_request.consume(rd)
    assert (got.mode, got.unreadable) == (Mode.GRACEFUL, True)
    assert not rd.stop_request.exists()


def test_unreadable_request_is_replaced_by_a_clean_lodge(rd):
    rd.stop_request.write_bytes(b"")
    req = stop_request.lodge(rd, "graceful", "file")
    assert not req.unreadable and stop_request.peek(rd) == req


def test_handwritten_hard_request_without_origin_is_hard(rd):
    rd.stop_request.write_text('{"mode": "hard"}')
    req = stop_request.peek(rd)
    assert (req.mode, req.origin, req.unreadable) == (Mode.HARD, Origin.UNKNOWN, False)


def test_a_held_request_lock_is_retried_within_a_millisecond_then_less_often(rd, monkeypatch):
    """Path: stop_request._Locked's pauses, FIRST_RETRY doubled up to FILE_POLL. The
    engine is woken by the very rename of a request and finds its lodger still closing
    the lock nearly every time: a first pause of FILE_POLL put 10 ms on every stop that
    lodges (the engine's consume, and its stop, behind it). The lock is held by another
    open file (as a lodger holds it); each pause is recorded, not slept, and the lock is
    let go at the sixth. Ablation: `request-lock-retries-soon` (the first pause is
    FILE_POLL: red)."""
    from runner import defaults

    stop_request.lodge(rd, Mode.HARD, Origin.SIGNAL)
    holder = os.open(rd.stop_request_lock, os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    pauses = []

    def pause(seconds):
        pauses.append(seconds)
        if len(pauses) == 6:
            os.close(holder)  # the lodger is done

    monkeypatch.setattr(stop_request.time, "sleep", pause)
    try:
        got = stop_request.consume(rd)
    finally:
        if len(pauses) < 6:
            os.close(holder)
    assert got is not None and got.mode is Mode.HARD
    first = stop_request.FIRST_RETRY
    assert first <= defaults.FILE_POLL / 10
    assert pauses == [first, 2 * first, 4 * first, 8 * first, 16 * first, min(32 * first, defaults.FILE_POLL)]


def test_consume_is_single_and_archives(rd):
    """Path: consume's one rename. Two consumers race; exactly one gets the request.
    Ablation: read-then-unlink without the rename lets both see it: red."""
    for _ in range(50):
        stop_request.lodge(rd, "hard", "signal")
        got, barrier = [], threading.Barrier(2)

        def take(barrier=barrier, got=got):
            barrier.wait()
            got.append(stop_request.consume(rd))

        threads = [threading.Thread(target=take) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        taken = [g for g in got if g is not None]
        assert len(taken) == 1 and taken[0].mode is Mode.HARD
        assert not rd.stop_request.exists()
    archived = sorted(p.name for p in rd.archive.iterdir())
    assert len(archived) == 50 and all(n.endswith("-stop-request.json") for n in archived)
    assert json.loads((rd.archive / archived[0]).read_text())["mode"] == "hard"
    assert stop_request.consume(rd) is None


def test_stop_and_pause_files(rd):
    assert not stop_request.stop_file(rd) and not stop_request.pause_file(rd)
    rd.stop_file.touch()
    rd.pause_file.touch()
    assert stop_request.stop_file(rd) and stop_request.pause_file(rd)


def test_pause_and_unpause_files(rd, tmp_path):
    """Path: the dashboard's Pause / Unpause buttons (stop_request.pause / unpause): the
    same PAUSE file an operator touches; never written or removed through a link, and a
    directory in its place is named, not removed."""
    assert stop_request.pause(rd) is True and stop_request.pause_file(rd)
    assert stop_request.pause(rd) is False
    assert stop_request.unpause(rd) is True and not stop_request.pause_file(rd)
    assert stop_request.unpause(rd) is False
    target = tmp_path / "elsewhere"
    rd.pause_file.symlink_to(target)
    assert stop_request.pause(rd) is False  # a link there already pauses (lexists); never followed
    assert not target.exists()
    assert stop_request.unpause(rd) is True and not os.path.lexists(rd.pause_file)
    rd.pause_file.mkdir()
    with pytest.raises(ControlFileError, match="PAUSE: cannot remove"):
        stop_request.unpause(rd)
    assert rd.pause_file.is_dir()


def test_archive_pending_for_resume(rd):
    """Path: resume clears every pending stop, so the resumed run does not stop at once."""
    assert stop_request.archive_pending(rd) == []
    stop_request.lodge(rd, "hard", "signal")
    rd.stop_file.write_text("")
    rd.pause_file.write_text("")
    moved = stop_request.archive_pending(rd)
    assert moved == ["stop-request.json", "STOP", "PAUSE"]
    assert stop_request.peek(rd) is None and not stop_request.stop_file(rd) and not stop_request.pause_file(rd)
    assert sorted(p.name.split("-", 2)[2] for p in rd.archive.iterdir()) == ["PAUSE", "STOP", "stop-request.json"]
