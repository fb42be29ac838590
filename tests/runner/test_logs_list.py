"""`runner logs [ITEM] [--follow]` and `runner list`, against real runs (`python -m
runner`): the captured output of each command under a header naming its item, attempt
and command, across a resume; `--follow` printing a live command's output as it comes
and ending by itself when the run ends; a bad item name as one line and BAD_INPUT; the
list of runs with a damaged run as a row of its own, and its --json keys documented
(docs/list-json.md)."""

import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path

import runs as R

from runner.exitcodes import Exit
from runner.files.rundir import RunDir
from runner.views import schema

KILL_GRACE = 0.3
STOP = {"kill_grace": KILL_GRACE, "grace": 5.0}
LIST_DOC = Path(__file__).resolve().parents[2] / "docs" / "list-json.md"


def test_logs_prints_each_commands_output_under_its_header(runs):
    """Path: a finished two-item run whose provider and verify command print: `runner
    logs` prints every file in the order the commands ran, each under `==> item X,
    attempt N, NAME (FILE) <==`; `runner logs b` only item b's."""
    spec = runs.spec(
        items=("a", "b"),
        provider=R.sh('echo "provider says $1"', "{item}"),
        verify=[{"command": R.sh('echo "verify says $1"', "{item}")}],
        post_run=[{"command": R.sh("echo post run")}],
        stop=STOP,
    )
    rd = runs.start(spec)
    assert R.runner("wait", "--run-dir", rd.path).returncode == Exit.OK
    proc = R.runner("logs", "--run-dir", rd.path)
    assert proc.returncode == Exit.OK, proc.stderr
    blocks = [b.strip().splitlines() for b in proc.stdout.split("==> ")[1:]]
    heads = [b[0] for b in blocks]
    assert heads == [
        "item a, attempt 1, session (1-0001-0-session.log) <==",
        "item a, attempt 1, verify0 (1-0002-0-verify0.log) <==",
        "item b, attempt 1, session (1-0003-1-session.log) <==",
        "item b, attempt 1, verify0 (1-0004-1-verify0.log) <==",
        "post_run, attempt 1, post_run0 (1-0005-run-post_run0.log) <==",
    ], proc.stdout
    assert [b[1:] for b in blocks] == [
        ["provider says a"],
        ["verify says a"],
        ["provider says b"],
        ["verify says b"],
        ["post run"],
    ]
    only_b = R.runner("logs", "b", "--run-dir", rd.path)
    assert only_b.returncode == Exit.OK
    assert only_b.stdout.count("==> ") == 2 and "provider says b" in only_b.stdout
    assert "says a" not in only_b.stdout and "item a" not in only_b.stdout and "post run" not in only_b.stdout


def test_logs_bad_item_is_one_line_bad_input(runs):
    """Path: `runner logs NOPE` on a run without that item: one stderr line naming the
    item and the run's items, exit BAD_INPUT, nothing on stdout."""
    rd = runs.start(runs.spec(items=("a", "b"), provider=["true"], stop=STOP))
    assert R.runner("wait", "--run-dir", rd.path).returncode == Exit.OK
    proc = R.runner("logs", "nope", "--run-dir", rd.path)
    assert proc.returncode == Exit.BAD_INPUT
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "'nope'" in lines[0] and "items: a, b" in lines[0], proc.stderr
    assert proc.stdout == ""


def test_logs_keep_both_attempts_of_a_resumed_run(runs, tmp_path):
    """Path: a run stopped in its session, then resumed: the first attempt's session
    output is kept (attempt 2 writes files of its own) and `runner logs` shows both."""
    gate = tmp_path / "gate"
    gate.touch()
    provider = R.sh('echo "session of $1"; while [ -e "$2" ]; do sleep 0.05; done', "{item}", str(gate))
    rd = runs.start(runs.spec(items=("a",), provider=provider, stop=STOP))
    R.wait_event(rd, "session-start", item="a")
    assert R.runner("stop", "--run-dir", rd.path).returncode == Exit.OK
    R.wait_engine_exit(rd)
    gate.unlink()
    assert R.runner("resume", "--run-dir", rd.path).returncode == Exit.OK
    proc = R.runner("logs", "a", "--run-dir", rd.path)
    assert proc.returncode == Exit.OK, proc.stderr
    assert "item a, attempt 1, session (1-0001-0-session.log)" in proc.stdout, proc.stdout
    assert "item a, attempt 2, session (2-0001-0-session.log)" in proc.stdout, proc.stdout
    assert proc.stdout.count("session of a") == 2


def test_logs_follow_prints_live_output_and_ends_with_the_run(runs, tmp_path):
    """Path: `runner logs --follow` started on a live run whose provider printed one
    line and waits on a gate: the line arrives while the command still runs; once the
    gate opens the provider prints a second line and the run completes, and the follower
    prints it and exits OK by itself (no signal, no timeout)."""
    gate = tmp_path / "gate"
    gate.touch()
    provider = R.sh('echo first; while [ -e "$1" ]; do sleep 0.05; done; echo second', str(gate))
    rd = runs.start(runs.spec(items=("a",), provider=provider, stop=STOP))
    R.wait_event(rd, "session-start", item="a")
    follower = subprocess.Popen(
        [*R.RUNNER, "logs", "--follow", "--run-dir", str(rd.path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(follower.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 10
        while "first\n" not in lines:
            assert time.monotonic() < deadline, f"no live output from --follow: {lines}"
            assert follower.poll() is None, follower.stderr.read()
            time.sleep(0.02)
        assert rd.is_live() and "second\n" not in lines
        gate.unlink()
        assert follower.wait(timeout=15) == Exit.OK, follower.stderr.read()
        reader.join(5)
    finally:
        if follower.poll() is None:
            follower.kill()
        follower.wait()
    assert not rd.is_live() and R.state(rd).status == "completed"
    assert lines.index("first\n") < lines.index("second\n"), lines


def test_list_shows_runs_and_a_damaged_run_as_a_row(runs, tmp_path):
    """Path: `runner list` from the directory holding .runner/runs (the default base)
    and with --runs-dir: a completed run, a failed run, and a run whose state.json is
    binary: one row each with status, items and age; the damaged run's row says
    "unknown" (as `status` does) and "damaged:", naming state.json; exit OK, no traceback. --json has the same rows."""
    base = tmp_path / ".runner" / "runs"
    done = R.start(runs.spec(name="ok.toml", items=("a", "b"), provider=["true"], stop=STOP), base / "r1-done")
    runs.started.append(done.path)
    failed = R.start(runs.spec(name="bad.toml", items=("a",), provider=["false"], stop=STOP), base / "r2-failed")
    runs.started.append(failed.path)
    broken = R.start(runs.spec(name="broken.toml", items=("a",), provider=["true"], stop=STOP), base / "r3-broken")
    runs.started.append(broken.path)
    for rd in (done, failed, broken):
        R.runner("wait", "--run-dir", rd.path)
    broken.state.write_bytes(b"\xff\x00 not a state")

    for proc in (
        subprocess.run(
            [*R.RUNNER, "list"], capture_output=True, text=True, cwd=tmp_path, stdin=subprocess.DEVNULL, timeout=60
        ),
        R.runner("list", "--runs-dir", base),
    ):
        assert proc.returncode == Exit.OK, proc.stderr
        assert "Traceback" not in proc.stderr
        lines = proc.stdout.splitlines()
        # Directories named apart from their ids: each name beside its id (issue 42).
        assert lines[0].split() == ["run", "directory", "status", "engine", "attempt", "items", "age"], proc.stdout
        rows = {ln.split()[0]: ln for ln in lines[1:]}
        assert set(rows) == {done.run_id, failed.run_id, broken.run_id}, proc.stdout
        assert rows[done.run_id].split()[1:6] == ["r1-done", "completed", "1", "2/2", "done"]
        assert rows[failed.run_id].split()[1:8] == ["r2-failed", "failed", "1", "0/1", "done,", "1", "failed"]
        assert "s ago" in rows[done.run_id]
        assert rows[broken.run_id].split()[2] == "unknown" and "damaged: " in rows[broken.run_id]
        assert "state.json" in rows[broken.run_id]

    data = json.loads(R.runner("list", "--json", "--runs-dir", base).stdout)
    assert all(set(r) == set(schema.RunRow.__annotations__) for r in data), data  # every key documented
    by_id = {r["run_id"]: r for r in data}
    assert by_id[done.run_id]["status"] == "completed" and by_id[done.run_id]["done"] == 2
    assert by_id[broken.run_id]["status"] == "unknown" and "state.json" in by_id[broken.run_id]["damaged"][0]


def test_list_shows_a_held_pause_as_paused_and_a_waiting_one_as_pause_asked(runs, tmp_path):
    """Path: run_list._pause (a live run's PAUSE file, then its journal's tail) and the
    table's status column (issue 42): a run whose engine journaled `paused` shows
    `paused`, one whose PAUSE waits for the end of its session `pause asked`, a run of
    the default name shows no directory column; `--json`'s `pause` says held / asked.
    Ablation: without _pause both show `running`, as before."""
    base = tmp_path / ".runner" / "runs"
    gate = tmp_path / "gate"
    quick = runs.spec(name="quick.toml", items=("a", "b"), provider=R.gated(gate), stop=STOP)
    slow = runs.spec(name="slow.toml", items=("a",), provider=["sleep", "600"], stop=STOP)

    def start(spec):  # under the default base, named by its id
        proc = subprocess.run(
            [*R.RUNNER, "run", spec, "--detach"], capture_output=True, text=True, cwd=tmp_path, timeout=60
        )
        assert proc.returncode == Exit.OK, proc.stderr
        runs.started.append(proc.stdout.strip())
        return RunDir(proc.stdout.strip())

    held, asked = start(quick), start(slow)
    held_dir, asked_dir = held.path, asked.path
    try:
        _pause_rows(held, asked, held_dir, asked_dir, gate, base)
    finally:
        for rd in (held, asked):
            R.runner("stop", "--now", "--run-dir", rd.path)


def _pause_rows(held, asked, held_dir, asked_dir, gate, base):
    R.wait_event(asked, "session-start", item="a")
    R.wait_event(held, "session-start", item="a")
    (asked_dir / "PAUSE").touch()
    (held_dir / "PAUSE").touch()
    gate.touch()  # item a's session ends: the engine holds at the PAUSE before its next phase
    R.wait_event(held, "paused")
    proc = R.runner("list", "--runs-dir", base)
    assert proc.returncode == Exit.OK, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:3] == ["run", "status", "engine"], proc.stdout  # ids are the names
    rows = {ln.split()[0]: ln for ln in lines[1:]}
    assert rows[held.run_id].split()[1:3] == ["paused", "live"], proc.stdout
    assert rows[asked.run_id].split()[1:4] == ["pause", "asked", "live"], proc.stdout
    data = {r["run_id"]: r for r in json.loads(R.runner("list", "--json", "--runs-dir", base).stdout)}
    assert (data[held.run_id]["pause"], data[asked.run_id]["pause"]) == ("held", "asked")
    assert data[held.run_id]["status"] == "running"  # the status model is unchanged


def test_list_json_keys_are_documented():
    """Path: every key `runner list --json` prints (schema.RunRow; the test above checks
    that the printed rows have exactly these keys) is named in docs/list-json.md, and
    every key the document names is printed."""
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", LIST_DOC.read_text(), re.M))
    keys = set(schema.RunRow.__annotations__)
    assert keys == documented, (sorted(keys - documented), sorted(documented - keys))


def test_list_of_an_empty_or_missing_base(tmp_path):
    """Path: `runner list` with no runs (no base directory at all): says so, exit OK."""
    proc = R.runner("list", "--runs-dir", tmp_path / "none")
    assert proc.returncode == Exit.OK and proc.stdout.startswith("no runs under "), proc
    assert not os.path.exists(tmp_path / "none")


def test_logs_into_a_closed_pipe_exits_ok(runs):
    """Path: `runner logs | head -1`: the reader closes the pipe after one line while
    logs still has most of a 1 MB output to write: exit OK, nothing on stderr (no
    internal error for a reader that had enough)."""
    provider = R.sh("head -c 1000000 /dev/zero | tr '\\0' '\\n'")
    rd = runs.start(runs.spec(items=("a",), provider=provider, stop=STOP))
    assert R.runner("wait", "--run-dir", rd.path).returncode == Exit.OK
    proc = subprocess.Popen(
        [*R.RUNNER, "logs", "--run-dir", str(rd.path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout.readline().startswith(b"==> item a")
        proc.stdout.close()
        assert proc.wait(timeout=30) == Exit.OK
        assert proc.stderr.read() == b""
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
