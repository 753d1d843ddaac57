"""The TRL adapter's instrumentation monkeypatches, all in one place.

TRL times generation, reward calls and `_prepare_inputs` with `trl.extras.profiling.ProfilingContext`
but reports those timings only to wandb/mlflow/trackio, not through callbacks. While a run is
active we also add each duration to a dict (keeping TRL's own behaviour), from which the metrics
callback derives the canonical phase timings (generate, reward, old log-prob, reference, weight
sync, update), and counts the bytes and tensors of every weight sync to vLLM. Log-prob passes run inside `_prepare_inputs` (old policy, then reference) are kept
apart, in call order, under "logps_in_prepare".
"""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def profiling_timers(timers: dict[str, float]):
    from trl.extras import profiling

    original = profiling.ProfilingContext._log_metrics
    original_enter = profiling.ProfilingContext.__enter__
    active: list[str] = []

    def enter(self):
        active.append(self.name)
        return original_enter(self)

    def log_metrics(self, duration: float) -> None:
        if active and active[-1] == self.name:
            active.pop()
        name = self.name
        # a log-prob pass inside _prepare_inputs is the old-policy or reference pass (no grad);
        # the one inside compute_loss is the actor's own forward
        if name.endswith("._get_per_token_logps_and_entropies") and any(a.endswith("._prepare_inputs") for a in active):
            timers.setdefault("logps_in_prepare", []).append(duration)
        else:
            timers[name] = timers.get(name, 0.0) + duration
        original(self, duration)

    profiling.ProfilingContext.__enter__ = enter
    profiling.ProfilingContext._log_metrics = log_metrics
    generation = _vllm_generation()
    original_iter = generation._iter_named_params if generation is not None else None

    def iter_named_params(self):
        # the weight-sync seam: every tensor TRL hands vLLM (colocate load_weights or the server's
        # broadcast) passes through this generator once per sync
        from rlbridge.engine.weight_sync import weights_to_send

        for name, tensor in weights_to_send("trl", original_iter(self)):  # a plugin may replace them
            timers["weight_sync.bytes"] = timers.get("weight_sync.bytes", 0.0) + float(
                tensor.numel() * tensor.element_size()
            )
            timers["weight_sync.tensors"] = timers.get("weight_sync.tensors", 0.0) + 1.0
            yield name, tensor

    if generation is not None:
        generation._iter_named_params = iter_named_params
    try:
        yield timers
    finally:
        profiling.ProfilingContext._log_metrics = original
        profiling.ProfilingContext.__enter__ = original_enter
        if generation is not None:
            generation._iter_named_params = original_iter


def _vllm_generation():
    """TRL's vLLM weight-sync owner (trl.generation.vllm_generation.VLLMGeneration, TRL >= 1.x), or
    None where this TRL has none (then it syncs no weights we can see and the metric is absent)."""
    try:
        from trl.generation.vllm_generation import VLLMGeneration
    except ImportError:
        return None
    return VLLMGeneration if hasattr(VLLMGeneration, "_iter_named_params") else None


@contextmanager
def vllm_seed(seed: int):
    """training.seed for TRL's colocated vLLM engine: TRL creates it with seed = process index (the same
    in every run), so its sampling would ignore the user's seed. While a run is active, the `LLM` that
    TRL's vLLM generation builds gets process index + training.seed (tensor-parallel ranks still agree)."""
    try:
        from trl.generation import vllm_generation as module
    except ImportError:
        module = None
    original = getattr(module, "LLM", None)
    if original is None:  # no vLLM here (or a TRL without this module): nothing to seed
        yield
        return

    def seeded_llm(*args, **kwargs):
        kwargs["seed"] = int(kwargs.get("seed") or 0) + seed
        return original(*args, **kwargs)

    module.LLM = seeded_llm
    try:
        yield
    finally:
        module.LLM = original
