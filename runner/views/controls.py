"""Which controls apply to a run, in every state: one rule for the dashboard's buttons,
the actions `runner status` lists, and the tests' table of states and buttons.

- A live run offers the three stops and Pause (Unpause while its PAUSE file is there);
  a stopped or crashed run, Resume; a finished run and a copy, nothing.
- While a stop is under way, a stronger one is still offered (a graceful stop can be
  made hard, a hard one immediate: `runner stop` and `--now` accept it then too), and
  neither the stop already asked, nor a weaker one, nor Pause (a PAUSE is not honored
  during a stop: the engine takes the stop at its next check point) may be used.
"""

from __future__ import annotations

from runner.views.schema import Control
from runner.views.words import STOP_STRENGTH, stopping

ACTIONS = ("stop", "stop-now", "stop-graceful", "pause", "unpause", "resume")
"""Every control, in the page's order (the dashboard's URL names)."""
LABELS = {
    "stop": "Stop",
    "stop-now": "Stop now",
    "stop-graceful": "Stop gracefully",
    "pause": "Pause",
    "unpause": "Unpause",
    "resume": "Resume",
}
"""The dashboard's button for each (its accessible name)."""
COMMANDS = {
    "stop": "runner stop",
    "stop-now": "runner stop --now",
    "stop-graceful": "runner stop --graceful",
    "pause": "touch DIR/PAUSE",
    "unpause": "rm DIR/PAUSE",
    "resume": "runner resume",
}
"""What a person types for each, at the terminal."""
KINDS = {"stop": "hard", "stop-now": "now", "stop-graceful": "graceful"}
"""The kind of stop each stop control asks for."""


def escalates(action: str, under_way: str) -> bool:
    """`action` (a stop) is stronger than the stop under way: it may still be asked."""
    return STOP_STRENGTH[KINDS[action]] > STOP_STRENGTH[under_way]  # ablate: dashboard-escalation


ESCALATIONS = {kind: [a for a in KINDS if escalates(a, kind)] for kind in STOP_STRENGTH}
"""Per kind of stop under way, the stops still offered (the page applies it from the
click, before the server has seen the stop)."""


def controls(
    *, live: bool | None, copy: bool, paused: bool, resumable: bool, stopping_kind: str | None
) -> dict[str, Control]:
    """Every control of a run in this state. `live`: None when its lock is damaged (it
    is still stoppable); `stopping_kind`: the stop under way, or None."""
    stoppable = live is not False and not copy
    holdable = live is True and not copy
    shown = {
        "stop": stoppable,
        "stop-now": stoppable,
        "stop-graceful": stoppable,
        "pause": holdable and not paused,
        "unpause": holdable and paused,
        "resume": resumable and not copy,
    }
    out: dict[str, Control] = {}
    for action in ACTIONS:
        why: str | None = None
        if shown[action] and stopping_kind is not None:
            if action in KINDS:
                if not escalates(action, stopping_kind):
                    why = f"{stopping(stopping_kind)}; only a stronger stop can be asked"
            else:
                why = f"{stopping(stopping_kind)}; a PAUSE is not honored during a stop"
        out[action] = {"shown": shown[action], "enabled": shown[action] and why is None, "why": why}
    return out


def enabled(of: dict[str, Control]) -> list[str]:
    """The controls that may be used now, in ACTIONS' order."""
    return [action for action in ACTIONS if of[action]["enabled"]]
