"""Installed in every OpenRLHF process of a run (rlbridge/engine/boot/sitecustomize.py calls install): the version-gated
patches, and a copy of each TensorBoard training log (one per step) into the run's events file."""

from __future__ import annotations

from rlbridge.engine.events import engine_metrics, synced_weights, write_event
from rlbridge.contract.metrics import numbers
from rlbridge.engine.importhooks import when_imported
from rlbridge.engine.patches import apply_from_environment
from rlbridge.engine.ray_placement import report_when_actor
from rlbridge.engine.ray_engine import once

NATIVE_ENV = "RLBRIDGE_OPENRLHF_NATIVE"
PATCH_REPORT_ENV = "RLBRIDGE_OPENRLHF_PATCH_REPORT"


@once
def install() -> None:
    from rlbridge_adapters.openrlhf.patches import PATCHES

    apply_from_environment(PATCHES, NATIVE_ENV, PATCH_REPORT_ENV)
    when_imported("openrlhf.utils.logging_utils", _instrument_logger)
    report_when_actor()  # where Ray placed this process, once it is an actor (rlbridge.engine.ray_placement)
    # after the patches' hooks (registered above), so that it wraps the CPU weight receiver too
    when_imported("openrlhf.trainer.ray.vllm_worker_wrap", _instrument_weight_sync)
    # staleness, idle times and partial rollouts of the async loop (and 0 staleness of the synchronous one)
    from rlbridge_adapters.openrlhf import asynchrony

    when_imported("openrlhf.trainer.ppo_utils.samples_generator", asynchrony.instrument_generator)
    when_imported("openrlhf.trainer.ppo_trainer", asynchrony.instrument_trainer)


def _instrument_weight_sync(module) -> None:
    """The weight-sync seam on the vLLM side: OpenRLHF's broadcast_to_vllm calls each engine's
    WorkerWrap.update_weight once per tensor, with empty_cache=True on the last one. Count tensors
    and bytes in this engine process and report the sync as one event when it ends."""
    wrap = module.WorkerWrap
    original = wrap.update_weight
    if getattr(original, "_rlbridge", False):
        return
    sent = {"bytes": 0, "tensors": 0}

    def update_weight(self, name, dtype, shape, empty_cache=False, *args, **kwargs):
        result = original(self, name, dtype, shape, empty_cache, *args, **kwargs)
        numel = 1
        for size in shape:
            numel *= int(size)
        sent["bytes"] += numel * dtype.itemsize
        sent["tensors"] += 1
        if empty_cache:  # the last tensor of this sync
            write_event(synced_weights(sent["bytes"], sent["tensors"]))
            sent["bytes"] = sent["tensors"] = 0
        return result

    update_weight._rlbridge = True
    wrap.update_weight = update_weight


def _instrument_logger(module) -> None:
    logger = module.TensorboardLogger
    original = logger.log_train
    if getattr(original, "_rlbridge", False):
        return

    def log_train(self, global_step, logs_dict):
        write_event(engine_metrics(global_step, numbers(logs_dict)))
        return original(self, global_step, logs_dict)

    log_train._rlbridge = True
    logger.log_train = log_train
    original_eval = logger.log_eval

    def log_eval(self, global_step, logs_dict):
        write_event(engine_metrics(global_step, numbers(logs_dict), evaluation=True))
        return original_eval(self, global_step, logs_dict)

    logger.log_eval = log_eval
