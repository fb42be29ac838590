import time

import pytest

import runs as runs_helpers
from runner import stopper, sweep


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


@pytest.fixture
def runs(tmp_path):
    helper = Runs(tmp_path)
    yield helper
    leaked = {}
    for run_dir in helper.started:
        from runner.rundir import RunDir
        rd = RunDir(run_dir)
        if not rd.exists():
            continue
        settle = time.monotonic() + 2.0  # an engine past its lock release may still be exiting
        while not rd.is_live() and runs_helpers.tagged(rd.run_id) and time.monotonic() < settle:
            time.sleep(0.02)
        if rd.is_live() or runs_helpers.tagged(rd.run_id):
            leaked[rd.run_id] = runs_helpers.tagged(rd.run_id)
            if rd.engine_identity.exists():
                stopper.force(rd, 0.2, fallback=False)
            sweep.kill_tagged(rd.run_id, 0.2)
    # A run still alive at teardown is the test's own failure to stop it: say so.
    assert not leaked, f"runs left alive at teardown (killed now): {leaked}"
