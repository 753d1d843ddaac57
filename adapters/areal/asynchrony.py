"""AReaL: the asynchronous loop's knobs (rollout.max_staleness, partial_rollouts, weight_sync_interval).

AReaL 1.0.4's trainer is asynchronous by construction: its rollout controller keeps generating while the
trainer updates, bounded by `rollout.max_head_offpolicyness` (areal/infra/staleness_manager.py: a new rollout
may start only while the samples in flight and accepted stay within (max_head_offpolicyness + 1 + version) x
consumer_batch_size, so a sample trains at most that many versions after the one it was generated with).
0 is the synchronous loop. The trainer pauses the inference servers around every weight update
(`rollout.pause()` in rl_trainer.py) and the client resubmits each aborted request with the tokens it already
has (RemoteInfEngine.agenerate, areal/infra/remote_inf_engine.py:849): AReaL's interruptible generation,
rlbridge's partial rollouts, which it cannot switch off. It updates the weights after every step.
"""

from __future__ import annotations

from typing import Any

from rlbridge.contract.backend import Capability, honoured, rejected
from rlbridge.contract.config import RunConfig


def _check_staleness(config: RunConfig) -> str | None:
    if config.rollout.max_staleness >= 1 and not config.rollout.partial_rollouts:
        return (
            "AReaL's asynchronous rollout always interrupts the generations in flight at a weight update and "
            "continues them with the new weights (areal/infra/remote_inf_engine.py:849, interruptible generation); "
            "set rollout.partial_rollouts: true"
        )
    return None


def capabilities() -> list[Capability]:
    return [
        honoured(
            "rollout.max_staleness",
            "rollout.max_head_offpolicyness",
            _check_staleness,
            note="AReaL's staleness bound: a rollout starts only while it would train at most this many versions "
            "after its policy's (areal/infra/staleness_manager.py)",
        ),
        honoured(
            "rollout.partial_rollouts",
            (),
            note="AReaL's interruptible generation: always on in its asynchronous loop (max_staleness >= 1 "
            "requires it)",
        ),
        rejected(
            "rollout.weight_sync_interval",
            "AReaL updates the inference servers' weights after every training step (rl_trainer.py, "
            "update_weights); keep 1",
        ),
    ]


def translate(config: RunConfig, areal: dict[str, Any]) -> None:
    """The rollout controller's staleness bound (in place)."""
    areal["rollout"]["max_head_offpolicyness"] = config.rollout.max_staleness
