"""verl translation, checked without verl installed (the plan is pure). verl's own config code
validates these plans in the verl environments (tests/conformance, via rlbridge compat run)."""

import pytest

from rlbridge.errors import CapabilityError, ConfigError
from rlbridge.run.loading import load_config
from rlbridge.run.runner import prepare
from tests.conftest import MINIMAL, write_config


def _plan(tmp_path, version, *overrides):
    cfg = load_config(
        write_config(tmp_path, MINIMAL), ["backend=verl", "engine_env=auto", f"engine_version={version}", *overrides]
    )
    return prepare(cfg).plan.native


@pytest.mark.parametrize(
    "version,key",
    [
        ("0.5.0", "reward_model.reward_manager"),
        ("0.7.0", "reward_model.reward_manager"),
        ("0.7.1", "reward.reward_manager.name"),
        ("0.9.1", "reward.reward_manager.name"),
    ],
)
def test_reward_keys_follow_the_version(tmp_path, version, key):
    overrides = _plan(
        tmp_path,
        version,
        *(["rollout.engine=vllm"] if version == "0.9.1" else []),
        *(["resources.gpus_per_node=1", "rollout.engine=vllm"] if version in ("0.7.0", "0.7.1") else []),
    )["overrides"]
    assert overrides[key] == "rlbridge"
    other = "reward.reward_manager.name" if key.startswith("reward_model") else "reward_model.reward_manager"
    assert other not in overrides  # from 0.9.0 the old key is silently ignored: never emit it


def test_batch_semantics(tmp_path):
    o = _plan(
        tmp_path,
        "0.5.0",
        "training.batch_size=4",
        "training.mini_batch_size=8",
        "training.micro_batch_size=2",
        "algorithm.epochs_per_rollout=2",
    )["overrides"]
    assert o["data.train_batch_size"] == 4 and o["actor_rollout_ref.rollout.n"] == 4
    assert o["actor_rollout_ref.actor.ppo_mini_batch_size"] == 2  # 8 samples / group of 4 = 2 prompts
    assert o["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == 2
    assert o["actor_rollout_ref.actor.ppo_epochs"] == 2


def test_kl_placement_and_algorithms(tmp_path):
    loss = _plan(tmp_path, "0.5.0", "algorithm.kl_coef=0.05")["overrides"]
    assert loss["actor_rollout_ref.actor.use_kl_loss"] is True and loss["actor_rollout_ref.actor.kl_loss_coef"] == 0.05
    reward = _plan(tmp_path, "0.5.0", "algorithm.name=rloo", "algorithm.kl_coef=0.05", "algorithm.kl_placement=reward")[
        "overrides"
    ]
    assert reward["algorithm.use_kl_in_reward"] is True and reward["algorithm.kl_ctrl.kl_coef"] == 0.05
    assert reward["algorithm.adv_estimator"] == "rloo"
    dr = _plan(tmp_path, "0.5.0", "algorithm.name=dr_grpo")["overrides"]
    assert (
        dr["algorithm.norm_adv_by_std_in_grpo"] is False
        and dr["actor_rollout_ref.actor.loss_agg_mode"] == "seq-mean-token-sum-norm"
    )
    ppo = _plan(tmp_path, "0.5.0", "algorithm.name=ppo", "algorithm.group_size=1")["overrides"]
    assert ppo["algorithm.adv_estimator"] == "gae" and ppo["critic.model.path"] == "<model_dir>"


def test_hf_rollout_only_up_to_0_5(tmp_path):
    with pytest.raises(CapabilityError, match="no HF rollout.*removed in 0.6.0"):
        _plan(tmp_path, "0.9.1", "rollout.engine=hf")
    # rollout.engine: auto picks what each version has
    assert _plan(tmp_path, "0.5.0")["overrides"]["actor_rollout_ref.rollout.name"] == "hf"
    assert _plan(tmp_path, "0.9.1")["overrides"]["actor_rollout_ref.rollout.name"] == "vllm"


def test_cpu_runs_of_0_9_use_the_legacy_trainer_and_cpu_platform(tmp_path):
    native = _plan(tmp_path, "0.9.1", "rollout.engine=vllm")
    assert native["overrides"]["trainer.use_v1"] is False
    assert native["env"]["VERL_PLATFORM"] == "cpu" and native["env"]["VERL_ENGINE_DEVICE"] == "cuda"


def test_unknown_estimator_normalisation_is_rejected(tmp_path):
    with pytest.raises(CapabilityError, match="advantage_normalization"):
        _plan(tmp_path, "0.5.0", "algorithm.name=rloo", "algorithm.advantage_normalization=group")


def test_dpo_is_not_in_the_schema(tmp_path):
    # no backend runs DPO, so no error may point at one that would: the schema names the algorithms there are
    with pytest.raises(ConfigError, match="algorithm.name"):
        _plan(tmp_path, "0.5.0", "algorithm.name=dpo")


def test_backend_options_cannot_shadow_translated_keys(tmp_path):
    with pytest.raises(ConfigError, match="backend_options.verl.data.train_batch_size"):
        _plan(tmp_path, "0.5.0", "backend_options.verl.data.train_batch_size=3")
    native = _plan(tmp_path, "0.5.0", "backend_options.verl.actor_rollout_ref.actor.policy_loss.loss_mode=gpg")
    assert native["overrides"]["actor_rollout_ref.actor.policy_loss.loss_mode"] == "gpg"


def test_engine_version_outside_the_supported_range(tmp_path):
    with pytest.raises(ConfigError, match=r"engine_version: verl 0.4.0 is outside the range.*>=0.5.0,<=0.9.1"):
        _plan(tmp_path, "0.4.0")


def test_environment_becomes_an_agent_loop_and_its_tools_verl_tools(tmp_path):
    env = "environment={name: digit_hint, args: {turns: 2}, max_turns: 3}"
    native = _plan(tmp_path, "0.9.1", "reward=[]", env)
    o = native["overrides"]
    assert o["actor_rollout_ref.rollout.agent.default_agent_loop"] == "rlbridge_environment"
    assert o["actor_rollout_ref.rollout.agent.agent_loop_config_path"] == "<run_dir>/rlbridge_agent_loops.yaml"
    assert o["actor_rollout_ref.rollout.multi_turn.max_assistant_turns"] == 3
    assert o["actor_rollout_ref.rollout.multi_turn.tool_config_path"] == "<run_dir>/rlbridge_tools.yaml"
    assert [t["function"]["name"] for t in native["tools"]] == ["hint"]
    no_tools = _plan(tmp_path, "0.9.1", "reward=[]", "environment={name: digit_turns}")
    assert (
        "actor_rollout_ref.rollout.multi_turn.tool_config_path" not in no_tools["overrides"] and no_tools["tools"] == []
    )
    assert "actor_rollout_ref.rollout.agent.agent_loop_config_path" not in _plan(tmp_path, "0.9.1")["overrides"]


def test_environment_needs_verl_0_9_an_async_rollout_and_no_separate_reward(tmp_path):
    env = "environment={name: digit_turns}"
    with pytest.raises(CapabilityError, match="environment.*engine_version 0.9.1"):
        _plan(tmp_path, "0.5.0", "reward=[]", env)
    with pytest.raises(CapabilityError, match="environment.*move the reward into the environment"):
        _plan(tmp_path, "0.9.1", env)
