"""The pytest plugin: loaded only when asked for, fixtures, options, and no server unless asked.

Each test runs pytest in a child process on a throwaway directory, so the plugin is loaded the
way a user's project loads it (``-p fairque_testing.plugin``, or ``pytest_plugins`` in the root
``conftest.py``; no ``pytest11`` entry point, ADR 73), outside this suite's configuration.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import redis

from fairque_redis.servers.cluster import EmbeddedCluster
from fairque_redis.servers.embedded import EmbeddedValkey

# A conftest that makes the embedded server impossible to start: a test that passes with it
# started no server.
NO_EMBEDDED = """
import fairque_redis.servers.embedded as embedded

def _refuse(*args, **kwargs):
    raise RuntimeError("the embedded Valkey was started")

embedded.EmbeddedValkey.__init__ = _refuse
"""


#: Other pytest plugins this environment installs, switched off in the child: they are not under
#: test, and importing them (hypothesis' above all) doubles a child's start-up. This suite's
#: own run switches valkey off too.
UNRELATED = ("-p", "no:hypothesispytest", "-p", "no:valkey")
#: How a user's project asks for the fairque plugin on the command line (or in addopts).
LOAD = ("-p", "fairque_testing.plugin")


def run_pytest(
    tmp_path: Path,
    test: str,
    *args: str,
    conftest: str = "",
    env: dict[str, str] | None = None,
    load: tuple[str, ...] = LOAD,
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_user.py").write_text(textwrap.dedent(test))
    if conftest:
        (tmp_path / "conftest.py").write_text(conftest)
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRQUE_TEST_")}
    child_env.update(env or {})
    child_env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *UNRELATED, *load, *args],
        cwd=tmp_path,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_no_entry_point_registers_the_plugin() -> None:
    from importlib.metadata import entry_points

    # installing fairque registers nothing in its users' test runs
    assert [ep for ep in entry_points(group="pytest11") if ep.value.startswith("fairque")] == []


def test_the_plugin_is_inert_unless_asked_for(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, "def test_nothing():\n    pass\n", "--help", load=())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "--fairque-url" not in result.stdout
    test = """
    def test_queue(fairque_memory_queue):
        pass
    """
    result = run_pytest(tmp_path, test, load=())
    assert result.returncode == 1
    assert "fixture 'fairque_memory_queue' not found" in result.stdout


def test_pytest_plugins_in_the_root_conftest_loads_it(tmp_path: Path) -> None:
    test = """
    def test_queue(fairque_memory_queue):
        assert fairque_memory_queue.name
    """
    conftest = 'pytest_plugins = ["fairque_testing.plugin"]\n'
    result = run_pytest(tmp_path, test, conftest=conftest, load=())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_fixtures_and_options_are_listed(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, "def test_nothing():\n    pass\n", "--fixtures", "--help")
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("--fairque-url", "--fairque-cluster", "FAIRQUE_TEST_URL"):
        assert name in result.stdout


def test_memory_queue_needs_no_server(tmp_path: Path) -> None:
    test = """
    from fairque_testing import Load, assert_fair, fairness_report, simulate

    def test_fair(fairque_memory_queue, fairque_clock, request):
        sim = simulate(fairque_memory_queue, Load.flood("a", 30) + Load.flood("b", 30))
        assert_fair(fairness_report(sim))
        assert "fairque_server" not in request.fixturenames
    """
    result = run_pytest(tmp_path, test, conftest=NO_EMBEDDED)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_a_server_queue_with_the_embedded_default(tmp_path: Path) -> None:
    test = """
    def test_queue(fairque_queue, fairque_server):
        assert fairque_server.embedded and not fairque_server.cluster
        assert fairque_queue.backend.__class__.__name__ == "RedisBackend"
        assert fairque_queue.name.startswith("fqtest-")
    """
    result = run_pytest(tmp_path, test)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.redis
@pytest.mark.parametrize("how", ["option", "env"])
def test_url_runs_the_tests_on_that_server_and_cleans_up(
    tmp_path: Path, valkey_server: EmbeddedValkey, how: str
) -> None:
    client: Any = redis.Redis.from_url(valkey_server.url)
    client.set("user-key", "kept")
    test = f"""
    from fairque_testing import Load, simulate

    def test_queue(fairque_queue, fairque_server):
        assert fairque_server.url == {valkey_server.url!r}
        assert not fairque_server.embedded
        fairque_queue.push_batch([])
        simulate(fairque_queue, Load.flood("a", 5) + Load.delayed("b", 2, delay=60))
        fairque_queue.set_tenant_weight("a", 2)
    """
    if how == "option":
        result = run_pytest(
            tmp_path, test, f"--fairque-url={valkey_server.url}", conftest=NO_EMBEDDED
        )
    else:
        env = {"FAIRQUE_TEST_URL": valkey_server.url}
        result = run_pytest(tmp_path, test, conftest=NO_EMBEDDED, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fairque: test queues on " + valkey_server.url in result.stdout
    # the test's queue left no key behind, and other keys were not touched
    assert list(client.scan_iter(match="fq:{fqtest-*")) == []
    assert client.get("user-key") == b"kept"
    client.delete("user-key")
    client.close()


def test_loading_the_plugin_imports_nothing_of_fairque() -> None:
    code = (
        "import sys, fairque_testing.plugin; "
        "print(sorted(m for m in sys.modules if m.startswith('fairque')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.strip() == "['fairque_testing', 'fairque_testing.plugin']"


@pytest.mark.redis
@pytest.mark.cluster
def test_cluster_option(tmp_path: Path, valkey_cluster: EmbeddedCluster) -> None:
    from redis.cluster import RedisCluster

    test = """
    from fairque_testing import Load, assert_fair, fairness_report, simulate

    def test_queue(fairque_queue, fairque_server):
        assert fairque_server.cluster
        sim = simulate(fairque_queue, Load.flood("a", 20) + Load.flood("b", 20), workers=2)
        assert_fair(fairness_report(sim))
    """
    result = run_pytest(tmp_path, test, f"--fairque-url={valkey_cluster.url}", "--fairque-cluster")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "(cluster)" in result.stdout
    client: Any = RedisCluster.from_url(valkey_cluster.url)
    try:
        assert list(client.scan_iter(match="fq:{fqtest-*", target_nodes="all")) == []
    finally:
        client.close()
