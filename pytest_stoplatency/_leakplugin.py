"""The --process-leaks plugin object: its hooks, registered by plugin.pytest_configure only
when the check is on (an unused check reads nothing and changes nothing).

Per test: a scope (_leaks.Scope) opens at setup, its tag in os.environ for everything the
test starts; at the end of its teardown the tag becomes the gap's (what starts from then
on is no longer the test's) and the scope is checked. A leak is reported at the teardown
of the test (pytest's convention for a finding made after the test's own outcome was
decided: a fixture's teardown error is one too), as an error or, with --process-leaks=warn,
a ProcessLeakWarning, with every process and its escape route, once: a process reported is
never reported again. It is killed at the session's end (or, if pytest dies, by its
guardian or the next session's sweep), so that the suite runs on exactly as it would
without the check; --process-leaks-kill=teardown kills it at once. A wider fixture is a
scope of its own, checked after its own teardown and named. What starts between tests,
after the last one, or under a scope already checked is session level: checked at the
session's end (and once more at exit, for what a thread or an atexit handler starts while
pytest shuts down).

The check runs after everything of the test's teardown, with pytest-timeout's timer of the
test stopped: its own time (the grace included) never counts against the test's timeout.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import warnings
from pathlib import Path

import pytest

from . import _cgroup, _guardian, _leakreport, _leaks, _options, _records, _report, _subreaper
from .victim import EXTRAS_SUFFIX

NAME = "stoplatency-process-leaks"
WORKEROUTPUT_KEY = "stoplatency_process_leaks"

_SCOPE = pytest.StashKey[_leaks.Scope]()
_SKIPPED = pytest.StashKey[bool]()


def _helper_pids() -> list[int]:
    """Long-lived helpers of the pytest process itself, never a test's leak: this process's
    session guardian, and multiprocessing's resource tracker and fork server (started on
    first use by whichever test, they serve the interpreter until it exits)."""
    guardian = _guardian.pid()
    return ([guardian] if guardian is not None else []) + _leaks.interpreter_helpers()


def scope_enabled(item) -> bool:
    marker = item.get_closest_marker("process_leaks")
    return marker is None or bool(marker.kwargs.get("enabled", marker.args[0] if marker.args else True))


def fixture_label(fixturedef, rootpath: Path) -> str:
    """ "fixture 'name' (session scope, sub/conftest.py)": the file names which of several
    fixtures of one name it is."""
    where = ""
    code = getattr(getattr(fixturedef, "func", None), "__code__", None)
    if code is not None:
        try:
            where = f", {os.path.relpath(code.co_filename, rootpath)}"
        except ValueError:
            where = f", {code.co_filename}"
    return f"fixture {fixturedef.argname!r} ({fixturedef.scope} scope{where})"


def section_for(config) -> dict:
    """The process_leaks object of --stop-latency-json (empty when the check is off)."""
    plugin = config.pluginmanager.get_plugin(NAME)
    if plugin is None:
        return _leakreport.section([], checked=0, excluded=[])
    return _leakreport.section(plugin.leaks, checked=plugin.checked, excluded=plugin.excluded)


def stop_timeout(item) -> None:
    """pytest-timeout times a test's setup, call and teardown (or its call alone, with
    timeout_func_only); when the check begins all of them are over. So the test's timer is
    stopped here (pytest-timeout's own hook, which it calls again, harmlessly, when the test's
    protocol ends): the check's time never counts against the test's timeout."""
    cancel = getattr(item.config.hook, "pytest_timeout_cancel_timer", None)
    if cancel is not None:
        cancel(item=item)  # ablate: leak-check-untimed


def _set_tag(value: str | None) -> None:
    if value is None:
        os.environ.pop(_leaks.TAG_ENV, None)
    else:
        os.environ[_leaks.TAG_ENV] = value


class ProcessLeaks:
    def __init__(self, config, session: int | None = None) -> None:
        self.config = config
        self.session = session  # this pytest session's number in its process (_session.py)
        self.worker = config.workerinput.get("workerid") if hasattr(config, "workerinput") else None
        self.mode = _options.leaks_mode(config)
        self.kill = _options.leaks_kill(config)
        self.cgroups = _options.leaks_cgroup(config)
        self.subreaper_asked = _options.leaks_subreaper(config)
        # In every process that runs tests (each xdist worker), and the controller, which
        # adopts a dead worker's orphans and reaps them at its end.
        self.subreaper = self.subreaper_asked and _subreaper.enable()
        # The leaks kept alive until the session's end, recorded where a sweep (this
        # process's guardian, the next session's start) finds them should pytest die first:
        # also those that dropped the tag a sweep looks for.
        # This session's own directory: an inner session (pytester.runpytest() in a test)
        # has its own, and its end never removes the outer one's.
        self.kept_record = _records.session_dir(session) / f"process-leaks{EXTRAS_SUFFIX}"
        self.tracker = _leaks.Tracker(
            helpers=_helper_pids,
            cgroups=self.cgroups,
            session=session,
            reap=self.subreaper,
            kill_at_check=self.kill == _options.KILL_TEARDOWN,
            grace=_options.leaks_grace(config),
            stop_grace=_options.leaks_stop_grace(config),
            exclude=_options.leaks_exclude(config),
            on_keep=self._record_kept,
        )
        self.leaks: list[dict] = []  # every worker's, on the controller
        self.excluded: list[dict] = []  # every worker's, on the controller: never reported
        self.checked = 0  # tests checked, skipped ones not counted
        self.pending: list[_leaks.Scope] = []  # wider fixtures torn down, checked at the end of the teardown
        self.outer_tag = os.environ.get(_leaks.TAG_ENV)  # an outer pytest's test, if any
        self.ran_tests = False
        self.at_exit: list[dict] = []

    # -- the header ---------------------------------------------------------------

    def pytest_report_header(self, config):
        lines = []
        if self.subreaper:
            lines.append(_options.SUBREAPER_LINE)
        elif self.subreaper_asked:
            lines.append(_options.SUBREAPER_UNAVAILABLE)
        if self.cgroups:
            parent = _cgroup.parent_dir()
            if parent is not None and _cgroup.probe():
                lines.append(f"{_options.CGROUP_LINE} {parent}")
            else:
                lines.append(f"{_options.NO_CGROUP_LINE} {_options.CGROUP_UNAVAILABLE}")
        elif not self.subreaper:
            lines.append(_options.NO_CGROUP_LINE)
        return lines

    # -- a test ---------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item):
        # Processes of a test that pytest never tears down (pytest-timeout's thread method
        # ends it with os._exit) are the guardian's to kill when this process dies.
        _guardian.ensure_started()
        self.ran_tests = True
        scope = self.tracker.open(item.nodeid, checked=scope_enabled(item))
        item.stash[_SCOPE] = scope
        # The tag goes into os.environ for the test's whole duration: everything the test
        # (or code under test) starts inherits it.
        os.environ[_leaks.TAG_ENV] = scope.tag  # ablate: leak-tag
        # With --process-leaks-cgroup, pytest itself runs the test from inside the test's
        # cgroup (a process starts in its parent's): out again at the end of the teardown.
        self.tracker.enter(scope if scope.cgroup is not None else None)
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        # A skipped test is not counted as checked (an xfail reports "skipped" too: it ran).
        if report.skipped and not hasattr(report, "wasxfail") and call.when in ("setup", "call"):
            item.stash[_SKIPPED] = True
        return report

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item, nextitem):
        scope = item.stash.get(_SCOPE, None)
        if scope is None:
            return (yield)
        try:
            return (yield)
        finally:
            # Everything of the test is over (its fixtures' teardown too): from here on the
            # time is the check's, not the test's.
            stop_timeout(item)
            # First, before anything allocates: no collection, so no finaliser, until the
            # snapshot of what the test left is taken and its grace is over (the check
            # releases this hold then).
            self.tracker.hold_gc()
            held = True
            try:
                # What starts from now on is not this test's (a thread or a finaliser of it).
                gap = self.tracker.open_gap(item.nodeid)
                os.environ[_leaks.TAG_ENV] = gap.tag  # ablate: leak-gap-tag
                self.tracker.enter(None)
                test = None
                if scope_enabled(item):
                    self.checked += not item.stash.get(_SKIPPED, False)
                    test = scope
                fixtures, self.pending = self.pending, []
                leaks = []
                if test is not None or fixtures:
                    held = False
                    leaks = self.tracker.check(test, fixtures, held=True)
            finally:
                if held:
                    self.tracker.release_gc()
                # Checked: nothing of the test's scope is kept (objects the collector tracks
                # would move the suite's own collections, _leaks.Tracker._gaps).
                del item.stash[_SCOPE]  # ablate: check-keeps-no-objects
            self._report(item.nodeid, leaks)

    def _report(self, nodeid: str, leaks: list[dict]) -> None:
        if not leaks:
            return
        for leak in leaks:
            leak["nodeid"] = nodeid
            leak["worker"] = self.worker
        self.leaks.extend(leaks)
        msg = "\n".join(
            f"{_options.PROCESS_LEAKS_HEADER}: {label} left {len(group)} process(es) alive after its teardown; "
            f"{'killed' if all(x['killed'] for x in group) else _options.KEPT_NOTE}:\n" + _leaks.format_leaks(group)
            for label, group in _leakreport.by_scope(leaks).items()
        )
        if self.mode == _options.MODE_WARN:
            warnings.warn(_options.ProcessLeakWarning(msg), stacklevel=1)
        else:
            pytest.fail(msg, pytrace=False)

    def _record_kept(self, key: tuple[int, int]) -> None:
        """One line per process kept alive: a sweep for a dead owner kills what its records
        name (_records.recorded_extras), tag or none. One O_APPEND write."""
        fd = os.open(self.kept_record, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{key[0]} {key[1]}\n".encode())
        finally:
            os.close(fd)

    # -- a fixture ----------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        if fixturedef.scope == "function":
            # A function fixture is the test's: what its set-up starts is named after it.
            test = request.node.stash.get(_SCOPE, None)
            if test is None:
                return (yield)
            start = _leaks.mark()
            try:
                return (yield)
            finally:
                label = fixture_label(fixturedef, request.config.rootpath)
                test.fixture_windows.append((_leaks.span(start, _leaks.mark()), f"set-up of {label}"))
        # A wider fixture is its own scope: what it starts, in its set-up and in its
        # teardown, carries its tag and is checked when it is torn down, not after the
        # test that happened to set it up or tear it down.
        scope = self.tracker.open(fixture_label(fixturedef, request.config.rootpath), kind=_leaks.KIND_FIXTURE)
        teardown: dict = {}
        # Finalizers run last in, first out: this one after the fixture's own teardown.
        fixturedef.addfinalizer(lambda: self._fixture_torn_down(scope, teardown))
        previous = os.environ.get(_leaks.TAG_ENV)
        os.environ[_leaks.TAG_ENV] = scope.tag
        was = self.tracker.enter(scope)  # its own cgroup too, then back to the test's
        start = _leaks.mark()
        try:
            return (yield)
        finally:
            scope.windows.append(_leaks.span(start, _leaks.mark()))
            self.tracker.enter_path(was)
            _set_tag(previous)
            # And this one before it: the teardown runs under the fixture's tag.
            fixturedef.addfinalizer(lambda: self._fixture_teardown_starts(scope, teardown))

    def _fixture_teardown_starts(self, scope: _leaks.Scope, teardown: dict) -> None:
        teardown["previous"] = os.environ.get(_leaks.TAG_ENV)
        os.environ[_leaks.TAG_ENV] = scope.tag
        teardown["was"] = self.tracker.enter(scope)
        teardown["start"] = _leaks.mark()

    def _fixture_torn_down(self, scope: _leaks.Scope, teardown: dict) -> None:
        if "start" in teardown:
            scope.windows.append(_leaks.span(teardown["start"], _leaks.mark()))
            self.tracker.enter_path(teardown["was"])
            _set_tag(teardown["previous"])
        # Checked with the test, at the end of its teardown (outside the test's timeout).
        self.pending.append(scope)

    # -- the session --------------------------------------------------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        """xdist controller: merge a finished worker's leaks."""
        data = getattr(node, "workeroutput", {}).get(WORKEROUTPUT_KEY)
        if data is not None:
            self.leaks.extend(data["leaks"])
            self.excluded.extend(data["excluded"])
            self.checked += data["checked"]

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        # trylast: after pytest's own teardown of what an interrupted session left set up.
        if self.ran_tests:
            # Fixtures torn down after the last test's teardown (an interrupted session's),
            # then the session's own check, which kills what is kept and still alive.
            fixtures, self.pending = self.pending, []
            leaks = self.tracker.check(None, fixtures) if fixtures else []
            leaks += self.tracker.check_session()
            for leak in leaks:
                leak.update(nodeid=None, worker=self.worker)
            self.leaks.extend(leaks)
            self.excluded.extend(
                {**leak, "worker": self.worker} for leak in self.tracker.kept.values() if leak.get("excluded")
            )
            self.tracker.close()
            self.tracker.reap_adopted()
            # A thread (or an atexit handler) may start a process while the interpreter
            # shuts down, after this check: one more look then.
            atexit.register(self._at_exit)
            if leaks and self.mode == _options.MODE_WARN:
                warnings.warn(_options.ProcessLeakWarning(_leakreport.session_message(leaks)), stacklevel=1)
        if self.worker is not None:
            self.config.workeroutput[WORKEROUTPUT_KEY] = {
                "leaks": list(self.leaks),
                "excluded": list(self.excluded),
                "checked": self.checked,
            }
            return
        session_level = any(leak["nodeid"] is None for leak in self.leaks)
        if session_level and self.mode == _options.MODE_ERROR and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        self._write_json()

    def _write_json(self) -> None:
        path = self.config.getoption("process_leaks_json")
        if path:
            doc = _leakreport.document(
                self.leaks, checked=self.checked, excluded=self.excluded, rootdir=Path(self.config.rootpath)
            )
            _report.write_json(Path(self.config.invocation_params.dir) / path, doc)

    def pytest_unconfigure(self, config):
        # Back to what an outer pytest set (this one runs inside its test). A top-level
        # session keeps the gap's tag until it exits: what starts then is still its own.
        if self.outer_tag is not None:
            os.environ[_leaks.TAG_ENV] = self.outer_tag

    def _at_exit(self) -> None:
        try:
            leaks = self.tracker.check_session()
        except Exception as exc:  # one line, not a traceback at interpreter exit
            sys.stderr.write(f"stoplatency: the process-leak check at exit failed: {exc!r}\n")
            return
        if not leaks:
            return
        for leak in leaks:
            leak.update(nodeid=None, worker=self.worker)
        self.leaks.extend(leaks)
        lines = [_options.AT_EXIT_LINE] + [
            f"  {label}: {len(group)} process(es); killed:\n{_leaks.format_leaks(group)}"
            for label, group in _leakreport.by_scope(leaks).items()
        ]
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()
        if self.worker is None:
            self._write_json()

    def pytest_terminal_summary(self, terminalreporter):
        if self.worker is not None:
            return
        tr = terminalreporter
        tr.write_sep("=", "process leaks")
        for line in _leakreport.summary_lines(self.leaks, checked=self.checked, excluded=self.excluded):
            tr.write_line(line)
        threads = [
            t.name for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()
        ]
        if threads and self.ran_tests:
            tr.write_line(f"{_options.THREADS_LINE}: {', '.join(threads)}")
        path = self.config.getoption("process_leaks_json")
        if path:
            tr.write_line(f"stoplatency: wrote {path}")
