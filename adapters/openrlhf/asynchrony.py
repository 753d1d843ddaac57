"""OpenRLHF: the asynchronous loop (rollout.max_staleness, partial_rollouts, weight_sync_interval) and
its metrics.

OpenRLHF 0.11.2's `--train.async_enable` (openrlhf/trainer/ppo_trainer_async.py) runs a generator actor
and a trainer actor around a Ray queue of `--train.async_queue_size` batches and as many slot tokens: the
generator takes a token before it generates a batch, the trainer returns it when it takes the batch
(before training on it), and the trainer broadcasts its weights to the vLLM engines after every step.
Generating batch m therefore needs the trainer to have taken batch m - q, so batch m starts from weights
at least m - q steps old and is trained at step m: staleness <= q, reached whenever generation is the
faster side. max_staleness k is `--train.async_queue_size k`, exactly. `--train.partial_rollout_enable`
pauses and resumes the vLLM engines around the broadcast instead of waiting for the batch to finish.
Every name was read in the 0.11.2 wheel (cli/train_ppo_ray.py, trainer/ppo_trainer_async.py).

OpenRLHF tags no sample with a policy version, so `instrument_*` below measure it where the engine's own
timers are (SamplesGenerator.generate_samples, BasePPOTrainer.train_step): a batch's version is the number
of broadcasts the trainer had completed when its generation started (one clock: every process of a run is
on one machine here). Called by `OpenRLHFBackend` and boot.py.
"""

from __future__ import annotations

import bisect
import functools
import time
from typing import Any

from packaging.version import Version

from rlbridge.contract.backend import Capability, gpus_per_node, honoured
from rlbridge.contract.config import RunConfig
from rlbridge.contract.metrics import PARTIAL, ROLLOUT_IDLE, STALENESS_MAX, STALENESS_MEAN, TRAINER_IDLE
from rlbridge.engine.kit import is_wrapped, mark_wrapped, wrap_once

ASYNC_SINCE = Version("0.10.2")


def _version(config: RunConfig) -> Version:
    from rlbridge_adapters.openrlhf.backend import target_version

    return target_version(config)


def _check_staleness(config: RunConfig) -> str | None:
    if config.rollout.max_staleness == 0:
        return None
    version = _version(config)
    if version < ASYNC_SINCE:
        return (
            f"OpenRLHF {version} spells its asynchronous mode --async_train (0.10.2 renamed it --train.async_enable), "
            "which rlbridge has not read in that release's source; use engine_version 0.11.2"
        )
    if gpus_per_node(config) > 0 and config.placement.policy == "colocate":
        return (
            "OpenRLHF's async loop generates while the actor trains, so the vLLM engines cannot share the actor's GPUs "
            "(train_ppo_ray asserts no --vllm.enable_sleep with --train.async_enable, and --train.colocate_all then "
            "only colocates the DeepSpeed models): set placement.policy: split with placement.args.rollout_gpus"
        )
    return None


def _check_interval(config: RunConfig) -> str | None:
    if config.rollout.weight_sync_interval != 1:
        return (
            "OpenRLHF broadcasts the weights to vLLM after every training step (BasePPOTrainer.train_step) and has "
            "no interval flag; set rollout.weight_sync_interval: 1"
        )
    return None


def capabilities() -> list[Capability]:
    return [
        honoured(
            "rollout.max_staleness",
            ("train.async_enable", "train.async_queue_size"),
            _check_staleness,
            note="0.10.2+: --train.async_enable --train.async_queue_size k (queue of k batches: staleness <= k)",
        ),
        honoured(
            "rollout.partial_rollouts",
            "train.partial_rollout_enable",
            note="vLLM pause_generation / resume_generation around the broadcast",
        ),
        honoured("rollout.weight_sync_interval", (), _check_interval, note="1 only: a broadcast after every step"),
    ]


def translate(config: RunConfig, flags: dict[str, Any]) -> None:
    """Add the async flags to `flags` (in place)."""
    ro = config.rollout
    if ro.max_staleness:
        flags["train.async_enable"] = True
        flags["train.async_queue_size"] = ro.max_staleness
        if ro.partial_rollouts:
            flags["train.partial_rollout_enable"] = True


# ---- in the engine's processes (installed by boot.py) ----


def instrument_generator(module) -> None:
    """Stamp each batch SamplesGenerator.generate_samples returns with when its generation started and
    ended and how long the generator sat idle before it (waiting for a slot token or the vLLM lock)."""
    cls = module.SamplesGenerator

    def make(original):
        @functools.wraps(original)
        def generate_samples(self, *args, **kwargs):
            start = time.time()
            idle = start - getattr(self, "_rlbridge_last_end", start)
            result = original(self, *args, **kwargs)
            end = self._rlbridge_last_end = time.time()
            for sample in result[0] or ():
                # travels with the sample through the Ray queue; a sample served from OpenRLHF's buffer of extras
                # (--rollout.vllm_generate_batch_size above the batch) keeps the stamp of the call that generated it
                if not hasattr(sample, "_rlbridge_generation"):
                    sample._rlbridge_generation = (start, end, idle)
            return result

        return generate_samples

    wrap_once(cls, "generate_samples", make)


def instrument_trainer(module) -> None:
    """Add staleness (in policy versions), trainer idle time, rollout idle time and partial rollouts to
    the status BasePPOTrainer.train_step returns (OpenRLHF logs it as the step's metrics), and stamp each
    broadcast to vLLM when its weights are in (BasePPOTrainer.broadcast_to_vllm returns: in the async loop
    that is still inside the vLLM lock, so a generation that waited for the lock starts after the stamp;
    stamped when train_step returned instead, a generation starting in between counted as a partial rollout
    one version older than it was, measured on a remote-reward run at max_staleness 2)."""
    cls = module.BasePPOTrainer
    original, original_broadcast = cls.train_step, cls.broadcast_to_vllm
    if is_wrapped(original):
        return

    @functools.wraps(original_broadcast)
    def broadcast_to_vllm(self, *args, **kwargs):
        result = original_broadcast(self, *args, **kwargs)
        self._rlbridge_broadcast_end = time.time()
        return result

    @functools.wraps(original)
    def train_step(self, rollout_samples, global_step, *args, **kwargs):
        start = time.time()
        if not hasattr(self, "_rlbridge_syncs"):
            self._rlbridge_syncs, self._rlbridge_base = [], int(global_step)  # a resumed run starts at its step
        idle = start - getattr(self, "_rlbridge_last_end", start)
        stamps = [getattr(s, "_rlbridge_generation", None) for s in rollout_samples]
        self._rlbridge_broadcast_end = None
        status, next_step = original(self, rollout_samples, global_step, *args, **kwargs)
        extra = async_status(stamps, self._rlbridge_syncs, self._rlbridge_base, int(global_step))
        # the broadcast at the end of train_step made version global_step + 1 (stamped there; with no vLLM engine, now)
        self._rlbridge_syncs.append(self._rlbridge_broadcast_end or time.time())
        self._rlbridge_last_end = time.time()
        if extra:
            extra[TRAINER_IDLE] = idle
            status.update(extra)
        return status, next_step

    cls.train_step, cls.broadcast_to_vllm = mark_wrapped(train_step), mark_wrapped(broadcast_to_vllm)
    # ray.remote copies every method into the actor's class (wrapped, __wrapped__ = the method) when it
    # decorates it: the synchronous PPOTrainer of this module was decorated before this hook ran
    for value in vars(module).values():
        actor_class = getattr(getattr(value, "__ray_metadata__", None), "modified_class", None)
        if actor_class is None:
            continue
        for name, method, wrapper in (
            ("train_step", original, train_step),
            ("broadcast_to_vllm", original_broadcast, broadcast_to_vllm),
        ):
            copy = actor_class.__dict__.get(name)
            if copy is not None and getattr(copy, "__wrapped__", copy) is method:
                setattr(actor_class, name, wrapper)


def async_status(stamps: list, syncs: list[float], base: int, step: int) -> dict[str, float]:
    """Staleness of the samples trained at `step`: the trainer is at version `step`; a sample generated
    from `start` holds version base + (broadcasts completed by then). A sample is partial when a broadcast
    completed while it was being generated (only possible with --train.partial_rollout_enable)."""
    known = [s for s in stamps if s is not None]
    if not known:
        return {}
    staleness, partial = [], 0
    for start, end, _idle in known:
        held = bisect.bisect_right(syncs, start)
        staleness.append(step - (base + held))
        partial += bisect.bisect_right(syncs, end) > held
    return {
        STALENESS_MEAN: sum(staleness) / len(staleness),
        STALENESS_MAX: float(max(staleness)),
        ROLLOUT_IDLE: max(idle for _s, _e, idle in known),
        PARTIAL: float(partial),
    }
