"""What the three engines' asynchronous end-to-end tests share (issue 25): the run (3 steps of 2 prompts x 4
samples, rollout.max_staleness 1, the rollout on a logical device of its own) and the checks every engine's run
must pass: it completed, actor and rollout were read back on disjoint devices, and each step wrote the canonical
async metrics with the staleness within the bound and no partial rollout."""

import json
from pathlib import Path
from typing import Any

SPLIT_ASYNC_RUN = [
    "engine_env=current",
    "training.steps=3",
    "training.batch_size=2",
    "algorithm.group_size=4",
    "rollout.max_new_tokens=8",
    "rollout.max_staleness=1",
    "placement.policy=split",
    "placement.args={rollout_gpus: 1}",
]
ASYNC_METRICS = (
    "async/staleness_mean",
    "async/staleness_max",
    "async/trainer_idle_s",
    "async/rollout_idle_s",
    "async/partial_rollouts",
    "timing/weight_sync_s",
    "reward/mean",
)


def check_split_async_run(
    summary: dict[str, Any],
    run: Path,
    metrics: tuple[str, ...] = ASYNC_METRICS,
    bound: int = 1,
    steps: int = 3,
    partial: bool = False,
    spans: list[float] | None = None,
) -> list[dict]:
    """The shared checks (staleness within `bound`; partial: rollout.partial_rollouts was on; spans: per step, the
    most syncs a partial rollout spanned, by the engine's own count, which its oldest tokens may add to the bound);
    returns metrics.jsonl's rows for the engine's own."""
    assert summary["status"] == "completed", summary
    placement = summary["placement"]  # read back where the engine put them
    assert placement["mismatches"] == [], placement
    actor, rollout = placement["roles"]["actor"]["devices"], placement["roles"]["rollout"]["devices"]
    assert actor and rollout and not set(actor) & set(rollout), placement
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    for i, row in enumerate(rows):
        for name in metrics:
            assert name in row, (name, row)
        assert 0 <= row["async/staleness_mean"] <= row["async/staleness_max"] <= bound + (spans[i] if spans else 0), row
        if not partial:  # partial_rollouts false: every generation finishes before a sync
            assert row["async/partial_rollouts"] == 0
    return rows
