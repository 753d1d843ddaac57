"""TRL: what the knob effect test's sample value of each canonical knob does to a TRL plan
(rlbridge.contract.effects says the forms; `TRLBackend.knob_effects` returns EFFECTS). Keys are
GRPOConfig/RLOOConfig fields as TRLBackend.native_settings spells them, `launch.*` for what the
adapter's launcher does; values follow the samples in rlbridge.contract.effects.SAMPLES, planned on
the quickstart (8 prompts x group 8, 150 steps). Knobs the capability table rejects need no entry."""

from __future__ import annotations

from rlbridge.contract.effects import DPO_STAGE, REFUSED, SFT_STAGE, TEMPLATE, KnobEffect

VLLM = ("rollout.engine=vllm",)
SPLIT = ("placement.policy=split", "placement.args={rollout_gpus: 1}")  # the async trainer's vLLM server
# a GPU plan in float32: the plans are also validated by TRL's own GRPOConfig here, which refuses bf16 off GPUs
F32 = ("model.dtype=float32",)
GPUS = ("resources.gpus_per_node=2", *F32)

EFFECTS = {
    "algorithm.name": {"launch.trainer": "RLOOTrainer"},
    "algorithm.group_size": {"num_generations": 4},
    "algorithm.kl_coef": {"beta": 0.05},
    "algorithm.kl_placement": REFUSED,  # GRPOTrainer puts KL in the loss only
    "algorithm.clip_low": {"epsilon": 0.1},
    "algorithm.clip_high": {"epsilon_high": 0.28},
    "algorithm.loss_aggregation": {"loss_type": "grpo"},
    "algorithm.advantage_normalization": {"scale_rewards": "none"},
    "algorithm.epochs_per_rollout": {"num_iterations": 2},
    "algorithm.kl_estimator": REFUSED,  # k3 in GRPOTrainer's loss, fixed
    "algorithm.entropy_coef": {"entropy_coef": 0.01},
    "algorithm.rollout_correction": KnobEffect(
        {"vllm_importance_sampling_correction": True, "vllm_importance_sampling_mode": "token_truncate"}, context=VLLM
    ),
    "algorithm.rollout_correction_threshold": KnobEffect({"vllm_importance_sampling_clip_max": 4.0}, context=VLLM),
    "model.path": {"launch.model.path": "org/model"},
    "model.dtype": {"model_init_kwargs.dtype": "float16"},
    "model.chat_template": {"launch.data.chat_template": TEMPLATE},
    "model.use_chat_template": {"launch.data.use_chat_template": True},
    "model.chat_template_kwargs": {"chat_template_kwargs": {"enable_thinking": False}},
    "model.lora": {"launch.lora.r": 4, "launch.lora.lora_alpha": 8, "launch.lora.target_modules": ["q_proj", "v_proj"]},
    "data.eval": {"eval_strategy": "steps", "eval_steps": 10},
    "data.eval_interval": {"eval_steps": 5},
    "data.prompt_key": {"launch.data.prompt_key": "question"},
    "data.answer_key": {"launch.data.answer_key": "label"},
    "data.shuffle": {"shuffle_dataset": False},
    "rollout.engine": {"use_vllm": True, "vllm_mode": "colocate"},
    "rollout.max_new_tokens": {"max_completion_length": 32},
    "rollout.max_prompt_tokens": {"launch.data.max_prompt_tokens": 64},
    "rollout.temperature": {"temperature": 0.7},
    "rollout.top_p": {"top_p": 0.9},
    "rollout.top_k": {"top_k": 5},
    "rollout.gpu_memory_utilization": {"vllm_gpu_memory_utilization": 0.5},
    # TRL's colocated vLLM shards over groups of training processes: two GPUs, two processes, one group
    "rollout.tensor_parallel_size": KnobEffect({"vllm_tensor_parallel_size": 2}, context=GPUS),
    "rollout.drop_overlong_prompts": {"launch.data.drop_overlong_prompts": True},
    "rollout.max_staleness": KnobEffect({"launch.trainer": "AsyncGRPOTrainer", "max_staleness": 2}, context=SPLIT),
    "rollout.partial_rollouts": KnobEffect({"launch.pause_mode": "keep"}, context=SPLIT),
    "rollout.weight_sync_interval": KnobEffect({"weight_sync_steps": 2}, context=SPLIT),
    "reward": {"reward_weights": [2.0], "launch.rewards": [{"name": "digit_match", "weight": 2.0, "args": {}}]},
    "environment": {"launch.environment.name": "digit_turns", "launch.environment.max_turns": 2},
    "training.steps": {"max_steps": 7},
    "training.epochs": {"num_train_epochs": 2, "max_steps": -1},
    "training.lr": {"learning_rate": 0.001},
    "training.lr_schedule": {"lr_scheduler_type": "cosine"},
    "training.warmup_steps": {
        "warmup_steps": 3,
        "lr_scheduler_type": "constant_with_warmup",
    },  # transformers' "constant" has no warmup
    "training.weight_decay": {"weight_decay": 0.01},
    "training.batch_size": {"generation_batch_size": 32},
    "training.mini_batch_size": {"per_device_train_batch_size": 16, "max_steps": 150 * 4},
    "training.micro_batch_size": {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 16},
    "training.grad_clip": {"max_grad_norm": 0.5},
    "training.seed": {"seed": 123, "data_seed": 123},
    "training.torch_threads": {"launch.torch_threads": 2},
    "training.deterministic": {"full_determinism": True},
    "training.gradient_checkpointing": {"gradient_checkpointing": True},
    "resources.gpus_per_node": KnobEffect(
        {"use_cpu": False, "accelerate.num_processes": 2, "accelerate.distributed_type": "MULTI_GPU"}, context=F32
    ),
    # one accelerate launch per node (TRL runs without Ray: the sample's ray_address is not TRL's)
    "resources.nodes": KnobEffect(
        {"accelerate.num_machines": 2, "accelerate.num_processes": 2}, context=("resources.ray_address=null", *F32)
    ),
    "resources.cpus_per_node": KnobEffect({"launch.torch_threads": 3}, context=("training.torch_threads=null",)),
    # split without the async loop: GRPOTrainer's vllm_mode server against trl vllm-serve on the rollout GPU
    "placement.policy": KnobEffect(
        {"vllm_mode": "server", "launch.placement.actor": 2, "launch.placement.rollout": 1}, context=F32
    ),
    "placement.args": REFUSED,  # 'colocate' takes no arguments
    # the training layout (layout.py): accelerate's own config-file keys
    "training.strategy": {"accelerate.distributed_type": "FSDP", "accelerate.fsdp_config.fsdp_version": 2},
    "training.sharding": KnobEffect(
        {"accelerate.deepspeed_config.zero_stage": 3}, context=("training.strategy=deepspeed", *GPUS)
    ),
    "training.shard_group_size": KnobEffect(
        {
            "accelerate.parallelism_config.parallelism_config_dp_shard_size": 2,
            "accelerate.parallelism_config.parallelism_config_dp_replicate_size": 2,
        },
        context=("training.strategy=fsdp", *F32),
    ),
    "training.offload": KnobEffect(
        {
            "accelerate.deepspeed_config.offload_optimizer_device": "cpu",
            "accelerate.deepspeed_config.offload_param_device": "cpu",
        },
        context=("training.strategy=deepspeed", "training.sharding=parameters", *GPUS),
    ),
    # split placement's trl vllm-serve: one engine instead of one per rollout GPU
    "rollout.data_parallel_size": KnobEffect(
        {"launch.server.data_parallel_size": 1},
        value=1,
        context=("placement.policy=split", "placement.args={rollout_gpus: 2}", "resources.gpus_per_node=3", *F32),
    ),
    "resources.cpu_ranks_per_node": {"accelerate.num_processes": 2, "accelerate.distributed_type": "MULTI_CPU"},
    "checkpoint.dir": {"output_dir": "/tmp/rlbridge-effect/ckpt"},
    "checkpoint.interval": {"save_strategy": "steps", "save_steps": 5},
    "checkpoint.resume": {"launch.resume": True},
    "checkpoint.keep_last": {"save_total_limit": 2},
    # the offline stages (adapters/trl/stages.py): SFTConfig / DPOConfig fields
    "offline.max_length": KnobEffect({"max_length": 256}, context=SFT_STAGE),
    "offline.completion_only_loss": KnobEffect({"completion_only_loss": False}, context=SFT_STAGE),
    # bfd packing is padding-free, which needs flash attention (a GPU)
    "offline.packing": KnobEffect(
        {"packing": True, "packing_strategy": "bfd"},
        context=(*SFT_STAGE, "resources.gpus_per_node=1", "model.dtype=float32"),
    ),
    "offline.dpo_loss": KnobEffect({"loss_type": ["ipo"]}, context=DPO_STAGE),
    "offline.dpo_beta": KnobEffect({"beta": 0.5}, context=DPO_STAGE),
    "offline.reference_model": KnobEffect({"launch.reference_model": "org/reference"}, context=DPO_STAGE),
}
