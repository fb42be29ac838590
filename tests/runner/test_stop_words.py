"""What a stop's line says of who asked (issue 42, item 5), against real runs: the
command or control that asked (`runner stop`, `runner stop --now`, the dashboard's Stop
and Stop now), never the journal's origin word ("origin signal")."""

import pytest

from runner.control import stop
from runner.events import Origin, StopKind
from runner.exitcodes import Exit

STOP = {"kill_grace": 0.3, "grace": 5.0}


def _live_run(runs, name):
    spec = runs.spec(name=f"{name}.toml", items=("a",), provider=["sleep", "600"], stop=STOP)
    rd = runs.start(spec, name=name)
    runs.wait_event(rd, "session-start", item="a")
    return rd


@pytest.mark.parametrize(
    ("flags", "said"), [((), "`runner stop`"), (("--now",), "`runner stop --now`")], ids=["stop", "now"]
)
def test_the_stop_line_names_the_command(runs, flags, said):
    """Path: stop_result.asked_by from the stopper's kind and the origin its engine
    recorded (the request this stopper lodged: `signal`). Ablation
    stop-line-names-command: the line no longer names the command."""
    rd = _live_run(runs, "run")
    proc = runs.runner("stop", *flags, "--run-dir", rd.path)
    assert proc.returncode == Exit.OK, proc.stderr
    (line,) = proc.stdout.splitlines()
    assert line.startswith(f"runner: run {rd.run_id} stopped with {said}: its engine stopped it"), line
    assert "origin" not in line


@pytest.mark.parametrize(("kind", "button"), [(StopKind.HARD, "Stop"), (StopKind.NOW, "Stop now")], ids=["stop", "now"])
def test_the_dashboards_stop_line_names_its_button(runs, kind, button):
    """Path: the dashboard's buttons run the same pipeline with origin `dashboard`
    (runner/dashboard/actions.py): the line names the button."""
    rd = _live_run(runs, "dash")
    result = stop.stop(rd, kind, origin=Origin.DASHBOARD)
    assert result.code == Exit.OK, result.message
    assert f"stopped from the dashboard ({button}): its engine stopped it" in result.message, result.message
