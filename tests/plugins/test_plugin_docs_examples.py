"""The Python examples of docs/plugins.md and of the README's plugin section run as written.

The blocks of one document run in order in one namespace (like a doctest session). Given:
``backend`` (an InMemoryBackend) and ``url`` (the embedded Valkey, database 5 so nothing lands
in the other tests' queues).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from fairque_core import FairQueue, InMemoryBackend, Task
from fairque_core.app.engine_async import AsyncFairQueue
from fairque_core.app.plugin_host import PluginHost

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


@pytest.fixture(autouse=True)
def _no_autoload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")


def python_blocks(text: str) -> list[str]:
    return [match.group(1) for match in BLOCK.finditer(text)]


def run_blocks(blocks: list[str], url: str, where: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"backend": InMemoryBackend(), "url": url, "__name__": "docs"}
    try:
        for index, block in enumerate(blocks):
            code = compile(block, f"<{where} python block {index + 1}>", "exec")
            exec(code, namespace)
    finally:
        for value in list(namespace.values()):
            if isinstance(value, FairQueue):
                value.close()
            assert not isinstance(value, AsyncFairQueue)
    return namespace


def plugin_section(readme: str) -> str:
    start = readme.index("## Plugins and tracing")
    return readme[start : readme.index("\n## ", start + 1)]


@pytest.fixture
def url(valkey_server: Any) -> str:
    return f"{valkey_server.url}/5"


def test_plugins_md_examples_run(url: str) -> None:
    blocks = python_blocks((ROOT / "docs" / "plugins.md").read_text(encoding="utf-8"))
    assert len(blocks) >= 5
    namespace = run_blocks(blocks, url, "docs/plugins.md")
    # the first example counts finished tasks: drive one task through its queue
    queue = FairQueue(InMemoryBackend(), plugins=[counter := namespace["CountFinished"]()])
    queue.push(Task.create("tenant", payload={"n": uuid.uuid4().hex}))
    claimed = queue.claim()
    assert claimed is not None
    queue.finish(claimed, None)
    assert counter.finished == 1
    # the async-aware wrapper covers the awaited run
    timing = namespace["AsyncAwareTiming"]()
    host = PluginHost([timing], load_entrypoints=False)

    async def handler() -> int:
        return 7

    made = host.execute(Task.create("tenant"), handler)
    assert timing.durations == []
    assert asyncio.run(made) == 7  # type: ignore[arg-type]
    assert len(timing.durations) == 1


def test_readme_plugin_examples_run(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    installed: list[object] = []  # the global provider can be set once per process: record it
    monkeypatch.setattr(trace, "set_tracer_provider", installed.append)
    section = plugin_section((ROOT / "README.md").read_text(encoding="utf-8"))
    blocks = python_blocks(section)
    assert len(blocks) == 2
    namespace = run_blocks(blocks, url, "README.md")
    provider = namespace["provider"]
    try:
        assert installed == [provider]
        assert isinstance(provider, TracerProvider)
        assert namespace["traced"].name == "default"
    finally:
        provider.shutdown()
