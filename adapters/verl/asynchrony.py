"""verl: the asynchronous loop (rollout.max_staleness, partial_rollouts, weight_sync_interval) and its metrics.

verl's PPO trainer (main_ppo) is synchronous. Its asynchronous trainers are separate entry points, read
in the installed 0.9.1 wheel:
- `verl.experimental.one_step_off_policy.main_ppo` (OneStepOffRayTrainer), which rlbridge launches for
  `rollout.max_staleness: 1` with `placement.policy: split`: generation of batch n+1 starts right after
  the weights are synced at step n and runs while batch n trains, so every batch after the first is
  exactly one policy version old (a sync every step, no partial rollouts).
- `verl.experimental.fully_async_policy.fully_async_main` (config `fully_async_ppo_trainer.yaml`:
  `async_training.staleness_threshold`, a fraction of samples, `trigger_parameter_sync_step`,
  `partial_rollout`, `require_batches`), which rlbridge launches for everything else (max_staleness >= 2,
  partial rollouts, a weight sync every k > 1 steps): a rollouter actor streams one prompt at a time
  into a message queue while a trainer actor takes a batch's worth from it, and every sync aborts the
  generations in flight (resumed with the new weights: partial_rollout).
Both run the rollout on a resource pool of its own (`rollout.nnodes` x `rollout.n_gpus_per_node`,
`actor_rollout_ref.hybrid_engine: False`, asserted by the trainer) and move the weights with a checkpoint
engine. verl's own engines need CUDA (nccl, nixl, delta: cupy) or other hardware; on CPU the plan uses
rlbridge's file engine (adapters/verl/checkpoint_engine.py). verl 0.9.0 and older are refused: rlbridge
has read and run the trainer in 0.9.1 only (0.5.0 has none). Called by `VerlBackend` and boot.py.

The metrics come from verl's own version tags: every sample's `min_global_steps` / `max_global_steps`
(the `global_steps` the vLLM server's weights were synced at when its generation started and ended,
workers/rollout/llm_server.py). `instrument_one_step_off` maps a tag to the number of actor updates the
synced weights hold, and the staleness of a trained sample to the updates the actor had made by then
minus that number.
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any

from packaging.version import Version

from rlbridge.contract.backend import Capability, approximated, gpus_per_node, honoured
from rlbridge.contract.config import RunConfig
from rlbridge.contract.metrics import PARTIAL, ROLLOUT_IDLE, STALENESS_MAX, STALENESS_MEAN, TRAINER_IDLE
from rlbridge.errors import ConfigError
from rlbridge.engine.kit import is_wrapped, mark_wrapped, wrap_once

ASYNC_SINCE = Version("0.9.1")
# rlbridge's CPU checkpoint engine: its registry name and the module verl imports to register it
CHECKPOINT_ENGINE, CHECKPOINT_ENGINE_MODULE = "rlbridge_file", "rlbridge_adapters.verl.checkpoint_engine"


def _version(config: RunConfig) -> Version:
    from rlbridge_adapters.verl.backend import VerlBackend

    return VerlBackend.target_version(config)


def uses_fully_async(config: RunConfig) -> bool:
    """fully_async_main, not one_step_off_policy: see translate()."""
    ro = config.rollout
    passed = any(is_async_key(k) for k in config.backend_options.get("verl", {}))
    return ro.max_staleness >= 1 and not (
        ro.max_staleness == 1 and ro.weight_sync_interval == 1 and not ro.partial_rollouts and not passed
    )


NO_WAITING_SYNC = (
    "verl's fully-async trainer (fully_async_main, which rlbridge launches for max_staleness >= 2, partial rollouts or "
    "weight_sync_interval > 1) aborts the generations in flight at every weight sync (checkpoint_engine/base.py "
    "CheckpointEngineManager.update_weights: abort_replicas); with async_training.partial_rollout False it trains them "
    "cut short (workers/rollout/llm_server.py), which is not rollout.partial_rollouts: false (a sync waits for them to "
    "finish). Set rollout.partial_rollouts: true (they resume with the new weights), or max_staleness 1 with "
    "weight_sync_interval 1 (one_step_off_policy, which finishes every generation before a sync)"
)
# verl's fully-async trainer counts trainer.save_freq and trainer.test_freq in parameter versions (one per
# weight_sync_interval steps) and names its checkpoints global_step_<version> (fully_async_trainer.py _save_checkpoint)
NO_CHECKPOINT_PER_STEP = (
    "checkpoint.interval with rollout.weight_sync_interval > 1 on verl: its fully-async trainer checkpoints once per "
    "weight sync and names the checkpoint by parameter version, not by step (fully_async_trainer.py _save_checkpoint: "
    "global_step_<current_param_version>), so rlbridge cannot map its checkpoints onto steps; use "
    "weight_sync_interval 1, or no checkpoint.interval"
)


def _check_staleness(config: RunConfig) -> str | None:
    if config.rollout.max_staleness == 0:
        return None
    if _version(config) < ASYNC_SINCE:
        return (
            f"verl {_version(config)}: rlbridge launches verl's asynchronous trainer "
            "(verl.experimental.one_step_off_policy) as read and run in verl 0.9.1 only (0.5.0 has none); use "
            "engine_version 0.9.1, or rollout.max_staleness: 0"
        )
    if config.placement.policy != "split":
        return (
            "verl's asynchronous trainers run the rollout on devices of its own (hybrid_engine: False, asserted in "
            "one_step_off_policy/ray_trainer.py): set placement.policy: split with placement.args.rollout_gpus"
        )
    return None


def _check_fully_async(config: RunConfig) -> str | None:
    """What fully_async_main cannot run as rlbridge's knobs say (partial_rollouts and weight_sync_interval)."""
    ro = config.rollout
    if not uses_fully_async(config) or _check_staleness(config):
        return None
    if not ro.partial_rollouts:
        return NO_WAITING_SYNC
    if ro.weight_sync_interval > 1 and config.checkpoint.interval:
        return NO_CHECKPOINT_PER_STEP
    if (
        ro.weight_sync_interval > 1
        and config.data.eval is not None
        and config.data.eval_interval % ro.weight_sync_interval
    ):
        return (
            f"data.eval_interval {config.data.eval_interval} with rollout.weight_sync_interval {ro.weight_sync_interval} "
            "on verl: its fully-async trainer evaluates once per weight sync at most (trainer.test_freq counts "
            "parameter versions, fully_async_trainer.py _fit_validate); make eval_interval a multiple of "
            "weight_sync_interval"
        )
    return None


def capabilities() -> list[Capability]:
    return [
        approximated(  # exact on one_step_off_policy; approximated where fully_async_main runs (uses_fully_async)
            "rollout.max_staleness",
            ("launch.entry_point", "actor_rollout_ref.hybrid_engine", "rollout.n_gpus_per_node"),
            note="1: verl.experimental.one_step_off_policy.main_ppo, exact (batch n+1 generated while batch n "
            "trains: one version). 2 and more, partial rollouts or weight_sync_interval > 1: "
            "verl.experimental.fully_async_policy.fully_async_main with async_training.staleness_threshold = "
            "max_staleness, which bounds how far generation runs ahead, not each sample's age: a generation resumed "
            "across syncs keeps the version it started at, and a prompt whose scoring waits trains later than verl "
            "counts (measured at max_staleness 2: up to 4 versions; docs/scale.md, loop shapes)",
            check=_check_staleness,
            when=uses_fully_async,
        ),
        honoured(
            "rollout.partial_rollouts",
            ("launch.entry_point", "async_training.partial_rollout"),
            _check_fully_async,
            note="true: fully_async_main with async_training.partial_rollout (a sync aborts the generations in flight, "
            "which resume with the new weights); false with max_staleness >= 2 is refused (verl would train them cut "
            "short)",
        ),
        honoured(
            "rollout.weight_sync_interval",
            ("launch.entry_point", "async_training.trigger_parameter_sync_step"),
            _check_fully_async,
            note="fully_async_main's async_training.trigger_parameter_sync_step",
        ),
    ]


# ---- the async trainers' native settings (what translate() plans and the import reads back) ----

FULLY_ASYNC = "verl.experimental.fully_async_policy.fully_async_main"
ONE_STEP_OFF = "verl.experimental.one_step_off_policy.main_ppo"
# the CPUs each entry point's own actors ask Ray for, added to the cluster's (logical on CPU) so the workers still
# fit: OneStepTaskRunner 10 (one_step_off_policy/main_ppo.py); FullyAsyncTaskRunner 1, FullyAsyncTrainer 10,
# FullyAsyncRollouter 10 and MessageQueue 2 (fully_async_main.py, fully_async_trainer.py, fully_async_rollouter.py,
# message_queue.py)
DRIVER_CPUS = {ONE_STEP_OFF: 10, FULLY_ASYNC: 1 + 10 + 10 + 2}
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
# what rollout.weight_sync_interval and partial_rollouts set (capabilities()): never passed through
KNOB_KEYS = ("async_training.trigger_parameter_sync_step", "async_training.partial_rollout")
STALENESS_APPROXIMATION = (
    "verl's async_training.staleness_threshold s is a fraction of samples, not a count of versions: per parameter "
    "version the rollouter generates at most required_samples x trigger_parameter_sync_step x (1 + s) samples "
    "(fully_async_rollouter.py set_max_required_samples; required_samples = ppo_mini_batch_size x require_batches), "
    "the trainer consumes required_samples x trigger_parameter_sync_step of them, and the rest (in flight or queued "
    "at reset_staleness) are trained after the sync: generation runs at most s versions' worth of samples ahead. "
    "That bounds the queue, not a sample's age: a generation in flight at a sync is aborted and resumed with the new "
    "weights (partial_rollout), keeps the version it started at (min_global_steps) and joins the queue when it ends, "
    "so a sample whose generation spans syncs can be older than ceil(s) versions (measured, rlbridge's "
    "async/staleness_max at max_staleness 2: 3-4 on quickstart steps with such samples, never more than 2 plus the "
    "syncs they spanned; and 3 on the last steps of the remote-reward workload without any; docs/benchmarks.md). "
    "rollout.max_staleness = ceil(s) is the nearest integer to what verl bounds; s itself is kept "
    "as backend_options.verl.async_training.staleness_threshold, which is what verl runs"
)


def staleness_bound(threshold: float) -> int:
    """The largest version gap verl's fully-async loop allows at staleness_threshold s (see STALENESS_APPROXIMATION)."""
    return math.ceil(threshold)


def is_async_key(key: str) -> bool:
    """A native key only verl's async entry points have, with no canonical knob (kept as backend_options.verl)."""
    return (key.startswith(PASSTHROUGH_PREFIXES) or key in PASSTHROUGH_KEYS) and key not in BATCH_KEYS + KNOB_KEYS


def translate(config: RunConfig) -> dict[str, Any]:
    """The entry point and overrides verl's async trainers take for the config's async knobs: the inverse of
    what `rlbridge import` reads from their launch scripts.

    one_step_off_policy.main_ppo is max_staleness 1 with a sync after every step and no partial rollouts
    (generation one step ahead); everything else is fully_async_main: staleness_threshold (the fraction kept in
    backend_options, else max_staleness itself, the loosest fraction with that bound), trigger_parameter_sync_step
    = weight_sync_interval, partial_rollout = partial_rollouts, require_batches = the mini-batches of one
    training.batch_size (data.train_batch_size 0 and gen_batch_size 1, as fully_async_main asserts), and the run's
    length in prompts (rollout.total_rollout_steps = training.steps x batch_size: the trainer stops when the
    rollouter has sent that many). Both run the rollout on devices of its own:
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
    gpus = gpus_per_node(config)
    # on CPU (no GPUs): resources.cpu_ranks_per_node logical training devices per node plus the rollout's
    trainer_gpus = gpus - rollout_gpus // nodes if gpus else config.resources.cpu_ranks_per_node
    if trainer_gpus < 1:
        raise ConfigError(
            f"placement.args.rollout_gpus {rollout_gpus} leaves no GPU per node for verl's trainer "
            f"(resources.gpus_per_node {gpus}); lower rollout_gpus"
        )
    out: dict[str, Any] = {
        "actor_rollout_ref.hybrid_engine": False,
        "rollout.nnodes": nodes,
        "rollout.n_gpus_per_node": rollout_gpus // nodes,
        "trainer.n_gpus_per_node": trainer_gpus,
    }
    if not uses_fully_async(config):
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
    # the run's length: its yaml's total_rollout_steps (100 prompts) would otherwise cut it; None = the epochs' prompts
    steps = config.training.steps
    length = {"rollout.total_rollout_steps": steps * config.training.batch_size if steps else None}
    if (
        steps
        and passed.get("rollout.total_rollout_steps", length["rollout.total_rollout_steps"])
        != length["rollout.total_rollout_steps"]
    ):
        raise ConfigError(
            f"backend_options.verl.rollout.total_rollout_steps {passed['rollout.total_rollout_steps']} is not "
            f"training.steps {steps} x training.batch_size {config.training.batch_size}: rlbridge sets the run's "
            "length from training.steps; remove one of them"
        )
    interval = ro.weight_sync_interval
    sync = {}  # verl counts trainer.test_freq and save_freq in parameter versions (one per weight sync)
    if interval > 1 and config.data.eval is not None:
        sync["trainer.test_freq"] = config.data.eval_interval // interval
    return {
        ENTRY: FULLY_ASYNC,
        **out,
        **length,
        **passed,
        **sync,
        "data.train_batch_size": 0,
        "data.gen_batch_size": 1,
        "async_training.require_batches": samples // mini,
        "async_training.staleness_threshold": threshold,
        "async_training.trigger_parameter_sync_step": ro.weight_sync_interval,
        "async_training.partial_rollout": ro.partial_rollouts,
    }


def cpu_overrides() -> dict[str, Any]:
    """What an async plan needs on CPU: rlbridge's file checkpoint engine (checkpoint_engine.py says why),
    which verl imports in every process that builds one (custom_backend_module)."""
    return {
        "actor_rollout_ref.rollout.checkpoint_engine.backend": CHECKPOINT_ENGINE,
        "actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module": CHECKPOINT_ENGINE_MODULE,
        f"+actor_rollout_ref.rollout.checkpoint_engine.engine_kwargs.{CHECKPOINT_ENGINE}.directory": "<run_dir>/weight_sync",
    }


def entry_config(entry: str | None) -> tuple[str | None, str]:
    """(config directory, config name) verl's Hydra composes for an entry point: its packaged config over
    verl/trainer/config (None: main_ppo's ppo_trainer)."""
    if entry is None:
        return None, "ppo_trainer"
    import importlib
    import os

    package, name = ENTRY_CONFIGS[entry]
    module = importlib.import_module(f"verl.experimental.{package}")
    return os.path.join(os.path.dirname(module.__file__), "config"), name.removesuffix(".yaml")


# ---- in the driver (verl's task runner actor; installed by boot.py) ----


def instrument_one_step_off(module) -> None:
    """Add staleness (in policy versions), trainer and rollout idle time and partial rollouts to the metrics
    OneStepOffRayTrainer logs each step, from verl's own per-sample version tags (module docstring)."""
    cls = module.OneStepOffRayTrainer
    if is_wrapped(cls):
        return
    update_weights, update_actor, generate = cls._fit_update_weights, cls._fit_update_actor, cls._async_gen_next_batch

    @functools.wraps(update_weights)
    def _fit_update_weights(self):
        state = _state(self)
        if state["generation_end"] is not None:  # the rollout sat idle from its last batch's end until this sync
            state["rollout_idle"] = max(0.0, time.time() - state["generation_end"])
        state["versions"][self.global_steps] = state["updates"]  # verl tags what it syncs with global_steps
        return update_weights(self)

    @functools.wraps(generate)
    async def _async_gen_next_batch(self, *args, **kwargs):
        result = await generate(self, *args, **kwargs)
        if result is not None:
            result[3].meta_info["rlbridge_generation_end"] = time.time()
        return result

    @functools.wraps(update_actor)
    def _fit_update_actor(self, batch):
        state = _state(self)
        state["generation_end"] = batch.meta_info.pop("rlbridge_generation_end", None)
        self.metrics.update(
            version_metrics(batch.non_tensor_batch, state["versions"], state["updates"]),
        )
        self.metrics[TRAINER_IDLE] = self.timing_raw.get("gen", 0.0)  # the await of the batch in _fit_generate
        self.metrics[ROLLOUT_IDLE] = state.pop("rollout_idle", 0.0)
        out = update_actor(self, batch)
        if self.config.trainer.critic_warmup <= self.global_steps:  # the update verl made (critic warm-up: none)
            state["updates"] += 1
        return out

    cls._fit_update_weights, cls._fit_update_actor = _fit_update_weights, _fit_update_actor
    cls._async_gen_next_batch = _async_gen_next_batch
    mark_wrapped(cls)


def _state(trainer) -> dict[str, Any]:
    if not hasattr(trainer, "_rlbridge_async"):
        trainer._rlbridge_async = {"versions": {}, "updates": 0, "generation_end": None}
    return trainer._rlbridge_async


def version_metrics(tags: dict[str, Any], versions: dict[int, int], updates: int) -> dict[str, float]:
    """Staleness of a batch about to train: `updates` actor updates made so far; a sample generated from
    weights synced at global_steps t holds versions[t] updates. A sample is partial when its generation
    spanned a sync (min_global_steps != max_global_steps: verl resumed it with new weights)."""
    low, high = tags.get("min_global_steps"), tags.get("max_global_steps")
    if low is None or not len(low) or any(t is None for t in low):
        return {}
    unknown = sorted({int(t) for t in low if int(t) not in versions})
    if unknown:
        raise RuntimeError(f"rlbridge: samples tagged with global_steps {unknown}, which verl never synced")
    staleness = [updates - versions[int(t)] for t in low]
    partial = sum(int(a) != int(b) for a, b in zip(low, high)) if high is not None else 0
    return {
        STALENESS_MEAN: sum(staleness) / len(staleness),
        STALENESS_MAX: float(max(staleness)),
        PARTIAL: float(partial),
    }


# ---- in verl's FullyAsyncTrainer actor (installed by boot.py) ----
#
# FullyAsyncTrainer is a Ray actor class (pickled by value when the task runner creates it), so the hooks sit on
# the plain classes it uses: SeparateRayPPOTrainer._fit_update_actor (inherited), detach_utils.MetricsAggregator
# (which collects each step's metrics and returns a sync cycle's aggregate) and Tracking.log (boot.py).
# rlbridge writes one row per training step from the metrics each step hands the aggregator, not verl's
# per-cycle aggregate, which it logs at step = parameter version (one per weight_sync_interval steps).

_fully_async: dict[str, Any] = {"active": False, "step": 0, "rollout_idle": None}


class Aggregated(dict):
    """verl's per-sync-cycle aggregate of step metrics (MetricsAggregator.get_aggregated_metrics): rlbridge has
    written those steps' rows already, so the events file leaves it out."""


def _is_fully_async(trainer) -> bool:
    return "current_param_version" in vars(trainer) and "message_queue_client" in vars(trainer)


def instrument_separate_trainer(module) -> None:
    """Staleness (versions: verl tags every sample with the parameter version its generation started and ended
    at, min/max_global_steps), trainer idle time and partial rollouts, added to each fully-async training step."""
    cls = module.SeparateRayPPOTrainer

    def make(original):
        @functools.wraps(original)
        def _fit_update_actor(self, batch):
            if _is_fully_async(self):
                version = int(self.current_param_version)  # the synced weights this cycle's updates start from
                _fully_async.update(active=True, step=int(self.global_steps))
                self.metrics.update(
                    version_metrics(batch.non_tensor_batch, {v: v for v in range(version + 1)}, version)
                )
                self.metrics[TRAINER_IDLE] = self.timing_raw.get("gen", 0.0)  # the wait for the queue (_fit_generate)
            return original(self, batch)

        return _fit_update_actor

    wrap_once(cls, "_fit_update_actor", make)


def instrument_metrics_aggregator(module) -> None:
    """Each fully-async step's metrics go to the events file as they reach verl's aggregator; its aggregate is marked."""
    cls = module.MetricsAggregator
    add, aggregate = cls.add_step_metrics, cls.get_aggregated_metrics
    if is_wrapped(add):
        return
    from rlbridge.contract.metrics import numbers
    from rlbridge.engine.events import engine_metrics, write_event

    @functools.wraps(add)
    def add_step_metrics(self, metrics, *args, **kwargs):
        if _fully_async["active"]:
            idle = _fully_async["rollout_idle"]
            _fully_async["rollout_idle"] = None
            row = {**numbers(metrics), ROLLOUT_IDLE: idle or 0.0}  # no sync this step: the rollout never stopped
            write_event(engine_metrics(int(metrics.get("training/global_step", _fully_async["step"])), row))
        return add(self, metrics, *args, **kwargs)

    @functools.wraps(aggregate)
    def get_aggregated_metrics(self, *args, **kwargs):
        return Aggregated(aggregate(self, *args, **kwargs))

    cls.add_step_metrics, cls.get_aggregated_metrics = mark_wrapped(add_step_metrics), get_aggregated_metrics


def fully_async_log(data: dict[str, Any], step: int) -> tuple[dict[str, Any], int] | None:
    """What boot.py's Tracking.log hook copies to the events file in a fully-async trainer: not the per-cycle
    aggregate (None); the rollouter's sync row (reset_staleness: its active and version times) becomes the rollout
    idle time of the step that synced; evaluations are logged at the training step they follow, not the version."""
    if isinstance(data, Aggregated):
        return None
    if not _fully_async["active"]:
        return data, step
    if "fully_async/rollouter/version_time" in data and step >= 1:
        active = float(data.get("fully_async/rollouter/active_time", data["fully_async/rollouter/version_time"]))
        _fully_async["rollout_idle"] = max(0.0, float(data["fully_async/rollouter/version_time"]) - active)
    return data, _fully_async["step"]
