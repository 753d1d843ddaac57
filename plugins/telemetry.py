"""Built-in telemetry sinks. metrics.jsonl is always written by the core; these are extras."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from rlbridge import hookimpl
from rlbridge.contract.registry import TelemetrySinkPlugin


class ConsoleSink:
    """Prints the canonical metrics every `every` steps (for logs where a progress bar is useless)."""

    def __init__(self, run_dir: Path, every: int = 10, keys: list[str] | None = None) -> None:
        self.every = every
        self.keys = keys or ["reward/mean", "loss/policy", "grad_norm", "timing/step_s"]

    def step_end(self, step: int, metrics: dict[str, float]) -> None:
        if step % self.every == 0:
            shown = " ".join(f"{k}={metrics[k]:.4g}" for k in self.keys if k in metrics)
            print(f"step {step}: {shown}", file=sys.stderr, flush=True)


class CsvSink:
    """Writes metrics.csv in the run directory, one row per step (columns from the first step)."""

    def __init__(self, run_dir: Path, filename: str = "metrics.csv") -> None:
        self.path = Path(run_dir) / filename
        self._fh = None
        self._writer = None

    def step_end(self, step: int, metrics: dict[str, float]) -> None:
        if self._writer is None:
            self._fh = open(self.path, "w", newline="", encoding="utf-8")
            self._writer = csv.DictWriter(self._fh, fieldnames=["step", *sorted(metrics)], extrasaction="ignore")
            self._writer.writeheader()
        self._writer.writerow({"step": step, **metrics})
        self._fh.flush()

    def run_end(self, summary: dict) -> None:
        if self._fh:
            self._fh.close()

    run_failed = run_end


@hookimpl
def rlbridge_register_telemetry_sinks():
    return [
        TelemetrySinkPlugin("console", ConsoleSink, "print canonical metrics every N steps (args: every, keys)"),
        TelemetrySinkPlugin("csv", CsvSink, "write metrics.csv in output_dir"),
    ]
