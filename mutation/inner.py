"""One inner pytest run in a scratch copy: bounded, logged, and leaving nothing behind."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .scratch import PYTEST_PROBE_MODULE

TAG_VAR = "MUTATION_RUN_TAG"
# After the time limit: SIGINT lets pytest run its teardown (the plugin kills its victims);
# only if that does not end it in this many seconds does the whole group get SIGKILL.
INTERRUPT_GRACE = 10.0


class Aborted(RuntimeError):
    """The campaign is being interrupted: no new inner run may start."""


# Every inner run alive right now, so that an interrupted campaign (SIGTERM from CI's
# `timeout`, or Ctrl-C) can end them: each runs in its own session, where neither signal
# reaches it. Popen and registration happen under the lock, and abort_all() sets the flag
# under it too, so no run can start after abort_all() has looked. A registered run's
# leader is never reaped (its thread waits on a pidfd, which does not reap, and leaves the
# registry under the lock before it reaps), so the pgid abort_all() kills is still that
# run's and cannot have been reused.
_lock = threading.Lock()
_live: dict[int, tuple[subprocess.Popen, str]] = {}
_aborted = False


def abort_all() -> list[str]:
    """Refuse new inner runs and SIGKILL every live one's process group (its own session,
    never ours); return the tags of the runs that were alive (for a sweep)."""
    global _aborted
    with _lock:
        _aborted = True
        live = list(_live.values())
        for proc, _tag in live:
            _killpg(proc)
    return [tag for _proc, tag in live]


def _killpg(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session, never ours; leader not reaped yet
    except ProcessLookupError:
        pass


def _exited(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait up to ``timeout`` for the (unreaped) child to exit, without reaping it."""
    fd = os.pidfd_open(proc.pid)
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


def reset_abort() -> None:
    """For a later campaign in the same process (the tests run several)."""
    global _aborted
    with _lock:
        _aborted = False


@dataclass
class InnerResult:
    timed_out: bool
    returncode: int | None
    duration: float
    log: str
    probe: dict | None  # pytest.json, None if pytest never wrote it
    imports: list[dict] = field(default_factory=list)  # imports.jsonl records
    leaked: list[int] = field(default_factory=list)  # tagged pids killed after the run
    not_found: list[str] = field(default_factory=list)  # node ids pytest refused as "not found"


def _not_found(log_path: Path, scratch: Path) -> list[str]:
    """pytest aborts the whole session on a node id it cannot find, before any hook of the
    probe sees the items; its own error line is the only precise record of which one."""
    prefix = "ERROR: not found: "
    out = []
    for line in log_path.read_text(errors="replace").splitlines():
        if line.startswith(prefix):
            nid = line[len(prefix) :].strip()
            out.append(nid[len(str(scratch)) + 1 :] if nid.startswith(str(scratch) + "/") else nid)
    return out


def _env(scratch: Path, probe_dir: Path, target: str | None, tag: str) -> dict[str, str]:
    env = dict(os.environ)
    # Inner runs must not inherit an outer pytest-xdist worker's identity or an outer
    # probe's settings.
    for key in list(env):
        if key.startswith(("PYTEST_XDIST", "MUTATION_")) or key in ("PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST"):
            del env[key]
    env["PYTHONPATH"] = os.pathsep.join([str(scratch)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["MUTATION_PROBE_DIR"] = str(probe_dir)
    env[TAG_VAR] = tag
    if target:
        env["MUTATION_TARGET_MODULE"] = target
    return env


def _environ_has(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return needle in fh.read().split(b"\0")
    except OSError:
        return False


LEFTOVER_GRACE = 2.0
"""After the inner pytest exits, how long its tagged processes get to exit by themselves
before they count as left behind: the plugin's session guardian outlives pytest by design,
for the moment it takes to sweep a dead session's victims."""


def _tagged(tag: str) -> list[int]:
    needle = f"{TAG_VAR}={tag}".encode()
    return [
        int(n) for n in os.listdir("/proc") if n.isdigit() and int(n) != os.getpid() and _environ_has(int(n), needle)
    ]


def _settle(tag: str) -> None:
    deadline = time.monotonic() + LEFTOVER_GRACE
    while _tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.02)


def sweep_tagged(tag: str) -> list[int]:
    """SIGKILL every process still carrying this run's tag; returns their pids.

    Identity: the tag is a fresh uuid set only in the inner run's environment, so a match
    is ours. The pidfd is opened first and the tag re-read through the same pid, so a pid
    reused between the scan and the signal is never hit.
    """
    needle = f"{TAG_VAR}={tag}".encode()
    killed = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        pid = int(name)
        if not _environ_has(pid, needle):
            continue
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            if not _environ_has(pid, needle):
                continue
            try:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            except ProcessLookupError:
                continue
            killed.append(pid)
            # pidfd readiness = the process has exited (a zombie counts as gone).
            select.select([fd], [], [], 5.0)
        finally:
            os.close(fd)
    return killed


def run(
    scratch: Path,
    node_ids: list[str],
    pytest_args: tuple[str, ...],
    probe_dir: Path,
    log_path: Path,
    timeout: float,
    target: str | None,
) -> InnerResult:
    probe_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("pytest.json", "imports.jsonl"):
        (probe_dir / stale).unlink(missing_ok=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex
    argv = [sys.executable, "-m", "pytest", "-p", PYTEST_PROBE_MODULE, *pytest_args, "-rA", *node_ids]
    t0 = time.monotonic()
    timed_out = False
    with open(log_path, "wb") as log:
        log.write(("$ " + " ".join(argv) + f"\n# cwd={scratch}\n").encode())
        log.flush()
        with _lock:
            if _aborted:
                raise Aborted("campaign interrupted: inner run not started")
            proc = subprocess.Popen(
                argv,
                cwd=scratch,
                env=_env(scratch, probe_dir, target, tag),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            _live[proc.pid] = (proc, tag)
        try:
            if not _exited(proc, timeout):
                timed_out = True
                # SIGINT lets pytest run its teardown (the plugin kills its victims). os.kill, not
                # send_signal: that polls, and a reap here would free the pid while registered.
                os.kill(proc.pid, signal.SIGINT)
                if not _exited(proc, INTERRUPT_GRACE):
                    _killpg(proc)
        finally:
            if not _exited(proc, 0):  # interrupted ourselves (an exception): end the run anyway
                _killpg(proc)
            with _lock:
                _live.pop(proc.pid, None)
            proc.wait()
            _settle(tag)
            leaked = sweep_tagged(tag)
        duration = time.monotonic() - t0
        if timed_out:
            log.write(f"\n# mutation: time limit {timeout:.0f} s reached; interrupted\n".encode())
        if leaked:
            log.write(f"\n# mutation: killed leftover tagged processes {leaked}\n".encode())
    probe = None
    try:
        probe = json.loads((probe_dir / "pytest.json").read_text())
    except (OSError, ValueError):
        pass
    imports = []
    try:
        for line in (probe_dir / "imports.jsonl").read_text().splitlines():
            try:
                imports.append(json.loads(line))
            except ValueError:
                pass
    except OSError:
        pass
    return InnerResult(
        timed_out, proc.returncode, duration, str(log_path), probe, imports, leaked, _not_found(log_path, scratch)
    )
