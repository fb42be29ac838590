"""The kit's victim zoo: the plugin's own victim programs, each tree marked.

A tree is one victim program of pytest_stoplatency (victim.py or victims.sh) started
through a link of its own to the program, ``<root>/t<n>/victim.py``. The link's
directory is the tree's marker, and it is in the argv of every process of the tree:
forked children share their parent's argv, and the processes that exec again (the
env-scrubber's grandchild, bash's setsid escapee) exec that same path. So a process
left behind is found by its argv even after it dropped its environment (env -i) and
left the session (setsid); the token in the environment and the extras the victim
recorded are looked at too.

Nothing here signals a process that does not carry a marker of ours, and every signal
goes through a pidfd opened before the identity (start ticks) is checked again.
"""

from __future__ import annotations

import itertools
import os
import select
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest_stoplatency.victim as program
from pytest_stoplatency import PreparedVictim
from runner.proc import identity

SLEEP = 7200  # what a victim sleeps when nothing stops it: far past any stop measured here
PROGRAMS = Path(program.__file__).resolve().parent


@dataclass(frozen=True)
class VictimSpec:
    """One column of the table: a victim program, its kind, its language and children."""

    id: str
    label: str
    kind: str
    lang: str = "python"
    children: int = 2


VICTIMS = (
    VictimSpec("cooperative", "cooperative", "cooperative"),
    VictimSpec("trap-term", "python trap", "trap-term"),
    VictimSpec("bash-trap", "bash trap", "trap-term", lang="bash"),
    VictimSpec("ignore-term", "SIG_IGN + 2 kids", "ignore-term"),
    VictimSpec("slow-exit", "slow exit (1 s)", "slow-exit"),
    VictimSpec("stopped", "SIGSTOPped", "stopped"),
    VictimSpec("python-trap-kids", "python trap + 3 kids", "forker", children=3),
    VictimSpec("respawner", "respawner", "respawner"),
    VictimSpec("setsid-escapee", "setsid escapee", "escapee"),
    VictimSpec("double-fork", "double-fork daemon", "double-fork"),
    VictimSpec("pipe-holder", "pipe-holder", "pipe-holder"),
    VictimSpec("env-scrubber", "env -i + setsid", "env-scrubber"),
    VictimSpec("zombie-leader", "leader exited, thread runs", "zombie-leader"),
    VictimSpec("setsid-spawner", "env -i + setsid every 50 ms", "setsid-spawner"),
)
"""Every kind of the zoo (`--kinds`' default), by id."""

PEER = ("cooperative", "bash-trap", "python-trap-kids", "setsid-escapee", "double-fork", "pipe-holder", "env-scrubber")
"""The columns of `make bench`'s peer table (docs/bench.json keeps them comparable)."""

_SERIAL = itertools.count(1)
RECORD_DIRS: set[Path] = set()  # where the trees' ready files went (the plugin's owner directory)
Member = tuple[int, int]  # (pid, start ticks): a process, never a reused pid


def _living_ticks(pid: int) -> int | None:
    """Start ticks of a living process (a zombie is dead), else None."""
    st = identity.stat(pid)
    return st.start_ticks if st is not None and not st.zombie else None


def alive(member: Member) -> bool:
    """That very process (pid and start ticks) is alive."""
    return _living_ticks(member[0]) == member[1]


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _cmdline(pid: int) -> tuple[str, bytes]:
    """(where the process's files are read, its command line). A process whose leader
    thread exited while another runs (the zombie-leader) has an empty /proc/PID/cmdline
    and environ: they are read from that thread's directory (identity.proc_dir)."""
    where = f"/proc/{pid}"
    cmdline = _read(f"{where}/cmdline")
    if not cmdline and (st := identity.stat(pid)) is not None and st.tid != pid:
        where = identity.proc_dir(st)
        cmdline = _read(f"{where}/cmdline")
    return where, cmdline


class Tree:
    """One victim tree, not started yet: ``argv`` starts it (whoever starts it)."""

    def __init__(self, spec: VictimSpec, root: Path, *, children: int | None = None) -> None:
        self.spec = spec
        self.dir = Path(root) / f"t{next(_SERIAL)}"
        self.dir.mkdir(parents=True)
        for name in ("victim.py", "victims.sh"):
            (self.dir / name).symlink_to(PROGRAMS / name)
        self.marker = os.fsencode(f"{self.dir}/")
        # The plugin's handle gives the token, the ready file and the handshake; the argv
        # is ours, so that it runs the program through the marked link.
        self.prepared = PreparedVictim(spec.kind, lang=spec.lang)
        RECORD_DIRS.add(self.prepared.ready_path.parent)
        n = spec.children if children is None else children
        env = [
            "/usr/bin/env",
            f"{program.TOKEN_ENV}={self.prepared.token}",
            f"{program.READY_ENV}={self.prepared.ready_path}",
        ]
        if spec.lang == "python":
            # -S: the program needs no site-packages (victim.py runs as a plain script).
            prog = [sys.executable, "-S", str(self.dir / "victim.py"), spec.kind, "--sleep", str(SLEEP)]
            prog += ["--children", str(n), "--cleanup", "1.0"]
        else:
            bash = shutil.which("bash") or "/bin/bash"
            prog = [bash, str(self.dir / "victims.sh"), spec.kind, str(SLEEP), str(n), "1"]
        self.argv = env + prog
        self.shell = shlex.join(self.argv)  # `{argv}` of a --start command
        self.token = os.fsencode(f"{program.TOKEN_ENV}={self.prepared.token}")
        self.exclude: set[int] = set()  # a stopper's own wrapper (timeout, tini) carries the argv too
        self.own_pid_namespace = False  # set by wait_ready: the recorded pids are not ours

    def __repr__(self) -> str:
        return f"<Tree {self.spec.id} {self.dir}>"

    @property
    def up(self) -> bool:
        """The kit has seen the victim's ready handshake (adopt or wait_ready)."""
        return hasattr(self, "victim") or self.own_pid_namespace

    def adopt(self, timeout: float = 30.0, process: Any = None) -> None:
        """Wait until every process of the tree is up (the victim's ready file)."""
        self.victim = self.prepared.adopt(timeout, process=process)

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait for the ready file only: for a tree inside another pid namespace, whose
        ready file names its pids as that namespace sees them (the plugin's handshake
        checks the pid against the token, from here, and must refuse it). Its members
        are found by marker and token, by host pid, as every tree's are; the pids it
        records (extras) are never used, since here they would name other processes."""
        self.own_pid_namespace = True
        deadline = time.monotonic() + timeout
        while self.prepared.ready_info() is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self!r}: no ready file after {timeout} s")
            time.sleep(0.005)

    def extras(self) -> list[Member]:
        """Processes the victim recorded (the env-scrubber's grandchild, by pid and ticks)."""
        if self.own_pid_namespace:
            return []
        info = self.prepared.ready_info() or {}
        out = [(int(e["pid"]), int(e["start_ticks"])) for e in info.get("extras", [])]
        path = self.prepared.ready_path.with_suffix(program.EXTRAS_SUFFIX)
        for line in _read(str(path)).decode(errors="replace").splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                out.append((int(parts[0]), int(parts[1])))
        return out

    def members(self) -> list[Member]:
        return scan([self])[self]


def scan(trees: Iterable[Tree]) -> dict[Tree, list[Member]]:
    """The living processes of each tree, in one pass over /proc: by marker in the argv,
    by token in the environment, and the recorded extras. A process whose argv holds the
    tree's whole command line (the token's assignment for /usr/bin/env) is a wrapper
    the stopper started it under (`timeout`, a shell, `unshare`), not the tree."""
    trees = list(trees)
    found: dict[Tree, set[Member]] = {t: set() for t in trees}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        where, cmdline = _cmdline(pid)
        owners = [t for t in trees if t.marker in cmdline and t.token not in cmdline and pid not in t.exclude]
        if not owners:
            environ = _read(f"{where}/environ").split(b"\0")
            owners = [t for t in trees if t.token in environ and pid not in t.exclude]
        if owners and (ticks := _living_ticks(pid)) is not None:
            for t in owners:
                found[t].add((pid, ticks))
    for t in trees:
        for pid, ticks in t.extras():
            if _living_ticks(pid) == ticks and pid not in t.exclude:
                found[t].add((pid, ticks))
    return {t: sorted(m) for t, m in found.items()}


def _pidfd(pid: int, ticks: int) -> int | None:
    """A pidfd of exactly that process, or None when it is gone (checked after opening)."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    if _living_ticks(pid) != ticks:
        os.close(fd)
        return None
    return fd


class Deaths:
    """Watches processes die through pidfds: the time each group's last member died.
    Opened before the stop (so that no death is missed), waited on after, then closed."""

    def __init__(self, groups: Mapping[Any, Iterable[Member]]) -> None:
        self.fds: dict[int, Any] = {}
        self.pending: dict[Any, int] = {}
        self.gone_at: dict[Any, float] = {}
        self.poller = select.poll()
        now = time.monotonic()
        for key, members in groups.items():
            self.pending[key] = 0
            for pid, ticks in members:
                fd = _pidfd(pid, ticks)
                if fd is not None:
                    self.fds[fd] = key
                    self.pending[key] += 1
                    self.poller.register(fd, select.POLLIN)
            if not self.pending[key]:
                self.gone_at[key] = now

    def __enter__(self) -> Deaths:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait(self, deadline: float) -> dict[Any, float | None]:
        """Until every group is gone or the deadline; then each group's time of death
        (monotonic), None for a group with a member still alive. May be called again."""
        while self.fds and (left := deadline - time.monotonic()) > 0:
            for fd, _ in self.poller.poll(left * 1000):
                now = time.monotonic()
                self.poller.unregister(fd)
                os.close(fd)
                key = self.fds.pop(fd)
                self.pending[key] -= 1
                if not self.pending[key]:
                    self.gone_at[key] = now
        return {key: self.gone_at.get(key) for key in self.pending}

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()


def kill(members: Iterable[Member], timeout: float = 5.0) -> int:
    """SIGKILL each process (pidfd, then the ticks again) and wait for it to die; how many
    were signalled."""
    fds = []
    for pid, ticks in members:
        fd = _pidfd(pid, ticks)
        if fd is None:
            continue
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
            fds.append(fd)
        except ProcessLookupError:
            os.close(fd)
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + timeout
    pending = set(fds)
    while pending and (left := deadline - time.monotonic()) > 0:
        for fd, _ in poller.poll(left * 1000):
            poller.unregister(fd)
            pending.discard(fd)
    for fd in fds:
        os.close(fd)
    return len(fds)


def kill_rounds(find: Callable[[], Iterable[Member]], rounds: int = 50) -> int:
    """SIGKILL what `find()` names, again and again until a look finds nothing it had
    not killed (a member that forks, the setsid-spawner, starts one between a look and
    its own death); how many were signalled."""
    done: set[Member] = set()
    for _ in range(rounds):
        new = [m for m in find() if m not in done]
        if not new:
            break
        kill(new)
        done.update(new)
    return len(done)


def sweep(root: Path) -> int:
    """Kill every living process whose argv names a path under ``root`` (every tree's
    marker lives there): the last resort at the end of a benchmark, whatever happened."""
    needle = os.fsencode(f"{Path(root)}/")
    me = os.getpid()

    def marked() -> list[Member]:
        members = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != me and needle in _cmdline(int(entry))[1]:
                ticks = _living_ticks(int(entry))
                if ticks is not None:
                    members.append((int(entry), ticks))
        return members

    return kill_rounds(marked)


def forget_records() -> None:
    """Remove the ready and extras files of every tree made by this process."""
    for d in RECORD_DIRS:
        shutil.rmtree(d, ignore_errors=True)
    RECORD_DIRS.clear()


def clean_up(work: Path, who: str) -> None:
    """The end of a run of trees under `work`, whatever happened: kill what is left of them
    (saying how many, as `who`), forget their records, remove the directory."""
    left = sweep(work / "trees")
    if left:
        print(f"{who}: killed {left} leftover processes of the trees", file=sys.stderr)
    forget_records()
    shutil.rmtree(work, ignore_errors=True)
