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

import math
from typing import Any

from rlbridge.contract.backend import Capability, gpus_per_node, rejected
from rlbridge.contract.config import RunConfig
from rlbridge.errors import ConfigError

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


# ---- the async trainers' native settings (the import's round trip; not launched yet, see NO_ASYNC) ----

FULLY_ASYNC = "verl.experimental.fully_async_policy.fully_async_main"
ONE_STEP_OFF = "verl.experimental.one_step_off_policy.main_ppo"
# each entry point's packaged config, composed over ppo_trainer.yaml (verl/experimental/<package>/config/)
ENTRY_CONFIGS = {
    FULLY_ASYNC: ("fully_async_policy", "fully_async_ppo_trainer.yaml"),
    ONE_STEP_OFF: ("one_step_off_policy", "one_step_off_ppo_trainer.yaml"),
}
ENTRY = "entry_point"
"""The pseudo-key translate() gives the module an async launch runs (`python -m MODULE overrides...`)."""
# native keys of the async trainers with no canonical knob: kept as backend_options.verl and passed through
PASSTHROUGH_PREFIXES = ("async_training.",)
PASSTHROUGH_KEYS = {"rollout.total_rollout_steps"}
# fully_async_main's batch keys, which translate() computes: fully_async_rollouter.py asserts data.train_batch_size == 0
# and data.gen_batch_size == 1 (one prompt at a time), and a trainer step takes ppo_mini_batch_size x require_batches
# prompts (required_samples), so training.batch_size = ppo_mini_batch_size x require_batches
BATCH_KEYS = ("data.train_batch_size", "data.gen_batch_size", "async_training.require_batches")
STALENESS_APPROXIMATION = (
    "verl's async_training.staleness_threshold s is a fraction of samples, not a count of versions: per parameter "
    "version the rollouter generates at most required_samples x trigger_parameter_sync_step x (1 + s) samples "
    "(fully_async_rollouter.py set_max_required_samples; required_samples = ppo_mini_batch_size x require_batches), "
    "the trainer consumes required_samples x trigger_parameter_sync_step of them, and the rest (in flight or queued "
    "at reset_staleness) are trained after the sync, oldest first: a backlog of at most s versions' worth of samples, "
    "so a sample is at most ceil(s) versions old. rollout.max_staleness = ceil(s) is that bound; s itself is kept "
    "as backend_options.verl.async_training.staleness_threshold, which is what verl runs"
)


def staleness_bound(threshold: float) -> int:
    """The largest version gap verl's fully-async loop allows at staleness_threshold s (see STALENESS_APPROXIMATION)."""
    return math.ceil(threshold)


def is_async_key(key: str) -> bool:
    """A native key only verl's async entry points have, with no canonical knob (kept as backend_options.verl)."""
    return (key.startswith(PASSTHROUGH_PREFIXES) or key in PASSTHROUGH_KEYS) and key not in BATCH_KEYS


def translate(config: RunConfig) -> dict[str, Any]:
    """The entry point and overrides verl's async trainers take for the config's async knobs: the inverse of
    what `rlbridge import` reads from their launch scripts (capabilities() still refuses to plan them, NO_ASYNC).

    one_step_off_policy.main_ppo is max_staleness 1 with a sync after every step and no partial rollouts
    (generation one step ahead); everything else is fully_async_main: staleness_threshold (the fraction kept in
    backend_options, else max_staleness itself, the loosest fraction with that bound), trigger_parameter_sync_step
    = weight_sync_interval, partial_rollout = partial_rollouts, require_batches = the mini-batches of one
    training.batch_size (data.train_batch_size 0 and gen_batch_size 1, as fully_async_main asserts). Both run the rollout on devices of its own:
    rollout.nnodes x rollout.n_gpus_per_node = placement.args.rollout_gpus, the trainer the rest of
    resources.gpus_per_node, hybrid_engine off."""
    ro = config.rollout
    options = config.backend_options.get("verl", {})
    passed = {k: v for k, v in options.items() if is_async_key(k)}
    if ro.max_staleness == 0:
        raise ConfigError("verl's async trainers need rollout.max_staleness >= 1")
    if config.placement.policy != "split":
        raise ConfigError(
            "verl's async trainers run the rollout on devices of its own: set placement.policy: split "
            "with placement.args.rollout_gpus"
        )
    nodes = config.resources.nodes
    rollout_gpus = int(config.placement.args.get("rollout_gpus", 1))
    if rollout_gpus % nodes:
        raise ConfigError(
            f"placement.args.rollout_gpus {rollout_gpus} must be a multiple of resources.nodes {nodes} "
            "(verl's rollout.n_gpus_per_node is per node)"
        )
    out: dict[str, Any] = {
        "actor_rollout_ref.hybrid_engine": False,
        "rollout.nnodes": nodes,
        "rollout.n_gpus_per_node": rollout_gpus // nodes,
        "trainer.n_gpus_per_node": gpus_per_node(config) - rollout_gpus // nodes,
    }
    one_step = ro.max_staleness == 1 and ro.weight_sync_interval == 1 and not ro.partial_rollouts and not passed
    if one_step:
        return {ENTRY: ONE_STEP_OFF, **out}
    threshold = passed.get("async_training.staleness_threshold", float(ro.max_staleness))
    if (
        not isinstance(threshold, (int, float))
        or isinstance(threshold, bool)
        or staleness_bound(threshold) != ro.max_staleness
    ):
        raise ConfigError(
            f"backend_options.verl.async_training.staleness_threshold {threshold!r} bounds staleness at "
            f"{staleness_bound(threshold) if isinstance(threshold, (int, float)) else '?'} version(s), not "
            f"rollout.max_staleness {ro.max_staleness}: set max_staleness to ceil(staleness_threshold)"
        )
    samples = config.training.batch_size * config.algorithm.group_size
    mini = config.training.mini_batch_size or samples  # rows per optimizer update (verl: ppo_mini_batch_size prompts)
    return {
        ENTRY: FULLY_ASYNC,
        **out,
        **passed,
        "data.train_batch_size": 0,
        "data.gen_batch_size": 1,
        "async_training.require_batches": samples // mini,
        "async_training.staleness_threshold": threshold,
        "async_training.trigger_parameter_sync_step": ro.weight_sync_interval,
        "async_training.partial_rollout": ro.partial_rollouts,
    }
