"""OpenRLHF's offline stages on CPU (openrlhf.cli.train_sft / train_dpo / train_rm through rlbridge,
adapters/openrlhf/stages.py), in the OpenRLHF environment (skips elsewhere): SFT's held-out loss
falls, DPO's held-out preference accuracy and the reward model's pairwise accuracy reach 0.8 on the
digit task's rows. Each a one-process DeepSpeed run of the tiny builtin model."""

import json
from pathlib import Path

import pytest

pytest.importorskip("openrlhf")

from rlbridge.run.loading import load_config
from rlbridge.run.runner import train
from tests.conftest import REPO

CONFIGS = REPO / "configs"
BASE = ["backend=openrlhf", "engine_env=current", "resources.gpus_per_node=0"]


def _evals(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "eval_metrics.jsonl").read_text().splitlines()]


@pytest.mark.engine
def test_sft_held_out_loss_falls(tmp_path):
    summary = train(
        load_config(CONFIGS / "sft.yaml", [*BASE, f"output_dir={tmp_path}", "training.steps=20"]), progress=False
    )
    evals = _evals(tmp_path)
    assert len(evals) == 2 and evals[-1]["eval/loss/sft"] < 0.7 * evals[0]["eval/loss/sft"], evals
    assert summary["loss"] == "loss/sft" and (tmp_path / "model" / "config.json").is_file()


@pytest.mark.engine
@pytest.mark.matrix_only
def test_dpo_and_reward_model_reach_0_8_held_out_accuracy(tmp_path):
    train(load_config(CONFIGS / "dpo.yaml", [*BASE, f"output_dir={tmp_path / 'dpo'}"]), progress=False)
    assert _evals(tmp_path / "dpo")[-1]["eval/dpo/accuracy"] >= 0.8, _evals(tmp_path / "dpo")
    train(load_config(CONFIGS / "reward_model.yaml", [*BASE, f"output_dir={tmp_path / 'rm'}"]), progress=False)
    assert _evals(tmp_path / "rm")[-1]["eval/rm/accuracy"] >= 0.8, _evals(tmp_path / "rm")
