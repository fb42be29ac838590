"""The owner's record directory: where its victims write their ready files.

One directory per owner (pytest process), named after the owner's token prefix,
under a machine-wide base shared by every session. The ready files double as the
owner's record of "extras" (the env-scrubber's grandchild, which carries no token):
the victim itself writes them, so a session that crashes before reading one still
leaves it behind for the next session's sweep.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from ._token import Owner, Token

BASE = Path(tempfile.gettempdir()) / f"pytest-stoplatency-{os.getuid()}"


def owner_dir(owner: Owner) -> Path:
    d = BASE / f"{owner.pid}.{owner.start_ticks}"
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    return d


def ready_path(token: Token) -> Path:
    return owner_dir(token.owner) / f"{token.victim_id}.ready"


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
        (int(e["pid"]), int(e["start_ticks"])) for e in info.get("extras", [])]


def owner_dirs() -> list[tuple[Owner, Path]]:
    out = []
    try:
        entries = list(BASE.iterdir())
    except FileNotFoundError:
        return out
    for d in entries:
        pid, _, ticks = d.name.partition(".")
        if pid.isdigit() and ticks.isdigit():
            out.append((Owner(int(pid), int(ticks)), d))
    return out


def recorded_extras(d: Path) -> list[tuple[int, int]]:
    out = []
    for f in d.glob("*.ready"):
        out.extend(extras_of(read_ready(f)))
    return out


def remove(d: Path) -> None:
    shutil.rmtree(d, ignore_errors=True)
