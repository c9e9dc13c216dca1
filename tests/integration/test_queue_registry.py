"""The registry of queues (``fq:queues``, read by ``fairque queues``) lists a queue once it
stores something of its own, not once any call touched its name: a claim, a cancel of an
unknown id, a tenant purge, a DLQ requeue, a resume or limits cleared on a mistyped queue
name listed that name."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from fairque_core import Task
from fairque_redis import connect

pytestmark = pytest.mark.redis


def test_only_a_call_that_stores_lists_the_queue(valkey_server: Any) -> None:
    name = "reg-" + uuid.uuid4().hex[:10]
    with connect(valkey_server.url, queue=name) as queue:
        assert queue.claim_batch(5) == []
        assert queue.cancel("no-such-task") is False
        queue.purge_tenant("nobody")
        assert queue.requeue_dlq() == 0
        assert queue.requeue_expired() == 0
        queue.resume()
        queue.resume("alice")
        queue.clear_tenant_limits("alice")
        assert name not in queue.backend.list_queues()
        queue.push(Task.create("alice"))
        assert name in queue.backend.list_queues()
    with connect(valkey_server.url, queue=name + "-w") as other:
        other.set_tenant_weight("alice", 2.0)
        assert name + "-w" in other.backend.list_queues()
    with connect(valkey_server.url, queue=name + "-p") as paused:
        paused.pause("alice")
        assert name + "-p" in paused.backend.list_queues()
    with connect(valkey_server.url, queue=name + "-l") as limited:
        limited.set_tenant_limits("alice", max_running=3)
        assert name + "-l" in limited.backend.list_queues()
