"""TRL's native metric names -> rlbridge's canonical names (see docs/metrics.md)."""

from __future__ import annotations

import re

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
