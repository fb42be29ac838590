"""`python -m pytest_stoplatency conformance` against real stoppers: the verdict per kind,
the exit code, the JSON, markdown and SVG, a user's Stopper, and nothing left behind."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kit_helpers import KIT, left_under

from pytest_stoplatency.kit import cli, verdict

ESCAPING = ("setsid-escapee", "env-scrubber")  # out of the group and session: `timeout` cannot reach them
BOUND = "60"  # whole or not is what these tests prove; speed belongs in the benchmark


def _rows(path):
    doc = json.loads(path.read_text())
    return doc, {r["kind"]: r for s in doc["stoppers"] for r in s["rows"]}


def test_timeout_orphans_the_escapees_and_exits_non_zero(kit, tmp_path):
    """Path: the --start/--stop adapter (command.py) with `timeout -k`; the orphan scan after
    the stop (measure.sample) and the verdict (verdict.of_cell). Ablations kit-orphan-scan
    (no escapee counted: orphans 0) and kit-verdict-orphans (orphaned kinds called whole,
    exit 0) turn it red."""
    out = tmp_path / "t.json"
    kinds = ("cooperative", "python-trap-kids", *ESCAPING)
    got = kit(
        "--start", "timeout -k 1 7200 {argv}", "--stop", "kill -TERM {pid}", "--kinds", ",".join(kinds),
        "--bound", BOUND, "--json", out, "--svg", tmp_path / "t.svg", "--markdown", tmp_path / "t.md",
    )  # fmt: skip
    assert got.returncode == verdict.ORPHANED, got.stdout + got.stderr
    doc, rows = _rows(out)
    assert list(rows) == list(kinds)
    for kind in ESCAPING:
        assert rows[kind]["verdict"] == "orphaned" and rows[kind]["orphans"] == 1, rows[kind]
        assert "ORPHANED 1" in next(line for line in got.stdout.splitlines() if line.strip().startswith(kind))
    for kind in ("cooperative", "python-trap-kids"):
        assert rows[kind]["verdict"] == "whole" and rows[kind]["orphans"] == 0, rows[kind]
        assert rows[kind]["min_s"] <= rows[kind]["median_s"] <= rows[kind]["p95_s"] <= rows[kind]["max_s"]
    assert doc["exit_code"] == verdict.ORPHANED
    picture = (tmp_path / "t.svg").read_text()
    assert "<svg" in picture and "setsid-escapee" in picture
    assert "| setsid-escapee | 0/1 |" in (tmp_path / "t.md").read_text()


def test_runner_stops_every_kind_whole_and_exits_0(kit, tmp_path):
    """Path: the `runner` built-in adapter (adapters.RunnerHard) against the zoo's hardest
    kinds, two samples each: every kind stopped whole, exit 0."""
    out = tmp_path / "r.json"
    kinds = ("trap-term", "python-trap-kids", "double-fork", "pipe-holder", *ESCAPING)
    got = kit("--stopper", "runner", "--kinds", ",".join(kinds), "--repeat", "2", "--bound", BOUND, "--json", out)
    assert got.returncode == verdict.OK, got.stdout + got.stderr
    _, rows = _rows(out)
    assert {k: (r["verdict"], r["stopped"], r["n"]) for k, r in rows.items()} == {k: ("whole", 2, 2) for k in kinds}


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "kit"


def test_a_python_stopper_by_module_and_class(kit, tmp_path):
    """Path: --stopper module:Class (load.stopper_class), a user's Stopper that does not wait
    for the handshake itself (measure.sample adopts the tree): its group kill stops a
    forker whole and orphans the setsid escapee. The adapter is the guide's own example
    (examples/kit/test_kit_adapter.py)."""
    env = {**kit.env, "PYTHONPATH": os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")])}
    out = tmp_path / "u.json"
    got = subprocess.run(
        [*KIT, "--stopper", "test_kit_adapter:GroupReaper", "--kinds", "python-trap-kids,setsid-escapee"]
        + ["--kill-grace", "0.2", "--bound", BOUND, "--json", str(out)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert got.returncode == verdict.ORPHANED, got.stdout + got.stderr
    doc, rows = _rows(out)
    assert doc["stoppers"][0]["id"] == "test_kit_adapter:GroupReaper"
    assert rows["python-trap-kids"]["verdict"] == "whole"
    assert rows["setsid-escapee"]["verdict"] == "orphaned" and rows["setsid-escapee"]["orphans"] == 1


def test_a_latency_over_the_bound_has_its_own_code(kit, tmp_path):
    """Path: verdict.of_cell's bound: a trapping victim under `killpg` (TERM, the grace,
    KILL) is stopped whole, never before the grace, so a bound below it is exceeded."""
    got = kit("--stopper", "killpg", "--kinds", "trap-term", "--kill-grace", "0.5", "--bound", "0.2")
    assert got.returncode == verdict.OVER_BOUND, got.stdout + got.stderr
    assert "OVER BOUND" in got.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--start", "x {argv}"], "--start needs --stop"),
        ([], "nothing to measure"),
        (["--stopper", "nosuch"], "unknown stopper 'nosuch'"),
        (["--stopper", "json:nosuch"], "--stopper json:nosuch"),
        (["--stopper", "runner", "--kinds", "cooperative,nosuch"], "--kinds: unknown nosuch"),
        (["--stopper", "runner", "--repeat", "0"], "--repeat"),
    ],
)
def test_usage_errors_run_nothing(kit, args, message):
    """Path: cli.parse refuses before anything starts: exit 2, one line naming the fault."""
    got = kit(*args)
    assert got.returncode == 2 and message in got.stderr, got.stderr
    assert list(kit.work.iterdir()) == []


def test_help_texts_are_the_shared_constants(kit):
    """The option help is cli's constants (the docs quote the same)."""
    got = kit("--help")
    flat = " ".join(got.stdout.split())
    for text in (cli.HELP_STOP, cli.HELP_REPEAT, cli.HELP_JSON):
        assert " ".join(text.split()) in flat


def test_a_stopped_kit_leaves_nothing_behind(kit, tmp_path):
    """Path: the kit's SIGTERM handler unwinds through cli.main's finally (sweep of its trees)
    while a stop command hangs (command.Command.stop kills the stop command's group): the
    tree and the stop command's shell and child all go."""
    flag = kit.work / "stopping"  # in the hung command's argv: the scan below finds it too
    hang = f"{sys.executable} -c 'import time; time.sleep(600)' {flag}"
    proc = subprocess.Popen(
        [*KIT, "--kinds", "setsid-escapee", "--stop", f"touch {flag}; {hang} # {{pid}}"],
        env=kit.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not flag.exists():  # the event: the stop command has begun
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.02)
        assert left_under(kit.work)  # the tree is up and being stopped
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == verdict.INTERRUPTED
    assert left_under(kit.work) == []
