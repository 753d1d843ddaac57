"""OpenRLHF's asynchronous loop, end to end on CPU (issue 25): rollout.max_staleness 1 runs OpenRLHF
0.11.2's --train.async_enable with a queue of one batch, writes the canonical async metrics, and no
sample trained is more than one policy version old; split placement puts actor and rollout on
disjoint devices (read back from Ray). OpenRLHF tags no policy version, so the version
is the number of weight broadcasts its trainer had completed when the sample's generation started
(rlbridge_adapters.openrlhf.asynchrony, measured in its own generate_samples and train_step)."""

import pytest

from rlbridge.run.loading import load_config
from rlbridge.run.runner import train
from rlbridge.testing import QUICKSTART

from tests.engines.async_runs import SPLIT_ASYNC_RUN, check_split_async_run
from .openrlhf_runtime import require_openrlhf_runtime

require_openrlhf_runtime()


@pytest.mark.engine
def test_async_run_keeps_staleness_within_the_bound(tmp_path):
    run = tmp_path / "run"
    summary = train(
        load_config(QUICKSTART, ["backend=openrlhf", *SPLIT_ASYNC_RUN, f"output_dir={run}"]), progress=False
    )
    rows = check_split_async_run(summary, run)
    plan = (run / "plan.yaml").read_text()
    assert "--train.async_enable" in plan and "--train.async_queue_size" in plan
    assert rows[0]["async/staleness_max"] == 0  # the first batch comes from the initial weights
    # after it, the generator takes the slot the trainer frees before it trains: each batch starts from
    # the weights one step behind the ones it trains (the async loop really overlapped)
    assert all(r["async/staleness_max"] == 1 for r in rows[1:]), rows
