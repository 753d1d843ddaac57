"""What a backend declares a canonical knob does to its plan: the data of the knob effect test.

The effect test (`rlbridge.testing.effects`, part of the shipped suite `rlbridge.testing.suite`) sets
a non-default value of every canonical knob, plans (nothing is imported or started) and checks the
plan. The value set is engine-neutral and lives here (`SAMPLES`); what it must do to the plan is
engine knowledge and lives in each adapter, beside its capability table, returned by
`Backend.knob_effects()`: knob -> one of

* a dict {native key: expected value}: the knob is honoured or approximated. Every key must be one
  the capability table names in its `native`, hold the value in `Backend.native_settings(plan)` and
  differ from the plan of the same config without the knob (a knob that changes nothing is a silent
  drop). `ABSENT` as a value: the plan must not set that key (e.g. a store_true flag left off).
* `REFUSED`: this value is refused before anything starts, by an error naming the knob.
* `KnobEffect(expect, value=..., context=...)`: either of the above for another value than the
  sample's, or with extra `--set` overrides this backend needs (e.g. a GPU for a GPU-only feature).

A knob the capability table REJECTS needs no entry: the test expects the capability error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


REFUSED = _Marker("REFUSED")
"""Expectation: this value is refused before anything starts, by an error naming the knob."""
ABSENT = _Marker("ABSENT")
"""Expected value of a native key that the plan must not set (e.g. a store_true flag left off)."""
SAMPLE = _Marker("SAMPLE")
"""KnobEffect.value default: the knob's sample value (SAMPLES)."""


@dataclass(frozen=True)
class Sample:
    """The non-default value the effect test sets for one knob, the same on every backend."""

    value: Any
    """A valid value other than the knob's default."""
    context: tuple[str, ...] = ()
    """--set overrides the value needs on every backend (e.g. rollout.engine=vllm for a vLLM setting)."""


@dataclass(frozen=True)
class KnobEffect:
    """A backend's expectation for one knob when it needs more than a plain dict or REFUSED."""

    expect: dict[str, Any] | _Marker
    """{native key: expected value} (ABSENT: not set), or REFUSED."""
    value: Any = SAMPLE
    """The value to set on this backend instead of the sample's (where the sample means nothing here)."""
    context: tuple[str, ...] = ()
    """--set overrides this backend needs besides the sample's context."""


EffectDeclaration = dict[str, Any] | _Marker | KnobEffect
"""What `Backend.knob_effects()` maps a knob to: {native key: value}, REFUSED, or a KnobEffect."""


def as_knob_effect(declared: EffectDeclaration) -> KnobEffect:
    """A declaration in its one full form."""
    return declared if isinstance(declared, KnobEffect) else KnobEffect(declared)


EVAL = {"type": "generator", "name": "digit_copy", "args": {"num_rows": 16}}
TEMPLATE = "{{ messages[0]['content'] }}"
ENV = {"name": "digit_turns", "args": {"turns": 2}, "max_turns": 2}
LORA = {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}

# The base the samples are set on: configs/quickstart.yaml (rlbridge.testing.QUICKSTART) planned for
# a CPU machine (BASE_OVERRIDES): GRPO, 8 prompts x group 8, 16 new tokens, 150 steps, seed 0.
BASE_OVERRIDES = ("resources.gpus_per_node=0",)

# Knobs the core handles the same way for every engine: no native key to check. Each with its reason.
ALLOWED = {
    "data.train": "the core loads the rows (rlbridge.contract.data.load_rows) and hands every engine the same "
    "prompts in its own file format; the source itself is no engine key",
}

# One sample per canonical knob (a new knob adds one here, and an expectation to each adapter).
SAMPLES: dict[str, Sample] = {
    "algorithm.name": Sample("rloo"),
    "algorithm.group_size": Sample(4),
    "algorithm.kl_coef": Sample(0.05),
    "algorithm.kl_placement": Sample("reward", ("algorithm.kl_coef=0.05",)),
    "algorithm.clip_low": Sample(0.1),
    "algorithm.clip_high": Sample(0.28),
    "algorithm.loss_aggregation": Sample("seq_mean_token_mean"),
    "algorithm.advantage_normalization": Sample("none"),
    "algorithm.epochs_per_rollout": Sample(2),
    "algorithm.kl_estimator": Sample("k2", ("algorithm.kl_coef=0.05",)),
    "algorithm.entropy_coef": Sample(0.01),
    "algorithm.gamma": Sample(0.99),
    "algorithm.gae_lambda": Sample(0.95),
    "algorithm.dynamic_sampling": Sample(True),
    "algorithm.rollout_correction": Sample("token_truncate"),
    "algorithm.rollout_correction_threshold": Sample(4.0, ("algorithm.rollout_correction=token_truncate",)),
    "model.path": Sample("org/model"),
    "model.dtype": Sample("float16"),
    "model.chat_template": Sample(TEMPLATE, ("model.use_chat_template=true",)),
    "model.use_chat_template": Sample(True),
    "model.chat_template_kwargs": Sample({"enable_thinking": False}, ("model.use_chat_template=true",)),
    "model.lora": Sample(LORA),
    "data.eval": Sample(EVAL),
    "data.eval_interval": Sample(5, (f"data.eval={json.dumps(EVAL)}",)),
    "data.prompt_key": Sample("question"),
    "data.answer_key": Sample("label"),
    "data.shuffle": Sample(False),
    "rollout.engine": Sample("vllm"),
    "rollout.max_new_tokens": Sample(32),
    "rollout.max_prompt_tokens": Sample(64),
    "rollout.temperature": Sample(0.7),
    "rollout.top_p": Sample(0.9),
    "rollout.top_k": Sample(5),
    "rollout.gpu_memory_utilization": Sample(0.5, ("rollout.engine=vllm",)),
    "rollout.tensor_parallel_size": Sample(2, ("rollout.engine=vllm",)),
    "rollout.drop_overlong_prompts": Sample(True, ("rollout.max_prompt_tokens=64",)),
    "rollout.max_staleness": Sample(2),
    "rollout.partial_rollouts": Sample(True, ("rollout.max_staleness=1",)),
    "rollout.weight_sync_interval": Sample(2, ("rollout.max_staleness=1",)),
    "reward": Sample([{"name": "digit_match", "weight": 2.0}]),
    "environment": Sample(ENV, ("reward=[]",)),
    "training.steps": Sample(7),
    "training.epochs": Sample(2, ("training.steps=null",)),
    "training.lr": Sample(0.001),
    "training.lr_schedule": Sample("cosine"),
    "training.warmup_steps": Sample(3),
    "training.weight_decay": Sample(0.01),
    "training.batch_size": Sample(4),
    "training.mini_batch_size": Sample(16),
    "training.micro_batch_size": Sample(4),
    "training.forward_micro_batch_size": Sample(16),
    "training.grad_clip": Sample(0.5),
    "training.seed": Sample(123),
    "training.torch_threads": Sample(2),
    "training.deterministic": Sample(True),
    "training.gradient_checkpointing": Sample(True),
    "training.max_tokens_per_device": Sample(4096),
    "training.sequence_packing": Sample(True),
    "training.sequence_parallel_size": Sample(2),
    # the training layout (docs/scale.md); sizes above 1 need as many devices
    "training.strategy": Sample("fsdp"),
    "training.sharding": Sample("parameters"),
    "training.shard_group_size": Sample(2, ("resources.gpus_per_node=4",)),
    "training.offload": Sample({"parameters": True, "optimizer": True}),
    "training.tensor_parallel_size": Sample(2, ("resources.gpus_per_node=2",)),
    "training.pipeline_parallel_size": Sample(2, ("resources.gpus_per_node=2",)),
    "training.expert_parallel_size": Sample(2, ("resources.gpus_per_node=2",)),
    "rollout.data_parallel_size": Sample(2, ("rollout.engine=vllm", "resources.gpus_per_node=2")),
    "resources.cpu_ranks_per_node": Sample(2),
    # more than one node needs a Ray cluster that spans them (resources.ray_address)
    "resources.nodes": Sample(2, ("resources.gpus_per_node=1", "resources.ray_address=127.0.0.1:6379")),
    "resources.ray_address": Sample("127.0.0.1:6379"),
    "resources.gpus_per_node": Sample(2),
    "resources.cpus_per_node": Sample(3),
    "placement.policy": Sample(
        "split", ("resources.gpus_per_node=3", "placement.args={rollout_gpus: 1}", "rollout.engine=vllm")
    ),
    "placement.args": Sample({"rollout_gpus": 2}),
    "checkpoint.dir": Sample("/tmp/rlbridge-effect/ckpt"),
    "checkpoint.interval": Sample(5),
    "checkpoint.resume": Sample(True),
    "checkpoint.keep_last": Sample(2),
    "critic.path": Sample("org/critic"),
    "critic.lr": Sample(1e-5),
    "critic.value_clip": Sample(0.2),
    "critic.warmup_steps": Sample(3),
    "critic.micro_batch_size": Sample(4),
    # the offline stages' knobs, set on the GRPO base: a backend that runs the stage plans them in its own
    # KnobEffect context (SFT_STAGE, DPO_STAGE); on GRPO every backend refuses them, naming the knob
    "offline.max_length": Sample(256),
    "offline.completion_only_loss": Sample(False),
    "offline.packing": Sample(True),
    "offline.dpo_loss": Sample("ipo"),
    "offline.dpo_beta": Sample(0.5),
    "offline.reference_model": Sample("org/reference"),
}

# --set overrides that turn the quickstart into an offline stage (docs/stages.md): no rollout, no reward
SFT_STAGE = ("algorithm={name: sft}", "rollout={}", "reward=[]", "data.train={type: generator, name: digit_sft}")
DPO_STAGE = (
    "algorithm={name: dpo}",
    "rollout={}",
    "reward=[]",
    "data.train={type: generator, name: digit_preferences}",
)
