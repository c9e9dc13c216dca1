"""Fixtures the integration tests of one script share: Valkey 9 and Redis 7 (the session
servers of tests/conftest.py), and a fresh queue on each."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from fairque_redis.backend import RedisBackend


@pytest.fixture(params=["valkey", "redis7"])
def server_url(request: pytest.FixtureRequest) -> str:
    """Each test once on Valkey 9 and once on Redis 7 (a module may define its own)."""
    name = {"valkey": "valkey_server", "redis7": "redis7_server"}[request.param]
    return str(request.getfixturevalue(name).url)


@pytest.fixture
def script_queue(server_url: str) -> Iterator[tuple[RedisBackend, Any, str]]:
    """A fresh queue on ``server_url``: its backend, a raw client of the server, its name."""
    name = f"sq-{uuid.uuid4().hex[:8]}"
    backend = RedisBackend.from_url(server_url, queue=name)
    raw = redis.Redis.from_url(server_url)
    try:
        yield backend, raw, name
    finally:
        backend.close()
        raw.close()
