"""verl's native metric names -> rlbridge's canonical names (see docs/metrics.md)."""

from __future__ import annotations

import re

from rlbridge.contract.metrics import MEASURED_ASYNC, REWARD_FAULTS

DIRECT = {
    "actor/pg_loss": "loss/policy",
    "actor/kl_loss": "kl",
    "actor/entropy": "entropy",
    "actor/grad_norm": "grad_norm",
    "actor/lr": "lr",
    "response_length/mean": "response_length/mean",
    "timing_s/step": "timing/step_s",
    "timing_s/gen": "timing/generate_s",
    "timing_s/update_actor": "timing/update_s",
    # verl's marked_timer names (ray_trainer.py, 0.5 to 0.9.1); a phase verl skips has no timer
    "timing_s/reward": "timing/reward_s",
    "timing_s/old_log_prob": "timing/old_logprob_s",
    "timing_s/ref": "timing/ref_s",
    "timing_s/update_weights": "timing/weight_sync_s",  # 0.9: checkpoint_manager.update_weights
    # the fully-async trainer times its sync as "timing_s/param_sync", which compute_timing_metrics prefixes again
    "timing_s/timing_s/param_sync": "timing/weight_sync_s",
    "perf/throughput": "throughput/tokens_per_s",
    # the asynchronous trainers: measured by rlbridge's driver hooks from verl's own version tags (asynchrony.py)
    **MEASURED_ASYNC,
}


def to_canonical(native: dict[str, float], rewards: dict[str, float] | None = None) -> dict[str, float]:
    """Map one step of verl metrics; `rewards` are the rlbridge reward manager's stats for the step."""
    out = {DIRECT[k]: v for k, v in native.items() if k in DIRECT}
    if "kl" not in out and "actor/reward_kl_penalty" in native:  # KL in the reward
        out["kl"] = native["actor/reward_kl_penalty"]
    # peak memory of the actor worker (0.9 prefixes it with actor/); on CPU rlbridge's device
    # module reports the process's resident memory
    for key in ("perf/max_memory_allocated_gb", "actor/perf/max_memory_allocated_gb"):
        if native.get(key, 0) > 0:
            out["memory/peak_mb"] = max(out.get("memory/peak_mb", 0.0), native[key] * 1024)
    if rewards:
        out.update(rewards)
    if "critic/score/mean" in native and (not rewards or "rlbridge/staleness_max" in native):
        # the asynchronous trainers score the next batch while this one trains: rlbridge's reward manager
        # stats (rewards) describe what was scored during the step, verl's score the batch it trained
        out["reward/mean"] = native["critic/score/mean"]
    return out


_VAL = re.compile(r"^val-(core|aux)/(?P<source>[^/]+)/(?P<var>[^/]+)/mean@(?P<n>\d+)$")


def eval_to_canonical(native: dict[str, float]) -> dict[str, float]:
    """verl's validation metrics (val-core/<data_source>/reward/mean@N: the mean reward of N samples per
    prompt; logged with the step's metrics every trainer.test_freq steps) as canonical eval/... names."""
    out = {}
    best_n = -1
    for key, value in native.items():
        match = _VAL.match(key)
        if match and match["var"] == "reward" and int(match["n"]) > best_n:
            best_n, out["eval/reward/mean"] = int(match["n"]), value
    return out


# The SFT stage's map (verl.trainer.sft_trainer's tracker rows, adapters/verl/stages.py), for the metric table
def _sft_map() -> dict[str, str]:
    from rlbridge_adapters.verl.stages import EVAL_METRICS, METRICS

    return {**{k: v for k, v in METRICS.items() if v.startswith("loss/")}, **EVAL_METRICS}


STAGE = {"sft": _sft_map()}

# What docs/metrics.md says of a canonical name beyond the native names of the maps above (scripts/doc_tables.py):
# what to_canonical and eval_to_canonical compute, what rlbridge measures, and on which verl versions
DOC_NOTES = {
    "reward/mean": "rlbridge reward manager (falls back to `critic/score/mean`)",
    "reward/std": "rlbridge reward manager",
    "reward/<plugin>/mean": "rlbridge reward manager",
    "kl": "KL in the loss; `actor/reward_kl_penalty` with the KL in the reward",
    "timing/weight_sync_s": "0.9: checkpoint_manager.update_weights; the fully-async trainer's `param_sync`",
    "async/staleness_mean": "from verl's own per-sample `min_global_steps` with one_step_off_policy, max_staleness 1: "
    "the actor updates made by the time the batch trains minus those the synced weights held",
    "async/staleness_max": "from verl's own per-sample `min_global_steps`, as async/staleness_mean",
    "async/trainer_idle_s": "verl's `timing_s/gen`: the trainer awaiting the batch",
    "async/rollout_idle_s": "from the end of a batch's generation to the next sync",
    "async/partial_rollouts": "samples whose `min_global_steps` and `max_global_steps` differ; 0: one_step_off "
    "finishes every generation before a sync",
    "memory/peak_mb": "`perf/max_memory_allocated_gb` (0.5), `actor/perf/max_memory_allocated_gb` (0.9); on CPU "
    "the resident memory of the actor worker",
    **{name: "counted in the reward-loop workers, sent as `reward_faults` events" for name in REWARD_FAULTS},
    "eval/reward/mean": "`val-core/<data_source>/reward/mean@N` (the largest N)",
}
