"""--process-leaks: every process a test (or a wider fixture) left alive is reported with its
escape route and killed; nothing that existed before, nor anybody else's, is touched.

Each inner suite's processes are plain `sleep N` commands (no victims: the check works on any
test), N unique to the run, so that the outer test finds whatever survived by its command
line and kills it itself: a red run still leaks nothing.
"""

import json
import subprocess
import time

import pytest
from plugin_helpers import all_marked
from plugin_helpers import kill_identified as _kill
from plugin_helpers import sleep_marks as _marks
from plugin_helpers import sleepers as _sleepers

from pytest_stoplatency import _leakreport, _options, _procs
from pytest_stoplatency._guardian import ENV_DISABLE as ENV_NO_GUARDIAN


@pytest.fixture(autouse=True)
def _no_guardian_unless_needed(request, monkeypatch):
    """A --process-leaks session starts a guardian, which sweeps every dead owner's processes
    when its pytest exits; each is one more sweeper racing the sweep tests of test_leaks.py
    on a shared machine. Only the tests that need one keep it."""
    if "guardian" not in request.node.name and "clean_suite" not in request.node.name:
        monkeypatch.setenv(ENV_NO_GUARDIAN, "1")


MARK_NAMES = (
    "sentinel",
    "sentinel_scrubbed",
    "child",
    "escapee",
    "double_fork",
    "scrubber",
    "session",
    "module",
    "good",
    "disabled",
)


@pytest.fixture
def marks():
    """Names -> unique sleep durations; whatever of them outlives the test is killed."""
    m = _marks(*MARK_NAMES)
    yield m
    _kill(all_marked(m))


LEAKY_SUITE = """
import multiprocessing, os, subprocess, time, pytest

N = {marks!r}

def sleep(name):
    return ["sleep", N[name]]

@pytest.fixture(scope="session")
def leaky_server():
    subprocess.Popen(sleep("session"))  # never stopped
    yield

@pytest.fixture(scope="session")
def good_server():
    p = subprocess.Popen(sleep("good"))
    yield p
    p.kill()
    p.wait()

def test_child():
    subprocess.Popen(sleep("child"))

def running(name):
    want = f"sleep {{N[name]}}".encode()
    for _ in range(500):  # the shell forks and execs at its own pace: wait for the sleep itself
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if open(f"/proc/{{pid}}/cmdline", "rb").read().replace(b"\\0", b" ").strip() == want:
                    return
            except OSError:
                pass
        time.sleep(0.01)
    raise AssertionError(f"{{name}} never started")

def test_setsid_grandchild():
    subprocess.Popen(["sh", "-c", f"setsid sleep {{N['escapee']}} & wait"])
    running("escapee")  # else the check may catch the shell before its child exists

def test_double_fork():
    subprocess.run(["sh", "-c", f"(sleep {{N['double_fork']}} &)"], check=True)

def test_env_scrubber():
    subprocess.run(["env", "-i", "setsid", "-f", "sleep", N["scrubber"]], check=True)

def test_uses_leaky_server(leaky_server):
    pass

@pytest.mark.process_leaks(enabled=False)
def test_disabled():
    subprocess.Popen(sleep("disabled"))

def test_clean_run():
    subprocess.run(["true"], check=True)

def test_clean_popen_waited():
    p = subprocess.Popen(["sleep", "0.05"])
    p.wait()

def test_clean_good_server(good_server):
    assert good_server.poll() is None

def test_clean_double_fork_that_exits():
    subprocess.run(["sh", "-c", "(sleep 0.05 &)"], check=True)
    time.sleep(0.3)  # the adopted orphan exits within the test: a zombie to reap, no leak

def _work():
    pass

def test_clean_multiprocessing():
    p = multiprocessing.get_context("fork").Process(target=_work)
    p.start()
    p.join()
"""

MODULE_SUITE = """
import subprocess, pytest

N = {marks!r}

@pytest.fixture(scope="module")
def scrubbed_module_server():
    # The module fixture's process drops its environment and re-parents: only the fixture's
    # pid window and pytest's tree say whose it is.
    subprocess.run(["env", "-i", "setsid", "-f", "sleep", N["module"]], check=True)
    yield

def test_uses_module_server(scrubbed_module_server):
    pass

def test_clean_after(scrubbed_module_server):
    pass
"""


# What each flag finds of the acceptance suite: {name: (route, scope)}, and what it cannot
# see (the processes that drop their environment and fork away from their parent).
_FIXTURE = "fixture 'leaky_server' (session scope, test_leaky.py)"
_MODULE = "fixture 'scrubbed_module_server' (module scope, test_module.py)"
ACCEPTANCE = {
    # The default: no side effect on the tree; `env -i setsid -f` is out of reach (the note says so).
    "--process-leaks": (
        {
            "child": ("still a child", "test_leaky.py::test_child"),
            "double_fork": ("re-parented", "test_leaky.py::test_double_fork"),
            "session": ("still a child", _FIXTURE),
        },
        {"scrubber", "module"},
    ),
    # pytest as subreaper: the double fork comes back to pytest (a child of pytest again: the
    # kernel keeps no record of its first parent), the scrubbed ones stay in its tree.
    "--process-leaks-subreaper": (
        {
            "child": ("still a child", "test_leaky.py::test_child"),
            "double_fork": ("still a child", "test_leaky.py::test_double_fork"),
            "scrubber": ("no run tag", "test_leaky.py::test_env_scrubber"),
            "session": ("still a child", _FIXTURE),
            "module": ("no run tag", _MODULE),
        },
        set(),
    ),
    # A cgroup per scope: the scrubbed ones left the tree, and are found in the scope's cgroup.
    "--process-leaks-cgroup": (
        {
            "child": ("still a child", "test_leaky.py::test_child"),
            "double_fork": ("re-parented", "test_leaky.py::test_double_fork"),
            "scrubber": ("no run tag, left the tree (found by cgroup)", "test_leaky.py::test_env_scrubber"),
            "session": ("still a child", _FIXTURE),
            "module": ("no run tag, left the tree (found by cgroup)", _MODULE),
        },
        set(),
    ),
}


@pytest.mark.parametrize("flag", ["--process-leaks", "--process-leaks-subreaper"])
def test_acceptance_each_leak_reported_with_its_route_killed_and_nothing_else_touched(pytester, marks, flag):
    """Path: --process-leaks under -n 2 on hidden leaking tests (a child, a setsid grandchild, a
    double fork, an env scrubber (env -i + setsid -f), a session fixture's and a module fixture's
    leak): each is reported once, with its escape route, against the right scope (a fixture by its
    name and file), and killed; the clean tests pass; two sentinels started before the inner pytest
    (one of them env-scrubbed, in its own session) survive, and so does the process of a test with
    the check turned off. By default the env scrubbers are out of reach (they survive, and the
    header says what is not seen and how to see it); --process-leaks-subreaper finds them.

    Ablations: `leak-subreaper` (the env scrubbers re-parent to init, untagged: unseen, [subreaper]
    red), `leak-tag` (every process reads as 'no run tag'; the double fork that left the tree is
    unseen: both red), `leak-kill` (the leaks survive).
    """
    run_acceptance(pytester, marks, flag)


SOLE_MODULE_SUITE = """
import subprocess, pytest

N = {marks!r}

@pytest.fixture(scope="module")
def untagged_server():
    # Its environment dropped, still pytest's child: only the fixture's pid window says whose.
    # Started with no environment (Popen returns once sleep is exec'd), not through `env -i`,
    # whose own start still carries the tag: a check that came first read it as tagged.
    subprocess.Popen(["sleep", N["module"]], env={{}})
    yield

def test_only(untagged_server):
    pass
"""


def test_a_module_fixture_set_up_and_torn_down_within_one_test_is_named_for_its_untagged_leak(pytester, marks):
    """Path: the TREE route's owner when a wider fixture's whole life lies inside one test (the
    only test of its module, or of its module on an xdist worker: the acceptance suite under
    load): the fixture's set-up window is the fixture's, though the test's window holds it too.

    Ablation: `leak-fixture-in-test` (the test claims what the fixture started) red."""
    pytester.makepyfile(test_sole=SOLE_MODULE_SUITE.format(marks=marks))
    pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", "--process-leaks", "--process-leaks-json", "leaks.json", timeout=120
    )
    doc = json.loads((pytester.path / "leaks.json").read_text())
    [leak] = [x for x in doc["leaks"] if marks["module"] in x["cmdline"]]
    assert (leak["route"], leak["scope"]) == ("no run tag", "fixture 'untagged_server' (module scope, test_sole.py)")
    assert leak["killed"] is True
    assert "module" not in _sleepers(marks)


def run_acceptance(pytester, marks, flag):
    """The acceptance suite under `flag` (test_process_leaks_cgroup.py runs it with
    --process-leaks-cgroup), with `marks` from the `marks` fixture's names."""
    expected, unseen = ACCEPTANCE[flag]
    sentinels = [
        subprocess.Popen(["sleep", marks["sentinel"]]),
        subprocess.Popen(["env", "-i", "sleep", marks["sentinel_scrubbed"]], start_new_session=True),
    ]
    try:
        pytester.makepyfile(test_leaky=LEAKY_SUITE.format(marks=marks), test_module=MODULE_SUITE.format(marks=marks))
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "-n", "2", flag, "--process-leaks-json", "leaks.json", timeout=120
        )
        alive = _sleepers(marks)
        doc = json.loads((pytester.path / "leaks.json").read_text())
    finally:
        still = [(p.pid, _procs.start_ticks(p.pid)) for p in sentinels if p.poll() is None]
        for p in sentinels:
            p.kill()
            p.wait()
    assert len(still) == 2, "a process that existed before the inner pytest was touched"
    assert set(alive) == {"sentinel", "sentinel_scrubbed", "disabled"} | unseen, f"survivors: {alive}"

    def reported(name):
        # Matched by the unique number: a process caught before its exec (`setsid -f`, a
        # subshell) still shows the shell's command line.
        return [x for x in doc["leaks"] if marks[name] in x["cmdline"]]

    for name, want in expected.items():
        hits = reported(name)
        # Each worker that runs a test of the module sets the module fixture up: once or twice.
        assert 1 <= len(hits) <= (2 if name == "module" else 1), f"{name}: {hits}; report: {doc['leaks']}"
        for leak in hits:
            assert (leak["route"], leak["scope"]) == want, (name, leak)
            assert leak["killed"] is True
        result.stdout.fnmatch_lines([f"*escaped: {want[0]}: *{marks[name]}*"])
    for name in unseen:
        assert not reported(name), (name, doc["leaks"])
    # The setsid grandchild: its shell is still pytest's child, the sleep is in its own session.
    got = sorted((x["route"], x["cmdline"].split()[0]) for x in reported("escapee"))
    assert got == [("own session", "sleep"), ("still a child", "sh")], got
    assert {x["scope"] for x in reported("escapee")} == {"test_leaky.py::test_setsid_grandchild"}
    # Nothing else: no helper, no worker, no clean test's process.
    one_each = len(expected) - ("module" in expected)
    assert len(doc["leaks"]) == one_each + len(reported("escapee")) + len(reported("module")), doc["leaks"]
    assert {x["worker"] for x in doc["leaks"]} <= {"gw0", "gw1"}
    assert doc["culprits"] == sorted({x["scope"] for x in doc["leaks"]})
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] == 13 and "failed" not in outcomes
    result.stdout.fnmatch_lines(["*= process leaks =*", "stoplatency: * leaked process(es) from * scope(s), * killed*"])
    if unseen:
        result.stdout.fnmatch_lines([f"*{_options.NO_CGROUP_LINE}*"])


CLEAN_SUITE = """
import asyncio, multiprocessing, subprocess, sys, time, pytest

@pytest.fixture(scope="session")
def server():
    p = subprocess.Popen(["sleep", "30"], start_new_session=True)
    yield p
    p.kill()
    p.wait()

@pytest.mark.parametrize("i", range(6))
def test_waited(i, server):
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_victim_stopped(victim):
    v = victim("forker", lang="bash")  # also starts the session guardian: a helper, no leak
    v.kill()

def test_asyncio_subprocess():
    async def main():
        p = await asyncio.create_subprocess_exec("sleep", "0.01")
        await p.wait()
    asyncio.run(main())

def test_multiprocessing_spawn():
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply(abs, (-1,)) == 1

def test_double_fork_that_exits():
    subprocess.run(["sh", "-c", "(sleep 0.05 &)"], check=True)
    time.sleep(0.3)

@pytest.mark.skip(reason="not counted as checked")
def test_skipped():
    pass

def test_skips_itself():
    pytest.skip("not counted as checked either")

@pytest.mark.xfail(strict=True, reason="it ran: counted")
def test_xfails():
    assert False
"""


@pytest.mark.parametrize("xdist", [("-n", "2"), ("-p", "no:xdist")], ids=["xdist", "serial"])
def test_clean_suite_reports_no_leak(pytester, xdist):
    """Path: no false positives: a clean suite (waited subprocesses, a session server stopped at
    its teardown, a victim (and with it the session guardian), asyncio and multiprocessing
    children, a double fork that exits, xdist's workers) reports no leak. The count of tests
    checked leaves out the two skipped ones (an xfail ran: it counts)."""
    pytester.makepyfile(CLEAN_SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", *xdist, "--process-leaks", "--process-leaks-json", "leaks.json", timeout=120
    )
    doc = json.loads((pytester.path / "leaks.json").read_text())
    assert doc["leaks"] == [] and doc["checked"] == 11, doc
    result.assert_outcomes(passed=10, skipped=2, xfailed=1)
    result.stdout.fnmatch_lines(["stoplatency: no process leaks (11 test(s) checked)"])


def test_tag_alone_finds_a_double_fork_that_left_the_tree(pytester, marks):
    """Path: the per-test tag alone (the default: pytest is no subreaper): a double-forked process
    is re-parented away from pytest's tree (to init); its inherited tag still names the test, and
    it is reported ('re-parented') and killed.

    Ablation: `leak-tag` turns this red (no tag, outside the tree: unseen); `leak-subreaper` does
    not (this session never used the subreaper).
    """
    pytester.makepyfile(
        f"""
import subprocess
import time

def test_double_fork():
    subprocess.run(["sh", "-c", "(sleep {marks["double_fork"]} &)"], check=True)
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "--process-leaks")
    alive = _sleepers(marks)
    assert not alive, f"survivors: {alive}"
    result.stdout.fnmatch_lines([f"*escaped: re-parented: *{marks['double_fork']}*"])
    result.assert_outcomes(passed=1, errors=1)


def test_subreaper_brings_back_a_process_that_dropped_its_environment(pytester, marks):
    """Path: the subreaper alone (--process-leaks-subreaper, named in the header): `env -i setsid
    -f` leaves no tag and forks away from its parent; only because pytest is a child subreaper
    does it stay in pytest's tree, where it is found ('no run tag') and killed.

    Ablation: `leak-subreaper` turns this red; `leak-tag` does not (there is no tag to read).
    """
    pytester.makepyfile(
        f"""
import subprocess
import time

def test_env_scrubber():
    subprocess.run(["env", "-i", "setsid", "-f", "sleep", "{marks["scrubber"]}"], check=True)
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "--process-leaks-subreaper")
    alive = _sleepers(marks)
    assert not alive, f"survivors: {alive}"
    result.stdout.fnmatch_lines([_options.SUBREAPER_LINE, f"*escaped: no run tag: *{marks['scrubber']}*"])
    result.assert_outcomes(passed=1, errors=1)


def test_ini_key_and_module_marker(pytester, marks):
    """Path: `process_leaks = true` in the ini file enables the check as --process-leaks does; a
    module's `pytestmark = pytest.mark.process_leaks(enabled=False)` turns it off there; the
    stop-latency JSON carries the leaks."""
    pytester.makeini("[pytest]\nprocess_leaks = true\n")
    pytester.makepyfile(
        test_on=f"import subprocess\ndef test_on():\n    subprocess.Popen(['sleep', '{marks['child']}'])\n",
        test_off=(
            "import subprocess, pytest\npytestmark = pytest.mark.process_leaks(enabled=False)\n"
            f"def test_off():\n    subprocess.Popen(['sleep', '{marks['disabled']}'])\n"
        ),
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "--stop-latency-json", "sl.json")
    alive = _sleepers(marks)
    assert set(alive) == {"disabled"}
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_on*",
            "stoplatency: 1 leaked process(es) from 1 scope(s)*",
            "  test_on.py::test_on: *",
        ]
    )
    # --stop-latency-json carries the same leak object as --process-leaks-json.
    leaks = json.loads((pytester.path / "sl.json").read_text())["process_leaks"]
    assert leaks["schema"] == _leakreport.SCHEMA and leaks["checked"] == 1
    assert leaks["leaking_tests"] == ["test_on.py::test_on"]
    assert [(x["route"], x["cmdline"], x["killed"]) for x in leaks["leaks"]] == [
        ("still a child", f"sleep {marks['child']}", True)
    ]


def test_help_texts(pytester):
    """Path: the options, ini keys and marker document themselves with the plugin's constants;
    `--process-leaks=warn` is an option string of its own."""
    result = pytester.runpytest_subprocess("--help")
    result.stdout.fnmatch_lines(
        [
            f"*--process-leaks *{_options.HELP_LEAKS[:40]}*",
            f"*--process-leaks=warn *{_options.HELP_LEAKS_WARN[:30]}*",
            "*--process-leaks-kill={session,teardown}*",
            f"*{_options.HELP_LEAKS_KILL[:30]}*",
            "*--process-leaks-grace=SECONDS*",
            f"*{_options.HELP_LEAKS_GRACE[:30]}*",
            "*--process-leaks-stop-grace=SECONDS*",
            f"*{_options.HELP_LEAKS_STOP_GRACE[:30]}*",
        ]
    )
    for key, text in (
        ("process_leaks", _options.HELP_LEAKS_INI),
        ("process_leaks_kill", _options.HELP_LEAKS_KILL_INI),
        ("process_leaks_grace", _options.HELP_LEAKS_GRACE_INI),
        ("process_leaks_stop_grace", _options.HELP_LEAKS_STOP_GRACE_INI),
        ("process_leaks_exclude", _options.HELP_LEAKS_EXCLUDE_INI),
    ):
        result.stdout.fnmatch_lines([f"  {key} (string):*", f"*{text[:30]}*"])
    result = pytester.runpytest_subprocess("--markers")
    result.stdout.fnmatch_lines([f"*{_options.LEAKS_MARKER_LINE[:50]}*"])


def test_a_pytest_that_dies_without_teardown_has_its_leaks_killed_by_the_guardian(pytester, marks):
    """Path: the session guardian's sweep takes --process-leaks tags too: a test that ends its
    pytest with os._exit (as pytest-timeout's thread method does) skips every teardown, and the
    process it started is killed within moments by the guardian (its tag names a dead owner).
    A process of a test with the check turned off carries no owner in its tag: left alone.

    Not an attribution test: another session's start-up sweep (any concurrent pytest of this
    plugin) may get there first; tests/plugin/test_leaks.py attributes the guardian itself."""
    pytester.makepyfile(
        f"""
import os, subprocess, time, pytest

@pytest.mark.process_leaks(enabled=False)
def test_a_kept():
    subprocess.Popen(["sleep", "{marks["disabled"]}"])

def test_b_dies():
    subprocess.Popen(["sleep", "{marks["child"]}"])
    time.sleep(0.2)
    os._exit(3)
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "--process-leaks")
    assert result.ret == 3
    deadline = time.monotonic() + 10
    while "child" in _sleepers(marks) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(_sleepers(marks)) == {"disabled"}
