"""OpenRLHF translation, checked without OpenRLHF installed (the plan is pure). The installed CLI's own
parser validates these argument lists in the OpenRLHF environments (adapters/openrlhf/tests/in_env, rlbridge
compat run)."""

import pytest

from rlbridge.errors import CapabilityError, ConfigError
from rlbridge.run.loading import load_config
from rlbridge.run.runner import prepare
from tests.conftest import MINIMAL, REPO, write_config


def _argv(tmp_path, version, *overrides):
    cfg = load_config(
        write_config(tmp_path, MINIMAL),
        ["backend=openrlhf", "engine_env=auto", f"engine_version={version}", *overrides],
    )
    return prepare(cfg).plan.native["args"]


def _flag(argv, name):
    i = argv.index(name)
    return argv[i + 1]


def test_dotted_flags_from_0_10_2_flat_before(tmp_path):
    new = _argv(tmp_path, "0.11.2")
    old = _argv(tmp_path, "0.9.10")
    assert _flag(new, "--algo.advantage.estimator") == "group_norm" and "--advantage_estimator" not in new
    assert _flag(old, "--advantage_estimator") == "group_norm" and "--algo.advantage.estimator" not in old
    assert _flag(new, "--actor.model_name_or_path") == _flag(old, "--pretrain")


def test_batch_semantics_and_steps(tmp_path):
    argv = _argv(
        tmp_path,
        "0.11.2",
        "training.batch_size=4",
        "training.mini_batch_size=8",
        "training.micro_batch_size=2",
        "training.steps=3",
    )
    assert _flag(argv, "--rollout.batch_size") == "4" and _flag(argv, "--rollout.n_samples_per_prompt") == "4"
    assert _flag(argv, "--train.batch_size") == "8" and _flag(argv, "--train.micro_batch_size") == "2"
    assert _flag(argv, "--data.max_samples") == "12"  # steps x prompts: OpenRLHF runs exactly 3 steps


def test_estimators_and_kl(tmp_path):
    assert _flag(_argv(tmp_path, "0.11.2", "algorithm.name=reinforce_pp"), "--algo.advantage.estimator") == "reinforce"
    ppo = _argv(tmp_path, "0.11.2", "algorithm.name=ppo", "algorithm.group_size=1")
    assert _flag(ppo, "--algo.advantage.estimator") == "gae" and "--critic.model_name_or_path" in ppo
    kl = _argv(tmp_path, "0.11.2", "algorithm.kl_coef=0.01")
    assert "--algo.kl.use_loss" in kl and _flag(kl, "--algo.kl.estimator") == "k3"


def test_rejections_name_the_knob(tmp_path):
    with pytest.raises(CapabilityError, match="rollout.engine=hf.*vLLM only"):
        _argv(tmp_path, "0.11.2", "rollout.engine=hf")
    with pytest.raises(CapabilityError, match="no --actor.loss_agg_mode"):
        _argv(tmp_path, "0.10.4", "algorithm.loss_aggregation=seq_mean_token_mean")
    with pytest.raises(CapabilityError, match="bf16 or fp16"):
        _argv(tmp_path, "0.11.2", "model.dtype=float32")
    with pytest.raises(ConfigError, match="backend_options.openrlhf.rollout.batch_size"):
        _argv(tmp_path, "0.11.2", "backend_options.openrlhf={rollout.batch_size: 3}")


def test_environment_with_tools_runs_through_the_agent_with_its_tools_in_the_prompt(tmp_path):
    """OpenRLHF parses no tool calls and applies the chat template without tools: rlbridge's agent
    parses the calls, and with a chat template rlbridge renders the prompts with the tools' schemas."""
    argv = _argv(tmp_path, "0.11.2", "reward=[]", "environment={name: digit_hint}")
    assert argv[argv.index("--train.agent_func_path") + 1].endswith("rlbridge_agent.py")
    cfg = load_config(
        write_config(tmp_path, MINIMAL),
        [
            "backend=openrlhf",
            "engine_env=auto",
            "engine_version=0.11.2",
            "reward=[]",
            "environment={name: digit_hint}",
            "model.use_chat_template=true",
        ],
    )
    native = prepare(cfg).plan.native
    assert [t["function"]["name"] for t in native["data"]["tools"]] == ["hint"]
    assert (
        "--data.apply_chat_template" not in native["args"]
        and native["args"][native["args"].index("--data.input_template") + 1] == "{}"
    )
    no_tools = prepare(
        load_config(
            write_config(tmp_path, MINIMAL),
            [
                "backend=openrlhf",
                "engine_env=auto",
                "engine_version=0.11.2",
                "reward=[]",
                "environment={name: digit_turns}",
                "model.use_chat_template=true",
            ],
        )
    ).plan.native
    assert no_tools["data"]["tools"] is None and "--data.apply_chat_template" in no_tools["args"]


def test_rewards_are_scored_by_an_agent_executor_not_reward_func(tmp_path):
    """reward_func (--reward.remote_url FILE.py) sees decoded text only; the agent executor sees the
    engine's token ids (adapters/openrlhf/reward.py), on every supported version."""
    for version in ("0.9.10", "0.11.2"):
        argv = _argv(tmp_path, version)
        assert "--reward.remote_url" not in argv and "--remote_rm_url" not in argv
        flag = "--train.agent_func_path" if "--train.agent_func_path" in argv else "--agent_func_path"
        assert argv[argv.index(flag) + 1].endswith("rlbridge_reward.py")
    argv = _argv(tmp_path, "0.11.2", "reward=[]", "environment={name: digit_turns}")
    assert argv[argv.index("--train.agent_func_path") + 1].endswith("rlbridge_agent.py")


# ---- the training layout (adapters/openrlhf/layout.py, issue 42) ----


def _prepared(tmp_path, *overrides, version="0.11.2"):
    cfg = load_config(
        write_config(tmp_path, MINIMAL),
        ["backend=openrlhf", "engine_env=auto", f"engine_version={version}", *overrides],
    )
    return prepare(cfg)


def test_sharding_is_the_zero_stage_auto_keeps_2_on_gpus_and_0_on_cpu(tmp_path):
    assert _flag(_argv(tmp_path, "0.11.2"), "--ds.zero_stage") == "0"
    assert _flag(_argv(tmp_path, "0.11.2", "resources.gpus_per_node=2"), "--ds.zero_stage") == "2"
    for sharding, stage in (("none", "0"), ("optimizer", "1"), ("gradients", "2"), ("parameters", "3")):
        argv = _argv(tmp_path, "0.11.2", "resources.gpus_per_node=2", f"training.sharding={sharding}")
        assert _flag(argv, "--ds.zero_stage") == stage, sharding
    # measured: OpenRLHF's ZeRO-3 gives NaN log-probs on CPU (ZeRO-0 and ZeRO-2 train there)
    with pytest.raises(CapabilityError, match="ZeRO-3 does not train on CPU"):
        _argv(tmp_path, "0.11.2", "training.sharding=parameters")
    assert _flag(_argv(tmp_path, "0.11.2", "training.sharding=gradients"), "--ds.zero_stage") == "2"
    # the knob owns the flag now, not resources.gpus_per_node
    with pytest.raises(ConfigError, match="training.sharding"):
        _argv(tmp_path, "0.11.2", "backend_options.openrlhf={ds.zero_stage: 3}")


def test_zero3_with_adam_offload_tensor_parallel_and_hpz_on_8_gpus(tmp_path):
    argv = _argv(
        tmp_path,
        "0.11.2",
        "resources.gpus_per_node=8",
        "training.sharding=parameters",
        "training.offload.optimizer=true",
        "training.tensor_parallel_size=2",
        "training.shard_group_size=2",
        "algorithm.kl_coef=0.01",
        "training.offload.reference=true",
        "training.batch_size=4",
    )
    assert _flag(argv, "--ds.zero_stage") == "3" and "--ds.adam_offload" in argv and "--ref.offload" in argv
    assert _flag(argv, "--ds.tensor_parallel_size") == "2" and _flag(argv, "--ds.zpg") == "2"
    # the reference and the critic follow the actor's layout
    assert _flag(argv, "--ref.num_gpus_per_node") == _flag(argv, "--actor.num_gpus_per_node") == "8"
    # 16 samples over 8 GPUs / 2 per model copy = 4 data-parallel ranks: 4 samples each by default
    assert _flag(argv, "--train.batch_size") == "16" and _flag(argv, "--train.micro_batch_size") == "4"


def test_flat_spellings_before_0_10_2(tmp_path):
    argv = _argv(
        tmp_path,
        "0.9.10",
        "resources.gpus_per_node=4",
        "training.sharding=parameters",
        "training.offload.optimizer=true",
        "training.tensor_parallel_size=2",
        "training.shard_group_size=2",
        "algorithm.kl_coef=0.01",
        "training.offload.reference=true",
    )
    assert _flag(argv, "--zero_stage") == "3" and "--adam_offload" in argv and "--ref_reward_offload" in argv
    assert _flag(argv, "--ds_tensor_parallel_size") == "2" and _flag(argv, "--zpg") == "2"
    assert not any(a.startswith("--ds.") or a.startswith("--ref.") for a in argv), argv


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["training.strategy=fsdp"], "training.strategy=fsdp: OpenRLHF trains with DeepSpeed only"),
        (["training.strategy=megatron"], "DeepSpeed only"),
        (["training.offload.parameters=true"], "offloads no trained model's parameters"),
        (["training.pipeline_parallel_size=2"], "no pipeline parallelism"),
        (["training.expert_parallel_size=2"], "no expert parallelism"),
        (["training.shard_group_size=2"], "ZeRO\\+\\+ hpZ.*training.sharding: parameters"),
        (["training.offload.optimizer=true", "training.sharding=none"], "ZeRO stage 1-3"),
        (["training.offload.reference=true"], "no reference model"),
        (["training.tensor_parallel_size=2", "model.dtype=float16"], "bf16 for DeepSpeed tensor-parallel"),
        (["rollout.data_parallel_size=1"], "must cover the actor's GPUs exactly .*: 1 x 1 != 2"),
    ],
)
def test_layouts_openrlhf_cannot_run_are_refused_with_its_reason(tmp_path, overrides, match):
    with pytest.raises(CapabilityError, match=match):
        _argv(tmp_path, "0.11.2", "resources.gpus_per_node=2", *overrides)


def test_reference_offload_below_zero3_and_offload_on_cpu_are_approximated(tmp_path):
    """--ref.offload sets DeepSpeed offload_param, which only ZeRO-3 honours: below it the flag would do
    nothing, so rlbridge leaves it out and says so (a verl recipe's ref param_offload still plans here)."""
    ref = _prepared(tmp_path, "resources.gpus_per_node=2", "algorithm.kl_coef=0.01", "training.offload.reference=true")
    assert "--ref.offload" not in ref.plan.native["args"]
    assert any(n.startswith("training.offload: the reference stays") for n in ref.plan.approximations)
    cpu = _prepared(tmp_path, "training.sharding=gradients", "training.offload.optimizer=true")
    assert "--ds.adam_offload" not in cpu.plan.native["args"]
    assert any(n.startswith("training.offload:") for n in cpu.plan.approximations)
    gpu = _prepared(tmp_path, "resources.gpus_per_node=2", "training.offload.optimizer=true")
    assert "--ds.adam_offload" in gpu.plan.native["args"]
    assert not any(n.startswith("training.offload:") for n in gpu.plan.approximations)


def test_cpu_ranks_are_logical_gpus_and_the_batch_stays_global(tmp_path):
    """2 ranks on CPU: two actor processes on logical GPUs of the private Ray cluster, the reference
    following the actor; the global mini batch is split over the 2 data-parallel ranks (micro batch
    per rank), so OpenRLHF accumulates mini / (micro x 2) micro batches per update."""
    one = _prepared(tmp_path, "algorithm.kl_coef=0.01", "training.mini_batch_size=8")
    two = _prepared(tmp_path, "algorithm.kl_coef=0.01", "training.mini_batch_size=8", "resources.cpu_ranks_per_node=2")
    a1, a2 = one.plan.native["args"], two.plan.native["args"]
    assert _flag(a1, "--actor.num_gpus_per_node") == "1" and _flag(a2, "--actor.num_gpus_per_node") == "2"
    assert _flag(a2, "--ref.num_gpus_per_node") == "2"
    assert _flag(a1, "--train.batch_size") == _flag(a2, "--train.batch_size") == "8"
    assert _flag(a1, "--train.micro_batch_size") == "8" and _flag(a2, "--train.micro_batch_size") == "4"
    # the rollout's default: every rollout device (the 2 logical devices of colocate) over its tensor-parallel size
    assert _flag(a2, "--vllm.num_engines") == "2"
    assert two.plan.native["ray"]["logical_gpus"] == 2 + 2 + 2  # actor, vLLM engines, reference
    one_engine = _prepared(tmp_path, "resources.cpu_ranks_per_node=2", "rollout.data_parallel_size=1")
    assert _flag(one_engine.plan.native["args"], "--vllm.num_engines") == "1"
    assert one_engine.plan.native["ray"]["logical_gpus"] == 3
    with pytest.raises(ConfigError, match="cpu_ranks_per_node.*for CPU runs"):
        _prepared(tmp_path, "resources.gpus_per_node=2", "resources.cpu_ranks_per_node=2")


def test_rollout_replicas_on_a_split_layout(tmp_path):
    split = ["resources.gpus_per_node=8", "placement.policy=split", "placement.args={rollout_gpus: 4}"]
    default = _argv(tmp_path, "0.11.2", *split, "rollout.tensor_parallel_size=2")
    assert _flag(default, "--vllm.num_engines") == "2" and _flag(default, "--actor.num_gpus_per_node") == "4"
    fewer = _argv(tmp_path, "0.11.2", *split, "rollout.data_parallel_size=1", "rollout.tensor_parallel_size=2")
    assert _flag(fewer, "--vllm.num_engines") == "1"
    with pytest.raises(ConfigError, match="rollout.data_parallel_size \\(3\\) x rollout.tensor_parallel_size"):
        _argv(tmp_path, "0.11.2", *split, "rollout.data_parallel_size=3", "rollout.tensor_parallel_size=2")


def test_offline_stages_take_sharding_and_offload_and_refuse_ranks(tmp_path):
    sft = ["algorithm={name: sft}", "rollout={}", "reward=[]", "data.train={type: generator, name: digit_sft}"]
    argv = _argv(tmp_path, "0.11.2", *sft, "resources.gpus_per_node=1", "training.sharding=parameters")
    assert _flag(argv, "--ds.zero_stage") == "3"
    dpo = ["algorithm={name: dpo}", "rollout={}", "reward=[]", "data.train={type: generator, name: digit_preferences}"]
    argv = _argv(
        tmp_path,
        "0.11.2",
        *dpo,
        "resources.gpus_per_node=1",
        "training.sharding=parameters",
        "training.offload={optimizer: true, reference: true}",
    )
    assert "--ds.adam_offload" in argv and "--ref.offload" in argv
    with pytest.raises(CapabilityError, match="one process"):
        _argv(tmp_path, "0.11.2", *sft, "resources.cpu_ranks_per_node=2")


@pytest.mark.parametrize("name", ["zero3_split.sh", "zero3_flat_0.9.sh"])
def test_a_zero3_recipe_imports_into_the_layout_knobs_with_an_exact_round_trip(name):
    """--ds.zero_stage 3 / --zero_stage 3, Adam and reference offload, AutoTP, ring attention and 2 vLLM
    engines of tensor-parallel size 2 beside a 4-GPU actor (8 GPUs): every flag lands on a canonical knob,
    none is in conflict, and the written config plans every flag back (the importer's own round trip,
    re-checked here from the plan)."""
    pytest.importorskip("hydra", reason="rlbridge[import]")

    from rlbridge.contract.config import RunConfig
    from rlbridge.contract.registry import get_plugin_manager
    from rlbridge.importer.recipe_import import import_recipe
    from rlbridge.contract.importing import same
    from rlbridge.run.runner import resolve

    recipe = REPO / "tests" / "fixtures" / "recipes" / "openrlhf" / name
    result = import_recipe(str(recipe), "openrlhf")
    assert not result.by_kind("conflict") and not result.by_kind("action"), result.report()
    config = result.config
    assert config["training"]["sharding"] == "parameters"
    assert config["training"]["offload"] == {"optimizer": True, "reference": True}
    assert (config["training"]["tensor_parallel_size"], config["training"]["sequence_parallel_size"]) == (2, 2)
    assert config["resources"]["gpus_per_node"] == 8
    assert config["placement"] == {"policy": "split", "args": {"rollout_gpus": 4}}
    assert config["rollout"]["tensor_parallel_size"] == 2
    kinds = {e.key: e.kind for e in result.entries}
    layout_flags = ("zero_stage", "adam_offload", "ref_reward_offload", "ds_tensor_parallel_size", "ring_attn_size")
    if name.startswith("zero3_split"):
        layout_flags = (
            "ds.zero_stage",
            "ds.adam_offload",
            "ref.offload",
            "ds.tensor_parallel_size",
            "ds.ring_attn_size",
        )
    for flag in (*layout_flags, "vllm.num_engines" if "split" in name else "vllm_num_engines"):
        assert kinds[flag] == "mapped", (flag, kinds[flag])
    backend = get_plugin_manager().backend("openrlhf")
    data = dict(config, reward=[{"name": "digit_match"}], engine_version=result.recipe.version)
    planned = resolve(RunConfig.model_validate(data))
    view = backend.recipe_importer().view(backend.plan(planned).native, planned)
    for setting in result.recipe.settings:
        if kinds[setting.spelling or setting.key] in ("mapped", "same"):
            assert same(view[setting.key], setting.value), (setting.key, view.get(setting.key), setting.value)
