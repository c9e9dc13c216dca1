"""fairque plugins: codecs, OpenTelemetry tracing and metrics, a retry policy.

Compose them with a queue: ``FairQueue(backend, plugins=[OpenTelemetryTracing(), ...])``.
``MsgpackCodec`` needs the ``msgpack`` extra; the OpenTelemetry plugins need only the API.
"""

from __future__ import annotations

from fairque_plugins.metrics import OpenTelemetryMetrics
from fairque_plugins.retry_policy import RetryPolicy
from fairque_plugins.serialization import JsonCodec, MsgpackCodec
from fairque_plugins.tracing import OpenTelemetryTracing

__all__ = [
    "JsonCodec",
    "MsgpackCodec",
    "OpenTelemetryMetrics",
    "OpenTelemetryTracing",
    "RetryPolicy",
]
