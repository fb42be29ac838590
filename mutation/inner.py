"""One inner pytest run in a scratch copy: bounded, logged, and leaving nothing behind."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .scratch import PYTEST_PROBE_MODULE

TAG_VAR = "MUTATION_RUN_TAG"
# After the time limit: SIGINT lets pytest run its teardown (the plugin kills its victims);
# only if that does not end it in this many seconds does the whole group get SIGKILL.
INTERRUPT_GRACE = 10.0


@dataclass
class InnerResult:
    timed_out: bool
    returncode: int | None
    duration: float
    log: str
    probe: dict | None                      # pytest.json, None if pytest never wrote it
    imports: list[dict] = field(default_factory=list)   # imports.jsonl records
    leaked: list[int] = field(default_factory=list)     # tagged pids killed after the run
    not_found: list[str] = field(default_factory=list)  # node ids pytest refused as "not found"


def _not_found(log_path: Path, scratch: Path) -> list[str]:
    """pytest aborts the whole session on a node id it cannot find, before any hook of the
    probe sees the items; its own error line is the only precise record of which one."""
    prefix = "ERROR: not found: "
    out = []
    for line in log_path.read_text(errors="replace").splitlines():
        if line.startswith(prefix):
            nid = line[len(prefix):].strip()
            out.append(nid[len(str(scratch)) + 1:] if nid.startswith(str(scratch) + "/") else nid)
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
        proc = subprocess.Popen(
            argv, cwd=scratch, env=_env(scratch, probe_dir, target, tag),
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=INTERRUPT_GRACE)
                except subprocess.TimeoutExpired:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)  # its own session: never ours
                    except ProcessLookupError:
                        pass
                    proc.wait()
        finally:
            if proc.returncode is None:  # interrupted ourselves: still reap it
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
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
    return InnerResult(timed_out, proc.returncode, duration, str(log_path), probe, imports, leaked,
                       _not_found(log_path, scratch))
