"""The training layout's knobs on openrlhf (docs/scale.md): strategy, sharding, offload, tensor/pipeline/expert
parallel sizes, the hybrid-shard group, the CPU ranks and the rollout's replicas. Their capability
entries (joined to the table by knobs.py) and their translation live here, beside each other.

OpenRLHF trains every model with one DeepSpeed strategy (openrlhf.utils.get_strategy -> DeepspeedStrategy),
so the critic follows the actor in everything below; the reference model (an evaluation engine) runs at
ZeRO-3 when the actor does and unsharded otherwise (DeepspeedStrategy.get_ds_eval_config), on the actor's
devices. Every flag was read in the 0.11.2 wheel (cli/train_ppo_ray.py, utils/deepspeed/deepspeed.py and
deepspeed_utils.py) and, for the flat spellings before 0.10.2, in v0.9.10's and v0.10.1's train_ppo_ray.py.

A model copy is split over --ds.tensor_parallel_size x --ds.ring_attn_size ranks and the rest are
data-parallel: OpenRLHF's --train.batch_size is global and --train.micro_batch_size per rank, and
DeepSpeed accumulates train.batch_size x ring x tp / micro / world = mini / (micro x data-parallel ranks)
micro batches per update (DeepspeedStrategy.setup_distributed), so rlbridge's global mini and micro
batches pass through unchanged on any world size. Since 0.10.4 the loss of every micro batch is
normalised by the tokens of the whole update on every rank, times the data-parallel size that
DeepSpeed's gradient averaging divides out again (utils/loss_utils.py, models/loss.py aggregate_loss).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlbridge.contract.backend import Capability, all_checks, approximated, gpus_per_node, honoured, rejected
from rlbridge.contract.config import RunConfig
from rlbridge.contract.knob_checks import Check, refuse_when

ZERO_STAGE = {"none": 0, "optimizer": 1, "gradients": 2, "parameters": 3}
"""training.sharding -> DeepSpeed ZeRO stage (--ds.zero_stage)."""


def zero_stage(config: RunConfig) -> int:
    """--ds.zero_stage: training.sharding's stage; auto keeps rlbridge's choice before the knob existed
    (ZeRO-2, OpenRLHF's own default, on GPUs; ZeRO-0 on CPU)."""
    sharding = config.training.sharding
    if sharding == "auto":
        return 0 if gpus_per_node(config) == 0 else 2
    return ZERO_STAGE[sharding]


def rollout_devices(config: RunConfig) -> int:
    """Devices of the vLLM engines: all of the run's when colocated (on CPU the logical devices of
    resources.cpu_ranks_per_node, where each engine gets a logical GPU of its own next to the actor's),
    else the placement policy's rollout_gpus."""
    res = config.resources
    if config.placement.policy == "colocate":
        return (gpus_per_node(config) or res.cpu_ranks_per_node) * res.nodes
    return int(config.placement.args.get("rollout_gpus", 1))


def training_devices(config: RunConfig) -> int:
    """The actor's ranks, the ones the placement policy's layout gives the actor: every GPU when
    colocated, the GPUs beside the rollout's when split; on CPU resources.cpu_ranks_per_node per node
    (logical GPUs of the run's private Ray cluster, whatever the policy)."""
    gpus, res = gpus_per_node(config), config.resources
    if gpus == 0:
        return res.cpu_ranks_per_node * res.nodes
    if config.placement.policy == "colocate":
        return gpus * res.nodes
    return max(gpus * res.nodes - rollout_devices(config), 1)


def data_parallel_size(config: RunConfig) -> int:
    """Data-parallel ranks: OpenRLHF's DeepSpeed mesh is (dp, ring attention, tensor parallel)."""
    tr = config.training
    return max(training_devices(config) // (tr.tensor_parallel_size * tr.sequence_parallel_size), 1)


def vllm_engines(config: RunConfig) -> int:
    """--vllm.num_engines: rollout.data_parallel_size, or every rollout device over the engines'
    tensor-parallel size."""
    replicas = config.rollout.data_parallel_size
    return replicas or max(rollout_devices(config) // config.rollout.tensor_parallel_size, 1)


def _reference_offload(config: RunConfig) -> bool:
    offload = config.training.offload
    return offload.parameters if offload.reference is None else offload.reference


def has_reference(config: RunConfig) -> bool:
    """Whether OpenRLHF runs a reference model: a KL term in RL, and the DPO stage's reference."""
    return config.algorithm.name == "dpo" if config.is_offline else config.algorithm.kl_coef > 0


# --- capability checks -------------------------------------------------------------------------


_check_strategy = refuse_when(
    lambda c: c.training.strategy in ("fsdp", "megatron"),
    "OpenRLHF trains with DeepSpeed only (openrlhf.utils.get_strategy builds a DeepspeedStrategy for every "
    "model); use deepspeed or auto, or backend verl for fsdp and megatron",
)

_check_sharding = refuse_when(
    lambda c: c.training.sharding == "parameters" and gpus_per_node(c) == 0 and not c.is_offline,
    "OpenRLHF's ZeRO-3 does not train on CPU: with 2 gloo ranks its policy forward gives NaN log-probs "
    "(policy_loss and ppo_kl NaN at step 1; OpenRLHF 0.11.2, DeepSpeed 0.19.6, measured); use none, "
    "optimizer or gradients on CPU, or GPUs",
)

_check_shard_group = refuse_when(
    lambda c: c.training.shard_group_size is not None and zero_stage(c) != 3,
    "OpenRLHF's hybrid sharding is ZeRO++ hpZ (--ds.zpg, DeepSpeed zero_hpz_partition_size), which partitions "
    "the parameters of ZeRO-3 only; set training.sharding: parameters",
)


def _check_offload(config: RunConfig) -> str | None:
    offload = config.training.offload
    if offload.parameters:
        return (
            "OpenRLHF offloads no trained model's parameters: its DeepSpeed strategy writes offload_param 'none' "
            "into every trained model's config (DeepspeedStrategy.get_ds_train_config calls get_train_ds_config("
            "offload=False)); offload the optimizer (optimizer: true) or the reference model (reference: true)"
        )
    if offload.optimizer and config.training.sharding == "none":
        return (
            "--ds.adam_offload is DeepSpeed's ZeRO-Offload, which needs ZeRO stage 1-3 (at stage 0 DeepSpeed wraps the "
            "optimizer without it); set training.sharding to optimizer, gradients or parameters"
        )
    if _reference_offload(config) and not has_reference(config):
        return "this run has no reference model (algorithm.kl_coef 0, or an offline stage other than dpo); remove it"
    return None


def _offload_flags(config: RunConfig) -> dict[str, bool]:
    """The offload flags OpenRLHF honours for this config: none on CPU (everything is in CPU memory already),
    the reference's only at ZeRO-3 (--ref.offload sets DeepSpeed offload_param, which only ZeRO-3 honours)."""
    if gpus_per_node(config) == 0:
        return {}
    flags = {}
    if config.training.offload.optimizer:
        flags["ds.adam_offload"] = True
    if _reference_offload(config) and has_reference(config) and zero_stage(config) == 3:
        flags["ref.offload"] = True
    return flags


def _offload_approximated(config: RunConfig) -> bool:
    """Whether some offload asked for has no flag (the reference below ZeRO-3, anything on CPU)."""
    asked = {"ds.adam_offload": config.training.offload.optimizer, "ref.offload": _reference_offload(config)}
    return any(wanted and flag not in _offload_flags(config) for flag, wanted in asked.items())


_check_tensor_parallel = refuse_when(
    lambda c: c.training.tensor_parallel_size > 1 and c.model.dtype == "float16",
    "OpenRLHF asserts bf16 for DeepSpeed tensor-parallel training (DeepspeedStrategy.__init__: 'BF16 is "
    "required for tensor parallel training'); use model.dtype bfloat16 or auto",
)


def _check_replicas(config: RunConfig) -> str | None:
    replicas = config.rollout.data_parallel_size
    if replicas is None or gpus_per_node(config) == 0 or config.placement.policy != "colocate":
        return None
    tp, actor = config.rollout.tensor_parallel_size, training_devices(config)
    if config.rollout.max_staleness == 0 and replicas * tp != actor:
        return (
            f"colocated vLLM engines must cover the actor's GPUs exactly (train_ppo_ray asserts actor GPUs == "
            f"num_engines x tensor_parallel_size with --train.colocate_all): {replicas} x {tp} != {actor}; leave it "
            "unset, or use placement.policy: split"
        )
    return None


def _one_process(knob: str, is_set: Callable[[RunConfig], bool]) -> Check:
    """A check refusing `knob` on the offline stages, which rlbridge runs as one process."""
    return refuse_when(
        lambda c: c.is_offline and is_set(c),
        "rlbridge runs OpenRLHF's offline stages (train_sft / train_dpo / train_rm) as one process "
        f"(WORLD_SIZE 1); remove {knob}",
    )


def capabilities() -> list[Capability]:
    return [
        honoured(
            "training.strategy",
            (),
            _check_strategy,
            note="auto and deepspeed: DeepSpeed, OpenRLHF's one strategy, for the actor, the critic and the reference",
        ),
        honoured(
            "training.sharding",
            "ds.zero_stage",
            _check_sharding,
            note="none / optimizer / gradients / parameters: ZeRO-0/1/2/3 (auto: 2 on GPUs, 0 on CPU) for the "
            "actor and the critic; the reference is sharded (ZeRO-3) only with parameters",
        ),
        approximated(
            "training.shard_group_size",
            "ds.zpg",
            "DeepSpeed ZeRO++ hpZ (--ds.zpg): a secondary copy of the ZeRO-3 parameters is partitioned within groups "
            "of this many ranks, so that the backward all-gathers stay in the group; the optimizer states, gradients "
            "and primary parameters stay sharded over every data-parallel rank (not FSDP's HYBRID_SHARD replicas)",
            check=all_checks(
                _one_process("training.shard_group_size", lambda c: c.training.shard_group_size is not None),
                _check_shard_group,
            ),
            when=lambda c: c.training.shard_group_size is not None,
        ),
        approximated(
            "training.offload",
            ("ds.adam_offload", "ref.offload"),
            "the reference stays on its GPUs below ZeRO-3 (OpenRLHF's --ref.offload sets DeepSpeed offload_param, "
            "which only ZeRO-3 honours), and on CPU nothing moves (it is all in CPU memory); optimizer: "
            "--ds.adam_offload (ZeRO-Offload of the actor's and critic's optimizer states), reference: --ref.offload "
            "at ZeRO-3 (before 0.10.2 --ref_reward_offload, which offloads OpenRLHF's reward model too); trained "
            "models' parameters: not offered by OpenRLHF (refused)",
            check=_check_offload,
            when=_offload_approximated,
        ),
        honoured(
            "training.tensor_parallel_size",
            "ds.tensor_parallel_size",
            all_checks(
                _one_process("training.tensor_parallel_size", lambda c: c.training.tensor_parallel_size > 1),
                _check_tensor_parallel,
            ),
            note="DeepSpeed AutoTP (bf16), for the actor, the critic and the reference",
        ),
        rejected(
            "training.pipeline_parallel_size",
            "OpenRLHF has no pipeline parallelism: train_ppo_ray splits a model only by DeepSpeed AutoTP "
            "(--ds.tensor_parallel_size) and ring attention (--ds.ring_attn_size); use tensor_parallel_size or verl "
            "with megatron",
        ),
        rejected(
            "training.expert_parallel_size",
            "OpenRLHF has no expert parallelism: train_ppo_ray's MoE flags pick the experts' kernel "
            "(--ds.experts_implementation) and an auxiliary loss, and ZeRO shards experts like any weight; use verl "
            "with megatron",
        ),
        honoured("rollout.data_parallel_size", "vllm.num_engines", _check_replicas),
        honoured(
            "resources.cpu_ranks_per_node",
            ("actor.num_gpus_per_node", "launch.ray.logical_gpus"),
            _one_process("resources.cpu_ranks_per_node", lambda c: c.resources.cpu_ranks_per_node > 1),
            note="actor ranks on logical GPUs of the private Ray cluster, DeepSpeed over gloo; the reference and "
            "critic get as many",
        ),
    ]


def translate(config: RunConfig, flags: dict[str, Any]) -> None:
    """Add the layout's flags to `flags` (in place); the actor's and the engines' counts are backend.py's,
    from training_devices() and vllm_engines()."""
    tr = config.training
    flags["ds.zero_stage"] = zero_stage(config)
    flags.update(_offload_flags(config))
    if tr.shard_group_size is not None:
        flags["ds.zpg"] = tr.shard_group_size
    if tr.tensor_parallel_size > 1:
        flags["ds.tensor_parallel_size"] = tr.tensor_parallel_size
