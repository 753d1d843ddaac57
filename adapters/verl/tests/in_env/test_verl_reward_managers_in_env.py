"""Reward faults through verl's reward managers (the shims verl itself calls), with verl's own
DataProto and the run's tokenizer: a plugin that raises, returns NaN, the wrong number of scores,
or (with the worker pool) hangs, costs its samples and is counted in the events the launcher turns
into reward/* metrics. Runs in the verl environments (translate cells); skips elsewhere."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

pytest.importorskip("verl")

import numpy as np
import torch

from rlbridge.engine import workers
from rlbridge.engine.events import EVENTS_ENV, REWARDS_ENV


def raises():
    def reward(inputs):
        raise ValueError("verl-side plugin bug")

    return reward


def nan_scores():
    return lambda inputs: [float("nan")] * len(inputs)


def one_score():
    return lambda inputs: [1.0]


def hangs():
    def reward(inputs):
        while True:
            pass

    return reward


def length():
    return lambda inputs: [float(len(x.completion_ids)) for x in inputs]


def waits_a_second():
    def reward(inputs):  # a remote judge: the wait is per call, whatever the number of samples in it
        time.sleep(1.0)
        return [1.0] * len(inputs)

    return reward


def _spec(fn):
    return {"name": fn.__name__, "weight": 1.0, "args": {}, "factory": f"{__name__}:{fn.__name__}"}


@pytest.fixture
def env(tmp_path, monkeypatch):
    def configure(*fns, **settings):
        monkeypatch.setenv(REWARDS_ENV, json.dumps([_spec(f) for f in fns]))
        monkeypatch.setenv(EVENTS_ENV, str(tmp_path / "events.jsonl"))
        monkeypatch.setenv(workers.WORKERS_ENV, json.dumps({"timeout_s": 3, "error_threshold": 1.0, **settings}))
        workers.reset_engine_scorer()
        return tmp_path / "events.jsonl"

    yield configure
    workers.reset_engine_scorer()


def _tokenizer():
    from rlbridge_plugins.models import build_tokenizer

    return build_tokenizer()


def _batch(tok, n=4):
    from verl import DataProto

    prompt = torch.tensor([tok.convert_tokens_to_ids("1")] * 4).repeat(n, 1)
    responses = torch.tensor([[tok.convert_tokens_to_ids(c) for c in "1111"] + [tok.pad_token_id] * 2] * n)
    mask = torch.cat([torch.ones(n, 4), torch.ones(n, 4), torch.zeros(n, 2)], dim=1).long()
    return DataProto.from_dict(
        tensors={"prompts": prompt, "responses": responses, "attention_mask": mask},
        non_tensors={
            "reward_model": np.array([{"ground_truth": "1"}] * n, dtype=object),
            "extra_info": np.array([{"rlbridge_row": json.dumps({"prompt": "1111"})}] * n, dtype=object),
        },
    )


def _fault_counts(events):
    counts = {}
    for line in events.read_text().splitlines():
        event = json.loads(line)
        if event["kind"] == "reward_faults":
            for k, v in event["counts"].items():
                counts[k] = counts.get(k, 0) + v
    return counts


@pytest.mark.parametrize("fn,outcome", [(raises, "errors"), (nan_scores, "nonfinite"), (one_score, "invalid")])
def test_legacy_manager_zeroes_and_counts_a_faulty_plugin(env, fn, outcome):
    from rlbridge_adapters.verl.reward_manager import make_legacy_manager

    events = env(length, fn)
    tok = _tokenizer()
    manager = make_legacy_manager()(tok)
    out = manager(_batch(tok), return_dict=True)
    tensor = out["reward_tensor"]
    assert tensor[:, 3].tolist() == [4.0] * 4 and tensor.sum().item() == 16.0  # only the healthy plugin's 4 tokens
    assert out["reward_extra_info"][f"rlbridge/{fn.__name__}"] == [0.0] * 4
    assert _fault_counts(events) == {outcome: 4}
    faults = [
        json.loads(line) for line in events.read_text().splitlines() if json.loads(line)["kind"] == "reward_fault"
    ]
    assert faults and faults[0]["plugin"] == fn.__name__ and '"prompt": "1111"' in faults[0]["row"]


def test_reward_loop_manager_counts_faults_per_sample(env):
    pytest.importorskip("verl.experimental.reward_loop")
    from rlbridge_adapters.verl.reward_manager import make_reward_loop_manager

    events = env(length, raises)
    tok = _tokenizer()
    manager = make_reward_loop_manager().__new__(make_reward_loop_manager())
    manager.tokenizer = tok  # RewardManagerBase's own __init__ wants a full verl config; run_single needs the tokenizer
    batch = _batch(tok, 3)

    async def all_samples():
        return await asyncio.gather(*(manager.run_single(batch[i : i + 1]) for i in range(3)))

    results = asyncio.run(all_samples())
    assert [r["reward_score"] for r in results] == [4.0] * 3
    assert _fault_counts(events) == {"errors": 3}


def test_a_hanging_plugin_costs_one_timeout_in_verl_reward_manager(env):
    pytest.importorskip(
        "pebble", reason="this engine environment predates rlbridge's pebble dependency: rlbridge env create verl"
    )
    from rlbridge_adapters.verl.reward_manager import make_legacy_manager

    events = env(length, hangs, batch_size=4)
    tok = _tokenizer()
    workers.engine_scorer()._get_pool()  # the workers start (spawn, imports) before the clock does
    started = time.monotonic()
    out = make_legacy_manager()(tok)(_batch(tok), return_dict=True)
    assert time.monotonic() - started < 3 + 5  # one timeout (and the replacement's start), not a hang
    assert out["reward_tensor"].sum().item() == 16.0
    assert _fault_counts(events) == {"timeouts": 4}


def test_reward_loop_manager_has_every_sample_of_a_batch_in_flight_at_once(env):
    """verl awaits run_single for all of a batch's samples at once; each must reach the worker pool then, or a
    latency-bound reward's waits queue behind the few threads of asyncio's default executor (6 on 2 cores)."""
    pytest.importorskip("verl.experimental.reward_loop")
    from rlbridge_adapters.verl.reward_manager import make_reward_loop_manager

    env(waits_a_second, num_workers=1, batch_size=16, batch_wait_ms=500, timeout_s=30)
    tok = _tokenizer()
    manager = make_reward_loop_manager().__new__(make_reward_loop_manager())
    manager.tokenizer = tok
    batch = _batch(tok, 16)
    workers.engine_scorer()._get_pool()  # the worker starts (spawn, imports) before the clock does

    async def all_samples():
        return await asyncio.gather(*(manager.run_single(batch[i : i + 1]) for i in range(16)))

    started = time.monotonic()
    results = asyncio.run(all_samples())
    elapsed = time.monotonic() - started
    assert [r["reward_score"] for r in results] == [1.0] * 16
    assert elapsed < 2.5, f"16 samples took {elapsed:.1f} s: they reached the one worker in several calls of a second"
