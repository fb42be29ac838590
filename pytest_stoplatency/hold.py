"""Holding what a harness starts, for a harness that is not a pytest session (public API:
the conformance kit uses it; a pytest session gets the same through the plugin).

- ``guard(scratch)`` starts this process's guardian, the one a pytest session starts
  (the plugin's _guardian.py): when this process dies, by any signal, SIGKILL included,
  the guardian kills every victim this process prepared (by token), every process that
  carries one of this process's tags (``Scope.tag``), everything in this process's
  ``Hold`` cgroup, and removes the ``scratch`` directories. The next pytest session's
  sweep does the same should the guardian itself be gone.
- ``tag_environment()`` tags everything this process starts from then on, whoever starts
  it, for that guardian.
- ``Hold.open()`` holds what this process starts through its scopes: a cgroup of this
  process's own (``<its cgroup>/stoplatency/<pid>.<start ticks>.hold``, the layout of
  ``--process-leaks-cgroup``, which the sweep of a dead owner knows, beside that one's) where one can be
  made; elsewhere this process becomes a child subreaper (an orphan of what it started
  is re-parented to it, not to init) and the tag in each process's environment is the
  route. ``Hold.scope(name)`` is one group of processes: ``popen_kwargs()`` starts a
  process in it, ``members()`` is what of it lives, ``kill()`` ends it.

This process itself never enters its cgroup: a kill of a scope never reaches it.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from pathlib import Path
from typing import Any

from . import _cgroup, _guardian, _leaks, _procs, _records, _subreaper, _token

Member = tuple[int, int]  # (pid, start ticks)
ENV_NO_CGROUP = "STOPLATENCY_HOLD_NO_CGROUP"
"""Set (to anything) to hold without a cgroup where one could be made: the subreaper and
the tags alone (how the tests reach that route on a machine with cgroup v2)."""
_serial = itertools.count(1)


def guard(scratch: list[Path] | tuple[Path, ...] = ()) -> int | None:
    """Start this process's guardian (once; again if it died) and name the scratch
    directories it removes should this process die; the guardian's pid (None: none)."""
    if scratch:
        _records.add_scratch(_token.me(), scratch)
    _guardian.ensure_started()  # ablate: kit-guardian
    return _guardian.pid()


def release() -> None:
    """At this process's clean end, its scratch directories already removed: forget them."""
    owner = _token.me()
    (_records.BASE / f"{owner.pid}.{owner.start_ticks}{_records.SCRATCH_SUFFIX}").unlink(missing_ok=True)


def tag_environment(name: str = "harness") -> str:
    """Put this process's own tag (``STOPLATENCY_LEAK_TAG=<pid>.<start ticks>.<name>``) in its
    environment: everything it starts from now on carries it, whoever starts it (a Python
    adapter's daemon too), so that its guardian kills it should this process die. A
    Scope's tag replaces it for what the scope starts."""
    owner = _token.me()
    tag = f"{owner.pid}.{owner.start_ticks}.{name}"
    os.environ[_leaks.TAG_ENV] = tag  # ablate: kit-tags-its-environment
    return tag


class Scope:
    """One group of processes of a Hold: its own cgroup where the Hold has one, and a tag."""

    def __init__(self, hold: Hold, name: str) -> None:
        self.hold = hold
        owner = _token.me()
        self.tag = f"{owner.pid}.{owner.start_ticks}.{name}-{next(_serial)}"
        self.path = hold.session.scope_dir(f"{name}-{next(_serial)}") if hold.session else None
        self.done = False
        hold.scopes.append(self)

    def _enter(self) -> None:
        # In the child between fork and exec: it, and all it will ever start, is held
        # before it runs a single instruction of the command.
        assert self.path is not None
        with open(self.path / "cgroup.procs", "w") as f:
            f.write("0\n")

    def popen_kwargs(self, env: dict[str, str] | None = None) -> dict[str, Any]:
        """Keyword arguments for subprocess.Popen: the child starts held (in the scope's
        cgroup, with the scope's tag in its environment)."""
        kw: dict[str, Any] = {"env": {**(os.environ if env is None else env), _leaks.TAG_ENV: self.tag}}
        if self.path is not None:
            kw["preexec_fn"] = self._enter
        return kw

    def members(self, adopted: bool = True) -> list[Member]:
        """The living processes of the scope: its cgroup's, the carriers of its tag, and,
        without a cgroup, orphans re-parented to this process (the subreaper) that no
        Popen of ours waits for (`adopted`: which scope they came from is not known)."""
        pids: set[int] = set()
        if self.path is not None:
            pids.update(_cgroup.members(self.path))
        key = _leaks.TAG_ENV.encode() + b"="
        for entry in os.listdir("/proc"):
            if entry.isdigit() and _procs.env_value(int(entry), key) == self.tag:
                pids.add(int(entry))
        if self.path is None and adopted:
            pids.update(self.hold.adopted())
        pids.discard(os.getpid())
        out = []
        for pid in sorted(pids):
            ticks = _procs.start_ticks(pid)
            if ticks is not None and _procs.is_alive(pid, ticks):
                out.append((pid, ticks))
        return out

    def kill(self, timeout: float = 5.0) -> list[Member]:
        """SIGKILL everything of the scope, wait for it to be gone, remove its cgroup;
        what was alive (before the kill)."""
        found = self.members()
        self.done = True
        if self.path is not None:
            _cgroup.kill(self.path, timeout)
            _cgroup.remove_tree(self.path)
        for pid, ticks in found:
            _procs.signal_identified(pid, ticks, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while any(_procs.is_alive(*m) for m in found) and time.monotonic() < deadline:
            self.hold.reap()
            time.sleep(0.005)
        self.hold.reap()
        return found


def describe(member: Member) -> str:
    """A process as a row can show it: its command line (short)."""
    text = _procs.cmdline(member[0])
    return text if len(text) <= 160 else text[:157] + "..."


class Hold:
    """What this process starts through its scopes, held: see the module's docstring."""

    def __init__(self, session: _cgroup.Session | None, subreaper: bool) -> None:
        self.session = session
        self.subreaper = subreaper
        self.scopes: list[Scope] = []

    @classmethod
    def open(cls, subreaper: bool = True) -> Hold:
        """`subreaper`: without a cgroup, make this process a child subreaper (not for a
        process whose children someone else's code waits for: a pytest session; its
        tags alone hold what it starts then)."""
        session = None if os.environ.get(ENV_NO_CGROUP) else _cgroup.Session.create(kind="hold")
        reaper = False
        if session is None and subreaper:
            reaper = _subreaper.enable()
        return cls(session, reaper)

    @property
    def how(self) -> str:
        if self.session is not None:
            return f"cgroup {self.session.path}"
        return "subreaper and tags" if self.subreaper else "tags only"

    def scope(self, name: str) -> Scope:
        return Scope(self, name)

    def adopted(self) -> list[int]:
        """Children of this process that no Popen, pool or transport of ours waits for:
        orphans re-parented to us (as subreaper)."""
        if not self.subreaper:
            return []
        me = os.getpid()
        try:
            kids = [int(p) for t in os.listdir(f"/proc/{me}/task") for p in _read_children(me, int(t))]
        except OSError:
            return []
        tracked = _subreaper.tracked_children()
        return [p for p in kids if p not in tracked]

    def reap(self) -> None:
        if self.subreaper:
            _subreaper.reap(self.adopted(), set())

    def close(self) -> None:
        """Kill whatever is still held (a scope an interruption left alive) and remove the cgroup."""
        for scope in self.scopes:
            if not scope.done:
                scope.kill()
        self.scopes.clear()
        if self.session is not None:
            self.session.close()


def _read_children(pid: int, tid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/task/{tid}/children") as f:
            return f.read().split()
    except OSError:
        return []
