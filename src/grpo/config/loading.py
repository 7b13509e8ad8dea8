"""Loading: TOML (or the defaults), ``--section.key=value`` overrides, type coercion.

An unknown key or a value of the wrong type is a :class:`ConfigError` naming the key.
"""

from __future__ import annotations

import dataclasses
import difflib
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, Literal

from grpo.config.errors import ConfigError
from grpo.config.imports import import_dirs
from grpo.config.sections import Config
from grpo.config.validation import validate


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Read TOML (or start from defaults), apply ``section.key=value`` overrides, validate."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"{path}: invalid TOML: {error}") from None
    for override in overrides or []:
        _apply_override(data, override)
    config = _with_import_dirs(_build(Config, data, ""), path)
    validate(config)
    return config


def _with_import_dirs(config: Config, path: str | Path | None) -> Config:
    """``train.import_dirs`` made absolute from where the config file is: only loading knows
    that, and workers in other processes or on other machines resolve the same specs."""
    dirs = import_dirs(path, config.train.import_dirs)
    return dataclasses.replace(config, train=dataclasses.replace(config.train, import_dirs=dirs))


def config_to_dict(config: Config) -> dict[str, Any]:
    """The config as nested plain dicts and lists."""
    return dataclasses.asdict(config)


def _apply_override(data: dict[str, Any], override: str) -> None:
    text = override.removeprefix("--")
    if "=" not in text:
        raise ConfigError(f"override {override!r} must look like --section.key=value")
    dotted, raw = text.split("=", 1)
    keys = dotted.split(".")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # a bare word is a string
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {override!r}: {key} is not a section")
    node[keys[-1]] = value


def _build(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'}: expected a table, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        key = f"{where}.{unknown[0]}" if where else unknown[0]
        hint = _did_you_mean(unknown[0], names, where)
        raise ConfigError(f"unknown config key {key!r}{hint} (known: {', '.join(sorted(names))})")
    values = {}
    for name, raw in data.items():
        key = f"{where}.{name}" if where else name
        values[name] = _coerce(hints[name], raw, key)
    return cls(**values)


def _did_you_mean(name: str, known: set[str], where: str) -> str:
    """``"; did you mean 'train.steps'?"`` for the closest known key (a typo), else ``""``."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    if not close:
        return ""
    return f"; did you mean {(f'{where}.' if where else '') + close[0]!r}?"


def _coerce(hint: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, key)
    if origin is Literal:
        choices = typing.get_args(hint)
        if not any(value == c and type(value) is type(c) for c in choices):  # 1 is not True
            raise ConfigError(f"{key} must be one of {list(choices)}, got {value!r}")
        return value
    if origin is list:
        (item_hint,) = typing.get_args(hint)
        if not isinstance(value, list):
            raise ConfigError(f"{key} must be a list, got {value!r}")
        return [_coerce(item_hint, item, f"{key}[{i}]") for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key} must be a table, got {value!r}")
        return dict(value)
    if origin in (typing.Union, types.UnionType):
        raise ConfigError(f"{key}: union types are not supported in config")
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key} must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key} must be an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise ConfigError(f"{key} must be a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key} must be a string, got {value!r}")
        return value
    raise ConfigError(f"{key}: unsupported type {hint}")
