"""What every dashboard page shares: the settings, the :class:`Dashboard` (queue, sampler,
templates), the form and query-parameter helpers and the template filters."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import attrs
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse

from fairque_core import AsyncFairQueue
from fairque_core.domain.validation import is_digits
from fairque_dashboard.event_feed import EventFeed
from fairque_dashboard.sampler import Sampler
from fairque_dashboard.security import check_action

__all__ = [
    "MAX_PAGE_SIZE",
    "Dashboard",
    "DashboardSettings",
    "QueueOpener",
    "choice_param",
    "dashboard_of",
    "first",
    "int_param",
    "redirect",
]

HERE = Path(__file__).resolve().parent
QueueOpener = Callable[[], Awaitable[AsyncFairQueue]]

#: Largest form body an action accepts (a selection of a few thousand DLQ entries).
MAX_FORM_BYTES = 256 * 1024
MAX_PAGE_SIZE = 500


@attrs.frozen(kw_only=True)
class DashboardSettings:
    """What the command line decides. ``target`` is shown as is: pass a masked URL."""

    token: str | None = None
    target: str = ""
    sample_interval: float = 2.0
    tenant_sample_limit: int = 1000
    refresh_seconds: float = 2.0
    #: The fairness window: shares, fair shares and Jain's index over the last this many
    #: seconds of samples, among the tenants backlogged through it.
    fairness_window: float = 60.0
    page_size: int = 50
    payload_preview_bytes: int = 4096
    dlq_scan_limit: int = 10_000
    #: Host names the dashboard answers to; any other ``Host`` header gets a 400 (DNS
    #: rebinding). Empty: any (``fairque dashboard`` sets the loopback names when it binds
    #: a loopback address, plus its ``--allowed-host`` names).
    allowed_hosts: tuple[str, ...] = ()
    #: Reading needs the token too (``fairque dashboard --auth-read``): every page, fragment
    #: and static file answers 401 to a request without it (see
    #: :func:`~fairque_dashboard.security.check_read`). Needs ``token``.
    auth_read: bool = attrs.field(default=False)

    @auth_read.validator
    def _read_needs_token(self, _: attrs.Attribute[bool], value: bool) -> None:
        if value and not self.token:
            raise ValueError("auth_read needs an operator token to check")


class Dashboard:
    """What every handler shares: the queue, the sampler, the settings, the templates."""

    def __init__(self, settings: DashboardSettings) -> None:
        self.settings = settings
        self._queue: AsyncFairQueue | None = None
        self.sampler: Sampler | None = None
        #: The newest events of the queue's log (event_pages.py), refreshed per page view.
        self.events = EventFeed()
        #: Weights set through this dashboard (the queue API has no weight read yet).
        self.weights_set: dict[str, float] = {}
        self.templates = Environment(
            loader=FileSystemLoader(str(HERE / "templates")),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.filters["n"] = format_value
        self.templates.filters["pct"] = format_percent
        self.templates.filters["when"] = format_time
        self.templates.filters["when_short"] = format_time_short

    @property
    def queue(self) -> AsyncFairQueue:
        if self._queue is None:
            raise HTTPException(503, "the queue is not open yet")
        return self._queue

    def attach(self, queue: AsyncFairQueue) -> None:
        self._queue = queue
        self.sampler = Sampler(
            queue,
            interval=self.settings.sample_interval,
            tenant_limit=self.settings.tenant_sample_limit,
            window_seconds=self.settings.fairness_window,
            weights=self.known_weights,
        )

    def known_weights(self) -> dict[str, float]:
        table = {t: w for t, (w, _tier) in self.queue.config.tenant_weight_table().items()}
        table.update(self.weights_set)
        return table

    @property
    def read_only(self) -> bool:
        return not self.settings.token

    def render(
        self, request: Request, template: str, status: int = 200, **context: Any
    ) -> HTMLResponse:
        page = self.templates.get_template(template)
        body = page.render(
            request=request,
            settings=self.settings,
            read_only=self.read_only,
            queue_name=self._queue.name if self._queue is not None else "",
            server_problem=self._queue.server_problem if self._queue is not None else None,
            path=request.url.path,
            **context,
        )
        return HTMLResponse(body, status_code=status)

    async def form(self, request: Request) -> dict[str, list[str]]:
        """The url-encoded form of an action (size-capped; no multipart)."""
        size = request.headers.get("content-length")
        if size is not None and (not is_digits(size) or int(size) > MAX_FORM_BYTES):
            raise HTTPException(413, "form too large")
        body = await request.body()
        if len(body) > MAX_FORM_BYTES:
            raise HTTPException(413, "form too large")
        try:
            return parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=20_000)
        except (UnicodeDecodeError, ValueError) as exc:
            raise HTTPException(400, "malformed form") from exc

    async def authorise(self, request: Request) -> dict[str, list[str]]:
        """The action's form, or a 403 when the token is missing or wrong."""
        form = await self.form(request)
        why = check_action(request, self.settings.token, first(form, "token"))
        if why is not None:
            raise HTTPException(403, why)
        return form


def dashboard_of(request: Request) -> Dashboard:
    board: Dashboard = request.app.state.dashboard
    return board


def first(form: Mapping[str, list[str]], name: str) -> str | None:
    values = form.get(name)
    return values[0] if values else None


def redirect(path: str, **params: object) -> RedirectResponse:
    query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
    return RedirectResponse(f"{path}?{query}" if query else path, status_code=303)


# ---------------------------------------------------------------------- query parameters


def int_param(
    request: Request, name: str, default: int, *, low: int = 0, high: int | None = None
) -> int:
    """An integer query parameter in [low, high]; a 400 page for anything else."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if not is_digits(raw) or len(raw) > 9:
        raise HTTPException(400, f"{name} must be a whole number")
    value = int(raw)
    if value < low or (high is not None and value > high):
        limit = f" and {high}" if high is not None else ""
        raise HTTPException(400, f"{name} must be between {low}{limit}")
    return value


def choice_param(request: Request, name: str, choices: frozenset[str], default: str) -> str:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if raw not in choices:
        raise HTTPException(400, f"{name} must be one of: {', '.join(sorted(choices))}")
    return raw


# ---------------------------------------------------------------------- formatting


def format_value(value: object, fmt: str = "int") -> str:
    if value is None:
        return "n/a"
    if fmt == "seconds" and isinstance(value, (int, float)):
        return f"{value:.3g} s"
    if fmt == "float" and isinstance(value, (int, float)):
        return f"{value:g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def format_percent(value: object) -> str:
    if value is None or not isinstance(value, (int, float)):
        return "n/a"
    return f"{value * 100:.1f}%"


def format_time(value: object) -> str:
    import time

    if not isinstance(value, (int, float)) or value <= 0:
        return "n/a"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(value)) + f" ({value:.3f})"


def format_time_short(value: object) -> str:
    """An epoch time as ``YYYY-MM-DD HH:MM:SS`` UTC (no epoch float beside it); "n/a"."""
    import time

    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        return "n/a"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(value))


# ---------------------------------------------------------------------- errors
