"""Knob checks and knob values that several adapters' capability tables share (adapters/<engine>/knobs.py).

A check takes the RunConfig and returns what is wrong with the knob's value for the engine, or None: the
`check` of a Capability (rlbridge.contract.backend). Put a check here when two engines or more reject the
same value for the same reason; a check that only looks alike (same shape, another engine's reason) stays
in its adapter.

A check of one condition and one message, the common shape (`if <condition>: return "<why>"`), is declared
with `refuse_when(condition, reason)`, in its adapter or here, rather than written as a function; a check
with several conditions, or several messages, stays a function.
"""

from __future__ import annotations

from collections.abc import Callable

from rlbridge.contract.backend import only_for
from rlbridge.contract.config import RunConfig

Check = Callable[[RunConfig], "str | None"]


def refuse_when(condition: Callable[[RunConfig], bool], reason: str | Callable[[RunConfig], str]) -> Check:
    """The check of a knob that an engine refuses when `condition` holds for the config, with the engine's
    reason: a string, or a function of the config for a reason that quotes its values (called only when the
    condition holds)."""

    def check(config: RunConfig) -> str | None:
        if not condition(config):
            return None
        return reason(config) if callable(reason) else reason

    return check


def placement_kl_estimator(config: RunConfig) -> str:
    """The effective KL estimator of an engine whose standard follows the placement, when it is unset: k3 in the
    loss, k1 in the reward."""
    algo = config.algorithm
    return algo.kl_estimator or ("k3" if algo.kl_placement == "loss" else "k1")


check_kl_estimator_needs_kl = refuse_when(
    lambda c: bool(c.algorithm.kl_estimator) and c.algorithm.kl_coef == 0,
    "algorithm.kl_estimator has no effect with kl_coef 0 (no reference model); set kl_coef or remove it",
)
"""An engine that computes no KL without a reference model (kl_coef 0): a KL estimator would do nothing."""


def warmup_needs_steps(takes: str) -> Check:
    """The check of training.warmup_steps for an engine that takes warm-up as a share of the run's steps, which
    rlbridge knows only with training.steps. `takes`: how the engine takes it, the message's first words."""
    return refuse_when(
        lambda c: bool(c.training.warmup_steps) and not c.training.steps,
        f"{takes}, which rlbridge knows only with training.steps; train by training.steps, or remove warmup_steps",
    )


check_gamma_needs_returns = only_for("algorithm.gamma", ("ppo", "reinforce_pp"), "discounted returns")
"""algorithm.gamma of an engine that discounts returns only in PPO's GAE and REINFORCE++: any other algorithm
would ignore it."""

check_gae_lambda_needs_gae = only_for("algorithm.gae_lambda", ("ppo",), "GAE")
"""algorithm.gae_lambda of an engine whose GAE (PPO with a critic) is the only estimator that reads it."""
