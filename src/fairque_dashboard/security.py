"""Who may act: the operator token, checked in constant time, and the response headers.

Without a configured token the dashboard is read-only: every action is refused. With one, an
action must carry it in the ``X-Fairque-Token`` header (scripts) or the ``token`` form field
(the pages' forms). The token never travels in a cookie, so a page of another site cannot make
the operator's browser send it: that is the CSRF protection. As a second line, a POST whose
``Origin`` names another host is refused.
"""

from __future__ import annotations

import hmac
from urllib.parse import urlsplit

from starlette.requests import Request

__all__ = [
    "LOOPBACK_HOSTS",
    "SECURITY_HEADERS",
    "TOKEN_ENV",
    "TOKEN_HEADER",
    "check_action",
    "host_allowed",
]

#: The names a dashboard bound to a loopback address answers to by default.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")

TOKEN_ENV = "FAIRQUE_DASHBOARD_TOKEN"  # noqa: S105 - the variable's name, not a secret
TOKEN_HEADER = "x-fairque-token"  # noqa: S105 - a header name

#: Sent with every response: no framing, no inline script, nothing from other origins.
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    # not "no-referrer": under it a browser sends "Origin: null" even on same-origin POSTs,
    # which the Origin check refuses; "same-origin" keeps URLs from leaving the dashboard.
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


def host_allowed(host_header: str, allowed: tuple[str, ...]) -> bool:
    """Whether a request's ``Host`` (``name[:port]``, ``[v6]:port``) names one of ``allowed``
    (empty: any). A page of another site can make a browser reach a dashboard on 127.0.0.1
    under its own name (DNS rebinding) and then read it as same-origin: the Host header is
    what tells such a request apart."""
    if not allowed:
        return True
    try:
        name = urlsplit("//" + host_header).hostname
    except ValueError:
        return False
    return name is not None and name.lower() in {a.lower() for a in allowed}


def same_origin(request: Request) -> bool:
    """False when the request's ``Origin`` header names a host other than the one it reached."""
    origin = request.headers.get("origin")
    if not origin or origin == "null":
        return origin != "null"
    host = request.headers.get("host", "")
    try:
        return urlsplit(origin).netloc.lower() == host.lower()
    except ValueError:
        return False


def check_action(request: Request, expected: str | None, form_token: str | None) -> str | None:
    """Why the action is refused (a message for a 403 page), or None when it may go ahead."""
    if not expected:
        return (
            "the dashboard is read-only: start it with --auth-token or FAIRQUE_DASHBOARD_TOKEN "
            "to enable actions"
        )
    if not same_origin(request):
        return "refused: the request came from another site"
    given = request.headers.get(TOKEN_HEADER) or form_token or ""
    if not hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8")):
        return "refused: a valid operator token is required for this action"
    return None
