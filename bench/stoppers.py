"""`make bench`: the runner's stop beside the other stoppers, at scale and under load.

    python -m bench.stoppers [--n 5] [--sizes 1,10,100,1000] [--scale-n 11] [--load-runs 50]
                             [--parts stoppers,scale,load,items,journal,runs,dashboard,traffic,plugin,pid1,cost]
                             [--merge]
                             [--json docs/bench.json] [--check] [--ci]

Eleven parts (the first three by default; `make bench` runs all eleven), in one run, each
printed as a table and written to the JSON with every raw sample (machine, date, commit, n):

- **stoppers** (the stop-conformance kit, pytest_stoplatency/kit/: its measure.py): the
  same victim trees (kit/zoo.py: the plugin's victim programs, each tree marked in its
  argv; the zoo's PEER kinds) under each built-in adapter of the kit (kit/adapters.py),
  with the same kill grace; each cell: stopped n/n, median, max, orphans left.
  supervisord, tini and dumb-init are skipped, with a note, where they are not installed
  (`pip install --group bench` installs supervisor; tini and dumb-init are Debian
  packages).
- **scale** (bench/scale.py): `runner stop --now` against a raw `killpg(SIGKILL)` of the
  same tree of 1 to 1,000 processes.
- **load** (bench/load.py): many runs stopped at once.
- **items** and **journal** (bench/sizes.py): items per second and the engine's memory
  as the number of items grows; stop, status, list and logs on a run whose journal is
  large, beside a fresh run.
- **runs** (bench/many_runs.py): `runner list`, `runner stop --all` with nothing live,
  the dashboard's first `/api/runs` and its server's memory over a thousand polls, with
  10, 100 and 500 runs under one directory, beside the runner before issue 32.
- **dashboard** (bench/dashboard.py): the dashboard server's CPU with 60 runs and one
  page polling, beside the previous commit's dashboard and unconditional polls.
- **traffic** (bench/dashboard_traffic.py): with 500 runs, the first `/api/runs` beside
  two CPU hogs, and the real page's bytes per second on the wire with three runs live
  and with none.
- **plugin** (bench/plugin_idle.py): a one-test pytest session with the plugin installed
  but unused, against the same session with `-p no:stoplatency`.
- **pid1** (bench/pid1_window.py): how long a container's PID 1 (`runner` without an
  init, tini) is deaf to SIGTERM after its exec, quiet and beside two CPU hogs.
- **cost** (bench/stopper_cost.py): `runner stop --now` on a cooperative run, from the
  command's start to its exit, beside a bare `python -c pass`.

Each part's goals (bench/goals.py, issue 20) go into the JSON beside the figures.

--ci is the reduced run CI keeps working: n=1, `timeout -k` and the two runner stops,
small scale, 5 runs at once. --check exits 1 when a cell of the runner's own stops left
an orphan or did not stop its tree. Every process a tree started is killed at the end,
whatever happens (found by its marker, nothing else).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_stoplatency.kit import adapters, measure, runs, zoo
from runner import defaults

from . import dashboard, dashboard_traffic, goals, load, many_runs, pid1_window, plugin_idle, scale, sizes, stopper_cost

ROOT = Path(__file__).resolve().parent.parent
KILL_GRACE = defaults.KILL_GRACE
"""One kill grace for every stopper: the runner's default, written into each run's spec
(`[stop] kill_grace`) and given to every other stopper as its grace."""


PARTS = ("stoppers", "scale", "load", "items", "journal", "runs", "dashboard", "traffic", "plugin", "pid1", "cost")


def _ids(text: str) -> list[str]:
    return [t for t in text.split(",") if t]


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.stoppers", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, help="samples per stopper and victim (default 5; --ci: 1)")
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in _ids(s)], help="tree sizes (default 1,10,100,1000)")
    ap.add_argument("--scale-n", type=int, help="samples per size and side (default 11; --ci: 1)")
    ap.add_argument("--load-runs", type=int, help="runs stopped at once (default 50; --ci: 5)")
    ap.add_argument("--stoppers", type=_ids, help="only these stopper ids (comma-separated)")
    ap.add_argument("--victims", type=_ids, help="only these victim ids (comma-separated)")
    ap.add_argument(
        "--parts", type=_ids, default=list(PARTS[:3]), help=f"{','.join(PARTS)} (default {','.join(PARTS[:3])})"
    )
    ap.add_argument(
        "--item-counts", type=lambda s: [int(x) for x in _ids(s)], help="items part (default 100,5000,20000,50000)"
    )
    ap.add_argument("--items-window", type=float, help=f"most seconds per items run (default {sizes.WINDOW:g})")
    ap.add_argument("--journal-mib", type=lambda s: [int(x) for x in _ids(s)], help="journal part (default 250,1024)")
    ap.add_argument("--plugin-rounds", type=int, help=f"plugin part: sessions per side (default {plugin_idle.ROUNDS})")
    ap.add_argument(
        "--run-counts",
        type=lambda s: [int(x) for x in _ids(s)],
        help=f"runs part: runs under one directory (default {','.join(map(str, many_runs.RUN_COUNTS))})",
    )
    ap.add_argument("--polls", type=int, help=f"runs part: polls of the dashboard (default {many_runs.POLLS})")
    ap.add_argument("--pid1-n", type=int, default=pid1_window.SAMPLES, help="pid1 part: samples per PID 1 and load")
    ap.add_argument("--cost-n", type=int, default=stopper_cost.N, help="cost part: samples per side")
    ap.add_argument("--merge", action="store_true", help="keep the parts of the existing --json that are not run now")
    ap.add_argument("--kill-grace", type=float, default=KILL_GRACE)
    ap.add_argument("--ci", action="store_true", help="the reduced run: n=1, three stoppers, small scale and load")
    ap.add_argument("--json", type=Path, help="write every sample here")
    ap.add_argument("--check", action="store_true", help="exit 1 when a runner cell left an orphan or did not stop")
    args = ap.parse_args(argv)
    # Defaults, then what --ci reduces; a number given on the command line wins over both.
    defaults = (
        (1, [1, 10], 1, 5, [100, 1000], 5.0, [32], 3, [10, 50], 100)
        if args.ci
        else (
            5,
            [1, 10, 100, 1000],
            11,  # the 1,000-process ratio is a goal: on a shared machine 3 pairs were noise
            50,
            list(sizes.ITEM_COUNTS),
            sizes.WINDOW,
            [s >> 20 for s in sizes.JOURNAL_SIZES],
            plugin_idle.ROUNDS,
            list(many_runs.RUN_COUNTS),
            many_runs.POLLS,
        )
    )
    names = (
        *("n", "sizes", "scale_n", "load_runs", "item_counts", "items_window", "journal_mib", "plugin_rounds"),
        *("run_counts", "polls"),
    )
    for name, value in zip(names, defaults, strict=True):
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.ci and not args.stoppers:
        args.stoppers = [c.id for c in adapters.CI]
    known_stoppers = [c.id for c in adapters.ALL]
    known_victims = [v.id for v in zoo.VICTIMS]
    for name, given, known in (
        ("--stoppers", args.stoppers, known_stoppers),
        ("--victims", args.victims, known_victims),
        ("--parts", args.parts, list(PARTS)),
    ):
        bad = [x for x in given or [] if x not in known]
        if bad:
            ap.error(f"{name}: unknown {', '.join(bad)}; one of {', '.join(known)}")
    if args.n < 1 or args.scale_n < 1 or args.load_runs < 1 or any(s < 1 for s in args.sizes):
        ap.error("--n, --scale-n, --load-runs and --sizes take numbers of at least 1")
    if not 0 < args.kill_grace <= 60:
        ap.error("--kill-grace: seconds above 0, at most 60")
    return args


def _loadavg() -> list[float]:
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def machine() -> dict[str, Any]:
    load_avg = _loadavg()
    return {
        "hostname": platform.node(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "loadavg_at_start": load_avg,
        "tools": {t: _version(t) for t in ("timeout", "tini", "dumb-init", "supervisord")},
    }


def _version(tool: str) -> str | None:
    path = Path(sys.executable).with_name(tool) if tool == "supervisord" else None
    exe = str(path) if path and path.exists() else shutil.which(tool)
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0] if text else None


def commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def problems(doc: dict[str, Any]) -> list[str]:
    """What --check fails on: a runner stop that left a process or did not stop its tree."""
    out = []
    part = doc.get("stoppers")
    if part:
        for s in part["stoppers"]:
            if not s["runner"] or s["skipped"]:
                continue
            for vid, cell in part["cells"][s["id"]].items():
                if cell["errors"] or cell["stopped"] < cell["n"] or cell["orphans"]:
                    out.append(f"{s['id']} / {vid}: {measure.cell_text(cell)} {cell['errors'] or ''}".rstrip())
    for r in (doc.get("scale") or {}).get("rows", []):
        side = r["runner_end_to_end"]
        if side["stopped"] < len(r["runner_samples"]) or side["orphans"]:
            out.append(f"scale {r['processes']}: runner stopped {side['stopped']}, orphans {side['orphans']}")
    for m in (doc.get("load") or {}).get("modes", []):
        if "skipped" not in m and (m["stopped"] < m["runs"] or m["orphans"]):
            out.append(f"load `runner {m['mode']}`: stopped {m['stopped']}/{m['runs']}, orphans {m['orphans']}")
    journal_part = doc.get("journal") or {}
    for side in [journal_part["fresh"], *journal_part["large"]] if journal_part else []:
        for c in ("stop", "stop_now", "status"):
            if side[c]["rc"] != 0:
                out.append(f"journal {side['journal_bytes']} bytes: `runner {c}` exited {side[c]['rc']}")
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="stop-bench-"))
    doc: dict[str, Any] = {
        "schema": 1,
        "machine": machine(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git_commit": commit(),
        "kill_grace": args.kill_grace,
        "runner_command": " ".join(Path(a).name if i == 0 else a for i, a in enumerate(runs.RUNNER)),
        "ci": args.ci,
        "goals": goals.GOALS,
    }
    try:
        if "stoppers" in args.parts:
            chosen = [c(work, args.kill_grace) for c in adapters.ALL if not args.stoppers or c.id in args.stoppers]
            victims = [v for v in zoo.VICTIMS if v.id in (args.victims or zoo.PEER)]
            t = time.monotonic()
            doc["stoppers"] = measure.run(chosen, victims, args.n, work, log=lambda m: print(f"bench: stoppers: {m}"))
            doc["stoppers"]["seconds"] = round(time.monotonic() - t, 1)
            print(f"\nAgainst other stoppers (n={args.n} per cell, kill grace {args.kill_grace:g} s):")
            print(measure.table(doc["stoppers"]) + "\n")
        if "scale" in args.parts:
            t = time.monotonic()
            # With its own stamp: --merge may keep it beside parts of another run.
            stamp = {"date": doc["date"], "git_commit": doc["git_commit"], "loadavg_at_start": _loadavg()}
            doc["scale"] = {**scale.run(args.sizes, args.scale_n, work, args.kill_grace), **stamp}
            doc["scale"]["loadavg_at_end"] = _loadavg()
            doc["scale"]["seconds"] = round(time.monotonic() - t, 1)
            print(f"\nAt scale (n={args.scale_n} per size and side):")
            print(scale.table(doc["scale"]) + "\n")
        if "load" in args.parts:
            t = time.monotonic()
            doc["load"] = load.run(args.load_runs, work, args.kill_grace)
            doc["load"]["seconds"] = round(time.monotonic() - t, 1)
            print("\nUnder load:")
            print(load.table(doc["load"]) + "\n")
        chosen_sizes = tuple(p for p in ("items", "journal") if p in args.parts)
        if chosen_sizes:
            # Each with its own stamp: --merge may keep them beside parts of another run.
            stamp = {"date": doc["date"], "git_commit": doc["git_commit"], "loadavg_at_start": _loadavg()}
            for p in chosen_sizes:
                t = time.monotonic()
                measured = sizes.run(
                    tuple(args.item_counts), args.items_window, tuple(m << 20 for m in args.journal_mib), (p,)
                )
                doc[p] = {**measured[p], **stamp, "seconds": round(time.monotonic() - t, 1)}
            if "items" in doc:
                print("\nItems:\n" + sizes.items_table(doc["items"]) + "\n")
            if "journal" in doc:
                print("\nJournal size:\n" + sizes.journal_table(doc["journal"]) + "\n")
        if "runs" in args.parts:
            t = time.monotonic()
            stamp = {"date": doc["date"], "git_commit": doc["git_commit"], "loadavg_at_start": _loadavg()}
            doc["runs"] = {
                **many_runs.run(tuple(args.run_counts), args.polls),
                **stamp,
                "seconds": round(time.monotonic() - t, 1),
            }
            print("\nMany runs under one directory:\n" + many_runs.table(doc["runs"]) + "\n")
        if "dashboard" in args.parts:
            t = time.monotonic()
            stamp = {"date": doc["date"], "git_commit": doc["git_commit"], "loadavg_at_start": _loadavg()}
            doc["dashboard"] = {**dashboard.run(), **stamp, "seconds": round(time.monotonic() - t, 1)}
            print("\nThe dashboard with a page open:\n" + dashboard.table(doc["dashboard"]) + "\n")
        if "traffic" in args.parts:
            t = time.monotonic()
            stamp = {"date": doc["date"], "git_commit": doc["git_commit"], "loadavg_at_start": _loadavg()}
            doc["traffic"] = {**dashboard_traffic.run(), **stamp, "seconds": round(time.monotonic() - t, 1)}
            print("\nThe dashboard's traffic with 500 runs:\n" + dashboard_traffic.table(doc["traffic"]) + "\n")
        if "plugin" in args.parts:
            t = time.monotonic()
            stamp = {"date": doc["date"], "git_commit": doc["git_commit"], "loadavg_at_start": _loadavg()}
            doc["plugin"] = {**plugin_idle.run(args.plugin_rounds), **stamp, "seconds": round(time.monotonic() - t, 1)}
            print("\nThe plugin, installed but unused:\n" + plugin_idle.table(doc["plugin"]) + "\n")
            print(plugin_idle.bytecode_table(doc["plugin"]) + "\n")
        if "pid1" in args.parts:
            t = time.monotonic()
            stamp = {"date": doc["date"], "git_commit": doc["git_commit"], "loadavg_at_start": _loadavg()}
            doc["pid1"] = {**pid1_window.run(args.pid1_n), **stamp, "seconds": round(time.monotonic() - t, 1)}
            print("\nA container's PID 1, deaf to SIGTERM until its first sigprocmask:")
            print(pid1_window.table(doc["pid1"]) + "\n")
        if "cost" in args.parts:
            t = time.monotonic()
            stamp = {"date": doc["date"], "git_commit": doc["git_commit"]}
            doc["cost"] = {
                **stopper_cost.run(args.cost_n, work / "cost"),
                **stamp,
                "seconds": round(time.monotonic() - t, 1),
            }
            print("\nThe stopper's own cost:\n" + stopper_cost.table(doc["cost"]) + "\n")
    finally:
        zoo.clean_up(work, "bench")
    doc["seconds"] = round(time.monotonic() - started, 1)
    found = problems(doc)
    for p in found:
        print(f"bench: problem: {p}", file=sys.stderr)
    parts = ", ".join(f"{p} {doc[p]['seconds']} s" for p in PARTS if p in doc)
    print(f"bench: {doc['seconds']} s ({parts})")
    if args.json and args.merge and args.json.exists():
        kept = json.loads(args.json.read_text())
        for p in PARTS:
            if p not in doc and p in kept:
                doc[p] = kept[p]
                doc.setdefault("merged", []).append(p)
        doc["goals"] = goals.GOALS  # today's goals, whichever run measured the parts kept
        if doc.get("merged"):  # the run's own stamp stays that of the parts it kept
            for key in ("date", "git_commit", "machine", "kill_grace", "runner_command", "ci"):
                doc[key] = kept.get(key, doc[key])
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.json.with_name(args.json.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        tmp.replace(args.json)
    return 1 if args.check and found else 0


if __name__ == "__main__":
    sys.exit(main())
