"""The kit's built-in stoppers (`--stopper NAME`; `make bench`'s peer table): each starts a
victim tree its own way and stops it its own way, with the same kill grace.

Each follows the `Stopper` protocol (stopper.py) and does what a user of that tool
would do, no more: a stopper that cannot reach part of the tree leaves it, and the kit
counts it.
"""

from __future__ import annotations

import json
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from runner.proc import identity

from . import runs
from .stopper import Stopper
from .zoo import Tree

STOPPER_WAIT = 30.0  # longest a stopper is waited for; far past any kill grace used here


def popen_session(argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
    # Its own session: a group signal never reaches the benchmark, and the terminal's
    # ^C never reaches the tree.
    return subprocess.Popen(
        argv,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        **kw,
    )


def reap(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def terminate_then_kill(proc: subprocess.Popen[bytes], grace: float) -> dict[str, Any]:
    """SIGTERM to the one process, SIGKILL to it if it is still there after the grace."""
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return {"code": proc.returncode}


class _Direct(Stopper):
    """The tree is our child, in its own session."""

    def start(self, tree: Tree) -> subprocess.Popen[bytes]:
        proc = popen_session(tree.argv)
        tree.adopt(process=proc)
        return proc

    def cleanup(self, handle: subprocess.Popen[bytes]) -> None:
        reap(handle)


class PopenTerminate(_Direct):
    id, label = "popen", "`Popen.terminate`, then `kill`"
    how = "`Popen.terminate()`, `wait(kill_grace)`, then `Popen.kill()`: the top process only"

    def stop(self, proc: subprocess.Popen[bytes]) -> dict[str, Any]:
        return terminate_then_kill(proc, self.kill_grace)


class KillpgReaper(_Direct):
    id, label = "killpg", "killpg TERM, sleep, killpg KILL"
    how = "`killpg(SIGTERM)`, `sleep(kill_grace)`, `killpg(SIGKILL)`: the top process's group"

    def stop(self, proc: subprocess.Popen[bytes]) -> dict[str, Any]:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            if sig == signal.SIGTERM:
                time.sleep(self.kill_grace)
        return {}


class _Wrapped(_Direct):
    """The tree runs under a wrapper program of ours (whose argv carries the tree's)."""

    tool = ""

    def missing(self) -> str | None:
        return None if shutil.which(self.tool) else f"`{self.tool}` is not installed"

    def wrap(self, argv: list[str]) -> list[str]:
        raise NotImplementedError

    def start(self, tree: Tree) -> subprocess.Popen[bytes]:
        proc = popen_session(self.wrap(tree.argv))
        tree.exclude.add(proc.pid)  # the wrapper is the stopper, not the tree
        tree.adopt(process=proc)
        return proc


class CoreutilsTimeout(_Wrapped):
    id, label, tool = "timeout", "coreutils `timeout -k`", "timeout"
    how = "`timeout -k KILL_GRACE 7200 TREE`, stopped by a SIGTERM to `timeout` (it signals its group, then KILLs)"

    def wrap(self, argv: list[str]) -> list[str]:
        return ["timeout", "-k", f"{self.kill_grace:g}", "7200", *argv]

    def stop(self, proc: subprocess.Popen[bytes]) -> dict[str, Any]:
        proc.send_signal(signal.SIGTERM)
        proc.wait(STOPPER_WAIT)
        return {"code": proc.returncode}


class _Init(_Wrapped):
    """A signal-forwarding init outside a container, where it is not PID 1: TERM to the
    init (forwarded to the child's process group), KILL to the init once the grace is
    over. Its death takes nothing with it: what left the group is orphaned. This is
    how such inits are often used (`tini` as a subreaper in CI), not how a container
    runs them; the `-pid1` rows below are that."""

    def stop(self, proc: subprocess.Popen[bytes]) -> dict[str, Any]:
        return terminate_then_kill(proc, self.kill_grace)


class Tini(_Init):
    id, label, tool = "tini", "tini -g", "tini"
    how = (
        "`tini -s -g -- TREE`, not PID 1 (no container): SIGTERM to tini (forwarded to the child's group), "
        "SIGKILL to tini after the grace"
    )

    def wrap(self, argv: list[str]) -> list[str]:
        return ["tini", "-s", "-g", "--", *argv]


class DumbInit(_Init):
    id, label, tool = "dumb-init", "dumb-init", "dumb-init"
    how = (
        "`dumb-init TREE`, not PID 1 (no container): SIGTERM to dumb-init (forwarded to the child's session), "
        "SIGKILL to it after the grace"
    )

    def wrap(self, argv: list[str]) -> list[str]:
        return ["dumb-init", *argv]


class _InitAsPid1(_Init):
    """The same init as a container runs it: PID 1 of a new pid namespace (`unshare
    --pid --fork`, no container runtime needed), stopped as a runtime stops a container
    (`docker stop`, a pod deletion): SIGTERM to PID 1, SIGKILL to it after the grace.
    When PID 1 of a namespace dies, the kernel kills every process left in it, so
    nothing escapes this one, whatever left its group or session. Needs root (unshare)."""

    inner: tuple[str, ...] = ()

    def missing(self) -> str | None:
        if os.geteuid() != 0 or not shutil.which("unshare"):
            return "needs root and `unshare` (a pid namespace)"
        return super().missing()

    def wrap(self, argv: list[str]) -> list[str]:
        return ["unshare", "--pid", "--fork", "--kill-child", *self.inner, *argv]

    def start(self, tree: Tree) -> subprocess.Popen[bytes]:
        proc = popen_session(self.wrap(tree.argv))
        tree.exclude.add(proc.pid)
        tree.exclude.add(_first_child(proc.pid))  # the init: the stopper, not the tree
        tree.wait_ready()
        return proc

    def stop(self, proc: subprocess.Popen[bytes]) -> dict[str, Any]:
        init = _first_child(proc.pid)
        os.kill(init, signal.SIGTERM)
        try:
            proc.wait(self.kill_grace)
        except subprocess.TimeoutExpired:
            try:
                os.kill(init, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(STOPPER_WAIT)
        return {"code": proc.returncode}


def _first_child(pid: int, timeout: float = 10.0) -> int:
    """The child unshare forked (PID 1 of the new namespace), by its host pid."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                kids = f.read().split()
        except OSError:
            kids = []
        if kids:
            return int(kids[0])
        if time.monotonic() > deadline:
            raise RuntimeError(f"unshare {pid} forked no child in {timeout}s")
        time.sleep(0.002)


class TiniPid1(_InitAsPid1):
    id, label, tool = "tini-pid1", "tini -g, as PID 1", "tini"
    inner = ("tini", "-s", "-g", "--")
    how = "`unshare --pid --fork tini -s -g -- TREE`: tini as PID 1 of a pid namespace; TERM, then KILL after the grace"


class DumbInitPid1(_InitAsPid1):
    id, label, tool = "dumb-init-pid1", "dumb-init, as PID 1", "dumb-init"
    inner = ("dumb-init",)
    how = "`unshare --pid --fork dumb-init TREE`: dumb-init as PID 1 of a pid ns; TERM, then KILL after the grace"


class Supervisord(Stopper):
    id, label = "supervisord", "supervisord, stopasgroup + killasgroup"
    how = (
        "one supervisord; each tree a `[program]` with `stopasgroup`, `killasgroup`, "
        "`stopwaitsecs = KILL_GRACE`, stopped by `supervisorctl stop`"
    )

    def __init__(self, work: Path, kill_grace: float) -> None:
        super().__init__(work, kill_grace)
        self.dir = work / "supervisor"
        self.daemon: subprocess.Popen[bytes] | None = None
        self.serial = 0

    def _script(self, name: str) -> str | None:
        local = Path(sys.executable).with_name(name)
        return str(local) if local.exists() else shutil.which(name)

    def missing(self) -> str | None:
        if self._script("supervisord") and self._script("supervisorctl"):
            return None
        return "supervisor is not installed (`pip install --group bench`)"

    def _ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        ctl = self._script("supervisorctl")
        assert ctl is not None
        return subprocess.run(
            [ctl, "-c", str(self.dir / "supervisord.conf"), *args],
            capture_output=True,
            text=True,
            timeout=STOPPER_WAIT,
            stdin=subprocess.DEVNULL,
        )

    def _daemon(self) -> None:
        if self.daemon is not None:
            return
        (self.dir / "programs").mkdir(parents=True)
        sock = self.dir / "supervisor.sock"
        (self.dir / "supervisord.conf").write_text(
            f"[unix_http_server]\nfile = {sock}\n\n"
            f"[supervisord]\nnodaemon = true\nlogfile = {self.dir / 'supervisord.log'}\n"
            f"pidfile = {self.dir / 'supervisord.pid'}\nchildlogdir = {self.dir}\n\n"
            "[rpcinterface:supervisor]\n"
            "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n\n"
            f"[supervisorctl]\nserverurl = unix://{sock}\n\n"
            f"[include]\nfiles = {self.dir / 'programs'}/*.conf\n"
        )
        daemon = self._script("supervisord")
        assert daemon is not None
        self.daemon = popen_session([daemon, "-c", str(self.dir / "supervisord.conf")])
        deadline = time.monotonic() + STOPPER_WAIT
        while self._ctl("status").returncode not in (0, 3):  # 3: no program running yet
            if time.monotonic() > deadline or self.daemon.poll() is not None:
                raise RuntimeError(f"supervisord did not come up (see {self.dir / 'supervisord.log'})")
            time.sleep(0.05)

    def start(self, tree: Tree) -> str:
        self._daemon()
        self.serial += 1
        name = f"tree{self.serial}"
        (self.dir / "programs" / f"{name}.conf").write_text(
            f"[program:{name}]\ncommand = {shlex.join(tree.argv)}\nautostart = true\nautorestart = false\n"
            "startsecs = 0\nstopsignal = TERM\nstopasgroup = true\nkillasgroup = true\n"
            f"stopwaitsecs = {max(1, round(self.kill_grace))}\n"
            "stdout_logfile = NONE\nstderr_logfile = NONE\n"
        )
        added = self._ctl("update")
        if added.returncode != 0:
            raise RuntimeError(f"supervisorctl update: {added.stdout.strip()} {added.stderr.strip()}")
        tree.adopt()
        return name

    def stop(self, name: str) -> dict[str, Any]:
        out = self._ctl("stop", name)
        return {"code": out.returncode}

    def cleanup(self, name: str) -> None:
        (self.dir / "programs" / f"{name}.conf").unlink(missing_ok=True)
        self._ctl("update")  # removes the program (stopping it first, if it still runs)

    def close(self) -> None:
        if self.daemon is not None:
            self.daemon.send_signal(signal.SIGTERM)
            try:
                self.daemon.wait(STOPPER_WAIT)
            except subprocess.TimeoutExpired:
                reap(self.daemon)
            self.daemon = None


class RunnerStop(Stopper):
    """A real run whose provider command is the tree; the stop is the runner command."""

    runner = True
    flags: tuple[str, ...] = ()
    channel: str | None = None

    def start(self, tree: Tree) -> Any:
        self.serial = getattr(self, "serial", 0) + 1
        name = f"{self.id}-{self.serial}"
        spec = runs.write_spec(self.work / f"{name}.toml", tree.argv, self.kill_grace, self.channel)
        rd = runs.start(spec, self.work / name)
        try:
            tree.adopt()
        except BaseException:
            runs.finish(rd, timeout=0)
            raise
        return rd

    def stop(self, rd: Any) -> dict[str, Any]:
        out = runs.runner("stop", *self.flags, "--run-dir", rd.path, timeout=STOPPER_WAIT)
        return {"code": out.returncode, "output": (out.stdout + out.stderr).strip()}

    def cleanup(self, rd: Any) -> None:
        runs.finish(rd)


class RunnerHard(RunnerStop):
    id, label = "runner-stop", "`runner stop`"
    how = "`runner stop --run-dir DIR` (hard stop: the engine tears its run down), `[stop] kill_grace = KILL_GRACE`"


class RunnerFile(RunnerStop):
    id, label, channel = "runner-stop-file", "`runner stop`, file channel", "file"
    how = (
        '`runner stop --run-dir DIR` with `[stop] channel = "file"`: no signal at all, the engine\'s '
        "watchdog reads the request file (woken by inotify)"
    )


class RunnerNow(RunnerStop):
    id, label, flags = "runner-stop-now", "`runner stop --now`", ("--now",)
    how = "`runner stop --now --run-dir DIR` (the stopper kills every process of the run itself)"


class RunnerEngineSigterm(RunnerStop):
    """The fair comparison with `timeout` and tini, which are already running when the
    stop arrives: no stopper process starts, the engine gets the SIGTERM a container
    runtime, systemd or `kill` sends, and the stop is over when the engine has exited
    (as `timeout`'s is when `timeout` has)."""

    id, label = "runner-engine-sigterm", "SIGTERM to the engine"
    how = "`kill -TERM` to the run's engine (pid from `engine.json`, through a pidfd); done when the engine has exited"

    def stop(self, rd: Any) -> dict[str, Any]:
        record = json.loads(rd.engine_identity.read_text())
        fd = os.pidfd_open(record["pid"])
        try:
            # The pidfd pins the process; its start ticks say it is still the engine.
            if identity.start_ticks(record["pid"]) != record["start_ticks"]:
                raise RuntimeError("the engine's pid no longer names the engine")
            signal.pidfd_send_signal(fd, signal.SIGTERM)
            if not select.select([fd], [], [], STOPPER_WAIT)[0]:
                raise RuntimeError(f"the engine did not exit within {STOPPER_WAIT:g} s of its SIGTERM")
        finally:
            os.close(fd)
        return {}


ALL = (
    PopenTerminate,
    KillpgReaper,
    CoreutilsTimeout,
    Supervisord,
    Tini,
    DumbInit,
    TiniPid1,
    DumbInitPid1,
    RunnerHard,
    RunnerFile,
    RunnerNow,
    RunnerEngineSigterm,
)
CI = (CoreutilsTimeout, RunnerHard, RunnerNow, RunnerEngineSigterm)

BUILTIN = {c.id: c for c in ALL} | {"runner": RunnerHard}
"""`--stopper NAME`: every adapter by its id; `runner` is this project's own stop."""
