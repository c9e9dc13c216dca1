"""Configuration: attrs classes for the redis, worker and queue sections.

Loading (YAML, dicts, env overrides) lives below the classes; see ``FairQueueConfig``.

* Each class validates itself (attrs validators), so a bad value is a ``ConfigurationError``
  however the object was built. Its ``path`` names the field (``worker.max_concurrent_tasks``)
  and its ``value`` the bad value; passwords are never echoed.
* ``FairQueueConfig.from_dict`` / ``from_yaml`` structure plain data with one cattrs converter
  built in this module: unknown keys are rejected, numbers and booleans are not coerced
  (``"10"`` is not an int, ``1`` is not a bool).
* Environment variables ``FAIRQUE_<SECTION>__<KEY>`` override file values, parsed by the
  field's type: ``FAIRQUE_REDIS__PORT=6380``, ``FAIRQUE_WORKER__ASSIGNED_USERS=a,b`` (or a JSON
  list), ``FAIRQUE_QUEUE__STRICT_TIERS=true``, ``FAIRQUE_QUEUE__TENANT_WEIGHTS={"a": 2}``.
"""

from __future__ import annotations

import json
import math
import os
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

import attrs
import yaml
from cattrs.errors import (
    AttributeValidationNote,
    BaseValidationError,
    ForbiddenExtraKeysError,
    IterableValidationNote,
)
from cattrs.preconf.pyyaml import make_converter

from fairque_core.domain.errors import ConfigurationError, TaskValidationError
from fairque_core.domain.scoring import stride_for
from fairque_core.domain.validation import validate_id, validate_queue_name

__all__ = ["FairQueueConfig", "QueueConfig", "RedisConfig", "TierConfig", "WorkerConfig"]

ENV_PREFIX = "FAIRQUE_"
_MASK = "***"
_MAX_TIER_RANK = 1000


# ---------------------------------------------------------------------- errors and masking


class _FieldError(ConfigurationError):
    """A bad field value: ``path`` is the full dotted path, ``field`` the class-relative one."""

    def __init__(self, section: str, field: str, value: object, rule: str) -> None:
        self.field = field
        self.rule = rule
        path = f"{section}.{field}" if section else field
        shown = _shown(path, value)
        super().__init__(f"invalid {path} {shown}: {rule}", path=path, value=_stored(path, value))


def _is_secret(path: str) -> bool:
    return path.rsplit(".", 1)[-1] == "password"


def _stored(path: str, value: object) -> object:
    if _is_secret(path):
        return _MASK
    if isinstance(value, str) and path.rsplit(".", 1)[-1] == "url":
        return mask_url(value)
    return value


def _shown(path: str, value: object) -> str:
    shown = repr(_stored(path, value))
    return shown if len(shown) <= 80 else shown[:77] + "..."


def mask_url(url: str) -> str:
    """``url`` with the password part of its userinfo replaced by ``***``."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return _MASK
    if not password:
        return url
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{user}:{_MASK}@{host}"))


def _repr_url(url: str | None) -> str:
    return repr(url if url is None else mask_url(url))


# ---------------------------------------------------------------------- validators

Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


def _section(inst: object) -> str:
    return str(getattr(type(inst), "_section", ""))


def _fail(inst: object, attribute: attrs.Attribute[Any], value: object, rule: str) -> _FieldError:
    return _FieldError(_section(inst), attribute.name, value, rule)


def _number(
    low: float,
    high: float = math.inf,
    *,
    integer: bool = False,
    low_open: bool = False,
    high_open: bool = False,
) -> Validator:
    """A validator: a finite number (an int if ``integer``) between ``low`` and ``high``."""
    kind = "an int" if integer else "a number"
    if high == math.inf:
        rule = f"must be {kind} {'>' if low_open else '>='} {low:g}"
    else:
        rule = f"must be {kind} in [{low:g}, {high:g}{')' if high_open else ']'}"
    allowed = (int,) if integer else (int, float)

    def check(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, allowed):
            raise _fail(inst, attribute, value, rule)
        assert isinstance(value, (int, float))  # narrowed for mypy
        too_low = value <= low if low_open else value < low
        too_high = value >= high if high_open else value > high
        if not math.isfinite(value) or too_low or too_high:
            raise _fail(inst, attribute, value, rule)

    return check


def _optional(check: Validator) -> Validator:
    def optional(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value is not None:
            check(inst, attribute, value)

    return optional


def _type(kind: type, rule: str) -> Validator:
    def check(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, kind):
            raise _fail(inst, attribute, value, rule)

    return check


def _an_id(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    try:
        validate_id(value, attribute.name)
    except TaskValidationError as exc:
        raise _fail(inst, attribute, value, exc.rule) from None


def _id_list(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, list):
        raise _fail(inst, attribute, value, "must be a list of ids")
    for index, item in enumerate(value):
        try:
            validate_id(item, attribute.name)
        except TaskValidationError as exc:
            raise _FieldError(_section(inst), f"{attribute.name}.{index}", item, exc.rule) from None


def _queue_name(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    try:
        validate_queue_name(value)
    except TaskValidationError as exc:
        raise _fail(inst, attribute, value, exc.rule) from None


def _weight_rule(section: str, path: str, value: object) -> None:
    try:
        stride_for(value)  # type: ignore[arg-type]  # stride_for checks the type itself
    except TaskValidationError as exc:
        raise _FieldError(section, path, value, exc.rule) from None


def _weight(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _weight_rule(_section(inst), attribute.name, value)


def _id_keys(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, dict):
        raise _fail(inst, attribute, value, "must be a mapping")
    for key in value:
        try:
            validate_id(key, attribute.name)
        except TaskValidationError as exc:
            raise _FieldError(_section(inst), f"{attribute.name}.{key}", key, exc.rule) from None


_POSITIVE = _number(0, low_open=True)
_NON_NEGATIVE = _number(0)
_POSITIVE_INT = _number(1, integer=True)
_NON_NEGATIVE_INT = _number(0, integer=True)
_BOOL = _type(bool, "must be true or false")
_OPTIONAL_STR = _optional(_type(str, "must be a string"))


# ---------------------------------------------------------------------- the classes


@attrs.define(kw_only=True)
class RedisConfig:
    """How to reach the server. ``url`` wins over host/port when set.

    The password never shows in ``repr``/``str``; a password inside ``url`` is masked there.
    """

    _section: ClassVar[str] = "redis"

    url: str | None = attrs.field(default=None, repr=_repr_url, validator=_OPTIONAL_STR)
    host: str = attrs.field(default="localhost", validator=_type(str, "must be a string"))
    port: int = attrs.field(default=6379, validator=_number(1, 65535, integer=True))
    db: int = attrs.field(default=0, validator=_NON_NEGATIVE_INT)
    password: str | None = attrs.field(default=None, repr=False, validator=_OPTIONAL_STR)
    username: str | None = attrs.field(default=None, validator=_OPTIONAL_STR)
    socket_timeout: float = attrs.field(default=5.0, validator=_POSITIVE)
    socket_connect_timeout: float = attrs.field(default=5.0, validator=_POSITIVE)
    health_check_interval: int = attrs.field(default=30, validator=_NON_NEGATIVE_INT)
    decode_responses: bool = attrs.field(default=True, validator=_BOOL)
    cluster: bool = attrs.field(default=False, validator=_BOOL)
    ssl_ca_certs: str | None = attrs.field(default=None, validator=_OPTIONAL_STR)
    ssl_certfile: str | None = attrs.field(default=None, validator=_OPTIONAL_STR)
    ssl_keyfile: str | None = attrs.field(default=None, validator=_OPTIONAL_STR)


@attrs.define(kw_only=True)
class WorkerConfig:
    """One worker's identity, affinity and limits."""

    _section: ClassVar[str] = "worker"

    id: str = attrs.field(default="worker-1", validator=_an_id)
    assigned_users: list[str] = attrs.field(factory=list, validator=_id_list)
    steal_targets: list[str] = attrs.field(factory=list, validator=_id_list)
    poll_interval_seconds: float = attrs.field(default=1.0, validator=_POSITIVE)
    task_timeout_seconds: float = attrs.field(default=300.0, validator=_POSITIVE)
    max_concurrent_tasks: int = attrs.field(default=10, validator=_POSITIVE_INT)
    graceful_shutdown_timeout: float = attrs.field(default=30.0, validator=_NON_NEGATIVE)
    # default: lease_seconds / 3
    heartbeat_interval_seconds: float | None = attrs.field(
        default=None, validator=_optional(_POSITIVE)
    )
    reaper_interval_seconds: float = attrs.field(default=1.0, validator=_POSITIVE)
    claim_batch_size: int = attrs.field(default=0, validator=_NON_NEGATIVE_INT)  # 0: free slots

    def __attrs_post_init__(self) -> None:
        both = sorted(set(self.assigned_users) & set(self.steal_targets))
        if both:
            raise _FieldError(
                self._section, "steal_targets", both, "must not repeat tenants of assigned_users"
            )


@attrs.define(kw_only=True)
class TierConfig:
    """A subscription tier: its weight and, in strict mode, its rank (higher served first)."""

    weight: float = attrs.field(default=1.0, validator=_weight)
    rank: int = attrs.field(default=0, validator=_number(0, _MAX_TIER_RANK, integer=True))


def _weights(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _id_keys(inst, attribute, value)
    assert isinstance(value, dict)
    for key, weight in value.items():
        _weight_rule(_section(inst), f"{attribute.name}.{key}", weight)


def _tiers(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _id_keys(inst, attribute, value)
    assert isinstance(value, dict)
    for key, tier in value.items():
        if not isinstance(tier, TierConfig):
            raise _FieldError(_section(inst), f"{attribute.name}.{key}", tier, "must be a tier")


def _tenant_tiers(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _id_keys(inst, attribute, value)
    assert isinstance(value, dict)
    for key, tier in value.items():
        if not isinstance(tier, str):
            raise _FieldError(_section(inst), f"{attribute.name}.{key}", tier, "must be a string")


@attrs.define(kw_only=True)
class QueueConfig:
    """Queue behaviour. The seed's fields are kept; fairque's own follow."""

    _section: ClassVar[str] = "queue"

    stats_prefix: str = attrs.field(default="fq", validator=_an_id)
    lua_script_cache_size: int = attrs.field(default=100, validator=_POSITIVE_INT)
    max_retry_attempts: int = attrs.field(default=3, validator=_NON_NEGATIVE_INT)
    default_task_timeout: float = attrs.field(default=300.0, validator=_POSITIVE)
    default_max_retries: int = attrs.field(default=3, validator=_NON_NEGATIVE_INT)
    enable_pipeline_optimization: bool = attrs.field(default=True, validator=_BOOL)
    pipeline_batch_size: int = attrs.field(default=100, validator=_POSITIVE_INT)
    pipeline_timeout: float = attrs.field(default=5.0, validator=_POSITIVE)
    queue_cleanup_interval: int = attrs.field(default=3600, validator=_POSITIVE_INT)
    stats_aggregation_interval: int = attrs.field(default=300, validator=_POSITIVE_INT)
    # fairque's own
    name: str = attrs.field(default="default", validator=_queue_name)
    lease_seconds: float = attrs.field(default=30.0, validator=_POSITIVE)
    aging_horizon_seconds: float = attrs.field(default=300.0, validator=_POSITIVE)
    max_payload_bytes: int = attrs.field(default=1_048_576, validator=_POSITIVE_INT)
    max_recoveries: int = attrs.field(default=3, validator=_NON_NEGATIVE_INT)
    result_ttl_seconds: float = attrs.field(default=3600.0, validator=_POSITIVE)
    delayed_move_limit: int = attrs.field(default=100, validator=_POSITIVE_INT)
    retry_base_seconds: float = attrs.field(default=1.0, validator=_NON_NEGATIVE)
    retry_factor: float = attrs.field(default=2.0, validator=_number(1))
    retry_cap_seconds: float = attrs.field(default=300.0, validator=_NON_NEGATIVE)
    retry_jitter: float = attrs.field(default=0.0, validator=_number(0, 1, high_open=True))
    tenant_weights: dict[str, float] = attrs.field(factory=dict, validator=_weights)
    tiers: dict[str, TierConfig] = attrs.field(factory=dict, validator=_tiers)
    tenant_tiers: dict[str, str] = attrs.field(factory=dict, validator=_tenant_tiers)
    strict_tiers: bool = attrs.field(default=False, validator=_BOOL)

    def __attrs_post_init__(self) -> None:
        if self.retry_cap_seconds < self.retry_base_seconds:
            raise _FieldError(
                self._section,
                "retry_cap_seconds",
                self.retry_cap_seconds,
                f"must be >= retry_base_seconds ({self.retry_base_seconds:g})",
            )
        for user_id, tier in self.tenant_tiers.items():
            if tier not in self.tiers:
                known = ", ".join(sorted(self.tiers)) or "none defined"
                raise _FieldError(
                    self._section, f"tenant_tiers.{user_id}", tier, f"unknown tier ({known})"
                )

    def tenant_weight_table(self) -> dict[str, tuple[float, int]]:
        """``user_id -> (weight, tier rank)`` for every tenant the config names.

        A tenant in ``tenant_tiers`` takes its tier's weight and rank; an explicit
        ``tenant_weights`` entry overrides the weight and keeps the rank (0 without a tier).
        """
        table: dict[str, tuple[float, int]] = {}
        for user_id, tier_name in self.tenant_tiers.items():
            tier = self.tiers.get(tier_name)
            if tier is None:  # only when the mapping was changed after construction
                raise _FieldError(
                    self._section, f"tenant_tiers.{user_id}", tier_name, "unknown tier"
                )
            table[user_id] = (tier.weight, tier.rank)
        for user_id, weight in self.tenant_weights.items():
            table[user_id] = (weight, table.get(user_id, (1.0, 0))[1])
        return table


@attrs.define(kw_only=True)
class FairQueueConfig:
    """The whole configuration: one YAML file with redis, worker and queue sections."""

    redis: RedisConfig = attrs.field(factory=RedisConfig)
    worker: WorkerConfig = attrs.field(factory=WorkerConfig)
    queue: QueueConfig = attrs.field(factory=QueueConfig)

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any] | None, *, env: Mapping[str, str] = os.environ
    ) -> FairQueueConfig:
        """Build a config from plain data (as YAML gives it) with ``env`` overrides on top."""
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
        _apply_env(merged, env)
        try:
            config: FairQueueConfig = _converter.structure(merged, cls)
        except BaseValidationError as exc:
            raise _translate(exc, merged) from exc
        return config

    @classmethod
    def from_yaml(
        cls, path: str | os.PathLike[str], *, env: Mapping[str, str] = os.environ
    ) -> FairQueueConfig:
        """Load a YAML file (the seed's layout) with ``env`` overrides on top."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(
                f"cannot read configuration file {os.fspath(path)!r}: {exc.strerror}",
                value=os.fspath(path),
            ) from exc
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigurationError(
                f"configuration file {os.fspath(path)!r} is not valid YAML: {exc}",
                value=os.fspath(path),
            ) from exc
        return cls.from_dict(data, env=env)

    def to_dict(self) -> dict[str, Any]:
        """Plain data that ``from_dict`` reads back unchanged (includes the password)."""
        data: dict[str, Any] = _converter.unstructure(self)
        return data

    def to_yaml(self, path: str | os.PathLike[str]) -> None:
        """Write the config as YAML (the password too: protect the file accordingly)."""
        Path(path).write_text(
            yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True), encoding="utf-8"
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
        for key in sorted(exc.extra_fields):
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
        elif isinstance(data, (list, tuple)) and segment.isdigit() and int(segment) < len(data):
            data = data[int(segment)]
        else:
            return None
    return data


# ---------------------------------------------------------------------- env overrides

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_NULL = frozenset({"", "null", "none"})


def _apply_env(data: dict[str, Any], env: Mapping[str, str]) -> None:
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
    if origin is dict:
        try:
            mapping = json.loads(text)
        except json.JSONDecodeError:
            raise bad("a JSON object") from None
        if not isinstance(mapping, dict):
            raise bad("a JSON object")
        return mapping
    return raw
