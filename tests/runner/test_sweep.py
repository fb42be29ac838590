"""runner.proc.sweep: escapees found by the run tag and by descendant snapshots; the subreaper."""

import subprocess
import sys
import textwrap

from runs import new_run_id

from runner.proc import identity, reaper, sweep


def test_tagged_finds_a_setsid_escapee_and_a_double_forked_daemon(spawn):
    """Both escapees left the victim's group (and, for double-fork, its parent links);
    the tag still names them. Other runs' processes are not listed."""
    rid, other = new_run_id(), new_run_id()
    esc = spawn("escapee", run_id=rid)
    dbl = spawn("double-fork", run_id=rid)
    foreign = spawn("trap-term", run_id=other)
    found = {i.pid for i in sweep.tagged(rid)}
    expected = {p.pid for p in esc.tree()} | {p.pid for p in dbl.tree()}
    assert len(expected) == 4
    assert found == expected
    assert foreign.pid not in found


def test_tagged_never_lists_this_process(monkeypatch):
    """A `runner stop` run from a hook carries the tag: the sweep must skip itself."""
    rid = new_run_id()
    monkeypatch.setenv("RUNNER_RUN_ID", rid)
    code = f"from runner.proc import sweep; import os; print(os.getpid() in {{i.pid for i in sweep.tagged({rid!r})}})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_kill_tagged_kills_trapping_escapees(spawn):
    """The tag sweep alone (no group, no pid) kills trapping processes that left the
    group. Ablation: delete the line ending `# tag-sweep-sigkill` in reaper.py (red)."""
    rid = new_run_id()
    v = spawn("escapee", run_id=rid)
    d = spawn("double-fork", run_id=rid)
    report = reaper.kill_tagged(rid, 0.3)
    assert len(report.needed_kill) == 4 and report.unkillable == []
    assert v.wait_gone(2) and d.wait_gone(2)
    assert sweep.tagged(rid) == []


def test_descendants_snapshot_includes_a_setsid_child(spawn):
    """Parent links survive setsid: a snapshot taken while the run lives names the
    escapee even though it is in another group and session."""
    v = spawn("escapee")
    snap = {i.pid: i for i in sweep.descendants(v.pid)}
    tree = {p.pid for p in v.tree()} - {v.pid}
    assert set(snap) == tree and len(tree) == 1
    child = snap[tree.pop()]
    assert child.sid != v.sid and identity.is_running(child)
    # The snapshot is what reaches it: the pid route over the snapshot kills it, the
    # snapshot being what the engine itself saw (`known`, as the registry passes it).
    seen = [identity.current(v.pid), *snap.values()]
    report = reaper.kill_everything(groups=[], pids=seen, run_id=None, known=seen, kill_grace=0.1)
    assert child.pid in report.needed_kill
    assert v.wait_gone(2)


SUBREAPER_PROG = textwrap.dedent("""
    import os, sys, time
    from runner.proc import sweep
    assert sweep.make_subreaper()
    # A double fork: the middle process exits, its child is re-parented to us, not init.
    mid = os.fork()
    if mid == 0:
        if os.fork() == 0:
            os._exit(7)           # the daemon dies at once: it becomes OUR zombie
        os._exit(0)
    # The Popen-like child we must not reap: it exits too, and stays a zombie.
    keep = os.fork()
    if keep == 0:
        os._exit(3)
    os.waitpid(mid, 0)
    deadline = time.monotonic() + 10
    reaped = []
    while not reaped and time.monotonic() < deadline:
        reaped = sweep.reap_orphans(exclude={keep})
        time.sleep(0.01)
    # The excluded child's status is intact: waitpid still sees exit code 3.
    _, status = os.waitpid(keep, 0)
    print(len(reaped), os.waitstatus_to_exitcode(status))
""")


def test_subreaper_adopts_double_forked_orphans_and_reap_orphans_spares_excluded():
    """With PR_SET_CHILD_SUBREAPER the orphan comes to us; reap_orphans reaps it and
    leaves the excluded child's exit status to its owner (no waitpid(-1) theft)."""
    out = subprocess.run([sys.executable, "-c", SUBREAPER_PROG], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "3"]
