"""What --process-leaks costs per test (issue 12: at most 5 ms median, over at least 200 tests).

Runs an inner pytest session of N generated tests without and with --process-leaks
(serially, no xdist), alternating, --rounds times each, and times each test's whole
run protocol (setup, call, teardown: every hook the check adds) from an outermost hook
wrapper.
Two kinds of test, half each: `quiet` starts no process (the check reads ns_last_pid
twice and stops there); `spawns` runs and waits for one `true` (new pids: the check
reads /proc for them). A third, `paced` (--paced of them), sleeps PACE seconds, as a
test that does some work does: the cgroup route's moves of pytest wait for an RCU grace
period when they are rare, and only spaced-out tests show it. The overhead is the
difference of the medians per kind (each the median over the rounds' medians: a loaded
machine shifts whole sessions). It also reports the time spent inside the tracker itself
(open + check, and with --process-leaks-cgroup the moves in and out of the test's
cgroup, wrapped in the same sessions), which a loaded machine disturbs far less. Prints
one line per figure and writes JSON.

Where cgroup v2 is writable (with cgroup.kill), a third session per round runs with
--process-leaks-cgroup: the "with cgroup" figures.

With --live N (issue 28): the check's own time under load, on a machine with many live
processes. One --process-leaks session (default settings) whose session fixture starts N
processes that live through it, beside --hogs CPU hogs (`while True: pass`); its tests are
`quiet`, `spawns` and `leaks` (each leaves a process running: reported, kept, killed at the
session's end, and the only kind that waits out the grace). Per kind, the time inside the
check (Tracker.check) per test: median, p95, max. Every check lists /proc (a cost that grows
with the machine's process count, whatever the test); the rest grows with the pids handed
out during the test, plus the grace where something is left.

    python bench/process_leaks_cost.py [--n 400] [--paced 60] [--rounds 3] [--live 500 --hogs 2] [--json PATH]

`make bench` writes docs/process-leaks-bench.json, which `make docs` renders into
docs/plugin.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CONFTEST = textwrap.dedent(
    """
    import json, os, time
    import pytest

    from pytest_stoplatency import _leaks

    TIMES, TRACKER = {}, {}

    def _timed(fn):
        def wrapper(self, scope, *args, **kwargs):
            t0 = time.perf_counter_ns()
            try:
                return fn(self, scope, *args, **kwargs)
            finally:
                label = scope.label if scope is not None else "(fixtures)"
                TRACKER[label] = TRACKER.get(label, 0) + time.perf_counter_ns() - t0
        return wrapper

    _open = _leaks.Tracker.open

    def _timed_open(self, label, **kwargs):
        t0 = time.perf_counter_ns()
        try:
            return _open(self, label, **kwargs)
        finally:
            TRACKER[label] = TRACKER.get(label, 0) + time.perf_counter_ns() - t0

    _leaks.Tracker.open = _timed_open
    _leaks.Tracker.check = _timed(_leaks.Tracker.check)
    _enter = _leaks.Tracker.enter
    CURRENT = [None]

    def _timed_enter(self, scope):
        # The move out (scope None) counts against the test whose scope was entered last.
        label = scope.label if scope is not None else CURRENT[0]
        CURRENT[0] = label if scope is not None else None
        t0 = time.perf_counter_ns()
        try:
            return _enter(self, scope)
        finally:
            if label is not None:
                TRACKER[label] = TRACKER.get(label, 0) + time.perf_counter_ns() - t0

    _leaks.Tracker.enter = _timed_enter

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(item, nextitem):
        t0 = time.perf_counter_ns()
        try:
            return (yield)
        finally:
            TIMES[item.nodeid] = time.perf_counter_ns() - t0

    def pytest_sessionfinish(session):
        with open(os.environ["BENCH_OUT"], "w") as f:
            json.dump({"protocol": TIMES, "tracker": TRACKER}, f)
    """
)

PACE = 0.05  # seconds a paced test works

TESTS = textwrap.dedent(
    """
    import subprocess, time
    import pytest

    @pytest.mark.parametrize("i", range({paced}))
    def test_paced(i):
        time.sleep({pace})

    @pytest.mark.parametrize("i", range({half}))
    def test_quiet(i):
        pass

    @pytest.mark.parametrize("i", range({half}))
    def test_spawns(i):
        subprocess.run(["true"], check=True)
    """
)


def run_session(directory: Path, mode: str, ok=(0,)) -> dict:
    """mode: "off", "on" (--process-leaks) or "cgroup" (--process-leaks-cgroup)."""
    out = directory / f"times-{mode}.json"
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly"]
    args += {"off": [], "on": ["--process-leaks"], "cgroup": ["--process-leaks-cgroup"]}[mode]
    env = dict(os.environ, BENCH_OUT=str(out), PYTHONPATH=str(ROOT))
    r = subprocess.run(args, cwd=directory, env=env, capture_output=True, text=True, timeout=1200)
    if r.returncode not in ok:
        raise SystemExit(f"inner pytest failed ({r.returncode}):\n{r.stdout[-3000:]}")
    return json.loads(out.read_text())


LOAD_TESTS = textwrap.dedent(
    """
    import os, subprocess
    import pytest

    @pytest.fixture(scope="session", autouse=True)
    def live():
        # Processes that live through the session: the machine's process count, which every
        # check's listing of /proc pays for. Stopped by the fixture itself: no leak.
        procs = [subprocess.Popen(["sleep", "3600"]) for _ in range({live})]
        with open(os.environ["BENCH_OUT"] + ".procs", "w") as f:
            f.write(str(sum(1 for e in os.listdir("/proc") if e.isdigit())))
        yield
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()

    @pytest.mark.parametrize("i", range({n}))
    def test_quiet(i):
        pass

    @pytest.mark.parametrize("i", range({n}))
    def test_spawns(i):
        subprocess.run(["true"], check=True)

    @pytest.mark.parametrize("i", range({leaks}))
    def test_leaks(i):
        subprocess.Popen(["sleep", "3600"])
    """
)


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[max(int(round(q * len(s) + 0.5)) - 1, 0)] if s else float("nan")


def run_load(live: int, hogs: int, n: int, leaks: int) -> dict:
    """The check's own time per test under load: CPU hogs beside one session with `live`
    processes alive throughout."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
    try:
        load_start = os.getloadavg()[0]
        with tempfile.TemporaryDirectory(prefix="bench-leaks-load-") as tmp:
            d = Path(tmp)
            (d / "conftest.py").write_text(CONFTEST)
            (d / "test_load.py").write_text(LOAD_TESTS.format(live=live, n=n, leaks=leaks))
            t0 = time.monotonic()
            got = run_session(d, "on", ok=(0, 1))
            wall = time.monotonic() - t0
            on_machine = int((d / "times-on.json.procs").read_text())
        load_end = os.getloadavg()[0]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    out = {
        "live": live,
        "hogs": hogs,
        "processes_on_machine": on_machine,
        "load_start": round(load_start, 2),
        "load_end": round(load_end, 2),
        "wall_s": round(wall, 1),
        "grace_s": _grace(),
        "kinds": {},
    }
    for kind, count in (("quiet", n), ("spawns", n), ("leaks", leaks)):
        ms = [v / 1e6 for k, v in got["tracker"].items() if f"::test_{kind}[" in k]
        out["kinds"][kind] = {
            "n": count,
            "median_check_ms": round(statistics.median(ms), 3),
            "p95_check_ms": round(percentile(ms, 0.95), 3),
            "max_check_ms": round(max(ms), 3),
        }
        print(
            f"load: {kind:7s} n={count}: time in the check per test: median {statistics.median(ms):.3f} ms, "
            f"p95 {percentile(ms, 0.95):.3f} ms, max {max(ms):.3f} ms ({live} live processes, {hogs} hogs)"
        )
    return out


def _grace() -> float:
    from pytest_stoplatency import _options

    return _options.GRACE


def median_ms(times: dict[str, int], kind: str) -> float:
    return statistics.median(v for k, v in times.items() if f"::test_{kind}[" in k) / 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=400, help="tests per session (half quiet, half spawning)")
    ap.add_argument("--paced", type=int, default=60, help=f"tests per session that each sleep {PACE} s")
    ap.add_argument("--rounds", type=int, default=3, help="sessions per side, alternating")
    ap.add_argument("--live", type=int, default=0, help="with --hogs: the check's time under load (0: not run)")
    ap.add_argument("--hogs", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--load-only", action="store_true", help="run only the --live part, into --json's other figures (kept)"
    )
    args = ap.parse_args()
    half = max(args.n // 2, 1)
    paced = max(args.paced, 1)
    sys.path.insert(0, str(ROOT))
    if args.load_only:
        if not (args.live and args.json and args.json.exists()):
            raise SystemExit("--load-only needs --live N and an existing --json")
        doc = json.loads(args.json.read_text())
        doc["load"] = run_load(args.live, args.hogs, n=max(half // 2, 1), leaks=20)
        doc["load"]["time"] = datetime.now(UTC).isoformat(timespec="seconds")
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        return 0
    from pytest_stoplatency import _cgroup

    cgroup = _cgroup.probe()
    load_before = os.getloadavg()[0]  # a loaded machine widens the A/B figures: recorded with them
    with tempfile.TemporaryDirectory(prefix="bench-leaks-") as tmp:
        d = Path(tmp)
        (d / "conftest.py").write_text(CONFTEST)
        (d / "test_bench.py").write_text(TESTS.format(half=half, paced=paced, pace=PACE))
        offs, ons, cgs = [], [], []
        for _ in range(max(args.rounds, 1)):
            offs.append(run_session(d, "off"))
            ons.append(run_session(d, "on"))
            if cgroup:
                cgs.append(run_session(d, "cgroup"))
    result = {
        "n_tests": 2 * half + paced,
        "rounds": len(offs),
        "cgroup": cgroup,
        "pace_s": PACE,
        "machine": {"kernel": platform.release(), "python": platform.python_version(), "cpus": os.cpu_count()},
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_before": round(load_before, 2),
        "kinds": {},
    }
    for kind, n in (("quiet", half), ("spawns", half), ("paced", paced)):
        off_ms = statistics.median(median_ms(o["protocol"], kind) for o in offs)
        on_ms = statistics.median(median_ms(o["protocol"], kind) for o in ons)
        tracker = statistics.median(median_ms(o["tracker"], kind) for o in ons)
        row = result["kinds"][kind] = {
            "n": n,
            "median_protocol_ms_without": round(off_ms, 4),
            "median_protocol_ms_with": round(on_ms, 4),
            "median_overhead_ms": round(on_ms - off_ms, 4),
            "median_tracker_ms": round(tracker, 4),
        }
        print(
            f"{kind:7s} n={n} x {len(offs)} rounds: median per test {off_ms:.3f} ms without, "
            f"{on_ms:.3f} ms with --process-leaks (overhead {on_ms - off_ms:.3f} ms; in the tracker {tracker:.3f} ms)"
        )
        if cgs:
            cg_ms = statistics.median(median_ms(o["protocol"], kind) for o in cgs)
            cg_tracker = statistics.median(median_ms(o["tracker"], kind) for o in cgs)
            row["median_protocol_ms_with_cgroup"] = round(cg_ms, 4)
            row["median_overhead_ms_cgroup"] = round(cg_ms - off_ms, 4)
            row["median_tracker_ms_cgroup"] = round(cg_tracker, 4)
            print(
                f"{'':7s} with --process-leaks-cgroup: {cg_ms:.3f} ms (overhead {cg_ms - off_ms:.3f} ms; "
                f"in the tracker {cg_tracker:.3f} ms)"
            )
    if args.live:
        result["load"] = run_load(args.live, args.hogs, n=max(half // 2, 1), leaks=20)
        result["load"]["time"] = result["time"]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
