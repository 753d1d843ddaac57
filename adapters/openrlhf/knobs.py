"""OpenRLHF: the everyday knobs (KL estimator, entropy bonus, discounting, dynamic sampling, rollout
correction, chat-template arguments, over-long prompts, gradient checkpointing, dynamic batching,
packing, sequence parallelism), LoRA, the critic of PPO and the device counts of every role.

Flags are written in 0.10.2+'s dotted names (backend.FLAT renames them for older releases); each was
read in `openrlhf/cli/train_ppo_ray.py` of the 0.11.2 wheel. Called by `OpenRLHFBackend`.
"""

from __future__ import annotations

from typing import Any

from packaging.version import Version

from rlbridge.contract.backend import Capability, approximated, critic_knob, gpus_per_node, honoured, only_for
from rlbridge.contract.config import RunConfig
from rlbridge.contract.models import resolve_path

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


def kl_estimator(config: RunConfig) -> str:
    algo = config.algorithm
    return algo.kl_estimator or ("k3" if algo.kl_placement == "loss" else "k1")


def _cpu_flash_attention(feature: str):
    def check(config: RunConfig) -> str | None:
        if gpus_per_node(config) == 0:
            return (f"OpenRLHF's {feature} packs samples with flash attention (it forces --ds.attn_implementation "
                    "flash_attention_2), which does not run on CPU; run on GPUs or leave it unset")
        return None

    return check


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
        return (f"rlbridge maps rollout_correction to OpenRLHF 0.11.2's --algo.advantage.is_correction_level/_mode; "
                f"{version} names it differently (use engine_version 0.11.2 or backend_options.openrlhf)")
    if mode not in IS_CORRECTION:
        return ("OpenRLHF's sequence-level correction is a rejection filter (mask only); use sequence_mask, "
                "token_truncate or token_mask")
    return None


def _check_kl_estimator(config: RunConfig) -> str | None:
    if config.algorithm.kl_estimator and config.algorithm.kl_coef == 0:
        return "algorithm.kl_estimator has no effect with kl_coef 0 (no reference model); set kl_coef or remove it"
    return None


def _check_critic_micro(config: RunConfig) -> str | None:
    critic = config.critic.micro_batch_size
    actor = config.training.micro_batch_size
    if critic is not None and critic != actor:
        return ("OpenRLHF uses one --train.micro_batch_size for the actor and the critic; set critic.micro_batch_size "
                "equal to training.micro_batch_size or leave it unset")
    return None


def _check_roles(config: RunConfig) -> str | None:
    if config.algorithm.name == "ppo" and config.placement.policy != "colocate" and gpus_per_node(config) > 0:
        return ("with placement split OpenRLHF would give the critic GPUs of its own beyond the layout; "
                "use placement.policy: colocate for ppo")
    return None


def capabilities() -> list[Capability]:
    return [
        honoured("algorithm.kl_estimator", "algo.kl.estimator", _check_kl_estimator),
        honoured("algorithm.entropy_coef", "actor.entropy_coef"),
        honoured("algorithm.gamma", "algo.advantage.gamma", only_for("algorithm.gamma", ("ppo", "reinforce_pp"), "discounted returns")),
        honoured("algorithm.gae_lambda", "algo.advantage.lambd", only_for("algorithm.gae_lambda", ("ppo",), "GAE")),
        approximated("algorithm.dynamic_sampling", ("algo.dynamic_filtering_enable", "algo.dynamic_filtering_range"),
                     "OpenRLHF keeps a group when its mean reward lies strictly inside (0, 1): exactly 'not all the same' "
                     "for 0/1 rewards; other reward scales are filtered by that range. It draws replacement prompts from "
                     "the prompt file, so a run may end before training.steps when the file runs out",
                     when=lambda c: c.algorithm.dynamic_sampling),
        honoured("algorithm.rollout_correction", ("algo.advantage.is_correction_level", "algo.advantage.is_correction_mode"),
                 _check_rollout_correction, note="0.11.2: token_truncate -> token/clip, token_mask -> token/mask, sequence_mask -> seq/mask"),
        honoured("algorithm.rollout_correction_threshold", "algo.advantage.is_correction_threshold",
                 note="one value: an upper bound only"),
        approximated("model.chat_template_kwargs", ("launch.data.chat_template_kwargs", "data.input_template"),
                     "OpenRLHF applies the chat template without extra arguments, so rlbridge renders each prompt with "
                     "the template and these arguments when it writes the prompt file (--data.input_template {})",
                     when=lambda c: bool(c.model.chat_template_kwargs)),
        honoured("model.lora", ("ds.lora.rank", "ds.lora.alpha", "ds.lora.target_modules", "ds.lora.dropout")),
        honoured("rollout.drop_overlong_prompts", "launch.data.drop_over", note="rlbridge drops them from the prompt file"),
        honoured("training.gradient_checkpointing", "actor.gradient_checkpointing_enable", note="actor and critic"),
        honoured("training.forward_micro_batch_size", "rollout.micro_batch_size",
                 note="experience making: the actor's, reference's, critic's and reward model's forward passes"),
        honoured("training.max_tokens_per_device",
                 ("train.dynamic_batch_enable", "train.max_tokens_per_gpu", "rollout.max_tokens_per_gpu"), _check_dynamic_batch),
        honoured("training.sequence_packing", "ds.packing_samples", _check_packing),
        honoured("training.sequence_parallel_size", "ds.ring_attn_size", _check_sequence_parallel),
        honoured("critic.path", "critic.model_name_or_path", critic_knob("critic.path", _check_roles)),
        honoured("critic.lr", "critic.adam.lr", critic_knob("critic.lr")),
        honoured("critic.value_clip", "critic.value_clip", critic_knob("critic.value_clip")),
        honoured("critic.warmup_steps", "critic.freezing_steps", critic_knob("critic.warmup_steps"), note="the actor is frozen for the first N steps"),
        honoured("critic.micro_batch_size", "train.micro_batch_size", critic_knob("critic.micro_batch_size", _check_critic_micro), note="shared with the actor"),
    ]


def translate(config: RunConfig, flags: dict[str, Any], version: Version) -> int:
    """Add this module's flags to `flags` (in place). Returns the logical GPUs the extra roles need
    on CPU (where every Ray actor of OpenRLHF asks for one GPU of the private cluster)."""
    algo, tr = config.algorithm, config.training
    if algo.kl_coef > 0:
        flags["algo.kl.estimator"] = kl_estimator(config)
    if algo.entropy_coef > 0:
        flags["actor.entropy_coef"] = algo.entropy_coef
    flags["algo.advantage.gamma"] = algo.gamma  # said for every estimator, as verl's plan does (1.0 outside ppo/reinforce_pp)
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
        flags["algo.advantage.is_correction_threshold"] = algo.rollout_correction_threshold  # one value: upper bound only
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
    GPUs per node). On GPUs every role takes the actor's layout: colocated, they share its placement
    group (OpenRLHF asserts ref == actor when colocating with KL); split, the reference shares the
    actor's GPUs (--train.colocate_actor_ref). On CPU each role is one process on one logical GPU."""
    gpus = gpus_per_node(config)
    roles = []
    if config.algorithm.kl_coef > 0:
        roles.append("ref")
    if config.algorithm.name == "ppo":
        roles.append("critic")
    if flags.get("reward.model_name_or_path"):
        roles.append("reward")
    for role in roles:
        flags[f"{role}.num_nodes"] = config.resources.nodes if gpus else 1
        flags[f"{role}.num_gpus_per_node"] = flags["actor.num_gpus_per_node"] if gpus else 1
    if gpus and "ref" in roles and config.placement.policy != "colocate":
        flags["train.colocate_actor_ref"] = True
    return 0 if gpus else len(roles)
