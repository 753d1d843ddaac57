"""AReaL's native statistics (what PPOTrainer commits to its StatsLogger once per step: `ppo_actor/...` from the
actor's update, `timeperf/...` from the trainer's timers, `rollout/...` and `eval-rollout/...` from the rollout
controllers; read in areal 1.0.4's trainer/rl_trainer.py and trainer/ppo/actor.py) -> canonical names."""

from __future__ import annotations

DIRECT = {
    "ppo_actor/update/actor_loss/avg": "loss/policy",
    "ppo_actor/update/grad_norm": "grad_norm",
    "ppo_actor/update/lr": "lr",
    "ppo_actor/update/entropy/avg": "entropy",
    "timeperf/rollout": "timing/generate_s",
    "timeperf/train_step": "timing/update_s",
    "timeperf/update_weights": "timing/weight_sync_s",
    "timeperf/recompute_logp": "timing/old_logprob_s",
    "timeperf/ref_logp": "timing/ref_s",
    # the policy versions between a sample's and the trained weights (AReaL tags every generated token)
    "ppo_actor/update/version_stats/sample_staleness_theta_avg": "async/staleness_mean",
    "ppo_actor/update/version_stats/sample_staleness_theta_max": "async/staleness_max",
}
STEP_TIMERS = "timeperf/"  # every phase of a step, timed by PPOTrainer.train (rollout ... clear_batches)
EVAL_SCOPE = "eval-rollout/"


def to_canonical(
    native: dict[str, float], rewards: dict[str, float] | None = None, kl_ctl: float = 0.0
) -> dict[str, float]:
    """`kl_ctl`: the plan's actor.kl_ctl (AReaL logs the KL only inside the token rewards)."""
    out = {DIRECT[k]: v for k, v in native.items() if k in DIRECT}
    if rewards:
        out.update(rewards)
    elif "ppo_actor/task_reward/avg" in native:
        out["reward/mean"] = native["ppo_actor/task_reward/avg"]
    seq, prompt = native.get("ppo_actor/seq_len/avg"), native.get("ppo_actor/prompt_len/avg")
    if seq is not None and prompt is not None:
        out["response_length/mean"] = seq - prompt
    step = sum(v for k, v in native.items() if k.startswith(STEP_TIMERS))
    if step:
        out["timing/step_s"] = step
        tokens = native.get("ppo_actor/n_tokens")
        if tokens:
            out["throughput/tokens_per_s"] = tokens / step
    if kl_ctl and "ppo_actor/kl_rewards/avg" in native:  # the token rewards hold -kl_ctl x KL
        out["kl"] = -native["ppo_actor/kl_rewards/avg"] / kl_ctl
    return out


def is_step(native: dict[str, float]) -> bool:
    return "ppo_actor/update/actor_loss/avg" in native or any(k.startswith(STEP_TIMERS) for k in native)


def eval_to_canonical(native: dict[str, float]) -> dict[str, float]:
    """The evaluation AReaL ran in this step (its eval-rollout controller's statistics), as eval/... names."""
    out = {}
    if f"{EVAL_SCOPE}reward" in native:
        out["eval/reward/mean"] = native[f"{EVAL_SCOPE}reward"]
    elif f"{EVAL_SCOPE}reward/avg" in native:
        out["eval/reward/mean"] = native[f"{EVAL_SCOPE}reward/avg"]
    return out


# What docs/metrics.md says of a canonical name beyond the native names of DIRECT (scripts/doc_tables.py): what
# to_canonical and eval_to_canonical compute
DOC_NOTES = {
    "reward/mean": "rlbridge's reward statistics of the step (falls back to `ppo_actor/task_reward/avg`)",
    "reward/std": "rlbridge's reward statistics of the step",
    "reward/<plugin>/mean": "rlbridge's reward statistics of the step",
    "kl": "`-ppo_actor/kl_rewards/avg / actor.kl_ctl` (AReaL logs the KL only inside the token rewards)",
    "response_length/mean": "`ppo_actor/seq_len/avg` - `ppo_actor/prompt_len/avg`",
    "timing/step_s": "the sum of the `timeperf/*` timers",
    "throughput/tokens_per_s": "`ppo_actor/n_tokens` / the sum of the `timeperf/*` timers",
    "eval/reward/mean": "`eval-rollout/reward` (or `eval-rollout/reward/avg`)",
}
