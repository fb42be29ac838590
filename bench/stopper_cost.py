"""The stopper's own cost (issue 26.7): `runner stop --now` on a cooperative run, from
the command's start to its exit, beside a bare `python -c pass` of the same interpreter
(the venv's), alternating, `n` times each. Each `--now` gets a fresh detached run whose
provider is a cooperative victim (it dies at the first SIGTERM), up before the command
starts. A sample: the command's wall time and its CPU time (user + system, from
os.wait4; a loaded machine changes it least). Shown as figures: the goal of two Python
start-ups in all is retired (it is below the floor this part measures).

Where the time goes, profiled (runner/control/stop.py's steps; docs/stop-latency.md):
the interpreter's start-up and the modules' import, the request, the kill (which waits
for the engine's own records: it is a process of the run), the record. Each `--now`
sample is split at two events: the request lodged (its `t`, read from the copy the
engine archived when it took it) and the engine gone (a pidfd the bench holds on it):
the stopper's part before the request, the engine's own stop (its kill, its records and
its way out of its cgroup) and the stopper's part after it. The floor: a start-up with
MINIMAL imported, plus the engine's own stop, is what a stopper that did nothing but
import what reading a run needs would take.
"""

from __future__ import annotations

import json
import os
import select
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pytest_stoplatency.kit import zoo
from runner.files.rundir import RunDir

RUNNER = [sys.executable, "-m", "runner"]
N = 15


def stopper() -> list[str]:
    """The command a user types: the installed `runner` script beside the interpreter
    (pip's console script: `from runner.__main__ import entry`), else `python -m runner`,
    which also pays for runpy (importlib.util, contextlib: about 6 M instructions)."""
    script = os.path.join(os.path.dirname(sys.executable), "runner")
    return [script] if os.access(script, os.X_OK) else RUNNER


def _timed(argv: list[str]) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode


def _timed_stop(argv: list[str], rd: RunDir) -> tuple[float, float, int, float | None, float | None]:
    """One `--now`: wall, CPU and code as _timed, plus the request lodged and the engine
    gone, in seconds from the command's start (None where not seen). The request's `t`
    is the lodger's wall clock (time.time()): it is placed on the bench's monotonic
    clock through one pair of readings taken at the start."""
    engine = json.loads(rd.engine_identity.read_text())["pid"]
    engine_fd = os.pidfd_open(engine)
    try:
        wall0, t0 = time.time(), time.perf_counter()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        gone = None
        ready, _, _ = select.select([engine_fd], [], [], 60)
        if ready:
            gone = time.perf_counter() - t0
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    finally:
        os.close(engine_fd)
    proc.returncode = os.waitstatus_to_exitcode(status)
    lodged = None
    for taken in rd.archive.glob("*-stop-request.json"):
        try:
            lodged = json.loads(taken.read_text())["t"] - wall0
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode, lodged, gone


def _live_run(work: Path, i: int) -> RunDir:
    tree = zoo.Tree(zoo.VictimSpec("cooperative", "cooperative", "cooperative"), work / "trees")
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


MINIMAL = "import json, fcntl, select"
"""What any stopper in Python needs before it can act on a run: `json` (the run's identity
and state are JSON files), `fcntl` (its locks) and `select` (a wait on a pidfd). `json`
loads `re`, and `re` loads `enum`."""

IMPORTS = "from runner.__main__ import entry; import runner.cli, runner.control.stop"
"""The stop command's modules, imported and nothing run: where its time goes, start-up
and imports against the stop's own work (the steps and the waits)."""


def run(n: int, work: Path) -> dict[str, Any]:
    """`n` samples of each side, alternating; medians, the ratio of the medians. Beside
    them, `n` of the stop's imports alone (IMPORTS)."""
    work.mkdir(parents=True, exist_ok=True)
    bare: list[tuple[float, float]] = []
    now: list[tuple[float, float]] = []
    imports: list[tuple[float, float]] = []
    minimal: list[tuple[float, float]] = []
    codes: list[int] = []
    split: list[tuple[float, float, float]] = []  # before the request, the engine's own stop, after it
    command = stopper()
    for i in range(n):
        wall, cpu, _ = _timed([sys.executable, "-c", "pass"])
        bare.append((wall, cpu))
        wall, cpu, _ = _timed([sys.executable, "-c", IMPORTS])
        imports.append((wall, cpu))
        wall, cpu, _ = _timed([sys.executable, "-c", MINIMAL])
        minimal.append((wall, cpu))
        rd = _live_run(work, i)
        wall, cpu, code, lodged, gone = _timed_stop([*command, "stop", "--now", "--run-dir", str(rd.path)], rd)
        now.append((wall, cpu))
        codes.append(code)
        if lodged is not None and gone is not None:
            split.append((lodged, gone - lodged, wall - gone))
    bare_wall = statistics.median(w for w, _ in bare)
    now_wall = statistics.median(w for w, _ in now)
    bare_cpu = statistics.median(c for _, c in bare)
    now_cpu = statistics.median(c for _, c in now)
    return {
        "n": n,
        "command": os.path.basename(command[0]) if command is not RUNNER else "python -m runner",
        "bare_python": {"wall_median_s": bare_wall, "cpu_median_s": bare_cpu},
        "stop_now": {"wall_median_s": now_wall, "cpu_median_s": now_cpu},
        "imports_only": {
            "wall_median_s": statistics.median(w for w, _ in imports),
            "cpu_median_s": statistics.median(c for _, c in imports),
        },
        "startups": now_wall / bare_wall if bare_wall else None,
        "startups_cpu": now_cpu / bare_cpu if bare_cpu else None,
        "codes": sorted(set(codes)),
        "split": {
            "n": len(split),
            "to_request_median_s": statistics.median(x for x, _, _ in split) if split else None,
            "engine_stop_median_s": statistics.median(x for _, x, _ in split) if split else None,
            "after_engine_median_s": statistics.median(x for _, _, x in split) if split else None,
            "samples": split,
        },
        "minimal_imports": {
            "what": MINIMAL,
            "wall_median_s": statistics.median(w for w, _ in minimal),
            "cpu_median_s": statistics.median(c for _, c in minimal),
        },
        "floor_startups": (
            (statistics.median(w for w, _ in minimal) + statistics.median(x for _, x, _ in split)) / bare_wall
            if split and bare_wall
            else None
        ),
        "samples": {"bare_python": bare, "stop_now": now, "imports_only": imports, "minimal_imports": minimal},
        "loadavg_at_start": list(os.getloadavg()),
    }


def table(part: dict[str, Any]) -> str:
    ms = lambda x: f"{x * 1000:.1f} ms"  # noqa: E731
    b, s, i = part["bare_python"], part["stop_now"], part["imports_only"]
    return (
        "| command | wall (median) | CPU (median) |\n|---|---|---|\n"
        f"| `python -c pass` | {ms(b['wall_median_s'])} | {ms(b['cpu_median_s'])} |\n"
        f"| the stop's imports alone | {ms(i['wall_median_s'])} | {ms(i['cpu_median_s'])} |\n"
        f"| `runner stop --now`, cooperative run | {ms(s['wall_median_s'])} | {ms(s['cpu_median_s'])} |\n"
        f"| ratio (Python start-ups) | {part['startups']:.2f} | {part['startups_cpu']:.2f} |"
    ) + ("\n\n" + split_table(part) if part.get("split", {}).get("n") else "")


def split_table(part: dict[str, Any]) -> str:
    """Where a `--now`'s wall time goes, at its two events (medians of each span)."""
    ms = lambda x: f"{x * 1000:.1f} ms"  # noqa: E731
    sp = part["split"]
    return (
        f"| span of `runner stop --now` (n={sp['n']}) | wall (median) |\n|---|---|\n"
        + f"| its start to its request lodged (start-up, imports, proofs) | {ms(sp['to_request_median_s'])} |\n"
        + f"| the request lodged to the engine gone (the engine's own stop) | {ms(sp['engine_stop_median_s'])} |\n"
        + f"| the engine gone to its exit (its record step, its result) | {ms(sp['after_engine_median_s'])} |\n"
        + f"| `python -c '{part['minimal_imports']['what']}'` | {ms(part['minimal_imports']['wall_median_s'])} |\n"
        + f"| that plus the engine's own stop, in Python start-ups (the floor) | {part['floor_startups']:.2f} |"
    )


if __name__ == "__main__":
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="stop-cost-"))
    try:
        print(table(run(int(sys.argv[1]) if len(sys.argv) > 1 else N, where)))
    finally:
        zoo.sweep(where / "trees")
        zoo.forget_records()
