"""`runner stop --now` end to end: a real `runner run --detach` whose provider is each
kind of the victim zoo, stopped at once. These are the numbers a user feels; which route
did the killing is proven by the attributing tests of the process layer."""

import time
from pathlib import Path

import pytest

from pytest_stoplatency.victim import KINDS
from runner import defaults
from runner.exitcodes import Exit
from runner.proc import cgroup as cgroupmod

KILL_GRACE = 0.3
BOUND = 5.0

ZOO = list(KINDS)  # every victim kind the plugin has, new ones included


def _stop_now_against(runs, victim, stop_latency, kind, lang, kill_grace, label):
    prepared = victim.prepare(kind, lang=lang, cleanup=0.1)
    rd = runs.start(runs.spec(provider=prepared.argv, stop={"kill_grace": kill_grace}))
    runs.wait_event(rd, "phase-start", phase="session")
    v = prepared.adopt(timeout=10)
    started = time.monotonic()
    with stop_latency.measure(label, v, bound=BOUND):
        proc = runs.runner("stop", "--now", "--run-dir", rd.path)
    returned = time.monotonic() - started
    assert proc.returncode == Exit.OK, proc.stderr
    runs.wait_engine_exit(rd)
    assert not runs.tagged(rd.run_id), "a process with the run's tag outlived `runner stop --now`"
    stops = runs.events(rd, "run-stop")
    assert len(stops) == 1, stops
    st = runs.state(rd)
    assert st.stopped and st.status == "stopped"
    return rd, v, returned


@pytest.mark.parametrize("lang", ["python", "bash"])
@pytest.mark.parametrize("kind", ZOO)
def test_stop_now_reaches_every_victim_kind(runs, victim, stop_latency, kind, lang):
    """Path: `runner stop --now` (reaper.kill_everything: SIGTERM to every group of the run
    and the pid route at once, SIGKILL after kill_grace, tag sweep, cgroup kill) against
    each victim kind as the provider. Nothing of the victim's tree and nothing with the
    run's tag survives. The env-scrubber's grandchild (no tag, own session) is reachable
    only through the cgroup: killed by the mutation that deletes the cgroup kill."""
    if kind == "env-scrubber" and cgroupmod.cgroup2_root() is None:
        pytest.skip("no writable cgroup v2 hierarchy: the env-scrubber is out of reach by design")
    _stop_now_against(runs, victim, stop_latency, kind, lang, KILL_GRACE, f"runner stop --now / zoo / {kind} ({lang})")


def test_env_scrubber_grandchild_was_contained_by_the_cgroup(runs, victim, stop_latency):
    """Path: cgroup containment really ran on this machine: the env-scrubber's grandchild
    (no RUNNER_RUN_ID, its own session) sits in the run's work cgroup before the stop,
    which is why `cgroup.kill` reaches it."""
    if cgroupmod.cgroup2_root() is None:
        pytest.skip("no writable cgroup v2 hierarchy on this machine")
    prepared = victim.prepare("env-scrubber")
    rd = runs.start(runs.spec(provider=prepared.argv, stop={"kill_grace": KILL_GRACE, "containment": "cgroup"}))
    runs.wait_event(rd, "phase-start", phase="session")
    v = prepared.adopt(timeout=10)
    run_cgroup = rd.cgroup_file.read_text().strip()
    (scrubbed,) = [e for e in v.extras if e["pid"] != v.pid]
    with open(f"/proc/{scrubbed['pid']}/cgroup") as f:
        membership = [line.split(":", 2)[2].strip() for line in f if line.startswith("0::")]
    assert len(membership) == 1
    assert cgroupmod.cgroup2_root() / membership[0].lstrip("/") == Path(run_cgroup) / "work"
    with open(f"/proc/{scrubbed['pid']}/environ", "rb") as f:
        assert b"RUNNER_RUN_ID=" not in f.read()
    with stop_latency.measure("runner stop --now / env-scrubber via cgroup", v, bound=BOUND):
        proc = runs.runner("stop", "--now", "--run-dir", rd.path)
    assert proc.returncode == Exit.OK, proc.stderr
    runs.wait_engine_exit(rd)


@pytest.mark.stop_latency(bound=BOUND, label="runner stop --now / trap-term")
def test_stop_now_trap_term_default_kill_grace(runs, victim, stop_latency):
    """Path: `runner stop --now` at the default kill_grace against a trapping provider:
    the number a user feels, about kill_grace plus a small overhead."""
    _, _, returned = _stop_now_against(runs, victim, stop_latency, "trap-term", "python", defaults.KILL_GRACE, None)
    assert returned < defaults.KILL_GRACE + BOUND


def test_stop_now_trap_term_with_escapee_is_about_kill_grace(runs, victim, stop_latency):
    """Path: the acceptance case of `runner stop --now`: a provider that traps SIGTERM and
    has a grandchild that escaped its process group (setsid). Nothing with the run's tag
    is left, and the stop returns at the seconds scale of kill_grace (the exact figure is
    in the generated document, not asserted here)."""
    _, _, returned = _stop_now_against(
        runs, victim, stop_latency, "escapee", "python", KILL_GRACE, "runner stop --now / escapee"
    )
    assert returned < KILL_GRACE + BOUND
