"""The plugin's cost to a pytest session that does not use it (issue 20, goal 4).

The same one-test session (`def test_ok(): pass`, in a directory of its own, no
`--process-leaks`, no victim) run with the plugin installed and with it disabled
(`-p no:stoplatency`), alternating, `rounds` times each. Every other plugin stays as it
is, on both sides. A sample: the session's wall time, and its CPU time (user + system,
the session's own and its children's, from os.wait4), which a loaded machine changes
least. The cost is the median of the paired differences (with minus without).

Twice more (issue 28), `bytecode`: with writable byte code (PYTHONDONTWRITEBYTECODE unset: pytest
caches what it rewrites) and without (PYTHONDONTWRITEBYTECODE=1, as in many CI images and
containers, where pytest parses, rewrites and compiles every module it takes from source,
in every session, unless it finds a copy it cached before: the tree's own __pycache__ may
hold one from an earlier session with writable byte code).

What an unused session reads depends on the records other sessions left (docs/plugin.md,
"Turning it off"): with another session's records it imports its clean-up and reads their
owners' /proc/<pid>/stat. Where it can (root, unshare), each session runs in a mount namespace
of its own with an empty tmpfs over the record directory, on both sides: the figure is that of
a machine where no other session of the plugin runs, whatever runs beside the benchmark.
"records_isolated" says whether it could.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROUNDS = 30
PLUGIN = "stoplatency"
"""The plugin's entry-point name (pyproject.toml, pytest11): `-p no:stoplatency` disables it."""
TEST = "def test_ok():\n    pass\n"
RECORDS = f"/tmp/pytest-stoplatency-{os.getuid()}"
_PRIVATE = 'mkdir -p "$0" && mount -t tmpfs stoplatency-bench "$0" && exec "$@"'


def _isolation() -> list[str]:
    """The argv prefix that runs a session with an empty record directory ([] where none can)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return []
    probe = subprocess.run(["unshare", "-m", "sh", "-c", _PRIVATE, RECORDS, "true"], capture_output=True, timeout=30)
    return ["unshare", "-m", "sh", "-c", _PRIVATE, RECORDS] if probe.returncode == 0 else []


def _session(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, float, int]:
    """One pytest session: (wall seconds, CPU seconds, exit code)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(proc.pid, 0)  # its own rusage (and its children's), not ours
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode


BYTECODE = {"writable": None, "not_writable": "1"}
"""PYTHONDONTWRITEBYTECODE for each side of the `bytecode` part (None: unset)."""


def run(rounds: int = ROUNDS, *, bytecode: bool = True) -> dict[str, Any]:
    """The cost in this environment as it is, and (bytecode) with and without writable byte code."""
    out = _run(rounds, None)
    if bytecode:
        out["bytecode"] = {}
        for name, value in BYTECODE.items():
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            if value is not None:
                env["PYTHONDONTWRITEBYTECODE"] = value
            part = _run(rounds, env)
            out["bytecode"][name] = {k: v for k, v in part.items() if k not in ("test", "command")}
    return out


def _run(rounds: int, env: dict[str, str] | None) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="plugin-idle-bench-"))
    try:
        (work / "test_idle.py").write_text(TEST)
        prefix = _isolation()
        base = [*prefix, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_idle.py"]
        sides = {"installed": base, "disabled": [*base, "-p", f"no:{PLUGIN}"]}
        samples: dict[str, list[dict[str, Any]]] = {k: [] for k in sides}
        _session(sides["installed"], work, env)  # warm the page cache (and pytest's own cache); not counted
        for r in range(rounds):
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for side in order:
                wall, cpu, rc = _session(sides[side], work, env)
                samples[side].append({"wall_s": round(wall, 5), "cpu_s": round(cpu, 5), "rc": rc})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out: dict[str, Any] = {
        "rounds": rounds,
        "test": TEST,
        "command": "python -m pytest -q -p no:cacheprovider",
        "records_isolated": bool(prefix),
    }
    for side, got in samples.items():
        out[side] = {
            "wall_median_s": statistics.median(s["wall_s"] for s in got),
            "cpu_median_s": statistics.median(s["cpu_s"] for s in got),
            "codes": sorted({s["rc"] for s in got}),
            "samples": got,
        }
    pairs = list(zip(samples["installed"], samples["disabled"], strict=True))
    out["cost_wall_s"] = statistics.median(a["wall_s"] - b["wall_s"] for a, b in pairs)
    out["cost_cpu_s"] = statistics.median(a["cpu_s"] - b["cpu_s"] for a, b in pairs)
    # The noise: half the spread between the quartiles of the disabled side alone.
    q = statistics.quantiles([s["cpu_s"] for s in samples["disabled"]], n=4)
    out["noise_cpu_s"] = (q[2] - q[0]) / 2
    return out


def bytecode_table(part: dict[str, Any]) -> str:
    ms = lambda x: f"{x * 1000:.1f} ms"  # noqa: E731
    lines = [
        "| byte code | cost, wall (median of pairs) | cost, CPU (median of pairs) | noise (CPU) |",
        "|---|---|---|---|",
    ]
    for name, p in part["bytecode"].items():
        label = {"writable": "writable", "not_writable": "not writable (PYTHONDONTWRITEBYTECODE=1)"}[name]
        lines.append(f"| {label} | {ms(p['cost_wall_s'])} | {ms(p['cost_cpu_s'])} | ±{ms(p['noise_cpu_s'])} |")
    return "\n".join(lines)


def table(part: dict[str, Any]) -> str:
    ms = lambda x: f"{x * 1000:.1f} ms"  # noqa: E731
    lines = ["| session | wall (median) | CPU (median) | exit codes |", "|---|---|---|---|"]
    for side in ("installed", "disabled"):
        s = part[side]
        lines.append(f"| plugin {side} | {ms(s['wall_median_s'])} | {ms(s['cpu_median_s'])} | {s['codes']} |")
    lines.append(
        f"| cost (median of pairs) | {ms(part['cost_wall_s'])} | {ms(part['cost_cpu_s'])} "
        f"(noise ±{ms(part['noise_cpu_s'])}) | |"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(prog="python -m bench.plugin_idle")
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    part = run(ap.parse_args().rounds)
    print(table(part))
    print(bytecode_table(part))
