"""The training layout's knobs on trl (docs/scale.md): strategy, sharding, offload, tensor/pipeline/expert
parallel sizes, the hybrid-shard group, the CPU ranks and the rollout's replicas. Their capability
entries (joined to the table by knobs.py) and their translation live here, beside each other.
"""

from __future__ import annotations

from rlbridge.contract.backend import Capability, rejected

LAYOUT_KNOBS = (
    "training.strategy",
    "training.sharding",
    "training.shard_group_size",
    "training.offload",
    "training.tensor_parallel_size",
    "training.pipeline_parallel_size",
    "training.expert_parallel_size",
    "rollout.data_parallel_size",
    "resources.cpu_ranks_per_node",
)


def capabilities() -> list[Capability]:
    return [rejected(knob, "not mapped on this engine yet") for knob in LAYOUT_KNOBS]
