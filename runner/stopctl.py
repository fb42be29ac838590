"""The engine's stop controller: one path for every stop channel.

A SIGTERM (or SIGINT, SIGHUP) handler and the control-file watchdog both end in
`StopController.request(origin)`: mark the run as stopping, then kill every registered
child tree. The kill runs in the watchdog thread, never in a signal handler: a handler
only notes the origin and writes a byte to a self-pipe, because it may interrupt the
main thread inside a journal write or while a lock is held.

The main thread, released when its child dies or its wait is cut short, raises
`RunStopped` at its next check point (`checkpoint()`, `sleep()`), as trio delivers a
cancellation at a check point and not from inside a signal handler. The exception
unwinds through every `finally` to the engine's top.
"""

import logging
import os
import select
import signal
import threading
import traceback

from . import control, defaults
from .errors import RunStopped

ORIGINS = ("signal", "file", "ctrl-c", "forced")

# What each signal means as a stop origin (the journal's `origin`).
_SIGNAL_ORIGINS = {
    signal.SIGTERM: "signal",
    signal.SIGHUP: "signal",
    signal.SIGINT: "ctrl-c",
}


class StopController:
    def __init__(self, rundir, registry, journal, *, poll=defaults.WATCHDOG_POLL):
        self._rundir = rundir
        self._registry = registry
        self._journal = journal
        self._poll = poll
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._closed = threading.Event()
        self._finishing = False
        self._signal_origin = None
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._thread = None
        self._previous_handlers = {}
        self._kill_failed = False
        self.origin = None
        self.consumed = None  # the StopRequest the engine consumed, if any

    # -- set-up and tear-down ------------------------------------------------------

    def install_signals(self):
        for signum in _SIGNAL_ORIGINS:
            self._previous_handlers[signum] = signal.signal(signum, self._on_signal)

    def start(self):
        self._thread = threading.Thread(target=self._watch, name="stop-watchdog", daemon=True)
        self._thread.start()

    def close(self, *, ignore_signals=False):
        """Stop the watchdog and give back the signal handlers. An engine on its way
        out ignores the stop signals instead (`ignore_signals`): a late SIGTERM must not
        kill it between here and the removal of its cgroup."""
        self._closed.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        for signum, handler in self._previous_handlers.items():
            signal.signal(signum, signal.SIG_IGN if ignore_signals else handler)
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)

    # -- the two channels ----------------------------------------------------------

    def _on_signal(self, signum, frame):
        # Async-signal context: no locks, no I/O beyond one write to the self-pipe.
        if self._signal_origin is None:
            self._signal_origin = _SIGNAL_ORIGINS.get(signum, "signal")
        self._wake()

    def _wake(self):
        try:
            os.write(self._wake_w, b"!")
        except (BlockingIOError, OSError):
            pass  # the pipe is full or closed: the watchdog is awake or gone either way

    def _watch(self):
        while not self._closed.is_set():
            ready, _, _ = select.select([self._wake_r], [], [], self._poll)
            if ready:
                try:
                    while os.read(self._wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
            if self._closed.is_set():
                return
            try:
                self._tick()
            except Exception:
                # The watchdog must outlive any one failed read or kill: if it died,
                # every later stop (signal or file) would go unheard until the fallback.
                logging.getLogger(__name__).exception("stop watchdog tick failed")
                self._journal_quietly("watchdog-error", error=traceback.format_exc(limit=5))

    def _tick(self):
        if self._kill_failed:
            self._kill()
        if self._signal_origin is not None:
            self.request(self._signal_origin)
        else:
            self._read_control_file()

    def _journal_quietly(self, event, **fields):
        try:
            self._journal.append(event, **fields)
        except Exception:
            pass  # the journal itself may be what failed

    def _read_control_file(self):
        request = control.peek(self._rundir)
        if request is not None and request.mode == control.Mode.HARD and not request.unreadable:
            self.request("file")  # ablate: watchdog-reads-hard-request

    # -- the single stop path ------------------------------------------------------

    def request(self, origin):
        """Mark the run as stopping and kill every registered child tree. Idempotent;
        the first origin wins. Runs in the watchdog thread (or the caller's)."""
        with self._lock:
            # Decided and consumed under one lock, which finishing() takes too: a
            # request consumed here is either this stop or, once finishing, left for the
            # engine's late consume, never lost between the two. (The check points never
            # take this lock; consuming waits on a stopper's flock for milliseconds.)
            if self._stopping.is_set() or self._finishing:
                return
            try:
                consumed_origin = self._consume()
            except Exception:
                consumed_origin = None
                self._journal_quietly("watchdog-error", error=traceback.format_exc(limit=5))
            self.origin = consumed_origin or origin
            self._stopping.set()
        self._kill()

    def _kill(self):
        """Kill every registered child tree; retried on the next tick if it failed."""
        try:
            report = self._registry.stop_all(self.origin)  # ablate: stop-kills-registered-children
            self._kill_failed = False
        except Exception:
            self._kill_failed = True
            raise
        if report is not None and report.refused:
            self._journal_quietly("signal-refused", by="stop", refused=report.refused)

    def _consume(self):
        """Consume a pending request; return its origin when it is the hard request
        that this stop honors. The stopper writes the channel it uses as the origin,
        so a `runner stop` whose file the watchdog reads a moment before its signal
        lands is still recorded as the signal stop it is."""
        # The engine is the single consumer of stop-request.json; consuming is one
        # atomic rename (control.consume). A bare `kill -TERM` finds no file.
        consumed = control.consume(self._rundir)
        if consumed is None:
            return None
        self.consumed = consumed
        if consumed.unreadable:
            self._journal.append("stop-request-unreadable", read_as="graceful")
        if consumed.mode == control.Mode.HARD and consumed.origin in ORIGINS:
            return consumed.origin
        return None

    def finishing(self):
        """The queue and post_run hooks are done: from here a hard request is late,
        not a stop. Returns the origin of a stop that slipped in just before, if any
        (the watchdog may have seen it between the last hook's exit and this call)."""
        with self._lock:
            self._finishing = True
            return self.origin if self._stopping.is_set() else None

    # -- the main thread's check points ------------------------------------------

    @property
    def stopping(self):
        return self._stopping.is_set()

    def checkpoint(self):
        if self._stopping.is_set():
            raise RunStopped(self.origin, "hard")

    def sleep(self, seconds):
        """Wait up to `seconds`, cut short by a hard stop (which is then raised)."""
        self._stopping.wait(seconds)
        self.checkpoint()

    def graceful_pending(self):
        """A graceful stop asked for by the STOP file or a graceful stop request.
        A torn or unreadable request reads as graceful (control.peek)."""
        if control.stop_file(self._rundir):
            return True
        request = control.peek(self._rundir)
        return request is not None and request.mode >= control.Mode.GRACEFUL
