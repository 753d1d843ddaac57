"""OpenRLHF's capability table (every canonical knob, its native flags and the check of its value: the
table's one home, returned by `OpenRLHFBackend.capabilities()`), and the translation of the everyday
knobs (KL estimator, entropy bonus, discounting, dynamic sampling, rollout correction, chat-template
arguments, over-long prompts, gradient checkpointing, dynamic batching, packing, sequence
parallelism), LoRA, the critic of PPO and the device counts of every role.

Flags are written in 0.10.2+'s dotted names (backend.FLAT renames them for older releases); each was
read in `openrlhf/cli/train_ppo_ray.py` of the 0.11.2 wheel. The asynchronous loop's and the offline
stages' knobs are declared in asynchrony.py and stages.py, beside the code that runs them, and joined
to the table here.
"""

from __future__ import annotations

from typing import Any

from packaging.version import Version

from rlbridge.contract.backend import (
    Capability,
    approximated,
    critic_knob,
    gpus_per_node,
    honoured,
    nodes_need_a_cluster,
    one_stop_condition,
    rejected,
)
from rlbridge.contract.config import RunConfig
from rlbridge.contract.knob_checks import (
    Check,
    check_gae_lambda_needs_gae,
    check_gamma_needs_returns,
    check_kl_estimator_needs_kl,
    placement_kl_estimator,
    refuse_when,
    warmup_needs_steps,
)
from rlbridge.contract.models import resolve_path
from rlbridge_adapters.openrlhf import asynchrony, layout, stages

IS_LEVELS_SINCE = Version("0.11.2")  # --algo.advantage.is_correction_level/_mode/_threshold
# canonical rollout_correction -> (is_correction_level, is_correction_mode)
IS_CORRECTION = {"token_truncate": ("token", "clip"), "token_mask": ("token", "mask"), "sequence_mask": ("seq", "mask")}

# dotted (0.10.2+) -> flat (before) for the flags this module writes
FLAT = {
    "algo.kl.estimator": "kl_estimator",
    "algo.advantage.gamma": "gamma",
    "algo.advantage.lambd": "lambd",
    "algo.dynamic_filtering_enable": "dynamic_filtering",
    "algo.dynamic_filtering_range": "dynamic_filtering_reward_range",
    "actor.entropy_coef": "entropy_loss_coef",
    "actor.gradient_checkpointing_enable": "gradient_checkpointing",
    "ds.packing_samples": "packing_samples",
    "ds.ring_attn_size": "ring_attn_size",
    "train.dynamic_batch_enable": "use_dynamic_batch",
    "train.max_tokens_per_gpu": "train_max_tokens_per_gpu",
    "rollout.max_tokens_per_gpu": "rollout_max_tokens_per_gpu",
    "ds.lora.rank": "lora_rank",
    "ds.lora.alpha": "lora_alpha",
    "ds.lora.target_modules": "target_modules",
    "ds.lora.dropout": "lora_dropout",
    "critic.value_clip": "value_clip",
    "critic.freezing_steps": "freezing_actor_steps",
    "ref.num_nodes": "ref_num_nodes",
    "ref.num_gpus_per_node": "ref_num_gpus_per_node",
    "critic.num_nodes": "critic_num_nodes",
    "critic.num_gpus_per_node": "critic_num_gpus_per_node",
    "reward.num_nodes": "reward_num_nodes",
    "reward.num_gpus_per_node": "reward_num_gpus_per_node",
    "train.colocate_actor_ref": "colocate_actor_ref",
    "reward.model_name_or_path": "reward_pretrain",
}


def engine_reward_model(config: RunConfig) -> str | None:
    """The reward model OpenRLHF's own reward-model actors run (--reward.model_name_or_path): when the
    run's only reward is one model with weight 1 and no environment. Otherwise model rewards are
    scored by rlbridge's executor, like the other rewards (OpenRLHF takes reward models or a reward
    function, not both, and no weights)."""
    rewards = config.reward
    if config.environment is None and len(rewards) == 1 and rewards[0].model and rewards[0].weight == 1.0:
        return resolve_path(rewards[0].model)
    return None


def _version(config: RunConfig) -> Version:
    from rlbridge_adapters.openrlhf.backend import target_version

    return target_version(config)


def _cpu_flash_attention(feature: str) -> Check:
    return refuse_when(
        lambda c: gpus_per_node(c) == 0,
        f"OpenRLHF's {feature} packs samples with flash attention (it forces --ds.attn_implementation "
        "flash_attention_2), which does not run on CPU; run on GPUs or leave it unset",
    )


def _check_packing(config: RunConfig) -> str | None:
    return _cpu_flash_attention("--ds.packing_samples")(config) if config.training.sequence_packing else None


def _check_dynamic_batch(config: RunConfig) -> str | None:
    if config.training.max_tokens_per_device is None:
        return None
    return _cpu_flash_attention("dynamic batching (--train.dynamic_batch_enable)")(config)


def _check_sequence_parallel(config: RunConfig) -> str | None:
    sp = config.training.sequence_parallel_size
    if sp == 1:
        return None
    problem = _cpu_flash_attention("ring attention (--ds.ring_attn_size)")(config)
    if problem:
        return problem
    devices = max(gpus_per_node(config), 1) * config.resources.nodes
    return None if devices % sp == 0 else f"sequence_parallel_size ({sp}) must divide the actor's devices ({devices})"


def _check_rollout_correction(config: RunConfig) -> str | None:
    mode = config.algorithm.rollout_correction
    if mode == "none":
        return None
    version = _version(config)
    if version < IS_LEVELS_SINCE:
        return (
            f"rlbridge maps rollout_correction to OpenRLHF 0.11.2's --algo.advantage.is_correction_level/_mode; "
            f"{version} names it differently (use engine_version 0.11.2 or backend_options.openrlhf)"
        )
    if mode not in IS_CORRECTION:
        return (
            "OpenRLHF's sequence-level correction is a rejection filter (mask only); use sequence_mask, "
            "token_truncate or token_mask"
        )
    return None


_check_critic_micro = refuse_when(
    lambda c: c.critic.micro_batch_size is not None and c.critic.micro_batch_size != c.training.micro_batch_size,
    "OpenRLHF uses one --train.micro_batch_size for the actor and the critic; set critic.micro_batch_size "
    "equal to training.micro_batch_size or leave it unset",
)

_check_roles = refuse_when(
    lambda c: c.algorithm.name == "ppo" and c.placement.policy != "colocate" and gpus_per_node(c) > 0,
    "with placement split OpenRLHF would give the critic GPUs of its own beyond the layout; "
    "use placement.policy: colocate for ppo",
)

_check_deterministic = refuse_when(
    lambda c: c.training.deterministic and _version(c) < Version("0.11.0"),
    lambda c: (
        f"OpenRLHF {_version(c)}: rlbridge makes OpenRLHF's rollout repeatable with patches written "
        "for 0.11 (per-request vLLM seeds, results taken in dispatch order); use OpenRLHF 0.11.2 or "
        "training.deterministic: false"
    ),
)


def _check_adv_norm(config: RunConfig) -> str | None:
    from rlbridge_adapters.openrlhf.backend import ESTIMATORS

    name, norm = config.algorithm.name, config.algorithm.effective_advantage_normalization
    allowed = {
        "grpo": {"group", "none"},
        "dr_grpo": {"none"},
        "rloo": {"none"},
        "reinforce_pp": {"batch"},
        "reinforce_pp_baseline": {"batch"},
        "ppo": {"batch"},
    }.get(name)
    if allowed and norm not in allowed:
        return (
            f"OpenRLHF's {ESTIMATORS[name]} scales advantages as {' or '.join(sorted(allowed))}; set that or leave "
            "it unset"
        )
    return None


def _check_loss_agg(config: RunConfig) -> str | None:
    agg = config.algorithm.loss_aggregation
    if agg == "seq_mean_token_sum_norm" and config.algorithm.name != "dr_grpo":
        return "OpenRLHF has seq-mean-token-sum-norm only inside its dr_grpo estimator; use algorithm.name: dr_grpo"
    if agg == "seq_mean_token_mean" and _version(config) < Version("0.11.2"):
        return f"OpenRLHF {_version(config)} has no --actor.loss_agg_mode (added in 0.11.2); use token_mean"
    return None


_check_rollout = refuse_when(
    lambda c: c.rollout.engine in ("hf", "sglang"),
    "OpenRLHF's PPO rollout is vLLM only; use rollout.engine: vllm (or auto)",
)

_check_dtype = refuse_when(
    lambda c: c.model.dtype == "float32",
    "OpenRLHF trains in bf16 or fp16 only (--ds.param_dtype); use bfloat16, float16 or auto",
)

_check_environment = refuse_when(
    lambda c: c.environment is not None and bool(c.reward),
    "with an environment OpenRLHF takes rewards from the agent only; move the reward into the environment "
    "or remove reward",
)


def _check_tp(config: RunConfig) -> str | None:
    tp, devices = config.rollout.tensor_parallel_size, layout.rollout_devices(config)
    if config.rollout.data_parallel_size is None and devices % tp:
        where = (
            "all the run's devices (colocate)"
            if config.placement.policy == "colocate"
            else "placement.args.rollout_gpus"
        )
        return (
            f"OpenRLHF's vLLM engines take tensor_parallel_size GPUs each, so {tp} must divide the {devices} of {where}"
        )
    return None


_check_warmup = warmup_needs_steps("OpenRLHF takes warm-up as a ratio of the run's steps")


def _check_stage(config: RunConfig) -> str | None:
    """The offline stages run OpenRLHF's train_sft / train_dpo / train_rm (adapters/openrlhf/stages.py)."""
    return stages.check_stage(config, _version(config)) if config.is_offline else None


def capabilities() -> list[Capability]:
    """How OpenRLHF treats every canonical knob: `OpenRLHFBackend.capabilities()`, the table's one home."""
    micro = ("train.micro_batch_size", "rollout.micro_batch_size")
    return [
        honoured("algorithm.name", ("algo.advantage.estimator", "critic.model_name_or_path"), _check_stage),
        honoured("algorithm.group_size", "rollout.n_samples_per_prompt"),
        honoured("algorithm.kl_coef", ("algo.kl.init_coef", "algo.kl.use_loss")),
        honoured(
            "algorithm.kl_placement",
            "algo.kl.use_loss",
            note="loss: --algo.kl.use_loss (k3 estimator); reward: KL in the reward (k1)",
        ),
        honoured("algorithm.clip_low", "actor.eps_clip_low_high"),
        honoured("algorithm.clip_high", "actor.eps_clip_low_high"),
        honoured("algorithm.loss_aggregation", "actor.loss_agg_mode", _check_loss_agg, note="0.11.2+"),
        honoured(
            "algorithm.advantage_normalization",
            "algo.advantage.no_std_norm",
            _check_adv_norm,
            note="grpo: --algo.advantage.no_std_norm; other estimators scale as they are defined",
        ),
        honoured("algorithm.epochs_per_rollout", "train.max_epochs"),
        honoured(
            "model.path", "launch.model.path", note="--actor.model_name_or_path (a copy with the run's chat template)"
        ),
        approximated(
            "model.dtype",
            "ds.param_dtype",
            "OpenRLHF trains in bf16 or fp16; auto picks bf16",
            check=_check_dtype,
            when=lambda c: c.model.dtype == "auto",
        ),
        honoured("model.chat_template", "launch.model.chat_template", note="installed in the run's model directory"),
        honoured(
            "model.use_chat_template",
            ("data.apply_chat_template", "data.input_template"),
            note="--data.apply_chat_template, else --data.input_template {}",
        ),
        honoured("data.train", (), note="--data.prompt_dataset (jsonl written by rlbridge)"),
        honoured(
            "data.eval",
            ("eval.dataset", "eval.steps", "eval.temperature", "eval.n_samples_per_prompt"),
            note="sampled as in training (0.11.2+: --eval.temperature, --eval.n_samples_per_prompt = group_size)",
        ),
        honoured("data.eval_interval", "eval.steps"),
        honoured("data.prompt_key", "launch.data.prompt_key", note="renamed to --data.input_key's column"),
        honoured("data.answer_key", "launch.data.answer_key", note="--data.label_key (the row, for the reward file)"),
        rejected(
            "data.shuffle", "OpenRLHF always shuffles its prompt dataset (seeded by training.seed); keep shuffle: true"
        ),
        honoured("rollout.engine", (), _check_rollout, note="vLLM engines (--vllm.num_engines)"),
        honoured("rollout.max_new_tokens", "rollout.max_new_tokens"),
        approximated(
            "rollout.max_prompt_tokens",
            "data.max_len",
            "OpenRLHF caps prompt + response (--data.max_len); unset, rlbridge sizes it to the longest prompt of "
            "the data",
            when=lambda c: c.rollout.max_prompt_tokens is None,
        ),
        honoured("rollout.temperature", "rollout.temperature"),
        honoured("rollout.top_p", "rollout.top_p"),
        rejected("rollout.top_k", "train_ppo_ray has no top-k flag; remove rollout.top_k"),
        honoured("rollout.gpu_memory_utilization", "vllm.gpu_memory_utilization"),
        honoured("rollout.tensor_parallel_size", ("vllm.tensor_parallel_size", "vllm.num_engines"), _check_tp),
        honoured(
            "reward",
            ("train.agent_func_path", "launch.rewards", "reward.model_name_or_path"),
            note="--train.agent_func_path <generated executor scoring the engine's token ids>; one reward "
            "model alone: --reward.model_name_or_path (OpenRLHF's reward-model actors)",
        ),
        approximated(
            "environment",
            ("train.agent_func_path", "launch.environment"),
            "OpenRLHF's multi-turn executor gives each turn the remaining --data.max_len budget, not "
            "rollout.max_new_tokens; "
            "tool calls (hermes format) are parsed by rlbridge's agent, as on TRL",
            check=_check_environment,
            when=lambda c: c.environment is not None,
        ),
        honoured(
            "training.steps",
            ("data.max_samples", "train.num_episodes", "actor.lr_warmup_ratio"),
            note="--data.max_samples = steps x batch_size, one episode",
        ),
        honoured(
            "training.epochs",
            ("train.num_episodes", "data.max_samples"),
            one_stop_condition(
                "OpenRLHF's --data.max_samples with --train.num_episodes gives steps x epochs, not the first of the two"
            ),
        ),
        honoured("training.lr", "actor.adam.lr"),
        honoured(
            "training.lr_schedule",
            ("actor.lr_scheduler", "critic.lr_scheduler"),
            note="constant_with_warmup / linear / cosine",
        ),
        honoured(
            "training.warmup_steps",
            ("actor.lr_warmup_ratio", "critic.lr_warmup_ratio"),
            _check_warmup,
            note="warmup_steps / steps",
        ),
        honoured("training.weight_decay", ("actor.adam.weight_decay", "critic.adam.weight_decay")),
        honoured("training.batch_size", ("rollout.batch_size", "data.max_samples")),
        honoured("training.mini_batch_size", "train.batch_size", note="in samples"),
        honoured("training.micro_batch_size", micro),
        approximated(
            "training.grad_clip",
            ("actor.max_norm", "critic.max_norm"),
            "OpenRLHF always clips; null becomes 1e9",
            when=lambda c: c.training.grad_clip is None,
        ),
        honoured(
            "training.seed",
            "train.seed",
            note="data order, vLLM engines (seed + engine index), DeepSpeed (transformers.set_seed)",
        ),
        honoured(
            "training.deterministic",
            ("train.full_determinism_enable", "launch.env.RLBRIDGE_SEED"),
            _check_deterministic,
            note="OpenRLHF 0.11+: DeepSpeed's deterministic mode and vLLM's engine core in process "
            "(--train.full_determinism_enable), and what it misses (rlbridge patches, adapters/openrlhf/patches/"
            "determinism.py): the trainer actor's prompt order seeded from --train.seed, a vLLM seed per sample "
            "from its prompt's place in the dispatch order, rollout results taken in dispatch order",
        ),
        approximated(
            "training.torch_threads",
            "launch.env.OMP_NUM_THREADS",
            "sets the thread count of every OpenRLHF process",
            when=lambda c: c.training.torch_threads is not None,
        ),
        honoured("resources.nodes", "actor.num_nodes", check=nodes_need_a_cluster),
        honoured(
            "resources.ray_address",
            "launch.ray.address",
            note="ray.init(address=...): join that cluster instead of starting a private one",
        ),
        honoured(
            "resources.gpus_per_node",
            ("actor.num_gpus_per_node", "vllm.num_engines", "train.colocate_all"),
            note="0: logical GPUs of a private Ray cluster",
        ),
        honoured("resources.cpus_per_node", "launch.ray.num_cpus", note="ray.init(num_cpus)"),
        approximated(
            "placement.policy",
            ("train.colocate_all", "actor.num_gpus_per_node", "vllm.num_engines"),
            "colocate on CPU: the vLLM engine gets a logical GPU of its own next to the actor's (OpenRLHF's "
            "colocated weight sync is CUDA IPC); the run's placement read-back reports it",
            when=lambda c: c.placement.policy == "colocate" and gpus_per_node(c) == 0,
        ),
        honoured("placement.args", ("actor.num_gpus_per_node", "vllm.num_engines"), note="split: rollout_gpus"),
        honoured("checkpoint.dir", "ckpt.path"),
        honoured("checkpoint.interval", "ckpt.save_steps"),
        approximated(
            "checkpoint.resume",
            "ckpt.load_enable",
            "OpenRLHF resumes from the newest checkpoint in --ckpt.path; a path selects that directory",
            when=lambda c: isinstance(c.checkpoint.resume, str),
        ),
        honoured("checkpoint.keep_last", "ckpt.max_num", note="null (keep all): a count no run reaches"),
        honoured("algorithm.kl_estimator", "algo.kl.estimator", check_kl_estimator_needs_kl),
        honoured("algorithm.entropy_coef", "actor.entropy_coef"),
        honoured(
            "algorithm.gamma",
            "algo.advantage.gamma",
            check_gamma_needs_returns,
        ),
        honoured("algorithm.gae_lambda", "algo.advantage.lambd", check_gae_lambda_needs_gae),
        approximated(
            "algorithm.dynamic_sampling",
            ("algo.dynamic_filtering_enable", "algo.dynamic_filtering_range"),
            "OpenRLHF keeps a group when its mean reward lies strictly inside (0, 1): exactly 'not all the same' "
            "for 0/1 rewards; other reward scales are filtered by that range. It draws replacement prompts from "
            "the prompt file, so a run may end before training.steps when the file runs out",
            when=lambda c: c.algorithm.dynamic_sampling,
        ),
        honoured(
            "algorithm.rollout_correction",
            ("algo.advantage.is_correction_level", "algo.advantage.is_correction_mode"),
            _check_rollout_correction,
            note="0.11.2: token_truncate -> token/clip, token_mask -> token/mask, sequence_mask -> seq/mask",
        ),
        honoured(
            "algorithm.rollout_correction_threshold",
            "algo.advantage.is_correction_threshold",
            note="one value: an upper bound only",
        ),
        approximated(
            "model.chat_template_kwargs",
            ("launch.data.chat_template_kwargs", "data.input_template"),
            "OpenRLHF applies the chat template without extra arguments, so rlbridge renders each prompt with "
            "the template and these arguments when it writes the prompt file (--data.input_template {})",
            when=lambda c: bool(c.model.chat_template_kwargs),
        ),
        honoured("model.lora", ("ds.lora.rank", "ds.lora.alpha", "ds.lora.target_modules", "ds.lora.dropout")),
        honoured(
            "rollout.drop_overlong_prompts", "launch.data.drop_over", note="rlbridge drops them from the prompt file"
        ),
        honoured("training.gradient_checkpointing", "actor.gradient_checkpointing_enable", note="actor and critic"),
        honoured(
            "training.forward_micro_batch_size",
            "rollout.micro_batch_size",
            note="experience making: the actor's, reference's, critic's and reward model's forward passes",
        ),
        honoured(
            "training.max_tokens_per_device",
            ("train.dynamic_batch_enable", "train.max_tokens_per_gpu", "rollout.max_tokens_per_gpu"),
            _check_dynamic_batch,
        ),
        honoured("training.sequence_packing", "ds.packing_samples", _check_packing),
        honoured("training.sequence_parallel_size", "ds.ring_attn_size", _check_sequence_parallel),
        honoured("critic.path", "critic.model_name_or_path", critic_knob("critic.path", _check_roles)),
        honoured("critic.lr", "critic.adam.lr", critic_knob("critic.lr")),
        honoured("critic.value_clip", "critic.value_clip", critic_knob("critic.value_clip")),
        honoured(
            "critic.warmup_steps",
            "critic.freezing_steps",
            critic_knob("critic.warmup_steps"),
            note="the actor is frozen for the first N steps",
        ),
        honoured(
            "critic.micro_batch_size",
            "train.micro_batch_size",
            critic_knob("critic.micro_batch_size", _check_critic_micro),
            note="shared with the actor",
        ),
        *asynchrony.capabilities(),
        *stages.capabilities(),
        *layout.capabilities(),
    ]


def translate(config: RunConfig, flags: dict[str, Any], version: Version) -> int:
    """Add this module's flags to `flags` (in place). Returns the logical GPUs the extra roles need
    on CPU (where every Ray actor of OpenRLHF asks for one GPU of the private cluster)."""
    algo, tr = config.algorithm, config.training
    if algo.kl_coef > 0:
        flags["algo.kl.estimator"] = placement_kl_estimator(config)
    if algo.entropy_coef > 0:
        flags["actor.entropy_coef"] = algo.entropy_coef
    flags["algo.advantage.gamma"] = (
        algo.gamma
    )  # said for every estimator, as verl's plan does (1.0 outside ppo/reinforce_pp)
    if algo.name == "ppo":
        flags["algo.advantage.lambd"] = algo.gae_lambda
    if tr.forward_micro_batch_size:
        flags["rollout.micro_batch_size"] = tr.forward_micro_batch_size
    if algo.dynamic_sampling:
        flags["algo.dynamic_filtering_enable"] = True
        flags["algo.dynamic_filtering_range"] = [0.0, 1.0]
    if algo.rollout_correction in IS_CORRECTION:
        level, mode = IS_CORRECTION[algo.rollout_correction]
        flags["algo.advantage.is_correction_level"] = level
        flags["algo.advantage.is_correction_mode"] = mode
        flags["algo.advantage.is_correction_threshold"] = (
            algo.rollout_correction_threshold
        )  # one value: upper bound only
    lora = config.model.lora
    if lora is not None:
        flags["ds.lora.rank"] = lora.rank
        flags["ds.lora.alpha"] = lora.alpha
        targets = lora.target_modules
        flags["ds.lora.target_modules"] = [targets] if isinstance(targets, str) else list(targets)
        flags["ds.lora.dropout"] = lora.dropout
    if tr.gradient_checkpointing:
        flags["actor.gradient_checkpointing_enable"] = True
    if tr.sequence_packing:
        flags["ds.packing_samples"] = True
    if tr.max_tokens_per_device:
        flags["train.dynamic_batch_enable"] = True
        flags["train.max_tokens_per_gpu"] = tr.max_tokens_per_device
        flags["rollout.max_tokens_per_gpu"] = tr.max_tokens_per_device
    if tr.sequence_parallel_size > 1:
        flags["ds.ring_attn_size"] = tr.sequence_parallel_size
    if algo.name == "ppo":
        critic = config.critic
        flags["critic.model_name_or_path"] = resolve_path(critic.path) if critic.path else "<model_dir>"
        flags["critic.adam.lr"] = critic.lr or tr.lr
        flags["critic.value_clip"] = critic.value_clip
        if critic.warmup_steps:
            flags["critic.freezing_steps"] = critic.warmup_steps
        if version >= Version("0.10.2"):  # per-model optimiser flags; before, one flag served both
            # the critic follows the canonical schedule, warm-up and clipping too (OpenRLHF's own
            # defaults are cosine to 10 % with 3 % warm-up: measured, a 2-step run's critic lr fell 10x)
            for key in ("lr_scheduler", "lr_warmup_ratio", "max_norm", "adam.weight_decay"):
                if f"actor.{key}" in flags:
                    flags[f"critic.{key}"] = flags[f"actor.{key}"]
    return role_placement(config, flags)


def role_placement(config: RunConfig, flags: dict[str, Any]) -> int:
    """Nodes and GPUs of the reference, critic and reward-model roles (OpenRLHF defaults each to 8
    GPUs per node): every role takes the actor's layout. On GPUs, colocated, they share its placement
    group (OpenRLHF asserts ref == actor when colocating with KL); split, the reference shares the
    actor's GPUs (--train.colocate_actor_ref). On CPU each role gets as many logical GPUs as the actor."""
    gpus = gpus_per_node(config)
    roles = []
    if config.algorithm.kl_coef > 0:
        roles.append("ref")
    if config.algorithm.name == "ppo":
        roles.append("critic")
    if flags.get("reward.model_name_or_path"):
        roles.append("reward")
    for role in roles:
        flags[f"{role}.num_nodes"] = flags["actor.num_nodes"]
        flags[f"{role}.num_gpus_per_node"] = flags["actor.num_gpus_per_node"]
    if gpus and "ref" in roles and config.placement.policy != "colocate":
        flags["train.colocate_actor_ref"] = True
    return 0 if gpus else len(roles) * flags["actor.num_nodes"] * flags["actor.num_gpus_per_node"]
