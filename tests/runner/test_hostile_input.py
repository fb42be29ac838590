"""Hostile input: specs whose values the loader accepted but that broke the run, error
lines that were not one clean line, and races whose exit codes lied.

Each spec case goes through a real `runner run --detach`: exit BAD_INPUT, exactly one
line naming the file and the key, within seconds (never a hang on a FIFO or
/dev/zero), and nothing started."""

import os
import signal
import subprocess
import threading
import time

import pytest
import runs as R

from runner import defaults
from runner.exitcodes import Exit
from runner.files import identity_file
from runner.proc import signals

PROVIDER = '[provider]\ncommand = ["true"]\n'
ITEMS = 'items = ["a"]\n'
HUGE_INT = str(2**70)

RANGE_CASES = {
    "kill-grace-3e6": (ITEMS + PROVIDER + "[stop]\nkill_grace = 3e6\n", "stop.kill_grace"),
    "kill-grace-1e308": (ITEMS + PROVIDER + "[stop]\nkill_grace = 1e308\n", "stop.kill_grace"),
    "grace-1e308": (ITEMS + PROVIDER + "[stop]\ngrace = 1e308\n", "stop.grace"),
    "grace-nan": (ITEMS + PROVIDER + "[stop]\ngrace = nan\n", "stop.grace"),
    "grace-inf": (ITEMS + PROVIDER + "[stop]\ngrace = inf\n", "stop.grace"),
    "call-timeout-huge-int": (
        ITEMS + '[provider]\ncommand = ["true"]\ncall_timeout = ' + HUGE_INT + "\n",
        "provider.call_timeout",
    ),
    "idle-timeout-huge-int": (
        ITEMS + '[provider]\ncommand = ["true"]\nidle_timeout = ' + HUGE_INT + "\n",
        "provider.idle_timeout",
    ),
    "verify-timeout-huge-int": (
        ITEMS + PROVIDER + '[[verify]]\ncommand = ["true"]\ntimeout = ' + HUGE_INT + "\n",
        "verify[0].timeout",
    ),
    "hook-timeout-huge-int": (
        ITEMS + PROVIDER + '[[hooks.post_session]]\ncommand = ["true"]\ntimeout = ' + HUGE_INT + "\n",
        "hooks.post_session[0].timeout",
    ),
    "repair-huge-int": (ITEMS + PROVIDER + "[repair]\nmax_attempts = " + HUGE_INT + "\n", "repair.max_attempts"),
    "backoff-huge-int": (ITEMS + PROVIDER + "[retry]\nbackoff = " + HUGE_INT + "\n", "retry.backoff"),
    "cap-huge-int": (ITEMS + PROVIDER + "[output]\ncap_bytes = " + HUGE_INT + "\n", "output.cap_bytes"),
    "kill-grace-huge-int": (ITEMS + PROVIDER + "[stop]\nkill_grace = " + HUGE_INT + "\n", "stop.kill_grace"),
    "nested-5000": ("items = " + "[" * 5000 + "]" * 5000 + "\n" + PROVIDER, "(toml)"),
    "nul-in-argv": (ITEMS + '[provider]\ncommand = ["true", "a\\u0000b"]\n', "provider.command[1]"),
    "nul-in-item": ('items = ["a\\u0000b"]\n' + PROVIDER, "items[0]"),
    "one-mb-argument": (ITEMS + '[provider]\ncommand = ["true", "' + "x" * (1024 * 1024) + '"]\n', "(file)"),
    "200-kb-argument": (
        ITEMS + '[provider]\ncommand = ["true", "' + "x" * (200 * 1024) + '"]\n',
        "provider.command[1]",
    ),
    "item-too-long-once-substituted": (
        'items = ["' + "i" * 70_000 + '"]\n[provider]\ncommand = ["echo", "{item}{item}"]\n',
        "provider.command[1]",
    ),
}


def run_bad(tmp_path, spec, *extra):
    t0 = time.monotonic()
    proc = R.runner("run", spec, "--run-dir", tmp_path / "run", "--detach", *extra, timeout=30)
    elapsed = time.monotonic() - t0
    assert proc.returncode == Exit.BAD_INPUT, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("runner: "), proc.stderr[-2000:]
    assert len(lines[0]) < 1000, len(lines[0])
    assert not (tmp_path / "run").exists()
    assert elapsed < 10, elapsed
    return lines[0]


@pytest.mark.parametrize("case", sorted(RANGE_CASES))
def test_out_of_range_spec_values_are_refused_at_load(tmp_path, case):
    """Path: spec validation (runner/files/spec.py, limits in runner/defaults.py). Every value
    that used to be accepted and then crash the stop (OverflowError, RecursionError,
    E2BIG) is refused with its key. Ablation: drop the maximum check in _Reader.number
    and kill_grace = 3e6 is accepted (red)."""
    text, key = RANGE_CASES[case]
    spec = tmp_path / "spec.toml"
    spec.write_text(text)
    line = run_bad(tmp_path, spec)
    assert f": {key}: expected" in line, line


@pytest.mark.parametrize("kind", ["dev-zero", "dev-urandom", "fifo", "directory", "huge"])
def test_a_spec_path_that_is_not_a_regular_file_is_refused_at_once(tmp_path, kind):
    """Path: load_bytes reads the spec through untrusted.read_bytes (following a link the
    user named, never blocking). /dev/zero used to run out of memory after 8-13 s and a
    FIFO hung `runner run`; both are now one line within the bound."""
    spec = tmp_path / "spec.toml"
    if kind == "dev-zero":
        os.symlink("/dev/zero", spec)
    elif kind == "dev-urandom":
        os.symlink("/dev/urandom", spec)
    elif kind == "fifo":
        os.mkfifo(spec)
    elif kind == "directory":
        spec.mkdir()
    else:
        with open(spec, "wb") as f:
            f.truncate(defaults.SPEC_MAX_BYTES + 1)
    line = run_bad(tmp_path, spec)
    assert ": (file): expected a regular file" in line, line


@pytest.mark.parametrize(
    "key,needle",
    [("bad\nkey", "bad\\nkey"), ("bad\rkey", "bad\\rkey"), ("\x1b[31mred", "\\x1b[31mred"), ("k" * 10_000, "...")],
    ids=["newline", "carriage-return", "escape", "ten-kb"],
)
def test_an_unknown_key_is_named_on_one_escaped_short_line(tmp_path, key, needle):
    """Path: SpecError renders user text through errors.printable: control characters
    escaped (never raw on the terminal), cut to about 200 characters."""
    spec = tmp_path / "spec.toml"
    spec.write_text(ITEMS + PROVIDER + f"[stop]\n{_toml_key(key)} = 1\n")
    line = run_bad(tmp_path, spec)
    assert needle in line and "\x1b" not in line and "\r" not in line, line


def _toml_key(key):
    escaped = key.encode("unicode_escape").decode().replace('"', '\\"').replace("\\x1b", "\\u001b")
    return f'"{escaped}"'


def test_an_empty_run_dir_is_refused(tmp_path):
    """Path: `--run-dir ""` used to make the current directory the run directory."""
    spec = tmp_path / "spec.toml"
    spec.write_text(ITEMS + PROVIDER)
    for argv in (["run", spec, "--run-dir", ""], ["stop", "--run-dir", ""], ["status", "--run-dir", ""]):
        proc = subprocess.run([*R.RUNNER, *map(str, argv)], cwd=tmp_path, capture_output=True, text=True, timeout=30)
        assert proc.returncode == Exit.BAD_INPUT, (argv, proc.stderr)
        assert len(proc.stderr.splitlines()) == 1 and "--run-dir" in proc.stderr
    assert not (tmp_path / "spec.toml.d").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["spec.toml"]


# -- races and the codes they answer with ----------------------------------------------

STOP = {"kill_grace": 0.2, "grace": 10.0}


def live_run(runs, victim, name="run"):
    return runs.live_trap_term(victim, stop=STOP, name=name)


def test_a_stop_racing_stop_now_is_never_reported_as_forced(runs, victim):
    """Path: `runner stop` and `runner stop --now` at once. The --now kills the engine and
    records the forced stop; the hard stop, finding it recorded by another stopper, exits
    OK and says so, never STOP_FORCED (it forced nothing). Exactly one run-stop."""
    for i in range(3):
        rd, v = live_run(runs, victim, name=f"run{i}")
        results = {}

        def go(name, *flags, results=results, rd=rd):
            results[name] = R.runner("stop", *flags, "--run-dir", rd.path, timeout=60)

        threads = [threading.Thread(target=go, args=("hard",)), threading.Thread(target=go, args=("now", "--now"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # As two `--now` at once (test_stop_edges): a busy machine may start one stopper
        # only after the other's whole stop; it then finds the end recorded and says so.
        for name, proc in results.items():
            assert proc.returncode in (Exit.OK, Exit.NO_LIVE_RUN), (name, proc.returncode, proc.stderr)
            if proc.returncode == Exit.NO_LIVE_RUN:
                assert "end already recorded" in proc.stderr, (name, proc.stderr)
        assert Exit.OK in {p.returncode for p in results.values()}, results
        stops = R.events(rd, "run-stop")
        assert len(stops) == 1, stops
        assert v.wait_gone(5)
        R.wait_engine_exit(rd)


def test_two_resumes_at_once_start_exactly_one_engine(runs, victim):
    """Path: lifecycle.resume takes the engine lock first and hands it to the new engine
    (inherited descriptor), so it is never free in between. Of two concurrent resumes,
    one starts an engine (OK), the other is REFUSED; the attempt goes up by exactly one."""
    rd, v = live_run(runs, victim)
    assert R.runner("stop", "--now", "--run-dir", rd.path).returncode == Exit.OK
    assert v.wait_gone(5)
    before = R.state(rd).attempt
    results = []
    barrier = threading.Barrier(2)

    def go():
        barrier.wait()
        results.append(R.runner("resume", "--run-dir", rd.path, "--detach", timeout=60))

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(p.returncode for p in results)
    assert codes == sorted([Exit.OK, Exit.REFUSED]), [(p.returncode, p.stderr) for p in results]
    refused = next(p for p in results if p.returncode == Exit.REFUSED)
    assert len(refused.stderr.splitlines()) == 1
    assert R.state(rd).attempt == before + 1
    assert len(R.events(rd, "resume")) == 1
    assert R.runner("stop", "--now", "--run-dir", rd.path).returncode == Exit.OK


def test_wait_on_a_run_whose_engine_was_killed_says_crashed(runs, victim):
    """Path: waiting.run_outcome. `runner wait` on a run whose engine died by
    SIGKILL (no end recorded) exits CRASHED with one line saying resume continues it,
    not INTERNAL with nothing printed."""
    rd, v = live_run(runs, victim)
    engine = identity_file.read(rd.engine_identity)
    os.kill(engine.pid, signal.SIGKILL)
    assert signals.wait_gone(engine, 5)
    proc = R.runner("wait", "--run-dir", rd.path)
    assert proc.returncode == Exit.CRASHED, (proc.returncode, proc.stderr)
    (line,) = proc.stderr.splitlines()
    assert "resume" in line and line.startswith("runner: ")
    assert R.runner("stop", "--now", "--run-dir", rd.path).returncode in (Exit.OK,)
    assert v.wait_gone(5)


def test_wait_on_a_dead_run_with_a_damaged_state_says_damaged(runs, victim):
    """Path: waiting.run_outcome reads state.json through untrusted.py: `runner wait`
    on a run whose engine is dead and whose state.json is a FIFO exits DAMAGED with one
    line naming state.json (never a hang, never 70)."""
    rd, v = live_run(runs, victim)
    assert R.runner("stop", "--now", "--run-dir", rd.path).returncode == Exit.OK
    assert v.wait_gone(5)
    original = rd.state.read_bytes()
    rd.state.unlink()
    os.mkfifo(rd.state)
    try:
        proc = R.runner("wait", "--run-dir", rd.path, timeout=30)
    finally:
        rd.state.unlink()
        rd.state.write_bytes(original)
    assert proc.returncode == Exit.DAMAGED, (proc.returncode, proc.stderr)
    (line,) = proc.stderr.splitlines()
    assert "state.json" in line and "FIFO" in line
