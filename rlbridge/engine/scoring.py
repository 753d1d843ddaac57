"""The run's reward plugins as seen from inside an engine process: what every reward shim calls."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from rlbridge.contract.rewards import RewardInput
from rlbridge.engine.events import reward_faults, reward_metrics, write_event


def score_inputs(inputs: list[RewardInput]) -> tuple[list[float], dict[str, list[float | None]]]:
    """Weighted total per input (a plugin's None counts as not applicable) and each plugin's scores,
    through the run's worker pool (rollout_workers: timeouts, fault counts and the on_error policy).
    Thread-safe: async reward loops call it from worker threads, concurrently."""
    from rlbridge.engine.workers import engine_scorer

    scored = engine_scorer().score(inputs)
    if scored.counts:
        write_event(reward_faults(scored.counts))
    if scored.metrics:  # native rewards' extra metrics (verl `score` dicts, OpenRLHF extra_logs)
        write_event(reward_metrics(len(inputs), scored.metrics))
    return scored.totals, scored.per_plugin


async def off_the_event_loop(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) in scoring_executor(): what an engine's async reward or agent code awaits instead of
    asyncio.to_thread, so the other samples of its event loop generate and score meanwhile."""
    from rlbridge.engine.workers import scoring_executor

    return await asyncio.get_running_loop().run_in_executor(scoring_executor(), fn, *args)
