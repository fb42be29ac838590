"""pytest-timeout, both methods: the test's subprocess outlives the timeout.

The signal method fails the test and runs its teardown, but nothing in the teardown knows
of the process the test started; the thread method ends pytest with os._exit, so no
teardown runs at all. Either way the test's `trap-term` victim lives on. The fix:
--process-leaks. Its per-test check kills the process at the teardown (signal method);
its session guardian kills it once pytest has died (thread method).
"""

import pytest

BOUND = 15.0  # from before the inner pytest starts: its start-up, the 1 s timeout, its end

INNER = """
import subprocess, time, pytest

@pytest.mark.timeout(1, method={method!r})
def test_slow():
    subprocess.Popen({argv!r}, stdin=subprocess.DEVNULL)
    time.sleep(60)
"""

METHODS = ["signal", "thread"]


def run_inner(pytester, p, method, *args):
    pytester.makepyfile(INNER.format(method=method, argv=p.argv))
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", *args, timeout=60)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.xfail(
    reason="pytest-timeout ends the test (signal) or pytest itself (thread); neither stops the "
    "processes the test started",
    strict=True,
)
def test_the_subprocess_outlives_the_timeout(pytester, victim, stop_latency, method):
    p = victim.prepare("trap-term")
    with stop_latency.measure(f"pytest-timeout {method} / trap-term", p, bound=BOUND):
        result = run_inner(pytester, p, method)
    assert result.ret != 0


@pytest.mark.parametrize("method", METHODS)
def test_fixed_process_leaks_kills_it(pytester, victim, stop_latency, method):
    p = victim.prepare("trap-term")
    with stop_latency.measure(f"pytest-timeout {method} + --process-leaks / trap-term", p, bound=BOUND):
        result = run_inner(pytester, p, method, "--process-leaks")
    assert result.ret != 0
    assert p.ready_info() is not None, "the victim never armed itself: nothing was proven"
    if method == "signal":
        result.stdout.fnmatch_lines(["*stoplatency: process leaks: *test_slow left 1 process(es)*"])
