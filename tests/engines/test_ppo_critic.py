"""PPO with a critic, end to end in the engine's environment (verl 0.9.1, OpenRLHF 0.11.2): the
canonical critic knobs reach the engine and both the policy and the value model train. It runs in
those engines' e2e-cpu cells (rlbridge compat run) and skips elsewhere."""

import json
import math

import pytest
import yaml

from rlbridge.run.loading import load_config
from rlbridge.run.runner import train

from . import proven_backend_here


CONFIG = """\
model: {path: builtin:tiny-digits}
reward: [{name: digit_match}]
algorithm: {name: ppo, group_size: 2, gamma: 0.99, gae_lambda: 0.95}
critic: {lr: 1.0e-4, value_clip: 0.3}
training: {steps: 2, batch_size: 2, lr: 1.0e-3}
rollout: {max_new_tokens: 8}
resources: {gpus_per_node: 0}
telemetry: {progress: false}
"""

# the engine CI proves end to end whose capability table runs CONFIG, in its environment (its measured PPO
# runs: docs/roles.md)
BACKEND, NOT_HERE = proven_backend_here(yaml.safe_load(CONFIG))
pytestmark = pytest.mark.skipif(BACKEND is None, reason=NOT_HERE)


@pytest.mark.engine
@pytest.mark.matrix_only  # make compat only: CI's engine cells keep one run per engine seam
def test_ppo_with_a_critic_trains(tmp_path):
    path = tmp_path / "ppo.yaml"
    path.write_text(CONFIG)
    cfg = load_config(path, [f"backend={BACKEND}", "engine_env=current", f"output_dir={tmp_path}/run"])
    summary = train(cfg, progress=False)
    assert summary["status"] == "completed"
    native = [json.loads(line) for line in (tmp_path / "run" / "native_metrics.jsonl").read_text().splitlines()]
    critic = [{k: v for k, v in row.items() if "critic" in k and ("loss" in k or "grad_norm" in k)} for row in native]
    critic = [row for row in critic if row]
    assert critic, "the engine logged no critic loss or grad norm: no value model trained"
    assert all(math.isfinite(float(v)) for row in critic for v in row.values())
    lrs = [v for row in native for k, v in row.items() if k in ("critic_lr", "critic/lr")]
    assert lrs and all(math.isclose(v, 1.0e-4, rel_tol=1e-3) for v in lrs), lrs  # critic.lr, constant schedule
    plan = (tmp_path / "run" / "plan.yaml").read_text()
    assert ("critic.cliprange_value" in plan and "0.3" in plan) or "--critic.value_clip" in plan
