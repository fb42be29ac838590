"""A call killed by the kernel's out-of-memory killer is named as such (issue 26.5): in
the journal (`killed_by: "oom"`), in the item's failure reason, and in `runner status`,
never as a bare "rc -9". A real OOM kill: the provider moves itself into a memory
cgroup of the test's own with a small limit, then allocates past it."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import runs as R

from runner.files.rundir import RunDir
from runner.proc import cgroup as cgroupmod
from runner.proc import oom

LIMIT = 64 * 1024 * 1024
HOG = "x = b'x' * (1 << 30)"  # a gigabyte, written: past the limit, the OOM killer's


@pytest.fixture
def memory_cgroup():
    """A memory cgroup of the test's own with a LIMIT: cgroup v1's memory controller, or a
    cgroup v2 one where the root delegates `memory`; its `cgroup.procs` path. Removed at
    teardown (its member, OOM-killed, is gone by then)."""
    name = f"runner-test-oom-{os.getpid()}-{R.new_run_id()}"
    v1 = Path("/sys/fs/cgroup/memory")
    root = cgroupmod.cgroup2_root()
    if os.access(v1, os.W_OK) and (v1 / "memory.limit_in_bytes").exists():
        path = v1 / name
        path.mkdir()
        (path / "memory.limit_in_bytes").write_text(f"{LIMIT}\n")
    elif root is not None and "memory" in (root / "cgroup.subtree_control").read_text().split():
        path = root / name
        path.mkdir()
        (path / "memory.max").write_text(f"{LIMIT}\n")
        if (path / "memory.swap.max").exists():
            (path / "memory.swap.max").write_text("0\n")
    else:
        pytest.skip("no memory cgroup to put a limit on (cgroup v1 memory, or v2 with `memory` delegated)")
    try:
        yield path / "cgroup.procs"
    finally:
        deadline = time.monotonic() + 10
        while True:
            try:
                path.rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)


def test_an_out_of_memory_kill_is_named_as_such(runs, memory_cgroup):
    """Path: oom.killed_by (child.run_child reads the OOM killer's count before and after
    each call: the run's cgroup's memory.events, else /proc/vmstat) through the engine's
    records (session-end `killed_by`, item-failed's reason) to `runner status`
    (overview's failure text, status --json's failure.killed_by). Ablation: `oom-named`
    (the call is "killed by SIGKILL": red)."""
    script = f'echo $$ > "$1" && exec "{sys.executable}" -c "{HOG}"'
    rd = runs.start(runs.spec(provider=R.sh(script, str(memory_cgroup))))
    runs.wait_engine_exit(rd)
    (end,) = runs.events(rd, "session-end")
    assert (end["outcome"], end["rc"], end["killed_by"]) == ("failed", -9, oom.OOM), end
    (failed,) = runs.events(rd, "item-failed")
    assert "out of memory" in failed["reason"], failed
    info = json.loads(runs.runner("status", "--json", "--run-dir", rd.path).stdout)
    (item,) = info["items"]
    assert item["failure"]["killed_by"] == oom.OOM, item
    text = runs.runner("status", "--run-dir", rd.path).stdout
    assert "out of memory" in text and "rc -9" not in text, text


def test_a_signal_is_named_not_numbered():
    """Unit: oom.killed_by names a signal death by its signal, a SIGKILL by the OOM
    killer as such (its count rose during the call), and nothing for an exit."""
    assert oom.killed_by(-9, 3, 4) == oom.OOM
    assert oom.killed_by(-9, 3, 3) == "SIGKILL"
    assert oom.killed_by(-15, 3, 4) == "SIGTERM"
    assert oom.killed_by(1, 3, 4) is None and oom.killed_by(None, None, None) is None
    assert "out of memory" in oom.describe(oom.OOM) and oom.describe("SIGTERM") == "killed by SIGTERM"


def test_an_oom_kill_of_any_process_of_the_call_is_named(runs, memory_cgroup, tmp_path):
    """Path: oom.call_kills (issue 38.5): the OOM-kill count of the memory cgroup the
    call's processes are in (the run's cgroup's memory.events where the memory controller
    runs there; else the engine's own memory cgroup, which its calls inherit: v2
    memory.events or v1 memory.oom_control), read before and after each call. The run's
    engine is started inside a memory-limited cgroup (a container's limit); the provider
    is `bash -c 'python3 -c HOG; exit $?'`: the kernel kills the child, not the leader,
    which exits 137. The journal's session-end says `oom_kills: 1`, the item's reason and
    `runner status` "out of memory (the kernel killed 1 process)". Ablation:
    `oom-from-memory-events` (nothing said of memory: red)."""
    limit = memory_cgroup.parent / (
        "memory.limit_in_bytes" if (memory_cgroup.parent / "memory.limit_in_bytes").exists() else "memory.max"
    )
    limit.write_text(f"{256 * 1024 * 1024}\n")  # room for the engine; the child's gigabyte is past it
    spec = runs.spec(provider=["bash", "-c", f'"{sys.executable}" -c "{HOG}"; exit $?'], stop={"containment": "group"})
    run_dir = tmp_path / "run"
    runs.started.append(run_dir)
    started = subprocess.run(
        ["sh", "-c", 'echo $$ > "$1" && shift && exec "$@"', "sh", str(memory_cgroup)]
        + [*R.RUNNER, "run", str(spec), "--run-dir", str(run_dir), "--detach"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 0, started.stderr
    rd = RunDir(run_dir)
    runs.wait_engine_exit(rd)
    (end,) = runs.events(rd, "session-end")
    assert (end["outcome"], end["rc"], end["killed_by"], end.get("oom_kills")) == ("failed", 137, None, 1), end
    (failed,) = runs.events(rd, "item-failed")
    assert "out of memory (the kernel killed 1 process)" in failed["reason"], failed
    info = json.loads(runs.runner("status", "--json", "--run-dir", rd.path).stdout)
    (item,) = info["items"]
    assert item["failure"]["oom_kills"] == 1, item
    text = runs.runner("status", "--run-dir", rd.path).stdout
    assert "out of memory (the kernel killed 1 process)" in text, text
