"""TRL's asynchronous loop, end to end on CPU (issue 25): rollout.max_staleness 1 with split placement runs TRL
1.16's AsyncGRPOTrainer against the vLLM server rlbridge starts on the rollout's (logical) device, syncing
weights through rlbridge's shared-memory transfer; every step writes the canonical async metrics, and no sample
trained is more than one policy version old by TRL's own tags (RolloutSample.model_version, which TRL's
RolloutQueueDataset turns into sample/staleness_*). The server is gone when the run ends, also after Ctrl-C.
Runs in an engine environment with vLLM (rlbridge env create trl==1.16.0-vllm)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("vllm")
pytest.importorskip("trl.experimental.async_grpo")

from rlbridge.run.loading import load_config  # noqa: E402
from rlbridge.run.runner import train  # noqa: E402
from rlbridge.testing import QUICKSTART  # noqa: E402

from tests.engines.async_runs import ASYNC_METRICS, SPLIT_ASYNC_RUN, check_split_async_run  # noqa: E402

OVERRIDES = ["backend=trl", *SPLIT_ASYNC_RUN, "training.lr=1e-2"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not running
        return open(f"/proc/{pid}/stat").read().split(") ")[-1][0] != "Z"
    except OSError:
        return False


@pytest.mark.engine
def test_async_trl_run_keeps_staleness_within_the_bound(tmp_path):
    run = tmp_path / "run"
    summary = train(load_config(QUICKSTART, [*OVERRIDES, f"output_dir={run}"]), progress=False)
    # as before this helper, rollout idle (TRL's rollout/backpressure_s) is not asserted on every step
    rows = check_split_async_run(summary, run, tuple(m for m in ASYNC_METRICS if m != "async/rollout_idle_s"))
    assert "AsyncGRPOTrainer" in (run / "plan.yaml").read_text()
    native = [json.loads(line) for line in (run / "native_metrics.jsonl").read_text().splitlines()]
    assert all(0 <= n["sample/staleness_max"] <= 1 for n in native), native  # TRL's own numbers, from its tags
    # generation ran ahead of training: after the first sync some samples come from the previous policy
    assert any(r["async/staleness_max"] == 1 for r in rows[1:]), rows
    # every sync sends the whole model through rlbridge's seam, and the workers loaded every tensor (else it raises)
    synced = [r for r in rows if "weight_sync/bytes" in r]
    assert synced and all(r["weight_sync/bytes"] > 0 and r["weight_sync/tensors"] > 0 for r in synced), rows
    by_patch = json.loads((run / "patches.json").read_text())["by_patch"]
    for name in (
        "trl-async-grpo-cpu-tree-attention",
        "trl-async-grpo-peak-flops-off-cuda",
        "trl-async-grpo-concurrent-scoring",
        "trl-vllm-cpu-unpacked-linear",
    ):
        assert by_patch[name]["applied_in"], (name, by_patch)  # the last one in the vLLM server's worker
    servers = [a for a in json.loads((run / "placement.json").read_text())["actors"] if a["class_name"] == "vllm serve"]
    assert servers and not _alive(servers[0]["pid"])  # stopped with the run
    assert not [f for f in os.listdir("/dev/shm") if f.startswith("rlbridge-trl-weights-")]


@pytest.mark.engine
@pytest.mark.matrix_only
def test_ctrl_c_leaves_no_vllm_server(tmp_path):
    """Ctrl-C on `rlbridge train` while the async run trains: the run stops, and the vLLM server with it."""
    run = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "rlbridge",
        "train",
        str(QUICKSTART),
        *[x for o in OVERRIDES for x in ("-s", o)],
        "-s",
        "training.steps=200",
        "-s",
        f"output_dir={run}",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:

        def trained() -> bool:  # a step written, and the server's process recorded
            metrics = run / "metrics.jsonl"
            return metrics.exists() and metrics.read_text().strip() != "" and (run / "placement.json").exists()

        deadline = time.time() + 300
        while time.time() < deadline and not trained():
            assert proc.poll() is None, "the run ended before its first step"
            time.sleep(1)
        assert trained(), "no step in 300 s"
        server = next(
            a for a in json.loads((run / "placement.json").read_text())["actors"] if a["class_name"] == "vllm serve"
        )
        assert _alive(server["pid"])
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends to the foreground group
        proc.wait(120)
        deadline = time.time() + 30
        while time.time() < deadline and _alive(server["pid"]):
            time.sleep(0.5)
        assert not _alive(server["pid"]), "the vLLM server outlived the interrupted run"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
