"""multiprocessing.Pool.terminate(): the processes a task started outlive the pool.

terminate() SIGTERMs the pool's workers and joins them; a process a task started is a
worker's child that nobody signals: it is re-parented, alive, under fork, spawn and
forkserver alike. The fix: the task starts its processes with a tag in their
environment, and after terminate() every process that carries it is killed.
"""

import multiprocessing
import os
import subprocess

import pytest
from stophelpers import TAG_ENV, new_tag, tag_sweep

BOUND = 3.0
METHODS = ["fork", "spawn", "forkserver"]


def task(argv, tag=None):
    env = {**os.environ, TAG_ENV: tag} if tag else None
    subprocess.run(argv, stdin=subprocess.DEVNULL, env=env)  # the task's own child: the victim


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.xfail(
    reason="Pool.terminate() signals the pool's workers only: a process a task started is orphaned, alive",
    strict=True,
)
def test_terminate_orphans_what_a_task_started(victim, stop_latency, method):
    p = victim.prepare("trap-term")
    pool = multiprocessing.get_context(method).Pool(1)
    try:
        pool.apply_async(task, (p.argv,))
        v = p.adopt()
        with stop_latency.measure(f"Pool.terminate() / {method}", v, bound=BOUND):
            pool.terminate()
            pool.join()
    finally:
        pool.terminate()
        pool.join()


@pytest.mark.parametrize("method", METHODS)
def test_fixed_tag_what_the_tasks_start_and_sweep_it(victim, stop_latency, method):
    p = victim.prepare("trap-term")
    tag = new_tag()
    pool = multiprocessing.get_context(method).Pool(1)
    try:
        pool.apply_async(task, (p.argv, tag))
        v = p.adopt()
        with stop_latency.measure(f"Pool.terminate() + tag sweep / {method}", v, bound=BOUND):
            pool.terminate()
            pool.join()
            tag_sweep(tag)
    finally:
        pool.terminate()
        pool.join()
