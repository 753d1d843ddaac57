"""The verl backend: canonical config -> verl's Hydra overrides for main_ppo, per verl version.

Batch semantics: data.train_batch_size = training.batch_size (prompts); rollout.n = group_size;
actor.ppo_mini_batch_size = mini_batch_size / group_size (verl counts it in prompts and multiplies
by n, then splits the mini batch over its data-parallel ranks: engine_workers.train_mini_batch divides
by the engine's dp size, devices / Ulysses or tp x pp x cp, so it stays global);
ppo_micro_batch_size_per_gpu = micro_batch_size (samples per forward/backward on one device; unset: the
mini batch of one data-parallel rank). One canonical step = one verl global step (one rollout batch and
its updates). The training layout (strategy, sharding, offload, parallel sizes, CPU ranks): layout.py.

Version differences handled here: the reward keys moved under `reward.` in 0.7.1 (and from 0.9.0 the
old top-level keys are silently ignored); the HF rollout exists only up to 0.5.x; 0.6 made
rollout.name required; 0.9 defaults to the V1 trainer (TransferQueue).
"""

from __future__ import annotations

import json
from typing import Any

from packaging.version import Version

from rlbridge.contract.backend import (
    Backend,
    flatten,
    gpus_per_node,
    launch_settings,
    resolved_dtype,
)
from rlbridge.contract.config import RunConfig
from rlbridge.contract.models import model_path
from rlbridge.engine.model_dir import PASSTHROUGH_CHAT_TEMPLATE
from rlbridge.errors import ConfigError
from rlbridge_adapters.verl import asynchrony, knobs, layout, stages

ESTIMATORS = {
    "grpo": "grpo",
    "dr_grpo": "grpo",
    "rloo": "rloo",
    "reinforce_pp": "reinforce_plus_plus",
    "reinforce_pp_baseline": "reinforce_plus_plus_baseline",
    "ppo": "gae",
}
LOSS_AGG = {
    "token_mean": "token-mean",
    "seq_mean_token_mean": "seq-mean-token-mean",
    "seq_mean_token_sum_norm": "seq-mean-token-sum-norm",
}
REWARD_MANAGER = "rlbridge"
AGENT_NAME = (
    "rlbridge_environment"  # the name of rlbridge's agent loop in the agent-loop config (train.write_agent_loop_files)
)
AGENT_LOOP_FILE = "rlbridge_agent_loops.yaml"
TOOL_CONFIG_FILE = "rlbridge_tools.yaml"
PROMPT_LENGTH_AUTO = "auto"
# Settings rlbridge's verl plan makes on CPU only, each differing from verl's default, and why
CPU_ONLY = {
    "actor_rollout_ref.actor.use_torch_compile": False,
    "data.dataloader_num_workers": 0,
}
CPU_ONLY_REASONS = {
    "actor_rollout_ref.actor.use_torch_compile": "CPU only: torch.compile costs minutes on a CPU and gains nothing "
    "there",
    "data.dataloader_num_workers": "CPU only: data-loader processes compete with the engine for the CPU's cores",
}
# Keys rlbridge sets as defaults rather than from a canonical knob: backend_options.verl may change them.
ADAPTER_DEFAULTS = {
    "data.truncation",
    "data.dataloader_num_workers",
    "data.prompt_key",
    "actor_rollout_ref.actor.use_torch_compile",
    "trainer.logger",
    "trainer.project_name",
    "trainer.experiment_name",
    "trainer.use_v1",
    "actor_rollout_ref.rollout.enforce_eager",
    "actor_rollout_ref.rollout.free_cache_engine",
    "+actor_rollout_ref.rollout.enable_sleep_mode",
    "actor_rollout_ref.rollout.max_num_seqs",
    "actor_rollout_ref.rollout.agent.num_workers",
    "reward.num_workers",
    "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes",
    "+actor_rollout_ref.model.override_config.attn_implementation",
    "+critic.model.override_config.attn_implementation",
}


def _v(config: RunConfig) -> Version:
    return VerlBackend.target_version(config)


def eval_sampling(config: RunConfig) -> dict:
    ro = config.rollout
    return {
        "do_sample": True,
        "temperature": ro.temperature,
        "top_p": ro.top_p,
        "top_k": ro.top_k if ro.top_k > 0 else -1,
        "n": config.algorithm.group_size,
    }


class VerlBackend(Backend):
    name = "verl"
    scores_in_engine_workers = True  # rewards are scored in Ray workers
    partial_weight_sync = True  # ServerAdapter.update_weights is the seam (boot.py); vLLM keeps what it is not sent
    # verl's hybrid engine fuses actor, rollout and reference (and a colocated critic) into WorkerDict actors;
    # 0.9's vLLM server process (no logical GPU of its own: it serves on the WorkerDict's) is the rollout too
    actor_roles = {"WorkerDict": ("actor", "rollout", "reference"), "vLLMHttpServer": ("rollout",)}
    # verl's asynchronous trainers (asynchrony.py): actor and reference fused in a WorkerDict (DetachActorWorker
    # alone) on the trainer pool; the rollout pool's devices held by its CheckpointEngineWorkers, which the
    # vLLM server serves from
    async_actor_roles = {
        "WorkerDict": ("actor", "reference"),
        "DetachActorWorker": ("actor", "reference"),
        "CheckpointEngineWorker": ("rollout",),
        "vLLMHttpServer": ("rollout",),
    }
    # verl <= 0.5's register center: each worker reads rank zero's address from it while the worker group
    # starts (verl/single_controller/base/register_center/ray.py), nothing after; 0.9 has none
    startup_only_actors = ("WorkerGroupRegisterCenter",)
    native_key_spelling = "Hydra keys of `main_ppo`'s config"
    description = (
        "verl main_ppo: grpo, dr_grpo, rloo, reinforce_pp, reinforce_pp_baseline, ppo (GAE); HF rollout (<=0.5) or "
        "vLLM/SGLang"
    )

    def placement_roles(self, plan) -> dict[str, tuple[str, ...]]:
        return self.async_actor_roles if plan.native.get("entry_point") else self.actor_roles

    def translate(self, config: RunConfig) -> dict[str, Any]:
        version = _v(config)
        algo, tr, ro = config.algorithm, config.training, config.rollout
        gpus = gpus_per_node(config)
        mini = config.mini_batch_samples
        # unset: one micro batch per data-parallel rank's share of the mini batch (what verl hands each rank)
        micro = tr.micro_batch_size or max(mini // layout.data_parallel_size(config), 1)
        megatron = layout.strategy(config) == layout.MEGATRON
        estimator = ESTIMATORS.get(algo.name, "grpo")
        kl_loss = algo.kl_coef > 0 and algo.kl_placement == "loss"
        kl_reward = algo.kl_coef > 0 and algo.kl_placement == "reward"
        loss_agg = "seq-mean-token-sum-norm" if algo.name == "dr_grpo" else LOSS_AGG[algo.loss_aggregation]
        rollout_name = knobs.rollout_engine(config)
        o: dict[str, Any] = {
            "algorithm.adv_estimator": estimator,
            "algorithm.norm_adv_by_std_in_grpo": algo.effective_advantage_normalization == "group",
            "algorithm.use_kl_in_reward": kl_reward,
            "algorithm.kl_ctrl.kl_coef": algo.kl_coef if kl_reward else 0.001,
            "data.train_files": "<run_dir>/data/train.parquet",
            "data.val_files": "<run_dir>/data/val.parquet",
            "data.prompt_key": "prompt",
            "data.train_batch_size": tr.batch_size,
            "data.max_prompt_length": ro.max_prompt_tokens or PROMPT_LENGTH_AUTO,
            "data.max_response_length": ro.max_new_tokens,
            "data.shuffle": config.data.shuffle,
            "++data.seed": tr.seed,  # in verl's data config from 0.7; 0.5 reads it with .get (so: add or override)
            "data.truncation": "error",
            "actor_rollout_ref.model.path": "<model_dir>",
            "actor_rollout_ref.actor.ppo_mini_batch_size": mini // algo.group_size,
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": micro,
            "actor_rollout_ref.actor.ppo_epochs": algo.epochs_per_rollout,
            "actor_rollout_ref.actor.clip_ratio_low": algo.clip_low,
            "actor_rollout_ref.actor.clip_ratio_high": algo.clip_high if algo.clip_high is not None else algo.clip_low,
            "actor_rollout_ref.actor.loss_agg_mode": loss_agg,
            "actor_rollout_ref.actor.use_kl_loss": kl_loss,
            "actor_rollout_ref.actor.kl_loss_coef": algo.kl_coef if kl_loss else 0.001,
            "actor_rollout_ref.actor.optim.lr": tr.lr,
            "actor_rollout_ref.actor.optim.weight_decay": tr.weight_decay,
            "actor_rollout_ref.actor.optim.lr_warmup_steps": tr.warmup_steps if tr.warmup_steps else -1,
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": micro,
            "actor_rollout_ref.rollout.name": rollout_name,
            "actor_rollout_ref.rollout.dtype": resolved_dtype(config),
            "actor_rollout_ref.rollout.n": algo.group_size,
            "actor_rollout_ref.rollout.temperature": ro.temperature,
            "actor_rollout_ref.rollout.top_p": ro.top_p,
            "actor_rollout_ref.rollout.top_k": ro.top_k if ro.top_k > 0 else -1,
            "actor_rollout_ref.rollout.tensor_model_parallel_size": ro.tensor_parallel_size,
            "actor_rollout_ref.rollout.gpu_memory_utilization": ro.gpu_memory_utilization,
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": micro,
            "trainer.logger": ["console"],
            "trainer.project_name": "rlbridge",
            "trainer.experiment_name": config.run_name or "run",
            "trainer.nnodes": config.resources.nodes,
            "trainer.n_gpus_per_node": gpus or config.resources.cpu_ranks_per_node,
            "trainer.val_before_train": False,
            "trainer.test_freq": -1,
            "trainer.save_freq": config.checkpoint.interval or -1,
            "trainer.default_local_dir": config.checkpoint.dir,
            "trainer.max_actor_ckpt_to_keep": config.checkpoint.keep_last,
            "trainer.resume_mode": "disable"
            if not config.checkpoint.resume
            else ("auto" if config.checkpoint.resume is True else "resume_path"),
        }
        if isinstance(config.checkpoint.resume, str):
            o["trainer.resume_from_path"] = config.checkpoint.resume
        if tr.steps:
            o["trainer.total_training_steps"] = tr.steps
            # verl stops at whichever of the two comes first; steps alone: epochs never stop it
            o["trainer.total_epochs"] = tr.epochs or 100000
        else:
            o["trainer.total_epochs"] = tr.epochs
        if megatron:  # Megatron's optimizer config (optim/megatron.yaml): its own schedule and clip keys
            o["actor_rollout_ref.actor.optim.lr_decay_style"] = tr.lr_schedule
        else:
            schedule_key = (
                "actor_rollout_ref.actor.optim.warmup_style"
                if version < Version("0.7.0")
                else "actor_rollout_ref.actor.optim.lr_scheduler_type"
            )
            o[schedule_key] = tr.lr_schedule
        clip = tr.grad_clip if tr.grad_clip is not None else 1e9
        if not megatron:
            o["actor_rollout_ref.actor.grad_clip"] = clip  # what verl <= 0.7's dp_actor clips at
        if version >= Version("0.9.0") or megatron:
            # 0.9's engine workers clip at optim.clip_grad (FSDPEngine.optimizer_step) and ignore actor.grad_clip
            o["actor_rollout_ref.actor.optim.clip_grad"] = clip
        if config.data.eval is not None:
            o["trainer.test_freq"] = config.data.eval_interval
            # evaluation samples as training does (TRL's and OpenRLHF's evaluation too), not verl's greedy default
            o.update({f"actor_rollout_ref.rollout.val_kwargs.{k}": v for k, v in eval_sampling(config).items()})
        # the seeds each verl version has (every version: rlbridge's bootstrap seeds torch, numpy and random in every
        # process)
        if version >= Version("0.7.0"):
            o["actor_rollout_ref.actor.data_loader_seed"] = tr.seed
        if version >= Version("0.9.0"):
            o["actor_rollout_ref.rollout.seed"] = tr.seed
        if tr.deterministic:  # verl 0.9+ (_check_deterministic)
            o["actor_rollout_ref.rollout.full_determinism"] = True
            o["actor_rollout_ref.actor.fsdp_config.full_determinism"] = True
            o["actor_rollout_ref.ref.fsdp_config.full_determinism"] = True
        if estimator == "gae":
            if version >= Version("0.7.0"):
                o["critic.data_loader_seed"] = tr.seed
        knobs.translate(config, o, micro, version)
        layout.translate(config, o, version)
        template = config.model.chat_template if config.model.use_chat_template else PASSTHROUGH_CHAT_TEMPLATE
        # reward: rlbridge's reward manager, under the keys this verl version reads
        if version >= Version("0.7.1"):
            o["reward.reward_manager.name"] = REWARD_MANAGER
        else:
            o["reward_model.reward_manager"] = REWARD_MANAGER
        cpu = gpus == 0
        if cpu:  # what a CPU needs; on GPUs the plan keeps verl's own defaults (fsdp, torch.compile, 8 loader workers)
            o["trainer.device"] = "cpu"
            o.update(CPU_ONLY)
            o["+actor_rollout_ref.model.override_config.attn_implementation"] = "sdpa"
            if estimator == "gae":
                o["+critic.model.override_config.attn_implementation"] = "sdpa"
            if version >= Version("0.9.0"):
                o["trainer.use_v1"] = False
        if rollout_name == "vllm" and cpu:
            o.update(
                {
                    "actor_rollout_ref.rollout.enforce_eager": True,
                    "actor_rollout_ref.rollout.free_cache_engine": False,
                    "+actor_rollout_ref.rollout.enable_sleep_mode": False,
                    "actor_rollout_ref.rollout.max_num_seqs": max(config.rollout_samples, 16),
                    "actor_rollout_ref.rollout.agent.num_workers": 1,
                    "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes": 16,
                    "reward.num_workers": 1,
                }
            )
        entry = None  # main_ppo
        if ro.max_staleness:  # one of verl's asynchronous trainers, on a rollout pool of its own (asynchrony.py)
            async_keys = asynchrony.translate(config)
            entry = async_keys.pop(asynchrony.ENTRY)
            o.update(async_keys)
            if cpu:
                o.update(asynchrony.cpu_overrides())
        tools: list[dict[str, Any]] = []
        if config.environment is not None:
            from rlbridge.contract.environments import environment_class, tool_schemas

            tools = tool_schemas(environment_class(config.environment.model_dump()))
            o.update(
                {
                    "actor_rollout_ref.rollout.agent.agent_loop_config_path": f"<run_dir>/{AGENT_LOOP_FILE}",
                    "actor_rollout_ref.rollout.agent.default_agent_loop": AGENT_NAME,
                    "actor_rollout_ref.rollout.multi_turn.enable": True,
                    "actor_rollout_ref.rollout.multi_turn.max_assistant_turns": config.environment.max_turns,
                }
            )
            if tools:
                o["actor_rollout_ref.rollout.multi_turn.tool_config_path"] = f"<run_dir>/{TOOL_CONFIG_FILE}"
        passthrough = flatten(config.backend_options.get("verl", {}))
        for key in passthrough:  # knob-owned keys are refused before (Backend.check_backend_options); the rest of o too
            bare = key.lstrip("+")
            if entry is not None and asynchrony.is_async_key(bare):
                continue  # the async trainers' own settings, which translate() passed through already
            owned = {k for k in (bare, f"+{bare}") if k in o and k not in ADAPTER_DEFAULTS}
            if owned:
                raise ConfigError(
                    f"backend_options.verl.{key}: rlbridge sets {bare} itself for every verl run; remove it"
                )
        o.update(passthrough)
        env = {
            "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_OFFLINE": "1",
            "WANDB_MODE": "disabled",
            "RLBRIDGE_SEED": str(tr.seed),
        }  # read by rlbridge's bootstrap in every verl process (boot.py)
        if tr.torch_threads:
            env["OMP_NUM_THREADS"] = str(tr.torch_threads)
        if tr.deterministic:  # what verl's main_ppo sets for full_determinism before it starts Ray (main_ppo.py:47)
            env.update(VERL_FULL_DETERMINISM="1", PYTHONHASHSEED=str(tr.seed))
            if not cpu:
                env["VLLM_BATCH_INVARIANT"] = "1"
        if cpu and version >= Version("0.9.0"):
            env.update(
                VERL_PLATFORM="cpu",
                VERL_ENGINE_DEVICE="cuda",
                VLLM_TARGET_DEVICE="cpu",
                VLLM_CPU_KVCACHE_SPACE="1",
                VLLM_CPU_OMP_THREADS_BIND="nobind",
            )
        cpus = config.resources.cpus_per_node or 8
        # on CPU: the training ranks' logical GPUs (resources.cpu_ranks_per_node) per node
        logical_gpus = o["trainer.n_gpus_per_node"] if cpu else None
        if entry is not None:
            cpus += asynchrony.DRIVER_CPUS[entry]
            if cpu:  # the trainer's logical devices per node plus the rollout pool's
                logical_gpus = o["trainer.n_gpus_per_node"] + o["rollout.n_gpus_per_node"]
        return {
            "verl_version": str(version),
            "entry_point": entry,
            "overrides": o,
            "model": {"path": model_path(config), "chat_template": template},
            "rewards": [r.model_dump(mode="json", exclude_none=True) for r in config.reward],
            "data": {"prompt_key": config.data.prompt_key, "answer_key": config.data.answer_key},
            "environment": config.environment.model_dump(mode="json") if config.environment else None,
            "tools": tools,
            "ray": {
                "address": config.resources.ray_address,
                "num_cpus": cpus,
                "logical_gpus": logical_gpus,
                "cpu_resource": cpu and version < Version("0.6.0"),
            },
            "cpu": cpu,
            "env": env,
        }

    native_aliases = {
        "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": "training.warmup_steps",
        "actor_rollout_ref.actor.optim.total_training_steps": "training.steps",
        "actor_rollout_ref.actor.fsdp_config.model_dtype": "model.dtype",
        "actor_rollout_ref.rollout.response_length": "rollout.max_new_tokens",
        "actor_rollout_ref.rollout.prompt_length": "rollout.max_prompt_tokens",
        "actor_rollout_ref.rollout.do_sample": "rollout.temperature",
        "actor_rollout_ref.actor.use_dynamic_bsz": "training.micro_batch_size",
        "actor_rollout_ref.actor.ppo_micro_batch_size": "training.micro_batch_size",
        "actor_rollout_ref.actor.clip_ratio": "algorithm.clip_low",
        "actor_rollout_ref.model.custom_chat_template": "model.chat_template",
        "actor_rollout_ref.model.path": "model.path",
        "critic.model.path": "model.path",
        "data.train_files": "data.train",
        "data.val_files": "data.eval",
        "trainer.val_before_train": "data.eval",
        "reward_model.reward_manager": "reward",
        "reward.reward_manager.name": "reward",
        "actor_rollout_ref.actor.fsdp_config.seed": "training.seed",
        "actor_rollout_ref.ref.fsdp_config.seed": "training.seed",
    }

    def native_settings(self, plan) -> dict[str, Any]:
        """verl's Hydra keys (without Hydra's '+' append marker); what rlbridge's launcher does as launch.*."""
        settings = {key.lstrip("+"): value for key, value in plan.native["overrides"].items()}
        settings.update(launch_settings(plan.native, skip=("overrides",)))
        return settings

    def option_keys(self, options: dict[str, Any]) -> dict[str, Any]:
        return {key.lstrip("+"): value for key, value in flatten(options).items()}

    def render_native(self, plan) -> str:
        module = "sft_trainer" if plan.native.get("stage") else (plan.native.get("entry_point") or "main_ppo")
        lines = [
            f"# verl {plan.native['verl_version']} {module} overrides (<run_dir>, <model_dir> and 'auto' are filled "
            "in at launch)"
        ]
        for key, value in plan.native["overrides"].items():
            lines.append(f"{key}={format_value(value)}")
        return "\n".join(lines)

    def validate(self, plan) -> None:
        if plan.native.get("stage"):
            stages.validate(plan.native)
            return
        from rlbridge_adapters.verl.validate import validate_plan

        validate_plan(plan)

    def run(self, plan, ctx) -> None:
        from rlbridge_adapters.verl.train import run_verl

        run_verl(plan, ctx)


def format_value(value: Any) -> str:
    """A Hydra override value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{format_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str) and any(c in value for c in " ,[]{}'\"=\n"):
        return json.dumps(value)
    return str(value)
