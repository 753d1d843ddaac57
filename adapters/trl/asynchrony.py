"""TRL: the asynchronous loop (rollout.max_staleness, partial_rollouts, weight_sync_interval) and split placement.

rollout.max_staleness k >= 1 plans TRL 1.16's `trl.experimental.async_grpo.AsyncGRPOTrainer` with
`AsyncGRPOConfig(max_staleness=k)` (read in the installed wheel): a spawned rollout worker keeps up to
`max_inflight_tasks` generations in flight against a `vllm serve` server, tags each scored sample with the
policy version it was generated from (`RolloutSample.model_version`), and the trainer drops a sample whose
version is more than k behind its own (`RolloutQueueDataset`, `sample/dropped_stale_total`): the bound is
exact, enforced by discarding. The trainer syncs every `weight_sync_steps` optimizer steps and bumps the
version. The off-policy gap is corrected by the trainer itself: its clipped ratio is taken against the
log-probabilities vLLM sampled with (the behaviour policy), so algorithm.rollout_correction has nothing to add.

How far generation runs ahead is bounded by the same k (rollout_bounds): TRL tags a sample with the policy
version of its dispatch and drops it at consumption when it is more than k versions old, so everything
generated or generating but not yet taken by the trainer (generations in flight, finished groups waiting for
or in scoring, scored samples in the trainer's queue) is held to k x the samples of one policy version
(training.batch_size x group_size / updates per step x weight_sync_interval) through AsyncGRPOConfig's
`max_inflight_tasks` and `queue_maxsize` and the score queue of the patched rollout worker
(patches/async_grpo_scoring.py); more would be generated only to be dropped. Rewards are scored in threads of
TRL's rollout process (a daemon process: it cannot start rlbridge's reward worker processes): at most
rollout_workers.max_concurrency (else num_workers) calls of a reward at once, over every group, each of at
most rollout_workers.batch_size samples, with as many groups scored at once as keep those calls busy
(rollout_bounds).

rlbridge starts that server on the rollout's devices (placement.policy: split, rollout_gpus; with colocate, on
the training device, sharing a GPU's memory by rollout.gpu_memory_utilization) and stops it with the run
(vllm_server.py), and syncs weights through its own seam instead of TRL's NCCL client, so the
loop runs on CPU too. partial_rollouts is the server's pause mode at a sync: "keep" (in-flight requests
continue with the new weights, TRL's own choice) or "wait" (the sync waits until they finish).
max_staleness 0 keeps today's synchronous GRPOTrainer plan, unchanged. Called by `TRLBackend`.
"""

from __future__ import annotations

import json
from typing import Any

from rlbridge.contract.backend import Capability, gpus_per_node, honoured
from rlbridge.contract.config import RunConfig
from rlbridge.errors import ConfigError
from rlbridge_adapters.trl.patches.async_grpo_scoring import SCORING_ENV

ASYNC_TRAINER = "AsyncGRPOTrainer"
VERIFIED = ("1.16",)  # AsyncGRPOConfig's names were read in 1.16.0; TRL renamed config fields in 1.18

# GRPOConfig fields of the synchronous plan that AsyncGRPOConfig lacks: the value under which dropping the field
# changes nothing (AsyncGRPOTrainer's fixed behaviour), and the knob that set it. None: dropped, handled elsewhere.
GRPO_ONLY: dict[str, tuple[Any, str]] = {
    "beta": (0.0, "algorithm.kl_coef: AsyncGRPOTrainer has no reference model (no KL term); use kl_coef 0"),
    "num_iterations": (1, "algorithm.epochs_per_rollout: AsyncGRPOTrainer trains each sample once; use 1"),
    "loss_type": ("dapo", "algorithm.loss_aggregation: AsyncGRPOTrainer's loss is the token mean (token_mean)"),
    "scale_rewards": (
        "group",
        "algorithm.advantage_normalization: AsyncGRPOTrainer normalises within each group "
        "((r - mean) / std); use group",
    ),
    "entropy_coef": (0.0, "algorithm.entropy_coef: AsyncGRPOTrainer has no entropy bonus; use 0"),
    # set (False) whenever rollout.engine is vllm; a correction on is refused with rollout_correction
    "vllm_importance_sampling_correction": (
        False,
        "algorithm.rollout_correction: AsyncGRPOTrainer's ratio is against "
        "vLLM's sampling log-probabilities already; use rollout_correction: none",
    ),
    "generation_batch_size": (None, ""),  # a step is per_device_train_batch_size x gradient_accumulation_steps samples
    "reward_weights": (None, ""),  # applied by rlbridge's reward functions (AsyncGRPOTrainer sums with weight 1)
    "shuffle_dataset": (None, ""),  # rlbridge shuffles the rows (launch.shuffle)
    "use_vllm": (None, ""),
    "vllm_mode": (None, ""),
    "vllm_gpu_memory_utilization": (None, ""),  # the server's --gpu-memory-utilization
    "vllm_tensor_parallel_size": (None, ""),
    "vllm_enable_sleep_mode": (None, ""),
}


def wants_async(config: RunConfig) -> bool:
    return config.rollout.max_staleness >= 1


def rollout_layout(config: RunConfig) -> dict[str, Any]:
    """Training and server device counts (as plugins/placement.py gives them): split, the server on rollout_gpus
    devices of its own; colocate, the server on the training device (sharing its memory on a GPU)."""
    gpus = gpus_per_node(config)
    if config.placement.policy != "split":
        return {"actor": max(gpus, 1), "rollout": max(gpus, 1), "shared": True}
    rollout = int(config.placement.args.get("rollout_gpus") or 0)
    return {"actor": gpus - rollout if gpus else 1, "rollout": rollout, "shared": False}


def _check_staleness(config: RunConfig) -> str | None:
    if not wants_async(config):
        return None
    from rlbridge_adapters.trl.backend import TRLBackend

    version = str(TRLBackend.target_version(config))
    if not any(version == v or version.startswith(v + ".") for v in VERIFIED):
        return (
            f"rlbridge drives TRL's AsyncGRPOTrainer as read in TRL {', '.join(VERIFIED)} (TRL renamed its config "
            f"fields in 1.18); TRL {version} is not verified: use engine_version 1.16.0"
        )
    if config.placement.policy not in ("split", "colocate"):
        return f"TRL's AsyncGRPOTrainer runs with placement.policy split or colocate (got {config.placement.policy})"
    if rollout_layout(config)["actor"] != 1:
        return (
            "rlbridge runs AsyncGRPOTrainer in one training process beside the vLLM server it starts (synchronous "
            "GRPOTrainer runs across devices); give training one device: resources.gpus_per_node = rollout_gpus + 1 "
            "(or 0 on CPU)"
        )
    if config.rollout.engine == "hf":
        return "AsyncGRPOTrainer generates with vLLM only; set rollout.engine: vllm (or auto)"
    if config.algorithm.name != "grpo":
        return f"AsyncGRPOTrainer is GRPO only (algorithm.name {config.algorithm.name}); use algorithm.name: grpo"
    if config.environment is not None:
        return "rlbridge drives environments through GRPOTrainer's rollout_func, which AsyncGRPOTrainer has not; remove environment"
    if config.model.lora is not None:
        return (
            "AsyncGRPOTrainer syncs a LoRA adapter by file to a server started with --enable-lora, which rlbridge "
            "does not start; remove model.lora"
        )
    if config.data.eval is not None:
        return "AsyncGRPOTrainer has no evaluation loop; remove data.eval"
    if config.algorithm.rollout_correction != "none":
        return (
            "AsyncGRPOTrainer's clipped ratio is taken against vLLM's own sampling log-probabilities, which already "
            "corrects the off-policy gap; it has no separate importance-sampling correction: use rollout_correction: none"
        )
    if config.training.steps is None:
        return "AsyncGRPOTrainer streams samples without epochs here; set training.steps"
    if config.checkpoint.resume:
        return (
            "resuming AsyncGRPOTrainer (its rollout_state.json) is not verified by rlbridge; remove checkpoint.resume"
        )
    if config.training.deterministic:
        return "AsyncGRPOTrainer's rollout order depends on the timing of its concurrent requests; remove training.deterministic"
    if any(spec.model for spec in config.reward):
        return "reward models are scored in TRL's GRPOTrainer path only; use a reward plugin"
    for key, (neutral, why) in GRPO_ONLY.items():
        if why and _sync_value(config, key) not in (neutral, None):
            return why
    return None


def _sync_value(config: RunConfig, key: str) -> Any:
    algo = config.algorithm
    return {
        "beta": algo.kl_coef,
        "num_iterations": algo.epochs_per_rollout,
        "entropy_coef": algo.entropy_coef,
        "loss_type": {"token_mean": "dapo"}.get(algo.loss_aggregation, algo.loss_aggregation),
        "scale_rewards": algo.effective_advantage_normalization,
    }.get(key)


def _check_partial(config: RunConfig) -> str | None:
    return None  # both values are honoured (the server's pause mode); the config model checks max_staleness >= 1


def capabilities() -> list[Capability]:
    return [
        honoured(
            "rollout.partial_rollouts",
            "launch.pause_mode",
            _check_partial,
            note="the vLLM server's pause mode at a weight sync: keep (in-flight requests continue with the new "
            "weights) or wait (the sync waits until they finish)",
        ),
        honoured("rollout.weight_sync_interval", "weight_sync_steps"),
        honoured(
            "rollout.max_staleness",
            ("launch.trainer", "max_staleness", "max_inflight_tasks", "queue_maxsize"),
            _check_staleness,
            note="k >= 1: AsyncGRPOTrainer(max_staleness=k) against a vLLM server rlbridge starts on the rollout "
            "devices (split) or the training device (colocate); samples more than k policy versions old are "
            "dropped, and generation runs at most k policy versions' samples ahead of the trainer "
            "(max_inflight_tasks + queue_maxsize + the rollout worker's score queue: rollout_bounds). The PPO ratio "
            "is against vLLM's sampling log-probs, so algorithm.clip_low/clip_high bound a step's move from the "
            "policy that sampled: at a learning rate that moves the policy past the clip, learning slows (measured "
            "on the quickstart: about half; docs/benchmarks.md), so widen clip_high or lower the lr",
        ),
    ]


def check_placement(config: RunConfig) -> str | None:
    """placement.policy on TRL: colocate (one process, or a colocated vLLM), or split for the asynchronous trainer."""
    if config.placement.policy == "colocate":
        return None
    if config.placement.policy == "split" and wants_async(config):
        return None  # checked with rollout.max_staleness
    if config.placement.policy == "split":
        # TRL's own split is GRPOTrainer's vllm_mode="server", whose weight sync (VLLMClient.init_communicator) is
        # vLLM's NCCL transfer engine: it raises off CUDA, and rlbridge's server is built for the async trainer
        return (
            "TRL's split placement is its asynchronous trainer against a vLLM server rlbridge starts: set "
            "rollout.max_staleness >= 1 (AsyncGRPOTrainer); GRPOTrainer's own vllm_mode: server syncs weights over "
            "NCCL (CUDA only). Or use placement.policy: colocate"
        )
    return f"TRL places its roles with colocate or split only (got {config.placement.policy})"


def translate(config: RunConfig, sync_native: dict[str, Any]) -> dict[str, Any]:
    """The AsyncGRPOTrainer plan from the synchronous GRPOTrainer plan of the same config."""
    args = dict(sync_native["args"])
    for key, (neutral, why) in GRPO_ONLY.items():
        value = args.pop(key, None)
        if why and value not in (neutral, None):
            raise ConfigError(f"rollout.max_staleness: {why}")  # the capability check says it first
    leftover = sorted(k for k in args if k.startswith("vllm_") or k in _OTHER_GRPO_ONLY)
    if leftover:
        raise ConfigError(
            f"rollout.max_staleness: AsyncGRPOConfig has no {', '.join(leftover)}, which this plan sets; "
            "remove the knob or backend_options that set it (rlbridge plan --explain names it)"
        )
    ro = config.rollout
    workers = config.rollout_workers
    concurrency = workers.max_concurrency or workers.num_workers
    samples_per_version = (
        int(args["per_device_train_batch_size"]) * int(args["gradient_accumulation_steps"]) * ro.weight_sync_interval
    )  # one optimizer step's samples (one process), times the steps between syncs
    bounds = rollout_bounds(
        ro.max_staleness, samples_per_version, config.algorithm.group_size, concurrency, workers.batch_size
    )
    args.update(
        max_staleness=ro.max_staleness,
        max_inflight_tasks=bounds["max_inflight_tasks"],
        queue_maxsize=bounds["queue_maxsize"],
        weight_sync_steps=ro.weight_sync_interval,
        # batches of training.micro_batch_size samples (FixedCountBatcher), not of the server's max_model_len tokens
        token_budget=0,
        vllm_server_base_url="http://127.0.0.1:0",  # the server's address, set when rlbridge has started it
        vllm_server_timeout=600.0,
        dtype=sync_native["model"]["dtype"],
        log_completions=False,
    )
    max_model_len = ro.max_prompt_tokens + ro.max_new_tokens if ro.max_prompt_tokens else None
    return {
        **sync_native,
        "trainer": ASYNC_TRAINER,
        "config_class": "AsyncGRPOConfig",
        "config_module": "trl.experimental.async_grpo",
        "args": args,
        "pause_mode": "keep" if ro.partial_rollouts else "wait",
        "shuffle": config.data.shuffle,
        "placement": rollout_layout(config),
        "server": {
            "max_model_len": max_model_len,
            # every request the rollout worker may hold in flight
            "max_num_seqs": min(max(bounds["max_inflight_tasks"], 16), 1024),
            "gpu_memory_utilization": ro.gpu_memory_utilization,
            "start_timeout_s": 600.0,
        },
        # each reward's calls in TRL's rollout process (async_run.SpawnedReward)
        "scoring": {
            "concurrency": concurrency,
            "batch_size": workers.batch_size,
            "workers": {"on_error": workers.on_error, "error_threshold": workers.error_threshold},
        },
        "env": {
            **sync_native["env"],
            "TRL_EXPERIMENTAL_SILENCE": "1",
            SCORING_ENV: json.dumps(
                {
                    "score_groups": bounds["score_groups"],
                    "score_queue_groups": bounds["score_queue_groups"],
                    "threads": bounds["score_groups"] * max(len(config.reward), 1),
                }
            ),
        },
    }


def rollout_bounds(
    max_staleness: int, samples_per_version: int, group_size: int, concurrency: int, batch_size: int
) -> dict[str, int]:
    """How much of TRL's rollout pipeline may run ahead of the trainer: max_staleness x samples_per_version samples
    in all, in whole groups (TRL queues and scores a group once all its samples are generated). First the groups
    scored at once: a group is ceil(group_size / batch_size) calls and is done when its slowest call is, so enough
    groups for the reward's `concurrency` calls plus one group's calls less one keep every call busy while a
    group's last call finishes (one call a group: `concurrency` groups). Then one group waiting for scoring, and
    half the rest as scored samples waiting for the trainer (`queue_maxsize`) and half as generations in flight
    (`max_inflight_tasks`). Each part holds at least one group, so a bound of fewer than four groups is exceeded
    (TRL then drops what arrives too old: the staleness bound itself always holds). More groups in scoring than
    the calls need would only take slots from generation."""
    groups = max(max_staleness * samples_per_version // group_size, 1)
    calls_per_group = -(-group_size // max(batch_size, 1))
    score_groups = max(1, min(-(-(concurrency + calls_per_group - 1) // calls_per_group), groups - 2))
    rest = groups - score_groups - 1
    queued = max(1, rest // 2)
    inflight = max(1, rest - queued)
    return {
        "max_inflight_tasks": inflight * group_size,
        "queue_maxsize": queued * group_size,
        "score_groups": score_groups,
        "score_queue_groups": 1,
    }


# GRPOConfig-only fields the synchronous plan may set through other knobs (adapters/trl/knobs.py)
_OTHER_GRPO_ONLY = {
    "mask_truncated_completions",
    "generation_kwargs",
    "importance_sampling_level",
    "top_entropy_quantile",
    "cast_lm_head_to_fp32",
    "disable_dropout",
    "pad_to_multiple_of",
    "multi_objective_aggregation",
    "num_generations_eval",
    "steps_per_generation",
    "sync_ref_model",
    "ref_model_sync_steps",
    "ref_model_mixup_alpha",
    "delta",
    "epsilon_high_delta",
    "off_policy_mask_threshold",
}
