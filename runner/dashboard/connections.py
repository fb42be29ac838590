"""The dashboard's connections: one selector thread holds every open connection and
reads each request there, without blocking, until it has arrived whole (its headers,
and its body up to BODY_CAP); only then does one of a fixed pool of WORKERS threads
handle it. A connection that waits (a page between two polls, a client that opened one
and sends nothing, or one that trickles a request a byte at a time) holds no thread,
only its socket in the selector. It is closed once idle for IDLE_TIMEOUT, or when a
request it began has not arrived whole within REQUEST_TIMEOUT. At most MAX_CONNECTIONS
are open: past that, the connection idle the longest is closed.

The stdlib's ThreadingHTTPServer, used before, started one thread per connection for as
long as the client kept it open: 300 idle connections were 300 threads, forever.
"""

from __future__ import annotations

import io
import os
import queue
import re
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
HEADER_CAP = 65536
"""A request whose headers are longer is not read further: the connection is closed."""
BODY_CAP = 4096
"""The largest body read before the request is handled (a button's POST has none; a
longer one is handled, and refused, unread)."""
_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*([0-9]{1,12})[ \t]*\r\n", re.IGNORECASE)


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
        sock.setblocking(False)
        self.buffer = bytearray()
        self.rfile: io.BytesIO = io.BytesIO()
        self.wfile = _Writer(sock)
        self.idle_since = time.monotonic()
        self.begun: float | None = None  # when the request being read began

    def read(self) -> bool:
        """Read what has arrived; False when the peer closed or sent too much."""
        try:
            data = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False
        if not data:
            return False
        if self.begun is None:
            self.begun = time.monotonic()
        self.buffer += data
        return True

    def request(self) -> bytes | None:
        """The first request of the buffer once it is whole (taken out of it), else None."""
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return None
        end += 4
        match = _LENGTH.search(self.buffer, 0, end)
        length = int(match.group(1)) if match else 0
        if 0 < length <= BODY_CAP:
            if len(self.buffer) < end + length:
                return None
            end += length
        whole = bytes(self.buffer[:end])
        del self.buffer[:end]
        self.begun = time.monotonic() if self.buffer else None
        return whole

    def too_long(self) -> bool:
        return self.buffer.find(b"\r\n\r\n") < 0 and len(self.buffer) > HEADER_CAP

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


Handle = Callable[[Connection], bool]
"""Handles the request in `conn.rfile`; True when the connection stays open."""


class Loop:
    """The selector thread (the caller of `run`) and the worker pool."""

    def __init__(self, listener: socket.socket, handle: Handle, workers: int = WORKERS) -> None:
        self.listener, self.handle = listener, handle
        self.selector = selectors.DefaultSelector()
        self.ready: queue.SimpleQueue[Connection | None] = queue.SimpleQueue()
        self.back: queue.SimpleQueue[Connection] = queue.SimpleQueue()
        self.waiting: dict[socket.socket, Connection] = {}  # in the selector
        self.busy: set[Connection] = set()  # with a worker
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
            for key, _ in self.selector.select(max(min(poll_interval, self._next_expiry()), 0.0)):
                if key.data == "listen":
                    self._accept()
                elif key.data == "wake":
                    self._drain_wake()
                else:
                    self._readable(key.data)
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
            if len(self.waiting) + len(self.busy) >= MAX_CONNECTIONS:
                oldest = min(self.waiting.values(), key=lambda c: c.idle_since, default=None)
                if oldest is None:
                    sock.close()
                    continue
                self._drop(oldest)
            self._wait(Connection(sock, address))

    def _readable(self, conn: Connection) -> None:
        if not conn.read() or conn.too_long():
            self._drop(conn)
            return
        self._dispatch(conn)

    def _dispatch(self, conn: Connection) -> None:
        """Hand the connection to a worker if a whole request is in its buffer."""
        whole = conn.request()
        if whole is None:
            return
        self.selector.unregister(conn.sock)
        del self.waiting[conn.sock]
        conn.rfile = io.BytesIO(whole)
        with self._lock:
            self.busy.add(conn)
        self.ready.put(conn)

    def _wait(self, conn: Connection) -> None:
        conn.idle_since = time.monotonic()
        self.waiting[conn.sock] = conn
        self.selector.register(conn.sock, selectors.EVENT_READ, conn)

    def _drop(self, conn: Connection) -> None:
        self.selector.unregister(conn.sock)
        del self.waiting[conn.sock]
        conn.close()

    def _deadline(self, conn: Connection) -> float:
        if conn.begun is not None:
            return conn.begun + REQUEST_TIMEOUT
        return conn.idle_since + IDLE_TIMEOUT

    def _next_expiry(self) -> float:
        if not self.waiting:
            return IDLE_TIMEOUT
        return min(self._deadline(c) for c in self.waiting.values()) - time.monotonic()

    def _expire(self) -> None:
        now = time.monotonic()
        for conn in [c for c in self.waiting.values() if now >= self._deadline(c)]:  # ablate: idle-timeout
            self._drop(conn)

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
                continue
            self._wait(conn)
            self._dispatch(conn)  # a request that arrived behind the last one

    # -- the workers -------------------------------------------------------------------

    def _work(self) -> None:
        while (conn := self.ready.get()) is not None:
            try:
                keep = self.handle(conn)
            except Exception:
                keep = False
            if keep:
                self.back.put(conn)
                try:
                    os.write(self._wake_w, b"x")
                except OSError:
                    pass  # the pipe is full (the selector wakes anyway) or closed (the end)
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
        for conn in list(self.waiting.values()):
            conn.close()
        self.waiting.clear()
        with self._lock:
            for conn in self.busy:
                try:
                    conn.sock.shutdown(socket.SHUT_RDWR)  # a worker blocked writing to it wakes up
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
