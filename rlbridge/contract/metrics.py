"""Canonical metric names: the same for every engine. docs/metrics.md maps each engine's native names."""

from __future__ import annotations

import math
import re
from typing import Any

# The offline stages (algorithm.name sft, dpo, reward_model; docs/stages.md), also as eval/<name> on data.eval
STAGE: dict[str, str] = {
    "loss/sft": "sft: mean negative log-likelihood per trained token (the completion's only, with "
    "offline.completion_only_loss).",
    "sft/token_accuracy": "sft: fraction of trained tokens whose argmax prediction is the data's token.",
    "loss/dpo": "dpo: the preference loss (offline.dpo_loss) of the step.",
    "dpo/reward_chosen": "dpo: mean implicit reward beta x (log pi - log pi_ref) of the chosen completions.",
    "dpo/reward_rejected": "dpo: mean implicit reward of the rejected completions.",
    "dpo/margin": "dpo: mean of reward_chosen - reward_rejected over the pairs.",
    "dpo/accuracy": "dpo: fraction of pairs whose chosen implicit reward is strictly above the rejected one (0 "
    "while the policy equals the reference: every pair ties).",
    "loss/reward_model": "reward_model: the Bradley-Terry loss -log sigmoid(r_chosen - r_rejected) of the step.",
    "rm/accuracy": "reward_model: fraction of pairs the model scores chosen above rejected.",
    "rm/margin": "reward_model: mean of r_chosen - r_rejected over the pairs.",
}

CANONICAL: dict[str, str] = {
    "reward/mean": "Mean total (weighted) reward of the step's samples.",
    "reward/std": "Standard deviation of the total reward over the step's samples.",
    "reward/<plugin>/mean": "Mean of one reward plugin's score (unweighted).",
    "reward/<plugin>/<metric>": "An extra metric a native reward function reported (verl compute_score dict keys, "
    "OpenRLHF extra_logs, TRL log_metric), mean over the step's samples.",
    "loss/policy": "Policy loss of the step (averaged over its updates).",
    "kl": "KL divergence between the policy and the reference model (only with a reference).",
    "entropy": "Mean per-token entropy of the policy on the generated tokens.",
    "grad_norm": "Global gradient norm before clipping.",
    "response_length/mean": "Mean number of generated tokens per sample.",
    "timing/step_s": "Wall time of the whole training step, seconds.",
    "timing/generate_s": "Wall time spent generating rollouts, seconds.",
    "timing/update_s": "Wall time of the policy update(s): forward, backward, optimizer, seconds.",
    "timing/reward_s": "Wall time spent computing rewards, seconds.",
    "timing/old_logprob_s": "Wall time of the old-policy log-prob pass (absent when the engine skips it), seconds.",
    "timing/ref_s": "Wall time of the reference-model log-prob pass (absent without a reference), seconds.",
    "timing/weight_sync_s": "Wall time of moving the updated weights to the rollout engine (absent when it shares "
    "them), seconds.",
    "weight_sync/bytes": "Bytes of weights sent to the rollout engine in this step's syncs (absent when it shares "
    "them).",
    "weight_sync/tensors": "Tensors sent to the rollout engine in this step's syncs.",
    # the asynchronous loop (rollout.max_staleness >= 1; the synchronous loop reports staleness 0 where measured)
    "async/staleness_mean": "Mean staleness of the samples trained this step: policy versions between the weights "
    "that generated a sample (where its generation started) and the weights it trains.",
    "async/staleness_max": "Largest staleness of the samples trained this step, in policy versions (never above "
    "rollout.max_staleness).",
    "async/trainer_idle_s": "Wall time the trainer waited for samples before this step's update, seconds.",
    "async/rollout_idle_s": "Wall time the rollout engine waited (for queue space, or a weight sync) before "
    "generating this step's samples, seconds.",
    "async/partial_rollouts": "Samples trained this step whose generation spanned a weight sync "
    "(rollout.partial_rollouts), count.",
    "timing/experience_s": "Wall time of the old-policy, reference and value passes where an engine times them as "
    "one phase (OpenRLHF's make_experience), seconds.",
    "throughput/tokens_per_s": "Prompt and generated tokens processed per second of step time.",
    "memory/peak_mb": "Peak memory of the training process so far: accelerator memory on GPU, resident memory on "
    "CPU (MiB).",
    "lr": "Learning rate at the end of the step.",
    # reward faults, counted per step by the worker pool (rlbridge.engine.workers), 0 when none
    "reward/errors": "Samples whose score a reward plugin could not give because it raised, this step.",
    "reward/timeouts": "Samples whose reward call ran past rollout_workers.timeout_s (the worker was killed and "
    "replaced), this step.",
    "reward/crashes": "Samples whose reward worker process died (os._exit, a signal, a segfault), this step.",
    "reward/nonfinite": "Reward scores that were NaN or inf, this step.",
    "reward/invalid": "Reward scores that were not numbers, came in the wrong number, or were None for every plugin "
    "of a sample, this step.",
    "reward/skipped": "Samples left without any score under rollout_workers.on_error: skip (their total is 0), this "
    "step.",
    **STAGE,
}

# The asynchronous loop's metrics that rlbridge measures itself, in the engine's own methods, where the engine
# tags no policy version (OpenRLHF) or rlbridge reads its tags (verl): the keys an adapter's asynchrony.py adds to
# the engine's step metrics, and the canonical name each one maps to (the adapter's metrics.py).
STALENESS_MEAN, STALENESS_MAX = "rlbridge/staleness_mean", "rlbridge/staleness_max"
TRAINER_IDLE, ROLLOUT_IDLE, PARTIAL = "rlbridge/trainer_idle", "rlbridge/rollout_idle", "rlbridge/partial_rollouts"
MEASURED_ASYNC: dict[str, str] = {
    STALENESS_MEAN: "async/staleness_mean",
    STALENESS_MAX: "async/staleness_max",
    TRAINER_IDLE: "async/trainer_idle_s",
    ROLLOUT_IDLE: "async/rollout_idle_s",
    PARTIAL: "async/partial_rollouts",
}

# The reward-fault counters above (rlbridge.engine.workers), for the adapters' DOC_NOTES (scripts/doc_tables.py)
REWARD_FAULTS = (
    "reward/errors",
    "reward/timeouts",
    "reward/crashes",
    "reward/nonfinite",
    "reward/invalid",
    "reward/skipped",
)

_PLUGIN_RE = re.compile(r"^reward/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


def is_canonical(name: str) -> bool:
    return name in CANONICAL or bool(_PLUGIN_RE.match(name))


# Evaluation on data.eval (every data.eval_interval steps): eval_metrics.jsonl, one row per evaluation.
EVAL: dict[str, str] = {
    "eval/reward/mean": "Mean total (weighted) reward on the evaluation prompts.",
    "eval/reward/<plugin>/mean": "Mean of one reward plugin's score on the evaluation prompts.",
    "eval/response_length/mean": "Mean generated tokens per evaluation sample.",
}
_EVAL_PLUGIN_RE = re.compile(r"^eval/reward/[A-Za-z0-9_.-]+/mean$")
EVAL.update({f"eval/{name}": f"On the evaluation rows: {doc}" for name, doc in STAGE.items()})


def eval_metrics(metrics: dict) -> dict[str, float]:
    """The canonical evaluation metrics (eval/...) of a dict, as finite floats."""
    return {k: v for k, v in numbers(metrics).items() if (k in EVAL or _EVAL_PLUGIN_RE.match(k)) and math.isfinite(v)}


def numbers(data: dict) -> dict[str, float]:
    """The numeric values of a metrics dict (tensors and numpy scalars included), as floats.
    Non-finite values (NaN, +-inf) are kept: they are what a run must surface, not hide."""
    out = {}
    for key, value in data.items():
        if isinstance(value, str):
            continue
        try:
            out[key] = float(value)
        except (TypeError, ValueError):
            continue
    return out


def clean(metrics: dict[str, Any]) -> dict[str, float]:
    """Keep canonical names with numeric values, as floats (non-finite ones included)."""
    return {name: value for name, value in numbers(metrics).items() if is_canonical(name)}


def nonfinite(metrics: dict[str, float]) -> list[str]:
    """The names whose values are NaN or infinite, sorted."""
    return sorted(name for name, value in metrics.items() if not math.isfinite(value))


def finite(metrics: dict[str, float]) -> dict[str, float]:
    return {name: value for name, value in metrics.items() if math.isfinite(value)}
