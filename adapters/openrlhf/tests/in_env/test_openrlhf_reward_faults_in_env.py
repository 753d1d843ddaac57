"""Reward faults through OpenRLHF's reward shim (rlbridge's RewardExecutor, a subclass of OpenRLHF's
own SingleTurnAgentExecutor), in the OpenRLHF environments: a plugin that raises, returns NaN or the
wrong number of scores costs its sample (reward 0) and is counted in the events the launcher turns
into reward/* metrics; the healthy plugin still scores it. And every sample OpenRLHF awaits at once
reaches the worker pool at once. Generation is stubbed (OpenRLHF's executor needs a vLLM engine); the
scoring path after it is OpenRLHF's class and rlbridge's shim."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from .openrlhf_runtime import require_openrlhf_runtime  # noqa: E402

require_openrlhf_runtime()

from openrlhf.utils.agent import SingleTurnAgentExecutor  # noqa: E402

from rlbridge.engine import workers  # noqa: E402
from rlbridge.engine.events import EVENTS_ENV, REWARDS_ENV  # noqa: E402
from rlbridge.engine.workers import reset_engine_scorer  # noqa: E402


def raises():
    def reward(inputs):
        raise ValueError("openrlhf-side plugin bug")

    return reward


def nan_scores():
    return lambda inputs: [float("nan")] * len(inputs)


def one_score():
    return lambda inputs: [1.0, 2.0]


def length():
    return lambda inputs: [float(len(x.completion_ids)) for x in inputs]


@pytest.mark.parametrize("fn,outcome", [(raises, "errors"), (nan_scores, "nonfinite"), (one_score, "invalid")])
def test_reward_executor_zeroes_and_counts_a_faulty_plugin(tmp_path, monkeypatch, fn, outcome):
    from rlbridge_adapters.openrlhf.reward import RewardExecutor
    from rlbridge_plugins.models import build_tokenizer

    events = tmp_path / "events.jsonl"
    specs = [
        {"name": f.__name__, "weight": 1.0, "args": {}, "factory": f"{__name__}:{f.__name__}"} for f in (length, fn)
    ]
    monkeypatch.setenv(REWARDS_ENV, json.dumps(specs))
    monkeypatch.setenv(EVENTS_ENV, str(events))
    monkeypatch.setenv(workers.WORKERS_ENV, json.dumps({"timeout_s": 5, "error_threshold": 1.0}))
    reset_engine_scorer()
    tok = build_tokenizer()
    ids = tok("1111", add_special_tokens=False)["input_ids"] + tok("11112", add_special_tokens=False)["input_ids"]

    async def generated(self, *args, **kwargs):  # what OpenRLHF's executor returns after vLLM generated 5 tokens
        return {"observation_tokens": ids, "action_ranges": [(4, 9)]}

    monkeypatch.setattr(SingleTurnAgentExecutor, "execute", generated)
    label = json.dumps({"prompt": "1111", "answer": "1", "row": {"prompt": "1111"}})
    try:
        out = asyncio.run(RewardExecutor().execute("1111", label, None, 16, tok, None))
    finally:
        reset_engine_scorer()
    assert out["reward"] == 5.0 and out["extra_logs"][fn.__name__] == 0.0
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    assert [e["counts"] for e in lines if e["kind"] == "reward_faults"] == [{outcome: 1}]
    assert any(e["kind"] == "reward_fault" and e["plugin"] == fn.__name__ for e in lines)


def waits_a_second():
    def reward(inputs):  # a remote judge: the wait is per call, whatever the number of samples in it
        time.sleep(1.0)
        return [1.0] * len(inputs)

    return reward


def test_reward_executor_has_every_sample_of_a_batch_in_flight_at_once(tmp_path, monkeypatch):
    """OpenRLHF's vLLM actor gathers the execute of every prompt it generates (generate_responses); each sample
    must reach the worker pool then, or a latency-bound reward's waits queue behind the few threads of asyncio's
    default executor (6 on 2 cores): 16 samples of a 1 s reward on one worker are one call, not three."""
    from rlbridge_adapters.openrlhf.reward import RewardExecutor
    from rlbridge_plugins.models import build_tokenizer

    monkeypatch.setenv(
        REWARDS_ENV, json.dumps([{"name": "waits", "weight": 1.0, "args": {}, "factory": f"{__name__}:waits_a_second"}])
    )
    monkeypatch.setenv(EVENTS_ENV, str(tmp_path / "events.jsonl"))
    monkeypatch.setenv(
        workers.WORKERS_ENV, json.dumps({"num_workers": 1, "batch_size": 16, "batch_wait_ms": 500, "timeout_s": 30})
    )
    reset_engine_scorer()
    tok = build_tokenizer()
    ids = tok("1111", add_special_tokens=False)["input_ids"] + tok("11112", add_special_tokens=False)["input_ids"]

    async def generated(self, *args, **kwargs):
        return {"observation_tokens": ids, "action_ranges": [(4, 9)]}

    monkeypatch.setattr(SingleTurnAgentExecutor, "execute", generated)
    label = json.dumps({"prompt": "1111", "answer": "1", "row": {"prompt": "1111"}})

    async def all_samples():  # as generate_responses: one executor, every prompt's execute gathered
        executor = RewardExecutor()
        return await asyncio.gather(*(executor.execute("1111", label, None, 16, tok, None) for _ in range(16)))

    try:
        workers.engine_scorer()._get_pool()  # the worker starts (spawn, imports) before the clock does
        started = time.monotonic()
        outputs = asyncio.run(all_samples())
        elapsed = time.monotonic() - started
    finally:
        reset_engine_scorer()
    assert [out["reward"] for out in outputs] == [1.0] * 16
    assert elapsed < 2.5, f"16 samples took {elapsed:.1f} s: they reached the one worker in several calls of a second"
