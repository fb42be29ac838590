"""The one model of a run (runner/views/status.py), read by every view: `runner status`
(text and --json), `runner list` (text and --json), the dashboard's /api/runs and the
commands that pick runs (`stop --all`, a plain `resume`) cannot disagree about a run.
Every run is real (`python -m runner`, the real engine and writer); the dashboard is a
real `python -m runner dashboard`; the `runs` fixture kills whatever a failing test left."""

import json
import os
import signal
import subprocess
import time

import runs as R
from test_dashboard_http import details_json, runs_json, wait_row

from runner.exitcodes import Exit
from runner.files import identity_file
from runner.files.atomic import atomic_write_json
from runner.views import status as model

STOP = {"kill_grace": 0.3, "grace": 5.0}
QUEUE = ("zeta", "alpha", "mid")  # not alphabetical: queue order is not name order


def status_json(rd):
    proc = R.runner("status", "--json", "--run-dir", rd.path)
    assert proc.returncode == Exit.OK, proc.stderr
    return json.loads(proc.stdout)


def list_json(base):
    proc = R.runner("list", "--json", "--runs-dir", base)
    assert proc.returncode == Exit.OK, proc.stderr
    return {r["run_dir"]: r for r in json.loads(proc.stdout)}


def test_status_and_list_agree_on_a_run_whose_engine_was_sigkilled(runs, victim, dashboard):
    """Path: a live run whose engine is SIGKILLed (no end recorded: state.json still says
    running, its provider lives on): `status --json`, `list --json` and /api/runs all say
    "crashed" and resumable, `status` and `list` print "crashed", the dashboard offers
    Resume, and `runner resume` continues it (attempt 2: running, no longer resumable).
    Red under ablation `crashed-decision` (status_of and list keep "running")."""
    rd, v = runs.live_trap_term(victim, stop=STOP)
    dash = dashboard(rd.path.parent)
    engine = identity_file.read(rd.engine_identity)
    os.kill(engine.pid, signal.SIGKILL)
    R.wait_engine_exit(rd)
    assert R.state(rd).status == "running" and v.alive()

    info = status_json(rd)
    assert (info["status"], info["recorded_status"], info["resumable"], info["live"]) == (
        "crashed",
        "running",
        True,
        False,
    )
    assert info["stopping"] is False and info["pause_held"] is False
    row = list_json(rd.path.parent)[str(rd.path)]
    assert (row["status"], row["resumable"], row["live"]) == ("crashed", True, False)
    text = R.runner("status", "--run-dir", rd.path).stdout
    assert text.startswith(f"run {rd.run_id}: crashed: its engine died without recording an end"), text
    listed = R.runner("list", "--runs-dir", rd.path.parent).stdout.splitlines()
    # The run id, then its directory (named apart from its id), then the status.
    assert any(ln.split()[0] == rd.run_id and "crashed" in ln.split()[1:3] for ln in listed), listed
    page = wait_row(dash, "run", status="crashed")
    assert page["buttons"] == {"resume": {"enabled": True, "why": None}} and page["stopping"] is False
    assert page["words"] == info["words"]  # one sentence, said alike

    assert model.resumable_run(rd)  # what a plain `runner resume` picks runs by
    proc = R.runner("resume", "--detach", "--run-dir", rd.path)
    assert proc.returncode == Exit.OK, proc.stderr
    R.wait_event(rd, "run-start", attempt=2)
    left = R.events(rd, "leftovers-killed")  # the dead attempt's provider, killed by resume
    assert left and v.pid in left[0]["died_at_term"] + left[0]["needed_kill"], left
    info = status_json(rd)
    assert (info["status"], info["resumable"], info["attempt"]) == ("running", False, 2)
    assert R.runner("stop", "--run-dir", rd.path).returncode == Exit.OK
    R.wait_engine_exit(rd)


def test_item_rows_are_in_queue_order_everywhere(runs, tmp_path, dashboard):
    """Path: a run whose items are not in alphabetical order (zeta, alpha, mid), held in
    alpha's session: `status --json`, the `status` table and /api/runs list the items in
    queue order, with zeta done, alpha running and mid pending with no duration (null
    in JSON, "-" in the table; never 0.0). Then, finished, with its state.json rewritten
    in the indented, key-sorted form earlier runners wrote (items alphabetical there):
    still queue order. Red under ablation `queue-order` (rows in state.json's order)."""
    gate = tmp_path / "gate"
    gate.touch()
    provider = R.sh('[ "$1" != alpha ] || while [ -e "$2" ]; do sleep 0.05; done', "{item}", str(gate))
    rd = runs.start(runs.spec(items=QUEUE, provider=provider, stop=STOP))
    dash = dashboard(rd.path.parent)
    R.wait_event(rd, "session-start", item="alpha")

    info = status_json(rd)
    assert [(r["item"], r["status"]) for r in info["items"]] == [
        ("zeta", "done"),
        ("alpha", "running"),
        ("mid", "pending"),
    ]
    assert info["items"][2]["duration"] is None and info["items"][0]["duration"] >= 0
    assert (info["done"], info["failed"]) == (1, 0)
    table = R.runner("status", "--run-dir", rd.path).stdout.split("\n\n", 1)[1].splitlines()
    assert [ln.split()[:2] for ln in table[1:]] == [["zeta", "done"], ["alpha", "running"], ["mid", "pending"]]
    assert table[3].split()[3] == "-", table
    wait_row(dash, "run", live=True)
    card = details_json(dash, "run")["run"]
    assert [(i["item"], i["status"], i["duration"]) for i in card["items"]][2] == ("mid", "pending", None)
    assert [i["item"] for i in card["items"]] == list(QUEUE)

    gate.unlink()
    assert R.runner("wait", "--run-dir", rd.path).returncode == Exit.OK
    assert [r["item"] for r in status_json(rd)["items"]] == list(QUEUE)
    atomic_write_json(rd.state, R.state(rd).to_dict())  # indented, sort_keys: alpha, mid, zeta
    assert list(json.loads(rd.state.read_text())["items"]) == sorted(QUEUE)
    assert [r["item"] for r in status_json(rd)["items"]] == list(QUEUE)
    assert [i["item"] for i in details_json(dash, "run")["run"]["items"]] == list(QUEUE)


def test_dashboard_list_and_stop_all_see_the_same_runs_with_a_symlinked_run_dir(runs, tmp_path, dashboard):
    """Path: rundir.run_entries, the one listing rule: under a base holding a live run A
    and a symlink B to another live run's directory (elsewhere), the dashboard shows A as
    a run and B as an error row; `list --json` shows B as a row naming the symlink, never
    as a run; `stop --all` stops A and never B's run (a run is its directory; a link is
    never followed), which is still live afterwards."""
    base = tmp_path / "base"
    spec = runs.spec(provider=["sleep", "60"], stop=STOP)
    a = R.start(spec, base / "a-run")
    runs.started.append(a.path)
    elsewhere = R.start(spec, tmp_path / "elsewhere" / "b-run")
    runs.started.append(elsewhere.path)
    os.symlink(elsewhere.path, base / "b-link")
    try:
        dash = dashboard(base)
        page = runs_json(dash)
        assert page["a-run"]["error"] is None and page["a-run"]["live"] is True
        assert page["b-link"]["error"] == "a symlink (never followed)", page["b-link"]
        listed = list_json(base)
        assert listed[str(a.path)]["status"] == "running"
        refused = listed[str(base / "b-link")]
        assert (refused["status"], refused["live"], refused["resumable"]) == ("unknown", None, False)
        assert "a symlink (never followed)" in refused["damaged"][0]
        assert not any(r["run_id"] == elsewhere.run_id for r in listed.values())

        proc = R.runner("stop", "--all", "--runs-dir", base)
        assert proc.returncode == Exit.OK, proc.stderr
        assert a.run_id in proc.stdout and elsewhere.run_id not in proc.stdout + proc.stderr
        R.wait_engine_exit(a)
        assert elsewhere.is_live() and not R.events(elsewhere, "run-stop")
        assert model.resumable_run(a) and not model.resumable_run(elsewhere)
    finally:
        R.runner("stop", "--run-dir", elsewhere.path)
    R.wait_engine_exit(elsewhere)


def test_stopping_from_the_request_until_the_run_has_ended(runs, victim):
    """Path: a live run whose provider traps SIGTERM, stopped by `runner stop` in the
    background: `status --json` says stopping once the engine took the request (consumed
    into archive/: the event waited for) while the provider still traps in its kill
    grace (held there, R.HELD_STOP, until the test ends it), and no longer once the run
    has stopped. Ablation: `stopping-taken` (only a pending request counts) turns it
    red: the sample in the kill grace says not stopping."""
    rd, v = runs.live_trap_term(victim, stop=R.HELD_STOP)
    assert status_json(rd)["stopping"] is False
    stopper = subprocess.Popen([*R.RUNNER, "stop", "--run-dir", str(rd.path)], stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + R.HELD_STOP["kill_grace"] / 2
        while not (rd.archive.is_dir() and any(rd.archive.glob("*stop-request.json"))):
            assert time.monotonic() < deadline and stopper.poll() is None, "the engine never took the request"
            time.sleep(0.01)
        info = status_json(rd)
        assert v.alive(), "the provider died before the sample: it proves nothing"
        assert info["live"] and info["status"] == "running" and info["pending_stop"] is None, info
        assert info["stopping"] is True, info  # taken by the engine, its provider not yet dead
    finally:
        v.kill()  # the stop has been seen in flight: its kill grace need not be sat out
        assert stopper.wait(timeout=60) == Exit.OK
    R.wait_engine_exit(rd)
    info = status_json(rd)
    assert (info["status"], info["stopping"]) == ("stopped", False)
