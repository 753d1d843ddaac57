"""verl-specific checks that need verl installed; they run in the verl environments
(rlbridge compat run, translate) and skip elsewhere."""

import importlib.metadata
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("verl")

from packaging.version import Version

from rlbridge.errors import ConfigError
from rlbridge.loading import load_config
from rlbridge.patches import export
from rlbridge.runner import prepare

REPO = Path(__file__).resolve().parents[2]
VERL = Version(importlib.metadata.version("verl"))


def _prepare(*overrides):
    extra = [] if VERL < Version("0.6") else ["resources.gpus_per_node=1", "rollout.engine=vllm"]
    return prepare(load_config(REPO / "configs" / "quickstart.yaml", ["backend=verl", *extra, *overrides]))


def test_names_verl_accepts_silently_are_checked_against_its_registries():
    prepared = _prepare("backend_options.verl.actor_rollout_ref.actor.policy_loss.loss_mode=not_real")
    with pytest.raises(ConfigError, match="no policy loss mode 'not_real'"):
        prepared.backend.validate(prepared.plan)
    prepared = _prepare("backend_options.verl.actor_rollout_ref.actor.strategy=deepspeed")
    with pytest.raises(ConfigError, match="no actor strategy 'deepspeed'"):
        prepared.backend.validate(prepared.plan)


def test_unknown_native_key_is_refused_by_verl_hydra():
    prepared = _prepare("backend_options.verl.trainer.no_such_key=1")
    with pytest.raises(ConfigError, match="verl rejected the overrides"):
        prepared.backend.validate(prepared.plan)


def test_batch_that_verl_divisibility_rejects_fails_before_launch():
    # 3 GPUs cannot split 8 prompts x 8 samples evenly: verl's own check says so
    prepared = _prepare("resources.gpus_per_node=3", "training.micro_batch_size=1")
    with pytest.raises(ConfigError, match="divisible"):
        prepared.backend.validate(prepared.plan)


@pytest.mark.skipif(not (Version("0.5.0") <= VERL < Version("0.6")), reason="the HF rollout bug exists in verl 0.5.x")
def test_exported_upstream_fix_applies_to_the_installed_verl(tmp_path):
    import verl

    from rlbridge_adapters.verl.patches.v05_cpu import HF_ROLLOUT_N

    source = Path(verl.__file__).parent / "workers" / "rollout" / "hf_rollout.py"
    (tmp_path / "verl" / "workers" / "rollout").mkdir(parents=True)
    shutil.copy(source, tmp_path / "verl" / "workers" / "rollout" / "hf_rollout.py")
    text = export(HF_ROLLOUT_N)
    diff = text.split("```diff\n", 1)[1].rsplit("```", 1)[0]
    res = subprocess.run(["patch", "-p1", "--dry-run", "-F0"], input=diff, text=True, capture_output=True, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
