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

from __future__ import annotations

import os
import select
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

from runner import defaults
from runner import log as _log
from runner.errors import RunStopped
from runner.events import Event, Mode, Origin
from runner.files import dirfd, stop_request
from runner.files.stop_request import StopRequest
from runner.proc import inotify

TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any

    from runner.engine.registry import Registry
    from runner.files.journal import Journal
    from runner.files.rundir import RunDir

    _Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None
    """What signal.signal() takes and gives back: a handler, SIG_DFL or SIG_IGN, or None."""

# What each signal means as a stop origin (the journal's `origin`).
_SIGNAL_ORIGINS: dict[int, Origin] = {
    signal.SIGTERM: Origin.SIGNAL,
    signal.SIGHUP: Origin.SIGNAL,
    signal.SIGINT: Origin.CTRL_C,
}
# The origins a consumed request may claim for the stop it causes.
_REQUEST_ORIGINS = (Origin.SIGNAL, Origin.FILE, Origin.CTRL_C, Origin.DASHBOARD)


class StopController:
    def __init__(
        self, rundir: RunDir, registry: Registry, journal: Journal, *, poll: float = defaults.WATCHDOG_POLL
    ) -> None:
        self._rundir = rundir
        self._registry = registry
        self._journal = journal
        self._poll = poll
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._closed = threading.Event()
        self._finishing = False
        self._signal_origin: Origin | None = None
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._thread: threading.Thread | None = None
        self._inotify: int | None = None
        self._previous_handlers: dict[int, _Handler] = {}
        self._kill_failed = False
        self._disk_fault: tuple[str, str] | None = None
        self._disk_fault_said = False
        self._disk_lock = threading.Lock()
        self.origin: Origin | None = None
        self.asked: str | None = None
        """The kind (hard, now, graceful) the request this stop honors names: the command
        that asked, journaled with the stop; None for a stop no request asked for (a bare
        signal, the STOP file, Ctrl-C)."""
        registry.claims = self.claims

    # -- set-up and tear-down ------------------------------------------------------

    def install_signals(self) -> None:
        """The handlers, then the signals unblocked: the engine starts with them blocked
        (cli.early_signals, inherited from `runner run`), so one sent before this line
        was held pending and is delivered here, to the handler."""
        for signum in _SIGNAL_ORIGINS:
            self._previous_handlers[signum] = signal.signal(signum, self._on_signal)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, tuple(_SIGNAL_ORIGINS))

    def start(self) -> None:
        self._inotify = inotify.watch_dir(self._rundir.path)
        self._thread = threading.Thread(target=self._watch, name="stop-watchdog", daemon=True)
        self._thread.start()

    def close(self, *, ignore_signals: bool = False) -> None:
        """Stop the watchdog and give back the signal handlers. An engine on its way
        out ignores the stop signals instead (`ignore_signals`): a late SIGTERM must not
        kill it between here and the removal of its cgroup."""
        self._closed.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout=defaults.WATCHDOG_JOIN)
        for signum, handler in self._previous_handlers.items():
            signal.signal(signum, signal.SIG_IGN if ignore_signals else handler)
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
        if self._inotify is not None:
            os.close(self._inotify)
            self._inotify = None

    # -- the two channels ----------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Async-signal context: no locks, no I/O beyond one write to the self-pipe.
        if self._signal_origin is None:
            self._signal_origin = _SIGNAL_ORIGINS.get(signum, Origin.SIGNAL)
        self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"!")
        except (BlockingIOError, OSError):
            pass  # the pipe is full or closed: the watchdog is awake or gone either way

    def _watch(self) -> None:
        # The run directory's inotify descriptor wakes the watchdog the moment a stopper
        # publishes stop-request.json; the poll is the backstop.
        fds = [self._wake_r] + ([self._inotify] if self._inotify is not None else [])
        while not self._closed.is_set():
            ready, _, _ = select.select(fds, [], [], self._poll)
            if self._wake_r in ready:
                try:
                    while os.read(self._wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
            if self._inotify is not None and self._inotify in ready:
                inotify.drain(self._inotify)
            if self._closed.is_set():
                return
            try:
                self._tick()
            except Exception:
                # The watchdog must outlive any one failed read or kill: if it died,
                # every later stop (signal or file) would go unheard until the fallback.
                _log.get(__name__).exception("stop watchdog tick failed")
                import traceback

                self._journal_quietly(Event.WATCHDOG_ERROR, error=traceback.format_exc(limit=5))

    def disk_full(self, writing: str, error: str) -> None:
        """The engine's reserve was given up (reserve.py): a write found the disk full.
        The run stops while its last records still fit in what the reserve freed. Told
        by whichever thread was writing, maybe inside a journal append: like a signal
        handler, it only notes and wakes the watchdog."""
        if self._disk_fault is None:
            self._disk_fault = (writing, error)
        self._wake()

    def _tick(self) -> None:
        if self._kill_failed:
            self._kill()
        if dirfd.gone(self._rundir.path):  # ablate: vanished-dir-stop
            # The run directory was removed, or half removed (its spec.toml gone: an `rm
            # -rf` that may still be emptying it, or whose last rmdir failed): no outcome
            # of this run could be recorded any more, and no command could find it by its
            # directory. A hard stop, at once; and nothing more is made there (a file made
            # while rm empties the directory would make it fail: dirfd.seal).
            dirfd.seal(self._rundir.path)
            self.request(Origin.VANISHED)
        elif self._signal_origin is not None:
            self.request(self._signal_origin)
        else:
            self._read_control_file()
        self._stop_for_disk()

    def _stop_for_disk(self) -> None:
        """The disk filled (the reserve is given up): stop the run, once. From the
        watchdog, or from the main thread's next check point, whichever comes first (a
        fast main thread would otherwise run on into the next item)."""
        if self.say_disk_fault():
            self.request(Origin.DISK)  # ablate: disk-full-stops-run

    def say_disk_fault(self) -> bool:
        """Journal, once, that the reserve was given up (also for the engine recording a
        stop it is already making: its writes may be what gave the reserve up). True the
        one time it is said."""
        fault = self._disk_fault
        with self._disk_lock:
            if fault is None or self._disk_fault_said:
                return False
            self._disk_fault_said = True
        self._journal_quietly(Event.DISK_FAULT, file=fault[0], error=fault[1], reserve="released")
        _log.stderr_ready()
        try:  # engine.log, in what the reserve freed
            print(
                f"runner engine: {fault[1]} (writing {fault[0]}): the reserve is given up, the run stops",
                file=sys.stderr,
                flush=True,
            )
        except (OSError, ValueError):
            pass
        return True

    def _journal_quietly(self, event: str, **fields: object) -> None:
        try:
            self._journal.append(event, **fields)
        except Exception:
            pass  # the journal itself may be what failed

    def _read_control_file(self) -> None:
        request = stop_request.peek(self._rundir)
        if request is not None and request.mode == Mode.HARD and not request.unreadable:
            self.request(Origin.FILE)  # ablate: watchdog-reads-hard-request

    # -- the single stop path ------------------------------------------------------

    def request(self, origin: Origin) -> None:
        """Mark the run as stopping and kill every registered child tree. Idempotent;
        the first origin wins. Runs in the watchdog thread (or the caller's)."""
        with self._lock:
            # Decided and consumed under one lock, which finishing() takes too: a
            # request consumed here is either this stop or, once finishing, left for the
            # late consume, never lost between the two. (The check points never take
            # this lock; consuming waits on a stopper's flock for milliseconds.)
            if self._stopping.is_set() or self._finishing:
                return
            try:
                # A removed directory holds no request to consume (nor can one be made
                # there): its stop is the removal's.
                consumed = None if origin == Origin.VANISHED else self.consume()
                consumed_origin = self._honored_origin(consumed)
            except Exception:
                consumed, consumed_origin = None, None
                import traceback

                self._journal_quietly(Event.WATCHDOG_ERROR, error=traceback.format_exc(limit=5))
            self.origin = consumed_origin or origin
            self.asked = consumed.kind if consumed is not None and consumed_origin is not None else None
            self._stopping.set()
        self._unwatch()
        self._kill()

    def claims(self) -> bool:
        """A call of the run died of a signal or a failure while nothing had started the
        stop yet: was a hard stop already asked for? Yes when a stop signal reached the
        engine or a hard request is lodged (every stopper lodges its request before its
        first signal, `--now` included): that stop starts now, from this thread, and the
        call is the stop's (stopped, never failed). Whichever signal landed first, the
        call's or the engine's, the answer is the same: it reads what was recorded."""
        if self._stopping.is_set():
            return True
        origin = self._signal_origin
        if origin is None:
            # A request() in flight (the watchdog's, woken by the request's rename or by
            # the stop signal) consumes the request and marks the stop under this lock:
            # both are read under it too, or a request consumed and a stop not yet marked
            # read as no stop at all (a session a `--now` killed recorded failed).
            with self._lock:
                if self._stopping.is_set():
                    return True
                request = stop_request.peek(self._rundir)
            if request is None or request.mode != Mode.HARD or request.unreadable:  # ablate: killed-session-is-stopped
                return False
            origin = Origin.FILE
        self.request(origin)
        return self._stopping.is_set()

    def _unwatch(self) -> None:
        """A stop has begun (or the run is finishing): no request is waited for any more
        (a late one is read from its file at the exit). The watch is removed now, so that
        its release runs beside the kill instead of in the engine's exit (inotify.unwatch)."""
        fd = self._inotify
        if fd is not None:
            inotify.unwatch(fd)  # ablate: unwatch-on-stop

    def _kill(self) -> None:
        """Kill every registered child tree; retried on the next tick if it failed."""
        try:
            report = self._registry.stop_all(self.origin)  # ablate: stop-kills-registered-children
            self._kill_failed = False
        except Exception:
            self._kill_failed = True
            raise
        if report is not None and report.refused:
            self._journal_quietly(Event.SIGNAL_REFUSED, by="stop", refused=report.refused)

    @staticmethod
    def _honored_origin(consumed: StopRequest | None) -> Origin | None:
        """The origin of a consumed request when it is the hard request a stop honors.
        The stopper writes the channel it uses as the origin, so a `runner stop` whose
        file the watchdog reads a moment before its signal lands is still recorded as
        the signal stop it is."""
        if (
            consumed is not None
            and consumed.mode == Mode.HARD
            and not consumed.unreadable
            and consumed.origin in _REQUEST_ORIGINS
        ):
            return consumed.origin
        return None

    # -- the request file: this controller is its only consumer -------------------

    def consume(self) -> StopRequest | None:
        """Take the pending request (one atomic rename, stop_request.consume); a torn or
        unreadable one is journaled as such, here and nowhere else. A bare `kill -TERM`
        finds no file."""
        consumed = stop_request.consume(self._rundir)
        if consumed is None:
            return None
        if consumed.unreadable:
            self._journal.append(Event.STOP_REQUEST_UNREADABLE, read_as=Mode.GRACEFUL.label)
        return consumed

    def finishing(self) -> Origin | None:
        """The queue and post_run hooks are done: from here a hard request is late,
        not a stop. Returns the origin of a stop that slipped in just before, if any
        (the watchdog may have seen it between the last hook's exit and this call)."""
        with self._lock:
            self._finishing = True
            stopping = self._stopping.is_set()
        self._unwatch()
        return self.origin if stopping else None

    def receive_late(self, late_origin: Origin | None) -> None:
        """After finalization's clean-up: consume what arrived since finishing(). A hard
        stop that arrives once the queue and the post_run hooks are done is received
        late (the run is completed); anything else consumed here (a graceful or
        unreadable request) was never honored, and says so."""
        late = self.consume()  # ablate: late-consume
        if late_origin is not None:
            self._journal.append(Event.STOP_REQUEST_RECEIVED_LATE, origin=late_origin, mode=Mode.HARD.label)
        if late is None:
            return
        if late.mode == Mode.HARD and not late.unreadable and late_origin is None:
            self._journal.append(Event.STOP_REQUEST_RECEIVED_LATE, origin=late.origin, mode=Mode.HARD.label)
        else:
            self._discarded(late)

    def discard_unhonored(self, *, stopped: bool) -> None:
        """At the engine's exit: a request still pending was never honored; consume it
        (a resume must not meet it) and journal it discarded. So is an operator's STOP
        file that outlived a run that finished anyway (`runner resume` archives it)."""
        request = self.consume()
        if request is not None:
            self._discarded(request)
        if stop_request.stop_file(self._rundir) and not stopped:
            self._journal.append(
                Event.STOP_REQUEST_DISCARDED,
                mode=Mode.GRACEFUL.label,
                origin=Origin.FILE,
                file=self._rundir.stop_file.name,
            )

    def _discarded(self, request: StopRequest) -> None:
        self._journal.append(
            Event.STOP_REQUEST_DISCARDED, mode=request.mode.label, origin=request.origin, unreadable=request.unreadable
        )

    # -- the stops the main thread raises -----------------------------------------

    def hard_stop(self) -> RunStopped:
        return RunStopped(self.origin or Origin.UNKNOWN, Mode.HARD)

    def graceful_stop(self, where: str, *, item: str | None, phase: str | None) -> RunStopped:
        """The stop to raise where a graceful check point found a graceful request
        pending. Decided on the request actually consumed (a hard one may have merged
        into the file since it was peeked): a hard request read here is honored as hard,
        since the watchdog may not have polled it yet and a hard stop is never
        downgraded."""
        # Consumed and decided under the lock request() takes: the watchdog, woken by the
        # signal of the stopper whose request this is, must not find the file gone and
        # record the stop as a bare signal (the request names who asked: the dashboard).
        with self._lock:
            consumed = self.consume()
            hard = consumed is not None and consumed.mode == Mode.HARD and not consumed.unreadable
            starts = hard and not self._stopping.is_set() and not self._finishing
            if starts:
                honored = self._honored_origin(consumed)
                self.origin = honored or Origin.FILE
                self.asked = consumed.kind if consumed is not None and honored is not None else None
                self._stopping.set()
        if starts:
            self._unwatch()
            self._kill()
        if hard:
            return self.hard_stop()
        if self.stopping:
            return self.hard_stop()
        self._journal.append(
            Event.GRACEFUL_STOP,
            where=where,
            item=item,
            phase=phase,
            stop_file=stop_request.stop_file(self._rundir),
            request=None if consumed is None else consumed.origin,
        )
        # The request's own origin where it names a stopper (the dashboard's graceful
        # stop); the STOP file and `runner stop --graceful` are the file channel.
        asked = consumed is not None and not consumed.unreadable and consumed.origin in _REQUEST_ORIGINS
        self.asked = consumed.kind if consumed is not None and not consumed.unreadable else None
        return RunStopped(consumed.origin if consumed is not None and asked else Origin.FILE, Mode.GRACEFUL)

    def as_recorded(self, stop: RunStopped) -> RunStopped:
        """The stop the engine records: a hard stop (signal or file) that arrived while a
        graceful one unwound is the stop that happened; a hard stop is never recorded as
        graceful."""
        if stop.mode != Mode.HARD and self.stopping:
            return self.hard_stop()
        return stop

    # -- the main thread's check points ------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def checkpoint(self) -> None:
        if self._disk_fault is not None:
            self._stop_for_disk()
        if self._stopping.is_set():
            raise self.hard_stop()

    def sleep(self, seconds: float) -> None:
        """Wait up to `seconds`, cut short by a hard stop (which is then raised)."""
        self._stopping.wait(seconds)
        self.checkpoint()

    def graceful_pending(self) -> bool:
        """A graceful stop asked for by the STOP file or a graceful stop request.
        A torn or unreadable request reads as graceful (stop_request.peek)."""
        if stop_request.stop_file(self._rundir):
            return True
        request = stop_request.peek(self._rundir)
        return request is not None and request.mode >= Mode.GRACEFUL
