"""fairque_dashboard: a web dashboard over the public queue API (``fairque dashboard``).

Needs the ``dashboard`` extra: ``pip install fairque[dashboard]`` (Starlette, Jinja2, uvicorn).
"""

from fairque_dashboard.app import Dashboard, DashboardSettings, QueueOpener, create_app

__all__ = ["Dashboard", "DashboardSettings", "QueueOpener", "create_app"]
