"""Who may read the incident page: anyone who reaches a loopback listener (a reverse proxy
in front of it decides who does); on any other address only a request that carries the
token (``[watch] token_env``), as ``Authorization: Bearer TOKEN`` or ``?token=TOKEN``.
A listener beyond loopback without a token configured answers no one. ``/metrics`` is
not asked: it keeps the exporter's own setting (the address alone)."""

from __future__ import annotations

import hmac
import ipaddress

from gpumon.backends.exporter.metrics import Request

__all__ = ["allowed", "given_token", "is_loopback"]


def is_loopback(address: str) -> bool:
    """Whether ``address`` (what the listener binds) is reachable from this machine only:
    127.0.0.0/8, ::1, "localhost". A name or a wildcard ("0.0.0.0", "::") is not."""
    if address.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def given_token(request: Request) -> str | None:
    """The token a request carries: the bearer header's, else the ``token`` parameter's."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.query.get("token") or None


def allowed(listen: str, token: str | None, request: Request) -> bool:
    """Whether ``request`` may read the page of a listener on ``listen`` whose token is
    ``token`` (None: none configured, or its variable unset)."""
    if is_loopback(listen):
        return True
    given = given_token(request)
    if token is None or given is None:
        return False
    return hmac.compare_digest(given.encode(), token.encode())
