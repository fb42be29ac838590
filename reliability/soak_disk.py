"""The soak's disk and pid-namespace faults (issue 18): per fault, trials, runs left
running, processes left, exit 0 with something left, stops not recorded.

- full disk at the stop: a 4 MiB tmpfs filled from outside while the provider (trapping
  SIGTERM, one child in its own session) runs; `runner stop`, and `--now`;
- full disk, engine SIGKILLed: the stopper records the stop in the reserve it left;
- provider output fills the disk, then `runner stop`; the space freed, `runner resume`
  completes the run;
- read-only disk: a loop-mounted ext4 (errors=remount-ro) made read-only by
  trigger_fs_error under a live run; `runner stop`, and `--now` (exit NOT_RECORDED,
  expected: these are the stops that cannot be recorded);
- a run inside `unshare --pid --fork --mount-proc`, stopped from the host.

Needs root (mounts, namespaces); otherwise each fault says why it was skipped. Every
mount is undone and every run stopped in a finally.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from runner.exitcodes import Exit
from runner.files import identity_file, journal
from runner.files.rundir import RunDir
from runner.files.state import StateStore
from runner.proc import reaper, sweep

RUNNER = [sys.executable, "-m", "runner"]
TRAP = ["/bin/sh", "-c", "trap '' TERM; sleep 7200 & setsid sleep 7200 & wait; wait"]
EXPECTED = {
    "full disk at the stop (stop)": {Exit.OK},
    "full disk at the stop (now)": {Exit.OK},
    "full disk, engine SIGKILLed, stop --now": {Exit.OK},
    "provider output fills the disk, then stop": {Exit.OK},
    "read-only disk under a live run (stop)": {Exit.NOT_RECORDED},
    "read-only disk under a live run (now)": {Exit.NOT_RECORDED},
    "run in a pid namespace, host-side stop (stop)": {Exit.OK},
    "run in a pid namespace, host-side stop (now)": {Exit.OK},
}
UNRECORDED_EXPECTED = ("read-only disk under a live run (stop)", "read-only disk under a live run (now)")


def _sh(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True)


def _runner(*args: object, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RUNNER, *map(str, args)], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def _spec(path: Path, provider: list[str], items: tuple[str, ...] = ("a",)) -> Path:
    path.write_text(
        f"items = {json.dumps(list(items))}\n[provider]\ncommand = {json.dumps(provider)}\n[stop]\nkill_grace = 0.3\n"
    )
    return path


def _start(spec: Path, run_dir: Path) -> RunDir:
    proc = _runner("run", spec, "--run-dir", run_dir, "--detach")
    if proc.returncode != 0:
        raise RuntimeError(f"runner run: {proc.stderr.strip()}")
    return RunDir(run_dir)


def _tagged(run_id: str) -> list[int]:
    return [i.pid for i in sweep.tagged(run_id)]


def _call_running(rd: RunDir, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not (rd.children.exists() and any(n.endswith(".json") for n in os.listdir(rd.children))):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{rd.path}: the call never started")
        time.sleep(0.01)
    time.sleep(0.2)


def _fill(mnt: Path) -> None:
    for size in (1 << 20, 4096, 1):
        with open(mnt / f"fill-{size}", "ab", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError:
                pass


def _umount(mnt: Path) -> None:
    if _sh("umount", str(mnt)).returncode:
        _sh("umount", "-l", str(mnt))


class _Tally:
    def __init__(self) -> None:
        self.faults: dict[str, dict[str, object]] = {}
        self.problems: list[str] = []

    def record(self, fault: str, code: int, rd: RunDir) -> None:
        deadline = time.monotonic() + 5
        while (rd.is_live() or _tagged(rd.run_id)) and time.monotonic() < deadline:
            time.sleep(0.05)
        left, live = _tagged(rd.run_id), rd.is_live()
        try:
            state = StateStore(rd.state).load()
            stops = sum(1 for r in journal.read(rd.journal) if r["event"] == "run-stop")
            recorded = state.stopped and stops == 1
        except Exception:
            recorded = False
        f = self.faults.setdefault(
            fault,
            {
                "trials": 0,
                "codes": {},
                "runs_left_running": 0,
                "processes_left": 0,
                "exit0_with_something_left": 0,
                "stops_not_recorded": 0,
            },
        )
        codes = f["codes"]
        assert isinstance(codes, dict)
        codes[str(code)] = codes.get(str(code), 0) + 1
        for key, add in (
            ("trials", 1),
            ("runs_left_running", int(live)),
            ("processes_left", len(left)),
            ("exit0_with_something_left", int(code == 0 and (live or bool(left)))),
            ("stops_not_recorded", int(not recorded)),
        ):
            value = f[key]
            assert isinstance(value, int)
            f[key] = value + add
        if live or left:
            self.problems.append(f"{fault}: run {rd.run_id} left running={live}, processes {left}")
        if code not in {int(c) for c in EXPECTED.get(fault, {Exit.OK})}:
            self.problems.append(f"{fault}: exit {code}")
        if not recorded and fault not in UNRECORDED_EXPECTED:
            self.problems.append(f"{fault}: run {rd.run_id}: the stop was not recorded")
        if left:
            _runner("stop", "--now", "--run-dir", rd.path)
            reaper.kill_tagged(rd.run_id, 0.2)


def _on_tmpfs(work: Path, name: str, trial: Callable[[Path], None]) -> None:
    mnt = work / name
    mnt.mkdir(parents=True, exist_ok=True)
    mounted = _sh("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt))
    if mounted.returncode:
        raise RuntimeError(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        trial(mnt)
    finally:
        _runner("stop", "--now", "--run-dir", mnt / "run")
        _umount(mnt)


def run(work: Path, n: int) -> dict[str, object]:
    """`n` trials of each fault under `work`; the figures and the problems found."""
    work.mkdir(parents=True, exist_ok=True)
    tally = _Tally()
    skipped: dict[str, str] = {}
    if os.geteuid() != 0:
        return {"skipped": "needs root (mounts, pid namespaces)", "faults": {}, "problems": []}
    spec = _spec(work / "trap.toml", TRAP)

    def full_at_stop(how: str) -> Callable[[Path], None]:
        def trial(mnt: Path) -> None:
            rd = _start(spec, mnt / "run")
            _call_running(rd)
            _fill(mnt)
            p = _runner("stop", "--run-dir", rd.path, *(["--now"] if how == "now" else []))
            tally.record(f"full disk at the stop ({how})", p.returncode, rd)

        return trial

    def engine_killed(mnt: Path) -> None:
        rd = _start(spec, mnt / "run")
        _call_running(rd)
        engine = identity_file.read(rd.engine_identity)
        os.kill(engine.pid, 9)
        time.sleep(0.2)
        _fill(mnt)
        p = _runner("stop", "--now", "--run-dir", rd.path)
        tally.record("full disk, engine SIGKILLed, stop --now", p.returncode, rd)

    flag = work / "go"

    def provider_fills(mnt: Path) -> None:
        flag.unlink(missing_ok=True)
        script = 'head -c 6000000 /dev/zero; while [ ! -e "$0" ]; do sleep 0.02; done'
        rd = _start(_spec(work / "fills.toml", ["/bin/sh", "-c", script, str(flag)], ("a", "b")), mnt / "run")
        deadline = time.monotonic() + 20
        while not any(r["event"] == "output-unwritten" for r in journal.read(rd.journal)):
            if time.monotonic() > deadline:
                raise RuntimeError("no output-unwritten")
            time.sleep(0.02)
        p = _runner("stop", "--run-dir", rd.path)
        tally.record("provider output fills the disk, then stop", p.returncode, rd)
        for f in (mnt / "run" / "output").glob("*.log"):
            f.unlink()
        resumed = _runner("resume", "--run-dir", rd.path, "--detach")
        flag.touch()
        deadline = time.monotonic() + 30
        while rd.is_live() and time.monotonic() < deadline:
            time.sleep(0.05)
        r = tally.faults.setdefault("resume after space freed", {"trials": 0, "completed": 0})
        done = resumed.returncode == 0 and StateStore(rd.state).load().status == "completed"
        r["trials"] = int(str(r["trials"])) + 1
        r["completed"] = int(str(r["completed"])) + int(done)
        if not done:
            tally.problems.append(f"resume after space freed: {resumed.returncode} {resumed.stderr.strip()}")

    def read_only(how: str) -> None:
        mnt, image = work / f"ext4-{how}", work / f"ext4-{how}.img"
        mnt.mkdir(exist_ok=True)
        with open(image, "wb") as f:
            f.truncate(32 << 20)
        if _sh("mkfs.ext4", "-q", "-F", str(image)).returncode:
            raise RuntimeError("no mkfs.ext4")
        mounted = _sh("mount", "-o", "loop,errors=remount-ro", str(image), str(mnt))
        if mounted.returncode:
            raise RuntimeError(f"cannot loop-mount ext4: {mounted.stderr.strip()}")
        try:
            source = _sh("findmnt", "-no", "SOURCE", str(mnt)).stdout.strip()
            trigger = Path("/sys/fs/ext4") / Path(source).name / "trigger_fs_error"
            rd = _start(spec, mnt / "run")
            _call_running(rd)
            trigger.write_text("soak: read-only under a live run\n")
            time.sleep(0.1)
            p = _runner("stop", "--run-dir", rd.path, *(["--now"] if how == "now" else []))
            tally.record(f"read-only disk under a live run ({how})", p.returncode, rd)
        finally:
            _runner("stop", "--now", "--run-dir", mnt / "run")
            _umount(mnt)
            image.unlink(missing_ok=True)

    def in_namespace(how: str, i: int) -> None:
        run_dir = work / f"ns-{how}-{i}"
        proc = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", *RUNNER, "run", str(spec), "--run-dir", str(run_dir)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        rd = RunDir(run_dir)
        try:
            deadline = time.monotonic() + 20
            while not (rd.children.exists() and any(rd.children.iterdir())):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the run in the namespace never started its call")
                time.sleep(0.02)
            time.sleep(0.1)
            p = _runner("stop", "--run-dir", rd.path, *(["--now"] if how == "now" else []))
            tally.record(f"run in a pid namespace, host-side stop ({how})", p.returncode, rd)
        finally:
            _runner("stop", "--now", "--run-dir", run_dir)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    steps: list[tuple[str, Callable[[int], None]]] = [
        ("full disk at the stop (stop)", lambda i: _on_tmpfs(work, "full-stop", full_at_stop("stop"))),
        ("full disk at the stop (now)", lambda i: _on_tmpfs(work, "full-now", full_at_stop("now"))),
        ("full disk, engine SIGKILLed, stop --now", lambda i: _on_tmpfs(work, "killed", engine_killed)),
        ("provider output fills the disk, then stop", lambda i: _on_tmpfs(work, "fills", provider_fills)),
        ("read-only disk under a live run (stop)", lambda i: read_only("stop")),
        ("read-only disk under a live run (now)", lambda i: read_only("now")),
    ]
    if shutil.which("unshare"):
        steps += [
            ("run in a pid namespace, host-side stop (stop)", lambda i: in_namespace("stop", i)),
            ("run in a pid namespace, host-side stop (now)", lambda i: in_namespace("now", i)),
        ]
    skipped.update(trials(steps, n))
    return {"faults": tally.faults, "skipped": skipped, "problems": tally.problems}


def trials(steps: list[tuple[str, Callable[[int], None]]], n: int) -> dict[str, str]:
    """`n` trials of each step, in order; a step whose trial raises RuntimeError (the
    machine cannot stage that fault) is skipped from there: {fault: why}, said, not
    counted."""
    skipped: dict[str, str] = {}
    for fault, trial in steps:
        for i in range(n):
            try:
                trial(i)
            except RuntimeError as exc:
                skipped[fault] = str(exc)
                break
    return skipped
