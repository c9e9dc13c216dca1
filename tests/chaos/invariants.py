"""The invariant checker of one queue's Redis structures: the product's ``fairque doctor``
(:mod:`fairque_redis.doctor.examine`), re-exported for the chaos tests."""

from __future__ import annotations

from fairque_redis.doctor.examine import check, snapshot

__all__ = ["check", "snapshot"]
