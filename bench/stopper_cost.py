"""The stopper's own cost (issue 26.7): `runner stop --now` on a cooperative run, from
the command's start to its exit, beside a bare `python -c pass` of the same interpreter
(the venv's), alternating, `n` times each. Each `--now` gets a fresh detached run whose
provider is a cooperative victim (it dies at the first SIGTERM), up before the command
starts. A sample: the command's wall time and its CPU time (user + system, from
os.wait4; a loaded machine changes it least). The goal is two Python start-ups in all.

Where the time goes, profiled (runner/control/stop.py's steps; docs/stop-latency.md):
the interpreter's start-up and the modules' import, the request, the kill (which waits
for the engine's own records: it is a process of the run), the record.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import trees
from runner.files.rundir import RunDir

RUNNER = [sys.executable, "-m", "runner"]
N = 15


def _timed(argv: list[str]) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode


def _live_run(work: Path, i: int) -> RunDir:
    tree = trees.Tree(trees.VictimSpec("cooperative", "cooperative", "cooperative"), work / "trees")
    spec = work / f"cost-{i}.toml"
    spec.write_text(f'items = ["a"]\n[provider]\ncommand = {json.dumps(tree.argv)}\n')
    rd = RunDir(work / f"cost-{i}")
    started = subprocess.run(
        [*RUNNER, "run", str(spec), "--run-dir", str(rd.path), "--detach"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    if started.returncode != 0:
        raise RuntimeError(f"run did not start: {started.stderr.strip()}")
    tree.adopt(timeout=30)
    return rd


def run(n: int, work: Path) -> dict[str, Any]:
    """`n` samples of each side, alternating; medians, the ratio of the medians."""
    work.mkdir(parents=True, exist_ok=True)
    bare: list[tuple[float, float]] = []
    now: list[tuple[float, float]] = []
    codes: list[int] = []
    for i in range(n):
        wall, cpu, _ = _timed([sys.executable, "-c", "pass"])
        bare.append((wall, cpu))
        rd = _live_run(work, i)
        wall, cpu, code = _timed([*RUNNER, "stop", "--now", "--run-dir", str(rd.path)])
        now.append((wall, cpu))
        codes.append(code)
    bare_wall = statistics.median(w for w, _ in bare)
    now_wall = statistics.median(w for w, _ in now)
    return {
        "n": n,
        "bare_python": {"wall_median_s": bare_wall, "cpu_median_s": statistics.median(c for _, c in bare)},
        "stop_now": {"wall_median_s": now_wall, "cpu_median_s": statistics.median(c for _, c in now)},
        "startups": now_wall / bare_wall if bare_wall else None,
        "codes": sorted(set(codes)),
        "samples": {"bare_python": bare, "stop_now": now},
        "loadavg_at_start": list(os.getloadavg()),
    }


def table(part: dict[str, Any]) -> str:
    ms = lambda x: f"{x * 1000:.1f} ms"  # noqa: E731
    b, s = part["bare_python"], part["stop_now"]
    return (
        "| command | wall (median) | CPU (median) |\n|---|---|---|\n"
        f"| `python -c pass` | {ms(b['wall_median_s'])} | {ms(b['cpu_median_s'])} |\n"
        f"| `runner stop --now`, cooperative run | {ms(s['wall_median_s'])} | {ms(s['cpu_median_s'])} |\n"
        f"| ratio (Python start-ups) | {part['startups']:.2f} | |"
    )


if __name__ == "__main__":
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="stop-cost-"))
    try:
        print(table(run(int(sys.argv[1]) if len(sys.argv) > 1 else N, where)))
    finally:
        trees.sweep(where / "trees")
        trees.forget_records()
