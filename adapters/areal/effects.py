"""AReaL: what the knob effect test's sample value of each canonical knob does to an AReaL plan
(rlbridge.contract.effects says the forms; `ArealBackend.knob_effects` returns EFFECTS), for AReaL 1.0.4. Keys
are AReaL's config keys as ArealBackend.native_settings spells them (dotted), `launch.*` for what the adapter's
launcher does; values follow the samples in rlbridge.contract.effects.SAMPLES, planned on the quickstart (8
prompts x group 8, 16 new tokens, 150 steps, CPU). Knobs the capability table rejects need no entry."""

from __future__ import annotations

from rlbridge.contract.effects import REFUSED, TEMPLATE, KnobEffect
from rlbridge_adapters.areal.backend import DYNAMIC_FILTER

PPO = ("algorithm.name=ppo",)  # the critic's knobs and GAE need an algorithm with a critic
KL_IN_REWARD = ("algorithm.kl_placement=reward",)  # where AReaL puts the KL penalty
ONE_GPU = ("resources.gpus_per_node=1",)
TWO_GPUS = ("resources.gpus_per_node=2",)
MEGATRON = ("training.strategy=megatron",)


def _spec(threads: int) -> list[dict]:
    return [
        {
            "task_type": "worker",
            "port_count": 2,
            "gpu": 0,
            "cpu": threads,
            "mem": 8,
            "cmd": "python3 -m areal.infra.rpc.rpc_server",
            "env_vars": {},
        }
    ]


EFFECTS = {
    "algorithm.name": {"actor.reward_norm.mean_leave1out": True, "actor.reward_norm.std_level": None},
    "algorithm.group_size": {"gconfig.n_samples": 4, "actor.reward_norm.group_size": 4},
    "algorithm.kl_coef": KnobEffect({"actor.kl_ctl": 0.05, "ref.path": "<model_dir>"}, context=KL_IN_REWARD),
    "algorithm.kl_placement": {"actor.kl_ctl": 0.05},
    "algorithm.clip_low": {"actor.eps_clip": 0.1},
    "algorithm.clip_high": {"actor.eps_clip_higher": 0.28},
    "algorithm.advantage_normalization": {"actor.reward_norm.std_level": None},
    "algorithm.kl_estimator": KnobEffect({"actor.kl_estimator": "k2"}, context=KL_IN_REWARD),
    "algorithm.gamma": KnobEffect({"actor.discount": 0.99}, context=("algorithm.name=reinforce_pp",)),
    "algorithm.gae_lambda": KnobEffect({"actor.gae_lambda": 0.95}, context=PPO),
    "algorithm.dynamic_sampling": {"launch.train.dynamic_filter_fn": DYNAMIC_FILTER},
    "algorithm.rollout_correction": {
        "actor.use_decoupled_loss": True,
        "actor.rejection_sampling.level": "token",
        "actor.rejection_sampling.action": "clamp",
    },
    "algorithm.rollout_correction_threshold": {"actor.rejection_sampling.upper": 4.0},
    "model.path": {"launch.model.path": "org/model"},
    "model.dtype": KnobEffect({"actor.dtype": "float16", "vllm.dtype": "float16"}, context=ONE_GPU),  # CPU: float32
    "model.chat_template": {"launch.model.chat_template": TEMPLATE},
    "model.use_chat_template": {"launch.workflow.use_chat_template": True},
    "model.chat_template_kwargs": {"launch.workflow.chat_template_kwargs.enable_thinking": False},
    "model.lora": {
        "actor.use_lora": True,
        "actor.lora_rank": 4,
        "actor.lora_alpha": 8,
        "actor.target_modules": ["q_proj", "v_proj"],
        "rollout.use_lora": True,
    },
    "data.eval": {"valid_dataset.batch_size": 8, "evaluator.freq_steps": 10},
    "data.eval_interval": {"evaluator.freq_steps": 5},
    "data.prompt_key": {"launch.data.prompt_key": "question"},
    "data.answer_key": {"launch.data.answer_key": "label"},
    "data.shuffle": {"train_dataset.shuffle": False},
    # auto is vLLM already: SGLang (GPUs) is the value that moves the plan
    "rollout.engine": KnobEffect({"rollout.backend": "sglang:d1t1"}, value="sglang", context=ONE_GPU),
    "rollout.max_new_tokens": {"gconfig.max_new_tokens": 32, "actor.max_new_tokens": 32},
    "rollout.max_prompt_tokens": {"gconfig.max_tokens": 64 + 16, "vllm.max_model_len": 64 + 16},
    "rollout.temperature": {"gconfig.temperature": 0.7, "actor.temperature": 0.7},
    "rollout.top_p": {"gconfig.top_p": 0.9},
    "rollout.top_k": {"gconfig.top_k": 5},
    "rollout.gpu_memory_utilization": {"vllm.gpu_memory_utilization": 0.5},
    "rollout.tensor_parallel_size": KnobEffect({"rollout.backend": "vllm:d1t2"}, context=TWO_GPUS),
    "rollout.drop_overlong_prompts": {"launch.data.drop_over": 64},
    # the asynchronous loop (adapters/areal/asynchrony.py): AReaL's interruptible generation is always on
    "rollout.max_staleness": KnobEffect(
        {"rollout.max_head_offpolicyness": 2}, context=("rollout.partial_rollouts=true",)
    ),
    "rollout.partial_rollouts": KnobEffect(REFUSED, value=False),
    "reward": {"launch.rewards": [{"name": "digit_match", "weight": 2.0, "args": {}}]},
    "training.steps": {"total_train_steps": 7, "launch.data.rows": 7 * 8},  # steps x prompts per step
    "training.epochs": {"total_train_epochs": 2},
    "training.lr": {"actor.optimizer.lr": 0.001},
    "training.lr_schedule": {"actor.optimizer.lr_scheduler_type": "cosine"},
    "training.warmup_steps": {"actor.optimizer.warmup_steps_proportion": 3 / 150},
    "training.weight_decay": {"actor.optimizer.weight_decay": 0.01},
    "training.batch_size": {"train_dataset.batch_size": 4, "rollout.consumer_batch_size": 4},
    "training.mini_batch_size": {"actor.ppo_n_minibatches": 64 // 16},
    "training.micro_batch_size": {"actor.mb_spec.n_mbs": 64 // 4},
    "training.grad_clip": {"actor.optimizer.gradient_clipping": 0.5},
    "training.seed": {"seed": 123, "vllm.seed": 123},
    "training.torch_threads": {"actor.scheduling_spec": _spec(2)},
    "training.gradient_checkpointing": {"actor.gradient_checkpointing": True},
    "training.max_tokens_per_device": {"actor.mb_spec.max_tokens_per_mb": 4096},
    "training.sequence_parallel_size": KnobEffect({"actor.backend": "fsdp:d1t1c2"}, context=TWO_GPUS),
    # the training layout (adapters/areal/layout.py): auto is fsdp with parameters sharded already
    "training.strategy": KnobEffect({"actor.backend": "megatron:d1p1t1"}, value="megatron", context=ONE_GPU),
    "training.sharding": KnobEffect(REFUSED, value="none"),
    "training.offload": {"actor.fsdp.offload_params": True},
    "training.tensor_parallel_size": KnobEffect({"actor.backend": "fsdp:d1t2c1"}, context=TWO_GPUS),
    "training.pipeline_parallel_size": KnobEffect({"actor.backend": "megatron:d1p2t1"}, context=MEGATRON),
    "training.expert_parallel_size": KnobEffect({"actor.backend": "megatron:d2p1t1e2"}, context=MEGATRON),
    "rollout.data_parallel_size": KnobEffect({"rollout.backend": "vllm:d1t1"}, value=1),  # 2 GPUs give d2 unasked
    "resources.cpu_ranks_per_node": {"actor.backend": "fsdp:d2t1c1"},
    "resources.nodes": {"cluster.n_nodes": 2},
    "resources.ray_address": {"scheduler.type": "ray", "launch.env.RAY_ADDRESS": "127.0.0.1:6379"},
    "resources.gpus_per_node": {
        "cluster.n_gpus_per_node": 2,
        "actor.backend": "fsdp:d2t1c1",
        "rollout.backend": "vllm:d2t1",
    },
    "placement.policy": {"actor.backend": "fsdp:d2t1c1", "rollout.backend": "vllm:d1t1"},
    "placement.args": KnobEffect(
        {"actor.backend": "fsdp:d2t1c1", "rollout.backend": "vllm:d2t1"},
        context=("resources.gpus_per_node=4", "placement.policy=split"),
    ),
    "checkpoint.dir": {"recover.fileroot": "/tmp/rlbridge-effect/ckpt/areal"},
    "checkpoint.interval": {"recover.freq_steps": 5, "recover.mode": "on"},
    "checkpoint.resume": {"recover.mode": "on", "launch.resume": True},
    "checkpoint.keep_last": {"launch.keep_last": 2},
    "critic.path": KnobEffect({"critic.path": "org/critic"}, context=PPO),
    "critic.lr": KnobEffect({"critic.optimizer.lr": 1e-5}, context=PPO),
    "critic.value_clip": KnobEffect({"critic.eps_clip": 0.2}, context=PPO),
    "critic.micro_batch_size": KnobEffect({"critic.mb_spec.n_mbs": 64 // 4}, context=PPO),
}
