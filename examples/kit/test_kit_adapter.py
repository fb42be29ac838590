"""Python adapters for the conformance kit: the stop path of your own code, as a Stopper.

    PYTHONPATH=examples/kit python -m pytest_stoplatency conformance --stopper test_kit_adapter:GroupReaper

GroupReaper is a group reaper (TERM to the process group, the grace, KILL to the group):
the kit's table shows what it misses (whatever leaves the group). PoolTerminate and
ExecutorShutdown wrap two stops of the examples (examples/test_multiprocessing_pool_terminate.py,
examples/test_process_pool_shutdown.py): the victim is what a task started.
"""

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import Pool
from pathlib import Path

import pytest

from pytest_stoplatency.kit import Stopper


class GroupReaper(Stopper):
    how = "killpg(SIGTERM), sleep(kill_grace), killpg(SIGKILL)"

    def start(self, tree):
        # As your code starts work; tree.argv is the victim (tree.shell: quoted for a shell).
        return subprocess.Popen(tree.argv, start_new_session=True, stdin=subprocess.DEVNULL)

    def stop(self, proc):
        # The timed part: your stop, from its first action until it returns.
        os.killpg(proc.pid, signal.SIGTERM)
        time.sleep(self.kill_grace)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return {}

    def cleanup(self, proc):
        # Reap what the stopper itself started; the kit kills what is left of the tree.
        proc.kill()
        proc.wait()


def run_task(argv):
    subprocess.run(argv, stdin=subprocess.DEVNULL)  # the task's own child: the victim


class PoolTerminate(Stopper):
    how = "a Pool(1) task runs the tree; Pool.terminate(), join()"

    def start(self, tree):
        pool = Pool(1)
        pool.apply_async(run_task, (tree.argv,))
        return pool

    def stop(self, pool):
        pool.terminate()
        pool.join()
        return {}


class ExecutorShutdown(Stopper):
    how = "a ProcessPoolExecutor(1) call runs the tree; shutdown(wait=False, cancel_futures=True)"

    def start(self, tree):
        executor = ProcessPoolExecutor(1)
        executor.submit(run_task, tree.argv)
        return executor

    def stop(self, executor):
        executor.shutdown(wait=False, cancel_futures=True)
        return {}

    def cleanup(self, executor):
        executor.shutdown(wait=True)  # the kit has killed the tree: the call returns


def kit(tmp_path, stopper, kinds, *extra):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    out = tmp_path / "kit.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest_stoplatency", "conformance", "--stopper", f"test_kit_adapter:{stopper}"]
        + ["--kinds", kinds, "--bound", "60", "--json", str(out), *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    rows = {r["kind"]: r for r in json.loads(out.read_text())["stoppers"][0]["rows"]}
    return done, rows


@pytest.mark.parametrize("stopper", ["PoolTerminate", "ExecutorShutdown"])
def test_the_kit_shows_the_pools_orphans(tmp_path, stopper):
    """The examples' bugs in the kit's table: even a cooperative victim outlives the stop."""
    done, rows = kit(tmp_path, stopper, "cooperative")
    assert done.returncode == 1, done.stdout + done.stderr
    assert rows["cooperative"]["verdict"] == "orphaned"


def test_the_kit_shows_what_the_group_reaper_misses(tmp_path):
    """The kit's table for this adapter: a forker stopped whole, the setsid escapee orphaned."""
    done, rows = kit(tmp_path, "GroupReaper", "python-trap-kids,setsid-escapee", "--kill-grace", "0.2")
    assert done.returncode == 1, done.stdout + done.stderr
    assert rows["python-trap-kids"]["verdict"] == "whole"
    assert rows["setsid-escapee"]["verdict"] == "orphaned"
