"""Sentinel URLs (ADR 75): what they name, and typed errors that never echo a password."""

from __future__ import annotations

import argparse

import pytest

from fairque_cli.checks import check_url
from fairque_core import ConfigurationError
from fairque_redis.backends.client_options import plan_client
from fairque_redis.backends.sentinel import SENTINEL_PORT, parse_sentinel_url


def test_a_full_url_names_sentinels_service_db_and_credentials() -> None:
    target = parse_sentinel_url(
        "rediss+sentinel://app:s3cret@s1:26380,s2,[::1]:26381/orders/3"
        "?socket_timeout=2&sentinel_password=sp"
    )
    assert target.sentinels == (("s1", 26380), ("s2", SENTINEL_PORT), ("::1", 26381))
    assert (target.service, target.db, target.tls) == ("orders", 3, True)
    assert (target.username, target.password) == ("app", "s3cret")
    assert target.options == {"socket_timeout": "2"}
    assert target.sentinel_options == {"password": "sp"}
    assert "s3cret" not in repr(target)
    assert "sp" not in repr(target).replace("sentinels", "")


def test_a_bare_password_and_the_default_db() -> None:
    target = parse_sentinel_url("valkey+sentinel://pw@h1/mymaster")
    assert (target.username, target.password, target.db, target.tls) == (None, "pw", 0, False)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("redis+sentinel://:pw@h1:26379", "no service name"),
        ("redis+sentinel://:pw@h1:26379/", "no service name"),
        ("redis+sentinel://:pw@h1:notaport/m", "bad port"),
        ("redis+sentinel://:pw@h1:70000/m", "bad port"),
        ("redis+sentinel://:pw@h1,,h2/m", "empty sentinel address"),
        ("redis+sentinel://:pw@h1/m/x", "the path is /service"),
        ("redis+sentinel://:pw@h1/m/0/extra", "the path is /service"),
    ],
)
def test_malformed_urls_are_configuration_errors_without_the_password(url: str, why: str) -> None:
    with pytest.raises(ConfigurationError, match=why) as info:
        parse_sentinel_url(url)
    assert "pw" not in str(info.value).replace("path", "")


def test_the_plan_refuses_a_cluster_and_unknown_options() -> None:
    with pytest.raises(ConfigurationError, match="cannot be a cluster"):
        plan_client(
            "redis+sentinel://h1/m",
            queue=None,
            cluster=True,
            config=None,
            allow_eviction=False,
            redis_opts={},
        )
    with pytest.raises(ConfigurationError, match="unknown option"):
        plan_client(
            "redis+sentinel://h1/m?bogus=1",
            queue=None,
            cluster=False,
            config=None,
            allow_eviction=False,
            redis_opts={},
        )
    plan = plan_client(
        "redis+sentinel://h1/m?sentinel_username=u",
        queue=None,
        cluster=False,
        config=None,
        allow_eviction=False,
        redis_opts={},
    )
    assert plan.sentinel is not None
    assert plan.sentinel.service == "m"


def test_the_cli_accepts_sentinel_urls_and_refuses_bad_ones() -> None:
    assert check_url("redis+sentinel://h1:26379,h2/m") == "redis+sentinel://h1:26379,h2/m"
    with pytest.raises(argparse.ArgumentTypeError, match="no service name"):
        check_url("redis+sentinel://h1:26379")
