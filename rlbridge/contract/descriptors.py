"""The descriptors that registration hooks return (`rlbridge.contract.hookspecs`): one per kind of
plugin, each a name, the callable that implements it and a description for `rlbridge plugins`.

A leaf module (nothing from rlbridge), so that the hook specs can name these types at run time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RewardPlugin:
    name: str
    factory: Callable[..., Callable[[list[Any]], list[float | None]]]
    """Called with the reward entry's args; returns the reward callable."""
    description: str = ""
    isolate: bool = True
    """Score in rollout_workers' pool of worker processes, where a hang is cut at the timeout and a
    crash is contained. False declares the reward a quick, pure function of its inputs that cannot
    hang or crash the process (rlbridge's built-in string rewards): it is scored in the engine process,
    with no pool to start, and its faults (an exception, NaN, the wrong number of scores) are still
    counted and handled by rollout_workers.on_error."""


@dataclass(frozen=True)
class EnvironmentPlugin:
    name: str
    factory: Callable[..., Any]
    description: str = ""


@dataclass(frozen=True)
class DataSourcePlugin:
    name: str
    generate: Callable[..., list[dict[str, Any]]]
    """Called with the data source's args (and seed); returns the rows."""
    description: str = ""


@dataclass(frozen=True)
class ModelBuilderPlugin:
    name: str
    build: Callable[..., str]
    """Called with (model_dir), the model's own directory in the cache; creates the model there if
    missing and returns the path to load."""
    description: str = ""


@dataclass(frozen=True)
class PlacementPolicy:
    name: str
    layout: Callable[..., dict[str, Any]]
    """Called with (config); returns {role: device count, "shared": bool} or raises ConfigError."""
    description: str = ""


@dataclass(frozen=True)
class TelemetrySinkPlugin:
    name: str
    factory: Callable[..., Any]
    description: str = ""
