"""OpenRLHF's asynchronous loop, end to end on CPU (issue 25): rollout.max_staleness 1 runs OpenRLHF
0.11.2's --train.async_enable with a queue of one batch, writes the canonical async metrics, and no
sample trained is more than one policy version old; split placement puts actor and rollout on
disjoint devices (read back from Ray). OpenRLHF tags no policy version, so the version
is the number of weight broadcasts its trainer had completed when the sample's generation started
(rlbridge_adapters.openrlhf.asynchrony, measured in its own generate_samples and train_step)."""

import json

import pytest

from rlbridge.run.loading import load_config
from rlbridge.run.runner import train
from rlbridge.testing import QUICKSTART

from .openrlhf_runtime import require_openrlhf_runtime

require_openrlhf_runtime()


@pytest.mark.engine
def test_async_run_keeps_staleness_within_the_bound(tmp_path):
    overrides = [
        "backend=openrlhf",
        "engine_env=current",
        f"output_dir={tmp_path}/run",
        "training.steps=3",
        "training.batch_size=2",
        "algorithm.group_size=4",
        "rollout.max_new_tokens=8",
        "rollout.max_staleness=1",
        # the rollout on a (logical) device of its own: what async overlap needs
        "placement.policy=split",
        "placement.args={rollout_gpus: 1}",
    ]
    summary = train(load_config(QUICKSTART, overrides), progress=False)
    assert summary["status"] == "completed", summary
    plan = (tmp_path / "run" / "plan.yaml").read_text()
    assert "--train.async_enable" in plan and "--train.async_queue_size" in plan
    placement = summary["placement"]  # read back from Ray: actor and rollout on disjoint devices
    assert placement["mismatches"] == [], placement
    actor, rollout = placement["roles"]["actor"]["devices"], placement["roles"]["rollout"]["devices"]
    assert actor and rollout and not set(actor) & set(rollout), placement
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row in rows:
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
        assert row["async/partial_rollouts"] == 0  # no --train.partial_rollout_enable
    assert rows[0]["async/staleness_max"] == 0  # the first batch comes from the initial weights
    # after it, the generator takes the slot the trainer frees before it trains: each batch starts from
    # the weights one step behind the ones it trains (the async loop really overlapped)
    assert all(r["async/staleness_max"] == 1 for r in rows[1:]), rows
