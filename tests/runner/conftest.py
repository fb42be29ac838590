import contextlib
import os
import subprocess
import time
from pathlib import Path

import pytest
import runs as runs_helpers

from runner.control import stop
from runner.engine.registry import Registry
from runner.errors import RunnerError
from runner.files.rundir import RunDir
from runner.proc import reaper

REGISTRY_KILL_GRACE = 0.3


@pytest.fixture
def spawn(victim):
    """Start a prepared victim ourselves, in its own process group (optionally in a run's
    cgroup, optionally tagged with a run id); everything is reaped and swept afterwards,
    even when the test fails."""
    popens, run_ids = [], []

    def start(kind, *, cgroup=None, run_id=None, **kw):
        prepared = victim.prepare(kind, **kw)
        env = {k: v for k, v in os.environ.items() if k != "RUNNER_RUN_ID"}
        if run_id:
            env["RUNNER_RUN_ID"] = run_id
            run_ids.append(run_id)
        argv = cgroup.wrap_argv(prepared.argv) if cgroup else prepared.argv
        proc = subprocess.Popen(argv, process_group=0, env=env, stdin=subprocess.DEVNULL)
        popens.append(proc)
        return prepared.adopt(process=proc)

    yield start
    for run_id in run_ids:
        reaper.kill_tagged(run_id, 0.0)
    for proc in popens:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.fixture
def procs():
    """Start plain processes (`sleep 60` unless told otherwise); every one is killed and
    reaped at teardown, even when the test fails."""
    started = []

    def start(argv=("sleep", "60"), **kw):
        p = subprocess.Popen(list(argv), **kw)
        started.append(p)
        return p

    yield start
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()


@pytest.fixture
def reg(tmp_path):
    """A registry of the test's own run id (kill_grace REGISTRY_KILL_GRACE)."""
    run_id = runs_helpers.new_run_id()
    registry = Registry(tmp_path / "children", run_id=run_id, kill_grace=REGISTRY_KILL_GRACE)
    yield registry
    reaper.kill_tagged(run_id, 0.0)


class Runs:
    """Starts detached runs in the test's tmp_path and remembers them, so that the
    fixture's teardown can kill whatever a failed test left behind."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.started = []

    def spec(self, name="spec.toml", **kwargs):
        return runs_helpers.write_spec(self.tmp_path / name, **kwargs)

    def __getattr__(self, name):
        # The fixture shadows the helper module of the same name in a test's
        # signature, so it answers for the module's helpers too.
        return getattr(runs_helpers, name)

    def start(self, spec_path, name="run"):
        run_dir = self.tmp_path / name
        self.started.append(run_dir)
        return runs_helpers.start(spec_path, run_dir)

    def finished(self, base, n):
        """`n` completed one-item runs under tmp_path/`base` (each engine waited out): a
        runs directory for the costs-per-run tests; returns its path."""
        (self.tmp_path / base).mkdir()
        for i in range(n):
            rd = self.start(self.spec(name=f"{base}-{i}.toml", items=["a"], provider=["true"]), name=f"{base}/r{i:02d}")
            runs_helpers.wait_engine_exit(rd)
        return self.tmp_path / base

    def foreground(self, spec_path, name="run", **popen):
        """`runner run` in the foreground, as a terminal's user starts it (stdout and
        stderr pipes of text unless `popen` says otherwise); returns (Popen, RunDir)."""
        run_dir = self.tmp_path / name
        self.started.append(run_dir)
        kw = {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
        proc = subprocess.Popen([*runs_helpers.RUNNER, "run", str(spec_path), "--run-dir", str(run_dir)], **kw | popen)
        return proc, RunDir(run_dir)

    def live_trap_term(self, victim, *, stop, name="run"):
        """A live run whose provider (a prepared victim) traps SIGTERM, in its session
        phase; returns (run dir, the provider's victim handle)."""
        prepared = victim.prepare("trap-term")
        rd = self.start(self.spec(name=f"{name}.toml", provider=prepared.argv, stop=stop), name=name)
        runs_helpers.wait_event(rd, "phase-start", phase="session")
        return rd, prepared.adopt(timeout=10)


@pytest.fixture
def runs(tmp_path):
    helper = Runs(tmp_path)
    yield helper
    leaked, cgroups = {}, []
    for run_dir in helper.started:
        rd = RunDir(run_dir)
        if not rd.exists():
            continue
        settle = time.monotonic() + 2.0  # an engine past its lock release may still be exiting
        while not rd.is_live() and runs_helpers.tagged(rd.run_id) and time.monotonic() < settle:
            time.sleep(0.02)
        if rd.is_live() or runs_helpers.tagged(rd.run_id):
            leaked[rd.run_id] = runs_helpers.tagged(rd.run_id)
            if rd.engine_identity.exists():
                with contextlib.suppress(RunnerError):
                    stop.stop_now(rd, 0.2)
            for key in set(runs_helpers.tag_values(rd.run_id).values()):
                reaper.kill_tagged(key, 0.2)
        if rd.cgroup_file.exists() and not rd.is_live():
            path = Path(rd.cgroup_file.read_text().strip())
            if path.exists():
                cgroups.append(str(path))
                for sub in (path / "work", path / "engine", path):
                    with contextlib.suppress(OSError):
                        sub.rmdir()
    # A run still alive at teardown is the test's own failure to stop it: say so. A
    # cgroup left by a dead run is the runner's failure to clean up after itself.
    assert not leaked, f"runs left alive at teardown (killed now): {leaked}"
    assert not cgroups, f"cgroups left behind by finished runs (removed now): {cgroups}"


@pytest.fixture
def frozen_cgroup():
    """A cgroup v1 freezer: a frozen task sits in state D and a SIGKILL stays pending
    until it is thawed: a real uninterruptible sleep, undone in teardown."""
    if not os.access(runs_helpers.FREEZER, os.W_OK):
        pytest.skip("no writable cgroup v1 freezer")
    path = runs_helpers.FREEZER / f"runner-test-{os.getpid()}-{runs_helpers.new_run_id()}"
    path.mkdir()
    try:
        yield path
    finally:
        (path / "freezer.state").write_text("THAWED\n")
        deadline = time.monotonic() + 5
        while (path / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.01)  # the pending SIGKILL lands at thaw
        path.rmdir()


class Dashboard:
    """A running `runner dashboard` (a real `python -m runner dashboard` process)."""

    def __init__(self, proc, url, stderr_path):
        self.proc, self.url, self.stderr_path = proc, url, stderr_path
        self.token = url.split("token=", 1)[1]
        self.origin = url.split("/?", 1)[0]

    def stderr(self):
        return self.stderr_path.read_text()


@pytest.fixture
def dashboard(tmp_path):
    """Start `runner dashboard --runs-dir <tmp_path>` (or another base, `start(base)`);
    stopped (SIGTERM, then SIGKILL) and reaped at teardown, even when the test fails."""
    started = []

    def start(base=tmp_path, *extra):
        stderr_path = tmp_path / f"dashboard-{len(started)}.err"
        with open(stderr_path, "w") as err:
            proc = subprocess.Popen(
                [*runs_helpers.RUNNER, "dashboard", "--runs-dir", str(base), "--port", "0", *extra],
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
                text=True,
            )
        started.append(proc)
        line = proc.stdout.readline()  # the first line names the URL; flushed at once
        assert line.startswith("dashboard: http://"), (line, proc.poll(), stderr_path.read_text())
        return Dashboard(proc, line.split(" ", 1)[1].strip(), stderr_path)

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        proc.stdout.close()
