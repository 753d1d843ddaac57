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
    "(verl.experimental.one_step_off_policy.main_ppo, fully_async_policy.fully_async_main) run the rollout on devices of "
    "its own (actor_rollout_ref.hybrid_engine: False, asserted in one_step_off_policy/ray_trainer.py) and move the "
    "weights with a checkpoint engine: one_step_off_ppo_trainer.yaml sets checkpoint_engine.backend: nccl, whose module "
    "needs cupy and CUDA buffers; in this CPU environment verl.checkpoint_engine registers 'naive' only "
    "(CheckpointEngineRegistry.get('nccl'): \"Checkpoint engine nccl not registered ... nccl_checkpoint_engine: No module "
    "named 'cupy'\"; nixl and delta need cupy too, hccl torch.npu, kimi and mooncake their own libraries), and 'naive' is "
    "the in-process colocated copy (its prepare/init_process_group/build_topology raise NotImplementedError). rlbridge "
    "does not launch those trainers on GPUs yet; verl 0.5.0 has neither. Use backend: openrlhf (--train.async_enable) or "
    "backend: trl (AsyncGRPOTrainer), or keep the default"
)


def capabilities() -> list[Capability]:
    return [
        rejected("rollout.max_staleness", NO_ASYNC),
        rejected("rollout.partial_rollouts", NO_ASYNC),
        rejected("rollout.weight_sync_interval", NO_ASYNC),
    ]
