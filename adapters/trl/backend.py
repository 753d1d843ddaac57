"""The TRL backend: canonical config -> GRPOConfig/RLOOConfig kwargs, and a run through TRL's trainers.

Batch semantics: one canonical training step is one rollout batch of training.batch_size prompts x
group_size samples (TRL generation_batch_size) and its updates. TRL's global_step counts optimizer
updates, so the plan sets max_steps = steps x updates_per_step and logging_steps = updates_per_step,
which makes TRL log (and average) once per canonical step.
"""

from __future__ import annotations

from typing import Any

from rlbridge.contract.backend import (
    Backend,
    flatten,
    gpus_per_node,
    launch_settings,
    resolved_dtype,
)
from rlbridge.contract.config import RunConfig
from rlbridge.contract.models import model_path
from rlbridge_adapters.trl import asynchrony, knobs, layout

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


class TRLBackend(Backend):
    name = "trl"
    native_arm_runs_here = True  # (rlbridge.bench.arms refuses it in an engine environment)
    native_key_spelling = (
        "`GRPOConfig`/`RLOOConfig` fields (the offline stages': `SFTConfig`, `DPOConfig`, `RewardConfig`)"
    )
    description = (
        "Hugging Face TRL: GRPOTrainer (grpo, dr_grpo) and RLOOTrainer (rloo), HF generate or colocated vLLM; "
        "SFTTrainer, DPOTrainer and RewardTrainer (sft, dpo, reward_model)"
    )
    # the TRL+vLLM cell's end-to-end runs, the adapter's own (adapters/trl/tests/in_env): vLLM colocated, and the
    # async loop with its own vLLM server
    test_kinds = {"e2e-cpu-vllm": ["adapters/trl/tests/in_env", "-m", "engine"]}
    partial_weight_sync = True  # TRL's vLLM weight generator is the seam (patch.py); colocated vLLM keeps its weights
    resume_reproduces_metrics = True  # TRL's checkpoints hold every RNG state; HF generate on CPU is deterministic
    # the split placement's processes (adapters/trl/async_run.py writes placement.json, as the Ray engines' read-back)
    actor_roles = {"AsyncGRPOTrainer": ("actor", "reference"), "vllm serve": ("rollout",)}

    def translate(self, config: RunConfig) -> dict[str, Any]:
        algo, tr, ro = config.algorithm, config.training, config.rollout
        gpus = gpus_per_node(config)
        # every training process is one data-parallel rank: the batch sizes are global (TRL: per_device_train_batch_size
        # x num_processes x gradient_accumulation_steps samples per update), and check_devices divided them already
        processes = layout.training_processes(config)
        per_step = config.updates_per_step
        mini = config.mini_batch_samples
        micro = tr.micro_batch_size or mini // processes
        dtype = resolved_dtype(config)
        trainer = TRAINERS.get(algo.name, "GRPO")
        args: dict[str, Any] = {
            "output_dir": config.checkpoint.dir,
            "max_steps": tr.steps * per_step if tr.steps else -1,
            "num_train_epochs": tr.epochs or 1,
            "learning_rate": tr.lr,
            # transformers' "constant" ignores warmup_steps (get_constant_schedule); verl's and OpenRLHF's warm up
            "lr_scheduler_type": "constant_with_warmup"
            if tr.lr_schedule == "constant" and tr.warmup_steps
            else tr.lr_schedule,
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
            "per_device_eval_batch_size": config.rollout_samples // processes,
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
        passthrough = dict(
            config.backend_options.get("trl", {})
        )  # refused where a knob owns it (Backend.check_backend_options)
        args.update(passthrough)
        env = {"TOKENIZERS_PARALLELISM": "false"}
        if ro.engine == "vllm" and gpus == 0:
            env.update(VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND="nobind")
        cpus = config.resources.cpus_per_node
        threads = tr.torch_threads or (cpus and max(cpus // layout.processes_per_node(config), 1))
        native = {
            "trainer": f"{trainer}Trainer",
            "config_class": f"{trainer}Config",
            "args": args,
            "model": {"path": model_path(config), "dtype": dtype},
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
        layout.translate(config, native)
        return native

    native_aliases = ALIASES
    reserved_options = RESERVED

    def native_settings(self, plan) -> dict[str, Any]:
        """GRPOConfig/RLOOConfig fields as they are (dict fields also one level down, e.g.
        model_init_kwargs.dtype); what rlbridge's launcher does as launch.*."""
        args = plan.native["args"]
        settings = {**args, **{k: v for k, v in flatten(args).items() if "." in k}}
        settings.update(launch_settings(plan.native, skip=("args", "accelerate")))
        settings.update(flatten(plan.native.get("accelerate") or {}, "accelerate."))  # accelerate's config-file keys
        return settings

    def render_native(self, plan) -> str:
        import yaml

        native = plan.native
        module = f"{native['config_module']}." if native.get("config_module") else ""
        head = (
            f"# {module}{native['trainer']}({native['config_class']}(**args)); one rlbridge step = "
            f"{native['updates_per_step']} TRL optimizer step(s)\n"
        )
        if native.get("accelerate"):
            acc = native["accelerate"]
            head += (
                f"# {acc['num_processes']} training process(es) on {acc['num_machines']} node(s), on each node: "
                f"{' '.join(layout.launch_command(native))}\n# (accelerate_config.yaml: the `accelerate` block below)\n"
            )
        return head + yaml.safe_dump(native, sort_keys=False)

    def validate(self, plan) -> None:
        from rlbridge_adapters.trl.train import make_args

        make_args(plan.native)
        layout.validate(plan.native)  # accelerate's own classes read the accelerate config

    def check_startable(self, plan) -> None:
        from rlbridge_adapters.trl.launch import check_startable

        check_startable(plan.native)

    def run(self, plan, ctx) -> None:
        from rlbridge_adapters.trl.train import run_trl

        run_trl(plan, ctx)
