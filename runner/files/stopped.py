"""The one writer of a run's stop record: state.json's `stopped` first, then the
attempt's one `run-stop` in the journal. The engine (it honored a stop), a stopper (it
proved the engine dead and nobody had recorded it) and `resume` (completing a half a
killed writer left) all record through `record_stop`; nothing else appends `run-stop`.

State first, then the journal: a writer killed between the two leaves state.json
stopped and no `run-stop`, which the next stopper or `resume` completes (the same call,
`completed=True`); the reverse order would leave a `run-stop` beside a state that says
running, which nobody could tell from a stop still under way.
"""

from __future__ import annotations

import time

from runner.events import Event, Mode, Origin
from runner.exitcodes import Exit

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable

    from runner.files.journal import Journal
    from runner.files.state import State


def record_stop(
    state: State,
    save: Callable[[State], None],
    journal: Journal,
    *,
    origin: Origin | str,
    mode: Mode = Mode.HARD,
    forced: bool,
    fallback: bool = False,
    **fields: object,
) -> None:
    """Record the stop of the attempt `state` is of: `stopped` saved through `save` (the
    caller's store, with its reserve), unless a killed writer already saved it; then the
    one `run-stop`, with `fields` (what a stopper killed, `completed` for a half
    completed). The caller holds what makes it the only writer: the engine's lock, which
    the engine holds for its life and a stopper takes only once the engine is dead."""
    if not state.stopped:
        state.stopped = True
        state.status = "stopped"
        state.stop_origin = Origin(origin).value
        state.exit_code = int(Exit.STOPPED)
        state.updated = time.time()
        save(state)
    journal.append(Event.RUN_STOP, origin=origin, mode=mode.label, forced=forced, fallback=fallback, **fields)
