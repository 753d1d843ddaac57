"""Built-in placement policies: where actor, rollout and reference run."""

from __future__ import annotations

from rlbridge import hookimpl
from rlbridge.errors import ConfigError
from rlbridge.contract.registry import PlacementPolicy


def _gpus(config) -> int:
    g = config.resources.gpus_per_node
    return 0 if g == "auto" else int(g)


def _devices_per_node(config) -> int:
    """GPUs per node, or on CPU the logical devices resources.cpu_ranks_per_node asks for (one rank each)."""
    return _gpus(config) or config.resources.cpu_ranks_per_node


def colocate(config) -> dict:
    """Actor, rollout and reference share every device (time-sliced)."""
    if config.placement.args:
        raise ConfigError(f"placement.args: 'colocate' takes no arguments (got {sorted(config.placement.args)})")
    devices = _devices_per_node(config) * config.resources.nodes
    return {"actor": devices, "rollout": devices, "reference": devices, "shared": True}


def split(config) -> dict:
    """Rollout gets `rollout_gpus` of its own devices; actor and reference share the rest. On CPU
    (gpus_per_node 0) the devices are logical GPUs of the run's Ray cluster: resources.cpu_ranks_per_node
    training devices per node, and `rollout_gpus` more for the rollout."""
    unknown = set(config.placement.args) - {"rollout_gpus"}
    if unknown:
        raise ConfigError(f"placement.args: 'split' takes only rollout_gpus (unknown: {sorted(unknown)})")
    total = _gpus(config) * config.resources.nodes
    rollout = config.placement.args.get("rollout_gpus")
    if not isinstance(rollout, int) or rollout < 1:
        raise ConfigError("placement.args.rollout_gpus: 'split' needs a positive number of rollout GPUs")
    if total == 0:  # CPU: logical GPUs of the run's Ray cluster, the training ranks plus the rollout's own
        ranks = config.resources.cpu_ranks_per_node * config.resources.nodes
        return {
            "actor": ranks,
            "rollout": rollout,
            "reference": ranks,
            "shared": False,
        }
    if rollout >= total:
        raise ConfigError(
            f"placement.args.rollout_gpus: {rollout} leaves no GPU for training out of {total}; "
            f"use fewer rollout GPUs or placement.policy: colocate"
        )
    return {"actor": total - rollout, "rollout": rollout, "reference": total - rollout, "shared": False}


@hookimpl
def rlbridge_register_placement_policies():
    return [
        PlacementPolicy("colocate", colocate, "actor, rollout and reference share all devices"),
        PlacementPolicy("split", split, "rollout on its own GPUs (args: rollout_gpus)"),
    ]
