"""``fairque dashboard``: serve the web dashboard (:mod:`fairque_dashboard`) with uvicorn.

It needs the ``dashboard`` extra (Starlette, Jinja2, uvicorn); without it the command says so
in one line. It binds 127.0.0.1 unless ``--host`` says otherwise, and is read-only unless an
operator token is given (``--auth-token`` or ``$FAIRQUE_DASHBOARD_TOKEN``).
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Callable
from typing import TextIO

from fairque_cli.context import CliError, SubCommands, UsageError, load_config
from fairque_cli.context import open_queue as open_sync_queue
from fairque_core.domain.validation import is_digits

__all__ = ["TOKEN_ENV", "add_dashboard"]

TOKEN_ENV = "FAIRQUE_DASHBOARD_TOKEN"  # noqa: S105 - the variable's name, not a secret
_KEPT_SAMPLES = 300  # the sampler's history (fairque_dashboard.sampler.Sampler's keep)


def add_dashboard(sub: SubCommands) -> None:
    parser = sub.add_parser(
        "dashboard",
        help="serve the web dashboard (needs: pip install fairque[dashboard])",
        description="A web dashboard of the queue: counts, throughput, fairness, tenants, "
        "tasks, DLQ, workers and schedules. Read-only unless an operator token is set.",
    )
    parser.add_argument(
        "--host", type=_host, default="127.0.0.1", help="address to bind (default 127.0.0.1)"
    )
    parser.add_argument("--port", type=_port, default=8700, help="port (default 8700)")
    parser.add_argument(
        "--allowed-host",
        action="append",
        type=_host,
        default=None,
        metavar="NAME",
        help="a host name the dashboard answers to (repeat; e.g. the name a proxy forwards). "
        "Default: the loopback names when bound to a loopback address, else any",
    )
    parser.add_argument(
        "--auth-token",
        default=None,
        metavar="TOKEN",
        help=f"operator token that enables actions (default: ${TOKEN_ENV}; none: read-only)",
    )
    parser.add_argument(
        "--auth-read",
        action="store_true",
        help="reading needs the operator token too (HTTP Basic password, bearer token or the "
        "X-Fairque-Token header); needs --auth-token or $" + TOKEN_ENV,
    )
    parser.add_argument(
        "--refresh",
        type=_seconds,
        default=2.0,
        metavar="SECONDS",
        help="how often the live parts of a page refresh and the app samples the queue",
    )
    parser.add_argument(
        "--window",
        type=_seconds,
        default=60.0,
        metavar="SECONDS",
        help="the fairness window: shares against fair shares and Jain's index over the last "
        "SECONDS, among the tenants with work waiting all through it (default 60)",
    )
    parser.set_defaults(func=_run)


def _host(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must be a host name or an address, not empty")
    return text


def _check_listen(host: str, port: int) -> None:
    """CliError now, rather than from the server later, when ``host`` does not resolve or
    ``host:port`` cannot be bound (uvicorn logged the first and then hung, deaf to SIGTERM,
    and printed a traceback with exit status 3 for the second)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise CliError(f"--host {host!r} does not resolve: {exc}") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as exc:
            raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def _binds_loopback(host: str, is_loopback: Callable[[str], bool]) -> bool:
    """Whether every address ``host`` resolves to is a loopback one (``127.1``,
    ``::ffff:127.0.0.1`` and a name that resolves only to 127.0.1.1 count)."""
    if is_loopback(host):
        return True
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return False
    return bool(found) and all(is_loopback(str(info[4][0])) for info in found)


def _port(text: str) -> int:
    if not is_digits(text) or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"not a port: {text!r}")
    return int(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0.2 <= value <= 3600:
        raise argparse.ArgumentTypeError("must be between 0.2 and 3600 seconds")
    return value


def _run(args: argparse.Namespace, out: TextIO) -> int:
    try:
        import uvicorn

        from fairque_dashboard import DashboardSettings, create_app
        from fairque_dashboard.security import LOOPBACK_HOSTS
    except ImportError as exc:
        raise CliError(
            f"the dashboard needs its extra: pip install fairque[dashboard] (missing {exc.name})"
        ) from None
    from fairque_core.app.backend_loading import backend_url, open_async_backend
    from fairque_core.app.engine.queue_async import AsyncFairQueue
    from fairque_core.settings.config import mask_url
    from fairque_dashboard.security import is_loopback_host

    if not 2 * args.refresh <= args.window <= _KEPT_SAMPLES * args.refresh:
        raise CliError(
            f"--window must be from two samples (2 x --refresh = {2 * args.refresh:g} s) to the "
            f"{_KEPT_SAMPLES} samples the dashboard keeps ({_KEPT_SAMPLES * args.refresh:g} s)"
        )
    config = load_config(args)
    token = args.auth_token or os.environ.get(TOKEN_ENV, "").strip() or None
    if args.auth_read and not token:
        raise UsageError(f"--auth-read needs an operator token (--auth-token or ${TOKEN_ENV})")
    loopback = _binds_loopback(args.host, is_loopback_host)
    _check_listen(args.host, args.port)
    with open_sync_queue(config) as probe:  # an unreachable server: one line now
        probe.get_stats()

    async def open_queue() -> AsyncFairQueue:
        return AsyncFairQueue(open_async_backend(config))

    allowed = tuple(args.allowed_host or ())
    if loopback:  # another site's name for 127.0.0.1 is refused (DNS rebinding)
        allowed = (*LOOPBACK_HOSTS, *allowed)
    settings = DashboardSettings(
        token=token,
        target=mask_url(backend_url(config)),
        sample_interval=args.refresh,
        refresh_seconds=args.refresh,
        fairness_window=args.window,
        allowed_hosts=allowed,
        auth_read=args.auth_read,
    )
    app = create_app(open_queue, settings)
    host = "[::1]" if args.host == "::1" else args.host
    mode = "actions need the operator token" if token else "read-only (no operator token)"
    if args.auth_read:
        mode = "reading and actions need the operator token"
    out.write(
        f"fairque dashboard at http://{host}:{args.port}/ for queue {config.queue.name!r} "
        f"on {settings.target} ({mode}); Ctrl-C stops it\n"
    )
    if not loopback:
        out.write(f"note: bound to {args.host}, reachable from other machines; put it behind TLS\n")
    out.flush()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0
