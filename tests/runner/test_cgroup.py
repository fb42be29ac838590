"""runner.proc.cgroup: containment on this machine's cgroup v2 (hybrid layout, unified/)."""

import json
import logging
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runs import new_run_id

from runner.errors import BadInput
from runner.exitcodes import Exit
from runner.files import identity_file
from runner.proc import cgroup as cgroup_mod
from runner.proc import identity, reaper, signals
from runner.proc.cgroup import RunCgroup

pytestmark = pytest.mark.skipif(not cgroup_mod.available(), reason="no writable cgroup v2 with cgroup.kill")


def cgroup_of(pid) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return line[3:]
    return ""


@pytest.fixture
def cg():
    """Requested after `spawn` in each test, so it is torn down (killed, removed) before
    the victim fixture checks for leaks."""
    run_id = new_run_id()
    group = RunCgroup.create(run_id)
    yield group
    group.kill("all", timeout=5)
    group.remove()
    assert not group.path.exists()


def test_cgroup2_root_is_found_through_mountinfo():
    root = cgroup_mod.cgroup2_root()
    assert root is not None and (root / "cgroup.controllers").exists()
    mounts = [l for l in Path("/proc/self/mountinfo").read_text().splitlines() if " - cgroup2 " in l]
    assert any(l.split()[4] == str(root) for l in mounts)


def test_create_makes_engine_and_work_with_no_controllers(cg):
    assert (cg.path / "engine" / "cgroup.procs").exists()
    assert (cg.path / "work" / "cgroup.procs").exists()
    assert (cg.path / "cgroup.subtree_control").read_text().strip() == ""
    assert RunCgroup.open(cg.path).path == cg.path


def test_wrapped_child_and_its_env_scrubbed_grandchild_live_in_work(spawn, cg):
    """The trampoline moves the child into work/ before exec; a grandchild that dropped
    its environment and left the group is still there (read from /proc/PID/cgroup)."""
    v = spawn("env-scrubber", cgroup=cg)
    scrubbed = int(v.extras[0]["pid"])
    rel = "/" + str((cg.path / "work").relative_to(cgroup_mod.cgroup2_root()))
    assert cgroup_of(v.pid) == rel
    assert cgroup_of(scrubbed) == rel
    assert not Path(f"/proc/{scrubbed}/environ").read_bytes()
    assert set(cg.members("work")) >= {v.pid, scrubbed}
    assert cg.populated("work")


def test_kill_work_empties_it_confirmed_by_populated_0(spawn, cg):
    """cgroup.kill takes every process in work/, trapping or scrubbed, and
    cgroup.events confirms populated 0; then the cgroup can be removed."""
    v = spawn("env-scrubber", cgroup=cg)
    f = spawn("forker", cgroup=cg)
    assert cg.kill("work", timeout=2)
    assert "populated 0" in (cg.path / "work" / "cgroup.events").read_text()
    assert v.wait_gone(2) and f.wait_gone(2)
    assert cg.members("all") == []


def test_an_empty_cgroup_is_not_killed_and_a_populated_one_is(spawn, cg, monkeypatch):
    """Path: RunCgroup.kill's first read: `populated 0` already, and no cgroup.kill is
    written (the engine's clean-up after every contained stop lands here: the write
    would wait behind the engine's own migration out of its cgroup, the lock it holds
    for an RCU grace period, 7 ms measured). With a process in work/ it is written, and
    the process dies. Ablation: `empty-cgroup-not-killed` (the empty one is written to:
    red)."""
    written = []
    real = Path.write_text

    def spy(self, *args, **kwargs):
        written.append(self.name)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", spy)
    assert cg.kill("work", timeout=2)
    assert "cgroup.kill" not in written, "an empty cgroup was killed"
    v = spawn("trap-term", cgroup=cg)
    assert cg.kill("work", timeout=2)
    assert written.count("cgroup.kill") == 1
    assert v.wait_gone(2)


def test_kill_everything_reaches_the_env_scrubbers_grandchild_only_through_the_cgroup(spawn, cg):
    """The scrubbed grandchild traps SIGTERM, has no tag, left the group: of all routes,
    only the cgroup kill reaches it. Ablation: delete the line ending `# cgroup-kill` in
    reaper.py and it survives (red)."""
    rid = new_run_id()
    v = spawn("env-scrubber", cgroup=cg, run_id=rid)
    scrubbed = int(v.extras[0]["pid"])
    report = reaper.kill_everything(
        groups=[(v.pgid, [identity.current(v.pid)])],
        pids=[],
        run_id=rid,
        kill_grace=0.3,
        cgroup=cg,
        cgroup_scope="work",
    )
    assert scrubbed in report.needed_kill and report.unkillable == []
    assert v.wait_gone(2)
    assert not cg.populated("work")


def test_enter_engine_moves_the_caller(cg):
    code = (
        f"from runner.proc.cgroup import RunCgroup; import os; RunCgroup.open({str(cg.path)!r}).enter_engine(); "
        f"print(open('/proc/self/cgroup').read())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert f"0::/{(cg.path / 'engine').relative_to(cgroup_mod.cgroup2_root())}" in out.stdout


_LEAVE_ONCE = """
import os, sys
from runner.proc.cgroup import RunCgroup
group = RunCgroup.open(sys.argv[1])
group.enter_engine()
group.leave_in_background()
assert group._left is not None and group._left.wait(30), "the parked thread never left"
home = group._home_procs
writes = []
real = os.write
def counting(fd, data):
    if fd == home:
        writes.append(data)
    return real(fd, data)
os.write = counting
group.remove()
print(len(writes), open("/proc/self/cgroup").read().strip())
"""


def test_the_engines_exit_migrates_it_once_not_twice(cg):
    """Path: RunCgroup.leave, once out: the engine's clean-up (remove) writes nothing to
    its home cgroup.procs when the thread parked at start-up already took it out beside
    the stop's kill. The write would migrate it again, and after a trapping call's kill
    grace wait out another RCU grace period on the exit a stopper waits for (about 12 ms
    measured, after every record). A real engine-side cgroup, a real migration: the
    process enters the run's engine/, leaves through the thread, then removes the cgroup.
    Ablation: `leave-once` (the second write comes back: red)."""
    out = subprocess.run([sys.executable, "-c", _LEAVE_ONCE, str(cg.path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    writes, where = out.stdout.split(maxsplit=1)
    assert writes == "0", f"the exit migrated the engine again ({writes} writes to its home cgroup.procs)"
    assert "/runner/" not in where, f"the engine did not leave the run's cgroup: {where}"
    assert not cg.path.exists()


def test_kill_from_inside_spares_the_caller_and_kills_the_rest(spawn, cg):
    """A stopper inside the cgroup (a hook running `runner stop`) must not cgroup.kill
    itself: it kills the other members one by one and lives."""
    v = spawn("trap-term", cgroup=cg)
    code = (
        f"from runner.proc.cgroup import RunCgroup; import os; c = RunCgroup.open({str(cg.path)!r}); "
        f"print(c.kill('work', timeout=2))"
    )
    out = subprocess.run(cg.wrap_argv([sys.executable, "-c", code]), capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert v.wait_gone(2)


def test_remove_refuses_while_populated_then_succeeds(spawn, cg):
    v = spawn("cooperative", cgroup=cg)
    with pytest.raises(OSError):
        cg.remove()
    assert cg.kill("all", timeout=2)
    cg.remove()
    assert not cg.path.exists()
    assert v.wait_gone(2)


def test_resolve_containment_modes(monkeypatch, caplog):
    assert cgroup_mod.resolve_containment("group") == "group"
    assert cgroup_mod.resolve_containment("cgroup") == "cgroup"
    assert cgroup_mod.resolve_containment("auto") == "cgroup"
    with pytest.raises(BadInput):
        cgroup_mod.resolve_containment("bogus")
    monkeypatch.setattr(cgroup_mod, "available", lambda: False)
    monkeypatch.setattr(cgroup_mod, "_fallback_said", False)
    with pytest.raises(BadInput):
        cgroup_mod.resolve_containment("cgroup")
    with caplog.at_level(logging.WARNING, logger="runner.proc.cgroup"):
        assert cgroup_mod.resolve_containment("auto") == "group"
        assert cgroup_mod.resolve_containment("auto") == "group"
    assert caplog.text.count("falls back") == 1


def test_the_plugins_copy_answers_as_the_runner_does_on_the_same_cgroups(spawn, cg):
    """pytest_stoplatency/_cgroup.py copies this module's cgroup reading on purpose (the
    measuring tool must not share the code mutation/ ablates); this pins the two copies to
    the same answers on the same cgroups: the mount point, each process's cgroup (one moved
    into a nested cgroup, one gone), the caller's own, the members of the tree and of a
    branch, and emptiness before and after the kill. Red where either copy drifts."""
    from pytest_stoplatency import _cgroup as copy
    from runner.proc import membership

    v = spawn("env-scrubber", cgroup=cg)
    scrubbed = int(v.extras[0]["pid"])
    nested = cg.path / "work" / "nested"
    nested.mkdir()
    try:
        (nested / "cgroup.procs").write_text(f"{scrubbed}\n")
        assert copy.root() == cgroup_mod.cgroup2_root()
        assert copy.own() == cgroup_mod._own_cgroup()
        dead = subprocess.Popen(["true"])
        dead.wait()
        for pid in (1, v.pid, scrubbed, dead.pid):
            assert copy.cgroup_of(pid) == membership.cgroup_of(pid), pid
        assert copy.cgroup_of(scrubbed).endswith("/work/nested")
        for which in ("all", "work", "engine"):
            assert sorted(copy.members(cg._dir(which))) == sorted(cg.members(which)), which
        assert {v.pid, scrubbed} <= set(copy.members(cg.path))
        assert copy.wait_empty(cg.path, 0.05) is cg.wait_empty("all", 0.05) is False
        assert cg.kill("all", timeout=2)
        assert copy.wait_empty(cg.path, 0.05) is cg.wait_empty("all", 0.05) is True
        assert copy.members(cg.path) == cg.members("all") == []
        assert v.wait_gone(2)
    finally:
        cg.kill("all", timeout=2)
        nested.rmdir()


def _killed_with_its_namespace(runs):
    """A live run (provider: a long sleep, in its session) whose engine and calls are then
    all SIGKILLed at once through the run's cgroup: what the kernel does to them when a
    container's PID 1 is SIGKILLed. The engine had no chance to remove its cgroup."""
    rd = runs.start(runs.spec(provider=["/bin/sh", "-c", "sleep 600"], stop={"kill_grace": 0.2}), name=new_run_id())
    runs.wait_event(rd, "phase-start", phase="session")
    engine = identity_file.read(rd.engine_identity)
    path = cgroup_mod.run_cgroup_path(rd.key(rd.run_id))
    assert RunCgroup(path).kill("all", timeout=5)
    assert signals.wait_gone(engine, 10)
    assert path.is_dir() and not RunCgroup(path).populated("all")
    return rd, path


def _listed(runs, rd):
    out = runs.runner("list", "--json", "--runs-dir", runs.tmp_path)
    assert out.returncode == Exit.OK, out.stderr
    [row] = [r for r in json.loads(out.stdout) if r["run_dir"] == str(rd.path)]
    return row


def test_a_killed_engines_cgroup_is_listed_and_removed_by_resume(runs):
    """Path: the cgroup a killed engine left (a SIGKILLed container's PID 1) is named by
    `runner list` (`orphaned_cgroup`, and on its text row) and removed by the next
    `runner resume`, which says so, before its engine makes the run's cgroup anew (a new
    directory: another inode). Ablation: `resume-removes-leftover-cgroup` (the leftover is
    kept and reused): red."""
    rd, path = _killed_with_its_namespace(runs)
    assert _listed(runs, rd)["orphaned_cgroup"] == str(path)
    assert str(path) in runs.runner("list", "--runs-dir", runs.tmp_path).stdout
    before = path.stat().st_ino
    resumed = runs.runner("resume", "--run-dir", rd.path, "--detach")
    assert resumed.returncode == Exit.OK, resumed.stderr
    assert f"removed the cgroup the dead attempt left: {path}" in resumed.stderr
    runs.wait_event(rd, "resume")
    assert not path.exists() or path.stat().st_ino != before
    assert _listed(runs, rd)["orphaned_cgroup"] is None  # live: the cgroup is its engine's
    assert runs.runner("stop", "--now", "--run-dir", rd.path).returncode == Exit.OK
    assert not path.exists()


def test_a_killed_engines_cgroup_is_removed_by_a_plain_stop(runs):
    """Path: `runner stop` of a run whose engine was killed with everything of it (nothing
    left to kill) records the stop and removes the cgroup the engine left; `runner list`
    then names none."""
    rd, path = _killed_with_its_namespace(runs)
    stopped = runs.runner("stop", "--run-dir", rd.path)
    assert stopped.returncode == Exit.OK, stopped.stderr
    assert not path.exists()
    assert _listed(runs, rd)["orphaned_cgroup"] is None


def test_remove_tree_removes_deepest_first_and_names_what_stays(tmp_path):
    """Unit: cgroup.remove_tree (RunCgroup.remove's rmdir of the run's cgroup and every
    cgroup a member made below it): directories are removed deepest first, and what
    cannot be removed (here a directory holding a file, as a cgroup holding a process
    refuses) is named with the reason, after every other one was tried; the run's own
    directory then stays and is named too. Ablation: `sub-cgroups-removed`."""
    from runner.proc.cgroup import remove_tree

    root = tmp_path / "run"
    (root / "work" / "made" / "deeper").mkdir(parents=True)
    (root / "engine").mkdir()
    (root / "work" / "busy").mkdir()
    (root / "work" / "busy" / "member").write_text("")
    failed = remove_tree(root)
    assert not (root / "work" / "made").exists() and not (root / "engine").exists()
    assert [f.split(" (")[0] for f in failed] == [str(root / "work" / "busy"), str(root / "work"), str(root)], failed
    (root / "work" / "busy" / "member").unlink()
    assert remove_tree(root) == [] and not root.exists()


def test_kill_reaches_a_process_whose_leader_thread_exited(spawn, cg, caplog):
    """Path: RunCgroup.kill after its cgroup.kill. A process whose leader thread exited
    while another thread runs (the zombie-leader, trapping SIGTERM) is listed in
    cgroup.procs but its leader not in cgroup.threads (leaderless), and cgroup.kill does
    not end it (Linux 6.18: populated 1 after it). The kill takes it by its pid at once:
    the cgroup empties with no "still populated" fallback. Ablation:
    `threads-as-liveness-cgroup` (red: only the fallback, half the timeout later, kills
    it, and says so)."""
    import logging

    v = spawn("zombie-leader", cgroup=cg)
    assert cg.leaderless("work") == [v.pid]
    with caplog.at_level(logging.INFO, logger="runner.proc.cgroup"):
        assert cg.kill("work", timeout=2)
    assert "still populated" not in caplog.text, caplog.text
    assert v.wait_gone(2)


def test_kill_waits_the_callers_deaths_before_it_reads_cgroup_events(spawn, cg, monkeypatch):
    """Path: RunCgroup.kill's `deaths`: once cgroup.kill is written, the caller's own
    wait for the members it watches through pidfds (the reaper's Watch.wait) runs once,
    within the first half of the timeout, before cgroup.events is read: a pidfd says a
    death at once, cgroup.events tens of milliseconds late at a thousand members (its
    poll backs off to 50 ms). Ablation: `cgroup-kill-waits-deaths-first` (the caller's
    wait never runs: red)."""
    v = spawn("trap-term", cgroup=cg)
    written, calls = [], []
    real = Path.write_text

    def spy(self, *args, **kwargs):
        written.append(self.name)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", spy)
    fd = os.pidfd_open(v.pid)
    try:

        def deaths(deadline):
            calls.append((written.count("cgroup.kill"), deadline - time.monotonic()))
            select.select([fd], [], [], max(0.0, deadline - time.monotonic()))

        assert cg.kill("work", timeout=2, deaths=deaths)
    finally:
        os.close(fd)
    assert len(calls) == 1, "the caller's wait for its watched deaths did not run once"
    assert calls[0][0] == 1, "the caller's wait ran before cgroup.kill was written"
    assert 0 < calls[0][1] <= 1.0
    assert v.wait_gone(2)


def test_contained_kill_round_sigkills_last_before_the_cgroup_kill(spawn, cg, monkeypatch):
    """Path: kill_everything, contained: `last` (a stopper's engine, out of the run's
    cgroup as a stopping engine is) has its SIGKILL at the start of the KILL round,
    before the cgroup kill and its wait, so its teardown overlaps the tree's (contained,
    no kill rounds follow for it to wait for: what it adopts stays in the cgroup).
    Ablation: `contained-last-killed-first` (never SIGKILLed contained: red)."""
    rid = new_run_id()
    member = spawn("trap-term", cgroup=cg, run_id=rid)
    engine = spawn("trap-term", run_id=rid)  # outside the cgroup: the run's by its tag
    fd = os.pidfd_open(engine.pid)
    dead_at_cgroup_kill = []
    real = RunCgroup.kill

    def spy(self, *args, **kwargs):
        dead_at_cgroup_kill.append(bool(select.select([fd], [], [], 2.0)[0]))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(RunCgroup, "kill", spy)
    try:
        report = reaper.kill_everything(
            groups=[],
            pids=[identity.current(member.pid)],
            run_id=rid,
            kill_grace=0.3,
            cgroup=cg,
            cgroup_scope="work",
            last=[identity.current(engine.pid)],
        )
    finally:
        os.close(fd)
    assert dead_at_cgroup_kill == [True], "`last` was not SIGKILLed before the cgroup kill"
    assert engine.pid in report.needed_kill and member.pid in report.needed_kill
    assert report.unkillable == [] and report.left_running == []
    assert engine.wait_gone(2) and member.wait_gone(2)
