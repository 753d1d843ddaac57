"""`rlbridge plan --check` validates with the engine's own config code where the engine runs: with
engine_env: auto and an engine this process lacks, in its engine environment (rlbridge.engine.validate).
OpenRLHF's parser there accepts ZeRO-3 with Adam offload on 8 GPUs and rejects a bad value, in one line."""

import importlib.util

import pytest

from tests.conftest import run_cli, write_config

CONFIG = """\
backend: openrlhf
model: {path: builtin:tiny-digits}
reward: [{name: digit_match}]
resources: {gpus_per_node: 8}
training: {steps: 2, batch_size: 8, sharding: parameters, offload: {optimizer: true}}
"""

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("openrlhf") is not None, reason="needs a process without OpenRLHF (the user's own)"
)


@pytest.mark.engine_env
def test_plan_check_validates_in_the_engine_environment(tmp_path, user_engine_envs):
    from rlbridge.engine.environments import is_complete

    if not is_complete(user_engine_envs / "openrlhf-0.11.2"):
        pytest.skip("no complete openrlhf-0.11.2 engine environment here")
    config = str(write_config(tmp_path, CONFIG))
    res = run_cli("plan", config, "--check")
    assert res.returncode == 0, res.stderr
    assert "--ds.zero_stage 3" in res.stdout and "--ds.adam_offload" in res.stdout
    assert "plan validated by openrlhf 0.11.2 (in the engine environment" in res.stderr
    res = run_cli("plan", config, "--check", "--set", "backend_options={openrlhf: {logger.logging_steps: often}}")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "invalid int value: 'often'" in res.stderr.strip().splitlines()[-1]
