"""Who may act: the operator token, checked in constant time, and the response headers.

Without a configured token the dashboard is read-only: every action is refused. With one, an
action must carry it in the ``X-Fairque-Token`` header (scripts) or the ``token`` form field
(the pages' forms). The token never travels in a cookie, so a page of another site cannot make
the operator's browser send it: that is the CSRF protection. As a second line, a POST whose
``Origin`` names another host is refused.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import socket
from urllib.parse import urlsplit

from starlette.requests import Request

__all__ = [
    "LOOPBACK_HOSTS",
    "SECURITY_HEADERS",
    "TOKEN_ENV",
    "TOKEN_HEADER",
    "check_action",
    "check_read",
    "host_allowed",
    "is_loopback_host",
]

#: The names a dashboard bound to a loopback address answers to by default. Any other
#: spelling of a loopback address (``127.0.0.2``, ``127.1``, ``::ffff:127.0.0.1``,
#: ``localhost.``) counts as one of them: see :func:`is_loopback_host`.
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


def is_loopback_host(name: str) -> bool:
    """Whether ``name`` (a host name or an address literal, brackets allowed) can only mean
    this machine: ``localhost`` and ``*.localhost`` (RFC 6761, trailing dot or not), any
    address in 127.0.0.0/8 in any spelling ``inet_aton`` accepts (``127.1``, ``2130706433``),
    ``::1`` and IPv4-mapped loopback (``::ffff:127.0.0.1``)."""
    text = name.strip().lower()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    text = text.removesuffix(".")
    if not text:
        return False
    if text == "localhost" or text.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        if not all(part.isalnum() for part in text.split(".")):
            return False
        try:  # the short and numeric IPv4 forms a resolver accepts
            packed = socket.inet_aton(text)
        except OSError:
            return False
        address = ipaddress.IPv4Address(packed)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def host_allowed(host_header: str, allowed: tuple[str, ...]) -> bool:
    """Whether a request's ``Host`` (``name[:port]``, ``[v6]:port``) names one of ``allowed``
    (empty: any). A page of another site can make a browser reach a dashboard on 127.0.0.1
    under its own name (DNS rebinding) and then read it as same-origin: the Host header is
    what tells such a request apart. When ``allowed`` holds a loopback name, every spelling
    of a loopback address is allowed too (no rebinding name is one)."""
    if not allowed:
        return True
    try:
        name = urlsplit("//" + host_header).hostname
    except ValueError:
        return False
    if name is None:
        return False
    wanted = {a.lower().removesuffix(".") for a in allowed}
    if name.lower().removesuffix(".") in wanted:
        return True
    return is_loopback_host(name) and any(is_loopback_host(a) for a in allowed)


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


def check_read(authorization: str | None, header_token: str | None, expected: str) -> bool:
    """Whether a request may read a dashboard started with ``--auth-read``: it carries the
    operator token in the ``X-Fairque-Token`` header, as a bearer token, or as the password of
    HTTP Basic authentication (any user name; what a browser prompts for)."""
    given = header_token or ""
    if not given and authorization:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer":
            given = value.strip()
        elif scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                return False
            given = decoded.partition(":")[2]
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))
