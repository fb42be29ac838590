"""The STOPLATENCY_VICTIM token: ``<owner-pid>.<owner-start-ticks>.<victim-id>``.

The owner is the pytest process that issued the token (each xdist worker is its
own owner). Pid plus start ticks name the owner even after its pid is reused, so a
sweep can tell a dead owner's victims from a live one's.
"""

from __future__ import annotations

import itertools
import os
from typing import NamedTuple

from . import _procs
from .victim import READY_ENV as READY_ENV  # one spelling for both sides
from .victim import TOKEN_ENV as TOKEN_ENV

# Module-level, not per session: an in-process pytester run shares the owner.
_ids = itertools.count(1)


class Owner(NamedTuple):
    pid: int
    start_ticks: int

    @property
    def prefix(self) -> str:
        return f"{self.pid}.{self.start_ticks}."

    def alive(self) -> bool:
        return _procs.is_alive(self.pid, self.start_ticks)

    def session_name(self, session: int | None) -> str:
        """``<pid>.<start-ticks>.<session>``: what one pytest session of this owner keeps on
        disk (_session.py); ``<pid>.<start-ticks>`` for what it keeps outside any session."""
        base = f"{self.pid}.{self.start_ticks}"
        return base if session is None else f"{base}.{session}"


def parse_session_name(name: str) -> Owner | None:
    """The owner a session name (Owner.session_name) names, or None for any other name."""
    parts = name.split(".")
    if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts):
        return None
    return Owner(int(parts[0]), int(parts[1]))


class Token(NamedTuple):
    owner: Owner
    victim_id: str

    def __str__(self) -> str:
        return f"{self.owner.pid}.{self.owner.start_ticks}.{self.victim_id}"


def me() -> Owner:
    pid = os.getpid()
    ticks = _procs.start_ticks(pid)
    assert ticks is not None  # this very process is alive
    return Owner(pid, ticks)


def new_token() -> Token:
    return Token(me(), str(next(_ids)))


def parse(text: str | None) -> Token | None:
    if not text:
        return None
    parts = text.split(".")
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return Token(Owner(int(parts[0]), int(parts[1])), parts[2])
