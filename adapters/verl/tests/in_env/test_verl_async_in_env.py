"""verl's asynchronous loops, end to end on CPU (issue 25): rollout.max_staleness 1 with split placement
runs verl 0.9.1's own one_step_off_policy trainer (OneStepOffRayTrainer: batch n+1 generated on the
rollout pool while batch n trains), its weights moved by rlbridge's file checkpoint engine (verl's need
CUDA), and writes the canonical async metrics. The staleness is read from verl's own per-sample version
tags (min_global_steps / max_global_steps, written by its vLLM server client), never above the bound, and
exactly one version from the second batch on. Placement is read back from Ray: actor and rollout on
disjoint devices. max_staleness 2 with partial rollouts runs its fully_async_main (a rollouter streaming
prompts into a message queue, a trainer taking batches from it), held to two versions."""

import importlib.metadata
import json

import pytest

pytest.importorskip("verl")

from packaging.version import Version

from rlbridge.run.loading import load_config
from rlbridge.run.runner import train
from rlbridge.testing import QUICKSTART

from tests.engines.async_runs import SPLIT_ASYNC_RUN, check_split_async_run

pytestmark = pytest.mark.skipif(
    Version(importlib.metadata.version("verl")) < Version("0.9.1"), reason="rlbridge runs verl's async trainer on 0.9.1"
)


@pytest.mark.engine
def test_one_step_off_run_keeps_staleness_at_one_version(tmp_path):
    run = tmp_path / "run"
    overrides = ["backend=verl", *SPLIT_ASYNC_RUN, "rollout.engine=vllm", f"output_dir={run}"]
    summary = train(load_config(QUICKSTART, overrides), progress=False)
    rows = check_split_async_run(summary, run)
    assert "actor_rollout_ref.hybrid_engine=false" in (run / "verl_overrides.txt").read_text()
    assert "one_step_off_policy.main_ppo" in (run / "plan.yaml").read_text()
    native = [json.loads(line) for line in (run / "native_metrics.jsonl").read_text().splitlines()]
    for row, verl_row in zip(rows, native):
        # the batch it trained, scored by verl (rlbridge's reward stats are of the batch scored meanwhile)
        assert row["reward/mean"] == verl_row["critic/score/mean"]
    assert rows[0]["async/staleness_max"] == 0  # the first batch comes from the initial weights
    # after it, batch n+1 is generated from the weights synced before update n: one version behind
    assert all(r["async/staleness_mean"] == r["async/staleness_max"] == 1 for r in rows[1:]), rows
    # every sync went through rlbridge's file checkpoint engine and the weight-sync seam
    assert not list((run / "weight_sync").glob("*.tmp"))
    events = [json.loads(line) for line in (run / "verl_events.jsonl").read_text().splitlines()]
    synced = [e for e in events if e.get("kind") == "weight_sync"]
    assert len(synced) >= 3 and all(e["bytes"] > 0 for e in synced), synced[:2]


@pytest.mark.engine
def test_fully_async_run_holds_staleness_within_two_versions_plus_the_syncs_a_partial_rollout_spans(tmp_path):
    """max_staleness 2 on fully_async_main: staleness_threshold bounds how far generation runs ahead; a generation
    resumed across syncs keeps its start version (verl's min_global_steps), so on a step with such samples the
    staleness may exceed 2 by the syncs they spanned (verl's fully_async/partial/max_partial_span), and by no more."""
    run = tmp_path / "run"
    steps = 4
    overrides = [
        "backend=verl",
        *SPLIT_ASYNC_RUN,
        f"training.steps={steps}",
        "rollout.max_staleness=2",
        "rollout.partial_rollouts=true",
        "rollout.engine=vllm",
        f"output_dir={run}",
    ]
    summary = train(load_config(QUICKSTART, overrides), progress=False)
    native = [json.loads(line) for line in (run / "native_metrics.jsonl").read_text().splitlines()]
    spans = [n["fully_async/partial/max_partial_span"] for n in native]
    rows = check_split_async_run(summary, run, bound=2, steps=steps, partial=True, spans=spans)
    assert "fully_async_policy.fully_async_main" in (run / "plan.yaml").read_text()
    overrides_text = (run / "verl_overrides.txt").read_text()
    assert "async_training.staleness_threshold=2.0" in overrides_text
    assert f"rollout.total_rollout_steps={steps * 2}" in overrides_text  # the run's prompts, not the yaml's 100
    # one row per training step, from the metrics verl's trainer gave its aggregator (verl's own numbers)
    assert [int(n["training/global_step"]) for n in native] == list(range(1, steps + 1))
    for row, verl_row in zip(rows, native):
        assert row["reward/mean"] == verl_row["critic/score/mean"]
        # rlbridge's partial count and verl's come from the same tags (detach_utils.py)
        assert row["async/partial_rollouts"] == verl_row["fully_async/partial/total_partial_num"]
    assert rows[0]["async/staleness_max"] == 0  # the first batch comes from the initial weights
    # the rollouter ran ahead: a later batch was generated before the weights it trains against
    assert max(r["async/staleness_max"] for r in rows) >= 1, rows
    events = [json.loads(line) for line in (run / "verl_events.jsonl").read_text().splitlines()]
    synced = [e for e in events if e.get("kind") == "weight_sync"]
    assert len(synced) >= steps and all(e["bytes"] > 0 for e in synced), synced[:2]
