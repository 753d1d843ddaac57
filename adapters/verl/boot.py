"""Installed in every verl process of a run (rlbridge/engine/boot/sitecustomize.py calls install):
version-gated patches, the rlbridge reward manager's registration, and the copy of verl's per-step
metrics into the events file. Everything acts through post-import hooks, so nothing of verl is
imported before verl itself is.
"""

from __future__ import annotations

import os

from rlbridge.engine.events import engine_metrics, write_event
from rlbridge.contract.metrics import numbers
from rlbridge.engine.importhooks import when_imported
from rlbridge.engine.ray_placement import report_when_actor
from rlbridge.engine.ray_engine import once
from rlbridge.engine.weight_sync import Counted, weights_to_send
from rlbridge.engine.kit import install_boot, wrap_once
from rlbridge_adapters.verl import asynchrony

NATIVE_ENV = "RLBRIDGE_VERL_NATIVE"
SEED_ENV = "RLBRIDGE_SEED"  # training.seed, set in the plan's env by the backend
PATCH_REPORT_ENV = "RLBRIDGE_VERL_PATCH_REPORT"


@once
def install() -> None:
    from rlbridge_adapters.verl.patches import PATCHES

    # probes are cheap; each patch waits for its module through a post-import hook
    hooks = [
        ("verl.utils.tracking", _instrument_tracking),
        ("verl.workers.rollout.vllm_rollout.vllm_rollout", _instrument_weight_sync),
        ("verl.workers.reward_manager", _register_reward_manager),
        ("verl.experimental.reward_loop.reward_manager", _register_reward_loop_manager),
        ("verl.experimental.one_step_off_policy.ray_trainer", asynchrony.instrument_one_step_off),
        ("verl.experimental.separation.ray_trainer", asynchrony.instrument_separate_trainer),
        ("verl.experimental.fully_async_policy.detach_utils", asynchrony.instrument_metrics_aggregator),
    ]
    install_boot(PATCHES, NATIVE_ENV, PATCH_REPORT_ENV, hooks)
    report_when_actor()  # where Ray placed this process, once it is an actor (rlbridge.engine.ray_placement)
    if os.environ.get(SEED_ENV):
        when_imported("torch", _seed_process)


def _seed_process(torch) -> None:
    """training.seed for every RNG a verl process draws from without verl seeding it: model init
    (e.g. PPO's value head), the HF rollout's sampling (verl 0.5), numpy and random. verl's own seeds
    (data.seed, data_loader_seed, rollout.seed) are set in the plan."""
    import random

    seed = int(os.environ[SEED_ENV])
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass


def _instrument_tracking(module) -> None:
    tracking = module.Tracking

    def make(original):
        def log(self, data, step, *args, **kwargs):
            # the fully-async trainer's rows are per step (asynchrony.py)
            copied = asynchrony.fully_async_log(data, step)
            if copied is not None:
                write_event(engine_metrics(copied[1], numbers(copied[0])))
            return original(self, data, step, *args, **kwargs)

        return log

    wrap_once(tracking, "log", make)


def _instrument_weight_sync(module) -> None:
    """The weight-sync seam of verl's vLLM rollout: every tensor the trainer hands the rollout passes
    through ServerAdapter.update_weights' `weights` generator (colocated and checkpoint-engine paths
    alike). A `rlbridge_weight_sync` plugin may replace them; what is sent is counted and reported
    as an event of this step."""
    adapter = getattr(module, "ServerAdapter", None)
    if getattr(adapter, "update_weights", None) is None:
        return

    def make(original):
        async def update_weights(self, weights, *args, **kwargs):
            if kwargs.get("wire_format", "named_tensors") != "named_tensors":
                return await original(self, weights, *args, **kwargs)
            if hasattr(weights, "__aiter__"):  # verl's GPU checkpoint engines receive asynchronously, bucket by bucket
                return await original(self, _unchanged_async(weights), *args, **kwargs)
            sent = Counted(weights_to_send("verl", weights))
            try:
                return await original(self, iter(sent), *args, **kwargs)
            finally:
                sent.report()

        return update_weights

    wrap_once(adapter, "update_weights", make)


async def _unchanged_async(weights):
    """The pairs an asynchronous checkpoint engine receives (nccl, nixl: views into a bucket that the next
    one overwrites, so they cannot be collected for a plugin), counted; a `rlbridge_weight_sync` plugin is
    refused here rather than skipped."""
    from rlbridge.contract.registry import get_plugin_manager

    if get_plugin_manager().hook.rlbridge_weight_sync.get_hookimpls():
        raise RuntimeError(
            "rlbridge_weight_sync: verl's checkpoint engine receives the weights asynchronously bucket by bucket, "
            "which the plugin hook (a synchronous iterable of pairs) cannot take; remove the plugin, or use "
            "placement.policy: colocate"
        )
    sent = Counted(())
    async for name, tensor in weights:
        sent.bytes += tensor.numel() * tensor.element_size()
        sent.tensors += 1
        yield name, tensor
    sent.report()


def _register_reward_manager(module) -> None:
    from rlbridge_adapters.verl.reward_manager import REWARD_MANAGER_NAME, make_legacy_manager

    registry = getattr(module, "register", None)
    if registry is None:
        return
    from verl.workers.reward_manager import registry as registry_module

    if REWARD_MANAGER_NAME not in getattr(registry_module, "REWARD_MANAGER_REGISTRY", {}):
        registry(REWARD_MANAGER_NAME)(make_legacy_manager())


def _register_reward_loop_manager(module) -> None:
    from rlbridge_adapters.verl.reward_manager import REWARD_MANAGER_NAME, make_reward_loop_manager

    registry = getattr(module, "register", None)
    if registry is not None:
        try:
            registry(REWARD_MANAGER_NAME)(make_reward_loop_manager())
        except ValueError:
            pass  # already registered in this process
