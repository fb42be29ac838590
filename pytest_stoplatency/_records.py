"""The owner's record directory: where its victims write their ready files.

One directory per pytest session, named after its owner (the pytest process: pid and
start ticks) and the session's number in that process (_session.py): a test that runs
pytest in its own process (pytester.runpytest()) opens a session inside the session,
whose end removes its own records and never the outer one's. Under a machine-wide base
shared by every session: a fixed path, not the temp
directory, since sessions with different TMPDIRs must still see each other's
records (a sweep that looks elsewhere never finds a dead owner's extras).

Two files per victim record its "extras" (the env-scrubber's grandchild, which
carries no token), both written by the victim itself, so that a session that
crashes before reading them still leaves them for the next session's sweep:
``<id>.extras``, one ``<pid> <start-ticks>`` line appended by the grandchild
itself while it still carries the token (before it drops its environment, so no
moment exists when it is neither tokened nor recorded), and the ready file.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

from . import _session
from ._token import Owner, Token, me, parse_session_name
from .victim import EXTRAS_SUFFIX, READY_SUFFIX

BASE = Path("/tmp") / f"pytest-stoplatency-{os.getuid()}"


def session_dir(session: int | None) -> Path:
    """This process's record directory for pytest session `session` (None: outside any
    session), made if missing."""
    d = BASE / me().session_name(session)
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    return d


def ready_path(token: Token) -> Path:
    """In the directory of the innermost session open now: the one whose test starts it."""
    return session_dir(_session.current()) / f"{token.victim_id}{READY_SUFFIX}"


def extras_path(ready: Path) -> Path:
    """Where the victim appends its extras (derived by the victim from the ready path)."""
    return Path(ready).with_suffix(EXTRAS_SUFFIX)


def read_extras(path: Path) -> list[tuple[int, int]]:
    """(pid, start_ticks) lines of an extras file; a torn last line (a writer killed mid-line) is skipped."""
    try:
        text = Path(path).read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            out.append((int(parts[0]), int(parts[1])))
    return out


def read_ready(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def extras_of(info: dict | None) -> list[tuple[int, int]]:
    """(pid, start_ticks) a ready file names: the victim itself and its recorded extras."""
    if not info:
        return []
    return [(int(info["pid"]), int(info["start_ticks"]))] + [
        (int(e["pid"]), int(e["start_ticks"])) for e in info.get("extras", [])
    ]


def owner_dirs() -> list[tuple[Owner, Path]]:
    out: list[tuple[Owner, Path]] = []
    try:
        entries = list(BASE.iterdir())
    except FileNotFoundError:
        return out
    for d in entries:
        owner = parse_session_name(d.name)
        if owner is not None:
            out.append((owner, d))
    return out


def recorded_extras(d: Path) -> list[tuple[int, int]]:
    out = []
    for f in d.glob(f"*{READY_SUFFIX}"):
        out.extend(extras_of(read_ready(f)))
    for f in d.glob(f"*{EXTRAS_SUFFIX}"):
        out.extend(read_extras(f))
    return out


SCRATCH_SUFFIX = ".scratch"
"""Beside an owner's record directory, ``<owner>.scratch``: the scratch directories to remove
once the owner is dead (written by pytest_stoplatency.hold.guard: the conformance kit's
/tmp/stop-conformance-*). A file of its own, not one inside the record directory: a sweep
that removes the directory without knowing of it (an older plugin's) leaves it in place."""


def add_scratch(owner: Owner, paths) -> None:
    # The owner's record directory outside any session: the base, private, exists, and a
    # later session's sweep gate sees a dead owner's records.
    session_dir(None)
    with open(BASE / f"{owner.pid}.{owner.start_ticks}{SCRATCH_SUFFIX}", "a") as f:
        f.writelines(f"{Path(p).resolve()}\n" for p in paths)


def scratch_files() -> list[tuple[Owner, Path]]:
    out: list[tuple[Owner, Path]] = []
    try:
        entries = list(BASE.glob(f"*{SCRATCH_SUFFIX}"))
    except OSError:
        return out
    for f in entries:
        pid, _, ticks = f.name[: -len(SCRATCH_SUFFIX)].partition(".")
        if pid.isdigit() and ticks.isdigit():
            out.append((Owner(int(pid), int(ticks)), f))
    return out


def remove_scratch(f: Path) -> None:
    """Remove the scratch directories a dead owner named, then the list: only directories
    this user owns, never through a link."""
    try:
        lines = f.read_text().splitlines()
    except OSError:
        return
    for line in lines:
        path = Path(line)
        try:
            st = path.lstat()
        except OSError:
            continue
        if path.is_absolute() and stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
            shutil.rmtree(path, ignore_errors=True)
    f.unlink(missing_ok=True)


def remove(d: Path) -> None:
    shutil.rmtree(d, ignore_errors=True)
