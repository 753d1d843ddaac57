"""A plugin replaces what verl sends to its rollout engine at each weight sync (`rlbridge_weight_sync`,
called in verl's rollout worker), and rlbridge measures what was actually sent."""

import json

import pytest

from rlbridge.contract.registry import reset_plugin_manager
from rlbridge.run.loading import load_config
from rlbridge.run.runner import train
from rlbridge.testing import QUICKSTART, install_plugin_distribution

KEEP = 3
PLUGIN = f'''
import json, os
from rlbridge import hookimpl


@hookimpl
def rlbridge_weight_sync(engine, weights):
    """Send only the first {KEEP} tensors of every sync; log what the engine offered."""
    pairs = list(weights)
    with open(os.environ["RLBRIDGE_SYNC_LOG"], "a") as fh:
        fh.write(json.dumps({{"pid": os.getpid(), "engine": engine, "offered": len(pairs)}}) + "\\n")
    return pairs[:{KEEP}]
'''


@pytest.mark.engine
@pytest.mark.matrix_only  # make compat only: CI keeps the two-step run, which checks weight_sync/* too
def test_a_plugin_replaces_what_verl_sends_to_vllm(tmp_path, monkeypatch):
    verl = pytest.importorskip("verl", reason="runs in the verl engine environment (rlbridge compat run --engine verl)")
    if tuple(int(x) for x in verl.__version__.split(".")[:2]) < (0, 9):
        pytest.skip("verl 0.9's vLLM rollout is the seam (verl 0.5 has no separate rollout engine on CPU)")
    install_plugin_distribution(tmp_path / "site", "rlbridge_sync_plugin", PLUGIN, monkeypatch)
    log = tmp_path / "syncs.jsonl"
    monkeypatch.setenv("RLBRIDGE_SYNC_LOG", str(log))
    reset_plugin_manager()
    overrides = [
        "backend=verl",
        f"output_dir={tmp_path}/run",
        "training.steps=2",
        "training.batch_size=2",
        "algorithm.group_size=4",
        "rollout.max_new_tokens=8",
        "resources.gpus_per_node=auto",
    ]
    summary = train(load_config(QUICKSTART, overrides), progress=False)
    assert summary["status"] == "completed"
    syncs = [json.loads(line) for line in log.read_text().splitlines()]
    assert syncs and all(s["engine"] == "verl" and s["offered"] > KEEP for s in syncs)
    assert __import__("os").getpid() not in {s["pid"] for s in syncs}  # called in verl's rollout worker
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    # what was measured is what the plugin sent, not what verl offered: KEEP tensors per sync
    assert all(r["weight_sync/tensors"] > 0 and r["weight_sync/tensors"] % KEEP == 0 for r in rows), rows
    assert all(r["weight_sync/tensors"] < syncs[0]["offered"] for r in rows), rows
