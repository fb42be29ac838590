"""The soak's faults at the seams (issue 27): per fault, trials, processes of the run left,
every exit code seen and whether docs/exit-codes.md lists it for that command, and what
the fault is about (a bound, a backup's bytes, a refusal's bytes).

- `rm -rf` of the run directory during `runner stop`, `--now` and `--graceful --wait`,
  at a random moment of the stop (its kill grace and a little more), once: nothing of the
  run left, the stopper's exit code documented for its command, one line; an rm that
  failed (a file made meanwhile: the directory left half removed) is counted;
- a run that filled its pids cgroup (cgroup v1 pids, pids.max reached by trapping
  forks): a plain `runner stop` exits 0 within kill_grace + CONFIRM_TIMEOUT + 1 s; `rm
  -rf` of such a run leaves nothing within kill_grace + 3 s;
- `umount -l` of a tmpfs holding a live run: `runner stop --all` stops it, 0 left;
- a `cp -al` backup beside a run (stopped, then resumed and stopped; and taken while the
  run lives, then the stop): the backup byte-identical after;
- every refusal (a copy, another user's directory, a stranger's hard link, damage, a
  completed run): not a byte or a name changed.

Needs root (mounts, cgroups, chown); a fault the machine cannot stage says why and is
skipped. Every mount is undone and every run stopped in a finally.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from reliability import soak_disk
from reliability.faults import RUNNER, kill_tagged, runner, sh, tagged, wait_children, write_spec
from runner import defaults
from runner.exitcodes import Exit
from runner.files.rundir import RunDir
from runner.proc.cgroup import available as cgroup_available
from runner.proc.cgroup import run_cgroup_path

TRAP = 'trap "" TERM; sleep 7200 & sleep 7200 & wait'
"""A provider that ignores SIGTERM (its two children too): only SIGKILL ends it."""
KILL_GRACE = 0.5
PIDS_V1 = Path("/sys/fs/cgroup/pids")
PIDS_MAX = 24
EXIT_CODES_DOC = Path(__file__).resolve().parent.parent / "docs" / "exit-codes.md"
FORK_UNTIL_FULL = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.01)
made = 0
while True:
    try:
        pid = os.fork()
    except BlockingIOError:
        break
    if pid == 0:
        while True:
            time.sleep(7200)
    made += 1
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(made))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    time.sleep(7200)
"""
"""A provider (`python -c FORK_UNTIL_FULL MARKER GO`) that ignores SIGTERM, waits for its
GO file (written once `runner run --detach` has exited, so that nothing leaves the group
after), then forks children that ignore SIGTERM too until the kernel refuses a fork (a
pids cgroup at pids.max, or the user's RLIMIT_NPROC), then writes MARKER (how many it
made) and sleeps: only a SIGKILL ends it. Shared by the soak and the tests."""


def documented(command: str) -> set[int]:
    """The exit codes docs/exit-codes.md's "By command" table lists for `command` (as it
    spells it there: "runner stop --now"), but INTERNAL: a bug is never an answer."""
    for line in EXIT_CODES_DOC.read_text().splitlines():
        m = re.fullmatch(r"\| `(runner [^`]+)` \| ([A-Z_, ]+) \|", line.strip())
        if m and m.group(1) == command:
            return {int(Exit[name.strip()]) for name in m.group(2).split(",")} - {int(Exit.INTERNAL)}
    raise KeyError(f"{command}: no row in {EXIT_CODES_DOC}")


def _key(rd: RunDir, run_id: str) -> str:
    return rd.key(run_id) or run_id


def _left(key: str, settle: float) -> tuple[int, int]:
    """(processes of the run still alive (its tag), 1 if its cgroup is still there),
    waited for at most `settle` seconds: both must be gone."""
    deadline = time.monotonic() + settle
    path = run_cgroup_path(key)
    while time.monotonic() < deadline:
        if not tagged(key) and not (path is not None and path.exists()):
            return 0, 0
        time.sleep(0.02)
    return len(tagged(key)), int(path is not None and path.exists())


def _clean(key: str) -> None:
    kill_tagged(key)
    path = run_cgroup_path(key)
    if path is not None and path.exists():
        try:
            (path / "cgroup.kill").write_text("1\n")
        except OSError:
            pass
        deadline = time.monotonic() + 5
        for sub in (path / "work", path / "engine", path):
            while sub.exists() and time.monotonic() < deadline:
                try:
                    sub.rmdir()
                except OSError:
                    time.sleep(0.02)


def _snapshot(path: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            full = os.path.join(root, name)
            rel = os.path.relpath(full, path)
            if os.path.islink(full):
                out[rel] = ("symlink", os.readlink(full))
            elif os.path.isdir(full):
                out[rel] = "dir"
            elif os.path.isfile(full):
                with open(full, "rb") as f:
                    out[rel] = f.read()
            else:
                out[rel] = ("special", os.lstat(full).st_mode)
    return out


def _changed(before: dict[str, object], after: dict[str, object]) -> list[str]:
    return sorted(set(before) ^ set(after)) + sorted(k for k in before.keys() & after.keys() if before[k] != after[k])


class _Tally:
    def __init__(self) -> None:
        self.faults: dict[str, dict[str, object]] = {}
        self.problems: list[str] = []
        self.said: dict[str, dict[str, str]] = {}  # per fault, per exit code: a line it printed

    def add(
        self, fault: str, *, code: int | None, command: str | None, left: tuple[int, int] = (0, 0), **extra: object
    ) -> None:
        f = self.faults.setdefault(
            fault, {"trials": 0, "processes_left": 0, "cgroups_left": 0, "codes": {}, "undocumented": 0}
        )
        f["trials"] = int(str(f["trials"])) + 1
        f["processes_left"] = int(str(f["processes_left"])) + left[0]
        f["cgroups_left"] = int(str(f["cgroups_left"])) + left[1]
        codes = f["codes"]
        assert isinstance(codes, dict)
        if code is not None:
            codes[str(code)] = codes.get(str(code), 0) + 1
            if command is not None and code not in documented(command):
                f["undocumented"] = int(str(f["undocumented"])) + 1
                self.problems.append(f"{fault}: exit {code}, not listed for `{command}` in docs/exit-codes.md")
        if left[0] or left[1]:
            self.problems.append(f"{fault}: {left[0]} processes of the run left, its cgroup left: {bool(left[1])}")
        for k, v in extra.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            if k.startswith("max_"):  # the worst trial
                f[k] = round(max(float(str(f.get(k, 0.0))), float(v)), 3)
            elif k.startswith("bound_"):  # the same for every trial
                f[k] = v
            else:  # a count over the trials
                f[k] = int(str(f.get(k, 0))) + int(v)


def _start(work: Path, name: str, provider: list[str], **kw: object) -> tuple[RunDir, str]:
    spec = write_spec(work / f"{name}.toml", provider, kill_grace=KILL_GRACE, **kw)  # type: ignore[arg-type]
    rd = RunDir(work / name)
    started = runner("run", spec, "--run-dir", rd.path, "--detach")
    if started.returncode != 0 or not wait_children(rd):
        raise RuntimeError(f"runner run: {started.returncode} {started.stderr.strip()}")
    return rd, rd.run_id


# -- rm -rf during each stop mode -----------------------------------------------------------

RM_MODES = {
    "stop": ("runner stop", []),
    "now": ("runner stop --now", ["--now"]),
    "graceful-wait": ("runner stop --graceful --wait", ["--graceful", "--wait"]),
}


def remove(path: Path) -> int:
    """`rm -rf path` as its user would, again until the directory is gone: a stopper
    that creates a file there (its request, its lock) while rm empties the directory
    makes rm's last rmdir fail (ENOTEMPTY), and the run lives on in a directory that is
    still there, its graceful stop waiting for a phase that never ends. Returns the
    number of passes."""
    for passes in range(1, 11):
        subprocess.run(["rm", "-rf", str(path)], capture_output=True)
        if not os.path.lexists(path):
            return passes
    raise RuntimeError(f"rm -rf {path}: still there after 10 passes")


def rm_during_stop(work: Path, tally: _Tally, mode: str, i: int, rng: random.Random) -> None:
    command, flags = RM_MODES[mode]
    rd, run_id = _start(work, f"rm-{mode}-{i}", sh(TRAP))
    key = _key(rd, run_id)
    try:
        stopper = subprocess.Popen(
            [*RUNNER, "stop", *flags, "--run-dir", str(rd.path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(rng.uniform(0.0, KILL_GRACE + 0.3))
        # One `rm -rf`, as a user runs it: when the stopper made a file meanwhile, rm fails
        # and leaves the directory half removed (its spec.toml gone), which the engine and
        # the stopper must treat as gone. Counted; the rest is removed after the trial.
        failed = subprocess.run(["rm", "-rf", str(rd.path)], capture_output=True).returncode != 0
        out, err = stopper.communicate(timeout=120)
        left = _left(key, KILL_GRACE + 3.0)
        remove(rd.path)  # what the failed rm left
        fault = f"`rm -rf` of the run directory during `{command}`"
        # What it said of the run's end: `--graceful --wait` first says its request was
        # lodged, then how the run ended; every other line counts.
        lines = [line for line in (out + err).splitlines() if line.strip() and "graceful stop lodged" not in line]
        tally.add(
            fault,
            code=stopper.returncode,
            command=command,
            left=left,
            not_one_line=int(len(lines) != 1),
            rm_failed=int(failed),
        )
        if len(lines) != 1:
            tally.problems.append(f"{fault}: exit {stopper.returncode}, {len(lines)} lines: {lines[:3]}")
        tally.said.setdefault(fault, {}).setdefault(str(stopper.returncode), lines[-1] if lines else "")
    finally:
        _clean(key)


# -- a full pids cgroup ---------------------------------------------------------------------


def pids_v1() -> bool:
    """A writable cgroup v1 pids hierarchy at /sys/fs/cgroup/pids (where a run's pids
    cgroup can be made without a controller of the cgroup v2 hierarchy)."""
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            fields = right.split()
            if len(fields) >= 3 and fields[0] == "cgroup" and "pids" in fields[2].split(","):
                return left.split()[4] == str(PIDS_V1) and os.access(PIDS_V1, os.W_OK)
    except OSError:
        pass
    return False


def pids_full(work: Path, tally: _Tally, how: str, i: int) -> None:
    if not (pids_v1() and cgroup_available()):
        raise RuntimeError("needs a writable cgroup v1 pids hierarchy and a cgroup v2 with cgroup.kill")
    group = PIDS_V1 / f"runner-soak-{os.getpid()}-{i}-{how}"
    group.mkdir()
    key = None
    try:
        (group / "pids.max").write_text(f"{PIDS_MAX}\n")
        marker, go = work / f"pids-{how}-{i}.full", work / f"pids-{how}-{i}.go"
        provider = [sys.executable, "-c", FORK_UNTIL_FULL, str(marker), str(go)]
        spec = write_spec(work / f"pids-{how}-{i}.toml", provider, kill_grace=KILL_GRACE)
        rd = RunDir(work / f"pids-{how}-{i}")
        enter = sh('echo $$ > "$1/cgroup.procs" && shift && exec "$@"', str(group), *RUNNER)
        started = subprocess.run(
            [*enter, "run", str(spec), "--run-dir", str(rd.path), "--detach"],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        if started.returncode != 0:
            raise RuntimeError(f"runner run in a pids cgroup: {started.stderr.strip()}")
        run_id = rd.run_id
        key = _key(rd, run_id)
        go.touch()  # `runner run --detach` has exited: only the run is in the group now
        deadline = time.monotonic() + 30
        while not marker.exists():
            if time.monotonic() > deadline:
                raise RuntimeError("the provider never filled its pids cgroup")
            time.sleep(0.01)
        t0 = time.monotonic()
        if how == "stop":
            bound = KILL_GRACE + defaults.CONFIRM_TIMEOUT + 1.0
            out = runner("stop", "--run-dir", rd.path)
            took = time.monotonic() - t0
            left = _left(key, 5.0)
            tally.add(
                "pids cgroup full (pids.max), plain `runner stop`",
                code=out.returncode,
                command="runner stop",
                left=left,
                max_s=took,
                bound_s=bound,
                over_bound=int(took > bound or out.returncode != 0),
            )
        else:
            bound = KILL_GRACE + 3.0
            remove(rd.path)
            while int((group / "pids.current").read_text()) and time.monotonic() - t0 < bound:
                time.sleep(0.01)
            took = time.monotonic() - t0
            procs = len((group / "cgroup.procs").read_text().split())
            tally.add(
                "pids cgroup full (pids.max), `rm -rf` of the run directory",
                code=None,
                command=None,
                left=(procs, _left(key, 1.0)[1]),
                max_s=took,
                bound_s=bound,
                over_bound=int(took > bound),
            )
    finally:
        if key is not None:
            _clean(key)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            procs = (group / "cgroup.procs").read_text().split()
            for pid in procs:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.02)


# -- a lazy unmount -------------------------------------------------------------------------


def lazy_unmount(work: Path, tally: _Tally, i: int) -> None:
    vol = work / f"vol-{i}"
    vol.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(vol)], capture_output=True
    )
    if mounted.returncode:
        raise RuntimeError(f"cannot mount a tmpfs: {mounted.stderr.decode().strip()}")
    key = None
    try:
        (vol / "runs").mkdir(mode=0o700)
        rd, run_id = _start(work, f"vol-{i}/runs/run", sh(TRAP))
        key = _key(rd, run_id)
        subprocess.run(["umount", "-l", str(vol)], check=True)
        out = runner("stop", "--all", "--runs-dir", vol / "runs")
        tally.add(
            "`umount -l` of a live run's file system, `runner stop --all`",
            code=out.returncode,
            command="runner stop --all",
            left=_left(key, 3.0),
            not_ok=int(out.returncode != 0),
        )
    finally:
        if key is not None:
            _clean(key)
        with open("/proc/self/mountinfo") as f:
            if any(line.split()[4] == str(vol) for line in f):
                subprocess.run(["umount", "-l", str(vol)], capture_output=True)


# -- hard-link backups ----------------------------------------------------------------------


def _session_of(rd: RunDir, attempt: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            records = [json.loads(line) for line in rd.journal.read_text().splitlines() if line.strip()]
        except (OSError, ValueError):
            records = []
        resumes = sum(1 for r in records if r.get("event") == "resume")
        if resumes >= attempt - 1 and any(r.get("event") == "session-start" for r in records[-5:]):
            return
        time.sleep(0.02)
    raise RuntimeError(f"{rd.path}: attempt {attempt} never started its call")


def hard_link_backup(work: Path, tally: _Tally, live: bool, i: int) -> None:
    name = f"links-{'live' if live else 'stopped'}-{i}"
    rd, run_id = _start(work, name, sh(TRAP))
    key = _key(rd, run_id)
    backup = work / f"{name}-backup"
    try:
        codes = []
        if not live:
            codes.append(runner("stop", "--run-dir", rd.path).returncode)
            subprocess.run(["cp", "-al", str(rd.path), str(backup)], check=True)
            before = _snapshot(backup)
            resumed = runner("resume", "--run-dir", rd.path, "--detach")
            codes.append(resumed.returncode)
            if resumed.returncode == 0:
                _session_of(rd, 2)
            codes.append(runner("stop", "--run-dir", rd.path).returncode)
            fault, command = "`cp -al` backup of a stopped run, then `resume` and `stop`", "runner resume"
        else:
            subprocess.run(["cp", "-al", str(rd.path), str(backup)], check=True)
            before = _snapshot(backup)
            codes.append(runner("stop", "--run-dir", rd.path).returncode)
            fault, command = "`cp -al` backup of a live run, then `stop`", "runner stop"
        changed = _changed(before, _snapshot(backup))
        worst = next((c for c in codes if c != 0), 0)
        tally.add(fault, code=worst, command=command, left=_left(key, 3.0), backups_changed=int(bool(changed)))
        if changed or worst:
            tally.problems.append(f"{fault}: exit codes {codes}, backup changed: {changed[:5]}")
    finally:
        _clean(key)


# -- every refusal's bytes -------------------------------------------------------------------

STRANGER = 4242


def _damage_strangers_link(rd: RunDir, work: Path) -> None:
    target = work / f"{rd.path.name}-strangers-journal"
    target.write_bytes(rd.journal.read_bytes())
    os.chown(target, STRANGER, STRANGER)
    rd.journal.unlink()
    os.link(target, rd.journal)


def _damage_fifo_log(rd: RunDir, work: Path) -> None:
    rd.engine_log.unlink(missing_ok=True)
    os.mkfifo(rd.engine_log)


def _damage_output_link(rd: RunDir, work: Path) -> None:
    elsewhere = work / f"{rd.path.name}-output"
    rd.output.rename(elsewhere)
    rd.output.symlink_to(elsewhere)


REFUSALS: dict[str, tuple[Callable[[RunDir, Path], object], list[list[str]]]] = {
    "a `cp -r` copy (every stop mode, resume, wait)": (
        lambda rd, work: None,
        [["stop"], ["stop", "--now"], ["stop", "--graceful"], ["stop", "--graceful", "--wait"], ["resume"], ["wait"]],
    ),
    "another user's directory (resume)": (
        lambda rd, work: subprocess.run(["chown", "-R", f"{STRANGER}:{STRANGER}", str(rd.path)], check=True),
        [["resume"]],
    ),
    "journal.jsonl a hard link to another user's file (resume)": (_damage_strangers_link, [["resume"]]),
    "engine.log a FIFO (resume)": (_damage_fifo_log, [["resume"]]),
    "output/ a symlink (resume)": (_damage_output_link, [["resume"]]),
    "state.json damaged (resume)": (lambda rd, work: rd.state.write_bytes(b"\x00 not a state {{\n"), [["resume"]]),
}


def refusals(work: Path, tally: _Tally, i: int) -> None:
    for j, (what, (damage, commands)) in enumerate(REFUSALS.items()):
        name = f"refusal-{i}-{j}"
        rd, run_id = _start(work, name, sh(TRAP))
        key = _key(rd, run_id)
        try:
            runner("stop", "--run-dir", rd.path)
            target = rd.path
            if "copy" in what:
                target = work / f"{name}-copy"
                subprocess.run(["cp", "-r", str(rd.path), str(target)], check=True)
            else:
                damage(rd, work)
            for args in commands:
                before = _snapshot(work)
                out = runner(*args, "--run-dir", target)
                changed = _changed(before, _snapshot(work))
                refused = out.returncode not in (0, int(Exit.INTERNAL))
                tally.add(
                    "every refusal: bytes and names changed",
                    code=out.returncode,
                    command="runner " + " ".join(args),
                    bytes_changed=len(changed),
                    not_refused=int(not refused),
                )
                if changed or not refused:
                    tally.problems.append(f"refusal {what} {args}: exit {out.returncode}, changed {changed[:5]}")
        finally:
            _clean(key)


def run(work: Path, n: int, seed: int = 0) -> dict[str, object]:
    """`n` trials of each fault under `work`; the figures and the problems found."""
    work.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return {"skipped": {"all": "needs root (mounts, cgroups, chown)"}, "faults": {}, "problems": []}
    rng = random.Random(seed)
    tally = _Tally()
    steps: list[tuple[str, Callable[[int], None]]] = [
        *((f"rm -rf during {mode}", lambda i, m=mode: rm_during_stop(work, tally, m, i, rng)) for mode in RM_MODES),
        ("pids cgroup full, stop", lambda i: pids_full(work, tally, "stop", i)),
        ("pids cgroup full, rm -rf", lambda i: pids_full(work, tally, "rm", i)),
        ("lazy unmount", lambda i: lazy_unmount(work, tally, i)),
        ("hard-link backup of a stopped run", lambda i: hard_link_backup(work, tally, False, i)),
        ("hard-link backup of a live run", lambda i: hard_link_backup(work, tally, True, i)),
        ("refusals", lambda i: refusals(work, tally, i)),
    ]
    skipped = soak_disk.trials(steps, n)
    return {"faults": tally.faults, "said": tally.said, "skipped": skipped, "problems": tally.problems}
