"""The stop-modes matrix (issue 26): every way to stop a run, against every kind of
victim, in both containments, held to the same invariants. Shared by the tests (one
trial per cell, tests/runner/test_stop_modes.py) and the soak (`make soak`: many).

Modes: `runner stop`, `--now`, `--graceful --wait`, `--all`, `--all --now`, the
dashboard's "Stop" and "Stop now", SIGTERM to the engine, SIGTERM to a foreground
`runner run`, the STOP file. Victims (the provider): cooperative, trapping, env-scrubbed
(`env -i`: the provider, its group and its children carry no tag), a setsid escapee
whose parent lives (and which dropped its environment), a double fork, a child
subreaper's env-less setsid grandchildren, a pipe holder. Containment: a cgroup, or
process groups only.

In every cell: the exit code is documented (docs/exit-codes.md, the command's row) and
is the mode's success (0 for a stopper; STOPPED for the run's own code); exit 0 means
nothing of the run is alive at that moment; no session is recorded failed (a killed
one is stopped); exactly one `run-stop`; `runner resume` then completes the run. The
graceful modes stop between phases: their provider is a shell that waits for a gate and
exits 0, the victim its child; the gate opens once the graceful stop is asked (an event,
never a moment), and the phase in flight ends.

Each tree is found by a marker in the argv of each of its processes (pytest_stoplatency/kit/zoo.py),
so what dropped its environment is still seen and, whatever happens, killed at the end.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pytest_stoplatency.kit import zoo
from runner.exitcodes import Exit
from runner.files import identity_file, journal
from runner.files.rundir import RunDir
from runner.files.state import StateStore
from runner.proc import cgroup as cgroupmod
from runner.proc import sweep

RUNNER = [sys.executable, "-m", "runner"]
ROOT = Path(__file__).resolve().parent.parent

MODES = (
    "stop",
    "now",
    "graceful-wait",
    "all",
    "all-now",
    "dashboard-stop",
    "dashboard-now",
    "sigterm-engine",
    "sigterm-foreground",
    "stop-file",
)
VICTIMS = ("cooperative", "trapping", "env-scrubbed", "setsid-escapee", "double-fork", "subreaper", "pipe-holder")
CONTAINMENTS = ("cgroup", "group")
SHAPES = ("zombie-leader", "setsid-spawner", "sub-cgroup")
"""Issue 38's shapes, held to every invariant of a cell in every mode and containment
(tests/runner/test_stop_modes.py runs them in a test of their own, not multiplied
into VICTIMS' matrix): a process whose leader thread exited while another runs; a
provider that traps SIGTERM and starts an env-less setsid process every 50 ms; a
provider that makes cgroups below its own (the run's work cgroup, when contained) and
puts a trapping child in the deepest. A cell of a shape also finds no cgroup of the
run left once its stop is over."""

COMMAND = {
    "stop": "stop",
    "now": "stop --now",
    "graceful-wait": "stop --graceful --wait",
    "all": "stop --all",
    "all-now": "stop --all",
    "dashboard-stop": "stop",  # the dashboard shows the code its button's command would exit with
    "dashboard-now": "stop --now",
    "sigterm-engine": "wait",
    "sigterm-foreground": "run",
    "stop-file": "wait",
}
"""The row of docs/exit-codes.md that documents each mode's code."""
SUCCESS = {m: Exit.STOPPED if COMMAND[m] in ("wait", "run", "stop --graceful --wait") else Exit.OK for m in MODES}
GRACEFUL = ("graceful-wait", "stop-file")
KILL_GRACE = 0.2
SUBREAPER_GRANDCHILDREN = 5

_PLUGIN_KIND = {
    "cooperative": "cooperative",
    "trapping": "trap-term",
    "setsid-escapee": "env-scrubber",  # forks, setsid, execs with an empty environment; its parent lives
    "double-fork": "double-fork",
    "pipe-holder": "pipe-holder",
    "zombie-leader": "zombie-leader",
    "setsid-spawner": "setsid-spawner",
}
_SERIAL = itertools.count(1)

# A provider of our own for the two victims the plugin has no kind for: run as
# `python -S <tree dir>/provider.py KIND READY SLEEP`, so that the tree's marker (its
# directory) is in every argv, env-less processes included.
PROVIDER = r'''
import os, signal, sys, time
kind, ready, sleep = sys.argv[1], sys.argv[2], float(sys.argv[3])
me = os.path.abspath(__file__)
deadline = time.monotonic() + sleep

def until_deadline():
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(left)

def sleeper(env):
    """A plain sleeper (dies at SIGTERM), marked by this file in its argv."""
    left = str(max(deadline - time.monotonic(), 0.0))
    os.execve(sys.executable, [sys.executable, "-S", me, "sleeper", "-", left], env)

def ready_now():
    with open(ready + ".tmp", "w") as f:
        f.write("ready")
    os.replace(ready + ".tmp", ready)

if kind == "sleeper":
    until_deadline()
    sys.exit(0)
signal.signal(signal.SIGTERM, lambda s, f: None)
if kind == "sub-cgroup":  # cgroups below its own (the run's work/, when contained), a child in the deepest
    with open("/proc/self/cgroup") as f:
        here = [line[3:].strip() for line in f if line.startswith("0::")][0]
    root = [l.split()[4] for l in open("/proc/self/mountinfo") if l.split(" - ")[1].split()[0] == "cgroup2"][0]
    child = os.fork()
    if child == 0:
        signal.signal(signal.SIGTERM, lambda s, f: None)
        until_deadline()
        os._exit(0)
    if here.startswith("/runner/"):
        deep = os.path.join(root + here, "made", "deeper")
        os.makedirs(deep)
        with open(os.path.join(deep, "cgroup.procs"), "w") as f:
            f.write(str(child))
    ready_now()
if kind == "env-scrubbed":  # under `env -i`: no tag here, nor in the two children
    for _ in range(2):
        if os.fork() == 0:
            sleeper({})
    ready_now()
elif kind == "subreaper":  # grandchildren: setsid, env-less, double-forked, adopted by us
    import ctypes
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
    n = int(os.environ.get("GRANDCHILDREN", "5"))
    for _ in range(n):
        child = os.fork()
        if child == 0:
            os.setsid()
            if os.fork() == 0:
                sleeper({})
            os._exit(0)
        os.waitpid(child, 0)
    while True:  # ready once every grandchild is ours and exec'd
        kids = []
        for tid in os.listdir(f"/proc/{os.getpid()}/task"):
            with open(f"/proc/{os.getpid()}/task/{tid}/children") as f:
                kids += f.read().split()
        marked = 0
        for kid in kids:
            try:
                with open(f"/proc/{kid}/cmdline", "rb") as f:
                    marked += me.encode() in f.read()
            except OSError:
                pass
        if marked >= n:
            break
        time.sleep(0.005)
    ready_now()
until_deadline()
'''


class _OwnTree:
    """A tree of our own provider (bench/zoo.Tree's interface for scan and kill)."""

    def __init__(self, kind: str, root: Path, sleep: float) -> None:
        self.dir = Path(root) / f"own{next(_SERIAL)}"  # beside zoo.Tree's t<n>, never one of them
        self.dir.mkdir(parents=True)
        (self.dir / "provider.py").write_text(PROVIDER)
        self.marker = os.fsencode(f"{self.dir}/")
        self.token = b"\0no token"  # never an environment entry
        self.exclude: set[int] = set()
        self.ready = self.dir / "ready"
        prog = [sys.executable, "-S", str(self.dir / "provider.py"), kind, str(self.ready), str(sleep)]
        if kind == "env-scrubbed":
            self.argv = ["/usr/bin/env", "-i", *prog]
        else:
            self.argv = ["/usr/bin/env", f"GRANDCHILDREN={SUBREAPER_GRANDCHILDREN}", *prog]

    def extras(self) -> list[zoo.Member]:
        return []

    def adopt(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.dir}: the provider never said it was ready")
            time.sleep(0.005)


def make_tree(victim: str, root: Path, sleep: float) -> Any:
    if victim in _PLUGIN_KIND:
        tree = zoo.Tree(zoo.VictimSpec(victim, victim, _PLUGIN_KIND[victim]), root)
        i = tree.argv.index("--sleep")
        tree.argv[i + 1] = str(sleep)
        return tree
    return _OwnTree(victim, root, sleep)


def documented_codes() -> dict[str, set[str]]:
    """docs/exit-codes.md's "By command" table (tests/runner/test_exit_codes_doc.py holds
    it to the code)."""
    out: dict[str, set[str]] = {}
    for line in (ROOT / "docs" / "exit-codes.md").read_text(encoding="utf-8").splitlines():
        m = re.match(r"\| `runner ([^`]+)` \| ([A-Z_, ]+) \|$", line)
        if m:
            out[m.group(1)] = {c.strip() for c in m.group(2).split(",")}
    return out


def runner(*args: object, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RUNNER, *map(str, args)], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


class Dashboard:
    """A real `runner dashboard` over `base`, for the dashboard's modes."""

    def __init__(self, base: Path) -> None:
        self.base = Path(base)
        self.base.mkdir(parents=True, exist_ok=True)
        self.err = open(self.base.parent / f"dashboard-{os.getpid()}.err", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [*RUNNER, "dashboard", "--runs-dir", str(self.base), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=self.err,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("dashboard: http://"):
            self.close()
            raise RuntimeError(f"dashboard did not start: {line!r}")
        url = line.split(" ", 1)[1].strip()
        self.token = url.split("token=", 1)[1]
        host, port = url.split("/?", 1)[0].removeprefix("http://").rsplit(":", 1)
        self.host, self.port = host, int(port)

    def _request(self, method: str, path: str) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            conn.request(method, path, headers={"X-Runner-Token": self.token})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def press(self, name: str, action: str, timeout: float = 60.0) -> tuple[int, str]:
        """Press a button; the code and message of its action once it has ended."""
        status, body = self._request("POST", f"/api/runs/{name}/{action}")
        if status != 202:
            raise RuntimeError(f"POST {action} on {name}: {status} {body!r}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, body = self._request("GET", "/api/runs")
            rows = {r["name"]: r for r in json.loads(body)["runs"]} if status == 200 else {}
            act = (rows.get(name) or {}).get("action")
            if act is not None and act["action"] == action and act["state"] in ("done", "failed"):
                return int(act["code"]), str(act["message"])
            time.sleep(0.02)
        raise RuntimeError(f"{action} on {name}: no result within {timeout} s")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.err.close()


def _spec(path: Path, provider: list[str], containment: str) -> Path:
    path.write_text(
        f'items = ["a"]\n[provider]\ncommand = {json.dumps(provider)}\n'
        f'[stop]\nkill_grace = {KILL_GRACE}\ngrace = 10.0\ncontainment = "{containment}"\n'
    )
    return path


def _wait_for(what: str, check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"never {what} within {timeout} s")
        time.sleep(0.005)


def _left(tree: Any, key: str | None, cgroup: Path | None) -> list[int]:
    """What of the run is alive: the tree (marker, token, extras), the run's tag, its cgroup."""
    pids = {pid for pid, _ in zoo.scan([tree])[tree]}
    if key:
        pids |= {i.pid for i in sweep.tagged(key)}
    if cgroup is not None and cgroup.exists():
        pids |= set(cgroupmod.RunCgroup(cgroup).members("all"))
    return sorted(pids)


def cell(work: Path, mode: str, victim: str, containment: str, dashboard: Dashboard | None = None) -> dict[str, Any]:
    """One trial of one cell: the run started with `victim` as its provider, stopped by
    `mode`, every invariant checked, then resumed to its end. Everything of it is killed
    before this returns. The trial's figures, and its `problems` (empty: the cell holds)."""
    graceful = mode in GRACEFUL
    n = next(_SERIAL)
    name = f"m{os.getpid()}-{n}-{mode}-{victim}-{containment}"
    base = dashboard.base if mode.startswith("dashboard") else work / name
    base.mkdir(parents=True, exist_ok=True)
    rd = RunDir(base / name)
    tree = make_tree(victim, work / "trees", zoo.SLEEP)
    mark, gate = work / f"{name}.resumed", work / f"{name}.gate"
    if graceful:  # the phase in flight ends (exit 0) once the gate opens; the victim is its child
        script = 'test -e "$0" && exit 0; gate="$1"; shift; "$@" & while [ ! -e "$gate" ]; do sleep 0.02; done'
        provider = ["/bin/sh", "-c", script, str(mark), str(gate), *tree.argv]
    else:  # the victim is the provider itself, its group's leader
        provider = ["/bin/sh", "-c", 'test -e "$0" && exit 0; exec "$@"', str(mark), *tree.argv]
    spec = _spec(work / f"{name}.toml", provider, containment)
    trial: dict[str, Any] = {"mode": mode, "victim": victim, "containment": containment, "problems": []}
    problems: list[str] = trial["problems"]
    foreground: subprocess.Popen[str] | None = None
    key: str | None = None
    cgroup: Path | None = None
    try:
        if mode == "sigterm-foreground":
            with open(work / f"{name}.out", "w") as out:
                foreground = subprocess.Popen(
                    [*RUNNER, "run", str(spec), "--run-dir", str(rd.path)],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            _wait_for("an engine identity", rd.engine_identity.exists)
        else:
            started = runner("run", spec, "--run-dir", rd.path, "--detach")
            if started.returncode != 0:
                problems.append(f"run did not start: {started.stderr.strip()}")
                return trial
        tree.adopt(timeout=30)
        key = rd.key(rd.run_id)
        if rd.cgroup_file.exists():
            cgroup = Path(rd.cgroup_file.read_text().strip())
        t0 = time.monotonic()
        code, said = _stop(mode, rd, base, dashboard, foreground, gate)
        trial["elapsed_s"] = round(time.monotonic() - t0, 3)
        left = _left(tree, key, cgroup)
        trial.update(code=code, left_at_exit=len(left), said=said[-400:])
        documented = code in Exit._value2member_map_ and Exit(code).name in documented_codes()[COMMAND[mode]]
        if not documented:
            problems.append(f"exit {code}: not documented for `runner {COMMAND[mode]}`")
        if code != SUCCESS[mode]:
            problems.append(f"exit {code}, not {int(SUCCESS[mode])}: {said[-300:]}")
        if code == 0 and left:
            problems.append(f"exit 0 with pids {left} of the run alive")
        _wait_for("the engine's exit", lambda: not rd.is_live())
        records = journal.read(rd.journal)
        ends = [r for r in records if r.get("event") == "session-end"]
        trial["sessions"] = [r.get("outcome") for r in ends]
        if any(r.get("outcome") not in ("stopped", "passed") for r in ends):
            problems.append(f"a session recorded {trial['sessions']}")
        if any(r.get("event") == "item-failed" for r in records):
            problems.append("an item recorded failed")
        if victim in SHAPES and cgroup is not None and cgroup.exists():
            problems.append(f"cgroups of the run left after the stop: {sorted(str(d) for d, _, _ in os.walk(cgroup))}")
        trial["run_stops"] = sum(r.get("event") == "run-stop" for r in records)
        if trial["run_stops"] != 1:
            problems.append(f"{trial['run_stops']} run-stop records")
        state = StateStore(rd.state).load()
        if not (state.stopped and state.status == "stopped"):
            problems.append(f"state says {state.status}, stopped {state.stopped}")
        leftover = _left(tree, key, cgroup)
        if leftover:
            problems.append(f"pids {leftover} of the run alive after the stop")
        mark.write_text("")
        resumed = runner("resume", "--detach", "--run-dir", rd.path)
        trial["resume"] = resumed.returncode
        if resumed.returncode != 0:
            problems.append(f"resume {resumed.returncode}: {resumed.stderr.strip()[-300:]}")
        else:
            _wait_for("the resumed run's end", lambda: not rd.is_live(), timeout=60)
            state = StateStore(rd.state).load()
            trial["resumed_status"] = state.status
            if state.status != "completed":
                problems.append(f"the resumed run ended {state.status}")
    except (RuntimeError, OSError, subprocess.TimeoutExpired, ValueError) as exc:
        problems.append(f"{type(exc).__name__}: {exc}")
    finally:
        _clean(rd, tree, key, foreground)
    return trial


def _stop(
    mode: str,
    rd: RunDir,
    base: Path,
    dashboard: Dashboard | None,
    foreground: subprocess.Popen[str] | None,
    gate: Path,
) -> tuple[int, str]:
    """Stop the run the way `mode` says: the exit code its command (or the run) answers.
    A graceful mode opens the gate once its stop is asked (the request written, the
    STOP file there): the phase in flight then ends."""
    if mode == "graceful-wait":
        proc = subprocess.Popen(
            [*RUNNER, "stop", "--graceful", "--wait", "--run-dir", str(rd.path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            _wait_for("the graceful request", rd.stop_request.exists)
            gate.write_text("")
            out, _ = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        return proc.returncode, out
    if mode in ("stop", "now", "all", "all-now"):
        flags = {
            "stop": ["--run-dir", rd.path],
            "now": ["--now", "--run-dir", rd.path],
            "all": ["--all", "--runs-dir", base],
            "all-now": ["--all", "--now", "--runs-dir", base],
        }[mode]
        done = runner("stop", *flags)
        return done.returncode, done.stdout + done.stderr
    if mode in ("dashboard-stop", "dashboard-now"):
        assert dashboard is not None
        return dashboard.press(rd.path.name, "stop" if mode == "dashboard-stop" else "stop-now")
    if mode == "sigterm-engine":
        os.kill(identity_file.read(rd.engine_identity).pid, signal.SIGTERM)
    elif mode == "stop-file":
        rd.stop_file.write_text("")
        gate.write_text("")
    elif mode == "sigterm-foreground":
        assert foreground is not None
        foreground.send_signal(signal.SIGTERM)
        return foreground.wait(timeout=120), ""
    proc = runner("wait", "--run-dir", rd.path)
    return proc.returncode, proc.stdout + proc.stderr


def _clean(rd: RunDir, tree: Any, key: str | None, foreground: subprocess.Popen[str] | None) -> None:
    """Whatever the trial left: the run stopped, the tree and the tagged killed."""
    if rd.exists() and rd.is_live():
        runner("stop", "--now", "--run-dir", rd.path)
    if foreground is not None:
        if foreground.poll() is None:
            foreground.kill()
        foreground.wait()
    zoo.kill_rounds(lambda: zoo.scan([tree])[tree])
    if key:
        zoo.kill([(i.pid, i.start_ticks) for i in sweep.tagged(key)])


WAITERS = ("wait", "graceful-wait", "foreground")
"""The waiters held against a `runner stop --now` (issue 38.3): each must say STOPPED,
whoever recorded the stop."""
WAITER_COMMAND = {"wait": "wait", "graceful-wait": "stop --graceful --wait", "foreground": "run"}


def _holds_pidfd_of(waiter: int, pid: int) -> bool:
    """`waiter` holds a pidfd of `pid` (its fdinfo names it): it is waiting on that
    process's exit, an event the kernel shows, not a moment."""
    try:
        fds = os.listdir(f"/proc/{waiter}/fdinfo")
    except OSError:
        return False
    for fd in fds:
        try:
            with open(f"/proc/{waiter}/fdinfo/{fd}") as f:
                if f"Pid:\t{pid}\n" in f.read():
                    return True
        except OSError:
            continue
    return False


def waiter_cell(work: Path, waiter: str, containment: str) -> dict[str, Any]:
    """One trial of a waiter against `runner stop --now`: a run whose provider traps
    SIGTERM, the waiter (`runner wait`, `stop --graceful --wait`, or the foreground `runner
    run` itself) waiting on its engine (it holds the engine's pidfd: an event), then
    `--now`. The waiter must exit STOPPED; the `--now` exit 0 with nothing of the run
    alive; one run-stop; the state stopped. Everything of it is killed before this
    returns."""
    n = next(_SERIAL)
    name = f"w{os.getpid()}-{n}-{waiter}-{containment}"
    base = work / name
    base.mkdir(parents=True, exist_ok=True)
    rd = RunDir(base / name)
    tree = make_tree("trapping", work / "trees", zoo.SLEEP)
    spec = _spec(work / f"{name}.toml", tree.argv, containment)
    trial: dict[str, Any] = {"mode": f"{waiter}-vs-now", "victim": "trapping", "containment": containment}
    problems: list[str] = []
    trial["problems"] = problems
    proc: subprocess.Popen[str] | None = None
    key: str | None = None
    cgroup: Path | None = None
    try:
        argv = [*RUNNER, "run", str(spec), "--run-dir", str(rd.path)]
        if waiter != "foreground":
            started = runner("run", spec, "--run-dir", rd.path, "--detach")
            if started.returncode != 0:
                problems.append(f"run did not start: {started.stderr.strip()}")
                return trial
            argv = [*RUNNER, *WAITER_COMMAND[waiter].split(), "--run-dir", str(rd.path)]
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        _wait_for("an engine identity", rd.engine_identity.exists)
        tree.adopt(timeout=30)
        key = rd.key(rd.run_id)
        if rd.cgroup_file.exists():
            cgroup = Path(rd.cgroup_file.read_text().strip())
        engine = identity_file.read(rd.engine_identity).pid
        if waiter != "foreground":
            _wait_for("the waiter waiting on the engine", lambda: _holds_pidfd_of(proc.pid, engine))
        t0 = time.monotonic()
        now = runner("stop", "--now", "--run-dir", rd.path)
        out, _ = proc.communicate(timeout=120)
        trial["elapsed_s"] = round(time.monotonic() - t0, 3)
        left = _left(tree, key, cgroup)
        trial.update(code=proc.returncode, now_code=now.returncode, left_at_exit=len(left), said=out[-400:])
        if proc.returncode != Exit.STOPPED:
            problems.append(f"the waiter exited {proc.returncode}, not {int(Exit.STOPPED)}: {out.strip()[-300:]}")
        if now.returncode != Exit.OK:
            problems.append(f"--now exited {now.returncode}: {(now.stdout + now.stderr).strip()[-300:]}")
        if now.returncode == 0 and left:
            problems.append(f"--now exit 0 with pids {left} of the run alive")
        if "killed ()" in now.stdout + now.stderr + out:
            problems.append("an empty 'killed ()'")
        _wait_for("the engine's exit", lambda: not rd.is_live())
        records = journal.read(rd.journal)
        trial["run_stops"] = sum(r.get("event") == "run-stop" for r in records)
        if trial["run_stops"] != 1:
            problems.append(f"{trial['run_stops']} run-stop records")
        state = StateStore(rd.state).load()
        if not (state.stopped and state.status == "stopped"):
            problems.append(f"state says {state.status}, stopped {state.stopped}")
    except (RuntimeError, OSError, subprocess.TimeoutExpired, ValueError) as exc:
        problems.append(f"{type(exc).__name__}: {exc}")
    finally:
        _clean(rd, tree, key, proc)
    return trial


def tally(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """The closing figures of many trials: per mode, trials, problems, exit 0 with
    something left, sessions recorded failed, run-stops other than one, resumes that did
    not complete; and the problems themselves."""
    out: dict[str, Any] = {"trials": len(trials), "modes": {}, "problems": []}
    for t in trials:
        m = out["modes"].setdefault(
            t["mode"], {"trials": 0, "with_problems": 0, "exit0_with_something_left": 0, "codes": {}}
        )
        m["trials"] += 1
        m["with_problems"] += bool(t["problems"])
        m["exit0_with_something_left"] += t.get("code") == 0 and bool(t.get("left_at_exit"))
        code = str(t.get("code"))
        m["codes"][code] = m["codes"].get(code, 0) + 1
        out["problems"] += [f"{t['mode']}/{t['victim']}/{t['containment']}: {p}" for p in t["problems"]]
    return out


def soak(work: Path, trials: int, containments: tuple[str, ...] = CONTAINMENTS) -> dict[str, Any]:
    """`trials` trials of every cell (`make soak`), one dashboard for the dashboard's
    modes; the tally of them all (tally)."""
    dashboard = Dashboard(work / "dash" / "runs")
    out: list[dict[str, Any]] = []
    try:
        for _ in range(trials):
            for containment in containments:
                for mode in MODES:
                    for victim in VICTIMS:
                        out.append(cell(work, mode, victim, containment, dashboard=dashboard))
                for waiter in WAITERS:
                    out.append(waiter_cell(work, waiter, containment))
    finally:
        dashboard.close()
        zoo.sweep(work / "trees")
        zoo.forget_records()
    return tally(out)


def all_now(work: Path, n: int) -> dict[str, Any]:
    """`n` live runs (each provider a cooperative victim: it dies at the first SIGTERM,
    the stop's or the engine's, whichever lands first), then one `runner stop --all --now`:
    how many runs recorded a session failed or an item failed (issue 26: 3 of 63 did)."""
    base = work / "all-now"
    base.mkdir(parents=True, exist_ok=True)
    made = [make_tree("cooperative", work / "trees", zoo.SLEEP) for _ in range(n)]
    rds = []
    try:
        for i, tree in enumerate(made):
            rd = RunDir(base / f"r{i:03d}")
            spec = _spec(work / f"all-now-{i}.toml", tree.argv, "auto")
            started = runner("run", spec, "--run-dir", rd.path, "--detach")
            if started.returncode == 0:
                rds.append(rd)
                tree.adopt(timeout=30)
        t0 = time.monotonic()
        done = runner("stop", "--all", "--now", "--runs-dir", base, timeout=300)
        elapsed = time.monotonic() - t0
        failed = 0
        for rd in rds:
            _wait_for("the engine's exit", lambda rd=rd: not rd.is_live(), timeout=60)
            records = journal.read(rd.journal)
            failed += any(
                r.get("event") == "item-failed" or (r.get("event") == "session-end" and r.get("outcome") == "failed")
                for r in records
            )
        return {"runs": len(rds), "code": done.returncode, "with_a_failure": failed, "elapsed_s": round(elapsed, 3)}
    finally:
        for rd in rds:
            if rd.is_live():
                runner("stop", "--now", "--run-dir", rd.path)
        zoo.kill([m for t in made for m in zoo.scan([t])[t]])
