"""The hook contract: documented specs, misbehaving plugins, entry-point discovery."""

from __future__ import annotations

import importlib.util
import inspect
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest

from fairque_core import PluginError, Task
from fairque_core.app.plugins.host import PluginHost
from fairque_core.ports import hooks as specs_module
from fairque_core.ports.hooks import hookimpl, hookspec

ROOT = Path(__file__).resolve().parents[2]
FIRSTRESULT_PHRASE = "Stops at the first non-None result"


def hookspec_functions(module: types.ModuleType) -> dict[str, Any]:
    """Every function of ``module`` marked as a fairque hook spec."""
    marker = f"{specs_module.PROJECT_NAME}_spec"
    return {
        name: fn
        for name, fn in vars(module).items()
        if inspect.isfunction(fn) and getattr(fn, marker, None) is not None
    }


def undocumented(module: types.ModuleType) -> list[str]:
    """Specs without a docstring, and firstresult specs whose docstring omits the phrase."""
    marker = f"{specs_module.PROJECT_NAME}_spec"
    bad = []
    for name, fn in hookspec_functions(module).items():
        doc = inspect.getdoc(fn) or ""
        firstresult = bool(getattr(fn, marker).get("firstresult"))
        if len(doc) < 20 or (firstresult and FIRSTRESULT_PHRASE not in doc):
            bad.append(name)
    return bad


def test_every_hookspec_is_documented() -> None:
    assert len(hookspec_functions(specs_module)) == 7
    assert undocumented(specs_module) == []


def test_the_docstring_check_catches_a_missing_docstring() -> None:
    fake = types.ModuleType("fake_specs")

    @hookspec
    def fairque_thing_happen(task: Task) -> None:
        pass

    @hookspec(firstresult=True)
    def fairque_thing_choose(task: Task) -> str | None:
        """Choose a thing for the task, the first plugin wins over the others."""

    fake.fairque_thing_happen = fairque_thing_happen  # type: ignore[attr-defined]
    fake.fairque_thing_choose = fairque_thing_choose  # type: ignore[attr-defined]
    assert sorted(undocumented(fake)) == ["fairque_thing_choose", "fairque_thing_happen"]


def test_every_hookspec_appears_in_the_plugin_docs() -> None:
    text = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    missing = [name for name in hookspec_functions(specs_module) if f"`{name}" not in text]
    assert missing == []


def test_host_knows_exactly_the_specs() -> None:
    host = PluginHost(load_entrypoints=False)
    assert host.hook_names() == sorted(hookspec_functions(specs_module))


class Exploding:
    fairque_plugin_name = "exploding"

    @hookimpl
    def fairque_payload_decode(self, content_type: str) -> dict[str, Any]:
        raise LookupError(f"cannot decode {content_type}")

    @hookimpl
    def fairque_configure(self) -> None:
        raise RuntimeError("bad config")


def test_raising_plugin_is_reported_by_name() -> None:
    host = PluginHost([Exploding()], load_entrypoints=False)
    with pytest.raises(PluginError) as info:
        host.decode("application/json", b"{}")
    assert info.value.plugin == "exploding"
    assert "exploding" in str(info.value)
    assert isinstance(info.value.error, LookupError)
    with pytest.raises(PluginError) as configured:
        host.configure(object())
    assert configured.value.plugin == "exploding"
    assert configured.value.hook == "fairque_configure"


class Misspelt:
    fairque_plugin_name = "typo-plugin"

    @hookimpl
    def fairque_task_evnt(self, event: str) -> None:
        pass


def test_check_pending_catches_a_misspelt_hook() -> None:
    with pytest.raises(PluginError) as info:
        PluginHost([Misspelt()], load_entrypoints=False)
    assert info.value.plugin == "typo-plugin"
    assert info.value.hook == "check_pending"
    assert "fairque_task_evnt" in str(info.value)


def make_distribution(root: Path, module: str, group: str = "fairque") -> None:
    (root / f"{module}.py").write_text(
        textwrap.dedent(
            """
            from fairque_core.ports.hooks import hookimpl

            SEEN = []

            @hookimpl
            def fairque_task_event(event, task):
                SEEN.append((event, task.task_id))
            """
        ),
        encoding="utf-8",
    )
    info = root / f"{module}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(f"[{group}]\naudit-demo = {module}\n", encoding="utf-8")


def test_entry_point_plugins_are_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = "fairque_test_ep_plugin"
    make_distribution(tmp_path, module)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.delenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    try:
        host = PluginHost(load_entrypoints=True)
        assert "audit-demo" in host.plugin_names()
        host.task_event("pushed", Task.create("u", task_id="t-9"), "q")
        assert sys.modules[module].SEEN == [("pushed", "t-9")]

        monkeypatch.setenv("FAIRQUE_DISABLE_PLUGIN_AUTOLOAD", "1")
        assert "audit-demo" not in PluginHost().plugin_names()
        assert "audit-demo" in PluginHost(load_entrypoints=True).plugin_names()
    finally:
        sys.modules.pop(module, None)


def test_broken_entry_point_is_a_plugin_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = "fairque_test_ep_broken"
    make_distribution(tmp_path, module)
    (tmp_path / f"{module}.py").write_text("raise ImportError('half installed')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(PluginError, match="half installed") as info:
        PluginHost(load_entrypoints=True)
    assert "fairque" in info.value.plugin


def load_example() -> types.ModuleType:
    path = ROOT / "examples" / "plugins" / "audit_plugin.py"
    spec = importlib.util.spec_from_file_location("fairque_example_audit_plugin", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # attrs resolves annotations through sys.modules
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_example_audit_plugin_records_events() -> None:
    audit = load_example().AuditPlugin(limit=3)
    host = PluginHost([audit], load_entrypoints=False)

    class Config:
        name = "orders"

    host.configure(Config())
    task = Task.create("tenant-a", task_id="t-1")
    headers = host.push_headers(task)
    assert "x-audit-pushed-at" in headers
    for event in ("pushed", "started", "finished", "pushed"):
        host.task_event(event, task, "", run_seconds=0.1)
    assert audit.events_for("t-1") == ["started", "finished", "pushed"]  # limit 3
    assert audit.records[-1].queue == "orders"
    assert audit.records[-1].info == {"run_seconds": "0.1"}
