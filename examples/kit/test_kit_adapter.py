"""Python adapters for the conformance kit: the stop path of your own code, as a Stopper.

    PYTHONPATH=examples/kit python -m pytest_stoplatency conformance --stopper test_kit_adapter:GroupReaper

GroupReaper is a group reaper (TERM to the process group, the grace, KILL to the group,
as examples/test_group_reaper.py): the kit's table shows what it misses (whatever leaves
the group). The others wrap the stops of the examples, one class each: MakeSigterm
(test_make_sigterm.py), RunTimeout (test_subprocess_run_timeout.py), WaitForTimeout
(test_asyncio_wait_for.py), PytestTimeoutSignal and PytestTimeoutThread
(test_pytest_timeout.py), PoolTerminate (test_multiprocessing_pool_terminate.py) and
ExecutorShutdown (test_process_pool_shutdown.py). The two others are built-in adapters:
`--stopper popen` (test_popen_terminate_kill.py) and `--stopper supervisord`
(test_supervisord.py).
"""

import asyncio
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
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


class MakeSigterm(Stopper):
    how = "make -s -j2, the tree in a recipe (the recipe's shell forks it); SIGTERM to make, wait"

    def missing(self):
        return None if shutil.which("make") else "GNU make is not installed"

    def start(self, tree):
        # Not in tree.dir: make's own command line would carry the tree's marker.
        where = self.work / f"make-{tree.dir.name}"
        where.mkdir()
        recipe = shlex.join(tree.argv).replace("$", "$$") + "; true"
        (where / "Makefile").write_text(f"all:\n\t{recipe}\n.PHONY: all\n")
        return subprocess.Popen(
            ["make", "-s", "-j2", "-C", str(where)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def stop(self, proc):
        proc.send_signal(signal.SIGTERM)
        return {"code": proc.wait()}

    def cleanup(self, proc):
        proc.kill()
        proc.wait()


class RunTimeout(Stopper):
    # subprocess.run's own code on POSIX, from the moment its timeout expires: started as
    # run() starts it; the stop is run()'s except branch (kill, wait) after communicate's
    # TimeoutExpired. The timeout is made to expire by the stop, not by a clock, so that
    # the victim is always armed first.
    how = "Popen(stdout=PIPE, stderr=PIPE) as subprocess.run; its timeout: communicate(timeout=0.1), kill(), wait()"

    def start(self, tree):
        return subprocess.Popen(tree.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def stop(self, proc):
        try:
            proc.communicate(timeout=0.1)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return {"code": proc.returncode}

    def cleanup(self, proc):
        proc.kill()
        proc.wait()
        proc.stdout.close()  # run() closes them on the way out; the kit has killed the holders
        proc.stderr.close()


class WaitForTimeout(Stopper):
    # An event loop in a thread of its own starts the tree; the stop is
    # asyncio.wait_for(proc.communicate(), 0): the timeout path, at once.
    how = "asyncio.create_subprocess_exec(stdout=PIPE); wait_for(proc.communicate(), 0) raises TimeoutError"

    def start(self, tree):
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, daemon=True).start()
        spawn = asyncio.create_subprocess_exec(*tree.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        return loop, asyncio.run_coroutine_threadsafe(spawn, loop).result(30)

    def stop(self, handle):
        loop, proc = handle

        async def communicate():
            try:
                await asyncio.wait_for(proc.communicate(), 0)
            except TimeoutError:
                return "TimeoutError"
            return "returned"

        return {"said": asyncio.run_coroutine_threadsafe(communicate(), loop).result(30)}

    def cleanup(self, handle):
        loop, proc = handle
        if proc.returncode is None:
            proc.kill()
        asyncio.run_coroutine_threadsafe(proc.wait(), loop).result(30)
        loop.call_soon_threadsafe(proc._transport.close)  # before the loop closes (see the example)
        loop.call_soon_threadsafe(loop.stop)


INNER = """
import subprocess, sys, time, pytest

@pytest.mark.timeout({timeout}, method={method!r})
def test_slow():
    subprocess.Popen({argv!r}, stdin=subprocess.DEVNULL)
    time.sleep(3600)
"""


class PytestTimeoutSignal(Stopper):
    # The stop is pytest-timeout's: the inner pytest's test starts the tree, its timeout
    # ends the test (or pytest), and the stop waits for pytest to exit. pytest-timeout never
    # signals the tree, so whenever the timeout fires, the tree arms itself all the same.
    method = "signal"
    how = "an inner pytest whose test starts the tree under @pytest.mark.timeout(2, method='signal'); wait for pytest"

    def start(self, tree):
        where = self.work / f"pytest-{tree.dir.name}"
        where.mkdir()
        (where / "test_inner.py").write_text(INNER.format(timeout=2, method=self.method, argv=tree.argv))
        return subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(where)],
            cwd=where,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def stop(self, proc):
        return {"code": proc.wait(60)}

    def cleanup(self, proc):
        proc.kill()
        proc.wait()


class PytestTimeoutThread(PytestTimeoutSignal):
    method = "thread"
    how = "an inner pytest whose test starts the tree under @pytest.mark.timeout(2, method='thread'); wait for pytest"


def kit(tmp_path, stopper, kinds, *extra):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    out = tmp_path / "kit.json"
    name = stopper if stopper.islower() else f"test_kit_adapter:{stopper}"  # a built-in's name, or a class here
    done = subprocess.run(
        [sys.executable, "-m", "pytest_stoplatency", "conformance", "--stopper", name]
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


@pytest.mark.parametrize(
    "stopper, kind",
    [
        # A SIGTERM-ignoring recipe outlives make (test_make_sigterm.py).
        pytest.param(
            "MakeSigterm", "ignore-term", marks=pytest.mark.skipif(not shutil.which("make"), reason="no make")
        ),
        ("RunTimeout", "python-trap-kids"),  # run() kills the direct child only
        ("WaitForTimeout", "trap-term"),  # the timeout cancels the wait, not the process
        ("PytestTimeoutSignal", "trap-term"),  # nothing in the teardown knows of the process
        ("PytestTimeoutThread", "trap-term"),  # os._exit: no teardown at all
        ("popen", "python-trap-kids"),  # built-in: terminate() and kill() signal one pid
        # built-in: stopasgroup, killasgroup miss what leaves the group
        pytest.param(
            "supervisord",
            "setsid-escapee",
            marks=pytest.mark.skipif(
                not Path(sys.executable).with_name("supervisord").exists() and not shutil.which("supervisord"),
                reason="supervisor is not installed (the examples extra)",
            ),
        ),
    ],
)
def test_the_kit_shows_the_examples_bugs(tmp_path, stopper, kind):
    """The old examples' bugs in the kit's table: each stop, wrapped as an adapter, orphans."""
    done, rows = kit(tmp_path, stopper, kind)
    assert done.returncode == 1, done.stdout + done.stderr
    assert rows[kind]["verdict"] == "orphaned"
    assert rows[kind]["orphans"] >= 1


def test_the_kit_shows_what_the_group_reaper_misses(tmp_path):
    """The kit's table for this adapter: a forker stopped whole, the setsid escapee orphaned."""
    done, rows = kit(tmp_path, "GroupReaper", "python-trap-kids,setsid-escapee", "--kill-grace", "0.2")
    assert done.returncode == 1, done.stdout + done.stderr
    assert rows["python-trap-kids"]["verdict"] == "whole"
    assert rows["setsid-escapee"]["verdict"] == "orphaned"
