"""Installed in every OpenRLHF process of a run (rlbridge/engine/boot/sitecustomize.py calls install): the version-gated
patches, and a copy of each TensorBoard training log (one per step) into the run's events file."""

from __future__ import annotations

from rlbridge.engine.events import engine_metrics, synced_weights, write_event
from rlbridge.contract.metrics import numbers
from rlbridge.engine.ray_placement import report_when_actor
from rlbridge.engine.ray_engine import once
from rlbridge.engine.kit import install_boot, wrap_once

NATIVE_ENV = "RLBRIDGE_OPENRLHF_NATIVE"
PATCH_REPORT_ENV = "RLBRIDGE_OPENRLHF_PATCH_REPORT"


@once
def install() -> None:
    from rlbridge_adapters.openrlhf.patches import PATCHES

    from rlbridge_adapters.openrlhf import asynchrony

    hooks = [
        ("openrlhf.utils.logging_utils", _instrument_logger),
        # after the patches' hooks, so that it wraps the CPU weight receiver too
        ("openrlhf.trainer.ray.vllm_worker_wrap", _instrument_weight_sync),
        # staleness, idle times and partial rollouts of the async loop (and 0 staleness of the synchronous one)
        ("openrlhf.trainer.ppo_utils.samples_generator", asynchrony.instrument_generator),
        ("openrlhf.trainer.ppo_trainer", asynchrony.instrument_trainer),
    ]
    install_boot(PATCHES, NATIVE_ENV, PATCH_REPORT_ENV, hooks)
    report_when_actor()  # where Ray placed this process, once it is an actor (rlbridge.engine.ray_placement)


def _instrument_weight_sync(module) -> None:
    """The weight-sync seam on the vLLM side: OpenRLHF's broadcast_to_vllm calls each engine's
    WorkerWrap.update_weight once per tensor, with empty_cache=True on the last one. Count tensors
    and bytes in this engine process and report the sync as one event when it ends."""

    def make(original):
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

        return update_weight

    wrap_once(module.WorkerWrap, "update_weight", make)


def _instrument_logger(module) -> None:
    logger = module.TensorboardLogger

    def make(original):
        def log_train(self, global_step, logs_dict):
            write_event(engine_metrics(global_step, numbers(logs_dict)))
            return original(self, global_step, logs_dict)

        return log_train

    wrap_once(logger, "log_train", make)
    original_eval = logger.log_eval

    def log_eval(self, global_step, logs_dict):
        write_event(engine_metrics(global_step, numbers(logs_dict), evaluation=True))
        return original_eval(self, global_step, logs_dict)

    logger.log_eval = log_eval
