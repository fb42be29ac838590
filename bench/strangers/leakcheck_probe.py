"""The probe of `make leaks-strangers`, loaded into every pytest process of a stranger's session
(PYTEST_PLUGINS=bench.strangers.leakcheck_probe): the scopes the independent checker
(checker.py) needs, marked in its own way, and each test's outcome.

In each process that runs tests: LEAKCHECK_SCOPE in os.environ names the running test (set
before its setup), a wider fixture while it is set up and torn down, or the gap after a test;
the checker is told when each starts, and at each test's end (pytest_runtest_logfinish, after
its whole teardown and report) it is told which scopes ended and the probe waits until it has
looked. From the end of a test's teardown until the checker has looked, no automatic garbage
collection runs (a finaliser, pexpect's, would kill a process that was alive after the
teardown before the checker sees it): the checker looks at what the test left, as the
plugin's check does; the plugin, which holds the collector off for its own check too, sees
nothing different. On the controller (or a plain session): every test's outcome by phase, a
failure's first message line and where it was raised, and whether a teardown error is the
leak check's own report, written at the session's end to LEAKCHECK_OUTCOMES. With
LEAKCHECK_SORT set, the collected tests are sorted by node id. Standard library and pytest only; nothing of the plugin.

The stop signals (os.kill, os.killpg: Popen.terminate(), pexpect's and psutil's kill) each
pytest process sends are told to the checker with its next message (an audit hook): once a
signal has reached a Python handler, /proc shows nothing of it, and the checker gives a
process told to stop the stop grace.

Only the outermost session of a process is watched: a session a test runs inside it
(pytester's runpytest(), in process) or starts as its child (runpytest_subprocess(): its
environment carries a test's or a fixture's scope) is part of that test. What its tests start
carries the outer test's scope, and is the outer test's leak only if it outlives the outer test.
"""

import gc
import itertools
import json
import os
import socket
import sys
import time
from collections import deque

import pytest

from bench.strangers import nesting

TAG = "LEAKCHECK_SCOPE"
LEAK_REPORT = "stoplatency: process leaks"  # the first words of the plugin's report (compared, not imported)
CLK_TCK = os.sysconf("SC_CLK_TCK")

_ids = itertools.count(1)
_state: dict = {"conn": None, "file": None, "worker": "main", "gaps": [], "ended": [], "open": {}}
_outcomes: dict[str, dict[str, str]] = {}
_sent: deque = deque()  # (target, signal, ticks): os.kill's target, or -pgid for os.killpg
_INHERITED = os.environ.get(TAG, "")
_watched = nesting.watched


def _audit(event, args):
    if event != "os.kill" and event != "os.killpg":
        return
    try:
        target, sig = int(args[0]), int(args[1])
    except (TypeError, ValueError, IndexError):
        return
    _sent.append((-target if event == "os.killpg" else target, sig, _ticks()))


sys.addaudithook(_audit)


def _ticks() -> int:
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * CLK_TCK)


def _send(msg: dict, *, wait: bool) -> None:
    path = os.environ.get("LEAKCHECK_SOCKET")
    if not path:
        return
    if _state["conn"] is None:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
        _state["conn"], _state["file"] = conn, conn.makefile("rb")
    told = []
    while _sent:
        told.append(_sent.popleft())
    if told:
        msg = {**msg, "told": told}
    _state["conn"].sendall(json.dumps(msg).encode() + b"\n")
    if wait:
        _state["file"].readline()


def _new_tag(kind: str) -> str:
    return f"{os.environ.get('LEAKCHECK_RUN', 'run')}.{_state['worker']}.{kind}{next(_ids)}"


def _start(tag: str, nodeid: str) -> None:
    os.environ[TAG] = tag
    _send({"op": "start", "tag": tag, "nodeid": nodeid, "pid": os.getpid(), "ticks": _ticks()}, wait=False)


def pytest_configure(config):
    nesting.configured(config, _INHERITED)
    if hasattr(config, "workerinput") and _watched():
        _state["worker"] = config.workerinput["workerid"]


def pytest_unconfigure(config):
    nesting.unconfigured(config)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if not _watched():
        return
    tag = _new_tag("t")
    _state["open"][item.nodeid] = tag
    _start(tag, item.nodeid)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    if fixturedef.scope == "function" or not _watched():
        return (yield)
    tag = _new_tag("f")
    label = f"fixture {fixturedef.argname!r} ({fixturedef.scope} scope)"
    saved: dict = {}

    def torn_down():
        os.environ[TAG] = saved.get("previous") or os.environ.get(TAG, "")
        _state["ended"].append(tag)

    def teardown_starts():
        saved["previous"] = os.environ.get(TAG)
        os.environ[TAG] = tag

    fixturedef.addfinalizer(torn_down)  # runs after the fixture's own teardown
    previous = os.environ.get(TAG)
    _send({"op": "start", "tag": tag, "nodeid": label, "pid": os.getpid(), "ticks": _ticks()}, wait=False)
    os.environ[TAG] = tag
    try:
        return (yield)
    finally:
        if previous is None:
            os.environ.pop(TAG, None)
        else:
            os.environ[TAG] = previous
        fixturedef.addfinalizer(teardown_starts)  # runs before it


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    # Inner to the leak check's own wrapper (tryfirst): this runs first once the teardown is over.
    if not _watched():
        return (yield)
    try:
        return (yield)
    finally:
        _state["gc_was"] = gc.isenabled()
        gc.disable()
        # What the test left, as it is now (before the plugin's check): the checker's snapshot.
        tags = [t for t in [_state["open"].get(item.nodeid), *_state["ended"]] if t]
        _send({"op": "snapshot", "tags": tags}, wait=True)


def pytest_runtest_logfinish(nodeid, location):
    if not _watched():
        return
    gap = _new_tag("g")
    _state["gaps"].append(gap)
    ended, _state["ended"] = _state["ended"], []
    test = _state["open"].pop(nodeid, None)
    os.environ[TAG] = gap
    tags = [t for t in [test, *ended] if t]
    try:
        _send(
            {"op": "end", "tags": tags, "nodeid": nodeid, "gap": gap, "pid": os.getpid(), "ticks": _ticks()},
            wait=True,
        )
    finally:
        if _state.pop("gc_was", False):
            gc.enable()


def pytest_runtest_logreport(report):
    if not _watched():
        return
    phases = _outcomes.setdefault(report.nodeid, {})
    outcome = report.outcome
    if hasattr(report, "wasxfail"):
        outcome = "xfailed" if report.skipped else "xpassed"
    if report.when == "teardown" and report.failed and str(report.longrepr).startswith(LEAK_REPORT):
        outcome = "leak-report"
    phases[report.when] = outcome
    crash = getattr(report.longrepr, "reprcrash", None)
    if report.failed and crash is not None and outcome != "leak-report":
        phases[f"{report.when}-message"] = str(crash.message).splitlines()[0][:300]
        # Where it was raised: with the message, the failure's signature (the harness counts
        # each signature's failures per session).
        phases[f"{report.when}-at"] = f"{crash.path}:{crash.lineno}"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    # LEAKCHECK_SORT: a suite that shuffles its own tests at each import (sh) collects them in a
    # different order in each xdist worker, and xdist then runs none; sorted by node id, every
    # worker (and every session) collects the same list.
    if os.environ.get("LEAKCHECK_SORT") and _watched():
        items.sort(key=lambda item: item.nodeid)


def pytest_sessionfinish(session):
    if not _watched():
        return
    ended, _state["ended"] = _state["ended"], []
    _send({"op": "session-end", "tags": _state["gaps"] + ended}, wait=True)
    out = os.environ.get("LEAKCHECK_OUTCOMES")
    if out and not hasattr(session.config, "workerinput"):
        with open(out, "w") as f:
            json.dump(_outcomes, f)
