"""The engine-neutral reward interface that reward plugins implement, and its composition."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # not at run time: spawned reward workers import this module, not the config models
    from rlbridge.contract.config import RunConfig

RewardFn = Callable[[Sequence["RewardInput"]], Sequence["float | None"]]


@dataclass
class RewardInput:
    """What a reward plugin sees of one sample, on every engine.

    `completion` is the decoded text without special tokens (what engines decode); use
    `completion_ids` to see every generated token, special tokens included (a text-only reward
    lets the policy hide tokens from it).
    """

    prompt: str
    completion: str
    completion_ids: list[int]
    answer: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class BoundReward:
    """A reward plugin instantiated with its config args."""

    name: str
    weight: float
    fn: RewardFn


def build_rewards(config: RunConfig, plugins=None) -> list[BoundReward]:
    from rlbridge.contract.native_rewards import reward_fn
    from rlbridge.contract.registry import get_plugin_manager

    pm = plugins or get_plugin_manager()
    bound = []
    for i, spec in enumerate(config.reward):
        bound.append(
            BoundReward(spec.name, spec.weight, reward_fn(spec, pm, f"reward[{i}]"))
        )  # a plugin or a native function
    return bound


def score(reward: BoundReward, inputs: Sequence[RewardInput]) -> list[float | None]:
    """Call a reward and check it returned one number (or None) per input."""
    out = list(reward.fn(inputs))
    if len(out) != len(inputs):
        raise ValueError(f"reward '{reward.name}' returned {len(out)} scores for {len(inputs)} samples")
    return [None if v is None else float(v) for v in out]
