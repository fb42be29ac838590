"""A foreground `runner run`: the plain phase lines when its stderr is not a terminal,
the live progress line on a terminal (a pty), the "stopping… N s" line while a Ctrl-C
stop is in progress, and the summary table at the end (progress.py, overview.py,
render.py). Every run is a real `python -m runner run` in the foreground; the `runs`
fixture kills whatever a failing test left."""

import fcntl
import os
import re
import select
import shlex
import signal
import struct
import termios
import time

import runs as R

from runner.exitcodes import Exit
from runner.files.rundir import RunDir

KILL_GRACE = 0.3
STOP = {"kill_grace": KILL_GRACE, "grace": 5.0}
VERIFY = 'test "$1" != b || exit 7'  # fails for item b only, with a code of its own


def new_user_spec(runs):
    """The issue's new user: three items, a verify command that fails for one."""
    return runs.spec(
        items=("a", "b", "c"),
        provider=R.sh('echo "working on $1"', "{item}"),
        verify=[{"command": R.sh(VERIFY, "{item}")}],
        repair={"max_attempts": 1},
        retry={"backoff": 0.1},
        stop=STOP,
    )


def test_plain_phase_lines_and_summary_table(runs, tmp_path):
    """Path: `runner run` with stderr a pipe: one plain line per phase start and end, in
    the journal's order, the failing verify's line naming its command and exit code; on
    stdout the summary table (item, outcome, attempts, duration, reason) whose failure
    reason is the verify command and its exit code, then the run's line; exit FAILED."""
    run_dir = tmp_path / "run"
    runs.started.append(run_dir)
    proc = R.runner("run", new_user_spec(runs), "--run-dir", run_dir)
    assert proc.returncode == Exit.FAILED, proc.stderr
    rd = RunDir(run_dir)
    starts = [(e["item"], e["phase"]) for e in R.events(rd, "phase-start")]
    lines = [ln for ln in proc.stderr.splitlines() if re.match(r"runner: (\[\d/3\] \w|run):", ln)]
    started = [ln for ln in lines if ln.endswith(" started")]
    ended = [ln for ln in lines if not ln.endswith(" started")]
    assert len(started) == len(starts) == len(ended), proc.stderr
    for (item, phase), line in zip(starts, started, strict=True):
        where = "run" if item is None else f"[{'abc'.index(item) + 1}/3] {item}"
        assert line == f"runner: {where}: {phase} started", line
    command = shlex.join(R.sh(VERIFY, "b"))
    failing = [ln for ln in ended if ln.startswith("runner: [2/3] b: verify ")]
    assert len(failing) == 2, ended  # the first verify and the one after the repair
    assert all(f"verify `{command}` exited 7 (" in ln for ln in failing), failing
    assert [e["rc"] for e in R.events(rd, "verify-result", item="b")] == [7, 7]

    out = proc.stdout.splitlines()
    assert out[0].split() == ["item", "outcome", "attempts", "duration", "reason"], proc.stdout
    rows = {ln.split()[0]: ln for ln in out[1:4]}
    assert rows["a"].split()[:3] == ["a", "done", "1"] and rows["c"].split()[:3] == ["c", "done", "1"]
    assert rows["b"].split()[:3] == ["b", "failed", "2"]  # the session and one repair
    assert rows["b"].endswith(f"verify `{command}` exited 7"), rows["b"]
    assert out[4] == f"run {rd.run_id}: failed, 1 of 3 items failed (exit {int(Exit.FAILED)})"


def _pty():
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
    return master, slave


def _read_until(master, seen, pattern, timeout):
    """Read the pty into `seen` (a list of chunks) until `pattern` matches the text."""
    deadline = time.monotonic() + timeout
    while True:
        text = "".join(seen)
        m = re.search(pattern, text)
        if m:
            return m
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no {pattern!r} on the terminal after {timeout}s: {text[-2000:]!r}")
        ready, _, _ = select.select([master], [], [], min(left, 0.1))
        if ready:
            try:
                seen.append(os.read(master, 65536).decode(errors="replace"))
            except OSError:  # EIO: the last holder of the slave side is gone
                raise AssertionError(f"terminal closed before {pattern!r}: {text[-2000:]!r}") from None


def test_tty_progress_line_and_stopping_line(runs, tmp_path, victim, stop_latency):
    """Path: `runner run` on a terminal (a pty) whose provider prints a line and then
    traps SIGTERM: the live line shows the item (1/1), the phase with its elapsed time,
    and the command's last output line; after Ctrl-C (SIGINT to the foreground
    process) it says "stopping… N s", counting up while the provider holds out for
    kill_grace, and the stop is as bounded as without a display (exit STOPPED, the
    provider's tree gone within about kill_grace). The summary ends the output."""
    kill_grace = 1.5  # long enough for the stopping line to be drawn several times
    p = victim.prepare("trap-term")
    provider = R.sh('echo "step 42 of 100"; exec "$@"', *p.argv)
    spec = runs.spec(items=("a",), provider=provider, stop={"kill_grace": kill_grace, "grace": 10.0})
    master, slave = _pty()
    proc, rd = runs.foreground(spec, stdout=slave, stderr=slave, text=False)
    os.close(slave)
    seen = []
    try:
        v = p.adopt(timeout=10)
        _read_until(master, seen, r"\[1/1\] a · session \d+\.\d s · total \d+\.\d s · > step 42 of 100", 10)
        with stop_latency.measure("foreground ctrl-c, tty progress", v, bound=kill_grace + 2.0):
            proc.send_signal(signal.SIGINT)
            _read_until(master, seen, r"stopping… \d+\.\d s \(Ctrl-C again to kill now\)", 5)
            _read_until(master, seen, r"stopping… 1\.\d s", kill_grace + 2.0)
            shown = [float(x) for x in re.findall(r"stopping… (\d+\.\d) s", "".join(seen))]
            assert shown == sorted(shown) and len(set(shown)) >= 2, shown  # it counts up
            assert proc.wait(timeout=kill_grace + 5) == Exit.STOPPED
        try:
            _read_until(master, seen, r"exit 4\)", 5)
        except AssertionError:
            pass  # read again below, for the message
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        os.close(master)
    text = "".join(seen)
    R.wait_engine_exit(rd)
    assert f"run {rd.run_id}: stopped (exit {int(Exit.STOPPED)})" in text, text[-2000:]
    assert re.search(r"\r\n?a +stopped +1 ", text), text[-2000:]
    stops = R.events(rd, "run-stop")
    assert len(stops) == 1 and (stops[0]["origin"], stops[0]["fallback"]) == ("ctrl-c", False), stops
    assert not R.tagged(rd.run_id)


def test_a_damaged_journal_turns_the_display_off_not_the_stop(runs, tmp_path, victim, stop_latency):
    """Path: a foreground run (stderr a pipe) whose journal.jsonl is swapped for a FIFO
    while the session runs (the engine appends through the descriptor it holds): the
    display says once that it is off, naming the journal, and the run goes on; Ctrl-C
    still stops it within about kill_grace (exit STOPPED, one run-stop, origin ctrl-c),
    and the summary is still printed from the state."""
    p = victim.prepare("trap-term")
    proc, rd = runs.foreground(runs.spec(items=("a",), provider=p.argv, stop=STOP))
    try:
        R.wait_event(rd, "session-start", item="a")
        v = p.adopt(timeout=10)
        kept = rd.path / "journal.kept"
        os.rename(rd.journal, kept)
        os.mkfifo(rd.journal)
        time.sleep(0.5)  # several ticks of the display
        assert proc.poll() is None
        with stop_latency.measure("foreground ctrl-c, display off", v, bound=KILL_GRACE + 2.0):
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=10) == Exit.STOPPED
    finally:
        if proc.poll() is None:
            proc.kill()
        out, err = proc.communicate()
    off = [ln for ln in err.splitlines() if "progress display off" in ln]
    assert len(off) == 1 and "journal.jsonl" in off[0], err
    assert "stopping" in err
    assert out.splitlines()[1].split()[:3] == ["a", "stopped", "1"], out
    R.wait_engine_exit(rd)
    os.unlink(rd.journal)
    os.rename(kept, rd.journal)
    stops = R.events(rd, "run-stop")
    assert len(stops) == 1 and stops[0]["origin"] == "ctrl-c", stops
    assert not R.tagged(rd.run_id)


def test_live_line_shows_the_repair_attempt_and_the_last_output(runs, tmp_path):
    """Path: the live line drawn (progress.Progress, on a stream taken for a terminal)
    over a real run's files while its repair session runs: it names the item (2/2), the
    repair phase with its elapsed time, "repair 1/2", and the repair session's last
    output line (a progress bar's carriage return ends a line too)."""
    import io

    from runner.files.spec import load_frozen
    from runner.views import progress

    gate = tmp_path / "gate"
    gate.touch()
    provider = R.sh(
        'if [ -n "$2" ]; then printf "fixing %s\\nstep 1\\rstep 2" "$1"; while [ -e "$3" ]; do sleep 0.05; done; fi',
        "{item}",
        "{feedback}",
        str(gate),
    )
    spec = runs.spec(
        items=("a", "b"),
        provider=provider,
        verify=[{"command": R.sh(VERIFY, "{item}")}],
        repair={"max_attempts": 2},
        retry={"backoff": 0.1},
        stop=STOP,
    )
    rd = runs.start(spec)
    R.wait_event(rd, "repair-dispatch", item="b")
    stream = io.StringIO()
    show = progress.Show(stream, io.StringIO(), tty=True)
    said = []
    watch = progress.Progress(rd, load_frozen(rd.spec), show, said.append, since=0.0)
    deadline = time.monotonic() + 10
    pattern = r"\[2/2\] b · repair \d+\.\d s · total \d+\.\d s · repair 1/2 · > step 2$"
    while True:
        watch._next_draw = watch._next_list = 0.0  # draw now, and look for the newest file
        watch.tick()
        line = stream.getvalue().rsplit(progress.CLEAR, 1)[-1]
        if re.search(pattern, line):
            break
        assert time.monotonic() < deadline, (line, said)
        time.sleep(0.05)
    assert said == []
    failing = [ln for ln in stream.getvalue().split(progress.CLEAR) if "verify `" in ln]
    assert failing and "exited 7" in failing[0], stream.getvalue()  # what went wrong stays on screen
    assert R.runner("stop", "--run-dir", rd.path).returncode == Exit.OK
    R.wait_engine_exit(rd)
    gate.unlink()


def test_foreground_resume_shows_only_its_own_phases(runs, tmp_path):
    """Path: a run stopped in its first item's session, then `runner resume` in the
    foreground (stderr a pipe): its phase lines are those of the new attempt only (the
    journal's past is folded, not printed again), and its summary counts both attempts
    (item a: two sessions)."""
    gate = tmp_path / "gate"
    gate.touch()
    provider = R.sh('[ "$1" != a ] || [ ! -e "$2" ] || while [ -e "$2" ]; do sleep 0.05; done', "{item}", str(gate))
    rd = runs.start(runs.spec(items=("a", "b"), provider=provider, stop=STOP))
    R.wait_event(rd, "session-start", item="a")
    assert R.runner("stop", "--run-dir", rd.path).returncode == Exit.OK
    R.wait_engine_exit(rd)
    gate.unlink()
    proc = R.runner("resume", "--run-dir", rd.path)
    assert proc.returncode == Exit.OK, proc.stderr
    started = [ln for ln in proc.stderr.splitlines() if ln.endswith(" started")]
    attempt2 = R.events(rd, "run-start")[-1]["t"]
    assert len(started) == len([e for e in R.events(rd, "phase-start") if e["t"] >= attempt2]), proc.stderr
    assert started[0] == "runner: [1/2] a: session started", proc.stderr
    assert not any("stopped" in ln for ln in proc.stderr.splitlines()), proc.stderr  # attempt 1's end
    rows = {ln.split()[0]: ln.split() for ln in proc.stdout.splitlines()[1:3]}
    assert rows["a"][:3] == ["a", "done", "2"] and rows["b"][:3] == ["b", "done", "1"], proc.stdout


def test_second_ctrl_c_killing_line_comes_before_the_final_lines(runs, tmp_path, victim, stop_latency):
    """Path: the second Ctrl-C on a terminal (lifecycle._foreground, Progress.killed):
    the live line "killing now… N s" is drawn before the kill, the kill's one line is said
    after it, and nothing of the live line is drawn after that line (the summary and the
    final "(exit 4)" line follow it). Ablation killing-line-before-result: without
    Progress.killed the loop's next tick draws "killing now… N s" below the kill's line."""
    kill_grace = 1.5  # the kill waits it out: the first Ctrl-C's stop is still in its grace
    p = victim.prepare("trap-term")
    spec = runs.spec(items=("a",), provider=p.argv, stop={"kill_grace": kill_grace, "grace": 10.0})
    master, slave = _pty()
    proc, rd = runs.foreground(spec, stdout=slave, stderr=slave, text=False)
    os.close(slave)
    seen = []
    try:
        v = p.adopt(timeout=10)
        R.wait_event(rd, "session-start", item="a")
        with stop_latency.measure("foreground second ctrl-c, tty", v, bound=2 * kill_grace + 3.0):
            proc.send_signal(signal.SIGINT)
            _read_until(master, seen, r"stopping… \d+\.\d s \(Ctrl-C again to kill now\)", 5)
            proc.send_signal(signal.SIGINT)
            _read_until(master, seen, r"killing now… \d+\.\d s", 5)
            assert proc.wait(timeout=2 * kill_grace + 5) == Exit.STOPPED
        _read_until(master, seen, r"exit 4\)", 5)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        os.close(master)
    text = "".join(seen)
    R.wait_engine_exit(rd)
    # The kill's line: the engine's stop or this stopper's kill, whichever the race gave.
    said = re.search(rf"runner: run {rd.run_id} (stopped|killed) ", text)
    assert said, text[-3000:]
    result = said.start()
    assert text.rfind("killing now…") < result, text[-2000:]
    assert text.index(f"run {rd.run_id}: stopped (exit {int(Exit.STOPPED)})") > result
    assert not R.tagged(rd.run_id)
