"""Helpers for tests that drive a real `runner` (as `python -m runner`, so that a
mutation run's scratch copy on PYTHONPATH is the code under test)."""

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from runner.files import identity_file
from runner.files import journal as journalmod
from runner.files.rundir import RunDir
from runner.files.state import StateStore
from runner.proc import identity, signals

RUNNER = [sys.executable, "-m", "runner"]


def _toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def write_spec(
    path,
    *,
    items=("a",),
    provider,
    call_timeout=None,
    idle_timeout=None,
    stop=None,
    post_session=(),
    post_run=(),
    verify=(),
    repair=None,
    retry=None,
):
    """Write a spec. Commands are argv lists; hook/verify entries are dicts with
    `command` and optional `timeout` / `fixable`."""
    lines = [f"items = {_toml_value(list(items))}", "", "[provider]", f"command = {_toml_value(list(provider))}"]
    if call_timeout is not None:
        lines.append(f"call_timeout = {_toml_value(call_timeout)}")
    if idle_timeout is not None:
        lines.append(f"idle_timeout = {_toml_value(idle_timeout)}")
    for table, values in (("stop", stop), ("repair", repair), ("retry", retry)):
        if values:
            lines += ["", f"[{table}]"] + [f"{k} = {_toml_value(v)}" for k, v in values.items()]
    for table, entries in (("hooks.post_session", post_session), ("hooks.post_run", post_run), ("verify", verify)):
        for entry in entries:
            lines += ["", f"[[{table}]]"] + [f"{k} = {_toml_value(v)}" for k, v in entry.items()]
    Path(path).write_text("\n".join(lines) + "\n")
    return Path(path)


def runner(*args, timeout=60, env=None):
    proc = subprocess.run(
        [*RUNNER, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL
    )
    proc.stderr = with_traceback(proc.stderr)  # an internal error's traceback, in the test's report
    return proc


def start(spec_path, run_dir, *, timeout=60):
    """`runner run --detach`; returns the RunDir once the engine is up."""
    proc = runner("run", spec_path, "--run-dir", run_dir, "--detach", timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    return RunDir(run_dir)


def journal(rd):
    return journalmod.read(rd.journal)


def events(rd, name, **match):
    return [e for e in journal(rd) if e.get("event") == name and all(e.get(k) == v for k, v in match.items())]


def wait_event(rd, name, timeout=30.0, **match):
    """Wait for a journal event (the engine's own record) and return it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = events(rd, name, **match)
        if found:
            return found[-1]
        time.sleep(0.01)
    raise AssertionError(f"no {name} {match} in {rd.journal} after {timeout}s: {[e.get('event') for e in journal(rd)]}")


def wait_in_call(rd, timeout=30.0, **match):
    """Until the engine is idle in a provider call: its `session-start` journaled, then
    the call's child file (children/PID.json), which the engine writes last before it
    waits on the call. From then on the engine writes nothing until the call ends or a
    stop wakes it. Returns the session-start event."""
    event = wait_event(rd, "session-start", timeout=timeout, **match)
    deadline = time.monotonic() + timeout
    while not (rd.children.is_dir() and any(rd.children.glob("*.json"))):
        if time.monotonic() > deadline:
            raise AssertionError(f"no child file in {rd.children} after {timeout}s")
        time.sleep(0.01)
    return event


def wait_engine_exit(rd, timeout=30.0):
    """Until the engine has released its lock and its process is gone."""
    deadline = time.monotonic() + timeout
    while rd.is_live():
        if time.monotonic() > deadline:
            raise AssertionError(f"engine of {rd.path} still live after {timeout}s")
        time.sleep(0.01)
    engine = identity_file.read(rd.engine_identity)
    if not signals.wait_gone(engine, max(deadline - time.monotonic(), 0.0)):
        raise AssertionError(f"engine pid {engine.pid} of {rd.path} still running after {timeout}s")


def state(rd):
    return StateStore(rd.state).load()


def tagged(run_id):
    """Pids of living processes whose RUNNER_RUN_ID tag is of run `run_id` (zombies are
    dead): the bare id, or a membership key "<run_id>.<dev>-<ino>" of any directory."""
    return sorted(tag_values(run_id))


def tag_values(run_id):
    """{pid: its RUNNER_RUN_ID value} of every living process tagged for run `run_id`."""
    needle = f"RUNNER_RUN_ID={run_id}".encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                for var in f.read().split(b"\0"):
                    if var == needle or var.startswith(needle + b"."):
                        found[int(entry)] = var.split(b"=", 1)[1].decode()
        except OSError:
            continue
    return found


def new_run_id():
    """A run id of a test's own, never shared with a real run."""
    return f"t-{uuid.uuid4().hex[:8]}"


FREEZER = Path("/sys/fs/cgroup/freezer")
NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"


def freeze(path, pid):
    """Put `pid` in the cgroup v1 freezer `path`: a real uninterruptible sleep (state D),
    where even a SIGKILL stays pending until the cgroup is thawed."""
    (path / "cgroup.procs").write_text(f"{pid}\n")
    (path / "freezer.state").write_text("FROZEN\n")
    deadline = time.monotonic() + 5
    while identity.stat(pid).state != "D":
        assert time.monotonic() < deadline, "freezer did not put the victim in state D"
        time.sleep(0.005)


def spawn_at_pid(start, pid, **kw):
    """Start a process that the kernel gives exactly `pid` (other helpers fork at the
    same time, so a few attempts may be needed)."""
    if not os.access(NS_LAST_PID, os.W_OK):
        pytest.skip("needs root to write ns_last_pid")
    # Other processes fork meanwhile (a parallel test session: the mutation campaign's
    # other job): many attempts, and none while someone else holds the pid.
    deadline = time.monotonic() + 10
    for _ in range(500):
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.01)
        with open(NS_LAST_PID, "w") as f:
            f.write(str(pid - 1))
        p = start(["sleep", "60"], **kw)
        if p.pid == pid:
            return p
        p.kill()
        p.wait()
    pytest.fail(f"could not get pid {pid} reused in 500 attempts")


def with_traceback(stderr):
    """A CLI's stderr, with the traceback file an internal error names appended (the
    file is on the machine that ran the test: a CI log shows nothing else)."""
    marker = "(traceback: "
    if marker in stderr:
        path = stderr.split(marker, 1)[1].split(")", 1)[0]
        try:
            stderr += "\n" + Path(path).read_text()
        except OSError:
            pass
    return stderr


def sh(script, *args):
    """An argv that runs a POSIX shell script with arguments."""
    return ["/bin/sh", "-c", script, "sh", *args]


HELD_STOP = {"kill_grace": 60.0, "grace": 120.0}
"""A [stop] whose kill grace no test sits out: a stop of a run whose provider traps SIGTERM
stays in flight until the test kills the provider itself (once it has seen what it
checks during the stop), however slow the machine; the grace outlasts the kill grace, so
no stopper falls back meanwhile."""


def gated(gate):
    """A provider whose call ends once the file `gate` exists: the test holds a call in
    flight until it has done what must happen during the call (a click, a request), and
    every later call ends at once, whatever the machine's speed."""
    return sh('while [ ! -e "$1" ]; do sleep 0.02; done', str(gate))


def wait_file(path, timeout=30.0):
    """Until `path` exists (a file another process writes)."""
    deadline = time.monotonic() + timeout
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never appeared in {timeout}s")
        time.sleep(0.01)
