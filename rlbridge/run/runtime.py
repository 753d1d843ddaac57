"""The run context: what a backend talks to while it trains.

It writes metrics.jsonl (canonical names, one object per step), native_metrics.jsonl (the
engine's raw names, so nothing is lost) and samples.jsonl (a few scored rows per step), calls the
lifecycle hooks on the plugins and then on the run's telemetry sinks (rlbridge.run.sinks), and
drives the progress bar.
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
from rlbridge.run.sinks import RunSinks


class RunContext:
    def __init__(self, config: RunConfig, plan: Plan, run_dir: Path, plugins, sinks: RunSinks | list[Any], progress=None):
        self.config = config
        self.plan = plan
        self.run_dir = Path(run_dir)
        self.plugins = plugins
        self.sinks = sinks if isinstance(sinks, RunSinks) else RunSinks([(f"sink#{i}", s) for i, s in enumerate(sinks)])
        self.progress = progress
        self.steps_done = 0
        self.history: list[dict[str, float]] = []
        self.checkpoints: list[dict[str, Any]] = []
        self.started = time.time()
        self.engine_version: str | None = None  # reported by an engine process in another environment
        self._metrics_fh = open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8")
        self._native_fh = open(self.run_dir / "native_metrics.jsonl", "a", encoding="utf-8")
        self._samples_fh = open(self.run_dir / "samples.jsonl", "a", encoding="utf-8")

    @property
    def total_steps(self) -> int | None:
        return self.config.training.steps

    def emit_step(
        self,
        step: int,
        metrics: dict[str, Any],
        native: dict[str, Any] | None = None,
        samples: list[dict[str, Any]] | None = None,
        rewards: list[float] | None = None,
    ) -> dict[str, float]:
        """Record one training step. `metrics` may hold any names; only canonical ones are kept.
        `samples` are rows scored in the step (the first `telemetry.samples_per_step` are kept),
        `rewards` every sample's total reward."""
        clean = canonical.clean(metrics)
        self._metrics_fh.write(json.dumps({"step": step, **clean}) + "\n")
        self._metrics_fh.flush()
        if native is not None:
            safe = {k: v for k, v in native.items() if isinstance(v, (int, float)) and math.isfinite(v)}
            self._native_fh.write(json.dumps({"step": step, **safe}) + "\n")
            self._native_fh.flush()
        self.steps_done = step
        self.history.append({"step": step, **clean})
        rows = [_row(s) for s in (samples or [])[: self.config.telemetry.samples_per_step]]
        for sample in rows:
            self._samples_fh.write(json.dumps({"step": step, **sample}) + "\n")
        self._samples_fh.flush()
        totals = [float(r) for r in rewards or [] if r is not None and math.isfinite(r)]
        safe_native = {k: float(v) for k, v in (native or {}).items()
                       if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
        hook = {"step": step, "metrics": clean, "native": safe_native, "samples": rows, "rewards": totals}
        self.sinks.call("rlbridge_step_end", **hook)  # sinks first: they never raise, and get every written step
        self.plugins.hook.rlbridge_step_end(**hook)
        if self.progress is not None:
            self.progress.update(step, clean)
        return clean

    def checkpoint_saved(self, step: int, path: str) -> None:
        self.checkpoints.append({"step": step, "path": str(path)})
        self.sinks.call("rlbridge_checkpoint_saved", step=step, path=str(path))
        self.plugins.hook.rlbridge_checkpoint_saved(step=step, path=str(path))

    def close(self) -> None:
        self._metrics_fh.close()
        self._native_fh.close()
        self._samples_fh.close()


def _row(sample: dict[str, Any]) -> dict[str, Any]:
    """One samples.jsonl row: text as text, reward as a float (None when not finite)."""
    reward = sample.get("reward")
    reward = float(reward) if isinstance(reward, (int, float)) and math.isfinite(reward) else None
    scores = {k: (float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None) for k, v in (sample.get("rewards") or {}).items()}
    return {"prompt": str(sample.get("prompt", "")), "completion": str(sample.get("completion", "")), "reward": reward, "rewards": scores}
