"""The runner's warnings, without importing `logging` until one is said.

`logging` (with threading, traceback, string and weakref) costs milliseconds at every
start, and a `runner stop` that warns about nothing should not pay them: the start-up
of the stop command is part of the stop's latency. Each logger here hands its message
to the real `logging.getLogger(name)` on first use, so pytest's caplog and any
handler an embedding program installs see exactly what they saw before.

The rule is wider than logging: a stop (`runner stop`, `--now`) and the engine's start
import no `dataclasses`, `typing`, `logging` or `contextlib` (each costs milliseconds at
every start; tests/runner/test_startup_imports.py holds the code to it). Hence the plain
value classes of values.py, the lazy loggers here, and the `TYPE_CHECKING = False` line
of a module that imports names only for its annotations: it stands for
`typing.TYPE_CHECKING` (False at run time, and read as True by mypy) without importing
typing.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


_stderr_format: str | None = None

before_stderr: Callable[[], object] | None = None
"""Set by a process whose stderr is a file of its run (the engine's engine.log): called
before each of the runner's writes there (a warning, a line, a traceback). The engine
breaks a hard link a backup shares first (files/links.py)."""


def stderr_ready() -> None:
    """Before writing to stderr: before_stderr, if set. Its failure never stops the line."""
    hook = before_stderr
    if hook is not None:
        try:
            hook()
        except Exception:
            pass


def to_stderr(fmt: str = "runner: warning: %(message)s") -> None:
    """The CLI's set-up: warnings go to stderr, one line each, once one is said."""
    global _stderr_format
    _stderr_format = fmt


class Logger:
    __slots__ = ("name", "_real")

    def __init__(self, name: str) -> None:
        self.name = name
        self._real: Any = None

    def _logger(self) -> Any:
        if self._real is None:
            import logging

            if _stderr_format is not None and not logging.getLogger().handlers:
                logging.basicConfig(level=logging.WARNING, format=_stderr_format)
            self._real = logging.getLogger(self.name)
        return self._real

    def info(self, msg: str, *args: object) -> None:
        stderr_ready()
        self._logger().info(msg, *args)

    def warning(self, msg: str, *args: object) -> None:
        stderr_ready()
        self._logger().warning(msg, *args)

    def error(self, msg: str, *args: object) -> None:
        stderr_ready()
        self._logger().error(msg, *args)

    def exception(self, msg: str, *args: object) -> None:
        stderr_ready()
        self._logger().exception(msg, *args)


def get(name: str) -> Logger:
    return Logger(name)
