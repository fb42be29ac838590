"""`runner dashboard`: the HTTP server. Connections are held by one selector thread and
requests handled by a bounded pool (connections.py); a button's stop runs in a thread of
its own (actions.py), so a poll is never queued behind a stop that takes seconds.

    GET  /                      the page (no data; it fetches it with the token)
    GET  /static/<file>         its script and style sheet
    GET  /api/runs[?open=a,b]   every run's row as JSON, and the details of the runs
                                named (the page's open cards); X-Runner-Token required;
                                with the ETag of the last answer in If-None-Match, 304
                                and no body while nothing shown has changed
         [&since=CURSOR&new=c]  only what changed after the answer that gave CURSOR
                                (and the details of the cards in `new`, opened since)

An answer larger than GZIP_MIN is sent gzip-compressed to a client that accepts it (the
page's first answer at 500 runs: some 240 KB of repetitive JSON). It carries no secret:
the token is a request header, never echoed in a body.
    POST /api/runs/<run>/<act>  a button (X-Runner-Token, own Origin): 202, or 403 / 404 / 409

GET never changes anything. A request whose Host header names no host the dashboard
answers to is refused whatever it asks (security.py). A request's failure is its own (a
4xx or 500 answer); the server and the other requests go on.
"""

from __future__ import annotations

import gzip
import json
import logging
import re
import signal
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from importlib import resources
from typing import Any, TextIO
from urllib.parse import unquote, urlsplit

from runner.dashboard import connections, security
from runner.dashboard.actions import ACTIONS, Actions
from runner.dashboard.runs import Base, NotARun
from runner.dashboard.snapshot import Snapshots, cursor_of, opened_names
from runner.errors import BadInput, printable
from runner.exitcodes import Exit

BODY_CAP = connections.BODY_CAP
"""A button's POST carries no body; anything larger is refused unread."""
GZIP_MIN = 1024
"""An answer at least this large is compressed for a client that accepts gzip."""
ACTIONS_JOIN = 60.0
"""At exit, how long the dashboard waits for the stops it started (each is bounded)."""
_STATIC = {
    "/": ("page.html", "text/html; charset=utf-8"),
    "/static/page.js": ("page.js", "text/javascript; charset=utf-8"),
    "/static/page.css": ("page.css", "text/css; charset=utf-8"),
}
_POST = re.compile(r"/api/runs/([^/]+)/([a-z-]+)")
_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
}


class DashboardServer(HTTPServer):
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], base: Base, token: str, allowed_hosts: tuple[str, ...] = ()) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        # The loop (not socketserver's) makes each Handler: this class is never used.
        super().__init__(address, BaseHTTPRequestHandler)
        self.loop = connections.Loop(self.socket, self._handle)
        self.base = base
        self.actions = Actions()
        self.snapshots = Snapshots(base, self.actions)
        self.guard = security.Guard(token, address[0], self.server_address[1], allowed_hosts)
        self.assets = {path: (_asset(name), ctype) for path, (name, ctype) in _STATIC.items()}
        self._gzipped: tuple[bytes, bytes] | None = None  # the last body compressed, and it so
        self._gzip_lock = threading.Lock()

    def gzipped(self, body: bytes) -> bytes:
        """`body` compressed; the whole answer, kept per ETag, is compressed once."""
        with self._gzip_lock:
            kept = self._gzipped
            if kept is not None and kept[0] is body:
                return kept[1]
            out = gzip.compress(body, compresslevel=5, mtime=0)
            self._gzipped = (body, out)
            return out

    def handle_error(self, request: Any, client_address: Any) -> None:
        # One line, never a traceback dump per broken connection.
        exc = sys.exc_info()[1]
        if not isinstance(exc, (BrokenPipeError, ConnectionResetError)):
            logging.getLogger(__name__).warning("request from %s failed: %r", client_address, exc)

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self.loop.run(poll_interval)

    def shutdown(self) -> None:
        self.loop.stop()

    def server_close(self) -> None:
        if hasattr(self, "loop"):  # not when binding failed (TCPServer closes then)
            self.loop.close()
        super().server_close()

    def _handle(self, conn: connections.Connection) -> bool:
        handler = Handler(conn, self)
        handler.handle_one_request()
        return not handler.close_connection


def _accepts_gzip(header: str | None) -> bool:
    """Whether Accept-Encoding names gzip with a weight above 0."""
    for part in (header or "").lower().split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip() == "gzip":
            q = params.strip().removeprefix("q=").strip()
            try:
                return not q or float(q) > 0
            except ValueError:
                return False
    return False


def _asset(name: str) -> bytes:
    return (resources.files(__package__) / "static" / name).read_bytes()


class Handler(BaseHTTPRequestHandler):
    """One request on a connection the loop holds (never the stdlib's loop over the
    connection: the connection goes back to the selector between requests)."""

    server: DashboardServer
    protocol_version = "HTTP/1.1"  # keep-alive: the page polls up to four times a second

    def __init__(self, conn: connections.Connection, server: DashboardServer) -> None:
        self.request = self.connection = conn.sock
        self.client_address = conn.address
        self.server = server
        self.rfile = conn.rfile
        self.wfile = conn.wfile  # type: ignore[assignment]
        self.close_connection = True

    def version_string(self) -> str:
        return "runner-dashboard"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # polls would flood the terminal; refusals are answered, not logged

    # -- GET: reads only -------------------------------------------------------------

    def _host_refused(self) -> bool:
        """Answered 403 and closed when its Host names no host the dashboard answers to."""
        refused = self.server.guard.refuse_host(self.headers.get)
        if refused is None:
            return False
        self.close_connection = True
        self._json(HTTPStatus.FORBIDDEN, {"error": refused})
        return True

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        path = url.path
        try:
            if self._host_refused():
                return
            if path in self.server.assets:
                body, ctype = self.server.assets[path]
                self._send(HTTPStatus.OK, body, ctype)
            elif path == "/favicon.ico":
                self._send(HTTPStatus.NO_CONTENT, b"", "image/x-icon")
            elif path == "/api/runs":
                if not self.server.guard.token_ok(self.headers.get):
                    self._json(HTTPStatus.FORBIDDEN, {"error": f"missing or wrong {security.TOKEN_HEADER}"})
                else:
                    opened = opened_names(url.query)
                    etag, data = self.server.snapshots.answer(
                        self.headers.get("If-None-Match"),
                        opened,
                        cursor_of(url.query),
                        opened_names(url.query, "new"),
                    )
                    status = HTTPStatus.OK if data is not None else HTTPStatus.NOT_MODIFIED
                    # The server's clock, for the page's ticking clocks: in a header, so
                    # that a body is built once per ETag, and a 304 carries it too.
                    extra = {"X-Runner-Now": f"{time.time():.3f}", "Vary": "Accept-Encoding"}
                    if (
                        data is not None
                        and len(data) >= GZIP_MIN
                        and _accepts_gzip(self.headers.get("Accept-Encoding"))
                    ):
                        data = self.server.gzipped(data)
                        extra["Content-Encoding"] = "gzip"
                    self._send(status, data, "application/json", etag, extra)
            else:
                self._json(HTTPStatus.NOT_FOUND, {"error": "no such page"})
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as exc:
            self._internal(exc)

    # -- POST: the buttons -----------------------------------------------------------

    def do_POST(self) -> None:
        try:
            self._post()
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as exc:
            self._internal(exc)

    def _post(self) -> None:
        if self._host_refused():
            return
        refused = self.server.guard.refuse_change(self.headers.get)
        if refused is not None:
            self.close_connection = True
            self._json(HTTPStatus.FORBIDDEN, {"error": refused})
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= BODY_CAP:
            self.close_connection = True
            self._json(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": f"a button's request has no body (cap {BODY_CAP})"}
            )
            return
        self.rfile.read(length)
        match = _POST.fullmatch(urlsplit(self.path).path)
        if match is None or match.group(2) not in ACTIONS:
            self._json(HTTPStatus.NOT_FOUND, {"error": "no such action"})
            return
        name, action = unquote(match.group(1)), match.group(2)
        try:
            rd = self.server.base.run(name)
        except NotARun as exc:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"{printable(name, 140)}: {exc}"})
            return
        if not self.server.actions.start(name, rd, action):
            self._json(HTTPStatus.CONFLICT, {"error": f"{action} is already running for {name}"})
            return
        self._json(HTTPStatus.ACCEPTED, {"run": name, "action": action})

    # -- answers ---------------------------------------------------------------------

    def _internal(self, exc: Exception) -> None:
        logging.getLogger(__name__).warning("dashboard request %s %s failed: %r", self.command, self.path[:200], exc)
        try:
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"internal error: {type(exc).__name__}"})
        except OSError:
            pass

    def _json(self, status: HTTPStatus, data: dict[str, Any]) -> None:
        self._send(status, json.dumps(data).encode(), "application/json")

    def _send(
        self,
        status: HTTPStatus,
        body: bytes | None,
        ctype: str,
        etag: str | None = None,
        extra: dict[str, str] | None = None,
    ) -> None:
        """`body` None: a 304, which has none (not even a length)."""
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if body is not None:
            self.send_header("Content-Length", str(len(body)))
        if etag is not None:
            self.send_header("ETag", etag)
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        for key, value in _HEADERS.items():
            self.send_header(key, value)
        self.end_headers()
        if body is not None:
            self.wfile.write(body)


def serve(
    runs_dir: str,
    host: str,
    port: int,
    *,
    explicit_dir: bool,
    allowed_hosts: tuple[str, ...] = (),
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> Exit:
    """Serve until interrupted (Ctrl-C, SIGTERM, SIGHUP); the first line on `out` is the
    page's URL with its token. `allowed_hosts`: the names (besides the bound address and
    loopback) a request's Host may give. Refuses bad flags and an unusable address with
    BAD_INPUT."""
    out, err = out or sys.stdout, err or sys.stderr
    if not 0 <= port <= 65535:
        raise BadInput(f"runner dashboard: --port: expected 0..65535, got {port}")
    base = Base(runs_dir)
    if explicit_dir and not base.path.is_dir():
        raise BadInput(f"runner dashboard: --runs-dir: not a directory: {printable(base.path, 300)}")
    for given in allowed_hosts:
        if security.split_host(given) is None:
            raise BadInput(f"runner dashboard: --allowed-host: not a host name or address: {printable(given, 100)}")
    token = security.new_token()
    try:
        server = DashboardServer((host, port), base, token, allowed_hosts)
    except OSError as exc:
        raise BadInput(
            f"runner dashboard: cannot listen on {printable(host, 100)}:{port} ({exc.strerror or exc})"
        ) from None
    bound = server.server_address[1]
    print(f"dashboard: http://{security.url_host(host)}:{bound}/?token={token}", file=out, flush=True)
    if not security.is_loopback(host):
        names = ", ".join(sorted(server.guard.hosts))
        print(
            f"runner: warning: the dashboard listens on {printable(host, 100)}, not on loopback: anyone who can "
            f"reach it and learns the token can stop and resume runs; it answers only requests whose Host is "
            f"one of: {printable(names, 1000)} (add one with --allowed-host NAME)",
            file=err,
            flush=True,
        )

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupted)
    try:
        server.serve_forever(poll_interval=0.25)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        server.actions.join(ACTIONS_JOIN)
    return Exit.OK
