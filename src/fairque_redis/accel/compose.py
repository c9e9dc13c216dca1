"""What a composition root (``connect``, ``aconnect``, ``backend_from_url``) plugs into a Redis
backend: the accelerators' switches and, unless ``intake`` is off, the intake client's encoder
(ADR 65: the backends never import this package; they take what they are given).
"""

from __future__ import annotations

from fairque_core.settings.accel import Accelerators
from fairque_redis.accel import intake
from fairque_redis.scripting.calls.intake import EntryEncoder

__all__ = ["backend_plugs"]


def backend_plugs(accel: Accelerators | None) -> tuple[Accelerators, EntryEncoder | None]:
    """``(accel, intake_entries)`` for a backend's constructor: ``accel`` (default: read from
    ``$FAIRQUE_ACCEL_OFF`` now) and the intake client's encoder, or None (the reference
    encoder) when ``accel`` turns ``intake`` off."""
    accel = accel if accel is not None else Accelerators.from_env()
    return accel, intake.encode_entries if accel.on("intake") else None
