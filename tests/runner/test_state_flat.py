"""state.py's transitions (issue 20): an engine save appends one line whose size does not
grow with the number of items, and the file stays never torn and resumable."""

import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterable

import pytest

from runner.files import state as state_mod
from runner.files.state import State, StateStore


class Counted:
    """Bytes state.py hands to its two write primitives (the append, the atomic write)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.appended = self.replaced = 0
        real_write, real_atomic = state_mod._write_all, state_mod.atomic_write_chunks

        def write_all(fd: int, data: bytes, *rest: object) -> None:
            self.appended += len(data)
            real_write(fd, data, *rest)  # type: ignore[arg-type]

        def atomic(path: object, data: Iterable[bytes]) -> int:
            size = real_atomic(path, data)  # type: ignore[arg-type]
            self.replaced += size
            return size

        monkeypatch.setattr(state_mod, "_write_all", write_all)
        monkeypatch.setattr(state_mod, "atomic_write_chunks", atomic)

    @property
    def total(self) -> int:
        return self.appended + self.replaced


def _transitions(store: StateStore, st: State, count: int, check: Callable[[int], None] = lambda i: None) -> None:
    """What the engine does, `count` times: one item's step, saved with that item named;
    `check(i)` after each."""
    names = list(st.items)
    for i in range(count):
        item = names[i // 4 % len(names)]
        st.current_item, st.phase = item, ("session", "post_session", "verify", "cleanup")[i % 4]
        st.items[item].calls += 1
        st.provider_calls += 1
        if i % 4 == 3:
            st.items[item].status = "done"
        store.save(st, touched=(st.current_item,))
        check(i)


def test_bytes_written_per_transition_do_not_grow_with_the_items(tmp_path, monkeypatch):
    """Path: StateStore.save(touched=...) appends the run fields and the changed item,
    compacting into a full state only when the appended lines outweigh it. Counted: the
    bytes of 400 transitions at 20,000 items are those at 100 items (within 2x, compaction
    included), and far below one full state each. Ablation `state-append` (every save a
    full rewrite): 20,000 items write ~2 MB a transition: red."""
    per_transition = {}
    for n in (100, 20_000):
        store = StateStore(tmp_path / f"state-{n}.json")
        st = State.new("r", [f"item-{i:05d}" for i in range(n)])
        store.save(st)
        counted = Counted(monkeypatch)

        def bounded(i: int, counted: Counted = counted, n: int = n) -> None:
            # As it goes (a full rewrite of 20,000 items fails at the first transition).
            assert counted.total <= 2048 * (i + 1) + state_mod.COMPACT_SLACK, (n, i, counted.total)

        _transitions(store, st, 400, bounded)
        per_transition[n] = counted.total / 400
        monkeypatch.undo()
        assert StateStore(store.path).load() == st  # what was appended is the state
    assert per_transition[20_000] < 2 * per_transition[100], per_transition
    assert per_transition[20_000] < 2048, per_transition


def test_appended_file_compacts_and_stays_bounded(tmp_path):
    """Path: the compaction. Thousands of transitions on 50 items: the file never grows past
    about twice a full state plus the slack, and loads to the state saved."""
    store = StateStore(tmp_path / "state.json")
    st = State.new("r", [f"i{n}" for n in range(50)])
    store.save(st)
    full = os.path.getsize(store.path)
    for _ in range(6):
        _transitions(store, st, 500)
        size = os.path.getsize(store.path)
        assert size <= 2 * full + state_mod.COMPACT_SLACK + 4096, (size, full)
    assert StateStore(store.path).load() == st


def test_a_torn_transition_is_skipped_and_the_next_starts_a_fresh_line(tmp_path):
    """Path: state.parse skips a line that is not JSON (a SIGKILL mid-append), and the
    append after it starts on a new line (journal._ends_torn), so the torn bytes never
    swallow a transition."""
    store = StateStore(tmp_path / "state.json")
    st = State.new("r", ["a", "b"])
    store.save(st)
    st.current_item, st.provider_calls = "a", 1
    st.items["a"].calls = 1
    store.save(st, touched=("a",))
    before = StateStore(store.path).load()
    with open(store.path, "ab") as f:
        f.write(b'{"run_id":"r","attempt":1,"status":"failed","items":{"a":{"status":"do')
    assert StateStore(store.path).load() == before  # the torn transition never happened
    # The engine's next life loads and appends after the torn bytes.
    engine = StateStore(store.path)
    again = engine.load()
    engine.save(again)  # its first save is a full one; make a torn tail again for the append
    with open(store.path, "ab") as f:
        f.write(b'{"run_id":"r","att')
    engine._written = engine._stat()  # as if this store had written those bytes itself
    again.items["b"].status, again.current_item = "done", "b"
    engine.save(again, touched=("b",))
    back = StateStore(store.path).load()
    assert back.items["b"].status == "done" and back.items["a"].calls == 1 and back.status == "running"


def test_guard_holds_on_the_append_path(tmp_path):
    """Path: an engine store that appends sees that a stopper replaced the file (its
    inode and size are not what it wrote) and reads the disk for the guard. Ablation
    `stopped-guard`: the stop is taken back: red."""
    path = tmp_path / "state.json"
    engine = StateStore(path)
    mine = State.new("r", ["a"])
    engine.save(mine)
    mine.current_item = "a"
    engine.save(mine, touched=("a",))
    stopper = StateStore(path)
    st = stopper.load()
    st.stopped, st.stop_origin, st.status = True, "forced", "stopped"
    stopper.save(st)
    mine.phase = "cleanup"
    engine.save(mine, touched=("a",))
    disk = StateStore(path).load()
    assert (disk.stopped, disk.stop_origin, disk.phase) == (True, "forced", "cleanup")


def test_appending_writer_sigkilled_at_any_moment_leaves_a_consistent_state(tmp_path):
    """Path: a SIGKILL during the engine's appends (and its compactions) leaves a state
    that loads, and is one transition whole: each transition adds one call to an item and
    to provider_calls together, so the two always agree on disk."""
    path = tmp_path / "state.json"
    code = (
        "import sys\nfrom runner.files.state import State, StateStore\n"
        "s = StateStore(sys.argv[1]); st = State.new('r', ['i%d' % n for n in range(2000)])\n"
        "s.save(st); print('ready', flush=True)\n"
        "n = 0\n"
        "while True:\n"
        "    name = 'i%d' % (n // 3 % 2000); n += 1\n"
        "    st.current_item = name; st.items[name].calls += 1; st.provider_calls += 1\n"
        "    s.save(st, touched=(name,))\n"
    )
    rng = random.Random(2020)
    seen = set()
    for _ in range(6):
        proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline() == "ready\n"
            time.sleep(rng.uniform(0.05, 0.4))
        finally:
            proc.kill()
            proc.wait()
            proc.stdout.close()
        st = StateStore(path).load()
        assert len(st.items) == 2000
        assert st.provider_calls == sum(i.calls for i in st.items.values())
        seen.add(st.provider_calls)
    assert len(seen) > 1  # the writer got somewhere between the kills


def test_an_indented_state_json_of_an_older_runner_still_loads(tmp_path):
    """Path: state.parse reads a state.json written whole and indented (before the file
    was JSON lines), so a run started by an older runner can be stopped and resumed."""
    import json

    st = State.new("r", ["a", "b"])
    st.items["a"].status, st.provider_calls = "done", 2
    path = tmp_path / "state.json"
    path.write_text(json.dumps(st.to_dict(), indent=2, sort_keys=True) + "\n")
    assert StateStore(path).load() == st


def test_an_append_never_follows_a_link_planted_between_saves(tmp_path):
    """Path: StateStore._open_mine opens state.json for the append without following a
    link (the journal's _open_append) and checks the descriptor is the file this store
    wrote: a link planted in its place is replaced by a full save, its target untouched."""
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"not the runner's\n")
    run = tmp_path / "run"
    run.mkdir()
    store = StateStore(run / "state.json")
    st = State.new("r", ["a"])
    store.save(st)
    st.current_item = "a"
    store.save(st, touched=("a",))
    os.unlink(store.path)
    os.symlink(outside, store.path)
    st.items["a"].status = "done"
    store.save(st, touched=("a",))
    assert outside.read_bytes() == b"not the runner's\n"
    assert not os.path.islink(store.path) and StateStore(store.path).load() == st


HELD_PER_ITEM = 160
"""Bytes the engine's state holds per item once saved (measured: 100; ~210 when the store
also kept every item's fields)."""
PEAK_PER_ITEM = 400
"""Bytes of the engine's start's peak per item: the state made, the reserve sized, the
first full save (measured: 180; 530 with the save in one chunk, 1,600 when the reserve
was sized by dumping the state indented: 105 MB at 50,000 items)."""
LOAD_PEAK_PER_ITEM = 1000
"""Bytes of a load's peak per item (measured: 650; the parse into dicts first, and the
depth check's whole-text regex, peaked at about 2 KB an item)."""


def test_the_engines_state_holds_and_peaks_a_bounded_number_of_bytes_per_item(tmp_path):
    """Path: what the engine does with its state at the start of a run (State.new,
    engine.main.reserve_size, the first full save: state.full_chunks) and what every
    reader does (StateStore.load: state._item_hook, untrusted.depth), under tracemalloc,
    at 2,000 and 20,000 items: the bytes held and the peaks grow by a bounded number of
    bytes per item (issue 32: the engine peaked at 105 MB at 50,000 items, about 2 KB an
    item). Ablations state-items-bounded, state-full-chunks and reserve-size-counted turn
    it red."""
    import gc
    import tracemalloc

    from runner.engine import main as engine_main

    measured = {}
    for n in (2_000, 20_000):
        names = [f"item-{i:05d}" for i in range(n)]
        gc.collect()
        tracemalloc.start()
        try:
            st = State.new("r", names)
            engine_main.reserve_size(st)
            store = StateStore(tmp_path / f"state-{n}.json")
            store.save(st)
            held, peak = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            back = StateStore(store.path).load()
            load_peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert back == st
        measured[n] = (held, peak, load_peak)
        del st, store, back
    per_item = [(b - a) / 18_000 for a, b in zip(measured[2_000], measured[20_000], strict=True)]
    assert per_item[0] <= HELD_PER_ITEM, per_item
    assert per_item[1] <= PEAK_PER_ITEM, per_item
    assert per_item[2] <= LOAD_PEAK_PER_ITEM, per_item
