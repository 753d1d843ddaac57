"""The knob effect test: every canonical knob, on every backend, provably reaches the engine.

For each canonical knob (rlbridge.contract.backend.canonical_knobs) the table EFFECTS below gives a
valid non-default value and, per backend, what that value must do to the plan:

* a dict {native key: expected value}: the knob is honoured or approximated there. Every key must be
  one the capability table names in its `native` (the table is a checked path, not prose), must hold
  the expected value in the plan (Backend.native_settings), and must differ from the plan of the
  same config without the knob (a knob that changes nothing is a silent drop). An approximated knob's
  note must show in the plan when its condition holds.
* REFUSED: this value is refused before anything starts, with an error naming the knob (a capability
  check, or the plugin that owns the knob), never a schema error.
* backends whose capability table says REJECTED need no entry: the test expects the capability error.

The test plans only (no engine is imported), so it runs for all three backends in the plain suite;
where the backend's engine is installed and supported (in each engine-environment cell of
`rlbridge compat run`), the engine's own validator also checks every translated plan
(Backend.validate, what `rlbridge plan --check` does).

HOW TO ADD A KNOB: add a field to rlbridge/contract/config.py, an entry to each adapter's
capabilities() whose `native` names the native key(s) it sets (as Backend.native_settings spells them:
TRL GRPOConfig fields, verl Hydra keys, OpenRLHF dotted flags; launch-side settings as `launch.*`), and
an entry to EFFECTS below: `"section.knob": Effect(value, {"trl": {...}, "verl": {...}, "openrlhf": {...}})`.
Knobs that the core itself handles go to ALLOWED instead, with the reason.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rlbridge.contract.backend import Support, canonical_knobs
from rlbridge.errors import CapabilityError, RLBridgeError

try:  # the quickstart config shipped with the suite
    from rlbridge.testing import QUICKSTART as BASE_CONFIG
except ImportError:  # pragma: no cover - a checkout from before the suite shipped its config
    BASE_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"
# quickstart, planned for a CPU machine: GRPO, batch 8 x group 8, 16 new tokens, 150 steps, seed 0
BASE_OVERRIDES = ["resources.gpus_per_node=0"]


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


REFUSED = _Marker("REFUSED")
"""Expectation: this value is refused before anything starts, by an error naming the knob."""
ABSENT = _Marker("ABSENT")
"""Expected value of a native key that the plan must not set (e.g. a store_true flag left off)."""


@dataclass(frozen=True)
class Effect:
    value: Any
    """The canonical value set (a valid, non-default value)."""
    expect: dict[str, Any]
    """backend -> {native key: expected value} or REFUSED. Rejected knobs need no entry."""
    context: tuple[str, ...] = ()
    """--set overrides the value needs on every backend (e.g. rollout.engine=vllm)."""
    values: dict[str, Any] = field(default_factory=dict)
    """backend -> a different value for that backend (where `value` means nothing there)."""
    contexts: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """backend -> extra overrides for that backend only."""


EVAL = {"type": "generator", "name": "digit_copy", "args": {"num_rows": 16}}
TEMPLATE = "{{ messages[0]['content'] }}"
ENV = {"name": "digit_turns", "args": {"turns": 2}, "max_turns": 2}
# verl 0.9 refuses a KL term on CPU (its reference model needs pinned memory): plan those knobs with a GPU
KL_ON_VERL = {"verl": ("resources.gpus_per_node=1",)}
PPO = ("algorithm.name=ppo",)  # the critic's knobs and GAE need an algorithm with a critic

# Knobs the core handles the same way for every engine: no native key to check. Each with its reason.
ALLOWED = {
    "data.train": "the core loads the rows (rlbridge.contract.data.load_rows) and hands every engine the same "
                  "prompts in its own file format; the source itself is no engine key",
}

# ---- the value table: one entry per canonical knob (see HOW TO ADD A KNOB above) ----
EFFECTS: dict[str, Effect] = {
    "algorithm.name": Effect("rloo", {
        "trl": {"launch.trainer": "RLOOTrainer"},
        "verl": {"algorithm.adv_estimator": "rloo"},
        "openrlhf": {"algo.advantage.estimator": "rloo"},
    }),
    "algorithm.group_size": Effect(4, {
        "trl": {"num_generations": 4},
        "verl": {"actor_rollout_ref.rollout.n": 4},
        "openrlhf": {"rollout.n_samples_per_prompt": 4},
    }),
    "algorithm.kl_coef": Effect(0.05, {
        "trl": {"beta": 0.05},
        "verl": {"actor_rollout_ref.actor.kl_loss_coef": 0.05, "actor_rollout_ref.actor.use_kl_loss": True},
        "openrlhf": {"algo.kl.init_coef": 0.05, "algo.kl.use_loss": True},
    }, contexts=KL_ON_VERL),
    "algorithm.kl_placement": Effect("reward", {
        "trl": REFUSED,  # GRPOTrainer puts KL in the loss only
        "verl": {"algorithm.use_kl_in_reward": True, "actor_rollout_ref.actor.use_kl_loss": False},
        "openrlhf": {"algo.kl.use_loss": ABSENT},
    }, context=("algorithm.kl_coef=0.05",), contexts=KL_ON_VERL),
    "algorithm.clip_low": Effect(0.1, {
        "trl": {"epsilon": 0.1},
        "verl": {"actor_rollout_ref.actor.clip_ratio_low": 0.1},
        "openrlhf": {"actor.eps_clip_low_high": [0.1, 0.1]},
    }),
    "algorithm.clip_high": Effect(0.28, {
        "trl": {"epsilon_high": 0.28},
        "verl": {"actor_rollout_ref.actor.clip_ratio_high": 0.28},
        "openrlhf": {"actor.eps_clip_low_high": [0.2, 0.28]},
    }),
    "algorithm.loss_aggregation": Effect("seq_mean_token_mean", {
        "trl": {"loss_type": "grpo"},
        "verl": {"actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-mean"},
        "openrlhf": {"actor.loss_agg_mode": "seq-mean-token-mean"},
    }),
    "algorithm.advantage_normalization": Effect("none", {
        "trl": {"scale_rewards": "none"},
        "verl": {"algorithm.norm_adv_by_std_in_grpo": False},
        "openrlhf": {"algo.advantage.no_std_norm": True},
    }),
    "algorithm.epochs_per_rollout": Effect(2, {
        "trl": {"num_iterations": 2},
        "verl": {"actor_rollout_ref.actor.ppo_epochs": 2},
        "openrlhf": {"train.max_epochs": 2},
    }),
    "model.path": Effect("org/model", {
        "trl": {"launch.model.path": "org/model"},
        "verl": {"launch.model.path": "org/model"},
        "openrlhf": {"launch.model.path": "org/model"},
    }),
    "model.dtype": Effect("float16", {
        "trl": {"model_init_kwargs.dtype": "float16"},
        "verl": {"actor_rollout_ref.rollout.dtype": "float16"},
        "openrlhf": {"ds.param_dtype": "fp16"},
    }),
    "model.chat_template": Effect(TEMPLATE, {
        "trl": {"launch.data.chat_template": TEMPLATE},
        "verl": {"launch.model.chat_template": TEMPLATE},
        "openrlhf": {"launch.model.chat_template": TEMPLATE},
    }, context=("model.use_chat_template=true",)),
    "model.use_chat_template": Effect(True, {
        "trl": {"launch.data.use_chat_template": True},
        "verl": {"launch.model.chat_template": None},  # the tokenizer's own template instead of the pass-through one
        "openrlhf": {"data.apply_chat_template": True, "data.input_template": ABSENT},
    }),
    "data.eval": Effect(EVAL, {
        "trl": {"eval_strategy": "steps", "eval_steps": 10},
        "verl": {"trainer.test_freq": 10},
        "openrlhf": {"eval.dataset": "<run_dir>/data/eval.jsonl", "eval.steps": 10},
    }),
    "data.eval_interval": Effect(5, {
        "trl": {"eval_steps": 5},
        "verl": {"trainer.test_freq": 5},
        "openrlhf": {"eval.steps": 5},
    }, context=(f"data.eval={json.dumps(EVAL)}",)),
    "data.prompt_key": Effect("question", {
        "trl": {"launch.data.prompt_key": "question"},
        "verl": {"launch.data.prompt_key": "question"},
        "openrlhf": {"launch.data.prompt_key": "question"},
    }),
    "data.answer_key": Effect("label", {
        "trl": {"launch.data.answer_key": "label"},
        "verl": {"launch.data.answer_key": "label"},
        "openrlhf": {"launch.data.answer_key": "label"},
    }),
    "data.shuffle": Effect(False, {
        "trl": {"shuffle_dataset": False},
        "verl": {"data.shuffle": False},
    }),
    "rollout.engine": Effect("vllm", {
        "trl": {"use_vllm": True, "vllm_mode": "colocate"},
        "verl": {"actor_rollout_ref.rollout.name": "sglang"},
        "openrlhf": REFUSED,  # vLLM only
    }, values={"verl": "sglang", "openrlhf": "hf"}, contexts={"verl": ("resources.gpus_per_node=1",)}),
    "rollout.max_new_tokens": Effect(32, {
        "trl": {"max_completion_length": 32},
        "verl": {"data.max_response_length": 32},
        "openrlhf": {"rollout.max_new_tokens": 32},
    }),
    "rollout.max_prompt_tokens": Effect(64, {
        "trl": {"launch.data.max_prompt_tokens": 64},
        "verl": {"data.max_prompt_length": 64},
        "openrlhf": {"data.max_len": 64 + 16},
    }),
    "rollout.temperature": Effect(0.7, {
        "trl": {"temperature": 0.7},
        "verl": {"actor_rollout_ref.rollout.temperature": 0.7},
        "openrlhf": {"rollout.temperature": 0.7},
    }),
    "rollout.top_p": Effect(0.9, {
        "trl": {"top_p": 0.9},
        "verl": {"actor_rollout_ref.rollout.top_p": 0.9},
        "openrlhf": {"rollout.top_p": 0.9},
    }),
    "rollout.top_k": Effect(5, {
        "trl": {"top_k": 5},
        "verl": {"actor_rollout_ref.rollout.top_k": 5},
    }),
    "rollout.gpu_memory_utilization": Effect(0.5, {
        "trl": {"vllm_gpu_memory_utilization": 0.5},
        "verl": {"actor_rollout_ref.rollout.gpu_memory_utilization": 0.5},
        "openrlhf": {"vllm.gpu_memory_utilization": 0.5},
    }, context=("rollout.engine=vllm",)),
    "rollout.tensor_parallel_size": Effect(2, {
        "trl": REFUSED,  # one training process: vLLM's tensor-parallel group cannot exceed it
        "verl": {"actor_rollout_ref.rollout.tensor_model_parallel_size": 2},
        "openrlhf": {"vllm.tensor_parallel_size": 2, "vllm.num_engines": 1},
    }, context=("rollout.engine=vllm",), contexts={"verl": ("resources.gpus_per_node=2",),
                                                   "openrlhf": ("resources.gpus_per_node=2",)}),
    "reward": Effect([{"name": "digit_match", "weight": 2.0}], {
        "trl": {"reward_weights": [2.0], "launch.rewards": [{"name": "digit_match", "weight": 2.0, "args": {}}]},
        "verl": {"launch.rewards": [{"name": "digit_match", "weight": 2.0, "args": {}}]},
        "openrlhf": {"launch.rewards": [{"name": "digit_match", "weight": 2.0, "args": {}}]},
    }),
    "environment": Effect(ENV, {
        "trl": {"launch.environment.name": "digit_turns", "launch.environment.max_turns": 2},
        "verl": {"actor_rollout_ref.rollout.multi_turn.max_assistant_turns": 2,
                 "actor_rollout_ref.rollout.agent.default_agent_loop": "rlbridge_environment"},
        "openrlhf": {"train.agent_func_path": "<run_dir>/rlbridge_agent.py"},
    }, context=("reward=[]",)),
    "training.steps": Effect(7, {
        "trl": {"max_steps": 7},
        "verl": {"trainer.total_training_steps": 7},
        "openrlhf": {"data.max_samples": 7 * 8},
    }),
    "training.epochs": Effect(2, {
        "trl": {"num_train_epochs": 2, "max_steps": -1},
        "verl": {"trainer.total_epochs": 2},
        "openrlhf": {"train.num_episodes": 2, "data.max_samples": ABSENT},
    }, context=("training.steps=null",)),
    "training.lr": Effect(0.001, {
        "trl": {"learning_rate": 0.001},
        "verl": {"actor_rollout_ref.actor.optim.lr": 0.001},
        "openrlhf": {"actor.adam.lr": 0.001},
    }),
    "training.lr_schedule": Effect("cosine", {
        "trl": {"lr_scheduler_type": "cosine"},
        "verl": {"actor_rollout_ref.actor.optim.lr_scheduler_type": "cosine"},
        "openrlhf": {"actor.lr_scheduler": "cosine"},
    }),
    "training.warmup_steps": Effect(3, {
        "trl": {"warmup_steps": 3, "lr_scheduler_type": "constant_with_warmup"},  # transformers' "constant" has no warmup
        "verl": {"actor_rollout_ref.actor.optim.lr_warmup_steps": 3},
        "openrlhf": {"actor.lr_warmup_ratio": 3 / 150},
    }),
    "training.weight_decay": Effect(0.01, {
        "trl": {"weight_decay": 0.01},
        "verl": {"actor_rollout_ref.actor.optim.weight_decay": 0.01},
        "openrlhf": {"actor.adam.weight_decay": 0.01},
    }),
    "training.batch_size": Effect(4, {
        "trl": {"generation_batch_size": 32},
        "verl": {"data.train_batch_size": 4},
        "openrlhf": {"rollout.batch_size": 4},
    }),
    "training.mini_batch_size": Effect(16, {
        "trl": {"per_device_train_batch_size": 16, "max_steps": 150 * 4},
        "verl": {"actor_rollout_ref.actor.ppo_mini_batch_size": 2},
        "openrlhf": {"train.batch_size": 16},
    }),
    "training.micro_batch_size": Effect(4, {
        "trl": {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 16},
        "verl": {"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4},
        "openrlhf": {"train.micro_batch_size": 4},
    }),
    "training.grad_clip": Effect(0.5, {
        "trl": {"max_grad_norm": 0.5},
        "verl": {"actor_rollout_ref.actor.grad_clip": 0.5},
        "openrlhf": {"actor.max_norm": 0.5},
    }),
    "training.seed": Effect(123, {
        "trl": {"seed": 123, "data_seed": 123},
        "verl": {"data.seed": 123, "actor_rollout_ref.rollout.seed": 123,
                 "actor_rollout_ref.actor.data_loader_seed": 123, "launch.env.RLBRIDGE_SEED": "123"},
        "openrlhf": {"train.seed": 123},
    }),
    "training.torch_threads": Effect(2, {
        "trl": {"launch.torch_threads": 2},
        "verl": {"launch.env.OMP_NUM_THREADS": "2"},
        "openrlhf": {"launch.env.OMP_NUM_THREADS": "2"},
    }),
    # more than one node needs a Ray cluster that spans them (resources.ray_address)
    "resources.nodes": Effect(2, {"verl": {"trainer.nnodes": 2}, "openrlhf": {"actor.num_nodes": 2}},
                              context=("resources.gpus_per_node=1", "resources.ray_address=127.0.0.1:6379")),
    "resources.ray_address": Effect("127.0.0.1:6379", {"verl": {"launch.ray.address": "127.0.0.1:6379"},
                                                       "openrlhf": {"launch.ray.address": "127.0.0.1:6379"}}),
    "resources.gpus_per_node": Effect(2, {
        "trl": REFUSED,  # one training process
        "verl": {"trainer.n_gpus_per_node": 2, "trainer.device": ABSENT},
        "openrlhf": {"actor.num_gpus_per_node": 2},
    }),
    "resources.cpus_per_node": Effect(3, {
        "trl": {"launch.torch_threads": 3},
        "verl": {"launch.ray.num_cpus": 3},
        "openrlhf": {"launch.ray.num_cpus": 3},
    }, contexts={"trl": ("training.torch_threads=null",)}),
    "placement.policy": Effect("split", {
        "trl": REFUSED,
        "verl": REFUSED,
        "openrlhf": {"actor.num_gpus_per_node": 2, "vllm.num_engines": 1, "train.colocate_all": ABSENT},
    }, context=("resources.gpus_per_node=3", "placement.args={rollout_gpus: 1}", "rollout.engine=vllm")),
    "placement.args": Effect({"rollout_gpus": 2}, {
        "trl": REFUSED,  # 'colocate' takes no arguments
        "verl": REFUSED,
        "openrlhf": {"actor.num_gpus_per_node": 2, "vllm.num_engines": 2},
    }, contexts={"openrlhf": ("resources.gpus_per_node=4", "placement.policy=split")}),
    "checkpoint.dir": Effect("/tmp/rlbridge-effect/ckpt", {
        "trl": {"output_dir": "/tmp/rlbridge-effect/ckpt"},
        "verl": {"trainer.default_local_dir": "/tmp/rlbridge-effect/ckpt"},
        "openrlhf": {"ckpt.path": "/tmp/rlbridge-effect/ckpt"},
    }),
    "checkpoint.interval": Effect(5, {
        "trl": {"save_strategy": "steps", "save_steps": 5},
        "verl": {"trainer.save_freq": 5},
        "openrlhf": {"ckpt.save_steps": 5},
    }),
    "checkpoint.resume": Effect(True, {
        "trl": {"launch.resume": True},
        "verl": {"trainer.resume_mode": "auto"},
        "openrlhf": {"ckpt.load_enable": True},
    }),
    "checkpoint.keep_last": Effect(2, {
        "trl": {"save_total_limit": 2},
        "verl": {"trainer.max_actor_ckpt_to_keep": 2},
        "openrlhf": {"ckpt.max_num": 2},
    }),
    # ---- everyday knobs, LoRA and the critic (issue 17) ----
    "algorithm.kl_estimator": Effect("k2", {
        "trl": REFUSED,  # k3 in GRPOTrainer's loss, fixed
        "verl": {"actor_rollout_ref.actor.kl_loss_type": "mse"},
        "openrlhf": {"algo.kl.estimator": "k2"},
    }, context=("algorithm.kl_coef=0.05",), contexts=KL_ON_VERL),
    "algorithm.entropy_coef": Effect(0.01, {
        "trl": {"entropy_coef": 0.01},
        "verl": {"actor_rollout_ref.actor.entropy_coeff": 0.01},
        "openrlhf": {"actor.entropy_coef": 0.01},
    }),
    "algorithm.gamma": Effect(0.99, {
        "verl": {"algorithm.gamma": 0.99},
        "openrlhf": {"algo.advantage.gamma": 0.99},
    }, contexts={"verl": PPO, "openrlhf": PPO}),
    "algorithm.gae_lambda": Effect(0.95, {
        "verl": {"algorithm.lam": 0.95},
        "openrlhf": {"algo.advantage.lambd": 0.95},
    }, contexts={"verl": PPO, "openrlhf": PPO}),
    "algorithm.dynamic_sampling": Effect(True, {
        "verl": {"algorithm.filter_groups.enable": True, "algorithm.filter_groups.metric": "reward"},
        "openrlhf": {"algo.dynamic_filtering_enable": True, "algo.dynamic_filtering_range": [0.0, 1.0]},
    }, contexts={"verl": ("resources.gpus_per_node=1",)}),  # verl filters groups in its v1 trainer only (GPUs)
    "algorithm.rollout_correction": Effect("token_truncate", {
        "trl": {"vllm_importance_sampling_correction": True, "vllm_importance_sampling_mode": "token_truncate"},
        "verl": {"algorithm.rollout_correction.rollout_is": "token"},
        "openrlhf": {"algo.advantage.is_correction_level": "token", "algo.advantage.is_correction_mode": "clip"},
    }, contexts={"trl": ("rollout.engine=vllm",)}),
    "algorithm.rollout_correction_threshold": Effect(4.0, {
        "trl": {"vllm_importance_sampling_clip_max": 4.0},
        "verl": {"algorithm.rollout_correction.rollout_is_threshold": 4.0},
        "openrlhf": {"algo.advantage.is_correction_threshold": 4.0},
    }, context=("algorithm.rollout_correction=token_truncate",), contexts={"trl": ("rollout.engine=vllm",)}),
    "model.chat_template_kwargs": Effect({"enable_thinking": False}, {
        "trl": {"chat_template_kwargs": {"enable_thinking": False}},
        "verl": {"data.apply_chat_template_kwargs.enable_thinking": False},
        "openrlhf": {"launch.data.chat_template_kwargs.enable_thinking": False, "data.input_template": "{}"},
    }, context=("model.use_chat_template=true",)),
    "model.lora": Effect({"rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}, {
        "trl": {"launch.lora.r": 4, "launch.lora.lora_alpha": 8, "launch.lora.target_modules": ["q_proj", "v_proj"]},
        "verl": {"actor_rollout_ref.model.lora_rank": 4, "actor_rollout_ref.model.lora_alpha": 8,
                 "actor_rollout_ref.model.target_modules": ["q_proj", "v_proj"], "actor_rollout_ref.model.lora.merge": True},
        "openrlhf": {"ds.lora.rank": 4, "ds.lora.alpha": 8, "ds.lora.target_modules": ["q_proj", "v_proj"]},
    }),  # verl on CPU with vLLM: merged weights to the rollout (vLLM-CPU cannot load LoRA adapters)
    "rollout.drop_overlong_prompts": Effect(True, {
        "trl": {"launch.data.drop_overlong_prompts": True},
        "verl": {"data.filter_overlong_prompts": True},
        "openrlhf": {"launch.data.drop_over": 64},
    }, context=("rollout.max_prompt_tokens=64",)),
    # the asynchronous loop (issue 25): TRL and verl reject it (adapters/<engine>/asynchrony.py)
    "rollout.max_staleness": Effect(2, {"openrlhf": {"train.async_enable": True, "train.async_queue_size": 2}}),
    "rollout.partial_rollouts": Effect(True, {"openrlhf": {"train.partial_rollout_enable": True}},
                                       context=("rollout.max_staleness=1",)),
    "rollout.weight_sync_interval": Effect(2, {"openrlhf": REFUSED}, context=("rollout.max_staleness=1",)),
    "training.forward_micro_batch_size": Effect(16, {
        "verl": {"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 16,
                 "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 16},
        "openrlhf": {"rollout.micro_batch_size": 16},
    }),
    "training.gradient_checkpointing": Effect(True, {
        "trl": {"gradient_checkpointing": True},
        "verl": {"actor_rollout_ref.model.enable_gradient_checkpointing": True},
        "openrlhf": {"actor.gradient_checkpointing_enable": True},
    }),
    "training.max_tokens_per_device": Effect(4096, {
        "verl": {"actor_rollout_ref.actor.use_dynamic_bsz": True, "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 4096},
        "openrlhf": {"train.dynamic_batch_enable": True, "train.max_tokens_per_gpu": 4096, "rollout.max_tokens_per_gpu": 4096},
    }, contexts={"openrlhf": ("resources.gpus_per_node=1",)}),  # OpenRLHF packs with flash attention: GPUs only
    "training.sequence_packing": Effect(True, {
        "verl": {"actor_rollout_ref.model.use_remove_padding": True},
        "openrlhf": {"ds.packing_samples": True},
    }, contexts={"openrlhf": ("resources.gpus_per_node=1",)}),
    "training.sequence_parallel_size": Effect(2, {
        "verl": {"actor_rollout_ref.actor.ulysses_sequence_parallel_size": 2},
        "openrlhf": {"ds.ring_attn_size": 2},
    }, contexts={"verl": ("resources.gpus_per_node=2", "training.sequence_packing=true"),
                 "openrlhf": ("resources.gpus_per_node=2",)}),
    "critic.path": Effect("org/critic", {
        "verl": {"critic.model.path": "org/critic"},
        "openrlhf": {"critic.model_name_or_path": "org/critic"},
    }, contexts={"verl": PPO, "openrlhf": PPO}),
    "critic.lr": Effect(1e-5, {
        "verl": {"critic.optim.lr": 1e-5},
        "openrlhf": {"critic.adam.lr": 1e-5},
    }, contexts={"verl": PPO, "openrlhf": PPO}),
    "critic.value_clip": Effect(0.2, {
        "verl": {"critic.cliprange_value": 0.2},
        "openrlhf": {"critic.value_clip": 0.2},
    }, contexts={"verl": PPO, "openrlhf": PPO}),
    "critic.warmup_steps": Effect(3, {
        "verl": {"trainer.critic_warmup": 3},
        "openrlhf": {"critic.freezing_steps": 3},
    }, contexts={"verl": PPO, "openrlhf": PPO}),
    "critic.micro_batch_size": Effect(4, {
        "verl": {"critic.ppo_micro_batch_size_per_gpu": 4},
        "openrlhf": REFUSED,  # one --train.micro_batch_size for actor and critic
    }, contexts={"verl": PPO, "openrlhf": PPO}),
}


# ---- the test ----

def _all_backends() -> list[str]:
    from rlbridge.contract.registry import PluginManager

    return sorted(PluginManager().items["backend"])


def _plan(backend_name: str, overrides: list[str]):
    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import prepare

    # EFFECTS describes each backend's default engine version; plan for it whatever is installed
    # (an older engine environment, e.g. verl 0.5.0, maps several knobs differently or not at all)
    version = _table_version(backend_name)
    pinned = [f"engine_version={version}"] if version else []
    config = load_config(BASE_CONFIG, [f"backend={backend_name}", *pinned, *BASE_OVERRIDES, *overrides])  # schema errors fail here
    return prepare(config)


def _table_version(backend_name: str) -> str | None:
    from rlbridge.contract.registry import get_plugin_manager

    return get_plugin_manager().backend(backend_name).default_version


def _same(actual: Any, expected: Any) -> bool:
    if isinstance(expected, float) or isinstance(actual, float):
        try:
            return math.isclose(float(actual), float(expected), rel_tol=1e-9, abs_tol=1e-12)
        except (TypeError, ValueError):
            return False
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        return len(actual) == len(expected) and all(_same(a, e) for a, e in zip(actual, expected))
    return actual == expected


def _get(settings: dict[str, Any], key: str) -> Any:
    return settings.get(key, ABSENT)


def _dotted_value(value: Any) -> str:
    return json.dumps(value)


def test_effect_table_covers_every_canonical_knob():
    knobs = set(canonical_knobs())
    assert not set(ALLOWED) & set(EFFECTS), "a knob is either allowed or in the effect table"
    missing = sorted(knobs - set(EFFECTS) - set(ALLOWED))
    assert not missing, f"add these knobs to EFFECTS in {__name__} (see HOW TO ADD A KNOB): {missing}"
    stale = sorted((set(EFFECTS) | set(ALLOWED)) - knobs)
    assert not stale, f"no such canonical knobs any more: {stale}"


@pytest.mark.parametrize("knob", sorted(EFFECTS))
@pytest.mark.parametrize("backend_name", _all_backends())
def test_every_knob_takes_effect(backend_name, knob):
    """Plan-only: the knob's non-default value reaches the native key(s) the capability table names,
    or is refused naming the knob; validated by the engine's own code where the engine is installed."""
    from rlbridge.contract.registry import get_plugin_manager

    effect = EFFECTS[knob]
    backend = get_plugin_manager().backend(backend_name)
    cap = backend.capability_table()[knob]
    value = effect.values.get(backend_name, effect.value)
    context = [*effect.context, *effect.contexts.get(backend_name, ())]
    overrides = [*context, f"{knob}={_dotted_value(value)}"]
    expect = effect.expect.get(backend_name)

    if cap.support is Support.REJECTED or expect is REFUSED:
        with pytest.raises(RLBridgeError) as info:
            _plan(backend_name, overrides)
        message = str(info.value)
        assert knob in message, f"the refusal must name {knob}: {message}"
        if cap.support is Support.REJECTED:
            assert isinstance(info.value, CapabilityError), message
        return

    assert expect, f"{backend_name} {cap.support.value}s {knob}: give its expected native values in EFFECTS[{knob!r}]"
    prepared = _plan(backend_name, overrides)
    settings = backend.native_settings(prepared.plan)
    for key, wanted in expect.items():
        assert key in cap.native or any(key.startswith(f"{n}.") for n in cap.native), (
            f"{backend_name}: {key} is not among the native keys its capability table names for {knob}: {cap.native}"
        )
        got = _get(settings, key)
        assert _same(got, wanted), f"{backend_name}: {knob}={value!r} should set {key}={wanted!r}, plan has {got!r}"
    try:  # the same config without the knob must plan differently under those keys
        baseline = backend.native_settings(_plan(backend_name, context).plan)
    except RLBridgeError:
        baseline = None  # the context alone is incomplete (e.g. placement.args for 'split')
    if baseline is not None:
        assert any(not _same(_get(baseline, k), w) for k, w in expect.items()), (
            f"{backend_name}: {knob}={value!r} changes none of {sorted(expect)}: the default plans the same"
        )
    if cap.support is Support.APPROXIMATED and (cap.approximate_when is None or cap.approximate_when(prepared.config)):
        assert any(note.startswith(f"{knob}:") for note in prepared.plan.approximations), prepared.plan.approximations
    installed = backend.installed_version()
    if installed and backend.version_supported(installed) and installed == (_table_version(backend_name) or installed):
        from rlbridge.contract.models import BUILTIN_PREFIX, looks_local, materialize_model
        from rlbridge.run.runner import model_paths

        # verl's config code loads the config of the models it is given (e.g. the critic's): hub ids
        # (effect values such as model.path: org/model) cannot be validated offline
        if all(path.startswith(BUILTIN_PREFIX) or looks_local(path) for _, path in model_paths(prepared.config)):
            materialize_model(prepared.config)
            backend.validate(prepared.plan)  # the engine's own config code accepts every translated value


# ---- one real run per engine: the seed reaches the engine, evaluation reaches metrics ----

EVAL_SMALL = {"type": "generator", "name": "digit_copy", "args": {"num_rows": 8}}


@pytest.mark.engine
def test_seed_changes_first_step_samples_and_evaluation_is_logged(backend, tmp_path):
    """Two 1-step runs through the engine's own trainer that differ only in training.seed sample
    different first-step prompts/completions, and each evaluates data.eval (eval_interval 1) into
    eval_metrics.jsonl. (`backend` is the conformance suite's fixture: every installed engine.)"""
    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import train

    base = [
        f"backend={backend.name}", "training.steps=1", "training.batch_size=2", "algorithm.group_size=4",
        "rollout.max_new_tokens=8", "telemetry.samples_per_step=8", "resources.gpus_per_node=auto",
        f"data.eval={json.dumps(EVAL_SMALL)}", "data.eval_interval=1",
    ]
    first_step = {}
    for seed in (1, 2):
        out = tmp_path / f"seed{seed}"
        summary = train(load_config(BASE_CONFIG, [*base, f"training.seed={seed}", f"output_dir={out}"]), progress=False)
        assert summary["status"] == "completed"
        rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
        first_step[seed] = sorted((r["prompt"], r["completion"]) for r in rows if r["step"] == 1)
        evals = [json.loads(line) for line in (out / "eval_metrics.jsonl").read_text().splitlines()]
        assert evals and all(math.isfinite(e["eval/reward/mean"]) for e in evals), evals
    assert first_step[1] and first_step[2] and first_step[1] != first_step[2]
