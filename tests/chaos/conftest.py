"""Fixtures of the chaos tests: a raw client on the session's Valkey and fresh queue names."""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def queue_name() -> str:
    return f"chaos-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def raw(valkey_server: Any) -> Iterator[Any]:
    """A plain ``redis.Redis`` (bytes replies) on the session's embedded Valkey."""
    import redis

    client = redis.Redis.from_url(valkey_server.url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """The run's random seed: ``FQ_SEED`` when set, else a fresh one; printed on failure."""
    value = int(os.environ.get("FQ_SEED") or random.randrange(1 << 30))
    request.node.user_properties.append(("FQ_SEED", value))
    print(f"FQ_SEED={value}")
    return value
