"""The kit names the right party, in one line with a documented code (issue 40, items 2, 3
and 5): a stop command that cannot run or fails is the stopper's fault (exit 4, its code and
stderr's last line on the row), a launcher that exits before the handshake is supported, and
every refusal (usage, an adapter that cannot be imported, an output that cannot be written)
is exit 2 before anything runs, with no traceback and nothing written."""

import json
import re

import pytest

from pytest_stoplatency.kit import verdict


def _one_line_refusal(got, message):
    assert got.returncode == verdict.USAGE, got.stdout + got.stderr
    assert "Traceback" not in got.stderr and message in got.stderr.splitlines()[-1], got.stderr
    assert "round" not in got.stderr  # refused before the first sample


@pytest.mark.parametrize(
    "args, message",
    [
        (["--start", "sleep 1000", "--stop", "kill {pid}"], "--start: the command must contain {argv}"),
        (["--stop", "kill -9 1234"], "--stop: the command must contain {pid} or {pgid}"),
        (["--stop", "kill {pid}", "--stop-timeout", "0"], "--stop-timeout"),
        (["--stop", "kill {pid}", "--stop-timeout", "nan"], "--stop-timeout"),
    ],
)
def test_usage_errors_of_the_commands(kit, args, message):
    """Path: cli.parse: the placeholders and --stop-timeout are checked before anything runs."""
    _one_line_refusal(kit(*args), message)
    assert list(kit.work.iterdir()) == []


def test_an_adapter_whose_import_raises_is_a_usage_error_in_one_line(kit, tmp_path):
    """Path: load.stopper_class: whatever the user's module raises on import is one line, 2."""
    (tmp_path / "broken_adapter.py").write_text("raise RuntimeError('no config here')\n")
    got = kit("--stopper", "broken_adapter:Stop", cwd=tmp_path)
    _one_line_refusal(got, "--stopper broken_adapter:Stop: cannot load it: RuntimeError: no config here")
    assert list(kit.work.iterdir()) == []


def test_an_adapter_whose_constructor_raises_is_a_usage_error_in_one_line(kit, tmp_path):
    """Path: cli.main builds each adapter before the first sample: its exception is one line, 2."""
    (tmp_path / "picky_adapter.py").write_text(
        "from pytest_stoplatency.kit import Stopper\n\n"
        "class Stop(Stopper):\n"
        "    def __init__(self, work, kill_grace):\n"
        "        raise ValueError('needs a license key')\n"
    )
    got = kit("--stopper", "picky_adapter:Stop", cwd=tmp_path)
    _one_line_refusal(got, "--stopper: cannot build the adapter: ValueError: needs a license key")
    assert list(kit.work.iterdir()) == []


@pytest.mark.parametrize("opt", ["--json", "--markdown", "--svg"])
def test_an_output_that_cannot_be_written_is_refused_before_the_first_sample(kit, tmp_path, opt):
    """Path: report.unwritable, from cli.parse: a path under a regular file, and a directory,
    are refused (2) before any sample; no stray .tmp is left."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for path, why in ((blocker / "out", "is not a directory"), (tmp_path, "is a directory")):
        got = kit("--stop", "kill -9 {pid}", "--kinds", "cooperative", opt, path)
        _one_line_refusal(got, f"{opt} {path}: cannot be written: ")
        assert why in got.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "work"]
    assert list(kit.work.iterdir()) == []


@pytest.mark.parametrize(
    "stop, said",
    [
        ("nosuchstopper {pid}", "the stop command could not run (exit 127): "),
        ("kill -9 {pid}; echo stopped it, but >&2; echo said no >&2; exit 3", "the stop command exited 3: said no"),
    ],
)
def test_a_failing_stop_command_is_the_stoppers_fault(kit, tmp_path, stop, said):
    """Path: command.Command.stop's code and stderr, measure.sample's failed sample: exit 4,
    the code and stderr's last line on the row, never ORPHANED (even where the victim lives
    on because the stop could not run)."""
    out = tmp_path / "f.json"
    got = kit("--stop", stop, "--kinds", "cooperative", "--json", out)
    assert got.returncode == verdict.FAILED, got.stdout + got.stderr
    row = next(line for line in got.stdout.splitlines() if line.strip().startswith("cooperative"))
    assert f"FAILED: stop: {said}" in row and "ORPHANED" not in got.stdout
    if "127" in said:
        assert "not found" in row
    (r,) = json.loads(out.read_text())["stoppers"][0]["rows"]
    assert r["verdict"] == "failed"


@pytest.mark.parametrize("start", ["setsid -f {argv}", 'sh -c "{argv} &"'])
def test_a_launcher_that_exits_before_the_handshake_is_supported(kit, start):
    """Path: command.Command._launched: the start command exits 0 before the victim's
    handshake; the victim is found by its handshake, {pgid} is the victim's own group,
    and the kind is stopped whole. Ablation launcher-that-exits (every sample fails: the
    start command "exited 0 before the victim's handshake")."""
    got = kit("--start", start, "--stop", "kill -KILL -{pgid}", "--kinds", "cooperative,python-trap-kids")
    assert got.returncode == verdict.OK, got.stdout + got.stderr
    rows = [line for line in got.stdout.splitlines() if line.startswith("  ") and "stopped whole" in line]
    assert len(rows) == 2, got.stdout


def test_a_launcher_that_leaves_no_victim_fails_at_once(kit):
    """Path: command.Command._launched: a start command that exits 0 and left nothing alive
    fails its first sample at once, and the stopper's later samples are not started."""
    got = kit("--start", "true {argv}", "--stop", "kill {pid}", "--kinds", "cooperative,trap-term")
    assert got.returncode == verdict.FAILED, got.stdout + got.stderr
    assert "the start command exited 0 and left no process that could become the victim" in got.stdout
    assert "not started: the start command brought no victim up in an earlier sample" in got.stdout


def test_small_things_a_kind_once_no_p95_of_one_sample_and_the_grace_placeholder(kit, tmp_path):
    """Path: cli.parse's kinds (each once), report.rows' p95 (none below P95_MIN_N latencies)
    and command.Command's {grace} (the kill grace, in seconds)."""
    out = tmp_path / "s.json"
    got = kit(
        "--stop", "test {grace} = 0.3 && kill -9 {pid}", "--kill-grace", "0.3",
        "--kinds", "cooperative,cooperative", "--json", out,
    )  # fmt: skip
    assert got.returncode == verdict.OK, got.stdout + got.stderr
    cells = [re.split(r"\s{2,}", line.strip()) for line in got.stdout.splitlines() if line.startswith("  ")]
    heads, rows = cells[0], cells[1:]
    assert [r[0] for r in rows] == ["cooperative"]
    assert rows[0][heads.index("p95")] == "-" and rows[0][heads.index("max")] != "-"


def test_a_start_command_that_fails_is_named_with_its_code_and_stderr(kit):
    """Path: command.Command._up: a start command that exits non-zero before the handshake
    fails its sample with its code and the last line of its stderr (a file, never a pipe
    a child could hold open)."""
    got = kit("--start", "sh -c 'echo starting >&2; echo no such image >&2; exit 3' {argv}", "--stop", "kill {pid}",
              "--kinds", "cooperative")  # fmt: skip
    assert got.returncode == verdict.FAILED, got.stdout + got.stderr
    assert "start: the start command exited 3 before the victim's handshake: no such image" in got.stdout
