"""Real runs for the benchmarks: a spec whose provider command is a victim tree, started
with `runner run --detach`, stopped with `runner stop`, and cleaned up after.

The command timed is the one a user types: the `runner` script installed beside this
interpreter (`python -m runner` where there is none).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from runner.files.rundir import RunDir
from runner.proc import reaper


def runner_command() -> list[str]:
    script = Path(sys.executable).with_name("runner")
    return [str(script)] if script.exists() else [sys.executable, "-m", "runner"]


RUNNER = runner_command()


def runner(*args: object, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RUNNER, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )


def write_spec(path: Path, provider: Sequence[str], kill_grace: float, channel: str | None = None) -> Path:
    """`channel`: the spec's `[stop] channel` ("signal", "file"); the default's when None."""
    stop = f"kill_grace = {kill_grace!r}\n" + (f"channel = {json.dumps(channel)}\n" if channel else "")
    path.write_text(f'items = ["a"]\n\n[provider]\ncommand = {json.dumps(list(provider))}\n\n[stop]\n{stop}')
    return path


def start(spec: Path, run_dir: Path, cwd: Path | None = None) -> RunDir:
    """`runner run --detach`; the RunDir once its engine is up."""
    proc = runner("run", spec, "--run-dir", run_dir, "--detach", cwd=cwd)
    if proc.returncode != 0:
        raise RuntimeError(f"runner run {spec} exited {proc.returncode}: {proc.stderr.strip()}")
    return RunDir(run_dir if cwd is None else cwd / run_dir)


def stop_all_args(runs_dir: Path) -> list[str] | None:
    """How this runner stops every live run under `runs_dir` from one command
    (`runner stop --all`, with `--runs-dir` where it has it); None without `--all`."""
    usage = runner("stop", "--help").stdout
    if "--all" not in usage:
        return None
    return ["--all", "--runs-dir", str(runs_dir)] if "--runs-dir" in usage else ["--all"]


_FORCED = re.compile(r"\bin (\d+(?:\.\d+)?) ?s\b")


def forced_seconds(output: str) -> float | None:
    """The forced phase's own time, as `runner stop --now` reports it ("... in 1.234s)")."""
    m = _FORCED.search(output)
    return float(m.group(1)) if m else None


def finish(rd: RunDir, timeout: float = 15.0) -> None:
    """Leave nothing of the run: wait for its engine to go; if it does not, stop it with
    `--now`; then kill whatever still carries its tag."""
    deadline = time.monotonic() + timeout
    while rd.is_live() and time.monotonic() < deadline:
        time.sleep(0.02)
    if rd.is_live():
        runner("stop", "--now", "--run-dir", rd.path)
    reaper.kill_tagged(rd.run_id, 0.0)
