"""PluginHost: the typed facade over pluggy that the engine and workers use.

Nothing outside this module touches ``pm.hook``. Every method passes keyword arguments to its
hook, checks what comes back and turns a misbehaving plugin into a
:class:`~fairque_core.domain.errors.PluginError` that names it.

Order and precedence
    The defaults (:data:`~fairque_core.app.plugins.builtin.DEFAULT_PLUGINS`) are registered
    first, then
    plugins from the ``fairque`` entry-point group, then the ``plugins`` given to the
    constructor, so that plugins listed first are asked first (they are registered in reverse:
    pluggy calls the newest registration first). ``register()`` adds a plugin with the highest
    precedence. ``tryfirst``/``trylast`` still apply on top.

Errors
    * firstresult hooks (codec, retry decision) and ``configure``: a plugin that raises is
      reported as ``PluginError(plugin, hook, error)``. Exceptions that are fairque errors
      on purpose (``TaskSerializationError``, ``PayloadTooLargeError``...) pass unchanged.
    * ``execute``: the exception of the user's ``call()`` propagates unchanged, whatever
      wrappers it passed through; anything else a plugin raises becomes a ``PluginError``.
    * broadcasts (``task_event``, ``push_headers``): each implementation is called on its own;
      one that raises is logged on the ``fairque.plugins`` logger as a ``PluginError`` naming
      it, and the remaining ones still run. Events are emitted after the backend changed
      state, so raising would report a failure for work that succeeded (and a metrics plugin
      must never lose a task). ``strict=True`` raises instead (for tests).

This is the reference path: every hook is asked through pluggy, even when only the defaults
answer. The accelerator ``plugin_shortcuts`` (``fairque_core.app.accel.plugin_shortcuts``)
is a subclass that skips a hook whose only implementation is a default's or that nobody
implements; the engines' constructors build it when its switch is on.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any

import pluggy

from fairque_core.app import context as task_context
from fairque_core.app.plugins.builtin import DEFAULT_PLUGINS, retry_decision
from fairque_core.domain.errors import FairQueueError, PluginError, TaskSerializationError
from fairque_core.ports import hooks as hookspecs

if TYPE_CHECKING:
    from fairque_core.domain.models import Task
    from fairque_core.domain.retry import RetryDecision

__all__ = ["AUTOLOAD_ENV", "ENTRY_POINT_GROUP", "PluginHost", "plugin_name_for"]

ENTRY_POINT_GROUP = "fairque"
AUTOLOAD_ENV = "FAIRQUE_DISABLE_PLUGIN_AUTOLOAD"

_log = logging.getLogger("fairque.plugins")


def plugin_name_for(plugin: object) -> str:
    """A readable name for ``plugin``: its ``fairque_plugin_name``, module or class name."""
    named = getattr(plugin, "fairque_plugin_name", None)
    if isinstance(named, str) and named:
        return named
    if isinstance(plugin, ModuleType):
        return plugin.__name__
    if isinstance(plugin, type):
        return f"{plugin.__module__}.{plugin.__qualname__}"
    kind = type(plugin)
    return f"{kind.__module__}.{kind.__qualname__}"


def _code_of(function: Callable[..., object]) -> object:
    return getattr(inspect.unwrap(function), "__code__", None)


class PluginHost:
    """The plugins of one queue (or several), behind typed methods.

    ``plugins`` are hook implementations (objects or modules with ``@hookimpl`` functions).
    ``load_entrypoints`` loads the ``fairque`` entry-point group; None means "unless
    ``FAIRQUE_DISABLE_PLUGIN_AUTOLOAD`` is set". ``defaults=False`` leaves out the default
    JSON codec, retry policy and executor. ``strict=True`` raises broadcast failures instead
    of logging them.
    """

    def __init__(
        self,
        plugins: Iterable[object] = (),
        *,
        load_entrypoints: bool | None = None,
        defaults: bool = True,
        strict: bool = False,
    ) -> None:
        self._pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self._pm.add_hookspecs(hookspecs)
        self._strict = strict
        if defaults:
            for factory in DEFAULT_PLUGINS:
                self._register(factory(), None)
        if load_entrypoints is None:
            load_entrypoints = not os.environ.get(AUTOLOAD_ENV)
        if load_entrypoints:
            self._load_entrypoints()
        for plugin in reversed(tuple(plugins)):
            self._register(plugin, None)
        self._check_pending()

    # ------------------------------------------------------------------ registration
    def register(self, plugin: object, name: str | None = None) -> str:
        """Add ``plugin`` with the highest precedence; returns the name it got.

        A plugin whose hooks do not match the specs raises ``PluginError`` naming it.
        """
        registered = self._register(plugin, name)
        self._check_pending()
        return registered

    def unregister(self, name: str) -> object | None:
        """Remove the plugin registered as ``name``; returns it (None if unknown)."""
        plugin: object | None = self._pm.get_plugin(name)
        if plugin is None:
            return None
        self._pm.unregister(plugin, name=name)
        return plugin

    def plugin_names(self) -> list[str]:
        """Names of the registered plugins, in registration order (defaults first)."""
        return [name for name, _plugin in self._pm.list_name_plugin()]

    def get_plugin(self, name: str) -> object | None:
        found: object | None = self._pm.get_plugin(name)
        return found

    def has_plugin(self, name: str) -> bool:
        return self._pm.has_plugin(name)

    def _unique_name(self, plugin: object, name: str | None) -> str:
        base = name or plugin_name_for(plugin)
        candidate, counter = base, 1
        while self._pm.has_plugin(candidate):
            counter += 1
            candidate = f"{base}#{counter}"
        return candidate

    def _register(self, plugin: object, name: str | None) -> str:
        chosen = self._unique_name(plugin, name)
        try:
            registered = self._pm.register(plugin, name=chosen)
        except pluggy.PluginValidationError as exc:
            raise PluginError(chosen, "register", exc) from exc
        except ValueError as exc:  # already registered under another name
            raise PluginError(chosen, "register", exc) from exc
        except Exception as exc:  # a historic hook (configure) replayed into it failed
            raise PluginError(chosen, "fairque_configure", exc) from exc
        if registered is None:  # the name is blocked
            raise PluginError(chosen, "register", ValueError("this plugin name is blocked"))
        return registered

    def _load_entrypoints(self) -> None:
        """Register every object of the ``fairque`` entry-point group, named as its entry point.

        An entry point may name a module, an object or a class; a class is instantiated with no
        arguments (its hooks are instance methods). A distribution found twice on ``sys.path``
        is loaded once; a name already registered or blocked is skipped.
        """
        from importlib.metadata import distributions

        seen: set[tuple[str, str]] = set()
        for dist in list(distributions()):
            for ep in dist.entry_points:
                if ep.group != ENTRY_POINT_GROUP or (ep.name, ep.value) in seen:
                    continue
                seen.add((ep.name, ep.value))
                if self._pm.get_plugin(ep.name) is not None or self._pm.is_blocked(ep.name):
                    continue
                try:
                    loaded = ep.load()
                    plugin = loaded() if isinstance(loaded, type) else loaded
                except Exception as exc:
                    raise PluginError(f"entry point {ep.name}={ep.value}", "load", exc) from exc
                self._register(plugin, ep.name)

    def _check_pending(self) -> None:
        try:
            self._pm.check_pending()
        except pluggy.PluginValidationError as exc:
            raise PluginError(self._name_of(exc.plugin), "check_pending", exc) from exc

    def _name_of(self, plugin: object) -> str:
        return self._pm.get_name(plugin) or plugin_name_for(plugin)

    # ------------------------------------------------------------------ error attribution
    def _hook(self, name: str) -> pluggy.HookCaller:
        caller: pluggy.HookCaller = getattr(self._pm.hook, name)
        return caller

    def _blame(self, hook: str, error: BaseException) -> str:
        """The plugin whose implementation raised ``error`` (deepest frame that is one)."""
        owners = {
            _code_of(impl.function): impl.plugin_name for impl in self._hook(hook).get_hookimpls()
        }
        found = f"<unknown {hook} implementation>"
        tb: TracebackType | None = error.__traceback__
        while tb is not None:
            owner = owners.get(tb.tb_frame.f_code)
            if owner is not None:
                found = owner
            tb = tb.tb_next
        return found

    def _call_firstresult(self, hook: str, **kwargs: Any) -> tuple[Any, str]:
        """The first non-None result and the name of the plugin that gave it."""
        caller = self._hook(hook)
        impls = caller.get_hookimpls()
        if any(impl.wrapper or impl.hookwrapper for impl in impls):
            try:
                return caller(**kwargs), self._first_impl_name(hook)
            except FairQueueError:
                raise
            except Exception as exc:
                raise PluginError(self._blame(hook, exc), hook, exc) from exc
        for impl in reversed(impls):
            try:
                result = impl.function(*[kwargs[arg] for arg in impl.argnames])
            except FairQueueError:
                raise
            except Exception as exc:
                raise PluginError(impl.plugin_name, hook, exc) from exc
            if result is not None:
                return result, impl.plugin_name
        return None, hookspecs.PROJECT_NAME

    def _broadcast(self, hook: str, **kwargs: Any) -> None:
        caller = self._hook(hook)
        impls = caller.get_hookimpls()
        if any(impl.wrapper or impl.hookwrapper for impl in impls):
            # Wrappers need pluggy's own call loop; failures are still attributed.
            try:
                caller(**kwargs)
            except Exception as exc:
                self._report(PluginError(self._blame(hook, exc), hook, exc), exc)
            return
        # pluggy calls the newest registration first; keep that order.
        for impl in reversed(impls):
            try:
                impl.function(*[kwargs[arg] for arg in impl.argnames])
            except Exception as exc:
                self._report(PluginError(impl.plugin_name, hook, exc), exc)

    def _report(self, error: PluginError, cause: Exception) -> None:
        if self._strict:
            raise error from cause
        _log.error("%s", error, exc_info=cause)

    # ------------------------------------------------------------------ typed hooks
    def encode(self, task: Task) -> tuple[bytes, str]:
        """``(body, content_type)`` from the codec that encodes; TaskSerializationError if none."""
        hook = "fairque_payload_encode"
        result, owner = self._call_firstresult(hook, task=task)
        if result is None:
            raise TaskSerializationError(f"no codec plugin encoded the payload of {task.task_id}")
        if (
            not isinstance(result, tuple)
            or len(result) != 2
            or not isinstance(result[0], (bytes, bytearray, memoryview))
            or not isinstance(result[1], str)
        ):
            bad = TypeError(f"expected (bytes, str), got {type(result).__name__}")
            raise PluginError(owner, hook, bad)
        return bytes(result[0]), result[1]

    def decode(self, content_type: str, body: bytes) -> dict[str, Any]:
        """The payload in ``body``; TaskSerializationError when no codec understands it."""
        hook = "fairque_payload_decode"
        result, _owner = self._call_firstresult(hook, content_type=content_type, body=body)
        if result is None:
            raise TaskSerializationError(f"no codec plugin decodes content type {content_type!r}")
        if not isinstance(result, dict):
            raise TaskSerializationError(
                f"the {content_type!r} payload decodes to {type(result).__name__}, not a dict"
            )
        return result

    def push_headers(self, task: Task, *, queue: str = "") -> dict[str, str]:
        """``task.headers`` plus whatever plugins add (tracing context), as a new dict.

        A plugin that raises is reported and its partial changes are dropped.
        """
        headers = dict(task.headers)
        hook = "fairque_push_headers"
        for impl in reversed(self._hook(hook).get_hookimpls()):
            snapshot = dict(headers)
            values = {"task": task, "headers": headers, "queue": queue}
            try:
                impl.function(*[values[arg] for arg in impl.argnames])
                bad = [
                    k for k, v in headers.items() if not (isinstance(k, str) and isinstance(v, str))
                ]
                if bad:
                    raise TypeError(f"headers must map str to str; bad keys: {bad!r}")
            except Exception as exc:
                headers.clear()
                headers.update(snapshot)
                self._report(PluginError(impl.plugin_name, hook, exc), exc)
        return headers

    def has_event_listeners(self) -> bool:
        """Whether any plugin implements ``fairque_task_event`` (callers may skip building
        events nobody receives; plugins registered later count)."""
        return bool(self._hook("fairque_task_event").get_hookimpls())

    def task_event(self, event: str, task: Task, queue: str, **info: Any) -> None:
        """Tell every plugin about ``event``; failures are logged (raised when strict)."""
        self._broadcast("fairque_task_event", event=event, task=task, queue=queue, info=info)

    def execute(self, task: Task, call: Callable[[], object], *, queue: str = "") -> object:
        """Run ``call`` through the execution wrappers, with the task's context current
        (:func:`fairque_core.current_task_context`); returns its result.

        The exception raised by ``call`` itself propagates unchanged; a plugin's own failure
        is a PluginError.
        """
        call = task_context.bind(task, call)  # current_task_context() inside the handler
        hook = "fairque_task_execute"
        state: dict[str, Any] = {"called": False, "error": None}

        def guarded() -> object:
            state["called"] = True
            try:
                return call()
            except BaseException as exc:
                state["error"] = exc
                raise

        caller = self._hook(hook)
        if not caller.get_hookimpls():
            return call()
        try:
            result = caller(task=task, call=guarded, queue=queue)
        except BaseException as exc:
            if exc is state["error"] or isinstance(exc, FairQueueError):
                raise
            if not isinstance(exc, Exception):
                raise
            raise PluginError(self._blame(hook, exc), hook, exc) from exc
        if not state["called"] and result is None:
            missing = RuntimeError("no plugin ran the task (register an executor)")
            raise PluginError(hookspecs.PROJECT_NAME, hook, missing)
        return result

    def retry_decide(self, task: Task, error: BaseException, attempt: int) -> RetryDecision:
        """The first policy's decision; the core default policy when no plugin decides."""
        hook = "fairque_retry_decide"
        result, owner = self._call_firstresult(hook, task=task, error=error, attempt=attempt)
        if result is None:
            return retry_decision(task, error, attempt)
        if not hasattr(result, "retry_delay") or not hasattr(result, "failure_type"):
            bad = TypeError(f"expected a RetryDecision, got {type(result).__name__}")
            raise PluginError(owner, hook, bad)
        decision: RetryDecision = result
        return decision

    def configure(self, config: object) -> None:
        """Give ``config`` to every plugin, and to plugins registered later (historic)."""
        hook = "fairque_configure"
        try:
            self._hook(hook).call_historic(kwargs={"config": config})
        except FairQueueError:
            raise
        except Exception as exc:
            raise PluginError(self._blame(hook, exc), hook, exc) from exc

    # ------------------------------------------------------------------ introspection
    def _first_impl_name(self, hook: str) -> str:
        impls = self._hook(hook).get_hookimpls()
        plain = [i for i in impls if not (i.wrapper or i.hookwrapper)]
        return plain[-1].plugin_name if plain else hookspecs.PROJECT_NAME

    def hook_names(self) -> list[str]:
        """Every hook the host knows (the ``fairque_*`` specs)."""
        return sorted(n for n in dir(self._pm.hook) if n.startswith("fairque_"))

    def implementations(self, hook: str) -> Iterator[str]:
        """Names of the plugins implementing ``hook``, in call order."""
        for impl in reversed(self._hook(hook).get_hookimpls()):
            yield impl.plugin_name

    def __repr__(self) -> str:
        return f"PluginHost(plugins={self.plugin_names()!r})"
