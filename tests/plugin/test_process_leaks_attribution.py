"""--process-leaks knows a test's processes by their start time, not by a pid range (issue 39,
item 2): a pid counter that comes round during a test (pid_max 32768, a fork-heavy
neighbour) or is set back changes nothing, and a report never says "after its check" of a
process that started before it.

Each suite's processes carry a number unique to the run (plugin_helpers.sleep_marks), so
that the outer test finds whatever survived by its command line and kills it itself.
"""

import json
import os

import pytest
from plugin_helpers import all_marked, kill_identified, sleep_marks, sleepers

from pytest_stoplatency._guardian import ENV_DISABLE as ENV_NO_GUARDIAN

NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"


@pytest.fixture
def marks():
    m = sleep_marks("tagged", "untagged", "later", "told")
    yield m
    kill_identified(all_marked(m))


COUNTER_SUITE = """
import subprocess, time

def test_a_leaks_and_puts_the_pid_counter_back():
    with open("{ns_last_pid}") as f:
        start = f.read()
    subprocess.Popen(["sleep", "{tagged}"])
    scrubbed = subprocess.Popen(["env", "-i", "sleep", "{untagged}"])  # no tag: the tree and its start time
    for _ in range(1000):  # until env has exec'd sleep without the tag (its own pace)
        with open(f"/proc/{{scrubbed.pid}}/cmdline", "rb") as f:
            if f.read() == b"sleep\\0{untagged}\\0":
                break
        time.sleep(0.01)
    # As if the counter had come round during the test: the pids it handed out since the
    # test started are no longer between the test's first and last ns_last_pid.
    with open("{ns_last_pid}", "w") as f:
        f.write(start)

def test_b_next():
    pass
"""


def _can_set_the_counter() -> str | None:
    if os.geteuid() != 0:
        return "setting ns_last_pid needs root (CAP_SYS_ADMIN in the pid namespace's user namespace)"
    if not os.access(NS_LAST_PID, os.W_OK):
        return f"{NS_LAST_PID} is not writable here"
    return None


@pytest.mark.skipif(_can_set_the_counter() is not None, reason=str(_can_set_the_counter()))
@pytest.mark.parametrize("xdist", [("-p", "no:xdist"), ("-n", "2")], ids=["serial", "xdist"])
def test_a_pid_counter_set_back_to_its_value_at_the_tests_start_changes_nothing(pytester, marks, monkeypatch, xdist):
    """Path: _leaks.span: the test's span is decided by start ticks; its pid window narrows
    what is read only while complete (the machine's forks rose by no more than the counter
    moved). The test leaves a tagged `sleep` and an untagged one (env -i, found by the tree),
    then writes ns_last_pid back to its value at its start, the state a counter that came
    round mid-test leaves: both are reported at that test's teardown, by name, with their
    routes; no session-level report, no "after its check"; nothing outlives the session.

    Ablation: `start-time-attribution` (the pid window always trusted, as before issue 39):
    the test's window reads as empty, both leaks surface only at the session's end: red."""
    monkeypatch.setenv(ENV_NO_GUARDIAN, "1")
    pytester.makepyfile(test_counter=COUNTER_SUITE.format(ns_last_pid=NS_LAST_PID, **marks))
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", *xdist, "--process-leaks", "--process-leaks-json", "leaks.json", timeout=120
    )
    alive = sleepers(marks)
    out = result.stdout.str()
    result.assert_outcomes(passed=2, errors=1)
    doc = json.loads((pytester.path / "leaks.json").read_text())
    got = sorted((x["nodeid"], x["scope"], x["kind"], x["cmdline"], x["route"]) for x in doc["leaks"])
    test = "test_counter.py::test_a_leaks_and_puts_the_pid_counter_back"
    assert got == [
        (test, test, "test", f"sleep {marks['tagged']}", "still a child"),
        (test, test, "test", f"sleep {marks['untagged']}", "no run tag"),
    ], doc["leaks"]
    result.stdout.fnmatch_lines([f"*ERROR at teardown of {test.split('::')[1]}*"])
    assert "after its check" not in out, out
    assert not alive, f"outlived the session: {alive}"


# -- told to stop is not leaked (issue 39, item 3) -------------------------------------------

STOP_SUITE = """
import os, signal, subprocess, sys

# A server whose stop takes a while: its handler (SIGTERM, SIGINT or SIGHUP) spends 0.8 s
# cleaning up, then exits. Its code carries the run's mark, for the outer test to find it.
SERVER = (
    "import signal, sys, time\\n"
    "def stop(*a):\\n"
    "    print('stopping', flush=True)\\n"
    "    time.sleep(0.8)\\n"
    "    sys.exit(0)\\n"
    "for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\\n"
    "    signal.signal(sig, stop)\\n"
    "print('ready', flush=True)\\n"
    "time.sleep({told})\\n"
)

def _serve(**popen):
    child = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, **popen)
    assert child.stdout.readline() == b"ready\\n"
    return child

# Each test returns once its server is in its handler: the signal delivered, nothing of it
# left pending for the kernel to show.

def test_a_terminates_its_server():
    child = _serve()
    child.terminate()
    assert child.stdout.readline() == b"stopping\\n"

def test_b_interrupts_its_server_group():
    child = _serve(process_group=0)
    os.killpg(child.pid, signal.SIGINT)
    assert child.stdout.readline() == b"stopping\\n"

def test_c_forgets_its_server():
    subprocess.Popen(["sleep", "{later}"])

# A server that stops its worker itself (a signal pytest never sends): the worker spends
# 0.8 s in its handler, the server waits for it.
PARENT = (
    "import os, signal, subprocess, sys\\n"
    "w = subprocess.Popen([sys.executable, '-c', os.environ['WORKER']], stdout=subprocess.PIPE)\\n"
    "assert w.stdout.readline() == b'ready\\\\n'\\n"
    "def stop(*a):\\n"
    "    w.terminate()\\n"
    "    w.wait()\\n"
    "    sys.exit(0)\\n"
    "signal.signal(signal.SIGTERM, stop)\\n"
    "print('ready', flush=True)\\n"
    "signal.pause()\\n"
)

def test_d_terminates_a_server_that_stops_its_worker():
    child = subprocess.Popen(
        [sys.executable, "-c", PARENT], env={{**os.environ, "WORKER": SERVER}}, stdout=subprocess.PIPE
    )
    assert child.stdout.readline() == b"ready\\n"
    child.terminate()
"""


@pytest.mark.parametrize("stop_grace", [None, "0"], ids=["default", "stop-grace-0"])
def test_a_server_told_to_stop_that_takes_0_8_s_is_not_a_leak(pytester, marks, monkeypatch, stop_grace):
    """Path: _leaks.told_to_stop and the stop grace (Tracker._grace): a test that tells its
    child to stop (Popen.terminate(), os.killpg(SIGINT): pytest's own os.kill / os.killpg,
    seen by an audit hook) and returns while the child spends 0.8 s in its handler passes at
    default settings, the ordinary grace (0.25 s) being far shorter; a test that forgets
    its child is still reported; a server told to stop that stops its own worker (a signal
    only the server sends: the worker's parent was told, _Tracker._told) spares both. With
    the stop grace set to 0 (the ordinary grace for all) all of them are reported: the
    control that the patience is what spares them.

    Ablations: `told-to-stop-patience` (no audit hook: nothing is known to be told) and
    `told-to-stop-ancestry` (only the process itself): red [default]."""
    monkeypatch.setenv(ENV_NO_GUARDIAN, "1")
    pytester.makepyfile(test_stop=STOP_SUITE.format(**marks))
    extra = ("-o", f"process_leaks_stop_grace={stop_grace}") if stop_grace is not None else ()
    args = ["-p", "no:cacheprovider", "-p", "no:xdist", "--process-leaks", "--process-leaks-json", "leaks.json"]
    result = pytester.runpytest_subprocess(*args, *extra, timeout=120)
    alive = sleepers(marks)
    doc = json.loads((pytester.path / "leaks.json").read_text())
    got = sorted((x["nodeid"].split("::")[1], marks["told"] in x["cmdline"]) for x in doc["leaks"])
    forgot = ("test_c_forgets_its_server", False)
    if stop_grace is None:
        result.assert_outcomes(passed=4, errors=1)
        assert got == [forgot], doc["leaks"]
    else:
        result.assert_outcomes(passed=4, errors=4)
        assert got == [
            ("test_a_terminates_its_server", True),
            ("test_b_interrupts_its_server_group", True),
            forgot,
            ("test_d_terminates_a_server_that_stops_its_worker", False),
            ("test_d_terminates_a_server_that_stops_its_worker", True),
        ], doc["leaks"]
    assert not alive, f"outlived the session: {alive}"


# -- the check never changes the order of a suite's own clean-up (issue 39, item 4) ------------

GC_SUITE = """
import gc, os, signal, subprocess, sys, threading, time

SERVER = (
    "import signal, sys, time\\n"
    "def stop(*a):\\n"
    "    print('stopping', flush=True)\\n"
    "    time.sleep(1.5)\\n"
    "    open('stopped', 'w').write(repr(time.monotonic()))\\n"
    "    sys.exit(0)\\n"
    "signal.signal(signal.SIGTERM, stop)\\n"
    "print('ready', flush=True)\\n"
    "time.sleep({told})\\n"
)
DONE = threading.Event()
TAG = "STOPLATENCY_LEAK_TAG"


class Cycle:
    # A suite's object in a reference cycle, whose finaliser is its clean-up.
    def __init__(self):
        self.me = self

    def __del__(self):
        with open("finalised", "w") as f:
            f.write(repr(time.monotonic()))
        DONE.set()


def _works_on():
    # A thread of the suite that goes on working (allocating) once its test has returned:
    # from the moment the check begins (the tag becomes the gap's), until the clean-up ran.
    tag = os.environ[TAG]
    deadline = time.monotonic() + 30
    while os.environ.get(TAG) == tag and time.monotonic() < deadline:
        time.sleep(0.002)
    junk = []
    while not DONE.is_set() and time.monotonic() < deadline:
        junk.extend([] for _ in range(50))
        time.sleep(0.001)


def test_a_stops_its_server_and_leaves_garbage():
    child = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE)
    assert child.stdout.readline() == b"ready\\n"
    child.terminate()
    assert child.stdout.readline() == b"stopping\\n"
    gc.collect()
    Cycle()
    threading.Thread(target=_works_on, daemon=True).start()


def test_b_next():
    assert DONE.wait(30)
"""


def test_a_suites_thread_sets_off_its_collections_while_the_check_waits_for_a_told_server(pytester, marks, monkeypatch):
    """Path: the collector is held off only for the snapshot and the ordinary grace, not for
    the stop grace (Tracker._check): a test stops its server (1.5 s in its SIGTERM handler)
    and leaves garbage with a finaliser while a thread of it goes on allocating. Without the
    check, that thread's allocations set off the collection that finalises the garbage within
    milliseconds; with it, they still do while the check waits for the told server: the
    finaliser runs before the server has exited, not after the check's wait.

    Ablation: `stop-grace-gc-on` (the collector held off over the stop grace too, as over the
    whole check before issue 39): the finaliser runs only after the server exited: red."""
    monkeypatch.setenv(ENV_NO_GUARDIAN, "1")
    pytester.makepyfile(test_gc=GC_SUITE.format(**marks))
    args = ["-p", "no:cacheprovider", "-p", "no:xdist", "--process-leaks", "-o", "process_leaks_stop_grace=10"]
    result = pytester.runpytest_subprocess(*args, timeout=120)
    alive = sleepers(marks)
    result.assert_outcomes(passed=2)
    finalised = float((pytester.path / "finalised").read_text())
    stopped = float((pytester.path / "stopped").read_text())
    assert finalised < stopped, f"the finaliser ran {finalised - stopped:.3f} s after the told server exited"
    assert not alive, f"outlived the session: {alive}"


FINALISER_CONFTEST = """
import gc, json, pytest

PHASE = ["start"]
LOG = {}


class Cycle:
    # A test's object in a reference cycle: only a collection finalises it.
    def __init__(self, born):
        self.born = born
        self.me = self

    def __del__(self):
        LOG[self.born] = PHASE[0]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    PHASE[0] = item.name + ":setup"
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    PHASE[0] = item.name + ":call"
    return (yield)


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item):
    PHASE[0] = item.name + ":teardown"
    try:
        return (yield)
    finally:
        PHASE[0] = item.name + ":after its teardown"


def pytest_sessionfinish(session):
    PHASE[0] = "the session's end"
    gc.collect()
    with open("finalised.json", "w") as f:
        json.dump(LOG, f)
"""

FINALISER_SUITE = """
import gc, subprocess, pytest
from conftest import Cycle

@pytest.mark.parametrize("i", range(120))
def test_t(i):
    if i == 0:
        gc.collect()  # from here on, the suite's own allocations decide when the collector runs
    Cycle(i)
    junk = [[j] for j in range(i * 7 % 50)]
    if i % 3 == 0:
        subprocess.run(["true"])  # a process started and waited for: the check reads /proc
"""


def test_a_suites_finalisers_run_at_the_same_point_with_and_without_the_check(pytester, monkeypatch):
    """Path: the check keeps nothing the garbage collector tracks per test (the test's scope
    leaves item.stash at its check; gaps and checked scopes are kept as strings,
    Tracker._gaps, _past): objects it kept would count towards the collector's thresholds and
    move the suite's own collections, and so its finalisers, to other tests. A suite of 120
    tests, each leaving a reference cycle with a finaliser (a third of them start and wait for
    a process): every finaliser runs in the same test and phase with --process-leaks as
    without it. (The first test collects once: the plugin's own start, its modules and its
    guardian, allocates once per session before that.)

    Ablation: `check-keeps-no-objects` (the test's scope stays in item.stash, as before issue
    39): the suite's collections come earlier and earlier: red."""
    monkeypatch.setenv(ENV_NO_GUARDIAN, "1")
    pytester.makeconftest(FINALISER_CONFTEST)
    pytester.makepyfile(test_cycles=FINALISER_SUITE)
    runs = {}
    for name, extra in (("plain", ()), ("check", ("--process-leaks",))):
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", *extra, timeout=120)
        result.assert_outcomes(passed=120)
        runs[name] = json.loads((pytester.path / "finalised.json").read_text())
    assert len(runs["plain"]) == 120
    moved = {
        born: (phase, runs["check"].get(born))
        for born, phase in runs["plain"].items()
        if runs["check"].get(born) != phase
    }
    assert not moved, f"{len(moved)} of 120 finalisers ran elsewhere with the check: {dict(list(moved.items())[:5])}"
