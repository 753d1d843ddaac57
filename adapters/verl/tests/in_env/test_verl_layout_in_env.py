"""verl across data-parallel ranks on CPU (issue 42): resources.cpu_ranks_per_node N runs verl's FSDP2 engine as
N gloo ranks, and the update they make together is the update one rank makes alone.

The equivalence test drives verl's own actor worker and update step on one fixed batch (verl_dp_rank.py says
how): 2 ranks x 4 micro batches against 1 rank x 8 micro batches, the same seeds and the same experience. The
loss verl reports and every updated weight must agree within float32 reduction-order tolerance; the optimizer
is plain SGD, so a gradient scaled by the world size shows in the weights (Adam's first step would hide it).
Its own failure is checked too (matrix_only): verl's loss normalised over the world size twice moves the
weights twice as far.

The 2-rank run end to end (matrix_only: the equivalence test proves the ranks in CI) trains the quickstart
through rlbridge, two WorkerDicts on two logical GPUs of the run's Ray cluster and a vLLM replica on each.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

from packaging.version import Version

from rlbridge.helpers import free_port

pytestmark = pytest.mark.skipif(
    Version(importlib.metadata.version("verl")) < Version("0.9.0"),
    reason="several CPU ranks run on verl 0.9's CPU platform (adapters/verl/layout.py CPU_RANKS_SINCE)",
)

RANK = Path(__file__).with_name("verl_dp_rank.py")
RTOL, ATOL = 1e-5, 1e-6  # float32 reduction order: the gradients are summed in another order over the ranks


def _update(out: Path, world: int, breaks: bool = False) -> subprocess.Popen:
    """Start `world` rank processes of verl's update on the fixed batch; the first one's Popen is returned
    with the others attached (`_wait` collects them)."""
    out.mkdir(parents=True)
    port = free_port()
    procs = []
    for rank in range(world):
        log = open(out / f"rank{rank}.log", "w")
        args = [sys.executable, str(RANK), str(out), str(world), str(rank), str(port), *(["break"] if breaks else [])]
        procs.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT))
    procs[0].others = procs[1:]
    return procs[0]


def _wait(first: subprocess.Popen, out: Path) -> dict:
    import torch

    for proc in [first, *first.others]:
        try:
            proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
    failed = [p for p in [first, *first.others] if p.returncode != 0]
    if failed:
        tail = "\n".join((out / "rank0.log").read_text().splitlines()[-25:])
        pytest.fail(f"verl's update in {out.name} failed (exit {failed[0].returncode}):\n{tail}")
    return {
        "metrics": json.loads((out / "metrics.json").read_text()),
        "layout": json.loads((out / "layout.json").read_text()),
        **torch.load(out / "weights.pt"),
    }


def _largest_difference(a: dict, b: dict) -> tuple[str, float]:
    return max(((name, float((a[name] - b[name]).abs().max())) for name in a), key=lambda item: item[1])


def _run_pair(tmp_path: Path, breaks: bool = False) -> tuple[dict, dict]:
    one, two = _update(tmp_path / "one", 1), _update(tmp_path / "two", 2, breaks)  # side by side: 3 processes
    return _wait(one, tmp_path / "one"), _wait(two, tmp_path / "two")


def _agree(one: dict, two: dict) -> bool:
    import torch

    loss = torch.tensor(one["metrics"]["actor/pg_loss"]), torch.tensor(two["metrics"]["actor/pg_loss"])
    weights = all(torch.allclose(two["after"][n], one["after"][n], rtol=RTOL, atol=ATOL) for n in one["after"])
    return bool(torch.allclose(loss[1], loss[0], rtol=RTOL, atol=ATOL)) and weights


def _validated(*overrides):
    """verl's own config for a plan: composed by Hydra, checked by validate_config and its dataclasses."""
    from rlbridge.contract.models import materialize_model
    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import prepare
    from rlbridge.testing import QUICKSTART
    from rlbridge_adapters.verl.validate import validate_plan

    prepared = prepare(load_config(QUICKSTART, ["backend=verl", *overrides]))
    materialize_model(prepared.config)  # verl's critic config reads the model's config.json
    return validate_plan(prepared.plan)


PPO = ("algorithm.name=ppo", "algorithm.group_size=1", "training.batch_size=16")


def test_megatron_plan_is_verls_own_megatron_config():
    from verl.utils.config import omega_conf_to_dataclass

    cfg = _validated(
        "resources.gpus_per_node=8",
        "training.strategy=megatron",
        "training.tensor_parallel_size=2",
        "training.pipeline_parallel_size=2",
        "training.offload.optimizer=true",
        *PPO,
    )
    actor, critic = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor), omega_conf_to_dataclass(cfg.critic)
    assert type(actor).__name__ == "McoreActorConfig" and type(critic).__name__ == "McoreCriticConfig"
    for engine in (actor.megatron, critic.megatron, cfg.actor_rollout_ref.ref.megatron):
        assert (engine.tensor_model_parallel_size, engine.pipeline_model_parallel_size) == (2, 2)
    assert actor.megatron.optimizer_offload and not actor.megatron.param_offload
    assert cfg.actor_rollout_ref.ref.strategy == "megatron"
    assert actor.optim.clip_grad == 1.0 and cfg.actor_rollout_ref.actor.optim.lr_decay_style == "constant"


def test_zero3_like_fsdp_plan_is_verls_own_fsdp2_config():
    from verl.utils.config import omega_conf_to_dataclass

    cfg = _validated(
        "resources.gpus_per_node=8",
        "training.sharding=gradients",
        "training.shard_group_size=4",
        "training.offload.parameters=true",
        "training.offload.optimizer=true",
        *PPO,
    )
    actor, critic = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor), omega_conf_to_dataclass(cfg.critic)
    for engine in (actor.engine, critic.engine):  # what verl's engine workers build the FSDP engine from
        assert engine.strategy == "fsdp2" and engine.reshard_after_forward is False and engine.fsdp_size == 4
        assert engine.param_offload and engine.optimizer_offload
    assert cfg.actor_rollout_ref.ref.fsdp_config.param_offload is True


@pytest.mark.engine
def test_two_cpu_ranks_make_the_update_one_rank_makes(tmp_path):
    one, two = _run_pair(tmp_path)
    # verl ran what the plan said: FSDP2 on gloo, 1 and 2 data-parallel ranks, the same micro batch per rank
    assert one["layout"] == {**two["layout"], "world": 1, "dp": 1}
    assert two["layout"]["world"] == two["layout"]["dp"] == 2 and "gloo" in two["layout"]["backend"]
    assert two["layout"]["strategy"] == "fsdp2" and two["layout"]["ppo_micro_batch_size_per_gpu"] == 2
    # the update moved the policy (well beyond the tolerance), the same way on both layouts
    name, moved = _largest_difference(one["after"], one["before"])
    assert moved > 1000 * ATOL, (name, moved)
    assert set(one["after"]) == set(two["after"])
    name, apart = _largest_difference(two["after"], one["after"])
    assert _agree(one, two), (
        f"pg_loss 1 rank {one['metrics']['actor/pg_loss']} vs 2 ranks {two['metrics']['actor/pg_loss']}; "
        f"largest weight difference {apart:.3g} in {name} (moved up to {moved:.3g})"
    )
    assert two["metrics"]["actor/grad_norm"] == pytest.approx(one["metrics"]["actor/grad_norm"], rel=RTOL)


@pytest.mark.engine
@pytest.mark.matrix_only
def test_the_equivalence_check_fails_when_the_loss_is_scaled_by_the_world_size_twice(tmp_path):
    one, two = _run_pair(tmp_path, breaks=True)
    assert not _agree(one, two)
    loss_one, loss_two = one["metrics"]["actor/pg_loss"][0], two["metrics"]["actor/pg_loss"][0]
    assert loss_two == pytest.approx(2 * loss_one, rel=1e-4)  # the loss, and so the gradient, doubled


@pytest.mark.engine
@pytest.mark.matrix_only
def test_two_cpu_ranks_train_end_to_end(tmp_path):
    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import train
    from rlbridge.testing import QUICKSTART

    run = tmp_path / "run"
    overrides = [
        "backend=verl",
        "resources.gpus_per_node=0",
        "resources.cpu_ranks_per_node=2",
        "training.steps=2",
        "training.batch_size=2",
        "algorithm.group_size=4",
        "rollout.max_new_tokens=8",
        f"output_dir={run}",
    ]
    summary = train(load_config(QUICKSTART, overrides), progress=False)
    assert summary["status"] == "completed"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r.get("weight_sync/bytes", 0) > 0 for r in rows), rows  # both ranks' shards reach the rollout
    roles = summary["placement"]["roles"]
    assert roles["actor"]["devices"] == ["node0:gpu0", "node0:gpu1"], roles  # one FSDP rank per logical GPU
    assert "trainer.n_gpus_per_node=2" in (run / "verl_overrides.txt").read_text()
