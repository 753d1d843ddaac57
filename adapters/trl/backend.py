"""The TRL backend: canonical config -> GRPOConfig/RLOOConfig kwargs, and a run through TRL's trainers.

Batch semantics: one canonical training step is one rollout batch of training.batch_size prompts x
group_size samples (TRL generation_batch_size) and its updates. TRL's global_step counts optimizer
updates, so the plan sets max_steps = steps x updates_per_step and logging_steps = updates_per_step,
which makes TRL log (and average) once per canonical step.
"""

from __future__ import annotations

from typing import Any

from rlbridge.contract.backend import (
    Backend, Capability, approximated, flatten, gpus_per_node, honoured, launch_settings, one_stop_condition, rejected, resolved_dtype,
)
from rlbridge.contract.config import RunConfig
from rlbridge.errors import ConfigError
from rlbridge_adapters.trl import asynchrony, knobs, stages
from rlbridge_adapters.trl.package import DEFAULT_VERSION, DISTRIBUTION, SUPPORTED_VERSIONS

TRAINERS = {"grpo": "GRPO", "dr_grpo": "GRPO", "rloo": "RLOO"}
LOSS_TYPES = {"token_mean": "dapo", "seq_mean_token_mean": "grpo", "seq_mean_token_sum_norm": "dr_grpo"}

# Other spellings of what canonical knobs set (TRL aliases): backend_options may not use them either.
ALIASES = {
    "warmup_ratio": "training.warmup_steps",
    "steps_per_generation": "training.batch_size",
    "max_prompt_length": "rollout.max_prompt_tokens",
    "model_init_kwargs.torch_dtype": "model.dtype",
    "generation_kwargs.temperature": "rollout.temperature",
    "generation_kwargs.top_p": "rollout.top_p",
    "generation_kwargs.top_k": "rollout.top_k",
    "generation_kwargs.do_sample": "rollout.temperature",
    "generation_kwargs.max_new_tokens": "rollout.max_new_tokens",
    "generation_kwargs.max_tokens": "rollout.max_new_tokens",
    "generation_kwargs.seed": "training.seed",
    "num_generations_eval": "data.eval",
    "vllm_importance_sampling_cap": "algorithm.rollout_correction_threshold",
    "vllm_importance_sampling_clip_min": "algorithm.rollout_correction_threshold",
    "gradient_checkpointing_kwargs": "training.gradient_checkpointing",
    "evaluation_strategy": "data.eval",
}
# Keys rlbridge sets itself on every TRL run.
RESERVED = {
    "logging_steps": "one metrics.jsonl row per canonical step",
    "logging_strategy": "one metrics.jsonl row per canonical step",
    "report_to": "metrics go through rlbridge's telemetry sinks; add one with telemetry.sinks",
    "remove_unused_columns": "reward plugins receive every data column",
}


def _only_for_vllm(knob: str, default: Any):
    def check(config: RunConfig) -> str | None:
        value = getattr(config.rollout, knob)
        # the asynchronous trainer always generates with vLLM (its server)
        if config.rollout.engine != "vllm" and not asynchrony.wants_async(config) and value != default:
            return "it only applies to rollout.engine: vllm; remove it or set rollout.engine: vllm"
        return None

    return check


def _check_algorithm(config: RunConfig) -> str | None:
    name = config.algorithm.name
    if name == "ppo":
        return "TRL removed PPOTrainer in 1.13 (trl.experimental.ppo existed only in 1.10-1.12); use backend: verl or backend: openrlhf for PPO"
    if name == "reinforce_pp":
        return "TRL has no REINFORCE++ trainer; use backend: verl (adv_estimator reinforce_plus_plus) or backend: openrlhf"
    if name == "reinforce_pp_baseline":
        return ("TRL has no REINFORCE++-baseline trainer; its nearest is algorithm.name: grpo with advantage_normalization: "
                "batch (GRPOTrainer scale_rewards='batch': group-mean baseline, batch std), or use backend: verl or openrlhf")
    return None


def _check_kl_placement(config: RunConfig) -> str | None:
    name, placement = config.algorithm.name, config.algorithm.kl_placement
    if config.algorithm.kl_coef == 0 and "kl_placement" not in config.algorithm.model_fields_set:
        return None
    if name in ("grpo", "dr_grpo") and placement != "loss":
        return "TRL's GRPOTrainer puts KL in the loss only; use kl_placement: loss, or algorithm.name: rloo (KL in the reward)"
    if name == "rloo" and placement != "reward":
        return "TRL's RLOOTrainer subtracts KL from the reward only; set kl_placement: reward, or use algorithm.name: grpo"
    return None


def _check_advantage_norm(config: RunConfig) -> str | None:
    norm = config.algorithm.effective_advantage_normalization
    if config.algorithm.name == "rloo" and norm == "group":
        return "TRL's RLOOTrainer normalises over the whole batch or not at all; use batch or none"
    return None


def _check_tp(config: RunConfig) -> str | None:
    if config.rollout.tensor_parallel_size != 1:
        return (
            "the TRL adapter runs one training process, and TRL's colocated vLLM shards over the training processes; "
            "use rollout.tensor_parallel_size: 1, or backend: verl / openrlhf for a tensor-parallel rollout"
        )
    return None


def _check_environment(config: RunConfig) -> str | None:
    if config.environment is not None and config.algorithm.name == "rloo":
        return "TRL's RLOOTrainer has no rollout_func, which runs environments on TRL; use algorithm.name: grpo or dr_grpo"
    return None


def _check_resources(config: RunConfig) -> str | None:
    if gpus_per_node(config) > 1 and config.placement.policy == "colocate":  # else the placement check says why
        return (
            "the TRL adapter runs one training process; multi-GPU TRL needs `accelerate launch`, which rlbridge does not "
            "drive yet. Use gpus_per_node: 1, or backend: verl / openrlhf for several GPUs"
        )
    return None


def _check_placement(config: RunConfig) -> str | None:
    return asynchrony.check_placement(config)


class TRLBackend(Backend):
    name = "trl"
    distribution = DISTRIBUTION
    supported_versions = SUPPORTED_VERSIONS
    default_version = DEFAULT_VERSION
    native_arm = "rlbridge_adapters.trl.native"  # the bench's arm of kind native
    native_key_spelling = "`GRPOConfig`/`RLOOConfig` fields (the offline stages': `SFTConfig`, `DPOConfig`, `RewardConfig`)"
    description = ("Hugging Face TRL: GRPOTrainer (grpo, dr_grpo) and RLOOTrainer (rloo), HF generate or colocated vLLM; "
                   "SFTTrainer, DPOTrainer and RewardTrainer (sft, dpo, reward_model)")
    # the TRL+vLLM cell's end-to-end runs: vLLM colocated, and the async loop with its own vLLM server
    test_kinds = {"e2e-cpu-vllm": ["tests/test_trl_vllm.py", "tests/engines/test_trl_async_in_env.py", "-m", "engine"]}
    partial_weight_sync = True  # TRL's vLLM weight generator is the seam (patch.py); colocated vLLM keeps its weights
    resume_reproduces_metrics = True  # TRL's checkpoints hold every RNG state; HF generate on CPU is deterministic
    # the split placement's processes (adapters/trl/async_run.py writes placement.json, as the Ray engines' read-back)
    actor_roles = {"AsyncGRPOTrainer": ("actor", "reference"), "vllm serve": ("rollout",)}

    def native_reward_convention(self) -> Any:
        from rlbridge_adapters.trl.native_reward import CONVENTION

        return CONVENTION

    def knob_effects(self) -> dict[str, Any]:
        from rlbridge_adapters.trl.effects import EFFECTS

        return EFFECTS

    def capabilities(self) -> list[Capability]:
        vllm_util = _only_for_vllm("gpu_memory_utilization", 0.3)
        return [
            honoured("algorithm.name", ("launch.trainer", "launch.config_class"), _check_algorithm,
                     note="grpo, dr_grpo: GRPOTrainer; rloo: RLOOTrainer; sft, dpo, reward_model: SFTTrainer, DPOTrainer, RewardTrainer"),
            honoured("algorithm.group_size", "num_generations"),
            honoured("algorithm.kl_coef", "beta"),
            honoured("algorithm.kl_placement", (), _check_kl_placement,
                     note="fixed by the trainer: GRPOTrainer puts KL in the loss, RLOOTrainer in the reward"),
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
            approximated("data.shuffle", ("shuffle_dataset", "train_sampling_strategy", "launch.shuffle"),
                         "with rollout.max_staleness >= 1 rlbridge shuffles the rows once (training.seed); AsyncGRPOTrainer "
                         "reads them in order and repeats that order on later passes. Otherwise honoured (offline stages: "
                         "train_sampling_strategy)", when=lambda c: asynchrony.wants_async(c) and c.data.shuffle),
            honoured("rollout.engine", ("use_vllm", "vllm_mode"), lambda c: None if c.rollout.engine != "sglang" else (
                "TRL has no SGLang rollout; use rollout.engine: vllm or hf, or backend: verl for SGLang"), note="auto: hf"),
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
            honoured("rollout.gpu_memory_utilization", "vllm_gpu_memory_utilization", vllm_util),
            honoured("rollout.tensor_parallel_size", "vllm_tensor_parallel_size", _check_tp),
            honoured("reward", ("reward_weights", "launch.rewards"),
                     note="reward_funcs + reward_weights; a reward model is passed as its path (TRL's model reward)"),
            approximated("environment", ("launch.environment", "reward_weights"),
                         "GRPOTrainer rollout_func drives the environment (adapters/trl/environment.py); its reward is a reward "
                         "function named after it. TRL's environment_factory continues an episode only through tool calls (no per-turn reward, done or "
                         "feedback), so rlbridge drives episodes through rollout_func; feedback and tool messages are rendered "
                         "one message at a time with the chat template, tool calls parsed in the hermes <tool_call> format",
                         check=_check_environment, when=lambda c: c.environment is not None),
            honoured("training.steps", "max_steps", note="max_steps = steps x updates per step"),
            honoured("training.epochs", ("num_train_epochs", "max_steps"), one_stop_condition("TRL's max_steps overrides num_train_epochs")),
            honoured("training.lr", "learning_rate"),
            honoured("training.lr_schedule", "lr_scheduler_type"),
            honoured("training.warmup_steps", ("warmup_steps", "lr_scheduler_type"),
                     note="warmup_steps x updates per step; lr_schedule constant becomes constant_with_warmup"),
            honoured("training.weight_decay", "weight_decay"),
            honoured("training.batch_size", ("generation_batch_size", "gradient_accumulation_steps", "per_device_train_batch_size"),
                     note="generation_batch_size = batch_size x group_size; offline stages: batch_size rows per step"),
            honoured("training.mini_batch_size", ("gradient_accumulation_steps", "per_device_train_batch_size", "max_steps"),
                     note="gradient_accumulation_steps = mini / micro; max_steps counts updates"),
            honoured("training.micro_batch_size", ("per_device_train_batch_size", "gradient_accumulation_steps")),
            honoured("training.grad_clip", "max_grad_norm", note="null: 0 (disabled)"),
            honoured("training.seed", ("seed", "data_seed"),
                     note="transformers.set_seed (init, HF sampling), the data order, and the colocated vLLM engine's seed "
                          "(process index + seed, adapters/trl/patch.py)"),
            honoured("training.torch_threads", "launch.torch_threads", note="torch.set_num_threads"),
            honoured("training.deterministic", "full_determinism",
                     note="transformers.enable_full_determinism: seeds, torch.use_deterministic_algorithms, cuDNN/cuBLAS "
                          "deterministic modes (without torch's NaN fill of new tensors: 3.5x the update time on CPU); the "
                          "data order and vLLM's engine seed follow training.seed already"),
            rejected("resources.nodes", "rlbridge starts a private single-node run; use resources.nodes: 1"),
            rejected("resources.ray_address", "TRL runs in one process without Ray; leave resources.ray_address unset"),
            honoured("resources.gpus_per_node", "use_cpu", _check_resources, note="use_cpu when 0"),
            approximated("resources.cpus_per_node", "launch.torch_threads", "TRL runs one process; cpus_per_node caps torch's threads unless training.torch_threads is set",
                         when=lambda c: c.resources.cpus_per_node is not None),
            honoured("placement.policy", ("launch.trainer", "launch.placement.actor", "launch.placement.rollout"), _check_placement,
                     note="colocate: one process (or a colocated vLLM); split (with rollout.max_staleness >= 1): "
                          "AsyncGRPOTrainer on the training device, a vLLM server rlbridge starts on rollout_gpus"),
            honoured("placement.args", "launch.placement.rollout", note="checked by the placement policy"),
            honoured("checkpoint.dir", "output_dir"),
            honoured("checkpoint.interval", ("save_strategy", "save_steps"), note="save_steps = interval x updates per step"),
            honoured("checkpoint.resume", "launch.resume", note="trainer.train(resume_from_checkpoint=...)"),
            honoured("checkpoint.keep_last", "save_total_limit"),
            *knobs.capabilities(),
            *asynchrony.capabilities(),
            *stages.capabilities(),
        ]

    def translate(self, config: RunConfig) -> dict[str, Any]:
        if config.is_offline:
            return stages.translate(config)
        algo, tr, ro = config.algorithm, config.training, config.rollout
        gpus = gpus_per_node(config)
        processes = max(gpus, 1)
        per_step = config.updates_per_step
        mini = config.mini_batch_samples
        micro = tr.micro_batch_size or mini // processes
        if mini % (micro * processes):
            raise ConfigError(
                f"training.micro_batch_size ({micro}) x {processes} process(es) does not divide the mini batch ({mini})"
            )
        dtype = resolved_dtype(config)
        trainer = TRAINERS.get(algo.name, "GRPO")
        args: dict[str, Any] = {
            "output_dir": config.checkpoint.dir,
            "max_steps": tr.steps * per_step if tr.steps else -1,
            "num_train_epochs": tr.epochs or 1,
            "learning_rate": tr.lr,
            # transformers' "constant" ignores warmup_steps (get_constant_schedule); verl's and OpenRLHF's warm up
            "lr_scheduler_type": "constant_with_warmup" if tr.lr_schedule == "constant" and tr.warmup_steps else tr.lr_schedule,
            "warmup_steps": tr.warmup_steps * per_step,
            "weight_decay": tr.weight_decay,
            "per_device_train_batch_size": micro,
            "gradient_accumulation_steps": mini // (micro * processes),
            "generation_batch_size": config.rollout_samples,
            "num_generations": algo.group_size,
            "num_iterations": algo.epochs_per_rollout,
            "max_completion_length": ro.max_new_tokens,
            "temperature": ro.temperature,
            "top_p": ro.top_p,
            "top_k": ro.top_k,
            "beta": algo.kl_coef,
            "epsilon": algo.clip_low,
            "epsilon_high": algo.clip_high,
            "max_grad_norm": tr.grad_clip or 0.0,
            "seed": tr.seed,
            "data_seed": tr.seed,
            "full_determinism": tr.deterministic,
            "shuffle_dataset": config.data.shuffle,
            "logging_steps": per_step,
            "report_to": "none",
            "disable_tqdm": True,
            "eval_strategy": "steps" if config.data.eval is not None else "no",
            "eval_steps": config.data.eval_interval * per_step,
            "per_device_eval_batch_size": config.rollout_samples,
            "save_strategy": "steps" if config.checkpoint.interval else "no",
            "save_steps": (config.checkpoint.interval or 1) * per_step,
            "save_total_limit": config.checkpoint.keep_last,
            "use_cpu": gpus == 0,
            "bf16": dtype == "bfloat16" and gpus > 0,
            "fp16": dtype == "float16" and gpus > 0,
            "model_init_kwargs": {"dtype": dtype},
            # an environment's episode reward comes first, as a reward function of weight 1
            "reward_weights": [1.0] * (config.environment is not None) + [r.weight for r in config.reward],
            "remove_unused_columns": False,
            "use_vllm": ro.engine == "vllm",
        }
        if trainer == "GRPO":
            loss = "dr_grpo" if algo.name == "dr_grpo" else LOSS_TYPES[algo.loss_aggregation]
            args["loss_type"] = loss
            args["scale_rewards"] = algo.effective_advantage_normalization
        else:
            args["normalize_advantages"] = algo.effective_advantage_normalization == "batch"
        if ro.engine == "vllm":
            args.update(
                vllm_mode="colocate",
                vllm_gpu_memory_utilization=ro.gpu_memory_utilization,
                vllm_tensor_parallel_size=ro.tensor_parallel_size,
                vllm_enable_sleep_mode=False,
            )
        lora = knobs.translate(config, args, trainer)
        passthrough = dict(config.backend_options.get("trl", {}))  # refused where a knob owns it (Backend.check_backend_options)
        args.update(passthrough)
        env = {"TOKENIZERS_PARALLELISM": "false"}
        if ro.engine == "vllm" and gpus == 0:
            env.update(VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND="nobind")
        threads = tr.torch_threads or config.resources.cpus_per_node
        native = {
            "trainer": f"{trainer}Trainer",
            "config_class": f"{trainer}Config",
            "args": args,
            "model": {"path": _model_path(config), "dtype": dtype},
            "rewards": [r.model_dump(mode="json", exclude_none=True) for r in config.reward],
            "environment": config.environment.model_dump(mode="json") if config.environment else None,
            "data": {
                "prompt_key": config.data.prompt_key,
                "answer_key": config.data.answer_key,
                "use_chat_template": config.model.use_chat_template,
                "chat_template": config.model.chat_template,
                "max_prompt_tokens": ro.max_prompt_tokens,
                "drop_overlong_prompts": ro.drop_overlong_prompts,
                "chat_template_kwargs": dict(config.model.chat_template_kwargs),
            },
            "lora": lora,
            "torch_threads": threads,
            "updates_per_step": per_step,
            "resume": config.checkpoint.resume,
            "env": env,
        }
        if asynchrony.wants_async(config):
            return asynchrony.translate(config, native)
        return native

    native_aliases = ALIASES
    reserved_options = RESERVED

    def native_settings(self, plan) -> dict[str, Any]:
        """GRPOConfig/RLOOConfig fields as they are (dict fields also one level down, e.g.
        model_init_kwargs.dtype); what rlbridge's launcher does as launch.*."""
        args = plan.native["args"]
        settings = {**args, **{k: v for k, v in flatten(args).items() if "." in k}}
        settings.update(launch_settings(plan.native, skip=("args",)))
        return settings

    def render_native(self, plan) -> str:
        import yaml

        native = plan.native
        module = f"{native['config_module']}." if native.get("config_module") else ""
        head = (
            f"# {module}{native['trainer']}({native['config_class']}(**args)); one rlbridge step = "
            f"{native['updates_per_step']} TRL optimizer step(s)\n"
        )
        return head + yaml.safe_dump(native, sort_keys=False)

    def patches(self) -> list:
        from rlbridge_adapters.trl.patches import PATCHES

        return PATCHES

    def validate(self, plan) -> None:
        from rlbridge_adapters.trl.train import make_args

        make_args(plan.native)

    def recipe_importer(self):
        """Reads trl recipes for `rlbridge import` (the inverse mapping is derived from translate())."""
        from rlbridge_adapters.trl.importer import TRLRecipeImporter

        return TRLRecipeImporter()

    def run(self, plan, ctx) -> None:
        if plan.native.get("stage"):
            stages.run_offline(plan, ctx)
            return
        from rlbridge_adapters.trl.train import run_trl

        run_trl(plan, ctx)


def _model_path(config: RunConfig) -> str:
    from rlbridge.contract.models import model_path

    return model_path(config)
