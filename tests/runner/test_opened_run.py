"""runner/files/opened.py, which `runner list` and the dashboard's rows read each run
through (its directory opened once, each file read relative to that descriptor): it
answers as RunDir does through paths, for a real run's files in every shape a hostile
disk can give them, for a live run, a copy, a directory replaced by a link and one
removed; and `list` opens a fixed number of files per run, whatever the number of runs.
"""

import os
import shutil

import pytest

from runner.errors import Damaged
from runner.files import rundir
from runner.files.opened import OpenedRun
from runner.files.rundir import RunDir
from runner.files.state import StateStore
from runner.views import run_list

STOP = {"kill_grace": 0.2, "grace": 3.0}


def _answer(ask):
    try:
        value = ask()
    except Damaged as exc:
        return ("damaged", str(exc))
    return ("value", value.to_dict() if hasattr(value, "to_dict") else value)


def through_paths(rd):
    return {
        "run_id": _answer(lambda: rd.run_id),
        "copy_origin": _answer(lambda: rundir.copy_origin(rd)),
        "live": _answer(rd.is_live),
        "state": _answer(lambda: StateStore(rd.state).load_or_none()),
        "key": _answer(lambda: rd.key("some-id")),
    }


def through_one_descriptor(rd):
    with OpenedRun(rd) as run:
        return {
            "run_id": _answer(run.run_id),
            "copy_origin": _answer(run.copy_origin),
            "live": _answer(run.is_live),
            "state": _answer(run.state),
            "key": _answer(lambda: run.key("some-id")),
        }


def _sparse(path):
    with open(path, "wb") as f:
        f.truncate(300 * 1024 * 1024)  # beyond every cap, no disk used


DAMAGE = {
    "missing": lambda path: None,
    "empty": lambda path: path.write_bytes(b""),
    "binary": lambda path: path.write_bytes(bytes(range(256)) * 4),
    "wrong-shape": lambda path: path.write_bytes(b"../../etc\n[1, 2]\n"),
    "huge": _sparse,
    "directory": lambda path: path.mkdir(),
    "fifo": lambda path: os.mkfifo(path),
    "symlink": lambda path: os.symlink(path.with_name("spec.toml"), path),
    "symlink-loop": lambda path: os.symlink(path.name, path),
}


NEVER_READ = ("directory", "fifo", "symlink", "symlink-loop")
"""Damage in whichever file it is put: never read, named."""


@pytest.fixture
def done(runs):
    rd = runs.start(runs.spec(name="done.toml", items=["a", "b"], provider=["true"], stop=STOP), name="done")
    runs.wait_engine_exit(rd)
    return rd


@pytest.mark.parametrize("name", ["run-id", "dir-identity", "lock", "state.json"])
def test_one_descriptor_answers_as_the_paths_do_whatever_a_file_holds(done, name):
    """Path: OpenedRun.run_id, copy_origin, is_live, state and key against RunDir's own
    readers (rundir.py, StateStore) on a run the runner wrote, its `name` file as written
    and then in each shape of damage: the same value, or the same one-line Damaged
    naming the file by its full path."""
    assert through_one_descriptor(done) == through_paths(done)
    path = done.path / name
    aside = done.path / f".aside-{name}"
    os.rename(path, aside)
    try:
        for kind, make in DAMAGE.items():
            make(path)
            want = through_paths(done)
            assert through_one_descriptor(done) == want, kind
            if kind in NEVER_READ and name != "dir-identity":  # a damaged record only makes no copy
                assert any(str(path) in str(v) for v in want.values()), (kind, want)
            if path.is_dir() and not path.is_symlink():
                path.rmdir()
            elif os.path.lexists(path):
                path.unlink()
    finally:
        os.rename(aside, path)
    assert through_one_descriptor(done) == through_paths(done)


def test_one_descriptor_answers_as_the_paths_do_for_a_live_run_and_a_copy(runs, done, tmp_path):
    """Path: a live run (its engine holds the lock: is_live True both ways, its state as
    the engine writes it) and a `cp -r` copy of a finished run beside it (copy_origin
    names the run's own directory both ways; the key is the copy's own identity)."""
    copy = RunDir(tmp_path / "done-copy")
    shutil.copytree(done.path, copy.path, symlinks=True)
    want = through_paths(copy)
    assert want["copy_origin"] == ("value", str(done.path))
    assert through_one_descriptor(copy) == want
    assert through_one_descriptor(copy)["key"] != through_one_descriptor(done)["key"]

    live = runs.start(runs.spec(name="live.toml", items=["a"], provider=["sleep", "60"], stop=STOP), name="live")
    runs.wait_in_call(live)
    try:
        answers = through_one_descriptor(live)
        assert answers["live"] == ("value", True)
        assert answers["run_id"] == through_paths(live)["run_id"]
        assert answers["copy_origin"] == ("value", None)
    finally:
        assert runs.runner("stop", "--now", "--run-dir", live.path).returncode == 0
    assert through_one_descriptor(live) == through_paths(live)


def test_a_run_directory_that_cannot_be_opened_is_a_row_that_says_so(done, tmp_path):
    """Path: run_list.row when OpenedRun refuses the directory: a link put in the run's
    place is never followed (the row names it, no file behind it is read), and a
    directory removed since it was listed is a row, never the end of the list. Ablation
    opened-refuses-links (the link followed) turns it red."""
    real = tmp_path / "elsewhere"
    os.rename(done.path, real)
    os.symlink(real, done.path)
    row = run_list.row(RunDir(done.path))
    assert (row["status"], row["live"], row["items"]) == ("unknown", None, None), row
    assert str(done.path) in row["damaged"][0] and "cannot open it" in row["damaged"][0], row
    os.unlink(done.path)
    row = run_list.row(RunDir(done.path))
    assert row["status"] == "unknown" and "cannot open it" in row["damaged"][0], row


def test_list_opens_a_fixed_number_of_files_per_run(runs, tmp_path, monkeypatch):
    """Path: run_list.rows reads each run through one descriptor of its directory and
    looks at the run cgroups once for all: the files it opens per run are the same
    for 3 runs and for 9, and at most the directory and the four files it reads
    (run-id, dir-identity, lock, state.json). Costs flat in the number of runs."""
    real_open = os.open
    per_run = {}
    for n in (3, 9):
        base = runs.finished(f"base-{n}", n)
        opened = []
        with monkeypatch.context() as mp:
            mp.setattr(os, "open", lambda path, *a, _seen=opened, **k: _seen.append(path) or real_open(path, *a, **k))
            rows = run_list.rows(base)
        assert [r["status"] for r in rows] == ["completed"] * n, rows
        per_run[n] = len(opened) / n
    assert per_run[3] == per_run[9] <= 5, per_run
