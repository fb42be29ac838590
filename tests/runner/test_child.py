"""runner.engine.child: the one child runner (capture, cap, call and idle timeouts, stops,
leftovers of a successful call)."""

import os
import sys
import threading
import time

from runner.engine.child import run_child
from runner.proc import sweep

KILL_GRACE = 0.3
MARGIN = 1.0


def env_for(reg):
    return dict(os.environ, RUNNER_RUN_ID=reg.run_id)


def run(reg, argv, tmp_path, *, timeout=30, idle_timeout=0, cap=1 << 20, name="call"):
    return run_child(
        argv,
        registry=reg,
        name=name,
        timeout=timeout,
        idle_timeout=idle_timeout,
        env=env_for(reg),
        output_path=tmp_path / "output" / f"{name}.log",
        cap_bytes=cap,
    )


def py(code):
    return [sys.executable, "-c", code]


def test_success_captures_output_and_returns_zero(reg, tmp_path):
    r = run(reg, py("import sys; print('hello'); sys.stderr.write('err\\n')"), tmp_path)
    assert r.returncode == 0 and r.timed_out is None and not r.stopped
    assert r.output_path.read_text() == "hello\nerr\n"
    assert reg.live() == [] and list((tmp_path / "children").iterdir()) == []


def test_stdin_is_dev_null(reg, tmp_path):
    r = run(
        reg, py("import os, sys; print(os.path.realpath('/proc/self/fd/0')); print(repr(sys.stdin.read()))"), tmp_path
    )
    assert r.output_path.read_text().split() == ["/dev/null", "''"]


def test_the_child_runs_in_its_own_process_group_tagged(reg, tmp_path):
    code = "import os; print(os.getpgrp() == os.getpid(), os.environ['RUNNER_RUN_ID'])"
    r = run(reg, py(code), tmp_path)
    assert r.output_path.read_text().split() == ["True", reg.run_id]


def test_a_failure_is_a_failure(reg, tmp_path):
    r = run(reg, py("raise SystemExit(4)"), tmp_path)
    assert r.returncode == 4 and not r.stopped and r.timed_out is None


def test_output_is_capped_and_the_rest_counted(reg, tmp_path):
    r = run(reg, py("import sys; sys.stdout.write('x' * 100000)"), tmp_path, cap=1000)
    text = r.output_path.read_text()
    assert text.startswith("x" * 1000) and "x" * 1001 not in text
    assert "99000 more bytes dropped" in text
    assert r.returncode == 0 and not r.timed_out and not r.stopped


def test_call_timeout_kills_the_whole_trapping_tree(reg, tmp_path, victim):
    """A forker that traps TERM outlives call_timeout: the call, its group and its
    trapping children are killed, and the result says timed_out='call', not a crash."""
    p = victim.prepare("forker", children=2)
    r = run(reg, p.argv, tmp_path, timeout=1.0)
    assert r.timed_out == "call" and not r.stopped
    assert 1.0 <= r.duration < 1.0 + KILL_GRACE + MARGIN
    assert len(r.reap.needed_kill) == 3
    assert not [p for p in sweep.tagged(reg.run_id)]


def test_idle_timeout_fires_on_silence_and_output_resets_it(reg, tmp_path):
    """Output every 0.1 s for 1.2 s keeps a 0.5 s idle timeout at bay; then silence
    trips it."""
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: None)\n"
        "for _ in range(12): print('tick', flush=True); time.sleep(0.1)\n"
        "time.sleep(60)\n"
    )
    r = run(reg, py(code), tmp_path, idle_timeout=0.5)
    assert r.timed_out == "idle"
    assert 1.2 + 0.5 <= r.duration < 1.2 + 0.5 + KILL_GRACE + MARGIN
    assert r.output_path.read_text().count("tick") == 12
    assert r.reap.needed_kill  # it trapped TERM


def test_pipe_holder_does_not_hold_a_successful_call(reg, tmp_path, victim):
    """The leader exits 0 while a trapping grandchild keeps stdout open: the runner
    returns without waiting for an EOF, and kills the leftover with the group."""
    code = (
        "import os, signal, sys, time\n"
        "if os.fork() == 0:\n"
        "    signal.signal(signal.SIGTERM, lambda *a: None)\n"
        "    time.sleep(600)\n"
        "    os._exit(0)\n"
        "print('done', flush=True)\n"
    )
    r = run(reg, py(code), tmp_path)
    assert r.returncode == 0 and not r.timed_out and not r.stopped
    assert r.duration < KILL_GRACE + MARGIN
    assert len(r.reap.needed_kill) == 1
    assert sweep.tagged(reg.run_id) == []


def test_a_stop_kills_the_call_and_marks_it_stopped_not_failed(reg, tmp_path, victim):
    """The registry's stop (from another thread, as the watchdog does) kills a trapping
    call: the runner returns promptly with stopped=True, whatever the return code."""
    p = victim.prepare("trap-term")
    holder = {}
    t = threading.Thread(target=lambda: holder.setdefault("r", run(reg, p.argv, tmp_path)))
    t.start()
    v = p.adopt(timeout=10)
    t0 = time.monotonic()
    report = reg.stop_all("test")
    t.join(KILL_GRACE + MARGIN)
    assert not t.is_alive()
    r = holder["r"]
    assert r.stopped and r.timed_out is None
    assert time.monotonic() - t0 < KILL_GRACE + MARGIN
    assert v.pid in report.needed_kill
    assert v.wait_gone(2)


def test_killed_from_outside_without_a_stop_is_a_failure(reg, tmp_path, victim):
    """SIGKILL from outside while no stop is pending: a real failure, not stopped."""
    p = victim.prepare("trap-term")
    holder = {}
    t = threading.Thread(target=lambda: holder.setdefault("r", run(reg, p.argv, tmp_path)))
    t.start()
    v = p.adopt(timeout=10)
    v.kill()
    t.join(MARGIN + KILL_GRACE)
    r = holder["r"]
    assert r.returncode == -9 and not r.stopped


def test_a_call_started_after_the_stop_is_killed_at_once(reg, tmp_path, victim):
    """A spawn racing the stop cannot escape it: registering while stopping kills."""
    reg.stop_all("test")
    p = victim.prepare("trap-term")
    r = run(reg, p.argv, tmp_path)
    assert r.stopped
    assert r.duration < KILL_GRACE + MARGIN
