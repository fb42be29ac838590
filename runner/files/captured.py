"""The captured output of a run's commands, under `output/`: how the engine names each
file, and how `runner logs` and the foreground progress line find and read them.

One file per command: `<attempt>-<seq>-<item index>-<name>.log`, e.g.
`1-0003-2-verify0.log` (the third command of attempt 1, the first verify command of the
third item) or `1-0009-run-post_run0.log` (a post_run hook belongs to no item). The
attempt keeps a resumed run from writing over the output of the attempt before; the
item index (not the item's name, which may hold any character) ties a file to its item.

The directory is untrusted (untrusted.py): a name of another shape is not ours and is
left out; a file is opened without following a link and never blocks.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from runner.errors import Damaged
from runner.files import untrusted
from runner.values import FrozenValue

TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Final

    from runner.files.rundir import RunDir

_NAME = re.compile(r"(\d{1,9})-(\d{1,12})-(\d{1,9}|run)-([a-z_]+\d*)\.log")
TAIL_BYTES = 8192
"""How much of a file's end is read for its last line."""


def file_name(attempt: int, seq: int, item_index: int | None, name: str) -> str:
    """The name of the `seq`-th command of `attempt` (`name`: session, repair, verify0,
    post_session0, post_run0...)."""
    return f"{attempt}-{seq:04d}-{'run' if item_index is None else item_index}-{name}.log"


class Captured(FrozenValue):
    """One captured output file."""

    __slots__ = ("path", "attempt", "seq", "item_index", "name")

    def __init__(self, path: Path, attempt: int, seq: int, item_index: int | None, name: str) -> None:
        self.path: Final = path
        self.attempt: Final = attempt
        self.seq: Final = seq
        self.item_index: Final = item_index
        self.name: Final = name


def parse(path: Path) -> Captured | None:
    """The file's place in the run, or None for a name the engine never writes."""
    m = _NAME.fullmatch(path.name)
    if m is None:
        return None
    attempt, seq, index, name = m.groups()
    return Captured(path, int(attempt), int(seq), None if index == "run" else int(index), name)


def listing(rd: RunDir) -> list[Captured]:
    """Every captured output file of the run, in the order the commands ran."""
    found = [parse(rd.output / name) for name in untrusted.list_dir(rd.output)]
    return sorted((c for c in found if c is not None), key=lambda c: (c.attempt, c.seq))


def last_line(path: Path, limit: int = TAIL_BYTES) -> str | None:
    """The last non-empty line among the last `limit` bytes of `path` (None: no such
    line, or no file). Damaged propagates (a link, a FIFO)."""
    try:
        fd = untrusted.open_regular(path)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - limit)
        data = os.pread(fd, size - start, start)
    except OSError as exc:
        raise Damaged(path, f"cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    # A progress bar's carriage returns end "lines" too: the latest is what it shows now.
    for line in reversed(re.split(rb"[\r\n]", data)):
        text = line.decode("utf-8", errors="replace").strip()
        if text:
            return text
    return None
