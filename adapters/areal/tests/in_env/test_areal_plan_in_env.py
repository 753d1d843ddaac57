"""The AReaL adapter's plans read back through AReaL 1.0.4's own config code (adapters/areal/validate.py): it
accepts the plan of each algorithm, the KL, the asynchronous loop, a Megatron layout, LoRA and offload, and refuses
what AReaL refuses. Runs in the areal 1.0.4 engine environment (the plans alone: ../test_areal_plan.py)."""

from __future__ import annotations


import pytest

from rlbridge.errors import RLBridgeError
from rlbridge.run.loading import load_config
from rlbridge.run.runner import prepare
from tests.conftest import QUICKSTART

from . import needs_areal

CPU = ["backend=areal", "resources.gpus_per_node=0"]


pytestmark = needs_areal


def plan(*overrides: str):
    return prepare(load_config(QUICKSTART, [*CPU, *overrides]))


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["algorithm.name=ppo"],
        ["algorithm.kl_coef=0.05", "algorithm.kl_placement=reward", "algorithm.kl_estimator=k3"],
        ["rollout.max_staleness=2", "rollout.partial_rollouts=true", "algorithm.rollout_correction=token_truncate"],
        [
            "resources.gpus_per_node=8",
            "training.strategy=megatron",
            "training.tensor_parallel_size=2",
            "training.expert_parallel_size=2",
            "rollout.engine=sglang",
        ],
        [
            "model.lora={rank: 4, alpha: 8, target_modules: [q_proj, v_proj]}",
            "training.offload={parameters: true, optimizer: true}",
        ],
    ],
)
def test_areal_s_own_config_code_accepts_the_plan(overrides):
    prepared = plan(*overrides)
    grpo = prepared.backend.validate(prepared.plan) or None
    from rlbridge_adapters.areal.validate import validate_config

    grpo = validate_config(prepared.plan.native["config"])
    assert grpo.actor.kl_ctl == prepared.config.algorithm.kl_coef
    assert grpo.rollout.max_head_offpolicyness == prepared.config.rollout.max_staleness


def test_areal_s_config_code_refuses_what_areal_refuses():
    from rlbridge_adapters.areal.validate import validate_config

    config = plan().plan.native["config"]
    config["actor"]["rejection_sampling"] = {"level": "token", "action": "drop"}  # not one of AReaL's actions
    with pytest.raises(RLBridgeError, match="rejection_sampling|action"):
        validate_config(config)
