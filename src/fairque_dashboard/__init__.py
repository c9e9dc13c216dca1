"""fairque_dashboard: a web dashboard over the public queue API (``fairque dashboard``).

Needs the ``dashboard`` extra: ``pip install fairque[dashboard]`` (Starlette, Jinja2, uvicorn).
"""

from fairque_dashboard.app import create_app
from fairque_dashboard.board import Dashboard, DashboardSettings, QueueOpener

__all__ = ["Dashboard", "DashboardSettings", "QueueOpener", "create_app"]
