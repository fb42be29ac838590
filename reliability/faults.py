"""Hostile trials of a stop under faults (issue 18), shared by the tests (a few trials
each, in `make test`) and the soak (`make soak`: the long form, figures in docs/soak.json).

Each trial drives the real `runner` (`python -m runner`) against real processes and
returns what it saw; `tally` sums the trials of one fault into the closing figures:
trials, runs left running, processes left, exit 0 with something left, stops not
recorded, and every exit code seen.

- interrupted_stopper: a stopper (`runner stop --now` or `runner stop`) is SIGKILLed,
  SIGINTed or SIGTERMed at a random moment (half of them within 0.1 s of the kill grace;
  the soak) or once it has reached a named state (STOPPER_STATES; the tests), then a
  plain `runner stop` must finish the job.
- early_sigterm: SIGTERM to a foreground `runner run` (or, `pid1`, to the init of a pid
  namespace that `runner run` is) at a given moment after its start.
- fork_storm: a provider whose processes trap SIGTERM, each setsid's and forks again,
  under group containment (no cgroup); `runner stop --now`: exit 0 only with nothing left.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from runner.exitcodes import Exit
from runner.files import identity_file, journal
from runner.files.rundir import RunDir
from runner.files.state import StateStore
from runner.ident import Identity
from runner.proc import signals, sweep
from runner.proc.cgroup import run_cgroup_path

RUNNER = [sys.executable, "-m", "runner"]
DOCUMENTED = {int(e) for e in Exit} - {int(Exit.INTERNAL)}
TRAP_TREE = 'trap "" TERM; sleep 7200 & sleep 7200 & wait'
"""A provider that ignores SIGTERM (so do its two children): only SIGKILL ends it."""
TOLD_TREE = r"""
import os, signal, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)
for _ in range(2):
    os.posix_spawnp("sleep", ["sleep", "7200"], os.environ)  # SIGTERM stays ignored in them


def told(signum, frame):
    with open(sys.argv[1], "a") as f:
        f.write("TERM\n")


signal.signal(signal.SIGTERM, told)
open(sys.argv[1] + ".ready", "x").close()
while True:
    signal.pause()
"""
"""TRAP_TREE's shape in Python, whose leader also notes every SIGTERM it gets in the file
argv[1]: the moment a stop's SIGTERM reached the run is an event a test can wait for.
Until it creates argv[1] + ".ready" it ignores SIGTERM (its children must inherit the
ignore): a stop that comes before that is never told, so wait for it (told_ready)."""


def told_tree(told: Path) -> list[str]:
    return [sys.executable, "-I", "-S", "-c", TOLD_TREE, str(told)]


def told_ready(told: Path, timeout: float = 60.0) -> bool:
    """TOLD_TREE's leader notes SIGTERMs from now on (its handler is in place)."""
    return await_file(Path(f"{told}.ready"), timeout=timeout)


HOLD_WHILE_LOADING = r"""
import os, runpy, sys, time

_hold = os.environ.pop("FAULTS_HOLD_FILE")


def _in_main():
    # runner.cli is loaded (its imports are all at its top) and its main() runs: the
    # command's first instruction (cli.early_signals) came before main's first import.
    return hasattr(sys.modules.get("runner.cli"), "main")


class _HoldWhileLoading:
    def find_spec(self, name, path=None, target=None):
        if name.startswith("runner.") and _in_main():
            sys.meta_path.remove(self)
            with open(_hold, "x"):
                pass
            while os.path.exists(_hold):  # until the test has acted and removes the file
                time.sleep(0.002)
        return None


sys.meta_path.insert(0, _HoldWhileLoading())
runpy.run_module("runner", run_name="__main__", alter_sys=True)
"""
"""`python -m runner ...` that holds itself while its modules load: at the first import of a
runner module by cli.main, after the command's first instruction (cli.early_signals,
whether or not an ablation emptied it), it creates the file
$FAULTS_HOLD_FILE and waits until that file is removed. A signal sent meanwhile lands
in that state, whatever the machine's speed. The variable is taken out of the
environment at once, so nothing the command starts (its engine) holds."""


def held_while_loading(hold: Path) -> tuple[list[str], dict[str, str]]:
    """(argv prefix, environment) of a runner command held while its modules load
    (HOLD_WHILE_LOADING); the command's own arguments follow the prefix."""
    return [sys.executable, "-c", HOLD_WHILE_LOADING], {**os.environ, "FAULTS_HOLD_FILE": str(hold)}


def await_file(path: Path, proc: subprocess.Popen[str] | None = None, timeout: float = 60.0) -> bool:
    """Until `path` exists: True once it does; False if `proc` exited first or `timeout`
    passed without it."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if (proc is not None and proc.poll() is not None) or time.monotonic() > deadline:
            return path.exists()
        time.sleep(0.002)
    return True


def sh(script: str, *args: str) -> list[str]:
    return ["/bin/sh", "-c", script, "sh", *args]


def write_spec(path: Path, provider: list[str], *, kill_grace: float, grace: float = 10.0, extra: str = "") -> Path:
    path.write_text(
        f'items = ["a"]\n[provider]\ncommand = {json.dumps(provider)}\n'
        f"[stop]\nkill_grace = {kill_grace}\ngrace = {grace}\n" + extra
    )
    return path


def runner(*args: object, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RUNNER, *map(str, args)], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def _key(rd: RunDir) -> str:
    """The run's membership key (its tag's value): the run id and its directory's identity."""
    return rd.key(rd.run_id) or rd.run_id


def tagged(run_id: str) -> list[int]:
    """Living processes (zombies are dead) that carry the run's tag."""
    return [i.pid for i in sweep.tagged(run_id)]


def wait_children(rd: RunDir, timeout: float = 30.0) -> bool:
    """Until the engine has registered its first call."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if rd.children.is_dir() and any(rd.children.glob("*.json")):
            return True
        time.sleep(0.01)
    return False


def recorded(rd: RunDir) -> bool:
    """The stop is recorded in both places: state.json stopped and this attempt's run-stop."""
    try:
        state = StateStore(rd.state).load()
    except Exception:
        return False
    return state.stopped and any(r.get("event") == "run-stop" for r in journal.read_attempt(rd.journal))


def kill_tagged(run_id: str) -> None:
    for pid in tagged(run_id):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _settled_left(run_id: str, settle: float = 5.0) -> list[int]:
    deadline = time.monotonic() + settle
    while tagged(run_id) and time.monotonic() < deadline:
        time.sleep(0.05)
    return tagged(run_id)


STOPPER_STATES = ("start-up", "loading", "signalled", "killed")
"""Where interrupted_stopper's signal lands, each reached on purpose:
- start-up: sent as soon as the stopper is started: mostly in the interpreter's own
  start-up, before the runner's first instruction (racy by nature: what is documented
  for it, and only then, is excused by `tally`);
- loading: while its modules load, after its first instruction (held there:
  HOLD_WHILE_LOADING);
- signalled: once the run's provider got the stop's SIGTERM (TOLD_TREE notes it), in
  the kill grace;
- killed: once the provider's leader is gone (after the SIGKILL): the stop records."""


def _reach(state: str, rd: RunDir, stopper: subprocess.Popen[str], hold: Path, told: Path, leader: Identity) -> bool:
    """Wait until the stopper has reached `state` (STOPPER_STATES); False if it ended first."""
    if state == "loading":
        return await_file(hold, stopper)
    if state == "signalled":
        return await_file(told, stopper)
    if state == "killed":
        return signals.wait_gone(leader, 60.0)
    return True


def interrupted_stopper(
    work: Path,
    n: int,
    sig: int,
    rng: random.Random | None = None,
    *,
    kill_grace: float = 1.0,
    state: str | None = None,
) -> list[dict]:
    """`n` trials: a live run (a trap-term provider with two children); a stopper,
    `--now` or plain in turn, gets `sig` at a random moment (every other trial within
    0.1 s of the kill grace; `rng`) or once it reached `state` (STOPPER_STATES); then a
    plain `runner stop`. One dict per trial."""
    if (state is None) == (rng is None):
        raise ValueError("interrupted_stopper: a random moment (rng) or a state, one of them")
    if state is not None and state not in STOPPER_STATES:
        raise ValueError(f"interrupted_stopper: unknown state {state!r}")
    out = []
    for i in range(n):
        name = f"{signal.Signals(sig).name.lower()}-{state or 'at'}-{i}"
        rd = RunDir(work / name)
        told, hold = work / f"{name}.told", work / f"{name}.hold"
        spec = write_spec(work / f"{name}.toml", told_tree(told), kill_grace=kill_grace)
        started = runner("run", spec, "--run-dir", rd.path, "--detach")
        trial: dict = {"trial": name, "start": started.returncode, "state": state}
        stopper = None
        try:
            if started.returncode != 0 or not wait_children(rd) or not told_ready(told):
                trial["problem"] = f"run did not start: {started.stderr.strip()}"
                out.append(trial)
                continue
            leader = identity_file.read(next(rd.children.glob("*.json")))
            flags = ["--now"] if i % 2 == 0 else []
            argv, env = held_while_loading(hold) if state == "loading" else ([*RUNNER], None)
            stopper = subprocess.Popen(
                [*argv, "stop", *flags, "--run-dir", str(rd.path)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            if state is None:
                assert rng is not None
                at = kill_grace + rng.uniform(-0.1, 0.1) if i % 4 < 2 else rng.uniform(0.0, kill_grace + 0.5)
                trial["at"] = round(at, 3)
                time.sleep(at)
                reached = True
            else:
                reached = _reach(state, rd, stopper, hold, told, leader)
            # A SIGTERM in the interpreter's own start-up, before the runner's first
            # instruction catches it, kills the stopper before it did anything; a SIGINT
            # there ends the interpreter's start-up with its traceback and exit 1 (no
            # runner code can catch it yet). Only then does the tally excuse either.
            early = sig in (signal.SIGTERM, signal.SIGINT)
            trial["before_first_instruction"] = early and not stop_signals_blocked(stopper.pid)
            trial["reached"] = reached
            try:
                stopper.send_signal(sig)
            except ProcessLookupError:
                pass
            hold.unlink(missing_ok=True)  # a held stopper goes on (to the signal's end)
            _, first_err = stopper.communicate(timeout=60)
            plain = runner("stop", "--run-dir", rd.path)
            left_now = tagged(_key(rd))  # right at the plain stop's exit
            trial.update(
                flags=flags,
                first=stopper.returncode,
                first_err=first_err.strip()[-300:],
                code=plain.returncode,
                err=plain.stderr.strip()[-300:],
                left_at_exit=len(left_now),
                left=len(_settled_left(_key(rd), 2.0)),
                live=rd.is_live(),
                recorded=recorded(rd),
            )
        finally:
            hold.unlink(missing_ok=True)
            if stopper is not None and stopper.poll() is None:
                stopper.kill()
                stopper.communicate()
            runner("stop", "--now", "--run-dir", rd.path)
            kill_tagged(_key(rd))
        out.append(trial)
    return out


def died_in_interpreter_start_up(code: int | None, err: str) -> bool:
    """How a command ends when a stop signal lands before its first instruction: killed
    by SIGTERM; on SIGINT, killed by it too (before the interpreter has installed its
    own handler, the disposition is the default one) or, once it has, the interpreter's
    KeyboardInterrupt traceback and exit 1 (from the runner's first import on,
    `runner/__main__.py` makes it INTERRUPTED)."""
    if code in (-signal.SIGTERM, -signal.SIGINT):
        return True
    return code == 1 and err.endswith("KeyboardInterrupt")


def tally(trials: list[dict], codes_key: tuple[str, ...] = ("first", "code")) -> dict:
    """The closing figures of one fault."""
    codes = sorted({t[k] for t in trials for k in codes_key if isinstance(t.get(k), int)})
    problems = [t["problem"] for t in trials if "problem" in t]
    for t in trials:
        code = t.get("code")
        if code in (-signal.SIGTERM, NEVER_STARTED) and t.get("before_first_instruction"):
            continue  # died before its first instruction (run-local: tini says 143), having started nothing
        if code is not None and code not in DOCUMENTED:
            problems.append(f"{t['trial']}: undocumented exit {code}: {t.get('err')}")
        first = t.get("first")
        if t.get("before_first_instruction") and died_in_interpreter_start_up(first, t.get("first_err", "")):
            continue  # ended in the interpreter's start-up, having done nothing
        if first is not None and first not in DOCUMENTED and first != -signal.SIGKILL:
            problems.append(f"{t['trial']}: stopper exited {first}: {t.get('first_err')}")
    return {
        "trials": len(trials),
        "runs_left_running": sum(1 for t in trials if t.get("live")),
        "processes_left": sum(t.get("left", 0) for t in trials),
        "exit0_with_something_left": sum(1 for t in trials if t.get("code") == 0 and t.get("left_at_exit", 0)),
        "stops_not_recorded": sum(1 for t in trials if "recorded" in t and not t["recorded"]),
        "codes": codes,
        "problems": problems,
    }


STORM = r"""
import os, random, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
cap, end = int(sys.argv[1]), time.time() + float(sys.argv[2])
r, w = os.pipe2(os.O_NONBLOCK)
os.write(w, b"x" * (cap - 1))  # one token per process that may live at once
def reap():
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return
mine = end if os.environ.get("STORM_ROOT") else time.time() + random.uniform(0.2, 2.0)
os.environ.pop("STORM_ROOT", None)
while time.time() < min(mine, end):
    reap()
    try:
        os.read(r, 1)
    except BlockingIOError:
        time.sleep(random.uniform(0.1, 0.3))  # at the cap: wait gently (a 2-core machine)
        continue
    if os.fork() == 0:
        os.setsid()  # out of the group and the session: only the tag or a cgroup finds it
        mine = time.time() + random.uniform(0.2, 2.0)
        continue
    time.sleep(random.uniform(0.01, 0.05))
if time.time() < end:
    os.write(w, b"x")  # this process ends by itself: its token is free for another
os._exit(0)
"""
"""A fork storm: every process ignores SIGTERM, setsid's each child, and forks again
while a token of the `cap` is free; each lives 0.2-2 s (the root until the end), so
children keep coming; all of it ends by itself `seconds` after the start."""


def storm_argv(cap: int, seconds: float) -> list[str]:
    return ["/usr/bin/env", "STORM_ROOT=1", sys.executable, "-I", "-S", "-c", STORM, str(cap), str(seconds)]


def fork_storm(work: Path, n: int, *, cap: int = 300, seconds: float = 30.0, kill_grace: float = 0.5) -> list[dict]:
    """`n` trials: a run whose provider is a fork storm, under group containment (no
    cgroup), stopped by `runner stop --now` once the storm has grown; exit 0 must mean
    nothing of the run is left."""
    out = []
    for i in range(n):
        name = f"storm-{i}"
        rd = RunDir(work / name)
        spec = write_spec(
            work / f"{name}.toml",
            storm_argv(cap, seconds),
            kill_grace=kill_grace,
            extra='containment = "group"\n',
        )
        started = runner("run", spec, "--run-dir", rd.path, "--detach")
        trial: dict = {"trial": name, "start": started.returncode}
        try:
            if started.returncode != 0 or not wait_children(rd):
                trial["problem"] = f"run did not start: {started.stderr.strip()}"
                out.append(trial)
                continue
            deadline = time.monotonic() + 10
            while len(tagged(_key(rd))) < cap // 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            grown = len(tagged(_key(rd)))
            t0 = time.monotonic()
            stop = runner("stop", "--now", "--run-dir", rd.path)
            elapsed = time.monotonic() - t0
            left_now = tagged(_key(rd))
            trial.update(
                grown=grown,
                code=stop.returncode,
                err=stop.stderr.strip()[-300:],
                out=stop.stdout.strip()[-300:],
                elapsed=round(elapsed, 3),
                left_at_exit=len(left_now),
                left=len(_settled_left(_key(rd), 1.0)),
                live=rd.is_live(),
                recorded=recorded(rd),
            )
        finally:
            for _ in range(3):
                runner("stop", "--now", "--run-dir", rd.path)
                kill_tagged(_key(rd))
        out.append(trial)
    return out


def early_sigterm(work: Path, moments: tuple[float, ...], *, pid1: bool, kill_grace: float = 0.5) -> list[dict]:
    """One trial per moment: SIGTERM to a foreground `runner run` (or, `pid1`, to the
    init of the pid namespace that `runner run` is, under unshare --pid --fork
    --mount-proc) that many seconds after its start. `stop_s`: from the later of the
    signal and the engine's run-start to the command's exit."""
    out = []
    for i, at in enumerate(moments):
        name = f"{'pid1' if pid1 else 'fg'}-{i}-{time.monotonic_ns()}"
        rd = RunDir(work / name)
        spec = write_spec(work / f"{name}.toml", sh(TRAP_TREE), kill_grace=kill_grace)
        argv = [*RUNNER, "run", str(spec), "--run-dir", str(rd.path)]
        if pid1:
            argv = ["unshare", "--pid", "--fork", "--mount-proc", *argv]
        pipe = subprocess.PIPE
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=pipe, stderr=pipe, text=True)
        trial: dict = {"trial": name, "at": at}
        try:
            time.sleep(at)
            target = _init_of(proc.pid) if pid1 else proc.pid
            # As PID 1, a signal that lands in the interpreter's own start-up, before the
            # runner's first instruction blocks it, is dropped by the kernel (nothing in
            # Python can be earlier): counted, and sent once the mask is in place.
            trial["before_first_instruction"] = pid1 and not await_mask(target)
            sent = time.time()
            os.kill(target, signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
            ended = time.time()
            if proc.returncode == -signal.SIGTERM and not rd.path.exists():
                # Killed in the interpreter's start-up, before the runner's first
                # instruction: nothing was started (docs/exit-codes.md).
                trial["before_first_instruction"] = True
            records = journal.read(rd.journal) if rd.journal.exists() else []
            starts = [r for r in records if r.get("event") == "run-start"]
            began = max(sent, starts[0]["t"]) if starts else sent
            started = rd.exists() and rd.engine_identity.exists()
            trial.update(
                code=proc.returncode,
                err=err.strip()[-300:],
                stop_s=round(ended - began, 3),
                left_at_exit=len(tagged(_key(rd))) if rd.exists() else 0,
                left=len(_settled_left(_key(rd), 1.0)) if rd.exists() else 0,
                live=rd.exists() and rd.is_live(),
                # A command killed before its first instruction started nothing to record.
                recorded=recorded(rd) if started else True,
            )
        finally:
            _end(proc, rd)
        out.append(trial)
    return out


def _end(proc: subprocess.Popen, rd: RunDir, init: int | None = None) -> None:
    """Whatever a trial left: its command (and, given, the pid namespace of which `init`
    is PID 1: the namespace goes with it), then anything of its run."""
    if proc.poll() is None:
        if init is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(init, signal.SIGKILL)
        proc.kill()
        proc.communicate()
    if rd.exists():
        runner("stop", "--now", "--run-dir", rd.path)
        kill_tagged(_key(rd))


def stop_signals_blocked(pid: int) -> bool:
    """SIGTERM and SIGHUP are both blocked or caught by `pid` (its /proc status): the
    runner's first instruction (cli.early_signals: both blocked for a command that starts
    a run, both caught for the others) has run, so a SIGTERM is held, not dropped.
    SIGTERM alone is not enough: `unshare --fork` blocks SIGINT and SIGTERM around its
    fork, and its child (the namespace's init to be) has them blocked until it restores
    its mask, when a SIGTERM held meanwhile is dropped after all (a PID 1 trial whose
    signal was 'held' by unshare's block was never honoured: 2 of 8)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        return True  # gone: nothing to drop a signal
    bits = (1 << (signal.SIGTERM - 1)) | (1 << (signal.SIGHUP - 1))
    return (int(fields["SigBlk"], 16) | int(fields["SigCgt"], 16)) & bits == bits


def await_mask(pid: int, timeout: float = 10.0) -> bool:
    """True if `pid`'s stop signals were already blocked or caught (stop_signals_blocked);
    else wait until they are (or `timeout` passed) and return False."""
    if stop_signals_blocked(pid):
        return True
    deadline = time.monotonic() + timeout
    while not stop_signals_blocked(pid) and time.monotonic() < deadline:
        time.sleep(0.0005)
    return False


def children(pid: int) -> list[int]:
    """The children of `pid` (its main thread's), as /proc lists them; none once it is gone."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(k) for k in f.read().split()]
    except OSError:
        return []


def _init_of(unshare_pid: int, timeout: float = 5.0) -> int:
    """The host pid of the namespace's init: unshare --fork's child."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kids = children(unshare_pid)
        if kids:
            return kids[0]
        time.sleep(0.001)
    raise RuntimeError("unshare started no init")


# -- the container recipe's entrypoint, run as its pod runs it (examples/kubernetes/run-local) --

RUN_LOCAL = Path(__file__).resolve().parent.parent / "examples" / "kubernetes" / "run-local"
RUN_LOCAL_MOMENTS = (0.01, 0.03, 0.06, 0.1, 0.2, 0.5)
"""Seconds after run-local's PID 1 came to exist at which it (tini) gets SIGTERM (issue 31)."""
NEVER_STARTED = 128 + signal.SIGTERM
"""tini's exit when a SIGTERM it forwarded ended the entrypoint before `runner`'s first
instruction (128 + the signal): nothing of the run was started."""
HOG = "while True: pass"


@contextlib.contextmanager
def hogs(n: int = 2) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`n` CPU hogs (a busy CI runner: two beside the run on two cores), each in its own
    process group; killed and reaped on the way out, whatever happens."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", HOG], process_group=0, stdin=subprocess.DEVNULL))
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


def run_local_env(spec: Path) -> dict[str, str]:
    """run-local's environment: the spec, and this interpreter's `runner` first on PATH
    (the installed one, as in the image)."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return dict(os.environ, RUNNER_SPEC=str(spec), PATH=path)


def run_local_dir(volume: Path) -> RunDir:
    """The run directory run-local gives the entrypoint under its volume."""
    return RunDir(volume / "runner" / "job")


def pidns_members(ns: str) -> list[int]:
    """Every living process (not a zombie) in the pid namespace `ns` (a readlink of
    /proc/PID/ns/pid), as the host sees it."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry.name}/ns/pid") != ns:
                continue
            with open(f"/proc/{entry.name}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            out.append(int(entry.name))
    return out


def run_local_sigterm(
    work: Path, moments: tuple[float, ...], *, label: str = "", kill_grace: float = 0.5
) -> list[dict]:
    """One trial per moment: `run-local VOLUME` on a new volume with a provider that
    ignores SIGTERM (TRAP_TREE), and SIGTERM to its PID 1 (tini) that many seconds after
    PID 1 came to exist (unshare's forked child, seen from here). What must hold, whatever the
    moment: the command exits; nothing of the namespace or the run is left; the run was
    stopped and recorded (STOPPED) or never started (no run directory, tini's
    NEVER_STARTED). Each trial says what it saw; `problem` when one of these failed."""
    out = []
    for at in moments:
        name = f"local{label}-{at:g}-{time.monotonic_ns()}"
        volume = work / name
        volume.mkdir(parents=True)
        spec = write_spec(work / f"{name}.toml", sh(TRAP_TREE), kill_grace=kill_grace)
        rd = run_local_dir(volume)
        proc = subprocess.Popen(
            [str(RUN_LOCAL), str(volume)],
            env=run_local_env(spec),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        trial: dict = {"trial": name, "at": at}
        init = None
        try:
            init = _init_of(proc.pid, timeout=30)
            t0 = time.monotonic()  # PID 1 exists: what a runtime could signal from now on
            ns = os.readlink(f"/proc/{init}/ns/pid")
            time.sleep(max(0.0, at - (time.monotonic() - t0)))
            trial["sent_s"] = round(time.monotonic() - t0, 4)
            os.kill(init, signal.SIGTERM)
            try:
                _, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                trial["problem"] = f"{name}: run-local did not exit within 60 s of the SIGTERM to its PID 1"
                out.append(trial)
                continue
            started = rd.exists()
            key = _key(rd) if started else None
            # The init's exit waits for every process of its namespace to be gone: what
            # is seen here at the exit is what is left.
            left = pidns_members(ns) + (tagged(key) if key else [])
            cgroup = run_cgroup_path(key) if key else None
            trial.update(
                code=proc.returncode,
                err=err.strip()[-300:],
                outcome="stopped" if started else "never started",
                before_first_instruction=not started,
                left_at_exit=len(left),
                left=len(left),
                cgroup_left=cgroup is not None and cgroup.exists(),
                live=started and rd.is_live(),
                recorded=recorded(rd) if started else True,
            )
            if started and (proc.returncode != Exit.STOPPED or not trial["recorded"]):
                trial["problem"] = f"{name}: started, but exit {proc.returncode}, recorded {trial['recorded']}: {err}"
            elif not started and proc.returncode != NEVER_STARTED:
                trial["problem"] = f"{name}: never started, but exit {proc.returncode}: {err.strip()[-300:]}"
            elif left or trial["cgroup_left"]:
                where = cgroup if trial["cgroup_left"] else "gone"
                trial["problem"] = f"{name}: left processes {left}, the run's cgroup {where}"
        finally:
            _end(proc, rd, init)
        out.append(trial)
    return out
