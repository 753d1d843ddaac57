"""TRL's native metric names -> rlbridge's canonical names (see docs/metrics.md)."""

from __future__ import annotations

import re

from rlbridge.contract.metrics import REWARD_FAULTS

DIRECT = {
    "reward": "reward/mean",
    "reward_std": "reward/std",
    "loss": "loss/policy",
    "kl": "kl",
    "entropy": "entropy",
    "grad_norm": "grad_norm",
    "completions/mean_length": "response_length/mean",
    "learning_rate": "lr",
}
_PER_REWARD = re.compile(r"^rewards/(?P<name>.+)/mean$")
_REWARD_EXTRA = re.compile(r"^rewards/(?P<name>[^/]+)/(?P<key>[^/]+)$")
"""A native reward's extra metrics (verl compute_score dict keys, OpenRLHF extra_logs, TRL log_metric),
logged by the TRL shim as rewards/<reward>/<key>; TRL's own std is not one."""


def to_canonical(logs: dict[str, float]) -> dict[str, float]:
    out = {}
    for key, value in logs.items():
        if key in DIRECT:
            out[DIRECT[key]] = value
            continue
        match = _PER_REWARD.match(key)
        if match:
            out[f"reward/{match['name']}/mean"] = value
            continue
        extra = _REWARD_EXTRA.match(key)
        if extra and extra["key"] != "std":
            out[f"reward/{extra['name']}/{extra['key']}"] = value
    return out


# The offline stages' own names (SFTTrainer, DPOTrainer, RewardTrainer logs of trl 1.16) -> canonical
STAGE = {
    "sft": {"loss": "loss/sft", "mean_token_accuracy": "sft/token_accuracy"},
    "dpo": {
        "loss": "loss/dpo",
        "rewards/chosen": "dpo/reward_chosen",
        "rewards/rejected": "dpo/reward_rejected",
        "rewards/margins": "dpo/margin",
        "rewards/accuracies": "dpo/accuracy",
    },
    "reward_model": {"loss": "loss/reward_model", "accuracy": "rm/accuracy", "margin": "rm/margin"},
}
_STAGE_COMMON = {"grad_norm": "grad_norm", "learning_rate": "lr", "entropy": "entropy"}


def stage_to_canonical(stage: str):
    """The native -> canonical mapping of one offline stage, as a function like to_canonical."""
    names = {**_STAGE_COMMON, **STAGE[stage]}

    def convert(logs: dict[str, float]) -> dict[str, float]:
        return {names[k]: v for k, v in logs.items() if k in names}

    return convert


# What docs/metrics.md says of a canonical name beyond the native names of the maps above (scripts/doc_tables.py):
# where rlbridge measures it in the TRL process, and when TRL has it
DOC_NOTES = {
    "reward/<plugin>/<metric>": "`rewards/<plugin>/<metric>`, logged by the TRL shim",
    "kl": "only with beta > 0",
    "timing/step_s": "measured by rlbridge's callback (step begin to log)",
    "timing/generate_s": "sum of TRL's profiling timers `*generate*`",
    "timing/update_s": "step time minus TRL's `_prepare_inputs` timer",
    "timing/reward_s": "`GRPOTrainer._calculate_rewards` timer",
    "timing/old_logprob_s": "the first no-grad `_get_per_token_logps_and_entropies` inside `_prepare_inputs`, when "
    "TRL runs it (misaligned generation, vLLM importance sampling)",
    "timing/ref_s": "the reference `_get_per_token_logps_and_entropies` inside `_prepare_inputs` (beta != 0)",
    "timing/weight_sync_s": "`sync_weights` timer (vLLM rollout only); AsyncGRPOTrainer's `perf/weight_sync_s`",
    "async/staleness_mean": "AsyncGRPOTrainer's `sample/staleness_mean`, from the version TRL tags each sample with",
    "async/staleness_max": "AsyncGRPOTrainer's `sample/staleness_max`, from the version TRL tags each sample with",
    "async/trainer_idle_s": "AsyncGRPOTrainer's `perf/rollout_wait_s`",
    "async/rollout_idle_s": "AsyncGRPOTrainer's `rollout/backpressure_s` (TRL's mean wait on a full queue)",
    "async/partial_rollouts": "requests the vLLM server held when a sync paused it in mode `keep` (0 in mode `wait`)",
    "throughput/tokens_per_s": "delta of `num_tokens` / step time",
    "memory/peak_mb": "`torch.cuda.max_memory_allocated` on GPU, `ru_maxrss` on CPU",
    **{name: "counted by rlbridge's worker pool in the TRL process" for name in REWARD_FAULTS},
    "loss/sft": "SFTTrainer",
    "loss/dpo": "DPOTrainer",
    "loss/reward_model": "RewardTrainer",
    "eval/reward/mean": "`eval_reward`",
    "eval/reward/<plugin>/mean": "`eval_rewards/<plugin>/mean`",
    "eval/response_length/mean": "`eval_completions/mean_length`",
}
