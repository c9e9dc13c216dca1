"""How scripts run (ADR 41) as the settings say, on real servers, counted by the server
(``INFO commandstats``): a config file's ``redis.scripts: eval`` (or its environment override)
gives a backend that sends EVALSHA and no FCALL, by every way a config opens a backend
(``FairQueue.from_config``, ``connect(config=...)``, the ``fairque.backends`` factory); a
partitioned backend honours ``?scripts=eval`` / ``scripts=`` / ``redis.scripts`` in every
partition, on one server and on a cluster; and the default still sends FCALL (so each check
can fail). Replicated writes (``durability="replicated"``) are test_replicated_fcall.py."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import redis

from fairque_core import FairQueue, FairQueueConfig, QueueConfig, RedisConfig, Task
from fairque_core.app.backend_loading import open_async_backend, open_backend
from fairque_redis import aconnect, connect
from fairque_redis.partitioned.backend import PartitionedBackend
from fairque_redis.partitioned.backend_async import AsyncPartitionedBackend

pytestmark = pytest.mark.redis

PARTITIONS = 4
_COUNTED = ("fcall", "evalsha", "function|load")


def _calls(raw: Any) -> dict[str, int]:
    stats = raw.info("commandstats")
    return {n: int(stats.get(f"cmdstat_{n}", {}).get("calls", 0)) for n in _COUNTED}


class Counter:
    """The FCALL / EVALSHA / FUNCTION LOAD calls a block of work made on the server."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self._before = _calls(raw)
        self.sent: dict[str, int] = {}

    def __enter__(self) -> Counter:
        return self

    def __exit__(self, *exc: object) -> None:
        after = _calls(self._raw)
        self.sent = {n: after[n] - self._before[n] for n in _COUNTED}


@pytest.fixture
def raw(valkey_server: Any) -> Iterator[Any]:
    client = redis.Redis.from_url(valkey_server.url)
    yield client
    client.close()


def _name() -> str:
    return f"sm{uuid.uuid4().hex[:8]}"


def _work(fq: FairQueue) -> None:
    """A push, a batch, claims until all four are out, a finish and a fail, the stats."""
    tenants = ["acme", "bob", "carol", "dave"]
    fq.push(Task.create(tenants[0], payload={"n": 0}))
    fq.push_batch([Task.create(t, payload={"n": 1}) for t in tenants[1:]])
    claimed = []
    for _ in range(20):
        claimed += fq.claim_batch(4, worker_id="w")
        if len(claimed) == 4:
            break
    assert len(claimed) == 4
    assert fq.finish_batch([(c, "ok") for c in claimed[:3]]) == [True] * 3
    fq.fail(claimed[3], RuntimeError("boom"))
    assert fq.get_stats()["finished"] == 3


def _yaml(tmp_path: Path, url: str, *, scripts: str | None, partitions: int = 1) -> Path:
    lines = ["redis:", f"  url: {url}"]
    if scripts is not None:
        lines.append(f"  scripts: {scripts}")
    lines += ["queue:", f"  name: {_name()}", f"  partitions: {partitions}"]
    path = tmp_path / "fairque.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


# ---------------------------------------------------------------------- the config file


@pytest.mark.parametrize("partitions", [1, PARTITIONS])
def test_a_config_file_with_scripts_eval_sends_evalsha_only(
    valkey_server: Any, raw: Any, tmp_path: Path, partitions: int
) -> None:
    path = _yaml(tmp_path, valkey_server.url, scripts="eval", partitions=partitions)
    with Counter(raw) as by_file, FairQueue.from_config(path) as fq:
        _work(fq)
    config = FairQueueConfig.from_yaml(path)
    config = attrs.evolve(config, queue=attrs.evolve(config.queue, name=_name()))
    with Counter(raw) as by_connect, connect(config=config) as fq:
        _work(fq)
    for counter in (by_file, by_connect):
        assert counter.sent["fcall"] == 0
        assert counter.sent["function|load"] == 0
        assert counter.sent["evalsha"] >= 6


def test_without_the_field_a_config_file_still_sends_fcall(
    valkey_server: Any, raw: Any, tmp_path: Path
) -> None:
    path = _yaml(tmp_path, valkey_server.url, scripts=None)
    with Counter(raw) as counter, FairQueue.from_config(path) as fq:
        _work(fq)
    assert counter.sent["fcall"] >= 6
    assert counter.sent["evalsha"] == 0


def test_the_environment_overrides_the_files_scripts(
    valkey_server: Any, raw: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _yaml(tmp_path, valkey_server.url, scripts="functions")
    monkeypatch.setenv("FAIRQUE_REDIS__SCRIPTS", "eval")
    with Counter(raw) as counter, FairQueue.from_config(path) as fq:
        _work(fq)
    assert counter.sent["fcall"] == 0
    assert counter.sent["evalsha"] >= 6


def test_the_asyncio_face_of_a_config_honours_scripts(valkey_server: Any, raw: Any) -> None:
    config = FairQueueConfig(
        redis=RedisConfig(url=valkey_server.url, scripts="eval"), queue=QueueConfig(name=_name())
    )

    async def scenario() -> None:
        backend = open_async_backend(config)
        try:
            assert await backend.push_batch([_message(f"t{n}", f"u{n}") for n in range(3)])
            assert len(await backend.claim(worker_id="w", count=3)) == 3
        finally:
            await backend.close()
        queue = await aconnect(config=config)
        try:
            await queue.backend.push(_message("x", "u"))
        finally:
            await queue.close()

    with Counter(raw) as counter:
        asyncio.run(scenario())
    assert counter.sent["fcall"] == 0
    assert counter.sent["evalsha"] >= 3


def test_a_query_in_the_url_wins_over_the_field(valkey_server: Any, raw: Any) -> None:
    """The order is: the ``scripts=`` option, then ``?scripts=`` of the URL, then the field."""
    config = FairQueueConfig(
        redis=RedisConfig(url=valkey_server.url + "?scripts=eval", scripts="functions"),
        queue=QueueConfig(name=_name()),
    )
    with Counter(raw) as by_url:
        backend = open_backend(config)
        with FairQueue(backend) as fq:
            _work(fq)
    assert by_url.sent["fcall"] == 0
    config = FairQueueConfig(
        redis=RedisConfig(url=valkey_server.url, scripts="eval"), queue=QueueConfig(name=_name())
    )
    with Counter(raw) as by_option, FairQueue(open_backend(config, scripts="functions")) as fq:
        _work(fq)
    assert by_option.sent["fcall"] >= 6
    assert by_option.sent["evalsha"] == 0


# ---------------------------------------------------------------------- partitioned backends


def _message(task_id: str, tenant: str) -> Any:
    from fairque_core import Message, Priority

    return Message(task_id=task_id, tenant=tenant, priority=Priority.NORMAL, body=b"{}")


def _drive(backend: PartitionedBackend) -> None:
    """Work in every partition: one tenant per partition at least."""
    tenants = [f"t{n}" for n in range(4 * PARTITIONS)]
    assert all(backend.push_batch([_message(f"m-{t}", t) for t in tenants]))
    claimed = []
    for _ in range(50):
        claimed += backend.claim(worker_id="w", count=len(tenants))
        if len(claimed) == len(tenants):
            break
    assert len(claimed) == len(tenants)
    for c in claimed:
        backend.finish(c.message.task_id, c.lease.token, b"ok")
    assert backend.stats()["finished"] == len(tenants)


@pytest.mark.parametrize("how", ["query", "option", "config"])
def test_a_partitioned_backend_with_scripts_eval_sends_no_fcall(
    valkey_server: Any, raw: Any, how: str
) -> None:
    url, queue = valkey_server.url, _name()
    with Counter(raw) as counter:
        if how == "query":
            backend = PartitionedBackend.from_url(
                url + "?scripts=eval", queue=queue, partitions=PARTITIONS
            )
        elif how == "option":
            backend = PartitionedBackend.from_url(
                url, queue=queue, partitions=PARTITIONS, scripts="eval"
            )
        else:
            backend = PartitionedBackend.from_config(
                RedisConfig(url=url, scripts="eval"), QueueConfig(name=queue, partitions=PARTITIONS)
            )
        with backend:
            assert all(not s.uses_functions for p in backend._parts for s in p._scripts.values())
            _drive(backend)
            backend.purge_all()
    assert counter.sent["fcall"] == 0
    assert counter.sent["function|load"] == 0
    assert counter.sent["evalsha"] >= 2 + PARTITIONS


def test_a_partitioned_backend_sends_fcall_by_default(valkey_server: Any, raw: Any) -> None:
    with (
        Counter(raw) as counter,
        PartitionedBackend.from_url(
            valkey_server.url, queue=_name(), partitions=PARTITIONS
        ) as backend,
    ):
        _drive(backend)
        backend.purge_all()
    assert counter.sent["fcall"] >= 2 + PARTITIONS


def test_an_asyncio_partitioned_backend_with_scripts_eval_sends_no_fcall(
    valkey_server: Any, raw: Any
) -> None:
    async def scenario() -> None:
        backend = AsyncPartitionedBackend.from_url(
            valkey_server.url + "?scripts=eval", queue=_name(), partitions=PARTITIONS
        )
        try:
            tenants = [f"t{n}" for n in range(4 * PARTITIONS)]
            assert all(await backend.push_batch([_message(f"m-{t}", t) for t in tenants]))
            got = 0
            for _ in range(50):
                got += len(await backend.claim(worker_id="w", count=len(tenants)))
                if got == len(tenants):
                    break
            assert got == len(tenants)
            await backend.purge_all()
        finally:
            await backend.close()

    with Counter(raw) as counter:
        asyncio.run(scenario())
    assert counter.sent["fcall"] == 0
    assert counter.sent["evalsha"] >= 2


@pytest.mark.cluster
def test_a_partitioned_backend_on_a_cluster_with_scripts_eval_sends_no_fcall(
    valkey_cluster: Any,
) -> None:
    from redis.cluster import RedisCluster

    probe = RedisCluster.from_url(valkey_cluster.url)
    nodes = {n.name: redis.Redis(host=n.host, port=n.port) for n in probe.get_primaries()}
    try:
        before = {name: _calls(client) for name, client in nodes.items()}
        with PartitionedBackend.from_url(
            valkey_cluster.url + "?scripts=eval",
            cluster=True,
            queue=_name(),
            partitions=PARTITIONS,
        ) as backend:
            _drive(backend)
            backend.purge_all()
        sent = {
            name: {n: _calls(client)[n] - before[name][n] for n in _COUNTED}
            for name, client in nodes.items()
        }
        assert all(s["fcall"] == 0 and s["function|load"] == 0 for s in sent.values()), sent
        # the partitions spread over the primaries, and each that holds one ran EVALSHA
        assert sum(1 for s in sent.values() if s["evalsha"] > 0) >= 2, sent
    finally:
        for client in nodes.values():
            client.close()
        probe.close()


def test_changing_the_layout_reads_the_old_partitions_as_the_backend_runs(
    valkey_server: Any, raw: Any
) -> None:
    """Re-opening an empty queue with another number of partitions reads every old partition
    (settle_layout); with ``?scripts=eval`` those reads go by EVALSHA too."""
    url, name = valkey_server.url + "?scripts=eval", _name()
    with Counter(raw) as counter:
        with connect(url, queue=name, partitions=PARTITIONS) as fq:
            fq.backend.push(_message("a", "t0"))
            [claimed] = fq.backend.claim(worker_id="w")
            fq.backend.finish("a", claimed.lease.token, b"ok")
        with connect(url, queue=name, partitions=1) as fq:  # from P partitions to one
            assert fq.backend.stats()["finished"] == 0
        with connect(url, queue=name, partitions=2) as fq:  # and back to two
            assert fq.backend.partitions == 2
            fq.backend.purge_all()
    assert counter.sent["fcall"] == 0
    assert counter.sent["evalsha"] >= PARTITIONS + 1
