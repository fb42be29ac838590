"""At scale: `runner stop --now` against a raw `killpg(SIGKILL)` of the same tree.

The tree is the plugin's bash forker: one shell and N - 1 subshells, every one trapping
SIGTERM, all in one process group (so that the raw kill reaches all of them). Raw: the
benchmark sends one `killpg(SIGKILL)` and times until the last process is dead (pidfds
opened before). Runner: a real run whose provider is the tree, stopped by
`runner stop --now`. Since every process traps SIGTERM, the runner's forced phase waits
out `kill_grace` before its SIGKILL; the comparison subtracts it from the forced phase
the command reports itself ("... in 1.234s)"). The samples of both sides alternate, in
the same run, and which side goes first alternates too (a machine whose load drifts
during the run favours neither); the ratio is of the two sides' medians. The load
average is kept beside each pair: on a shared machine it is what a figure means.
"""

from __future__ import annotations

import os
import signal
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_stoplatency.kit import runs, stats, zoo
from pytest_stoplatency.kit.adapters import STOPPER_WAIT, popen_session, reap
from pytest_stoplatency.kit.zoo import Tree, VictimSpec

TREE = VictimSpec("scale", "bash forker", "forker", lang="bash")
START_WAIT = 120.0  # a thousand subshells start in about a second; a loaded machine is slower


def raw_sample(tree: Tree) -> dict[str, Any]:
    proc = popen_session(tree.argv)
    try:
        tree.adopt(START_WAIT, process=proc)
        members = tree.members()
        with zoo.Deaths({tree: members}) as deaths:
            t0 = time.monotonic()
            os.killpg(proc.pid, signal.SIGKILL)
            gone = deaths.wait(t0 + STOPPER_WAIT)[tree]
        left = tree.members()
        return {
            "processes": len(members),
            "stopped": gone is not None and not left,
            "seconds": gone - t0 if gone is not None else None,
            "left": len(left),
        }
    finally:
        zoo.kill(tree.members())
        reap(proc)


def runner_sample(tree: Tree, work: Path, kill_grace: float, name: str) -> dict[str, Any]:
    rd = runs.start(runs.write_spec(work / f"{name}.toml", tree.argv, kill_grace), work / name)
    try:
        tree.adopt(START_WAIT)
        members = tree.members()
        with zoo.Deaths({tree: members}) as deaths:
            t0 = time.monotonic()
            out = runs.runner("stop", "--now", "--run-dir", rd.path, timeout=STOPPER_WAIT)
            returned = time.monotonic()
            gone = deaths.wait(returned + STOPPER_WAIT)[tree]
        left = tree.members()
        said = (out.stdout + out.stderr).strip()
        return {
            "processes": len(members),
            "stopped": gone is not None and not left,
            "seconds": max(returned, gone) - t0 if gone is not None else None,
            "forced_s": runs.forced_seconds(said),
            "left": len(left),
            "code": out.returncode,
            "output": said,
        }
    finally:
        zoo.kill(tree.members())
        runs.finish(rd)


def run(sizes: Sequence[int], n: int, work: Path, kill_grace: float, log: Any = print) -> dict[str, Any]:
    rows = []
    serial = 0
    for size in sizes:
        raw: list[dict[str, Any]] = []
        ours: list[dict[str, Any]] = []
        loads: list[float] = []
        for i in range(n):
            for side in (raw, ours) if i % 2 == 0 else (ours, raw):
                serial += 1
                tree = Tree(TREE, work / "trees", children=size - 1)
                if side is raw:
                    raw.append(raw_sample(tree))
                else:
                    ours.append(runner_sample(tree, work, kill_grace, f"scale-{serial}"))
            loads.append(os.getloadavg()[0])
        rows.append({**row(size, raw, ours, kill_grace), "loadavg_1m": _loads(loads)})
        log(f"bench: scale: {size} processes done")
    return {"n": n, "kill_grace": kill_grace, "tree": f"{TREE.lang} {TREE.kind}", "rows": rows}


def _loads(loads: list[float]) -> dict[str, float | None]:
    """The 1-minute load average read after each pair: its median and its range."""
    if not loads:
        return {"median": None, "min": None, "max": None}
    return {"median": round(statistics.median(loads), 1), "min": round(min(loads), 1), "max": round(max(loads), 1)}


def row(size: int, raw: list[dict[str, Any]], ours: list[dict[str, Any]], kill_grace: float) -> dict[str, Any]:
    raw_s = stats.summary([s["seconds"] for s in raw if s["stopped"]])
    e2e = stats.summary([s["seconds"] for s in ours if s["stopped"]])
    forced = [s["forced_s"] - kill_grace for s in ours if s["stopped"] and s["forced_s"] is not None]
    forced_s = stats.summary(forced)
    ratio = None
    if forced_s["median_s"] is not None and raw_s["median_s"]:
        ratio = forced_s["median_s"] / raw_s["median_s"]
    return {
        "processes": size,
        "raw": {**raw_s, "stopped": sum(s["stopped"] for s in raw), "orphans": sum(s["left"] for s in raw)},
        "runner_end_to_end": {
            **e2e,
            "stopped": sum(s["stopped"] for s in ours),
            "orphans": sum(s["left"] for s in ours),
        },
        "runner_forced_minus_grace": forced_s,
        "ratio": ratio,
        "raw_samples": raw,
        "runner_samples": ours,
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        "processes  raw killpg (median, max)  runner --now forced phase - grace (median, max)  "
        "runner --now end to end (median)  ratio    orphans"
    ]
    for r in result["rows"]:
        raw, forced, e2e = r["raw"], r["runner_forced_minus_grace"], r["runner_end_to_end"]
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-"
        lines.append(
            f"{r['processes']:<9}  {stats.seconds(raw['median_s'])}, {stats.seconds(raw['max_s'])}".ljust(37)
            + f"{stats.seconds(forced['median_s'])}, {stats.seconds(forced['max_s'])}".ljust(50)
            + f"{stats.seconds(e2e['median_s'])}".ljust(34)
            + ratio.ljust(9)
            + f"{raw['orphans']} raw, {e2e['orphans']} runner"
        )
    return "\n".join(lines)
