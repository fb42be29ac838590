"""The plugin's cgroup code (pytest_stoplatency/_cgroup.py) is a copy of the runner's
(runner/proc/cgroup.py and membership.cgroup_of), on purpose: the measuring tool must not
share the code that mutation/ ablates. This test pins the two copies to the same answers
on the same cgroups, so that a change to one that the other lacks turns it red."""

import os
import subprocess
import time
import uuid

import pytest

from pytest_stoplatency import _cgroup as plugin_cgroup
from runner.proc import cgroup as runner_cgroup
from runner.proc.membership import cgroup_of as runner_cgroup_of

pytestmark = pytest.mark.skipif(not runner_cgroup.available(), reason="no writable cgroup v2 with cgroup.kill")


@pytest.fixture
def scratch():
    """A cgroup of the runner's layout (<root>/runner/<id>/{engine,work}) with nothing in
    it; killed and removed afterwards, whatever the test did."""
    group = runner_cgroup.RunCgroup.create(f"pin-{uuid.uuid4().hex[:12]}")
    try:
        yield group
    finally:
        group.kill("all", timeout=5)
        group.remove()


def _sleeper_in(path) -> subprocess.Popen[bytes]:
    # The child moves itself into the cgroup before exec, as the runner's trampoline does.
    procs = path / "cgroup.procs"
    return subprocess.Popen(["/bin/sh", "-c", f'echo $$ > "{procs}" && exec sleep 60'])


def _wait_member(pid: int, rel: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while runner_cgroup_of(pid) != rel:
        assert time.monotonic() < deadline, f"pid {pid} never reached {rel}"
        time.sleep(0.01)


def test_both_copies_find_the_same_mount_and_own_cgroup():
    """Mount discovery (mountinfo) and the caller's own cgroup: the same answers where the
    hierarchy is writable (the runner requires that; the plugin finds out by trying)."""
    assert plugin_cgroup.root() == runner_cgroup.cgroup2_root()
    assert plugin_cgroup.own() == runner_cgroup._own_cgroup()
    for pid in (os.getpid(), os.getppid(), 1):
        assert plugin_cgroup.cgroup_of(pid) == runner_cgroup_of(pid)


def test_both_copies_agree_on_members_kill_and_emptiness(scratch):
    """members (recursive), wait_empty (populated 0 through cgroup.events) and kill
    (cgroup.kill, confirmed) give the same answers on one populated cgroup and after."""
    work = scratch.path / "work"
    rel = scratch.relative + "/work"
    procs = [_sleeper_in(work), _sleeper_in(scratch.path / "engine")]
    try:
        for p, where in zip(procs, (rel, scratch.relative + "/engine"), strict=True):
            _wait_member(p.pid, where)
            assert plugin_cgroup.cgroup_of(p.pid) == runner_cgroup_of(p.pid) == where
        assert sorted(plugin_cgroup.members(scratch.path)) == sorted(scratch.members("all"))
        assert sorted(plugin_cgroup.members(work)) == sorted(scratch.members("work")) == [procs[0].pid]
        assert plugin_cgroup.wait_empty(work, 0.05) is scratch.wait_empty("work", 0.05) is False
        # The plugin's copy kills work/, the runner's sees it empty; then the reverse on engine/.
        assert plugin_cgroup.kill(work, timeout=5) is True
        assert scratch.wait_empty("work", 0.5) is True and scratch.members("work") == []
        assert scratch.kill("engine", timeout=5) is True
        assert plugin_cgroup.wait_empty(scratch.path, 0.5) is True
        assert plugin_cgroup.members(scratch.path) == scratch.members("all") == []
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_both_copies_treat_a_removed_cgroup_as_empty(tmp_path):
    """A cgroup removed under us (ENOENT) is empty to both; neither raises."""
    gone = runner_cgroup.cgroup2_root() / "runner" / f"gone-{uuid.uuid4().hex[:12]}"
    assert plugin_cgroup.wait_empty(gone, 0.05) is True
    assert runner_cgroup.RunCgroup(gone).wait_empty("all", 0.05) is True
    assert plugin_cgroup.members(gone) == runner_cgroup.RunCgroup(gone).members("all") == []
