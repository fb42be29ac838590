"""An unused plugin costs a session nothing of /proc: no victim and no --process-leaks, and
the session reads nothing of /proc and starts no process. The sweep of ownerless victims
runs only where some owner's records outlived it (_cleanup.sweep_needed).

The inner pytest loads AUDIT (a `-p` plugin, imported before the entry points) which records
every open, os.listdir and os.scandir of a /proc path, and every process it starts, through
an audit hook (sys.addaudithook) until the interpreter exits. It also points the
machine-wide record directory (_records.BASE, and _linux.RECORDS_BASE, its spelling that
imports nothing) at one of the test's own: another session on this machine, with victims
of its own, would otherwise put its records in the way.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from pytest_stoplatency import _cleanup, _procs, _records, _token

AUDIT = """
import atexit, json, os, sys
from pathlib import Path

from pytest_stoplatency import _linux, _records

_records.BASE = Path({base!r})
_linux.RECORDS_BASE = {base!r}
SEEN = []
SPAWNS = ("subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system", "os.exec")
STARTED = []


def _audit(event, args):
    if event in SPAWNS:
        STARTED.append(event)
    if event in ("open", "os.listdir", "os.scandir") and args and args[0] is not None:
        try:
            path = os.fsdecode(args[0])
        except TypeError:
            return  # a file descriptor
        if path == "/proc" or path.startswith("/proc/"):
            SEEN.append([event, path])


sys.addaudithook(_audit)


@atexit.register
def _report():
    with open({out!r}, "w") as f:
        json.dump({{"pid": os.getpid(), "proc": SEEN, "started": STARTED}}, f)
"""


def run_audited(pytester, base, *args):
    out = pytester.path / "audit.json"
    out.unlink(missing_ok=True)
    pytester.makepyfile(procaudit=AUDIT.format(base=str(base), out=str(out)))
    pytester.makepyfile(test_plain="def test_a():\n    pass\n")
    result = pytester.runpytest_subprocess(
        "-p", "procaudit", "-p", "no:cacheprovider", "-p", "no:xdist", *args, "test_plain.py"
    )
    result.assert_outcomes(passed=1)
    return json.loads(out.read_text())


def test_an_unused_plugin_reads_nothing_of_proc(pytester, tmp_path):
    """Path: _linux.pytest_sessionstart / pytest_sessionfinish with no records anywhere
    (_cleanup.sweep_needed is False without looking at a process), and no psutil import
    with the plugin (psutil reads /proc/stat when imported). The same session with
    -p no:stoplatency is the baseline: pytest and its other plugins read nothing of /proc
    either.

    Ablation: `plugin-idle-sweep` (sweep at every session start, as before) and the session
    lists /proc and reads every process's environ: red."""
    base = tmp_path / "records"
    without = run_audited(pytester, base, "-p", "no:stoplatency")
    assert without["proc"] == [] and without["started"] == []
    with_it = run_audited(pytester, base)
    assert with_it["proc"] == [] and with_it["started"] == []  # no guardian, no helper either
    assert not base.exists()  # and nothing was written for it either


def test_with_a_live_sessions_records_it_reads_only_that_owners_stat(pytester, tmp_path):
    """Path: _cleanup.sweep_needed looks only at the owners that records name: with the records
    of a live session (this test's pytest), the unused session reads that owner's
    /proc/<pid>/stat (is it alive?) and its own (drop_own_records: is any of them its own?),
    never the process table, and sweeps nothing.

    Ablation: `plugin-idle-sweep` and the session lists /proc: red."""
    base = tmp_path / "records"
    me = _token.me()
    (base / f"{me.pid}.{me.start_ticks}").mkdir(parents=True)
    seen = run_audited(pytester, base)
    allowed = {f"/proc/{me.pid}/stat", f"/proc/{seen['pid']}/stat"}
    assert seen["proc"], "the records were not looked at"
    assert all(event == "open" and path in allowed for event, path in seen["proc"]), seen["proc"]
    assert (base / f"{me.pid}.{me.start_ticks}").is_dir()  # a live owner's records are kept


def test_a_dead_owners_records_still_get_the_sweep(pytester, tmp_path, monkeypatch):
    """Path: _cleanup.sweep_needed opens the gate for a dead owner's records: the session sweeps
    (it reads the process table for that owner's tokens and tags) and, nothing of the owner
    being left alive, removes its records; the next unused session then reads nothing of /proc.

    Ablation: `sweep-dead-owner-records` (the gate never opens) and no sweep runs: red."""
    base = tmp_path / "records"
    proc = subprocess.Popen(["sleep", "60"])
    ticks = _procs.start_ticks(proc.pid)
    proc.kill()
    proc.wait()
    dead = base / f"{proc.pid}.{ticks}"
    dead.mkdir(parents=True)
    with monkeypatch.context() as m:  # the gate itself, in this process, on the same records
        m.setattr(_records, "BASE", base)
        assert _cleanup.sweep_needed(), "the gate stays shut for a dead owner's records"
    seen = run_audited(pytester, base)
    assert ["os.listdir", "/proc"] in seen["proc"] or ["os.scandir", "/proc"] in seen["proc"], seen["proc"][:5]
    environs = [p for _, p in seen["proc"] if re.fullmatch(r"/proc/\d+/environ", p)]
    assert len(environs) > 1  # the process table, not just one owner
    assert not dead.exists(), "the dead owner's records outlived the sweep"
    assert run_audited(pytester, base)["proc"] == []


@pytest.mark.parametrize("use", ["victim", "process-leaks"])
def test_a_used_plugin_leaves_no_records_at_its_clean_end(pytester, tmp_path, monkeypatch, use):
    """Path: the records that open the sweep's gate exist only while a session that used the
    plugin lives: a victim's (PreparedVictim) and --process-leaks' (its configure) records are
    removed at a clean end (drop_own_records), so the next unused session reads nothing of
    /proc. The guardian is off: it would not change the records, only start a process.

    Ablation: drop _cleanup.drop_own_records from pytest_sessionfinish and the records stay,
    the next session reads /proc: red."""
    monkeypatch.setenv("STOPLATENCY_NO_GUARDIAN", "1")
    base = tmp_path / "records"
    if use == "victim":
        pytester.makepyfile(
            test_used="def test_v(victim):\n    v = victim('trap-term')\n    v.kill()\n    assert v.wait_gone(5.0)\n"
        )
        args = ["test_used.py"]
    else:
        args = ["--process-leaks", "test_plain.py"]
    out = pytester.path / "audit.json"
    pytester.makepyfile(procaudit=AUDIT.format(base=str(base), out=str(out)))
    pytester.makepyfile(test_plain="def test_a():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "procaudit", "-p", "no:cacheprovider", "-p", "no:xdist", *args)
    result.assert_outcomes(passed=1)
    used = json.loads(out.read_text())  # the control: the audit does see a used plugin
    assert used["proc"], "a used plugin read nothing of /proc: the audit sees nothing"
    assert base.is_dir() and not os.listdir(base)
    assert run_audited(pytester, base)["proc"] == []


HEAVY = (
    "psutil",
    "runner",
    "pytest_stoplatency._cleanup",
    "pytest_stoplatency._handle",
    "pytest_stoplatency._records",
    "pytest_stoplatency._report",
)


MODULES = """
import atexit, json, sys

from pytest_stoplatency import _linux

_linux.RECORDS_BASE = {base!r}


@atexit.register
def _report():
    with open({out!r}, "w") as f:
        json.dump({{"modules": sorted(sys.modules), "linux": _linux.__file__}}, f)
"""


def test_an_unused_plugin_imports_none_of_its_heavy_modules(tmp_path):
    """Path: _linux imports what a victim, the records and the report need at their first
    use (_lazy), and finds no record directory without importing _records. A one-test
    session that uses nothing of the plugin has imported none of HEAVY when its
    interpreter exits (sys.modules, written by a `-p` module: an import during the
    session is seen, whatever pytest captured), and _linux.RECORDS_BASE is
    _records.BASE. The machine's record directory is pointed at an empty one of the
    test's, through _linux.RECORDS_BASE only: other sessions' records (an xdist worker
    beside this one) would rightly make the plugin import its clean-up. Ablation:
    `plugin-records-unimported` (the record directory looked up through _records): red."""
    (tmp_path / "test_one.py").write_text("def test_ok():\n    assert True\n")
    out, base = tmp_path / "modules.json", tmp_path / "records"
    base.mkdir()
    (tmp_path / "modules_probe.py").write_text(MODULES.format(base=str(base), out=str(out)))
    import pytest_stoplatency

    # The tree under test (a scratch copy under an ablation), not whatever the cwd finds.
    tree = os.path.dirname(os.path.dirname(os.path.abspath(pytest_stoplatency.__file__)))
    path = [tree, str(tmp_path), os.environ.get("PYTHONPATH")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path))}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "modules_probe", "-p", "no:cacheprovider", "test_one.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = json.loads(out.read_text())
    imported = set(seen["modules"])
    assert "pytest_stoplatency.plugin" in imported  # the plugin did load
    assert seen["linux"].startswith(tree + os.sep), seen["linux"]  # the tree under test
    heavy = sorted(m for m in imported if m.split(".")[0] in HEAVY or m in HEAVY)
    assert heavy == [], heavy
    from pytest_stoplatency import _linux, _records

    assert _linux.RECORDS_BASE == str(_records.BASE)
