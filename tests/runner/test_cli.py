"""The `runner` command line: one-line errors with documented exit codes, run discovery
without --run-dir, status, wait, what every started process inherits, the call and idle
timeouts, the output cap, a corrupted engine identity, and Ctrl-C on a foreground run.

Every run is a real `python -m runner` (never the console script); every run directory a
test starts is registered with the `runs` fixture, which kills what a failing test left."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import runs as R

from runner.exitcodes import Exit
from runner.files import identity_file
from runner.files.rundir import RunDir
from runner.proc import identity, signals

KILL_GRACE = 0.3
STOP = {"kill_grace": KILL_GRACE, "grace": 5.0}
BLOCK = 'trap "" TERM; while [ -e "$1" ]; do sleep 0.05; done'


def cli(*args, cwd=None, env=None, timeout=60):
    return subprocess.run(
        [*R.RUNNER, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def one_line(text):
    lines = text.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got {len(lines)}:\n{text}"
    return lines[0]


def gated_spec(runs, tmp_path, name="spec.toml", **kw):
    gate = tmp_path / "gate"
    gate.touch()
    return runs.spec(name=name, items=("a",), provider=R.sh(BLOCK, str(gate)), stop=STOP, **kw), gate


# -- bad input ------------------------------------------------------------------------

PROVIDER = '[provider]\ncommand = ["true"]\n'
BAD_SPECS = {
    "missing-items": (PROVIDER, "items"),
    "missing-provider": ('items = ["a"]\n', "provider"),
    "missing-command": ('items = ["a"]\n[provider]\ncall_timeout = 1\n', "provider.command"),
    "unknown-top-key": ('items = ["a"]\nbogus = 1\n' + PROVIDER, "bogus"),
    "unknown-nested-key": ('items = ["a"]\n' + PROVIDER + "[stop]\nkill_grase = 1\n", "stop.kill_grase"),
    "wrong-type": ('items = ["a"]\n[provider]\ncommand = ["true"]\ncall_timeout = "long"\n', "provider.call_timeout"),
    "item-not-string": ("items = [1]\n" + PROVIDER, "items[0]"),
    "command-not-list": ('items = ["a"]\n[provider]\ncommand = "true"\n', "provider.command"),
    "bad-choice": ('items = ["a"]\n' + PROVIDER + '[stop]\ncontainment = "jail"\n', "stop.containment"),
    "negative-timeout": (
        'items = ["a"]\n' + PROVIDER + '[[verify]]\ncommand = ["true"]\ntimeout = -1\n',
        "verify[0].timeout",
    ),
    "bool-timeout": (
        'items = ["a"]\n' + PROVIDER + '[[hooks.post_run]]\ncommand = ["true"]\ntimeout = true\n',
        "hooks.post_run[0].timeout",
    ),
    "bad-toml": ("items = [\n", "(toml)"),
    "not-utf8": (b'items = ["\xff"]\n', "(file)"),
    "missing-file": (None, "(file)"),
}


@pytest.mark.parametrize("kind", sorted(BAD_SPECS))
def test_bad_spec_is_one_line_bad_input_and_starts_nothing(tmp_path, kind):
    """Path: `runner run BAD.toml` for each kind of spec mistake: exit BAD_INPUT, one line
    on stderr naming the file and the key, nothing on stdout, and nothing started: no run
    directory, neither under --run-dir nor under the default .runner/runs."""
    text, key = BAD_SPECS[kind]
    spec = tmp_path / f"{kind}.toml"
    if isinstance(text, bytes):
        spec.write_bytes(text)
    elif text is not None:
        spec.write_text(text)
    for extra in (["--run-dir", tmp_path / "run"], []):
        proc = cli("run", spec, *extra, "--detach", cwd=tmp_path)
        assert proc.returncode == Exit.BAD_INPUT, (proc.returncode, proc.stderr)
        line = one_line(proc.stderr)
        assert line.startswith(f"runner: {spec}: {key}: expected"), line
        assert proc.stdout == ""
        assert not (tmp_path / "run").exists()
        assert not (tmp_path / ".runner").exists()


BAD_FLAGS = [
    [],
    ["run"],
    ["frobnicate"],
    ["stop", "--bogus"],
    ["stop", "--run-dir"],
    ["stop", "--now", "--graceful"],
    ["stop", "--wait"],
    ["status", "--json", "extra"],
    ["run", "spec.toml", "--detach=yes"],
]


@pytest.mark.parametrize("argv", BAD_FLAGS, ids=lambda a: " ".join(a) or "(none)")
def test_bad_flags_are_one_line_bad_input(tmp_path, argv):
    """Path: argparse errors go through the CLI's own error path: exit BAD_INPUT (not
    argparse's 2), one line, no usage dump. Ablation: remove _Parser.error and these
    exit 2 with a usage block."""
    proc = cli(*argv, cwd=tmp_path)
    assert proc.returncode == Exit.BAD_INPUT, (proc.returncode, proc.stderr)
    line = one_line(proc.stderr)
    assert line.startswith("runner"), line
    assert "usage:" not in proc.stderr.lower()
    assert not (tmp_path / ".runner").exists()
    # One prefix (issue 42): "runner: ..." or "runner stop: ...", never "runner: runner".
    assert not re.match(r"runner[^:]*: runner\b", line), line


def test_version_prints_the_distribution_s_version(tmp_path):
    """Path: `runner --version` (cli._Version): the installed pytest-stoplatency's version,
    exit 0, nothing else; `python -m pytest_stoplatency --version` says the same version.
    Ablation: without the option it is a one-line BAD_INPUT."""
    from importlib import metadata

    want = metadata.version("pytest-stoplatency")
    proc = cli("--version", cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"runner {want}\n", "")
    plugin = subprocess.run(
        [sys.executable, "-m", "pytest_stoplatency", "--version"], capture_output=True, text=True, cwd=tmp_path
    )
    assert (plugin.returncode, plugin.stdout, plugin.stderr) == (0, f"pytest-stoplatency {want}\n", "")


def test_second_run_on_a_live_run_dir_is_refused(runs, tmp_path):
    """Path: `runner run --run-dir D` while D's engine lives: exit REFUSED, one line, and the
    live run is untouched (one run-start, same engine)."""
    spec, gate = gated_spec(runs, tmp_path)
    rd = runs.start(spec)
    R.wait_event(rd, "session-start", item="a")
    engine = identity_file.read(rd.engine_identity)
    proc = cli("run", spec, "--run-dir", rd.path, "--detach")
    assert proc.returncode == Exit.REFUSED, (proc.returncode, proc.stderr)
    assert "live engine" in one_line(proc.stderr)
    assert len(R.events(rd, "run-start")) == 1
    assert identity_file.read(rd.engine_identity) == engine and identity.is_running(engine)
    assert cli("stop", "--run-dir", rd.path).returncode == Exit.OK


# -- run discovery --------------------------------------------------------------------


def start_in_cwd(runs, spec, cwd):
    proc = cli("run", spec, "--detach", cwd=cwd)
    assert proc.returncode == Exit.OK, proc.stderr
    path = Path(proc.stdout.strip())
    runs.started.append(path)  # the fixture kills it if the test fails
    assert path.parent == cwd / ".runner" / "runs"
    return RunDir(path)


@pytest.mark.parametrize("command", [["stop"], ["status"], ["wait"]])
def test_no_live_run_without_run_dir(tmp_path, command):
    """Path: stop / status / wait with no --run-dir and no run under .runner/runs:
    exit NO_LIVE_RUN with one line."""
    proc = cli(*command, cwd=tmp_path)
    assert proc.returncode == Exit.NO_LIVE_RUN, (proc.returncode, proc.stderr)
    assert ".runner/runs" in one_line(proc.stderr)


def test_two_live_runs_need_run_dir(runs, tmp_path):
    """Path: two live runs under the default base: stop, status and wait without --run-dir
    refuse with NO_LIVE_RUN and list both candidates; once one is stopped, `runner stop`
    without --run-dir finds the other; with none live, `wait` refuses and names the
    recent runs."""
    spec, gate = gated_spec(runs, tmp_path)
    first, second = start_in_cwd(runs, spec, tmp_path), start_in_cwd(runs, spec, tmp_path)
    for command in (["stop"], ["stop", "--now"], ["status"], ["wait"]):
        proc = cli(*command, cwd=tmp_path)
        assert proc.returncode == Exit.NO_LIVE_RUN, (command, proc.returncode, proc.stderr)
        line = one_line(proc.stderr)
        assert str(first.path) in line and str(second.path) in line, line
    assert first.is_live() and second.is_live()  # nothing was stopped by a refused command

    assert cli("stop", "--run-dir", first.path, cwd=tmp_path).returncode == Exit.OK
    proc = cli("stop", cwd=tmp_path)  # exactly one live run now: found without --run-dir
    assert proc.returncode == Exit.OK, proc.stderr
    R.wait_engine_exit(second)
    assert R.state(second).stopped
    proc = cli("wait", cwd=tmp_path)
    assert proc.returncode == Exit.NO_LIVE_RUN
    assert first.run_id in one_line(proc.stderr) or second.run_id in proc.stderr


def test_status_json(runs, tmp_path):
    """Path: `runner status --json` on a live run reports what the engine wrote: its pid,
    state, item and phase, and the live provider child; after a stop, not live."""
    spec, gate = gated_spec(runs, tmp_path)
    rd = runs.start(spec)
    R.wait_event(rd, "session-start", item="a")
    proc = cli("status", "--run-dir", rd.path, "--json")
    assert proc.returncode == Exit.OK, proc.stderr
    info = json.loads(proc.stdout)
    assert info["run_id"] == rd.run_id and info["live"] is True
    assert info["engine_pid"] == identity_file.read(rd.engine_identity).pid
    assert (info["status"], info["current_item"], info["phase"]) == ("running", "a", "session")
    assert info["stopped"] is False and info["provider_calls"] == 1
    assert [c["name"] for c in info["children"]] == ["session"]

    assert cli("stop", "--run-dir", rd.path).returncode == Exit.OK
    info = json.loads(cli("status", "--run-dir", rd.path, "--json").stdout)
    assert (info["live"], info["status"], info["stopped"], info["stop_origin"]) == (False, "stopped", True, "signal")
    assert info["children"] == []


@pytest.mark.parametrize("provider, code", [(["true"], Exit.OK), (["false"], Exit.FAILED)], ids=["completed", "failed"])
def test_wait_exits_with_the_runs_code(runs, provider, code):
    """Path: `runner wait` on a detached run that completes (0) or fails an item (FAILED)
    exits with the run's own code."""
    rd = runs.start(runs.spec(items=("a",), provider=provider, stop=STOP))
    proc = cli("wait", "--run-dir", rd.path)
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert R.state(rd).exit_code == code


def test_wait_exits_stopped_when_the_run_is_stopped(runs, tmp_path):
    """Path: `runner wait` blocked on a live run that is then stopped exits STOPPED."""
    spec, gate = gated_spec(runs, tmp_path)
    rd = runs.start(spec)
    R.wait_event(rd, "session-start", item="a")
    waiter = subprocess.Popen(
        [*R.RUNNER, "wait", "--run-dir", str(rd.path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        time.sleep(0.2)
        assert waiter.poll() is None  # it waits for the run
        assert cli("stop", "--run-dir", rd.path).returncode == Exit.OK
        assert waiter.wait(timeout=10) == Exit.STOPPED
    finally:
        if waiter.poll() is None:
            waiter.kill()
        waiter.communicate()


# -- what started processes get -------------------------------------------------------


def test_every_started_process_gets_run_id_and_dev_null_stdin(runs, tmp_path):
    """Path: provider, post_session hook, verify and post_run hook each record their
    environment and `readlink /proc/self/fd/0`: each carries RUNNER_RUN_ID=<run key> (the
    run id and the run directory's identity, RunDir.key) and
    the environment of `runner run` (a marker variable), and reads /dev/null. (The engine
    itself already has /dev/null as stdin, so the child runner's own stdin=DEVNULL is
    proven by the unit test below.)"""
    record = 'env > "$1/env-$2"; readlink /proc/self/fd/0 > "$1/stdin-$2"'
    names = ("provider", "post_session", "verify", "post_run")
    cmd = {n: R.sh(record, str(tmp_path), n) for n in names}
    spec = runs.spec(
        items=("a",),
        provider=cmd["provider"],
        stop=STOP,
        post_session=[{"command": cmd["post_session"]}],
        verify=[{"command": cmd["verify"]}],
        post_run=[{"command": cmd["post_run"]}],
    )
    env = dict(os.environ, STOPLATENCY_TEST_MARKER="from-runner-run")
    env.pop("RUNNER_RUN_ID", None)
    run_dir = tmp_path / "run"
    runs.started.append(run_dir)
    proc = R.runner("run", spec, "--run-dir", run_dir, "--detach", env=env)
    assert proc.returncode == Exit.OK, proc.stderr
    rd = RunDir(run_dir)
    assert cli("wait", "--run-dir", rd.path).returncode == Exit.OK
    for name in names:
        lines = (tmp_path / f"env-{name}").read_text().splitlines()
        assert f"RUNNER_RUN_ID={rd.key(rd.run_id)}" in lines, name
        assert "STOPLATENCY_TEST_MARKER=from-runner-run" in lines, name
        assert (tmp_path / f"stdin-{name}").read_text().strip() == "/dev/null", name


def test_child_runner_gives_dev_null_stdin_even_when_ours_is_a_pipe(tmp_path):
    """Path: child.run_child, called in this process while fd 0 is a pipe: the child reads
    /dev/null, not the caller's stdin, and gets the env it was given. Ablation: drop
    stdin=subprocess.DEVNULL in child.run_child and the child reads the pipe."""
    from runner.engine.child import run_child
    from runner.engine.registry import Registry

    registry = Registry(tmp_path / "children", run_id="h5-stdin-probe", kill_grace=KILL_GRACE)
    out = tmp_path / "stdin"
    r, w = os.pipe()
    saved = os.dup(0)
    try:
        os.dup2(r, 0)
        result = run_child(
            R.sh('readlink /proc/self/fd/0 > "$1"; echo "$RUNNER_RUN_ID" >> "$1"', str(out)),
            registry=registry,
            name="probe",
            timeout=10,
            idle_timeout=0,
            env=dict(os.environ, RUNNER_RUN_ID="h5-stdin-probe"),
            output_path=tmp_path / "probe.log",
            cap_bytes=4096,
        )
    finally:
        os.dup2(saved, 0)
        for fd in (saved, r, w):
            os.close(fd)
    assert result.returncode == 0 and not result.stopped and not result.timed_out
    assert out.read_text().splitlines() == ["/dev/null", "h5-stdin-probe"]


def _session_end(rd):
    ends = R.events(rd, "session-end", item="a")
    assert len(ends) == 1, ends
    return ends[0]


def test_call_timeout_kills_the_whole_tree(runs, victim):
    """Path: a provider (a `forker` victim: traps SIGTERM, two trapping children) that
    outlives call_timeout is killed with its whole tree and journaled call-timeout, its
    session ends with outcome timeout, the item fails, the run exits FAILED: no
    engine-crash, no run-stop. Ablation: skip _kill_tree after a timeout and the
    children survive."""
    p = victim.prepare("forker")
    rd = runs.start(runs.spec(items=("a",), provider=p.argv, call_timeout=1.0, idle_timeout=0, stop=STOP))
    v = p.adopt(timeout=10)
    assert len(v.tree()) >= 3
    assert cli("wait", "--run-dir", rd.path).returncode == Exit.FAILED
    assert v.wait_gone(1.0), v.tree()
    assert len(R.events(rd, "call-timeout")) == 1
    end = _session_end(rd)
    assert end["outcome"] == "timeout"
    assert 1.0 <= end["duration"] < 1.0 + KILL_GRACE + 2.0
    assert R.events(rd, "item-failed", item="a")[0]["reason"] == "session timeout"
    assert not R.events(rd, "engine-crash") and not R.events(rd, "run-stop")
    assert R.state(rd).status == "failed"
    assert not R.tagged(rd.run_id)


def test_idle_timeout_counts_from_the_last_output(runs, tmp_path):
    """Path: a provider that prints every 0.1 s for about 1 s, then stays silent (ignoring
    SIGTERM, with a sleeping child) past idle_timeout 0.5: killed with its tree and
    journaled idle-timeout, not before its output stopped (output resets the clock), not
    as a crash."""
    chatty = 'i=0; while [ $i -lt 10 ]; do echo tick $i; sleep 0.1; i=$((i+1)); done; trap "" TERM; sleep 60'
    rd = runs.start(runs.spec(items=("a",), provider=R.sh(chatty), call_timeout=0, idle_timeout=0.5, stop=STOP))
    assert cli("wait", "--run-dir", rd.path).returncode == Exit.FAILED
    assert len(R.events(rd, "idle-timeout")) == 1 and not R.events(rd, "call-timeout")
    end = _session_end(rd)
    assert end["outcome"] == "timeout"
    assert 1.0 + 0.5 <= end["duration"] < 1.0 + 0.5 + KILL_GRACE + 2.0, end
    assert not R.events(rd, "engine-crash")
    assert not R.tagged(rd.run_id)
    log = next(rd.output.glob("*-session.log")).read_text()
    assert "tick 9" in log


def test_output_captured_with_a_size_cap(runs, tmp_path):
    """Path: a provider writing 200000 bytes with [output] cap_bytes = 1000: its log under
    output/ keeps the first 1000 bytes and says how much was dropped."""
    spec = runs.spec(items=("a",), provider=R.sh("head -c 200000 /dev/zero | tr '\\0' x"), stop=STOP)
    with open(spec, "a") as f:
        f.write("\n[output]\ncap_bytes = 1000\n")
    rd = runs.start(spec)
    assert cli("wait", "--run-dir", rd.path).returncode == Exit.OK
    logs = list(rd.output.glob("*-session.log"))
    assert len(logs) == 1
    data = logs[0].read_bytes()
    assert data.startswith(b"x" * 1000) and not data.startswith(b"x" * 1001)
    assert len(data) < 1200
    assert b"199000 more bytes dropped" in data


# -- a corrupted identity -------------------------------------------------------------


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda text: text[: len(text) // 2],  # torn
        lambda text: json.dumps({**json.loads(text), "pid": "12x"}),  # wrong type
        lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != "start_ticks"}),
    ],
    ids=["torn", "wrong-type", "missing-field"],
)
def test_stop_now_stops_a_run_whose_engine_identity_is_malformed(runs, tmp_path, corrupt):
    """Path: engine.json written by a real run, corrupted by the test: `runner stop --now`
    is total. It never reads the file as "nothing to kill": it finds the engine as the
    holder of the run's lock (/proc/locks), proves it by the run's tag, and kills it and
    its provider. It exits DAMAGED with a line naming engine.json."""
    spec, gate = gated_spec(runs, tmp_path)
    rd = runs.start(spec)
    R.wait_event(rd, "session-start", item="a")
    engine = identity_file.read(rd.engine_identity)
    rd.engine_identity.write_text(corrupt(rd.engine_identity.read_text()))
    proc = cli("stop", "--now", "--run-dir", rd.path)
    assert proc.returncode == Exit.DAMAGED, (proc.returncode, proc.stderr)
    assert "engine.json" in proc.stderr and "Traceback" not in proc.stderr
    assert all(line.startswith("runner: ") for line in proc.stderr.splitlines()), proc.stderr
    assert signals.wait_gone(engine, 5.0) and not rd.is_live()
    assert R.tagged(rd.run_id) == []


# -- the foreground run and Ctrl-C ----------------------------------------------------


def foreground(tmp_path, spec, runs):
    return runs.foreground(spec)


def _reap(proc):
    if proc.poll() is None:
        proc.kill()
    return proc.communicate()


def test_foreground_ctrl_c_stops_the_run(runs, tmp_path, victim, stop_latency):
    """Path: a foreground `runner run` given SIGINT (Ctrl-C; the engine is in its own
    session and never sees the terminal's signal): the CLI lodges a hard stop and forwards
    it, the engine records the stop with origin ctrl-c (one run-stop, no fallback), and the
    CLI exits STOPPED. The trap-term provider is gone within about kill_grace."""
    p = victim.prepare("trap-term")
    spec = runs.spec(items=("a",), provider=p.argv, stop=STOP)
    proc, rd = foreground(tmp_path, spec, runs)
    try:
        R.wait_event(rd, "session-start", item="a")
        v = p.adopt(timeout=10)
        with stop_latency.measure("foreground ctrl-c", v, bound=KILL_GRACE + 2.0):
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=10) == Exit.STOPPED
    finally:
        out, err = _reap(proc)
    assert "stopping" in err
    R.wait_engine_exit(rd)
    stops = R.events(rd, "run-stop")
    assert len(stops) == 1 and (stops[0]["origin"], stops[0]["fallback"]) == ("ctrl-c", False), stops
    assert R.state(rd).stop_origin == "ctrl-c"
    assert not R.tagged(rd.run_id)


def test_foreground_second_ctrl_c_kills_now(runs, tmp_path, victim, stop_latency):
    """Path: the engine is wedged (SIGSTOPped), so the first Ctrl-C cannot be honored; the
    second Ctrl-C is `--now`: every process of the run is killed within about kill_grace,
    the stop is recorded forced (one run-stop, forced true, fallback false) and the CLI
    exits STOPPED. Ablation: drop the second-interrupt branch in cli._foreground and the
    CLI waits for the wedged engine forever."""
    p = victim.prepare("trap-term")
    spec = runs.spec(items=("a",), provider=p.argv, stop=STOP)
    proc, rd = foreground(tmp_path, spec, runs)
    try:
        R.wait_event(rd, "session-start", item="a")
        v = p.adopt(timeout=10)
        engine = identity_file.read(rd.engine_identity)
        os.kill(engine.pid, signal.SIGSTOP)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        assert proc.poll() is None and identity.is_running(engine)  # the first one waits
        with stop_latency.measure("foreground second ctrl-c", v, bound=KILL_GRACE + 2.0):
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=10) == Exit.STOPPED
    finally:
        out, err = _reap(proc)
    assert not identity.is_running(engine)
    R.wait_engine_exit(rd, timeout=5)
    stops = R.events(rd, "run-stop")
    assert len(stops) == 1, stops
    assert (stops[0]["origin"], stops[0]["forced"], stops[0]["fallback"]) == ("forced", True, False)
    assert R.state(rd).stopped
    assert not R.tagged(rd.run_id)
