"""`rlbridge import` of asynchronous recipes into the canonical async knobs (rollout.max_staleness,
rollout.partial_rollouts, rollout.weight_sync_interval, split placement), with the round trip.

OpenRLHF (--train.async_enable, --train.async_queue_size, --train.partial_rollout_enable; --async_train before
0.10.2): its plan honours the knobs, so the round trip is the plan itself, and `plan --explain` names the flags.
verl (fully_async_policy.fully_async_main, one_step_off_policy.main_ppo): the round trip is the adapter's own
translation of them (asynchrony.translate); its plan launches one_step_off_policy or fully_async_main, and refuses
fully_async_main without partial rollouts (adapters/verl/asynchrony.py NO_WAITING_SYNC), saying why. No engine runs here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlbridge.contract.config import RunConfig
from rlbridge.contract.registry import get_plugin_manager
from rlbridge.errors import RLBridgeError
from rlbridge.importer.recipe_import import import_recipe
from rlbridge.contract.importing import same
from rlbridge.run.runner import resolve

pytest.importorskip("hydra", reason="rlbridge[import] (hydra-core) parses verl's Hydra overrides")

RECIPES = Path(__file__).parent / "fixtures" / "recipes"
OPENRLHF_ASYNC = RECIPES / "real" / "openrlhf" / "train_reinforce_baseline_ray_agent_async.sh"  # OpenRLHF v0.11.0
FULLY_ASYNC = RECIPES / "async" / "verl" / "fully_async_dapo_7b_math_fsdp2_4_4.sh"
ONE_STEP_OFF = RECIPES / "async" / "verl" / "one_step_off_grpo_0.6b_gsm8k_fsdp2_2_6.sh"
_cache: dict = {}


def imported(source, engine: str, version: str | None = None):
    key = (str(source), engine, version)
    if key not in _cache:
        _cache[key] = import_recipe(str(source), engine, version)
    return _cache[key]


def entry(result, key: str):
    found = [e for e in result.entries if e.key == key]
    assert len(found) == 1, (key, result.report())
    return found[0]


def config_of(result) -> RunConfig:
    data = dict(
        result.config, reward=result.config["reward"] or [{"name": "digit_match"}], engine_version=result.recipe.version
    )
    return resolve(RunConfig.model_validate(data))


def openrlhf_view(result):
    backend = get_plugin_manager().backend("openrlhf")
    config = config_of(result)
    plan = backend.plan(config)
    return backend, config, plan, backend.recipe_importer().view(plan.native, config)


# ---- OpenRLHF ----


def test_openrlhf_async_example_imports_into_the_async_knobs():
    """OpenRLHF's own async example (colocate_all with async_enable and partial rollouts, queue size left at 1)."""
    result = imported(OPENRLHF_ASYNC, "openrlhf", "0.11.0")
    rollout, placement = result.config["rollout"], result.config["placement"]
    assert rollout["max_staleness"] == 1 and rollout["partial_rollouts"] is True
    # the vLLM engines (2 x tensor parallel 2) beside the actor's 4 GPUs: OpenRLHF's async loop never colocates vLLM
    assert (
        placement == {"policy": "split", "args": {"rollout_gpus": 4}}
        and result.config["resources"]["gpus_per_node"] == 8
    )
    assert (entry(result, "train.async_enable").kind, entry(result, "train.async_enable").detail) == (
        "mapped",
        "rollout.max_staleness=1",
    )
    assert entry(result, "train.partial_rollout_enable").kind == "mapped"
    assert "rollout.partial_rollouts=True" in entry(result, "train.partial_rollout_enable").detail
    colocate = entry(result, "train.colocate_all")
    assert colocate.kind == "owned" and "only colocates DeepSpeed models" in colocate.detail
    for key in ("actor.num_gpus_per_node", "vllm.num_engines", "vllm.tensor_parallel_size"):
        assert entry(result, key).kind == "mapped", key
    # the round trip: the imported config's plan has the recipe's flags
    _, _, _, view = openrlhf_view(result)
    assert view["train.async_enable"] is True and view["train.partial_rollout_enable"] is True
    assert (
        view["actor.num_gpus_per_node"] == 4
        and view["vllm.num_engines"] == 2
        and view["vllm.tensor_parallel_size"] == 2
    )
    assert view["train.async_queue_size"] == 1  # the parser's default, which the recipe leaves unset
    assert "train.colocate_all" not in view


ASYNC_COMMAND = (
    "python3 -m openrlhf.cli.train_ppo_ray --actor.model_name_or_path /models/tiny --actor.num_gpus_per_node 2 "
    "--vllm.num_engines 2 --vllm.tensor_parallel_size 1 --rollout.batch_size 16 --rollout.n_samples_per_prompt 4 "
    "--train.batch_size 64 --train.async_enable --train.async_queue_size 3 --train.partial_rollout_enable"
)


def test_openrlhf_async_command_line_round_trips_and_explains():
    result = imported(ASYNC_COMMAND, "openrlhf", "0.11.2")
    assert result.config["rollout"]["max_staleness"] == 3 and result.config["rollout"]["partial_rollouts"] is True
    assert result.config["placement"] == {"policy": "split", "args": {"rollout_gpus": 2}}
    assert result.config["resources"]["gpus_per_node"] == 4
    queue = entry(result, "train.async_queue_size")
    assert queue.kind == "mapped" and queue.detail == "rollout.max_staleness=3"
    assert not [e for e in result.entries if e.kind == "conflict"], result.report()
    backend, config, plan, view = openrlhf_view(result)
    for key, value in (
        ("train.async_enable", True),
        ("train.async_queue_size", 3),
        ("train.partial_rollout_enable", True),
        ("actor.num_gpus_per_node", 2),
        ("vllm.num_engines", 2),
    ):
        assert same(view[key], value), (key, view.get(key))
    # `rlbridge plan --explain`: where each async knob lands
    rows = {knob: where for knob, _value, where in backend.explain(config, plan)}
    assert rows["rollout.max_staleness"].startswith("train.async_enable=True, train.async_queue_size=3")
    assert rows["rollout.partial_rollouts"].startswith("train.partial_rollout_enable=True")
    assert rows["placement.args"].startswith("actor.num_gpus_per_node=2, vllm.num_engines=2")


def test_openrlhf_flat_async_train_is_named_with_why_it_does_not_plan():
    """Before 0.10.2 the flags were --async_train / --async_queue_size: read as the canonical knob's flags, and the
    import says by key why that version's plan refuses them (rlbridge has not read that release's async source)."""
    result = imported(
        "python3 -m openrlhf.cli.train_ppo_ray --pretrain /models/tiny --async_train --async_queue_size 2 "
        "--partial_rollout",
        "openrlhf",
        "0.9.10",
    )
    for key in ("async_train", "async_queue_size"):
        e = entry(result, key)
        assert e.kind == "conflict", (key, e)
        assert "rollout.max_staleness" in e.detail and "0.10.2" in e.detail, e.detail
    partial = entry(result, "partial_rollout")
    assert partial.kind == "conflict" and "rollout.partial_rollouts needs rollout.max_staleness >= 1" in partial.detail
    assert "max_staleness" not in result.config.get("rollout", {})


# ---- verl ----


def verl_round_trip(result):
    """Every async setting the import calls mapped/option is what verl's async translation of the config gives."""
    from rlbridge_adapters.verl import asynchrony

    native = asynchrony.translate(RunConfig.model_validate(dict(result.config, engine_version=result.recipe.version)))
    settings = {(s.spelling or s.key, s.line): s for s in result.recipe.settings}
    checked = 0
    for e in result.entries:
        s = settings.get((e.key, e.line))
        if e.key == asynchrony.ENTRY:
            assert native[asynchrony.ENTRY] == e.value
            checked += 1
        elif s is not None and (s.key.startswith("async_training.") or s.key in native):
            assert e.kind in ("mapped", "option"), (e.key, e.kind, e.detail)
            assert same(native[s.key], s.value), (s.key, native.get(s.key), s.value)
            checked += 1
    return native, checked


def test_verl_fully_async_script_imports_with_the_staleness_fraction_declared():
    result = imported(FULLY_ASYNC, "verl")
    rollout = result.config["rollout"]
    # staleness_threshold 0.1 is a fraction of samples: at most ceil(0.1) = 1 version old
    assert (rollout["max_staleness"], rollout["weight_sync_interval"], rollout["partial_rollouts"]) == (1, 4, True)
    assert result.config["placement"] == {"policy": "split", "args": {"rollout_gpus": 4}}
    assert result.config["resources"]["gpus_per_node"] == 8  # trainer 4 + rollout 4
    # a trainer step takes ppo_mini_batch_size 32 x require_batches 4 prompts; its data.train_batch_size is 0 (asserted)
    assert (result.config["training"]["batch_size"], result.config["training"]["mini_batch_size"]) == (128, 32 * 16)
    options = result.config["backend_options"]["verl"]
    assert options["async_training.staleness_threshold"] == 0.1 and options["rollout.total_rollout_steps"] == 51200
    assert "async_training.require_batches" not in options
    threshold = entry(result, "async_training.staleness_threshold")
    assert threshold.kind == "mapped" and threshold.detail.startswith("rollout.max_staleness=1 (approximated: ")
    assert "fraction of samples" in threshold.detail and "ceil(s)" in threshold.detail
    assert entry(result, "async_training.trigger_parameter_sync_step").detail == "rollout.weight_sync_interval=4"
    for key in (
        "async_training.require_batches",
        "data.train_batch_size",
        "actor_rollout_ref.actor.ppo_mini_batch_size",
    ):
        assert entry(result, key).kind == "mapped", key
    assert entry(result, "async_training.require_batches").detail.startswith("training.batch_size=128")
    assert entry(result, "rollout.total_rollout_steps").kind == "option"
    native, checked = verl_round_trip(result)
    assert native["entry_point"] == "verl.experimental.fully_async_policy.fully_async_main"
    assert native["trainer.n_gpus_per_node"] == 4 and native["rollout.n_gpus_per_node"] == 4
    assert (
        native["data.train_batch_size"],
        native["data.gen_batch_size"],
        native["async_training.require_batches"],
    ) == (0, 1, 4)
    assert checked >= 12
    # no async setting is silently dropped: each is in the report
    reported = {e.key for e in result.entries}
    assert {s.key for s in result.recipe.settings if s.key.startswith(("async_training.", "rollout."))} <= reported


def test_verl_one_step_off_script_imports_and_plans_the_same_trainer():
    result = imported(ONE_STEP_OFF, "verl")
    rollout = result.config["rollout"]
    assert rollout["max_staleness"] == 1 and "partial_rollouts" not in rollout and "weight_sync_interval" not in rollout
    assert result.config["placement"] == {"policy": "split", "args": {"rollout_gpus": 2}}
    assert result.config["resources"]["gpus_per_node"] == 8
    start = entry(result, "entry_point")
    assert start.kind == "mapped" and start.value == "verl.experimental.one_step_off_policy.main_ppo"
    assert entry(result, "actor_rollout_ref.hybrid_engine").kind == "mapped"
    native, checked = verl_round_trip(result)
    assert native["entry_point"] == start.value and checked == 5
    # the main_ppo settings round-trip as before, through the plan (searched with the trainer's 6 devices)
    assert entry(result, "actor_rollout_ref.actor.ppo_mini_batch_size").kind == "mapped"
    plan = get_plugin_manager().backend("verl").plan(config_of(result))
    assert plan.native["entry_point"] == start.value
    o = plan.native["overrides"]
    assert (o["actor_rollout_ref.hybrid_engine"], o["trainer.n_gpus_per_node"], o["rollout.n_gpus_per_node"]) == (
        False,
        6,
        2,
    )
    assert not any("refuses" in n for n in result.notes)


def test_verl_fully_async_import_plans_fully_async_main():
    result = imported(FULLY_ASYNC, "verl")
    assert not any("refuses" in n for n in result.notes), result.notes
    plan = get_plugin_manager().backend("verl").plan(config_of(result))
    assert plan.native["entry_point"] == "verl.experimental.fully_async_policy.fully_async_main"
    assert plan.native["overrides"]["rollout.total_rollout_steps"] == 51200  # the recipe's, kept


def test_verl_fully_async_import_without_partial_rollouts_says_its_run_is_refused():
    result = imported(VERL_COMMAND, "verl")
    assert any("refuses" in n and "partial_rollout False" in n for n in result.notes), result.notes
    with pytest.raises(RLBridgeError, match="trains them cut short"):
        get_plugin_manager().backend("verl").plan(config_of(result))


VERL_COMMAND = (
    "python -m verl.experimental.fully_async_policy.fully_async_main data.train_files=/data/train.parquet "
    "actor_rollout_ref.model.path=/models/tiny actor_rollout_ref.actor.ppo_mini_batch_size=8 actor_rollout_ref.rollout.n=4 "
    "actor_rollout_ref.hybrid_engine=False trainer.n_gpus_per_node=3 rollout.n_gpus_per_node=1 "
    "async_training.staleness_threshold=1.5 async_training.trigger_parameter_sync_step=2 "
    "async_training.partial_rollout=False async_training.require_batches=2"
)


def test_verl_fully_async_command_line_non_default_values():
    result = imported(VERL_COMMAND, "verl")
    rollout = result.config["rollout"]
    # 1.5 versions' worth of samples may be in the backlog at a sync: some are two versions old when trained
    assert (rollout["max_staleness"], rollout["weight_sync_interval"]) == (2, 2) and "partial_rollouts" not in rollout
    assert result.config["backend_options"]["verl"]["async_training.staleness_threshold"] == 1.5
    assert result.config["resources"]["gpus_per_node"] == 4
    assert (result.config["training"]["batch_size"], result.config["training"]["mini_batch_size"]) == (16, 32)
    assert not [e for e in result.entries if e.kind == "conflict"], result.report()
    native, checked = verl_round_trip(result)
    assert native["async_training.partial_rollout"] is False and native["async_training.require_batches"] == 2
    assert checked == 8


def test_verl_async_translation_refuses_a_fraction_that_breaks_the_bound():
    from rlbridge.errors import ConfigError
    from rlbridge_adapters.verl import asynchrony

    base = {
        "backend": "verl",
        "reward": [{"name": "digit_match"}],
        "resources": {"gpus_per_node": 4},
        "placement": {"policy": "split", "args": {"rollout_gpus": 1}},
    }
    one = RunConfig.model_validate({**base, "rollout": {"max_staleness": 1}})
    assert asynchrony.translate(one)["entry_point"] == asynchrony.ONE_STEP_OFF
    two = RunConfig.model_validate({**base, "rollout": {"max_staleness": 2}})
    assert asynchrony.translate(two)["async_training.staleness_threshold"] == 2.0  # the loosest fraction with bound 2
    wrong = RunConfig.model_validate(
        {
            **base,
            "rollout": {"max_staleness": 1},
            "backend_options": {"verl": {"async_training.staleness_threshold": 1.5}},
        }
    )
    with pytest.raises(ConfigError, match="bounds staleness at 2 version"):
        asynchrony.translate(wrong)
    assert [asynchrony.staleness_bound(s) for s in (0.1, 1.0, 1.01, 2.0)] == [1, 1, 2, 2]


def test_verl_on_policy_fully_async_is_a_conflict_by_key_not_a_silent_sync_run():
    """staleness_threshold 0 (fully_async_main kept on-policy, verl #6780) has no canonical value: every async key is
    a conflict saying why, and the written config is main_ppo's synchronous loop."""
    result = imported(
        "python -m verl.experimental.fully_async_policy.fully_async_main actor_rollout_ref.model.path=/models/tiny "
        "actor_rollout_ref.rollout.n=4 async_training.staleness_threshold=0 "
        "async_training.trigger_parameter_sync_step=1 async_training.partial_rollout=False",
        "verl",
    )
    for key in (
        "entry_point",
        "async_training.staleness_threshold",
        "async_training.trigger_parameter_sync_step",
        "async_training.partial_rollout",
    ):
        e = entry(result, key)
        assert e.kind == "conflict" and "need rollout.max_staleness >= 1" in e.detail, (key, e)
    assert "no canonical value" in entry(result, "async_training.staleness_threshold").detail
    assert "max_staleness" not in result.config.get("rollout", {}) and "placement" not in result.config
