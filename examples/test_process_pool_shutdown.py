"""ProcessPoolExecutor.shutdown(wait=False, cancel_futures=True): the running call goes on.

cancel_futures cancels only the calls not yet started, and shutdown() signals nothing: the
call a worker is running, and every process it started, live on after shutdown returns.
The fix: the call starts its processes with a tag in their environment, and after
shutdown every process that carries it is killed (the worker then returns and exits).
"""

import os
import subprocess
from concurrent.futures import ProcessPoolExecutor

import pytest
from stophelpers import TAG_ENV, new_tag, tag_sweep

BOUND = 3.0


def call(argv, tag=None):
    env = {**os.environ, TAG_ENV: tag} if tag else None
    subprocess.run(argv, stdin=subprocess.DEVNULL, env=env)


@pytest.mark.xfail(
    reason="shutdown(wait=False, cancel_futures=True) cancels only calls not started: the running "
    "call and the processes it started live on",
    strict=True,
)
def test_shutdown_cancel_futures_leaves_the_running_call(victim, stop_latency):
    p = victim.prepare("cooperative")
    executor = ProcessPoolExecutor(1)
    try:
        executor.submit(call, p.argv)
        v = p.adopt()
        with stop_latency.measure("ProcessPoolExecutor.shutdown(cancel_futures) / cooperative", v, bound=BOUND):
            executor.shutdown(wait=False, cancel_futures=True)
    finally:
        executor.shutdown(wait=True)  # the victim was killed at the bound: the call returns


def test_fixed_tag_what_the_calls_start_and_sweep_it(victim, stop_latency):
    p = victim.prepare("cooperative")
    tag = new_tag()
    executor = ProcessPoolExecutor(1)
    try:
        executor.submit(call, p.argv, tag)
        v = p.adopt()
        with stop_latency.measure("shutdown(cancel_futures) + tag sweep / cooperative", v, bound=BOUND):
            executor.shutdown(wait=False, cancel_futures=True)
            tag_sweep(tag)
    finally:
        executor.shutdown(wait=True)
