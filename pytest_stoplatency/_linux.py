"""The plugin on Linux: the ``victim`` and ``stop_latency`` fixtures and the hooks (plugin.py,
the entry point, registers it; the options, ini keys and texts live there).

A session that uses none of it (no victim, no --process-leaks) reads nothing of /proc and
starts no process: the sweep of ownerless victims runs only where some session's records
outlived their owner (_cleanup.sweep_needed).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from . import _cleanup, _guardian, _records, _report, _token
from ._handle import PreparedVictim, Victim
from ._recorder import Recorder
from .plugin import LEAK_HEADER, SKIP_REASON, enabled, leaks_enabled

PLUGIN_NAME = "stoplatency-linux"


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


@dataclass
class _State:
    worker: str | None
    samples: list = field(default_factory=list)
    missing_workers: list = field(default_factory=list)
    swept: int = 0
    guardian_notes: list = field(default_factory=list)  # every worker's, on the controller


_STATE = pytest.StashKey[_State]()


def pytest_configure(config):
    worker = config.workerinput.get("workerid") if _is_worker(config) else None
    config.stash[_STATE] = _State(worker=worker)
    if leaks_enabled(config):
        # The owner's record directory marks this process as one whose processes a sweep
        # may have to end (its tagged ones, its session cgroup) should it die: created
        # before any test runs, removed at a clean end (_cleanup.drop_own_records).
        _records.owner_dir(_token.me())
        from . import _leakplugin  # the check's own plugin object: nothing of it runs otherwise

        config.pluginmanager.register(_leakplugin.ProcessLeaks(config), _leakplugin.NAME)


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
    if _cleanup.sweep_needed():  # a worker that died, or another session that did meanwhile
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
