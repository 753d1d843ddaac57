"""OpenRLHF's native metric names (its TensorBoard train/* logs, 0.11) -> canonical names."""

from __future__ import annotations

from rlbridge.contract.metrics import MEASURED_ASYNC
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
