"""reasoning-gym as an optional-extra plugin: its datasets by name and config as a data source, its
own score_answer as the reward (the entry it needs travels with the row)."""

import json

import pytest

rg = pytest.importorskip("reasoning_gym")

from rlbridge.contract.registry import PluginManager  # noqa: E402
from rlbridge.contract.rewards import RewardInput  # noqa: E402
from rlbridge.errors import ConfigError  # noqa: E402


def plugins():
    pm = PluginManager()
    return pm.get("data_source", "reasoning_gym", "data.train.name"), pm.get(
        "reward", "reasoning_gym", "reward[0].name"
    )


def test_rows_carry_the_entry_and_the_scorer_is_reasoning_gyms():
    source, reward = plugins()
    rows = source.generate(dataset="chain_sum", num_rows=4, seed=3, min_terms=2, max_terms=2)
    assert len(rows) == 4 and all(r["rg_dataset"] == "chain_sum" for r in rows)
    entry = json.loads(rows[0]["rg_entry"])
    assert entry["question"] == rows[0]["prompt"] and entry["metadata"]["num_terms"] == 2  # the config reached it
    assert rows == source.generate(dataset="chain_sum", num_rows=4, seed=3, min_terms=2, max_terms=2)  # seeded
    fn = reward.factory()
    inputs = [RewardInput(r["prompt"], c, [1], r["answer"], r) for r, c in zip(rows[:2], [rows[0]["answer"], "no"])]
    inputs.append(RewardInput("p", "x", [1], None, {}))
    scores = fn(inputs)
    scorer = rg.get_score_answer_fn("chain_sum")
    assert scores == [1.0, float(scorer("no", json.loads(rows[1]["rg_entry"]))), None]
    tagged = RewardInput(rows[0]["prompt"], f"<answer>{rows[0]['answer']}</answer>", [1], rows[0]["answer"], rows[0])
    assert reward.factory(extract=True)([tagged]) == [1.0]


def test_unknown_dataset_is_a_config_error():
    source, _ = plugins()
    with pytest.raises(ConfigError, match="reasoning-gym refused dataset 'no_such_set'"):
        source.generate(dataset="no_such_set", num_rows=2)
