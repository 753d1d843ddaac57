"""OpenRLHF translation, checked without OpenRLHF installed (the plan is pure). The installed CLI's own
parser validates these argument lists in the OpenRLHF environments (tests/engines, rlbridge compat run)."""

import pytest

from rlbridge.errors import CapabilityError, ConfigError
from rlbridge.run.loading import load_config
from rlbridge.run.runner import prepare
from conftest import MINIMAL, write_config


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
