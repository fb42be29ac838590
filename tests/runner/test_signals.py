"""runner.proc.signals: identity-guarded signals, the group guard, protected pids.

Pid reuse is real here, not simulated: as root, /proc/sys/kernel/ns_last_pid makes the
kernel hand a dead process's pid to a new one.
"""

import logging
import os
import signal
import subprocess
import sys
import time

import pytest
from runs import spawn_at_pid

from runner.ident import Identity
from runner.proc import identity, membership, reaper, signals
from runner.proc.membership import Membership
from runner.proc.signals import Delivery


def vouch(*idents):
    """Membership that proves exactly these identities (as the engine's own children)."""
    return Membership(known=frozenset((i.pid, i.start_ticks) for i in idents))


def group_signal(pgid, sig, *, members=(), run_id=None):
    """reaper.signal_group, the group route every stop runs, with a fresh Watch."""
    watch = reaper.Watch(Membership(run_id))
    try:
        return reaper.signal_group(pgid, members, sig, watch), watch.refused
    finally:
        watch.close()


def dead_identity(start, **kw):
    """The identity of a process that has exited and been reaped: its pid is free."""
    p = start(["sleep", "60"], **kw)
    ident = identity.current(p.pid)
    p.kill()
    p.wait()
    # Start ticks have clock-tick resolution (10 ms): a reuse within the same tick is
    # indistinguishable by design, and real reuse needs the pid space to wrap first.
    time.sleep(0.05)
    return ident


def test_stale_identity_with_reused_pid_is_refused_and_the_newcomer_lives(procs, caplog):
    """A recorded identity whose pid now belongs to another process (real reuse) is
    refused with a message, and the newcomer survives. Ablation: delete the start-ticks
    comparison in open_pidfd and the newcomer is killed (red)."""
    old = dead_identity(procs)
    newcomer = spawn_at_pid(procs, old.pid)
    assert identity.start_ticks(newcomer.pid) != old.start_ticks
    with caplog.at_level(logging.WARNING, logger="runner.proc.signals"):
        assert signals.signal_process(old, signal.SIGKILL, vouch(old)) is Delivery.STALE
    assert "pid reused" in caplog.text and str(old.pid) in caplog.text
    assert newcomer.poll() is None
    assert identity.current(newcomer.pid) is not None


def test_reused_group_id_is_refused_and_the_group_lives(procs, caplog):
    """A recorded group leader's pgid taken over by a new group (real reuse) is not
    signalled: the leader is not the recorded process, no member carries the tag.
    Ablation: `group-membership` (the verdict always proves) and the new group is killed
    (red)."""
    old = dead_identity(procs, process_group=0)
    newcomer = spawn_at_pid(procs, old.pid, process_group=0)
    assert os.getpgid(newcomer.pid) == old.pgid
    sent, refused = group_signal(old.pgid, signal.SIGKILL, members=[old], run_id="some-run")
    assert sent is False
    assert any("reused" in r for r in refused), refused
    assert newcomer.poll() is None


def test_matching_identity_is_signalled_through_the_pidfd(procs):
    p = procs()
    ident = identity.current(p.pid)
    assert signals.signal_process(ident, signal.SIGKILL, vouch(ident)) is Delivery.SENT
    assert p.wait(5) == -signal.SIGKILL


def test_gone_and_zombie_read_as_gone(procs):
    p = procs(["true"])
    ident = identity.current_or_zombie(p.pid)
    os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)  # a zombie now
    assert signals.signal_process(ident, signal.SIGKILL, vouch(ident)) is Delivery.GONE
    p.wait()
    assert signals.signal_process(ident, signal.SIGKILL, vouch(ident)) is Delivery.GONE


def test_identity_from_another_boot_is_refused(procs):
    p = procs()
    ident = identity.current(p.pid)
    other = Identity(ident.pid, ident.pgid, ident.sid, ident.start_ticks, "another-boot")
    assert signals.signal_process(other, signal.SIGKILL, vouch(ident)) is Delivery.STALE
    assert p.poll() is None


def test_protected_pids_are_self_and_ancestors():
    protected = signals.protected_pids()
    assert {os.getpid(), os.getppid(), 1} <= protected


def test_self_is_never_signalled():
    me = identity.current(os.getpid())
    assert signals.signal_process(me, signal.SIGKILL, vouch(me)) is Delivery.PROTECTED


@pytest.fixture
def usr2_counter():
    got = []
    old = signal.signal(signal.SIGUSR2, lambda *_: got.append(1))
    yield got
    signal.signal(signal.SIGUSR2, old)


@pytest.mark.parametrize("pgid", [0, 1, -1])
def test_pgid_0_and_1_are_refused(pgid):
    assert signals.refusal(pgid) is not None
    assert reaper.group_verdict(pgid, [], [], reaper.Watch(Membership("x"))) is not None


def test_own_group_is_refused_even_when_tagged(usr2_counter, monkeypatch):
    """Our own group carries the tag here (as a `runner stop` run from a hook would),
    and still no signal reaches it. Ablation: drop the own-group refusal and SIGUSR2
    lands in this process (red)."""
    monkeypatch.setattr(membership, "has_tag", lambda pid, run_id: True)
    monkeypatch.setattr(signals, "protected_pids", lambda: {0, 1})  # only the own-group rule left
    assert group_signal(os.getpgrp(), signal.SIGUSR2, run_id="x")[0] is False
    signal.pthread_sigmask(signal.SIG_BLOCK, [])  # a syscall: pending handlers run
    assert usr2_counter == []


def test_an_ancestors_group_is_refused():
    """A child in its own group asks about its parent's group: refused because it holds
    an ancestor, although it is not the child's own group. The parent is a process in a
    group of its own (pytest's group may be invisible: in a container whose init did not
    setsid, /proc reads it as 0). Ablation: drop the protected-pids loop in refusal() and
    the child prints None (red)."""
    check = (
        "import os; from runner.proc import signals; "
        "assert os.getpgrp() != os.getpgid(os.getppid()) > 1; "
        "print(signals.refusal(os.getpgid(os.getppid())))"
    )
    parent = (
        "import subprocess, sys; "
        f"r = subprocess.run([sys.executable, '-c', {check!r}], process_group=0); "
        "sys.exit(r.returncode)"
    )
    out = subprocess.run([sys.executable, "-c", parent], process_group=0, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "ancestors" in out.stdout


def test_tagged_group_passes_the_guard_and_untagged_does_not(procs):
    """With no recorded member, only the run tag of every member vouches for a group."""
    tagged = procs(process_group=0, env=dict(os.environ, RUNNER_RUN_ID="run-a"))
    untagged = procs(process_group=0, env=dict(os.environ, RUNNER_RUN_ID="run-b"))
    assert group_signal(untagged.pid, signal.SIGKILL, run_id="run-a")[0] is False
    assert group_signal(tagged.pid, signal.SIGKILL, run_id="run-a")[0] is True
    assert tagged.wait(5) == -signal.SIGKILL
    assert untagged.poll() is None


def test_has_tag_matches_the_whole_entry_only(procs):
    p = procs(env=dict(os.environ, RUNNER_RUN_ID="run-abc"))
    assert membership.has_tag(p.pid, "run-abc")
    assert not membership.has_tag(p.pid, "run-ab")
    assert not membership.has_tag(p.pid, None)


def _pidfd_open_failing(monkeypatch, times):
    """os.pidfd_open that raises ENOENT the first `times` calls, as Linux 6.18 (pidfs) did
    here for a dead process's pid while tests reused pids."""
    real = os.pidfd_open
    calls = []

    def fake(pid, *args):
        calls.append(pid)
        if len(calls) <= times:
            raise FileNotFoundError(2, "No such file or directory")
        return real(pid, *args)

    monkeypatch.setattr(signals.os, "pidfd_open", fake)
    return calls


def test_pidfd_enoent_for_a_dead_identity_reads_as_gone(procs, monkeypatch):
    """pidfd_open's ENOENT for a pid whose process is gone is 'gone', never a crash: the
    stopper that met it (a mutate baseline, in a pid namespace) died with an internal
    error instead of finishing the stop.
    Ablation: let open_pidfd re-raise ENOENT and this raises FileNotFoundError."""
    old = dead_identity(procs)
    _pidfd_open_failing(monkeypatch, times=1)
    assert signals.open_pidfd(old) == (None, Delivery.GONE)


def test_pidfd_enoent_while_our_process_lives_is_retried_and_the_signal_lands(procs, monkeypatch):
    """If /proc still shows our very process, an ENOENT is transient: open_pidfd retries
    and the signal is delivered (a real process dies of it). Ablation: treat every ENOENT
    as gone and the process lives on (red)."""
    p = procs()
    ident = identity.current(p.pid)
    calls = _pidfd_open_failing(monkeypatch, times=2)
    assert signals.signal_process(ident, signal.SIGKILL, vouch(ident)) is Delivery.SENT
    assert p.wait(timeout=5) == -signal.SIGKILL
    assert len(calls) == 3


_INTERRUPTED_WAIT = r"""
import signal, sys, threading, time
from runner.proc import identity, signals

engine = identity.current(int(sys.argv[1]))
main = threading.get_native_id()


def interrupt_from_here():
    # The event: the main thread asleep in wait_gone's select (its only blocking call),
    # not waiting for the interpreter's lock, which this thread holds while it reads.
    while not any(w in open(f"/proc/self/task/{main}/wchan").read() for w in ("poll", "select")):
        time.sleep(0.005)
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)


threading.Thread(target=interrupt_from_here, daemon=True).start()
try:
    gone = signals.wait_gone(engine, 3600.0)  # `runner wait`'s slice
except KeyboardInterrupt:
    print("interrupted")
else:
    print(f"not interrupted: wait_gone returned {gone}")
"""


def test_a_signal_the_waiting_thread_did_not_take_still_ends_wait_gone(procs):
    """Path: wait_gone's wakeup fd (signals._Wakeup), which a stop signal writes to the
    moment it arrives, whichever thread's C handler takes it. Here another thread takes
    a SIGINT while the main thread sleeps in wait_gone's select: the same state as a
    Ctrl-C that lands after the interpreter's last check and just before the select
    blocks (a `runner stop --graceful --wait` preempted there under load once slept
    through its SIGINT). Without the wakeup fd the select sleeps out its hour (the
    waiter is killed at 30 s); with it, KeyboardInterrupt at once.
    Ablation: wait-gone-wakes-on-signal."""
    engine = procs()
    waiter = procs(
        [sys.executable, "-c", _INTERRUPTED_WAIT, str(engine.pid)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = waiter.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("a SIGINT did not end wait_gone's select within 30 s of its 3600 s")
    assert out.strip() == "interrupted", (out, err)
    assert engine.poll() is None
