"""TRL across devices and nodes (issue 42): the layout knobs planned into accelerate's own config keys, and real
runs of TRL's GRPOTrainer under `accelerate launch` with 2 CPU ranks (gloo): DDP and FSDP2.

The data-parallel equivalence test trains one step on 1 rank with every micro batch, and on 2 ranks with half of
them each, from the same seed, and compares the first update: the rollouts (identical by construction: each
sample is generated from a RNG seeded by itself, adapters/trl/tests/fixtures/trl_seeded_rollout.py), the loss and
gradient norm TRL logs, and the updated weights (plain SGD with no clipping, so that the weights move by the
gradient itself: Adam's first step would hide a scaled gradient). Everything but the rollout's seeding is TRL's,
accelerate's and rlbridge's own code. CI runs one DDP and one FSDP2 2-rank run (about 40-70 s each on 2 cores)
and their 1-rank reference; the rest is `matrix_only`.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import QUICKSTART, REPO, run_cli
from rlbridge.errors import CapabilityError, ConfigError
from rlbridge.run.loading import load_config
from rlbridge.run.runner import prepare

SEEDED_ROLLOUT = Path(__file__).parent / "fixtures" / "trl_seeded_rollout.py"


def _prepare(*overrides: str):
    return prepare(load_config(QUICKSTART, ["backend=trl", "resources.gpus_per_node=0", *overrides]))


def _native(*overrides: str) -> dict:
    return _prepare(*overrides).plan.native


# ---- plans ---------------------------------------------------------------------------------------------------------


def test_eight_gpus_with_fsdp_plan_accelerate_fsdp2_with_a_global_batch():
    prepared = _prepare("resources.gpus_per_node=8", "training.strategy=fsdp", "training.micro_batch_size=4")
    native = prepared.plan.native
    acc, args = native["accelerate"], native["args"]
    assert (acc["distributed_type"], acc["num_processes"], acc["num_machines"], acc["use_cpu"]) == ("FSDP", 8, 1, False)
    assert acc["fsdp_config"]["fsdp_version"] == 2 and acc["fsdp_config"]["fsdp_reshard_after_forward"] is True
    assert acc["mixed_precision"] == "bf16" and args["bf16"] is True
    # the mini batch (64 samples) is global: 4 per device x 8 processes x 2 accumulation steps
    assert (args["per_device_train_batch_size"], args["gradient_accumulation_steps"]) == (4, 2)
    assert args["generation_batch_size"] == 64
    shown = prepared.backend.render_native(prepared.plan)
    assert "accelerate launch --config_file" in shown and "distributed_type: FSDP" in shown


@pytest.mark.parametrize(
    "sharding, offload, stage, optimizer, params",
    [
        ("none", "{}", 0, "none", "none"),
        ("optimizer", "{optimizer: true}", 1, "cpu", "none"),
        ("auto", "{}", 2, "none", "none"),
        ("parameters", "{parameters: true, optimizer: true}", 3, "cpu", "cpu"),
    ],
)
def test_deepspeed_zero_stage_and_offload_from_sharding(sharding, offload, stage, optimizer, params):
    acc = _native(
        "resources.gpus_per_node=4",
        "model.dtype=float32",
        "training.strategy=deepspeed",
        f"training.sharding={sharding}",
        f"training.offload={offload}",
    )["accelerate"]
    ds = acc["deepspeed_config"]
    assert acc["distributed_type"] == "DEEPSPEED"
    assert (ds["zero_stage"], ds["offload_optimizer_device"], ds["offload_param_device"]) == (stage, optimizer, params)


def test_fsdp_sharding_offload_and_hybrid_group():
    acc = _native(
        "resources.gpus_per_node=4",
        "model.dtype=float32",
        "training.strategy=fsdp",
        "training.sharding=gradients",
        "training.offload={parameters: true, optimizer: true}",
        "training.shard_group_size=2",
    )["accelerate"]
    assert acc["fsdp_config"]["fsdp_reshard_after_forward"] is False  # SHARD_GRAD_OP
    assert acc["fsdp_config"]["fsdp_offload_params"] is True
    assert acc["parallelism_config"] == {
        "parallelism_config_dp_replicate_size": 2,
        "parallelism_config_dp_shard_size": 2,
    }


def test_cpu_ranks_plan_ddp_over_gloo_and_one_rank_runs_in_place():
    native = _native("resources.cpu_ranks_per_node=2")
    acc = native["accelerate"]
    assert (acc["distributed_type"], acc["num_processes"], acc["use_cpu"]) == ("MULTI_CPU", 2, True)
    assert native["args"]["ddp_find_unused_parameters"] is False
    assert "accelerate" not in _native()  # one process, strategy auto: today's in-process run


@pytest.mark.parametrize(
    "overrides, knob, match",
    [
        (("training.strategy=megatron",), "training.strategy", "no Megatron-LM path"),
        (("training.strategy=deepspeed",), "training.strategy", "ACCELERATE_USE_DEEPSPEED and not cpu"),
        (("training.tensor_parallel_size=2", "resources.cpu_ranks_per_node=2"), "training.tensor_parallel_size", ""),
        (("training.pipeline_parallel_size=2", "resources.cpu_ranks_per_node=2"), "training.pipeline_parallel", ""),
        (("training.sequence_parallel_size=2", "resources.cpu_ranks_per_node=2"), "sequence_parallel", "cp_size"),
        (("training.sharding=parameters",), "training.sharding", "DDP"),
        (("training.strategy=fsdp", "training.sharding=optimizer"), "training.sharding", "SHARD_GRAD_OP"),
        (("training.offload={optimizer: true}",), "training.offload", "DDP keeps"),
        (("training.strategy=fsdp", "training.offload={optimizer: true}"), "training.offload", "together"),
        (("training.strategy=fsdp", "training.offload={reference: true}"), "training.offload", "prepare_fsdp"),
        (("training.shard_group_size=1", "resources.cpu_ranks_per_node=2"), "training.shard_group_size", "hpZ"),
        (("rollout.max_staleness=1", "resources.cpu_ranks_per_node=2"), "resources.cpu_ranks_per_node", "Async"),
    ],
)
def test_what_trl_cannot_lay_out_is_refused_with_its_reason(overrides, knob, match):
    with pytest.raises(CapabilityError) as info:
        _prepare(*overrides)
    assert knob in str(info.value) and match in str(info.value), str(info.value)


def test_offline_stages_stay_in_one_process():
    config = load_config(REPO / "configs" / "sft.yaml", ["resources.gpus_per_node=0", "resources.cpu_ranks_per_node=2"])
    with pytest.raises(CapabilityError, match="offline stages"):
        prepare(config)


def test_deepspeed_on_gpus_needs_deepspeed_at_run_time():
    from rlbridge_adapters.trl import launch

    native = _native("resources.gpus_per_node=2", "model.dtype=float32", "training.strategy=deepspeed")
    import importlib.util

    if importlib.util.find_spec("deepspeed") is not None:
        pytest.skip("DeepSpeed is installed here")
    with pytest.raises(ConfigError, match="no DeepSpeed"):
        launch._check_runnable(native)


def test_split_without_async_is_trls_server_mode_counting_only_training_gpus():
    """The issue's case: 3 GPUs, 2 for the rollout. TRL trains in 1 process, so micro 8 x 1 divides the mini
    batch of 64 (the old check counted 3 processes); the server gets both rollout GPUs as 2 engines."""
    split = ("resources.gpus_per_node=3", "placement.policy=split", "placement.args={rollout_gpus: 2}")
    native = _native(*split, "rollout.engine=vllm", "model.dtype=float32", "training.micro_batch_size=8")
    args = native["args"]
    assert args["vllm_mode"] == "server" and "vllm_tensor_parallel_size" not in args
    assert native["server"]["data_parallel_size"] == 2 and native["server"]["tensor_parallel_size"] == 1
    assert native["placement"] == {"actor": 1, "rollout": 2, "shared": False}
    assert "accelerate" not in native and args["gradient_accumulation_steps"] == 8
    asynchronous = _native(*split, "rollout.max_staleness=1", "model.dtype=float32", "training.micro_batch_size=8")
    assert asynchronous["trainer"] == "AsyncGRPOTrainer"
    tp = _native(*split, "rollout.engine=vllm", "model.dtype=float32", "rollout.tensor_parallel_size=2")
    assert (tp["server"]["data_parallel_size"], tp["server"]["tensor_parallel_size"]) == (1, 2)


def test_server_mode_is_refused_on_cpu_with_trls_reason():
    with pytest.raises(CapabilityError, match="init_communicator raises NotImplementedError off CUDA"):
        _prepare("placement.policy=split", "placement.args={rollout_gpus: 1}", "rollout.engine=vllm")


def test_trl_serve_command_is_trls_own():
    pytest.importorskip("trl.scripts.vllm_serve")
    from rlbridge_adapters.trl.vllm_server import trl_serve_command

    argv = trl_serve_command(
        "/m",
        8001,
        tensor_parallel_size=2,
        data_parallel_size=3,
        dtype="bfloat16",
        max_model_len=None,
        enforce_eager=False,
    )
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2" and argv[argv.index("--data-parallel-size") + 1] == "3"
    assert '{"backend": "nccl"}' in argv  # TRL's weight-transfer engine: what GRPOTrainer's client joins


def test_more_nodes_need_the_node_environment_at_run_time(tmp_path):
    from rlbridge.engine import nodes

    assert _native("resources.nodes=2", "resources.cpu_ranks_per_node=2")["accelerate"]["num_processes"] == 4
    env = {k: os.environ.pop(k, None) for k in (nodes.NODE_RANK_ENV, nodes.MAIN_ADDRESS_ENV)}
    try:
        assert nodes.this_node(2) is None
        os.environ.update({nodes.NODE_RANK_ENV: "1", nodes.MAIN_ADDRESS_ENV: "10.0.0.1"})
        assert nodes.this_node(2) == (1, "10.0.0.1", nodes.DEFAULT_PORT)
    finally:
        for k, v in env.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


# ---- real runs on 2 CPU ranks --------------------------------------------------------------------------------------

# one step whose update is the gradient itself: SGD, no clipping, no weight decay; 8 prompts x 8 samples, one
# update of the whole batch in micro batches of 8 (1 rank: 8 accumulation steps; 2 ranks: 4 each)
ONE_STEP = [
    "training.steps=1",
    "training.micro_batch_size=8",
    "training.lr=1.0",
    "training.grad_clip=null",
    "training.torch_threads=1",
    "checkpoint.interval=1",
    "backend_options.trl.optim=sgd",
    f"plugins=[{SEEDED_ROLLOUT}]",
    "data.train.args.num_rows=256",
]


def _run(tmp_path: Path, name: str, *overrides: str) -> Path:
    """`rlbridge train` in a process of its own (the rollout double patches TRL in every process that loads it)."""
    out = tmp_path / name
    rollouts = out / "rollouts"
    rollouts.mkdir(parents=True)
    sets = [a for o in ["resources.gpus_per_node=0", *ONE_STEP, f"output_dir={out}", *overrides] for a in ("--set", o)]
    res = run_cli("train", str(QUICKSTART), "--no-progress", *sets, env={"RLBRIDGE_TEST_ROLLOUT_DIR": str(rollouts)})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-6000:]
    return out


def _rollouts(run: Path) -> Counter:
    return Counter(line for f in (run / "rollouts").glob("rank*.jsonl") for line in f.read_text().splitlines())


def _update(run: Path, base: dict) -> dict:
    from safetensors.torch import load_file

    weights = load_file(str(run / "checkpoints" / "checkpoint-1" / "model.safetensors"))
    # FSDP's full state dict also names the tied lm_head (the embedding itself, as the model ties them)
    if "lm_head.weight" in weights and "lm_head.weight" not in base:
        assert weights.pop("lm_head.weight").equal(weights["model.embed_tokens.weight"])
    assert set(weights) == set(base)
    return {k: weights[k] - base[k] for k in weights}


def assert_same_update(one: Path, two: Path) -> None:
    """The 2-rank step is the 1-rank step: same samples, same logged loss and gradient norm, same weight update
    within float32 reduction-order noise (relative to each tensor's largest move)."""
    from safetensors.torch import load_file

    from rlbridge.contract.models import materialize_model

    assert _rollouts(one) == _rollouts(two) and sum(_rollouts(one).values()) == 64
    first = [json.loads((run / "metrics.jsonl").read_text().splitlines()[0]) for run in (one, two)]
    for key in ("loss/policy", "grad_norm", "reward/mean"):
        assert first[1][key] == pytest.approx(first[0][key], rel=1e-4, abs=1e-7), key
    base = load_file(str(Path(materialize_model(load_config(QUICKSTART))) / "model.safetensors"))
    reference, update = _update(one, base), _update(two, base)
    total = sum(float(d.norm()) ** 2 for d in reference.values()) ** 0.5
    assert total > 1e-2  # the step moves the weights: a scaled gradient would show
    for name, delta in reference.items():
        scale = float(delta.abs().max())
        worst = float((update[name] - delta).abs().max())
        assert worst <= 1e-4 * scale + 1e-7, f"{name}: differs by {worst:.3g} (largest move {scale:.3g})"


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("one-rank"), "run")


def _state(run: Path) -> dict:
    return json.loads((run / "accelerate" / "state.json").read_text())


@pytest.mark.engine
def test_two_ddp_ranks_train_as_one_rank_with_every_micro_batch(one_rank, tmp_path):
    two = _run(tmp_path, "ddp", "resources.cpu_ranks_per_node=2")
    state = _state(two)
    assert (state["distributed_type"], state["backend"], state["num_processes"]) == ("MULTI_CPU", "gloo", 2)
    # TRL's own arithmetic at world size 2 keeps the batch global: 8 per device x 2 x 4 = the 64-sample mini batch
    assert (state["per_device_train_batch_size"], state["gradient_accumulation_steps"]) == (8, 4)
    assert (state["generation_batch_size"], state["steps_per_generation"]) == (64, 4)
    assert set(_rollouts(two)) and {f.name for f in (two / "rollouts").iterdir()} == {"rank0.jsonl", "rank1.jsonl"}
    assert_same_update(one_rank, two)
    # rank 0 reports alone: one row per step, its samples, one complete checkpoint holding both ranks' RNG states
    assert len((two / "metrics.jsonl").read_text().splitlines()) == 1
    checkpoint = two / "checkpoints" / "checkpoint-1"
    assert (checkpoint / "rlbridge_complete.json").exists()
    assert {p.name for p in checkpoint.glob("rng_state_*.pth")} == {"rng_state_0.pth", "rng_state_1.pth"}
    summary = json.loads((two / "summary.json").read_text())
    assert summary["checkpoints"] and summary["status"] == "completed"


@pytest.mark.engine
def test_two_fsdp2_ranks_shard_the_model_and_train_as_one_rank(one_rank, tmp_path):
    two = _run(tmp_path, "fsdp", "resources.cpu_ranks_per_node=2", "training.strategy=fsdp")
    state = _state(two)
    assert (state["distributed_type"], state["backend"], state["num_processes"]) == ("FSDP", "gloo", 2)
    assert state["fsdp"]["version"] == 2 and state["fsdp"]["reshard_after_forward"] is True
    # rank 0 holds its share of the parameters (DTensor shards), not the whole model
    assert state["sharded_tensors"] > 0 and state["parameters_on_rank0"] < 0.6 * state["parameters"]
    assert_same_update(one_rank, two)


# ---- several nodes: the batch systems' launch, and two "nodes" on this machine -------------------------------------


def test_slurm_runs_one_step_over_every_node_with_its_rank_and_the_first_nodes_address(tmp_path):
    from rlbridge.submit.slurm import prepare_job

    config = load_config(
        QUICKSTART,
        [
            "backend=trl",
            "resources.nodes=2",
            "resources.gpus_per_node=8",
            "model.dtype=float32",
            f"output_dir={tmp_path}",
        ],
    )
    job, script, record = prepare_job(config)
    assert "#SBATCH --nodes=2" in script and "#SBATCH --gpus-per-node=8" in script
    assert "export RLBRIDGE_MAIN_ADDRESS=$(getent ahostsv4" in script
    assert "srun --overlap --nodes=2 --ntasks-per-node=1" in script
    node_line = next(line for line in script.splitlines() if "RLBRIDGE_NODE_RANK" in line)
    assert 'RLBRIDGE_NODE_RANK="$SLURM_NODEID"' in node_line
    assert f'rlbridge train "{record}/config.yaml"' in node_line
    assert f'-m rlbridge.engine.nodes "{job.output_dir}"' in node_line
    assert "ray start" not in script


def test_kuberay_starts_one_node_process_per_worker_pod_on_a_shared_volume():
    pytest.importorskip("jsonschema")
    from rlbridge.submit import kuberay
    from rlbridge.submit.job import plan_job

    overrides = [
        "backend=trl",
        "resources.nodes=2",
        "resources.gpus_per_node=8",
        "model.dtype=float32",
        "launcher.kuberay.image=registry.example/rlbridge-trl:1.16",
    ]
    _, job = plan_job(load_config(QUICKSTART, overrides), "kuberay")
    with pytest.raises(ConfigError, match="checkpoint_claim"):
        kuberay.manifests(job)
    _, job = plan_job(load_config(QUICKSTART, [*overrides, "launcher.kuberay.checkpoint_claim=rl-runs"]), "kuberay")
    _, ray_job = kuberay.manifests(job)
    assert kuberay.validate(ray_job) == []
    entrypoint = ray_job["spec"]["entrypoint"]
    assert entrypoint.startswith(
        "python -m rlbridge.engine.nodes --ray /etc/rlbridge/config.yaml /rlbridge/quickstart "
    )
    assert entrypoint.endswith(" 2 8 python")
    (gpu_group,) = ray_job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert gpu_group["replicas"] == 2 and gpu_group["rayStartParams"]["num-gpus"] == "8"


@pytest.mark.engine
@pytest.mark.matrix_only  # ~60 s: two accelerate launches on this machine
def test_two_nodes_meet_through_the_node_agent(one_rank, tmp_path):
    """resources.nodes 2 with one CPU rank each, on this machine: `rlbridge train` as node 0 and the node agent as
    node 1, each told its rank and node 0's address as a batch system's script tells them; the 2 ranks over 2
    machines train the step 1 rank takes with every micro batch."""
    import subprocess
    import sys

    from rlbridge.helpers import free_port

    out = tmp_path / "nodes"
    (out / "rollouts").mkdir(parents=True)
    common = {
        "RLBRIDGE_MAIN_ADDRESS": "127.0.0.1",
        "RLBRIDGE_MAIN_PORT": str(free_port()),
        "RLBRIDGE_TEST_ROLLOUT_DIR": str(out / "rollouts"),
    }
    agent = subprocess.Popen(
        [sys.executable, "-m", "rlbridge.engine.nodes", str(out)],
        env={**os.environ, **common, "RLBRIDGE_NODE_RANK": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        sets = [
            a
            for o in ["resources.gpus_per_node=0", "resources.nodes=2", *ONE_STEP, f"output_dir={out}"]
            for a in ("--set", o)
        ]
        res = run_cli("train", str(QUICKSTART), "--no-progress", *sets, env={**common, "RLBRIDGE_NODE_RANK": "0"})
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-6000:]
        assert agent.wait(timeout=120) == 0, agent.stdout.read()[-3000:]
    finally:
        if agent.poll() is None:
            agent.kill()
    config = (out / "accelerate" / "accelerate_config.yaml").read_text()
    assert "num_machines: 2" in config and "machine_rank: 0" in config
    assert (_state(out)["num_processes"], _state(out)["distributed_type"]) == (2, "MULTI_CPU")
    assert_same_update(one_rank, out)


@pytest.mark.engine
@pytest.mark.matrix_only  # ~40 s
def test_a_failing_rank_stops_the_whole_run(tmp_path):
    """Rank 1 raises in its first rollout: the run fails naming rank 1's error, and no process of it is left
    (torchrun stops rank 0, each rank's tree goes with it)."""
    out = tmp_path / "failing"
    (out / "rollouts").mkdir(parents=True)
    sets = [a for o in ["resources.gpus_per_node=0", *ONE_STEP, f"output_dir={out}"] for a in ("--set", o)]
    res = run_cli(
        "train",
        str(QUICKSTART),
        "--no-progress",
        "--set",
        "resources.cpu_ranks_per_node=2",
        *sets,
        env={"RLBRIDGE_TEST_ROLLOUT_DIR": str(out / "rollouts"), "RLBRIDGE_TEST_FAIL_RANK": "1"},
    )
    assert res.returncode != 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and "rank 1" in summary["error"] and "on purpose" in summary["error"]
    needle = f"{out / 'accelerate' / 'job.json'}".encode()
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if needle in Path(f"/proc/{pid}/cmdline").read_bytes():
                left.append(pid)
        except OSError:
            continue
    assert not left, f"processes of the run still alive: {left}"


def test_plan_check_reads_the_accelerate_config_with_accelerates_own_classes():
    pytest.importorskip("accelerate")
    from rlbridge_adapters.trl import layout

    for extra in (
        (
            "training.strategy=fsdp",
            "training.shard_group_size=2",
            "training.offload={parameters: true, optimizer: true}",
        ),
        ("training.strategy=deepspeed", "training.sharding=parameters", "training.offload={parameters: true}"),
    ):
        layout.validate(_native("resources.gpus_per_node=4", "model.dtype=float32", *extra))
    native = _native("resources.cpu_ranks_per_node=2", "training.strategy=fsdp")
    native["accelerate"]["fsdp_config"]["fsdp_state_dict_type"] = "WHOLE_MODEL"  # not one of accelerate's
    with pytest.raises(ConfigError, match="accelerate rejected"):
        layout.validate(native)
    native = _native("resources.cpu_ranks_per_node=2")
    native["accelerate"]["distributed_typ"] = "MULTI_CPU"
    with pytest.raises(ConfigError, match="accelerate rejected"):
        layout.validate(native)


@pytest.mark.engine
@pytest.mark.matrix_only  # ~60 s: 4 CPU ranks
def test_hybrid_sharding_shards_within_groups_and_replicates_across_them(tmp_path):
    """training.shard_group_size 2 on 4 ranks: accelerate's device mesh is 2 replicas x 2 shards, and rank 0 holds
    half the parameters (sharded within its group of 2, not over all 4)."""
    out = _run(
        tmp_path,
        "hsdp",
        "resources.cpu_ranks_per_node=4",
        "training.strategy=fsdp",
        "training.shard_group_size=2",
        "training.micro_batch_size=16",
    )
    state = _state(out)
    assert (state["distributed_type"], state["num_processes"]) == ("FSDP", 4)
    assert state["mesh"] == {"dp_replicate": 2, "dp_shard": 2}
    assert abs(state["parameters_on_rank0"] - state["parameters"] / 2) < 0.02 * state["parameters"]
