"""The follower of a run's events file (rlbridge.engine.events): it turns what engine processes
(driver, Ray workers, vLLM engines) append into canonical steps, evaluations and checkpoints on the
run context. Imports no engine."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlbridge.engine.events import reward_stats
from rlbridge.helpers import process_tree_rss


class EventFollower(threading.Thread):
    """Follows the events file and emits one canonical step per engine metrics event.

    Events: {"kind": "metrics", "step", "data"} (the engine's per-step log), {"kind": "reward",
    "train", "stats", optional "samples" and "totals"} (batch statistics from a reward manager, with
    a few sampled rows and every sample's total), {"kind": "reward_sample", "total", "plugins",
    optional "prompt", "completion"} (one sample, from per-sample reward hooks), {"kind": "weight_sync",
    "bytes", "tensors"} (one transfer of weights to the rollout engine), {"kind":
    "reward_error", "error"}. The step's sampled rows and reward totals go to `ctx.emit_step` with
    its metrics (samples.jsonl, the sinks' tables and histograms).
    """

    def __init__(
        self,
        path: Path,
        ctx,
        to_canonical: Callable[[dict, dict], dict],
        is_step: Callable[[dict], bool],
        checkpoint_dir: str | None = None,
        checkpoint_glob: str = "global_step*",
        to_eval: Callable[[dict], dict] | None = None,
        checkpoint_complete: Callable[[Path], bool] | None = None,
    ) -> None:
        super().__init__(daemon=True)
        # whether a checkpoint directory is saved to the end (rlbridge.engine.checkpoints): only complete
        # ones are reported, as the checkpoint hook promises, not one the engine is still writing
        self.checkpoint_complete = checkpoint_complete or (lambda path: True)
        self.to_eval = to_eval  # native metrics -> canonical eval/... ones (data.eval), for ctx.emit_eval
        self.path = Path(path)
        self.ctx = ctx
        self.to_canonical = to_canonical
        self.is_step = is_step
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.checkpoint_glob = checkpoint_glob
        self.stop = threading.Event()
        self.rewards: dict[str, float] = {}
        self.samples: list[dict[str, Any]] = []
        self.batch_rows: list[dict[str, Any]] = []  # sampled rows a batch reward manager sent
        self.batch_totals: list[float] = []
        self.reward_errors: list[str] = []
        self.fault_counts: dict[str, int] = {}  # reward faults of the step (rlbridge.engine.workers)
        self.plugin_metrics: dict[str, list[float]] = {}  # "reward/<plugin>/<key>" -> [sum of value x samples, samples]
        # complete checkpoints already there (a resumed run's) were reported by the run that saved them;
        # an incomplete one left by a killed run is reported once this run has saved it again
        self.seen_checkpoints: set[str] = (
            {p.name for p in self.checkpoint_dir.glob(checkpoint_glob) if self.checkpoint_complete(p)}
            if self.checkpoint_dir and self.checkpoint_dir.exists()
            else set()
        )
        self.peak_mb = 0.0
        self.weight_sync: dict[str, int] = {}  # bytes and tensors sent to the rollout engine since the last step
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._follow()
            self._checkpoints()  # one saved after the last step's metrics
        except BaseException as exc:  # surfaced by the caller: the engine is stopped at once
            self.error = exc
            if not self.stop.is_set():
                import _thread

                _thread.interrupt_main()  # the engine runs in the main thread; `following` raises our error

    def _follow(self) -> None:
        while not self.path.exists() and not self.stop.is_set():
            time.sleep(0.2)
        if not self.path.exists():
            return
        sampled = 0.0
        with open(self.path, encoding="utf-8") as fh:
            while True:
                line = fh.readline()
                if line:
                    self._handle(json.loads(line))
                    continue
                if self.stop.is_set():
                    break
                if time.monotonic() - sampled >= 1.0:  # a /proc scan of the whole tree: ms of CPU, once a second
                    self.peak_mb = max(self.peak_mb, process_tree_rss(os.getpid()) / 2**20)
                    sampled = time.monotonic()
                time.sleep(0.2)

    def _handle(self, event: dict[str, Any]) -> None:
        kind = event["kind"]
        if kind == "reward" and event.get("train"):
            self.rewards = event["stats"]
            self.batch_rows += event.get("samples", [])
            self.batch_totals += event.get("totals", [])
        elif kind == "reward_sample":
            self.samples.append(event)
        elif kind == "reward_error":
            self.reward_errors.append(event["error"])
        elif kind == "reward_faults":
            for key, n in event["counts"].items():
                self.fault_counts[key] = self.fault_counts.get(key, 0) + n
        elif kind == "reward_metrics":  # a reward plugin's extra metrics of one scoring call
            for plugin, values in event["metrics"].items():
                for key, value in values.items():
                    acc = self.plugin_metrics.setdefault(f"reward/{plugin}/{key}", [0.0, 0.0])
                    acc[0] += float(value) * event["n"]
                    acc[1] += event["n"]
        elif kind == "weight_sync":  # one transfer of weights to the rollout engine, from the engine's seam
            for key in ("bytes", "tensors"):
                self.weight_sync[key] = self.weight_sync.get(key, 0) + event[key]
        elif kind == "reward_fault":  # the first faults of the run: their error lines and row reach the console
            print(
                f"rlbridge: reward '{event['plugin']}' {event['outcome']} on row {event['row']}:\n{event['error']}",
                file=sys.stderr,
            )
        elif kind == "eval_metrics":  # an evaluation logged on its own (OpenRLHF's log_eval)
            if self.to_eval is not None:
                self.ctx.emit_eval(int(event["step"]), self.to_eval(event["data"]))
        elif kind == "metrics":
            native = event["data"]
            evaluation = self.to_eval(native) if self.to_eval is not None else {}
            if evaluation:  # verl logs validation with the step's metrics
                self.ctx.emit_eval(int(event["step"]), evaluation)
            if not self.is_step(native):
                return  # validation-only logs
            if self.samples:
                names = self.samples[0]["plugins"].keys()
                self.rewards = reward_stats(
                    [s["total"] for s in self.samples], {n: [s["plugins"].get(n) for s in self.samples] for n in names}
                )
            canonical = self.to_canonical(native, self.rewards)
            from rlbridge.engine.workers import COUNTERS

            canonical.update({f"reward/{k}": float(self.fault_counts.get(k, 0)) for k in COUNTERS})
            self.fault_counts = {}
            canonical.update({k: total / n for k, (total, n) in self.plugin_metrics.items() if n})
            self.plugin_metrics = {}
            canonical.update({f"weight_sync/{k}": float(v) for k, v in self.weight_sync.items()})
            self.weight_sync = {}
            if "memory/peak_mb" not in canonical and self.peak_mb:
                canonical["memory/peak_mb"] = self.peak_mb
            rows = self.batch_rows + [sample_row(s) for s in self.samples if "completion" in s]
            totals = self.batch_totals + [s["total"] for s in self.samples]
            self.ctx.emit_step(int(event["step"]), canonical, native=native, samples=rows, rewards=totals)
            self.rewards, self.samples, self.batch_rows, self.batch_totals = {}, [], [], []
            self._checkpoints()

    def _checkpoints(self) -> None:
        if self.checkpoint_dir is None or not self.checkpoint_dir.exists():
            return
        for path in sorted(self.checkpoint_dir.glob(self.checkpoint_glob)):
            if path.name not in self.seen_checkpoints and self.checkpoint_complete(path):
                self.seen_checkpoints.add(path.name)
                digits = "".join(c for c in path.name if c.isdigit())
                self.ctx.checkpoint_saved(int(digits or 0), str(path))


@contextmanager
def following(follower: EventFollower) -> Iterator[EventFollower]:
    """Run the follower while the body runs; afterwards read what is left and raise its error."""
    follower.start()
    try:
        yield follower
    except KeyboardInterrupt:
        if follower.error is None:
            raise
    finally:
        follower.stop.set()
        follower.join(timeout=30)
    if follower.error is not None:
        raise follower.error


def sample_row(event: dict[str, Any]) -> dict[str, Any]:
    """A sampled row as samples.jsonl and the sinks see it: prompt, completion, total reward, and
    each reward plugin's score."""
    return {
        "prompt": event.get("prompt"),
        "completion": event.get("completion"),
        "reward": event["total"] if "total" in event else event.get("reward"),
        "rewards": event.get("plugins", event.get("rewards", {})),
    }
