"""The dashboard's cost while a page is open (issue 20, goal 3): its server's CPU with
RUNS runs under its base directory and one client polling /api/runs the way the page
does (every poll_ms after the previous answer, on one keep-alive connection, sending back
the ETag it was given).

The runs are real: mostly completed, some failed and stopped, two live (a provider that
sleeps). Three sides, in the same run, on the same runs, one after the other:

- **previous**: the dashboard as it was before conditional requests (REFERENCE_COMMIT,
  taken from git), its page's polls;
- **unconditional**: this dashboard, polled without If-None-Match (a 200 and the whole
  body every time, its rows still kept per run);
- **conditional**: this dashboard, polled as its page polls (304 while nothing changed).

The CPU is the server process's own (user + system from /proc/PID/stat) over `seconds`,
after a warm-up, as a percentage of one core.

    python -m bench.dashboard [--runs 60] [--seconds 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

from pytest_stoplatency.kit import runs
from runner import defaults
from runner.files.rundir import RunDir

ROOT = Path(__file__).resolve().parent.parent
RUNS = 60
SECONDS = 20.0
WARMUP = 3.0
LIVE = 2
FAILED = 5
STOPPED = 3
REFERENCE_COMMIT = "c679c4f9235933cc4b2d7b7bf1f6d6e1c18bada7"
"""The last commit before conditional requests and per-run caching of live rows."""
SIDES = ("previous", "unconditional", "conditional")


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


def make_runs(base: Path, n: int, work: Path) -> list[Path]:
    """n real runs under `base`; returns the live ones (the caller stops them)."""
    base.mkdir(parents=True, exist_ok=True)
    specs = {
        "done": ('["true"]', 0.3),
        "failed": ('["false"]', 0.3),
        "live": ('["sleep", "3600"]', 0.3),
    }
    paths = {}
    for kind, (command, grace) in specs.items():
        spec = work / f"{kind}.toml"
        spec.write_text(f'items = ["a", "b", "c"]\n\n[provider]\ncommand = {command}\n\n[stop]\nkill_grace = {grace}\n')
        paths[kind] = spec
    live: list[Path] = []
    plan = ["live"] * LIVE + ["stopped"] * STOPPED + ["failed"] * FAILED
    plan += ["done"] * (n - len(plan))
    for i, kind in enumerate(plan):
        rd = base / f"run-{i:03d}"
        if kind in ("live", "stopped"):
            runs.start(paths["live"], rd)
            if kind == "stopped":
                runs.runner("stop", "--run-dir", rd)
            else:
                live.append(rd)
        else:
            runs.runner("run", paths[kind], "--run-dir", rd, timeout=60)
    return live


def _reference_tree(work: Path, commit: str = REFERENCE_COMMIT) -> Path | None:
    """`commit`'s runner/ package, extracted from git; None where git lacks it."""
    try:
        tar = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "runner"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if tar.returncode != 0:
        return None
    out = work / f"reference-{commit[:12]}"
    out.mkdir()
    with tarfile.open(fileobj=BytesIO(tar.stdout)) as t:
        t.extractall(out, filter="data")
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(out / "runner")], capture_output=True, timeout=120)
    return out


def _serve(base: Path, pythonpath: Path | None, err: Path) -> tuple[subprocess.Popen[str], str, int, str]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    with open(err, "w") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runner", "dashboard", "--runs-dir", str(base), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=f,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=str(pythonpath or ROOT),
        )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("dashboard: http://"):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the dashboard did not start: {line!r} {err.read_text()[-500:]}")
    url = line.split(" ", 1)[1].strip()
    hostport, token = url.removeprefix("http://").split("/?token=")
    host, port = hostport.rsplit(":", 1)
    return proc, host, int(port), token


def measure(base: Path, pythonpath: Path | None, conditional: bool, seconds: float, work: Path) -> dict[str, Any]:
    proc, host, port, token = _serve(base, pythonpath, work / "dashboard.err")
    poll = defaults.DASHBOARD_POLL
    try:
        conn = http.client.HTTPConnection(host, port, timeout=30)
        etag: str | None = None
        polls = not_modified = sent = 0
        cpu0 = t0 = None
        started = time.monotonic()
        while True:
            now = time.monotonic()
            if cpu0 is None and now - started >= WARMUP:
                cpu0, t0, polls, not_modified, sent = _cpu_seconds(proc.pid), now, 0, 0, 0
            if t0 is not None and now - t0 >= seconds:
                break
            headers = {"X-Runner-Token": token}
            if conditional and etag is not None:
                headers["If-None-Match"] = etag
            conn.request("GET", "/api/runs", headers=headers)
            resp = conn.getresponse()
            body = resp.read()
            if resp.status == 304:
                not_modified += 1
            elif resp.status == 200:
                etag = resp.getheader("ETag")
                sent += len(body)
            else:
                raise RuntimeError(f"/api/runs answered {resp.status}: {body[:200]!r}")
            polls += 1
            time.sleep(poll)  # the page: setTimeout(poll, pollMs) once it has rendered
        assert cpu0 is not None and t0 is not None
        cpu = _cpu_seconds(proc.pid) - cpu0
        wall = time.monotonic() - t0
        threads = _threads(proc.pid)
        conn.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    return {
        "cpu_percent": round(100 * cpu / wall, 2),
        "cpu_ms_per_poll": round(1000 * cpu / polls, 2) if polls else None,
        "polls_per_s": round(polls / wall, 2),
        "polls": polls,
        "not_modified": not_modified,
        "bytes_per_poll": round(sent / polls) if polls else None,
        "seconds": round(wall, 1),
        "threads": threads,
    }


def run(n_runs: int = RUNS, seconds: float = SECONDS) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="dash-bench-"))
    base = work / "runs"
    live: list[Path] = []
    out: dict[str, Any] = {"runs": n_runs, "live": LIVE, "poll_ms": round(defaults.DASHBOARD_POLL * 1000)}
    out["reference_commit"] = REFERENCE_COMMIT
    try:
        live = make_runs(base, n_runs, work)
        reference = _reference_tree(work)
        sides: dict[str, Any] = {}
        if reference is None:
            sides["previous"] = {"error": f"git has no {REFERENCE_COMMIT} here (a shallow clone?)"}
        else:
            sides["previous"] = measure(base, reference, False, seconds, work)
        sides["unconditional"] = measure(base, None, False, seconds, work)
        sides["conditional"] = measure(base, None, True, seconds, work)
        out["sides"] = sides
    finally:
        for rd in live:
            runs.runner("stop", "--now", "--run-dir", rd)
            runs.finish(RunDir(rd))
        shutil.rmtree(work, ignore_errors=True)
    return out


def table(part: dict[str, Any]) -> str:
    lines = [
        "| side | CPU (% of a core) | CPU per poll | polls/s | 304s | bytes per poll |",
        "|---|---|---|---|---|---|",
    ]
    for side in SIDES:
        s = part["sides"].get(side) or {}
        if "error" in s:
            lines.append(f"| {side} | {s['error']} | | | | |")
            continue
        lines.append(
            f"| {side} | {s['cpu_percent']} | {s['cpu_ms_per_poll']} ms | {s['polls_per_s']} | "
            f"{s['not_modified']}/{s['polls']} | {s['bytes_per_poll']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.dashboard", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=RUNS)
    ap.add_argument("--seconds", type=float, default=SECONDS)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    part = run(args.runs, args.seconds)
    print(table(part))
    if args.json:
        args.json.write_text(json.dumps(part, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
