"""state.py: round trip, the `stopped` guard, attempts, atomicity under crash and SIGKILL."""

import json
import random
import subprocess
import sys
import time

import pytest

from runner.errors import Damaged
from runner.files import atomic
from runner.files.state import ItemState, State, StateStore


@pytest.fixture
def store(tmp_path):
    return StateStore(tmp_path / "state.json")


def test_new_and_roundtrip(store):
    st = State.new("run-1", ["a", "b"])
    assert list(st.items) == ["a", "b"] and st.items["a"] == ItemState()
    assert (st.attempt, st.status, st.stopped) == (1, "running", False)
    st.items["a"].status, st.items["a"].session_done, st.provider_calls = "done", True, 3
    st.current_item, st.phase = "b", "verify"
    before = time.time()
    store.save(st)
    assert st.updated >= before
    back = store.load()
    assert back == st
    assert json.loads(store.path.read_text())["items"]["a"]["status"] == "done"


def test_guard_keeps_a_stop_recorded_by_another_writer(tmp_path):
    """Path: the guard's disk check. A stopper (its own store, as in another process) records
    the stop; the engine then saves its stale in-memory state. Ablation: delete the guard line
    and the engine's save turns stopped back to False: red."""
    path = tmp_path / "state.json"
    engine = StateStore(path)
    mine = State.new("r", ["a"])
    engine.save(mine)

    stopper = StateStore(path)
    st = stopper.load()
    st.stopped, st.stop_origin, st.status = True, "forced", "stopped"
    stopper.save(st)

    mine.phase = "cleanup"  # the engine's stale copy still says stopped=False
    engine.save(mine)
    disk = StateStore(path).load()
    assert (disk.stopped, disk.stop_origin, disk.status) == (True, "forced", "stopped")
    assert disk.phase == "cleanup"  # the rest of the save went through
    assert (mine.stopped, mine.stop_origin, mine.status) == (True, "forced", "stopped")


def test_guard_keeps_a_stop_this_store_saved_even_if_disk_is_unreadable(store):
    """Path: the guard's memory of its own last save. Ablation: delete the guard line: red."""
    st = State.new("r", ["a"])
    st.stopped, st.stop_origin, st.status = True, "signal", "stopped"
    store.save(st)
    store.path.write_text("{torn")
    later = State.new("r", ["a"])
    later.status = "completed"
    store.save(later)
    disk = store.load()
    assert (disk.stopped, disk.stop_origin, disk.status) == (True, "signal", "stopped")


def test_new_attempt_is_the_only_way_back(store):
    """Path: stopped belongs to an attempt; resume's new attempt is not guarded."""
    st = State.new("r", ["a", "b", "c"])
    st.items["a"].status, st.items["a"].session_done = "done", True
    st.items["b"].status, st.items["b"].session_done = "stopped", True
    st.items["c"].status = "failed"
    st.stopped, st.stop_origin, st.status, st.exit_code = True, "file", "stopped", 4
    store.save(st)

    nxt = store.new_attempt(store.load())
    assert (nxt.attempt, nxt.stopped, nxt.stop_origin, nxt.status, nxt.exit_code) == (2, False, None, "running", None)
    assert [i.status for i in nxt.items.values()] == ["done", "pending", "failed"]
    assert nxt.items["b"].session_done  # a completed session is not run again
    store.save(nxt)
    assert store.load().stopped is False
    assert st.attempt == 1 and st.stopped  # the old object is untouched
    # A new attempt can be stopped and guarded in its turn.
    nxt.stopped, nxt.stop_origin, nxt.status = True, "signal", "stopped"
    store.save(nxt)
    nxt.stopped = False
    store.save(nxt)
    assert store.load().stopped


def test_crash_between_temp_write_and_replace_keeps_previous_state(store, monkeypatch):
    """Path: save goes through atomic.py. Ablation (mutation "atomic state write"): write
    state.json in place and the injected crash never fires, or leaves a torn file: red."""
    st = State.new("r", ["a"])
    store.save(st)

    class Crash(Exception):
        pass

    def crash(tmp, final):
        raise Crash(tmp)

    monkeypatch.setattr(atomic, "_before_replace", crash)
    st.items["a"].status, st.provider_calls = "done", 7
    with pytest.raises(Crash):
        store.save(st)
    monkeypatch.setattr(atomic, "_before_replace", None)
    back = store.load()
    assert back.items["a"].status == "pending" and back.provider_calls == 0
    assert [p.name for p in store.path.parent.iterdir()] == ["state.json"]


def test_state_loadable_after_sigkill_at_any_moment(tmp_path):
    """Path: a SIGKILLed writer leaves a loadable state.json (resume's premise)."""
    path = tmp_path / "state.json"
    code = (
        "import sys\nfrom runner.files.state import State, StateStore\n"
        "s = StateStore(sys.argv[1]); st = State.new('r', ['i%d' % n for n in range(3000)])\n"
        "s.save(st); print('ready', flush=True)\n"
        "while True:\n"
        "    st.provider_calls += 1; s.save(st)\n"
    )
    rng = random.Random(1234)
    for _ in range(5):
        proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline() == "ready\n"
            time.sleep(rng.uniform(0.0, 0.2))
        finally:
            proc.kill()
            proc.wait()
            proc.stdout.close()
        st = StateStore(path).load()
        assert len(st.items) == 3000


MALFORMED = [
    ("not json", "{", "not valid JSON"),
    ("not an object", "[1]", "not a JSON object"),
    ("no run_id", '{"attempt": 1}', "run_id"),
    ("bool counter", '{"run_id": "r", "provider_calls": true}', "provider_calls"),
    ("bad status", '{"run_id": "r", "status": "paused"}', "status"),
    ("unknown key", '{"run_id": "r", "colour": 1}', "colour: unknown key"),
    ("bad item", '{"run_id": "r", "items": {"a": {"status": "weird"}}}', "items.a.status"),
    ("item not object", '{"run_id": "r", "items": {"a": 3}}', "items.a"),
]


@pytest.mark.parametrize("text,needle", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_state_is_one_line_damaged(store, text, needle):
    store.path.write_text(text)
    with pytest.raises(Damaged) as info:
        store.load()
    assert "\n" not in str(info.value) and needle in str(info.value)
    assert str(store.path) in str(info.value)


def test_missing_state(store):
    assert store.load_or_none() is None
    with pytest.raises(Damaged, match="no state file"):
        store.load()


def test_state_json_layout_and_the_new_attempt_copy(store):
    """Path: State/ItemState as plain classes (values.py): state.json keeps the dataclass
    layout (every field, in order, items as objects), and a new attempt is a deep copy
    (changing its items leaves the attempt it came from untouched)."""
    st = State.new("r", ["a"])
    assert list(st.to_dict()) == [
        "run_id",
        "attempt",
        "status",
        "stopped",
        "stop_origin",
        "current_item",
        "phase",
        "items",
        "provider_calls",
        "exit_code",
        "updated",
    ]
    assert st.to_dict()["items"] == {
        "a": {
            "status": "pending",
            "session_done": False,
            "post_session_done": False,
            "verify_passed": False,
            "repairs": 0,
            "calls": 0,
        }
    }
    st.items["a"].status = "stopped"
    nxt = store.new_attempt(st)
    assert nxt.items["a"].status == "pending" and st.items["a"].status == "stopped"
    nxt.items["a"].repairs = 5
    assert st.items["a"].repairs == 0 and nxt.items is not st.items
    assert nxt == State.from_dict(nxt.to_dict()) and nxt != st
