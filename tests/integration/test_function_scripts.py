"""Scripts as Redis Functions (ADR 41) on real servers: the library loads on Valkey 9 and
Redis 7.0 with each script's flags, a backend runs every call by FCALL (one FUNCTION LOAD),
``scripts=eval`` keeps EVALSHA, an ACL without ``+fcall`` / ``+function|load`` falls back to
EVALSHA (logged), a pipelined call queues FCALL and reports a missing library as ``missing``,
and on a cluster the load reaches every primary. That each function behaves as its EVALSHA
twin is the contract suite's job (it runs through functions by default)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
import redis

from fairque_core import FairQueue, Task
from fairque_redis.backends.backend import RedisBackend
from fairque_redis.scripting.function_library import LIBRARY, script_flags
from fairque_redis.scripting.loading import missing
from fairque_redis.scripting.objects import Script
from fairque_redis.scripting.scripts import SOURCES

pytestmark = [pytest.mark.redis, pytest.mark.usefixtures("accelerators_on")]

KINDS = ["valkey", "redis7"]
FIXTURES = {"valkey": "valkey_server", "redis7": "redis7_server"}


def _url(request: pytest.FixtureRequest, kind: str) -> str:
    return str(request.getfixturevalue(FIXTURES[kind]).url)


def _calls(raw: Any) -> dict[str, int]:
    stats = raw.info("commandstats")
    names = ("fcall", "evalsha", "function|load", "script|load")
    return {n: int(stats.get(f"cmdstat_{n}", {}).get("calls", 0)) for n in names}


def _pairs(reply: Any) -> dict[str, Any]:
    if isinstance(reply, dict):
        return {k.decode() if isinstance(k, bytes) else k: v for k, v in reply.items()}
    return {reply[i].decode(): reply[i + 1] for i in range(0, len(reply), 2)}


def _listed(raw: Any) -> dict[str, tuple[str, ...]]:
    """function name -> flags, of this build's library as FUNCTION LIST shows it."""
    [library] = raw.function_list(library=LIBRARY.name)
    out: dict[str, tuple[str, ...]] = {}
    for entry in _pairs(library)["functions"]:
        fields = _pairs(entry)
        out[fields["name"].decode()] = tuple(sorted(f.decode() for f in fields["flags"]))
    return out


def _work(fq: FairQueue) -> None:
    fq.push(Task.create("acme", payload={"n": 1}))
    fq.push_batch([Task.create("bob", payload={"n": n}) for n in range(3)])
    claimed = fq.claim_batch(2, worker_id="w")
    assert len(claimed) == 2
    assert fq.finish_batch([(claimed[0], "ok")]) == [True]
    fq.fail(claimed[1], RuntimeError("boom"))
    assert fq.get_stats()["finished"] >= 1


@pytest.mark.parametrize("kind", KINDS)
def test_the_library_loads_with_each_scripts_flags(
    kind: str, request: pytest.FixtureRequest
) -> None:
    raw = redis.Redis.from_url(_url(request, kind))
    try:
        assert raw.function_load(LIBRARY.code, replace=True) == LIBRARY.name.encode()
        listed = _listed(raw)
        assert set(listed) == set(LIBRARY.functions.values())
        for name, function in LIBRARY.functions.items():
            assert listed[function] == tuple(sorted(script_flags(SOURCES[name]))), name
    finally:
        raw.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_backend_runs_its_scripts_by_fcall_after_one_load(
    kind: str, request: pytest.FixtureRequest
) -> None:
    url = _url(request, kind)
    raw = redis.Redis.from_url(url)
    raw.function_flush()
    raw.config_resetstat()
    with FairQueue(RedisBackend.from_url(url, queue=f"fn-{uuid.uuid4().hex[:8]}")) as fq:
        _work(fq)
    calls = _calls(raw)
    raw.close()
    assert calls["function|load"] == 1
    assert calls["fcall"] >= 6
    assert calls["evalsha"] == 0
    assert calls["script|load"] == 0


@pytest.mark.parametrize("kind", KINDS)
def test_scripts_eval_keeps_evalsha(kind: str, request: pytest.FixtureRequest) -> None:
    url = _url(request, kind)
    raw = redis.Redis.from_url(url)
    raw.config_resetstat()
    queue = f"fn-{uuid.uuid4().hex[:8]}"
    with FairQueue(RedisBackend.from_url(url + "?scripts=eval", queue=queue)) as fq:
        _work(fq)
    with FairQueue(RedisBackend.from_url(url, queue=queue + "k", scripts="eval")) as fq:
        _work(fq)
    calls = _calls(raw)
    raw.close()
    assert calls["fcall"] == 0
    assert calls["function|load"] == 0
    assert calls["evalsha"] >= 12


def test_a_bad_scripts_mode_is_a_typed_error(valkey_server: Any) -> None:
    from fairque_core.domain.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="scripts"):
        RedisBackend.from_url(str(valkey_server.url) + "?scripts=lua")
    with pytest.raises(ConfigurationError, match="scripts"):
        RedisBackend.from_url(str(valkey_server.url), scripts="fcall")


def _acl_user(raw: Any, *rules: str) -> str:
    user = f"fq-{uuid.uuid4().hex[:8]}"
    raw.execute_command("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", *rules)
    return user


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "rules", [("-fcall", "-function"), ("-function",)], ids=["no-fcall", "no-function-load"]
)
def test_an_acl_refusing_functions_falls_back_to_evalsha(
    kind: str, rules: tuple[str, ...], request: pytest.FixtureRequest, caplog: Any
) -> None:
    url = _url(request, kind)
    raw = redis.Redis.from_url(url)
    raw.function_flush()  # with -function the user cannot load it
    user = _acl_user(raw, *rules)
    raw.config_resetstat()
    host, port = url.removeprefix("redis://").split("/")[0].split(":")
    try:
        with caplog.at_level(logging.WARNING, logger="fairque.redis"):
            backend = RedisBackend.from_url(
                f"redis://{user}:pw@{host}:{port}/0", queue=f"fn-{uuid.uuid4().hex[:8]}"
            )
            with FairQueue(backend) as fq:
                _work(fq)
                _work(fq)
        calls = _calls(raw)
        assert calls["evalsha"] >= 12  # every call ran, by EVALSHA
        assert calls["function|load"] == 0  # refused, so not counted
        refusals = [r for r in caplog.records if "refuses Redis Functions" in r.getMessage()]
        assert len(refusals) == 1  # logged once per client
    finally:
        raw.execute_command("ACL", "DELUSER", user)
        raw.close()


def test_an_acl_with_fcall_only_uses_a_library_loaded_by_an_administrator(
    valkey_server: Any,
) -> None:
    url = str(valkey_server.url)
    raw = redis.Redis.from_url(url)
    raw.function_load(LIBRARY.code, replace=True)
    user = _acl_user(raw, "-function")
    raw.config_resetstat()
    host, port = url.removeprefix("redis://").split("/")[0].split(":")
    try:
        backend = RedisBackend.from_url(
            f"redis://{user}:pw@{host}:{port}/0", queue=f"fn-{uuid.uuid4().hex[:8]}"
        )
        with FairQueue(backend) as fq:
            _work(fq)
        calls = _calls(raw)
        assert calls["fcall"] >= 6
        assert calls["evalsha"] == 0
    finally:
        raw.execute_command("ACL", "DELUSER", user)
        raw.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_pipelined_call_queues_fcall_and_a_missing_library_is_missing(
    kind: str, request: pytest.FixtureRequest
) -> None:
    url = _url(request, kind)
    raw = redis.Redis.from_url(url)
    client = redis.Redis.from_url(url)
    try:
        backend = RedisBackend(client, queue=f"fn-{uuid.uuid4().hex[:8]}")
        planner = backend._planner
        call = planner.stats()
        script = backend._scripts["stats"]
        assert isinstance(script, Script)
        assert script.uses_functions
        raw.function_flush()
        pipe = client.pipeline(transaction=False)
        pipe.ping()
        script.queue(pipe, planner.anchors, call.args)
        script(planner.anchors, call.args, client=pipe)
        pong, first, second = pipe.execute(raise_on_error=False)
        assert pong is True
        assert missing(first)
        assert missing(second)
        assert not missing(RuntimeError("Function not found"))  # only a server reply counts
        # alone, the script object loads the library and runs
        assert call.parse(script(planner.anchors, call.args))["finished"] == 0
        pipe = client.pipeline(transaction=False)
        script.queue(pipe, planner.anchors, call.args)
        [reply] = pipe.execute(raise_on_error=False)
        assert call.parse(reply)["finished"] == 0
    finally:
        client.close()
        raw.close()


@pytest.mark.cluster
def test_on_a_cluster_the_library_is_loaded_on_every_primary(valkey_cluster: Any) -> None:
    from redis.cluster import RedisCluster

    raw = RedisCluster.from_url(valkey_cluster.url)
    try:
        for node in raw.get_primaries():
            raw.get_redis_connection(node).config_resetstat()
        raw.function_flush()  # every primary (redis-py's routing of FUNCTION FLUSH)
        for node in raw.get_primaries():
            assert raw.get_redis_connection(node).function_list(library=LIBRARY.name) == []
        by_node: dict[str, str] = {}  # one queue on each primary
        while len(by_node) < len(raw.get_primaries()):
            queue = f"fn-{uuid.uuid4().hex[:8]}"
            by_node.setdefault(raw.get_node_from_key("{" + queue + "}").name, queue)
        for queue in by_node.values():
            with FairQueue(
                RedisBackend.from_url(valkey_cluster.url, cluster=True, queue=queue)
            ) as fq:
                _work(fq)
        for node in raw.get_primaries():
            one = raw.get_redis_connection(node)
            assert one.function_list(library=LIBRARY.name), f"no fairque library on {node.name}"
            stats = one.info("commandstats")
            assert int(stats.get("cmdstat_fcall", {}).get("calls", 0)) > 0
            # FCALL is routed by its first key: no COMMAND GETKEYS round trip per call
            assert "cmdstat_command|getkeys" not in stats
    finally:
        raw.close()


def test_at_maxmemory_a_failed_load_runs_the_call_by_evalsha(valkey_server: Any) -> None:
    url = str(valkey_server.url)
    raw = redis.Redis.from_url(url)
    backend = RedisBackend.from_url(url, queue=f"fn-{uuid.uuid4().hex[:8]}")
    before = raw.config_get("maxmemory")["maxmemory"]
    try:
        assert backend.claim(worker_id="w") == []  # loaded, memory policy checked
        raw.function_flush()
        raw.config_resetstat()
        raw.config_set("maxmemory", 1)  # every denyoom command is refused now
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            raw.function_load(LIBRARY.code, replace=True)
        # the claim (allow-oom) still runs: FUNCTION LOAD refused, this call by EVALSHA
        assert backend.claim(worker_id="w") == []
        script = backend._scripts["claim"]
        assert script.uses_functions  # not turned off for good
        calls = _calls(raw)
        # by EVALSHA: once when the server's script cache holds it, twice (NOSCRIPT, then the
        # call after SCRIPT LOAD) when this test runs first on its server
        assert calls["evalsha"] in (1, 2)
        assert calls.get("fcall", 0) == 1  # the refused one only
        raw.config_set("maxmemory", before)
        assert backend.claim(worker_id="w") == []  # and the next call loads the library
        calls = _calls(raw)
        assert calls["function|load"] >= 1
        assert calls["fcall"] >= 2  # the refused one and the one after the load
    finally:
        raw.config_set("maxmemory", before)
        backend.close()
        raw.close()
