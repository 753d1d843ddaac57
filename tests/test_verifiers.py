"""verifiers (0.4, its v1 API) as optional-extra plugins: a taskset by id is the data source, the
task's own @vf.reward methods the reward, and the taskset's Env drives a multi-turn episode through
rlbridge's environment contract. The taskset is the tiny local package examples/verifiers_digits."""

import json
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("verifiers.v1")

from rlbridge.contract.rewards import RewardInput  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TASKSET_DIR = REPO / "examples" / "verifiers_digits"


@pytest.fixture(autouse=True)
def taskset_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(TASKSET_DIR))
    monkeypatch.setenv("PYTHONPATH", str(TASKSET_DIR))  # for the engine's processes
    yield
    sys.modules.pop("vf_digits", None)


def _plugins():
    from rlbridge.contract.registry import get_plugin_manager

    pm = get_plugin_manager()
    return (
        pm.get("data_source", "verifiers", "data").generate,
        pm.get("reward", "verifiers", "reward").factory,
        pm.get("environment", "verifiers", "environment").factory,
    )


def test_registered_through_the_entry_point_group():
    from importlib.metadata import entry_points

    assert "rlbridge_plugins.verifiers" in {e.value for e in entry_points(group="rlbridge")}


def test_taskset_rows_carry_the_task_and_its_own_reward_scores_them():
    rows_fn, reward_factory, _ = _plugins()
    rows = rows_fn(taskset="vf_digits", num_rows=5, seed=3)
    assert len(rows) == 5
    wire = json.loads(rows[0]["vf_task"])
    assert rows[0]["prompt"] == wire["prompt"] == rows[0]["answer"] * 4 and rows[0]["vf_taskset"] == "vf_digits"
    d = rows[0]["answer"]
    other = "1" if d != "1" else "2"
    reward = reward_factory()
    inputs = [
        RewardInput(prompt=rows[0]["prompt"], completion=c, completion_ids=[], answer=d, metadata=rows[0])
        for c in (d * 4, d + other, other * 3)
    ]
    assert reward(inputs) == [1.0, 0.5, 0.0]  # DigitTask.digit_share: the task's code, not rlbridge's
    assert reward([RewardInput(prompt="x", completion="x", completion_ids=[], metadata={})]) == [None]


def test_unknown_taskset_is_a_config_error():
    from rlbridge.errors import ConfigError

    rows_fn, _, _ = _plugins()
    with pytest.raises(ConfigError, match="no_such_taskset"):
        rows_fn(taskset="no_such_taskset")


def test_env_drives_the_episode_and_the_reward_sums_to_the_task_score():
    rows_fn, _, env_cls = _plugins()
    row = rows_fn(taskset="vf_digits", num_rows=1)[0]
    d = row["answer"]
    x = "1" if d != "1" else "2"
    env = env_cls(taskset="vf_digits", env_args={"turns": 3})
    assert env.agent == "player"
    assert env.reset(row, "PROMPT") == "PROMPT"  # the prompted task speaks first: the policy's turn
    results = [env.step(d + x), env.step(d * 2), env.step(x * 4)]
    assert [r.done for r in results] == [False, False, True]
    assert results[0].feedback == results[1].feedback == f"more {d}"  # DigitGameEnv.run's own feedback
    total = sum(r.reward for r in results)
    assert total == pytest.approx(3 / 8)  # digit_share of the whole conversation: 3 of 8 characters
    assert env.metrics["turns"] == 3.0  # recorded by DigitGameEnv.finalize


def test_episode_cut_by_the_turn_cap_still_earns_the_score_so_far_and_frees_its_thread():
    rows_fn, _, env_cls = _plugins()
    row = rows_fn(taskset="vf_digits", num_rows=1)[0]
    env = env_cls(taskset="vf_digits", env_args={"turns": 5})
    before = threading.active_count()
    env.reset(row, "p")
    r = env.step(row["answer"] * 2)
    assert not r.done and r.reward == pytest.approx(1.0)
    env.close()
    deadline = time.time() + 5
    while threading.active_count() > before and time.time() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= before


@pytest.mark.engine
@pytest.mark.matrix_only  # make compat only: CI's TRL cell keeps its one run per engine seam
@pytest.mark.parametrize("example", ["verifiers.yaml", "verifiers_multiturn.yaml"])
def test_two_trl_steps_with_rewards_from_the_environment(tmp_path, example):
    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import train

    config = load_config(
        REPO / "examples" / example,
        [f"output_dir={tmp_path}/run", "training.steps=2", "training.batch_size=2", "rollout_workers.timeout_s=300"],
    )
    assert train(config, progress=False)["status"] == "completed"
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all("reward/verifiers/mean" in r for r in rows)


def test_episode_the_engine_abandons_ends_after_the_turn_timeout():
    """Engines end an episode at their turn cap without telling the environment: its thread must end
    on its own (a process once hung at exit on 232 such threads)."""
    rows_fn, _, env_cls = _plugins()
    row = rows_fn(taskset="vf_digits", num_rows=1)[0]
    before = threading.active_count()
    env = env_cls(taskset="vf_digits", env_args={"turns": 5}, turn_timeout_s=0.5)
    env.reset(row, "p")
    env.step("x")
    deadline = time.time() + 10
    while threading.active_count() > before and time.time() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= before
