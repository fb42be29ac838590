"""Each victim kind is what it claims, against the real kernel.

Every test signals the whole group (as a group reaper would) and checks the whole
tree, in Python and in bash. Each test ends by killing what is left itself: the
victim fixture would otherwise (rightly) report a leak.
"""

import os
import select
import signal
import subprocess
import time

import psutil
import pytest
from plugin_helpers import ready_info, sig_set, wait_for

from pytest_stoplatency import _procs
from pytest_stoplatency.victim import KINDS

LANGS = ["python", "bash"]


def finish(v):
    v.kill()
    assert v.wait_gone(5.0), f"could not kill {v.tree()}"


def members(v):
    return dict(v.members())


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_is_an_armed_session_leader(victim, kind, lang):
    """Path: victim() = prepare + start_new_session + adopt, for every kind.

    The victim leads its own session and group (killpg on it never reaches pytest),
    ignores SIGHUP and SIGINT (an orphaned-group SIGHUP must not credit a broken
    reaper), and carries the token, which pytest's own environment does not.
    Ablation: drop the SIG_IGN of HUP/INT in victim.py or victims.sh -> red.
    """
    v = victim(kind, lang=lang)
    assert v.pid == v.pgid == v.sid
    assert v.sid != os.getsid(0)
    assert {signal.SIGHUP, signal.SIGINT} <= sig_set(v.pid, "SigIgn")
    assert _procs.token_of(v.pid) == str(v.token)
    assert "STOPLATENCY_VICTIM" not in os.environ
    assert v.alive() and v.tree()
    finish(v)
    assert not v.alive()


@pytest.mark.parametrize("lang", LANGS)
def test_cooperative_dies_on_group_sigterm(victim, lang):
    """Path: the control case; a group SIGTERM ends the whole tree."""
    v = victim("cooperative", lang=lang)
    os.killpg(v.pgid, signal.SIGTERM)
    assert v.wait_gone(5.0)


@pytest.mark.parametrize("lang", LANGS)
def test_trap_term_survives_group_sigterm(victim, lang):
    """Path: trap-term swallows SIGTERM; still alive 2 s after a group SIGTERM, SIGKILL ends it.

    Ablation: a victim that only sets a handler in the parent and sleeps in the
    foreground (the bash pitfall) would die here.
    """
    v = victim("trap-term", lang=lang)
    assert signal.SIGTERM in sig_set(v.pid, "SigCgt")
    os.killpg(v.pgid, signal.SIGTERM)
    assert not v.wait_gone(2.0)
    assert v.alive()
    os.killpg(v.pgid, signal.SIGKILL)
    assert v.wait_gone(5.0)


@pytest.mark.parametrize("lang", LANGS)
def test_ignore_term_children_inherit_sig_ign(victim, lang):
    """Path: ignore-term sets SIG_IGN once; every member (children included) ignores SIGTERM."""
    v = victim("ignore-term", lang=lang)
    kids = ready_info(v)["children"]
    assert len(kids) == 2
    for pid in members(v):
        assert signal.SIGTERM in sig_set(pid, "SigIgn"), _procs.cmdline(pid)
    before = members(v)
    os.killpg(v.pgid, signal.SIGTERM)
    assert not v.wait_gone(1.0)
    assert all(_procs.is_alive(p, t) for p, t in before.items())
    finish(v)


@pytest.mark.parametrize("lang", LANGS)
def test_slow_exit_takes_its_cleanup_time(victim, lang):
    """Path: slow-exit on SIGTERM cleans up for --cleanup seconds, then exits by itself."""
    v = victim("slow-exit", lang=lang, cleanup=1.0)
    t0 = time.monotonic()
    os.killpg(v.pgid, signal.SIGTERM)
    assert not v.wait_gone(0.5)
    assert wait_for(lambda: not v.alive(), 10.0)
    assert time.monotonic() - t0 >= 0.9
    finish(v)


@pytest.mark.parametrize("lang", LANGS)
def test_forker_children_trap_in_the_same_group(victim, lang):
    """Path: forker's N children share the victim's group and each traps SIGTERM."""
    v = victim("forker", lang=lang, children=3)
    kids = ready_info(v)["children"]
    assert len(kids) == 3
    for pid in kids:
        assert _procs.ids(pid)[1:] == (v.pgid, v.sid)
        assert signal.SIGTERM in sig_set(pid, "SigCgt")
    os.killpg(v.pgid, signal.SIGTERM)
    assert not v.wait_gone(1.0)
    assert all(_procs.is_alive(p) for p in kids + [v.pid])
    os.killpg(v.pgid, signal.SIGKILL)
    assert v.wait_gone(5.0)


@pytest.mark.parametrize("lang", LANGS)
def test_escapee_grandchild_is_out_of_killpg_reach(victim, lang):
    """Path: escapee's child called setsid; a group SIGKILL leaves it alive, the token still finds it."""
    v = victim("escapee", lang=lang)
    (esc,) = ready_info(v)["children"]
    assert _procs.ids(esc)[2] == esc != v.sid
    os.killpg(v.pgid, signal.SIGKILL)
    assert wait_for(lambda: not v.alive())
    assert not v.wait_gone(0.5)
    assert esc in [p.pid for p in v.tree()]
    finish(v)


@pytest.mark.parametrize("lang", LANGS)
def test_double_fork_daemon_is_not_a_descendant(victim, lang):
    """Path: double-fork's daemon was re-parented; a parent-pid walk misses it, the group reaches it."""
    v = victim("double-fork", lang=lang)
    walked = {p.pid for p in psutil.Process(v.pid).children(recursive=True)}
    daemons = [pid for pid in members(v) if pid != v.pid and pid not in walked]
    assert daemons
    for pid in daemons:
        assert _procs.ids(pid)[1] == v.pgid
    assert any(_procs.ids(pid)[0] != v.pid for pid in daemons)
    os.killpg(v.pgid, signal.SIGTERM)
    assert not v.wait_gone(1.0)
    os.killpg(v.pgid, signal.SIGKILL)
    assert v.wait_gone(5.0)


@pytest.mark.parametrize("lang", LANGS)
def test_pipe_holder_keeps_stdout_open_after_its_parent(start_prepared, lang):
    """Path: pipe-holder's parent dies on SIGTERM; its child still holds stdout, so no EOF (communicate hangs)."""
    v, proc = start_prepared("pipe-holder", lang=lang, stdout=subprocess.PIPE)
    os.killpg(v.pgid, signal.SIGTERM)
    assert wait_for(lambda: not v.alive())
    proc.wait(timeout=5)
    r, _, _ = select.select([proc.stdout], [], [], 1.0)
    assert not r, "stdout reached EOF: nobody holds the pipe"
    assert v.tree()
    v.kill()
    assert v.wait_gone(5.0)
    r, _, _ = select.select([proc.stdout], [], [], 5.0)
    assert r and proc.stdout.read() == b""


@pytest.mark.parametrize("lang", LANGS)
def test_respawner_replaces_a_killed_child(victim, lang):
    """Path: respawner forks a new trapping child when one dies; a snapshot misses the new one."""
    v = victim("respawner", lang=lang, children=2)
    kids = ready_info(v)["children"]
    snapshot = members(v)
    os.kill(kids[0], signal.SIGKILL)
    new = wait_for(lambda: [p for p in members(v) if p not in snapshot and signal.SIGTERM in sig_set(p, "SigCgt")])
    assert new, "no child was respawned"
    assert all(_procs.ids(p)[1] == v.pgid for p in new)
    finish(v)


@pytest.mark.parametrize("lang", LANGS)
def test_stopped_keeps_sigterm_pending(victim, lang):
    """Path: stopped is in state T after the handshake; SIGTERM stays pending, SIGKILL works."""
    v = victim("stopped", lang=lang)
    assert _procs.state(v.pid) == "T"
    os.killpg(v.pgid, signal.SIGTERM)
    assert not v.wait_gone(1.0)
    assert _procs.state(v.pid) == "T"
    os.killpg(v.pgid, signal.SIGKILL)
    assert v.wait_gone(5.0)


@pytest.mark.parametrize("lang", LANGS)
def test_env_scrubber_grandchild_has_no_token_but_is_recorded(victim, lang):
    """Path: env-scrubber's grandchild dropped its environment and left the group; only the extra finds it.

    Ablation: stop reading extras in Victim.tree / the cleanup and the grandchild is lost (and leaks).
    """
    v = victim("env-scrubber", lang=lang)
    (extra,) = v.extras
    pid = extra["pid"]
    assert extra["start_ticks"] == _procs.start_ticks(pid)
    assert _procs.token_of(pid) is None
    assert pid not in _procs.scan_tokens()
    assert _procs.ids(pid)[1:] != (v.pgid, v.sid)
    assert pid in [p.pid for p in v.tree()]
    os.killpg(v.pgid, signal.SIGKILL)
    assert wait_for(lambda: not v.alive())
    assert _procs.is_alive(pid, extra["start_ticks"])
    finish(v)


@pytest.mark.parametrize("lang", LANGS)
def test_prepared_victim_started_with_stdio_closed(start_prepared, lang):
    """Path: PreparedVictim.argv started by someone else, fds 0-2 closed: the ready-file handshake still works.

    It is then a group leader but not a session leader (the victim never calls setsid on itself).
    """
    v, proc = start_prepared("forker", lang=lang, close_fds=True)
    assert v.pid == v.pgid and v.sid != v.pid
    assert len(ready_info(v)["children"]) == 2
    assert signal.SIGTERM in sig_set(v.pid, "SigCgt")
    finish(v)


def test_wait_gone_sees_a_respawned_member(victim):
    """Path: wait_gone re-scans by token; killing the known members only is not enough against a respawner."""
    v = victim("respawner", children=1)
    for pid, ticks in v.members():
        if pid != v.pid:
            _procs.signal_identified(pid, ticks, signal.SIGKILL)
    assert not v.wait_gone(0.5)
    finish(v)


def test_zombie_counts_as_dead(victim):
    """Path: alive() treats a zombie as dead (we do not reap it before checking)."""
    v = victim("trap-term")
    proc, v.process = v.process, None  # keep the handle from reaping it
    os.kill(v.pid, signal.SIGKILL)
    assert wait_for(lambda: _procs.state(v.pid) == "Z")
    assert not v.alive()
    assert v.wait_gone(1.0)
    proc.wait()
