"""The one child runner: spawn in a new process group, capture output with a cap,
bound by a call timeout and an idle timeout, and leave nothing of the call behind.

The loop waits on two things at once: the output pipe and a pidfd of the leader. So
the runner notices the leader's death at once, even while a grandchild still holds
the pipe open (it would never see EOF otherwise), and a stop that kills the leader
from the watchdog thread releases it promptly.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from pathlib import Path

from runner import defaults
from runner import log as _log
from runner.engine.registry import Registry
from runner.errors import Damaged
from runner.files import dirfd, links
from runner.proc import identity, oom, reaper
from runner.proc.reaper import ReapReport
from runner.values import Value

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from typing import BinaryIO

    from runner.engine.registry import Entry

log = _log.get("runner.engine.child")

SNAPSHOT_EVERY = defaults.SNAPSHOT_EVERY
"""Descendant snapshots while the call lives: what a later kill can still find after a
double fork broke the parent links."""
_CHUNK = 65536


class Result(Value):
    __slots__ = (
        "argv",
        "returncode",
        "timed_out",
        "stopped",
        "duration",
        "output_path",
        "reap",
        "output_error",
        "killed_by",
        "oom_kills",
    )

    def __init__(
        self,
        argv: list[str],
        returncode: int | None,
        timed_out: str | None,
        stopped: bool,
        duration: float,
        output_path: Path,
        reap: ReapReport | None,
        output_error: str | None = None,
        killed_by: str | None = None,
        oom_kills: int = 0,
    ) -> None:
        self.argv = argv
        self.returncode = returncode
        self.timed_out = timed_out  # None | "call" | "idle"
        self.stopped = stopped  # the registry's record that the stop killed it
        self.duration = duration
        self.output_path = output_path
        self.reap = reap
        self.output_error = output_error  # why the output could not be kept (a full disk)
        self.killed_by = killed_by  # how a leader that died of a signal died: its name, or oom.OOM
        self.oom_kills = oom_kills  # processes of the call the OOM killer killed (oom.call_kills rose)


class _Capture:
    """The call's output, kept up to `cap` bytes. A write the disk refuses (full,
    read-only) is not the call's failure nor the engine's crash: from then on the output
    is counted, not stored, and `error` says why (the engine journals it)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        cap_bytes: int,
        told: Callable[[str, str], object] | None = None,
        broke: Callable[[str, int], object] | None = None,
    ) -> None:
        self.path = Path(path)
        self.told = told  # told (file, error) at the first refused write, as it happens
        self.broke = broke  # told (file, links) when a backup's link was broken (links.py)
        self.cap = cap_bytes
        self.kept = 0
        self.dropped = 0
        self.error: str | None = None
        self.file: BinaryIO | None = None
        try:
            # A new file, 0600 like state.json (a provider's output may hold secrets), opened
            # relative to the run directory's descriptor: never through a link, never over a
            # file someone put there (dirfd.create_new: Damaged, one line, not caught here).
            self.file = os.fdopen(dirfd.create_new(self.path, 0o600), "wb")
        except OSError as exc:
            self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        first = self.error is None
        self.error = self.error or f"{exc.strerror or exc}"
        if self.file is not None:
            try:
                self.file.close()
            except OSError:
                pass  # what the buffer held is lost with the rest
            self.file = None
        if first and self.told is not None:
            self.told(str(self.path), self.error)

    def _sole(self) -> None:
        """Before each write: a backup that shares the file (`cp -al` of the live run)
        keeps it; the call's output goes on in a copy of its own (links.py)."""
        if self.file is None:
            return
        broken = links.shared(self.file.fileno())
        if not broken:
            return
        try:
            new = links.break_link(self.path, self.file.fileno())
        except Damaged as exc:
            self._failed(OSError(0, exc.what))
            return
        old, self.file = self.file, os.fdopen(new, "wb")
        old.close()
        if self.broke is not None:
            self.broke(str(self.path), broken)

    def add(self, data: bytes) -> None:
        take = min(max(0, self.cap - self.kept), len(data)) if self.file is not None else 0
        if take and self.file is not None:
            try:
                self._sole()
                if self.file is None:
                    raise OSError(0, self.error or "")
                self.file.write(data[:take])
                # On disk at once: `runner logs --follow` and the foreground progress
                # line read the file while the call runs.
                self.file.flush()
            except OSError as exc:  # ablate: capture-survives-full-disk
                self._failed(exc)
                take = 0
        self.kept += take
        self.dropped += len(data) - take

    def close(self) -> None:
        if self.file is None:
            return
        try:
            self._sole()
            if self.file is None:
                return
            if self.dropped:
                self.file.write(
                    f"\n[runner: output capped at {self.cap} bytes; {self.dropped} more bytes dropped]\n".encode()
                )
            self.file.close()
        except OSError as exc:
            self._failed(exc)


def _drain(fd: int, capture: _Capture) -> bool:
    """Read whatever is available now, without waiting; True at EOF."""
    while True:
        try:
            data = os.read(fd, _CHUNK)
        except BlockingIOError:
            return False
        if not data:
            return True
        capture.add(data)


def run_child(
    argv: Iterable[str | os.PathLike[str]],
    *,
    registry: Registry,
    name: str,
    timeout: float | None,
    idle_timeout: float | None,
    env: Mapping[str, str] | None,
    output_path: str | os.PathLike[str],
    cap_bytes: int,
    cwd: str | os.PathLike[str] | None = None,
    output_unwritten: Callable[[str, str], object] | None = None,
    link_broken: Callable[[str, int], object] | None = None,
) -> Result:
    str_argv = [str(a) for a in argv]
    spawn_argv = registry.cgroup.wrap_argv(str_argv) if registry.cgroup is not None else str_argv
    capture = _Capture(output_path, cap_bytes, output_unwritten, link_broken)
    # The OOM killer's count before the call: a SIGKILL while it rose was for memory.
    memory = registry.cgroup.path / "work" if registry.cgroup is not None else None
    oom_before = oom.kills(memory)
    oom_call_before = oom.call_kills(memory)  # any process of the call, not only its leader
    t0 = time.monotonic()
    popen: subprocess.Popen[bytes] | None = None
    entry: Entry | None = None
    pidfd: int | None = None
    timed_out: str | None = None
    reap: ReapReport | None = None
    try:
        with registry.spawn_lock:
            # process_group=0, never preexec_fn: the engine has threads (watchdog), and
            # code run between fork and exec in a threaded parent can deadlock.
            popen = subprocess.Popen(
                spawn_argv,
                process_group=0,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
            )
            # Our own unreaped child: nobody else can reap it, so this pidfd is exact.
            pidfd = os.pidfd_open(popen.pid)
            entry = registry.register(popen, name)
        assert popen.stdout is not None  # stdout=PIPE: always a pipe
        out_fd = popen.stdout.fileno()
        os.set_blocking(out_fd, False)
        poller = select.poll()
        poller.register(out_fd, select.POLLIN)
        poller.register(pidfd, select.POLLIN)
        last_output = time.monotonic()
        next_snapshot = last_output + SNAPSHOT_EVERY
        out_open = True
        while True:
            now = time.monotonic()
            deadlines = [next_snapshot]
            if timeout:
                deadlines.append(t0 + timeout)
            if idle_timeout:
                deadlines.append(last_output + idle_timeout)
            wait_ms = max(0, int((min(deadlines) - now) * 1000) + 1)
            events = dict(poller.poll(wait_ms))
            if out_open and out_fd in events:
                before = capture.kept + capture.dropped
                if _drain(out_fd, capture):
                    poller.unregister(out_fd)
                    out_open = False
                if capture.kept + capture.dropped > before:
                    last_output = time.monotonic()
            if pidfd in events:
                break  # the leader exited (or was killed by a stop)
            now = time.monotonic()
            if timeout and now >= t0 + timeout:
                timed_out = "call"
                break
            if idle_timeout and now >= last_output + idle_timeout:
                timed_out = "idle"
                break
            if now >= next_snapshot:
                registry.snapshot(entry)
                next_snapshot = now + SNAPSHOT_EVERY
        # Leader dead or timed out: kill whatever is left of the call. While the leader
        # is our unreaped zombie its pid pins the group id, so the group signal is exact.
        # A tree the stop killed is the stop's: its kill reached every route of this
        # call (it snapshotted or contained it), so the call waits for that report
        # instead of scanning /proc again while the engine tears down.
        # (The stop journals its own refusals: the call reports none of them again.)
        if timed_out is None and not registry.killed_by_stop(entry) and not _exited_cleanly(popen.pid):
            # The leader died of a signal or a failure: a hard stop already asked for (its
            # request lodged before any signal, or a stop signal the engine got) is what
            # killed it, whichever of its signals landed first (a `--now` reaches the
            # call and the engine at once). Decided on what is recorded, not on timing.
            registry.claim_stop()
        if registry.killed_by_stop(entry):  # ablate: stopped-call-waits-for-the-stop
            registry.stop_report()
        else:
            reap = _kill_tree(registry, entry)
        if out_open:
            _drain(out_fd, capture)  # what is already in the pipe; never wait for an EOF
        returncode = popen.wait()
    finally:
        if popen is not None and popen.returncode is None:
            # An exception (not a stop) left the call running: it must not outlive us.
            try:
                if entry is not None:
                    _kill_tree(registry, entry)
                else:
                    os.killpg(popen.pid, signal.SIGKILL)
            finally:
                popen.wait()
        if popen is not None and popen.stdout is not None:
            popen.stdout.close()
        if pidfd is not None:
            os.close(pidfd)
        if entry is not None:
            registry.unregister(entry)
        capture.close()
    stopped = registry.killed_by_stop(entry)
    died = returncode < 0 and not stopped and timed_out is None
    killed_by = oom.killed_by(returncode, oom_before, oom.kills(memory)) if died else None
    oom_kills = oom.rose(oom_call_before, oom.call_kills(memory)) if not stopped else 0
    return Result(
        argv=str_argv,
        returncode=returncode,
        timed_out=None if stopped else timed_out,
        stopped=stopped,
        duration=time.monotonic() - t0,
        output_path=Path(output_path),
        reap=reap,
        output_error=capture.error,
        killed_by=killed_by,
        oom_kills=oom_kills,
    )


def _exited_cleanly(pid: int) -> bool:
    """Our unreaped child exited 0 (its wait status, read from its zombie)."""
    st = identity.stat(pid)
    return st is not None and st.zombie and st.wait_status == 0


def _kill_tree(registry: Registry, entry: Entry) -> ReapReport:
    """The call's group, then descendants seen now or in earlier snapshots (those that
    left the group), and what the engine adopted (Registry.adopted). No tag sweep and no
    cgroup kill here: other calls of the run carry the same tag and share the cgroup;
    the tag and cgroup only prove membership."""
    registry.snapshot(entry)
    # What the leader's exit orphaned is the engine's now (a subreaper): its children,
    # adopted, and theirs, wherever they went (setsid, env -i): the call's leftovers.
    adopted = registry.adopted()
    escaped = [i for i in entry.snapshots.values() if i.pid != entry.pid] + adopted
    return reaper.kill_everything(
        groups=[(entry.pgid, entry.members())],
        pids=escaped,
        run_id=registry.run_id,
        tag_sweep=False,
        cgroup=registry.cgroup,
        cgroup_scope=None,
        known=entry.members() + adopted,
        kill_grace=registry.kill_grace,
    )
