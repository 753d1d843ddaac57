"""OpenRLHF's native metric names (its TensorBoard train/* logs, 0.11) -> canonical names."""

from __future__ import annotations

from rlbridge.contract.metrics import MEASURED_ASYNC, REWARD_FAULTS
from rlbridge_adapters.openrlhf import stages as stage_metrics

DIRECT = {
    "policy_loss": "loss/policy",
    "kl": "kl",
    "entropy_loss": "entropy",
    "actor_grad_norm": "grad_norm",
    "actor_lr": "lr",
    "response_length": "response_length/mean",
    "timing/step_total": "timing/step_s",
    "timing/generation": "timing/generate_s",
    "timing/ppo_train": "timing/update_s",
    # 0.11 PPOTrainer.train_step: weight sync to vLLM, and make_experience (old-policy, reference and
    # value passes in one timer; rewards come with the samples, inside timing/generation)
    "timing/broadcast": "timing/weight_sync_s",
    "timing/make_experience": "timing/experience_s",
    # measured by rlbridge in the async loop's own methods (asynchrony.py): OpenRLHF tags no policy version
    **MEASURED_ASYNC,
}


def to_canonical(native: dict[str, float], rewards: dict[str, float] | None = None) -> dict[str, float]:
    out = {DIRECT[k]: v for k, v in native.items() if k in DIRECT}
    if rewards:
        out.update(rewards)
    elif "reward" in native:
        out["reward/mean"] = native["reward"]
    step = native.get("timing/step_total")
    samples = native.get("rollout/num_samples")
    length = native.get("total_length")
    if step and samples and length:
        out["throughput/tokens_per_s"] = samples * length / step
    return out


def is_step(native: dict[str, float]) -> bool:
    return "policy_loss" in native or "timing/step_total" in native


def eval_to_canonical(native: dict[str, float]) -> dict[str, float]:
    """OpenRLHF's evaluation logs (log_eval: eval_<datasource>_pass1 = mean reward of the samples of a
    prompt, averaged over prompts; eval_response_length_mean) as canonical eval/... names. rlbridge's
    rows have one data source."""
    out = {}
    passes = [v for k, v in native.items() if k.startswith("eval_") and k.endswith("_pass1")]
    if passes:
        out["eval/reward/mean"] = sum(passes) / len(passes)
    if "eval_response_length_mean" in native:
        out["eval/response_length/mean"] = native["eval_response_length_mean"]
    return out


# The offline stages' maps (train_sft / train_dpo / train_rm TensorBoard scalars), kept beside their launcher
STAGE = stage_metrics.METRICS

# What docs/metrics.md says of a canonical name beyond the native names of the maps above (scripts/doc_tables.py):
# what to_canonical and eval_to_canonical compute, what rlbridge measures, and what OpenRLHF times together
DOC_NOTES = {
    "reward/mean": "rlbridge reward file (falls back to `reward`)",
    "reward/std": "rlbridge reward file",
    "reward/<plugin>/mean": "rlbridge reward file",
    "entropy": "only with an entropy bonus",
    "timing/reward_s": "none: rewards come with the samples, inside `timing/generation`",
    "timing/old_logprob_s": "none: in `timing/make_experience`",
    "timing/ref_s": "none: in `timing/make_experience`",
    "async/staleness_mean": "measured by rlbridge in `generate_samples` / `train_step`: OpenRLHF tags no version",
    "async/staleness_max": "measured by rlbridge in `generate_samples` / `train_step`: OpenRLHF tags no version",
    "async/trainer_idle_s": "the gaps between OpenRLHF's `train_step` calls",
    "async/rollout_idle_s": "the gaps between OpenRLHF's `generate_samples` calls",
    "async/partial_rollouts": "samples generated across a broadcast",
    "throughput/tokens_per_s": "`rollout/num_samples` x `total_length` / `timing/step_total`",
    "memory/peak_mb": "resident memory of the run's whole process tree (sampled by rlbridge)",
    **{name: "counted in the vLLM actors, sent as `reward_faults` events" for name in REWARD_FAULTS},
    "eval/reward/mean": "`eval_<datasource>_pass1` (mean over a prompt's samples, averaged over prompts)",
    "eval/response_length/mean": "`eval_response_length_mean`",
}
