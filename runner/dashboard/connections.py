"""The dashboard's connections: one selector thread holds every open connection, and a
fixed pool of WORKERS threads handles the requests that have arrived. A connection that
waits (a page between two polls, or a client that opened one and sends nothing) holds
no thread, only its socket in the selector; it is closed once it has been idle for
IDLE_TIMEOUT. A request must arrive whole within REQUEST_TIMEOUT of its first byte, so a
client that trickles one byte at a time holds a worker for that long at most. At most
MAX_CONNECTIONS are open: past that, the connection idle the longest is closed.

The stdlib's ThreadingHTTPServer, used before, started one thread per connection for as
long as the client kept it open: 300 idle connections were 300 threads, forever.
"""

from __future__ import annotations

import io
import os
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

WORKERS = 8
"""Threads that handle requests (a button's stop runs in a thread of its own, actions.py)."""
IDLE_TIMEOUT = 5.0
"""Seconds a connection may wait for its next request (the page polls every 0.25 s)."""
REQUEST_TIMEOUT = 10.0
"""Seconds from a request's first byte to its last (headers and body)."""
MAX_CONNECTIONS = 512


class _DeadlineReader(io.RawIOBase):
    """The socket's reads, each given what is left of the request's deadline; none at
    all (non-blocking) while the worker only looks whether another request is buffered."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.deadline: float | None = None  # None: non-blocking

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        if self.deadline is None:
            self.sock.setblocking(False)
            try:
                return self.sock.recv_into(buffer)
            except BlockingIOError:
                return None
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive within REQUEST_TIMEOUT")
        self.sock.settimeout(left)
        return self.sock.recv_into(buffer)


class _Writer(io.RawIOBase):
    """Whole writes (sendall), each with REQUEST_TIMEOUT: a client that stops reading
    its answer holds a worker that long at most."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.sock.settimeout(REQUEST_TIMEOUT)
        self.sock.sendall(data)
        return len(data)


class Connection:
    def __init__(self, sock: socket.socket, address: Any) -> None:
        self.sock, self.address = sock, address
        self.raw = _DeadlineReader(sock)
        self.rfile = io.BufferedReader(self.raw)
        self.wfile = _Writer(sock)
        self.idle_since = time.monotonic()

    def pending(self) -> bool:
        """Whether the next request (or its first bytes) is already here, without waiting."""
        self.raw.deadline = None
        try:
            return bool(self.rfile.peek(1))
        except OSError:
            return True  # let the handler meet the error and close

    def close(self) -> None:
        for f in (self.rfile, self.wfile):
            try:
                f.close()
            except OSError:
                pass
        try:
            self.sock.close()
        except OSError:
            pass


Handle = Callable[[Connection], bool]
"""Handles one request on the connection; True when the connection stays open."""


class Loop:
    """The selector thread (the caller of `run`) and the worker pool."""

    def __init__(self, listener: socket.socket, handle: Handle, workers: int = WORKERS) -> None:
        self.listener, self.handle = listener, handle
        self.selector = selectors.DefaultSelector()
        self.ready: queue.SimpleQueue[Connection | None] = queue.SimpleQueue()
        self.back: queue.SimpleQueue[Connection] = queue.SimpleQueue()
        self.idle: dict[socket.socket, Connection] = {}
        self.busy: set[Connection] = set()
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._stop = False
        self.workers = [threading.Thread(target=self._work, name=f"dashboard-{n}", daemon=True) for n in range(workers)]

    # -- the selector thread -----------------------------------------------------------

    def run(self, poll_interval: float) -> None:
        self.listener.setblocking(False)
        self.selector.register(self.listener, selectors.EVENT_READ, "listen")
        self.selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        for w in self.workers:
            w.start()
        while not self._stop:
            timeout = min(poll_interval, self._next_expiry())
            for key, _ in self.selector.select(max(timeout, 0.0)):
                if key.data == "listen":
                    self._accept()
                elif key.data == "wake":
                    self._drain_wake()
                else:
                    conn: Connection = key.data
                    self.selector.unregister(conn.sock)
                    del self.idle[conn.sock]
                    with self._lock:
                        self.busy.add(conn)
                    self.ready.put(conn)
            self._take_back()
            self._expire()

    def _accept(self) -> None:
        for _ in range(64):  # a burst, then the others get their turn
            try:
                sock, address = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # EMFILE and the like: the connection waits in the backlog
            if len(self.idle) + len(self.busy) >= MAX_CONNECTIONS:
                oldest = min(self.idle.values(), key=lambda c: c.idle_since, default=None)
                if oldest is None:
                    sock.close()
                    continue
                self._close_idle(oldest)
            self._park(Connection(sock, address))

    def _park(self, conn: Connection) -> None:
        conn.idle_since = time.monotonic()
        self.idle[conn.sock] = conn
        self.selector.register(conn.sock, selectors.EVENT_READ, conn)

    def _close_idle(self, conn: Connection) -> None:
        self.selector.unregister(conn.sock)
        del self.idle[conn.sock]
        conn.close()

    def _next_expiry(self) -> float:
        if not self.idle:
            return IDLE_TIMEOUT
        oldest = min(c.idle_since for c in self.idle.values())
        return oldest + IDLE_TIMEOUT - time.monotonic()

    def _expire(self) -> None:
        now = time.monotonic()
        for conn in [c for c in self.idle.values() if now - c.idle_since >= IDLE_TIMEOUT]:  # ablate: idle-timeout
            self._close_idle(conn)

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _take_back(self) -> None:
        while True:
            try:
                conn = self.back.get_nowait()
            except queue.Empty:
                return
            with self._lock:
                self.busy.discard(conn)
            if self._stop:
                conn.close()
            else:
                self._park(conn)

    # -- the workers -------------------------------------------------------------------

    def _work(self) -> None:
        while (conn := self.ready.get()) is not None:
            keep = False
            try:
                while True:
                    conn.raw.deadline = time.monotonic() + REQUEST_TIMEOUT
                    keep = self.handle(conn)
                    if not keep or not conn.pending():
                        break
            except Exception:
                keep = False
            if keep:
                self.back.put(conn)
                try:
                    os.write(self._wake_w, b"x")
                except BlockingIOError:
                    pass  # the pipe is full: the selector wakes anyway
            else:
                with self._lock:
                    self.busy.discard(conn)
                conn.close()

    # -- the end -----------------------------------------------------------------------

    def stop(self) -> None:
        self._stop = True
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def close(self) -> None:
        self._stop = True
        for conn in list(self.idle.values()):
            conn.close()
        self.idle.clear()
        with self._lock:
            for conn in self.busy:
                try:
                    conn.sock.shutdown(socket.SHUT_RDWR)  # a worker blocked reading it wakes up
                except OSError:
                    pass
        for _ in self.workers:
            self.ready.put(None)
        self.selector.close()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
