"""One typed config tree: frozen dataclasses loaded from YAML, with ``key=value`` overrides.

A config is a tree of frozen dataclasses whose field annotations *are* the schema. Loading checks
every key and value against them, so a typo (``grpo.lr_rate=1e-4``) or a wrong type
(``grpo.steps=ten``) fails before any work starts, naming the dotted key, what was expected and
the closest known key. The same loader serves ``contractrl train``, ``contractrl tune`` and
``contractrl run``, so a sweep and a single run read configs identically.
"""

from __future__ import annotations

import dataclasses
import difflib
import operator
import re
import types
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

import yaml

from .errors import ConfigError, InputFileError
from .files import read_bytes

T = TypeVar("T")
_MAX_CONFIG_BYTES = 1 << 20


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``["grpo.steps=10", "model.lora.r=4"]`` -> a nested dict; values are read as YAML scalars/lists."""
    flat: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise ConfigError(f"override {item!r} is not key=value (e.g. grpo.steps=10)")
        try:
            flat[key] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"override {item!r}: the value is not valid YAML: {exc}") from exc
    return nest(flat)


def nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1, "a.c": 2}`` -> ``{"a": {"b": 1, "c": 2}}``; a key may not be both a value and a section."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        parts = str(key).split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"config key {key!r} conflicts with an earlier value of {part!r}")
            node = child
        node[parts[-1]] = value
    return out


def merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Deep merge: mappings merge key by key, anything else in ``extra`` replaces ``base``."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML mapping from a file, with typed errors for missing, oversized or malformed files."""
    file = Path(path)
    raw = read_bytes(file, "config", _MAX_CONFIG_BYTES)
    try:
        data = yaml.safe_load(raw.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise InputFileError(f"config file {file} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputFileError(f"config file {file} must hold a mapping at the top level, not {type(data).__name__}")
    return data


def load_config(cls: type[T], path: str | Path | None = None, overrides: Sequence[str] = ()) -> T:
    """``cls`` from an optional YAML file and ``key=value`` overrides (the overrides win)."""
    data = read_yaml(path) if path is not None else {}
    return from_dict(cls, merge(data, parse_overrides(overrides)))


def from_dict(cls: type[T], data: Any, prefix: str = "") -> T:
    """Build dataclass ``cls`` from plain data, checking every key and value."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix or 'config'} must be a mapping, not {type(data).__name__} ({data!r})")
    hints, fields = _checked_keys(cls, data, prefix)
    kwargs = {}
    for name, value in data.items():
        spec = fields[name]
        if isinstance(value, Mapping) and spec.default_factory is not dataclasses.MISSING:
            # a partial section overrides the field's own default (sft.optim's cosine schedule),
            # not the defaults of the section's class
            default = spec.default_factory()
            if dataclasses.is_dataclass(default):
                value = merge(to_dict(default), value)
        kwargs[name] = _coerce(hints[name], value, _join(prefix, name))
        error = range_error(spec.metadata, kwargs[name], _join(prefix, name))
        if error:
            raise ConfigError(error)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{prefix or 'config'}: {exc}") from exc


def derive(config: T, overrides: Mapping[str, Any] | Sequence[str] = (), /, **changes: Any) -> T:
    """A typed variant of ``config``: ``derive(train, {"sft.steps": 10}, resume=True)``.

    ``overrides`` holds dotted keys (a mapping, or ``key=value`` strings as the command line gives
    them); ``changes`` top-level fields. The result equals ``from_dict(type(config),
    merge(to_dict(config), overrides))`` - the same key checks, coercion, merge of partial sections
    and ``__post_init__`` range checks - but only the sections named are rebuilt, so a variant never
    passes through plain data and back (a field a dict cannot hold survives it)."""
    data = parse_overrides(overrides) if _is_items(overrides) else nest(overrides)  # type: ignore[arg-type]
    return _derive(config, merge(data, changes), "")


def _is_items(overrides: Any) -> bool:
    return isinstance(overrides, Sequence) and not isinstance(overrides, (str, bytes))


def _derive(config: T, data: Mapping[str, Any], prefix: str) -> T:
    hints, fields = _checked_keys(type(config), data, prefix)
    kwargs = {}
    for name, value in data.items():
        current, key = getattr(config, name), _join(prefix, name)
        if isinstance(value, Mapping) and dataclasses.is_dataclass(current):
            kwargs[name] = _derive(current, value, key)
        elif dataclasses.is_dataclass(value) and type(value) is type(current):
            kwargs[name] = value  # a whole typed section, already checked when it was built
        elif isinstance(value, Mapping) and isinstance(current, Mapping):
            kwargs[name] = _coerce(hints[name], merge(current, value), key)  # a mapping merges, as a loaded one does
        else:
            kwargs[name] = _coerce(hints[name], value, key)
        error = range_error(fields[name].metadata, kwargs[name], key)  # the same metadata checks as a load
        if error:
            raise ConfigError(error)
    try:
        return dataclasses.replace(config, **kwargs)  # type: ignore[type-var]
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{prefix or 'config'}: {exc}") from exc


def _checked_keys(cls: type[Any], data: Mapping[str, Any], prefix: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``cls``'s type hints and init fields, once ``data`` names none of its moved, removed or unknown keys."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    _refuse_old_keys(cls, data, prefix)
    _refuse_unknown(data, fields, prefix)
    return typing.get_type_hints(cls), fields


def _refuse_unknown(data: Mapping[str, Any], fields: Collection[str], prefix: str) -> None:
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(str(key), list(fields), n=1)
        hint = f"; did you mean {_join(prefix, close[0])!r}?" if close else f"; known keys: {', '.join(sorted(fields))}"
        raise ConfigError(f"unknown config key {_join(prefix, str(key))!r}{hint}")


def _refuse_old_keys(cls: type[Any], data: Mapping[str, Any], prefix: str) -> None:
    """A key a config class lists in ``MOVED_KEYS`` (old dotted key -> new) or ``REMOVED_KEYS``
    (old dotted key -> why) fails with its new name or the reason, so an old YAML file or override
    is refused on one line rather than half-applied."""
    for table, moved in ((getattr(cls, "MOVED_KEYS", {}), True), (getattr(cls, "REMOVED_KEYS", {}), False)):
        for old, target in table.items():
            node: Any = data
            for part in old.split("."):
                if not isinstance(node, Mapping) or part not in node:
                    break
                node = node[part]
            else:
                if moved:
                    raise ConfigError(f"config key {_join(prefix, old)!r} moved to {_join(prefix, target)!r}")
                raise ConfigError(f"config key {_join(prefix, old)!r} was removed: {target}")


def to_dict(config: Any) -> Any:
    """Plain data (YAML/JSON-ready) from a config tree; tuples become lists."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return {f.name: to_dict(getattr(config, f.name)) for f in dataclasses.fields(config)}
    if isinstance(config, (list, tuple)):
        return [to_dict(v) for v in config]
    return config


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _describe(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in get_args(tp))
    if origin is tuple:
        return f"a list of {_describe(get_args(tp)[0])}"
    if origin is dict:
        return f"a mapping of {_describe(get_args(tp)[1])}"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _coerce(tp: Any, value: Any, key: str) -> Any:
    origin = get_origin(tp)
    bad = ConfigError(f"config key {key!r} must be {_describe(tp)}, got {value!r}")
    if origin in (Union, types.UnionType):
        options = get_args(tp)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(option, value, key)
            except ConfigError:
                continue
        raise bad
    if origin is Literal:
        if value in get_args(tp) and type(value) in {type(a) for a in get_args(tp)}:
            return value
        raise bad
    if origin is tuple:
        if isinstance(value, str):  # a single item may be written without brackets
            value = [value]
        if not isinstance(value, Sequence):
            raise bad
        item = get_args(tp)[0]
        return tuple(_coerce(item, v, f"{key}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, Mapping):
            raise bad
        value_type = get_args(tp)[1]
        return {str(k): _coerce(value_type, v, f"{key}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, key)  # type: ignore[arg-type]
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise bad
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        # YAML 1.1 (PyYAML) reads 1e-3 as a string; YAML 1.2 and every user read it as a number
        if isinstance(value, str) and _DECIMAL.fullmatch(value.strip()):
            return float(value)
        raise bad
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise bad
    raise ConfigError(f"config key {key!r} has an unsupported type {tp!r}")  # a bug in a config class


_DECIMAL = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def setting(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    factory: Callable[[], Any] | None = None,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    multiple_of: int | None = None,
    nonempty: bool = False,
    why: str = "",
) -> Any:
    """A config field with its one-line help text, which ``--print-config`` shows beside the value
    (field metadata, as TRL's configs carry it). ``factory`` builds mutable or nested defaults.

    The bounds (``ge``, ``gt``, ``le``, ``lt``, ``multiple_of``, ``nonempty``) are checked by the
    loader with the key's dotted name, so a range lives once, beside its field, instead of as a
    hand-written line per key; ``why`` is appended to the error (``(0: blind sampling)``)."""
    if not help.strip():
        raise ValueError("a config field needs a help text")
    bounds = {"ge": ge, "gt": gt, "le": le, "lt": lt, "multiple_of": multiple_of, "nonempty": nonempty or None}
    metadata = {"help": help, **{k: v for k, v in bounds.items() if v is not None}}
    if why:
        metadata["why"] = why
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def range_error(meta: Mapping[str, Any], value: Any, key: str) -> str | None:
    """The one-line error for ``value`` at ``key`` against a field's bounds, or None when it fits."""
    why = f" {meta['why']}" if meta.get("why") else ""
    if meta.get("nonempty") and not value:
        return f"{key} must not be empty{why}"
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    bounds = [(kind, meta[kind]) for kind in _BOUNDS if kind in meta]
    if not all(_BOUNDS[kind][0](value, bound) for kind, bound in bounds):  # NaN fits no bound
        if len(bounds) == 2:
            (low, a), (high, b) = bounds
            opening, closing = "(" if low == "gt" else "[", ")" if high == "lt" else "]"
            return f"{key} must be in {opening}{a}, {b}{closing}{why}, got {value}"
        ((kind, bound),) = bounds
        return f"{key} must be {_BOUNDS[kind][1]} {bound}{why}, got {value}"
    if meta.get("multiple_of") and value % meta["multiple_of"]:
        return f"{key} must be a multiple of {meta['multiple_of']}{why}, got {value}"
    return None


# each bound's test and its sign, lower bounds first (a field takes at most one of each side)
_BOUNDS: dict[str, tuple[Callable[[Any, Any], bool], str]] = {
    "ge": (operator.ge, ">="),
    "gt": (operator.gt, ">"),
    "le": (operator.le, "<="),
    "lt": (operator.lt, "<"),
}


def to_commented_yaml(config: Any, indent: int = 0) -> str:
    """The config tree as YAML, each key followed by its help as a comment; loads back to ``to_dict``."""
    lines = []
    pad = " " * indent
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        comment = f"  # {f.metadata['help']}" if f.metadata.get("help") else ""
        if dataclasses.is_dataclass(value):
            lines.append(f"{pad}{f.name}:{comment}")
            lines.append(to_commented_yaml(value, indent + 2).rstrip("\n"))
        else:
            flow = yaml.safe_dump([to_dict(value)], default_flow_style=True, width=1 << 16).strip()[1:-1]
            lines.append(f"{pad}{f.name}: {flow}{comment}")
    return "\n".join(lines) + "\n"


def check(condition: bool, message: str) -> None:
    """Raise :class:`ConfigError` unless ``condition``: for the cross-field checks of ``__post_init__``
    (a single field's range is :func:`setting` metadata)."""
    if not condition:
        raise ConfigError(message)


__all__ = [
    "check",
    "derive",
    "from_dict",
    "load_config",
    "merge",
    "nest",
    "parse_overrides",
    "range_error",
    "read_yaml",
    "setting",
    "to_commented_yaml",
    "to_dict",
]
