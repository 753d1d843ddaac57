"""The training layout on OpenRLHF, checked by OpenRLHF's and DeepSpeed's own config code (issue 42):
layouts that need GPUs (ZeRO-3 with Adam offload, AutoTP, ZeRO++ hpZ, ring attention) are planned here,
parsed by the installed train_ppo_ray's parser and checks (what `rlbridge plan --check` runs), and turned
into the DeepSpeed configs OpenRLHF builds (its own DeepspeedStrategy, as train_ppo_ray's train() gets it),
which DeepSpeed's config class validates at the planned world size. Nothing is launched. Runs in the
OpenRLHF environments (the translate cells)."""

import json
import subprocess
import sys

import pytest

from rlbridge.run.loading import load_config
from rlbridge.run.runner import prepare
from rlbridge.testing import QUICKSTART

from .openrlhf_runtime import require_openrlhf_runtime

require_openrlhf_runtime()

ZERO3_OFFLOAD = ["resources.gpus_per_node=8", "training.sharding=parameters", "training.offload.optimizer=true"]
LAYOUTS = {
    "zero3-adam-offload": ZERO3_OFFLOAD,
    "zero3-offload-autotp-hpz-reference": [
        *ZERO3_OFFLOAD,
        "training.tensor_parallel_size=2",
        "training.shard_group_size=2",
        "algorithm.kl_coef=0.01",
        "training.offload.reference=true",
    ],
    "zero1-ring-attention-split": [
        "resources.gpus_per_node=8",
        "placement.policy=split",
        "placement.args={rollout_gpus: 4}",
        "rollout.tensor_parallel_size=2",
        "training.sharding=optimizer",
        "training.sequence_parallel_size=2",
        "training.sequence_packing=true",
    ],
    "cpu-2-ranks": ["resources.gpus_per_node=0", "resources.cpu_ranks_per_node=2"],
}

# In a fresh process (openrlhf.utils imports flash-attn's CUDA extension: the process gets rlbridge's CPU
# patches first, as every OpenRLHF process of a CPU run does): OpenRLHF's strategy for the parsed arguments,
# its DeepSpeed configs, and DeepSpeed's reading of them at the run's world size.
DEEPSPEED_CONFIGS = """
import json, sys
from rlbridge.engine.patches import apply_patches
from rlbridge_adapters.openrlhf.patches import PATCHES
from rlbridge_adapters.openrlhf.validate import validate_argv

natives = json.loads(sys.stdin.read())
apply_patches(PATCHES, {"cpu": True})
from openrlhf.utils import get_strategy
import deepspeed.runtime.config as ds_config
from deepspeed.runtime.config import DeepSpeedConfig

out = {}
for name, native in natives.items():
    args = validate_argv(native)
    world = args.actor.num_nodes * args.actor.num_gpus_per_node
    strategy = get_strategy(args)
    ds_config.dist.get_world_size = lambda *a, **k: world
    ds_config.dist.get_rank = lambda *a, **k: 0
    train = DeepSpeedConfig(strategy.get_ds_train_config(max_norm=args.actor.max_norm))
    ref = DeepSpeedConfig(strategy.get_ds_eval_config(offload=args.ref.offload)).zero_config
    zero = train.zero_config
    out[name] = {
        "world": world,
        "train_batch_size": args.train.batch_size,
        "accumulation": train.gradient_accumulation_steps,
        "micro": train.train_micro_batch_size_per_gpu,
        "stage": int(zero.stage),
        "adam_offload": zero.offload_optimizer is not None and zero.offload_optimizer.device == "cpu",
        "hpz": zero.zero_hpz_partition_size,
        "autotp": train.tensor_parallel_config.autotp_size,
        "ref_stage": int(ref.stage),
        "ref_offload": ref.offload_param is not None and ref.offload_param.device == "cpu",
    }
print(json.dumps(out))
"""


def _prepared(name: str):
    return prepare(load_config(QUICKSTART, ["backend=openrlhf", "training.batch_size=16", *LAYOUTS[name]]))


@pytest.fixture(scope="module")
def deepspeed_configs() -> dict:
    """Every layout's DeepSpeed configs, in one process (importing DeepSpeed takes ~15 s here)."""
    natives = {name: _prepared(name).plan.native for name in LAYOUTS}
    res = subprocess.run(
        [sys.executable, "-c", DEEPSPEED_CONFIGS],
        input=json.dumps(natives),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_openrlhf_and_deepspeed_accept_the_layout(name, deepspeed_configs):
    prepared, got = _prepared(name), deepspeed_configs[name]
    config, tr = prepared.config, prepared.config.training
    data_parallel = got["world"] // (tr.tensor_parallel_size * tr.sequence_parallel_size)
    # the mini batch is global, the micro batch per data-parallel rank: DeepSpeed accumulates mini / (micro x dp)
    assert got["train_batch_size"] == config.mini_batch_samples
    assert got["accumulation"] * got["micro"] * data_parallel == config.mini_batch_samples, got
    assert got["accumulation"] == 1, got  # the default micro batch: each data-parallel rank's share of the mini batch
    on_cpu = config.resources.gpus_per_node == 0
    stage = {"none": 0, "optimizer": 1, "gradients": 2, "parameters": 3}.get(tr.sharding, 0 if on_cpu else 2)
    assert got["stage"] == stage
    assert got["adam_offload"] == tr.offload.optimizer
    assert got["hpz"] == (tr.shard_group_size or 1)
    assert got["autotp"] == tr.tensor_parallel_size
    # the reference: ZeRO-3 when the actor is, its parameters in CPU memory when offload.reference says so
    assert got["ref_stage"] == (3 if tr.sharding == "parameters" else 0)
    assert got["ref_offload"] == bool(tr.offload.reference)
