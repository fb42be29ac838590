"""The measurement: every victim tree under every stopper, n samples per cell, in one run.

A sample: the stopper starts the tree (not timed), then stops it (timed from its first
action). The tree is **stopped** when the stopper has returned and no process of the
tree is left; the latency is the time until both are true. A process still alive
`SETTLE` seconds after the stopper returned is an **orphan**: counted, then killed (by
the tree's marker, nothing else), so that the next sample starts clean. The rounds are
interleaved (round 1 of every cell, then round 2, ...), so that a change of load during
the run spreads over every cell instead of landing on a few.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import stats, zoo
from .stopper import Stopper
from .zoo import Tree, VictimSpec

SETTLE = 0.5
"""How long after the stopper returned a process of the tree may still be dying."""


def sample(stopper: Stopper, tree: Tree) -> dict[str, Any]:
    try:
        handle = stopper.start(tree)
    except Exception as exc:  # a tree that did not come up is a failed sample, not a crash
        zoo.kill_rounds(tree.members)
        return {"error": f"start: {exc}"}
    try:
        if not tree.up:  # a user's stopper need not wait for the handshake itself
            tree.adopt()
    except Exception as exc:
        zoo.kill_rounds(tree.members)
        stopper.cleanup(handle)
        return {"error": f"start: {exc}"}
    try:
        before = tree.members()
        with zoo.Deaths({tree: before}) as deaths:  # pidfds opened before the stop
            t0 = time.monotonic()
            try:
                said = stopper.stop(handle)
            except Exception as exc:  # a stopper that hung or failed: this sample, not the run
                return {"error": f"stop: {exc}"}
            returned = time.monotonic()
            gone = deaths.wait(returned + SETTLE)[tree]
        left = tree.members()  # ablate: kit-orphan-scan
        stopped = gone is not None and not left
        out = {
            "stopped": stopped,
            "latency_s": max(returned, gone) - t0 if stopped and gone is not None else None,
            "returned_s": returned - t0,
            "processes": len(before),
            "left": len(left),
            **said,
        }
        judge = getattr(stopper, "judge", None)  # what the stop left of its own (command.py)
        if judge is not None:
            faults = judge(handle, tree, SETTLE)
            if out.get("failed") and faults.get("failed"):
                faults["failed"] = f"{out['failed']}; {faults['failed']}"
            out.update(faults)
        if out.get("failed"):
            # The stopper's own fault (its stop could not run, failed, hung or left processes
            # of its own): a failed sample, whatever it left of the tree.
            out["error"] = f"stop: {out.pop('failed')}"
        return out
    finally:
        zoo.kill_rounds(tree.members)
        stopper.cleanup(handle)


def cell_summary(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    ok = [s for s in samples if "error" not in s]
    latencies = [s["latency_s"] for s in ok if s["stopped"]]
    summary = stats.summary(latencies)
    return {
        "n": len(ok),
        "stopped": sum(1 for s in ok if s["stopped"]),
        "min_s": min(latencies, default=None),
        "median_s": summary["median_s"],
        "p95_s": summary["p95_s"],
        "max_s": summary["max_s"],
        "orphans": sum(s["left"] for s in ok),
        "errors": [s["error"] for s in samples if "error" in s],
    }


def run(
    stoppers: Sequence[Stopper], victims: Sequence[VictimSpec], n: int, work: Path, log: Any = print
) -> dict[str, Any]:
    present = [s for s in stoppers if s.missing() is None]
    for s in stoppers:
        if s.missing() is not None:
            log(f"skipping {s.id}: {s.missing()}")
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {s.id: {v.id: [] for v in victims} for s in present}
    interrupted = False
    try:
        for r in range(n):
            for s in present:
                for v in victims:
                    samples[s.id][v.id].append(sample(s, Tree(v, work / "trees")))
            log(f"round {r + 1} of {n} done")
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM (cli): what finished is the result
        interrupted = True
        done = sum(len(c) for row in samples.values() for c in row.values())
        log(f"interrupted: {done} sample(s) finished, reported below")
    finally:
        for s in present:
            s.close()
    return {
        "n": n,
        "interrupted": interrupted,
        "settle_s": SETTLE,
        "victims": [{"id": v.id, "label": v.label, "kind": v.kind, "lang": v.lang} for v in victims],
        "stoppers": [
            {
                "id": s.id,
                "label": s.label,
                "how": s.how.replace("KILL_GRACE", f"{s.kill_grace:g}"),
                "runner": s.runner,
                "skipped": s.missing(),
            }
            for s in stoppers
        ],
        "cells": {
            sid: {vid: {**cell_summary(cell), "samples": cell} for vid, cell in row.items()}
            for sid, row in samples.items()
        },
    }


def cell_text(cell: dict[str, Any]) -> str:
    if not cell["n"]:
        return "error"
    text = f"{cell['stopped']}/{cell['n']}"
    if cell["stopped"]:
        text += f" {stats.seconds(cell['median_s'])} (max {stats.seconds(cell['max_s'])})"
    if cell["orphans"]:
        text += f" orphans {cell['orphans']}"
    if cell["errors"]:
        text += f" failed {len(cell['errors'])}"
    return text


def table(result: dict[str, Any]) -> str:
    """The table as text: one row per stopper, one column per victim."""
    heads = ["stopper"] + [v["label"] for v in result["victims"]]
    rows = []
    for s in result["stoppers"]:
        if s["skipped"]:
            rows.append([s["id"], f"skipped: {s['skipped']}"] + [""] * (len(heads) - 2))
            continue
        row = result["cells"][s["id"]]
        rows.append([s["id"]] + [cell_text(row[v["id"]]) for v in result["victims"]])
    full = [heads] + [r for r in rows if not r[1].startswith("skipped")]
    widths = [max(len(r[i]) for r in full) for i in range(len(heads))]
    lines = []
    for r in [heads, *rows]:
        if r[1].startswith("skipped"):
            lines.append(f"{r[0].ljust(widths[0])}  {r[1]}")
        else:
            lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(lines)
