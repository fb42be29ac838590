"""The plugin on Linux: the ``victim`` and ``stop_latency`` fixtures and the hooks (plugin.py,
the entry point, registers it; the options, ini keys and texts live there).

A session that uses none of it (no victim, no --process-leaks) reads nothing of /proc and
starts no process: the sweep of ownerless victims runs only where some session's records
outlived their owner (_cleanup.sweep_needed).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from . import _cgroup, _cleanup, _guardian, _leakreport, _leaks, _records, _report, _subreaper, _token
from ._handle import PreparedVictim, Victim
from ._recorder import Recorder
from .plugin import (
    CGROUP_LINE,
    CGROUP_UNAVAILABLE,
    LEAK_HEADER,
    NO_CGROUP_LINE,
    PROCESS_LEAKS_HEADER,
    SKIP_REASON,
    enabled,
    leaks_cgroup,
    leaks_enabled,
)

PLUGIN_NAME = "stoplatency-linux"


@dataclass
class _State:
    worker: str | None
    samples: list = field(default_factory=list)
    missing_workers: list = field(default_factory=list)
    swept: int = 0
    tracker: _leaks.Tracker | None = None
    leaks: list = field(default_factory=list)  # leak records (every worker's, on the controller)
    leak_checked: int = 0  # tests checked for leaks
    pending: list = field(default_factory=list)  # fixture leaks found during a teardown


_STATE = pytest.StashKey[_State]()


def _helper_pids():
    """Long-lived helpers of the pytest process itself, never a test's leak: this process's
    session guardian, and multiprocessing's resource tracker and fork server (started on
    first use by whichever test, they serve the interpreter until it exits)."""
    proc = _guardian._process
    pids = [proc.pid] if proc is not None and _guardian._started_for == os.getpid() else []
    return pids + _leaks.interpreter_helpers()


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config):
    worker = config.workerinput.get("workerid") if _is_worker(config) else None
    config.stash[_STATE] = _State(worker=worker)
    if leaks_enabled(config):
        # The owner's record directory marks this process as one whose processes a sweep
        # may have to end (its tagged ones, its session cgroup) should it die: created
        # before any test runs, removed at a clean end (_cleanup.drop_own_records).
        _records.owner_dir(_token.me())
        # Every process that runs tests (each xdist worker; a controller adopts a dead
        # worker's orphans and reaps them at its end).
        _subreaper.enable()
        config.stash[_STATE].tracker = _leaks.Tracker(helpers=_helper_pids, cgroups=leaks_cgroup(config))


def pytest_report_header(config):
    if not leaks_enabled(config):
        return None
    if leaks_cgroup(config):
        parent = _cgroup.parent_dir()
        if parent is not None and _cgroup.probe():
            return [f"{CGROUP_LINE} {parent}"]
        return [f"{NO_CGROUP_LINE} {CGROUP_UNAVAILABLE}"]
    return [NO_CGROUP_LINE]


def pytest_sessionstart(session):
    # Only the controller (or a plain session) sweeps: workers would race each other.
    if not _is_worker(session.config) and _cleanup.sweep_needed():  # ablate: plugin-idle-sweep
        session.config.stash[_STATE].swept += _cleanup.sweep_ownerless()


def pytest_generate_tests(metafunc):
    n = metafunc.config.getoption("stop_latency_repeat")
    if n > 1 and metafunc.definition.get_closest_marker("stop_latency"):
        metafunc.fixturenames.append("_stop_latency_repeat")
        metafunc.parametrize("_stop_latency_repeat", range(n), indirect=True, ids=lambda i: f"rep{i + 1}")


@pytest.fixture
def _stop_latency_repeat(request):
    return request.param


def pytest_collection_modifyitems(config, items):
    if enabled(config):
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if item.get_closest_marker("stop_latency"):
            item.add_marker(skip)


def _leak_scope_enabled(item) -> bool:
    marker = item.get_closest_marker("process_leaks")
    return marker is None or bool(marker.kwargs.get("enabled", marker.args[0] if marker.args else True))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item):
    st = item.config.stash[_STATE]
    if st.tracker is not None:
        # The tag goes into os.environ for the test's whole duration: everything the test
        # (or code under test) starts inherits it.
        # Processes of a test that pytest never tears down (pytest-timeout's thread method
        # ends it with os._exit) are the guardian's to kill when this process dies.
        _guardian.ensure_started()
        scope = st.tracker.open(item.nodeid, checked=_leak_scope_enabled(item))
        item.stash[_LEAK_SCOPE] = (scope, os.environ.get(_leaks.TAG_ENV))
        os.environ[_leaks.TAG_ENV] = scope.tag  # ablate: leak-tag
        # With --process-leaks-cgroup, pytest itself runs the test from inside the test's
        # cgroup (a process starts in its parent's): out again at the end of the teardown.
        st.tracker.enter(scope if scope.cgroup is not None else None)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    st = request.config.stash[_STATE]
    if st.tracker is None or fixturedef.scope == "function":
        return (yield)
    # A wider fixture is its own scope: what it starts carries its tag and is checked
    # when it is torn down, not after the test that happened to set it up.
    scope = st.tracker.open(f"fixture {fixturedef.argname!r} ({fixturedef.scope} scope)", is_fixture=True)
    _FIXTURE_SCOPES[id(fixturedef)] = scope
    previous = os.environ.get(_leaks.TAG_ENV)
    os.environ[_leaks.TAG_ENV] = scope.tag
    was = st.tracker.enter(scope)  # its own cgroup too, then back to the test's
    lo = _leaks.last_pid()
    try:
        return (yield)
    finally:
        scope.windows.append((lo, _leaks.last_pid()))
        st.tracker.enter_path(was)
        _restore_tag(previous)


def pytest_fixture_post_finalizer(fixturedef, request):
    scope = _FIXTURE_SCOPES.pop(id(fixturedef), None)
    st = request.config.stash[_STATE]
    if scope is not None and st.tracker is not None:
        st.pending.extend(st.tracker.check(scope, full=True))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    st = item.config.stash[_STATE]
    if st.tracker is None or _LEAK_SCOPE not in item.stash:
        return (yield)
    scope, previous = item.stash[_LEAK_SCOPE]
    try:
        return (yield)
    finally:
        _restore_tag(previous)
        st.tracker.enter(None)
        leaks = []
        if _leak_scope_enabled(item):
            st.leak_checked += 1
            leaks = st.tracker.check(scope)
        leaks += st.pending
        st.pending.clear()
        _fail_on_leaks(st, item.nodeid, leaks)


def _fail_on_leaks(st, nodeid, leaks):
    if not leaks:
        return
    for leak in leaks:
        leak["nodeid"] = nodeid
        leak["worker"] = st.worker
    st.leaks.extend(leaks)
    by_scope: dict[str, list] = {}
    for leak in leaks:
        by_scope.setdefault(leak["scope"], []).append(leak)
    msg = "\n".join(
        f"{PROCESS_LEAKS_HEADER}: {label} left {len(group)} process(es) alive after its teardown; killed:\n"
        + _leaks.format_leaks(group)
        for label, group in by_scope.items()
    )
    pytest.fail(msg, pytrace=False)


def _restore_tag(previous):
    if previous is None:
        os.environ.pop(_leaks.TAG_ENV, None)
    else:
        os.environ[_leaks.TAG_ENV] = previous


_LEAK_SCOPE = pytest.StashKey[tuple]()
# Open wider-fixture scopes by FixtureDef identity (a FixtureDef has no stash).
_FIXTURE_SCOPES: dict[int, _leaks.Scope] = {}


class VictimFactory:
    """The ``victim`` fixture: ``victim(kind, ...)`` starts one; ``victim.prepare(...)`` does not."""

    def __init__(self):
        self.prepared: list[PreparedVictim] = []
        self.processes: list[subprocess.Popen] = []

    def prepare(self, kind, *, lang="python", sleep=7200, children=2, cleanup=1.0) -> PreparedVictim:
        p = PreparedVictim(kind, lang=lang, sleep=sleep, children=children, cleanup=cleanup)
        # Before anything can start it: if this pytest process dies without teardown,
        # its guardian kills what it started (_guardian.py).
        _guardian.ensure_started()
        self.prepared.append(p)  # registered before anyone can start it: cleanup finds it by token
        return p

    def __call__(self, kind, *, sleep=7200, lang="python", children=2, cleanup=1.0, timeout=10.0) -> Victim:
        p = self.prepare(kind, lang=lang, sleep=sleep, children=children, cleanup=cleanup)
        # Session and group leader: os.killpg(v.pgid, ...) can never reach pytest.
        proc = subprocess.Popen(
            p.argv,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.processes.append(proc)
        return p.adopt(timeout, process=proc)

    def lineage(self) -> tuple[list[str], list[tuple[int, int]]]:
        tokens = [str(p.token) for p in self.prepared]
        # The extras file too: a victim killed before its handshake wrote no ready file.
        extras = [
            e
            for p in self.prepared
            for e in _records.extras_of(p.ready_info()) + _records.read_extras(_records.extras_path(p.token))
        ]
        return tokens, extras

    def close(self) -> tuple[list[dict], list[dict]]:
        found, survivors = _cleanup.kill_lineage(*self.lineage())
        for proc in self.processes:
            try:
                proc.wait(timeout=_cleanup.SETTLE)
            except subprocess.TimeoutExpired:
                pass
        return found, survivors


@pytest.fixture
def victim(request):
    factory = VictimFactory()
    yield factory
    found, survivors = factory.close()
    if found:
        msg = f"{LEAK_HEADER} ({len(found)} still alive after {request.node.nodeid}); killed:\n"
        msg += _cleanup.format_procs(found)
        if survivors:
            msg += "\nand could NOT kill:\n" + _cleanup.format_procs(survivors)
        pytest.fail(msg, pytrace=False)


@pytest.fixture
def stop_latency(request):
    st = request.config.stash[_STATE]
    return Recorder(
        nodeid=request.node.nodeid,
        worker=st.worker,
        marker=request.node.get_closest_marker("stop_latency"),
        sink=st.samples,
    )


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist controller: merge a finished worker's samples (a worker that sent none is named)."""
    st = node.config.stash[_STATE]
    data = getattr(node, "workeroutput", {}).get(_report.WORKEROUTPUT_KEY)
    if data is None:
        st.missing_workers.append(node.gateway.id)
    else:
        st.samples.extend(data["samples"])
        st.leaks.extend(data.get("leaks", []))
        st.leak_checked += data.get("leak_checked", 0)


def pytest_sessionfinish(session):
    config = session.config
    st = config.stash[_STATE]
    if st.tracker is not None:
        # Wider fixtures torn down outside any test's teardown (an interrupted session).
        for scope in list(st.tracker.fixtures.values()):
            st.pending.extend(st.tracker.check(scope, full=True))
        for leak in st.pending:
            leak.update(nodeid=None, worker=st.worker)
        st.leaks.extend(st.pending)
        st.pending.clear()
        st.tracker.close()
        st.tracker.reap_adopted()
    if _is_worker(config):
        config.workeroutput[_report.WORKEROUTPUT_KEY] = {  # JSON-safe only
            "samples": list(st.samples),
            "leaks": list(st.leaks),
            "leak_checked": st.leak_checked,
        }
        _cleanup.drop_own_records()
        return
    if _cleanup.sweep_needed():  # a worker that died, or another session that did meanwhile
        st.swept += _cleanup.sweep_ownerless()
    _cleanup.drop_own_records()
    path = config.getoption("stop_latency_json")
    if path:
        doc = _report.document(
            st.samples, missing_workers=st.missing_workers, swept=st.swept, rootdir=Path(config.rootpath)
        )
        if leaks_enabled(config):
            doc["process_leaks"] = _leakreport.section(st.leaks, checked=st.leak_checked)
        _report.write_json(Path(config.invocation_params.dir) / path, doc)
    path = config.getoption("process_leaks_json")
    if path:
        doc = _leakreport.document(st.leaks, checked=st.leak_checked, rootdir=Path(config.rootpath))
        _report.write_json(Path(config.invocation_params.dir) / path, doc)


def pytest_terminal_summary(terminalreporter, config):
    if _is_worker(config):
        return
    st = config.stash[_STATE]
    if leaks_enabled(config):
        terminalreporter.write_sep("=", "process leaks")
        for line in _leakreport.summary_lines(st.leaks, checked=st.leak_checked):
            terminalreporter.write_line(line)
        if config.getoption("process_leaks_json"):
            terminalreporter.write_line(f"stoplatency: wrote {config.getoption('process_leaks_json')}")
    if not (st.samples or enabled(config) or st.swept or st.missing_workers):
        return
    tr = terminalreporter
    tr.write_sep("=", "stop latency")
    if st.samples:
        for line in _report.table(_report.summarize(st.samples)):
            tr.write_line(line)
    else:
        tr.write_line("no stop-latency samples recorded")
    tr.write_line(f"stoplatency: swept {st.swept} ownerless victim process(es)")
    if st.missing_workers:
        tr.write_line(f"stoplatency: workers that returned no samples: {', '.join(st.missing_workers)}")
    path = config.getoption("stop_latency_json")
    if path:
        tr.write_line(f"stoplatency: wrote {path}")
