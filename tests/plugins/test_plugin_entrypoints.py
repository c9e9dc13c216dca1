"""Loading plugins from the ``fairque`` entry-point group, with the example audit plugin.

A throw-away ``*.dist-info`` directory on ``sys.path`` declares the entry point, exactly as an
installed package would; ``importlib.metadata`` finds it there.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from fairque_core import FairQueue, QueueConfig, Task
from fairque_core.app.plugins.host import AUTOLOAD_ENV, PluginHost
from fairque_core.domain.errors import PluginError
from fairque_redis.backends.backend import RedisBackend

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "plugins"


def install_dist(root: Path, name: str, entry_points: str) -> None:
    """Write a minimal ``name-0.1.dist-info`` declaring ``entry_points`` under ``root``."""
    info = root / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv(AUTOLOAD_ENV, raising=False)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "audit_plugin", raising=False)
    return tmp_path


@pytest.mark.redis
def test_example_audit_plugin_loads_from_entry_point_and_sees_events(
    site: Path, valkey_server: Any
) -> None:
    install_dist(site, "fairque_audit_example", "[fairque]\naudit = audit_plugin:AuditPlugin\n")
    name = f"ep-{uuid.uuid4().hex[:10]}"
    config = QueueConfig(name=name)
    backend = RedisBackend.from_url(valkey_server.url, queue=name, config=config)
    with FairQueue(backend, config=config) as queue:
        host = queue.plugins
        assert isinstance(host, PluginHost)
        audit: Any = host.get_plugin("audit")
        assert audit is not None
        assert type(audit).__name__ == "AuditPlugin"  # the class was instantiated
        assert audit.queue_name == name  # fairque_configure reached it
        task = Task.create("tenant-a", payload={"n": 1})
        queue.push(task)
        claimed = queue.claim()
        assert claimed is not None
        assert "x-audit-pushed-at" in claimed.headers  # its fairque_push_headers ran
        queue.finish(claimed, {"ok": True})
        assert audit.events_for(task.task_id) == ["pushed", "started", "finished"]
        (started,) = [r for r in audit.records if r.event == "started"]
        assert started.queue == name
        assert started.tenant == "tenant-a"


def test_autoload_can_be_turned_off(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_dist(site, "fairque_audit_example", "[fairque]\naudit = audit_plugin:AuditPlugin\n")
    assert PluginHost().has_plugin("audit")
    assert not PluginHost(load_entrypoints=False).has_plugin("audit")
    monkeypatch.setenv(AUTOLOAD_ENV, "1")
    assert not PluginHost().has_plugin("audit")


def test_entry_point_may_name_a_module_or_an_instance(site: Path) -> None:
    (site / "ep_instance_mod.py").write_text(
        "from audit_plugin import AuditPlugin\nINSTANCE = AuditPlugin(limit=5)\n"
    )
    install_dist(
        site,
        "fairque_more_examples",
        "[fairque]\nas_instance = ep_instance_mod:INSTANCE\nas_module = audit_plugin\n",
    )
    host = PluginHost()
    instance: Any = host.get_plugin("as_instance")
    assert instance is not None
    assert instance.limit == 5
    assert host.has_plugin("as_module")
    assert "as_instance" in list(host.implementations("fairque_task_event"))


def test_a_broken_entry_point_is_a_plugin_error(site: Path) -> None:
    install_dist(site, "fairque_broken", "[fairque]\nbroken = no_such_module_xyz:Plugin\n")
    with pytest.raises(PluginError, match="broken"):
        PluginHost()
