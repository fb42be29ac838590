"""What the membership proof costs per process (issue 8's acceptance asks for the median
over at least 1,000 processes).

Starts N real processes (`sleep`), tagged with a run id and, where a writable cgroup v2
hierarchy exists, moved into a run cgroup; then times, for each, what the reaper does
before a signal: open the pidfd, check the start ticks, prove membership (`Watch.add`).
Each proof is timed three ways: by the tag, by the cgroup, and a refusal (an untagged
process outside the cgroup, the worst case: every proof is tried). Prints one line per
way and writes JSON. Every process is killed and reaped at the end, whatever happens.

    python bench/membership_cost.py [--n 1000] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runner.proc import cgroup as cgroups  # noqa: E402
from runner.proc import identity, reaper
from runner.proc.membership import Membership  # noqa: E402


def start(n, env):
    return [subprocess.Popen(["sleep", "600"], env=env, stdin=subprocess.DEVNULL) for _ in range(n)]


def time_adds(procs, membership):
    """Nanoseconds per Watch.add (pidfd open, ticks check, proof); each in a fresh Watch
    so that no proof is cached."""
    idents = [identity.current(p.pid) for p in procs]
    costs, proven = [], 0
    for ident in idents:
        watch = reaper.Watch(membership)
        t0 = time.perf_counter_ns()
        fd = watch.add(ident, named=False)
        costs.append(time.perf_counter_ns() - t0)
        proven += fd is not None
        watch.close()
    return costs, proven


def summary(costs):
    costs = sorted(costs)
    return {
        "n": len(costs),
        "median_us": statistics.median(costs) / 1000,
        "p95_us": costs[int(0.95 * (len(costs) - 1))] / 1000,
        "max_us": costs[-1] / 1000,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    base = {k: v for k, v in os.environ.items() if k != "RUNNER_RUN_ID"}
    procs, cg, results = [], None, {}
    try:
        tagged = start(args.n, {**base, "RUNNER_RUN_ID": run_id})
        procs += tagged
        costs, proven = time_adds(tagged, Membership(run_id))
        results["tag"] = {**summary(costs), "proven": proven}
        plain = start(args.n, base)
        procs += plain
        if cgroups.available():
            cg = cgroups.RunCgroup.create(run_id)
            for p in plain:
                (cg.path / "work" / "cgroup.procs").write_text(f"{p.pid}\n")
            costs, proven = time_adds(plain, Membership(None, cg.relative))
            results["cgroup"] = {**summary(costs), "proven": proven}
        costs, proven = time_adds(plain, Membership(run_id, "/runner/not-this-one"))
        results["refused"] = {**summary(costs), "proven": proven}
    finally:
        for p in procs:
            p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait()
        if cg is not None:
            cg.wait_empty("all", 5.0)
            cg.remove()
    for way, r in results.items():
        print(
            f"membership proof by {way:8} n={r['n']:5}  median {r['median_us']:7.1f} us  "
            f"p95 {r['p95_us']:7.1f} us  max {r['max_us']:8.1f} us  proven {r['proven']}"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "machine": os.uname().nodename,
                    "cpus": os.cpu_count(),
                    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "results": results,
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
