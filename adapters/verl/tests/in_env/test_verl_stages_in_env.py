"""verl's offline stage on CPU (verl.trainer.sft_trainer through rlbridge, adapters/verl/stages.py), in
the verl 0.9 environment (skips elsewhere): configs/sft.yaml's held-out loss falls on verl's own SFT
trainer (a one-process FSDP2 world on gloo, the tiny builtin model), and the trained model is a
loadable Hugging Face model in RUN_DIR/model that scores the task's completions above others."""

import json
from pathlib import Path

import pytest
from packaging.version import Version

verl = pytest.importorskip("verl")
if Version(verl.__version__) < Version("0.9"):
    # rlbridge drives verl's sft_trainer from 0.9 (the adapter refuses older ones); 0.7.1's does not even import
    # with the transformers of its environment (ImportError, Qwen2VLCausalLMOutputWithPast)
    pytest.skip(
        f"rlbridge drives verl's sft_trainer from verl 0.9 (this is {verl.__version__})", allow_module_level=True
    )
pytest.importorskip("verl.trainer.sft_trainer")

from rlbridge.run.loading import load_config  # noqa: E402
from rlbridge.run.runner import train  # noqa: E402
from tests.conftest import REPO  # noqa: E402

CONFIGS = REPO / "configs"
BASE = ["backend=verl", "engine_env=current", "resources.gpus_per_node=0"]


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.engine
def test_sft_held_out_loss_falls_and_the_model_is_saved(tmp_path):
    # non-default inputs: mini batches (2 verl updates per canonical step), a seed, a warmup
    summary = train(
        load_config(
            CONFIGS / "sft.yaml",
            [
                *BASE,
                f"output_dir={tmp_path}",
                "training.steps=12",
                "training.mini_batch_size=8",
                "training.micro_batch_size=4",
                "training.seed=3",
                "training.warmup_steps=2",
                "data.eval_interval=6",
            ],
        ),
        progress=False,
    )
    evals = _rows(tmp_path / "eval_metrics.jsonl")
    assert [e["step"] for e in evals] == [6, 12], evals
    assert evals[-1]["eval/loss/sft"] < 0.7 * evals[0]["eval/loss/sft"], evals
    steps = _rows(tmp_path / "metrics.jsonl")
    assert [s["step"] for s in steps] == list(range(1, 13)) and steps[-1]["loss/sft"] < steps[0]["loss/sft"]
    assert summary["loss"] == "loss/sft"
    overrides = (tmp_path / "verl_overrides.txt").read_text()
    assert "data.train_batch_size=8" in overrides and "trainer.total_training_steps=24" in overrides

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = tmp_path / "model"
    tok, model = AutoTokenizer.from_pretrained(model_dir), AutoModelForCausalLM.from_pretrained(model_dir)
    assert "eos_token" not in (tok.chat_template or "")  # the input model's tokenizer, not the run's rendering template

    def nll(prompt: str, completion: str) -> float:
        ids = tok(prompt + completion, return_tensors="pt").input_ids
        n = len(tok(prompt).input_ids)
        with torch.no_grad():
            logits = model(ids).logits[0, n - 1 : -1]
        return float(torch.nn.functional.cross_entropy(logits, ids[0, n:]))

    assert nll("7777", "77777777") < nll("7777", "12345678")
