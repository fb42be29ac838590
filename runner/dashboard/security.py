"""Who may change a run through the dashboard.

The server listens on loopback unless told otherwise. Reading the runs needs the token;
changing one needs a POST carrying the token in the X-Runner-Token header, from the
dashboard's own origin: a page of another site can neither read the token (it is only in
the URL the operator opened) nor send the header without a CORS preflight this server
never answers, and its Origin header is refused besides. The loopback set of origins is
fixed, so a DNS-rebinding name that resolves to 127.0.0.1 is still a foreign origin.
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


class Guard:
    def __init__(self, token: str, host: str, port: int) -> None:
        self.token = token
        self._wildcard = host in _WILDCARDS
        hosts = {url_host(host)}
        if is_loopback(host):
            hosts |= {"localhost", "127.0.0.1"} if ":" not in host else {"localhost"}
        self.origins = {f"http://{h}:{port}" for h in hosts}

    def token_ok(self, header: Header) -> bool:
        given = header(TOKEN_HEADER) or ""
        return hmac.compare_digest(given.encode("utf-8", "replace"), self.token.encode())

    def refuse_change(self, header: Header) -> str | None:
        """Why a state-changing request is refused (403), or None when it may go on."""
        origin = header("Origin")
        if origin is not None and not self._own_origin(origin, header("Host")):  # ablate: dashboard-origin-check
            return "foreign Origin"
        site = header("Sec-Fetch-Site")
        if site is not None and site not in ("same-origin", "none"):
            return f"cross-site request (Sec-Fetch-Site: {site[:40]})"
        if not self.token_ok(header):  # ablate: dashboard-token-check
            return f"missing or wrong {TOKEN_HEADER}"
        return None

    def _own_origin(self, origin: str, host_header: str | None) -> bool:
        if origin in self.origins:
            return True
        # Listening on every address: the page's own origin is whichever address the
        # operator opened, which is what its Host header names.
        return self._wildcard and host_header is not None and origin == f"http://{host_header}"
