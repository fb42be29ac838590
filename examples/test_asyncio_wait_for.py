"""asyncio.wait_for(proc.communicate(), t): the timeout cancels the wait, not the process.

After the TimeoutError the process runs on (a `trap-term` victim: it would sleep two
hours). The fix: kill and wait for it in a `finally`.
"""

import asyncio
import subprocess

import pytest

TIMEOUT = 0.5
BOUND = 3.0


async def communicate(argv, timeout):
    proc = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.PIPE)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(proc.communicate(), timeout)
    return proc  # still referenced: asyncio would kill the direct child only when it is collected


@pytest.mark.xfail(
    reason="asyncio.wait_for(proc.communicate(), t) cancels the communicate() on timeout; the process keeps running",
    strict=True,
)
def test_wait_for_leaves_the_process_running(victim, stop_latency):
    p = victim.prepare("trap-term")
    loop = asyncio.new_event_loop()
    procs = []
    try:
        with stop_latency.measure("asyncio.wait_for(communicate()) / trap-term", p, bound=BOUND):
            procs.append(loop.run_until_complete(communicate(p.argv, TIMEOUT)))
    finally:
        # measure() has killed it by now; reap it and close its transport while the loop is
        # open (collected after the loop closed, the transport's __del__ would raise).
        for proc in procs:
            loop.run_until_complete(proc.wait())
            proc._transport.close()
        loop.close()


async def communicate_or_kill(argv, timeout):
    proc = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.PIPE)
    try:
        return await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_fixed_kill_and_wait_in_finally(victim, stop_latency):
    p = victim.prepare("trap-term")
    with stop_latency.measure("wait_for + kill in finally / trap-term", p, bound=BOUND):
        with pytest.raises(TimeoutError):
            asyncio.run(communicate_or_kill(p.argv, TIMEOUT))
