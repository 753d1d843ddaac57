"""The plugin manager: collects every plugin registered through the `rlbridge` entry-point group
(built-in and third-party alike) and looks descriptors (`rlbridge.contract.descriptors`) up by name."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import pluggy

from rlbridge.contract import hookspecs
from rlbridge.contract.descriptors import (  # re-exported: plugins import them from here
    RewardPlugin,
    EnvironmentPlugin,
    DataSourcePlugin,
    ModelBuilderPlugin,
    PlacementPolicy,
    TelemetrySinkPlugin,
)
from rlbridge.errors import PluginNotFoundError, RLBridgeError, did_you_mean

if TYPE_CHECKING:
    from rlbridge.contract.backend import Backend

__all__ = [
    "ENTRY_POINT_GROUP",
    "KINDS",
    "PluginManager",
    "Registered",
    "get_plugin_manager",
    "reset_plugin_manager",
    # the descriptors, re-exported
    "DataSourcePlugin",
    "EnvironmentPlugin",
    "ModelBuilderPlugin",
    "PlacementPolicy",
    "RewardPlugin",
    "TelemetrySinkPlugin",
]

ENTRY_POINT_GROUP = "rlbridge"


@dataclass
class Registered:
    """One registered item and the plugin (and distribution) that provided it."""

    kind: str
    name: str
    item: Any
    provider: str
    distribution: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


KINDS = {
    "backend": "rlbridge_register_backends",
    "reward": "rlbridge_register_rewards",
    "environment": "rlbridge_register_environments",
    "data_source": "rlbridge_register_data_sources",
    "model_builder": "rlbridge_register_model_builders",
    "placement": "rlbridge_register_placement_policies",
    "telemetry_sink": "rlbridge_register_telemetry_sinks",
}


class PluginManager:
    """Collects plugins from the `rlbridge` entry-point group (and any registered by hand)."""

    def __init__(self, load_entry_points: bool = True) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self._sources: dict[int, tuple[str, str]] = {}
        if load_entry_points:
            self._load_entry_points()
            from rlbridge.contract.local_plugins import load_from_env

            load_from_env(self)  # the run's local plugin modules (config `plugins:` / -p), in engine processes too

    def _load_entry_points(self) -> None:
        dist_names: dict[int, str] = {}  # Distribution.name parses the METADATA file again on every read
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if self.pm.get_plugin(ep.name) is not None or self.pm.is_blocked(ep.name):
                continue
            try:
                plugin = ep.load()
            except Exception as exc:  # a broken third-party plugin must say who it is
                dist = ep.dist.name if ep.dist else "?"
                raise RLBridgeError(
                    f"plugin '{ep.name}' from distribution '{dist}' ({ep.value}) failed to import: {exc}"
                ) from exc
            if ep.dist is not None and id(ep.dist) not in dist_names:
                dist_names[id(ep.dist)] = ep.dist.name
            self.register(plugin, ep.name, distribution=dist_names[id(ep.dist)] if ep.dist else "")

    def register(self, plugin: Any, name: str, distribution: str = "") -> None:
        self.pm.register(plugin, name=name)
        self._sources[id(plugin)] = (name, distribution)
        self.__dict__.pop("items", None)  # registrations changed: collect again
        self.check_pending()  # every registration, those at start-up (entry points, local plugins) included

    def check_pending(self) -> None:
        """Refuse a hook implementation that matches no hook of the contract (a misspelled name would
        otherwise never be called): pluggy's check_pending, as an error naming the hook and its plugin."""
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            known = [name for name in dir(hookspecs) if name.startswith(f"{hookspecs.PROJECT}_")]
            plugin_name, dist = self._sources.get(
                id(exc.plugin), (self.pm.get_name(exc.plugin) or repr(exc.plugin), "")
            )
            unknown = sorted(
                name
                for name, caller in vars(self.pm.hook).items()
                if not caller.has_spec()
                and any(impl.plugin is exc.plugin and not impl.optionalhook for impl in caller.get_hookimpls())
            )
            hook = unknown[0] if unknown else "?"
            source = f" from distribution '{dist}'" if dist else ""
            self.pm.unregister(exc.plugin)  # the manager stays usable without it
            raise RLBridgeError(
                f"plugin '{plugin_name}'{source} implements '{hook}', which is no rlbridge hook"
                f"{did_you_mean(hook, known)}; "
                f"rename it to a hook of rlbridge.contract.hookspecs (or mark it @hookimpl(optionalhook=True))"
            ) from exc

    @property
    def hook(self):
        return self.pm.hook

    @cached_property
    def items(self) -> dict[str, dict[str, Registered]]:
        collected: dict[str, dict[str, Registered]] = {kind: {} for kind in KINDS}
        for kind, hook_name in KINDS.items():
            caller = getattr(self.pm.hook, hook_name)
            for impl in caller.get_hookimpls():
                provider, dist = self._sources.get(id(impl.plugin), (impl.plugin_name, ""))
                for item in impl.function() or []:
                    name = item.name
                    if name in collected[kind]:
                        other = collected[kind][name].provider
                        raise RLBridgeError(
                            f"{kind.replace('_', ' ')} '{name}' is registered twice: by plugin '{other}' and "
                            f"by plugin '{provider}'; uninstall or rename one"
                        )
                    collected[kind][name] = Registered(kind, name, item, provider, dist)
        return collected

    def get(self, kind: str, name: str, field_name: str) -> Any:
        """The registered item, or an error naming the config field and the available names."""
        table = self.items[kind]
        if name not in table:
            available = ", ".join(sorted(table)) or "none"
            raise PluginNotFoundError(
                f"{field_name}: unknown {kind.replace('_', ' ')} '{name}'{did_you_mean(name, table)}; "
                f"available: {available}"
            )
        return table[name].item

    def backend(self, name: str) -> Backend:
        return self.get("backend", name, "backend")()

    def engine_packages(self) -> tuple[str, ...]:
        """The top-level import packages of every registered backend's engine (Backend.import_packages)."""
        return tuple(sorted({pkg for r in self.items["backend"].values() for pkg in r.item.import_packages()}))


_default: PluginManager | None = None


def get_plugin_manager() -> PluginManager:
    """The process-wide plugin manager, built on first use from entry points."""
    global _default
    if _default is None:
        _default = PluginManager()
    return _default


def reset_plugin_manager() -> None:
    """Forget the process-wide manager (tests that install plugins at run time use this)."""
    global _default
    _default = None
