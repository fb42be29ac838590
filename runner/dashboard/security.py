"""Who may read and change runs through the dashboard.

The server listens on loopback unless told otherwise. Reading the runs needs the token;
changing one needs a POST carrying the token in the X-Runner-Token header, from the
dashboard's own origin: a page of another site can neither read the token (it is only in
the URL the operator opened) nor send the header without a CORS preflight this server
never answers, and its Origin header is refused besides.

Every request, whatever it asks, must name in its Host header a host the dashboard is
known by: the address it is bound to, the loopback names, and the names given with
`--allowed-host` (as Django's ALLOWED_HOSTS and Jupyter's allow_remote_access do). A
DNS-rebinding name that resolves to the server's address (a page of evil.example made
to reach it) names its own host, and is refused before anything is read; so is its
Origin, which can only be one of those hosts on the dashboard's port.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Callable

TOKEN_HEADER = "X-Runner-Token"
Header = Callable[[str], str | None]
"""A request's header by name (case-insensitive), None when absent."""
_WILDCARDS = ("0.0.0.0", "::", "")
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
"""Hosts a request may always name: they reach this machine only, and no rebinding name
is one of them."""
_NOT_IN_A_HOST = frozenset("/@?#\\ \t,;")


def new_token() -> str:
    return secrets.token_urlsafe(24)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_host(host: str) -> str:
    """The host as a URL spells it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


def split_host(value: str) -> tuple[str, int | None] | None:
    """A Host header, or an origin's authority, as (host, port): the host lowercased, an
    IPv6 address in brackets, without a trailing dot; None when it is not one."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        host, rest = value[: end + 1], value[end + 1 :]
    else:
        host, sep, port = value.partition(":")
        rest = sep + port
    host = host.rstrip(".")
    if not host or any(c in _NOT_IN_A_HOST for c in host):
        return None
    if not rest:
        return host, None
    if rest[0] != ":" or not rest[1:].isdigit() or len(rest) > 6:
        return None
    return host, int(rest[1:])


class Guard:
    def __init__(self, token: str, host: str, port: int, allowed_hosts: tuple[str, ...] = ()) -> None:
        self.token = token
        self.port = port
        names = {url_host(host).lower(), *LOOPBACK_NAMES}
        for given in allowed_hosts:
            parsed = split_host(given)
            if parsed is not None:
                names.add(parsed[0])
        self.hosts = frozenset(names)

    def refuse_host(self, header: Header) -> str | None:
        """Why a request is not answered at all (403), or None: its Host header names one
        of the hosts the dashboard answers to, on its port (or on none)."""
        given = header("Host")
        parsed = split_host(given) if given is not None else None
        if parsed is None:
            return "missing or malformed Host header"
        host, port = parsed
        if host not in self.hosts or (port is not None and port != self.port):  # ablate: dashboard-host-check
            return f"Host {host[:80]!r} is not one this dashboard answers to (name it with --allowed-host)"
        return None

    def token_ok(self, header: Header) -> bool:
        given = header(TOKEN_HEADER) or ""
        return hmac.compare_digest(given.encode("utf-8", "replace"), self.token.encode())

    def refuse_change(self, header: Header) -> str | None:
        """Why a state-changing request is refused (403), or None when it may go on."""
        origin = header("Origin")
        if origin is not None and not self._own_origin(origin):  # ablate: dashboard-origin-check
            return "foreign Origin"
        site = header("Sec-Fetch-Site")
        if site is not None and site not in ("same-origin", "none"):
            return f"cross-site request (Sec-Fetch-Site: {site[:40]})"
        if not self.token_ok(header):  # ablate: dashboard-token-check
            return f"missing or wrong {TOKEN_HEADER}"
        return None

    def _own_origin(self, origin: str) -> bool:
        """The page's own origin: http, a host the dashboard answers to, its port."""
        if not origin.startswith("http://"):
            return False
        parsed = split_host(origin[len("http://") :])
        return parsed is not None and parsed[0] in self.hosts and parsed[1] == self.port
