"""The training layout's knobs on AReaL (docs/scale.md): strategy, sharding, offload, tensor/pipeline/expert
parallel sizes, the hybrid-shard group, the CPU ranks and the rollout's replicas. Their capability entries
(joined to the table by knobs.py) and their translation live here, beside each other.

AReaL states each engine's layout as an allocation string (areal/api/alloc_mode.py): `actor.backend`
`fsdp:d2t1c1` (FSDP2, data x tensor x context parallel, areal/engine/fsdp_engine.py) or `megatron:d2p2t2e2`
(Megatron-Core), and `rollout.backend` `vllm:d2t1` (inference servers x tensor parallel). Its FSDP2 engine
always shards parameters, gradients and optimizer states over the data-parallel ranks (fully_shard on a
device mesh: no NO_SHARD, SHARD_GRAD_OP or hybrid mode), offloads with `actor.fsdp.offload_params`
(FSDP2's CPUOffloadPolicy: parameters, gradients and the optimizer step on the CPU) and runs on gloo on
CPU, one process per rank.
"""

from __future__ import annotations

from rlbridge.contract.backend import Capability, gpus_per_node, honoured, rejected
from rlbridge.contract.config import RunConfig
from rlbridge.contract.knob_checks import Check, refuse_when


def training_devices(config: RunConfig) -> int:
    """The training processes (ranks): every GPU on GPUs, resources.cpu_ranks_per_node per node on CPU;
    with placement split the rollout's GPUs are not the trainer's."""
    gpus = gpus_per_node(config)
    if gpus == 0:
        return config.resources.cpu_ranks_per_node * config.resources.nodes
    total = gpus * config.resources.nodes
    if config.placement.policy == "colocate":
        return total
    return max(total - rollout_devices(config), 1)


def rollout_devices(config: RunConfig) -> int:
    """Devices of the inference servers: every GPU when colocated, else placement.args.rollout_gpus; one
    server on CPU unless rollout.data_parallel_size asks for more."""
    gpus = gpus_per_node(config)
    if gpus == 0:
        return (config.rollout.data_parallel_size or 1) * config.rollout.tensor_parallel_size
    if config.placement.policy == "colocate":
        return gpus * config.resources.nodes
    return int(config.placement.args.get("rollout_gpus", 1))


def actor_backend(config: RunConfig) -> str:
    """`actor.backend`: the strategy and the data x tensor x context (x pipeline x expert) sizes."""
    tr = config.training
    devices = training_devices(config)
    data = max(devices // tr.model_parallel_size, 1)
    if strategy(config) == "megatron":
        dims = f"d{data}p{tr.pipeline_parallel_size}t{tr.tensor_parallel_size}"
        if tr.sequence_parallel_size > 1:
            dims += f"c{tr.sequence_parallel_size}"
        if tr.expert_parallel_size > 1:
            dims += f"e{tr.expert_parallel_size}"
        return f"megatron:{dims}"
    return f"fsdp:d{data}t{tr.tensor_parallel_size}c{tr.sequence_parallel_size}"


def rollout_backend(config: RunConfig, engine: str) -> str:
    """`rollout.backend`: the inference engine, its servers (replicas) and each one's tensor parallel size."""
    tp = config.rollout.tensor_parallel_size
    replicas = config.rollout.data_parallel_size or max(rollout_devices(config) // tp, 1)
    return f"{engine}:d{replicas}t{tp}"


def strategy(config: RunConfig) -> str:
    return "megatron" if config.training.strategy == "megatron" else "fsdp"


def _check_strategy(config: RunConfig) -> str | None:
    if config.training.strategy == "deepspeed":
        return "AReaL trains with FSDP2, Megatron-Core or Archon, not DeepSpeed; use fsdp (or auto)"
    if config.training.strategy == "megatron" and gpus_per_node(config) == 0:
        return (
            "AReaL's Megatron engine needs CUDA (megatron-core is only in its cuda extra); use fsdp on CPU "
            "(resources.gpus_per_node > 0 for megatron)"
        )
    return None


def _check_sharding(config: RunConfig) -> str | None:
    if config.training.sharding not in ("auto", "parameters"):
        return (
            "AReaL's FSDP2 engine always shards parameters, gradients and optimizer states over the data-parallel "
            "ranks (fully_shard, areal/engine/fsdp_utils/parallel.py); use parameters (or auto)"
        )
    if config.training.sharding == "parameters" and strategy(config) == "megatron":
        return (
            "AReaL's Megatron engine shards by its distributed optimizer, not by parameters; leave sharding auto "
            "with strategy megatron"
        )
    return None


def _check_offload(config: RunConfig) -> str | None:
    off = config.training.offload
    reference = off.parameters if off.reference is None else off.reference
    if not (off.parameters or off.optimizer or reference):
        return None
    if strategy(config) == "megatron":
        return "rlbridge maps training.offload to AReaL's FSDP engine only (actor.fsdp.offload_params); use fsdp"
    if off.parameters != off.optimizer:
        return (
            "AReaL's FSDP2 offload (actor.fsdp.offload_params, FSDP2's CPUOffloadPolicy) moves parameters, gradients "
            "and the optimizer step to the CPU together; set parameters and optimizer alike"
        )
    if reference != off.parameters:
        return (
            "AReaL's reference model takes the actor's engine settings (ref.fsdp.offload_params follows the actor "
            "here); leave offload.reference unset"
        )
    return None


def _check_megatron_only(knob: str) -> Check:
    return refuse_when(
        lambda c: getattr(c.training, knob.split(".")[1]) > 1 and strategy(c) != "megatron",
        f"AReaL's FSDP backend supports data, tensor and context parallelism only (areal/api/alloc_mode.py "
        f"ModelAllocation); {knob} needs training.strategy: megatron (on GPUs)",
    )


_check_replicas = refuse_when(
    lambda c: c.rollout.data_parallel_size is not None and c.rollout.data_parallel_size > 1 and gpus_per_node(c) == 0,
    "each of AReaL's inference servers is one vLLM engine with its own model copy; rlbridge runs one on CPU "
    "(two vLLM-CPU servers and the trainer exceed a small machine); leave it unset on CPU",
)


def capabilities() -> list[Capability]:
    return [
        honoured(
            "training.strategy",
            "actor.backend",
            _check_strategy,
            note="fsdp (auto): actor.backend fsdp:...; megatron: megatron:... (GPUs)",
        ),
        honoured(
            "training.sharding",
            "actor.backend",
            _check_sharding,
            note="AReaL's FSDP2 engine shards parameters (FULL_SHARD): parameters and auto only",
        ),
        rejected(
            "training.shard_group_size",
            "AReaL's FSDP2 engine shards over every data-parallel rank (one mesh dimension, no hybrid shard); "
            "leave it unset",
        ),
        honoured(
            "training.offload",
            ("actor.fsdp.offload_params", "ref.fsdp.offload_params", "critic.fsdp.offload_params"),
            _check_offload,
            note="FSDP2 CPUOffloadPolicy: parameters, gradients and optimizer states together",
        ),
        honoured("training.tensor_parallel_size", "actor.backend", note="fsdp:d..t.. (DTensor), megatron:..t.."),
        honoured(
            "training.pipeline_parallel_size",
            "actor.backend",
            _check_megatron_only("training.pipeline_parallel_size"),
            note="megatron:..p..",
        ),
        honoured(
            "training.expert_parallel_size",
            "actor.backend",
            _check_megatron_only("training.expert_parallel_size"),
            note="megatron:..e..",
        ),
        honoured(
            "rollout.data_parallel_size",
            "rollout.backend",
            _check_replicas,
            note="rollout.backend vllm:d<replicas>t<tp>: AReaL's inference servers",
        ),
        honoured(
            "resources.cpu_ranks_per_node",
            ("actor.backend", "cluster.n_gpus_per_node"),
            note="fsdp:d<ranks> on CPU: AReaL's local scheduler starts one training process per rank, FSDP2 on gloo",
        ),
    ]


def translate(config: RunConfig, areal: dict) -> None:
    """The layout's native keys (in place)."""
    off = config.training.offload
    if off.parameters and strategy(config) == "fsdp":
        for role in ("actor", "ref", "critic"):
            if role in areal:
                areal[role].setdefault("fsdp", {})["offload_params"] = True
