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


def _engine_pid(rd):
    from runner.files import identity_file

    return identity_file.read(rd.engine_identity).pid


def _sigterm(runs, rd):
    import os
    import signal

    os.kill(_engine_pid(rd), signal.SIGTERM)


WAYS = {
    "stop": (lambda runs, rd: runs.runner("stop", "--run-dir", rd.path), "stopped with `runner stop`"),
    "now": (lambda runs, rd: runs.runner("stop", "--now", "--run-dir", rd.path), "stopped with `runner stop --now`"),
    "graceful": (
        lambda runs, rd: runs.runner("stop", "--graceful", "--run-dir", rd.path),
        "stopped gracefully with `runner stop --graceful`",
    ),
    "STOP file": (lambda runs, rd: rd.stop_file.touch(), "stopped gracefully by the STOP file"),
    "SIGTERM": (_sigterm, "stopped by SIGTERM (or SIGHUP) to its engine or to its `runner run`"),
}


@pytest.mark.parametrize("way", list(WAYS))
def test_status_names_the_command_or_control_that_stopped_the_run(runs, tmp_path, way):
    """Path: the stopper's request names its kind (stop_request.lodge), the engine
    journals the kind of the request it honored with its run-stop (StopController.asked,
    null when none asked: a bare SIGTERM, the STOP file), and words.stopped says it:
    `runner status` names `runner stop`, `--now`, `--graceful`, the STOP file or SIGTERM
    to the engine apart. Ablation status-names-the-command: `runner stop` reads as any
    signal again."""
    gate = tmp_path / "gate"
    spec = runs.spec(name=f"{way}.toml", items=("a", "b"), provider=runs.gated(gate), stop=STOP)
    rd = runs.start(spec, name="w")
    runs.wait_event(rd, "session-start", item="a")
    how, said = WAYS[way]
    how(runs, rd)
    if "graceful" in said:
        gate.touch()  # asked: the phase in flight ends, and the next check point stops the run
    runs.wait_engine_exit(rd)
    proc = runs.runner("status", "--run-dir", rd.path)
    assert proc.returncode == Exit.OK, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith(f"run {rd.run_id}: {said} (attempt 1"), first


@pytest.mark.parametrize(
    ("sig", "said"),
    [
        ("SIGTERM", "stopped by SIGTERM (or SIGHUP) to its engine or to its `runner run`"),
        ("SIGINT", "stopped with Ctrl-C in the terminal of `runner run`"),
    ],
)
def test_a_foreground_run_stopped_by_its_terminal_or_a_signal_names_no_command(runs, sig, said):
    """Path: Stop._asker: the foreground forwards its Ctrl-C or a SIGTERM it was sent
    through the same pipeline as `runner stop`, but no command asked: its request names
    no kind, and `runner status` does not say `runner stop`."""
    import signal

    spec = runs.spec(name="fg.toml", items=("a",), provider=["sleep", "600"], stop=STOP)
    proc, rd = runs.foreground(spec, name="fg")
    try:
        runs.wait_event(rd, "session-start", item="a")
        proc.send_signal(getattr(signal, sig))
        assert proc.wait(timeout=30) == Exit.STOPPED
    finally:
        if proc.poll() is None:
            runs.runner("stop", "--now", "--run-dir", rd.path)
        proc.communicate(timeout=30)
    runs.wait_engine_exit(rd)
    first = runs.runner("status", "--run-dir", rd.path).stdout.splitlines()[0]
    assert first.startswith(f"run {rd.run_id}: {said} (attempt 1"), first
