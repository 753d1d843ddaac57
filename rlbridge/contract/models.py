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
    path = config.model.path
    if path.startswith(BUILTIN_PREFIX):
        return str(builtin_model_dir(path[len(BUILTIN_PREFIX):]))
    return str(Path(path).expanduser()) if looks_local(path) else path


def looks_local(path: str) -> bool:
    return path.startswith(("/", ".", "~")) or path.count("/") != 1 or Path(path).expanduser().exists()


def materialize_model(config: RunConfig, plugins: PluginManager | None = None) -> str:
    """Build a builtin model on first use; return the path the engine loads."""
    pm = plugins or get_plugin_manager()
    if config.model.path.startswith(BUILTIN_PREFIX):
        name = config.model.path[len(BUILTIN_PREFIX):]
        builder = pm.get("model_builder", name, "model.path")
        return builder.build(builtin_model_dir(name))
    return model_path(config)
