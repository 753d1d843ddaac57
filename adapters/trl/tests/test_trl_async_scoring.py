"""Issue 25 on TRL: the asynchronous loop scores concurrently. TRL 1.16's rollout worker scores one group at a time,
so a reward that waits (a remote tool, a sandbox) was serial; with the patch (patches/async_grpo_scoring.py) TRL's
own loop scores several groups at once, and rlbridge's reward function (async_run.SpawnedReward) runs at most
rollout_workers.max_concurrency (else num_workers) calls of a plugin at once, each scoring its own samples. The
concurrency is counted with barriers that open only when that many calls wait at once (a serial scorer breaks
them), never timed. The run itself: adapters/trl/tests/in_env/test_trl_async_in_env.py."""

import asyncio
import json
import queue
import threading

import pytest

from rlbridge.run.loading import load_config
from rlbridge.run.runner import prepare
from tests.conftest import QUICKSTART


class Concurrency:
    """Counts calls in flight; `barrier` makes `parties` calls meet (BrokenBarrierError when they cannot)."""

    def __init__(self, parties: int) -> None:
        self.lock = threading.Lock()
        self.now = self.most = 0
        self.barrier = threading.Barrier(parties, timeout=20)

    def __enter__(self):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        self.barrier.wait()
        return self

    def __exit__(self, *exc):
        with self.lock:
            self.now -= 1


def _tokenizer():
    import re

    from transformers import PreTrainedTokenizerFast

    from rlbridge.contract.models import materialize_path

    path = materialize_path("builtin:tiny-digits", "model.path")
    tok = PreTrainedTokenizerFast.from_pretrained(path)
    tok.chat_template = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
    tok.response_template = {
        "defaults": {"role": "assistant"},
        "fields": {"content": {"close_pattern": re.escape(tok.eos_token) + r"\s*", "content": "text"}},
    }
    return path, tok


def test_spawned_reward_runs_max_concurrency_calls_at_once_each_with_its_own_plugin(monkeypatch):
    from rlbridge import hookimpl
    from rlbridge.contract import registry
    from rlbridge_adapters.trl.async_run import SpawnedReward

    tok_dir, tok = _tokenizer()
    calls = Concurrency(3)
    instances = []

    def first_digit():  # a plugin that keeps state between calls: each instance must see one call at a time
        state = {"busy": False}
        instances.append(state)

        def reward(inputs):
            assert not state["busy"], "two calls in flight share one plugin instance"
            state["busy"] = True
            try:
                with calls:
                    return [float(x.completion_ids[0]) for x in inputs]
            finally:
                state["busy"] = False

        return reward

    class Plugin:
        @hookimpl
        def rlbridge_register_rewards(self):
            return [registry.RewardPlugin("first_digit", first_digit, "")]

    pm = registry.PluginManager()
    pm.register(Plugin(), "first_digit")
    monkeypatch.setattr(registry, "get_plugin_manager", lambda: pm)
    reward = SpawnedReward(
        {"name": "first_digit", "weight": 0.5, "args": {}}, 0, "answer", tok_dir, concurrency=3, batch_size=2
    )
    ids = [[100 + i, 7] for i in range(18)]  # 9 calls of 2 samples: three rounds of three at once
    scores = reward([[{"role": "user", "content": "1"}]] * 18, [[]] * 18, ids, answer=["1"] * 18)
    assert scores == [0.5 * (100 + i) for i in range(18)]  # each sample its own score, in its own place
    assert calls.most == 3 and len(instances) == 3  # three calls at once, never more; one plugin per thread


def test_a_sample_that_breaks_the_reward_faults_only_its_own_chunk(monkeypatch, tmp_path):
    """A completion that makes the plugin raise (what a policy can aim for) costs its own chunk of batch_size
    samples under rollout_workers.on_error zero, counted and logged as on the synchronous path; the samples
    scored beside it, in other calls in flight, keep their scores."""
    from rlbridge import hookimpl
    from rlbridge.contract import registry
    from rlbridge.engine.events import EVENTS_ENV
    from rlbridge_adapters.trl.async_run import SpawnedReward

    tok_dir, _ = _tokenizer()

    def picky():
        def reward(inputs):
            if any(x.completion_ids[0] == 666 for x in inputs):
                raise ValueError("cannot parse this completion")
            return [float(x.completion_ids[0]) for x in inputs]

        return reward

    class Plugin:
        @hookimpl
        def rlbridge_register_rewards(self):
            return [registry.RewardPlugin("picky", picky, "")]

    pm = registry.PluginManager()
    pm.register(Plugin(), "picky")
    monkeypatch.setattr(registry, "get_plugin_manager", lambda: pm)
    monkeypatch.setenv(EVENTS_ENV, str(tmp_path / "events.jsonl"))
    reward = SpawnedReward(
        {"name": "picky", "weight": 1.0, "args": {}},
        0,
        "answer",
        tok_dir,
        concurrency=2,
        batch_size=1,
        workers={"on_error": "zero", "error_threshold": 1.0},
        fault_log=str(tmp_path / "faults.jsonl"),
    )
    ids = [[5], [666], [7], [8]]
    assert reward([[{"role": "user", "content": "1"}]] * 4, [[]] * 4, ids, answer=["1"] * 4) == [5.0, 0.0, 7.0, 8.0]
    fault = json.loads((tmp_path / "faults.jsonl").read_text().splitlines()[0])
    assert fault["plugin"] == "picky" and fault["outcome"] == "errors" and "cannot parse" in fault["error"]
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert {"kind": "reward_faults", "counts": {"errors": 1}} in events


def _loop(tok, reward_funcs, monkeypatch, score_groups: int):
    import multiprocessing as mp

    from accelerate.state import PartialState
    from datasets import Dataset

    from rlbridge_adapters.trl.patches.async_grpo_scoring import SCORING_ENV, _loop_class

    monkeypatch.setenv(
        SCORING_ENV, json.dumps({"score_groups": score_groups, "score_queue_groups": 1, "threads": score_groups})
    )
    PartialState()  # as TRL's spawned child does first (its logger needs it)
    ctx = mp.get_context("spawn")
    return _loop_class()(
        model_name="m",
        dataset=Dataset.from_list([{"prompt": [{"role": "user", "content": "1"}]}]),
        reward_funcs=reward_funcs,
        processing_class=tok,
        eos_token_ids=[tok.eos_token_id],
        rollout_buffer=queue.Queue(maxsize=4),
        model_version_value=ctx.Value("i", 0),
        heartbeat_value=ctx.Value("d", 0.0),
        failed_event=ctx.Event(),
        exception_info_queue=ctx.Queue(maxsize=1),
        metrics_queue=queue.Queue(),
        num_generations=4,
    )


def test_patched_rollout_loop_scores_several_groups_at_once_and_keeps_each_groups_samples_together(monkeypatch):
    pytest.importorskip("trl.experimental.async_grpo")
    from trl.experimental.async_grpo.async_rollout_worker import RolloutGroup, TrainingSequence

    _, tok = _tokenizer()
    calls = Concurrency(3)

    def own_id(prompts, completions, completion_ids, **kwargs):  # a reward that waits until 3 groups wait with it
        with calls:
            return [float(ids[0]) for ids in completion_ids]

    loop = _loop(tok, [own_id], monkeypatch, score_groups=3)
    groups = []
    for g in range(6):
        ids = [[10 * g + i] for i in range(4)]
        groups.append(
            RolloutGroup(
                prompts=[[{"role": "user", "content": "1"}]] * 4,
                reward_kwargs={},
                completions=[[]] * 4,
                completions_ids=ids,
                completions_sequences=[[TrainingSequence(x, [1], [0.0], str(x))] for x in ids],
                tool_call_counts=[0] * 4,
                tool_failure_counts=[0] * 4,
                model_version=0,
                group_id=g,
                env_rewards=[],
                rollout_rewards=[None] * 4,
            )
        )
    pushed = []

    async def run():
        stop = asyncio.Event()

        async def feed():
            for group in groups:
                await loop._groups_to_score.put(group)
            await loop._groups_to_score.put(None)

        async def drain():  # the trainer taking samples from its queue (4 places: back-pressure is exercised)
            while len(pushed) < 24:
                try:
                    pushed.append(loop.rollout_buffer.get_nowait())
                except queue.Empty:
                    await asyncio.sleep(0.005)

        await asyncio.wait_for(asyncio.gather(feed(), loop._score_loop(stop), drain()), timeout=60)

    loop._loop.run_until_complete(run())
    assert calls.most == 3  # three groups scored at once (TRL's own loop: one)
    for sample in pushed:  # each sample keeps its own reward
        assert sample.metrics["reward"] == float(sample.input_ids[0])
    order = [s.group_id for s in pushed]
    assert sorted(order) == sorted(g for g in range(6) for _ in range(4))
    assert all(order[i] == order[i - i % 4] for i in range(24)), order  # a group's 4 samples arrive together


def test_the_async_plan_bounds_generation_ahead_by_max_staleness():
    from rlbridge_adapters.trl.asynchrony import rollout_bounds
    from rlbridge_adapters.trl.patches.async_grpo_scoring import SCORING_ENV

    for staleness, concurrency in [(1, 2), (2, 2), (1, 4), (3, 1)]:
        b = rollout_bounds(staleness, 64, 8, concurrency, 32)
        ahead = b["max_inflight_tasks"] + b["queue_maxsize"] + 8 * (b["score_groups"] + b["score_queue_groups"])
        assert ahead == staleness * 64, (staleness, b)  # every part in whole groups, the sum exactly k versions
        assert b["score_groups"] == concurrency  # a group is one call
    # a group of 8 is 8 calls of one sample: 2 groups keep 8 calls busy while a group's slowest call finishes, and
    # the other slots go to generation (scoring 6 groups here left one group of 8 requests generating)
    assert rollout_bounds(1, 64, 8, 8, 1) == {
        "max_inflight_tasks": 24,
        "queue_maxsize": 16,
        "score_groups": 2,
        "score_queue_groups": 1,
    }
    assert rollout_bounds(1, 64, 8, 8, 3)["score_groups"] == 4  # 3 calls a group: 8 + 2 calls are 4 groups
    assert rollout_bounds(1, 8, 4, 2, 32) == {
        "max_inflight_tasks": 4,
        "queue_maxsize": 4,
        "score_groups": 1,
        "score_queue_groups": 1,
    }  # floors: one group each
    settings = prepare(
        load_config(
            QUICKSTART,
            [
                "resources.gpus_per_node=0",
                "rollout.max_staleness=1",
                "placement.policy=split",
                "placement.args={rollout_gpus: 1}",
                "rollout_workers.max_concurrency=3",
                "rollout_workers.batch_size=4",
                "training.batch_size=16",
            ],
        )
    ).plan.native
    # 16 prompts x 8 samples = 128 per version; a group is 2 calls of 4 samples, so 2 groups keep 3 calls busy
    # (3 + 1 calls): 2 groups scored at once, 1 waiting, 6 queued, 7 in flight
    assert settings["args"]["max_inflight_tasks"] == 56 and settings["args"]["queue_maxsize"] == 48
    assert settings["scoring"] == {
        "concurrency": 3,
        "batch_size": 4,
        "workers": {"on_error": "zero", "error_threshold": 0.5},
    }
    assert json.loads(settings["env"][SCORING_ENV]) == {"score_groups": 2, "score_queue_groups": 1, "threads": 2}
    assert settings["server"]["max_num_seqs"] == 56
