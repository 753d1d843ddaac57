"""AReaL: the offline stages (sft, dpo, reward_model).

AReaL 1.0.4 has trainers for them (areal/trainer/sft_trainer.py, rw_trainer.py, dpo_trainer.py), but rlbridge
drives its RL trainer (PPOTrainer) only so far: algorithm.name sft, dpo and reward_model are refused naming the
backends that run them, and every offline.* knob with them.
"""

from __future__ import annotations

from rlbridge.contract.backend import Capability, offline_stages_rejected
from rlbridge.contract.config import RunConfig

NOTE = (
    "rlbridge runs AReaL's RL trainer (PPOTrainer) only; its SFTTrainer, RWTrainer and DPOTrainer are not "
    "mapped yet: run the offline stages with backend: trl, verl or openrlhf"
)


def check_stage(config: RunConfig) -> str | None:
    """algorithm.name of an offline stage: refused (see NOTE)."""
    return NOTE if config.is_offline else None


def capabilities() -> list[Capability]:
    return offline_stages_rejected(NOTE)
