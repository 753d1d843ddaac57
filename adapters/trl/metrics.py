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


def to_canonical(logs: dict[str, float]) -> dict[str, float]:
    out = {}
    for key, value in logs.items():
        if key in DIRECT:
            out[DIRECT[key]] = value
            continue
        match = _PER_REWARD.match(key)
        if match:
            out[f"reward/{match['name']}/mean"] = value
    return out
