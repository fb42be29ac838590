"""Under load: many runs stopped at once.

N real runs, each with its own trapping tree as its provider (the plugin's bash
`trap-term` victim), live at the same time; then, released together, one `runner stop`
per run (or one `runner stop --now` per run), or one `runner stop --all` for all of them
where this runner has it. A run is stopped when its stop command has returned and no
process of its tree is left; its latency is the time from the common release until both
are true. The commands' own elapsed times are kept too.
"""

from __future__ import annotations

import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pytest_stoplatency.kit import runs, stats, zoo
from pytest_stoplatency.kit.zoo import Tree, VictimSpec
from runner.files.rundir import RunDir

TREE = VictimSpec("load", "bash trap", "trap-term", lang="bash")
COMMAND_WAIT = 120.0  # longest one stop command is waited for; the issue measured about 6 s
STARTERS = 4
SETTLE = 0.5  # as in the matrix: how long after its command returned a tree may still be dying
MODES = ("stop", "stop --now", "stop --all", "stop --all --now")
RUNS = Path(".runner/runs")  # the runs' base, under the mode's own directory (the default base there)


def run_mode(mode: str, count: int, work: Path, kill_grace: float) -> dict[str, Any]:
    base = work / ("load-" + "".join(c for c in mode if c.isalnum()))
    base.mkdir()
    mine = [Tree(TREE, work / "trees") for _ in range(count)]
    rds = []
    try:

        def start(i: int) -> RunDir:
            spec = runs.write_spec(base / f"{i}.toml", mine[i].argv, kill_grace)
            return runs.start(spec, RUNS / f"r{i}", cwd=base)

        # Started a few at a time (not timed: only the stop is), to keep `make bench` short.
        with ThreadPoolExecutor(max_workers=STARTERS) as pool:
            futures = [pool.submit(start, i) for i in range(count)]
        rds.extend(f.result() for f in futures if f.exception() is None)  # finished below, whatever happens
        failed = [e for f in futures if (e := f.exception()) is not None]
        if failed:
            raise failed[0]
        for tree in mine:
            tree.adopt(60.0)
        members = zoo.scan(mine)
        returned: dict[int, float] = {}
        codes: dict[int, int] = {}
        release = threading.Event()

        def stop(i: int, args: tuple[str, ...]) -> None:
            release.wait()
            try:
                out = runs.runner(*args, cwd=base, timeout=COMMAND_WAIT)
            except subprocess.TimeoutExpired:
                codes[i] = -1  # killed by us: its run is not counted as stopped
                return
            returned[i] = time.monotonic()
            codes[i] = out.returncode

        flags = ["--now"] if mode.endswith("--now") else []
        if "--all" in mode:
            all_args = runs.stop_all_args(RUNS) or ["--all"]
            threads = [threading.Thread(target=stop, args=(-1, ("stop", *all_args, *flags)))]
        else:
            threads = [
                threading.Thread(target=stop, args=(i, ("stop", *flags, "--run-dir", str(rd.path))))
                for i, rd in enumerate(rds)
            ]
        for t in threads:
            t.start()
        with zoo.Deaths({i: members[t] for i, t in enumerate(mine)}) as deaths:
            t0 = time.monotonic()
            release.set()
            # Deaths are timed as they happen, while the stop commands run.
            while deaths.fds and any(t.is_alive() for t in threads):
                deaths.wait(time.monotonic() + 0.05)
            for t in threads:
                t.join()
            gone = deaths.wait(max(returned.values(), default=t0) + SETTLE)
        left = zoo.scan(mine)
        samples = []
        for i, tree in enumerate(mine):
            back = returned.get(i, returned.get(-1))
            stopped = back is not None and gone[i] is not None and not left[tree]
            samples.append(
                {
                    "stopped": stopped,
                    "latency_s": max(back, gone[i]) - t0 if stopped and back and gone[i] else None,
                    "left": len(left[tree]),
                }
            )
        return summarize(samples, [r - t0 for r in returned.values()], list(codes.values()))
    finally:
        for tree in mine:
            zoo.kill(tree.members())
        for rd in rds:
            runs.finish(rd)


def summarize(samples: list[dict[str, Any]], commands: list[float], codes: list[int]) -> dict[str, Any]:
    """One mode's figures: per run (stopped, latency, orphans) and per stop command."""
    return {
        "runs": len(samples),
        "commands": len(commands),
        "stopped": sum(s["stopped"] for s in samples),
        "orphans": sum(s["left"] for s in samples),
        "codes": sorted(set(codes)),
        **stats.summary([s["latency_s"] for s in samples if s["stopped"]]),
        "command_max_s": max(commands, default=None),
        "samples": samples,
        "command_samples": commands,
    }


def run(count: int, work: Path, kill_grace: float, log: Any = print) -> dict[str, Any]:
    out: dict[str, Any] = {
        "runs": count,
        "kill_grace": kill_grace,
        "tree": f"{TREE.lang} {TREE.kind}",
        "command_wait_s": COMMAND_WAIT,
        "modes": [],
    }
    has_all = runs.stop_all_args(RUNS) is not None
    for mode in MODES:
        if "--all" in mode and not has_all:
            out["modes"].append({"mode": mode, "skipped": "this runner has no `runner stop --all`"})
            log(f"bench: load: skipping `runner {mode}`: no --all in `runner stop --help`")
            continue
        out["modes"].append({"mode": mode, **run_mode(mode, count, work, kill_grace)})
        log(f"bench: load: {count} runs, `runner {mode}` done")
    return out


def table(result: dict[str, Any]) -> str:
    lines = [
        f"{result['runs']} runs at once".ljust(25)
        + "stopped  median     p95        max        slowest command  exit codes"
    ]
    for m in result["modes"]:
        mode = m["mode"]
        if "skipped" in m:
            lines.append(f"runner {mode:<16}  skipped: {m['skipped']}")
            continue
        lines.append(
            f"runner {mode:<16}  {m['stopped']}/{m['runs']}".ljust(34)
            + f"{stats.seconds(m['median_s']):<11}{stats.seconds(m['p95_s']):<11}{stats.seconds(m['max_s']):<11}"
            + f"{stats.seconds(m['command_max_s']):<17}{m['codes']}"
            + (f"  orphans {m['orphans']}" if m["orphans"] else "")
        )
    return "\n".join(lines)
