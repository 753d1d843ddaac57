"""Where the policy model comes from: a path, a hub id, or a builtin model that a model-builder
plugin makes on first use (`model.path: builtin:NAME`)."""

from __future__ import annotations

from pathlib import Path

from rlbridge.contract.config import RunConfig
from rlbridge.contract.registry import PluginManager, get_plugin_manager
from rlbridge.machine import cache_dir

BUILTIN_PREFIX = "builtin:"


def builtin_model_dir(name: str) -> Path:
    return cache_dir() / "models" / name


def model_path(config: RunConfig) -> str:
    """The directory or hub id the engine loads the policy from."""
    return resolve_path(config.model.path)


def resolve_path(path: str) -> str:
    """The directory or hub id an engine loads a model given as `path` from (the policy, the critic
    or a reward model: each may be a directory, a hub id or 'builtin:NAME')."""
    if path.startswith(BUILTIN_PREFIX):
        return str(builtin_model_dir(path[len(BUILTIN_PREFIX) :]))
    return str(Path(path).expanduser()) if looks_local(path) else path


def looks_local(path: str) -> bool:
    return path.startswith(("/", ".", "~")) or path.count("/") != 1 or Path(path).expanduser().exists()


def materialize_model(config: RunConfig, plugins: PluginManager | None = None) -> str:
    """Build a builtin model on first use; return the path the engine loads."""
    return materialize_path(config.model.path, "model.path", plugins)


def materialize_path(path: str, field: str, plugins: PluginManager | None = None) -> str:
    """Build the builtin model `path` names on first use (`field` names the config field in errors);
    return the path the engine loads."""
    if path.startswith(BUILTIN_PREFIX):
        name = path[len(BUILTIN_PREFIX) :]
        builder = (plugins or get_plugin_manager()).get("model_builder", name, field)
        return builder.build(builtin_model_dir(name))
    return resolve_path(path)
