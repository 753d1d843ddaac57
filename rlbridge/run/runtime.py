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
from rlbridge.errors import RLBridgeError
from rlbridge.run.sinks import RunSinks


class NonFiniteError(RLBridgeError):
    """A metric was NaN or infinite for training.nonfinite_steps consecutive steps (on_nonfinite: fail)."""


class RunContext:
    def __init__(
        self, config: RunConfig, plan: Plan, run_dir: Path, plugins, sinks: RunSinks | list[Any], progress=None
    ):
        self.config = config
        self.plan = plan
        self.run_dir = Path(run_dir)
        self.plugins = plugins
        self.sinks = sinks if isinstance(sinks, RunSinks) else RunSinks([(f"sink#{i}", s) for i, s in enumerate(sinks)])
        self.progress = progress
        self.steps_done = 0
        self.steps_emitted = 0  # rows written by this process, restarts included (the hang watchdog counts them)
        self.step_times: list[float] = []  # time.monotonic() of each of those rows: the watchdog's step intervals
        self.history: list[dict[str, float]] = []
        self.checkpoints: list[dict[str, Any]] = []
        self.evals: list[dict[str, float]] = []  # evaluations on data.eval (emit_eval)
        self.started = time.time()
        self.engine_version: str | None = None  # reported by an engine process in another environment
        self._metrics_fh = open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8")
        self._native_fh = open(self.run_dir / "native_metrics.jsonl", "a", encoding="utf-8")
        self._samples_fh = open(self.run_dir / "samples.jsonl", "a", encoding="utf-8")
        self.nonfinite_steps: list[int] = []  # steps with a NaN or infinite canonical metric
        self._nonfinite_streak = 0
        self._resuming = bool(config.checkpoint.resume)  # rows after the checkpoint are rewritten
        self._restart: dict[str, Any] | None = None  # marks the first row a restarted engine writes
        self.engine_process = None  # the engine's subprocess.Popen when it runs in a process of its own

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
        if self._resuming:
            self._resuming = False
            self._drop_rows_from(step)
        clean = canonical.clean(metrics)
        bad = canonical.nonfinite(clean)
        # strict JSON: a non-finite value is written as null and named in "nonfinite"
        row: dict[str, Any] = {"step": step, **{k: (None if k in bad else v) for k, v in clean.items()}}
        if bad:
            row["nonfinite"] = bad
        if self._restart is not None:  # the first step after a restart says so, with its cause
            row["restart"], self._restart = self._restart, None
        self._metrics_fh.write(json.dumps(row, allow_nan=False) + "\n")
        self._metrics_fh.flush()
        if native is not None:
            safe = {k: (v if math.isfinite(v) else None) for k, v in canonical.numbers(native).items()}
            self._native_fh.write(json.dumps({"step": step, **safe}, allow_nan=False) + "\n")
            self._native_fh.flush()
        self.steps_done = step
        self.step_times.append(time.monotonic())  # before the count: the watchdog reads the count first
        self.steps_emitted += 1
        self.history.append({"step": step, **canonical.finite(clean)})  # summary and plot: finite values
        rows = [_row(s) for s in (samples or [])[: self.config.telemetry.samples_per_step]]
        for sample in rows:
            self._samples_fh.write(json.dumps({"step": step, **sample}) + "\n")
        self._samples_fh.flush()
        totals = [float(r) for r in rewards or [] if r is not None and math.isfinite(r)]
        safe_native = {
            k: float(v)
            for k, v in (native or {}).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        }
        hook = {"step": step, "metrics": clean, "native": safe_native, "samples": rows, "rewards": totals}
        self.sinks.call("rlbridge_step_end", **hook)  # sinks first: they never raise, and get every written step
        self.plugins.hook.rlbridge_step_end(**hook)
        if self.progress is not None:
            self.progress.update(step, clean)
        self._nonfinite_policy(step, bad)
        return clean

    def _nonfinite_policy(self, step: int, bad: list[str]) -> None:
        """training.on_nonfinite: warn on every such step; fail once nonfinite_steps come in a row."""
        if not bad:
            self._nonfinite_streak = 0
            return
        self.nonfinite_steps.append(step)
        self._nonfinite_streak += 1
        training = self.config.training
        names = ", ".join(bad)
        if training.on_nonfinite == "fail" and self._nonfinite_streak >= training.nonfinite_steps:
            raise NonFiniteError(
                f"training.on_nonfinite: step {step} had non-finite {names} ({self._nonfinite_streak} consecutive "
                f"step(s), limit training.nonfinite_steps={training.nonfinite_steps}); find the cause (learning rate, "
                "a reward plugin, the data) or set training.on_nonfinite=warn to record it and go on"
            )
        self.warn(
            f"step {step}: non-finite {names} (null in metrics.jsonl; training.on_nonfinite={training.on_nonfinite})"
        )

    def restarted(self, plan: Plan, restart: dict[str, Any]) -> None:
        """The engine starts again (training.max_restarts) from its last complete checkpoint: its first
        step replaces that step and later ones, and its row carries the restart's number and cause."""
        self.plan = plan
        self._resuming = True
        self._restart = {"n": restart["n"], "kind": restart["kind"], "process": restart["process"]}

    def _drop_rows_from(self, step: int) -> None:
        """A resumed run starts again at `step` (the one after its checkpoint): the rows a killed run
        wrote for that step and later (and a torn last line) are dropped, so that each step is in
        metrics.jsonl once, as the run that counts computed it."""
        for attr, name in (
            ("_metrics_fh", "metrics.jsonl"),
            ("_native_fh", "native_metrics.jsonl"),
            ("_samples_fh", "samples.jsonl"),
        ):
            getattr(self, attr).close()
            path = self.run_dir / name
            kept = []
            for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
                try:
                    if int(json.loads(line)["step"]) < step:
                        kept.append(line)
                except (ValueError, KeyError, TypeError):
                    continue
            tmp = path.with_name(f".{name}.tmp")
            tmp.write_text("".join(k + "\n" for k in kept), encoding="utf-8")
            tmp.replace(path)
            setattr(self, attr, open(path, "a", encoding="utf-8"))
        # what this process recorded of those steps goes too (a restart in the same run)
        self.history = [row for row in self.history if row["step"] < step]
        self.nonfinite_steps = [s for s in self.nonfinite_steps if s < step]

    def warn(self, message: str) -> None:
        """A warning on the console, above the progress bar when there is one."""
        if self.progress is not None and hasattr(self.progress, "warn"):
            self.progress.warn(message)
        else:
            from rlbridge.run.engine_log import console_stream  # the console, also while an engine runs here

            console_stream().write(f"warning: {message}\n")
            console_stream().flush()

    def emit_eval(self, step: int, metrics: dict[str, Any]) -> dict[str, float]:
        """Record one evaluation on data.eval after training step `step`: its canonical eval/... metrics
        go to eval_metrics.jsonl (metrics.jsonl keeps one row per training step)."""
        clean = canonical.eval_metrics(metrics)
        if clean:
            with open(self.run_dir / "eval_metrics.jsonl", "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"step": step, **clean}) + "\n")
            self.evals.append({"step": step, **clean})
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
    scores = {
        k: (float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None)
        for k, v in (sample.get("rewards") or {}).items()
    }
    return {
        "prompt": str(sample.get("prompt", "")),
        "completion": str(sample.get("completion", "")),
        "reward": reward,
        "rewards": scores,
    }
