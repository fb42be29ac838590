"""`runner status`: the readable view and `--json` (docs/status-json.md) of a live run
whose provider traps SIGTERM, of a finished run with a failing item, and of a run whose
journal is damaged. Every run is real (`python -m runner`); the `runs` fixture kills
whatever a failing test left."""

import json
import os
import re
import shlex
from pathlib import Path

import pytest
import runs as R

from runner.exitcodes import Exit
from runner.files import identity_file
from runner.views import overview, schema
from runner.views import status as model

KILL_GRACE = 0.3
STOP = {"kill_grace": KILL_GRACE, "grace": 5.0}
DOC = Path(__file__).resolve().parents[2] / "docs" / "status-json.md"


def status(rd, *args):
    return R.runner("status", "--run-dir", rd.path, *args)


def status_json(rd):
    proc = status(rd, "--json")
    assert proc.returncode in (Exit.OK, Exit.DAMAGED), proc.stderr
    return json.loads(proc.stdout)


def test_live_run_view_and_json(runs, victim):
    """Path: status of a live run in its session phase, whose provider (a trap-term
    victim) is the running child: the view names the run, its status and attempt, the
    item (1/2) and phase, the child with its pid and runtime, the containment the engine
    journaled, and a table of the items; --json carries the same, with the child's
    runtime counting since its start. Then a graceful stop request (pending until the
    session ends) and a PAUSE file are shown; a hard stop ends the run, and the item it
    cut short reads "stopped"."""
    prepared = victim.prepare("trap-term")
    rd = runs.start(runs.spec(name="live.toml", items=("a", "b"), provider=prepared.argv, stop=STOP))
    R.wait_event(rd, "phase-start", phase="session")
    v = prepared.adopt(timeout=10)
    containment = R.wait_event(rd, "containment")

    proc = status(rd)
    assert proc.returncode == Exit.OK, proc.stderr
    text = proc.stdout
    engine = identity_file.read(rd.engine_identity)
    assert text.startswith(f"run {rd.run_id}: running (attempt 1, engine pid {engine.pid})"), text
    assert re.search(r"now: item a \(1/2\), phase session for \d", text), text
    assert re.search(rf"child pid {v.pid} \(session\), running \d", text), text
    if containment["mode"] == "cgroup":
        assert f"containment: cgroup {containment['cgroup']}" in text, text
    else:
        assert "containment: process groups and the run's tag (no cgroup)" in text, text
    table = text.split("\n\n", 1)[1].splitlines()
    assert table[0].split() == ["item", "status", "attempts", "duration", "reason"]
    assert table[1].split()[:3] == ["a", "running", "1"] and table[2].split()[:3] == ["b", "pending", "0"]

    info = status_json(rd)
    assert info["version"] == schema.STATUS_VERSION
    assert (info["run_id"], info["status"], info["attempt"], info["live"]) == (rd.run_id, "running", 1, True)
    assert (info["current_item"], info["phase"]) == ("a", "session")
    assert [(c["pid"], c["name"]) for c in info["children"]] == [(v.pid, "session")]
    assert 0 <= info["children"][0]["runtime"] < 60
    assert info["phase_elapsed"] >= 0 and info["elapsed"] >= info["phase_elapsed"]
    assert info["containment"] == {k: containment[k] for k in ("mode", "cgroup", "subreaper")}
    assert [(r["item"], r["status"], r["attempts"]) for r in info["items"]] == [
        ("a", "running", 1),
        ("b", "pending", 0),
    ]
    assert info["pending_stop"] is None and info["paused"] is False and info["pause_held"] is False

    # A graceful request waits in its file for the phase in flight to end: pending.
    assert R.runner("stop", "--graceful", "--run-dir", rd.path).returncode == Exit.OK
    rd.pause_file.touch()
    proc = status(rd)
    assert re.search(r"stop requested: graceful, origin file, \d+\.\d s ago", proc.stdout), proc.stdout
    assert "PAUSE file present: takes effect between phases" in proc.stdout, proc.stdout
    info = status_json(rd)
    assert info["pending_stop"]["mode"] == "graceful" and info["pending_stop"]["origin"] == "file"
    assert info["paused"] is True and info["pause_held"] is False
    rd.pause_file.unlink()
    assert R.runner("stop", "--run-dir", rd.path).returncode == Exit.OK
    R.wait_engine_exit(rd)
    assert v.wait_gone(5)
    info = status_json(rd)
    assert (info["status"], info["live"], info["children"], info["pending_stop"]) == ("stopped", False, [], None)
    assert [(r["item"], r["status"]) for r in info["items"]] == [("a", "stopped"), ("b", "pending")]


def test_finished_run_names_the_failing_verify(runs):
    """Path: status of a finished three-item run whose verify command fails for one item
    (fixable false: no repair): the failed item's row and JSON give the verify command
    and its exit code; the others are done with one attempt each."""
    verify = 'test "$1" != b || exit 9'
    spec = runs.spec(
        items=("a", "b", "c"),
        provider=["true"],
        verify=[{"command": R.sh(verify, "{item}"), "fixable": False}],
        stop=STOP,
    )
    rd = runs.start(spec)
    assert R.runner("wait", "--run-dir", rd.path).returncode == Exit.FAILED
    command = R.sh(verify, "b")
    proc = status(rd)
    assert proc.returncode == Exit.OK, proc.stderr
    assert proc.stdout.startswith(f"run {rd.run_id}: failed: 1 of 3 items failed (attempt 1, engine not running)")
    row = next(ln for ln in proc.stdout.splitlines() if ln.startswith("b "))
    assert row.split()[:3] == ["b", "failed", "1"] and row.endswith(f"verify `{shlex.join(command)}` exited 9"), row
    items = {r["item"]: r for r in status_json(rd)["items"]}
    assert items["b"]["failure"] == {
        "phase": "verify",
        "outcome": "failed",
        "index": 0,
        "command": command,
        "rc": 9,
        "killed_by": None,
        "oom_kills": None,
    }
    assert items["b"]["reason"] == f"verify `{shlex.join(command)}` exited 9"
    assert [items[i]["status"] for i in "ac"] == ["done", "done"] and items["a"]["reason"] is None
    assert items["a"]["duration"] > 0


@pytest.mark.parametrize("damage", ["directory", "fifo", "binary-and-deep"])
def test_damaged_journal_still_gives_a_status(runs, damage):
    """Path: status of a finished run whose journal.jsonl is replaced by a directory, a
    FIFO, or garbage nested too deep: exit DAMAGED with one stderr line naming the
    journal (a directory or FIFO) or OK (a journal whose lines are not records: skipped),
    and the view and the JSON are still printed from the state."""
    rd = runs.start(runs.spec(items=("a",), provider=["true"], stop=STOP))
    assert R.runner("wait", "--run-dir", rd.path).returncode == Exit.OK
    rd.journal.unlink()
    if damage == "directory":
        rd.journal.mkdir()
    elif damage == "fifo":
        os.mkfifo(rd.journal)
    else:
        rd.journal.write_bytes(b"\xff\xfe\n" + b"[" * 10_000 + b"\n")
    proc = status(rd)
    assert "Traceback" not in proc.stderr
    assert proc.stdout.startswith(f"run {rd.run_id}: completed: 1 item done (attempt 1, engine not running)"), (
        proc.stdout
    )
    info = status_json(rd)
    assert [(r["item"], r["status"]) for r in info["items"]] == [("a", "done")]
    if damage == "binary-and-deep":
        assert proc.returncode == Exit.OK and info["damaged"] == []
    else:
        assert proc.returncode == Exit.DAMAGED, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "journal.jsonl" in proc.stderr
        assert any("journal.jsonl" in d for d in info["damaged"])


def test_status_json_keys_are_documented():
    """Path: every key `runner status --json` prints (schema.RunStatus, the item rows,
    the failure, the child, the pending stop, the containment) is named in
    docs/status-json.md, and every key the document names is printed."""
    doc = DOC.read_text()
    documented = set(re.findall(r"^\| `([a-z_.\[\]]+)` \|", doc, re.M))
    keys = set(schema.RunStatus.__annotations__)
    keys |= {f"items[].{k}" for k in schema.ItemRow.__annotations__}
    keys |= {f"items[].failure.{k}" for k in schema.Failure.__annotations__}
    keys |= {f"children[].{k}" for k in schema.ChildStatus.__annotations__}
    keys |= {f"pending_stop.{k}" for k in schema.PendingStop.__annotations__}
    keys |= {f"containment.{k}" for k in schema.Containment.__annotations__}
    keys |= {f"stop.{k}" for k in schema.StopRecord.__annotations__}
    assert keys == documented, (sorted(keys - documented), sorted(documented - keys))


def test_every_stop_origin_is_documented():
    """Path: `stop_origin` and `pending_stop.origin` hold an events.Origin value (the
    engine's, a stopper's, the dashboard's): docs/status-json.md names every one in both
    rows (it once left out `dashboard`)."""
    from runner.events import Origin

    doc = DOC.read_text()
    for key in ("stop_origin", "pending_stop.origin"):
        row = next(ln for ln in doc.splitlines() if ln.startswith(f"| `{key}` |"))
        named = set(re.findall(r"`([a-z-]+)`", row.split("|")[3]))
        assert {o.value for o in Origin} <= named, (key, sorted({o.value for o in Origin} - named))


def _stable(info):
    """status_of's answer without the keys that move with the clock."""
    drop = {"elapsed", "phase_elapsed", "children", "pending_stop"}
    out = {k: v for k, v in info.items() if k not in drop}
    out["items"] = [{k: v for k, v in r.items() if k != "duration"} for r in info["items"]]
    return out


def test_a_fold_cache_answers_as_a_fresh_fold(runs, tmp_path):
    """Path: model.status_of with an overview.FoldCache (what a process asking again
    and again uses), on a live run, then on the same run finished, then on its journal
    replaced by a shorter one: each answer equals status_of without a cache (the
    cache reads only the new records, and folds again from the start a journal that
    was replaced)."""
    gate = tmp_path / "gate"
    gate.touch()
    provider = R.sh('[ "$1" != b ] || while [ -e "$2" ]; do sleep 0.05; done', "{item}", str(gate))
    verify = [{"command": R.sh('test "$1" != a', "{item}"), "fixable": False}]
    rd = runs.start(runs.spec(items=("a", "b", "c"), provider=provider, verify=verify, stop=STOP))
    R.wait_event(rd, "session-start", item="b")
    cache = overview.FoldCache()
    live = model.status_of(rd, cache)
    assert [r["status"] for r in live["items"]] == ["failed", "running", "pending"]
    assert _stable(live) == _stable(model.status_of(rd))
    gate.unlink()
    assert R.runner("wait", "--run-dir", rd.path).returncode == Exit.FAILED
    done = model.status_of(rd, cache)
    assert done == model.status_of(rd)
    assert [r["status"] for r in done["items"]] == ["failed", "done", "done"]
    lines = rd.journal.read_bytes().splitlines(keepends=True)
    shorter = rd.path / "journal.new"
    shorter.write_bytes(b"".join(lines[: len(lines) // 2]))
    os.replace(shorter, rd.journal)
    assert model.status_of(rd, cache) == model.status_of(rd)


def test_a_held_pause_is_said_as_such_with_no_phase_clock(runs):
    """Path: overview.Fold closes the phase in flight at `paused` (the engine holds
    between phases), and status_of says the held pause: `runner status --json` has
    pause_held, paused_since, waiting_before and no phase_started, its item row says
    `paused` and its duration does not grow while held; `runner status` says "paused
    since T, waiting before ..." and that no phase runs; the foreground's line
    (progress.Progress) says the same, with no phase clock. Ablation pause-ends-phase
    (the phase before the pause still counting) turns it red."""
    import io
    import time

    from runner.files.spec import load_frozen
    from runner.views import progress, words

    items = [f"i{n}" for n in range(40)]
    rd = runs.start(runs.spec(items=items, provider=["sh", "-c", "sleep 0.2"], stop=STOP))
    R.wait_event(rd, "session-start")
    rd.pause_file.touch()
    held = R.wait_event(rd, "paused")
    first = status_json(rd)
    assert first["pause_held"] is True and first["paused_since"] == pytest.approx(held["t"], abs=0.01)
    assert first["phase_started"] is None and first["phase_elapsed"] is None
    waiting = first["waiting_before"]
    assert waiting in items and first["actions"] == ["stop", "stop-now", "stop-graceful", "unpause"]
    assert first["words"].startswith(f"paused since {words.clock(held['t'])}, waiting before "), first["words"]
    time.sleep(0.5)  # a clock would have moved
    second = status_json(rd)
    assert [r["duration"] for r in second["items"]] == [r["duration"] for r in first["items"]]
    rows = {r["item"]: r["status"] for r in second["items"]}
    if held["item"] == waiting:  # held within the item: its row says so
        assert rows[waiting] == "paused"
    text = status(rd).stdout
    assert f": {second['words']} (attempt 1, engine pid " in text.splitlines()[0], text
    assert "  now: no phase runs while the PAUSE holds" in text, text
    shown = io.StringIO()
    watch = progress.Progress(
        rd, load_frozen(rd.spec), progress.Show(shown, io.StringIO(), tty=True), lambda line: None, since=0.0
    )
    watch._feed()
    line = watch._line()
    assert line.startswith(second["words"]) and "remove the PAUSE file" in line, line
    assert "session" not in line, line  # no phase clock
    assert R.runner("stop", "--graceful", "--run-dir", rd.path).returncode == Exit.OK  # honored while held
    stop = R.wait_event(rd, "run-stop")
    assert stop["mode"] == "graceful", stop
    R.wait_engine_exit(rd)
