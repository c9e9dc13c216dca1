"""The Python examples of docs/plugins.md and of the README's plugin section run as written.

Each block is self-contained and runs in a namespace of its own (tests/cli/test_docs_run.py
also runs each in a fresh interpreter); here the objects a block defines are then exercised.
``connect()`` with no URL uses the shared local server, kept in a temporary
``FAIRQUE_DATA_DIR`` and stopped afterwards.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from fairque_core import FairQueue, InMemoryBackend, Task
from fairque_core.app.engine.queue_async import AsyncFairQueue
from fairque_core.app.plugins.host import PluginHost

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


@pytest.fixture(autouse=True)
def _no_autoload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")


def python_blocks(text: str) -> list[str]:
    return [match.group(1) for match in BLOCK.finditer(text)]


def run_blocks(blocks: list[str], where: str) -> list[dict[str, Any]]:
    """Run each block in a fresh namespace; the namespaces, in order."""
    spaces: list[dict[str, Any]] = []
    try:
        for index, block in enumerate(blocks):
            namespace: dict[str, Any] = {"__name__": "docs"}
            spaces.append(namespace)
            code = compile(block, f"<{where} python block {index + 1}>", "exec")
            exec(code, namespace)
    finally:
        for namespace in spaces:
            for value in list(namespace.values()):
                if isinstance(value, FairQueue):
                    value.close()
                assert not isinstance(value, AsyncFairQueue)
    return spaces


def plugin_section(readme: str) -> str:
    start = readme.index("## Plugins and tracing")
    return readme[start : readme.index("\n## ", start + 1)]


@pytest.fixture
def local_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A private shared local server (the one ``connect()`` uses), stopped afterwards."""
    from fairque_redis.servers import dev_server

    monkeypatch.setenv(dev_server.DATA_DIR_ENV, str(tmp_path / "fairque-data"))
    monkeypatch.delenv("FAIRQUE_REDIS_URL", raising=False)
    yield
    dev_server.stop()


def _defined(spaces: list[dict[str, Any]], name: str) -> Any:
    [found] = [space[name] for space in spaces if name in space]
    return found


def test_plugins_md_examples_run(local_server: Any) -> None:
    blocks = python_blocks((ROOT / "docs" / "plugins.md").read_text(encoding="utf-8"))
    assert len(blocks) >= 5
    spaces = run_blocks(blocks, "docs/plugins.md")
    # the first example counts finished tasks: drive one task through its queue
    queue = FairQueue(InMemoryBackend(), plugins=[counter := _defined(spaces, "CountFinished")()])
    queue.push(Task.create("tenant", payload={"n": uuid.uuid4().hex}))
    claimed = queue.claim()
    assert claimed is not None
    queue.finish(claimed, None)
    assert counter.finished == 1
    # the async-aware wrapper covers the awaited run
    timing = _defined(spaces, "AsyncAwareTiming")()
    host = PluginHost([timing], load_entrypoints=False)

    async def handler() -> int:
        return 7

    made = host.execute(Task.create("tenant"), handler)
    assert timing.durations == []
    assert asyncio.run(made) == 7  # type: ignore[arg-type]
    assert len(timing.durations) == 1


def test_readme_plugin_examples_run(local_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    installed: list[object] = []  # the global provider can be set once per process: record it
    monkeypatch.setattr(trace, "set_tracer_provider", installed.append)
    section = plugin_section((ROOT / "README.md").read_text(encoding="utf-8"))
    blocks = python_blocks(section)
    assert len(blocks) == 2
    spaces = run_blocks(blocks, "README.md")
    provider = _defined(spaces, "provider")
    try:
        assert installed == [provider]
        assert isinstance(provider, TracerProvider)
        assert _defined(spaces, "traced").name == "default"
    finally:
        provider.shutdown()
