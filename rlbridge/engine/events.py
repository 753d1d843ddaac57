"""The events file engine processes (driver, Ray workers, vLLM) append to, the environment variables
that tell them where it is and which reward plugins the run uses, and the records they write: one
typed kind each, built here and nowhere else, so that every shim writes what the follower
(rlbridge.engine.follower) reads. A leaf of the engine layer: every engine-side module may import it."""

from __future__ import annotations

import json
import os
import statistics
import traceback
from typing import TYPE_CHECKING, Any, Literal, TypedDict

if TYPE_CHECKING:
    from rlbridge.contract.rewards import RewardInput

EVENTS_ENV = "RLBRIDGE_EVENTS"
REWARDS_ENV = "RLBRIDGE_REWARDS"
SAMPLE_ROWS_SENT = 16  # rows with text a batch reward manager sends per call (the run keeps telemetry.samples_per_step)
SAMPLE_TEXT_CHARS = 2000  # events cross process boundaries: a sample's text is capped


def write_event(event: dict) -> None:
    """Append one event line to the run's events file (a no-op outside an rlbridge run)."""
    path = os.environ.get(EVENTS_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as fh:  # one short append per line: safe across processes
        fh.write(json.dumps(event) + "\n")


class EngineMetrics(TypedDict):
    """The engine's own per-step log (kind metrics) or one evaluation it logged (kind eval_metrics)."""

    kind: Literal["metrics", "eval_metrics"]
    step: int
    data: dict[str, float]


class RewardSample(TypedDict, total=False):
    """One scored sample, from a per-sample reward hook or a multi-turn episode's end."""

    kind: Literal["reward_sample"]
    total: float
    plugins: dict[str, float | None]
    prompt: str
    completion: str


class RewardBatch(TypedDict):
    """A batch reward manager's call: statistics, a few rows with text, every sample's total."""

    kind: Literal["reward"]
    train: bool
    stats: dict[str, float]
    samples: list[dict[str, Any]]
    totals: list[float]


class RewardError(TypedDict):
    """A reward or environment call that raised inside an engine process (the run's error report)."""

    kind: Literal["reward_error"]
    error: str
    traceback: str


class WeightSync(TypedDict):
    """One transfer of weights to the rollout engine, measured at the engine's seam."""

    kind: Literal["weight_sync"]
    bytes: int
    tensors: int


def engine_metrics(step: int, data: dict[str, float], evaluation: bool = False) -> EngineMetrics:
    return {"kind": "eval_metrics" if evaluation else "metrics", "step": int(step), "data": data}


def sample_fields(x: RewardInput) -> dict[str, str]:
    """The text of one scored sample, capped."""
    return {"prompt": str(x.prompt)[:SAMPLE_TEXT_CHARS], "completion": str(x.completion)[:SAMPLE_TEXT_CHARS]}


def reward_sample(total: float, plugins: dict[str, float | None], x: RewardInput | None = None) -> RewardSample:
    """One sample's total and each plugin's score; with `x`, its prompt and completion too."""
    return {"kind": "reward_sample", "total": total, "plugins": plugins, **(sample_fields(x) if x is not None else {})}


def reward_batch(
    inputs: list[RewardInput], totals: list[float], per_plugin: dict[str, list[float | None]], train: bool
) -> RewardBatch:
    rows = [
        {**sample_fields(x), "reward": totals[i], "rewards": {k: v[i] for k, v in per_plugin.items()}}
        for i, x in enumerate(inputs[:SAMPLE_ROWS_SENT])
    ]
    return {
        "kind": "reward",
        "train": train,
        "stats": reward_stats(totals, per_plugin),
        "samples": rows,
        "totals": list(totals),
    }


def reward_stats(totals: list[float], per_plugin: dict[str, list[float | None]]) -> dict[str, float]:
    out = {"reward/mean": statistics.fmean(totals), "reward/std": statistics.pstdev(totals) if len(totals) > 1 else 0.0}
    for name, values in per_plugin.items():
        present = [v for v in values if v is not None]
        if present:
            out[f"reward/{name}/mean"] = statistics.fmean(present)
    return out


def reward_error(exc: BaseException) -> RewardError:
    """The exception being handled (call it inside `except`): its line and its traceback."""
    return {"kind": "reward_error", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}


def synced_weights(sent_bytes: int, tensors: int) -> WeightSync:
    return {"kind": "weight_sync", "bytes": int(sent_bytes), "tensors": int(tensors)}


def reward_faults(counts: dict[str, int]) -> dict[str, Any]:
    """Reward or environment faults of one call, by outcome (errors, timeouts, ...): the step's
    reward/<outcome> counters."""
    return {"kind": "reward_faults", "counts": counts}


def reward_metrics(n: int, metrics: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The extra metrics native rewards reported over one scoring call of `n` samples (plugin -> name -> mean)."""
    return {"kind": "reward_metrics", "n": n, "metrics": metrics}
