"""Costs against the number of runs under one directory (issue 32): with RUN_COUNTS real
finished runs under one base directory, each command that looks at all of them.

- `runner list`: wall time and peak memory (median of REPEATS, sizes.timed);
- `runner stop --all` with nothing live (it exits NO_LIVE_RUN, 6): the same;
- the dashboard's first `/api/runs` on a server just started (its first answer reads
  every run): wall time from the request to the last byte, median of REPEATS servers;
- the dashboard server's memory over POLLS polls back to back on one keep-alive
  connection, two runs live beside the finished ones: once as the page polls (the ETag
  sent back) and once without If-None-Match (every answer a 200 with the body); its
  VmRSS after the first poll, at the end, and its range over the polls.

Each on two sides, one after the other: **before**, the runner of REFERENCE_COMMIT
(taken from git, as bench/dashboard.py does), and **now**, this tree; both run as
`python -m runner` with their own tree first on the path, each on runs its own runner
made (the same spec, the same number). Each command's own CPU time is kept beside its
wall time: a loaded machine stretches the second much more than the first.

    python -m bench.many_runs [--counts 10,100,500] [--polls 1000] [--json out.json]
"""

from __future__ import annotations

import argparse
import http.client
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
from runner.files.rundir import RunDir

from .dashboard import _cpu_seconds, _reference_tree

ROOT = Path(__file__).resolve().parent.parent
RUN_COUNTS = (10, 100, 500)
POLLS = 1000
REPEATS = 3
LIVE = 2
PARALLEL = 6
REFERENCE_COMMIT = "75ad0377d7a196c463339ebc6bafdd92db5376ed"
"""The runner before issue 32 (the commit the work started from)."""
SIDES = ("before", "now")
SPEC = 'items = ["a", "b", "c"]\n\n[provider]\ncommand = ["true"]\n'
LIVE_SPEC = 'items = ["a"]\n\n[provider]\ncommand = ["sleep", "3600"]\n\n[stop]\nkill_grace = 0.3\n'


MEASURE = """import os, sys, time
t0 = time.monotonic()
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
wall = time.monotonic() - t0
cpu = usage.ru_utime + usage.ru_stime
print("MEASURED", wall, cpu, usage.ru_maxrss, os.waitstatus_to_exitcode(status), flush=True)
"""
"""sizes.MEASURE, with the command's own CPU time (user + system) beside its wall time:
the machine's load stretches the wall time, much less the CPU."""


def make_runs(base: Path, n: int, work: Path, tree: Path | None) -> None:
    """n real finished runs under `base`, made by the side's own runner (`python -m
    runner run` from `tree`), PARALLEL at a time: each side reads the runs its runner writes."""
    base.mkdir(parents=True, exist_ok=True)
    spec = work / "done.toml"
    spec.write_text(SPEC)
    pending: list[subprocess.Popen[bytes]] = []
    for i in range(n):
        argv = [sys.executable, "-m", "runner", "run", str(spec), "--run-dir", str(base / f"run-{i:04d}")]
        pending.append(
            subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=_env(tree),
                cwd=str(tree if tree is not None else ROOT),
            )
        )
        if len(pending) >= PARALLEL:
            pending.pop(0).wait(timeout=300)
    for p in pending:
        p.wait(timeout=300)


def _env(tree: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree if tree is not None else ROOT)
    return env


def timed(argv: list[str], tree: Path | None) -> dict[str, Any]:
    """One command's wall time, peak memory and exit code (sizes.timed's way), run as
    `python -m runner` from `tree` (None: this one)."""
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", MEASURE, sys.executable, "-m", "runner", *argv],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=_env(tree),
        cwd=str(tree if tree is not None else ROOT),
        timeout=600,
    )
    _, seconds, cpu, rss, rc = proc.stdout.strip().splitlines()[-1].split()
    return {
        "seconds": round(float(seconds), 4),
        "cpu_s": round(float(cpu), 4),
        "max_rss_mb": round(int(rss) / 1024, 1),
        "rc": int(rc),
    }


def repeated(argv: list[str], tree: Path | None) -> dict[str, Any]:
    samples = sorted((timed(argv, tree) for _ in range(REPEATS)), key=lambda x: x["seconds"])
    median = dict(samples[len(samples) // 2])
    median["samples_s"] = [x["seconds"] for x in samples]
    median["cpu_s"] = sorted(x["cpu_s"] for x in samples)[len(samples) // 2]
    return median


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Server:
    """`python -m runner dashboard` of a side, on a free port."""

    def __init__(self, base: Path, tree: Path | None, err: Path) -> None:
        with open(err, "w") as f:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "runner", "dashboard", "--runs-dir", str(base), "--port", "0"],
                stdout=subprocess.PIPE,
                stderr=f,
                stdin=subprocess.DEVNULL,
                text=True,
                env=_env(tree),
                cwd=str(tree if tree is not None else ROOT),
            )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("dashboard: http://"):
            self.close()
            raise RuntimeError(f"the dashboard did not start: {line!r} {err.read_text()[-500:]}")
        hostport, self.token = line.split(" ", 1)[1].strip().removeprefix("http://").split("/?token=")
        host, port = hostport.rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=120)

    def get(self, etag: str | None = None) -> tuple[int, str | None, int]:
        headers = {"X-Runner-Token": self.token}
        if etag is not None:
            headers["If-None-Match"] = etag
        self.conn.request("GET", "/api/runs", headers=headers)
        resp = self.conn.getresponse()
        body = resp.read()
        if resp.status not in (200, 304):
            raise RuntimeError(f"/api/runs answered {resp.status}: {body[:200]!r}")
        return resp.status, resp.getheader("ETag"), len(body)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def first_poll(base: Path, tree: Path | None, work: Path) -> dict[str, Any]:
    """The first /api/runs of a server just started: REPEATS servers, the median."""
    samples = []
    for _ in range(REPEATS):
        server = Server(base, tree, work / "dashboard.err")
        try:
            cpu0, t0 = _cpu_seconds(server.proc.pid), time.monotonic()
            _, _, size = server.get()
            samples.append((time.monotonic() - t0, _cpu_seconds(server.proc.pid) - cpu0, size))
        finally:
            server.close()
    samples.sort()
    seconds, _, size = samples[len(samples) // 2]
    return {
        "seconds": round(seconds, 4),
        "cpu_s": round(sorted(c for _, c, _ in samples)[len(samples) // 2], 3),
        "bytes": size,
        "samples_s": [round(s, 4) for s, _, _ in samples],
    }


def poll_memory(base: Path, tree: Path | None, work: Path, polls: int, conditional: bool) -> dict[str, Any]:
    """The server's VmRSS over `polls` polls back to back."""
    server = Server(base, tree, work / "dashboard.err")
    try:
        etag: str | None = None
        rss: list[float] = []
        not_modified = 0
        t0 = time.monotonic()
        for i in range(polls):
            status, tag, _ = server.get(etag if conditional else None)
            if status == 304:
                not_modified += 1
            elif conditional:
                etag = tag
            if i == 0 or (i + 1) % 10 == 0:
                rss.append(_rss_mb(server.proc.pid))
        wall = time.monotonic() - t0
    finally:
        server.close()
    return {
        "polls": polls,
        "not_modified": not_modified,
        "polls_per_s": round(polls / wall, 1),
        "rss_first_mb": round(rss[0], 1),
        "rss_last_mb": round(rss[-1], 1),
        "rss_min_mb": round(min(rss), 1),
        "rss_max_mb": round(max(rss), 1),
        "rss_mb": [round(x, 2) for x in rss],
    }


def one_side(n: int, work: Path, tree: Path | None, polls: int) -> dict[str, Any]:
    base = work / f"runs-{n}"
    t = time.monotonic()
    make_runs(base, n, work, tree)
    out: dict[str, Any] = {
        "made_in_s": round(time.monotonic() - t, 1),
        "loadavg": list(os.getloadavg()),
        "list": repeated(["list", "--runs-dir", str(base)], tree),
        "stop_all": repeated(["stop", "--all", "--runs-dir", str(base)], tree),
        "first_poll": first_poll(base, tree, work),
    }
    live_spec = work / "live.toml"
    live_spec.write_text(LIVE_SPEC)
    live = [runs.start(live_spec, base / f"zlive-{i}") for i in range(LIVE)]
    try:
        out["memory_page"] = poll_memory(base, tree, work, polls, conditional=True)
        out["memory_unconditional"] = poll_memory(base, tree, work, polls, conditional=False)
    finally:
        for rd in live:
            runs.runner("stop", "--now", "--run-dir", rd.path)
            runs.finish(RunDir(rd.path))
        shutil.rmtree(base, ignore_errors=True)
    return out


def one_count(n: int, work: Path, trees: dict[str, Path | None], polls: int) -> dict[str, Any]:
    return {"runs": n, "sides": {side: one_side(n, work, tree, polls) for side, tree in trees.items()}}


def run(counts: tuple[int, ...] = RUN_COUNTS, polls: int = POLLS) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="many-runs-bench-"))
    try:
        reference = _reference_tree(work, REFERENCE_COMMIT)
        trees: dict[str, Path | None] = {"now": None}
        if reference is not None:
            trees = {"before": reference, "now": None}
        rows = [one_count(n, work, trees, polls) for n in counts]
        out: dict[str, Any] = {"polls": polls, "repeats": REPEATS, "live_while_polled": LIVE, "rows": rows}
        out["reference_commit"] = REFERENCE_COMMIT
        if reference is None:
            out["reference_missing"] = f"git has no {REFERENCE_COMMIT} here (a shallow clone?)"
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _ms(x: float) -> str:
    return f"{x * 1000:.0f} ms"


def table(part: dict[str, Any]) -> str:
    lines = [
        "| runs | side | list | stop --all (nothing live) | first /api/runs | RSS over polls (page) | "
        "RSS over polls (no ETag) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in part["rows"]:
        for side in SIDES:
            s = r["sides"].get(side)
            if not s:
                continue
            mem = [
                f"{m['rss_first_mb']:g} -> {m['rss_last_mb']:g} MB (range {m['rss_max_mb'] - m['rss_min_mb']:.1f})"
                for m in (s["memory_page"], s["memory_unconditional"])
            ]
            cells = [f"{_ms(s[k]['seconds'])} ({_ms(s[k]['cpu_s'])} CPU)" for k in ("list", "stop_all", "first_poll")]
            lines.append(f"| {r['runs']} | {side} | " + " | ".join(cells) + f" | {mem[0]} | {mem[1]} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.many_runs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--counts", default=",".join(map(str, RUN_COUNTS)))
    ap.add_argument("--polls", type=int, default=POLLS)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    part = run(tuple(int(x) for x in args.counts.split(",")), args.polls)
    print(table(part))
    if args.json:
        args.json.write_text(json.dumps(part, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
