"""AReaL 1.0.4 end to end in its engine environment, beyond the shipped conformance suite: the quickstart learns,
the patches its vLLM server needs (each test fails without its patch), the asynchronous loop within its staleness
bound, and FSDP2 over
two gloo ranks with the policy's parameters sharded. Runs in the areal cell (`rlbridge compat run --engine areal`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlbridge.run.loading import load_config
from rlbridge.run.runner import train
from tests.conftest import QUICKSTART

from . import needs_areal


pytestmark = needs_areal
SMALL = [
    "backend=areal",
    "resources.gpus_per_node=auto",
    "training.batch_size=2",
    "algorithm.group_size=4",
    "rollout.max_new_tokens=8",
]


def _server_help(tmp_path: Path, boot: bool) -> subprocess.CompletedProcess:
    """AReaL's vLLM server module as AReaL's rollout worker starts it (python -m ...), with or without the adapter's
    boot (rlbridge.engine.ray_engine.boot_env) in its environment."""
    from rlbridge.engine.ray_engine import boot_env
    from rlbridge_adapters.areal.boot import NATIVE_ENV

    env = {k: v for k, v in os.environ.items() if not k.startswith("RLBRIDGE_")}
    env.pop("PYTHONPATH", None)
    if boot:
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"cpu": True}))
        env.update(boot_env("rlbridge_adapters.areal.boot:install"), **{NATIVE_ENV: str(plan)})
    return subprocess.run(
        [sys.executable, "-m", "areal.engine.vllm_ext.areal_vllm_server", "--help"],
        env={**env, "VLLM_TARGET_DEVICE": "cpu"},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.engine
def test_areal_s_vllm_server_starts_on_vllm_0_29_only_with_the_patch(tmp_path):
    """areal-vllm-server-on-vllm-0.29: without it AReaL's server does not import on vLLM 0.29."""
    bare = _server_help(tmp_path, boot=False)
    assert bare.returncode != 0 and "No module named 'vllm.entrypoints.openai.cli_args'" in bare.stderr
    patched = _server_help(tmp_path, boot=True)
    assert patched.returncode == 0, patched.stderr[-2000:]
    assert "--worker-extension-cls" in patched.stdout  # vLLM's own serve arguments, through AReaL's __main__


def _packed_logits(prepare_mb_list) -> tuple:
    """Two sequences through AReaL's own micro-batch preparation (FSDPEngine._prepare_mb_list: packed into one row)
    and the tiny model with SDPA attention: the second sequence's logits, and its logits alone."""
    import types

    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    from areal.api.cli_args import MicroBatchSpec
    from rlbridge.contract.models import materialize_path

    if not dist.is_initialized():  # AReaL logs its rank
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
    model = AutoModelForCausalLM.from_pretrained(
        materialize_path("builtin:tiny-digits", "model.path"), dtype=torch.float32, attn_implementation="sdpa"
    )
    a, b = [5, 5, 5, 5, 9, 8, 7], [6, 6, 6, 6, 1, 2]
    width = len(a)
    batch = {
        "input_ids": torch.tensor([a, b + [0] * (width - len(b))]),
        "attention_mask": torch.tensor([[1] * len(a), [1] * len(b) + [0] * (width - len(b))]),
    }
    engine = types.SimpleNamespace(
        enable_tree_training=False,
        model_config=types.SimpleNamespace(model_type="qwen2"),
        config=types.SimpleNamespace(attn_impl="sdpa", mb_spec=MicroBatchSpec(n_mbs=1), pad_to_maximum=False),
        logger=types.SimpleNamespace(info=lambda *a, **k: None),
    )
    mb = prepare_mb_list(engine, batch).padded_mbs[0]
    keep = ("input_ids", "position_ids", "attention_mask")
    with torch.no_grad():
        packed = model(**{k: mb[k] for k in keep}, use_cache=False).logits[0, len(a) : len(a) + len(b)]
        alone = model(torch.tensor([b])).logits[0]
    return packed, alone


def test_packed_sequences_attend_only_to_themselves_only_with_the_patch():
    """areal-fsdp-packed-sequences-sdpa: AReaL's FSDP engine packs sequences into one row; with SDPA its mask lets a
    sequence attend to the one before it, unless the patch passes no mask (transformers' per-sequence mask)."""
    import areal.engine.fsdp_engine as fsdp_engine

    from rlbridge_adapters.areal.patches import _packed_attention_mask

    unpatched = getattr(fsdp_engine.FSDPEngine._prepare_mb_list, "__wrapped__", fsdp_engine.FSDPEngine._prepare_mb_list)
    packed, alone = _packed_logits(unpatched)
    assert (packed - alone).abs().max() > 0.05  # AReaL 1.0.4 as released: the sequences see each other
    _packed_attention_mask(fsdp_engine)
    packed, alone = _packed_logits(fsdp_engine.FSDPEngine._prepare_mb_list)
    assert (packed - alone).abs().max() < 1e-4


@pytest.mark.engine
def test_the_quickstart_learns_on_areal(tmp_path):
    """The quickstart as a user runs it (`rlbridge train configs/quickstart.yaml --set backend=areal`), 30 of its
    150 steps: the reward rises. Over 60 steps AReaL reaches 0.5 near step 38 (docs/benchmarks.md); in that bench
    the first 5 steps averaged 0.009-0.014 and steps 26-30 0.16-0.21, so the bounds below hold with a margin of 3."""
    run = tmp_path / "run"
    summary = train(
        load_config(QUICKSTART, ["backend=areal", f"output_dir={run}", "training.steps=30"]),
        progress=False,
    )
    assert summary["status"] == "completed"
    rewards = [json.loads(line)["reward/mean"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rewards) == 30
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert last >= 0.06 and last >= 4 * first, [round(r, 3) for r in rewards]


@pytest.mark.engine
def test_asynchronous_loop_trains_within_its_staleness_bound(tmp_path):
    """max_staleness 1 (AReaL's max_head_offpolicyness 1, interruptible generation): every step trains, the
    staleness AReaL measures on its samples never exceeds 1, and the weights reach the server every step."""
    run = tmp_path / "run"
    summary = train(
        load_config(
            QUICKSTART,
            [
                *SMALL,
                f"output_dir={run}",
                "training.steps=4",
                "rollout.max_staleness=1",
                "rollout.partial_rollouts=true",
            ],
        ),
        progress=False,
    )
    assert summary["status"] == "completed"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all(r["async/staleness_max"] <= 1 for r in rows), [r.get("async/staleness_max") for r in rows]
    assert all(r["weight_sync/bytes"] > 0 and r["weight_sync/tensors"] > 0 for r in rows)
    config = yaml_load(run / "areal_config.yaml")
    assert config["rollout"]["max_head_offpolicyness"] == 1


@pytest.mark.engine
@pytest.mark.matrix_only  # a second training process: make compat
def test_two_cpu_ranks_shard_the_policy_with_fsdp2(tmp_path):
    """resources.cpu_ranks_per_node 2: AReaL starts two training ranks (fsdp:d2, gloo), and each applies FSDP2 (AReaL's
    engine log of each rank)."""
    run = tmp_path / "run"
    summary = train(
        load_config(QUICKSTART, [*SMALL, f"output_dir={run}", "training.steps=2", "resources.cpu_ranks_per_node=2"]),
        progress=False,
    )
    assert summary["status"] == "completed"
    config = yaml_load(run / "areal_config.yaml")
    assert config["actor"]["backend"] == "fsdp:d2t1c1"
    logs = list((run / "areal" / "logs").rglob("actor.log"))
    text = "".join(p.read_text(errors="replace") for p in logs)
    for rank in (0, 1):
        assert f"[FSDPEngine Rank {rank}] INFO: Applying FSDP2" in text, f"rank {rank} applied no FSDP2"


def yaml_load(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())
