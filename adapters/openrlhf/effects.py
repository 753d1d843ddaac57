"""OpenRLHF: what the knob effect test's sample value of each canonical knob does to an OpenRLHF plan
(rlbridge.contract.effects says the forms; `OpenRLHFBackend.knob_effects` returns EFFECTS), for the
adapter's default OpenRLHF version. Keys are train_ppo_ray's dotted flags as
OpenRLHFBackend.native_settings spells them, `launch.*` for what the adapter's launcher does; values
follow the samples in rlbridge.contract.effects.SAMPLES, planned on the quickstart (8 prompts x
group 8, 16 new tokens, 150 steps). Knobs the capability table rejects need no entry."""

from __future__ import annotations

from rlbridge.contract.effects import ABSENT, DPO_STAGE, REFUSED, SFT_STAGE, TEMPLATE, KnobEffect

PPO = ("algorithm.name=ppo",)  # the critic's knobs and GAE need an algorithm with a critic
# OpenRLHF packs samples with flash attention: GPUs only
ONE_GPU = ("resources.gpus_per_node=1",)

EFFECTS = {
    "algorithm.name": {"algo.advantage.estimator": "rloo"},
    "algorithm.group_size": {"rollout.n_samples_per_prompt": 4},
    "algorithm.kl_coef": {"algo.kl.init_coef": 0.05, "algo.kl.use_loss": True},
    "algorithm.kl_placement": {"algo.kl.use_loss": ABSENT},
    "algorithm.clip_low": {"actor.eps_clip_low_high": [0.1, 0.1]},
    "algorithm.clip_high": {"actor.eps_clip_low_high": [0.2, 0.28]},
    "algorithm.loss_aggregation": {"actor.loss_agg_mode": "seq-mean-token-mean"},
    "algorithm.advantage_normalization": {"algo.advantage.no_std_norm": True},
    "algorithm.epochs_per_rollout": {"train.max_epochs": 2},
    "algorithm.kl_estimator": {"algo.kl.estimator": "k2"},
    "algorithm.entropy_coef": {"actor.entropy_coef": 0.01},
    "algorithm.gamma": KnobEffect({"algo.advantage.gamma": 0.99}, context=PPO),
    "algorithm.gae_lambda": KnobEffect({"algo.advantage.lambd": 0.95}, context=PPO),
    "algorithm.dynamic_sampling": {"algo.dynamic_filtering_enable": True, "algo.dynamic_filtering_range": [0.0, 1.0]},
    "algorithm.rollout_correction": {
        "algo.advantage.is_correction_level": "token",
        "algo.advantage.is_correction_mode": "clip",
    },
    "algorithm.rollout_correction_threshold": {"algo.advantage.is_correction_threshold": 4.0},
    "model.path": {"launch.model.path": "org/model"},
    "model.dtype": {"ds.param_dtype": "fp16"},
    "model.chat_template": {"launch.model.chat_template": TEMPLATE},
    "model.use_chat_template": {"data.apply_chat_template": True, "data.input_template": ABSENT},
    "model.chat_template_kwargs": {
        "launch.data.chat_template_kwargs.enable_thinking": False,
        "data.input_template": "{}",
    },
    "model.lora": {"ds.lora.rank": 4, "ds.lora.alpha": 8, "ds.lora.target_modules": ["q_proj", "v_proj"]},
    "data.eval": {"eval.dataset": "<run_dir>/data/eval.jsonl", "eval.steps": 10},
    "data.eval_interval": {"eval.steps": 5},
    "data.prompt_key": {"launch.data.prompt_key": "question"},
    "data.answer_key": {"launch.data.answer_key": "label"},
    "rollout.engine": KnobEffect(REFUSED, value="hf"),  # vLLM only
    "rollout.max_new_tokens": {"rollout.max_new_tokens": 32},
    "rollout.max_prompt_tokens": {"data.max_len": 64 + 16},  # prompt + the quickstart's 16 new tokens
    "rollout.temperature": {"rollout.temperature": 0.7},
    "rollout.top_p": {"rollout.top_p": 0.9},
    "rollout.gpu_memory_utilization": {"vllm.gpu_memory_utilization": 0.5},
    "rollout.tensor_parallel_size": KnobEffect(
        {"vllm.tensor_parallel_size": 2, "vllm.num_engines": 1}, context=("resources.gpus_per_node=2",)
    ),
    "rollout.drop_overlong_prompts": {"launch.data.drop_over": 64},
    # the asynchronous loop (adapters/openrlhf/asynchrony.py)
    "rollout.max_staleness": {"train.async_enable": True, "train.async_queue_size": 2},
    "rollout.partial_rollouts": {"train.partial_rollout_enable": True},
    "rollout.weight_sync_interval": REFUSED,
    "reward": {"launch.rewards": [{"name": "digit_match", "weight": 2.0, "args": {}}]},
    "environment": {"train.agent_func_path": "<run_dir>/rlbridge_agent.py"},
    "training.steps": {"data.max_samples": 7 * 8},  # steps x prompts per step
    "training.epochs": {"train.num_episodes": 2, "data.max_samples": ABSENT},
    "training.lr": {"actor.adam.lr": 0.001},
    "training.lr_schedule": {"actor.lr_scheduler": "cosine"},
    "training.warmup_steps": {"actor.lr_warmup_ratio": 3 / 150},
    "training.weight_decay": {"actor.adam.weight_decay": 0.01},
    "training.batch_size": {"rollout.batch_size": 4},
    "training.mini_batch_size": {"train.batch_size": 16},
    "training.micro_batch_size": {"train.micro_batch_size": 4},
    "training.forward_micro_batch_size": {"rollout.micro_batch_size": 16},
    "training.grad_clip": {"actor.max_norm": 0.5},
    "training.seed": {"train.seed": 123},
    "training.torch_threads": {"launch.env.OMP_NUM_THREADS": "2"},
    "training.deterministic": {"train.full_determinism_enable": True, "launch.env.RLBRIDGE_SEED": "0"},
    "training.gradient_checkpointing": {"actor.gradient_checkpointing_enable": True},
    "training.max_tokens_per_device": KnobEffect(
        {"train.dynamic_batch_enable": True, "train.max_tokens_per_gpu": 4096, "rollout.max_tokens_per_gpu": 4096},
        context=ONE_GPU,
    ),
    "training.sequence_packing": KnobEffect({"ds.packing_samples": True}, context=ONE_GPU),
    "training.sequence_parallel_size": KnobEffect({"ds.ring_attn_size": 2}, context=("resources.gpus_per_node=2",)),
    # the training layout (adapters/openrlhf/layout.py)
    "training.strategy": REFUSED,  # fsdp: OpenRLHF trains with DeepSpeed only
    "training.sharding": KnobEffect({"ds.zero_stage": 3}, context=ONE_GPU),  # ZeRO-3 gives NaN on CPU
    "training.shard_group_size": KnobEffect({"ds.zpg": 2}, context=("training.sharding=parameters",)),  # hpZ: ZeRO-3
    # parameter offload of trained models is not offered by OpenRLHF (its test_openrlhf_plan.py refuses it)
    "training.offload": KnobEffect(
        {"ds.adam_offload": True, "ref.offload": True},
        value={"optimizer": True, "reference": True},
        context=("training.sharding=parameters", "algorithm.kl_coef=0.05", *ONE_GPU),  # on CPU nothing moves
    ),
    "training.tensor_parallel_size": {"ds.tensor_parallel_size": 2},
    # colocated engines must cover the actor's GPUs: fewer replicas than rollout devices on a split layout
    "rollout.data_parallel_size": KnobEffect(
        {"vllm.num_engines": 1},
        value=1,
        context=("resources.gpus_per_node=4", "placement.policy=split", "placement.args={rollout_gpus: 2}"),
    ),
    "resources.cpu_ranks_per_node": {"actor.num_gpus_per_node": 2, "launch.ray.logical_gpus": 4},
    "resources.nodes": {"actor.num_nodes": 2},
    "resources.ray_address": {"launch.ray.address": "127.0.0.1:6379"},
    "resources.gpus_per_node": {"actor.num_gpus_per_node": 2},
    "resources.cpus_per_node": {"launch.ray.num_cpus": 3},
    "placement.policy": {"actor.num_gpus_per_node": 2, "vllm.num_engines": 1, "train.colocate_all": ABSENT},
    "placement.args": KnobEffect(
        {"actor.num_gpus_per_node": 2, "vllm.num_engines": 2},
        context=("resources.gpus_per_node=4", "placement.policy=split"),
    ),
    "checkpoint.dir": {"ckpt.path": "/tmp/rlbridge-effect/ckpt"},
    "checkpoint.interval": {"ckpt.save_steps": 5},
    "checkpoint.resume": {"ckpt.load_enable": True},
    "checkpoint.keep_last": {"ckpt.max_num": 2},
    "critic.path": KnobEffect({"critic.model_name_or_path": "org/critic"}, context=PPO),
    "critic.lr": KnobEffect({"critic.adam.lr": 1e-5}, context=PPO),
    "critic.value_clip": KnobEffect({"critic.value_clip": 0.2}, context=PPO),
    "critic.warmup_steps": KnobEffect({"critic.freezing_steps": 3}, context=PPO),
    "critic.micro_batch_size": KnobEffect(REFUSED, context=PPO),  # one --train.micro_batch_size for actor and critic
    # the offline stages (adapters/openrlhf/stages.py): train_sft / train_dpo flags
    "offline.max_length": KnobEffect({"data.max_len": 256}, context=SFT_STAGE),
    "offline.completion_only_loss": KnobEffect({"model.pretrain_mode_enable": True}, context=SFT_STAGE),
    "offline.packing": KnobEffect(
        {"ds.packing_samples": True}, context=(*SFT_STAGE, "resources.gpus_per_node=1")
    ),  # flash attention
    "offline.dpo_loss": KnobEffect({"model.ipo_enable": True}, context=DPO_STAGE),
    "offline.dpo_beta": KnobEffect({"model.beta": 0.5}, context=DPO_STAGE),
    "offline.reference_model": KnobEffect({"ref.model_name_or_path": "org/reference"}, context=DPO_STAGE),
}
