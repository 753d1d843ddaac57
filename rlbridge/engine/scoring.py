"""The run's reward plugins as seen from inside an engine process: what every reward shim calls."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
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


_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def scoring_executor() -> ThreadPoolExecutor:
    """This process's threads for reward and environment calls made from an engine's event loop: one per
    sample the worker pool can take at once (rollout_workers: max_concurrency, else num_workers, calls of
    batch_size samples). verl's reward loop and OpenRLHF's agent executor await every sample of a batch at
    once; asyncio.to_thread's default executor has min(32, cpus + 4) threads (6 on 2 cores), which would cap
    the samples in flight, and with them a latency-bound reward's concurrency, whatever the pool's size."""
    global _executor
    with _executor_lock:
        if _executor is None:
            from rlbridge.engine.workers import engine_scorer

            threads = min(max(1, engine_scorer().settings.samples_in_flight), 512)  # a bound on idle threads
            _executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rlbridge-scoring")
        return _executor


async def off_the_event_loop(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) in scoring_executor(): what an engine's async reward or agent code awaits instead of
    asyncio.to_thread, so the other samples of its event loop generate and score meanwhile."""
    return await asyncio.get_running_loop().run_in_executor(scoring_executor(), fn, *args)


def reset_scoring_executor() -> None:
    """Forget the threads (reset_engine_scorer calls it: the next scorer may take more samples at once)."""
    global _executor
    with _executor_lock:
        if _executor is not None:
            _executor.shutdown(wait=False)
        _executor = None
