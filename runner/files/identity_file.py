"""A process's identity in the run directory: engine.json and children/*.json, written
by the engine (atomic) and read back by every command (untrusted: a damaged file is an
IdentityError naming it, never obeyed)."""

from __future__ import annotations

import os

from runner.errors import Damaged, IdentityError
from runner.files import atomic, untrusted
from runner.ident import FIELDS, Identity

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

FORMAT = 1


def write(path: str | os.PathLike[str], ident: Identity, **extra: object) -> None:
    clash = set(extra) & (set(FIELDS) | {"format"})
    if clash:
        raise ValueError(f"extra keys shadow identity fields: {sorted(clash)}")
    atomic.atomic_write_json(path, {**extra, **ident.to_json(), "format": FORMAT})


def _load(path: str | os.PathLike[str], dir_fd: int | None = None) -> dict[str, Any]:
    # FileNotFoundError propagates: "no file" is the caller's call. Anything else that is
    # not a small regular file of sound JSON is Damaged (a link, a FIFO, a bomb).
    try:
        data = untrusted.read_json(path, dir_fd=dir_fd)
    except IdentityError:
        raise
    except Damaged as exc:
        raise IdentityError(str(exc)) from None
    if not isinstance(data, dict):
        raise IdentityError(f"{path}: expected a JSON object")
    if data.get("format", FORMAT) != FORMAT:
        raise IdentityError(f"{path}: field 'format': expected {FORMAT}, got {data.get('format')!r}")
    return data


def read(path: str | os.PathLike[str], dir_fd: int | None = None) -> Identity:
    return read_record(path, dir_fd)[0]


def read_extra(path: str | os.PathLike[str], dir_fd: int | None = None) -> dict[str, Any]:
    return read_record(path, dir_fd)[1]


def read_record(path: str | os.PathLike[str], dir_fd: int | None = None) -> tuple[Identity, dict[str, Any]]:
    """The identity and the extra keys written beside it (a child's name), from one read."""
    data = _load(path, dir_fd)
    extra = {k: v for k, v in data.items() if k not in FIELDS and k != "format"}
    return Identity.from_json(data, source=str(path)), extra
