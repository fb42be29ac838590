"""The pytest plugin: options, ini key, marker, the ``victim`` and ``stop_latency`` fixtures, hooks."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from . import _cleanup, _guardian, _records, _report
from ._handle import PreparedVictim, Victim
from ._recorder import Recorder

HELP_ENABLE = "run the stop-latency tests (marked stop_latency); without it they are skipped"
HELP_INI = "run the stop-latency tests (marked stop_latency), as --stop-latency does"
HELP_JSON = "write every stop-latency sample and the per-label summary to PATH as JSON"
HELP_REPEAT = "run each stop_latency-marked test N times (to collect enough samples for a p95)"
MARKER_LINE = (
    "stop_latency(bound=SECONDS, label=TEXT): a stop-latency test; skipped unless --stop-latency "
    "(or the stop_latency ini key) is set; its samples are checked against the bound"
)
SKIP_REASON = "stop-latency test: enable with --stop-latency (or stop_latency = true in the ini file)"
LEAK_HEADER = "stoplatency: test leaked victim processes"

HELP_LEAKS = (
    "report each test that leaves a process it started alive after its teardown, as an error at that "
    "teardown (children, setsid escapees, double forks, processes without the run tag; a wider fixture's "
    "after its own teardown; what starts between tests or after the last one at session level), and kill "
    "those processes"
)
HELP_LEAKS_INI = "check every test for leaked processes, as --process-leaks does"
HELP_LEAKS_JSON = "write the process leaks (leaking tests, each process and its escape route) to PATH as JSON"
LEAKS_MARKER_LINE = (
    "process_leaks(enabled=False): turn the --process-leaks check off for this test (or module, as pytestmark)"
)
PROCESS_LEAKS_HEADER = "stoplatency: process leaks"
HELP_LEAKS_CGROUP = (
    "as --process-leaks, and run each test in a cgroup of its own (cgroup v2, where writable), which "
    "also finds a process that dropped its environment and left pytest's process tree; costs two "
    "moves of pytest between cgroups per test, each up to an RCU grace period (milliseconds) when "
    "tests are spaced out (the plugin guide, docs/plugin.md, gives the measured cost)"
)
HELP_LEAKS_CGROUP_INI = "run each test in a cgroup of its own, as --process-leaks-cgroup does"
NO_CGROUP_LINE = (
    "stoplatency: --process-leaks runs without a cgroup: a process that drops its environment (env -i) "
    "and leaves pytest's process tree (a double fork, a daemon's child) is not seen; add "
    "--process-leaks-cgroup to see it (needs a writable cgroup v2 with cgroup.kill, Linux 5.14+: as root, "
    "or in a delegated cgroup, e.g. systemd-run --user --scope -p Delegate=yes pytest ...), or "
    "--process-leaks-subreaper (pytest then adopts orphans: a side effect)"
)
CGROUP_UNAVAILABLE = "(--process-leaks-cgroup: no writable cgroup v2 with cgroup.kill here)"
CGROUP_LINE = "stoplatency: --process-leaks-cgroup: each test runs in a cgroup of its own under"
HELP_LEAKS_SUBREAPER = (
    "as --process-leaks, and make pytest a child subreaper, so that a double-forked process that "
    "dropped its environment stays in pytest's tree and is found; changes the process tree the code "
    "under test sees: an orphan of a test's process is re-parented to pytest, not init"
)
HELP_LEAKS_SUBREAPER_INI = "make pytest a child subreaper for the leak check, as --process-leaks-subreaper does"
SUBREAPER_LINE = (
    "stoplatency: --process-leaks-subreaper: pytest is a child subreaper: an orphan of a test's process is "
    "re-parented to pytest, not init (its getppid() is pytest's pid; psutil.Process().children() lists it)"
)
SUBREAPER_UNAVAILABLE = "stoplatency: --process-leaks-subreaper: the kernel refused PR_SET_CHILD_SUBREAPER here"
AT_EXIT_LINE = (
    "stoplatency: process leaks found at exit (started while pytest shut down, after the session's "
    "check; the exit status was already decided):"
)
THREADS_LINE = "stoplatency: threads still running, whose processes are checked again at exit"


@dataclass
class _State:
    worker: str | None
    samples: list = field(default_factory=list)
    missing_workers: list = field(default_factory=list)
    swept: int = 0
    guardian_notes: list = field(default_factory=list)  # every worker's, on the controller


_STATE = pytest.StashKey[_State]()


def pytest_addoption(parser):
    g = parser.getgroup("stoplatency", "stop latency")
    g.addoption("--stop-latency", action="store_true", default=None, dest="stop_latency", help=HELP_ENABLE)
    g.addoption("--stop-latency-json", dest="stop_latency_json", metavar="PATH", default=None, help=HELP_JSON)
    g.addoption("--stop-latency-repeat", dest="stop_latency_repeat", metavar="N", type=int, default=1, help=HELP_REPEAT)
    parser.addini("stop_latency", HELP_INI, type="bool", default=False)
    g.addoption("--process-leaks", action="store_true", default=None, dest="process_leaks", help=HELP_LEAKS)
    g.addoption("--process-leaks-json", dest="process_leaks_json", metavar="PATH", default=None, help=HELP_LEAKS_JSON)
    parser.addini("process_leaks", HELP_LEAKS_INI, type="bool", default=False)
    g.addoption(
        "--process-leaks-cgroup", action="store_true", default=None, dest="process_leaks_cgroup", help=HELP_LEAKS_CGROUP
    )
    parser.addini("process_leaks_cgroup", HELP_LEAKS_CGROUP_INI, type="bool", default=False)
    g.addoption(
        "--process-leaks-subreaper",
        action="store_true",
        default=None,
        dest="process_leaks_subreaper",
        help=HELP_LEAKS_SUBREAPER,
    )
    parser.addini("process_leaks_subreaper", HELP_LEAKS_SUBREAPER_INI, type="bool", default=False)


def enabled(config) -> bool:
    opt = config.getoption("stop_latency")
    return bool(opt) if opt is not None else bool(config.getini("stop_latency"))


def leaks_cgroup(config) -> bool:
    opt = config.getoption("process_leaks_cgroup")
    return bool(opt) if opt is not None else bool(config.getini("process_leaks_cgroup"))


def leaks_subreaper(config) -> bool:
    opt = config.getoption("process_leaks_subreaper")
    return bool(opt) if opt is not None else bool(config.getini("process_leaks_subreaper"))


def leaks_enabled(config) -> bool:
    if leaks_cgroup(config) or leaks_subreaper(config):
        return True
    opt = config.getoption("process_leaks")
    return bool(opt) if opt is not None else bool(config.getini("process_leaks"))


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config):
    config.addinivalue_line("markers", MARKER_LINE)
    config.addinivalue_line("markers", LEAKS_MARKER_LINE)
    worker = config.workerinput.get("workerid") if _is_worker(config) else None
    config.stash[_STATE] = _State(worker=worker)
    if leaks_enabled(config):
        from . import _leakplugin  # the check's own plugin object: nothing of it runs otherwise

        config.pluginmanager.register(_leakplugin.ProcessLeaks(config), _leakplugin.NAME)


def pytest_sessionstart(session):
    # Only the controller (or a plain session) sweeps: workers would race each other.
    if not _is_worker(session.config):
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
        st.guardian_notes.extend(data.get("guardian_notes", []))


# trylast: after the process-leak check's session end (its section goes into the JSON).
@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    config = session.config
    st = config.stash[_STATE]
    st.guardian_notes.extend(f"{st.worker}: {n}" if st.worker else n for n in _guardian.notes())
    if _is_worker(config):
        config.workeroutput[_report.WORKEROUTPUT_KEY] = {  # JSON-safe only
            "samples": list(st.samples),
            "guardian_notes": list(st.guardian_notes),
        }
        _cleanup.drop_own_records()
        return
    st.swept += _cleanup.sweep_ownerless()
    _cleanup.drop_own_records()
    path = config.getoption("stop_latency_json")
    if path:
        doc = _report.document(
            st.samples, missing_workers=st.missing_workers, swept=st.swept, rootdir=Path(config.rootpath)
        )
        if leaks_enabled(config):
            from . import _leakplugin

            doc["process_leaks"] = _leakplugin.section_for(config)
        _report.write_json(Path(config.invocation_params.dir) / path, doc)


def pytest_terminal_summary(terminalreporter, config):
    if _is_worker(config):
        return
    st = config.stash[_STATE]
    for note in st.guardian_notes:
        terminalreporter.write_line(f"stoplatency: {note}")
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
