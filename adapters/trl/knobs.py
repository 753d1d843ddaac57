"""TRL: the everyday knobs (KL estimator, entropy bonus, dynamic sampling, rollout correction,
chat-template arguments, over-long prompts, gradient checkpointing, dynamic batching, packing,
sequence parallelism), LoRA (through peft) and the critic, which TRL >= 1.13 no longer has.

Every GRPOConfig/RLOOConfig field named here was read in the installed trl 1.16.0
(trl/trainer/grpo_config.py, rloo_config.py). Called by `TRLBackend`.
"""

from __future__ import annotations

from typing import Any

from rlbridge.contract.backend import Capability, honoured, rejected
from rlbridge.contract.config import RunConfig

NO_PPO = "TRL removed PPOTrainer in 1.13, so it has no critic; use backend: verl or openrlhf for PPO"


def _check_kl_estimator(config: RunConfig) -> str | None:
    algo = config.algorithm
    if algo.kl_estimator is None:
        return None
    standard = "k1" if algo.name == "rloo" else "k3"
    if algo.kl_estimator != standard:
        where = "RLOOTrainer subtracts the k1 estimate from the reward" if algo.name == "rloo" else (
            "GRPOTrainer puts the k3 estimate in the loss")
        return f"TRL's {where}; set kl_estimator: {standard} (or leave it unset), or use backend: verl or openrlhf"
    return None


def _check_entropy(config: RunConfig) -> str | None:
    if config.algorithm.entropy_coef and config.algorithm.name == "rloo":
        return "TRL's RLOOTrainer has no entropy bonus (GRPOTrainer has entropy_coef); use algorithm.name: grpo"
    return None


def _check_rollout_correction(config: RunConfig) -> str | None:
    if config.algorithm.rollout_correction == "none":
        return None
    if config.algorithm.name == "rloo":
        return "TRL's RLOOTrainer has no importance-sampling correction (GRPOTrainer has); use algorithm.name: grpo"
    if config.rollout.engine != "vllm":
        return ("TRL corrects only vLLM rollouts: with rollout.engine hf the trainer's own model samples, so there is "
                "no mismatch to correct. Use rollout.engine: vllm, or remove it")
    return None


def capabilities() -> list[Capability]:
    return [
        honoured("algorithm.kl_estimator", (), _check_kl_estimator,
                 note="fixed by the trainer: k3 in GRPOTrainer's loss, k1 in RLOOTrainer's reward"),
        honoured("algorithm.entropy_coef", "entropy_coef", _check_entropy, note="GRPO only"),
        rejected("algorithm.gamma", NO_PPO + " (REINFORCE++ neither); discounting needs one of them"),
        rejected("algorithm.gae_lambda", NO_PPO),
        rejected("algorithm.dynamic_sampling",
                 "TRL's GRPOTrainer keeps every group (frac_reward_zero_std is only logged); use backend: openrlhf "
                 "(--algo.dynamic_filtering_enable) or verl 0.9 on GPUs (algorithm.filter_groups)"),
        honoured("algorithm.rollout_correction", ("vllm_importance_sampling_correction", "vllm_importance_sampling_mode"),
                 _check_rollout_correction, note="GRPO with rollout.engine vllm"),
        honoured("algorithm.rollout_correction_threshold", "vllm_importance_sampling_clip_max"),
        honoured("model.chat_template_kwargs", "chat_template_kwargs"),
        honoured("model.lora", ("launch.lora.r", "launch.lora.lora_alpha", "launch.lora.lora_dropout", "launch.lora.target_modules"),
                 note="peft.LoraConfig given to the trainer as peft_config"),
        honoured("rollout.drop_overlong_prompts", "launch.data.drop_overlong_prompts", note="rlbridge drops them when it loads the data"),
        honoured("training.gradient_checkpointing", "gradient_checkpointing"),
        rejected("training.forward_micro_batch_size",
                 "TRL computes the old-policy and reference log-probs in chunks of the training micro batch "
                 "(per_device_train_batch_size); set training.micro_batch_size, or use backend: verl or openrlhf"),
        rejected("training.max_tokens_per_device",
                 "TRL batches by samples (per_device_train_batch_size); set training.micro_batch_size, or use backend: "
                 "verl or openrlhf for token-budget batching"),
        rejected("training.sequence_packing",
                 "TRL's GRPO/RLOO trainers pad completions and have no packing (padding_free is SFT/DPO only); "
                 "use backend: verl or openrlhf"),
        rejected("training.sequence_parallel_size",
                 "the TRL adapter runs one training process; use backend: verl (Ulysses) or openrlhf (ring attention)"),
        rejected("critic.path", NO_PPO),
        rejected("critic.lr", NO_PPO),
        rejected("critic.value_clip", NO_PPO),
        rejected("critic.warmup_steps", NO_PPO),
        rejected("critic.micro_batch_size", NO_PPO),
    ]


def translate(config: RunConfig, args: dict[str, Any], trainer: str) -> dict[str, Any] | None:
    """Add this module's GRPOConfig/RLOOConfig fields to `args` (in place); return the LoRA settings
    for peft.LoraConfig (None without LoRA)."""
    algo = config.algorithm
    args["gradient_checkpointing"] = config.training.gradient_checkpointing
    if config.model.chat_template_kwargs:
        args["chat_template_kwargs"] = dict(config.model.chat_template_kwargs)
    if trainer == "GRPO":
        if algo.entropy_coef:  # only when set: GRPOConfig has no entropy_coef before TRL 1.x (1.0.0 lacks it)
            args["entropy_coef"] = algo.entropy_coef
        if config.rollout.engine == "vllm":
            correct = algo.rollout_correction != "none"
            args["vllm_importance_sampling_correction"] = correct
            if correct:
                args["vllm_importance_sampling_mode"] = algo.rollout_correction
                args["vllm_importance_sampling_clip_max"] = algo.rollout_correction_threshold
    lora = config.model.lora
    if lora is None:
        return None
    return {"r": lora.rank, "lora_alpha": lora.alpha, "lora_dropout": lora.dropout,
            "target_modules": lora.target_modules, "task_type": "CAUSAL_LM"}
