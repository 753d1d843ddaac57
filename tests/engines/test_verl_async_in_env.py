"""verl's asynchronous loop, end to end on CPU (issue 25): rollout.max_staleness 1 with split placement
runs verl 0.9.1's own one_step_off_policy trainer (OneStepOffRayTrainer: batch n+1 generated on the
rollout pool while batch n trains), its weights moved by rlbridge's file checkpoint engine (verl's need
CUDA), and writes the canonical async metrics. The staleness is read from verl's own per-sample version
tags (min_global_steps / max_global_steps, written by its vLLM server client), never above the bound, and
exactly one version from the second batch on. Placement is read back from Ray: actor and rollout on
disjoint devices."""

import importlib.metadata
import json

import pytest

pytest.importorskip("verl")

from packaging.version import Version

from rlbridge.run.loading import load_config
from rlbridge.run.runner import train
from rlbridge.testing import QUICKSTART

pytestmark = pytest.mark.skipif(
    Version(importlib.metadata.version("verl")) < Version("0.9.1"), reason="rlbridge runs verl's async trainer on 0.9.1"
)


@pytest.mark.engine
def test_one_step_off_run_keeps_staleness_at_one_version(tmp_path):
    overrides = [
        "backend=verl",
        "engine_env=current",
        f"output_dir={tmp_path}/run",
        "training.steps=3",
        "training.batch_size=2",
        "algorithm.group_size=4",
        "rollout.max_new_tokens=8",
        "rollout.engine=vllm",
        "rollout.max_staleness=1",
        "placement.policy=split",
        "placement.args={rollout_gpus: 1}",
    ]
    summary = train(load_config(QUICKSTART, overrides), progress=False)
    assert summary["status"] == "completed", summary
    run = tmp_path / "run"
    assert "actor_rollout_ref.hybrid_engine=false" in (run / "verl_overrides.txt").read_text()
    assert "one_step_off_policy.main_ppo" in (run / "plan.yaml").read_text()
    placement = summary["placement"]  # read back from Ray: actor and rollout on disjoint devices
    assert placement["mismatches"] == [], placement
    actor, rollout = placement["roles"]["actor"]["devices"], placement["roles"]["rollout"]["devices"]
    assert actor and rollout and not set(actor) & set(rollout), placement
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    native = [json.loads(line) for line in (run / "native_metrics.jsonl").read_text().splitlines()]
    for row, verl_row in zip(rows, native):
        for name in (
            "async/staleness_mean",
            "async/staleness_max",
            "async/trainer_idle_s",
            "async/rollout_idle_s",
            "async/partial_rollouts",
            "timing/weight_sync_s",
        ):
            assert name in row, (name, row)
        assert 0 <= row["async/staleness_mean"] <= row["async/staleness_max"] <= 1, row
        assert row["async/partial_rollouts"] == 0  # one_step_off finishes every generation before a sync
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
