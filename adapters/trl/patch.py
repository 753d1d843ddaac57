"""The TRL adapter's instrumentation monkeypatches, all in one place.

TRL times generation, reward calls and `_prepare_inputs` with `trl.extras.profiling.ProfilingContext`
but reports those timings only to wandb/mlflow/trackio, not through callbacks. While a run is
active we also add each duration to a dict (keeping TRL's own behaviour), from which the metrics
callback derives timing/generate_s and timing/update_s.
"""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def profiling_timers(timers: dict[str, float]):
    from trl.extras import profiling

    original = profiling.ProfilingContext._log_metrics

    def log_metrics(self, duration: float) -> None:
        timers[self.name] = timers.get(self.name, 0.0) + duration
        original(self, duration)

    profiling.ProfilingContext._log_metrics = log_metrics
    try:
        yield timers
    finally:
        profiling.ProfilingContext._log_metrics = original
