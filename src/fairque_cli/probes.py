"""The worker's HTTP port: ``/metrics`` (Prometheus), ``/healthz`` and ``/readyz`` (Kubernetes
probes), from one small threaded HTTP server.

* ``/healthz`` (liveness): 200 while the worker is starting, running or draining; 503 once it
  has stopped (a restart would help).
* ``/readyz`` (readiness): 200 only while it is running and its last calls to the server
  succeeded; 503 while it backs off from an unreachable server, stops, or has not started.

Both answer with the worker's ``health()`` as JSON. ``/metrics`` is the given Prometheus
registry (by default prometheus_client's global one) in the text format (404 without
``prometheus_client``). The port binds ``host``: 127.0.0.1 unless told otherwise (in a
container, ``--metrics-host 0.0.0.0`` lets Prometheus and the kubelet reach it).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["DEFAULT_HOST", "ProbeServer", "liveness", "readiness"]

Health = Callable[[], Mapping[str, Any]]


def liveness(health: Mapping[str, Any]) -> bool:
    """Alive: not stopped."""
    return str(health.get("state", "")) in ("new", "running", "stopping")


def readiness(health: Mapping[str, Any]) -> bool:
    """Ready: running and not backing off from the server."""
    return health.get("state") == "running" and not health.get("backing_off")


#: The host the port binds by default (loopback, as the dashboard's).
DEFAULT_HOST = "127.0.0.1"


def _metrics(registry: Any) -> tuple[bytes, str] | None:
    try:
        from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
    except ImportError:
        return None
    return generate_latest(REGISTRY if registry is None else registry), CONTENT_TYPE_LATEST


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            got = _metrics(self.server.registry)
            if got is None:
                self._send(404, b"metrics need prometheus_client\n", "text/plain")
            else:
                self._send(200, *got)
            return
        check = {"/healthz": liveness, "/readyz": readiness}.get(path)
        if check is None:
            self._send(404, b"try /healthz, /readyz or /metrics\n", "text/plain")
            return
        try:
            health = dict(self.server.health())
        except Exception as exc:  # a probe must answer, whatever the worker does
            health = {"state": "unknown", "error": f"{type(exc).__name__}: {exc}"}
        code = 200 if check(health) else 503
        body = json.dumps(health, default=str).encode()
        self._send(code, body, "application/json")

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return  # probes every few seconds would flood the worker's log


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], health: Health, registry: Any) -> None:
        self.health = health
        self.registry = registry
        super().__init__(address, _Handler)


class ProbeServer:
    """Serves the three paths on ``host:port`` from a daemon thread until :meth:`close`;
    ``registry``: the Prometheus registry of ``/metrics`` (None: the global one)."""

    def __init__(
        self, port: int, health: Health, *, host: str = DEFAULT_HOST, registry: Any = None
    ) -> None:
        self._server = _Server((host, port), health, registry)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fairque-http", daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
