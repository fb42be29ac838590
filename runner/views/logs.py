"""`runner logs [ITEM] [--follow]`: the captured output of a run's commands, in the
order they ran (captured.py names the files), each under a header naming its item,
attempt and command. `--follow` keeps printing what the commands write and ends once
the run's engine is gone (and what it wrote last is printed).

Output files are untrusted (a link, a FIFO): such a file is named on one stderr line,
skipped, and the command exits DAMAGED once it has printed the rest.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import BinaryIO

from runner import defaults
from runner.errors import BadInput, Damaged, SpecError, printable
from runner.exitcodes import Exit
from runner.files import captured
from runner.files.follow import Tail
from runner.files.rundir import RunDir
from runner.files.spec import load_frozen
from runner.files.state import StateStore


def item_names(rd: RunDir) -> list[str]:
    """The run's queue: from the frozen spec, or from the state when the spec is damaged."""
    try:
        return list(load_frozen(rd.spec).items)
    except (Damaged, SpecError, FileNotFoundError) as first:
        try:
            state = StateStore(rd.state).load_or_none()
        except Damaged:
            state = None
        if state is None:
            raise Damaged(rd.spec, f"cannot tell the run's items ({' '.join(str(first).split())})") from None
        return list(state.items)


class Printer:
    """Prints each captured file once, header first, then whatever it gains."""

    def __init__(self, rd: RunDir, items: list[str], only: int | None, out: BinaryIO, err: Callable[[str], None]):
        self.rd, self.items, self.only, self.out, self.err = rd, items, only, out, err
        self.tails: dict[str, Tail] = {}
        self.current: str | None = None
        self.headed: set[str] = set()
        self.damaged: set[str] = set()

    def _header(self, c: captured.Captured) -> bytes:
        if c.item_index is None:
            whose = "post_run"
        elif c.item_index < len(self.items):
            whose = f"item {printable(self.items[c.item_index])}"
        else:
            whose = f"item #{c.item_index}"
        return f"==> {whose}, attempt {c.attempt}, {c.name} ({c.path.name}) <==\n".encode()

    def poll(self) -> None:
        """One pass: new files, and new bytes of every file seen."""
        for c in captured.listing(self.rd):
            if self.only is not None and c.item_index != self.only:
                continue
            name = c.path.name
            if name in self.damaged:
                continue
            tail = self.tails.get(name)
            if tail is None:
                tail = self.tails[name] = Tail(c.path)
            try:
                while data := tail.poll():
                    if self.current != name:
                        self._head(c)
                    self.out.write(data)
            except Damaged as exc:
                self.damaged.add(name)
                self.err(" ".join(str(exc).split()))
                continue
            if name not in self.headed:
                self._head(c)  # a command that printed nothing still ran: its header says so
        self.out.flush()

    def _head(self, c: captured.Captured) -> None:
        self.out.write((b"\n" if self.current else b"") + self._header(c))
        self.current = c.path.name
        self.headed.add(c.path.name)


def show(
    rd: RunDir,
    item: str | None,
    *,
    follow: bool,
    out: BinaryIO,
    err: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
) -> Exit:
    items = item_names(rd)
    only: int | None = None
    if item is not None:
        if item not in items:
            shown = ", ".join(printable(i, 40) for i in items[:10]) + (", ..." if len(items) > 10 else "")
            raise BadInput(f"runner logs: ITEM: no item {printable(item, 80)!r} in run {rd.path} (items: {shown})")
        only = items.index(item)
    printer = Printer(rd, items, only, out, err)
    printer.poll()
    while follow:
        live = rd.is_live()
        if live:
            sleep(defaults.LOGS_FOLLOW_POLL)
        printer.poll()  # once more after the engine is gone: what it wrote last
        if not live:
            break
    return Exit.DAMAGED if printer.damaged else Exit.OK
