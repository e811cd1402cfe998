"""Shared by every layer's typed configs: the error they raise and the checks that name the key."""

from __future__ import annotations

import types
from collections import abc
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints


class ConfigError(ValueError):
    """A configuration value or combination that cannot work; the message says the fix."""


def _matches(value: Any, hint: Any) -> bool:
    """Whether a config value fits a field's annotation (numbers: ints are floats; bools are not ints)."""
    origin = get_origin(hint)
    if hint is Any or origin is Literal:
        return True  # Literal options are checked by check_choice, with the options in the message
    if origin in (Union, types.UnionType):
        return any(_matches(value, arg) for arg in get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if origin in (tuple, list):
        return isinstance(value, tuple | list)
    if origin is not None:
        return isinstance(value, Mapping) if origin in (dict, Mapping, abc.Mapping) else True
    return isinstance(value, hint) if isinstance(hint, type) else True


def _describe(hint: Any) -> str:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in get_args(hint))
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}
    return names.get(hint, getattr(origin or hint, "__name__", str(hint)))


def check_types(obj: Any, owner: str) -> None:
    """Fail, naming `owner.field`, on any dataclass field whose value does not fit its annotation.

    Hydra passes command-line values through as typed by YAML (`model.encoder_layers=abc` is
    a string): without this a wrong type fails later, deep inside, with a bare TypeError.
    """
    hints = get_type_hints(type(obj))
    for f in fields(obj):
        value = getattr(obj, f.name)
        if not _matches(value, hints[f.name]):
            raise ConfigError(f"{owner}.{f.name}={value!r} must be {_describe(hints[f.name])}")


def check_choice(owner: str, name: str, value: Any, literal: Any) -> None:
    """Fail unless `value` is one of the options of a Literal type."""
    options = get_args(literal)
    if value not in options:
        raise ConfigError(f"{owner}.{name}={value!r} is not valid; use one of {list(options)}")


def resolve_device(owner: str, value: Any) -> str:
    """A `device` setting as a torch device string: auto -> cuda when torch sees a GPU, else cpu.

    cpu, cuda and cuda:N are accepted; CUDA asked for where torch sees none fails here, naming the key,
    rather than at the first tensor moved (torch's own error names neither the key nor the fix).
    """
    import torch

    key = f"{owner}.device" if owner else "device"
    text = str(value)
    if text == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if text == "cpu":
        return text
    kind, _, index = text.partition(":")
    if kind != "cuda" or (index and not index.isdigit()):
        raise ConfigError(f"{key}={value!r} is not valid; use auto, cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise ConfigError(f"{key}={value!r} but torch {torch.__version__} sees no CUDA device; use {key}=cpu "
                          f"(or auto), or install a CUDA build of torch on a machine with a GPU")
    if index and int(index) >= torch.cuda.device_count():
        raise ConfigError(f"{key}={value!r} but torch sees {torch.cuda.device_count()} CUDA device(s)")
    return text


def typed(cls: type, values: dict[str, Any], where: str) -> Any:
    """Build a dataclass, turning unknown keys and type errors into messages that name them."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        names = ", ".join(f"{where}.{k}" for k in unknown)
        raise ConfigError(f"unknown key(s) {names}; valid keys under {where}: {sorted(known)}")
    try:
        return cls(**values)
    except TypeError as err:
        raise ConfigError(f"{where}: {err}") from None
