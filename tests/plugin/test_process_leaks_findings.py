"""--process-leaks on what real suites do (issue 22): no side effect on the process tree the code
under test sees, nothing missed when a finaliser runs during the check, the right culprit, the
right route.

Each inner suite's processes are `sleep N` commands with N unique to the run (plugin_helpers),
so that the outer test finds whatever survived and kills it itself: a red run leaks nothing.
"""

import json
import os
import time

import pytest
from plugin_helpers import all_marked, kill_identified, sleep_marks, sleepers

from pytest_stoplatency import _leakplugin, _leaks, _options
from pytest_stoplatency._guardian import ENV_DISABLE as ENV_NO_GUARDIAN
from pytest_stoplatency._guardian import ENV_LOG as ENV_GUARDIAN_LOG

MARK_NAMES = (
    "child",
    "pty",
    "reparented",
    "copied_env",
    "scrubbed",
    "spawned",
    "between",
    "after",
    "fixture",
    "teardown",
    "gc",
    "guardian",
)


@pytest.fixture
def marks():
    m = sleep_marks(*MARK_NAMES)
    yield m
    kill_identified(all_marked(m))


@pytest.fixture(autouse=True)
def _no_guardian_unless_needed(request, monkeypatch):
    """An inner session's guardian sweeps every dead owner's processes when its pytest exits: one
    more sweeper racing the sweep tests of test_leaks.py. Only the tests about it keep it."""
    if "guardian" not in request.node.name:
        monkeypatch.setenv(ENV_NO_GUARDIAN, "1")


def _run(pytester, *args, timeout=120):
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=timeout)


def _json(pytester, name="leaks.json"):
    return json.loads((pytester.path / name).read_text())


# -- 1. no side effects: the tree the code under test sees ------------------------------------

TREE_SUITE = """
import os, signal, subprocess, sys, time
import psutil, pytest

# As psutil's spawn_children_pair(): a child that starts a grandchild and names it in a file.
CHILD = (
    "import subprocess, sys, time; "
    "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
    "open(sys.argv[1] + '.tmp', 'w').write(str(p.pid)); "
    "__import__('os').replace(sys.argv[1] + '.tmp', sys.argv[1]); time.sleep(60)"
)

@pytest.fixture
def pair(tmp_path):
    path = tmp_path / "grandchild.pid"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(path)])
    deadline = time.monotonic() + 30
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    child, grandchild = psutil.Process(proc.pid), psutil.Process(int(path.read_text()))
    yield child, grandchild
    for p in (grandchild, child):
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait()
    psutil.wait_procs([grandchild], timeout=10)

def test_children():
    # As psutil's test_children: pytest has no child of its own (no guardian, no helper).
    parent = psutil.Process()
    assert parent.children() == []
    assert parent.children(recursive=True) == []
    p = subprocess.Popen(["sleep", "60"])
    try:
        assert [c.pid for c in parent.children()] == [p.pid]
    finally:
        p.kill()
        p.wait()

def test_children_recursive(pair):
    # As psutil's: once the middle process is gone, its orphan is not pytest's.
    parent = psutil.Process()
    child, grandchild = pair
    assert parent.children() == [child]
    assert parent.children(recursive=True) == [child, grandchild]
    child.terminate()
    child.wait()
    assert not parent.children(recursive=True)
    assert grandchild.ppid() != os.getpid()

def test_wait_non_children(pair):
    # As psutil's: a grandchild is not pytest's to wait for, before or after its parent died.
    child, grandchild = pair
    with pytest.raises(psutil.TimeoutExpired):
        child.wait(0.01)
    with pytest.raises(psutil.TimeoutExpired):
        grandchild.wait(0.01)
    child.terminate()
    grandchild.terminate()
    assert child.wait() == -signal.SIGTERM
    assert grandchild.wait() is None

def test_no_child_to_reap():
    # A reaper of strangers (psutil's reap_children(), os.wait()) finds nothing of the plugin's.
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)
"""


@pytest.mark.parametrize("xdist", [("-p", "no:xdist"), ("-n", "2")], ids=["serial", "xdist"])
def test_tree_shape_checks_pass_under_the_flag_with_the_guardian(pytester, xdist):
    """Path: no side effect on the process tree: psutil's tree-shape checks (test_children,
    test_children_recursive, test_wait_non_children, and an os.waitpid(-1) of strangers) pass
    under --process-leaks exactly as without it, the session guardian running: it is a daemon,
    never pytest's child, and pytest is no subreaper, so an orphan goes where it would go
    without the plugin. The control: with --process-leaks-subreaper (named in the header) the
    orphan comes back to pytest, and the two checks psutil's suite failed on fail again.

    Ablation: `guardian-daemon` (the guardian is pytest's child again: test_children and
    test_no_child_to_reap fail) turns this red.
    """
    pytester.makepyfile(test_tree=TREE_SUITE)
    plain = _run(pytester, *xdist)
    plain.assert_outcomes(passed=4)
    flagged = _run(pytester, *xdist, "--process-leaks", "--process-leaks-json", "leaks.json")
    flagged.assert_outcomes(passed=4)
    assert _json(pytester)["leaks"] == []
    assert _options.SUBREAPER_LINE not in flagged.stdout.str()
    control = _run(pytester, *xdist, "--process-leaks-subreaper")
    control.stdout.fnmatch_lines([_options.SUBREAPER_LINE])
    outcomes = control.parseoutcomes()
    assert outcomes.get("failed") == 2, control.stdout.str()
    control.stdout.fnmatch_lines(["*test_children_recursive*", "*test_wait_non_children*"])


GUARDIAN_KILLER = """
import os, signal, subprocess, time

def _guardians():
    me = str(os.getpid()).encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{{pid}}/cmdline", "rb").read().split(b"\\0")
        except OSError:
            continue
        if b"pytest_stoplatency._guardian" in argv and me in argv:
            yield int(pid)

def test_a_kills_the_guardian():
    # As a reaper of everything that looks like a stray python would.
    found = list(_guardians())
    assert len(found) == 1, found
    os.kill(found[0], signal.SIGKILL)
    open("killed", "w").write(str(found[0]))
    # Dead before the next test's setup looks (a SIGKILL lands a moment later on a loaded
    # machine): the restart is what is tested, not that race.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            state = open(f"/proc/{{found[0]}}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state in ("Z", "X"):
            break
        time.sleep(0.01)

def test_b_has_a_new_one():
    deadline = time.monotonic() + 10  # its shell forks it in the background: it execs a moment later
    while not (found := list(_guardians())) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(found) == 1 and str(found[0]) != open("killed").read(), found

def test_c_dies():
    subprocess.Popen(["sleep", "{n}"])
    time.sleep(0.2)
    os._exit(3)
"""


def test_a_guardian_killed_by_a_test_is_started_again_and_the_summary_says_so(pytester, marks, monkeypatch, tmp_path):
    """Path: the guardian's death is noticed: a test kills it (as a reaper of stray processes
    would); the next test's setup polls its pidfd, starts a new one, and the session says so in
    one line; the new guardian still does its job: when pytest dies without teardown, the leak of
    the test that killed it is killed within moments. Without the death being noticed the
    session would run unprotected and say nothing.

    Ablation: `session-guardian` (no guardian at all) turns this red."""
    log = tmp_path / "guardian.jsonl"
    monkeypatch.setenv(ENV_GUARDIAN_LOG, str(log))
    pytester.makepyfile(test_guardian=GUARDIAN_KILLER.format(n=marks["guardian"]))
    result = _run(pytester, "-p", "no:xdist", "--process-leaks")
    assert result.ret == 3, result.stdout.str()
    deadline = time.monotonic() + 10
    while not (log.exists() and "guardian" not in sleepers(marks)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "guardian" not in sleepers(marks), "the dead session's leak outlived it"
    # Attribution: the first guardian was killed; only the second one can have written this.
    assert log.exists(), "no guardian swept for the dead session"
    # The summary line (os._exit skipped it): run the two first tests alone.
    result = _run(pytester, "-p", "no:xdist", "--process-leaks", "-k", "test_a or test_b")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["stoplatency: the session guardian died during the session and was started again (1 time(s))"]
    )


REGISTERED = """
def test_registered(pytestconfig):
    assert (pytestconfig.pluginmanager.get_plugin({name!r}) is not None) is {want}
"""


@pytest.mark.parametrize("flag", [(), ("--process-leaks",), ("--process-leaks-subreaper",)])
def test_the_checks_plugin_object_is_registered_only_when_the_check_is_on(pytester, flag):
    """Path: plugin.pytest_configure registers the check's own plugin object (_leakplugin) only
    under one of its flags: without them no hook of the check runs, and the header says nothing of
    it."""
    pytester.makepyfile(REGISTERED.format(name=_leakplugin.NAME, want=bool(flag)))
    result = _run(pytester, "-p", "no:xdist", *flag)
    result.assert_outcomes(passed=1)
    header = {_options.NO_CGROUP_LINE, _options.SUBREAPER_LINE} & set(result.stdout.lines)
    assert bool(header) == bool(flag), header


# -- 2. nothing missed when a finaliser runs during the check -------------------------------

GC_SUITE = """
import gc, os, pty, signal, sys, time

N = {n!r}
ARMED, JUNK = [], []

def _allocate_on_proc_listing(event, args):
    # The check's first read of /proc comes with allocations enough to set off a collection, as
    # its import of multiprocessing.process did in pexpect's suite.
    if ARMED and event == "os.listdir" and args and args[0] == "/proc":
        ARMED.clear()
        JUNK.append([[] for _ in range(60_000)])  # kept: the collector's count stays past its threshold

sys.addaudithook(_allocate_on_proc_listing)

class Spawn:
    # As pexpect.spawn: a pty child (its own session), a reference cycle, and a finaliser that
    # kills the child.
    def __init__(self, argv):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execvp(argv[0], argv)
        # Exec'd before the test ends, as a pexpect child is once it is used: the report
        # names its command (a moment earlier it is still pytest's fork).
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open(f"/proc/{{self.pid}}/cmdline", "rb") as f:
                if f.read().split(b"\\0")[0] == argv[0].encode():
                    break
            time.sleep(0.005)
        self.me = self

    def __del__(self):
        os.kill(self.pid, signal.SIGKILL)
        os.close(self.fd)
        open("finalised", "w").close()

def test_spawn_dropped_alive():
    gc.collect()
    gc.set_threshold(20_000)  # no collection of the test's own before the check's
    Spawn(["sleep", N])  # alive at the end of the test, garbage until the next collection
    ARMED.append(True)

def test_gc_is_back():
    assert gc.isenabled()
    assert os.path.exists("finalised")  # the collection came, once the snapshot was taken
"""


def test_a_process_alive_after_teardown_is_reported_though_a_finaliser_kills_it_during_the_check(pytester, marks):
    """Path: the gc-safe snapshot: a pexpect-like object (a pty child, a reference cycle, a
    finaliser that SIGKILLs the child) is dropped with its child alive; a collection set off by
    the check's own allocations would run that finaliser in the middle of the check, and the
    child would read as dying, not a leak. With the collector held off from the teardown's first
    line until the snapshot is taken, it is reported ('own session': pty.fork makes a session),
    and killed; the finaliser runs once the snapshot is taken, and the collector is on again for
    the next test.

    Ablation: `leak-gc-snapshot` (the collector is not held off) turns this red: 0 reported.
    """
    pytester.makepyfile(test_gc=GC_SUITE.format(n=marks["gc"]))
    result = _run(pytester, "-p", "no:xdist", "--process-leaks", "--process-leaks-json", "leaks.json")
    leaks = _json(pytester)["leaks"]
    # Kept alive after its report, as without the check: the finaliser ended it, before the
    # session's end could.
    assert [(x["scope"], x["route"], x["cmdline"], x["alive_at_end"]) for x in leaks] == [
        ("test_gc.py::test_spawn_dropped_alive", _leaks.ROUTE_OWN_SESSION, f"sleep {marks['gc']}", False)
    ], result.stdout.str()
    result.assert_outcomes(passed=2, errors=1)
    assert "gc" not in sleepers(marks)


# -- 3. the right culprit ---------------------------------------------------------------------

THREAD_CONFTEST = """
import threading

GO, STARTED, SHUTDOWN = threading.Event(), threading.Event(), threading.Event()

def pytest_runtest_logfinish(nodeid, location):
    # Between two tests: test_a's thread starts its process now, while no test runs.
    if nodeid.endswith("test_a_starts_a_thread"):
        GO.set()
        STARTED.wait(30)

def pytest_unconfigure(config):
    SHUTDOWN.set()  # the last test's thread starts its process while pytest shuts down
"""

THREAD_SUITE = """
import subprocess, threading
from conftest import GO, STARTED, SHUTDOWN

N = {marks!r}

def test_a_starts_a_thread():
    def later():
        GO.wait(30)
        subprocess.Popen(["sleep", N["between"]])
        STARTED.set()
    threading.Thread(target=later, daemon=True).start()

def test_b_innocent():
    subprocess.run(["true"], check=True)

def test_c_last_starts_a_thread():
    def later():
        SHUTDOWN.wait(30)
        subprocess.Popen(["sleep", N["after"]])
    threading.Thread(target=later, name="late-starter").start()  # joined at interpreter exit
"""


def test_processes_a_thread_starts_between_tests_or_after_the_last_are_session_level(pytester, marks):
    """Path: the gap tag and the session-level checks: a thread of test_a starts a process
    while no test runs (between test_a and test_b), and a thread of the last test starts one
    while pytest shuts down (after the session's own check, when the interpreter joins it).
    Neither is blamed on a test: the first is reported at the session's end ("started after
    test_a ... returned"), makes the exit status 1 and is killed; the second is found at exit,
    reported on stderr and in the JSON, and killed. The innocent test passes clean; the summary
    names the thread still running.

    Ablation: `leak-gap-tag` (between tests the environment keeps the last test's tag) turns this
    red: both are found only as "started by test ... after its check"."""
    pytester.makeconftest(THREAD_CONFTEST)
    pytester.makepyfile(test_threads=THREAD_SUITE.format(marks=marks))
    result = _run(pytester, "-p", "no:xdist", "--process-leaks", "--process-leaks-json", "leaks.json")
    alive = sleepers(marks)
    doc = _json(pytester)
    got = sorted((x["cmdline"], x["scope"], x["kind"], x["nodeid"], x["killed"]) for x in doc["leaks"])
    after_a = (
        "started after test_threads.py::test_a_starts_a_thread returned; possibly a thread or a finaliser of that test"
    )
    after_c = after_a.replace("test_a_starts_a_thread", "test_c_last_starts_a_thread")
    assert got == sorted(
        [
            (f"sleep {marks['between']}", after_a, "session", None, True),
            (f"sleep {marks['after']}", after_c, "session", None, True),
        ]
    ), doc["leaks"]
    assert not alive, alive
    assert doc["leaking_tests"] == []
    result.assert_outcomes(passed=3)
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [f"  session level: {after_a}: 1 process(es) (still a child)", f"{_options.THREADS_LINE}: late-starter"]
    )
    result.stderr.fnmatch_lines(
        [_options.AT_EXIT_LINE, f"  {after_c}: 1 process(es); killed:", f"*sleep {marks['after']}"]
    )


SUB_CONFTEST = """
import subprocess, pytest

@pytest.fixture(scope="session")
def subserver():
    subprocess.Popen(["sleep", "{fixture}"])  # never stopped
    yield
    subprocess.Popen(["sleep", "{teardown}"])  # a "stop" helper it never waits for
"""


def test_a_session_fixture_in_a_subfolder_conftest_is_named_not_a_test(pytester, marks):
    """Path: a wider fixture's scope, wherever its conftest is: a session fixture of
    sub/conftest.py leaks a process at its set-up and another at its teardown (which runs while
    pytest tears down the last test, of another file); both are reported on the fixture by name
    and file ("found at the teardown of" that test), and no test is a culprit. The last test's
    own scope stays clean."""
    sub = pytester.mkpydir("sub")
    (sub / "conftest.py").write_text(SUB_CONFTEST.format(**marks))
    (sub / "test_sub.py").write_text("def test_uses(subserver):\n    pass\n")
    pytester.makepyfile(test_z_last="def test_last():\n    pass\n")
    result = _run(pytester, "-p", "no:xdist", "--process-leaks", "--process-leaks-json", "leaks.json")
    doc = _json(pytester)
    label = "fixture 'subserver' (session scope, sub/conftest.py)"
    got = sorted((x["cmdline"], x["scope"], x["kind"], x["nodeid"]) for x in doc["leaks"])
    assert got == sorted(
        [
            (f"sleep {marks['fixture']}", label, "fixture", "test_z_last.py::test_last"),
            (f"sleep {marks['teardown']}", label, "fixture", "test_z_last.py::test_last"),
        ]
    ), doc["leaks"]
    assert doc["leaking_tests"] == [] and doc["culprits"] == [label]
    assert not sleepers(marks)
    result.stdout.fnmatch_lines(
        [
            f"stoplatency: process leaks: {label} left 2 process(es) alive after its teardown; {_options.KEPT_NOTE}:",
            f"  {label}: 2 process(es) (still a child), found at the teardown of test_z_last.py::test_last",
        ]
    )


# -- 4. route labels ----------------------------------------------------------------------------

ROUTES_SUITE = """
import multiprocessing, os, pty, subprocess, sys, time

N = {marks!r}
COPIED = dict(os.environ)  # at import, before any test's tag: as psutil's PYTHON_EXE_ENV

def _wait_for(name):
    want = f"sleep {{N[name]}}".encode()
    for _ in range(500):
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if open(f"/proc/{{pid}}/cmdline", "rb").read().replace(b"\\0", b" ").strip() == want:
                    return
            except OSError:
                pass
        time.sleep(0.01)
    raise AssertionError(name)

def test_child():
    subprocess.Popen(["sleep", N["child"]])

def test_pty_child():
    pid, fd = pty.fork()  # as pexpect: pytest's direct child, in a session of its own
    if pid == 0:
        os.execvp("sleep", ["sleep", N["pty"]])
    _wait_for("pty")

def test_posix_spawn():
    os.posix_spawnp("sleep", ["sleep", N["spawned"]], os.environ)

def test_double_fork():
    subprocess.run(["sh", "-c", f"(sleep {{N['reparented']}} &)"], check=True)
    _wait_for("reparented")  # the orphan execs at its own pace

def test_copied_environment():
    subprocess.Popen(["sleep", N["copied_env"]], env=COPIED)

def test_scrubbed_child():
    subprocess.Popen(["env", "-i", "sleep", N["scrubbed"]])
    _wait_for("scrubbed")

def work():
    time.sleep(60)

def test_fork_child():
    multiprocessing.get_context("fork").Process(target=work).start()

class Worker(multiprocessing.get_context("fork").Process):
    def run(self):
        time.sleep(60)

def test_fork_subclass():
    Worker().start()
"""


def test_each_route_label_says_how_the_process_got_away(pytester, marks, monkeypatch):
    """Path: the route labels: a Popen never waited for is 'still a child', and so is an
    os.posix_spawn child; a pty child (pexpect's way: pytest's own child, setsid) is 'own session',
    not re-parented; a double fork is 're-parented'; a child started with an environment copied
    before the tag was set (psutil's way) or scrubbed by env -i has 'no run tag'; a multiprocessing
    fork child (no exec: /proc shows pytest's command line) is 'still a child', described by the
    function it runs. The node ids are pytest's own, also when pytest runs from a subfolder (its
    terminal then shows paths relative to there)."""
    pytester.makeini("[pytest]\n")
    pkg = pytester.mkdir("pkg")
    (pkg / "test_routes.py").write_text(ROUTES_SUITE.format(marks=marks))
    monkeypatch.chdir(pkg)
    result = _run(pytester, "-p", "no:xdist", "--process-leaks", "--process-leaks-json", "leaks.json")
    doc = json.loads((pkg / "leaks.json").read_text())
    got = {x["scope"].split("::")[-1]: (x["route"], x["cmdline"]) for x in doc["leaks"]}
    assert {x["scope"].split("::")[0] for x in doc["leaks"]} == {"pkg/test_routes.py"}, doc["leaks"]
    fork = "(fork of pytest, no exec) multiprocessing"
    assert got == {
        "test_child": ("still a child", f"sleep {marks['child']}"),
        "test_pty_child": ("own session", f"sleep {marks['pty']}"),
        "test_posix_spawn": ("still a child", f"sleep {marks['spawned']}"),
        "test_double_fork": ("re-parented", f"sleep {marks['reparented']}"),
        "test_copied_environment": ("no run tag", f"sleep {marks['copied_env']}"),
        "test_scrubbed_child": ("no run tag", f"sleep {marks['scrubbed']}"),
        # Process.start() drops a target; a subclass's run() names the code.
        "test_fork_child": ("still a child", f"{fork} ForkProcess-1"),
        "test_fork_subclass": ("still a child", f"{fork} Worker-2: test_routes.Worker.run"),
    }, doc["leaks"]
    assert not sleepers(marks)
    result.stdout.fnmatch_lines(["  pkg/test_routes.py::test_fork_child: 1 process(es) (still a child)"])
    result.assert_outcomes(passed=8, errors=8)
    assert os.getcwd() == str(pkg)
