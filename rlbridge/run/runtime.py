"""The run context: what a backend talks to while it trains.

It writes metrics.jsonl (canonical names, one object per step) and native_metrics.jsonl (the
engine's raw names, so nothing is lost), calls the lifecycle hooks and telemetry sinks, and drives
the progress bar.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from rlbridge.contract import metrics as canonical
from rlbridge.contract.backend import Plan
from rlbridge.contract.config import RunConfig


class RunContext:
    def __init__(self, config: RunConfig, plan: Plan, run_dir: Path, plugins, sinks: list[Any], progress=None):
        self.config = config
        self.plan = plan
        self.run_dir = Path(run_dir)
        self.plugins = plugins
        self.sinks = sinks
        self.progress = progress
        self.steps_done = 0
        self.history: list[dict[str, float]] = []
        self.checkpoints: list[dict[str, Any]] = []
        self.started = time.time()
        self.engine_version: str | None = None  # reported by an engine process in another environment
        self._metrics_fh = open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8")
        self._native_fh = open(self.run_dir / "native_metrics.jsonl", "a", encoding="utf-8")

    @property
    def total_steps(self) -> int | None:
        return self.config.training.steps

    def emit_step(self, step: int, metrics: dict[str, Any], native: dict[str, Any] | None = None) -> dict[str, float]:
        """Record one training step. `metrics` may hold any names; only canonical ones are kept."""
        clean = canonical.clean(metrics)
        self._metrics_fh.write(json.dumps({"step": step, **clean}) + "\n")
        self._metrics_fh.flush()
        if native is not None:
            safe = {k: v for k, v in native.items() if isinstance(v, (int, float)) and math.isfinite(v)}
            self._native_fh.write(json.dumps({"step": step, **safe}) + "\n")
            self._native_fh.flush()
        self.steps_done = step
        self.history.append({"step": step, **clean})
        self.plugins.hook.rlbridge_step_end(step=step, metrics=clean)
        for sink in self.sinks:
            if hasattr(sink, "step_end"):
                sink.step_end(step, clean)
        if self.progress is not None:
            self.progress.update(step, clean)
        return clean

    def checkpoint_saved(self, step: int, path: str) -> None:
        self.checkpoints.append({"step": step, "path": str(path)})
        self.plugins.hook.rlbridge_checkpoint_saved(step=step, path=str(path))
        for sink in self.sinks:
            if hasattr(sink, "checkpoint_saved"):
                sink.checkpoint_saved(step, str(path))

    def close(self) -> None:
        self._metrics_fh.close()
        self._native_fh.close()
