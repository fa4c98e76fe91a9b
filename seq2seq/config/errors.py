"""The two errors of bad input, and the range checks every config group's ``__post_init__`` shares:
each message names its key, and the entry points print it as one ``error:`` line."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key."""


class DataError(ValueError):
    """The corpus or an evaluation set cannot be used; the message says which file and why."""


def finite(group: str, schema: Any) -> None:
    """NaN passes every range check written with < and >, and inf most: each group refuses both first."""
    for spec in fields(schema):
        value = getattr(schema, spec.name)
        numbers = value if isinstance(value, list | tuple) else [value]
        if any(isinstance(number, float) and not math.isfinite(number) for number in numbers):
            raise ConfigError(f"{group}.{spec.name} must be a finite number, got {value}")


def positive(name: str, value: int | float) -> None:
    if value <= 0:
        raise ConfigError(f"{name} must be > 0, got {value}")


def probability(name: str, value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise ConfigError(f"{name} must be in [0, 1), got {value}")
