"""`make soak`: the reliability figures (crash and resume, stops under load).

Crash and resume: one run of several items whose provider, hook and verify commands
each take a moment; it is SIGKILLed at a random point of a random phase (the engine;
in some rounds the engine's whole group or a live call's group too), then
`runner resume`d, again and again, until the run completes. After every kill:
state.json parses, the journal parses, every item recorded done stays done, no item's
session starts again after its `item-done`, and after the resume nothing of the killed
attempt is alive.

Faults (reliability/faults.py): a stopper SIGKILLed or SIGINTed at random moments, then a
plain `runner stop`; fork storms without a cgroup; SIGTERM to `runner run` in its first
instants, in the foreground and as PID 1 of a pid namespace; SIGTERM to the PID 1 (tini)
of the container recipe's entrypoint under examples/kubernetes/run-local at each moment,
quiet and beside two CPU hogs. Per fault: trials, runs
left running, processes left, exit 0 with something left, stops not recorded.

Load: N runs with a SIGTERM-trapping provider, stopped at once by N concurrent
`runner stop`, then N more by `runner stop --now`; and one run stopped by 10 concurrent
stoppers of mixed kinds. Every run: exactly one `run-stop`, every exit code documented,
no process of the run left.

Disk and pid-namespace faults (reliability/soak_disk.py, issue 18): a full tmpfs at the stop,
a full disk with the engine SIGKILLed, a provider whose output fills the disk (then
resume), a read-only ext4 under a live run, a run in a pid namespace stopped from the
host; per fault, trials, runs left running, processes left, exit 0 with something left,
stops not recorded (expected only on the read-only disk).

Faults at the seams (reliability/soak_seams.py, issue 27): `rm -rf` of the run directory
during each stop mode, a run that filled its pids cgroup (a plain stop, and `rm -rf`),
`umount -l` of a live run's file system then `stop --all`, `cp -al` backups beside a run,
every refusal's bytes; per fault, trials, processes left, exit codes and whether
docs/exit-codes.md lists them for the command, and the fault's own figure.

Stop modes (reliability/modes.py, issue 26): every way to stop a run against every victim in
both containments, `--modes` trials per cell, each held to the same invariants; and
`--all-now` runs stopped by one `runner stop --all --now`, counted for a session or item
recorded failed.

    python reliability/soak.py [--kills 200] [--runs 50] [--modes 3] [--all-now 60] [--seam-trials 20]
                         [--parts crash,load,many,faults,disk,seams,modes,all-now] [--merge]
                         [--json docs/soak.json] [--check]

--check exits 1 on any loss (CI runs a short soak with it). `--parts` runs only the
parts named (default: all); `--merge` keeps the parts of the existing --json that are
not run now, with its stamp (date, commit, seed), and stamps each part run now with its
own (`stamp`), so a part measured again later says when and on which commit. Every
process the soak starts is killed at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stoppers import commit as git_commit  # noqa: E402
from reliability import faults  # noqa: E402
from runner.exitcodes import Exit  # noqa: E402
from runner.files import identity_file, journal
from runner.files.rundir import RunDir  # noqa: E402
from runner.files.state import StateStore  # noqa: E402
from runner.proc import (
    identity,
    signals,  # noqa: E402
    sweep,
)

RUNNER = [sys.executable, "-m", "runner"]
DOCUMENTED = {int(e) for e in Exit} - {int(Exit.INTERNAL)}
STEP = 'sleep "$1"; echo "$2"'  # a command that takes a moment and says something


def sh(script: str, *args: str) -> list[str]:
    return ["/bin/sh", "-c", script, "sh", *args]


def runner(*args: object, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RUNNER, *map(str, args)], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def toml(value: object) -> str:
    return json.dumps(value)


KILL_GRACE = 0.2
"""The soak's `[stop] kill_grace` (recorded in the JSON: its stop figures scale with it)."""


def write_spec(
    path: Path, items: list[str], provider: list[str], *, kill_grace: float = KILL_GRACE, extra: str = ""
) -> Path:
    path.write_text(
        f"items = {toml(items)}\n[provider]\ncommand = {toml(provider)}\n"
        f"[stop]\nkill_grace = {kill_grace}\ngrace = 10.0\n" + extra
    )
    return path


def tagged(run_id: str) -> list[int]:
    return [i.pid for i in sweep.tagged(run_id)]


# -- crash and resume ---------------------------------------------------------------------


def crash_and_resume(work: Path, kills: int, rng: random.Random) -> dict:
    items = [f"item-{i}" for i in range(6)]
    extra = (
        '[[hooks.post_session]]\ncommand = ["/bin/sh", "-c", "sleep 0.05"]\n'
        '[[verify]]\ncommand = ["/bin/sh", "-c", "sleep 0.05"]\n'
        '[[hooks.post_run]]\ncommand = ["/bin/sh", "-c", "sleep 0.05"]\n'
    )
    problems: list[str] = []
    done_kills = rounds = 0
    group_kills = child_kills = 0
    phases: dict[str, int] = {}  # the phase each kill landed in (state.json just before it)
    run_index = 0
    while done_kills < kills:
        run_index += 1
        spec = write_spec(work / f"crash-{run_index}.toml", items, sh(STEP, "0.15", "{item}"), extra=extra)
        rd = RunDir(work / f"crash-{run_index}")
        proc = runner("run", spec, "--run-dir", rd.path, "--detach")
        if proc.returncode != 0:
            problems.append(f"run {run_index}: start exited {proc.returncode}: {proc.stderr.strip()}")
            break
        while done_kills < kills:
            rounds += 1
            time.sleep(rng.uniform(0.0, 0.6))
            try:
                engine = identity_file.read(rd.engine_identity)
            except (FileNotFoundError, OSError):
                break
            children = [identity_file.read(p) for p in rd.children.glob("*.json") if p.exists()]
            if not identity.is_running(engine):
                break  # finished before the kill
            try:
                phase = StateStore(rd.state).load().phase or "start"
            except Exception:
                phase = "unknown"
            phases[phase] = phases.get(phase, 0) + 1
            how = rng.random()
            try:
                if how < 0.15:
                    os.killpg(engine.pgid, signal.SIGKILL)
                    group_kills += 1
                elif how < 0.3 and children:
                    # The engine first: a call killed while its engine lives is the
                    # call's failure, which the engine records (the run then ends
                    # FAILED). Here both die in one crash, as on a machine's OOM or
                    # reboot, whichever the machine runs first (a busy one once let the
                    # engine see its call die between the two kills).
                    os.kill(engine.pid, signal.SIGKILL)
                    os.killpg(children[0].pgid, signal.SIGKILL)
                    child_kills += 1
                else:
                    os.kill(engine.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            signals.wait_gone(engine, 10)
            done_kills += 1
            problems += check_after_kill(rd)
            resumed = runner("resume", "--run-dir", rd.path, "--detach")
            if resumed.returncode == Exit.BAD_INPUT and "expected a stopped or crashed run" in resumed.stderr:
                break  # it had completed just before the kill
            if resumed.returncode != 0:
                problems.append(f"resume after kill {done_kills}: exit {resumed.returncode}: {resumed.stderr.strip()}")
                break
            left = [c.pid for c in children if identity.is_running(c)]
            if left:
                problems.append(f"kill {done_kills}: the killed attempt's calls {left} outlived the resume")
        code = runner("wait", "--run-dir", rd.path, timeout=600)
        if code.returncode not in (Exit.OK, Exit.CRASHED, Exit.BAD_INPUT, Exit.NO_LIVE_RUN):
            problems.append(f"run {run_index}: wait exited {code.returncode}: {code.stderr.strip()}")
        problems += check_after_kill(rd)
        runner("stop", "--now", "--run-dir", rd.path)
    return {
        "kills": done_kills,
        "engine_group_kills": group_kills,
        "child_group_kills": child_kills,
        "runs": run_index,
        "phases": dict(sorted(phases.items())),
        "problems": problems,
    }


def check_after_kill(rd: RunDir) -> list[str]:
    out = []
    try:
        state = StateStore(rd.state).load()
    except Exception as exc:  # the property: never torn, never unreadable
        return [f"{rd.path.name}: state.json does not parse: {exc}"]
    records = journal.read(rd.journal)
    done_at: dict[str, int] = {}
    for n, record in enumerate(records):
        item = record.get("item")
        if record.get("event") == "item-done":
            done_at.setdefault(item, n)
        if record.get("event") == "session-start" and item in done_at:
            out.append(f"{rd.path.name}: item {item} ran again after it was recorded done")
    for item in done_at:
        if state.items[item].status != "done":
            out.append(f"{rd.path.name}: item {item} was done and is now {state.items[item].status}")
    return out


# -- load -----------------------------------------------------------------------------------


def load(work: Path, n: int, flags: list[str], label: str) -> dict:
    runs = []
    for i in range(n):
        spec = write_spec(work / f"{label}-{i}.toml", ["a"], sh('trap "" TERM; sleep 600 & wait'))
        rd = RunDir(work / f"{label}-{i}")
        proc = runner("run", spec, "--run-dir", rd.path, "--detach")
        if proc.returncode == 0:
            runs.append(rd)
    for rd in runs:  # every provider is running before the stops begin
        deadline = time.monotonic() + 30
        while not list(rd.children.glob("*.json")) and time.monotonic() < deadline:
            time.sleep(0.02)
    results: dict[RunDir, tuple[int, float, str]] = {}

    def stop(rd: RunDir) -> None:
        t0 = time.monotonic()
        proc = runner("stop", *flags, "--run-dir", rd.path)
        results[rd] = (proc.returncode, time.monotonic() - t0, proc.stderr.strip())

    threads = [threading.Thread(target=stop, args=(rd,)) for rd in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return summarize(runs, results, label)


def many_stoppers(work: Path, stoppers: int) -> dict:
    spec = write_spec(work / "many.toml", ["a"], sh('trap "" TERM; sleep 600 & wait'))
    rd = RunDir(work / "many")
    runner("run", spec, "--run-dir", rd.path, "--detach")
    deadline = time.monotonic() + 30
    while not list(rd.children.glob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.02)
    kinds = [[], ["--now"], ["--graceful"]]
    results: list[tuple[int, float, str]] = []

    def stop(flags: list[str]) -> None:
        t0 = time.monotonic()
        proc = runner("stop", *flags, "--run-dir", rd.path)
        results.append((proc.returncode, time.monotonic() - t0, proc.stderr.strip()))

    threads = [threading.Thread(target=stop, args=(kinds[i % 3],)) for i in range(stoppers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out = summarize([rd], {rd: (0, 0.0, "")}, "many-stoppers")
    bad = [r for r in results if r[0] not in DOCUMENTED]
    out["stoppers"] = stoppers
    out["codes"] = sorted({r[0] for r in results})
    out["problems"] += [f"a stopper exited {c}: {e}" for c, _, e in bad]
    return out


def summarize(runs: list[RunDir], results: dict, label: str) -> dict:
    problems = []
    for rd in runs:
        code, _, err = results.get(rd, (None, 0.0, "no result"))
        if code not in DOCUMENTED:
            problems.append(f"{label} {rd.path.name}: exit {code}: {err}")
        R = [r for r in journal.read(rd.journal) if r.get("event") == "run-stop"]
        if len(R) != 1:
            problems.append(f"{label} {rd.path.name}: {len(R)} run-stop records")
        deadline = time.monotonic() + 10
        while tagged(rd.run_id) and time.monotonic() < deadline:
            time.sleep(0.05)
        if tagged(rd.run_id):
            problems.append(f"{label} {rd.path.name}: processes left: {tagged(rd.run_id)}")
    latencies = sorted(r[1] for r in results.values()) if results else []
    return {
        "runs": len(runs),
        "median_s": statistics.median(latencies) if latencies else None,
        "p95_s": latencies[int(0.95 * (len(latencies) - 1))] if latencies else None,
        "codes": sorted({r[0] for r in results.values()}),
        "problems": problems,
    }


EARLY_MOMENTS = (0.02, 0.05, 0.15, 0.3, 1.0)
"""Seconds after `runner run` starts at which the early-SIGTERM trials signal it."""


def stop_faults(work: Path, args: argparse.Namespace, rng: random.Random) -> dict[str, dict]:
    """The stop under faults (reliability/faults.py): interrupted stoppers then a plain stop,
    fork storms without a cgroup, SIGTERM in the first instants (foreground and PID 1), and
    to run-local's PID 1 (run_local). One tally per fault: trials, runs left running,
    processes left, exit 0 with something left, stops not recorded, exit codes."""
    out: dict[str, dict] = {}
    trials = faults.interrupted_stopper(work, args.faults, signal.SIGKILL, rng)
    out["stopper_sigkill"] = faults.tally(trials)
    trials = faults.interrupted_stopper(work, args.faults, signal.SIGINT, rng)
    out["stopper_sigint"] = faults.tally(trials)
    trials = faults.fork_storm(work, args.storms)
    out["fork_storm"] = faults.tally(trials, ("code",))
    out["fork_storm"]["grown"] = sorted(t.get("grown", 0) for t in trials)
    for pid1, name in ((False, "early_sigterm_foreground"), (True, "early_sigterm_pid1")):
        trials = [t for _ in range(args.early) for t in faults.early_sigterm(work, EARLY_MOMENTS, pid1=pid1)]
        out[name] = faults.tally(trials, ("code",))
        out[name]["max_stop_s"] = max((t.get("stop_s", 0.0) for t in trials), default=None)
        out[name]["before_first_instruction"] = sum(1 for t in trials if t.get("before_first_instruction"))
    if args.run_local:
        out.update(run_local(work, args.run_local))
    return out


def run_local(work: Path, rounds: int) -> dict[str, dict]:
    """The container recipe's entrypoint under examples/kubernetes/run-local (tini as PID 1
    of a pid namespace), SIGTERM to PID 1 at each of faults.RUN_LOCAL_MOMENTS after it came
    to exist, `rounds` times per moment, quiet and beside two CPU hogs. Per moment: the
    trials, how many were stopped and recorded, how many never started, and the trials
    where something else happened (faults.run_local_sigterm says what must hold)."""
    missing = [t for t in ("unshare", "tini") if shutil.which(t) is None]
    if os.geteuid() != 0 or missing:
        why = f"run-local needs root, unshare and tini (make init); missing: {missing or 'root'}"
        return {"run_local_sigterm": {**faults.tally([]), "problems": [why]}}
    out: dict[str, dict] = {}
    for load, name in ((0, "run_local_sigterm"), (2, "run_local_sigterm_hog")):
        trials: list[dict] = []
        with faults.hogs(load):
            for _ in range(rounds):
                trials += faults.run_local_sigterm(work / name, faults.RUN_LOCAL_MOMENTS)
        out[name] = faults.tally(trials, ("code",))
        out[name]["before_first_instruction"] = sum(1 for t in trials if t.get("outcome") == "never started")
        out[name]["cpu_hogs"] = load
        out[name]["by_moment"] = {
            f"{at:g}": {
                "trials": sum(1 for t in trials if t["at"] == at),
                "stopped": sum(1 for t in trials if t["at"] == at and t.get("outcome") == "stopped"),
                "never_started": sum(1 for t in trials if t["at"] == at and t.get("outcome") == "never started"),
                "problems": sum(1 for t in trials if t["at"] == at and "problem" in t),
            }
            for at in faults.RUN_LOCAL_MOMENTS
        }
    return out


def _fault_losses(f: dict) -> list[str]:
    keys = ("runs_left_running", "processes_left", "exit0_with_something_left", "stops_not_recorded")
    return [f"{k}: {f[k]}" for k in keys if f.get(k)]


def cleanup(work: Path) -> None:
    for path in work.glob("*/run-id"):
        try:
            run_id = path.read_text().strip()
        except OSError:
            continue
        runner("stop", "--now", "--run-dir", path.parent)
        for pid in tagged(run_id):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


PARTS = {
    "crash": ("crash_and_resume",),
    "load": ("load_stop", "load_stop_now"),
    "many": ("many_stoppers",),
    "faults": ("faults",),
    "disk": ("disk_and_pidns_faults",),
    "seams": ("seam_faults",),
    "modes": ("stop_modes",),
    "all-now": ("all_now",),
}
"""Each part of the soak (--parts) and the keys of the JSON it writes."""
_STAMP = ("seed", "machine", "cpus", "date", "git_commit", "seconds")


def _parts(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in names if p not in PARTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"expected some of {','.join(PARTS)}; not {unknown or text!r}")
    return names


def merged(doc: dict, kept: dict, parts: list[str]) -> dict:
    """`doc` (the parts run now) beside the parts of `kept` (the existing JSON) not run
    now. The stamp stays the kept one (the soak most of the figures are from); each part
    run now carries its own under `stamp`."""
    out = dict(kept)
    stamp = {k: doc[k] for k in _STAMP if k in doc}
    for part in parts:
        for key in PARTS[part]:
            value = doc.get(key)
            if isinstance(value, dict):
                value = {**value, "stamp": stamp}
            out[key] = value
    out["merged"] = sorted(set(kept.get("merged") or []) | set(parts))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="the reliability soak")
    ap.add_argument("--kills", type=int, default=200)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--stoppers", type=int, default=10)
    ap.add_argument("--disk-trials", type=int, default=20, help="trials of each disk and pid-namespace fault")
    ap.add_argument("--seam-trials", type=int, default=20, help="trials of each fault at the seams (issue 27)")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--faults", type=int, default=20, help="interrupted-stopper trials per signal (SIGKILL, SIGINT)")
    ap.add_argument("--storms", type=int, default=5, help="fork-storm trials")
    ap.add_argument("--early", type=int, default=2, help="rounds of SIGTERM at each early moment (foreground, PID 1)")
    ap.add_argument(
        "--run-local",
        type=int,
        default=20,
        help="rounds of SIGTERM to run-local's PID 1 at each moment, quiet and under two CPU hogs (0: none)",
    )
    ap.add_argument("--modes", type=int, default=0, help="trials of every cell of the stop-modes matrix")
    ap.add_argument("--all-now", type=int, default=0, help="runs stopped by one `stop --all --now`, checked")
    ap.add_argument("--check", action="store_true", help="exit 1 on any loss")
    ap.add_argument("--parts", type=_parts, default=list(PARTS), help=f"{','.join(PARTS)} (default: all)")
    ap.add_argument("--merge", action="store_true", help="keep the parts of the existing --json that are not run now")
    args = ap.parse_args(argv)
    run = set(args.parts)
    rng = random.Random(args.seed)
    commit = git_commit()  # the code the soak runs, taken before it starts
    work = Path(tempfile.mkdtemp(prefix="runner-soak-"))
    t0 = time.monotonic()
    none: dict = {"problems": []}
    crash = hard = now = many = None
    fault: dict[str, dict] = {}
    disk: dict = {"faults": {}, "problems": []}
    seams: dict = {"faults": {}, "problems": []}
    stop_modes = all_now = None
    try:
        if "crash" in run:
            crash = crash_and_resume(work, args.kills, rng)
        if "load" in run:
            hard = load(work, args.runs, [], "stop")
            now = load(work, args.runs, ["--now"], "stop-now")
        if "many" in run:
            many = many_stoppers(work, args.stoppers)
        if "faults" in run:
            fault = stop_faults(work, args, rng)
        from reliability import soak_disk

        if "disk" in run and args.disk_trials:
            disk = soak_disk.run(work / "disk", args.disk_trials)
        from reliability import soak_seams

        if "seams" in run and args.seam_trials:
            seams = soak_seams.run(work / "seams", args.seam_trials, args.seed)
        from reliability import modes

        stop_modes = modes.soak(work / "modes", args.modes) if "modes" in run and args.modes else None
        all_now = modes.all_now(work, args.all_now) if "all-now" in run and args.all_now else None
    finally:
        cleanup(work)
    doc = {
        "seed": args.seed,
        "machine": os.uname().nodename,
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git_commit": commit,
        "kill_grace": KILL_GRACE,
        "seconds": round(time.monotonic() - t0, 1),
        "crash_and_resume": crash,
        "load_stop": hard,
        "load_stop_now": now,
        "many_stoppers": many,
        "faults": fault,
        "disk_and_pidns_faults": disk,
        "seam_faults": seams,
        "stop_modes": stop_modes,
        "all_now": all_now,
    }
    problems = [p for part in (crash, hard, now, many) for p in (part or none)["problems"]] + list(disk["problems"])
    problems += list(seams["problems"])
    problems += [p for f in fault.values() for p in f["problems"] + _fault_losses(f)]
    if stop_modes is not None:
        problems += stop_modes["problems"]
        print(f"soak: stop modes: {stop_modes['trials']} trials, {len(stop_modes['problems'])} problems")
    if all_now is not None:
        if all_now["with_a_failure"] or all_now["code"] != 0:
            problems.append(f"stop --all --now: {all_now}")
        print(f"soak: stop --all --now: {all_now['with_a_failure']} of {all_now['runs']} runs with a failure")
    if crash is not None:
        print(
            f"soak: {crash['kills']} kills over {crash['runs']} runs ({crash['engine_group_kills']} engine groups, "
            f"{crash['child_group_kills']} call groups), losses {len(crash['problems'])}"
        )
    if hard is not None and now is not None and hard["runs"] and now["runs"]:
        print(
            f"soak: {hard['runs']} runs stopped at once: median {hard['median_s']:.2f} s, p95 {hard['p95_s']:.2f} s; "
            f"--now: median {now['median_s']:.2f} s, p95 {now['p95_s']:.2f} s"
        )
    if many is not None:
        print(f"soak: {many['stoppers']} stoppers on one run: codes {many['codes']}")
    print(f"soak: disk and pid-namespace faults: {len(disk['faults'])} kinds; problems {len(problems)}")
    for name, f in fault.items():
        print(
            f"soak: fault {name}: {f['trials']} trials, {f['runs_left_running']} runs left running, "
            f"{f['processes_left']} processes left, {f['exit0_with_something_left']} exit 0 with something left, "
            f"{f['stops_not_recorded']} stops not recorded; codes {f['codes']}"
        )
    for name, f in seams["faults"].items():
        print(f"soak: seam {name}: {f['trials']} trials, {f['processes_left']} processes left; codes {f['codes']}")
    for name, why in (seams.get("skipped") or {}).items():
        print(f"soak: seam {name}: skipped: {why}")
    for p in problems:
        print(f"soak: problem: {p}")
    if args.json:
        if args.merge and args.json.exists():
            doc = merged(doc, json.loads(args.json.read_text()), args.parts)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.json.with_name(args.json.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        tmp.replace(args.json)
    return 1 if (args.check and problems) else 0


if __name__ == "__main__":
    sys.exit(main())
