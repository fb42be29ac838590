"""Costs against the size of a run (issue 20): items per second as the number of items
grows, and the commands that read a run (stop, stop --now, status, list, logs) on a run
whose journal is large, beside the same commands on a fresh run.

- **items**: a spec of N items whose provider is `true`, run detached; the rate is taken
  from the journal the engine wrote (items done after the first, over the time between the
  first `item-done` and the last), over at most `window` seconds, after which the run is
  stopped. The engine's peak memory is its VmHWM, read every 0.2 s while it runs. Beside
  it the physical limit: a bare loop that spawns the same command the same way (its own
  session, its output to a file, waited for), as fast as it can, for the same window
  (bare_loop): the engine's rate over it is the share of the machine's spawning speed the
  runner keeps.
- **journal**: two live runs (provider `sleep`), one left fresh and one whose journal is
  padded, in its current attempt, with `hook-result` records (as the engine writes them)
  up to `size` bytes. On each: `runner status --json`, `runner list`, `runner logs`,
  `runner stop`, then `runner stop` again once it has stopped (the already-stopped path
  reads the journal for its run-stop); a second pair of runs takes `runner stop --now`.
  Each command's wall time and peak memory (ru_maxrss of that child alone, os.wait4).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_stoplatency.kit import runs
from runner.files.journal import read as read_journal
from runner.files.rundir import RunDir

ROOT = Path(__file__).resolve().parent.parent
ITEM_COUNTS = (100, 5_000, 20_000, 50_000)
"""The reference (100) and the sizes the goals name: at least 50 items a second at 5,000,
and at 20,000 at least 80 % of the 100-item rate under 64 MB (issue 20); the engine's
peak memory under 64 MB at 50,000 (issue 32)."""
WINDOW = 20.0
"""Most seconds one items run is given (20,000 items of `true` would take minutes)."""
JOURNAL_SIZES = (250 << 20, 1 << 30)
"""The issue's 250 MB (below the journal's cap, where a stop read it all) and 1 GiB."""
PAD_BLOCK = 8 << 20


def _engine_pid(rd: RunDir, deadline: float) -> int | None:
    while time.monotonic() < deadline:
        try:
            pid = json.loads(rd.engine_identity.read_text())["pid"]
            if isinstance(pid, int):
                return pid
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.01)
    return None


def _hwm_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _cpu_seconds(pid: int) -> float | None:
    """The process's own CPU time (user + system, not its children's)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_per_item(samples: list[tuple[float, float]], done: list[float]) -> float | None:
    """Engine CPU seconds per item between the first and the last sample that items
    were done in between (robust to the machine's load, unlike items per second)."""
    inside = [s for s in samples if done and done[0] <= s[0] <= done[-1]]
    if len(inside) < 2:
        return None
    (t0, c0), (t1, c1) = inside[0], inside[-1]
    count = sum(1 for t in done if t0 < t <= t1)
    return (c1 - c0) / count if count else None


BARE_LOOP = """import os, subprocess, sys, time
window, out = float(sys.argv[1]), sys.argv[2]
n, t0 = 0, time.monotonic()
while time.monotonic() - t0 < window:
    with open(out, "wb") as f:
        subprocess.Popen(["true"], stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                         start_new_session=True, close_fds=True).wait()
    n += 1
print(n / (time.monotonic() - t0))
"""
"""The bare loop: `true` spawned and waited for, one after the other, each in its own
session with its output in a file, as the engine runs a provider call (child.py), with
nothing else around it: no state, journal, check point or identity file."""


def bare_loop(work: Path, window: float) -> float:
    """Spawns a second of the bare loop, over `window` seconds (in a process of its own)."""
    proc = subprocess.run(
        [sys.executable, "-c", BARE_LOOP, str(window), str(work / "bare.log")],
        capture_output=True,
        text=True,
        timeout=window + 120,
        check=True,
    )
    return round(float(proc.stdout.strip()), 2)


def items_sample(n: int, work: Path, window: float) -> dict[str, Any]:
    spec = work / f"items-{n}-{len(list(work.glob('items-*.toml')))}.toml"
    names = ", ".join(f'"i{i:05d}"' for i in range(n))
    spec.write_text(f'items = [{names}]\n\n[provider]\ncommand = ["true"]\n')
    rd = runs.start(spec, work / spec.stem)
    peak = 0
    cpu: list[tuple[float, float]] = []
    try:
        pid = _engine_pid(rd, time.monotonic() + 60)
        deadline = time.monotonic() + window
        while rd.is_live() and time.monotonic() < deadline:
            if pid is not None:
                peak = max(peak, _hwm_kib(pid) or 0)
                used = _cpu_seconds(pid)
                if used is not None:
                    cpu.append((time.time(), used))
            time.sleep(0.2)
        if pid is not None:
            peak = max(peak, _hwm_kib(pid) or 0)
        completed = not rd.is_live()
    finally:
        runs.finish(rd, timeout=0.0)
    done = [r["t"] for r in read_journal(rd.journal) if r["event"] == "item-done"]
    rate = (len(done) - 1) / (done[-1] - done[0]) if len(done) > 1 and done[-1] > done[0] else None
    return {
        "items": n,
        "done": len(done),
        "completed": completed,
        "items_per_second": round(rate, 2) if rate else None,
        "engine_peak_mb": round(peak / 1024, 1) if peak else None,
        "engine_cpu_ms_per_item": round(per * 1000, 2) if (per := _cpu_per_item(cpu, done)) else None,
    }


MEASURE = """import os, sys, time
t0 = time.monotonic()
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print("MEASURED", time.monotonic() - t0, usage.ru_maxrss, os.waitstatus_to_exitcode(status), flush=True)
"""
"""Runs one command and reports its wall time, peak memory and exit code. A small process
of its own forks it: a child's ru_maxrss counts the memory of the process it was forked
from, which for the benchmark itself would be tens of MB."""


def timed(argv: list[str], cwd: Path | None = None) -> dict[str, Any]:
    """One command: its wall time, its own peak memory (ru_maxrss) and its exit code."""
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", MEASURE, *argv],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
        timeout=600,
    )
    lines = proc.stdout.strip().splitlines()
    _, seconds, rss, rc = lines[-1].split()
    text = "\n".join(lines[:-1]) + proc.stderr
    return {
        "seconds": round(float(seconds), 4),
        "max_rss_mb": round(int(rss) / 1024, 1),
        "rc": int(rc),
        "last_line": text.strip().splitlines()[-1][:200] if text.strip() else "",
    }


REPEATS = 3
"""Samples of each command that leaves the run as it was (the median is shown)."""


def repeated(argv: list[str]) -> dict[str, Any]:
    """The median sample of REPEATS, with every sample's time and the highest memory."""
    samples = sorted((timed(argv) for _ in range(REPEATS)), key=lambda x: x["seconds"])
    median = dict(samples[len(samples) // 2])
    median["samples_s"] = [x["seconds"] for x in samples]
    median["max_rss_mb"] = max(x["max_rss_mb"] for x in samples)
    return median


def pad(journal: str | Path, size: int) -> int:
    """Append `hook-result` records to the journal (whole lines, as the engine appends
    them) until it holds `size` bytes. Returns its size."""
    rec = {"event": "hook-result", "t": time.time(), "hook": "post_session", "index": 0, "item": "a"}
    line = (json.dumps({**rec, "outcome": "passed", "rc": 0}) + "\n").encode()
    block = line * (PAD_BLOCK // len(line))
    fd = os.open(journal, os.O_WRONLY | os.O_APPEND)
    try:
        have = os.fstat(fd).st_size
        while have < size:
            chunk = block if size - have >= len(block) else line * ((size - have) // len(line) + 1)
            os.write(fd, chunk)
            have += len(chunk)
        os.fsync(fd)
    finally:
        os.close(fd)
    return have


def _live_run(work: Path, name: str) -> RunDir:
    spec = runs.write_spec(work / f"{name}.toml", ["sleep", "600"], 1.0)
    rd = runs.start(spec, work / "runs" / name)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(rd.children.glob("*")):
        time.sleep(0.02)  # the provider is up: the run is in its session
    return rd


def journal_side(work: Path, name: str, size: int) -> dict[str, Any]:
    run = runs.RUNNER
    out: dict[str, Any] = {"name": name}
    a = _live_run(work, f"{name}-a")
    b = _live_run(work, f"{name}-b")
    try:
        if size:
            # In a child: the bench's own memory stays small, and with it what each
            # command's ru_maxrss counts from before its exec.
            code = "import sys; from bench.sizes import pad; pad(sys.argv[1], int(sys.argv[2]))"
            for rd in (a, b):
                subprocess.run([sys.executable, "-c", code, str(rd.journal), str(size)], check=True, cwd=ROOT)
            out["journal_bytes"] = a.journal.stat().st_size
        else:
            out["journal_bytes"] = a.journal.stat().st_size
        out["status"] = repeated([*run, "status", "--json", "--run-dir", str(a.path)])
        out["list"] = repeated([*run, "list", "--runs-dir", str(work / "runs")])
        out["logs"] = repeated([*run, "logs", "--run-dir", str(a.path)])
        out["stop"] = timed([*run, "stop", "--run-dir", str(a.path)])
        out["stop_stopped"] = repeated([*run, "stop", "--run-dir", str(a.path)])
        out["stop_now"] = timed([*run, "stop", "--now", "--run-dir", str(b.path)])
    finally:
        for rd in (a, b):
            runs.finish(rd)
    return out


COMMANDS = ("stop", "stop_now", "stop_stopped", "status", "list", "logs")


def run(
    counts: tuple[int, ...] = ITEM_COUNTS,
    window: float = WINDOW,
    journal_sizes: tuple[int, ...] = JOURNAL_SIZES,
    parts: tuple[str, ...] = ("items", "journal"),
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="size-bench-"))
    out: dict[str, Any] = {}
    try:
        if "items" in parts:
            # Each count twice, in alternating order, so the machine's load falls on each
            # alike; the row shown is the sample of the higher rate. The bare loop before,
            # between and after (the highest of the three: the machine's best).
            order = [*counts, *reversed(counts)]
            bare = [bare_loop(work, min(window, 10.0))]
            samples = []
            for i, n in enumerate(order):
                samples.append(items_sample(n, work, window))
                if i == len(counts) - 1:
                    bare.append(bare_loop(work, min(window, 10.0)))
            bare.append(bare_loop(work, min(window, 10.0)))
            rows = []
            for n in counts:
                mine = [x for x in samples if x["items"] == n]
                best = dict(max(mine, key=lambda x: x["items_per_second"] or 0))
                best["samples"] = mine
                rows.append(best)
            spawns = max(bare)
            for r in rows:
                rate = r["items_per_second"]
                r["of_bare_loop"] = round(rate / spawns, 3) if rate else None
            out["items"] = {"window": window, "rows": rows, "bare_loop_per_second": spawns, "bare_loop_samples": bare}
        if "journal" in parts:
            out["journal"] = {
                "fresh": journal_side(work, "fresh", 0),
                "large": [journal_side(work, f"large{i}", size) for i, size in enumerate(journal_sizes)],
            }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def items_table(part: dict[str, Any]) -> str:
    lines = [
        "| items | done in window | items/s | of the bare loop | engine CPU ms/item | engine peak MB |",
        "|---|---|---|---|---|---|",
    ]
    for r in part["rows"]:
        lines.append(
            f"| {r['items']:,} | {r['done']:,} | {r['items_per_second']} | {r.get('of_bare_loop')} "
            f"| {r['engine_cpu_ms_per_item']} | {r['engine_peak_mb']} |"
        )
    lines.append(f"bare loop: {part.get('bare_loop_per_second')} spawns/s")
    return "\n".join(lines)


def journal_table(part: dict[str, Any]) -> str:
    sides = [part["fresh"], *part["large"]]
    head = ["fresh run"] + [f"journal of {s['journal_bytes'] / (1 << 20):,.0f} MiB" for s in part["large"]]
    lines = ["| command | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for c in COMMANDS:
        cells = [f"{s[c]['seconds'] * 1000:.0f} ms, {s[c]['max_rss_mb']} MB, rc {s[c]['rc']}" for s in sides]
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(prog="python -m bench.sizes")
    ap.add_argument("--counts", default=",".join(map(str, ITEM_COUNTS)))
    ap.add_argument("--window", type=float, default=WINDOW)
    ap.add_argument("--journal-mib", default=",".join(str(s >> 20) for s in JOURNAL_SIZES))
    ap.add_argument("--parts", default="items,journal")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    doc = run(
        tuple(int(x) for x in a.counts.split(",")),
        a.window,
        tuple(int(x) << 20 for x in a.journal_mib.split(",")),
        tuple(a.parts.split(",")),
    )
    if "items" in doc:
        print(items_table(doc["items"]))
    if "journal" in doc:
        print(journal_table(doc["journal"]))
    if a.json:
        a.json.write_text(json.dumps(doc, indent=1) + "\n")
    sys.exit(0)
