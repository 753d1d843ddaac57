"""TRL's capability table (every canonical knob, its GRPOConfig/RLOOConfig fields and the check of its
value: the table's one home, returned by `TRLBackend.capabilities()`), and the translation of the
everyday knobs (KL estimator, entropy bonus, dynamic sampling, rollout correction, chat-template
arguments, over-long prompts, gradient checkpointing, dynamic batching, packing, sequence
parallelism), LoRA (through peft) and the critic, which TRL >= 1.13 no longer has.

Every GRPOConfig/RLOOConfig field named here was read in the installed trl 1.16.0
(trl/trainer/grpo_config.py, rloo_config.py). The asynchronous loop's and the offline stages' knobs
are declared in asynchrony.py and stages.py, beside the code that runs them, and joined to the table here.
"""

from __future__ import annotations

from typing import Any

from rlbridge.contract.backend import Capability, approximated, honoured, one_stop_condition, rejected
from rlbridge.contract.config import RunConfig
from rlbridge.contract.knob_checks import Check, refuse_when
from rlbridge_adapters.trl import asynchrony, layout, stages

NO_PPO = "TRL removed PPOTrainer in 1.13, so it has no critic; use backend: verl or openrlhf for PPO"


def _check_kl_estimator(config: RunConfig) -> str | None:
    algo = config.algorithm
    if algo.kl_estimator is None:
        return None
    standard = "k1" if algo.name == "rloo" else "k3"
    if algo.kl_estimator != standard:
        where = (
            "RLOOTrainer subtracts the k1 estimate from the reward"
            if algo.name == "rloo"
            else ("GRPOTrainer puts the k3 estimate in the loss")
        )
        return f"TRL's {where}; set kl_estimator: {standard} (or leave it unset), or use backend: verl or openrlhf"
    return None


_check_entropy = refuse_when(
    lambda c: bool(c.algorithm.entropy_coef) and c.algorithm.name == "rloo",
    "TRL's RLOOTrainer has no entropy bonus (GRPOTrainer has entropy_coef); use algorithm.name: grpo",
)


def _check_rollout_correction(config: RunConfig) -> str | None:
    if config.algorithm.rollout_correction == "none":
        return None
    if config.algorithm.name == "rloo":
        return "TRL's RLOOTrainer has no importance-sampling correction (GRPOTrainer has); use algorithm.name: grpo"
    if config.rollout.engine != "vllm":
        return (
            "TRL corrects only vLLM rollouts: with rollout.engine hf the trainer's own model samples, so there is "
            "no mismatch to correct. Use rollout.engine: vllm, or remove it"
        )
    return None


def _only_for_vllm(knob: str, default: Any) -> Check:
    return refuse_when(
        # the asynchronous trainer always generates with vLLM (its server)
        lambda c: c.rollout.engine != "vllm" and not asynchrony.wants_async(c) and getattr(c.rollout, knob) != default,
        "it only applies to rollout.engine: vllm; remove it or set rollout.engine: vllm",
    )


def _check_algorithm(config: RunConfig) -> str | None:
    name = config.algorithm.name
    if name == "ppo":
        return "TRL removed PPOTrainer in 1.13 (trl.experimental.ppo existed only in 1.10-1.12); use backend: verl or backend: openrlhf for PPO"
    if name == "reinforce_pp":
        return (
            "TRL has no REINFORCE++ trainer; use backend: verl (adv_estimator reinforce_plus_plus) or backend: openrlhf"
        )
    if name == "reinforce_pp_baseline":
        return (
            "TRL has no REINFORCE++-baseline trainer; its nearest is algorithm.name: grpo with advantage_normalization: "
            "batch (GRPOTrainer scale_rewards='batch': group-mean baseline, batch std), or use backend: verl or openrlhf"
        )
    return None


def _check_kl_placement(config: RunConfig) -> str | None:
    name, placement = config.algorithm.name, config.algorithm.kl_placement
    if config.algorithm.kl_coef == 0 and "kl_placement" not in config.algorithm.model_fields_set:
        return None
    if name in ("grpo", "dr_grpo") and placement != "loss":
        return "TRL's GRPOTrainer puts KL in the loss only; use kl_placement: loss, or algorithm.name: rloo (KL in the reward)"
    if name == "rloo" and placement != "reward":
        return (
            "TRL's RLOOTrainer subtracts KL from the reward only; set kl_placement: reward, or use algorithm.name: grpo"
        )
    return None


_check_advantage_norm = refuse_when(
    lambda c: c.algorithm.name == "rloo" and c.algorithm.effective_advantage_normalization == "group",
    "TRL's RLOOTrainer normalises over the whole batch or not at all; use batch or none",
)


def _check_tp(config: RunConfig) -> str | None:
    tp = config.rollout.tensor_parallel_size
    if tp == 1:
        return None
    if config.rollout.max_staleness >= 1:
        return "rlbridge starts AsyncGRPOTrainer's vLLM server on one device (adapters/trl/vllm_server.py); use 1"
    if layout.wants_server(config):
        return None  # trl vllm-serve --tensor-parallel-size; that it fits the rollout devices is the core's check
    processes = layout.training_processes(config)
    if processes % tp:
        return (
            f"TRL's colocated vLLM shards over groups of tensor_parallel_size training processes, which must divide "
            f"the {processes} training process(es) (trl/generation/vllm_generation.py); use a divisor of {processes}"
        )
    return None


_check_environment = refuse_when(
    lambda c: c.environment is not None and c.algorithm.name == "rloo",
    "TRL's RLOOTrainer has no rollout_func, which runs environments on TRL; use algorithm.name: grpo or dr_grpo",
)


def _check_resources(config: RunConfig) -> str | None:
    return layout.check_processes(config)


def _check_placement(config: RunConfig) -> str | None:
    if layout.wants_server(config):
        return layout.check_server(config)
    return asynchrony.check_placement(config)


def capabilities() -> list[Capability]:
    """How TRL treats every canonical knob: `TRLBackend.capabilities()`, the table's one home."""
    vllm_util = _only_for_vllm("gpu_memory_utilization", 0.3)
    return [
        honoured(
            "algorithm.name",
            ("launch.trainer", "launch.config_class"),
            _check_algorithm,
            note="grpo, dr_grpo: GRPOTrainer; rloo: RLOOTrainer; sft, dpo, reward_model: SFTTrainer, DPOTrainer, RewardTrainer",
        ),
        honoured("algorithm.group_size", "num_generations"),
        honoured("algorithm.kl_coef", "beta"),
        honoured(
            "algorithm.kl_placement",
            (),
            _check_kl_placement,
            note="fixed by the trainer: GRPOTrainer puts KL in the loss, RLOOTrainer in the reward",
        ),
        honoured("algorithm.clip_low", "epsilon"),
        honoured("algorithm.clip_high", "epsilon_high"),
        approximated(
            "algorithm.loss_aggregation",
            "loss_type",
            "exact for grpo/dr_grpo (token_mean=dapo, seq_mean_token_mean=grpo, seq_mean_token_sum_norm=dr_grpo); "
            "TRL's RLOOTrainer always uses a sequence-level ratio averaged over sequences",
            when=lambda c: c.algorithm.name == "rloo",
        ),
        honoured("algorithm.advantage_normalization", ("scale_rewards", "normalize_advantages"), _check_advantage_norm),
        honoured("algorithm.epochs_per_rollout", "num_iterations"),
        honoured("model.path", "launch.model.path"),
        honoured("model.dtype", ("model_init_kwargs.dtype", "bf16", "fp16", "launch.model.dtype")),
        honoured("model.chat_template", "launch.data.chat_template", note="set on the tokenizer (processing_class)"),
        honoured("model.use_chat_template", "launch.data.use_chat_template", note="conversational prompts"),
        honoured("data.train", (), note="train_dataset (rows loaded by rlbridge)"),
        honoured("data.eval", ("eval_strategy", "eval_steps", "per_device_eval_batch_size"), note="eval_dataset"),
        honoured("data.eval_interval", "eval_steps", note="eval_steps = interval x updates per step"),
        honoured("data.prompt_key", "launch.data.prompt_key"),
        honoured("data.answer_key", "launch.data.answer_key", note="column passed to rewards"),
        approximated(
            "data.shuffle",
            ("shuffle_dataset", "train_sampling_strategy", "launch.shuffle"),
            "with rollout.max_staleness >= 1 rlbridge shuffles the rows once (training.seed); AsyncGRPOTrainer "
            "reads them in order and repeats that order on later passes. Otherwise honoured (offline stages: "
            "train_sampling_strategy)",
            when=lambda c: asynchrony.wants_async(c) and c.data.shuffle,
        ),
        honoured(
            "rollout.engine",
            ("use_vllm", "vllm_mode"),
            refuse_when(
                lambda c: c.rollout.engine == "sglang",
                "TRL has no SGLang rollout; use rollout.engine: vllm or hf, or backend: verl for SGLang",
            ),
            note="auto: hf",
        ),
        honoured("rollout.max_new_tokens", "max_completion_length"),
        approximated(
            "rollout.max_prompt_tokens",
            "launch.data.max_prompt_tokens",
            "TRL >= 0.28 does not truncate prompts; rlbridge rejects longer prompts when it loads the data",
            when=lambda c: c.rollout.max_prompt_tokens is not None,
        ),
        honoured("rollout.temperature", "temperature"),
        honoured("rollout.top_p", "top_p"),
        honoured("rollout.top_k", "top_k"),
        honoured(
            "rollout.gpu_memory_utilization",
            ("vllm_gpu_memory_utilization", "launch.server.gpu_memory_utilization"),
            vllm_util,
        ),
        honoured(
            "rollout.tensor_parallel_size",
            ("vllm_tensor_parallel_size", "launch.server.tensor_parallel_size"),
            _check_tp,
            note="colocated vLLM: vllm_tensor_parallel_size (groups of training processes); split placement: "
            "trl vllm-serve --tensor-parallel-size",
        ),
        honoured(
            "reward",
            ("reward_weights", "launch.rewards"),
            note="reward_funcs + reward_weights; a reward model is passed as its path (TRL's model reward)",
        ),
        approximated(
            "environment",
            ("launch.environment", "reward_weights"),
            "GRPOTrainer rollout_func drives the environment (adapters/trl/environment.py); its reward is a reward "
            "function named after it. TRL's environment_factory continues an episode only through tool calls (no per-turn reward, done or "
            "feedback), so rlbridge drives episodes through rollout_func; feedback and tool messages are rendered "
            "one message at a time with the chat template, tool calls parsed in the hermes <tool_call> format",
            check=_check_environment,
            when=lambda c: c.environment is not None,
        ),
        honoured("training.steps", "max_steps", note="max_steps = steps x updates per step"),
        honoured(
            "training.epochs",
            ("num_train_epochs", "max_steps"),
            one_stop_condition("TRL's max_steps overrides num_train_epochs"),
        ),
        honoured("training.lr", "learning_rate"),
        honoured("training.lr_schedule", "lr_scheduler_type"),
        honoured(
            "training.warmup_steps",
            ("warmup_steps", "lr_scheduler_type"),
            note="warmup_steps x updates per step; lr_schedule constant becomes constant_with_warmup",
        ),
        honoured("training.weight_decay", "weight_decay"),
        honoured(
            "training.batch_size",
            ("generation_batch_size", "gradient_accumulation_steps", "per_device_train_batch_size"),
            note="generation_batch_size = batch_size x group_size; offline stages: batch_size rows per step",
        ),
        honoured(
            "training.mini_batch_size",
            ("gradient_accumulation_steps", "per_device_train_batch_size", "max_steps"),
            note="gradient_accumulation_steps = mini / micro; max_steps counts updates",
        ),
        honoured("training.micro_batch_size", ("per_device_train_batch_size", "gradient_accumulation_steps")),
        honoured("training.grad_clip", "max_grad_norm", note="null: 0 (disabled)"),
        honoured(
            "training.seed",
            ("seed", "data_seed"),
            note="transformers.set_seed (init, HF sampling), the data order, and the colocated vLLM engine's seed "
            "(process index + seed, adapters/trl/patch.py)",
        ),
        honoured("training.torch_threads", "launch.torch_threads", note="torch.set_num_threads"),
        honoured(
            "training.deterministic",
            "full_determinism",
            note="transformers.enable_full_determinism: seeds, torch.use_deterministic_algorithms, cuDNN/cuBLAS "
            "deterministic modes (without torch's NaN fill of new tensors: 3.5x the update time on CPU); the "
            "data order and vLLM's engine seed follow training.seed already",
        ),
        honoured(
            "resources.nodes",
            ("accelerate.num_machines", "accelerate.num_processes"),
            _check_resources,
            note="one accelerate launch per node, its machine rank and the main address from the allocation "
            "(rlbridge submit --to slurm or kuberay)",
        ),
        rejected(
            "resources.ray_address", "TRL runs without Ray (accelerate launch); leave resources.ray_address unset"
        ),
        honoured(
            "resources.gpus_per_node",
            ("use_cpu", "accelerate.num_processes", "accelerate.distributed_type"),
            _check_resources,
            note="use_cpu when 0; one training process per GPU (less split placement's rollout_gpus) under "
            "accelerate launch",
        ),
        approximated(
            "resources.cpus_per_node",
            "launch.torch_threads",
            "cpus_per_node, divided among a node's training processes, caps each one's torch threads unless "
            "training.torch_threads is set",
            when=lambda c: c.resources.cpus_per_node is not None,
        ),
        honoured(
            "placement.policy",
            ("launch.trainer", "vllm_mode", "launch.placement.actor", "launch.placement.rollout"),
            _check_placement,
            note="colocate: the training processes (each with HF generate or a colocated vLLM); split: a vLLM server "
            "rlbridge starts on rollout_gpus, GRPOTrainer's vllm_mode server against trl vllm-serve (GPUs) or, with "
            "rollout.max_staleness >= 1, AsyncGRPOTrainer",
        ),
        honoured("placement.args", "launch.placement.rollout", note="checked by the placement policy"),
        honoured("checkpoint.dir", "output_dir"),
        honoured(
            "checkpoint.interval", ("save_strategy", "save_steps"), note="save_steps = interval x updates per step"
        ),
        honoured("checkpoint.resume", "launch.resume", note="trainer.train(resume_from_checkpoint=...)"),
        honoured("checkpoint.keep_last", "save_total_limit"),
        honoured(
            "algorithm.kl_estimator",
            (),
            _check_kl_estimator,
            note="fixed by the trainer: k3 in GRPOTrainer's loss, k1 in RLOOTrainer's reward",
        ),
        honoured("algorithm.entropy_coef", "entropy_coef", _check_entropy, note="GRPO only"),
        rejected("algorithm.gamma", NO_PPO + " (REINFORCE++ neither); discounting needs one of them"),
        rejected("algorithm.gae_lambda", NO_PPO),
        rejected(
            "algorithm.dynamic_sampling",
            "TRL's GRPOTrainer keeps every group (frac_reward_zero_std is only logged); use backend: openrlhf "
            "(--algo.dynamic_filtering_enable) or verl 0.9 on GPUs (algorithm.filter_groups)",
        ),
        honoured(
            "algorithm.rollout_correction",
            ("vllm_importance_sampling_correction", "vllm_importance_sampling_mode"),
            _check_rollout_correction,
            note="GRPO with rollout.engine vllm",
        ),
        honoured("algorithm.rollout_correction_threshold", "vllm_importance_sampling_clip_max"),
        honoured("model.chat_template_kwargs", "chat_template_kwargs"),
        honoured(
            "model.lora",
            ("launch.lora.r", "launch.lora.lora_alpha", "launch.lora.lora_dropout", "launch.lora.target_modules"),
            note="peft.LoraConfig given to the trainer as peft_config",
        ),
        honoured(
            "rollout.drop_overlong_prompts",
            "launch.data.drop_overlong_prompts",
            note="rlbridge drops them when it loads the data",
        ),
        honoured("training.gradient_checkpointing", "gradient_checkpointing"),
        rejected(
            "training.forward_micro_batch_size",
            "TRL computes the old-policy and reference log-probs in chunks of the training micro batch "
            "(per_device_train_batch_size); set training.micro_batch_size, or use backend: verl or openrlhf",
        ),
        rejected(
            "training.max_tokens_per_device",
            "TRL batches by samples (per_device_train_batch_size); set training.micro_batch_size, or use backend: "
            "verl or openrlhf for token-budget batching",
        ),
        rejected(
            "training.sequence_packing",
            "TRL's GRPO/RLOO trainers pad completions and have no packing (padding_free is SFT/DPO only); "
            "use backend: verl or openrlhf",
        ),
        rejected(
            "training.sequence_parallel_size",
            "TRL 1.16's GRPOConfig refuses sequence-dim parallelism (parallelism_config cp_size or sp_size > 1: GRPO "
            "builds model inputs after generation, so sequence sharding cannot apply to the raw generation batch); "
            "use backend: verl (Ulysses) or openrlhf (ring attention)",
        ),
        rejected("critic.path", NO_PPO),
        rejected("critic.lr", NO_PPO),
        rejected("critic.value_clip", NO_PPO),
        rejected("critic.warmup_steps", NO_PPO),
        rejected("critic.micro_batch_size", NO_PPO),
        *asynchrony.capabilities(),
        *stages.capabilities(),
        *layout.capabilities(),
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
    return {
        "r": lora.rank,
        "lora_alpha": lora.alpha,
        "lora_dropout": lora.dropout,
        "target_modules": lora.target_modules,
        "task_type": "CAUSAL_LM",
    }
