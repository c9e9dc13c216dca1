"""The backend factory (``fairque.backends`` entry point: ``FairQueue.from_config``, the CLI,
the dashboard) checks a one-slot queue's layout as ``connect`` does (ADR 34): a queue recorded
with partitions that holds tasks is refused, typed, instead of being opened on its empty
one-slot keys (where a worker finds nothing and a producer's tasks reach no partitioned
worker). On one Valkey."""

from __future__ import annotations

import io
import uuid
from contextlib import redirect_stderr
from typing import Any

import pytest

from fairque_cli.main import main
from fairque_core import FairQueue, Task
from fairque_core.app.backend_loading import open_async_backend
from fairque_core.domain.errors import ConfigurationError, DamagedKeyError
from fairque_core.settings.config import FairQueueConfig
from fairque_redis import connect
from fairque_redis.factory import backend_from_url

pytestmark = [pytest.mark.redis]


def _config(url: str, queue: str, partitions: int = 1) -> FairQueueConfig:
    return FairQueueConfig.from_dict(
        {"redis": {"url": url}, "queue": {"name": queue, "partitions": partitions}}
    )


def _partitioned(url: str, tasks: int) -> str:
    queue = "fl-" + uuid.uuid4().hex[:10]
    with connect(url, queue=queue, partitions=3) as q:
        if tasks:
            q.push_batch([Task.create(f"t{i}", payload={"i": i}) for i in range(tasks)])
        else:
            q.backend.check_layout()  # the record written, nothing stored
    return queue


def test_a_one_slot_backend_of_a_partitioned_queue_with_tasks_is_refused(
    valkey_server: Any,
) -> None:
    url = valkey_server.url
    queue = _partitioned(url, 9)
    with pytest.raises(ConfigurationError, match="3 partition"):
        FairQueue.from_config(_config(url, queue))
    with pytest.raises(ConfigurationError, match="3 partition"):
        backend_from_url(url, queue=queue)
    with pytest.raises(ConfigurationError, match="3 partition"):
        open_async_backend(_config(url, queue))
    # opened with the recorded number, the same queue holds its nine tasks
    with FairQueue.from_config(_config(url, queue, 3)) as fq:
        assert fq.get_stats()["ready"] == 9


def test_an_empty_partitioned_layout_may_be_opened_with_one_slot(valkey_server: Any) -> None:
    url = valkey_server.url
    queue = _partitioned(url, 0)
    with FairQueue.from_config(_config(url, queue)) as fq:  # re-created as one slot (ADR 34)
        fq.push(Task.create("t0", payload={}))
        assert fq.get_stats()["ready"] == 1


def test_the_cli_refuses_a_partitioned_queue_opened_with_one_slot(
    valkey_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = valkey_server.url
    queue = _partitioned(url, 6)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stderr(err):
        code = main(["stats", "--url", url, "--queue", queue], stdout=out)
    assert code == 1
    assert "has 3 partition(s) and holds tasks" in err.getvalue()
    assert out.getvalue() == ""
    monkeypatch.setenv("FAIRQUE_QUEUE__PARTITIONS", "3")
    out = io.StringIO()
    assert main(["stats", "--url", url, "--queue", queue, "--json"], stdout=out) == 0
    assert '"ready": 6' in out.getvalue()


@pytest.mark.parametrize("damage", [b"three", b"0", b"-2", b"1025", b"3.0", b"\xff"])
def test_a_damaged_partitions_record_is_refused_typed_everywhere(
    valkey_server: Any, damage: bytes
) -> None:
    """A ``partitions`` record that is not a count of 1-1,024 (written behind fairque's back)
    is a DamagedKeyError naming the key, from connect, the factory, the doctor's listing and
    the CLI: never a bare ValueError, and nothing is written over it."""
    from fairque_redis.doctor.examine import queue_spaces
    from fairque_redis.keys import KeySpace

    url = valkey_server.url
    queue = _partitioned(url, 3)
    key = KeySpace(queue).partition_count
    with connect(url, queue=queue, partitions=3) as q:
        client = q.backend.client  # type: ignore[attr-defined]
        client.set(key, damage)
    for partitions in (1, 3):
        with pytest.raises(DamagedKeyError) as caught:
            connect(url, queue=queue, partitions=partitions)
        assert caught.value.key == key
        assert "number of partitions" in str(caught.value)
    with pytest.raises(DamagedKeyError):
        backend_from_url(url, queue=queue)
    with pytest.raises(DamagedKeyError):
        queue_spaces(client, queue)
    err = io.StringIO()
    with redirect_stderr(err):
        code = main(["doctor", "--url", url, "--queue", queue], stdout=io.StringIO())
    assert code == 1
    assert key in err.getvalue()
    assert "Traceback" not in err.getvalue()
    assert client.get(key) == damage  # refused, not overwritten
    # put back as the error says, the queue opens with its three tasks
    client.set(key, b"3")
    with connect(url, queue=queue, partitions=3) as q:
        assert q.get_stats()["ready"] == 3


def test_the_recorded_bound_is_the_config_bound() -> None:
    from fairque_core.settings.config import MAX_PARTITIONS
    from fairque_redis import keys

    assert keys._MAX_RECORDED == MAX_PARTITIONS
    assert keys.recorded_partitions(None, "k") == 1
    assert keys.recorded_partitions(b"1024", "k") == MAX_PARTITIONS
