"""TRL's asynchronous rollout worker scores one group at a time, so a reward that waits is serial.

`_AsyncRolloutLoop._score_loop` (trl/experimental/async_grpo/async_rollout_worker.py, TRL 1.16) takes one
finished group from its score queue, awaits `_score_group` (each reward function in a thread) and only then
takes the next. A reward that waits on a remote tool or sandbox (wall time, not CPU) therefore costs its
whole latency per group: 64 samples x ~125 ms is ~8 s per step where rlbridge's synchronous path, with two
reward workers, takes ~4 s (docs/benchmarks.md, "Asynchronous loop"). Its score queue also holds 16 finished
groups, whose policy-version tags age while they wait, so a latency-bound run generated samples only to
drop them as stale.

The patch makes TRL's rollout worker spawn `ConcurrentScoringLoop` (`AsyncRolloutWorker._loop_cls`, the
class the worker pickles by reference into its spawned child, so the child imports this module and runs
this code): up to `score_groups` groups are scored at once, each by TRL's own `_score_group`, and their
samples are pushed to the trainer's queue one group after another (a group's samples stay together).
How many calls of a reward run at once, and how a call's samples are split, is the reward's business
(rlbridge's `SpawnedReward`: rollout_workers.max_concurrency or num_workers calls, of batch_size samples).
rlbridge also sizes the score queue (`score_queue_groups`), which AsyncGRPOConfig does not expose, so that
generation runs no further ahead than max_staleness allows (rlbridge_adapters.trl.asynchrony.rollout_bounds).
Both numbers come from the plan through the environment (RLBRIDGE_TRL_SCORING), which the spawned child
inherits. An upstream limitation (the worker is built for rewards that compute), not a CPU enablement.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from rlbridge.engine.patches import Patch, PatchKind, Target

SCORING_ENV = "RLBRIDGE_TRL_SCORING"
"""JSON {"score_groups": int, "score_queue_groups": int, "threads": int} for the rollout worker's child."""


def scoring_settings() -> dict[str, int]:
    raw = json.loads(os.environ.get(SCORING_ENV) or "{}")
    groups = max(int(raw.get("score_groups", 1)), 1)
    return {
        "score_groups": groups,
        "score_queue_groups": max(int(raw.get("score_queue_groups", 16)), 1),
        "threads": max(int(raw.get("threads", groups)), 1),
    }


def _loop_class():
    """ConcurrentScoringLoop, built on first use: its base class imports TRL (and aiohttp)."""
    if "ConcurrentScoringLoop" in globals():
        return globals()["ConcurrentScoringLoop"]
    import asyncio
    import queue
    from concurrent.futures import ThreadPoolExecutor

    from trl.experimental.async_grpo.async_rollout_worker import _AsyncRolloutLoop, logger

    class _ConcurrentScoringLoop(_AsyncRolloutLoop):
        """TRL's rollout loop with several groups scored at once (see the module docstring)."""

        def __init__(self, **kwargs: Any) -> None:
            settings = scoring_settings()
            kwargs["score_queue_maxsize"] = settings["score_queue_groups"]
            super().__init__(**kwargs)
            self._score_groups = settings["score_groups"]
            self._score_threads = settings["threads"]

        async def _score_loop(self, stop_event: asyncio.Event) -> None:
            # TRL's _score_group awaits each reward function in asyncio's default executor (min(32, cores + 4)
            # threads); groups scored at once need one thread per reward function each
            asyncio.get_running_loop().set_default_executor(
                ThreadPoolExecutor(max_workers=self._score_threads, thread_name_prefix="rlbridge-score")
            )
            push_lock = asyncio.Lock()  # one group's samples reach the trainer's queue together
            scoring: set[asyncio.Task] = set()
            t_idle_start = time.monotonic()
            try:
                while not stop_event.is_set():
                    self._heartbeat_value.value = time.time()
                    for task in [t for t in scoring if t.done()]:
                        scoring.discard(task)
                        if task.exception() is not None:
                            raise task.exception()
                    if len(scoring) >= self._score_groups:
                        await asyncio.wait(scoring, timeout=0.5, return_when=asyncio.FIRST_COMPLETED)
                        continue
                    try:
                        group = await asyncio.wait_for(self._groups_to_score.get(), timeout=0.5)
                    except TimeoutError:
                        continue
                    if group is None:  # the generate loop ended: finish what is being scored
                        if scoring:
                            await asyncio.gather(*scoring)
                        return
                    score_idle = time.monotonic() - t_idle_start
                    if score_idle > 0.5:
                        logger.info(f"[score] waited {score_idle:.1f}s for a group to score")
                    scoring.add(asyncio.create_task(self._score_and_push(group, stop_event, push_lock)))
                    t_idle_start = time.monotonic()
            finally:
                for task in scoring:
                    task.cancel()

        async def _score_and_push(self, group, stop_event: asyncio.Event, push_lock: asyncio.Lock) -> None:
            """TRL's body of one _score_loop iteration, for one group: score, report, push."""
            wait_scoring = time.monotonic() - group.queued_at
            t0 = time.monotonic()
            samples = await self._score_group(group)
            scoring_time = time.monotonic() - t0
            async with push_lock:
                now = time.monotonic()
                self._push_metrics(
                    {
                        "rollout/score_s": scoring_time,
                        "rollout/score_wait_s": wait_scoring,
                        "rollout/score_queue_size": float(self._groups_to_score.qsize()),
                        "rollout/inflight": float(self._inflight),
                        "rollout/generated_tok_s": (
                            float(self._total_completion_tokens - self._pushed_completion_tokens),
                            now - self._pushed_at,
                        ),
                    }
                )
                self._pushed_completion_tokens = self._total_completion_tokens
                self._pushed_at = now
                self._total_groups_scored += 1
                for sample in samples:
                    t_blocked = None
                    while True:
                        try:
                            sample.enqueued_at = time.time()
                            self.rollout_buffer.put_nowait(sample)
                            break
                        except queue.Full:
                            if stop_event.is_set():
                                return
                            if t_blocked is None:
                                t_blocked = time.monotonic()
                            await asyncio.sleep(0.02)
                    if t_blocked is not None:
                        self._push_metrics({"rollout/backpressure_s": time.monotonic() - t_blocked})

    _ConcurrentScoringLoop.__name__ = _ConcurrentScoringLoop.__qualname__ = "ConcurrentScoringLoop"
    _ConcurrentScoringLoop.__module__ = __name__
    globals()["ConcurrentScoringLoop"] = _ConcurrentScoringLoop
    return _ConcurrentScoringLoop


def __getattr__(name: str):
    # the spawned child unpickles the class as `<this module>.ConcurrentScoringLoop`: built on that first access
    if name == "ConcurrentScoringLoop":
        return _loop_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def use_concurrent_scoring() -> None:
    import importlib

    worker = importlib.import_module("trl.experimental.async_grpo.async_rollout_worker")
    worker.AsyncRolloutWorker._loop_cls = _loop_class()


def _always() -> bool:
    return True


ASYNC_GRPO_CONCURRENT_SCORING = Patch(
    name="trl-async-grpo-concurrent-scoring",
    engine="trl",
    versions=">=1.16,<1.17",  # read in trl 1.16.0's async_rollout_worker.py
    kind=PatchKind.UPSTREAM_BUG,
    fixes="a reward that waits (a remote tool, a sandbox) is scored one group at a time: "
    "trl/experimental/async_grpo/async_rollout_worker.py _AsyncRolloutLoop._score_loop awaits _score_group before "
    "taking the next group (measured: ~8 s per step of 64 samples x ~125 ms, against ~4 s synchronously), and its "
    "score queue of 16 groups lets samples age past max_staleness before they are scored",
    why="score up to score_groups groups at once with TRL's own _score_group, push each group's samples together, "
    "and size the score queue so that generation stays within max_staleness of the trainer",
    probe=_always,  # TRL 1.16's _score_loop is serial by construction (the fingerprint says when it changes)
    apply=use_concurrent_scoring,
    when=lambda native: native.get("trainer") == "AsyncGRPOTrainer",
    targets=(
        Target("trl.experimental.async_grpo.async_rollout_worker", "_AsyncRolloutLoop._score_loop", ("91fb41de5e54",)),
        Target("trl.experimental.async_grpo.async_rollout_worker", "_AsyncRolloutLoop._score_group", ("7563d0723e6b",)),
        Target("trl.experimental.async_grpo.async_rollout_worker", "_AsyncRolloutLoop.__init__", ("769f3a6c43d8",)),
    ),
    diff="""--- a/trl/experimental/async_grpo/async_rollout_worker.py
+++ b/trl/experimental/async_grpo/async_rollout_worker.py
@@ async def _score_loop(self, stop_event: asyncio.Event) -> None:
-            samples = await self._score_group(group)
+            # score up to `max_concurrent_scoring` groups at once (a reward that waits is otherwise serial),
+            # pushing each group's samples together once it is scored
+            task = asyncio.create_task(self._score_group(group))
""",
)
