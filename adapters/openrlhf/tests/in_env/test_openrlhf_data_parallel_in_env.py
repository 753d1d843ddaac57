"""Data parallelism on OpenRLHF, end to end on CPU (issue 42): 2 ranks x half the micro batches train the
same first update as 1 rank x all of them.

resources.cpu_ranks_per_node 2 runs two DeepSpeed ranks (gloo) on logical GPUs of the run's private Ray
cluster. Both runs train on the same experience: training.deterministic repeats the rollout sample for
sample (one vLLM engine in both: rollout.data_parallel_size 1), and a reward that differs between the
samples of a group gives a gradient. With one sample per micro batch, 1 rank accumulates all 8 micro
batches and 2 ranks 4 each, which DeepSpeed then averages; OpenRLHF divides each micro batch's loss by
the action tokens of the whole update on every rank and multiplies it by the data-parallel size that
the averaging divides out again (utils/loss_utils.py). So the first update's loss, its gradient norm
and the updated float32 master weights agree up to reduction order, which here is bf16's: OpenRLHF
trains in bf16, and at ZeRO-0 (rlbridge's CPU default) DeepSpeed accumulates and all-reduces the
gradients in bf16 (it refuses float32 accumulation there: "unsupported mix of model_dtype=torch.bfloat16
and grad_accum_dtype=torch.float32"). Measured (2026-12-04): loss 0.048944005522 vs 0.048944004511,
gradient norm 1.78751 vs 1.78830 (4e-4), and Adam's first step (about lr x the gradient's sign) differs
by more than lr/100 on 0.16 % of the weights, those whose gradient is within bf16 rounding of 0. A wrong
data-parallel compensation (the loss scaled by the world size once more) doubles the loss and the
gradient norm; a rank whose gradient is lost turns the update's direction on many weights.
"""

import json
import math
import sys

import pytest

from rlbridge.run.loading import load_config
from rlbridge.run.runner import train
from rlbridge.testing import QUICKSTART

from .openrlhf_runtime import require_openrlhf_runtime

require_openrlhf_runtime()

LR = 5e-3
RUN = [
    "backend=openrlhf",
    f"engine_env={sys.prefix}",  # this environment, the engine in a process of its own as `rlbridge train` runs it
    "resources.gpus_per_node=0",
    "rollout.data_parallel_size=1",
    "training.steps=1",
    "training.batch_size=2",
    "algorithm.group_size=4",
    "rollout.max_new_tokens=8",
    "training.micro_batch_size=1",
    f"training.lr={LR}",
    "training.seed=5",
    "training.deterministic=true",
    "telemetry.samples_per_step=8",
    "checkpoint.interval=1",  # the DeepSpeed checkpoint holds the float32 master weights after the update
]
# the fraction of digits in the completion: differs between the samples of a group (the quickstart's
# digit_match is 0 for nearly every sample of a random model, and so is the gradient)
REWARD = """
def reward_func(queries, prompts, labels):
    rewards = []
    for query, prompt in zip(queries, prompts):
        completion = query[len(prompt):]
        rewards.append(sum(c.isdigit() for c in completion) / max(len(completion), 1))
    return {"rewards": rewards}
"""


def _run(tmp_path, ranks: int) -> dict:
    reward = tmp_path / "digits.py"
    reward.write_text(REWARD)
    out = tmp_path / f"ranks{ranks}"
    summary = train(
        load_config(
            QUICKSTART,
            [
                *RUN,
                f"resources.cpu_ranks_per_node={ranks}",
                f"reward=[{{native: openrlhf, function: '{reward}:reward_func'}}]",
                f"output_dir={out}",
            ],
        ),
        progress=False,
    )
    assert summary["status"] == "completed", summary
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    samples = sorted((out / "samples.jsonl").read_text().splitlines())
    master, ranks = _master_weights(out)
    return {"summary": summary, "metrics": metrics[0], "samples": samples, "master": master, "ranks": ranks, "dir": out}


def _master_weights(run_dir):
    """The actor's float32 master weights after the update, from its DeepSpeed checkpoint (ZeRO-0 keeps
    them whole on every rank: the optimizer's fp32_groups_flat, one flat tensor per parameter group),
    and the data-parallel world that wrote it."""
    import torch

    states = run_dir / "checkpoints" / "_actor" / "global_step1" / "mp_rank_00_model_states.pt"
    state = torch.load(states, map_location="cpu", weights_only=False)
    flat = torch.cat([group.float().flatten() for group in state["optimizer"]["fp32_groups_flat"]])
    return flat, state["dp_world_size"]


def _moved(run_dir) -> float:
    """The mean absolute change of the saved model's weights from the initial model's (both bf16)."""
    import torch
    from safetensors.torch import load_file

    from rlbridge.contract.models import builtin_model_dir

    initial = load_file(str(builtin_model_dir("tiny-digits") / "model.safetensors"))
    final = load_file(str(run_dir / "model_final" / "model.safetensors"))
    deltas = [(final[k].float() - initial[k].to(torch.bfloat16).float()).abs().flatten() for k in initial]
    return torch.cat(deltas).mean().item()


@pytest.mark.engine
def test_two_ranks_train_the_same_first_update_as_one(tmp_path):
    one, two = _run(tmp_path, 1), _run(tmp_path, 2)
    # two DeepSpeed ranks really ran: two policy actors on two logical GPUs, a data-parallel world of 2
    actor = two["summary"]["placement"]["roles"]["actor"]
    assert len(actor["actors"]) == 2 and len(actor["devices"]) == 2, actor
    assert (one["ranks"], two["ranks"]) == (1, 2)
    # the same experience: the same samples and rewards, with a gradient to follow
    assert one["samples"] == two["samples"]
    m1, m2 = one["metrics"], two["metrics"]
    assert m1["reward/std"] > 0 and m1["grad_norm"] > 0
    # the first update's loss and gradient norm
    assert math.isclose(m1["loss/policy"], m2["loss/policy"], rel_tol=1e-5), (m1["loss/policy"], m2["loss/policy"])
    assert math.isclose(m1["grad_norm"], m2["grad_norm"], rel_tol=2e-3), (m1["grad_norm"], m2["grad_norm"])
    # the updated weights: Adam's first step moves every weight with a gradient by about lr
    assert _moved(one["dir"]) > LR / 2
    diff = (one["master"] - two["master"]).abs()
    assert diff.max() <= 2 * LR
    assert (diff > LR / 100).float().mean() < 0.01, (diff > LR / 100).float().mean()
