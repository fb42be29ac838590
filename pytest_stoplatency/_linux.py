"""The stop-latency plugin object on Linux: the ``victim`` and ``stop_latency`` fixtures, the
samples and their report, the sweep of ownerless victims (plugin.py, the entry point,
registers it, and the process-leak check's object, _leakplugin.py, beside it when that
check is on; the options, ini keys and texts live in _options.py).

A session that uses none of it (no victim, no --process-leaks) starts no process, and reads
nothing of /proc where no session left records; where some did, it reads their owners'
/proc/<pid>/stat (alive?), and sweeps (the whole process table) only where some session's
records outlived their owner (_cleanup.sweep_needed).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ._options import LEAK_HEADER, SKIP_REASON, compare_fail, enabled, leaks_enabled, svg_path

if TYPE_CHECKING:
    from ._handle import PreparedVictim, Victim

# What a victim, the records and the report need is imported where it is first used, not
# here: every session of every project with the plugin installed imports this module, and
# one that uses no victim and no --process-leaks must cost nothing (issue 20, goal 4).


RECORDS_BASE = f"/tmp/pytest-stoplatency-{os.getuid()}"
"""_records.BASE, spelled here so that finding it empty imports nothing (a test pins the two)."""


def _lazy(name: str):
    """One of the plugin's modules, imported at its first use."""
    return importlib.import_module(f".{name}", __package__)


def _records_left() -> bool:
    """Whether any pytest process left a record directory (under RECORDS_BASE): without
    one, nothing of the plugin ever ran a victim here, and nothing is imported to find out."""
    try:
        names = os.listdir(RECORDS_BASE)  # ablate: plugin-records-unimported
    except OSError:
        names = []
    return bool(names)


PLUGIN_NAME = "stoplatency-linux"


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


class VictimFactory:
    """The ``victim`` fixture: ``victim(kind, ...)`` starts one; ``victim.prepare(...)`` does not."""

    def __init__(self):
        self.prepared: list[PreparedVictim] = []
        self.processes: list[subprocess.Popen] = []

    def prepare(self, kind, *, lang="python", sleep=7200, children=2, cleanup=1.0) -> PreparedVictim:
        p = _lazy("_handle").PreparedVictim(kind, lang=lang, sleep=sleep, children=children, cleanup=cleanup)
        # Before anything can start it: if this pytest process dies without teardown,
        # its guardian kills what it started (_guardian.py).
        _lazy("_guardian").ensure_started()
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
        records = _lazy("_records")
        tokens = [str(p.token) for p in self.prepared]
        # The extras file too: a victim killed before its handshake wrote no ready file.
        extras = [
            e
            for p in self.prepared
            for e in records.extras_of(p.ready_info()) + records.read_extras(records.extras_path(p.ready_path))
        ]
        return tokens, extras

    def close(self) -> tuple[list[dict], list[dict]]:
        cleanup = _lazy("_cleanup")
        found, survivors = cleanup.kill_lineage(*self.lineage())
        for proc in self.processes:
            try:
                proc.wait(timeout=cleanup.SETTLE)
            except subprocess.TimeoutExpired:
                pass
        return found, survivors


class StopLatency:
    """The stop-latency feature's plugin object: one per pytest process (controller and
    each xdist worker), holding that process's samples."""

    def __init__(self, config, session: int | None = None) -> None:
        self.worker: str | None = config.workerinput.get("workerid") if _is_worker(config) else None
        self.session = session  # this pytest session's number in its process (_session.py)
        self.samples: list = []
        self.missing_workers: list = []
        self.swept = 0
        self.guardian_notes: list = []  # every worker's, on the controller
        # The gate (--stop-latency-compare): the previous labels, read and checked up front so
        # that a bad file or STAT:THRESH stops the session before any test runs.
        self.compare_path = config.getoption("stop_latency_compare")
        self.compare_rule = compare_fail(config)
        self.compare_old: Any = None  # a kit.gate.Baseline
        self.compare_lines: list[str] = []
        self.compare_failures: list[str] = []
        self.svg_path = svg_path(config) if self.worker is None else None
        self.compare_machine: str | None = None
        self.compare_code: int | None = None
        if self.compare_path and self.worker is None:
            try:
                self.compare_old = _lazy("_compare").load_baseline(
                    Path(config.invocation_params.dir) / self.compare_path, self.compare_path
                )
            except _lazy("_compare").CompareError as exc:
                raise pytest.UsageError(str(exc)) from None

    def pytest_sessionstart(self, session):
        # Only the controller (or a plain session) sweeps: workers would race each other.
        worker = _is_worker(session.config)
        if not worker and _records_left() and _lazy("_cleanup").sweep_needed():  # ablate: plugin-idle-sweep
            self.swept += _lazy("_cleanup").sweep_ownerless()

    def pytest_generate_tests(self, metafunc):
        n = metafunc.config.getoption("stop_latency_repeat")
        if n > 1 and metafunc.definition.get_closest_marker("stop_latency"):
            metafunc.fixturenames.append("_stop_latency_repeat")
            metafunc.parametrize("_stop_latency_repeat", range(n), indirect=True, ids=lambda i: f"rep{i + 1}")

    @pytest.fixture
    def _stop_latency_repeat(self, request):
        return request.param

    def pytest_collection_modifyitems(self, config, items):
        if enabled(config):
            return
        skip = pytest.mark.skip(reason=SKIP_REASON)
        for item in items:
            if item.get_closest_marker("stop_latency"):
                item.add_marker(skip)

    @pytest.fixture
    def victim(self, request):
        factory = VictimFactory()
        yield factory
        found, survivors = factory.close()
        if found:
            msg = f"{LEAK_HEADER} ({len(found)} still alive after {request.node.nodeid}); killed:\n"
            msg += _lazy("_cleanup").format_procs(found)
            if survivors:
                msg += "\nand could NOT kill:\n" + _lazy("_cleanup").format_procs(survivors)
            pytest.fail(msg, pytrace=False)

    @pytest.fixture
    def stop_latency(self, request):
        return _lazy("_recorder").Recorder(
            nodeid=request.node.nodeid,
            worker=self.worker,
            marker=request.node.get_closest_marker("stop_latency"),
            sink=self.samples,
        )

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        """xdist controller: merge a finished worker's samples (a worker that sent none is named)."""
        data = getattr(node, "workeroutput", {}).get(_lazy("_report").WORKEROUTPUT_KEY)
        if data is None:
            self.missing_workers.append(node.gateway.id)
        else:
            self.samples.extend(data["samples"])
            self.guardian_notes.extend(data.get("guardian_notes", []))

    # trylast: after the process-leak check's session end (its section goes into the JSON).
    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        config = session.config
        # No guardian was ever started in a process that never imported its module.
        guardian = sys.modules.get(f"{__package__}._guardian")
        notes = guardian.notes() if guardian is not None else []
        self.guardian_notes.extend(f"{self.worker}: {n}" if self.worker else n for n in notes)
        if _is_worker(config):
            config.workeroutput[_lazy("_report").WORKEROUTPUT_KEY] = {  # JSON-safe only
                "samples": list(self.samples),
                "guardian_notes": list(self.guardian_notes),
            }
            if _records_left():
                _lazy("_cleanup").drop_own_records(self.session)
            return
        if _records_left():
            cleanup = _lazy("_cleanup")
            if cleanup.sweep_needed():  # a worker that died, or another session that did meanwhile
                self.swept += cleanup.sweep_ownerless()
            cleanup.drop_own_records(self.session)
        if self.compare_old is not None:
            report, gate = _lazy("_report"), _lazy("_compare")
            result = gate.compare(
                self.compare_old,
                report.summarize(self.samples),
                self.compare_rule,
                here=report.machine(),
                allow_new=config.getoption("stop_latency_compare_allow_new"),
                allow_flag="--stop-latency-compare-allow-new",
            )
            self.compare_lines, self.compare_failures = result.lines, result.failures
            self.compare_machine, self.compare_code = result.machine, result.code
            if result.code is not None and session.exitstatus == pytest.ExitCode.OK:
                # A slower label fails the session as a failed test would (1); no label in
                # common is the gate's own code (6), not any of pytest's.
                no_common = result.code == gate.NO_LABEL_IN_COMMON
                session.exitstatus = gate.NO_LABEL_IN_COMMON if no_common else pytest.ExitCode.TESTS_FAILED
        path = config.getoption("stop_latency_json")
        if path:
            report = _lazy("_report")
            doc = report.document(
                self.samples, missing_workers=self.missing_workers, swept=self.swept, rootdir=Path(config.rootpath)
            )
            if leaks_enabled(config):
                from . import _leakplugin

                doc["process_leaks"] = _leakplugin.section_for(config)
            report.write_json(Path(config.invocation_params.dir) / path, doc)
        if self.svg_path:
            from . import pictures  # only when a picture is asked for

            gate = []
            if self.compare_old is not None:
                stat = self.compare_rule.stat if self.compare_rule else "median"
                new = _lazy("_report").summarize(self.samples)
                gate = pictures.compare_series(self.compare_old.labels, new, stat, self.compare_failures)
            (Path(config.invocation_params.dir) / self.svg_path).write_text(
                pictures.samples_svg(self.samples, "stop latency per label", gate)
            )

    def pytest_terminal_summary(self, terminalreporter, config):
        if _is_worker(config):
            return
        for note in self.guardian_notes:
            terminalreporter.write_line(f"stoplatency: {note}")
        if not (self.samples or enabled(config) or self.swept or self.missing_workers):
            return
        tr = terminalreporter
        tr.write_sep("=", "stop latency")
        if self.samples:
            report = _lazy("_report")
            for line in report.table(report.summarize(self.samples)):
                tr.write_line(line)
        else:
            tr.write_line("no stop-latency samples recorded")
        tr.write_line(f"stoplatency: swept {self.swept} ownerless victim process(es)")
        if self.missing_workers:
            tr.write_line(f"stoplatency: workers that returned no samples: {', '.join(self.missing_workers)}")
        if self.compare_machine:
            tr.write_line(f"stoplatency: {self.compare_machine}")
        if self.compare_lines:
            tr.write_line(f"stoplatency: compared with {self.compare_path}:")
            for line in self.compare_lines:
                tr.write_line("  " + line)
        for failure in self.compare_failures:
            tr.write_line(f"stoplatency: gate failed: {failure}")
        path = config.getoption("stop_latency_json")
        if path:
            tr.write_line(f"stoplatency: wrote {path}")
        if self.svg_path:
            tr.write_line(f"stoplatency: wrote {self.svg_path}")
