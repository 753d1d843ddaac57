"""verl's training layout (adapters/verl/layout.py, issue 42), planned without verl installed (the plan is
pure): strategy, sharding, hybrid-shard groups, offload, Megatron's parallel sizes, CPU ranks and rollout
replicas land in verl's own keys per version, or are refused with verl's reason; the batch stays global on any
world size. verl's own config code validates these plans in the verl environment
(adapters/verl/tests/in_env/test_verl_layout_in_env.py)."""

import pytest

from rlbridge.errors import CapabilityError, ConfigError
from rlbridge.run.loading import load_config
from rlbridge.run.runner import prepare
from rlbridge.testing import QUICKSTART
from tests.conftest import REPO

A, REF = "actor_rollout_ref.actor.", "actor_rollout_ref.ref."
SFT = REPO / "configs" / "sft.yaml"
PPO = ("algorithm.name=ppo", "algorithm.group_size=1", "training.batch_size=16")


def _prepare(*overrides, version="0.9.1"):
    return prepare(load_config(QUICKSTART, ["backend=verl", f"engine_version={version}", *overrides]))


def _o(*overrides, version="0.9.1") -> dict:
    return _prepare(*overrides, version=version).plan.native["overrides"]


def test_fsdp_is_fsdp2_on_every_machine_for_actor_reference_and_critic():
    for gpus in (0, 8):
        o = _o(f"resources.gpus_per_node={gpus}", *PPO)
        assert o[f"{A}strategy"] == o[f"{REF}strategy"] == o["critic.strategy"] == "fsdp2"
        assert "model_engine" not in o
        assert o == _o(f"resources.gpus_per_node={gpus}", *PPO, "training.strategy=fsdp")  # auto is fsdp


def test_megatron_with_tensor_and_pipeline_parallelism_plans_into_verls_megatron_keys():
    o = _o(
        "resources.gpus_per_node=8",
        "training.strategy=megatron",
        "training.tensor_parallel_size=2",
        "training.pipeline_parallel_size=2",
        *PPO,
    )
    assert o["model_engine"] == "megatron"
    for role in (A, REF, "critic."):  # the reference and the critic follow the actor
        assert o[f"{role}strategy"] == "megatron"
        assert o[f"{role}megatron.tensor_model_parallel_size"] == 2
        assert o[f"{role}megatron.pipeline_model_parallel_size"] == 2
        assert o[f"{role}megatron.expert_model_parallel_size"] == 1
        assert o[f"{role}megatron.context_parallel_size"] == 1
    assert not [k for k in o if "fsdp_config" in k or "ulysses" in k or k.endswith(".grad_clip")]
    # Megatron's optimizer config has its own schedule and clip keys
    assert o[f"{A}optim.lr_decay_style"] == "constant" and f"{A}optim.lr_scheduler_type" not in o
    assert o[f"{A}optim.clip_grad"] == 1.0
    # 8 GPUs / (tp 2 x pp 2) = 2 data-parallel ranks: the mini batch of 16 samples is 8 per rank
    assert o[f"{A}ppo_mini_batch_size"] == 16 and o[f"{A}ppo_micro_batch_size_per_gpu"] == 8


def test_megatron_sequence_parallelism_is_context_parallelism():
    o = _o("resources.gpus_per_node=4", "training.strategy=megatron", "training.sequence_parallel_size=2")
    assert o[f"{A}megatron.context_parallel_size"] == o[f"{REF}megatron.context_parallel_size"] == 2
    assert f"{A}ulysses_sequence_parallel_size" not in o


@pytest.mark.parametrize(
    "overrides,match",
    [
        (("training.strategy=deepspeed",), "training.strategy=deepspeed.*no DeepSpeed engine"),
        (("training.strategy=megatron",), "training.strategy=megatron.*CUDA.*on CPU use training.strategy: fsdp"),
        (("training.tensor_parallel_size=2", "resources.gpus_per_node=2"), "tensor_parallel_size.*strategy: megatron"),
        (("training.pipeline_parallel_size=2", "resources.gpus_per_node=2"), "pipeline_parallel_size.*megatron"),
        (("training.expert_parallel_size=2", "resources.gpus_per_node=2"), "expert_parallel_size.*megatron"),
        (("training.sharding=optimizer", "resources.gpus_per_node=2"), "sharding=optimizer.*no optimizer-only"),
        (
            ("training.sharding=none", "training.shard_group_size=2", "resources.gpus_per_node=4"),
            "sharding=none.*fsdp_size 1",
        ),
        (
            ("training.strategy=megatron", "training.sharding=gradients", "resources.gpus_per_node=2"),
            "no gradient-only sharding",
        ),
        (
            ("training.strategy=megatron", "training.shard_group_size=2", "resources.gpus_per_node=4"),
            "shard_group_size.*Megatron engine has no hybrid-shard group",
        ),
        (("training.offload.parameters=true",), "training.offload.*on CPU.*nothing to move"),
        (("rollout.data_parallel_size=2", "resources.gpus_per_node=8", "rollout.tensor_parallel_size=2"), "only be 4"),
        (("resources.cpu_ranks_per_node=2", "resources.gpus_per_node=1"), "cpu_ranks_per_node.*for CPU runs"),
    ],
)
def test_what_verl_cannot_do_is_refused_with_its_reason(overrides, match):
    with pytest.raises((CapabilityError, ConfigError), match=match):
        _o(*overrides)


def test_megatron_needs_the_model_engine_group_of_0_7_1():
    with pytest.raises(CapabilityError, match="verl 0.5.0 composes Megatron.*ppo_megatron_trainer"):
        _o("training.strategy=megatron", "resources.gpus_per_node=2", "rollout.engine=vllm", version="0.5.0")


def test_sharding_and_hybrid_shard_groups_for_actor_reference_and_critic_per_version():
    o = _o("resources.gpus_per_node=8", "training.sharding=gradients", "training.shard_group_size=4", *PPO)
    for prefix in (f"{A}fsdp_config.", f"{REF}fsdp_config.", "critic.fsdp."):
        assert o[f"{prefix}reshard_after_forward"] is False and o[f"{prefix}fsdp_size"] == 4
    old = _o(
        "resources.gpus_per_node=8", "training.sharding=gradients", "training.shard_group_size=4", *PPO, version="0.5.0"
    )
    assert old["critic.model.fsdp_config.reshard_after_forward"] is False
    assert old["critic.model.fsdp_config.fsdp_size"] == 4 and "critic.fsdp.fsdp_size" not in old
    assert f"{REF}fsdp_config.fsdp_size" not in old  # 0.5.0's reference shares the actor's mesh
    none = _o("resources.gpus_per_node=8", "training.sharding=none")
    assert none[f"{A}fsdp_config.fsdp_size"] == 1  # every rank a whole replica
    auto = _o("resources.gpus_per_node=8")
    assert not [k for k in auto if k.endswith(("reshard_after_forward", "fsdp_size"))]  # verl's FULL_SHARD


def test_zero3_like_offload_and_the_reference_following_or_not():
    o = _o(
        "resources.gpus_per_node=8",
        "training.sharding=parameters",
        "training.offload.parameters=true",
        "training.offload.optimizer=true",
        *PPO,
    )
    assert o[f"{A}fsdp_config.reshard_after_forward"] is True
    assert o[f"{A}fsdp_config.param_offload"] is True and o[f"{A}fsdp_config.optimizer_offload"] is True
    assert o["critic.fsdp.param_offload"] is True and o["critic.fsdp.optimizer_offload"] is True
    assert o[f"{REF}fsdp_config.param_offload"] is True  # offload.reference unset: follows parameters
    ref_only = _o("resources.gpus_per_node=8", "training.offload.reference=true")
    assert ref_only[f"{REF}fsdp_config.param_offload"] is True and ref_only[f"{A}fsdp_config.param_offload"] is False
    # verl's FSDP keeps a reference model in CPU memory anyway: false is said to be approximated
    notes = _prepare("resources.gpus_per_node=1", "algorithm.kl_coef=0.01").plan.approximations
    assert any(n.startswith("training.offload:") and "reference" in n for n in notes), notes
    assert not any(n.startswith("training.offload:") for n in _prepare("resources.gpus_per_node=1").plan.approximations)


def test_megatron_offload_keys_per_version():
    base = ("resources.gpus_per_node=2", "training.strategy=megatron", "training.offload.parameters=true")
    o = _o(*base, "training.offload.reference=false")
    assert o[f"{A}megatron.param_offload"] is True and o[f"{A}megatron.optimizer_offload"] is False
    assert o[f"{REF}megatron.param_offload"] is False and f"{A}megatron.grad_offload" not in o
    assert _o(*base, version="0.9.0")[f"{A}megatron.grad_offload"] is True  # 0.9.1 folded it into param_offload
    assert _o(*base, "training.sharding=parameters")[f"{A}megatron.use_megatron_fsdp"] is True
    assert _o(*base, "training.sharding=none")[f"{A}megatron.use_distributed_optimizer"] is False


def test_cpu_ranks_are_logical_gpus_and_the_batch_stays_global():
    prepared = _prepare("resources.cpu_ranks_per_node=2", "training.micro_batch_size=4")
    o = prepared.plan.native["overrides"]
    assert o["trainer.n_gpus_per_node"] == 2 and prepared.plan.native["ray"]["logical_gpus"] == 2
    # quickstart: 8 prompts x group 8 = 64 samples, one update: verl's mini batch is in prompts, global
    assert o[f"{A}ppo_mini_batch_size"] == 8 and o[f"{A}ppo_micro_batch_size_per_gpu"] == 4
    assert _o("resources.cpu_ranks_per_node=2")[f"{A}ppo_micro_batch_size_per_gpu"] == 32  # unset: 64 / 2 ranks
    with pytest.raises(CapabilityError, match="cpu_ranks_per_node.*engine_version 0.9.1"):
        _o("resources.cpu_ranks_per_node=2", version="0.5.0")
    # 3 ranks cannot split 64 samples of micro batches of 8: refused naming both numbers
    with pytest.raises(ConfigError, match=r"micro_batch_size \(8\) x 3 data-parallel ranks"):
        _o("resources.cpu_ranks_per_node=3", "training.micro_batch_size=8")


def test_ulysses_divides_the_devices_into_fewer_data_parallel_ranks():
    o = _o("resources.gpus_per_node=4", "training.sequence_parallel_size=2", "training.sequence_packing=true")
    assert o[f"{A}ulysses_sequence_parallel_size"] == 2
    # 4 GPUs / Ulysses 2 = 2 data-parallel ranks: 64 samples are 32 per rank, one micro batch each
    assert o[f"{A}ppo_mini_batch_size"] == 8 and o[f"{A}ppo_micro_batch_size_per_gpu"] == 32


def test_rollout_replicas_can_only_be_verls_own_count():
    o = _o("resources.gpus_per_node=8", "rollout.tensor_parallel_size=2", "rollout.data_parallel_size=4")
    assert o["actor_rollout_ref.rollout.tensor_model_parallel_size"] == 2 and o["trainer.n_gpus_per_node"] == 8


def test_grad_clip_reaches_the_key_each_version_clips_at():
    assert _o("training.grad_clip=0.5")[f"{A}optim.clip_grad"] == 0.5  # 0.9's engine workers
    old = _o("training.grad_clip=0.5", version="0.5.0")
    assert old[f"{A}grad_clip"] == 0.5 and f"{A}optim.clip_grad" not in old


@pytest.mark.parametrize(
    "option,knob",
    [
        (f"{A}strategy=fsdp", "training.strategy"),
        ("model_engine=megatron", "training.strategy"),
        (f"{A}fsdp_config.param_offload=true", "training.offload"),
        (f"{REF}fsdp_config.param_offload=true", "training.offload"),
        (f"{A}fsdp_config.fsdp_size=2", "training.sharding"),
        (f"{A}fsdp_config.reshard_after_forward=false", "training.sharding"),
        (f"{A}megatron.tensor_model_parallel_size=2", "training.tensor_parallel_size"),
        (f"{A}megatron.context_parallel_size=2", "training.sequence_parallel_size"),
    ],
)
def test_backend_options_cannot_set_what_the_layout_knobs_own(option, knob):
    with pytest.raises(ConfigError, match=f"set {knob} instead"):
        _o(f"backend_options.verl.{option}")


@pytest.mark.parametrize(
    "overrides",
    [
        ("training.strategy=fsdp", "resources.gpus_per_node=1"),  # sft_trainer keeps verl's FSDP1 on GPUs
        ("training.sharding=gradients",),
        ("resources.cpu_ranks_per_node=2",),
    ],
)
def test_the_offline_stage_keeps_verls_default_layout(overrides):
    with pytest.raises(CapabilityError, match="sft_trainer as one process"):
        prepare(load_config(SFT, ["backend=verl", "engine_version=0.9.1", *overrides]))
