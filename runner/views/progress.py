"""What a foreground `runner run` (or `resume`) shows while its engine works: on a
terminal one live line (item i/n, phase, elapsed, the running command's last output
line, the repair attempt; while a stop is in progress, that and how long it has taken),
elsewhere one plain line per phase start and end; at the end a summary table.

It runs in the foreground process, between its waits for the engine, and reads only
files the engine writes anyway (the journal, followed; the state; the captured output).
The engine does not know it exists, so it can slow neither the run nor its stop; the
foreground handles the terminal's signals before it draws. Anything that goes wrong
here (a damaged file, a closed terminal) turns the display off, never the run.
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from runner import defaults
from runner.errors import Damaged
from runner.exitcodes import Exit
from runner.files import captured
from runner.files.follow import JournalTail
from runner.files.state import StateStore
from runner.views import overview, render, words
from runner.views import status as status_model

if TYPE_CHECKING:
    from collections.abc import Callable

    from runner.files.rundir import RunDir
    from runner.files.spec import Spec

CLEAR = "\r\x1b[K"


@dataclass(frozen=True)
class Show:
    """Where a foreground run shows its progress: `stream` for the live line or the
    phase lines (a terminal or not: `tty`), `summary` for the table at the end."""

    stream: TextIO
    summary: TextIO
    tty: bool

    @classmethod
    def terminal(cls) -> Show:
        return cls(sys.stderr, sys.stdout, sys.stderr.isatty())


class Progress:
    def __init__(
        self,
        rd: RunDir,
        spec: Spec,
        show: Show,
        say: Callable[[str], None],
        *,
        since: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`since`: the wall-clock time this command started the engine; the phase lines
        are of phases that started since (a resumed run's journal holds its past too,
        which the summary counts and the lines leave out)."""
        self.rd, self.show, self._say, self.clock, self.since = rd, show, say, clock, since
        self.fold = overview.Fold(spec)
        self.journal = JournalTail(rd.journal, defaults.PROGRESS_JOURNAL_CHUNK)
        self.off = False
        self.drawn = False
        self.stop_since: float | None = None
        self.stop_what = self.stop_hint = ""
        self.settled = False  # the foreground's own kill is done: no live line after its result
        self._next_draw = 0.0
        self._next_list = 0.0
        self._output: captured.Captured | None = None

    # -- what the foreground calls ------------------------------------------------

    def say(self, line: str) -> None:
        """A line of the life cycle ("stopping ..."): printed above the live line."""
        self._clear()
        self._tell(line)
        self._next_draw = 0.0

    def stopping(self, what: str, hint: str = "") -> None:
        """A stop is in progress from now (the first call starts its clock)."""
        if self.stop_since is None:
            self.stop_since = self.clock()
        self.stop_what, self.stop_hint = what, hint
        self._next_draw = 0.0

    def killed(self) -> None:
        """The second Ctrl-C's kill is done and its line said: the live line ("killing
        now… N s") is not drawn again, below that line and before the summary."""
        self._clear()
        self.settled = True

    def tick(self) -> None:
        if self.off:
            return
        try:
            self._feed()
            if self.show.tty and not self.settled and self.clock() >= self._next_draw:
                self._draw()
        except Exception as exc:  # the display is never what ends the foreground watch
            self._turn_off(exc)

    def finish(self, code: int) -> None:
        """The engine has exited: the last phase lines, then the summary table. The
        run's exit code is the foreground's whatever happens here."""
        self._clear()
        if not self.off:
            try:
                while self._feed():
                    pass
            except Exception as exc:  # the display is never what ends the foreground watch
                self._turn_off(exc)
        try:
            self._summary(code)
        except Exception as exc:
            self._tell(f"no summary: {' '.join(str(exc).split())}")

    def _summary(self, code: int) -> None:
        try:
            state = StateStore(self.rd.state).load_or_none()
        except Damaged as exc:
            self._tell(f"summary: {' '.join(str(exc).split())}")
            state = None
        rows = status_model.item_rows(self.fold, state, live=False, now=time.time())
        # The engine has exited: a state still "running" is a crash, as `status` says.
        status = status_model.run_status(state, live=False, copy=False)
        if code == Exit.NOT_RECORDED:  # state.json still says what it said before
            status = "stopped (every process ended), but the stop could not be recorded (a full or read-only disk)"
        try:
            run_id = self.rd.run_id
        except Damaged:
            run_id = None
        try:
            print(
                "\n".join(render.summary(run_id, status, code, rows, self.fold.cause)),
                file=self.show.summary,
                flush=True,
            )
        except (OSError, ValueError):
            pass

    # -- inside -------------------------------------------------------------------

    def _feed(self) -> int:
        records = self.journal.poll()
        for rec in records:
            for phase in self.fold.add(rec):
                if phase.t >= self.since and (phase.ended or not self.show.tty):
                    self._phase_line(phase)
                if not phase.ended:
                    self._next_list = 0.0  # a new phase: its command has a new file
        return len(records)

    def _where(self, item: str | None) -> str:
        pos = self.fold.position(item)
        if item is None:
            return "run"
        return (f"[{pos[0]}/{pos[1]}] " if pos else "") + render.clean(item, 60)

    def _phase_line(self, phase: overview.Phase) -> None:
        # The journal is untrusted like every run file: each line is cleaned whole.
        if not self.show.tty:
            what = "started" if not phase.ended else f"{phase.result} ({render.seconds(phase.duration)})"
            self._print(render.clean(f"runner: {self._where(phase.item)}: {phase.phase} {what}", 2000) + "\n")
        elif phase.result not in ("done", "passed"):  # on a terminal only what went wrong stays
            self._clear()
            self._print(render.clean(f"runner: {self._where(phase.item)}: {phase.phase} {phase.result}", 2000) + "\n")

    def _line(self) -> str:
        now = self.clock()
        if self.stop_since is not None:
            return f"{self.stop_what}… {render.seconds(now - self.stop_since)}{self.stop_hint}"
        stop = status_model.pending_stop(self.rd)  # the request, or the STOP file, as `status` shows it
        if stop is not None:
            return f"stop requested ({stop['mode']}, {stop['origin']}), waiting for the engine…"
        phase = self.fold.current
        wall = time.time()
        if self.fold.pause_held:
            # Held between phases: no phase clock counts (the status model says the same).
            waiting = self.fold.waiting()
            within = waiting == self.fold.paused_item
            held = words.paused(self.fold.paused_since, waiting, self.fold.position(waiting), within=within)
            held += f" ({render.seconds(max(0.0, wall - self.fold.paused_since))})" if self.fold.paused_since else ""
            return f"{held} · remove the PAUSE file to go on"
        if phase is None:
            if self.fold.ended is not None:
                return self.fold.ended
            if self.fold.run_t0 is None:
                return "starting…"
            return f"between phases · total {render.seconds(wall - self.fold.run_t0)}"
        parts = [f"{self._where(phase.item)} · {phase.phase} {render.seconds(wall - phase.t)}"]
        if self.fold.run_t0 is not None:
            parts.append(f"total {render.seconds(wall - self.fold.run_t0)}")
        repairs = self.fold.repair_attempt.get(phase.item or "")
        if repairs and self.fold.spec is not None:
            parts.append(f"repair {repairs}/{self.fold.spec.repair_max_attempts}")
        last = self._last_output(phase)
        if last:
            parts.append("> " + render.clean(last, 1000))
        return " · ".join(parts)

    def _last_output(self, phase: overview.Phase) -> str | None:
        """The last line of the newest captured file, if it is a command of this phase's
        item in this attempt (a backoff runs no command: the verify's output is not it)."""
        if phase.phase in ("backoff", "cleanup"):
            return None
        if self.clock() >= self._next_list:
            self._next_list = self.clock() + defaults.PROGRESS_RELIST
            files = captured.listing(self.rd)
            self._output = files[-1] if files else None
        out = self._output
        pos = self.fold.position(phase.item)
        if out is None or out.attempt != self.fold.attempt or out.item_index != (pos[0] - 1 if pos else None):
            return None
        return captured.last_line(out.path)

    def _draw(self) -> None:
        width = shutil.get_terminal_size((100, 24)).columns
        line = render.clean(self._line(), max(20, width - 1))
        self._print(CLEAR + line)
        self.drawn = True
        self._next_draw = self.clock() + defaults.PROGRESS_REDRAW

    def _clear(self) -> None:
        if self.drawn:
            self._print(CLEAR)
            self.drawn = False

    def _print(self, text: str) -> None:
        try:
            self.show.stream.write(text)
            self.show.stream.flush()
        except (OSError, ValueError):
            self.off = True

    def _turn_off(self, exc: BaseException) -> None:
        self._clear()
        self.off = True
        self._tell(f"progress display off: {' '.join(str(exc).split())}")

    def _tell(self, line: str) -> None:
        try:
            self._say(line)
        except (OSError, ValueError):  # stderr closed: the foreground goes on watching
            self.off = True
