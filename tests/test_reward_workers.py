"""The reward worker pool: every fault a plugin can produce is contained, counted with the right
outcome, handled by on_error, logged with the failing row, and never hangs the caller."""

from __future__ import annotations

import json
import math
import os
import time

import pytest

from rlbridge.contract.rewards import RewardInput
from rlbridge.engine.workers import RewardFailure, RewardScorer, Settings, specs_with_factories

# --- reward factories that misbehave (module level: spawned workers import them by path) ---------


def good():
    return lambda inputs: [float(len(x.completion)) for x in inputs]


def raises():
    def reward(inputs):
        raise ValueError("plugin bug on purpose")

    return reward


def hangs():
    def reward(inputs):
        while True:  # CPU-bound: no signal, no await can interrupt it
            pass

    return reward


def hangs_on(word: str = "hang"):
    def reward(inputs):
        if any(word in x.completion for x in inputs):
            while True:
                pass
        return [1.0 for _ in inputs]

    return reward


def exits():
    def reward(inputs):
        os._exit(7)

    return reward


def segfaults():
    def reward(inputs):
        import ctypes

        ctypes.string_at(0)

    return reward


def nan_inf():
    return lambda inputs: [float("nan") if i % 2 == 0 else float("inf") for i, _ in enumerate(inputs)]


def nones():
    return lambda inputs: [None for _ in inputs]


def wrong_length():
    return lambda inputs: [1.0]


def not_numbers():
    return lambda inputs: ["high" for _ in inputs]


def pid():
    return lambda inputs: [float(os.getpid()) for _ in inputs]


def spec(fn, weight=1.0, name=None):
    return {"name": name or fn.__name__, "weight": weight, "args": {}, "factory": f"{__name__}:{fn.__name__}"}


def rows(n, text="abc"):
    return [
        RewardInput(prompt=f"p{i}", completion=f"{text}{i}", completion_ids=[1, 2], answer=str(i)) for i in range(n)
    ]


def scorer(*fns, tmp_path=None, **settings):
    base = {
        "mode": "process",
        "num_workers": 2,
        "timeout_s": 2.0,
        "batch_size": 4,
        "on_error": "zero",
        "error_threshold": 1.0,
    }
    return RewardScorer(
        [spec(f) for f in fns],
        Settings(**{**base, **settings}),
        fault_log=(tmp_path / "faults.jsonl") if tmp_path else None,
    )


# --- tests ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn,outcome",
    [
        (raises, "errors"),
        (hangs, "timeouts"),
        (exits, "crashes"),
        (segfaults, "crashes"),
        (nan_inf, "nonfinite"),
        (wrong_length, "invalid"),
        (not_numbers, "invalid"),
    ],
)
def test_each_fault_is_contained_counted_and_zeroed(fn, outcome, tmp_path):
    with scorer(good, fn, tmp_path=tmp_path) as s:
        s._get_pool()
        started = time.monotonic()
        out = s.score(rows(6))
        took = time.monotonic() - started
        counts = s.take_counts()
        # the good plugin still scores every sample; the faulty one is zeroed
        assert out.per_plugin["good"] == [4.0] * 6
        assert out.per_plugin[fn.__name__] == [0.0] * 6
        assert out.totals == [4.0] * 6
        assert counts[f"reward/{outcome}"] == 6
        assert sum(v for k, v in counts.items() if k != f"reward/{outcome}") == 0
        # a hang costs one timeout per chunk (2 chunks of 4 run in parallel on 2 workers)
        assert took < 2.0 + 3.0
        # the pool still serves after its worker was killed or died
        assert s.score(rows(3)).per_plugin["good"] == [4.0] * 3
        assert s.take_counts()[f"reward/{outcome}"] == 3  # counts are per step: taken, then fresh
    record = json.loads((tmp_path / "faults.jsonl").read_text().splitlines()[0])
    assert record["plugin"] == fn.__name__ and record["outcome"] == outcome
    assert '"prompt": "p0"' in record["row"] and record["error"]


def test_raise_reaches_the_log_with_its_message(tmp_path):
    with scorer(raises, tmp_path=tmp_path) as s:
        s.score(rows(2))
    record = json.loads((tmp_path / "faults.jsonl").read_text().splitlines()[0])
    assert "ValueError: plugin bug on purpose" in record["error"]
    assert "reward(inputs)" in record["error"] or "raise ValueError" in record["error"]  # traceback lines


def test_a_hang_costs_only_its_chunk_and_one_timeout():
    inputs = rows(8)
    inputs[5].completion = "hang here"
    with scorer(hangs_on, batch_size=1, timeout_s=1.5) as s:
        s._get_pool()
        started = time.monotonic()
        out = s.score(inputs)
        took = time.monotonic() - started
    assert out.per_plugin["hangs_on"] == [1.0] * 5 + [0.0] + [1.0] * 2
    assert out.counts == {"timeouts": 1}
    assert took < 1.5 + 2.0


def test_worker_is_replaced_after_a_crash():
    with scorer(pid, exits, num_workers=1) as s:
        before = s.score_plugin("pid", rows(1))[0]
        s.score_plugin("exits", rows(1))
        after = s.score_plugin("pid", rows(1))[0]
    assert before != after and before != os.getpid()


def test_none_for_every_plugin_is_invalid_but_none_next_to_a_score_is_not_applicable():
    with scorer(nones) as s:
        out = s.score(rows(3))
        assert out.counts["invalid"] == 3
    with scorer(good, nones) as s:
        out = s.score(rows(3))
        assert out.counts == {} and out.per_plugin["nones"] == [None] * 3 and out.totals == [4.0] * 3


def test_on_error_skip_leaves_the_score_out():
    with scorer(good, raises, on_error="skip") as s:
        out = s.score(rows(2))
        assert out.per_plugin["raises"] == [None, None] and out.totals == [4.0, 4.0]
    with scorer(raises, on_error="skip") as s:
        out = s.score(rows(2))
        assert out.totals == [0.0, 0.0] and out.counts == {"errors": 2, "skipped": 2}


def test_on_error_fail_stops_with_one_line_naming_plugin_row_and_fix():
    with scorer(raises, on_error="fail") as s, pytest.raises(RewardFailure) as err:
        s.score(rows(2))
    msg = str(err.value)
    assert "reward 'raises'" in msg and "plugin bug on purpose" in msg and '"prompt": "p0"' in msg
    assert "rollout_workers.on_error" in msg and "\n" not in msg


def test_threshold_fails_a_run_whose_reward_is_broken_everywhere():
    with scorer(good, nan_inf, error_threshold=0.25) as s, pytest.raises(RewardFailure, match="error_threshold"):
        for _ in range(3):
            s.score(rows(8))


def test_inline_mode_counts_faults_in_process():
    with scorer(good, raises, wrong_length, mode="inline") as s:
        out = s.score(rows(3))
        assert s._pool is None
    assert out.counts == {"errors": 3, "invalid": 3} and out.totals == [4.0] * 3


MARK = [0.0]


def mark():
    return lambda inputs: [MARK[0] for _ in inputs]


def test_process_mode_uses_other_processes_and_spawn():
    MARK[0] = 1.0  # a forked worker would inherit this; a spawned one imports the module afresh
    try:
        with scorer(pid, mark) as s:
            pids = set(s.score_plugin("pid", rows(8)))
            assert os.getpid() not in pids and len(pids) >= 1
            assert s.score_plugin("mark", rows(2)) == [0.0, 0.0]
    finally:
        MARK[0] = 0.0


def test_specs_with_factories_finds_entry_point_plugins():
    from rlbridge.contract.registry import get_plugin_manager

    specs = specs_with_factories([{"name": "code_tests", "weight": 1.0, "args": {}}], get_plugin_manager())
    assert specs[0]["factory"] == "rlbridge_plugins.code:code_tests" and not specs[0]["inline"]


def test_builtin_string_rewards_are_scored_in_process_without_a_pool():
    """digit_match declares isolate=False (a quick, pure function): in process mode it is scored in
    the engine process and no worker is spawned for it, while its faults are still counted."""
    from rlbridge.contract.registry import get_plugin_manager

    specs = specs_with_factories([{"name": "digit_match", "weight": 1.0, "args": {}}], get_plugin_manager())
    assert specs[0]["factory"] == "rlbridge_plugins.rewards:digit_match" and specs[0]["inline"]
    with RewardScorer(specs, Settings(num_workers=1, batch_wait_ms=3000.0)) as s:
        s.start_in_background()
        x = RewardInput(prompt="7777", completion="7777", completion_ids=[1, 2, 3, 4], answer="7")
        started = time.monotonic()
        assert s.score([x]).totals == [1.0]
        assert time.monotonic() - started < 1.0  # no batch to collect for a pool: no batch_wait_ms wait
        assert s._pool is None
    # a fault is still a fault: digit_key names a metadata field the row lacks (KeyError)
    specs = specs_with_factories(
        [{"name": "digit_match", "weight": 1.0, "args": {"digit_key": "d"}}], get_plugin_manager()
    )
    with RewardScorer(specs, Settings(num_workers=1, on_error="zero")) as s:
        scored = s.score([x])
        assert scored.totals == [0.0] and scored.counts == {"errors": 1} and s._pool is None, scored


def test_engine_processes_score_builtin_string_rewards_without_a_pool(monkeypatch):
    """verl's and OpenRLHF's processes build their scorer from the plain reward specs of the plan
    (RLBRIDGE_REWARDS); the isolate=False declaration holds there too: no worker pool for digit_match
    (a verl 0.9.1 quickstart run had spawned 2 reward workers in its reward-loop worker)."""
    from rlbridge.engine import workers
    from rlbridge.engine.events import REWARDS_ENV

    monkeypatch.setenv(REWARDS_ENV, json.dumps([{"name": "digit_match", "weight": 1.0}]))
    monkeypatch.setenv("RLBRIDGE_ROLLOUT_WORKERS", json.dumps({"num_workers": 1, "batch_wait_ms": 3000.0}))
    workers.reset_engine_scorer()
    try:
        s = workers.engine_scorer()
        s.start_in_background()
        x = RewardInput(prompt="7777", completion="7777", completion_ids=[1, 2, 3, 4], answer="7")
        assert s.score([x]).totals == [1.0]
        assert s._pool is None and s._inline_only == {"digit_match"}
    finally:
        workers.reset_engine_scorer()


def test_totals_are_weighted():
    with RewardScorer([spec(good, 2.0), spec(pid, 0.0)], Settings(mode="inline")) as s:
        assert s.score(rows(2)).totals == [8.0, 8.0]
    assert math.isfinite(1.0)


def sleeper():
    def reward(inputs):
        time.sleep(0.3)
        return [1.0 for _ in inputs]

    return reward


def test_max_concurrency_holds_across_concurrent_calls():
    from concurrent.futures import ThreadPoolExecutor

    with scorer(sleeper, num_workers=2, max_concurrency=1, batch_size=1) as s:
        s._get_pool()
        started = time.monotonic()
        with ThreadPoolExecutor(4) as threads:  # four callers at once, one sample each (verl 0.9's shape)
            list(threads.map(lambda _: s.score(rows(1)), range(4)))
        serial = time.monotonic() - started
    with scorer(sleeper, num_workers=2, batch_size=1) as s:
        s._get_pool()
        started = time.monotonic()
        with ThreadPoolExecutor(4) as threads:
            list(threads.map(lambda _: s.score(rows(1)), range(4)))
        parallel = time.monotonic() - started
    assert serial >= 4 * 0.3 and parallel < serial


def call_size():
    return lambda inputs: [float(len(inputs))] * len(inputs)


def test_small_concurrent_calls_are_scored_as_one_batch():
    from concurrent.futures import ThreadPoolExecutor

    with scorer(call_size, good, batch_size=8, batch_wait_ms=200) as s:
        s._get_pool()
        with ThreadPoolExecutor(6) as threads:
            results = list(threads.map(lambda i: s.score(rows(1, text="x" * i)), range(6)))
        assert [r.per_plugin["good"] for r in results] == [
            [float(i + 1)] for i in range(6)
        ]  # each caller gets its own row back
        assert (
            max(r.per_plugin["call_size"][0] for r in results) > 1
        )  # several one-sample calls went to a worker together
    with scorer(call_size, batch_size=8, batch_wait_ms=0) as s:
        with ThreadPoolExecutor(6) as threads:
            results = list(threads.map(lambda i: s.score(rows(1)), range(6)))
        assert [r.totals for r in results] == [[1.0]] * 6


def waits_a_second():
    def reward(inputs):  # a remote judge: the wait is per call, whatever the number of samples in it
        time.sleep(1.0)
        return [1.0 for _ in inputs]

    return reward


def test_an_event_loop_has_as_many_samples_in_flight_as_the_pool_takes(monkeypatch):
    """What verl's reward loop and OpenRLHF's agent executor do: await one sample's scoring per task, every
    task of a batch at once (rlbridge.engine.scoring.off_the_event_loop). 16 samples of a 1 s reward on one
    worker of batch_size 16 are one call; through asyncio.to_thread (6 threads on 2 cores) they were three."""
    import asyncio

    from rlbridge.engine import workers
    from rlbridge.engine.events import REWARDS_ENV
    from rlbridge.engine.scoring import off_the_event_loop, score_inputs
    from rlbridge.engine.workers import scoring_executor

    monkeypatch.setenv(REWARDS_ENV, json.dumps([spec(waits_a_second)]))
    monkeypatch.setenv(
        workers.WORKERS_ENV, json.dumps({"num_workers": 1, "batch_size": 16, "batch_wait_ms": 500, "timeout_s": 30})
    )
    workers.reset_engine_scorer()
    try:
        workers.engine_scorer()._get_pool()  # the worker starts (spawn, imports) before the clock does
        assert scoring_executor()._max_workers == 16

        async def all_samples():
            return await asyncio.gather(*(off_the_event_loop(score_inputs, rows(1)) for _ in range(16)))

        started = time.monotonic()
        results = asyncio.run(all_samples())
        elapsed = time.monotonic() - started
    finally:
        workers.reset_engine_scorer()
    assert [totals for totals, _ in results] == [[1.0]] * 16
    assert elapsed < 2.5, f"16 samples took {elapsed:.1f} s: they reached the one worker in several calls of a second"


# --- environment steps ------------------------------------------------------------------------------

from rlbridge.contract.environments import Environment, StepResult  # noqa: E402


class CountingEnv(Environment):
    """Counts its steps (state that must come back from the worker); 'hang', 'die', 'nan' misbehave."""

    def __init__(self):
        self.steps = 0

    def reset(self, row, prompt):
        return prompt

    def step(self, action):
        self.steps += 1
        if action == "hang":
            while True:
                pass
        if action == "die":
            os._exit(3)
        if action == "nan":
            return StepResult(float("nan"), False)
        return StepResult(float(self.steps), False, f"pid {os.getpid()}")


class LocalEnv(CountingEnv):
    def __init__(self):
        super().__init__()
        self.lock = __import__("threading").Lock()  # does not pickle: stepped inline


def test_environment_steps_run_in_workers_and_keep_their_state():
    from rlbridge.engine.environment_steps import step_environment

    env = CountingEnv()
    with scorer(timeout_s=2.0) as s:
        first = step_environment(env, "go", s)
        second = step_environment(env, "go", s)
        assert (first.reward, second.reward, env.steps) == (1.0, 2.0, 2)
        assert f"pid {os.getpid()}" != first.feedback  # it ran in a worker
        started = time.monotonic()
        for bad in ("hang", "die", "nan"):
            result = step_environment(env, bad, s)
            assert (result.reward, result.done) == (0.0, True)
        assert time.monotonic() - started < 2.0 + 4.0
        counts = s.take_counts()
        assert (counts["reward/timeouts"], counts["reward/crashes"], counts["reward/nonfinite"]) == (1.0, 1.0, 1.0)
        assert step_environment(env, "go", s).reward == 4.0  # the 'nan' step's state came back; hang/die were lost


def test_an_environment_that_does_not_pickle_is_stepped_inline():
    from rlbridge.engine.environment_steps import step_environment

    env = LocalEnv()
    with scorer() as s:
        result = step_environment(env, "go", s)
    assert result.feedback == f"pid {os.getpid()}" and env.steps == 1


def with_metrics():
    def reward(inputs):
        reward.last_metrics = {"share": sum(x.completion == "hit" for x in inputs) / len(inputs)}
        return [1.0] * len(inputs)

    return reward


def test_extra_metrics_of_a_chunked_call_are_averaged_over_its_samples():
    inputs = rows(6)
    inputs[0].completion = "hit"  # the first chunk of 4 has 1 hit, the second of 2 has none: 1/6 overall
    with scorer(with_metrics, batch_size=4) as s:
        s.score(inputs)
        assert abs(s.last_metrics["with_metrics"]["share"] - 1 / 6) < 1e-9


def test_extra_metrics_travel_with_each_call_and_become_step_metrics(tmp_path, monkeypatch):
    """verl and OpenRLHF have no metric channel for a reward's extra metrics: each scoring call carries
    them (Scored.metrics, also for calls coalesced into one batch), score_inputs writes them as an
    event, and the event follower logs their sample-weighted mean as reward/<plugin>/<key>."""
    import threading

    from rlbridge.engine.follower import EventFollower

    inputs = rows(6)
    inputs[0].completion = "hit"
    with scorer(with_metrics, batch_size=4, batch_wait_ms=2000.0) as s:  # the two calls below: one batch
        assert abs(s.score(inputs).metrics["with_metrics"]["share"] - 1 / 6) < 1e-9
        out: list = [None, None]  # two single-sample calls at once: one batch, its average for each
        calls = [threading.Thread(target=lambda i=i: out.__setitem__(i, s.score([inputs[i]]))) for i in (0, 1)]
        [t.start() for t in calls]
        [t.join() for t in calls]
        assert all(abs(o.metrics["with_metrics"]["share"] - 0.5) < 1e-9 for o in out)

    class Ctx:
        steps: list = []

        def emit_step(self, step, canonical, **kwargs):
            self.steps.append(canonical)

    events = tmp_path / "events.jsonl"
    lines = [
        {"kind": "reward_metrics", "n": 3, "metrics": {"f": {"chars": 4.0}}},
        {"kind": "reward_metrics", "n": 1, "metrics": {"f": {"chars": 0.0}}},
        {"kind": "metrics", "step": 1, "data": {}},
        {"kind": "metrics", "step": 2, "data": {}},
    ]
    events.write_text("".join(json.dumps(e) + "\n" for e in lines))
    follower = EventFollower(events, Ctx(), to_canonical=lambda native, rewards: dict(rewards), is_step=lambda n: True)
    follower.stop.set()
    follower._follow()
    assert Ctx.steps[0]["reward/f/chars"] == 3.0 and "reward/f/chars" not in Ctx.steps[1]


def test_background_start_and_first_call_share_one_pool():
    """start_in_background (the TRL adapter starts the pool while TRL loads the model) and a first call
    that comes before the workers are up wait for the same pool: never a second one."""
    import psutil

    def spawned():  # multiprocessing's spawned workers, not its resource tracker
        return {
            p.pid
            for p in psutil.Process().children()
            if p.status() != psutil.STATUS_ZOMBIE and "spawn_main" in " ".join(p.cmdline())
        }

    before = spawned()  # workers of other tests' pools still shutting down in this process
    with scorer(pid) as s:
        s.start_in_background()
        pids = set(s.score_plugin("pid", rows(8)))  # usually while the background start is still spawning
        s.start_in_background()  # a no-op once the pool exists
        assert os.getpid() not in pids
        workers = spawned() - before
        assert len(workers) == 2, workers  # num_workers of one pool


def test_a_pool_pebble_gives_up_counts_crashes_and_is_replaced():
    """pebble stops a pool for good when a worker dies at a moment its task table does not show: the task fails
    with BrokenProcessPool("All workers expired") and the pool schedules nothing more (seen once in CI, for the
    segfaulting plugin above). Those samples are crashes, and a new pool scores the rest and the next calls."""
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool

    class GaveUp:
        def __init__(self):
            self.scheduled, self.stopped = 0, False

        def schedule(self, fn, args=(), timeout=None):
            if self.scheduled:
                raise RuntimeError("Unexpected error within the Pool")
            self.scheduled += 1
            fut = Future()
            fut.set_exception(BrokenProcessPool("All workers expired"))
            return fut

        def stop(self):
            self.stopped = True

        def join(self, timeout=None):
            pass

    with scorer(good, batch_size=2) as s:
        gave_up = s._pool = GaveUp()
        out = s.score(rows(6))
        assert out.per_plugin["good"] == [0.0, 0.0, 4.0, 4.0, 4.0, 4.0]  # the first chunk's samples, zeroed
        assert s.take_counts()["reward/crashes"] == 2
        assert gave_up.stopped and s._pool is not gave_up
        assert s.score(rows(3)).per_plugin["good"] == [4.0] * 3
