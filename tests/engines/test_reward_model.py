"""GRPO with a locally built reward model as the only reward, end to end in the engine's environment
(verl 0.9.1, OpenRLHF 0.11.2), scored by the engine's own reward-model path: verl's reward loop with
the model served by vLLM (reward.reward_model.*), OpenRLHF's reward-model actors
(--reward.model_name_or_path). TRL's run is tests/test_knobs_plan.py::
test_trl_grpo_with_a_reward_model_as_the_only_reward. It runs in those engines' environments
(make compat) and skips elsewhere."""

import json
import math

import pytest
import yaml

from rlbridge.run.loading import load_config
from rlbridge.run.runner import train

from . import proven_backend_here


CONFIG = """\
model: {path: builtin:tiny-digits}
reward: [{model: 'builtin:tiny-reward'}]
algorithm: {name: grpo, group_size: 2}
training: {steps: 2, batch_size: 2, lr: 1.0e-3}
rollout: {max_new_tokens: 8}
resources: {gpus_per_node: 0}
telemetry: {progress: false}
"""

# the engine CI proves end to end whose capability table runs CONFIG, in its environment (its measured reward-model
# runs: docs/roles.md)
BACKEND, NOT_HERE = proven_backend_here(yaml.safe_load(CONFIG))
pytestmark = pytest.mark.skipif(BACKEND is None, reason=NOT_HERE)


@pytest.mark.engine
@pytest.mark.matrix_only  # make compat only: CI's engine cells keep one run per engine seam
def test_reward_model_as_the_only_reward_runs_in_the_engines_reward_model_path(tmp_path):
    path = tmp_path / "rm.yaml"
    path.write_text(CONFIG)
    cfg = load_config(path, [f"backend={BACKEND}", "engine_env=current", f"output_dir={tmp_path}/run"])
    summary = train(cfg, progress=False)
    assert summary["status"] == "completed"
    plan = yaml.safe_load((tmp_path / "run" / "plan.yaml").read_text())
    if BACKEND == "verl":
        assert plan["native"]["overrides"]["reward.reward_model.enable"] is True
    else:
        assert "--reward.model_name_or_path" in plan["native"]["args"]
    assert not any(note.startswith("reward:") for note in plan.get("approximations") or [])
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    # a sequence classifier's raw score: finite and not the 0 of an unscored batch
    assert all(math.isfinite(r["reward/mean"]) and r["reward/mean"] != 0.0 for r in rows), rows
