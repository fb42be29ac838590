"""runner: run a queue of items through a provider command, and stop it fast.

The public API is what this module exports; every other module is internal and may
change. Names are imported lazily (`python -m runner` and the engine process start
through this file, and must not pay for what they do not use).

    from runner import load_spec, RunDir, resolve, stop_hard, stop_now, Exit

    rd = resolve("path/to/run")            # a RunDir (NoLiveRun if there is none)
    result = stop_now(rd)                  # kill everything proven the run's
    print(result.code, result.lines())     # an Exit member, and what to tell the user
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_EXPORTS = {
    # specs and run directories
    "load_spec": ("runner.files.spec", "load"),
    "Spec": ("runner.files.spec", "Spec"),
    "RunDir": ("runner.files.rundir", "RunDir"),
    "resolve": ("runner.files.rundir", "resolve"),
    "list_runs": ("runner.files.rundir", "list_runs"),
    # the life cycle
    "run": ("runner.control.lifecycle", "run"),
    "status_of": ("runner.views.status", "status_of"),
    # stops: one pipeline (`stop(rd, StopKind.HARD)`), and its every-day spellings
    "stop": ("runner.control.stop", "stop"),
    "StopKind": ("runner.events", "StopKind"),
    "stop_hard": ("runner.control.stop", "stop_hard"),
    "stop_graceful": ("runner.control.stop", "stop_graceful"),
    "stop_now": ("runner.control.stop", "stop_now"),
    "wait_run": ("runner.control.waiting", "wait_run"),
    "StopResult": ("runner.control.stop_result", "StopResult"),
    # outcomes and errors
    "Exit": ("runner.exitcodes", "Exit"),
    "RunnerError": ("runner.errors", "RunnerError"),
    "BadInput": ("runner.errors", "BadInput"),
    "Damaged": ("runner.errors", "Damaged"),
    "NoLiveRun": ("runner.errors", "NoLiveRun"),
    "RunLocked": ("runner.errors", "RunLocked"),
}

__all__ = sorted([*_EXPORTS, "resume"])


def resume(run_dir: Any = None, **kwargs: Any) -> Any:
    """`runner resume` (control/lifecycle.py), picking the run, when `run_dir` is not
    given, by the status model's resumable (views/status.py)."""
    from runner.control import lifecycle
    from runner.views import status

    kwargs.setdefault("resumable", status.resumable_run)
    return lifecycle.resume(run_dir, **kwargs)


def __getattr__(name: str) -> Any:
    try:
        module, attr = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'runner' has no attribute {name!r}") from None
    # importlib (with warnings) imported here, not at the top: `import runner` is part
    # of every command's start-up, and of every stop's latency.
    from importlib import import_module

    return getattr(import_module(module), attr)


def __dir__() -> list[str]:
    return __all__
