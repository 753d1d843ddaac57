"""verl: the asynchronous loop (rollout.max_staleness, partial_rollouts, weight_sync_interval).

verl's PPO trainer (main_ppo, which rlbridge drives) is synchronous. Its asynchronous trainers are
separate entry points, read in the installed 0.9.1 wheel: `verl.experimental.one_step_off_policy.main_ppo`
(generation one step ahead on rollout GPUs of its own) and `verl.experimental.fully_async_policy.fully_async_main`
(config `fully_async_ppo_trainer.yaml`: `async_training.staleness_threshold` 0.1,
`trigger_parameter_sync_step` 4, `require_batches` 1, `partial_rollout` True; `rollout.nnodes`,
`rollout.n_gpus_per_node`). Neither can run on CPU, and 0.5.0 has neither (docs/scale.md has the
mapping each knob would take). Called by `VerlBackend`.
"""

from __future__ import annotations

from rlbridge.contract.backend import Capability, rejected

NO_ASYNC = (
    "verl's main_ppo, the trainer rlbridge drives, is synchronous. verl 0.9.1's asynchronous trainers "
    "(verl.experimental.fully_async_policy.fully_async_main, one_step_off_policy.main_ppo) move weights from the "
    "trainer's GPUs to the rollout's with a checkpoint engine (actor_rollout_ref.rollout.checkpoint_engine.backend: "
    "nccl, nixl, hccl, mooncake or kimi; 'naive' is the colocated in-process copy), none of which runs without GPUs, "
    "and rlbridge does not launch them on GPUs yet; verl 0.5.0 has no asynchronous trainer. Use backend: openrlhf "
    "(--train.async_enable), or keep the default"
)


def capabilities() -> list[Capability]:
    return [
        rejected("rollout.max_staleness", NO_ASYNC),
        rejected("rollout.partial_rollouts", NO_ASYNC),
        rejected("rollout.weight_sync_interval", NO_ASYNC),
    ]
