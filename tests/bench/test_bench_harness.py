"""The stop benchmark's harness (bench/): how it tells a stopped tree from one that left
orphans, and that it never leaves (or kills) a process that is not one of its trees'."""

import os
import signal
import subprocess

import pytest

from pytest_stoplatency.kit import adapters as contenders
from pytest_stoplatency.kit import measure as matrix
from pytest_stoplatency.kit import zoo as trees


@pytest.fixture
def started():
    """Trees and plain processes a test starts; every one is killed and reaped at
    teardown, even when the test fails."""
    made, popens = [], []

    def start(spec, tmp_path, **kw):
        tree = trees.Tree(spec, tmp_path / "trees", **kw)
        made.append(tree)
        return tree

    yield start, popens
    for tree in made:
        trees.kill(tree.members())
    for p in popens:
        if p.poll() is None:
            p.kill()
        p.wait()
    trees.forget_records()


def victim(kind, lang="python"):
    return next(v for v in trees.VICTIMS if v.kind == kind and v.lang == lang)


@pytest.mark.parametrize("lang", ["python", "bash"])
def test_orphan_found_by_its_marker_without_environment(started, tmp_path, lang):
    """Path: a process that dropped its environment (env -i) and left the session (setsid)
    is still found by the tree's marker in its argv, with the victim's own records gone
    too; and it is killed by it. (A scan by the environment alone finds nothing here.)"""
    start, popens = started
    spec = trees.VictimSpec("scrubber", "env -i + setsid", "env-scrubber", lang=lang)
    tree = start(spec, tmp_path)
    proc = subprocess.Popen(tree.argv, start_new_session=True, stdin=subprocess.DEVNULL)
    popens.append(proc)
    tree.adopt(process=proc)
    os.killpg(proc.pid, signal.SIGKILL)  # the victim's group: the scrubbed grandchild is elsewhere
    proc.wait()
    for record in (tree.prepared.ready_path, tree.prepared.ready_path.with_suffix(".extras")):
        record.unlink(missing_ok=True)
    left = tree.members()
    assert len(left) == 1, left
    pid = left[0][0]
    with open(f"/proc/{pid}/environ", "rb") as f:
        assert tree.token not in f.read().split(b"\0")
    assert trees.kill(left) == 1
    assert tree.members() == []


def test_a_cell_counts_the_orphan_and_cleans_it(started, tmp_path):
    """Path: matrix.sample under a stopper that cannot reach a setsid escapee (killpg):
    not stopped, one orphan counted; after the sample nothing of the tree is left."""
    start, _ = started
    tree = start(victim("escapee"), tmp_path)
    got = matrix.sample(contenders.KillpgReaper(tmp_path, 0.1), tree)
    assert got["stopped"] is False and got["left"] == 1 and got["processes"] == 2, got
    assert got["latency_s"] is None
    assert tree.members() == []


def test_a_cell_times_a_tree_the_stopper_stops(started, tmp_path):
    """Path: matrix.sample under `timeout -k` against a trapping tree: stopped, no orphan,
    the latency at least the kill grace (the SIGKILL comes after it) and at least the
    stopper's own return."""
    start, _ = started
    tree = start(victim("trap-term", "bash"), tmp_path)
    got = matrix.sample(contenders.CoreutilsTimeout(tmp_path, 0.2), tree)
    assert got["stopped"] is True and got["left"] == 0, got
    assert got["latency_s"] >= max(0.2, got["returned_s"])
    assert tree.members() == []


def test_sweep_kills_only_marked_processes(started, tmp_path):
    """Path: the benchmark's last-resort sweep kills what carries a tree's marker under
    its directory, and nothing else (a plain process beside it survives)."""
    start, popens = started
    tree = start(victim("forker"), tmp_path)
    proc = subprocess.Popen(tree.argv, start_new_session=True, stdin=subprocess.DEVNULL)
    popens.append(proc)
    tree.adopt(process=proc)
    bystander = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL)
    popens.append(bystander)
    assert trees.sweep(tmp_path / "trees") == 4  # the forker and its 3 children
    assert tree.members() == []
    assert bystander.poll() is None
