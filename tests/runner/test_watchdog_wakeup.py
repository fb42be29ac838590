"""The file channel is event-driven: the engine's watchdog wakes when a stopper
publishes stop-request.json, not at its next poll."""

import time

import runs as R

from runner.engine.registry import Registry
from runner.engine.stop_controller import StopController
from runner.events import Mode
from runner.files import stop_request
from runner.files.journal import Journal
from runner.files.rundir import RunDir

POLL = 60.0  # the backstop poll: far longer than the test waits


def test_a_lodged_hard_request_wakes_the_watchdog_before_its_poll(tmp_path):
    """Path: stop_controller's watchdog selects on the run directory's inotify
    descriptor (runner/proc/inotify.py) beside its wake pipe. With a 60 s poll, a hard
    request lodged by the real writer (stop_request.lodge) is honored within seconds
    only through that descriptor. Ablation: `watchdog-inotify` (no watch: the request
    waits for the 60 s poll, red)."""
    spec = R.write_spec(tmp_path / "spec.toml", provider=["true"])
    rd = RunDir.create(tmp_path / "run", spec)
    journal = Journal(rd.journal)
    registry = Registry(rd.children, run_id=rd.run_id, kill_grace=0.5)
    ctl = StopController(rd, registry, journal, poll=POLL)
    ctl.start()
    try:
        time.sleep(0.2)  # the watchdog is in its select
        stop_request.lodge(rd, Mode.HARD, "file")
        deadline = time.monotonic() + 5.0
        while not ctl.stopping and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ctl.stopping, "the watchdog did not wake for the lodged request"
        assert ctl.origin is not None and ctl.origin.value == "file"
    finally:
        ctl.close()
        journal.close()
