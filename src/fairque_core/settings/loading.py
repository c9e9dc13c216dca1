"""Configuration loading: YAML files, plain dicts and ``FAIRQUE_<SECTION>__<KEY>`` overrides.

The values and their rules live in :mod:`fairque_core.settings.config`; this module turns outside
data into them (and back). ``FairQueueConfig.from_yaml`` / ``from_dict`` / ``to_dict`` /
``to_yaml`` call the functions here.

* One cattrs converter (the pyyaml preconf one): unknown keys are rejected, numbers and booleans
  are not coerced (``"10"`` is not an int, ``1`` is not a bool). A cattrs error tree becomes one
  ``ConfigurationError`` whose ``path`` and ``value`` are the first problem's.
* Environment variables ``FAIRQUE_<SECTION>__<KEY>`` override file values, parsed by the
  field's type: ``FAIRQUE_REDIS__PORT=6380``, ``FAIRQUE_WORKER__ASSIGNED_TENANTS=a,b`` (or a JSON
  list), ``FAIRQUE_QUEUE__STRICT_TIERS=true``, ``FAIRQUE_QUEUE__TENANT_WEIGHTS={"a": 2}``.
* Fields that were removed (:data:`REMOVED_FIELDS`: the seed's settings that never had an
  effect) are still accepted, in a file or the environment, with a ``DeprecationWarning`` that
  says what to use instead; their values are ignored, as they always were.
"""

from __future__ import annotations

import json
import os
import typing
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import attrs
import yaml
from cattrs.errors import (
    AttributeValidationNote,
    BaseValidationError,
    ForbiddenExtraKeysError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_unstructure_fn, override
from cattrs.preconf.pyyaml import make_converter

from fairque_core.domain.errors import ConfigurationError
from fairque_core.domain.limits import LIMIT_FIELDS
from fairque_core.domain.validation import is_digits
from fairque_core.settings.values import (
    LimitsConfig,
    QueueConfig,
    RedisConfig,
    TierConfig,
    WorkerConfig,
    _FieldError,
    _shown,
    _stored,
)

__all__ = [
    "ENV_PREFIX",
    "REMOVED_FIELDS",
    "config_from_dict",
    "config_from_yaml",
    "config_to_dict",
    "config_to_yaml",
]

ENV_PREFIX = "FAIRQUE_"

_RETRIES = (
    "set max_retries per task (Task.create(..., max_retries=N), @task(max_retries=N)); "
    "cap it for a queue with fairque_plugins.RetryPolicy(max_retries=N)"
)

#: ``section -> field -> what to use instead`` for the fields that were validated but never
#: read (the seed's). A file or env var naming one loads with a DeprecationWarning.
REMOVED_FIELDS: Mapping[str, Mapping[str, str]] = {
    "redis": {
        "decode_responses": "fairque always reads raw bytes (task bodies are binary)",
    },
    "queue": {
        "stats_prefix": "every key of a queue is named from queue.name (fq:{<name>}:...)",
        "lua_script_cache_size": "fairque loads its fixed set of Lua scripts once per client",
        "max_retry_attempts": _RETRIES,
        "default_max_retries": _RETRIES,
        "default_task_timeout": "use worker.task_timeout_seconds",
        "enable_pipeline_optimization": "batch calls (push_batch, batched claims) always "
        "take one round trip",
        "pipeline_batch_size": "use worker.claim_batch_size for claims; push_batch takes a "
        "list of any length",
        "pipeline_timeout": "use redis.socket_timeout",
        "queue_cleanup_interval": "results expire after queue.result_ttl_seconds; expired "
        "leases are reaped every worker.reaper_interval_seconds",
        "stats_aggregation_interval": "get_stats() is computed when asked; export metrics with "
        "fairque_plugins.OpenTelemetryMetrics",
    },
}


def _warn_removed(path: str, advice: str, source: str, stacklevel: int) -> None:
    warnings.warn(
        f"{path} {source}was removed from fairque's configuration and is ignored (it never "
        f"had an effect): {advice}. Delete it.",
        DeprecationWarning,
        stacklevel=stacklevel + 1,
    )


def _drop_removed(data: dict[str, Any], stacklevel: int) -> None:
    """Take the removed fields out of ``data``'s sections, warning once for each."""
    for section, removed in REMOVED_FIELDS.items():
        body = data.get(section)
        if not isinstance(body, dict):
            continue
        for key in sorted(removed.keys() & body.keys()):
            del body[key]
            _warn_removed(f"{section}.{key}", removed[key], "", stacklevel + 1)


# ---------------------------------------------------------------------- loading and writing

#: The document class built (FairQueueConfig; passed in, so this module never imports it).
C = TypeVar("C")


def config_from_dict(
    data: Mapping[str, Any] | None,
    *,
    env: Mapping[str, str] = os.environ,
    cls: type[C],
    stacklevel: int = 1,
) -> C:
    """Build a config from plain data (as YAML gives it) with ``env`` overrides on top.

    ``stacklevel`` is that of the removed-field warnings, counted from the caller.
    """
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigurationError(
            f"the configuration must be a mapping of sections, not {type(data).__name__}",
            value=data,
        )
    merged: dict[str, Any] = {}
    for section, body in data.items():
        if body is None:
            merged[str(section)] = {}
        else:
            merged[str(section)] = dict(body) if isinstance(body, Mapping) else body
    _drop_removed(merged, stacklevel + 1)
    _apply_env(merged, env, stacklevel + 1)
    try:
        config: C = _converter.structure(merged, cls)
    except BaseValidationError as exc:
        raise _translate(exc, merged) from exc
    return config


def config_from_yaml(
    path: str | os.PathLike[str],
    *,
    env: Mapping[str, str] = os.environ,
    cls: type[C],
    stacklevel: int = 1,
) -> C:
    """Load a YAML file (the seed's layout) with ``env`` overrides on top."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read configuration file {os.fspath(path)!r}: {exc.strerror}",
            value=os.fspath(path),
        ) from exc
    except UnicodeDecodeError as exc:
        raise ConfigurationError(
            f"configuration file {os.fspath(path)!r} is not UTF-8 text (byte {exc.start})",
            value=os.fspath(path),
        ) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigurationError(
            f"configuration file {os.fspath(path)!r} is not valid YAML: {exc}",
            value=os.fspath(path),
        ) from exc
    return config_from_dict(data, env=env, cls=cls, stacklevel=stacklevel + 1)


def config_to_dict(config: object) -> dict[str, Any]:
    """Plain data that ``config_from_dict`` reads back unchanged (includes the password)."""
    data: dict[str, Any] = _converter.unstructure(config)
    return data


def config_to_yaml(config: object, path: str | os.PathLike[str]) -> None:
    """Write ``config`` as YAML (the password too: protect the file accordingly)."""
    Path(path).write_text(
        yaml.safe_dump(config_to_dict(config), sort_keys=False, allow_unicode=True),
        encoding="utf-8",
    )


# ---------------------------------------------------------------------- the converter


def _strict_int(value: object, _type: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("expected an int")
    return value


def _strict_float(value: object, _type: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("expected a number")
    return float(value)


def _strict_bool(value: object, _type: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError("expected true or false")
    return value


def _strict_str(value: object, _type: object) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


def _strict_str_list(value: object, _type: object) -> list[str]:
    if not isinstance(value, (list, tuple)):
        raise TypeError("expected a list of strings")
    return [_strict_str(item, str) for item in value]


def _make_converter() -> Any:
    converter = make_converter(forbid_extra_keys=True)
    converter.register_structure_hook(int, _strict_int)
    converter.register_structure_hook(float, _strict_float)
    converter.register_structure_hook(bool, _strict_bool)
    converter.register_structure_hook(str, _strict_str)
    converter.register_structure_hook_func(lambda tp: tp == list[str], _strict_str_list)
    # limits left unset (None) are left out of to_dict / to_yaml (ADR 28)
    unset: dict[str, Any] = {name: override(omit_if_default=True) for name in LIMIT_FIELDS}
    for cls in (LimitsConfig, TierConfig):
        converter.register_unstructure_hook(cls, make_dict_unstructure_fn(cls, converter, **unset))
    return converter


_converter = _make_converter()

_SECTIONS: dict[str, type] = {"redis": RedisConfig, "worker": WorkerConfig, "queue": QueueConfig}


def _translate(exc: BaseValidationError, data: Mapping[str, Any]) -> ConfigurationError:
    """One ConfigurationError for a cattrs error tree: the first problem's path and value."""
    problems: list[ConfigurationError] = []
    _walk(exc, [], data, problems)
    if not problems:  # pragma: no cover - cattrs always reports a leaf
        return ConfigurationError(f"invalid configuration: {exc}")
    first = problems[0]
    if len(problems) == 1:
        return first
    more = "; ".join(str(p) for p in problems[1:])
    return ConfigurationError(f"{first} (also: {more})", path=first.path, value=first.value)


def _walk(
    exc: BaseException, prefix: list[str], data: Mapping[str, Any], out: list[ConfigurationError]
) -> None:
    expected = ""
    for note in getattr(exc, "__notes__", ()):
        if isinstance(note, AttributeValidationNote):
            prefix = [*prefix, note.name]
            expected = _type_name(note.type)
        elif isinstance(note, IterableValidationNote):
            prefix = [*prefix, str(note.index)]
            expected = _type_name(note.type)
    if isinstance(exc, ForbiddenExtraKeysError):
        for key in sorted(str(field) for field in exc.extra_fields):  # YAML keys may be ints
            path = ".".join([*prefix, key])
            out.append(ConfigurationError(f"unknown key {path}", path=path, value=key))
    elif isinstance(exc, BaseValidationError):
        for inner in exc.exceptions:
            _walk(inner, prefix, data, out)
    elif isinstance(exc, _FieldError):
        section = ".".join(prefix)
        out.append(_FieldError(section, exc.field, exc.value, exc.rule))
    else:
        path = ".".join(prefix)
        value = _lookup(data, prefix)
        if isinstance(exc, TypeError) and str(exc).startswith("expected "):
            rule = f"must be {str(exc).removeprefix('expected ')}"
        else:
            rule = f"must be of type {expected}" if expected else "not a valid value"
        out.append(
            ConfigurationError(
                f"invalid {path} {_shown(path, value)}: {rule}",
                path=path,
                value=_stored(path, value),
            )
        )


def _type_name(tp: object) -> str:
    return tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")


def _lookup(data: object, segments: list[str]) -> object:
    for segment in segments:
        if isinstance(data, Mapping) and segment in data:
            data = data[segment]
        elif isinstance(data, (list, tuple)) and is_digits(segment) and int(segment) < len(data):
            data = data[int(segment)]
        else:
            return None
    return data


# ---------------------------------------------------------------------- env overrides

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_NULL = frozenset({"", "null", "none"})


def _apply_env(data: dict[str, Any], env: Mapping[str, str], stacklevel: int) -> None:
    """Put ``FAIRQUE_<SECTION>__<KEY>`` values into ``data``, parsed by the field's type."""
    for name in sorted(env):
        if not name.upper().startswith(ENV_PREFIX) or "__" not in name:
            continue
        section, _, key = name[len(ENV_PREFIX) :].lower().partition("__")
        cls = _SECTIONS.get(section)
        if cls is None:
            raise ConfigurationError(
                f"unknown configuration section {section!r} in environment variable {name}",
                path=section,
                value=name,
            )
        path = f"{section}.{key}"
        advice = REMOVED_FIELDS.get(section, {}).get(key)
        if advice is not None:
            _warn_removed(path, advice, f"(environment variable {name}) ", stacklevel + 1)
            continue
        hints = typing.get_type_hints(cls)
        if key not in {f.name for f in attrs.fields(cls)}:
            raise ConfigurationError(
                f"unknown key {path} in environment variable {name}", path=path, value=name
            )
        body = data.get(section)
        if not isinstance(body, dict):
            body = {}
            data[section] = body
        body[key] = _parse_env(env[name], hints[key], path, name)


def _parse_env(raw: str, tp: Any, path: str, name: str) -> Any:
    def bad(expected: str) -> ConfigurationError:
        return ConfigurationError(
            f"invalid {path} {_shown(path, raw)} from environment variable {name}: "
            f"expected {expected}",
            path=path,
            value=_stored(path, raw),
        )

    args = typing.get_args(tp)
    if type(None) in args:
        if raw.strip().lower() in _NULL:
            return None
        tp = next(arg for arg in args if arg is not type(None))
    text = raw.strip()
    origin = typing.get_origin(tp)
    if tp is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise bad("true or false")
    if tp is int:
        try:
            return int(text)
        except ValueError:
            raise bad("an int") from None
    if tp is float:
        try:
            return float(text)
        except ValueError:
            raise bad("a number") from None
    if origin is list:
        if text.startswith("["):
            try:
                items = json.loads(text)
            except json.JSONDecodeError:
                raise bad("a JSON list or comma-separated values") from None
            return items
        return [item.strip() for item in text.split(",") if item.strip()]
    if origin is dict or attrs.has(tp):  # a mapping, or a nested record (queue.limits)
        try:
            mapping = json.loads(text)
        except json.JSONDecodeError:
            raise bad("a JSON object") from None
        if not isinstance(mapping, dict):
            raise bad("a JSON object")
        return mapping
    return raw
